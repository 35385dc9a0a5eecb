//! The conformance suite: the lock contract of docs/contract.md, run against any
//! [`LockBackend`] through a [`LockService`].
//!
//! A backend crate runs it with one macro call in a test file:
//!
//! ```text
//! lockd_testing::conformance_tests!(MyFactory::new());
//! ```
//!
//! Time is a [`ManualClock`]: expiry and wait timeouts are tested by moving
//! the clock, never by sleeping.

use std::sync::Arc;

use lockd_core::{
    BoxFuture, Durability, EventKind, Grant, Limits, LockBackend, LockError, LockEvent,
    LockOptions, LockService, ManualClock,
};

/// A clock reading in 2023, far from any overflow.
pub const START_MS: u64 = 1_700_000_000_000;

/// Opens the store under test.
pub trait StoreFactory: Send + Sync + 'static {
    /// Opens the store, or reopens it after every earlier handle was dropped
    /// (a restart), using `clock`.
    fn open(&self, clock: ManualClock) -> BoxFuture<'_, Arc<dyn LockBackend>>;
    /// Whether persistent locks survive a reopen.
    fn keeps_persistent_locks(&self) -> bool;
}

/// Generates one `#[tokio::test]` per conformance case for `$factory`, an
/// expression of a type implementing [`StoreFactory`].
#[macro_export]
macro_rules! conformance_tests {
    ($factory:expr) => {
        $crate::conformance_tests!(@cases $factory;
            grant_busy_and_idempotent_relock,
            unlock_checks_owner_and_token,
            extend_checks_owner_and_keeps_token,
            tokens_rise_strictly,
            expiry_frees_the_lock,
            stale_unlock_never_releases_newer_grant,
            waiters_are_served_first_in_first_out,
            wait_times_out_with_busy,
            waiter_is_woken_by_expiry,
            dropped_waiter_leaves_the_queue,
            thousands_of_waiters,
            invalid_input_changes_nothing,
            namespaces_are_isolated,
            list_filters_by_namespace_and_prefix,
            persistent_locks_survive_restart,
            tokens_rise_across_restart,
            expired_locks_stay_gone_after_restart,
            release_detached_checks_the_token,
            lease_refresh_moves_every_lock,
            lease_revoke_releases_all_and_hands_off,
            lease_expiry_releases_all_and_hands_off,
            lease_locks_wait_in_the_queue,
            dead_or_foreign_leases_are_not_held,
            leases_across_restart,
            force_unlock_hands_to_the_queue_head,
            events_report_every_change,
            listing_shows_grant_time_and_queue_length,
        );
    };
    (@cases $factory:expr; $($case:ident,)*) => {
        $(
            #[tokio::test]
            async fn $case() {
                let factory = $factory;
                $crate::conformance::$case(&factory).await;
            }
        )*
    };
}

const NS: &str = "test";

fn opts(wait_ms: u64, durability: Durability) -> LockOptions {
    LockOptions {
        wait_ms,
        durability,
        ..LockOptions::default()
    }
}

fn persistent() -> LockOptions {
    opts(0, Durability::Persistent)
}

async fn open(factory: &dyn StoreFactory, clock: &ManualClock) -> LockService {
    LockService::new(factory.open(clock.clone()).await, Limits::default())
}

async fn settle_tasks() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

/// Grant, `busy` for another owner, and a same-owner retry that returns the
/// same token with a refreshed expiry.
pub async fn grant_busy_and_idempotent_relock(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    let g1 = s.lock(NS, "a", "o1", 10_000, persistent()).await.unwrap();
    assert_eq!(g1.expires_at_ms, START_MS + 10_000);
    match s.lock(NS, "a", "o2", 10_000, persistent()).await {
        Err(LockError::Busy(info)) => {
            assert_eq!(info.owner, "o1");
            assert_eq!(info.fencing_token, g1.fencing_token);
            assert_eq!(info.durability, Durability::Persistent);
        }
        other => panic!("expected busy, got {other:?}"),
    }
    clock.advance(5);
    let g2 = s.lock(NS, "a", "o1", 10_000, persistent()).await.unwrap();
    assert_eq!(g2.fencing_token, g1.fencing_token);
    assert_eq!(g2.expires_at_ms, START_MS + 5 + 10_000);
    let info = s.get(NS, "a").await.unwrap().unwrap();
    assert_eq!(info.expires_at_ms, g2.expires_at_ms);
}

/// Unlock needs the holder and, when given, the current token.
pub async fn unlock_checks_owner_and_token(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    assert_eq!(s.unlock(NS, "a", "o1", None).await, Err(LockError::NotHeld));
    let g = s.lock(NS, "a", "o1", 10_000, persistent()).await.unwrap();
    assert_eq!(
        s.unlock(NS, "a", "o2", None).await,
        Err(LockError::NotOwner)
    );
    assert_eq!(
        s.unlock(NS, "a", "o1", Some(g.fencing_token + 1)).await,
        Err(LockError::NotOwner)
    );
    assert!(s.get(NS, "a").await.unwrap().is_some());
    s.unlock(NS, "a", "o1", Some(g.fencing_token))
        .await
        .unwrap();
    assert_eq!(s.get(NS, "a").await.unwrap(), None);
    assert_eq!(s.unlock(NS, "a", "o1", None).await, Err(LockError::NotHeld));
    // Unlock without a token works for the holder.
    s.lock(NS, "a", "o1", 10_000, persistent()).await.unwrap();
    s.unlock(NS, "a", "o1", None).await.unwrap();
    assert_eq!(s.get(NS, "a").await.unwrap(), None);
}

