//! Leases over the REST API (docs/reference.md#leases, docs/contract.md#c16-leases)
//! of a real `lockd serve` process: grant, locks under a lease, refresh,
//! get, revoke with hand-off to a waiter, leases that are not live, bad
//! requests, auth, and a persistent lease across a restart on redb.

mod lockd_server;

use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::lockd_server::{request, Reply, Server};
use serde_json::{json, Value};

const LOCK: &str = "/v1/locks/lock";
const UNLOCK: &str = "/v1/locks/unlock";
const GET: &str = "/v1/locks/get";
const GRANT: &str = "/v1/leases/grant";
const REFRESH: &str = "/v1/leases/refresh";
const REVOKE: &str = "/v1/leases/revoke";
const LEASE_GET: &str = "/v1/leases/get";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn assert_reply(r: &Reply, code: u16, status: &str) {
    assert_eq!((r.code, r.status()), (code, status), "{}", r.body);
    assert_eq!(r.header("content-type"), Some("application/json"));
}

fn grant(server: &Server, body: Value) -> (String, u64) {
    let r = server.post_json(GRANT, &body);
    assert_reply(&r, 200, "granted");
    assert_eq!(r.json.as_object().unwrap().len(), 3, "{}", r.body);
    let id = r.json["lease_id"].as_str().unwrap().to_string();
    (id, r.json["expires_at_ms"].as_u64().unwrap())
}

fn lease_call(server: &Server, path: &str, id: &str) -> Reply {
    server.post_json(path, &json!({"lease_id": id}))
}

#[test]
fn a_lease_holds_refreshes_and_releases_its_locks() {
    let server = Server::start(&[]);
    let before = now_ms();
    let (id, expires) = grant(&server, json!({"ttl_ms": 5_000}));
    assert!(id.starts_with("lease-") && id.len() == 38, "{id}");
    assert!(expires >= before + 5_000 && expires <= now_ms() + 5_000);

    // Two locks under the lease: owned by the lease id, with its expiry.
    let mut tokens = Vec::new();
    for name in ["a", "b"] {
        let r = server.post_json(LOCK, &json!({"name": name, "lease_id": id}));
        assert_reply(&r, 200, "acquired");
        assert_eq!(
            r.json["expires_at_ms"].as_u64(),
            Some(expires),
            "{}",
            r.body
        );
        tokens.push(r.json["fencing_token"].as_u64().unwrap());
        let held = server.post_json(GET, &json!({"name": name}));
        assert_reply(&held, 200, "found");
        assert_eq!(held.json["owner"], id.as_str());
    }
    // Locking again under the lease answers the same grant.
    let again = server.post_json(LOCK, &json!({"name": "a", "lease_id": id}));
    assert_reply(&again, 200, "acquired");
    assert_eq!(again.json["fencing_token"].as_u64(), Some(tokens[0]));

    let info = lease_call(&server, LEASE_GET, &id);
    assert_reply(&info, 200, "found");
    assert_eq!(info.json["locks"], json!(["a", "b"]));
    assert_eq!(info.json["ttl_ms"], 5_000);
    assert_eq!(info.json["durability"], "persistent");
    assert_eq!(info.json["expires_at_ms"].as_u64(), Some(expires));

    // Refresh moves every lock.
    std::thread::sleep(Duration::from_millis(20));
    let refreshed = lease_call(&server, REFRESH, &id);
    assert_reply(&refreshed, 200, "refreshed");
    let new_expiry = refreshed.json["expires_at_ms"].as_u64().unwrap();
    assert!(new_expiry > expires, "{} after {expires}", refreshed.body);
    for (name, token) in ["a", "b"].into_iter().zip(&tokens) {
        let held = server.post_json(GET, &json!({"name": name}));
        assert_eq!(held.json["expires_at_ms"].as_u64(), Some(new_expiry));
        assert_eq!(held.json["fencing_token"].as_u64(), Some(*token));
    }

    // A waiter queues on "b"; the revoke hands "b" to it.
    let url = server.url.clone();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let body = json!({"name": "b", "owner": "waiter", "ttl_ms": 30_000, "wait_ms": 20_000});
        let _ = tx.send(request("POST", &url, LOCK, Some(&body.to_string()), None));
    });
    server.wait_for_waiters(1);
    let revoked = lease_call(&server, REVOKE, &id);
    assert_reply(&revoked, 200, "revoked");
    assert_eq!(revoked.json["released"], 2, "{}", revoked.body);
    let waiter = rx.recv_timeout(Duration::from_secs(20)).unwrap();
    assert_reply(&waiter, 200, "acquired");
    assert!(waiter.json["fencing_token"].as_u64() > Some(tokens[1]));
    let b = server.post_json(GET, &json!({"name": "b"}));
    assert_eq!(b.json["owner"], "waiter", "{}", b.body);
    assert_reply(
        &server.post_json(GET, &json!({"name": "a"})),
        404,
        "not_found",
    );

    // The lease is gone: every lease route answers not_held.
    for path in [REFRESH, REVOKE, LEASE_GET] {
        let r = lease_call(&server, path, &id);
        assert_reply(&r, 409, "not_held");
        assert!(r.message().contains(&id), "{}", r.body);
    }
    let late = server.post_json(LOCK, &json!({"name": "c", "lease_id": id}));
    assert_reply(&late, 409, "not_held");
}

