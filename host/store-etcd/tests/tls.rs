//! The etcd store over TLS with an etcd user, beyond the lock contract
//! (`conformance_tls.rs`): auth tokens that expire while lockd serves, and
//! each way into etcd that is refused, which must fail the connect with a
//! message naming the endpoint and the cause, within the dial timeout.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use lockd_core::{Durability, Limits, LockOptions, LockService, SystemClock};
use lockd_etcd::{ClientCert, EtcdBackend, EtcdOptions, EtcdUser};
use lockd_test_support::certs::TestPki;
use lockd_test_support::etcd::SecureEtcd;

const PREFIX: &str = "/lockd";
const DIAL: Duration = Duration::from_secs(2);
/// What a refused connect may take beyond the dial timeout: the client's
/// own connect after the probes, and the permission check.
const MARGIN: Duration = Duration::from_secs(3);

/// User lockd's way into `etcd`, with short timeouts.
fn options(etcd: &SecureEtcd) -> EtcdOptions {
    let mut o = EtcdOptions::new(etcd.cluster.endpoints());
    o.prefix = PREFIX.into();
    o.ca_file = Some(etcd.pki.ca().to_path_buf());
    o.client_cert = Some(ClientCert {
        cert_file: etcd.client.cert.clone(),
        key_file: etcd.client.key.clone(),
    });
    o.user = Some(EtcdUser {
        name: etcd.user.clone(),
        password: etcd.password.clone(),
    });
    o.dial_timeout = DIAL;
    o.request_timeout = Duration::from_secs(2);
    o.lease_slack = Duration::from_secs(1);
    o.session_ttl = Duration::from_secs(3);
    o
}

/// The cluster the refusal cases share (default token TTL), with a second
/// user `nobody` whose only permission is on another prefix.
fn shared() -> &'static SecureEtcd {
    static CLUSTER: OnceLock<SecureEtcd> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let etcd = SecureEtcd::start(1, "/lockd/", None).expect("start a TLS etcd with auth");
        etcd.cluster
            .add_user("nobody", "nobody-password", "/elsewhere/")
            .expect("add user nobody");
        etcd.cluster
            .add_user_with("reader", "reader-password", "/lockd/", "READ")
            .expect("add user reader");
        etcd
    })
}