/// Extend moves the expiry to now + ttl for the holder only; the token stays.
pub async fn extend_checks_owner_and_keeps_token(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    assert_eq!(
        s.extend(NS, "a", "o1", 1_000).await,
        Err(LockError::NotHeld)
    );
    let g = s.lock(NS, "a", "o1", 1_000, persistent()).await.unwrap();
    assert_eq!(
        s.extend(NS, "a", "o2", 1_000).await,
        Err(LockError::NotOwner)
    );
    clock.advance(900);
    let e = s.extend(NS, "a", "o1", 20_000).await.unwrap();
    assert_eq!(e.fencing_token, g.fencing_token);
    assert_eq!(e.expires_at_ms, START_MS + 900 + 20_000);
    // Past the original expiry, still held thanks to the extend.
    clock.advance(1_000);
    let info = s.get(NS, "a").await.unwrap().unwrap();
    assert_eq!(info.owner, "o1");
    assert_eq!(info.expires_at_ms, e.expires_at_ms);
}

/// Every fresh grant gets a token above all earlier ones, per name and
/// globally, for both durabilities.
pub async fn tokens_rise_strictly(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    let mut last = 0;
    for i in 0..200u64 {
        let durability = if i % 2 == 0 {
            Durability::Persistent
        } else {
            Durability::Ephemeral
        };
        let name = format!("n{}", i % 3);
        let owner = format!("o{i}");
        let g = s
            .lock(NS, &name, &owner, 1_000, opts(0, durability))
            .await
            .unwrap();
        assert!(
            g.fencing_token > last,
            "token {} after {last}",
            g.fencing_token
        );
        last = g.fencing_token;
        s.unlock(NS, &name, &owner, Some(g.fencing_token))
            .await
            .unwrap();
    }
}

/// A lock is free once its expiry passes, whether or not it was purged.
pub async fn expiry_frees_the_lock(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    let g1 = s
        .lock(NS, "a", "o1", 100, opts(0, Durability::Ephemeral))
        .await
        .unwrap();
    clock.advance(99);
    assert!(s.get(NS, "a").await.unwrap().is_some());
    assert!(matches!(
        s.lock(NS, "a", "o2", 100, persistent()).await,
        Err(LockError::Busy(_))
    ));
    clock.advance(1);
    assert_eq!(s.get(NS, "a").await.unwrap(), None);
    assert_eq!(s.extend(NS, "a", "o1", 100).await, Err(LockError::NotHeld));
    let g2 = s.lock(NS, "a", "o2", 100, persistent()).await.unwrap();
    assert!(g2.fencing_token > g1.fencing_token);
}

/// etcd#22082: an unlock by a holder whose lease expired must not release the
/// grant that followed it.
pub async fn stale_unlock_never_releases_newer_grant(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    let g1 = s.lock(NS, "a", "o1", 100, persistent()).await.unwrap();
    clock.advance(100);
    let g2 = s.lock(NS, "a", "o2", 10_000, persistent()).await.unwrap();
    assert_eq!(
        s.unlock(NS, "a", "o1", Some(g1.fencing_token)).await,
        Err(LockError::NotOwner)
    );
    assert_eq!(
        s.unlock(NS, "a", "o1", None).await,
        Err(LockError::NotOwner)
    );
    // Even the same owner, re-granted, cannot release with its old token.
    s.unlock(NS, "a", "o2", None).await.unwrap();
    let g3 = s.lock(NS, "a", "o1", 10_000, persistent()).await.unwrap();
    assert_eq!(
        s.unlock(NS, "a", "o1", Some(g1.fencing_token)).await,
        Err(LockError::NotOwner)
    );
    let info = s.get(NS, "a").await.unwrap().unwrap();
    assert_eq!(info.fencing_token, g3.fencing_token);
    assert!(g3.fencing_token > g2.fencing_token);
}

/// Three waiters are served in the order they queued, each on the release
/// of the one before.
pub async fn waiters_are_served_first_in_first_out(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    let g0 = s
        .lock(NS, "q", "holder", 60_000, persistent())
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for w in ["w1", "w2", "w3"] {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            s.lock(NS, "q", w, 60_000, opts(30_000, Durability::Persistent))
                .await
        }));
        settle_tasks().await;
    }
    let mut previous = g0;
    let mut releasing = "holder";
    for (w, task) in ["w1", "w2", "w3"].into_iter().zip(tasks) {
        settle_tasks().await;
        assert!(
            !task.is_finished(),
            "{w} was served before {releasing} released"
        );
        s.unlock(NS, "q", releasing, Some(previous.fencing_token))
            .await
            .unwrap();
        let g = task.await.unwrap().unwrap();
        assert!(g.fencing_token > previous.fencing_token);
        let info = s.get(NS, "q").await.unwrap().unwrap();
        assert_eq!(info.owner, w);
        assert_eq!(info.fencing_token, g.fencing_token);
        previous = g;
        releasing = w;
    }
}

/// A wait that runs out answers `busy` with the current holder.
pub async fn wait_times_out_with_busy(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    let g = s.lock(NS, "a", "o1", 60_000, persistent()).await.unwrap();
    let waiter = {
        let s = s.clone();
        tokio::spawn(async move {
            s.lock(NS, "a", "o2", 1_000, opts(100, Durability::Persistent))
                .await
        })
    };
    settle_tasks().await;
    clock.advance(99);
    settle_tasks().await;
    assert!(!waiter.is_finished(), "timed out early");
    clock.advance(1);
    match waiter.await.unwrap() {
        Err(LockError::Busy(info)) => {
            assert_eq!(info.owner, "o1");
            assert_eq!(info.fencing_token, g.fencing_token);
        }
        other => panic!("expected busy, got {other:?}"),
    }
    // The timed-out waiter left the queue: releasing does not grant to it.
    s.unlock(NS, "a", "o1", None).await.unwrap();
    assert_eq!(s.get(NS, "a").await.unwrap(), None);
}

