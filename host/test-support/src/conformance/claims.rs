//! Shared locks, semaphores and lock-delay (docs/contract.md C21 to C23),
//! for a store whose `supports_claims()` is true.

use std::collections::HashMap;

use lockd_core::{
    Claim, Durability, EventKind, LockDelays, LockError, LockOptions, LockService, ManualClock,
};
use tokio::task::JoinHandle;

use super::support::{open, settle_tasks, StoreFactory, NS, START_MS};

fn claim(claim: Claim, wait_ms: u64) -> LockOptions {
    LockOptions {
        wait_ms,
        claim,
        ..LockOptions::default()
    }
}

fn shared(wait_ms: u64) -> LockOptions {
    claim(Claim::Shared, wait_ms)
}

fn exclusive(wait_ms: u64) -> LockOptions {
    claim(Claim::Exclusive, wait_ms)
}

fn permit(permits: u32, wait_ms: u64) -> LockOptions {
    claim(Claim::Permit { permits }, wait_ms)
}

fn spawn_lock(
    s: &LockService,
    name: &'static str,
    owner: &'static str,
    options: LockOptions,
) -> JoinHandle<Result<lockd_core::Grant, LockError>> {
    let s = s.clone();
    tokio::spawn(async move { s.lock(NS, name, owner, 60_000, options).await })
}

fn busy_owner(result: Result<lockd_core::Grant, LockError>) -> String {
    match result {
        Err(LockError::Busy(info)) => info.owner,
        other => panic!("expected busy, got {other:?}"),
    }
}

fn invalid(result: Result<impl std::fmt::Debug, LockError>) -> String {
    match result {
        Err(LockError::InvalidArgument(message)) => message,
        other => panic!("expected invalid_argument, got {other:?}"),
    }
}

/// Owners of the name's holders, by token, and their claims.
async fn holders(s: &LockService, name: &str) -> Vec<(String, Claim)> {
    s.describe(NS, name)
        .await
        .unwrap()
        .holders
        .into_iter()
        .map(|h| (h.info.owner, h.claim))
        .collect()
}

/// C21: shared holders hold together, each its own grant with a rising
/// token; an exclusive request waits for all of them; `get` answers the most
/// recent grant and `describe` every holder.
pub async fn shared_holders_exclude_the_exclusive(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    let a = s.lock(NS, "rw", "a", 60_000, shared(0)).await.unwrap();
    let b = s.lock(NS, "rw", "b", 30_000, shared(0)).await.unwrap();
    assert!(b.fencing_token > a.fencing_token);
    assert_eq!(a.expires_at_ms, START_MS + 60_000);
    assert_eq!(b.expires_at_ms, START_MS + 30_000);
    assert_eq!(
        busy_owner(s.lock(NS, "rw", "w", 1_000, exclusive(0)).await),
        "b"
    );
    let latest = s.get(NS, "rw").await.unwrap().expect("held");
    assert_eq!(
        (latest.owner.as_str(), latest.fencing_token),
        ("b", b.fencing_token)
    );
    assert_eq!(
        holders(&s, "rw").await,
        [
            ("a".to_string(), Claim::Shared),
            ("b".to_string(), Claim::Shared)
        ]
    );
    let listed = s.list(NS, "rw").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].claim, Claim::Shared);
    assert_eq!(listed[0].info.fencing_token, b.fencing_token);
    assert_eq!(listed[0].holders.len(), 2);

    let writer = spawn_lock(&s, "rw", "w", exclusive(30_000));
    settle_tasks().await;
    assert_eq!(s.describe(NS, "rw").await.unwrap().waiters, 1);
    s.unlock(NS, "rw", "a", Some(a.fencing_token))
        .await
        .unwrap();
    settle_tasks().await;
    assert!(
        !writer.is_finished(),
        "granted while b still held it shared"
    );
    s.unlock(NS, "rw", "b", None).await.unwrap();
    let w = writer.await.unwrap().unwrap();
    assert!(w.fencing_token > b.fencing_token);
    assert_eq!(
        holders(&s, "rw").await,
        [("w".to_string(), Claim::Exclusive)]
    );
    // And the other way round: shared requests wait for the writer.
    assert_eq!(
        busy_owner(s.lock(NS, "rw", "r", 1_000, shared(0)).await),
        "w"
    );
}

