//! Shared locks, semaphores, lock-delay and elections over the REST API of a
//! real `lockd serve` (docs/contract.md C21-C24, docs/reference.md): grants and
//! the queue, what `get`, the listing and the event stream show, bad input,
//! and a lock-delay set in lockd.toml.

mod lockd_server;

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpStream;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::lockd_server::{request, Reply, Server};
use serde_json::{json, Value};

const LOCK: &str = "/v1/locks/lock";
const UNLOCK: &str = "/v1/locks/unlock";
const GET: &str = "/v1/locks/get";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// `lock` of `name` by `owner` for 30 s, with the `extra` fields.
fn lock(server: &Server, name: &str, owner: &str, extra: Value) -> Reply {
    let mut body = json!({"name": name, "owner": owner, "ttl_ms": 30_000});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    server.post_json(LOCK, &body)
}

/// The same lock on a thread, for a request that waits in the queue.
fn lock_in_background(server: &Server, name: &str, owner: &str, extra: Value) -> JoinHandle<Reply> {
    let mut body = json!({"name": name, "owner": owner, "ttl_ms": 30_000});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let url = server.url.clone();
    std::thread::spawn(move || request("POST", &url, LOCK, Some(&body.to_string()), None))
}

fn unlock(server: &Server, name: &str, owner: &str) -> Reply {
    server.post_json(UNLOCK, &json!({"name": name, "owner": owner}))
}

fn get(server: &Server, name: &str) -> Reply {
    server.post_json(GET, &json!({"name": name}))
}

fn token(r: &Reply) -> u64 {
    assert_eq!((r.code, r.status()), (200, "acquired"), "{}", r.body);
    r.json["fencing_token"].as_u64().unwrap()
}

fn assert_status(r: &Reply, code: u16, status: &str) {
    assert_eq!((r.code, r.status()), (code, status), "{}", r.body);
}