/// A waiter is granted the lock when the holder's lease expires, without the
/// holder doing anything.
pub async fn waiter_is_woken_by_expiry(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    let g = s
        .lock(NS, "a", "o1", 100, opts(0, Durability::Ephemeral))
        .await
        .unwrap();
    let waiter = {
        let s = s.clone();
        tokio::spawn(async move {
            s.lock(NS, "a", "o2", 5_000, opts(10_000, Durability::Persistent))
                .await
        })
    };
    settle_tasks().await;
    clock.advance(100);
    let g2 = waiter.await.unwrap().unwrap();
    assert!(g2.fencing_token > g.fencing_token);
    assert_eq!(g2.expires_at_ms, START_MS + 100 + 5_000);
    assert_eq!(s.get(NS, "a").await.unwrap().unwrap().owner, "o2");
}

/// A waiter whose call goes away leaves the queue; the next one is served.
pub async fn dropped_waiter_leaves_the_queue(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    s.lock(NS, "a", "o1", 60_000, persistent()).await.unwrap();
    let gone = {
        let s = s.clone();
        tokio::spawn(async move {
            s.lock(
                NS,
                "a",
                "gone",
                60_000,
                opts(30_000, Durability::Persistent),
            )
            .await
        })
    };
    settle_tasks().await;
    let next = {
        let s = s.clone();
        tokio::spawn(async move {
            s.lock(
                NS,
                "a",
                "next",
                60_000,
                opts(30_000, Durability::Persistent),
            )
            .await
        })
    };
    settle_tasks().await;
    gone.abort();
    assert!(gone.await.unwrap_err().is_cancelled());
    s.unlock(NS, "a", "o1", None).await.unwrap();
    next.await.unwrap().unwrap();
    assert_eq!(s.get(NS, "a").await.unwrap().unwrap().owner, "next");
}

/// Thousands of concurrent waiters on one lock: the first in line is served
/// on release, the rest time out with `busy`, and none is left queued.
pub async fn thousands_of_waiters(factory: &dyn StoreFactory) {
    const WAITERS: usize = 2_000;
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    let g = s
        .lock(NS, "hot", "holder", 60_000, persistent())
        .await
        .unwrap();
    let mut tasks = Vec::with_capacity(WAITERS);
    for i in 0..WAITERS {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            s.lock(
                NS,
                "hot",
                &format!("w{i}"),
                60_000,
                opts(1_000, Durability::Ephemeral),
            )
            .await
        }));
        if i == 0 {
            // w0 is queued first, for certain.
            settle_tasks().await;
        }
    }
    settle_tasks().await;
    s.unlock(NS, "hot", "holder", Some(g.fencing_token))
        .await
        .unwrap();
    settle_tasks().await;
    clock.advance(1_000);
    let mut granted = Vec::new();
    let mut busy = 0;
    for (i, t) in tasks.into_iter().enumerate() {
        match t.await.unwrap() {
            Ok(grant) => granted.push((i, grant.fencing_token)),
            Err(LockError::Busy(info)) => {
                assert_eq!(info.owner, "w0");
                busy += 1;
            }
            Err(e) => panic!("waiter {i}: {e:?}"),
        }
    }
    assert_eq!(granted.len(), 1, "{granted:?}");
    assert_eq!(granted[0].0, 0, "the first in line was not served first");
    assert!(granted[0].1 > g.fencing_token);
    assert_eq!(busy, WAITERS - 1);
    // Nobody is left in the queue: releasing serves no one.
    s.unlock(NS, "hot", "w0", None).await.unwrap();
    assert_eq!(s.get(NS, "hot").await.unwrap(), None);
}

/// Every limit answers `invalid-argument`, and the store is unchanged.
pub async fn invalid_input_changes_nothing(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    let held = s
        .lock(NS, "held", "o1", 10_000, persistent())
        .await
        .unwrap();
    let limits = Limits::default();
    let long_name = "n".repeat(limits.max_name_bytes + 1);
    let long_owner = "o".repeat(limits.max_owner_bytes + 1);
    let cases: Vec<(&str, Result<(), LockError>)> = vec![
        (
            "empty name",
            s.lock(NS, "", "o", 10, persistent()).await.map(drop),
        ),
        (
            "long name",
            s.lock(NS, &long_name, "o", 10, persistent())
                .await
                .map(drop),
        ),
        (
            "empty owner",
            s.lock(NS, "x", "", 10, persistent()).await.map(drop),
        ),
        (
            "long owner",
            s.lock(NS, "x", &long_owner, 10, persistent())
                .await
                .map(drop),
        ),
        (
            "zero ttl",
            s.lock(NS, "x", "o", 0, persistent()).await.map(drop),
        ),
        (
            "huge ttl",
            s.lock(NS, "x", "o", u64::MAX, persistent()).await.map(drop),
        ),
        (
            "huge wait",
            s.lock(
                NS,
                "held",
                "o2",
                10,
                opts(limits.max_wait_ms + 1, Durability::Persistent),
            )
            .await
            .map(drop),
        ),
        (
            "empty namespace",
            s.lock("", "x", "o", 10, persistent()).await.map(drop),
        ),
        (
            "zero ttl extend",
            s.extend(NS, "held", "o1", 0).await.map(drop),
        ),
        (
            "long owner unlock",
            s.unlock(NS, "held", &long_owner, None).await,
        ),
        ("long name get", s.get(NS, &long_name).await.map(drop)),
    ];
    for (what, result) in cases {
        assert!(
            matches!(result, Err(LockError::InvalidArgument(ref m)) if !m.is_empty()),
            "{what}: {result:?}"
        );
    }
    let listed = s.list(NS, "").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name, "held");
    assert_eq!(listed[0].info.fencing_token, held.fencing_token);
    assert_eq!(listed[0].info.expires_at_ms, held.expires_at_ms);
}