/// C21: an exclusive waiter at the head stops shared requests that come
/// after it, even while the name is held shared; the shared waiters behind
/// it are then granted together.
pub async fn an_exclusive_waiter_stops_later_readers(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    s.lock(NS, "f", "r1", 60_000, shared(0)).await.unwrap();
    let writer = spawn_lock(&s, "f", "w", exclusive(30_000));
    settle_tasks().await;
    // Compatible with r1, but the writer waits: no barging.
    assert_eq!(
        busy_owner(s.lock(NS, "f", "late", 1_000, shared(0)).await),
        "r1"
    );
    let r2 = spawn_lock(&s, "f", "r2", shared(30_000));
    settle_tasks().await;
    let r3 = spawn_lock(&s, "f", "r3", shared(30_000));
    settle_tasks().await;
    assert!(
        !r2.is_finished() && !r3.is_finished(),
        "a reader passed the writer"
    );
    s.unlock(NS, "f", "r1", None).await.unwrap();
    let w = writer.await.unwrap().unwrap();
    settle_tasks().await;
    assert!(!r2.is_finished() && !r3.is_finished());
    s.unlock(NS, "f", "w", Some(w.fencing_token)).await.unwrap();
    let g2 = r2.await.unwrap().unwrap();
    let g3 = r3.await.unwrap().unwrap();
    assert!(w.fencing_token < g2.fencing_token && g2.fencing_token < g3.fencing_token);
    assert_eq!(
        holders(&s, "f").await,
        [
            ("r2".to_string(), Claim::Shared),
            ("r3".to_string(), Claim::Shared)
        ]
    );
}

/// C21: each shared grant is its own: re-lock keeps its token, extend moves
/// its expiry only, a stale token releases nothing, an expiry ends only it;
/// no owner changes mode.
pub async fn shared_grants_are_each_their_own(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    let a = s.lock(NS, "g", "a", 1_000, shared(0)).await.unwrap();
    let b = s.lock(NS, "g", "b", 60_000, shared(0)).await.unwrap();
    let again = s.lock(NS, "g", "a", 2_000, shared(0)).await.unwrap();
    assert_eq!(again.fencing_token, a.fencing_token);
    assert_eq!(again.expires_at_ms, START_MS + 2_000);
    let extended = s.extend(NS, "g", "b", 90_000).await.unwrap();
    assert_eq!(extended.fencing_token, b.fencing_token);
    assert_eq!(
        s.unlock(NS, "g", "a", Some(b.fencing_token)).await,
        Err(LockError::NotOwner)
    );
    assert_eq!(s.unlock(NS, "g", "c", None).await, Err(LockError::NotOwner));
    assert_eq!(
        s.extend(NS, "g", "c", 1_000).await,
        Err(LockError::NotOwner)
    );
    // No upgrade, no downgrade: refused, and what is held stays.
    let message = invalid(s.lock(NS, "g", "a", 1_000, exclusive(0)).await);
    assert!(message.contains("release it first"), "{message}");
    s.lock(NS, "x", "solo", 60_000, exclusive(0)).await.unwrap();
    invalid(s.lock(NS, "x", "solo", 60_000, shared(0)).await);
    assert_eq!(
        holders(&s, "x").await,
        [("solo".to_string(), Claim::Exclusive)]
    );
    // a expires; b holds on.
    clock.advance(2_000);
    assert_eq!(holders(&s, "g").await, [("b".to_string(), Claim::Shared)]);
    assert_eq!(s.unlock(NS, "g", "a", None).await, Err(LockError::NotOwner));
    s.unlock(NS, "g", "b", Some(b.fencing_token)).await.unwrap();
    assert_eq!(s.unlock(NS, "g", "b", None).await, Err(LockError::NotHeld));
    assert_eq!(s.get(NS, "g").await.unwrap(), None);
    // Shared grants are not taken under a lease.
    let lease = s
        .grant_lease(NS, 60_000, Durability::Persistent)
        .await
        .unwrap();
    invalid(s.lock(NS, "g", &lease.id, 1_000, shared(0)).await);
}

