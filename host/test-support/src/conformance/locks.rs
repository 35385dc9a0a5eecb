//! Grants, unlocks, extends and their checks: tokens, expiry, invalid
//! input, namespaces, listing locks and namespaces.

use lockd_core::{Durability, Limits, LockError, LockOptions, ManualClock, NamespaceStats};

use super::support::{open, opts, persistent, settle_tasks, StoreFactory, NS, START_MS};

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

/// `refuse_relock` (Dapr's non-reentrant `TryLock`): the holder's own
/// `lock` is `busy` and leaves its grant as it was; a free or expired lock
/// is granted as usual.
pub async fn relock_refused_when_asked(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    let no_relock = LockOptions {
        refuse_relock: true,
        ..persistent()
    };
    let g1 = s.lock(NS, "a", "o1", 10_000, no_relock).await.unwrap();
    clock.advance(5);
    match s.lock(NS, "a", "o1", 20_000, no_relock).await {
        Err(LockError::Busy(info)) => {
            assert_eq!(info.owner, "o1");
            assert_eq!(info.fencing_token, g1.fencing_token);
            assert_eq!(info.expires_at_ms, g1.expires_at_ms);
        }
        other => panic!("expected busy, got {other:?}"),
    }
    assert!(matches!(
        s.lock(NS, "a", "o2", 10_000, no_relock).await,
        Err(LockError::Busy(_))
    ));
    let info = s.get(NS, "a").await.unwrap().unwrap();
    assert_eq!(
        info.expires_at_ms, g1.expires_at_ms,
        "the grant is unchanged"
    );
    // Waiting and refusing a re-lock do not go together.
    let waiting = LockOptions {
        wait_ms: 10,
        ..no_relock
    };
    assert!(matches!(
        s.lock(NS, "a", "o2", 10_000, waiting).await,
        Err(LockError::InvalidArgument(_))
    ));
    // Expired: the same owner gets a fresh grant.
    clock.advance(10_000);
    let g2 = s.lock(NS, "a", "o1", 10_000, no_relock).await.unwrap();
    assert!(g2.fencing_token > g1.fencing_token);
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

/// `namespaces` lists every namespace with a live holder or a waiter, with
/// its counts, sorted; expired locks, free locks and leases without locks
/// do not make a namespace appear. Namespaces whose names sort around
/// lockd's own keys (`-`, `.`, `%`, capitals, `/`) are listed too.
pub async fn namespaces_list_holders_and_waiters(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(START_MS);
    let s = open(factory, &clock).await;
    assert_eq!(s.namespaces().await.unwrap(), vec![]);
    for (namespace, name) in [
        ("-dash", "a"),
        (".dot", "a"),
        ("team/a b", "x"),
        ("Zed", "a"),
        ("zed", "a"),
        ("zed", "b"),
    ] {
        s.lock(namespace, name, "o", 60_000, persistent())
            .await
            .unwrap();
    }
    s.lock("zed", "c", "o", 60_000, opts(0, Durability::Ephemeral))
        .await
        .unwrap();
    s.lock("short", "a", "o", 10, persistent()).await.unwrap();
    s.lock("freed", "a", "o", 60_000, persistent())
        .await
        .unwrap();
    s.unlock("freed", "a", "o", None).await.unwrap();
    s.grant_lease("leased", 60_000, Durability::Persistent)
        .await
        .unwrap();
    clock.advance(100);
    let waiter = {
        let s = s.clone();
        tokio::spawn(async move {
            s.lock("zed", "a", "w", 1_000, opts(60_000, Durability::Persistent))
                .await
        })
    };
    let row = |namespace: &str, persistent: u64, ephemeral: u64, waiters: u64| NamespaceStats {
        namespace: namespace.to_string(),
        persistent,
        ephemeral,
        waiters,
    };
    let expected = vec![
        row("-dash", 1, 0, 0),
        row(".dot", 1, 0, 0),
        row("Zed", 1, 0, 0),
        row("team/a b", 1, 0, 0),
        row("zed", 2, 1, 1),
    ];
    // Real stores queue over the network: wait (bounded) for the waiter.
    let mut listed = Vec::new();
    for _ in 0..500 {
        settle_tasks().await;
        listed = s.namespaces().await.unwrap();
        if listed == expected {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(listed, expected);
    waiter.abort();
}
