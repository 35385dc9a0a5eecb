//! `lockd elect NAME --value V -- CMD` and `lockd leader NAME [--watch]`
//! against a real `lockd serve` (docs/contract.md#c24-elections): CMD's
//! environment and the resignation after it, a waiting candidate that leads
//! when the leader resigns and when its process is killed (TTL expiry), a
//! force-unlocked leader whose CMD is stopped (exit 76, as `lockd exec`),
//! the leader's line, JSON and not-found exit code, bad input, `--watch`
//! printing each change (and asking again after a stream that lagged or
//! ended), and `lockd proclaim` run by CMD.

mod lockd_server;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::lockd_server::{lockd, now_ms, read_ms, wait_for_file, Background, Run, Server};
use serde_json::{json, Value};

const CAMPAIGN: &str = "/v1/elections/campaign";
const PROCLAIM: &str = "/v1/elections/proclaim";
const RESIGN: &str = "/v1/elections/resign";
const LEADER: &str = "/v1/elections/leader";
const LOCK: &str = "/v1/locks/lock";
const EXTEND: &str = "/v1/locks/extend";
const FORCE_UNLOCK: &str = "/v1/locks/force-unlock";

/// The TTL of the tests that need keep-alive: long enough for a renewal to
/// land on a busy 2-core machine (see `exec.rs`), short enough that a
/// killed leader's expiry costs little.
const KEEP_ALIVE_TTL: &str = "2s";
const KEEP_ALIVE_TTL_MS: u64 = 2_000;

/// How long a line of `lockd leader --watch` may take.
const LINE: Duration = Duration::from_secs(10);

/// How long a `lockd elect` may take to finish once it should.
const FINISH: Duration = Duration::from_secs(20);

