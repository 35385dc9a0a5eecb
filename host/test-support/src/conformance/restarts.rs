//! What a restart (a reopen of the store) keeps: persistent locks, the
//! rise of tokens, and nothing expired.

use lockd_core::{Durability, LockError, ManualClock};

use super::support::{open, opts, persistent, settle_tasks, StoreFactory, NS, START_MS};

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