/// The same name in two namespaces is two locks.
pub async fn namespaces_are_isolated(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    s.lock("ns1", "a", "o1", 10_000, persistent())
        .await
        .unwrap();
    s.lock("ns2", "a", "o2", 10_000, persistent())
        .await
        .unwrap();
    assert_eq!(s.get("ns1", "a").await.unwrap().unwrap().owner, "o1");
    assert_eq!(s.get("ns2", "a").await.unwrap().unwrap().owner, "o2");
    assert_eq!(
        s.unlock("ns2", "a", "o1", None).await,
        Err(LockError::NotOwner)
    );
    s.unlock("ns1", "a", "o1", None).await.unwrap();
    assert_eq!(s.get("ns2", "a").await.unwrap().unwrap().owner, "o2");
}

/// Listing shows live locks of one namespace under a prefix, sorted.
pub async fn list_filters_by_namespace_and_prefix(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    for name in ["job/2", "job/1", "other"] {
        s.lock(NS, name, "o", 10_000, persistent()).await.unwrap();
    }
    s.lock(NS, "job/short", "o", 10, opts(0, Durability::Ephemeral))
        .await
        .unwrap();
    s.lock("elsewhere", "job/3", "o", 10_000, persistent())
        .await
        .unwrap();
    clock.advance(10);
    let names: Vec<String> = s
        .list(NS, "job/")
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert_eq!(names, ["job/1", "job/2"]);
    assert_eq!(s.list(NS, "").await.unwrap().len(), 3);
}

/// After a restart, persistent locks are back with owner, token and original
/// expiry; ephemeral locks are gone.
pub async fn persistent_locks_survive_restart(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let (p, handed) = {
        let s = open(factory, &clock).await;
        let p = s.lock(NS, "p", "o1", 60_000, persistent()).await.unwrap();
        s.lock(NS, "e", "o1", 60_000, opts(0, Durability::Ephemeral))
            .await
            .unwrap();
        s.extend(NS, "p", "o1", 90_000).await.unwrap();
        // A persistent grant handed to a waiter is persistent too.
        s.lock(NS, "h", "first", 60_000, persistent())
            .await
            .unwrap();
        let waiter = {
            let s = s.clone();
            tokio::spawn(async move {
                s.lock(
                    NS,
                    "h",
                    "second",
                    60_000,
                    opts(1_000, Durability::Persistent),
                )
                .await
            })
        };
        settle_tasks().await;
        s.unlock(NS, "h", "first", None).await.unwrap();
        let handed = waiter.await.unwrap().unwrap();
        (p, handed)
    };
    settle_tasks().await;
    let s = open(factory, &clock).await;
    if !factory.keeps_persistent_locks() {
        assert_eq!(s.get(NS, "p").await.unwrap(), None);
        return;
    }
    let info = s
        .get(NS, "p")
        .await
        .unwrap()
        .expect("persistent lock lost in restart");
    assert_eq!(info.owner, "o1");
    assert_eq!(info.fencing_token, p.fencing_token);
    assert_eq!(info.expires_at_ms, START_MS + 90_000);
    assert_eq!(info.durability, Durability::Persistent);
    assert_eq!(s.get(NS, "e").await.unwrap(), None);
    let h = s.get(NS, "h").await.unwrap().expect("handed-off lock lost");
    assert_eq!(
        (h.owner.as_str(), h.fencing_token),
        ("second", handed.fencing_token)
    );
    // Still held against others, and releasable by its owner.
    assert!(matches!(
        s.lock(NS, "p", "o2", 1_000, persistent()).await,
        Err(LockError::Busy(_))
    ));
    s.unlock(NS, "p", "o1", Some(p.fencing_token))
        .await
        .unwrap();
}

/// Tokens issued after a restart are above every token issued before it,
/// ephemeral ones included.
pub async fn tokens_rise_across_restart(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let mut highest = 0;
    for round in 0..3 {
        let s = open(factory, &clock).await;
        for i in 0..20 {
            let durability = if i % 2 == 0 {
                Durability::Ephemeral
            } else {
                Durability::Persistent
            };
            let owner = format!("r{round}");
            let g = s
                .lock(NS, "t", &owner, 1_000, opts(0, durability))
                .await
                .unwrap();
            assert!(
                g.fencing_token > highest,
                "round {round}: {} after {highest}",
                g.fencing_token
            );
            highest = g.fencing_token;
            s.unlock(NS, "t", &owner, None).await.unwrap();
        }
        drop(s);
        settle_tasks().await;
    }
}

/// A persistent lock that expired while the store was down is free after it.
pub async fn expired_locks_stay_gone_after_restart(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    {
        let s = open(factory, &clock).await;
        s.lock(NS, "short", "o1", 100, persistent()).await.unwrap();
        s.lock(NS, "long", "o1", 100_000, persistent())
            .await
            .unwrap();
    }
    settle_tasks().await;
    clock.advance(100);
    let s = open(factory, &clock).await;
    assert_eq!(s.get(NS, "short").await.unwrap(), None);
    s.lock(NS, "short", "o2", 100, persistent()).await.unwrap();
    if factory.keeps_persistent_locks() {
        assert_eq!(s.get(NS, "long").await.unwrap().unwrap().owner, "o1");
    }
}

/// The drop-path release frees only the grant it names.
pub async fn release_detached_checks_the_token(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    let g = s.lock(NS, "a", "o1", 10_000, persistent()).await.unwrap();
    s.release_detached(NS, "a", "o1", g.fencing_token + 1);
    s.release_detached(NS, "a", "o2", g.fencing_token);
    settle_tasks().await;
    assert_eq!(
        s.get(NS, "a").await.unwrap().unwrap().fencing_token,
        g.fencing_token
    );
    s.release_detached(NS, "a", "o1", g.fencing_token);
    settle_tasks().await;
    assert_eq!(s.get(NS, "a").await.unwrap(), None);
}

fn lease_key_error(result: Result<impl std::fmt::Debug, LockError>) -> LockError {
    match result {
        Err(e) => e,
        Ok(v) => panic!("expected an error, got {v:?}"),
    }
}

