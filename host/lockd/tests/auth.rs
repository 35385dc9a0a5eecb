//! Tokens scoped to namespaces and roles (docs/operating.md#authentication),
//! against the real `lockd` binary: each role against each class of route,
//! namespace patterns, 401 and 403, `/metrics`, scoped listings and events,
//! `GET /v1/namespaces`, `lockd token new` round-tripped through lockd.toml,
//! the CLI's exit code 4, startup errors of bad entries, and a debug-level
//! log of a whole run searched for every token.

mod lockd_server;

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::lockd_server::{lockd, lockd_in_dir, request, Reply, Server};
use ::lockd_server::auth::{digest, to_hex};
use serde_json::{json, Value};

/// The server's `--auth-token`: admin over every namespace.
const ROOT: &str = "root-0b5e1c0e6d9f4a3a8f2d";
const READER: &str = "reader-7d1f33a0c4e54d6b9a10";
const LOCKER: &str = "locker-2c94e8b1f07a4e19b6c3";
const ADMIN_CI: &str = "admin-ci-5e0d7a92b3c14f88a1e4";
const WATCHER: &str = "watcher-8a3b6f21d9e04c7f9b52";
const QUIET: &str = "quiet-1f6e2d9c7b5a4e3d8c01";

fn entry(name: &str, token: &str, namespaces: &str, role: &str) -> String {
    format!(
        "[[auth.tokens]]\nname = {name:?}\nsha256 = {:?}\nnamespaces = {namespaces}\nrole = {role:?}\n\n",
        to_hex(&digest(token))
    )
}

