//! `lockd exec NAME -- CMD` against a real `lockd serve`: CMD's environment,
//! FIFO order between two execs, exit codes 75 (not taken) and 76 (lost),
//! CMD's status passed through, keep-alive, and a server stopped with
//! SIGSTOP past the TTL: CMD gets SIGTERM before the lock's expiry.

mod lockd_server;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::lockd_server::{lockd, now_ms, read_ms, wait_for_file, Background, Run, Server};
use serde_json::json;

const GET: &str = "/v1/locks/get";
const LOCK: &str = "/v1/locks/lock";

/// The TTL of the tests that need keep-alive. `lockd exec` renews a third of
/// the TTL after the last renewal and gives up a tenth of it before the
/// expiry, so a renewal has about half the TTL to land: with 400 ms, 200 ms,
/// which a busy 2-core machine once missed (exit 76). What these tests prove
/// does not depend on the TTL's size.
const KEEP_ALIVE_TTL: &str = "2s";
const KEEP_ALIVE_TTL_MS: u64 = 2_000;

/// `lockd exec ARGS --server URL -- sh -c SCRIPT` in `dir`, waited for.
fn exec(server: &Server, dir: &Path, args: &[&str], script: &str) -> Run {
    let dir_s = dir.to_str().unwrap();
    let mut all = vec!["exec", "--server", &server.url];
    all.extend_from_slice(args);
    all.extend(["--", "sh", "-c", script, "sh", dir_s]);
    lockd(&all, &[])
}

/// `lockd exec --server URL ARGS -- sh -c SCRIPT sh DIR` in the background.
fn background(server: &Server, dir: &Path, args: &[&str], script: &str) -> Background {
    let mut all = vec!["exec", "--server", &server.url];
    all.extend_from_slice(args);
    all.extend(["--", "sh", "-c", script, "sh", dir.to_str().unwrap()]);
    Background::start(&all)
}

#[test]
fn cmd_sees_its_lock_and_the_lock_is_released_after() {
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let run = exec(
        &server,
        dir.path(),
        &["job", "--namespace", "ns"],
        r#"echo "$LOCKD_FENCING_TOKEN $LOCKD_OWNER $LOCKD_LOCK_NAME $LOCKD_NAMESPACE" > "$1/env"; echo out"#,
    );
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.stdout, "out\n", "CMD's stdout is lockd exec's");
    assert!(run.stderr.is_empty(), "{run:?}");
    let env = std::fs::read_to_string(dir.path().join("env")).unwrap();
    let words: Vec<&str> = env.split_whitespace().collect();
    assert_eq!(words.len(), 4, "{env:?}");
    let token: u64 = words[0].parse().unwrap();
    assert!(token > 0);
    assert!(
        words[1].starts_with("exec-") && words[1].len() == 37,
        "{env:?}"
    );
    assert_eq!(&words[2..], ["job", "ns"]);
    // Released: a fresh lock gets a higher token at once.
    let free = server.post_json(GET, &json!({"namespace": "ns", "name": "job"}));
    assert_eq!(free.code, 404, "{}", free.body);
    let next = server.post_json(
        LOCK,
        &json!({"namespace": "ns", "name": "job", "owner": "o", "ttl_ms": 1000}),
    );
    assert!(next.json["fencing_token"].as_u64().unwrap() > token);
}

#[test]
fn cmd_status_is_passed_through() {
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let run = exec(&server, dir.path(), &["s"], "exit 7");
    assert_eq!(run.code, Some(7), "{run:?}");
    assert!(run.stderr.is_empty(), "{run:?}");
    let run = exec(&server, dir.path(), &["s"], "kill -TERM $$");
    assert_eq!(run.code, Some(128 + 15), "{run:?}");
    // A command that does not exist: 127, and the lock is released.
    let run = lockd(
        &[
            "exec",
            "s",
            "--server",
            &server.url,
            "--",
            "/nonexistent/lockd-test-cmd",
        ],
        &[],
    );
    assert_eq!(run.code, Some(127), "{run:?}");
    assert!(run.one_stderr_line().starts_with("lockd exec: cannot run"));
    assert_eq!(server.post_json(GET, &json!({"name": "s"})).code, 404);
}

