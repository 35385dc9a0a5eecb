//! docs/grafana-lockd.json is a valid dashboard whose queries use only
//! metric names a server renders at /metrics.

mod lockd_server;

use std::collections::BTreeSet;

use crate::lockd_server::Server;
use serde_json::{json, Value};

/// Every `lockd_*` identifier in `text`.
fn metric_names(text: &str, out: &mut BTreeSet<String>) {
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("lockd_") {
        let start = i + at;
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        out.insert(text[start..end].to_string());
        i = end;
    }
}

/// Every query string of the dashboard: panel targets and variables.
fn queries(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("expr" | "definition", Value::String(s)) => out.push(s.clone()),
                    ("query", Value::String(s)) => out.push(s.clone()),
                    _ => queries(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| queries(v, out)),
        _ => {}
    }
}

#[test]
fn the_dashboard_uses_only_rendered_metrics() {
    let text = include_str!("../../../docs/grafana-lockd.json");
    let dashboard: Value = serde_json::from_str(text).expect("docs/grafana-lockd.json is JSON");
    assert!(dashboard["panels"].as_array().is_some_and(|p| p.len() >= 5));
    let mut exprs = Vec::new();
    queries(&dashboard, &mut exprs);
    let mut used = BTreeSet::new();
    for e in &exprs {
        metric_names(e, &mut used);
    }
    for family in [
        "lockd_wait_seconds",
        "lockd_hold_seconds",
        "lockd_queue_depth",
        "lockd_locks_held",
        "lockd_operations_total",
    ] {
        assert!(
            used.iter().any(|u| u.starts_with(family)),
            "the dashboard never uses {family}: {used:?}"
        );
    }

    // A server with a sample of each: a wait that ends in a grant, a hold
    // that ends in a release, a lock held while another waits.
    let server = Server::start(&[]);
    let lock = |owner: &str, wait: u64| {
        server.post_json(
            "/v1/locks/lock",
            &json!({"namespace": "team-a", "name": "a", "owner": owner, "ttl_ms": 60_000, "wait_ms": wait}),
        )
    };
    assert_eq!(lock("o1", 0).code, 200);
    let url = server.url.clone();
    let waiter = std::thread::spawn(move || {
        lockd_server::request(
            "POST",
            &url,
            "/v1/locks/lock",
            Some(
                r#"{"namespace":"team-a","name":"a","owner":"o2","ttl_ms":60000,"wait_ms":30000}"#,
            ),
            None,
        )
    });
    server.wait_for_waiters(1);
    let metrics_while_queued = server.get("/metrics").body;
    let r = server.post_json(
        "/v1/locks/unlock",
        &json!({"namespace": "team-a", "name": "a", "owner": "o1"}),
    );
    assert_eq!(r.code, 200);
    assert_eq!(waiter.join().unwrap().code, 200);
    let metrics = server.get("/metrics").body;
    let mut rendered = BTreeSet::new();
    for line in metrics.lines().chain(metrics_while_queued.lines()) {
        if let Some(name) = line
            .split(['{', ' '])
            .next()
            .filter(|n| n.starts_with("lockd_"))
        {
            rendered.insert(name.to_string());
        }
    }
    for name in &used {
        assert!(
            rendered.contains(name),
            "the dashboard uses {name}, which /metrics does not render: {rendered:?}"
        );
    }
    assert!(
        metrics_while_queued.contains("lockd_queue_depth{namespace=\"team-a\"} 1"),
        "{metrics_while_queued}"
    );
}
