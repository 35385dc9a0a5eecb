//! Waiting: FIFO order, timeouts, expiry and release hand-offs, dropped
//! waiters, force-unlock, and deadlines that a wall-clock step does not move.

use lockd_core::{Durability, LockError, ManualClock};

use super::support::{
    lease_key_error, open, opts, persistent, settle_tasks, StoreFactory, NS, START_MS,
};

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

/// A running store measures lease time on its monotonic clock: the wall
/// clock stepping forward or back by an hour moves no deadline (a lock and a
/// lease expire exactly at their TTL of monotonic time), only the wall-clock
/// view of the expiry answered to callers; and an expiry written to disk is
/// wall time, so it is right after a restart. Run on the embedded stores
/// (docs/reliability.md#clock-steps); the etcd store shares expiries between
/// hosts, see docs/operating.md#etcd.
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