/// C22: never more holders than permits; FIFO; one permit per owner; the
/// size is fixed while anything holds or waits; a lock and a semaphore never
/// share a name; an expired permit returns by itself.
pub async fn a_semaphore_never_exceeds_its_permits(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    let a = s.lock(NS, "sem", "a", 1_000, permit(2, 0)).await.unwrap();
    let b = s.lock(NS, "sem", "b", 60_000, permit(2, 0)).await.unwrap();
    assert!(b.fencing_token > a.fencing_token);
    assert_eq!(
        busy_owner(s.lock(NS, "sem", "c", 1_000, permit(2, 0)).await),
        "b"
    );
    let again = s.lock(NS, "sem", "a", 1_000, permit(2, 0)).await.unwrap();
    assert_eq!(again.fencing_token, a.fencing_token, "one permit per owner");
    let message = invalid(s.lock(NS, "sem", "c", 1_000, permit(3, 0)).await);
    assert!(message.contains("2 permits"), "{message}");
    invalid(s.lock(NS, "sem", "c", 1_000, exclusive(0)).await);
    invalid(s.lock(NS, "sem", "c", 1_000, shared(0)).await);
    s.lock(NS, "plain", "o", 60_000, exclusive(0))
        .await
        .unwrap();
    invalid(s.lock(NS, "plain", "c", 1_000, permit(2, 0)).await);
    for bad in [0, lockd_core::MAX_PERMITS + 1] {
        invalid(s.lock(NS, "other", "c", 1_000, permit(bad, 0)).await);
    }
    assert_eq!(s.get(NS, "other").await.unwrap(), None);

    let c = spawn_lock(&s, "sem", "c", permit(2, 30_000));
    settle_tasks().await;
    let d = spawn_lock(&s, "sem", "d", permit(2, 30_000));
    settle_tasks().await;
    assert_eq!(s.describe(NS, "sem").await.unwrap().waiters, 2);
    // a's permit expires and goes to c, the first waiter.
    clock.advance(1_000);
    let gc = c.await.unwrap().unwrap();
    settle_tasks().await;
    assert!(!d.is_finished(), "more holders than permits");
    assert_eq!(
        holders(&s, "sem").await,
        [
            ("b".to_string(), Claim::Permit { permits: 2 }),
            ("c".to_string(), Claim::Permit { permits: 2 })
        ]
    );
    s.unlock(NS, "sem", "b", None).await.unwrap();
    let gd = d.await.unwrap().unwrap();
    assert!(gd.fencing_token > gc.fencing_token);
    s.unlock(NS, "sem", "c", None).await.unwrap();
    s.unlock(NS, "sem", "d", None).await.unwrap();
    // Idle again: the next acquire sets the size anew.
    s.lock(NS, "sem", "e", 1_000, permit(5, 0)).await.unwrap();
}

/// C21, C19: force-unlock of a shared name releases every holder in one
/// step and answers the most recent; events carry each grant's claim.
pub async fn force_unlock_releases_every_shared_holder(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    let mut events = s.events().expect("this store publishes events");
    s.lock(NS, "fs", "a", 60_000, shared(0)).await.unwrap();
    let b = s.lock(NS, "fs", "b", 60_000, shared(0)).await.unwrap();
    let writer = spawn_lock(&s, "fs", "w", exclusive(30_000));
    settle_tasks().await;
    let released = s.force_unlock(NS, "fs").await.unwrap();
    assert_eq!(
        (released.owner.as_str(), released.fencing_token),
        ("b", b.fencing_token)
    );
    let w = writer.await.unwrap().unwrap();
    assert!(w.fencing_token > b.fencing_token);
    let mut seen = Vec::new();
    while seen.len() < 5 {
        let event = tokio::time::timeout(std::time::Duration::from_secs(10), events.recv())
            .await
            .expect("no event within 10 s")
            .expect("the event stream ended or lagged");
        if &*event.namespace == NS && &*event.name == "fs" {
            seen.push((event.kind, event.owner.to_string(), event.claim));
        }
    }
    let force = |owner: &str| (EventKind::ForceReleased, owner.to_string(), Claim::Shared);
    assert_eq!(
        seen[0],
        (EventKind::Acquired, "a".to_string(), Claim::Shared)
    );
    assert_eq!(
        seen[1],
        (EventKind::Acquired, "b".to_string(), Claim::Shared)
    );
    assert_eq!(seen[2..4], [force("a"), force("b")]);
    assert_eq!(
        seen[4],
        (EventKind::HandedOff, "w".to_string(), Claim::Exclusive)
    );
}