/// Several locks under one lease share its expiry; a refresh moves all of
/// them; `extend` of one is refused; re-locking answers the grant unchanged.
pub async fn lease_refresh_moves_every_lock(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    let lease = s
        .grant_lease(NS, 1_000, Durability::Persistent)
        .await
        .unwrap();
    assert!(
        lease.id.starts_with("lease-") && lease.id.len() == 38,
        "{}",
        lease.id
    );
    assert_eq!(lease.expires_at_ms, START_MS + 1_000);
    let mut last = 0;
    let mut grants = Vec::new();
    for name in ["a", "b", "c"] {
        let g = s.lock_in_lease(NS, name, &lease.id, 0).await.unwrap();
        assert!(g.fencing_token > last);
        assert_eq!(g.expires_at_ms, lease.expires_at_ms);
        last = g.fencing_token;
        grants.push(g);
        let info = s.get(NS, name).await.unwrap().unwrap();
        assert_eq!(info.owner, lease.id);
        assert_eq!(info.durability, Durability::Persistent);
    }
    clock.advance(600);
    let expires = s.refresh_lease(NS, &lease.id).await.unwrap();
    assert_eq!(expires, START_MS + 600 + 1_000);
    clock.advance(900); // past the first expiry
    for (name, g) in ["a", "b", "c"].into_iter().zip(&grants) {
        let info = s.get(NS, name).await.unwrap().expect("refresh lost a lock");
        assert_eq!(
            (info.fencing_token, info.expires_at_ms),
            (g.fencing_token, expires)
        );
    }
    let info = s.get_lease(NS, &lease.id).await.unwrap().unwrap();
    assert_eq!(info.locks, ["a", "b", "c"]);
    assert_eq!((info.ttl_ms, info.expires_at_ms), (1_000, expires));
    assert!(matches!(
        s.extend(NS, "a", &lease.id, 50_000).await,
        Err(LockError::InvalidArgument(_))
    ));
    // A retry under the lease, or a plain lock by its id: the same grant.
    let again = s.lock_in_lease(NS, "a", &lease.id, 0).await.unwrap();
    assert_eq!(
        again,
        Grant {
            fencing_token: grants[0].fencing_token,
            expires_at_ms: expires
        }
    );
    let plain = s
        .lock(NS, "b", &lease.id, 50_000, persistent())
        .await
        .unwrap();
    assert_eq!(
        plain,
        Grant {
            fencing_token: grants[1].fencing_token,
            expires_at_ms: expires
        }
    );
    assert!(matches!(
        s.lock(NS, "a", "other", 1_000, persistent()).await,
        Err(LockError::Busy(info)) if info.owner == lease.id
    ));
    // One lock released by its owner, the lease id; the lease lives on.
    s.unlock(NS, "c", &lease.id, Some(grants[2].fencing_token))
        .await
        .unwrap();
    assert_eq!(s.get(NS, "c").await.unwrap(), None);
    let info = s.get_lease(NS, &lease.id).await.unwrap().unwrap();
    assert_eq!(info.locks, ["a", "b"]);
}

/// Revoke releases every lock at once, hands each to its queue's head, and
/// ends the lease; `lease_ended` completes.
pub async fn lease_revoke_releases_all_and_hands_off(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    let lease = s
        .grant_lease(NS, 60_000, Durability::Persistent)
        .await
        .unwrap();
    let ga = s.lock_in_lease(NS, "a", &lease.id, 0).await.unwrap();
    let gb = s.lock_in_lease(NS, "b", &lease.id, 0).await.unwrap();
    let ended = s.lease_ended(NS, &lease.id);
    let waiter = {
        let s = s.clone();
        tokio::spawn(async move {
            s.lock(NS, "a", "w", 5_000, opts(30_000, Durability::Persistent))
                .await
        })
    };
    settle_tasks().await;
    assert!(!waiter.is_finished());
    assert_eq!(s.revoke_lease(NS, &lease.id).await.unwrap(), 2);
    let g = waiter.await.unwrap().unwrap();
    assert!(g.fencing_token > ga.fencing_token.max(gb.fencing_token));
    assert_eq!(s.get(NS, "a").await.unwrap().unwrap().owner, "w");
    assert_eq!(s.get(NS, "b").await.unwrap(), None);
    tokio::time::timeout(std::time::Duration::from_secs(10), ended)
        .await
        .expect("lease_ended did not complete after a revoke");
    assert_eq!(s.get_lease(NS, &lease.id).await.unwrap(), None);
    assert_eq!(
        lease_key_error(s.refresh_lease(NS, &lease.id).await),
        LockError::NotHeld
    );
    assert_eq!(
        lease_key_error(s.revoke_lease(NS, &lease.id).await),
        LockError::NotHeld
    );
    assert_eq!(
        lease_key_error(s.lock_in_lease(NS, "b", &lease.id, 0).await),
        LockError::NotHeld
    );
}

/// At the lease's expiry all its locks are free at once, and queued callers
/// are served.
pub async fn lease_expiry_releases_all_and_hands_off(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    let lease = s.grant_lease(NS, 100, Durability::Ephemeral).await.unwrap();
    let ga = s.lock_in_lease(NS, "a", &lease.id, 0).await.unwrap();
    s.lock_in_lease(NS, "b", &lease.id, 0).await.unwrap();
    assert_eq!(
        s.get(NS, "b").await.unwrap().unwrap().durability,
        Durability::Ephemeral
    );
    let ended = s.lease_ended(NS, &lease.id);
    let waiter = {
        let s = s.clone();
        tokio::spawn(async move {
            s.lock(NS, "a", "w", 5_000, opts(30_000, Durability::Persistent))
                .await
        })
    };
    settle_tasks().await;
    clock.advance(99);
    settle_tasks().await;
    assert!(!waiter.is_finished(), "served before the lease expired");
    clock.advance(1);
    let g = waiter.await.unwrap().unwrap();
    assert!(g.fencing_token > ga.fencing_token);
    assert_eq!(s.get(NS, "b").await.unwrap(), None);
    tokio::time::timeout(std::time::Duration::from_secs(10), ended)
        .await
        .expect("lease_ended did not complete at the expiry");
    assert_eq!(s.get_lease(NS, &lease.id).await.unwrap(), None);
    assert_eq!(
        lease_key_error(s.lock_in_lease(NS, "c", &lease.id, 0).await),
        LockError::NotHeld
    );
}