/// The lockd.toml of most tests: readers, lockers and admins over `ci` and
/// `deploy-*`, a reader over `*`, a reader of an empty namespace.
fn config() -> String {
    entry("r", READER, r#"["ci", "deploy-*"]"#, "reader")
        + &entry("l", LOCKER, r#"["ci", "deploy-*"]"#, "locker")
        + &entry("a", ADMIN_CI, r#"["ci"]"#, "admin")
        + &entry("all", WATCHER, r#"["*"]"#, "reader")
        + &entry("q", QUIET, r#"["quiet"]"#, "reader")
}

fn start(dir: &Path, env: &[(&str, &str)]) -> Server {
    std::fs::write(dir.join("lockd.toml"), config()).unwrap();
    // Dapr's API takes any store name here: its store names are the
    // namespaces these tokens check.
    let args = [
        "--store",
        "memory",
        "--auth-token",
        ROOT,
        "--dapr-any-store",
    ];
    Server::start_in(Some(dir), &args, env)
}

fn call(server: &Server, route: &str, body: Value, token: &str) -> Reply {
    let (method, body) = if route.starts_with("GET ") {
        ("GET", None)
    } else {
        ("POST", Some(body.to_string()))
    };
    let path = route.trim_start_matches("GET ").trim_start_matches("POST ");
    request(method, &server.url, path, body.as_deref(), Some(token))
}

fn lock(server: &Server, namespace: &str, name: &str, token: &str) -> Reply {
    call(
        server,
        "POST /v1/locks/lock",
        json!({"namespace": namespace, "name": name, "owner": "o", "ttl_ms": 60_000}),
        token,
    )
}

/// The first `data:` event of `path` that `stop` accepts, and every event
/// before it, read within 10 s.
fn events_until(
    server: &Server,
    path: &str,
    token: Option<&str>,
    act: impl FnOnce(),
    stop: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
    let mut req = agent.get(format!("{}{path}", server.url));
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    let body = req.call().unwrap().into_body();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(body.into_reader()).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // The opening comment: from here on the stream sees every event.
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        ": lockd events"
    );
    act();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no awaited event on {path}; saw {seen:?}"));
        if let Some(data) = line.strip_prefix("data: ") {
            let event: Value = serde_json::from_str(data).unwrap();
            let done = stop(&event);
            seen.push(event);
            if done {
                return seen;
            }
        }
    }
}

fn namespaces_of(server: &Server, token: &str) -> Vec<(String, u64, u64)> {
    let r = call(server, "GET /v1/namespaces", Value::Null, token);
    assert_eq!((r.code, r.status()), (200, "found"), "{}", r.body);
    r.json["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap().to_string(),
                n["held"].as_u64().unwrap(),
                n["waiters"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn each_role_may_call_its_routes_and_no_more() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &[]);
    let lease_of = |token| {
        let r = call(
            &server,
            "POST /v1/leases/grant",
            json!({"namespace": "ci", "ttl_ms": 60_000}),
            token,
        );
        assert_eq!(r.code, 200, "{}", r.body);
        r.json["lease_id"].as_str().unwrap().to_string()
    };
    let lease = lease_of(ROOT);
    assert_eq!(lock(&server, "ci", "held", ROOT).code, 200);
    // (route, body, the weakest role that may call it)
    let routes = [
        (
            "POST /v1/locks/get",
            json!({"namespace": "ci", "name": "held"}),
            "reader",
        ),
        ("GET /v1/locks?namespace=ci", Value::Null, "reader"),
        (
            "POST /v1/leases/get",
            json!({"namespace": "ci", "lease_id": lease}),
            "reader",
        ),
        ("GET /v1/namespaces", Value::Null, "reader"),
        ("GET /openapi.json", Value::Null, "reader"),
        (
            "POST /v1/locks/lock",
            json!({"namespace": "ci", "name": "x", "owner": "o", "ttl_ms": 60_000}),
            "locker",
        ),
        (
            "POST /v1/locks/extend",
            json!({"namespace": "ci", "name": "x", "owner": "o", "ttl_ms": 60_000}),
            "locker",
        ),
        (
            "POST /v1/locks/unlock",
            json!({"namespace": "ci", "name": "x", "owner": "o"}),
            "locker",
        ),
        (
            "POST /v1/leases/grant",
            json!({"namespace": "ci", "ttl_ms": 60_000}),
            "locker",
        ),
        (
            "POST /v1/leases/refresh",
            json!({"namespace": "ci", "lease_id": lease}),
            "locker",
        ),
        (
            "POST /v1/leases/revoke",
            json!({"namespace": "ci", "lease_id": "lease-none"}),
            "locker",
        ),
        (
            "POST /v1/locks/force-unlock",
            json!({"namespace": "ci", "name": "held"}),
            "admin",
        ),
    ];
    let ranks = ["reader", "locker", "admin"];
    for (token, role) in [(READER, "reader"), (LOCKER, "locker"), (ADMIN_CI, "admin")] {
        for (route, body, needed) in &routes {
            let r = call(&server, route, body.clone(), token);
            let allowed =
                ranks.iter().position(|x| x == &role) >= ranks.iter().position(|x| x == needed);
            let ctx = format!("{role} {route}: {} {}", r.code, r.body);
            if allowed {
                assert!(r.code != 401 && r.code != 403, "{ctx}");
            } else {
                assert_eq!((r.code, r.status()), (403, "forbidden"), "{ctx}");
            }
        }
    }
    let r = lock(&server, "ci", "y", READER);
    assert_eq!(
        r.message(),
        "token \"r\" (role reader) may not lock; it needs role locker"
    );
    let r = call(
        &server,
        "POST /v1/locks/force-unlock",
        json!({"namespace": "ci", "name": "x"}),
        LOCKER,
    );
    assert_eq!(
        r.message(),
        "token \"l\" (role locker) may not force-unlock; it needs role admin"
    );
    // /metrics counts every namespace: only tokens over "*".
    for (token, code) in [(READER, 403), (ADMIN_CI, 403), (WATCHER, 200), (ROOT, 200)] {
        let r = request("GET", &server.url, "/metrics", None, Some(token));
        assert_eq!(r.code, code, "{}", r.body);
    }
    let r = request("GET", &server.url, "/metrics", None, Some(ADMIN_CI));
    assert!(
        r.message().contains("needs namespaces [\"*\"]"),
        "{}",
        r.body
    );
    // /healthz and the web page's files need no token; the API does.
    for path in ["/healthz", "/ui/", "/ui/app.js"] {
        assert_eq!(
            request("GET", &server.url, path, None, None).code,
            200,
            "{path}"
        );
    }
    for path in ["/openapi.json", "/v1/namespaces", "/metrics", "/v1/nope"] {
        let r = request("GET", &server.url, path, None, None);
        assert_eq!((r.code, r.status()), (401, "unauthorized"), "{path}");
    }
}

#[test]
fn namespace_patterns_and_unknown_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &[]);
    for (namespace, code) in [
        ("ci", 200),
        ("deploy-", 200),
        ("deploy-prod", 200),
        ("ci2", 403),
        ("c", 403),
        ("deploy", 403),
        ("prod", 403),
    ] {
        let r = lock(&server, namespace, "n", LOCKER);
        assert_eq!(r.code, code, "{namespace}: {}", r.body);
    }
    let r = lock(&server, "prod", "n", LOCKER);
    assert_eq!(
        r.message(),
        "token \"l\" may not use namespace \"prod\"; its namespaces are ci, deploy-*"
    );
    // "*" and the --auth-token reach every namespace.
    assert_eq!(lock(&server, "prod", "n", ROOT).code, 200);
    let r = call(
        &server,
        "POST /v1/locks/get",
        json!({"namespace": "prod", "name": "n"}),
        WATCHER,
    );
    assert_eq!(r.code, 200, "{}", r.body);
    // A request naming no namespace is in `default`.
    let r = call(&server, "GET /v1/locks", Value::Null, LOCKER);
    assert_eq!(r.code, 403, "{}", r.body);
    assert!(r.message().contains("namespace \"default\""), "{}", r.body);

    // No token, an unknown one, another scheme: 401.
    let body = r#"{"namespace":"ci","name":"n","owner":"o","ttl_ms":1000}"#;
    for token in [None, Some("nope"), Some(&READER[1..])] {
        let r = request("POST", &server.url, "/v1/locks/lock", Some(body), token);
        assert_eq!((r.code, r.status()), (401, "unauthorized"), "{token:?}");
        assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    }
    let with_header = |header: &str, body: &str| {
        let head = format!(
            "POST /v1/locks/lock HTTP/1.1\r\nHost: x\r\n{header}\r\nContent-Type: application/json\r\nContent-Length: {}",
            body.len()
        );
        lockd_server::raw_request(server.addr, &head, body.as_bytes().to_vec())
    };
    let basic = with_header(&format!("Authorization: Basic {LOCKER}"), body);
    assert_eq!(basic.code, 401, "{}", basic.body);
    // Dapr's header is a bearer token too, with the same scope.
    let dapr = with_header(&format!("dapr-api-token: {LOCKER}"), body);
    assert_eq!(dapr.code, 200, "{}", dapr.body);
    let dapr = with_header(
        &format!("dapr-api-token: {LOCKER}"),
        &body.replace("\"ci\"", "\"prod\""),
    );
    assert_eq!(
        (dapr.code, dapr.json["status"].as_str()),
        (403, Some("forbidden")),
        "{}",
        dapr.body
    );

    // Dapr's own lock API takes the same header, its store name checked as
    // the namespace.
    let try_lock = |store: &str, token: &str| {
        let body = r#"{"resourceId":"r","lockOwner":"o","expiryInSeconds":10}"#;
        let head = format!(
            "POST /v1.0-alpha1/lock/{store} HTTP/1.1\r\nHost: x\r\ndapr-api-token: {token}\r\nContent-Length: {}",
            body.len()
        );
        lockd_server::raw_request(server.addr, &head, body.as_bytes().to_vec())
    };
    assert_eq!(try_lock("ci", ROOT).code, 200);
    assert_eq!(try_lock("deploy-x", LOCKER).code, 200);
    let scoped = try_lock("prod", LOCKER);
    assert_eq!(scoped.code, 403, "{}", scoped.body);
    assert_eq!(scoped.status(), "forbidden", "{}", scoped.body);
    // A reader may not lock, even in its namespaces.
    assert_eq!(try_lock("ci", WATCHER).code, 403);
    assert_eq!(try_lock("ci", "nope").code, 401);
}

#[test]
fn listings_events_and_namespaces_show_a_token_its_namespaces() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &[]);
    for namespace in ["ci", "deploy-a", "prod"] {
        assert_eq!(lock(&server, namespace, "held", ROOT).code, 200);
    }
    // A waiter in prod.
    let url = server.url.clone();
    let waiter = std::thread::spawn(move || {
        let body = json!({"namespace": "prod", "name": "held", "owner": "w", "ttl_ms": 1000, "wait_ms": 60_000});
        request(
            "POST",
            &url,
            "/v1/locks/lock",
            Some(&body.to_string()),
            Some(ROOT),
        )
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while namespaces_of(&server, ROOT).last() != Some(&("prod".to_string(), 1, 1)) {
        assert!(
            Instant::now() < deadline,
            "{:?}",
            namespaces_of(&server, ROOT)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let row = |n: &str, held, waiters| (n.to_string(), held, waiters);
    assert_eq!(
        namespaces_of(&server, ROOT),
        [row("ci", 1, 0), row("deploy-a", 1, 0), row("prod", 1, 1)]
    );
    assert_eq!(
        namespaces_of(&server, WATCHER),
        namespaces_of(&server, ROOT)
    );
    assert_eq!(
        namespaces_of(&server, READER),
        [row("ci", 1, 0), row("deploy-a", 1, 0)]
    );
    assert_eq!(namespaces_of(&server, ADMIN_CI), [row("ci", 1, 0)]);
    // A namespace a token names exactly is listed while empty.
    assert_eq!(namespaces_of(&server, QUIET), [row("quiet", 0, 0)]);

    // Listings: in scope, yes; outside, 403.
    let r = call(
        &server,
        "GET /v1/locks?namespace=deploy-a",
        Value::Null,
        READER,
    );
    assert_eq!(r.json["locks"][0]["name"], "held", "{}", r.body);
    let r = call(&server, "GET /v1/locks?namespace=prod", Value::Null, READER);
    assert_eq!((r.code, r.status()), (403, "forbidden"), "{}", r.body);

    // Events without a filter: the token's namespaces only.
    let seen = events_until(
        &server,
        "/v1/events",
        Some(READER),
        || {
            assert_eq!(lock(&server, "prod", "second", ROOT).code, 200);
            assert_eq!(lock(&server, "ci", "second", ROOT).code, 200);
        },
        |e| e["namespace"] == "ci",
    );
    assert_eq!(seen.len(), 1, "{seen:?}");
    // With a filter in scope, and the token as access_token.
    let path = format!("/v1/events?namespace=deploy-a&access_token={READER}");
    let seen = events_until(
        &server,
        &path,
        None,
        || {
            assert_eq!(lock(&server, "ci", "third", ROOT).code, 200);
            assert_eq!(lock(&server, "deploy-a", "third", ROOT).code, 200);
        },
        |e| e["namespace"] == "deploy-a",
    );
    assert_eq!(seen.len(), 1, "{seen:?}");
    // A filter outside the scope is refused, however the token comes.
    let r = request(
        "GET",
        &server.url,
        "/v1/events?namespace=prod",
        None,
        Some(READER),
    );
    assert_eq!((r.code, r.status()), (403, "forbidden"), "{}", r.body);
    let path = format!("/v1/events?namespace=prod&access_token={READER}");
    assert_eq!(request("GET", &server.url, &path, None, None).code, 403);
    // The "*" reader sees every namespace's events.
    let seen = events_until(
        &server,
        "/v1/events",
        Some(WATCHER),
        || assert_eq!(lock(&server, "prod", "fourth", ROOT).code, 200),
        |e| e["namespace"] == "prod",
    );
    assert_eq!(seen.len(), 1, "{seen:?}");

    let r = call(
        &server,
        "POST /v1/locks/unlock",
        json!({"namespace": "prod", "name": "held", "owner": "o"}),
        ROOT,
    );
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(waiter.join().unwrap().code, 200);
}

#[test]
fn token_new_round_trips_and_the_cli_exits_4_when_forbidden() {
    let made = lockd(
        &[
            "token",
            "new",
            "--name",
            "ci",
            "--namespaces",
            "ci,deploy-*",
            "--role",
            "locker",
        ],
        &[],
    );
    assert_eq!(made.code, Some(0), "{made:?}");
    let (token, block) = made.stdout.split_once('\n').unwrap();
    assert_eq!(token.len(), 64, "{token}");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{token}");
    assert!(!block.contains(token));
    assert!(block.contains("[[auth.tokens]]"), "{block}");
    let again = lockd(
        &[
            "token",
            "new",
            "--name",
            "ci",
            "--namespaces",
            "*",
            "--role",
            "admin",
        ],
        &[],
    );
    assert_ne!(again.stdout.lines().next(), Some(token));

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("lockd.toml"), block).unwrap();
    let server = Server::start_in(Some(dir.path()), &["--store", "memory"], &[]);
    assert_eq!(lock(&server, "deploy-x", "a", token).code, 200);
    assert_eq!(lock(&server, "prod", "a", token).code, 403);

    let cli = |args: &[&str], token: &str| {
        let mut all = args.to_vec();
        all.extend(["--server", &server.url]);
        lockd(&all, &[("LOCKD_AUTH_TOKEN", token)])
    };
    let run = cli(
        &[
            "lock",
            "a",
            "--namespace",
            "prod",
            "--owner",
            "o",
            "--ttl",
            "10s",
        ],
        token,
    );
    assert_eq!(run.code, Some(4), "{run:?}");
    assert!(
        run.one_stderr_line().contains(
            "403 forbidden): token \"ci\" may not use namespace \"prod\"; its namespaces are ci, deploy-*"
        ),
        "{run:?}"
    );
    let run = cli(&["force-unlock", "a", "--namespace", "deploy-x"], token);
    assert_eq!(run.code, Some(4), "{run:?}");
    assert!(
        run.stderr
            .contains("may not force-unlock; it needs role admin"),
        "{run:?}"
    );
    let run = cli(
        &[
            "lock",
            "b",
            "--namespace",
            "ci",
            "--owner",
            "o",
            "--ttl",
            "10s",
        ],
        token,
    );
    assert_eq!(run.code, Some(0), "{run:?}");
    let run = cli(
        &[
            "lock",
            "b",
            "--namespace",
            "ci",
            "--owner",
            "o",
            "--ttl",
            "10s",
        ],
        "wrong",
    );
    assert_eq!(run.code, Some(2), "{run:?}");

    let bad = lockd(
        &[
            "token",
            "new",
            "--name",
            "x",
            "--namespaces",
            "a*b",
            "--role",
            "locker",
        ],
        &[],
    );
    assert_eq!(bad.code, Some(2), "{bad:?}");
    assert!(bad.one_stderr_line().contains("namespaces"), "{bad:?}");
    let bad = lockd(
        &[
            "token",
            "new",
            "--name",
            "x",
            "--namespaces",
            "a",
            "--role",
            "owner",
        ],
        &[],
    );
    assert_eq!(bad.code, Some(2), "{bad:?}");
    assert!(bad.one_stderr_line().contains("role \"owner\""), "{bad:?}");
}

#[test]
fn bad_token_entries_stop_the_server_naming_the_field() {
    let good = to_hex(&digest("t"));
    let cases = [
        (
            entry("ci", "t", r#"["ci"]"#, "locker").replace(&good, "abc"),
            "sha256 must be 64 hex digits",
        ),
        (
            entry("ci", "t", r#"["ci"]"#, "locker")
                .replace(&good, &good.replace(|c: char| c.is_ascii_digit(), "x")),
            "sha256",
        ),
        (
            entry("ci", "t", r#"["ci"]"#, "locker") + &entry("ci", "u", r#"["x"]"#, "reader"),
            "name \"ci\" is used twice",
        ),
        (
            entry("ci", "t", r#"["de*ploy"]"#, "locker"),
            "namespaces: namespace pattern \"de*ploy\"",
        ),
        (
            entry("ci", "t", r#"["ci"]"#, "owner"),
            "role: role \"owner\" is not one of reader, locker, admin",
        ),
    ];
    for (text, needle) in cases {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("lockd.toml"), &text).unwrap();
        let run = lockd_in_dir(
            Some(dir.path()),
            &["serve", "--store", "memory", "--listen", "127.0.0.1:0"],
            &[],
        );
        assert_eq!(run.code, Some(2), "{text}: {run:?}");
        assert!(run.stderr.contains("[[auth.tokens]]"), "{run:?}");
        assert!(run.stderr.contains(needle), "{needle}: {run:?}");
        assert!(!run.stderr.contains(&good), "{run:?}");
    }
}

/// A run at trace level, every kind of request authorized and refused:
/// no token appears in its log, while the refusals and the force-unlock are
/// logged with the token's name, the peer and the route.
#[test]
fn no_token_ever_reaches_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stderr.log");
    std::fs::write(dir.path().join("lockd.toml"), config()).unwrap();
    let unknown = "unknown-9e4c2b7a1d3f4e6b";
    let planted = "planted-namespace-51c0d2";
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lockd"))
        .args(["serve", "--store", "memory", "--listen", "127.0.0.1:0"])
        .current_dir(dir.path())
        .env("RUST_LOG", "trace")
        .env("LOCKD_AUTH_TOKEN", ROOT)
        .env_remove("LOCKD_STORE")
        .env_remove("LOCKD_SERVER")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let addr = loop {
        let mut line = String::new();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "lockd exited");
        if let Some(url) = line.trim().strip_prefix("lockd listening on http://") {
            break url.to_string();
        }
    };
    let url = format!("http://{addr}");
    let body = |ns: &str| {
        json!({"namespace": ns, "name": "n", "owner": "o", "ttl_ms": 60_000}).to_string()
    };
    let post = |token: Option<&str>, ns: &str| {
        request("POST", &url, "/v1/locks/lock", Some(&body(ns)), token).code
    };
    assert_eq!(post(Some(LOCKER), "ci"), 200);
    assert_eq!(post(Some(ROOT), planted), 200);
    assert_eq!(post(Some(LOCKER), "prod"), 403);
    assert_eq!(post(Some(READER), "ci"), 403);
    assert_eq!(post(Some(unknown), "ci"), 401);
    assert_eq!(post(None, "ci"), 401);
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    let head = |h: &str| {
        format!(
            "POST /v1/locks/lock HTTP/1.1\r\nHost: x\r\n{h}\r\nContent-Length: {}",
            body("deploy-x").len()
        )
    };
    assert_eq!(
        lockd_server::raw_request(
            addr,
            &head(&format!("dapr-api-token: {LOCKER}")),
            body("deploy-x").into()
        )
        .code,
        200
    );
    assert_eq!(
        lockd_server::raw_request(
            addr,
            &head(&format!("dapr-api-token: {unknown}")),
            body("ci").into()
        )
        .code,
        401
    );
    assert_eq!(
        lockd_server::raw_request(
            addr,
            &head(&format!("Authorization: Bearer {READER}")),
            body("ci").into()
        )
        .code,
        403
    );
    // (path, header token, answer): none of these opens a stream.
    for (path, token, code) in [
        (
            format!("/v1/events?namespace=prod&access_token={READER}"),
            Some(READER),
            403,
        ),
        (
            format!("/v1/events?namespace=prod&access_token={READER}"),
            None,
            403,
        ),
        (format!("/v1/events?access_token={unknown}"), None, 401),
        ("/metrics".to_string(), Some(READER), 403),
        ("/metrics".to_string(), None, 401),
    ] {
        assert_eq!(
            request("GET", &url, &path, None, token).code,
            code,
            "{path}"
        );
    }
    let force = json!({"namespace": "ci", "name": "n"}).to_string();
    let r = request(
        "POST",
        &url,
        "/v1/locks/force-unlock",
        Some(&force),
        Some(ROOT),
    );
    assert_eq!(r.code, 200, "{}", r.body);
    // An event stream opened by access_token, read to its first event.
    let stream = format!("/v1/events?access_token={WATCHER}");
    let server_url = url.clone();
    let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
    let reader = agent.get(format!("{server_url}{stream}")).call().unwrap();
    assert_eq!(reader.status().as_u16(), 200);
    drop(reader);

    // The refusal lines come before the answers; give the writer a moment.
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap();
        if text.contains("force-unlock requested") || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap_or(text);
    let found = |needle: &str| text.contains(needle);
    // The search finds what is there: the planted namespace is in the
    // request lines of this trace-level log.
    assert!(found(planted), "the log has no request lines: {text}");
    for secret in [ROOT, READER, LOCKER, WATCHER, unknown] {
        assert!(!found(secret), "a token is in the log");
        // Nor a piece of it long enough to matter.
        assert!(
            !found(&secret[secret.len() - 12..]),
            "part of a token is in the log"
        );
    }
    assert!(!found("Bearer "), "an Authorization header is in the log");
    let lines = |what: &str| text.lines().filter(|l| l.contains(what)).count();
    assert!(lines("request forbidden") >= 4, "{text}");
    assert!(lines("request unauthorized") >= 5, "{text}");
    for (what, token, route) in [
        (
            "request forbidden",
            "token=\"l\"",
            "route=\"/v1/locks/lock\"",
        ),
        ("request forbidden", "token=\"r\"", "route=\"/metrics\""),
        (
            "request unauthorized",
            "token=\"unknown\"",
            "route=\"/v1/events\"",
        ),
        (
            "force-unlock requested",
            "token=\"auth-token\"",
            "route=\"/v1/locks/force-unlock\"",
        ),
    ] {
        assert!(
            text.lines().any(|l| l.contains(what)
                && l.contains(token)
                && l.contains(route)
                && l.contains("peer=127.0.0.1:")),
            "no {what} line with {token} {route} and the peer: {text}"
        );
    }
}

/// Sends SIGHUP to `server`.
fn hangup(server: &Server) {
    let sent = std::process::Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

/// Waits up to 10 s for `done`.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "not within 10 s: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sighup_puts_new_tokens_in_force_and_refuses_a_file_that_would_open_the_server() {
    const FRESH: &str = "fresh-3b9d0c6e2a7f4d15b8e0";
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("lockd.toml");
    let log = dir.path().join("stderr.log");
    std::fs::write(&toml, config()).unwrap();
    // No --auth-token: the file's tokens are the only ones.
    let server = Server::start_logging_to(&log, Some(dir.path()), &["--store", "memory"]);
    let logged = |line: &str| std::fs::read_to_string(&log).unwrap().matches(line).count();
    assert_eq!(lock(&server, "ci", "before", LOCKER).code, 200);
    assert_eq!(lock(&server, "ci", "before", FRESH).code, 401);

    // A new file: its tokens in force, the removed ones refused.
    std::fs::write(&toml, entry("fresh", FRESH, r#"["ci"]"#, "locker")).unwrap();
    hangup(&server);
    eventually("the new token accepted", || {
        lock(&server, "ci", "after", FRESH).code == 200
    });
    assert_eq!(lock(&server, "ci", "after-2", LOCKER).code, 401);
    assert_eq!(lock(&server, "quiet", "x", FRESH).code, 403);
    assert_eq!(logged("tokens reloaded"), 1);

    // A file that does not parse, then one with no token at all (which
    // would let anyone call anything): each refused and logged, and the
    // tokens in force stay.
    let bad_files = [
        "[[auth.tokens]]\nname = \n".to_string(),
        "[limits]\nmax_ttl_ms = 60000\n".to_string(),
    ];
    for (i, bad) in bad_files.iter().enumerate() {
        std::fs::write(&toml, bad).unwrap();
        hangup(&server);
        eventually("the refusal logged", || {
            logged("tokens not reloaded") == i + 1
        });
        assert_eq!(lock(&server, "ci", "x", FRESH).code, 200, "{bad}");
        let anonymous = request(
            "POST",
            &server.url,
            "/v1/locks/get",
            Some(&json!({"namespace": "ci", "name": "x"}).to_string()),
            None,
        );
        assert_eq!(anonymous.code, 401, "{bad}");
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("restart the server to turn authentication off"),
        "{text}"
    );
    for token in [FRESH, LOCKER, READER] {
        assert!(!text.contains(token), "a token in the log:\n{text}");
    }
}