/// C23: an expired or force-released grant holds its place back for the
/// namespace's delay; waiters are served when it ends; a release by the
/// holder frees at once.
pub async fn lock_delay_holds_back_an_ended_grant(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await.with_lock_delays(LockDelays {
        default_ms: 0,
        per_namespace: HashMap::from([(NS.to_string(), 1_000)]),
    });
    let a = s.lock(NS, "d", "a", 100, exclusive(0)).await.unwrap();
    clock.advance(100);
    // Expired at START + 100: held back until START + 1 100.
    assert_eq!(s.get(NS, "d").await.unwrap(), None);
    match s.lock(NS, "d", "b", 60_000, exclusive(0)).await {
        Err(LockError::Busy(info)) => {
            assert_eq!(
                (info.owner.as_str(), info.fencing_token),
                ("a", a.fencing_token)
            );
            assert_eq!(
                info.expires_at_ms,
                START_MS + 1_100,
                "busy says when the delay ends"
            );
        }
        other => panic!("expected busy during the delay, got {other:?}"),
    }
    assert_eq!(
        s.describe(NS, "d").await.unwrap().delay_until_ms,
        Some(START_MS + 1_100)
    );
    let waiter = spawn_lock(&s, "d", "b", exclusive(30_000));
    settle_tasks().await;
    clock.advance(999);
    settle_tasks().await;
    assert!(!waiter.is_finished(), "granted during the delay");
    clock.advance(1);
    let b = waiter.await.unwrap().unwrap();
    assert!(b.fencing_token > a.fencing_token);
    // A force-release holds back from its own moment.
    s.force_unlock(NS, "d").await.unwrap();
    busy_owner(s.lock(NS, "d", "c", 60_000, exclusive(0)).await);
    clock.advance(1_000);
    let c = s.lock(NS, "d", "c", 60_000, exclusive(0)).await.unwrap();
    // A release by the holder frees at once.
    s.unlock(NS, "d", "c", Some(c.fencing_token)).await.unwrap();
    s.lock(NS, "d", "e", 60_000, exclusive(0)).await.unwrap();
    // An expired shared grant holds back writers, not readers; a permit
    // is one permit fewer.
    s.lock(NS, "rd", "r", 100, shared(0)).await.unwrap();
    s.lock(NS, "sd", "p", 100, permit(1, 0)).await.unwrap();
    clock.advance(100);
    s.lock(NS, "rd", "r2", 60_000, shared(0)).await.unwrap();
    busy_owner(s.lock(NS, "rd", "w", 60_000, exclusive(0)).await);
    busy_owner(s.lock(NS, "sd", "q", 60_000, permit(1, 0)).await);
    clock.advance(1_000);
    s.lock(NS, "sd", "q", 60_000, permit(1, 0)).await.unwrap();
}