/// A lock under a lease waits in the FIFO queue like any other, and is not
/// granted to a lease that ended while it waited.
pub async fn lease_locks_wait_in_the_queue(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    let g0 = s.lock(NS, "q", "o1", 60_000, persistent()).await.unwrap();
    let lease = s
        .grant_lease(NS, 10_000, Durability::Persistent)
        .await
        .unwrap();
    let doomed = s
        .grant_lease(NS, 10_000, Durability::Persistent)
        .await
        .unwrap();
    let spawn_wait = |id: String| {
        let s = s.clone();
        tokio::spawn(async move { s.lock_in_lease(NS, "q", &id, 30_000).await })
    };
    let doomed_wait = spawn_wait(doomed.id.clone());
    settle_tasks().await;
    let lease_wait = spawn_wait(lease.id.clone());
    settle_tasks().await;
    assert!(matches!(
        s.lock_in_lease(NS, "q", &lease.id, 0).await,
        Err(LockError::Busy(info)) if info.owner == "o1"
    ));
    assert_eq!(s.revoke_lease(NS, &doomed.id).await.unwrap(), 0);
    s.unlock(NS, "q", "o1", Some(g0.fencing_token))
        .await
        .unwrap();
    assert_eq!(
        lease_key_error(doomed_wait.await.unwrap()),
        LockError::NotHeld,
        "a revoked lease was granted a lock from the queue"
    );
    let g = lease_wait.await.unwrap().unwrap();
    assert!(g.fencing_token > g0.fencing_token);
    assert_eq!(g.expires_at_ms, lease.expires_at_ms);
    let info = s.get(NS, "q").await.unwrap().unwrap();
    assert_eq!(info.owner, lease.id);
    assert_eq!(
        s.get_lease(NS, &lease.id).await.unwrap().unwrap().locks,
        ["q"]
    );
}

/// Unknown, malformed and other namespaces' leases hold nothing; bad input
/// is refused before the store sees it.
pub async fn dead_or_foreign_leases_are_not_held(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    let unknown = format!("lease-{:032x}", 7);
    assert_eq!(s.get_lease(NS, &unknown).await.unwrap(), None);
    assert_eq!(
        lease_key_error(s.refresh_lease(NS, &unknown).await),
        LockError::NotHeld
    );
    assert_eq!(
        lease_key_error(s.revoke_lease(NS, &unknown).await),
        LockError::NotHeld
    );
    assert_eq!(
        lease_key_error(s.lock_in_lease(NS, "a", &unknown, 0).await),
        LockError::NotHeld
    );
    let lease = s
        .grant_lease(NS, 1_000, Durability::Persistent)
        .await
        .unwrap();
    assert_eq!(
        lease_key_error(s.lock_in_lease("elsewhere", "a", &lease.id, 0).await),
        LockError::NotHeld
    );
    assert_eq!(s.get_lease("elsewhere", &lease.id).await.unwrap(), None);
    assert_eq!(
        lease_key_error(s.revoke_lease("elsewhere", &lease.id).await),
        LockError::NotHeld
    );
    assert!(matches!(
        s.grant_lease(NS, 0, Durability::Persistent).await,
        Err(LockError::InvalidArgument(_))
    ));
    assert!(matches!(
        s.grant_lease(NS, u64::MAX, Durability::Persistent).await,
        Err(LockError::InvalidArgument(_))
    ));
    assert!(matches!(
        s.lock_in_lease(NS, "", &lease.id, 0).await,
        Err(LockError::InvalidArgument(_))
    ));
    assert!(matches!(
        s.refresh_lease(NS, "").await,
        Err(LockError::InvalidArgument(_))
    ));
    // Nothing of that touched the live lease.
    assert_eq!(
        s.get_lease(NS, &lease.id).await.unwrap().unwrap().locks,
        Vec::<String>::new()
    );
}

/// Persistent leases and their locks come back after a restart with their
/// (refreshed) expiry and tokens; ephemeral ones are gone; a revoke made
/// after the restart is durable; tokens keep rising.
pub async fn leases_across_restart(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let (kept, grants, highest) = {
        let s = open(factory, &clock).await;
        let kept = s
            .grant_lease(NS, 10_000, Durability::Persistent)
            .await
            .unwrap();
        let gone = s
            .grant_lease(NS, 10_000, Durability::Ephemeral)
            .await
            .unwrap();
        let a = s.lock_in_lease(NS, "a", &kept.id, 0).await.unwrap();
        let b = s.lock_in_lease(NS, "b", &kept.id, 0).await.unwrap();
        let e = s.lock_in_lease(NS, "e", &gone.id, 0).await.unwrap();
        clock.advance(4_000);
        let expires = s.refresh_lease(NS, &kept.id).await.unwrap();
        assert_eq!(expires, START_MS + 14_000);
        let kept = lockd_core::LeaseGrant {
            id: kept.id,
            expires_at_ms: expires,
        };
        (kept, [a, b], e.fencing_token)
    };
    settle_tasks().await;
    clock.advance(8_000); // past the first expiry, before the refreshed one
    let s = open(factory, &clock).await;
    assert_eq!(
        s.get(NS, "e").await.unwrap(),
        None,
        "an ephemeral lease's lock survived"
    );
    if factory.keeps_persistent_locks() {
        let info = s
            .get_lease(NS, &kept.id)
            .await
            .unwrap()
            .expect("persistent lease lost in restart");
        assert_eq!(info.expires_at_ms, kept.expires_at_ms);
        assert_eq!(info.locks, ["a", "b"]);
        for (name, g) in ["a", "b"].into_iter().zip(grants) {
            let held = s
                .get(NS, name)
                .await
                .unwrap()
                .expect("lease lock lost in restart");
            assert_eq!(held.owner, kept.id);
            assert_eq!(held.fencing_token, g.fencing_token);
            assert_eq!(held.expires_at_ms, kept.expires_at_ms);
        }
        assert_eq!(s.revoke_lease(NS, &kept.id).await.unwrap(), 2);
    } else {
        assert_eq!(s.get_lease(NS, &kept.id).await.unwrap(), None);
    }
    let g = s.lock(NS, "a", "after", 1_000, persistent()).await.unwrap();
    assert!(g.fencing_token > highest && g.fencing_token > grants[1].fencing_token);
    drop(s);
    settle_tasks().await;
    let s = open(factory, &clock).await;
    assert_eq!(
        s.get(NS, "b").await.unwrap(),
        None,
        "a revoked lease's lock came back"
    );
    assert_eq!(s.get_lease(NS, &kept.id).await.unwrap(), None);
}