#[test]
fn one_lock_of_a_lease_unlocks_and_the_lease_lives_on() {
    let server = Server::start(&[]);
    let (id, _) = grant(
        &server,
        json!({"namespace": "ns", "ttl_ms": 5_000, "durability": "ephemeral"}),
    );
    for name in ["a", "b"] {
        let r = server.post_json(
            LOCK,
            &json!({"namespace": "ns", "name": name, "lease_id": id, "wait_ms": 0}),
        );
        assert_reply(&r, 200, "acquired");
    }
    // Namespaces keep leases apart.
    assert_reply(&lease_call(&server, LEASE_GET, &id), 409, "not_held");
    let u = server.post_json(
        UNLOCK,
        &json!({"namespace": "ns", "name": "a", "owner": id}),
    );
    assert_reply(&u, 200, "unlocked");
    let info = server.post_json(LEASE_GET, &json!({"namespace": "ns", "lease_id": id}));
    assert_reply(&info, 200, "found");
    assert_eq!(info.json["locks"], json!(["b"]));
    assert_eq!(info.json["durability"], "ephemeral");
    let revoked = server.post_json(REVOKE, &json!({"namespace": "ns", "lease_id": id}));
    assert_eq!(revoked.json["released"], 1, "{}", revoked.body);
}

/// (The TTL leaves the lock under the lease ample time to be taken before
/// the lease expires, on a busy machine too.)
#[test]
fn a_lease_expires_with_its_locks() {
    const TTL_MS: u64 = 1_000;
    let server = Server::start(&[]);
    let (id, expires_at_ms) = grant(&server, json!({"ttl_ms": TTL_MS}));
    let r = server.post_json(LOCK, &json!({"name": "x", "lease_id": id}));
    assert_reply(&r, 200, "acquired");
    // One TTL past its expiry.
    let until = expires_at_ms + TTL_MS;
    std::thread::sleep(Duration::from_millis(until.saturating_sub(now_ms())));
    assert_reply(&lease_call(&server, LEASE_GET, &id), 409, "not_held");
    assert_reply(&lease_call(&server, REFRESH, &id), 409, "not_held");
    assert_reply(
        &server.post_json(GET, &json!({"name": "x"})),
        404,
        "not_found",
    );
}

#[test]
fn unknown_leases_and_bad_requests() {
    let server = Server::start(&[]);
    let unknown = "lease-0123456789abcdef0123456789abcdef";
    for path in [REFRESH, REVOKE, LEASE_GET] {
        let r = lease_call(&server, path, unknown);
        assert_reply(&r, 409, "not_held");
        assert!(r.message().contains("not live"), "{}", r.body);
    }
    assert_reply(
        &server.post_json(LOCK, &json!({"name": "a", "lease_id": unknown})),
        409,
        "not_held",
    );
    let (id, _) = grant(&server, json!({"ttl_ms": 5_000}));
    for (body, needle) in [
        (
            json!({"name": "a", "lease_id": id, "owner": "o"}),
            "both given",
        ),
        (
            json!({"name": "a", "lease_id": id, "owner": "o", "ttl_ms": 10}),
            "both given",
        ),
        (
            json!({"name": "a", "lease_id": id, "ttl_ms": 10}),
            "`ttl_ms` is not allowed with `lease_id`",
        ),
        (
            json!({"name": "a", "lease_id": id, "durability": "ephemeral"}),
            "`durability` is not allowed with `lease_id`",
        ),
        (
            json!({"name": "a"}),
            "missing field `owner` (or `lease_id`)",
        ),
        (json!({"name": "a", "owner": "o"}), "missing field `ttl_ms`"),
    ] {
        let r = server.post_json(LOCK, &body);
        assert_reply(&r, 400, "invalid_argument");
        assert!(r.message().contains(needle), "{body}: {}", r.body);
    }
    // Nothing was taken by the refused requests.
    assert_reply(
        &server.post_json(GET, &json!({"name": "a"})),
        404,
        "not_found",
    );
    for (path, body, needle) in [
        (GRANT, json!({"ttl_ms": 0}), "ttl"),
        (
            GRANT,
            json!({"ttl_ms": 10, "lease": 1}),
            "unknown field `lease`",
        ),
        (GRANT, json!({}), "missing field `ttl_ms`"),
        (
            GRANT,
            json!({"ttl_ms": 10, "durability": "forever"}),
            "forever",
        ),
        (REFRESH, json!({}), "missing field `lease_id`"),
        (REVOKE, json!({"lease_id": 5}), "invalid type"),
        (
            LEASE_GET,
            json!({"lease_id": id, "ttl_ms": 5}),
            "unknown field",
        ),
        (REFRESH, json!({"lease_id": ""}), "empty"),
    ] {
        let r = server.post_json(path, &body);
        assert_reply(&r, 400, "invalid_argument");
        assert!(
            r.message().to_lowercase().contains(needle),
            "{path} {body}: {}",
            r.body
        );
    }
    // The lease is untouched.
    assert_reply(&lease_call(&server, LEASE_GET, &id), 200, "found");
}

