//! `lockd serve --store etcd:https://...` against etcd run as its security
//! guide asks (TLS only, client certificates required, auth on, user
//! `lockd` allowed one prefix): the CLI locks through it, and a serve whose
//! way into etcd is refused does not start, saying why on stderr within the
//! dial timeout.

mod lockd_server;

use std::path::Path;
use std::time::{Duration, Instant};

use crate::lockd_server::{lockd, lockd_in_dir, Server};
use lockd_test_support::etcd::SecureEtcd;

/// `[etcd]` of lockd.toml for `etcd`, its password from `password_file`
/// if given (else from the environment).
fn lockd_toml(etcd: &SecureEtcd, password_file: Option<&Path>) -> String {
    let mut text = format!(
        "[etcd]\ndial_timeout_ms = 2000\nrequest_timeout_ms = 2000\n\
         ca_file = {:?}\ncert_file = {:?}\nkey_file = {:?}\nuser = {:?}\n",
        etcd.pki.ca().display().to_string(),
        etcd.client.cert.display().to_string(),
        etcd.client.key.display().to_string(),
        etcd.user,
    );
    if let Some(file) = password_file {
        text.push_str(&format!(
            "password_file = {:?}\n",
            file.display().to_string()
        ));
    }
    text
}

fn store(etcd: &SecureEtcd) -> String {
    format!("etcd:{}", etcd.cluster.endpoints().join(","))
}

#[test]
fn the_cli_locks_through_serve_on_etcd_over_tls() {
    let etcd = SecureEtcd::start(1, "/lockd/", None).expect("start a TLS etcd with auth");
    let dir = tempfile::tempdir().unwrap();
    let password = dir.path().join("etcd.pw");
    std::fs::write(&password, format!("{}\n", etcd.password)).unwrap();
    std::fs::write(
        dir.path().join("lockd.toml"),
        lockd_toml(&etcd, Some(&password)),
    )
    .unwrap();
    let server = Server::start_in(Some(dir.path()), &["--store", &store(&etcd)], &[]);
    server.assert_healthy();
    let cli = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--server", &server.url]);
        lockd(&all, &[])
    };

    let run = cli(&["lock", "job/1", "--owner", "w1", "--ttl", "30s"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    let words: Vec<&str> = run.stdout.split_whitespace().collect();
    assert_eq!(&words[..3], ["acquired", "job/1", "token"], "{run:?}");
    let token = words[3];

    let run = cli(&["get", "job/1"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(
        run.stdout
            .starts_with(&format!("job/1 held by w1 token {token} ")),
        "{run:?}"
    );

    let run = cli(&["unlock", "job/1", "--owner", "w1", "--token", token]);
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (Some(0), "unlocked job/1\n"),
        "{run:?}"
    );
    let run = cli(&["get", "job/1"]);
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (Some(1), "job/1 is free\n"),
        "{run:?}"
    );
}

#[test]
fn serve_refuses_to_start_when_etcd_refuses_it() {
    let etcd = SecureEtcd::start(1, "/lockd/", None).expect("start a TLS etcd with auth");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("lockd.toml"), lockd_toml(&etcd, None)).unwrap();
    let serve = |env: &[(&str, &str)]| {
        let started = Instant::now();
        let run = lockd_in_dir(
            Some(dir.path()),
            &["serve", "--listen", "127.0.0.1:0", "--store", &store(&etcd)],
            env,
        );
        let took = started.elapsed();
        // Dial timeout 2 s, plus the client's connect and the process.
        assert!(took < Duration::from_secs(6), "took {took:?}: {run:?}");
        assert_ne!(run.code, Some(0), "{run:?}");
        assert!(!run.stdout.contains("listening"), "{run:?}");
        run
    };

    let run = serve(&[("LOCKD_ETCD_PASSWORD", "not-the-password")]);
    assert!(
        run.stderr.contains(&etcd.cluster.endpoint(0))
            && run.stderr.contains("authentication failed for user lockd"),
        "{run:?}"
    );
    assert!(!run.stderr.contains("not-the-password"), "{run:?}");

    // No password at all: said before etcd is asked.
    let run = serve(&[]);
    assert!(
        run.stderr.contains("needs a password") && run.stderr.contains("LOCKD_ETCD_PASSWORD"),
        "{run:?}"
    );

    // An untrusted server certificate.
    let other = tempfile::tempdir().unwrap();
    let other_ca = lockd_test_support::certs::TestPki::new(other.path());
    let toml = lockd_toml(&etcd, None).replace(
        &format!("{:?}", etcd.pki.ca().display().to_string()),
        &format!("{:?}", other_ca.ca().display().to_string()),
    );
    std::fs::write(dir.path().join("lockd.toml"), toml).unwrap();
    let run = serve(&[("LOCKD_ETCD_PASSWORD", &etcd.password)]);
    assert!(
        run.stderr.contains(&format!(
            "etcd {}: certificate not trusted (is [etcd] ca_file the CA that signed the \
             server's certificate?)",
            etcd.cluster.endpoint(0)
        )),
        "{run:?}"
    );

    // The right password, a prefix the user may not touch, and every log
    // line on: refused naming the prefix, and the password in no line.
    let toml = format!("{}prefix = \"/other\"\n", lockd_toml(&etcd, None));
    std::fs::write(dir.path().join("lockd.toml"), toml).unwrap();
    let run = serve(&[
        ("LOCKD_ETCD_PASSWORD", &etcd.password),
        ("RUST_LOG", "trace"),
    ]);
    assert!(
        run.stderr.contains(&etcd.cluster.endpoint(0))
            && run
                .stderr
                .contains("user lockd has no permission on prefix /other"),
        "{run:?}"
    );
    assert!(!run.stderr.contains(&etcd.password), "{run:?}");

    // A password written into lockd.toml is refused, and not shown.
    let toml = format!("{}password = \"in-the-file\"\n", lockd_toml(&etcd, None));
    std::fs::write(dir.path().join("lockd.toml"), toml).unwrap();
    let run = serve(&[]);
    assert!(
        run.stderr.contains("[etcd] password is not allowed")
            && run.stderr.contains("password_file"),
        "{run:?}"
    );
    assert!(!run.stderr.contains("in-the-file"), "{run:?}");
}