/// Connects with `options`, expecting a refusal within the dial timeout
/// plus a margin; its message.
async fn refusal(options: EtcdOptions) -> String {
    let started = Instant::now();
    let result = EtcdBackend::connect(options, Arc::new(SystemClock)).await;
    let took = started.elapsed();
    let message = match result {
        Ok(_) => panic!("the connect was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(took < DIAL + MARGIN, "took {took:?}: {message}");
    eprintln!("refused in {took:?}: {message}");
    message
}

fn assert_says(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(message.contains(part), "{part:?} not in: {message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_right_credentials_connect() {
    let etcd = shared();
    let backend = EtcdBackend::connect(options(etcd), Arc::new(SystemClock))
        .await
        .expect("connect as lockd");
    let service = LockService::new(Arc::new(backend), Limits::default());
    let g = service
        .lock("ns", "k", "me", 5_000, LockOptions::default())
        .await
        .unwrap();
    service
        .unlock("ns", "k", "me", Some(g.fencing_token))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_from_another_ca_is_not_trusted() {
    let etcd = shared();
    let other = tempfile::tempdir().unwrap();
    let other_ca = TestPki::new(other.path());
    let mut o = options(etcd);
    o.ca_file = Some(other_ca.ca().to_path_buf());
    let m = refusal(o).await;
    assert_says(
        &m,
        &[
            &etcd.cluster.endpoint(0),
            "certificate not trusted (is [etcd] ca_file the CA that signed the server's certificate?)",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_for_another_host_is_named() {
    let etcd = SecureEtcd::start_with_hosts(1, "/lockd/", None, Some(&["etcd.example"]))
        .expect("start a TLS etcd");
    let m = refusal(options(&etcd)).await;
    assert_says(
        &m,
        &[
            &etcd.cluster.endpoint(0),
            "the server's certificate is not valid for 127.0.0.1",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_client_certificate_is_named() {
    let etcd = shared();
    let mut o = options(etcd);
    o.client_cert = None;
    let m = refusal(o).await;
    assert_says(
        &m,
        &[
            &etcd.cluster.endpoint(0),
            "the server requires a client certificate",
            "set [etcd] cert_file and key_file",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_from_another_ca_is_refused() {
    let etcd = shared();
    let other = tempfile::tempdir().unwrap();
    let stranger = TestPki::new(other.path()).client("lockd");
    let mut o = options(etcd);
    o.client_cert = Some(ClientCert {
        cert_file: stranger.cert,
        key_file: stranger.key,
    });
    let m = refusal(o).await;
    assert_says(
        &m,
        &[&etcd.cluster.endpoint(0), "refused the client certificate"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_fails_authentication() {
    let etcd = shared();
    let mut o = options(etcd);
    o.user = Some(EtcdUser {
        name: "lockd".into(),
        password: "not-the-password".into(),
    });
    let m = refusal(o).await;
    assert_says(
        &m,
        &[
            &etcd.cluster.endpoint(0),
            "authentication failed for user lockd",
        ],
    );
    assert!(!m.contains("not-the-password"), "{m}");
}

/// Reading is not enough: lockd writes and deletes under its prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_who_may_only_read_the_prefix_is_refused() {
    let etcd = shared();
    let mut o = options(etcd);
    o.user = Some(EtcdUser {
        name: "reader".into(),
        password: "reader-password".into(),
    });
    let m = refusal(o).await;
    assert_says(
        &m,
        &[
            &etcd.cluster.endpoint(0),
            "user reader has no permission on prefix /lockd",
        ],
    );
}

/// Members with `--client-cert-auth` take a client certificate's common
/// name as the user when no token comes with a request: lockd's
/// certificate alone gets it in, and a certificate naming a user with no
/// permission on the prefix is refused, saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_user_the_certificates_common_name_is_the_user() {
    let etcd = shared();
    let mut o = options(etcd);
    o.user = None;
    EtcdBackend::connect(o.clone(), Arc::new(SystemClock))
        .await
        .expect("the certificate of user lockd gets in");

    let intruder = etcd.pki.client("intruder");
    o.client_cert = Some(ClientCert {
        cert_file: intruder.cert.clone(),
        key_file: intruder.key,
    });
    let m = refusal(o).await;
    assert_says(
        &m,
        &[
            &etcd.cluster.endpoint(0),
            "client certificate",
            &intruder.cert.display().to_string(),
            "has no permission on prefix /lockd",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_permission_on_the_prefix_is_refused() {
    let etcd = shared();
    let mut o = options(etcd);
    o.user = Some(EtcdUser {
        name: "nobody".into(),
        password: "nobody-password".into(),
    });
    let m = refusal(o).await;
    assert_says(
        &m,
        &[
            &etcd.cluster.endpoint(0),
            "user nobody has no permission on prefix /lockd",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_to_a_tls_member_says_to_use_https() {
    let etcd = shared();
    let mut o = options(etcd);
    o.endpoints = vec![etcd.cluster.endpoint(0).replace("https://", "http://")];
    o.ca_file = None;
    o.client_cert = None;
    let m = refusal(o).await;
    assert_says(
        &m,
        &[
            &etcd.cluster.endpoint(0).replace("https://", "http://"),
            "use an https:// endpoint",
        ],
    );
}

fn ephemeral(wait_ms: u64) -> LockOptions {
    LockOptions {
        wait_ms,
        durability: Durability::Ephemeral,
        ..LockOptions::default()
    }
}

/// etcd's simple auth tokens expire `--auth-token-ttl` after their last
/// use. With a 5 s TTL and pauses longer than it between calls, every
/// call after a pause finds lockd's token expired: the client must get a
/// new one and resend, the waiter's watch and the session keep-alive must
/// go on, and nothing may answer `unavailable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockd_keeps_serving_past_several_token_lifetimes() {
    let etcd = SecureEtcd::start(1, "/lockd/", Some(5)).expect("start a TLS etcd, 5 s tokens");
    let mut o = options(&etcd);
    o.session_ttl = Duration::from_secs(30);
    let backend = EtcdBackend::connect(o.clone(), Arc::new(SystemClock))
        .await
        .unwrap();
    let service = Arc::new(LockService::new(Arc::new(backend), Limits::default()));
    let other = EtcdBackend::connect(o, Arc::new(SystemClock))
        .await
        .unwrap();
    let other = Arc::new(LockService::new(Arc::new(other), Limits::default()));
    let pause = Duration::from_secs(6);
    let started = Instant::now();

    // A lease kept alive across the whole run, a lock in it.
    let lease = service
        .grant_lease("ns", 15_000, Durability::Persistent)
        .await
        .unwrap()
        .id;
    service
        .lock_in_lease("ns", "leased", &lease, 0)
        .await
        .unwrap();

    let mut rounds = 0;
    while started.elapsed() < Duration::from_secs(21) {
        tokio::time::sleep(pause).await;
        rounds += 1;
        // Refreshed after a pause longer than a token's life.
        service.refresh_lease("ns", &lease).await.unwrap();
        let g = service
            .lock("ns", "k", "a", 10_000, ephemeral(0))
            .await
            .unwrap();
        let extended = service.extend("ns", "k", "a", 10_000).await.unwrap();
        assert_eq!(extended.fencing_token, g.fencing_token);
        // A waiter on the other host, whose watch outlives a token.
        let waiter = {
            let other = other.clone();
            tokio::spawn(async move { other.lock("ns", "k", "b", 10_000, ephemeral(20_000)).await })
        };
        tokio::time::sleep(pause).await;
        service
            .unlock("ns", "k", "a", Some(g.fencing_token))
            .await
            .unwrap();
        let granted = waiter.await.unwrap().unwrap();
        assert!(granted.fencing_token > g.fencing_token);
        other
            .unlock("ns", "k", "b", Some(granted.fencing_token))
            .await
            .unwrap();
    }
    assert!(rounds >= 2, "{rounds} rounds");
    assert!(service.get_lease("ns", &lease).await.unwrap().is_some());
    service.revoke_lease("ns", &lease).await.unwrap();
}

/// A restarted member has forgotten every auth token (etcd keeps simple
/// tokens in memory). The events watch, opened again on the restarted
/// member with the forgotten token, is cancelled rather than refused; the
/// backend must get a new token by itself, without a request of its own to
/// trigger the client's refresh, and report changes made through another
/// host again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_resume_after_a_restart_forgets_every_token() {
    use lockd_core::{EventKind, LockBackend as _};
    let mut etcd = SecureEtcd::start(1, "/lockd/", None).expect("start a TLS etcd with auth");
    // A session keep-alive comes every 10 s: none within the test to get
    // a new token for the watcher.
    let mut quiet = options(&etcd);
    quiet.session_ttl = Duration::from_secs(30);
    let watcher = EtcdBackend::connect(quiet, Arc::new(SystemClock))
        .await
        .unwrap();
    let mut events = watcher.events().expect("the etcd store has events");
    tokio::task::block_in_place(|| etcd.cluster.restart_member(0)).expect("restart etcd");
    let writer = EtcdBackend::connect(options(&etcd), Arc::new(SystemClock))
        .await
        .unwrap();
    let writer = LockService::new(Arc::new(writer), Limits::default());
    writer
        .lock("ns", "after-restart", "w", 30_000, LockOptions::default())
        .await
        .unwrap();
    // The watcher learns of the restart from a failed watch, then must
    // authenticate again before it resumes: on a loaded 2-core machine that
    // took more than 10 s once, so the bound is generous (it only bounds a
    // liveness property).
    let seen = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match events.recv().await {
                Ok(e) if &*e.name == "after-restart" && e.kind == EventKind::Acquired => return,
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(e) => panic!("events ended: {e}"),
            }
        }
    })
    .await;
    assert!(seen.is_ok(), "no event from the other host within 30 s");
}

/// The endpoint rotation probes members with `GET /health` over TLS, with
/// lockd's client certificate, on a cluster with auth on: a dead member
/// leaves the rotation, the live ones stay, and the member is put back once
/// it answers healthy again (after a restart that forgot every token).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rotation_probes_members_over_tls() {
    let mut etcd = SecureEtcd::start(3, "/lockd/", None).expect("start 3 TLS members with auth");
    let backend = Arc::new(
        EtcdBackend::connect(options(&etcd), Arc::new(SystemClock))
            .await
            .unwrap(),
    );
    let s = LockService::new(backend.clone(), Limits::default());
    assert_eq!(backend.endpoints_in_use(), etcd.cluster.endpoints());
    let leader = etcd
        .cluster
        .wait_for_leader(Duration::from_secs(5))
        .unwrap();
    let dead = (leader + 1) % 3;
    tokio::task::block_in_place(|| etcd.cluster.kill_member(dead));

    let until = Instant::now() + Duration::from_secs(10);
    let mut calls = 0;
    while backend
        .endpoints_in_use()
        .contains(&etcd.cluster.endpoint(dead))
    {
        assert!(
            Instant::now() < until,
            "still in rotation after {calls} calls"
        );
        s.get("ns", &format!("probe-{calls}")).await.unwrap();
        calls += 1;
    }
    assert_eq!(backend.endpoints_in_use().len(), 2);

    tokio::task::block_in_place(|| etcd.cluster.restart_member(dead)).unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while backend.endpoints_in_use().len() < 3 {
        assert!(Instant::now() < until, "never put back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let g = s
        .lock("ns", "after", "o", 10_000, LockOptions::default())
        .await
        .unwrap();
    s.unlock("ns", "after", "o", Some(g.fencing_token))
        .await
        .unwrap();
}

/// Plain-HTTP members: auth on and no user given, or a user given and auth
/// off, each refused saying which setting to change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_missing_or_unexpected_is_named() {
    use lockd_test_support::etcd::EtcdCluster;
    let plain = |cluster: &EtcdCluster| {
        let mut o = EtcdOptions::new(cluster.endpoints());
        o.dial_timeout = DIAL;
        o.request_timeout = Duration::from_secs(2);
        o
    };
    let mut cluster = EtcdCluster::start().expect("start etcd");
    let mut with_user = plain(&cluster);
    with_user.user = Some(EtcdUser {
        name: "lockd".into(),
        password: "pw".into(),
    });
    let m = refusal(with_user).await;
    assert_says(
        &m,
        &[
            &cluster.endpoint(0),
            "user lockd is set, but etcd has authentication disabled",
        ],
    );

    tokio::task::block_in_place(|| cluster.enable_auth("root-pw")).expect("auth enable");
    let m = refusal(plain(&cluster)).await;
    assert_says(
        &m,
        &[
            &cluster.endpoint(0),
            "etcd has authentication enabled: set [etcd] user and password_file",
        ],
    );
}
