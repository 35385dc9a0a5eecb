//! The REST API (docs/reference.md) of a real `lockd serve` process: every
//! endpoint and status word with its HTTP code, waiting in the FIFO queue,
//! bad input, auth, metrics, namespaces, and agreement with
//! `docs/openapi.json`.

mod lockd_server;

use std::collections::BTreeSet;
use std::io::Write as _;
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::lockd_server::{raw_request, request, stream_head, Reply, Server};
use serde_json::{json, Value};

const LOCK: &str = "/v1/locks/lock";
const UNLOCK: &str = "/v1/locks/unlock";
const EXTEND: &str = "/v1/locks/extend";
const GET: &str = "/v1/locks/get";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn lock(server: &Server, name: &str, owner: &str, extra: Value) -> Reply {
    let mut body = json!({"name": name, "owner": owner, "ttl_ms": 30_000});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    server.post_json(LOCK, &body)
}

fn assert_reply(r: &Reply, code: u16, status: &str) {
    assert_eq!((r.code, r.status()), (code, status), "{}", r.body);
    assert_eq!(
        r.header("content-type"),
        Some("application/json"),
        "{}",
        r.body
    );
}

#[test]
fn every_endpoint_and_status_word() {
    let server = Server::start(&[]);
    let before = now_ms();

    let a = lock(&server, "job/1", "w1", json!({}));
    assert_reply(&a, 200, "acquired");
    let token = a.json["fencing_token"].as_u64().unwrap();
    let expires = a.json["expires_at_ms"].as_u64().unwrap();
    assert!(
        expires >= before + 30_000 && expires <= now_ms() + 30_000,
        "{}",
        a.body
    );
    assert_eq!(a.json.as_object().unwrap().len(), 3, "{}", a.body);

    // Idempotent re-lock: same token.
    let again = lock(&server, "job/1", "w1", json!({"ttl_ms": 40_000}));
    assert_reply(&again, 200, "acquired");
    assert_eq!(again.json["fencing_token"].as_u64(), Some(token));

    // Busy carries the holder.
    let busy = lock(&server, "job/1", "w2", json!({}));
    assert_reply(&busy, 409, "busy");
    assert_eq!(busy.json["owner"], "w1");
    assert_eq!(busy.json["fencing_token"].as_u64(), Some(token));
    assert!(busy.json["expires_at_ms"].as_u64().unwrap() >= expires);
    assert_eq!(busy.json["durability"], "persistent");
    assert!(!busy.message().is_empty());

    let found = server.post_json(GET, &json!({"name": "job/1"}));
    assert_reply(&found, 200, "found");
    assert_eq!(found.json["owner"], "w1");
    assert_eq!(found.json["fencing_token"].as_u64(), Some(token));
    assert_eq!(found.json["durability"], "persistent");

    let free = server.post_json(GET, &json!({"name": "job/2"}));
    assert_reply(&free, 404, "not_found");

    let extended = server.post_json(
        EXTEND,
        &json!({"name": "job/1", "owner": "w1", "ttl_ms": 60_000}),
    );
    assert_reply(&extended, 200, "extended");
    assert_eq!(extended.json["fencing_token"].as_u64(), Some(token));
    assert!(extended.json["expires_at_ms"].as_u64().unwrap() >= before + 60_000);

    let not_owner = server.post_json(
        EXTEND,
        &json!({"name": "job/1", "owner": "w2", "ttl_ms": 1000}),
    );
    assert_reply(&not_owner, 409, "not_owner");
    assert!(!not_owner.message().is_empty());
    let not_owner = server.post_json(UNLOCK, &json!({"name": "job/1", "owner": "w2"}));
    assert_reply(&not_owner, 409, "not_owner");
    let stale = server.post_json(
        UNLOCK,
        &json!({"name": "job/1", "owner": "w1", "fencing_token": token - 1}),
    );
    assert_reply(&stale, 409, "not_owner");

    let listed = server.get("/v1/locks");
    assert_reply(&listed, 200, "found");
    assert_eq!(listed.json["locks"].as_array().unwrap().len(), 1);
    let acquired_at = listed.json["locks"][0]["acquired_at_ms"].clone();
    assert!(
        acquired_at.as_u64().unwrap() <= extended.json["expires_at_ms"].as_u64().unwrap(),
        "{acquired_at}"
    );
    assert_eq!(
        listed.json["locks"][0],
        json!({
            "name": "job/1",
            "owner": "w1",
            "fencing_token": token,
            "expires_at_ms": extended.json["expires_at_ms"],
            "durability": "persistent",
            "acquired_at_ms": acquired_at,
            "mode": "exclusive",
            "waiters": 0,
        })
    );

    let unlocked = server.post_json(
        UNLOCK,
        &json!({"name": "job/1", "owner": "w1", "fencing_token": token}),
    );
    assert_reply(&unlocked, 200, "unlocked");
    assert_eq!(unlocked.json, json!({"status": "unlocked"}));

    let not_held = server.post_json(UNLOCK, &json!({"name": "job/1", "owner": "w1"}));
    assert_reply(&not_held, 409, "not_held");
    assert!(!not_held.message().is_empty());
    let not_held = server.post_json(
        EXTEND,
        &json!({"name": "job/1", "owner": "w1", "ttl_ms": 1000}),
    );
    assert_reply(&not_held, 409, "not_held");

    let invalid = lock(&server, "job/1", "w1", json!({"ttl_ms": 0}));
    assert_reply(&invalid, 400, "invalid_argument");
    assert!(invalid.message().contains("ttl"), "{}", invalid.body);

    // A fresh grant gets a higher token.
    let next = lock(&server, "job/1", "w2", json!({"durability": "ephemeral"}));
    assert_reply(&next, 200, "acquired");
    assert!(next.json["fencing_token"].as_u64().unwrap() > token);
    let found = server.post_json(GET, &json!({"namespace": "default", "name": "job/1"}));
    assert_eq!(found.json["durability"], "ephemeral");

    let health = server.get("/healthz");
    assert_eq!(health.json, json!({"status": "ok"}));
}

