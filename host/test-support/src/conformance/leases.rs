//! Leases (docs/contract.md#c16-leases): refresh, revoke, expiry and the
//! hand-offs to waiters, dead or foreign leases, and restarts.

use lockd_core::{Durability, Grant, LockError, ManualClock};

use super::support::{
    lease_key_error, open, opts, persistent, settle_tasks, StoreFactory, NS, START_MS,
};

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
