//! A draining shutdown of a real `lockd serve` (throwaway store and port):
//! on SIGTERM a client waiting in a lock's queue gets a definite 503
//! `unavailable` (not a connection that just closes), event streams end,
//! the process exits 0 within the bound, and a persistent lock held before
//! is held after a restart on the same store, by its owner under its
//! token. A request still in flight at the bound is cut, and the exit is 1.
//!
//! The negative controls show the test can fail: the classifier of a
//! waiter's outcome tells a connection closed or reset without an answer
//! from an answer, and a server killed with SIGKILL leaves its waiter
//! exactly that way.

mod lockd_server;

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::lockd_server::Server;

/// The bound the tests give the shutdown.
const BOUND: Duration = Duration::from_secs(5);

/// What a client waiting on the server got.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// A whole HTTP response: its code and body.
    Answered { code: u16, body: Value },
    /// The connection ended without a whole response (closed or reset):
    /// the client cannot tell whether its lock was granted.
    Lost(String),
}

/// Classifies what a client read before its connection ended (`ended`:
/// how it ended, `Ok` for a clean close).
fn classify(read: &[u8], ended: std::io::Result<()>) -> Outcome {
    let lost = |why: String| match &ended {
        Ok(()) => Outcome::Lost(format!("{why}; the connection closed")),
        Err(e) => Outcome::Lost(format!("{why}; {e}")),
    };
    let text = String::from_utf8_lossy(read);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return lost(format!("no whole response head in {} bytes", read.len()));
    };
    let code = head.split(' ').nth(1).and_then(|c| c.parse::<u16>().ok());
    let length = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())?
    });
    match (code, length) {
        (Some(code), Some(length)) if body.len() >= length => Outcome::Answered {
            code,
            body: serde_json::from_str(&body[..length]).unwrap_or(Value::Null),
        },
        _ => lost(format!("an incomplete response: {text:?}")),
    }
}

/// Sends `head` and `body` on a new connection and reads until the
/// connection ends (or `limit`).
fn exchange(addr: SocketAddr, head: &str, body: &str, limit: Duration) -> Outcome {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(limit)).unwrap();
    let request = format!("{head}\r\nContent-Length: {}\r\n\r\n{body}", body.len());
    stream.write_all(request.as_bytes()).unwrap();
    let mut read = Vec::new();
    let ended = stream.read_to_end(&mut read).map(drop);
    classify(&read, ended)
}

/// `POST /v1/locks/lock` for `owner`, waiting up to a minute, in a thread.
fn wait_for_lock(addr: SocketAddr, owner: &str) -> JoinHandle<(Outcome, Instant)> {
    let body = json!({"name": "job", "owner": owner, "ttl_ms": 600_000, "wait_ms": 60_000});
    std::thread::spawn(move || {
        let head = "POST /v1/locks/lock HTTP/1.1\r\nHost: lockd\r\nContent-Type: application/json";
        let outcome = exchange(addr, head, &body.to_string(), Duration::from_secs(120));
        (outcome, Instant::now())
    })
}

fn sigterm(server: &Server) -> Instant {
    let sent = Instant::now();
    let status = Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    sent
}

/// Waits for the process to exit: its exit code, and when it exited.
fn exit_code(server: &mut Server) -> (Option<i32>, Instant) {
    let status = server.wait_exit();
    (status.code(), Instant::now())
}

fn serve_redb(dir: &Path, log: &Path) -> Server {
    let bound = format!("{}s", BOUND.as_secs());
    Server::start_logging_to(
        log,
        Some(dir),
        &["--store", "redb:locks.redb", "--shutdown-timeout", &bound],
    )
}

/// An event stream's connection: its reader runs until the stream ends.
fn follow_events(addr: SocketAddr) -> JoinHandle<std::io::Result<usize>> {
    std::thread::spawn(move || {
        let mut stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(Duration::from_secs(120)))?;
        stream.write_all(b"GET /v1/events HTTP/1.1\r\nHost: lockd\r\n\r\n")?;
        let mut read = Vec::new();
        stream.read_to_end(&mut read)
    })
}

