//! `lockd watch --server A,B` and `lockd leader --watch --server A,B` when
//! host A dies: the stream resumes on B after the last event seen, so that
//! on etcd every event reaches the watcher exactly once and in order, with
//! no notice on stderr; where events may have been missed (etcd compacted
//! the history, or a one-host store gives no positions) stderr says so.
//!
//! One etcd member, lockd hosts on it as child processes on loopback,
//! SIGKILLed on drop. Prints the time from a kill to the first event the
//! watcher received through B (median of 5 kills).

mod lockd_server;

use std::io::Read as _;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::lockd_server::{request, Background, Server};
use lockd_test_support::etcd::EtcdCluster;
use serde_json::{json, Value};

const NS: &str = "failover";

/// A lockd host on `etcd`.
fn host(etcd: &EtcdCluster) -> Server {
    let store = format!("etcd:{}", etcd.endpoints().join(","));
    Server::start_in(None, &["--store", &store], &[])
}

/// Waits until `host` counts `n` open event streams.
fn wait_for_streams(host: &Server, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while host.metric("lockd_event_streams") != n {
        assert!(Instant::now() < deadline, "the watcher never connected");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `lockd ARGS --server A,B`, its stdout read line by line.
fn watcher(args: &[&str], a: &Server, b: &Server) -> Background {
    let servers = format!("{},{}", a.url, b.url);
    let mut all = args.to_vec();
    all.extend_from_slice(&["--server", &servers]);
    Background::reading(&all)
}

/// Kills `background` and answers what it wrote on stderr.
fn stderr_of(mut background: Background) -> String {
    let _ = background.child.kill();
    let _ = background.child.wait();
    let mut stderr = String::new();
    if let Some(mut pipe) = background.child.stderr.take() {
        pipe.read_to_string(&mut stderr).unwrap();
    }
    stderr
}

/// Stops or continues a process (SIGSTOP / SIGCONT).
fn signal(background: &Background, signal: &str) {
    let pid = background.child.id().to_string();
    let status = Command::new("kill").args([signal, &pid]).status().unwrap();
    assert!(status.success());
}

/// Locks `name` for `owner` and unlocks it again through `host`: the
/// events it makes, (type, name, token).
fn lock_and_unlock(host: &Server, name: &str, owner: &str) -> [(String, String, u64); 2] {
    let locked = host.post_json(
        "/v1/locks/lock",
        &json!({"namespace": NS, "name": name, "owner": owner, "ttl_ms": 60_000}),
    );
    assert_eq!(locked.code, 200, "{}", locked.body);
    let token = locked.json["fencing_token"].as_u64().unwrap();
    let unlocked = host.post_json(
        "/v1/locks/unlock",
        &json!({"namespace": NS, "name": name, "owner": owner, "fencing_token": token}),
    );
    assert_eq!(unlocked.code, 200, "{}", unlocked.body);
    [
        ("acquired".to_string(), name.to_string(), token),
        ("released".to_string(), name.to_string(), token),
    ]
}

/// The next event `watch` printed, as (type, name, token), within 10 s.
fn next_event(watch: &Background) -> (String, String, u64) {
    let line = watch.next_line(Duration::from_secs(10));
    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    (
        v["type"].as_str().unwrap().to_string(),
        v["name"].as_str().unwrap_or_default().to_string(),
        v["fencing_token"].as_u64().unwrap_or_default(),
    )
}

#[test]
fn a_watch_moves_to_another_host_without_losing_or_repeating_an_event() {
    let etcd = EtcdCluster::start().expect("etcd did not start");
    let b = host(&etcd);
    let mut kill_to_event = Vec::new();
    for round in 0..5 {
        let mut a = host(&etcd);
        let watch = watcher(&["watch", "--format", "json", "--namespace", NS], &a, &b);
        wait_for_streams(&a, 1);
        let mut done = Vec::new();
        let mut seen = Vec::new();
        for i in 0..4 {
            done.extend(lock_and_unlock(&b, &format!("n{}", i % 3), "before"));
        }
        let made_before = done.len();
        // Some of these are still on their way through A when it dies.
        seen.push(next_event(&watch));
        a.kill();
        let killed = Instant::now();
        for i in 0..4 {
            done.extend(lock_and_unlock(&b, &format!("n{}", i % 3), "after"));
        }
        while seen.len() < done.len() {
            let event = next_event(&watch);
            // The first event made after the kill, received through B.
            if seen.len() == made_before {
                kill_to_event.push(killed.elapsed());
            }
            seen.push(event);
        }
        assert_eq!(seen, done, "round {round}: the events, once each, in order");
        // Nothing more: no event came twice after the last one.
        assert!(watch.line_within(Duration::from_millis(300)).is_none());
        let stderr = stderr_of(watch);
        assert!(
            stderr.contains("resumed the event stream"),
            "round {round}: {stderr}"
        );
        assert!(
            !stderr.contains("missed"),
            "round {round}: a gap was reported: {stderr}"
        );
    }
    kill_to_event.sort();
    assert_eq!(kill_to_event.len(), 5, "{kill_to_event:?}");
    println!(
        "kill of host A to the first event through B: median {:?} (all {kill_to_event:?})",
        kill_to_event[2]
    );
}

/// The current revision of `etcd` and a compaction up to it, through its
/// JSON gateway: every revision before it is gone.
fn compact_everything(etcd: &EtcdCluster) {
    let endpoint = etcd.endpoint(0);
    let base = if endpoint.starts_with("http") {
        endpoint
    } else {
        format!("http://{endpoint}")
    };
    let post = |path: &str, body: Value| -> Value {
        let reply = request("POST", &base, path, Some(&body.to_string()), None);
        assert_eq!(reply.code, 200, "{path}: {}", reply.body);
        reply.json
    };
    // "elsewhere", base64: a write outside lockd's prefix.
    let put = post(
        "/v3/kv/put",
        json!({"key": "ZWxzZXdoZXJl", "value": "dg=="}),
    );
    let revision = put["header"]["revision"].as_str().unwrap().to_string();
    post(
        "/v3/kv/compaction",
        json!({"revision": revision, "physical": true}),
    );
}

#[test]
fn a_watch_says_when_events_may_have_been_missed() {
    // etcd compacted what the watcher had not seen: its host A was stopped
    // (so it forwarded nothing) while w2 locked and unlocked through B, and
    // is killed after the compaction.
    let etcd = EtcdCluster::start().expect("etcd did not start");
    let (mut a, b) = (host(&etcd), host(&etcd));
    let watch = watcher(&["watch", "--format", "json", "--namespace", NS], &a, &b);
    wait_for_streams(&a, 1);
    let first = lock_and_unlock(&b, "x", "w1");
    assert_eq!(next_event(&watch), first[0]);
    assert_eq!(next_event(&watch), first[1]);
    let stopped = Command::new("kill")
        .args(["-STOP", &a.pid().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    lock_and_unlock(&b, "x", "w2");
    compact_everything(&etcd);
    a.kill();
    // The gap, as a JSON line, then the stream goes on live.
    let line = watch.next_line(Duration::from_secs(20));
    let gap: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(gap["type"], "gap", "{line}");
    assert!(
        gap["reason"].as_str().unwrap().contains("compacted"),
        "{line}"
    );
    let later = lock_and_unlock(&b, "x", "w3");
    assert_eq!(next_event(&watch), later[0]);
    let stderr = stderr_of(watch);
    assert!(
        stderr.contains("events may have been missed after "),
        "{stderr}"
    );

    // A store whose hosts share no history (memory): no position to resume
    // from, and stderr says so.
    let (mut a, b) = (Server::start(&[]), Server::start(&[]));
    let watch = watcher(&["watch", "--format", "json"], &a, &b);
    wait_for_streams(&a, 1);
    a.kill();
    let line = watch.next_line(Duration::from_secs(20));
    let gap: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(gap["type"], "gap", "{line}");
    let stderr = stderr_of(watch);
    assert!(
        stderr.contains("events may have been missed: the server gives no event positions"),
        "{stderr}"
    );
}

#[test]
fn leader_watch_sees_a_change_made_while_it_moves_to_another_host() {
    let etcd = EtcdCluster::start().expect("etcd did not start");
    let (mut a, b) = (host(&etcd), host(&etcd));
    let campaign = |candidate: &str| {
        let r = b.post_json(
            "/v1/elections/campaign",
            &json!({"namespace": NS, "name": "e", "candidate": candidate,
                    "value": candidate, "ttl_ms": 60_000}),
        );
        assert_eq!(r.code, 200, "{}", r.body);
        r.json["fencing_token"].as_u64().unwrap()
    };
    let token = campaign("c1");
    let watch = watcher(&["leader", "e", "--namespace", NS, "--watch"], &a, &b);
    wait_for_streams(&a, 1);
    let line = watch.next_line(Duration::from_secs(10));
    assert!(line.starts_with("e led by c1 "), "{line}");
    // The change happens while the watcher is stopped and its host dies.
    signal(&watch, "-STOP");
    a.kill();
    let r = b.post_json(
        "/v1/elections/resign",
        &json!({"namespace": NS, "name": "e", "candidate": "c1", "fencing_token": token}),
    );
    assert_eq!(r.code, 200, "{}", r.body);
    campaign("c2");
    signal(&watch, "-CONT");
    let line = watch.next_line(Duration::from_secs(20));
    let line = if line.starts_with("nobody leads") {
        watch.next_line(Duration::from_secs(10))
    } else {
        line
    };
    assert!(line.starts_with("e led by c2 "), "{line}");
    let stderr = stderr_of(watch);
    assert!(
        !stderr.contains("run 'lockd leader --watch' again"),
        "{stderr}"
    );
}