#[test]
fn lease_routes_need_the_token() {
    let server = Server::with_token("sesame");
    let (id, _) = grant(&server, json!({"ttl_ms": 5_000}));
    for (path, body) in [
        (GRANT, json!({"ttl_ms": 5_000})),
        (REFRESH, json!({"lease_id": id})),
        (REVOKE, json!({"lease_id": id})),
        (LEASE_GET, json!({"lease_id": id})),
        (LOCK, json!({"name": "a", "lease_id": id})),
    ] {
        for token in [None, Some("wrong")] {
            let r = request("POST", &server.url, path, Some(&body.to_string()), token);
            assert_reply(&r, 401, "unauthorized");
            assert_eq!(r.header("www-authenticate"), Some("Bearer"));
        }
    }
    // Nothing above reached the lease.
    let info = lease_call(&server, LEASE_GET, &id);
    assert_reply(&info, 200, "found");
    assert_eq!(info.json["locks"], json!([]));
    assert_reply(&lease_call(&server, REVOKE, &id), 200, "revoked");
}

#[test]
fn a_persistent_lease_survives_a_restart_on_redb() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--store", "redb:locks.redb"];
    let mut server = Server::start_in(Some(dir.path()), &args, &[]);
    let (kept, expires) = grant(&server, json!({"ttl_ms": 60_000}));
    let (gone, _) = grant(
        &server,
        json!({"ttl_ms": 60_000, "durability": "ephemeral"}),
    );
    let r = server.post_json(LOCK, &json!({"name": "p", "lease_id": kept}));
    assert_reply(&r, 200, "acquired");
    let token = r.json["fencing_token"].as_u64().unwrap();
    let r = server.post_json(LOCK, &json!({"name": "e", "lease_id": gone}));
    assert_reply(&r, 200, "acquired");
    let ephemeral_token = r.json["fencing_token"].as_u64().unwrap();
    server.kill();

    let server = Server::start_in(Some(dir.path()), &args, &[]);
    let info = lease_call(&server, LEASE_GET, &kept);
    assert_reply(&info, 200, "found");
    assert_eq!(info.json["expires_at_ms"].as_u64(), Some(expires));
    assert_eq!(info.json["locks"], json!(["p"]));
    let held = server.post_json(GET, &json!({"name": "p"}));
    assert_reply(&held, 200, "found");
    assert_eq!(held.json["owner"], kept.as_str());
    assert_eq!(held.json["fencing_token"].as_u64(), Some(token));
    // The ephemeral lease and its lock are gone; tokens still rise.
    assert_reply(&lease_call(&server, LEASE_GET, &gone), 409, "not_held");
    assert_reply(
        &server.post_json(GET, &json!({"name": "e"})),
        404,
        "not_found",
    );
    let e = server.post_json(LOCK, &json!({"name": "e", "owner": "o", "ttl_ms": 1000}));
    assert_reply(&e, 200, "acquired");
    assert!(e.json["fencing_token"].as_u64() > Some(ephemeral_token));
    // And the persistent lease still works after the restart.
    assert_reply(&lease_call(&server, REFRESH, &kept), 200, "refreshed");
    let revoked = lease_call(&server, REVOKE, &kept);
    assert_eq!(revoked.json["released"], 1, "{}", revoked.body);
    assert_reply(
        &server.post_json(GET, &json!({"name": "p"})),
        404,
        "not_found",
    );
}
