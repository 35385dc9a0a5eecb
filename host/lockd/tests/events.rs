//! `GET /v1/events` (Server-Sent Events), `POST /v1/locks/force-unlock`,
//! `lockd force-unlock` and `lockd watch` against a real `lockd serve` on
//! the redb store.

mod lockd_server;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::lockd_server::{lockd, request, Background, Server};
use serde_json::{json, Value};

const REDB: [&str; 2] = ["--store", "redb:locks.redb"];

/// A `lockd serve --store redb:...` in a fresh directory, with `env`.
fn redb_server(extra: &[&str], env: &[(&str, &str)]) -> Server {
    let mut args = REDB.to_vec();
    args.extend_from_slice(extra);
    Server::start_in(None, &args, env)
}

/// What an event stream delivered: a `data:` event (with its `event:` name,
/// empty for plain events), a comment, or the end of the stream.
#[derive(Debug, PartialEq)]
enum Item {
    Event(String, Value),
    Comment(String),
    End,
}

/// An open `GET /v1/events` read on a thread, item by item.
struct EventStream {
    items: mpsc::Receiver<Item>,
    response: ureq::http::Response<()>,
}

impl EventStream {
    /// Opens `path` (with its query) on `server`, with `token` as a bearer
    /// header if given, and waits for the stream's opening comment: from
    /// then on, it sees every event.
    fn open(url: &str, path: &str, token: Option<&str>) -> EventStream {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut req = agent.get(format!("{url}{path}"));
        if let Some(t) = token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        let response = req.call().unwrap();
        let (parts, body) = response.into_parts();
        let response = ureq::http::Response::from_parts(parts, ());
        let (tx, items) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(body.into_reader());
            let (mut name, mut data) = (String::new(), String::new());
            let mut line = String::new();
            loop {
                line.clear();
                match lines.read_line(&mut line) {
                    Ok(0) | Err(_) => {
                        let _ = tx.send(Item::End);
                        return;
                    }
                    Ok(_) => {}
                }
                let field = line.trim_end_matches(['\r', '\n']);
                if let Some(comment) = field.strip_prefix(':') {
                    if tx.send(Item::Comment(comment.trim().to_string())).is_err() {
                        return;
                    }
                } else if let Some(v) = field.strip_prefix("event: ") {
                    name = v.to_string();
                } else if let Some(v) = field.strip_prefix("data: ") {
                    data = v.to_string();
                } else if field.is_empty() && !data.is_empty() {
                    let value = serde_json::from_str(&data)
                        .unwrap_or_else(|e| panic!("event data is not JSON ({e}): {data}"));
                    data.clear();
                    if tx
                        .send(Item::Event(std::mem::take(&mut name), value))
                        .is_err()
                    {
                        return;
                    }
                }
            }
        });
        let stream = EventStream { items, response };
        if stream.response.status() == 200 {
            assert_eq!(
                stream.next(Duration::from_secs(10)),
                Item::Comment("lockd events".to_string())
            );
        }
        stream
    }

    fn next(&self, within: Duration) -> Item {
        self.items
            .recv_timeout(within)
            .unwrap_or_else(|_| panic!("nothing on the event stream within {within:?}"))
    }

    /// The next event, skipping heartbeats.
    fn next_event(&self) -> Value {
        loop {
            match self.next(Duration::from_secs(10)) {
                Item::Event(name, value) => {
                    assert_eq!(name, "", "{value}");
                    return value;
                }
                Item::Comment(_) => continue,
                Item::End => panic!("the event stream ended"),
            }
        }
    }

    /// Asserts that no event arrives for `quiet`.
    fn assert_quiet(&self, quiet: Duration) {
        let deadline = Instant::now() + quiet;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.items.recv_timeout(left) {
                Ok(Item::Comment(_)) => {}
                Ok(other) => panic!("unexpected {other:?}"),
                Err(_) => return,
            }
        }
    }
}