/// A permission revoked while lockd serves: calls answer `unavailable`
/// naming it, `/healthz` answers 503 saying the same, and both recover once
/// the permission is granted again.
#[test]
fn healthz_reports_a_permission_revoked_while_serving() {
    let etcd = SecureEtcd::start(1, "/lockd/", None).expect("start a TLS etcd with auth");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("lockd.toml"), lockd_toml(&etcd, None)).unwrap();
    let server = Server::start_in(
        Some(dir.path()),
        &["--store", &store(&etcd)],
        &[("LOCKD_ETCD_PASSWORD", &etcd.password)],
    );
    server.assert_healthy();
    let lock = |name: &str| {
        server.post_json(
            "/v1/locks/lock",
            &serde_json::json!({"name": name, "owner": "o", "ttl_ms": 10_000}),
        )
    };
    assert_eq!(lock("before").code, 200);

    etcd.cluster.revoke_permission("lockd", "/lockd/").unwrap();
    let refused = lock("during");
    assert_eq!(
        (refused.code, refused.status()),
        (503, "unavailable"),
        "{refused:?}"
    );
    assert!(
        refused
            .message()
            .contains("user lockd has no permission on prefix /lockd"),
        "{refused:?}"
    );
    let health = server.get("/healthz");
    assert_eq!(
        (health.code, health.status()),
        (503, "unavailable"),
        "{health:?}"
    );
    assert!(
        health
            .message()
            .contains("user lockd has no permission on prefix /lockd"),
        "{health:?}"
    );

    etcd.cluster.grant_permission("lockd", "/lockd/").unwrap();
    server.assert_healthy();
    assert_eq!(lock("after").code, 200);
}
