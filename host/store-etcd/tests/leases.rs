//! Leases on the etcd store (docs/contract.md#c16-leases), on a real etcd:
//! refresh and revoke as one transaction each, hand-offs to queue heads,
//! dead leases, restarts, and the end of a lease seen from another host.
//!
//! Time is a `ManualClock` shared by every backend of a test; etcd's own
//! leases run in real time, so the backends get a long lease slack.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, GetOptions};
use lockd_core::{Durability, Grant, Key, LockBackend, LockError, LockOptions, ManualClock};
use lockd_etcd::{EtcdBackend, EtcdOptions};
use lockd_test_support::etcd::EtcdCluster;

const NS: &str = "test";
const START_MS: u64 = 1_700_000_000_000;

fn opts(wait_ms: u64) -> LockOptions {
    LockOptions {
        wait_ms,
        ..LockOptions::default()
    }
}

fn key(name: &str) -> Key {
    Key::new(NS, name)
}

fn lease(id: &str) -> Key {
    Key::new(NS, format!("lease-{id}"))
}

fn options(etcd: &EtcdCluster) -> EtcdOptions {
    let mut o = EtcdOptions::new(etcd.endpoints());
    // The test clock stands still while etcd's leases run in real time.
    o.lease_slack = Duration::from_secs(600);
    o.request_timeout = Duration::from_secs(5);
    o
}

async fn connect(etcd: &EtcdCluster, clock: &ManualClock) -> Arc<EtcdBackend> {
    Arc::new(
        EtcdBackend::connect(options(etcd), Arc::new(clock.clone()))
            .await
            .unwrap(),
    )
}

async fn raw(etcd: &EtcdCluster) -> Client {
    Client::connect(etcd.endpoints(), None).await.unwrap()
}