/// `(type, namespace, name, owner, fencing_token)` of an event; checks that
/// it has exactly the documented fields.
fn summary(e: &Value) -> (String, String, String, String, u64) {
    let keys: Vec<&str> = e.as_object().unwrap().keys().map(String::as_str).collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        [
            "at_ms",
            "fencing_token",
            "mode",
            "name",
            "namespace",
            "owner",
            "type"
        ],
        "{e}"
    );
    assert!(
        ["exclusive", "shared", "permit", "leader"].contains(&e["mode"].as_str().unwrap()),
        "{e}"
    );
    let s = |k: &str| e[k].as_str().unwrap().to_string();
    (
        s("type"),
        s("namespace"),
        s("name"),
        s("owner"),
        e["fencing_token"].as_u64().unwrap(),
    )
}

fn ev(
    kind: &str,
    ns: &str,
    name: &str,
    owner: &str,
    token: u64,
) -> (String, String, String, String, u64) {
    (
        kind.to_string(),
        ns.to_string(),
        name.to_string(),
        owner.to_string(),
        token,
    )
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn lock(server: &Server, ns: &str, name: &str, owner: &str) -> u64 {
    let r = server.post_json(
        "/v1/locks/lock",
        &json!({"namespace": ns, "name": name, "owner": owner, "ttl_ms": 60_000}),
    );
    assert_eq!((r.code, r.status()), (200, "acquired"), "{}", r.body);
    r.json["fencing_token"].as_u64().unwrap()
}

#[test]
fn events_arrive_in_order_and_filters_hold() {
    let server = redb_server(&[], &[]);
    let filtered = EventStream::open(&server.url, "/v1/events?namespace=ns1&prefix=job", None);
    let everything = EventStream::open(&server.url, "/v1/events", None);
    assert_eq!(
        filtered.response.headers()["content-type"],
        "text/event-stream"
    );
    let before = now_ms();

    let t1 = lock(&server, "ns1", "job-1", "o1");
    let other = lock(&server, "ns1", "other", "o1");
    let t2 = lock(&server, "ns2", "job-1", "o1");
    let r = server.post_json(
        "/v1/locks/extend",
        &json!({"namespace": "ns1", "name": "job-1", "owner": "o1", "ttl_ms": 30_000}),
    );
    assert_eq!(r.code, 200, "{}", r.body);
    let r = server.post_json(
        "/v1/locks/unlock",
        &json!({"namespace": "ns1", "name": "job-1", "owner": "o1"}),
    );
    assert_eq!(r.code, 200, "{}", r.body);
    let t3 = lock(&server, "ns1", "job-1", "o2");
    let r = server.post_json(
        "/v1/locks/force-unlock",
        &json!({"namespace": "ns1", "name": "job-1"}),
    );
    assert_eq!(r.code, 200, "{}", r.body);

    let expected = [
        ev("acquired", "ns1", "job-1", "o1", t1),
        ev("extended", "ns1", "job-1", "o1", t1),
        ev("released", "ns1", "job-1", "o1", t1),
        ev("acquired", "ns1", "job-1", "o2", t3),
        ev("force_released", "ns1", "job-1", "o2", t3),
    ];
    let mut last_at = before;
    for want in &expected {
        let got = filtered.next_event();
        assert_eq!(&summary(&got), want, "{got}");
        let at = got["at_ms"].as_u64().unwrap();
        assert!(at >= last_at && at <= now_ms(), "at_ms {at} out of order");
        last_at = at;
    }
    // Nothing else passes the filters: not ns1/other, not ns2/job-1.
    filtered.assert_quiet(Duration::from_millis(300));

    // Without filters, every namespace and name, in the order they happened.
    let all: Vec<_> = (0..7).map(|_| summary(&everything.next_event())).collect();
    assert_eq!(
        all,
        [
            ev("acquired", "ns1", "job-1", "o1", t1),
            ev("acquired", "ns1", "other", "o1", other),
            ev("acquired", "ns2", "job-1", "o1", t2),
            ev("extended", "ns1", "job-1", "o1", t1),
            ev("released", "ns1", "job-1", "o1", t1),
            ev("acquired", "ns1", "job-1", "o2", t3),
            ev("force_released", "ns1", "job-1", "o2", t3),
        ]
    );

    // Bad queries are refused before any stream opens.
    for (query, needle) in [
        ("?names=x", "unknown query parameter \"names\""),
        ("?prefix=a&prefix=b", "given twice"),
        ("?prefix=%zz", "bad percent-encoding"),
    ] {
        let r = server.get(&format!("/v1/events{query}"));
        assert_eq!((r.code, r.status()), (400, "invalid_argument"), "{query}");
        assert!(r.message().contains(needle), "{query}: {}", r.body);
    }
    let r = request("POST", &server.url, "/v1/events", Some("{}"), None);
    assert_eq!((r.code, r.header("allow")), (405, Some("GET")));
}

#[test]
fn heartbeats_and_a_closed_client_ends_its_stream() {
    let server = redb_server(&["--events-heartbeat", "150ms"], &[]);
    assert_eq!(server.metric("lockd_event_streams"), 0);
    // Before the stream opens, so that the lower bound below holds however
    // long the requests in between take.
    let started = Instant::now();
    let stream = EventStream::open(&server.url, "/v1/events?namespace=quiet", None);
    assert_eq!(server.metric("lockd_event_streams"), 1);
    for _ in 0..3 {
        assert_eq!(
            stream.next(Duration::from_secs(2)),
            Item::Comment("heartbeat".to_string())
        );
    }
    let elapsed = started.elapsed();
    // Three beats 150 ms apart: not sooner, and not 15 s apart.
    assert!(
        elapsed >= Duration::from_millis(400) && elapsed < Duration::from_secs(5),
        "{elapsed:?}"
    );
    // The client hangs up: the stream's task ends (by the next heartbeat at
    // the latest).
    drop(stream);
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.metric("lockd_event_streams") != 0 {
        assert!(Instant::now() < deadline, "the stream outlived its client");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn events_need_the_token_as_a_header_or_access_token() {
    let server = redb_server(&["--auth-token", "s3cret"], &[]);
    for path in [
        "/v1/events",
        "/v1/events?access_token=wrong",
        "/v1/events?namespace=a&access_token=",
    ] {
        let r = request("GET", &server.url, path, None, None);
        assert_eq!((r.code, r.status()), (401, "unauthorized"), "{path}");
        assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    }
    // The query parameter is for /v1/events only.
    let r = request(
        "GET",
        &server.url,
        "/v1/locks?access_token=s3cret",
        None,
        None,
    );
    assert_eq!(r.code, 401, "{}", r.body);
    let by_header = EventStream::open(&server.url, "/v1/events", Some("s3cret"));
    let by_query = EventStream::open(&server.url, "/v1/events?access_token=s3cret", None);
    let r = request(
        "POST",
        &server.url,
        "/v1/locks/lock",
        Some(r#"{"name":"a","owner":"o","ttl_ms":1000}"#),
        Some("s3cret"),
    );
    assert_eq!(r.code, 200);
    for stream in [by_header, by_query] {
        assert_eq!(summary(&stream.next_event()).0, "acquired");
    }
}

#[test]
fn force_unlock_over_rest() {
    let server = redb_server(&[], &[]);
    let token = lock(&server, "default", "deploy", "w1");
    // A waiter queues behind w1.
    let url = server.url.clone();
    let waiter = std::thread::spawn(move || {
        request(
            "POST",
            &url,
            "/v1/locks/lock",
            Some(r#"{"name":"deploy","owner":"w2","ttl_ms":60000,"wait_ms":30000}"#),
            None,
        )
    });
    server.wait_for_waiters(1);
    let r = server.post_json("/v1/locks/force-unlock", &json!({"name": "deploy"}));
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(
        r.json,
        json!({"status": "released", "owner": "w1", "fencing_token": token})
    );
    // The head of the queue gets it next, with a higher token.
    let granted = waiter.join().unwrap();
    assert_eq!(granted.code, 200, "{}", granted.body);
    assert!(granted.json["fencing_token"].as_u64().unwrap() > token);
    let r = server.post_json("/v1/locks/get", &json!({"name": "deploy"}));
    assert_eq!(r.json["owner"], "w2");
    // The old holder has lost it.
    let r = server.post_json(
        "/v1/locks/extend",
        &json!({"name": "deploy", "owner": "w1", "ttl_ms": 1000}),
    );
    assert_eq!((r.code, r.status()), (409, "not_owner"), "{}", r.body);

    // A free lock: 409 not_held.
    let r = server.post_json(
        "/v1/locks/force-unlock",
        &json!({"namespace": "other", "name": "deploy"}),
    );
    assert_eq!((r.code, r.status()), (409, "not_held"), "{}", r.body);
    // Bad input.
    for body in [r#"{"name":"deploy","owner":"w2"}"#, r#"{}"#, "{"] {
        let r = server.post("/v1/locks/force-unlock", body);
        assert_eq!((r.code, r.status()), (400, "invalid_argument"), "{body}");
    }
    assert_eq!(
        server.metric("lockd_operations_total{op=\"force_unlock\",outcome=\"ok\"}"),
        1
    );

    // With a token configured, it needs the token.
    let guarded = Server::with_token("t0k");
    let r = request(
        "POST",
        &guarded.url,
        "/v1/locks/force-unlock",
        Some(r#"{"name":"deploy"}"#),
        None,
    );
    assert_eq!((r.code, r.status()), (401, "unauthorized"));
    let r = guarded.post("/v1/locks/force-unlock", r#"{"name":"deploy"}"#);
    assert_eq!((r.code, r.status()), (409, "not_held"));
}

#[test]
fn force_unlock_from_the_cli() {
    let server = redb_server(&[], &[]);
    let token = lock(&server, "ops", "db-migrate", "job-7");
    let args = |ns: &str| {
        vec![
            "force-unlock".to_string(),
            "db-migrate".to_string(),
            "--namespace".to_string(),
            ns.to_string(),
            "--server".to_string(),
            server.url.clone(),
        ]
    };
    let run = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        lockd(&args, &[])
    };
    let out = run(args("ops"));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(
        out.stdout.trim(),
        format!("force-released db-migrate from job-7 (token {token})")
    );
    let out = run(args("ops"));
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    assert_eq!(
        out.one_stderr_line(),
        "lockd: db-migrate is not held; nothing to release"
    );
    // --format json prints the server's body.
    let again = lock(&server, "ops", "db-migrate", "job-8");
    let mut json_args = args("ops");
    json_args.extend(["--format".to_string(), "json".to_string()]);
    let out = run(json_args);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let body: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(
        body,
        json!({"status": "released", "owner": "job-8", "fencing_token": again})
    );
}

/// A `lockd watch` child, killed on drop, whose stdout lines arrive on a
/// channel.
struct Watch(Background);

impl Watch {
    fn start(server: &Server, args: &[&str]) -> Watch {
        let before = server.metric("lockd_event_streams");
        let mut all = vec!["watch", "--server", &server.url];
        all.extend_from_slice(args);
        let watch = Background::reading(&all);
        // Subscribed once the server counts its stream.
        let deadline = Instant::now() + Duration::from_secs(30);
        while server.metric("lockd_event_streams") == before {
            assert!(Instant::now() < deadline, "lockd watch never connected");
            std::thread::sleep(Duration::from_millis(10));
        }
        Watch(watch)
    }

    fn line(&self) -> String {
        self.0.next_line(Duration::from_secs(10))
    }
}

#[test]
fn lockd_watch_prints_events() {
    let server = redb_server(&[], &[]);
    let text = Watch::start(&server, &["--namespace", "ci", "--prefix", "build"]);
    let json = Watch::start(&server, &["--format", "json"]);
    let t1 = lock(&server, "ci", "build-42", "runner-1");
    lock(&server, "ci", "test-1", "runner-1");
    let r = server.post_json(
        "/v1/locks/force-unlock",
        &json!({"namespace": "ci", "name": "build-42"}),
    );
    assert_eq!(r.code, 200, "{}", r.body);

    let line = text.line();
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        words[1..],
        [
            "acquired",
            "ci/build-42",
            "owner",
            "runner-1",
            "token",
            &t1.to_string()
        ],
        "{line}"
    );
    assert!(words[0].ends_with('Z') && words[0].contains('T'), "{line}");
    let line = text.line();
    assert!(
        line.contains(" force_released ci/build-42 owner runner-1 token "),
        "{line}"
    );
    // test-1 is filtered out.
    assert!(text.0.line_within(Duration::from_millis(300)).is_none());

    let kinds: Vec<(String, String)> = (0..3)
        .map(|_| {
            let v: Value = serde_json::from_str(&json.line()).unwrap();
            (
                v["type"].as_str().unwrap().to_string(),
                v["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("acquired".to_string(), "build-42".to_string()),
            ("acquired".to_string(), "test-1".to_string()),
            ("force_released".to_string(), "build-42".to_string()),
        ]
    );

    // A refused stream is one line and exit 2.
    let out = lockd(&["watch", "--server", &server.url, "--nope"], &[]);
    assert_eq!(out.code, Some(2));
    let guarded = Server::with_token("tk");
    let out = lockd(&["watch", "--server", &guarded.url], &[]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("401 unauthorized"), "{}", out.stderr);
}

/// A client that stops reading while events flow is sent `lagged` and
/// disconnected, and locking goes on at full speed meanwhile.
#[test]
fn a_client_that_does_not_read_lags_and_is_disconnected() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = rt
        .block_on(::lockd_server::bind(::lockd_server::ServeOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            store: ::lockd_server::store::StoreSpec::Redb(dir.path().join("locks.redb")),
            config: ::lockd_server::config::LockdConfig::default(),
            auth_token: None,
            events_heartbeat: ::lockd_server::api::HEARTBEAT,
            extensions: Vec::new(),
        }))
        .unwrap();
    let (addr, service) = (server.addr(), server.service().clone());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    rt.spawn(server.run(async {
        let _ = stopped.await;
    }));

    // A socket with a small receive buffer, so that the bytes in flight are
    // bounded by the server's send buffer.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&addr.into()).unwrap();
    let mut client: TcpStream = socket.into();
    client
        .write_all(b"GET /v1/events?namespace=lag HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    // Wait for the head and the opening comment: the stream is subscribed.
    client
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !String::from_utf8_lossy(&head).contains("lockd events") {
        client.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
        assert!(head.len() < 4096, "{}", String::from_utf8_lossy(&head));
    }

    // Enough events to fill every buffer between the stream and this
    // socket, plus the broadcast's 4096: the kernel's largest send buffer,
    // this socket's (doubled) receive buffer and hyper's buffers, at no
    // more than 80 bytes a frame.
    let wmem_max: usize = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem")
        .ok()
        .and_then(|s| s.split_whitespace().nth(2)?.parse().ok())
        .unwrap_or(4 << 20);
    let in_flight_bytes = wmem_max + 2 * 4096 + (4 << 20);
    let events = in_flight_bytes / 80 + lockd_core::EVENT_BUFFER + 1024;
    let pairs = events / 2 + 1;
    let started = Instant::now();
    rt.block_on(async {
        let options = lockd_core::LockOptions {
            durability: lockd_core::Durability::Ephemeral,
            ..Default::default()
        };
        for i in 0..pairs {
            let name = format!("n{}", i % 64);
            let grant = service
                .lock("lag", &name, "o", 60_000, options)
                .await
                .unwrap();
            service
                .unlock("lag", &name, "o", Some(grant.fencing_token))
                .await
                .unwrap();
        }
    });
    let produced = started.elapsed();

    // Now read: a prefix of the events, then `lagged`, then the end.
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).unwrap();
    let text = String::from_utf8_lossy(&rest);
    let data_lines = text.matches("\ndata: {\"type\":\"acquired\"").count()
        + text.matches("\ndata: {\"type\":\"released\"").count();
    let lagged_at = text
        .find("event: lagged\r\n")
        .or_else(|| text.find("event: lagged\n"))
        .unwrap_or_else(|| panic!("no lagged event after {data_lines} events"));
    let after = &text[lagged_at..];
    assert!(
        after.contains("data: {\"type\":\"lagged\",\"missed\":"),
        "{after:.200}"
    );
    // Nothing but the chunked terminator after it.
    assert!(!after.contains("\"acquired\""), "{after:.500}");
    assert!(
        data_lines < 2 * pairs,
        "{data_lines} of {} events",
        2 * pairs
    );
    assert!(data_lines > 0);
    // The stream's task is gone.
    let open = rt.block_on(async {
        for _ in 0..500 {
            let metrics = metrics_of(addr).await;
            if metrics.contains("lockd_event_streams 0\n") {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    });
    assert!(open, "the lagged stream is still counted");
    eprintln!("{pairs} lock/unlock pairs in {produced:?} with a stalled event stream");
    let _ = stop.send(());
}

/// `/metrics` over a plain socket.
async fn metrics_of(addr: std::net::SocketAddr) -> String {
    tokio::task::spawn_blocking(move || {
        lockd_server::request("GET", &format!("http://{addr}"), "/metrics", None, None).body
    })
    .await
    .unwrap()
}