#[test]
fn denied_over_a_namespace_quota() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("lockd.toml"),
        "[namespaces]\ndefault_quota = 1\n",
    )
    .unwrap();
    let server = Server::start_in(Some(dir.path()), &["--store", "memory"], &[]);
    assert_reply(&lock(&server, "a", "o", json!({})), 200, "acquired");
    let denied = lock(&server, "b", "o", json!({}));
    assert_reply(&denied, 403, "denied");
    assert!(denied.message().contains("quota"), "{}", denied.body);
    // Another namespace has its own quota.
    assert_reply(
        &lock(&server, "b", "o", json!({"namespace": "other"})),
        200,
        "acquired",
    );
}

#[test]
fn list_filters_by_namespace_and_prefix() {
    let server = Server::start(&[]);
    for name in ["job/1", "job/2", "other", "job x/é"] {
        assert_reply(&lock(&server, name, "o", json!({})), 200, "acquired");
    }
    assert_reply(
        &lock(&server, "job/9", "o", json!({"namespace": "a b"})),
        200,
        "acquired",
    );
    let names = |r: &Reply| -> Vec<String> {
        assert_reply(r, 200, "found");
        r.json["locks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        names(&server.get("/v1/locks")),
        // Byte order: ' ' sorts before '/'.
        ["job x/é", "job/1", "job/2", "other"]
    );
    assert_eq!(
        names(&server.get("/v1/locks?prefix=job%2F")),
        ["job/1", "job/2"]
    );
    assert_eq!(names(&server.get("/v1/locks?prefix=job+x")), ["job x/é"]);
    assert_eq!(
        names(&server.get("/v1/locks?prefix=job%20x%2F%C3%A9")),
        ["job x/é"]
    );
    assert_eq!(
        names(&server.get("/v1/locks?namespace=a%20b&prefix=")),
        ["job/9"]
    );
    assert_eq!(
        names(&server.get("/v1/locks?namespace=nobody")),
        Vec::<String>::new()
    );

    for bad in [
        "/v1/locks?space=x",
        "/v1/locks?prefix=a&prefix=b",
        "/v1/locks?prefix=%zz",
        "/v1/locks?prefix=%ff",
    ] {
        let r = server.get(bad);
        assert_reply(&r, 400, "invalid_argument");
        assert!(!r.message().is_empty());
    }
    let long = format!("/v1/locks?namespace={}", "n".repeat(129));
    let r = server.get(&long);
    assert_reply(&r, 400, "invalid_argument");
    assert!(r.message().contains("128"), "{}", r.body);
}

#[test]
fn namespaces_are_isolated() {
    let server = Server::start(&[]);
    let a = lock(&server, "shared", "alice", json!({"namespace": "a"}));
    assert_reply(&a, 200, "acquired");
    // The same name in another namespace (and in the default one) is free.
    let b = lock(&server, "shared", "bob", json!({"namespace": "b"}));
    assert_reply(&b, 200, "acquired");
    assert_reply(
        &server.post_json(GET, &json!({"name": "shared"})),
        404,
        "not_found",
    );
    let in_a = server.post_json(GET, &json!({"namespace": "a", "name": "shared"}));
    assert_eq!(in_a.json["owner"], "alice");
    let in_b = server.post_json(GET, &json!({"namespace": "b", "name": "shared"}));
    assert_eq!(in_b.json["owner"], "bob");
    // bob cannot release alice's lock from his namespace or hers.
    assert_reply(
        &server.post_json(
            UNLOCK,
            &json!({"namespace": "a", "name": "shared", "owner": "bob"}),
        ),
        409,
        "not_owner",
    );
    assert_reply(
        &server.post_json(
            UNLOCK,
            &json!({"namespace": "b", "name": "shared", "owner": "bob"}),
        ),
        200,
        "unlocked",
    );
    let in_a = server.post_json(GET, &json!({"namespace": "a", "name": "shared"}));
    assert_eq!(in_a.json["owner"], "alice");
    let listed = server.get("/v1/locks?namespace=a");
    assert_eq!(listed.json["locks"].as_array().unwrap().len(), 1);
    assert_eq!(server.get("/v1/locks?namespace=b").json["locks"], json!([]));
}

#[test]
fn waiters_are_served_in_fifo_order() {
    let server = Server::start(&[]);
    let holder = lock(&server, "q", "holder", json!({"ttl_ms": 60_000}));
    assert_reply(&holder, 200, "acquired");

    let (tx, rx) = mpsc::channel();
    let mut threads = Vec::new();
    for (i, owner) in ["w1", "w2", "w3"].into_iter().enumerate() {
        let url = server.url.clone();
        let tx = tx.clone();
        threads.push(std::thread::spawn(move || {
            let body = json!({"name": "q", "owner": owner, "ttl_ms": 60_000, "wait_ms": 30_000});
            let r = request("POST", &url, LOCK, Some(&body.to_string()), None);
            tx.send((owner, r)).unwrap();
        }));
        // Queue them one after another, so the order is known.
        server.wait_for_waiters(i as u64 + 1);
    }

    let mut previous = ("holder", holder.json["fencing_token"].as_u64().unwrap());
    for expected in ["w1", "w2", "w3"] {
        // Nobody is granted the lock while it is held.
        assert!(rx.try_recv().is_err());
        let r = server.post_json(UNLOCK, &json!({"name": "q", "owner": previous.0}));
        assert_reply(&r, 200, "unlocked");
        let (owner, r) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(owner, expected, "waiters served out of order");
        assert_reply(&r, 200, "acquired");
        let token = r.json["fencing_token"].as_u64().unwrap();
        assert!(token > previous.1);
        assert_eq!(
            server.post_json(GET, &json!({"name": "q"})).json["owner"],
            expected
        );
        previous = (expected, token);
    }
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(server.metric("lockd_waiters"), 0);
}

#[test]
fn wait_times_out_with_busy() {
    let server = Server::start(&[]);
    assert_reply(
        &lock(&server, "t", "holder", json!({"ttl_ms": 60_000})),
        200,
        "acquired",
    );
    let started = Instant::now();
    let r = lock(&server, "t", "waiter", json!({"wait_ms": 300}));
    let took = started.elapsed();
    assert_reply(&r, 409, "busy");
    assert_eq!(r.json["owner"], "holder");
    assert!(
        took >= Duration::from_millis(300),
        "answered after {took:?}"
    );
    assert!(took < Duration::from_secs(5), "answered after {took:?}");
    assert_eq!(server.metric("lockd_waiters"), 0);

    // A waiter is granted the lock when the holder's lease runs out (a TTL
    // long enough for the waiter to queue first, on a busy machine too).
    assert_reply(
        &lock(&server, "e", "holder", json!({"ttl_ms": 1_000})),
        200,
        "acquired",
    );
    let r = lock(&server, "e", "waiter", json!({"wait_ms": 10_000}));
    assert_reply(&r, 200, "acquired");
}

#[test]
fn a_disconnected_waiter_leaves_the_queue() {
    let server = Server::start(&[]);
    assert_reply(
        &lock(&server, "d", "holder", json!({"ttl_ms": 60_000})),
        200,
        "acquired",
    );
    let body =
        json!({"name": "d", "owner": "gone", "ttl_ms": 60_000, "wait_ms": 60_000}).to_string();
    let mut stream = TcpStream::connect(server.addr).unwrap();
    write!(
        stream,
        "POST {LOCK} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    server.wait_for_waiters(1);
    drop(stream);
    server.wait_for_waiters(0);
    // The lock did not go to the vanished waiter.
    assert_reply(
        &server.post_json(UNLOCK, &json!({"name": "d", "owner": "holder"})),
        200,
        "unlocked",
    );
    assert_reply(
        &server.post_json(GET, &json!({"name": "d"})),
        404,
        "not_found",
    );
    assert_reply(&lock(&server, "d", "next", json!({})), 200, "acquired");
}

#[test]
fn bad_input_is_refused_and_the_server_keeps_serving() {
    let server = Server::start(&[]);
    let cases: Vec<(&str, String, &str)> = vec![
        ("malformed JSON", "{\"name\": ".to_string(), "EOF"),
        ("not an object", "[1, 2]".to_string(), "expected"),
        ("empty body", String::new(), "EOF"),
        (
            "wrong type",
            r#"{"name":"a","owner":"o","ttl_ms":"10s"}"#.to_string(),
            "invalid type",
        ),
        (
            "name not a string",
            r#"{"name":5,"owner":"o","ttl_ms":10}"#.to_string(),
            "invalid type",
        ),
        (
            "negative",
            r#"{"name":"a","owner":"o","ttl_ms":-1}"#.to_string(),
            "-1",
        ),
        (
            "fraction",
            r#"{"name":"a","owner":"o","ttl_ms":1.5}"#.to_string(),
            "floating point",
        ),
        (
            "overflow",
            r#"{"name":"a","owner":"o","ttl_ms":18446744073709551616}"#.to_string(),
            "floating point",
        ),
        (
            "unknown field",
            r#"{"name":"a","owner":"o","ttl_ms":10,"wait":5}"#.to_string(),
            "unknown field `wait`",
        ),
        (
            "missing field",
            r#"{"name":"a","ttl_ms":10}"#.to_string(),
            "missing field `owner`",
        ),
        (
            "bad durability",
            r#"{"name":"a","owner":"o","ttl_ms":10,"durability":"forever"}"#.to_string(),
            "forever",
        ),
        (
            "empty name",
            r#"{"name":"","owner":"o","ttl_ms":10}"#.to_string(),
            "name must not be empty",
        ),
        (
            "long name",
            json!({"name": "n".repeat(513), "owner": "o", "ttl_ms": 10}).to_string(),
            "name is 513 bytes, over the limit of 512 bytes",
        ),
        (
            "long owner",
            json!({"name": "a", "owner": "o".repeat(300), "ttl_ms": 10}).to_string(),
            "owner is 300 bytes, over the limit of 256 bytes",
        ),
        (
            "long namespace",
            json!({"namespace": "s".repeat(200), "name": "a", "owner": "o", "ttl_ms": 10})
                .to_string(),
            "namespace is 200 bytes, over the limit of 128 bytes",
        ),
        (
            "ttl too long",
            r#"{"name":"a","owner":"o","ttl_ms":86400001}"#.to_string(),
            "86400000",
        ),
        (
            "wait too long",
            r#"{"name":"a","owner":"o","ttl_ms":10,"wait_ms":3600001}"#.to_string(),
            "3600000",
        ),
    ];
    for (what, body, needle) in &cases {
        let r = server.post(LOCK, body);
        assert_reply(&r, 400, "invalid_argument");
        assert!(r.message().contains(needle), "{what}: {}", r.body);
        server.assert_healthy();
    }
    // The other POST routes parse the same way.
    for path in [UNLOCK, EXTEND, GET] {
        let r = server.post(path, r#"{"name":"a","bogus":1}"#);
        assert_reply(&r, 400, "invalid_argument");
        assert!(
            r.message().contains("unknown field `bogus`"),
            "{path}: {}",
            r.body
        );
    }
    let r = server.post(UNLOCK, r#"{"name":"a","owner":"o","fencing_token":-5}"#);
    assert_reply(&r, 400, "invalid_argument");
    assert!(r.message().contains("-5"), "{}", r.body);

    // Raw bytes that are not UTF-8.
    let r = raw_request(
        server.addr,
        &format!("POST {LOCK} HTTP/1.1\r\nHost: x\r\nContent-Length: 4"),
        vec![b'"', 0xff, 0xfe, b'"'],
    );
    assert_reply(&r, 400, "invalid_argument");
    server.assert_healthy();

    // 10 MB, declared.
    let big = vec![b' '; 10 << 20];
    let r = raw_request(
        server.addr,
        &format!("POST {LOCK} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}", big.len()),
        big,
    );
    assert_reply(&r, 413, "invalid_argument");
    assert_eq!(
        r.json,
        json!({"status": "invalid_argument", "message": "body over 1048576 bytes"})
    );
    server.assert_healthy();

    // 2 MB, chunked, so the length is only found out while reading.
    let mut chunked = Vec::new();
    for _ in 0..32 {
        chunked.extend_from_slice(format!("{:x}\r\n", 65536).as_bytes());
        chunked.extend(std::iter::repeat_n(b' ', 65536));
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let r = raw_request(
        server.addr,
        &format!("POST {LOCK} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked"),
        chunked,
    );
    assert_reply(&r, 413, "invalid_argument");
    assert_eq!(r.message(), "body over 1048576 bytes");
    server.assert_healthy();

    // Just under the limit is read (and then refused as JSON).
    let padded = format!(
        "{}{}",
        " ".repeat((1 << 20) - 64),
        r#"{"name":"a","owner":"o","ttl_ms":10}"#
    );
    assert!(padded.len() <= 1 << 20);
    assert_reply(&server.post(LOCK, &padded), 200, "acquired");

    // Wrong method on a known path, unknown paths.
    for (method, path, allow) in [
        ("GET", LOCK, "POST"),
        ("PUT", UNLOCK, "POST"),
        ("DELETE", "/v1/locks", "GET"),
        ("POST", "/v1/locks", "GET"),
        ("POST", "/metrics", "GET"),
        ("POST", "/healthz", "GET"),
        ("PATCH", "/openapi.json", "GET"),
    ] {
        let body = (method != "GET" && method != "DELETE").then_some("{}");
        let r = request(method, &server.url, path, body, None);
        assert_reply(&r, 405, "invalid_argument");
        assert_eq!(r.header("allow"), Some(allow), "{method} {path}");
        assert!(r.message().contains(allow), "{}", r.body);
        server.assert_healthy();
    }
    for path in [
        "/v1/locks/nope",
        "/v1/",
        "/v1/locks/lock/",
        "/v1/locks/LOCK",
    ] {
        let r = server.post(path, "{}");
        assert_reply(&r, 404, "not_found");
        assert!(r.message().contains(path), "{}", r.body);
        server.assert_healthy();
    }
    let r = server.get("/nothing-here");
    assert_eq!((r.code, r.status()), (404, "not_found"));
    server.assert_healthy();
}

#[test]
fn bearer_token_guards_every_route_but_healthz() {
    let server = Server::start(&["--auth-token", "s3cret"]);
    let routes = [
        ("POST", LOCK),
        ("POST", UNLOCK),
        ("POST", EXTEND),
        ("POST", GET),
        ("GET", "/v1/locks"),
        ("GET", "/metrics"),
        ("GET", "/openapi.json"),
        ("POST", "/v1/locks/nope"),
    ];
    let body = r#"{"name":"a","owner":"o","ttl_ms":1000}"#;
    for (method, path) in routes {
        let b = (method == "POST").then_some(body);
        for token in [None, Some("wrong"), Some("s3cret2"), Some("")] {
            let r = request(method, &server.url, path, b, token);
            assert_reply(&r, 401, "unauthorized");
            assert_eq!(
                r.header("www-authenticate"),
                Some("Bearer"),
                "{method} {path}"
            );
            assert!(!r.message().is_empty());
        }
    }
    // Other schemes, or the token without a scheme, do not pass.
    for header in ["Basic czNjcmV0", "s3cret", "Bearer", "Bearers3cret"] {
        let r = raw_request(
            server.addr,
            &format!("GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: {header}"),
            Vec::new(),
        );
        assert_reply(&r, 401, "unauthorized");
    }
    // The scheme is case-insensitive.
    let r = raw_request(
        server.addr,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: bearer s3cret",
        Vec::new(),
    );
    assert_eq!(r.code, 200, "{}", r.body);
    // Nothing was done by the refused calls.
    let series = "lockd_operations_total{op=\"lock\",outcome=\"ok\"}";
    assert_eq!(metric_with_token(&server, "s3cret", series), 0);

    let health = request("GET", &server.url, "/healthz", None, None);
    assert_reply(&health, 200, "ok");

    let ok = |method: &str, path: &str, b: Option<&str>| {
        request(method, &server.url, path, b, Some("s3cret"))
    };
    assert_reply(&ok("POST", LOCK, Some(body)), 200, "acquired");
    assert_reply(&ok("POST", GET, Some(r#"{"name":"a"}"#)), 200, "found");
    assert_reply(&ok("POST", EXTEND, Some(body)), 200, "extended");
    assert_reply(&ok("GET", "/v1/locks", None), 200, "found");
    assert_eq!(ok("GET", "/metrics", None).code, 200);
    assert_eq!(ok("GET", "/openapi.json", None).code, 200);
    assert_reply(
        &ok("POST", UNLOCK, Some(r#"{"name":"a","owner":"o"}"#)),
        200,
        "unlocked",
    );
}

fn metric_with_token(server: &Server, token: &str, series: &str) -> u64 {
    let r = request("GET", &server.url, "/metrics", None, Some(token));
    assert_eq!(r.code, 200);
    lockd_server::metric_value(&r.body, series)
}

#[test]
fn auth_token_from_the_environment() {
    let server = Server::start_in(
        None,
        &["--store", "memory"],
        &[("LOCKD_AUTH_TOKEN", "from-env")],
    );
    assert_eq!(
        request("GET", &server.url, "/metrics", None, None).code,
        401
    );
    assert_eq!(
        request("GET", &server.url, "/metrics", None, Some("from-env")).code,
        200
    );
}

#[test]
fn no_token_means_open() {
    let server = Server::start(&[]);
    let r = request("GET", &server.url, "/metrics", None, None);
    assert_eq!(r.code, 200);
    // A token sent to an open server is ignored.
    let r = request(
        "POST",
        &server.url,
        LOCK,
        Some(r#"{"name":"a","owner":"o","ttl_ms":1000}"#),
        Some("any"),
    );
    assert_reply(&r, 200, "acquired");
}

#[test]
fn metrics_count_calls() {
    let server = Server::start(&[]);
    let metrics = server.get("/metrics");
    assert_eq!(metrics.code, 200);
    assert_eq!(
        metrics.header("content-type"),
        Some("text/plain; version=0.0.4")
    );
    let ok = "lockd_operations_total{op=\"lock\",outcome=\"ok\"}";
    let busy = "lockd_operations_total{op=\"lock\",outcome=\"busy\"}";
    let invalid = "lockd_operations_total{op=\"lock\",outcome=\"invalid_argument\"}";
    assert_eq!(lockd_server::metric_value(&metrics.body, ok), 0);
    assert_eq!(
        lockd_server::metric_value(&metrics.body, "lockd_locks_held"),
        0
    );

    for i in 0..5 {
        assert_reply(
            &lock(&server, &format!("m/{i}"), "o", json!({})),
            200,
            "acquired",
        );
    }
    assert_reply(&lock(&server, "m/0", "other", json!({})), 409, "busy");
    assert_reply(
        &lock(&server, "m/0", "other", json!({"ttl_ms": 0})),
        400,
        "invalid_argument",
    );
    // Refused before the service (bad JSON) is not a lock operation.
    assert_eq!(server.post(LOCK, "{").code, 400);
    assert_reply(
        &server.post_json(UNLOCK, &json!({"name": "m/4", "owner": "o"})),
        200,
        "unlocked",
    );

    assert_eq!(server.metric(ok), 5);
    assert_eq!(server.metric(busy), 1);
    assert_eq!(server.metric(invalid), 1);
    assert_eq!(
        server.metric("lockd_operations_total{op=\"unlock\",outcome=\"ok\"}"),
        1
    );
    assert_eq!(server.metric("lockd_locks_held"), 4);
    assert_eq!(
        server.metric("lockd_operation_duration_seconds_count{op=\"lock\"}"),
        7
    );
}

#[test]
fn persistent_locks_survive_a_restart_and_ephemeral_ones_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--store", "redb:locks.redb"];
    let mut server = Server::start_in(Some(dir.path()), &args, &[]);
    let p = lock(
        &server,
        "p",
        "o",
        json!({"durability": "persistent", "ttl_ms": 60_000}),
    );
    assert_reply(&p, 200, "acquired");
    assert_reply(
        &lock(
            &server,
            "e",
            "o",
            json!({"durability": "ephemeral", "ttl_ms": 60_000}),
        ),
        200,
        "acquired",
    );
    server.kill();
    assert!(dir.path().join("locks.redb").exists());

    let server = Server::start_in(Some(dir.path()), &args, &[]);
    let found = server.post_json(GET, &json!({"name": "p"}));
    assert_reply(&found, 200, "found");
    assert_eq!(found.json["fencing_token"], p.json["fencing_token"]);
    assert_eq!(found.json["expires_at_ms"], p.json["expires_at_ms"]);
    assert_reply(
        &server.post_json(GET, &json!({"name": "e"})),
        404,
        "not_found",
    );
    let next = lock(&server, "e", "o", json!({}));
    assert!(next.json["fencing_token"].as_u64() > p.json["fencing_token"].as_u64());
}

#[test]
fn openapi_json_is_the_checked_in_document() {
    let server = Server::start(&[]);
    let r = server.get("/openapi.json");
    assert_eq!(r.code, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.body, include_str!("../../../docs/openapi.json"));
}

// ---------------------------------------------------------------------------
// OpenAPI agreement

/// Every route the server answers, as (method, path).
const SERVER_ROUTES: [(&str, &str); 22] = [
    ("post", "/v1/locks/lock"),
    ("post", "/v1/locks/unlock"),
    ("post", "/v1/locks/extend"),
    ("post", "/v1/locks/get"),
    ("get", "/v1/locks"),
    ("post", "/v1/locks/force-unlock"),
    ("post", "/v1/admin/snapshot"),
    ("get", "/v1/events"),
    ("get", "/v1/namespaces"),
    ("post", "/v1/leases/grant"),
    ("post", "/v1/leases/refresh"),
    ("post", "/v1/leases/revoke"),
    ("post", "/v1/leases/get"),
    ("post", "/v1/elections/campaign"),
    ("post", "/v1/elections/proclaim"),
    ("post", "/v1/elections/resign"),
    ("post", "/v1/elections/leader"),
    ("get", "/metrics"),
    ("get", "/healthz"),
    ("get", "/livez"),
    ("get", "/readyz"),
    ("get", "/openapi.json"),
];

/// The routes that answer without a token: probes, which take no input.
const PROBES: [&str; 3] = ["/healthz", "/livez", "/readyz"];

/// Whether an OpenAPI operation is one of the compatibility routes (tagged
/// `Dapr compatibility` or `Kahuna compatibility`).
fn is_compatibility(operation: &Value) -> bool {
    operation["tags"].as_array().is_some_and(|tags| {
        tags.iter()
            .any(|t| t.as_str().is_some_and(|t| t.ends_with(" compatibility")))
    })
}

/// A request to probe a route with, and whether its body is to be checked
/// against the documented request schema.
struct Probe {
    what: &'static str,
    query: &'static str,
    body: Option<String>,
    token: Option<&'static str>,
    valid: bool,
}

fn probe(what: &'static str, body: Option<Value>, valid: bool) -> Probe {
    Probe {
        what,
        query: "",
        body: body.map(|b| b.to_string()),
        token: Some(TOKEN),
        valid,
    }
}

const TOKEN: &str = "doc-token";

/// Requests for `method path`: valid ones first, then invalid ones. Each is
/// sent in order; some set up the state the next needs (leases are granted
/// on `server` as the probes are made).
fn probes(method: &str, path: &str, server: &Server) -> Vec<Probe> {
    let live_lease = || {
        let body = json!({"ttl_ms": 60_000}).to_string();
        let r = request(
            "POST",
            &server.url,
            "/v1/leases/grant",
            Some(&body),
            Some(TOKEN),
        );
        assert_eq!(r.code, 200, "{}", r.body);
        r.json["lease_id"].as_str().unwrap().to_string()
    };
    let dead_lease = "lease-00000000000000000000000000000000";
    let leader_token = |name: &str| {
        let body = json!({"name": name}).to_string();
        let r = request(
            "POST",
            &server.url,
            "/v1/elections/leader",
            Some(&body),
            Some(TOKEN),
        );
        assert_eq!(r.code, 200, "{}", r.body);
        r.json["fencing_token"].as_u64().unwrap()
    };
    let no_token = |what| Probe {
        what,
        query: "",
        body: None,
        token: None,
        valid: false,
    };
    let mut with_body_no_token = no_token("no token");
    let malformed = Probe {
        what: "malformed JSON",
        query: "",
        body: Some("{".to_string()),
        token: Some(TOKEN),
        valid: false,
    };
    let too_large = Probe {
        what: "body too large",
        query: "",
        body: Some(" ".repeat((1 << 20) + 1)),
        token: Some(TOKEN),
        valid: false,
    };
    match (method, path) {
        ("post", "/v1/locks/lock") => {
            with_body_no_token.body =
                Some(json!({"name": "l", "owner": "o", "ttl_ms": 1000}).to_string());
            vec![
                probe(
                    "lock",
                    Some(json!({"name": "l", "owner": "o", "ttl_ms": 60_000})),
                    true,
                ),
                probe(
                    "lock with every field",
                    Some(
                        json!({"namespace": "n", "name": "l", "owner": "o", "ttl_ms": 60_000, "wait_ms": 0, "durability": "ephemeral"}),
                    ),
                    true,
                ),
                probe(
                    "busy",
                    Some(json!({"name": "l", "owner": "other", "ttl_ms": 1000})),
                    true,
                ),
                probe(
                    "lock under a lease",
                    Some(json!({"name": "leased", "lease_id": live_lease(), "wait_ms": 0})),
                    true,
                ),
                probe(
                    "lock under a dead lease",
                    Some(json!({"name": "leased2", "lease_id": dead_lease})),
                    true,
                ),
                probe(
                    "shared",
                    Some(
                        json!({"name": "shared", "owner": "o", "ttl_ms": 60_000, "mode": "shared"}),
                    ),
                    true,
                ),
                probe(
                    "a permit",
                    Some(json!({"name": "sem", "owner": "o", "ttl_ms": 60_000, "permits": 2})),
                    true,
                ),
                probe(
                    "ttl 0",
                    Some(json!({"name": "l", "owner": "o", "ttl_ms": 0})),
                    false,
                ),
                probe(
                    "mode and permits",
                    Some(
                        json!({"name": "sem", "owner": "o", "ttl_ms": 1000, "mode": "shared", "permits": 2}),
                    ),
                    false,
                ),
                probe(
                    "unknown mode",
                    Some(json!({"name": "l", "owner": "o", "ttl_ms": 1000, "mode": "read"})),
                    false,
                ),
                probe(
                    "permits 0",
                    Some(json!({"name": "sem", "owner": "o", "ttl_ms": 1000, "permits": 0})),
                    false,
                ),
                probe(
                    "owner and lease_id",
                    Some(json!({"name": "l", "owner": "o", "lease_id": dead_lease})),
                    false,
                ),
                malformed,
                too_large,
                with_body_no_token,
            ]
        }
        ("post", "/v1/locks/unlock") => vec![
            probe("not held", Some(json!({"name": "u", "owner": "o"})), true),
            probe(
                "unlock other's",
                Some(json!({"namespace": "n", "name": "l", "owner": "x", "fencing_token": 1})),
                true,
            ),
            probe(
                "unlock",
                Some(json!({"namespace": "n", "name": "l", "owner": "o"})),
                true,
            ),
            malformed,
            too_large,
            no_token("no token"),
        ],
        ("post", "/v1/locks/extend") => vec![
            probe(
                "extend",
                Some(json!({"name": "l", "owner": "o", "ttl_ms": 60_000})),
                true,
            ),
            probe(
                "not owner",
                Some(json!({"name": "l", "owner": "x", "ttl_ms": 1000})),
                true,
            ),
            malformed,
            too_large,
            no_token("no token"),
        ],
        ("post", "/v1/locks/get") => vec![
            probe("found", Some(json!({"name": "l"})), true),
            probe("found shared", Some(json!({"name": "shared"})), true),
            probe("found a semaphore", Some(json!({"name": "sem"})), true),
            probe(
                "not found",
                Some(json!({"namespace": "n", "name": "free"})),
                true,
            ),
            malformed,
            too_large,
            no_token("no token"),
        ],
        ("get", "/v1/locks") => vec![
            Probe {
                what: "list",
                query: "?namespace=default&prefix=l",
                body: None,
                token: Some(TOKEN),
                valid: true,
            },
            Probe {
                what: "list shared names and semaphores",
                query: "?namespace=default",
                body: None,
                token: Some(TOKEN),
                valid: true,
            },
            Probe {
                what: "unknown parameter",
                query: "?names=x",
                body: None,
                token: Some(TOKEN),
                valid: false,
            },
            no_token("no token"),
        ],
        ("post", "/v1/locks/force-unlock") => {
            with_body_no_token.body = Some(json!({"name": "l"}).to_string());
            vec![
                probe(
                    "force-unlock",
                    Some(json!({"namespace": "n", "name": "forced"})),
                    true,
                ),
                probe("not held", Some(json!({"name": "free"})), true),
                probe(
                    "unknown field",
                    Some(json!({"name": "l", "owner": "o"})),
                    false,
                ),
                malformed,
                too_large,
                with_body_no_token,
            ]
        }
        // The server of this test keeps its locks in memory, which has no
        // snapshot: tests/snapshot_cli.rs takes one of a redb store.
        ("post", "/v1/admin/snapshot") => vec![
            Probe {
                what: "a memory store's snapshot",
                query: "",
                body: None,
                token: Some(TOKEN),
                valid: true,
            },
            no_token("no token"),
        ],
        ("get", "/v1/events") => vec![
            Probe {
                what: "every namespace",
                query: "",
                body: None,
                token: Some(TOKEN),
                valid: true,
            },
            Probe {
                what: "filtered",
                query: "?namespace=n&prefix=l",
                body: None,
                token: Some(TOKEN),
                valid: true,
            },
            Probe {
                what: "token in the query",
                query: "?access_token=doc-token",
                body: None,
                token: None,
                valid: true,
            },
            Probe {
                what: "unknown parameter",
                query: "?names=x",
                body: None,
                token: Some(TOKEN),
                valid: false,
            },
            no_token("no token"),
        ],
        ("post", "/v1/leases/grant") => {
            with_body_no_token.body = Some(json!({"ttl_ms": 1000}).to_string());
            vec![
                probe("grant", Some(json!({"ttl_ms": 60_000})), true),
                probe(
                    "grant with every field",
                    Some(json!({"namespace": "n", "ttl_ms": 60_000, "durability": "ephemeral"})),
                    true,
                ),
                probe("ttl 0", Some(json!({"ttl_ms": 0})), false),
                malformed,
                too_large,
                with_body_no_token,
            ]
        }
        ("post", "/v1/leases/refresh" | "/v1/leases/revoke" | "/v1/leases/get") => {
            with_body_no_token.body = Some(json!({"lease_id": dead_lease}).to_string());
            vec![
                probe("live", Some(json!({"lease_id": live_lease()})), true),
                probe(
                    "not live",
                    Some(json!({"namespace": "n", "lease_id": dead_lease})),
                    true,
                ),
                probe(
                    "unknown field",
                    Some(json!({"lease_id": dead_lease, "name": "l"})),
                    false,
                ),
                malformed,
                too_large,
                with_body_no_token,
            ]
        }
        ("post", "/v1/elections/campaign") => {
            with_body_no_token.body = Some(
                json!({"name": "e", "candidate": "c", "value": "v", "ttl_ms": 1000}).to_string(),
            );
            vec![
                probe(
                    "campaign",
                    Some(
                        json!({"name": "e", "candidate": "c1", "value": "10.0.0.1:80", "ttl_ms": 60_000}),
                    ),
                    true,
                ),
                probe(
                    "campaign with every field",
                    Some(
                        json!({"namespace": "n", "name": "e", "candidate": "c1", "value": "", "ttl_ms": 60_000, "wait_ms": 0, "durability": "ephemeral"}),
                    ),
                    true,
                ),
                probe(
                    "busy",
                    Some(json!({"name": "e", "candidate": "c2", "value": "v", "ttl_ms": 1000})),
                    true,
                ),
                probe(
                    "a lock's name",
                    Some(json!({"name": "l", "candidate": "c1", "value": "v", "ttl_ms": 1000})),
                    true,
                ),
                probe(
                    "value too long",
                    Some(
                        json!({"name": "e3", "candidate": "c1", "value": "v".repeat(4097), "ttl_ms": 1000}),
                    ),
                    false,
                ),
                probe(
                    "no value",
                    Some(json!({"name": "e3", "candidate": "c1", "ttl_ms": 1000})),
                    false,
                ),
                malformed,
                too_large,
                with_body_no_token,
            ]
        }
        ("post", "/v1/elections/proclaim") => {
            let token = leader_token("e");
            vec![
                probe(
                    "proclaim",
                    Some(
                        json!({"name": "e", "candidate": "c1", "fencing_token": token, "value": "10.0.0.2:80"}),
                    ),
                    true,
                ),
                probe(
                    "another token",
                    Some(
                        json!({"name": "e", "candidate": "c1", "fencing_token": token + 1, "value": "v"}),
                    ),
                    true,
                ),
                probe(
                    "nobody leads",
                    Some(
                        json!({"namespace": "n", "name": "free", "candidate": "c1", "fencing_token": 1, "value": "v"}),
                    ),
                    true,
                ),
                probe(
                    "no token",
                    Some(json!({"name": "e", "candidate": "c1", "value": "v"})),
                    false,
                ),
                malformed,
                too_large,
                no_token("no token"),
            ]
        }
        ("post", "/v1/elections/resign") => vec![
            probe(
                "another candidate",
                Some(json!({"name": "e", "candidate": "c2"})),
                true,
            ),
            probe(
                "a lock's name",
                Some(json!({"name": "l", "candidate": "o"})),
                true,
            ),
            probe(
                "resign",
                Some(json!({"name": "e", "candidate": "c1", "fencing_token": leader_token("e")})),
                true,
            ),
            probe(
                "nobody leads",
                Some(json!({"name": "e", "candidate": "c1"})),
                true,
            ),
            malformed,
            too_large,
            no_token("no token"),
        ],
        ("post", "/v1/elections/leader") => {
            let r = request(
                "POST",
                &server.url,
                "/v1/elections/campaign",
                Some(
                    &json!({"name": "e2", "candidate": "c1", "value": "v", "ttl_ms": 60_000})
                        .to_string(),
                ),
                Some(TOKEN),
            );
            assert_eq!(r.code, 200, "{}", r.body);
            vec![
                probe("leads", Some(json!({"name": "e2"})), true),
                probe("nobody leads", Some(json!({"name": "e"})), true),
                probe("a lock's name", Some(json!({"name": "l"})), true),
                probe(
                    "unknown field",
                    Some(json!({"name": "e", "candidate": "c1"})),
                    false,
                ),
                malformed,
                too_large,
                no_token("no token"),
            ]
        }
        ("get", "/metrics") | ("get", "/openapi.json") | ("get", "/v1/namespaces") => vec![
            Probe {
                what: "read",
                query: "",
                body: None,
                token: Some(TOKEN),
                valid: true,
            },
            no_token("no token"),
        ],
        // /healthz takes no input, so nothing about it can be invalid; it
        // answers without a token.
        ("get", "/healthz") => vec![Probe {
            what: "health",
            query: "",
            body: None,
            token: None,
            valid: true,
        }],
        // So do /livez and /readyz, the other probes.
        ("get", "/livez") | ("get", "/readyz") => vec![Probe {
            what: "probe",
            query: "",
            body: None,
            token: None,
            valid: true,
        }],
        _ => panic!("no probes for {method} {path}; add them"),
    }
}

/// Follows a local `$ref`.
fn resolve<'a>(doc: &'a Value, mut v: &'a Value) -> &'a Value {
    while let Some(r) = v["$ref"].as_str() {
        let pointer = r
            .strip_prefix('#')
            .unwrap_or_else(|| panic!("non-local $ref {r}"));
        v = doc
            .pointer(pointer)
            .unwrap_or_else(|| panic!("dangling $ref {r}"));
    }
    v
}

/// Checks `value` against the subset of JSON Schema the document uses: types,
/// required properties, enums, items; and, for objects, no property the
/// schema does not declare.
fn check_schema(doc: &Value, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    let schema = resolve(doc, schema);
    if let Some(alternatives) = schema["oneOf"].as_array() {
        // A typed schema with `oneOf` (a request with two shapes): its own
        // keywords apply, and the alternatives only add `required` fields and
        // constraints on the properties they name. An untyped one (a choice
        // of replies) is exactly one of its alternatives.
        let typed = schema["type"].is_string();
        let failures: Vec<String> = alternatives
            .iter()
            .filter_map(|alternative| {
                if typed {
                    check_constraints(doc, alternative, value, at).err()
                } else {
                    check_schema(doc, alternative, value, at).err()
                }
            })
            .collect();
        if failures.len() + 1 != alternatives.len() {
            return Err(format!(
                "{at}: {value} matches {} of oneOf's {} schemas: {failures:?}",
                alternatives.len() - failures.len(),
                alternatives.len()
            ));
        }
        if !typed {
            return Ok(());
        }
    }
    if let Some(options) = schema["enum"].as_array() {
        if !options.contains(value) {
            return Err(format!("{at}: {value} is not one of {options:?}"));
        }
    }
    match schema["type"].as_str() {
        Some("object") => {
            let object = value
                .as_object()
                .ok_or(format!("{at}: {value} is not an object"))?;
            for field in schema["required"].as_array().into_iter().flatten() {
                let field = field.as_str().unwrap();
                if !object.contains_key(field) {
                    return Err(format!("{at}: required {field:?} missing from {value}"));
                }
            }
            if let Some(properties) = schema["properties"].as_object() {
                for (key, v) in object {
                    let Some(property) = properties.get(key) else {
                        return Err(format!("{at}: {key:?} is not documented"));
                    };
                    check_schema(doc, property, v, &format!("{at}.{key}"))?;
                }
            }
            Ok(())
        }
        Some("array") => {
            let items = value
                .as_array()
                .ok_or(format!("{at}: {value} is not an array"))?;
            for (i, item) in items.iter().enumerate() {
                check_schema(doc, &schema["items"], item, &format!("{at}[{i}]"))?;
            }
            Ok(())
        }
        Some("string") if !value.is_string() => Err(format!("{at}: {value} is not a string")),
        Some("integer") if !value.is_u64() => {
            Err(format!("{at}: {value} is not an unsigned integer"))
        }
        Some(_) | None => Ok(()),
    }
}

/// The `required` fields of `alternative` are in the object `value`, and
/// the properties it names, where present, match it.
fn check_constraints(
    doc: &Value,
    alternative: &Value,
    value: &Value,
    at: &str,
) -> Result<(), String> {
    let object = value
        .as_object()
        .ok_or(format!("{at}: {value} is not an object"))?;
    for field in alternative["required"].as_array().into_iter().flatten() {
        let field = field.as_str().unwrap();
        if !object.contains_key(field) {
            return Err(format!("{at}: required {field:?} missing from {value}"));
        }
    }
    for (key, property) in alternative["properties"].as_object().into_iter().flatten() {
        if let Some(v) = object.get(key) {
            check_schema(doc, property, v, &format!("{at}.{key}"))?;
        }
    }
    Ok(())
}

#[test]
fn openapi_matches_server() {
    let doc: Value = serde_json::from_str(include_str!("../../../docs/openapi.json")).unwrap();
    assert_eq!(doc["openapi"], "3.0.3");
    let scheme = &doc["components"]["securitySchemes"]["bearerAuth"];
    assert_eq!(
        (scheme["type"].as_str(), scheme["scheme"].as_str()),
        (Some("http"), Some("bearer"))
    );
    assert_eq!(doc["security"], json!([{"bearerAuth": []}]));

    // The document lists exactly the routes the server answers.
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            // Dapr's and Kahuna's routes: tests/dapr.rs and tests/kahuna.rs.
            if is_compatibility(operation) {
                continue;
            }
            documented.insert((method.clone(), path.clone()));
        }
    }
    let served: BTreeSet<(String, String)> = SERVER_ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(
        documented, served,
        "docs/openapi.json and the server disagree on routes"
    );

    let server = Server::start(&["--auth-token", TOKEN]);
    for (method, path) in SERVER_ROUTES {
        let operation = &doc["paths"][path][method];
        let responses = operation["responses"].as_object().unwrap();
        let open = operation["security"] == json!([]);
        assert_eq!(open, PROBES.contains(&path), "{method} {path}: security");
        let (mut valid_seen, mut invalid_seen) = (false, false);
        if path == "/v1/locks/force-unlock" {
            // Something for the first probe to release.
            let body = json!({"namespace": "n", "name": "forced", "owner": "o", "ttl_ms": 60_000});
            let r = request(
                "POST",
                &server.url,
                "/v1/locks/lock",
                Some(&body.to_string()),
                Some(TOKEN),
            );
            assert_eq!(r.code, 200, "{}", r.body);
        }
        for p in probes(method, path, &server) {
            if p.valid {
                if let Some(body) = &p.body {
                    let schema = &operation["requestBody"]["content"]["application/json"]["schema"];
                    let request: Value = serde_json::from_str(body).unwrap();
                    check_schema(&doc, schema, &request, "request")
                        .unwrap_or_else(|e| panic!("{method} {path} ({}): {e}", p.what));
                }
            }
            let r = match &p.body {
                // ureq would fail writing what the server refuses to read.
                Some(body) if body.len() > 1 << 20 => raw_request(
                    server.addr,
                    &format!(
                        "{} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}",
                        method.to_uppercase(),
                        body.len()
                    ),
                    body.clone().into_bytes(),
                ),
                // A stream that does not end: its head is what is checked.
                None if path == "/v1/events" && p.valid => {
                    stream_head(server.addr, &format!("{path}{}", p.query), p.token)
                }
                _ => request(
                    &method.to_uppercase(),
                    &server.url,
                    &format!("{path}{}", p.query),
                    p.body.as_deref(),
                    p.token,
                ),
            };
            let ctx = format!(
                "{method} {path} ({}) answered {}: {}",
                p.what, r.code, r.body
            );
            // The route exists and takes this method.
            assert!(r.code != 405 && !r.message().contains("no route"), "{ctx}");
            let documented = responses.get(&r.code.to_string()).unwrap_or_else(|| {
                panic!(
                    "{ctx}; documented: {:?}",
                    responses.keys().collect::<Vec<_>>()
                )
            });
            let documented = resolve(&doc, documented);
            let content = documented["content"].as_object().unwrap();
            let content_type = r.header("content-type").unwrap_or("");
            let media = content
                .get(content_type)
                .unwrap_or_else(|| panic!("{ctx}: content type {content_type:?} not documented"));
            if content_type == "application/json" && path != "/openapi.json" {
                check_schema(&doc, &media["schema"], &r.json, "response")
                    .unwrap_or_else(|e| panic!("{ctx}: {e}"));
            }
            if r.code == 401 {
                assert_eq!(r.header("www-authenticate"), Some("Bearer"), "{ctx}");
                assert!(
                    documented["headers"]["WWW-Authenticate"].is_object(),
                    "{ctx}"
                );
            }
            if p.valid {
                valid_seen = true;
            } else {
                invalid_seen = true;
            }
        }
        assert!(valid_seen, "{method} {path}: no valid probe");
        assert!(
            invalid_seen || PROBES.contains(&path),
            "{method} {path}: no invalid probe"
        );
    }
}