/// C10 with C21 and C22: persistent shared grants and permits are back
/// after a restart with their owners, tokens and expiries; ephemeral ones
/// are gone; tokens go on rising.
pub async fn shared_grants_and_permits_survive_restart(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let (a, b, p, last) = {
        let s = open(factory, &clock).await;
        let a = s.lock(NS, "rs", "a", 60_000, shared(0)).await.unwrap();
        let b = s.lock(NS, "rs", "b", 60_000, shared(0)).await.unwrap();
        let eph = LockOptions {
            durability: Durability::Ephemeral,
            ..shared(0)
        };
        s.lock(NS, "rs", "e", 60_000, eph).await.unwrap();
        let p = s.lock(NS, "ps", "p", 90_000, permit(3, 0)).await.unwrap();
        let q = s.lock(NS, "ps", "q", 60_000, permit(3, 0)).await.unwrap();
        s.unlock(NS, "ps", "q", Some(q.fencing_token))
            .await
            .unwrap();
        (a, b, p, q.fencing_token)
    };
    settle_tasks().await;
    let s = open(factory, &clock).await;
    if !factory.keeps_persistent_locks() {
        assert_eq!(s.get(NS, "rs").await.unwrap(), None);
        return;
    }
    let state = s.describe(NS, "rs").await.unwrap();
    let got: Vec<(String, u64, u64, Claim)> = state
        .holders
        .iter()
        .map(|h| {
            (
                h.info.owner.clone(),
                h.info.fencing_token,
                h.info.expires_at_ms,
                h.claim,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "a".to_string(),
                a.fencing_token,
                START_MS + 60_000,
                Claim::Shared
            ),
            (
                "b".to_string(),
                b.fencing_token,
                START_MS + 60_000,
                Claim::Shared
            ),
        ]
    );
    let permits = s.describe(NS, "ps").await.unwrap();
    assert_eq!(permits.holders.len(), 1);
    assert_eq!(permits.holders[0].info.fencing_token, p.fencing_token);
    assert_eq!(permits.holders[0].claim, Claim::Permit { permits: 3 });
    invalid(s.lock(NS, "ps", "z", 1_000, permit(4, 0)).await);
    let next = s.lock(NS, "ps", "z", 1_000, permit(3, 0)).await.unwrap();
    assert!(next.fencing_token > last);
    // The recovered readers still exclude a writer until they release.
    busy_owner(s.lock(NS, "rs", "w", 1_000, exclusive(0)).await);
    s.unlock(NS, "rs", "a", None).await.unwrap();
    s.unlock(NS, "rs", "b", None).await.unwrap();
    s.lock(NS, "rs", "w", 1_000, exclusive(0)).await.unwrap();
}

fn campaign(wait_ms: u64) -> LockOptions {
    LockOptions {
        wait_ms,
        ..LockOptions::default()
    }
}

fn spawn_campaign(
    s: &LockService,
    candidate: &'static str,
    value: &'static str,
    ttl_ms: u64,
) -> JoinHandle<Result<lockd_core::Grant, LockError>> {
    let s = s.clone();
    tokio::spawn(async move {
        s.campaign(NS, "leader", candidate, value, ttl_ms, campaign(30_000))
            .await
    })
}

/// C24: candidates lead one at a time, first come first served; anyone
/// learns the leader and its value; the leader proclaims, resigns, or
/// lets its term expire, and the next in line leads.
pub async fn candidates_lead_in_turn(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    assert_eq!(s.leader(NS, "leader").await.unwrap(), None);
    let a = s
        .campaign(NS, "leader", "a", "10.0.0.1:80", 60_000, campaign(0))
        .await
        .unwrap();
    match s
        .campaign(NS, "leader", "b", "10.0.0.2:80", 60_000, campaign(0))
        .await
    {
        Err(LockError::Busy(info)) => assert_eq!(info.owner, "a"),
        other => panic!("expected busy, got {other:?}"),
    }
    let b = spawn_campaign(&s, "b", "10.0.0.2:80", 1_000);
    settle_tasks().await;
    let c = spawn_campaign(&s, "c", "10.0.0.3:80", 60_000);
    settle_tasks().await;
    let leader = s.leader(NS, "leader").await.unwrap().expect("a leads");
    assert_eq!(
        (leader.info.owner.as_str(), leader.value.as_str()),
        ("a", "10.0.0.1:80")
    );
    assert_eq!(leader.info.fencing_token, a.fencing_token);
    assert_eq!(leader.since_ms, Some(START_MS));
    // Proclaim: the leader, under its token, only.
    s.proclaim(NS, "leader", "a", a.fencing_token, "10.0.0.1:81")
        .await
        .unwrap();
    assert_eq!(
        s.proclaim(NS, "leader", "b", a.fencing_token, "x").await,
        Err(LockError::NotOwner)
    );
    assert_eq!(
        s.proclaim(NS, "leader", "a", a.fencing_token + 1, "x")
            .await,
        Err(LockError::NotOwner)
    );
    let leader = s.leader(NS, "leader").await.unwrap().expect("a leads");
    assert_eq!(leader.value, "10.0.0.1:81");
    assert_eq!(
        leader.info.fencing_token, a.fencing_token,
        "proclaim keeps the token"
    );
    let info = s.get(NS, "leader").await.unwrap().expect("led");
    assert_eq!(info.owner, "a");
    // a resigns: b, first in line, leads with its own value.
    s.unlock(NS, "leader", "a", Some(a.fencing_token))
        .await
        .unwrap();
    let gb = b.await.unwrap().unwrap();
    assert!(gb.fencing_token > a.fencing_token);
    let leader = s.leader(NS, "leader").await.unwrap().expect("b leads");
    assert_eq!(
        (leader.info.owner.as_str(), leader.value.as_str()),
        ("b", "10.0.0.2:80")
    );
    assert!(!c.is_finished());
    // b's term runs out without a renewal: c leads.
    clock.advance(1_000);
    let gc = c.await.unwrap().unwrap();
    assert!(gc.fencing_token > gb.fencing_token);
    assert_eq!(
        holders(&s, "leader").await,
        [("c".to_string(), Claim::Leader)]
    );
    s.unlock(NS, "leader", "c", None).await.unwrap();
    assert_eq!(s.leader(NS, "leader").await.unwrap(), None);
    assert_eq!(
        s.proclaim(NS, "leader", "c", gc.fencing_token, "x").await,
        Err(LockError::NotHeld)
    );
}