/// Force-unlock releases a lock whoever holds it; the head of the queue gets
/// it next; the old holder's extend and unlock answer `not_held` or
/// `not_owner`; a free lock answers `not_held`.
pub async fn force_unlock_hands_to_the_queue_head(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    assert_eq!(
        lease_key_error(s.force_unlock(NS, "f").await),
        LockError::NotHeld
    );
    let g = s
        .lock(NS, "f", "stuck", 60_000, persistent())
        .await
        .unwrap();
    let waiter = {
        let s = s.clone();
        tokio::spawn(async move {
            s.lock(
                NS,
                "f",
                "next",
                60_000,
                opts(30_000, Durability::Persistent),
            )
            .await
        })
    };
    settle_tasks().await;
    let released = s.force_unlock(NS, "f").await.unwrap();
    assert_eq!(
        (released.owner.as_str(), released.fencing_token),
        ("stuck", g.fencing_token)
    );
    let next = waiter.await.unwrap().unwrap();
    assert!(next.fencing_token > g.fencing_token);
    assert_eq!(s.get(NS, "f").await.unwrap().unwrap().owner, "next");
    assert!(matches!(
        s.extend(NS, "f", "stuck", 1_000).await,
        Err(LockError::NotOwner | LockError::NotHeld)
    ));
    assert!(matches!(
        s.unlock(NS, "f", "stuck", Some(g.fencing_token)).await,
        Err(LockError::NotOwner | LockError::NotHeld)
    ));
    // A lock under a lease: released, the lease lives on without it.
    let lease = s
        .grant_lease(NS, 60_000, Durability::Persistent)
        .await
        .unwrap();
    s.lock_in_lease(NS, "l", &lease.id, 0).await.unwrap();
    assert_eq!(s.force_unlock(NS, "l").await.unwrap().owner, lease.id);
    assert_eq!(s.get(NS, "l").await.unwrap(), None);
    assert_eq!(
        s.get_lease(NS, &lease.id).await.unwrap().unwrap().locks,
        Vec::<String>::new()
    );
}

/// Waits (bounded) for the next event about `NS`, skipping others.
async fn next_event(events: &mut tokio::sync::broadcast::Receiver<LockEvent>) -> LockEvent {
    loop {
        let event = tokio::time::timeout(std::time::Duration::from_secs(10), events.recv())
            .await
            .expect("no event within 10 s")
            .expect("the event stream ended or lagged");
        if &*event.namespace == NS {
            return event;
        }
    }
}

/// Every change is an event, in order: acquired, extended, hand-off,
/// released, expired, force-released, and the lease's grant, revoke and
/// expiry; each names the lock, its holder and its token.
pub async fn events_report_every_change(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    let Some(mut events) = s.events() else {
        panic!("this store publishes no events");
    };
    let expect = |event: LockEvent, kind: EventKind, name: &str, owner: &str, token: u64| {
        assert_eq!(
            (event.kind, &*event.name, &*event.owner, event.fencing_token),
            (kind, name, owner, token),
            "{event:?}"
        );
    };
    let g1 = s.lock(NS, "e", "o1", 10_000, persistent()).await.unwrap();
    expect(
        next_event(&mut events).await,
        EventKind::Acquired,
        "e",
        "o1",
        g1.fencing_token,
    );
    s.extend(NS, "e", "o1", 20_000).await.unwrap();
    expect(
        next_event(&mut events).await,
        EventKind::Extended,
        "e",
        "o1",
        g1.fencing_token,
    );
    let waiter = {
        let s = s.clone();
        tokio::spawn(async move {
            s.lock(NS, "e", "o2", 100, opts(30_000, Durability::Persistent))
                .await
        })
    };
    settle_tasks().await;
    s.unlock(NS, "e", "o1", None).await.unwrap();
    expect(
        next_event(&mut events).await,
        EventKind::Released,
        "e",
        "o1",
        g1.fencing_token,
    );
    let g2 = waiter.await.unwrap().unwrap();
    expect(
        next_event(&mut events).await,
        EventKind::HandedOff,
        "e",
        "o2",
        g2.fencing_token,
    );
    clock.advance(100);
    // Expiry is found by the store's own timer, or by the next read.
    let _ = s.get(NS, "e").await.unwrap();
    expect(
        next_event(&mut events).await,
        EventKind::Expired,
        "e",
        "o2",
        g2.fencing_token,
    );
    let g3 = s.lock(NS, "e", "o3", 10_000, persistent()).await.unwrap();
    expect(
        next_event(&mut events).await,
        EventKind::Acquired,
        "e",
        "o3",
        g3.fencing_token,
    );
    s.force_unlock(NS, "e").await.unwrap();
    expect(
        next_event(&mut events).await,
        EventKind::ForceReleased,
        "e",
        "o3",
        g3.fencing_token,
    );
    let lease = s
        .grant_lease(NS, 1_000, Durability::Ephemeral)
        .await
        .unwrap();
    expect(
        next_event(&mut events).await,
        EventKind::LeaseGranted,
        &lease.id,
        &lease.id,
        0,
    );
    let gl = s.lock_in_lease(NS, "le", &lease.id, 0).await.unwrap();
    expect(
        next_event(&mut events).await,
        EventKind::Acquired,
        "le",
        &lease.id,
        gl.fencing_token,
    );
    s.revoke_lease(NS, &lease.id).await.unwrap();
    let mut both = [next_event(&mut events).await, next_event(&mut events).await];
    both.sort_by_key(|e| e.kind == EventKind::LeaseRevoked);
    let [released, revoked] = both;
    expect(
        released,
        EventKind::Released,
        "le",
        &lease.id,
        gl.fencing_token,
    );
    expect(revoked, EventKind::LeaseRevoked, &lease.id, &lease.id, 0);
    let short = s.grant_lease(NS, 100, Durability::Ephemeral).await.unwrap();
    expect(
        next_event(&mut events).await,
        EventKind::LeaseGranted,
        &short.id,
        &short.id,
        0,
    );
    clock.advance(100);
    expect(
        next_event(&mut events).await,
        EventKind::LeaseExpired,
        &short.id,
        &short.id,
        0,
    );
}

