//! `/readyz` on an etcd store, against a real etcd member: not ready while
//! etcd is unreachable, ready again once it is back, not ready while
//! etcd's NOSPACE alarm is raised; `/metrics` says why
//! (`lockd_not_ready{reason}`), and `/healthz` answers 200 throughout, as
//! it did before readiness existed (neither is a reason to restart lockd).

mod lockd_server;

use std::time::{Duration, Instant};

use lockd_test_support::etcd::EtcdCluster;

use crate::lockd_server::{metric_value, request, Reply, Server};

/// The quota the member runs with: small, so a few writes fill it.
const QUOTA: &str = "--quota-backend-bytes=16777216";

fn get(server: &Server, path: &str) -> Reply {
    request("GET", &server.url, path, None, None)
}

/// Polls `/readyz` until `done` holds of it, up to `limit`.
fn readyz_until(server: &Server, limit: Duration, done: impl Fn(&Reply) -> bool) -> Reply {
    let deadline = Instant::now() + limit;
    loop {
        let r = get(server, "/readyz");
        if done(&r) {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz stayed {}: {}",
            r.code,
            r.body
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn first_reason(r: &Reply) -> &str {
    r.json["reasons"][0].as_str().unwrap_or_default()
}

fn assert_healthy_as_before(server: &Server) {
    let health = get(server, "/healthz");
    assert_eq!(
        (health.code, health.status()),
        (200, "ok"),
        "{}",
        health.body
    );
}

/// Writes 1 MiB values through etcd's JSON gateway until etcd refuses
/// for lack of space.
fn fill(endpoint: &str) {
    // Base64 of zero bytes: "A" four at a time.
    let value = "A".repeat(4 * (1 << 20) / 3 / 4 * 4);
    for i in 0..64 {
        let key = format!("a{i:03}");
        let body = format!(r#"{{"key":"{key}","value":"{value}"}}"#);
        let r = request("POST", endpoint, "/v3/kv/put", Some(&body), None);
        if r.body.contains("database space exceeded") {
            return;
        }
        assert_eq!(r.code, 200, "{}", r.body);
    }
    panic!("etcd never ran out of space");
}

#[test]
fn readyz_follows_etcd_and_healthz_stays_as_it_was() {
    let mut etcd = EtcdCluster::start_with_flags(1, &[QUOTA]).expect("etcd did not start");
    let store = format!("etcd:{}", etcd.endpoint(0));
    // etcd 3.4 does not say its quota: lockd.toml does.
    let dir = tempfile::tempdir().unwrap();
    let config = "[etcd]\nquota_backend_bytes = 16777216\ncompaction_interval_ms = 0\n";
    std::fs::write(dir.path().join("lockd.toml"), config).unwrap();
    let server = Server::start_in(Some(dir.path()), &["--store", &store], &[]);
    let ready = get(&server, "/readyz");
    assert_eq!((ready.code, ready.status()), (200, "ok"), "{}", ready.body);
    assert_eq!(server.metric("lockd_ready"), 1);
    // etcd's space figures are in /metrics, with lockd.toml's quota, and
    // no compaction (compaction_interval_ms = 0).
    assert_eq!(server.metric("lockd_store_quota_bytes"), 16 << 20);
    assert_eq!(server.metric("lockd_store_compactions_total"), 0);

    etcd.kill_member(0);
    let down = readyz_until(&server, Duration::from_secs(10), |r| r.code == 503);
    assert_eq!(down.status(), "unavailable", "{}", down.body);
    assert!(
        first_reason(&down).starts_with("store unreachable"),
        "{}",
        down.body
    );
    assert!(down.message().starts_with("not ready: "), "{}", down.body);
    let metrics = get(&server, "/metrics").body;
    assert_eq!(metric_value(&metrics, "lockd_ready"), 0);
    let unreachable = "lockd_not_ready{reason=\"store_unreachable\"}";
    assert_eq!(metric_value(&metrics, unreachable), 1);
    assert_healthy_as_before(&server);

    etcd.restart_member(0).expect("etcd restarts");
    readyz_until(&server, Duration::from_secs(30), |r| r.code == 200);

    fill(&etcd.endpoint(0));
    let full = readyz_until(&server, Duration::from_secs(10), |r| r.code == 503);
    assert!(
        first_reason(&full).starts_with("store out of space"),
        "{}",
        full.body
    );
    let metrics = get(&server, "/metrics").body;
    let out_of_space = "lockd_not_ready{reason=\"store_out_of_space\"}";
    assert_eq!(metric_value(&metrics, out_of_space), 1);
    assert_eq!(metric_value(&metrics, "lockd_store_out_of_space"), 1);
    assert_healthy_as_before(&server);
}