/// C24: elections, locks and semaphores never share a name; values are
/// bounded; the leadership is not taken by `lock`.
pub async fn elections_keep_to_their_names(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    s.campaign(NS, "e", "a", "v", 60_000, campaign(0))
        .await
        .unwrap();
    invalid(s.lock(NS, "e", "b", 1_000, exclusive(0)).await);
    invalid(s.lock(NS, "e", "b", 1_000, shared(0)).await);
    invalid(s.lock(NS, "e", "b", 1_000, permit(2, 0)).await);
    invalid(
        s.lock(NS, "free", "b", 1_000, claim(Claim::Leader, 0))
            .await,
    );
    s.lock(NS, "l", "a", 60_000, exclusive(0)).await.unwrap();
    s.lock(NS, "s", "a", 60_000, permit(2, 0)).await.unwrap();
    for name in ["l", "s"] {
        invalid(s.campaign(NS, name, "b", "v", 1_000, campaign(0)).await);
        invalid(s.leader(NS, name).await);
        invalid(s.proclaim(NS, name, "a", 1, "v").await);
    }
    let long = "v".repeat(lockd_core::MAX_VALUE_BYTES + 1);
    invalid(
        s.campaign(NS, "other", "b", &long, 1_000, campaign(0))
            .await,
    );
    invalid(s.proclaim(NS, "e", "a", 1, &long).await);
    assert_eq!(s.leader(NS, "other").await.unwrap(), None);
    let leader = s.leader(NS, "e").await.unwrap().expect("a leads");
    assert_eq!(leader.value, "v");
}

/// C24 with C10: a persistent leader is back after a restart with its
/// token and the value it last proclaimed; the proclaim is an event.
pub async fn leaders_survive_restart(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let a = {
        let s = open(factory, &clock).await;
        let mut events = s.events().expect("this store publishes events");
        let a = s
            .campaign(NS, "boss", "a", "first", 60_000, campaign(0))
            .await
            .unwrap();
        s.proclaim(NS, "boss", "a", a.fencing_token, "second")
            .await
            .unwrap();
        let mut kinds = Vec::new();
        while kinds.len() < 2 {
            let event = tokio::time::timeout(std::time::Duration::from_secs(10), events.recv())
                .await
                .expect("no event within 10 s")
                .expect("the event stream ended or lagged");
            if &*event.namespace == NS && &*event.name == "boss" {
                kinds.push((event.kind, event.claim, event.fencing_token));
            }
        }
        assert_eq!(
            kinds,
            [
                (EventKind::Acquired, Claim::Leader, a.fencing_token),
                (EventKind::Proclaimed, Claim::Leader, a.fencing_token)
            ]
        );
        a
    };
    settle_tasks().await;
    let s = open(factory, &clock).await;
    if !factory.keeps_persistent_locks() {
        assert_eq!(s.leader(NS, "boss").await.unwrap(), None);
        return;
    }
    let leader = s
        .leader(NS, "boss")
        .await
        .unwrap()
        .expect("the leader survives");
    assert_eq!(
        (
            leader.info.owner.as_str(),
            leader.value.as_str(),
            leader.info.fencing_token
        ),
        ("a", "second", a.fencing_token)
    );
    assert_eq!(leader.info.expires_at_ms, START_MS + 60_000);
    invalid(s.lock(NS, "boss", "b", 1_000, exclusive(0)).await);
}