#[test]
fn sigterm_answers_the_waiter_503_exits_0_and_the_held_lock_survives() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("lockd.log");
    let mut server = serve_redb(dir.path(), &log);
    let held = server.post_json(
        "/v1/locks/lock",
        &json!({"name": "job", "owner": "holder", "ttl_ms": 600_000}),
    );
    assert_eq!(
        (held.code, held.status()),
        (200, "acquired"),
        "{}",
        held.body
    );
    let token = held.json["fencing_token"].as_u64().unwrap();
    let waiter = wait_for_lock(server.addr, "waiter");
    server.wait_for_waiters(1);
    let events = follow_events(server.addr);
    std::thread::sleep(Duration::from_millis(200));

    let sent = sigterm(&server);
    let (outcome, answered_at) = waiter.join().unwrap();
    let Outcome::Answered { code, body } = &outcome else {
        panic!("the waiter got no answer: {outcome:?}");
    };
    assert_eq!(*code, 503, "{body}");
    assert_eq!(body["status"], "unavailable", "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("shutting down; retry elsewhere"), "{body}");
    assert!(
        answered_at - sent < BOUND,
        "answered after {:?}",
        answered_at - sent
    );
    let (code, exited_at) = exit_code(&mut server);
    assert_eq!(code, Some(0));
    let exited = exited_at - sent;
    assert!(exited < BOUND, "exited after {exited:?}");
    events
        .join()
        .unwrap()
        .expect("the event stream ends with the server");
    eprintln!(
        "waiter answered {:?} and process exited {exited:?} after SIGTERM",
        answered_at - sent
    );
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("shutting down: no new connections"),
        "{logged}"
    );
    assert!(
        logged.contains("shut down: every request answered"),
        "{logged}"
    );
    assert!(logged.contains("waiters_answered=1"), "{logged}");
    // A clean close: the store's log was checkpointed into its file.
    let wal: Vec<_> = std::fs::read_dir(dir.path().join("locks.redb-wal"))
        .unwrap()
        .collect();
    assert!(
        wal.is_empty(),
        "the log is not empty after the close: {wal:?}"
    );

    let again = serve_redb(dir.path(), &dir.path().join("again.log"));
    let got = again.post_json("/v1/locks/get", &json!({"name": "job"}));
    assert_eq!((got.code, got.status()), (200, "found"), "{}", got.body);
    assert_eq!(got.json["owner"], "holder", "{}", got.body);
    assert_eq!(
        got.json["fencing_token"].as_u64(),
        Some(token),
        "{}",
        got.body
    );
    // The waiter left the queue for good: nothing waits, nothing changed hands.
    assert_eq!(again.metric("lockd_waiters"), 0);
}

#[test]
fn livez_and_readyz_answer_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("lockd.log");
    let server = Server::start_logging_to(
        &log,
        Some(dir.path()),
        &["--store", "memory", "--auth-token", "secret-token"],
    );
    let probe = |path: &str| lockd_server::request("GET", &server.url, path, None, None);
    let live = probe("/livez");
    assert_eq!((live.code, live.status()), (200, "ok"), "{}", live.body);
    let ready = probe("/readyz");
    assert_eq!((ready.code, ready.status()), (200, "ok"), "{}", ready.body);
    assert_eq!(ready.json["reasons"], json!([]));
    // The probes answer without a token; the rest does not.
    assert_eq!(probe("/metrics").code, 401);
    let metrics = lockd_server::request("GET", &server.url, "/metrics", None, Some("secret-token"));
    let value = |series| lockd_server::metric_value(&metrics.body, series);
    assert_eq!(value("lockd_ready"), 1);
    assert_eq!(value("lockd_not_ready{reason=\"shutting_down\"}"), 0);
    assert_eq!(value("lockd_not_ready"), 0);
}

/// Past the bound, the process exits anyway, with code 1, saying so: here
/// a client that sent half a request head keeps its connection open.
#[test]
fn a_request_still_in_flight_at_the_bound_is_cut_and_the_exit_is_1() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("lockd.log");
    let mut server = Server::start_logging_to(
        &log,
        Some(dir.path()),
        &["--store", "memory", "--shutdown-timeout", "1s"],
    );
    let mut slow = TcpStream::connect(server.addr).unwrap();
    slow.write_all(b"POST /v1/locks/lock HTTP/1.1\r\nHost: lockd\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let sent = sigterm(&server);
    let (code, exited_at) = exit_code(&mut server);
    assert_eq!(code, Some(1));
    let exited = exited_at - sent;
    assert!(
        exited >= Duration::from_millis(700) && exited < Duration::from_secs(3),
        "exited after {exited:?}"
    );
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("connections_cut=1"), "{logged}");
    assert!(logged.contains("exiting with code 1"), "{logged}");
}