/// `(owner, mode)` of every holder of a `get` or listing entry.
fn holders(entry: &Value) -> Vec<(String, String)> {
    entry["holders"]
        .as_array()
        .unwrap_or_else(|| panic!("no holders: {entry}"))
        .iter()
        .map(|h| {
            (
                h["owner"].as_str().unwrap().to_string(),
                h["mode"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The `data:` lines of `GET /v1/events?prefix=...`, read on a thread; open
/// (its first comment seen) when this returns.
fn events(server: &Server, prefix: &str) -> mpsc::Receiver<Value> {
    let mut stream = TcpStream::connect(server.addr).unwrap();
    write!(
        stream,
        "GET /v1/events?prefix={prefix} HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    .unwrap();
    let mut lines = BufReader::new(stream);
    let mut line = String::new();
    while !line.starts_with(": lockd events") {
        line.clear();
        assert!(lines.read_line(&mut line).unwrap() > 0, "stream ended");
    }
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || loop {
        line.clear();
        match lines.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if let Some(data) = line.trim_end().strip_prefix("data: ") {
            if tx.send(serde_json::from_str(data).unwrap()).is_err() {
                return;
            }
        }
    });
    rx
}

/// `(type, owner, mode)` of the next `n` events.
fn next_events(rx: &mpsc::Receiver<Value>, n: usize) -> Vec<(String, String, String)> {
    (0..n)
        .map(|_| {
            let e = rx.recv_timeout(Duration::from_secs(10)).expect("an event");
            let s = |k: &str| e[k].as_str().unwrap().to_string();
            (s("type"), s("owner"), s("mode"))
        })
        .collect()
}

#[test]
fn shared_holders_then_an_exclusive_waits_and_gets_it_after_both() {
    let server = Server::start(&[]);
    let stream = events(&server, "doc");
    let a = token(&lock(&server, "doc", "a", json!({"mode": "shared"})));
    let b = token(&lock(&server, "doc", "b", json!({"mode": "shared"})));
    assert!(b > a);

    // The exclusive request waits behind both; a shared one after it waits
    // too (no writer starvation), so at wait 0 it is busy.
    let writer = lock_in_background(&server, "doc", "w", json!({"wait_ms": 10_000}));
    server.wait_for_waiters(1);
    let late = lock(&server, "doc", "late", json!({"mode": "shared"}));
    assert_status(&late, 409, "busy");
    assert_eq!(
        late.json["fencing_token"].as_u64(),
        Some(b),
        "{}",
        late.body
    );

    // get: the most recent grant on top, every holder, the queue.
    let found = get(&server, "doc");
    assert_status(&found, 200, "found");
    assert_eq!(
        (found.json["owner"].as_str(), found.json["mode"].as_str()),
        (Some("b"), Some("shared"))
    );
    assert_eq!(found.json["fencing_token"].as_u64(), Some(b));
    assert_eq!(found.json["waiters"], 1, "{}", found.body);
    assert_eq!(
        holders(&found.json),
        [("a".into(), "shared".into()), ("b".into(), "shared".into())]
    );
    assert!(found.json.get("permits").is_none(), "{}", found.body);
    assert!(found.json.get("lock_delay_until_ms").is_none());
    let tokens: Vec<u64> = found.json["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["fencing_token"].as_u64().unwrap())
        .collect();
    assert_eq!(tokens, [a, b]);

    // The listing: the mode and both holders.
    let listed = server.get("/v1/locks?prefix=doc");
    let entry = &listed.json["locks"][0];
    assert_eq!(entry["mode"], "shared", "{}", listed.body);
    assert_eq!(entry["waiters"], 1);
    assert_eq!(holders(entry).len(), 2);

    assert_status(&unlock(&server, "doc", "a"), 200, "unlocked");
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(get(&server, "doc").json["waiters"], 1, "still waiting on b");
    assert_status(&unlock(&server, "doc", "b"), 200, "unlocked");
    let w = token(&writer.join().unwrap());
    assert!(w > b);
    let found = get(&server, "doc");
    assert_eq!(found.json["mode"], "exclusive", "{}", found.body);
    assert_eq!(holders(&found.json), [("w".into(), "exclusive".into())]);
    // An exclusive lock lists no holders beside itself.
    let listed = server.get("/v1/locks?prefix=doc");
    assert!(listed.json["locks"][0].get("holders").is_none());

    let seen = next_events(&stream, 5);
    let event = |t: &str, o: &str, m: &str| (t.to_string(), o.to_string(), m.to_string());
    assert_eq!(
        seen,
        [
            event("acquired", "a", "shared"),
            event("acquired", "b", "shared"),
            event("released", "a", "shared"),
            event("released", "b", "shared"),
            event("handed_off", "w", "exclusive"),
        ]
    );
}

#[test]
fn a_semaphore_of_two_queues_the_third() {
    // On the durable store: permits are journaled like locks.
    let server = Server::start_in(None, &["--store", "redb:locks.redb"], &[]);
    let permit = json!({"permits": 2});
    let a = token(&lock(&server, "pool", "a", permit.clone()));
    let b = token(&lock(&server, "pool", "b", permit.clone()));
    let busy = lock(&server, "pool", "c", permit.clone());
    assert_status(&busy, 409, "busy");

    let third = lock_in_background(
        &server,
        "pool",
        "c",
        json!({"permits": 2, "wait_ms": 10_000}),
    );
    server.wait_for_waiters(1);
    let found = get(&server, "pool");
    assert_status(&found, 200, "found");
    assert_eq!(found.json["mode"], "permit");
    assert_eq!(found.json["permits"], 2);
    assert_eq!(found.json["waiters"], 1);
    assert_eq!(
        holders(&found.json),
        [("a".into(), "permit".into()), ("b".into(), "permit".into())]
    );
    let listed = server.get("/v1/locks?prefix=pool");
    let entry = &listed.json["locks"][0];
    assert_eq!(
        (entry["mode"].as_str(), entry["permits"].as_u64()),
        (Some("permit"), Some(2))
    );
    assert_eq!(holders(entry).len(), 2);

    // Another number of permits, or a lock, on a semaphore in use: refused,
    // nothing changed.
    let other = lock(&server, "pool", "d", json!({"permits": 3}));
    assert_status(&other, 400, "invalid_argument");
    let as_lock = lock(&server, "pool", "d", json!({}));
    assert_status(&as_lock, 400, "invalid_argument");
    assert_eq!(holders(&get(&server, "pool").json).len(), 2);

    assert_status(&unlock(&server, "pool", "a"), 200, "unlocked");
    let c = token(&third.join().unwrap());
    assert!(c > a.max(b));
    let found = get(&server, "pool");
    assert_eq!(
        holders(&found.json),
        [("b".into(), "permit".into()), ("c".into(), "permit".into())]
    );
}

#[test]
fn bad_modes_and_permit_counts_are_refused() {
    let server = Server::start(&[]);
    let refused = |extra: Value, needles: &[&str]| {
        let r = lock(&server, "bad", "o", extra);
        assert_status(&r, 400, "invalid_argument");
        for needle in needles {
            assert!(r.message().contains(needle), "{needle:?}: {}", r.body);
        }
    };
    refused(
        json!({"mode": "shared", "permits": 2}),
        &["`mode` and `permits`"],
    );
    refused(
        json!({"mode": "read"}),
        &["`read`", "`exclusive` or `shared`"],
    );
    refused(json!({"mode": "permit"}), &["`exclusive` or `shared`"]);
    refused(json!({"permits": 0}), &["permits is 0", "1 to 65536"]);
    refused(
        json!({"permits": 65_537}),
        &["permits is 65537", "1 to 65536"],
    );
    refused(json!({"permits": -1}), &["permits"]);
    let lease = server.post_json("/v1/leases/grant", &json!({"ttl_ms": 30_000}));
    let lease_id = lease.json["lease_id"].as_str().unwrap();
    let under_lease = server.post_json(
        LOCK,
        &json!({"name": "bad", "lease_id": lease_id, "mode": "shared"}),
    );
    assert_status(&under_lease, 400, "invalid_argument");
    assert!(
        under_lease.message().contains("`lease_id`"),
        "{}",
        under_lease.body
    );
    // Nothing was taken.
    assert_status(&get(&server, "bad"), 404, "not_found");
    assert_eq!(get(&server, "bad").json, json!({"status": "not_found"}));

    // An owner holding one mode asks for the other: refused, it keeps its
    // grant.
    let held = token(&lock(&server, "both", "o", json!({"mode": "shared"})));
    let upgrade = lock(&server, "both", "o", json!({}));
    assert_status(&upgrade, 400, "invalid_argument");
    let found = get(&server, "both");
    assert_eq!(found.json["fencing_token"].as_u64(), Some(held));
    assert_eq!(found.json["mode"], "shared");
}

#[test]
fn a_lock_delay_from_lockd_toml_holds_a_force_unlocked_lock_back() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("lockd.toml"),
        "[namespaces]\ndefault_lock_delay_ms = 300\n[namespaces.lock_delay_ms]\nfast = 0\n",
    )
    .unwrap();
    let server = Server::start_in(Some(dir.path()), &["--store", "redb:locks.redb"], &[]);

    let first = token(&lock(&server, "job", "a", json!({})));
    let forced_at = now_ms();
    let forced = server.post_json("/v1/locks/force-unlock", &json!({"name": "job"}));
    assert_status(&forced, 200, "released");

    // Busy through the delay, saying when it ends.
    let busy = lock(&server, "job", "b", json!({}));
    assert_status(&busy, 409, "busy");
    let until = busy.json["expires_at_ms"].as_u64().unwrap();
    assert!(
        (forced_at + 250..=now_ms() + 300).contains(&until),
        "delay ends at {until}, forced at {forced_at}: {}",
        busy.body
    );
    assert_eq!(busy.json["fencing_token"].as_u64(), Some(first));
    let free = get(&server, "job");
    assert_status(&free, 404, "not_found");
    assert_eq!(
        free.json["lock_delay_until_ms"].as_u64(),
        Some(until),
        "{}",
        free.body
    );
    assert_eq!(free.json["waiters"], 0);

    // A waiter waits through it and is served when it ends.
    let waited = lock(&server, "job", "b", json!({"wait_ms": 5_000}));
    let granted_at = now_ms();
    assert!(token(&waited) > first);
    assert!(
        granted_at >= until,
        "granted at {granted_at}, before {until}"
    );
    assert!(get(&server, "job")
        .json
        .get("lock_delay_until_ms")
        .is_none());

    // The holder's own unlock frees it at once; a namespace set to 0 has no
    // delay.
    assert_status(&unlock(&server, "job", "b"), 200, "unlocked");
    token(&lock(&server, "job", "c", json!({})));
    let fast = |owner: &str| {
        server.post_json(
            LOCK,
            &json!({"namespace": "fast", "name": "job", "owner": owner, "ttl_ms": 30_000}),
        )
    };
    token(&fast("a"));
    let forced = server.post_json(
        "/v1/locks/force-unlock",
        &json!({"namespace": "fast", "name": "job"}),
    );
    assert_status(&forced, 200, "released");
    token(&fast("b"));
}

const CAMPAIGN: &str = "/v1/elections/campaign";
const LEADER: &str = "/v1/elections/leader";

fn campaign(server: &Server, name: &str, candidate: &str, value: &str) -> Reply {
    server.post_json(
        CAMPAIGN,
        &json!({"name": name, "candidate": candidate, "value": value, "ttl_ms": 30_000}),
    )
}

fn leader(server: &Server, name: &str) -> Reply {
    server.post_json(LEADER, &json!({"name": name}))
}

#[test]
fn candidates_lead_in_turn_and_followers_see_who_leads() {
    // On the durable store: leaderships and values are journaled.
    let server = Server::start_in(None, &["--store", "redb:locks.redb"], &[]);
    let stream = events(&server, "lead");
    let before = now_ms();
    let first = token(&campaign(&server, "lead", "c1", "10.0.0.1:80"));
    let led = leader(&server, "lead");
    assert_status(&led, 200, "found");
    assert_eq!(led.json["candidate"], "c1");
    assert_eq!(led.json["value"], "10.0.0.1:80");
    assert_eq!(led.json["fencing_token"].as_u64(), Some(first));
    assert_eq!(led.json["durability"], "persistent");
    let since = led.json["since_ms"].as_u64().unwrap();
    assert!((before..=now_ms()).contains(&since), "{}", led.body);
    // `get` shows the leader as a holder of mode `leader`.
    let found = get(&server, "lead");
    assert_eq!(holders(&found.json), [("c1".into(), "leader".into())]);

    // A second candidate waits in the queue; at wait 0 it is busy with the
    // leader.
    let busy = campaign(&server, "lead", "c2", "10.0.0.2:80");
    assert_status(&busy, 409, "busy");
    assert_eq!(busy.json["owner"], "c1", "{}", busy.body);
    let url = server.url.clone();
    let second = std::thread::spawn(move || {
        let body = json!({"name": "lead", "candidate": "c2", "value": "10.0.0.2:80", "ttl_ms": 30_000, "wait_ms": 10_000});
        request("POST", &url, CAMPAIGN, Some(&body.to_string()), None)
    });
    server.wait_for_waiters(1);

    // The leader proclaims a new value and keeps its term alive; its token
    // stays.
    let proclaimed = server.post_json(
        "/v1/elections/proclaim",
        &json!({"name": "lead", "candidate": "c1", "fencing_token": first, "value": "10.0.0.1:81"}),
    );
    assert_status(&proclaimed, 200, "proclaimed");
    let stale = server.post_json(
        "/v1/elections/proclaim",
        &json!({"name": "lead", "candidate": "c2", "fencing_token": first, "value": "x"}),
    );
    assert_status(&stale, 409, "not_owner");
    let kept = server.post_json(
        "/v1/locks/extend",
        &json!({"name": "lead", "owner": "c1", "ttl_ms": 60_000}),
    );
    assert_status(&kept, 200, "extended");
    assert_eq!(kept.json["fencing_token"].as_u64(), Some(first));
    let led = leader(&server, "lead");
    assert_eq!(
        (
            led.json["value"].as_str(),
            led.json["fencing_token"].as_u64()
        ),
        (Some("10.0.0.1:81"), Some(first))
    );

    // Only the leader resigns; then the head of the queue leads.
    let not_leader = server.post_json(
        "/v1/elections/resign",
        &json!({"name": "lead", "candidate": "c2"}),
    );
    assert_status(&not_leader, 409, "not_owner");
    let resigned = server.post_json(
        "/v1/elections/resign",
        &json!({"name": "lead", "candidate": "c1", "fencing_token": first}),
    );
    assert_status(&resigned, 200, "resigned");
    let next = token(&second.join().unwrap());
    assert!(next > first);
    let led = leader(&server, "lead");
    assert_eq!(
        (led.json["candidate"].as_str(), led.json["value"].as_str()),
        (Some("c2"), Some("10.0.0.2:80"))
    );
    let again = server.post_json(
        "/v1/elections/resign",
        &json!({"name": "lead", "candidate": "c1"}),
    );
    assert_status(&again, 409, "not_owner");

    let event = |t: &str, o: &str| (t.to_string(), o.to_string(), "leader".to_string());
    assert_eq!(
        next_events(&stream, 5),
        [
            event("acquired", "c1"),
            event("proclaimed", "c1"),
            event("extended", "c1"),
            event("released", "c1"),
            event("handed_off", "c2"),
        ]
    );

    // After the last candidate resigns nobody leads: 404.
    assert_status(
        &server.post_json(
            "/v1/elections/resign",
            &json!({"name": "lead", "candidate": "c2"}),
        ),
        200,
        "resigned",
    );
    let nobody = leader(&server, "lead");
    assert_status(&nobody, 404, "not_found");
    assert_eq!(nobody.json, json!({"status": "not_found"}));
}

#[test]
fn elections_and_locks_keep_to_their_names() {
    let server = Server::start(&[]);
    let held = token(&lock(&server, "name", "o", json!({})));
    let refused = |r: Reply, needle: &str| {
        assert_status(&r, 400, "invalid_argument");
        assert!(r.message().contains(needle), "{needle:?}: {}", r.body);
    };
    refused(campaign(&server, "name", "c", "v"), "lock");
    refused(leader(&server, "name"), "lock");
    refused(
        server.post_json(
            "/v1/elections/resign",
            &json!({"name": "name", "candidate": "o"}),
        ),
        "lock",
    );
    // The lock is untouched.
    assert_eq!(
        get(&server, "name").json["fencing_token"].as_u64(),
        Some(held)
    );

    token(&campaign(&server, "vote", "c", "v"));
    refused(lock(&server, "vote", "o", json!({})), "election");
    refused(
        lock(&server, "vote", "o", json!({"permits": 2})),
        "election",
    );
    let long = server.post_json(
        CAMPAIGN,
        &json!({"name": "other", "candidate": "c", "value": "v".repeat(4097), "ttl_ms": 1000}),
    );
    refused(long, "4096");
    assert_status(&leader(&server, "other"), 404, "not_found");
    let missing = server.post_json(CAMPAIGN, &json!({"name": "other", "candidate": "c"}));
    refused(missing, "value");
}