/// Waits (real time) until `n` waiters are queued in etcd.
async fn until_queued(client: &mut Client, n: i64) {
    for _ in 0..1000 {
        let resp = client
            .get(
                "/lockd/.queue/",
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
            .await
            .unwrap();
        if resp.count() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never saw {n} waiters queued");
}

async fn holder(b: &EtcdBackend, name: &str) -> Option<(String, u64, u64)> {
    b.get(&key(name))
        .await
        .unwrap()
        .map(|i| (i.owner, i.fencing_token, i.expires_at_ms))
}

async fn locks_of(b: &EtcdBackend, l: &Key) -> Vec<String> {
    b.get_lease(l).await.unwrap().expect("lease is live").locks
}

#[tokio::test]
async fn refresh_moves_the_lease_and_every_lock_under_it() {
    let etcd = EtcdCluster::start().unwrap();
    let clock = ManualClock::new(START_MS);
    let b = connect(&etcd, &clock).await;
    let l = lease("r");
    let expires = b
        .grant_lease(&l, 10_000, Durability::Persistent)
        .await
        .unwrap();
    assert_eq!(expires, START_MS + 10_000);
    let mut grants = Vec::new();
    for name in ["c", "a", "b"] {
        let g = b.lock_in_lease(&key(name), &l.name, opts(0)).await.unwrap();
        assert_eq!(g.expires_at_ms, expires);
        grants.push((name, g));
    }
    assert_eq!(locks_of(&b, &l).await, ["a", "b", "c"]);
    // A lock the lease holds answers its grant unchanged, under the lease
    // or as a plain lock of its owner, even with time passed.
    clock.advance(1_000);
    let again = b.lock_in_lease(&key("a"), &l.name, opts(0)).await.unwrap();
    assert_eq!(again, grants[1].1);
    let plain = b.lock(&key("a"), &l.name, 99_000, opts(0)).await.unwrap();
    assert_eq!(plain, grants[1].1);

    clock.advance(4_000);
    let refreshed = b.refresh_lease(&l).await.unwrap();
    assert_eq!(refreshed, START_MS + 5_000 + 10_000);
    let info = b.get_lease(&l).await.unwrap().unwrap();
    assert_eq!(
        (info.ttl_ms, info.expires_at_ms, info.durability),
        (10_000, refreshed, Durability::Persistent)
    );
    for (name, g) in &grants {
        let (owner, token, exp) = holder(&b, name).await.unwrap();
        assert_eq!(owner, *l.name);
        assert_eq!(token, g.fencing_token, "a refresh keeps the token");
        assert_eq!(exp, refreshed, "{name} did not move with the lease");
    }
    // Past the old expiry, all still held; past the new one, all free.
    clock.advance(9_000);
    for (name, _) in &grants {
        assert!(holder(&b, name).await.is_some(), "{name}");
    }
    clock.advance(1_000);
    for (name, _) in &grants {
        assert_eq!(holder(&b, name).await, None, "{name}");
    }
    assert_eq!(b.get_lease(&l).await.unwrap(), None);
    assert_eq!(b.refresh_lease(&l).await, Err(LockError::NotHeld));
}

#[tokio::test]
async fn revoke_releases_every_lock_in_one_transaction_to_each_queue_head() {
    let etcd = EtcdCluster::start().unwrap();
    let clock = ManualClock::new(START_MS);
    let b = connect(&etcd, &clock).await;
    let mut client = raw(&etcd).await;
    let (l, m) = (lease("l"), lease("m"));
    b.grant_lease(&l, 60_000, Durability::Persistent)
        .await
        .unwrap();
    let m_expires = b
        .grant_lease(&m, 30_000, Durability::Persistent)
        .await
        .unwrap();
    let mut held = Vec::new();
    for name in ["a", "b", "c", "d"] {
        held.push(b.lock_in_lease(&key(name), &l.name, opts(0)).await.unwrap());
    }
    // One lock of the lease is released alone; the lease lives on.
    b.unlock(&key("d"), &l.name, Some(held[3].fencing_token))
        .await
        .unwrap();
    assert_eq!(locks_of(&b, &l).await, ["a", "b", "c"]);
    // Its expiry is the lease's: no plain extend.
    match b.extend(&key("a"), &l.name, 1_000).await {
        Err(LockError::InvalidArgument(m)) => assert!(m.contains("refresh the lease"), "{m}"),
        other => panic!("expected invalid_argument, got {other:?}"),
    }
    // Busy for others, with the lease as owner.
    match b.lock(&key("a"), "x", 1_000, opts(0)).await {
        Err(LockError::Busy(info)) => assert_eq!(info.owner, *l.name),
        other => panic!("expected busy, got {other:?}"),
    }

    // A plain waiter on a, a waiter under lease m on b, nobody on c.
    let plain = {
        let b = b.clone();
        tokio::spawn(async move { b.lock(&key("a"), "w", 20_000, opts(60_000)).await })
    };
    until_queued(&mut client, 1).await;
    let leased = {
        let (b, m) = (b.clone(), m.clone());
        tokio::spawn(async move { b.lock_in_lease(&key("b"), &m.name, opts(60_000)).await })
    };
    until_queued(&mut client, 2).await;

    assert_eq!(b.revoke_lease(&l).await, Ok(3));
    let plain: Grant = plain.await.unwrap().unwrap();
    let leased: Grant = leased.await.unwrap().unwrap();
    assert!(plain.fencing_token > held[2].fencing_token);
    assert_eq!(plain.expires_at_ms, START_MS + 20_000);
    assert!(leased.fencing_token > held[2].fencing_token);
    assert_eq!(
        leased.expires_at_ms, m_expires,
        "a lease's lock has its expiry"
    );
    assert_eq!(
        holder(&b, "a").await,
        Some(("w".into(), plain.fencing_token, plain.expires_at_ms))
    );
    assert_eq!(
        holder(&b, "b").await,
        Some((m.name.to_string(), leased.fencing_token, m_expires))
    );
    assert_eq!(holder(&b, "c").await, None);
    assert_eq!(locks_of(&b, &m).await, ["b"]);
    assert_eq!(b.get_lease(&l).await.unwrap(), None);
    assert_eq!(b.revoke_lease(&l).await, Err(LockError::NotHeld));

    // One step: a and b changed hands at the revision that deleted c and
    // the lease, and at the revision before, the lease held all three.
    let a = client.get("/lockd/test/a", None).await.unwrap();
    let b_kv = client.get("/lockd/test/b", None).await.unwrap();
    let r = a.kvs()[0].mod_revision();
    assert_eq!(b_kv.kvs()[0].mod_revision(), r);
    for (k, at_r) in [
        ("/lockd/test/c", 0),
        ("/lockd/.leases/test/lease-l", 0),
        ("/lockd/test/a", 1),
    ] {
        let before = client
            .get(k, Some(GetOptions::new().with_revision(r - 1)))
            .await
            .unwrap();
        assert_eq!(before.kvs().len(), 1, "{k} before the revoke");
        let after = client
            .get(k, Some(GetOptions::new().with_revision(r)))
            .await
            .unwrap();
        assert_eq!(after.kvs().len(), at_r, "{k} at the revoke");
    }
    // m's unlock of b takes it out of m's record.
    b.unlock(&key("b"), &m.name, None).await.unwrap();
    assert!(locks_of(&b, &m).await.is_empty());
    assert_eq!(holder(&b, "b").await, None);
}

#[tokio::test]
async fn a_dead_lease_takes_no_lock_and_no_hand_off() {
    let etcd = EtcdCluster::start().unwrap();
    let clock = ManualClock::new(START_MS);
    let b = connect(&etcd, &clock).await;
    let mut client = raw(&etcd).await;

    // Unknown, revoked, expired: not_held everywhere.
    let unknown = lease("unknown");
    assert_eq!(
        b.lock_in_lease(&key("x"), &unknown.name, opts(0)).await,
        Err(LockError::NotHeld)
    );
    assert_eq!(b.refresh_lease(&unknown).await, Err(LockError::NotHeld));
    assert_eq!(b.revoke_lease(&unknown).await, Err(LockError::NotHeld));
    assert_eq!(b.get_lease(&unknown).await.unwrap(), None);
    let revoked = lease("revoked");
    b.grant_lease(&revoked, 10_000, Durability::Persistent)
        .await
        .unwrap();
    assert_eq!(b.revoke_lease(&revoked).await, Ok(0));
    assert_eq!(
        b.lock_in_lease(&key("x"), &revoked.name, opts(0)).await,
        Err(LockError::NotHeld)
    );
    let expired = lease("expired");
    b.grant_lease(&expired, 1_000, Durability::Ephemeral)
        .await
        .unwrap();
    clock.advance(1_000);
    assert_eq!(
        b.lock_in_lease(&key("x"), &expired.name, opts(0)).await,
        Err(LockError::NotHeld)
    );
    assert_eq!(b.refresh_lease(&expired).await, Err(LockError::NotHeld));
    assert_eq!(holder(&b, "x").await, None);

    // A waiter whose lease is revoked while it waits answers not_held, and
    // the lock never goes to that lease.
    let x = b.lock(&key("q"), "x", 60_000, opts(0)).await.unwrap();
    let l = lease("waiting");
    b.grant_lease(&l, 30_000, Durability::Persistent)
        .await
        .unwrap();
    let waiting = {
        let (b, l) = (b.clone(), l.clone());
        tokio::spawn(async move { b.lock_in_lease(&key("q"), &l.name, opts(60_000)).await })
    };
    until_queued(&mut client, 1).await;
    assert_eq!(b.revoke_lease(&l).await, Ok(0));
    let answer = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter heard of the revoke")
        .unwrap();
    assert_eq!(answer, Err(LockError::NotHeld));
    until_queued(&mut client, 0).await;
    b.unlock(&key("q"), "x", Some(x.fencing_token))
        .await
        .unwrap();
    assert_eq!(holder(&b, "q").await, None);

    // A waiter (of a host that never claims itself) under a lease that has
    // ended is dropped at the hand-off: the lock goes to nobody, not to
    // the dead lease.
    let x = b.lock(&key("q"), "x", 60_000, opts(0)).await.unwrap();
    client
        .put(
            "/lockd/.queue/test/q/slow-1",
            format!(
                r#"{{"v":1,"id":"slow-1","owner":"{0}","ttl_ms":1000,"durability":"persistent","session":{1},"lease":"{0}"}}"#,
                expired.name,
                b.session_lease()
            ),
            None,
        )
        .await
        .unwrap();
    b.unlock(&key("q"), "x", Some(x.fencing_token))
        .await
        .unwrap();
    assert_eq!(holder(&b, "q").await, None);
    until_queued(&mut client, 0).await;
}

#[tokio::test]
async fn persistent_leases_survive_a_restart_and_ephemeral_ones_do_not() {
    let etcd = EtcdCluster::start().unwrap();
    let clock = ManualClock::new(START_MS);
    let (p, e) = (lease("p"), lease("e"));
    let (p_grant, e_grant) = {
        let b = connect(&etcd, &clock).await;
        let p_expires = b
            .grant_lease(&p, 20_000, Durability::Persistent)
            .await
            .unwrap();
        b.grant_lease(&e, 20_000, Durability::Ephemeral)
            .await
            .unwrap();
        let pa = b.lock_in_lease(&key("pa"), &p.name, opts(0)).await.unwrap();
        let pb = b.lock_in_lease(&key("pb"), &p.name, opts(0)).await.unwrap();
        let ea = b.lock_in_lease(&key("ea"), &e.name, opts(0)).await.unwrap();
        assert_eq!(pa.expires_at_ms, p_expires);
        assert_eq!(
            b.get(&key("ea")).await.unwrap().unwrap().durability,
            Durability::Ephemeral
        );
        ((pa, pb), ea)
        // The host goes away: its session (and so the ephemeral lease) ends.
    };
    clock.advance(1_000);
    let b = connect(&etcd, &clock).await;
    let info = b
        .get_lease(&p)
        .await
        .unwrap()
        .expect("persistent lease kept");
    assert_eq!(info.expires_at_ms, START_MS + 20_000);
    assert_eq!(info.locks, ["pa", "pb"]);
    for (name, g) in [("pa", p_grant.0), ("pb", p_grant.1)] {
        assert_eq!(
            holder(&b, name).await,
            Some((p.name.to_string(), g.fencing_token, g.expires_at_ms))
        );
    }
    assert_eq!(b.get_lease(&e).await.unwrap(), None);
    assert_eq!(holder(&b, "ea").await, None);
    assert_eq!(
        b.lock_in_lease(&key("ea"), &e.name, opts(0)).await,
        Err(LockError::NotHeld)
    );
    // The kept lease works on the new host, and tokens keep rising.
    let refreshed = b.refresh_lease(&p).await.unwrap();
    assert_eq!(refreshed, START_MS + 1_000 + 20_000);
    assert_eq!(holder(&b, "pa").await.unwrap().2, refreshed);
    assert_eq!(b.revoke_lease(&p).await, Ok(2));
    let mut last = p_grant.1.fencing_token.max(e_grant.fencing_token);
    let q = lease("q");
    b.grant_lease(&q, 20_000, Durability::Persistent)
        .await
        .unwrap();
    for name in ["pa", "ea", "pb", "new"] {
        let g = b.lock_in_lease(&key(name), &q.name, opts(0)).await.unwrap();
        assert!(
            g.fencing_token > last,
            "{name}: {} <= {last}",
            g.fencing_token
        );
        last = g.fencing_token;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_ended_hears_a_revoke_and_an_expiry_from_another_host() {
    let etcd = EtcdCluster::start().unwrap();
    let clock = ManualClock::new(START_MS);
    let a = connect(&etcd, &clock).await;
    let b = connect(&etcd, &clock).await;
    let pending = |f: &tokio::task::JoinHandle<()>| !f.is_finished();

    // Revoked through host A: host B hears it.
    let l = lease("revoked");
    a.grant_lease(&l, 60_000, Durability::Persistent)
        .await
        .unwrap();
    a.lock_in_lease(&key("a"), &l.name, opts(0)).await.unwrap();
    let ended = tokio::spawn(b.lease_ended(&l));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(pending(&ended), "ended while the lease lives");
    a.revoke_lease(&l).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), ended)
        .await
        .expect("host B never heard of the revoke")
        .unwrap();

    // Refreshed through A: B's watch follows the new expiry, and ends at it.
    let l = lease("expires");
    a.grant_lease(&l, 10_000, Durability::Ephemeral)
        .await
        .unwrap();
    let ended = tokio::spawn(b.lease_ended(&l));
    clock.advance(5_000);
    assert_eq!(a.refresh_lease(&l).await, Ok(START_MS + 15_000));
    clock.advance(6_000); // past the first expiry
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(pending(&ended), "ended at the expiry the refresh moved");
    clock.advance(4_000); // at the new one
    tokio::time::timeout(Duration::from_secs(5), ended)
        .await
        .expect("host B never saw the expiry")
        .unwrap();

    // Not live: at once.
    tokio::time::timeout(Duration::from_secs(5), b.lease_ended(&lease("none")))
        .await
        .expect("an unknown lease has ended");
}

#[tokio::test]
async fn a_lease_holds_at_most_max_locks_per_lease() {
    let etcd = EtcdCluster::start().unwrap();
    let clock = ManualClock::new(START_MS);
    let mut o = options(&etcd);
    o.max_locks_per_lease = 2;
    let b = EtcdBackend::connect(o, Arc::new(clock.clone()))
        .await
        .unwrap();
    let l = lease("full");
    b.grant_lease(&l, 60_000, Durability::Persistent)
        .await
        .unwrap();
    b.lock_in_lease(&key("a"), &l.name, opts(0)).await.unwrap();
    let g = b.lock_in_lease(&key("b"), &l.name, opts(0)).await.unwrap();
    match b.lock_in_lease(&key("c"), &l.name, opts(0)).await {
        Err(LockError::Denied(m)) => assert!(m.contains("max_locks_per_lease"), "{m}"),
        other => panic!("expected denied, got {other:?}"),
    }
    assert_eq!(holder(&b, "c").await, None);
    // Nor does it queue for a lock held by another.
    b.lock(&key("d"), "x", 60_000, opts(0)).await.unwrap();
    match b.lock_in_lease(&key("d"), &l.name, opts(60_000)).await {
        Err(LockError::Denied(m)) => assert!(m.contains("max_locks_per_lease"), "{m}"),
        other => panic!("expected denied, got {other:?}"),
    }
    // A lock it holds still answers, and room comes back with an unlock.
    assert_eq!(b.lock_in_lease(&key("b"), &l.name, opts(0)).await, Ok(g));
    b.unlock(&key("a"), &l.name, None).await.unwrap();
    b.lock_in_lease(&key("c"), &l.name, opts(0)).await.unwrap();
    assert_eq!(locks_of(&b, &l).await, ["b", "c"]);
}

/// Two hosts lock, unlock and refresh under one lease at once: every
/// transaction is guarded by the lease key's revision, so the lease's
/// record always lists exactly the locks it holds, all with its expiry;
/// and a revoke racing with grants leaves none of them held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_lease_operations_keep_the_record_exact() {
    let etcd = EtcdCluster::start().unwrap();
    let clock = ManualClock::new(START_MS);
    let a = connect(&etcd, &clock).await;
    let b = connect(&etcd, &clock).await;
    let l = lease("busy");
    a.grant_lease(&l, 60_000, Durability::Persistent)
        .await
        .unwrap();
    const NAMES: usize = 6;
    let name = |i: usize| format!("n{}", i % NAMES);
    let mut tasks = Vec::new();
    for (host, step) in [(a.clone(), 1), (b.clone(), 5)] {
        let l = l.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..40 {
                host.lock_in_lease(&key(&name(i * step)), &l.name, opts(0))
                    .await
                    .unwrap();
            }
        }));
    }
    for (host, step) in [(b.clone(), 1), (a.clone(), 7)] {
        let l = l.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..40 {
                match host.unlock(&key(&name(i * step + 3)), &l.name, None).await {
                    Ok(()) | Err(LockError::NotHeld) => {}
                    other => panic!("unlock: {other:?}"),
                }
            }
        }));
    }
    {
        let (host, l, clock) = (b.clone(), l.clone(), clock.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..20 {
                clock.advance(10);
                host.refresh_lease(&l).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let info = a.get_lease(&l).await.unwrap().unwrap();
    let mut held = Vec::new();
    for i in 0..NAMES {
        if let Some((owner, _, expires)) = holder(&a, &name(i)).await {
            assert_eq!(owner, *l.name);
            assert_eq!(expires, info.expires_at_ms, "{} lags the lease", name(i));
            held.push(name(i));
        }
    }
    assert_eq!(info.locks, held, "the record lists exactly the locks held");

    // A revoke racing with grants under the lease: once it answered, none
    // of the lease's locks is held, and later grants answer not_held.
    let granted = Arc::new(AtomicUsize::new(0));
    let grabbing = {
        let (host, l, granted) = (a.clone(), l.clone(), granted.clone());
        tokio::spawn(async move {
            for i in 0.. {
                match host.lock_in_lease(&key(&name(i)), &l.name, opts(0)).await {
                    Ok(_) => granted.fetch_add(1, Ordering::SeqCst),
                    // Revoked: and from now on, always.
                    Err(LockError::NotHeld) => break,
                    other => panic!("lock: {other:?}"),
                };
            }
            for i in 0..NAMES {
                assert_eq!(
                    host.lock_in_lease(&key(&name(i)), &l.name, opts(0)).await,
                    Err(LockError::NotHeld)
                );
            }
        })
    };
    while granted.load(Ordering::SeqCst) < 5 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let released = b.revoke_lease(&l).await.unwrap();
    for i in 0..NAMES {
        assert_eq!(
            holder(&b, &name(i)).await,
            None,
            "{} after the revoke",
            name(i)
        );
    }
    assert!((1..=NAMES as u64).contains(&released), "{released}");
    tokio::time::timeout(Duration::from_secs(10), grabbing)
        .await
        .expect("grants under a revoked lease kept succeeding")
        .unwrap();
    for i in 0..NAMES {
        assert_eq!(holder(&a, &name(i)).await, None);
    }
}

/// C18: a lease whose store stays unreachable past its expiry is lost; not
/// before the expiry.
#[tokio::test]
async fn lease_ended_when_etcd_stays_unreachable_past_the_expiry() {
    let mut etcd = EtcdCluster::start().unwrap();
    let clock = ManualClock::new(START_MS);
    let mut o = options(&etcd);
    o.request_timeout = Duration::from_millis(500);
    let b = EtcdBackend::connect(o, Arc::new(clock.clone()))
        .await
        .unwrap();
    let l = lease("cut-off");
    b.grant_lease(&l, 10_000, Durability::Persistent)
        .await
        .unwrap();
    let ended = tokio::spawn(b.lease_ended(&l));
    tokio::time::sleep(Duration::from_millis(200)).await;
    etcd.kill_member(0);
    // Unreachable, but the expiry has not come: not lost yet.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(!ended.is_finished(), "lost before its expiry");
    clock.advance(10_000);
    tokio::time::timeout(Duration::from_secs(5), ended)
        .await
        .expect("never lost while etcd stayed unreachable past the expiry")
        .unwrap();
}