/// A CMD that waits (30 s at most, should the test die first) until the
/// file `$1/NAME` exists.
fn until(name: &str) -> String {
    format!(r#"i=0; while [ ! -e "$1/{name}" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done"#)
}

/// `lockd elect --server URL ARGS -- sh -c SCRIPT sh DIR LOCKD URL`: the
/// script sees the test's directory as `$1`, the `lockd` binary as `$2`
/// and the server as `$3`.
fn elect_args(server: &Server, dir: &Path, args: &[&str], script: &str) -> Vec<String> {
    let mut all = vec!["elect", "--server", &server.url];
    all.extend_from_slice(args);
    all.extend(["--", "sh", "-c", script, "sh", dir.to_str().unwrap()]);
    all.extend([env!("CARGO_BIN_EXE_lockd"), &server.url]);
    all.into_iter().map(str::to_string).collect()
}

fn elect(server: &Server, dir: &Path, args: &[&str], script: &str) -> Run {
    let all = elect_args(server, dir, args, script);
    lockd(&all.iter().map(String::as_str).collect::<Vec<_>>(), &[])
}

fn elect_in_background(server: &Server, dir: &Path, args: &[&str], script: &str) -> Background {
    let all = elect_args(server, dir, args, script);
    Background::start(&all.iter().map(String::as_str).collect::<Vec<_>>())
}

/// `lockd leader NAME --server URL ARGS`.
fn leader(server: &Server, name: &str, args: &[&str]) -> Run {
    let mut all = vec!["leader", name, "--server", &server.url];
    all.extend_from_slice(args);
    lockd(&all, &[])
}

/// Who leads `name` in the default namespace, over REST.
fn leader_now(server: &Server, name: &str) -> Option<Value> {
    let r = server.post_json(LEADER, &json!({"name": name}));
    match r.code {
        200 => Some(r.json),
        404 => None,
        _ => panic!("{}", r.body),
    }
}

/// Campaigns over REST for `name` as `candidate`; the leadership's token.
fn campaign(server: &Server, name: &str, candidate: &str, value: &str) -> u64 {
    let r = server.post_json(
        CAMPAIGN,
        &json!({"name": name, "candidate": candidate, "value": value, "ttl_ms": 60_000}),
    );
    assert_eq!(r.code, 200, "{}", r.body);
    r.json["fencing_token"].as_u64().unwrap()
}

#[test]
fn cmd_runs_with_the_leadership_in_its_environment_and_resigns_after() {
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run = elect(
        &server,
        d,
        &[
            "job",
            "--namespace",
            "ns",
            "--candidate",
            "web-1",
            "--value",
            "10.0.0.5:8080",
        ],
        r#"echo "$LOCKD_ELECTION|$LOCKD_NAMESPACE|$LOCKD_OWNER|$LOCKD_FENCING_TOKEN|$LOCKD_LEADER_VALUE" > "$1/env"
           "$2" leader "$LOCKD_ELECTION" --namespace ns --server "$3" > "$1/leader"; echo out; exit 7"#,
    );
    assert_eq!(run.code, Some(7), "CMD's status: {run:?}");
    assert_eq!(run.stdout, "out\n", "CMD's stdout is lockd elect's");
    assert!(run.stderr.is_empty(), "{run:?}");
    let env = std::fs::read_to_string(d.join("env")).unwrap();
    let fields: Vec<&str> = env.trim_end().split('|').collect();
    assert_eq!(fields.len(), 5, "{env:?}");
    assert_eq!(
        [fields[0], fields[1], fields[2], fields[4]],
        ["job", "ns", "web-1", "10.0.0.5:8080"]
    );
    let token: u64 = fields[3].parse().unwrap();
    // While CMD ran, `lockd leader` named it, with its value and token.
    let line = std::fs::read_to_string(d.join("leader")).unwrap();
    assert!(
        line.starts_with(&format!(
            "job led by web-1 value \"10.0.0.5:8080\" token {token} since "
        )) && line.ends_with("(persistent)\n"),
        "{line:?}"
    );
    // Resigned when CMD exited: nobody leads, and `lockd leader` says so
    // with exit 1, like `lockd get` of a free lock.
    let after = server.post_json(LEADER, &json!({"namespace": "ns", "name": "job"}));
    assert_eq!(after.code, 404, "{}", after.body);
    let run = leader(&server, "job", &["--namespace", "ns"]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(run.stdout, "nobody leads job\n");
    assert!(run.stderr.is_empty(), "{run:?}");

    // Without --candidate, a fresh `elect-` id leads; --ephemeral is the
    // leadership's durability.
    let run = elect(
        &server,
        d,
        &["job", "--value", "v", "--ephemeral"],
        r#"echo "$LOCKD_OWNER" > "$1/owner"; "$2" leader job --server "$3" > "$1/leader""#,
    );
    assert_eq!(run.code, Some(0), "{run:?}");
    let owner = std::fs::read_to_string(d.join("owner")).unwrap();
    assert!(
        owner.starts_with("elect-") && owner.trim_end().len() == 38,
        "{owner:?}"
    );
    let line = std::fs::read_to_string(d.join("leader")).unwrap();
    assert!(line.ends_with("(ephemeral)\n"), "{line:?}");
    // A command that does not exist: 127, and the leadership is resigned.
    let run = lockd(
        &[
            "elect",
            "job",
            "--value",
            "v",
            "--server",
            &server.url,
            "--",
            "/nonexistent/lockd-test-cmd",
        ],
        &[],
    );
    assert_eq!(run.code, Some(127), "{run:?}");
    assert!(run.one_stderr_line().starts_with("lockd elect: cannot run"));
    assert_eq!(leader_now(&server, "job"), None);
}

#[test]
fn leader_prints_json_and_bad_input_is_refused() {
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let token = campaign(&server, "x", "c1", "addr-1");
    for json_flag in [&["--json"][..], &["--format", "json"][..]] {
        let run = leader(&server, "x", json_flag);
        assert_eq!(run.code, Some(0), "{run:?}");
        let reply: Value = serde_json::from_str(&run.stdout).unwrap();
        assert_eq!(
            (
                &reply["status"],
                &reply["candidate"],
                &reply["value"],
                &reply["fencing_token"]
            ),
            (
                &json!("found"),
                &json!("c1"),
                &json!("addr-1"),
                &json!(token)
            ),
            "{run:?}"
        );
        assert!(reply["since_ms"].as_u64().is_some(), "{reply}");
        assert!(reply["expires_at_ms"].as_u64().is_some(), "{reply}");
    }
    let run = leader(&server, "nobody", &["--json"]);
    assert_eq!(run.code, Some(1), "{run:?}");
    let reply: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(reply["status"], "not_found");

    // Busy with no wait: 75, CMD never starts.
    let run = elect(
        &server,
        d,
        &["x", "--value", "v", "--wait", "0"],
        r#"touch "$1/started""#,
    );
    assert_eq!(run.code, Some(75), "{run:?}");
    let line = run.one_stderr_line();
    assert!(
        line.starts_with("lockd elect: cannot lead x: x is busy: held by \"c1\""),
        "{line}"
    );

    // A name that is a lock: `leader` is exit 2, `elect` cannot lead (75).
    let held = server.post_json(LOCK, &json!({"name": "lk", "owner": "o", "ttl_ms": 60_000}));
    assert_eq!(held.code, 200, "{}", held.body);
    let run = leader(&server, "lk", &[]);
    assert_eq!(run.code, Some(2), "{run:?}");
    let line = run.one_stderr_line();
    assert!(
        line.contains("\"lk\" is held or awaited as a lock"),
        "{line}"
    );
    let run = elect(&server, d, &["lk", "--value", "v"], r#"touch "$1/started""#);
    assert_eq!(run.code, Some(75), "{run:?}");
    let line = run.one_stderr_line();
    assert!(
        line.starts_with(
            "lockd elect: cannot lead lk: invalid argument: \"lk\" is held or awaited as a lock"
        ),
        "{line}"
    );

    // A value over 4096 bytes: a usage error before any request.
    let long = "a".repeat(4097);
    let run = elect(
        &server,
        d,
        &["v", "--value", &long],
        r#"touch "$1/started""#,
    );
    assert_eq!(run.code, Some(2), "{run:?}");
    assert_eq!(
        run.one_stderr_line(),
        "lockd elect: --value is 4097 bytes, over the limit of 4096; \
         proclaim something short, such as an address or an id"
    );
    assert_eq!(leader_now(&server, "v"), None);
    // 4096 bytes is allowed.
    let run = elect(&server, d, &["v", "--value", &long[1..]], "true");
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(!d.join("started").exists());
}

#[test]
fn a_waiting_candidate_leads_when_the_leader_resigns_or_is_killed() {
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ttl = ["--ttl", KEEP_ALIVE_TTL, "--wait", "20s"];
    let mut a = elect_in_background(
        &server,
        d,
        &[&["q", "--value", "a", "--candidate", "a"][..], &ttl].concat(),
        &format!(
            r#"touch "$1/a_start"; {}; date +%s%3N > "$1/a_end""#,
            until("a_done")
        ),
    );
    wait_for_file(&d.join("a_start"));
    let mut b = elect_in_background(
        &server,
        d,
        &[&["q", "--value", "b", "--candidate", "b"][..], &ttl].concat(),
        &format!(
            // Written whole (renamed into place), as the test may read it
            // at once.
            r#"echo "$(date +%s%3N) $LOCKD_FENCING_TOKEN" > "$1/b.tmp"; mv "$1/b.tmp" "$1/b_started"; {}"#,
            until("b_done")
        ),
    );
    server.wait_for_waiters(1);
    let a_token = leader_now(&server, "q").unwrap()["fencing_token"]
        .as_u64()
        .unwrap();
    // a's CMD exits: a resigns, and b, first in the queue, leads.
    std::fs::write(d.join("a_done"), "").unwrap();
    let (code, stderr) = a.finish(FINISH);
    assert_eq!(code, Some(0), "{stderr}");
    wait_for_file(&d.join("b_started"));
    let b_started = std::fs::read_to_string(d.join("b_started")).unwrap();
    let (b_start, b_token) = b_started.trim_end().split_once(' ').unwrap();
    let a_end = read_ms(&d.join("a_end"));
    assert!(
        b_start.parse::<u64>().unwrap() >= a_end,
        "{b_started} {a_end}"
    );
    assert!(
        b_token.parse::<u64>().unwrap() > a_token,
        "{b_started} {a_token}"
    );
    let now = leader_now(&server, "q").unwrap();
    assert_eq!(now["candidate"], "b");

    // c waits; b's process is killed: c leads once b's TTL has run out,
    // and not before.
    let mut c = elect_in_background(
        &server,
        d,
        &[&["q", "--value", "c", "--candidate", "c"][..], &ttl].concat(),
        r#"date +%s%3N > "$1/c_start""#,
    );
    server.wait_for_waiters(1);
    let b_expiry = leader_now(&server, "q").unwrap()["expires_at_ms"]
        .as_u64()
        .unwrap();
    b.child.kill().unwrap();
    let killed_at = now_ms();
    // b's CMD outlives it (nothing kills an orphan): end it.
    std::fs::write(d.join("b_done"), "").unwrap();
    let (code, stderr) = c.finish(FINISH);
    assert_eq!(code, Some(0), "{stderr}");
    let c_start = read_ms(&d.join("c_start"));
    assert!(
        c_start >= b_expiry,
        "c led at {c_start}, before b's expiry at {b_expiry}"
    );
    assert!(
        c_start <= killed_at + KEEP_ALIVE_TTL_MS + 3_000,
        "c led at {c_start}, b was killed at {killed_at}"
    );
}

#[test]
fn a_force_unlocked_leader_stops_its_cmd_and_exits_76() {
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut run = elect_in_background(
        &server,
        d,
        &[
            "f",
            "--value",
            "v",
            "--ttl",
            KEEP_ALIVE_TTL,
            "--kill-after",
            "5s",
        ],
        &format!(
            r#"trap 'touch "$1/term"; exit 0' TERM; touch "$1/started"; {}"#,
            until("never")
        ),
    );
    wait_for_file(&d.join("started"));
    let released = server.post_json(FORCE_UNLOCK, &json!({"name": "f"}));
    assert_eq!(released.code, 200, "{}", released.body);
    let (code, stderr) = run.finish(FINISH);
    assert_eq!(code, Some(76), "{stderr}");
    let line = stderr.trim_end();
    assert_eq!(line.lines().count(), 1, "{stderr:?}");
    assert!(
        line.starts_with("lockd elect: lost the leadership of f (a renewal was refused: "),
        "{line}"
    );
    assert!(d.join("term").exists(), "CMD got no SIGTERM");
    assert_eq!(leader_now(&server, "f"), None);
}

#[test]
fn leader_watch_prints_each_change() {
    let server = Server::start(&[]);
    let watch = Background::reading(&["leader", "w", "--watch", "--server", &server.url]);
    assert_eq!(watch.next_line(LINE), "nobody leads w");
    let token = campaign(&server, "w", "a", "v1");
    let line = watch.next_line(LINE);
    assert!(
        line.starts_with(&format!("w led by a value \"v1\" token {token} since ")),
        "{line}"
    );
    // A keep-alive changes nothing shown; a proclaim does.
    let extended = server.post_json(
        EXTEND,
        &json!({"name": "w", "owner": "a", "ttl_ms": 60_000}),
    );
    assert_eq!(extended.code, 200, "{}", extended.body);
    let proclaimed = server.post_json(
        PROCLAIM,
        &json!({"name": "w", "candidate": "a", "fencing_token": token, "value": "v2"}),
    );
    assert_eq!(proclaimed.code, 200, "{}", proclaimed.body);
    let line = watch.next_line(LINE);
    assert!(
        line.starts_with(&format!("w led by a value \"v2\" token {token} ")),
        "{line}"
    );
    // Another election's change is not this one's.
    campaign(&server, "w2", "z", "other");
    let resigned = server.post_json(RESIGN, &json!({"name": "w", "candidate": "a"}));
    assert_eq!(resigned.code, 200, "{}", resigned.body);
    assert_eq!(watch.next_line(LINE), "nobody leads w");
    let next = campaign(&server, "w", "b", "v3");
    assert!(next > token);
    let line = watch.next_line(LINE);
    assert!(
        line.starts_with(&format!("w led by b value \"v3\" token {next} ")),
        "{line}"
    );
}

#[test]
fn proclaim_under_elect_needs_only_the_value() {
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run = elect(
        &server,
        d,
        &["p", "--value", "a", "--candidate", "web-1"],
        r#""$2" proclaim --value b --server "$3" > "$1/proclaimed" || exit 10
           "$2" leader p --server "$3" > "$1/leader"
           "$2" proclaim --value c --token 1 --server "$3" 2> "$1/wrong"; echo "$?" > "$1/wrong_code""#,
    );
    assert_eq!(run.code, Some(0), "{run:?}");
    let read = |name: &str| std::fs::read_to_string(d.join(name)).unwrap();
    assert_eq!(read("proclaimed"), "p led by web-1 value \"b\"\n");
    assert!(read("leader").starts_with("p led by web-1 value \"b\" "));
    assert_eq!(read("wrong_code"), "1\n");
    assert_eq!(
        read("wrong"),
        "lockd: p is led by another candidate than \"web-1\" or under another token than 1; \
         see 'lockd leader p'\n"
    );
    // Nobody leads once `lockd elect` resigned.
    let args = [
        "proclaim",
        "p",
        "--value",
        "x",
        "--candidate",
        "web-1",
        "--token",
        "5",
    ];
    let run = lockd(&[&args[..], &["--server", &server.url]].concat(), &[]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(
        run.one_stderr_line(),
        "lockd: nobody leads p (the leadership may have expired); see 'lockd leader p'"
    );
    let long = "a".repeat(4097);
    let args = [
        "proclaim",
        "p",
        "--value",
        &long,
        "--candidate",
        "c",
        "--token",
        "5",
    ];
    let run = lockd(&[&args[..], &["--server", &server.url]].concat(), &[]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(run.one_stderr_line().contains("--value is 4097 bytes"));
}

/// A stand-in for lockd with an event stream that lags, then ends, then
/// stays open, and a leader whose value is `v` and the number of streams
/// opened so far: each change happens with no event of its own, so only a
/// new subscription and a new question can show it.
fn flaky_events_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let streams = Arc::new(AtomicU64::new(0));
    std::thread::spawn(move || {
        for connection in listener.incoming() {
            let Ok(connection) = connection else { break };
            let streams = Arc::clone(&streams);
            std::thread::spawn(move || answer_one(connection, &streams));
        }
    });
    url
}

fn answer_one(mut connection: TcpStream, streams: &AtomicU64) {
    let mut reader = BufReader::new(connection.try_clone().unwrap());
    let mut request_line = String::new();
    reader.read_line(&mut request_line).unwrap();
    let mut length = 0;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).unwrap();
        if header.trim_end().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap();
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    if request_line.starts_with("GET /v1/events") {
        let n = streams.fetch_add(1, Ordering::SeqCst) + 1;
        let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                    Transfer-Encoding: chunked\r\n\r\n";
        connection.write_all(head.as_bytes()).unwrap();
        let chunk = |text: &str| format!("{:x}\r\n{text}\r\n", text.len());
        let mut frames = chunk(": lockd events\n\n");
        match n {
            1 => frames += &chunk("event: lagged\ndata: {\"type\":\"lagged\",\"missed\":5}\n\n"),
            2 => {}
            _ => {
                connection.write_all(frames.as_bytes()).unwrap();
                std::thread::sleep(Duration::from_secs(30));
                return;
            }
        }
        frames += "0\r\n\r\n";
        connection.write_all(frames.as_bytes()).unwrap();
    } else {
        assert!(request_line.starts_with("POST /v1/elections/leader"));
        let value = format!("v{}", streams.load(Ordering::SeqCst));
        let reply = json!({"candidate": "c", "durability": "persistent", "expires_at_ms": 0,
                           "fencing_token": 1, "status": "found", "value": value})
        .to_string();
        let answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{reply}",
            reply.len()
        );
        connection.write_all(answer.as_bytes()).unwrap();
    }
}

#[test]
fn leader_watch_asks_again_after_a_lagged_or_closed_stream() {
    let url = flaky_events_server();
    let watch = Background::reading(&["leader", "w", "--watch", "--server", &url]);
    for value in ["v1", "v2", "v3"] {
        let line = watch.next_line(LINE);
        assert!(
            line.starts_with(&format!("w led by c value \"{value}\" token 1 ")),
            "{line}"
        );
    }
}