/// A running store measures lease time on its monotonic clock: the wall
/// clock stepping forward or back by an hour moves no deadline (a lock and a
/// lease expire exactly at their TTL of monotonic time), only the wall-clock
/// view of the expiry answered to callers; and an expiry written to disk is
/// wall time, so it is right after a restart. Run on the embedded stores
/// (docs/reliability.md#clock-steps); the etcd store shares expiries between
/// hosts, see docs/scale-out.md.
pub async fn wall_clock_steps_move_no_deadline(factory: &dyn StoreFactory) {
    const HOUR: i64 = 3_600_000;
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    let g = s.lock(NS, "w", "o1", 10_000, persistent()).await.unwrap();
    assert_eq!(g.expires_at_ms, START_MS + 10_000);
    let lease = s
        .grant_lease(NS, 10_000, Durability::Persistent)
        .await
        .unwrap();
    s.lock_in_lease(NS, "wl", &lease.id, 0).await.unwrap();

    clock.step_wall(HOUR);
    clock.advance(5_000);
    // Same deadline, seen on the stepped wall clock.
    let info = s
        .get(NS, "w")
        .await
        .unwrap()
        .expect("expired after a forward step");
    assert_eq!(info.expires_at_ms, START_MS + 10_000 + HOUR as u64);
    assert!(s.get_lease(NS, &lease.id).await.unwrap().is_some());

    clock.step_wall(-2 * HOUR);
    clock.advance(4_999);
    assert!(s.get(NS, "w").await.unwrap().is_some(), "expired early");
    assert!(
        s.get(NS, "wl").await.unwrap().is_some(),
        "lease lock expired early"
    );
    // Granted on the stepped-back wall clock: answered and written as wall
    // time, an hour behind the monotonic deadline.
    let g2 = s.lock(NS, "w2", "o2", 10_000, persistent()).await.unwrap();
    assert_eq!(g2.expires_at_ms, START_MS + 9_999 + 10_000 - HOUR as u64);
    clock.advance(1);
    assert_eq!(s.get(NS, "w").await.unwrap(), None, "expired late");
    assert_eq!(
        s.get(NS, "wl").await.unwrap(),
        None,
        "lease lock expired late"
    );
    assert_eq!(s.get_lease(NS, &lease.id).await.unwrap(), None);
    // After a restart the written wall time means the same deadline.
    drop(s);
    settle_tasks().await;
    let s = open(factory, &clock).await;
    clock.advance(9_998);
    if factory.keeps_persistent_locks() {
        let info = s.get(NS, "w2").await.unwrap().expect("lost in the restart");
        assert_eq!(info.expires_at_ms, g2.expires_at_ms);
    }
    clock.advance(1);
    assert_eq!(
        s.get(NS, "w2").await.unwrap(),
        None,
        "expired late after a restart"
    );
}

/// A listing shows when each grant was made and how many wait for it.
pub async fn listing_shows_grant_time_and_queue_length(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    s.lock(NS, "busy", "o1", 60_000, persistent())
        .await
        .unwrap();
    clock.advance(1_000);
    s.lock(NS, "idle", "o2", 60_000, persistent())
        .await
        .unwrap();
    let mut waiters = Vec::new();
    for w in ["w1", "w2"] {
        let s = s.clone();
        waiters.push(tokio::spawn(async move {
            s.lock(NS, "busy", w, 1_000, opts(60_000, Durability::Persistent))
                .await
        }));
    }
    // Real stores queue over the network: wait (bounded) until both are in.
    let mut listed = Vec::new();
    for _ in 0..500 {
        settle_tasks().await;
        listed = s.list(NS, "").await.unwrap();
        if listed.iter().any(|l| l.name == "busy" && l.waiters == 2) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let busy = listed.iter().find(|l| l.name == "busy").unwrap();
    let idle = listed.iter().find(|l| l.name == "idle").unwrap();
    assert_eq!(busy.waiters, 2, "{listed:?}");
    assert_eq!(idle.waiters, 0);
    assert_eq!(busy.acquired_at_ms, Some(START_MS), "{listed:?}");
    assert_eq!(idle.acquired_at_ms, Some(START_MS + 1_000));
    for w in waiters {
        w.abort();
    }
}