/// The negative control of the server: killed outright (as before the
/// drain, a process that stops without answering), the waiter's connection
/// ends with no answer, and the classifier says so.
#[test]
fn a_killed_server_leaves_its_waiter_without_an_answer() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("lockd.log");
    let mut server = serve_redb(dir.path(), &log);
    let held = server.post_json(
        "/v1/locks/lock",
        &json!({"name": "job", "owner": "holder", "ttl_ms": 600_000}),
    );
    assert_eq!(held.code, 200, "{}", held.body);
    let waiter = wait_for_lock(server.addr, "waiter");
    server.wait_for_waiters(1);
    server.kill();
    let (outcome, _) = waiter.join().unwrap();
    assert!(matches!(outcome, Outcome::Lost(_)), "{outcome:?}");
}

/// The negative control of the classifier: a reset, a close before any
/// byte, and a response cut short are not answers; a whole one is.
#[test]
fn the_classifier_tells_a_reset_from_an_answer() {
    let answer = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
                   content-length: 24\r\n\r\n{\"status\":\"unavailable\"}";
    assert_eq!(
        classify(answer, Ok(())),
        Outcome::Answered {
            code: 503,
            body: json!({"status": "unavailable"})
        }
    );
    let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
    assert!(matches!(classify(b"", Err(reset)), Outcome::Lost(_)));
    assert!(matches!(classify(b"", Ok(())), Outcome::Lost(_)));
    assert!(matches!(classify(&answer[..60], Ok(())), Outcome::Lost(_)));
    assert!(matches!(
        classify(&answer[..answer.len() - 3], Ok(())),
        Outcome::Lost(_)
    ));
    // Over a socket: a peer that closes without answering, and one that
    // answers, are told apart the same way.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let peer = std::thread::spawn(move || {
        for reply in [&b""[..], &answer[..]] {
            let (mut conn, _) = listener.accept().unwrap();
            let mut head = [0u8; 512];
            let _ = conn.read(&mut head);
            conn.write_all(reply).unwrap();
        }
    });
    let head = "POST /v1/locks/lock HTTP/1.1\r\nHost: x";
    let closed = exchange(addr, head, "{}", Duration::from_secs(10));
    assert!(matches!(closed, Outcome::Lost(_)), "{closed:?}");
    let answered = exchange(addr, head, "{}", Duration::from_secs(10));
    assert!(
        matches!(answered, Outcome::Answered { code: 503, .. }),
        "{answered:?}"
    );
    peer.join().unwrap();
}

/// While the store opens, the listener answers probes already: `/livez`
/// 200, `/readyz` 503 `recovering`, the API 503 `unavailable`. Here the
/// store is an etcd that accepts connections and never answers, so the
/// start lasts its dial timeout and then fails (exit 2).
#[test]
fn probes_answer_while_the_store_opens() {
    let dir = tempfile::tempdir().unwrap();
    // Accepts (the kernel does) and never answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let etcd = format!("etcd:http://{}", silent.local_addr().unwrap());
    std::fs::write(
        dir.path().join("lockd.toml"),
        "[etcd]\ndial_timeout_ms = 4000\n",
    )
    .unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockd"))
        .args(["serve", "--listen", &listen, "--store", &etcd])
        .current_dir(dir.path())
        .env_remove("LOCKD_STORE")
        .env_remove("LOCKD_AUTH_TOKEN")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The listener is up at once, though the store is not.
    let deadline = Instant::now() + Duration::from_secs(3);
    while TcpStream::connect(&listen).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {listen}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let url = format!("http://{listen}");
    let get = |path: &str| lockd_server::request("GET", &url, path, None, None);
    let live = get("/livez");
    assert_eq!((live.code, live.status()), (200, "ok"), "{}", live.body);
    let ready = get("/readyz");
    assert_eq!(ready.code, 503, "{}", ready.body);
    let reason = ready.json["reasons"][0].as_str().unwrap_or_default();
    assert!(reason.starts_with("recovering"), "{}", ready.body);
    let api = get("/v1/locks");
    assert_eq!(
        (api.code, api.status()),
        (503, "unavailable"),
        "{}",
        api.body
    );
    assert!(api.message().contains("starting"), "{}", api.body);
    let status = child.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(2),
        "the start fails once etcd stays silent"
    );
    drop(silent);
}