/// C21 with C3: readers queued behind a writer are granted together when
/// it leaves, and a writer queued after them waits for them all; a reader
/// that times out or goes away leaves the queue without holding anything.
pub async fn readers_behind_a_writer_enter_together(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    let w0 = s.lock(NS, "q", "w0", 60_000, exclusive(0)).await.unwrap();
    let r1 = spawn_lock(&s, "q", "r1", shared(30_000));
    settle_tasks().await;
    let gone = spawn_lock(&s, "q", "gone", shared(30_000));
    settle_tasks().await;
    let r2 = spawn_lock(&s, "q", "r2", shared(30_000));
    settle_tasks().await;
    let w1 = spawn_lock(&s, "q", "w1", exclusive(30_000));
    settle_tasks().await;
    let r3 = spawn_lock(&s, "q", "r3", shared(30_000));
    settle_tasks().await;
    let short = {
        let s = s.clone();
        tokio::spawn(async move { s.lock(NS, "q", "short", 60_000, shared(100)).await })
    };
    settle_tasks().await;
    gone.abort();
    let _ = gone.await;
    assert_eq!(s.describe(NS, "q").await.unwrap().waiters, 5);
    clock.advance(100);
    assert_eq!(busy_owner(short.await.unwrap()), "w0");
    s.unlock(NS, "q", "w0", Some(w0.fencing_token))
        .await
        .unwrap();
    let g1 = r1.await.unwrap().unwrap();
    let g2 = r2.await.unwrap().unwrap();
    assert!(w0.fencing_token < g1.fencing_token && g1.fencing_token < g2.fencing_token);
    settle_tasks().await;
    assert!(!w1.is_finished() && !r3.is_finished());
    assert_eq!(
        holders(&s, "q").await,
        [
            ("r1".to_string(), Claim::Shared),
            ("r2".to_string(), Claim::Shared)
        ]
    );
    s.unlock(NS, "q", "r1", None).await.unwrap();
    settle_tasks().await;
    assert!(!w1.is_finished(), "the writer entered beside r2");
    s.unlock(NS, "q", "r2", None).await.unwrap();
    let gw = w1.await.unwrap().unwrap();
    settle_tasks().await;
    assert!(!r3.is_finished());
    s.unlock(NS, "q", "w1", Some(gw.fencing_token))
        .await
        .unwrap();
    let g3 = r3.await.unwrap().unwrap();
    assert!(g3.fencing_token > gw.fencing_token);
    assert_eq!(holders(&s, "q").await, [("r3".to_string(), Claim::Shared)]);
}

/// C16 with C21: a lease's (exclusive) lock waits behind shared holders
/// and is granted under the lease, with the lease's expiry, when they
/// leave; revoking the lease releases it.
pub async fn a_lease_lock_waits_behind_readers(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    s.lock(NS, "lr", "reader", 60_000, shared(0)).await.unwrap();
    let lease = s
        .grant_lease(NS, 20_000, Durability::Persistent)
        .await
        .unwrap();
    let waiting = {
        let s = s.clone();
        let id = lease.id.clone();
        tokio::spawn(async move { s.lock_in_lease(NS, "lr", &id, 30_000).await })
    };
    settle_tasks().await;
    s.unlock(NS, "lr", "reader", None).await.unwrap();
    let g = waiting.await.unwrap().unwrap();
    assert_eq!(g.expires_at_ms, lease.expires_at_ms);
    let info = s
        .get(NS, "lr")
        .await
        .unwrap()
        .expect("held under the lease");
    assert_eq!(info.owner, lease.id);
    assert_eq!(s.revoke_lease(NS, &lease.id).await.unwrap(), 1);
    assert_eq!(s.get(NS, "lr").await.unwrap(), None);
}