#[test]
fn busy_exits_75_and_cmd_never_starts() {
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let held = server.post_json(
        LOCK,
        &json!({"name": "b", "owner": "someone", "ttl_ms": 60_000}),
    );
    assert_eq!(held.code, 200);
    let run = exec(
        &server,
        dir.path(),
        &["b", "--wait", "0"],
        r#"touch "$1/started""#,
    );
    assert_eq!(run.code, Some(75), "{run:?}");
    let line = run.one_stderr_line();
    assert!(
        line.starts_with("lockd exec: cannot take b: b is busy"),
        "{line}"
    );
    assert!(!dir.path().join("started").exists());
    // With a short wait, the same.
    let started = Instant::now();
    let run = exec(
        &server,
        dir.path(),
        &["b", "--wait", "300ms"],
        r#"touch "$1/started""#,
    );
    assert_eq!(run.code, Some(75), "{run:?}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(!dir.path().join("started").exists());
    // An unreachable server: 75 too.
    let run = lockd(
        &[
            "exec",
            "b",
            "--server",
            &format!("127.0.0.1:{}", lockd_server::closed_port()),
            "--",
            "true",
        ],
        &[],
    );
    assert_eq!(run.code, Some(75), "{run:?}");
    assert!(run.one_stderr_line().contains("cannot reach the server"));
}

#[test]
fn a_second_exec_waits_for_the_first() {
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The first holds the lock for 2.5 s (with a TTL shorter than that, so
    // keep-alive is needed too).
    let mut first = background(
        &server,
        d,
        &["q", "--ttl", KEEP_ALIVE_TTL],
        r#"date +%s%3N > "$1/a_start"; sleep 2.5; date +%s%3N > "$1/a_end""#,
    );
    wait_for_file(&d.join("a_start"));
    let mut second = background(
        &server,
        d,
        &["q", "--ttl", KEEP_ALIVE_TTL, "--wait", "20s"],
        r#"date +%s%3N > "$1/b_start""#,
    );
    let (code, stderr) = first.finish(Duration::from_secs(20));
    assert_eq!(code, Some(0), "{stderr}");
    let (code, stderr) = second.finish(Duration::from_secs(20));
    assert_eq!(code, Some(0), "{stderr}");
    let (a_end, b_start) = (read_ms(&d.join("a_end")), read_ms(&d.join("b_start")));
    assert!(
        b_start >= a_end,
        "b started at {b_start}, a ended at {a_end}"
    );
}

#[test]
fn keep_alive_holds_the_lock_past_its_ttl() {
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // CMD runs until the test is done looking (30 s at most, should the test
    // die first).
    let mut run = background(
        &server,
        d,
        &["k", "--ttl", KEEP_ALIVE_TTL],
        r#"touch "$1/started"; i=0; while [ ! -e "$1/done" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done"#,
    );
    wait_for_file(&d.join("started"));
    let first = server.post_json(GET, &json!({"name": "k"}));
    assert_eq!(first.code, 200, "{}", first.body);
    // Well past the TTL (two and a half of them), the lock is still held by
    // lockd exec's owner, under the same grant.
    std::thread::sleep(Duration::from_millis(KEEP_ALIVE_TTL_MS * 5 / 2));
    let held = server.post_json(GET, &json!({"name": "k"}));
    assert_eq!(held.code, 200, "{}", held.body);
    assert!(held.json["owner"].as_str().unwrap().starts_with("exec-"));
    assert_eq!(held.json["fencing_token"], first.json["fencing_token"]);
    std::fs::write(d.join("done"), "").unwrap();
    let (code, stderr) = run.finish(Duration::from_secs(20));
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(server.post_json(GET, &json!({"name": "k"})).code, 404);
}

#[test]
fn signals_are_passed_to_cmd() {
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let mut run = background(
        &server,
        dir.path(),
        &["sig"],
        r#"trap 'echo int > "$1/got"; exit 3' INT; touch "$1/started"; i=0; while [ $i -lt 500 ]; do sleep 0.02; i=$((i+1)); done"#,
    );
    wait_for_file(&dir.path().join("started"));
    let sent = Command::new("kill")
        .args(["-INT", &run.child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let (code, stderr) = run.finish(Duration::from_secs(20));
    assert_eq!(code, Some(3), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("got")).unwrap(),
        "int\n"
    );
    assert_eq!(server.post_json(GET, &json!({"name": "sig"})).code, 404);
}

/// Sends SIGCONT to a stopped process on drop, so a failing test never
/// leaves the server stopped.
struct Resume(u32);

impl Drop for Resume {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}

#[test]
fn a_stopped_server_makes_cmd_stop_before_the_expiry_and_exits_76() {
    let mut server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // CMD must get SIGTERM within the margin lockd exec keeps before the
    // expiry (a tenth of the TTL): 400 ms here, for a signal, a shell's
    // trap and a `date` on a busy machine.
    let ttl_ms = 4000;
    let mut run = background(
        &server,
        d,
        &["stop", "--ttl", "4s", "--kill-after", "5s"],
        r#"trap 'date +%s%3N > "$1/term"; exit 0' TERM; touch "$1/started"; i=0; while [ $i -lt 2000 ]; do sleep 0.01; i=$((i+1)); done"#,
    );
    wait_for_file(&d.join("started"));
    // Stop the server right after it processed a renewal, so that the
    // expiry seen is the lock's last one (the next renewal comes a third of
    // the TTL later).
    let first = server.post_json(GET, &json!({"name": "stop"}));
    assert_eq!(first.code, 200, "{}", first.body);
    let first = first.json["expires_at_ms"].as_u64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let expiry = loop {
        let r = server.post_json(GET, &json!({"name": "stop"}));
        let e = r.json["expires_at_ms"].as_u64().unwrap();
        if e != first {
            break e;
        }
        assert!(Instant::now() < deadline, "no renewal seen");
        std::thread::sleep(Duration::from_millis(2));
    };
    let pid = server.pid();
    let stopped = Command::new("kill")
        .args(["-STOP", &pid.to_string()])
        .status()
        .unwrap();
    let resume = Resume(pid);
    assert!(stopped.success());
    let stopped_at = now_ms();

    let (code, stderr) = run.finish(Duration::from_secs(20));
    assert_eq!(code, Some(76), "{stderr}");
    let line = stderr.trim_end();
    assert_eq!(line.lines().count(), 1, "{stderr:?}");
    assert!(line.starts_with("lockd exec: lost the lock stop"), "{line}");
    let term = read_ms(&d.join("term"));
    assert!(
        term < expiry,
        "CMD got SIGTERM at {term}, after the lock's expiry at {expiry}"
    );
    // And not long before it: the lock was kept until close to its end.
    assert!(
        term + ttl_ms / 2 >= expiry && term > stopped_at,
        "SIGTERM at {term}, stopped at {stopped_at}, expiry {expiry}"
    );
    drop(resume);
    server.assert_healthy();
    server.kill();
}
