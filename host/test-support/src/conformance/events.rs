//! The store's events: one for every change, in order.

use lockd_core::{Durability, EventKind, LockEvent, ManualClock};

use super::support::{open, opts, persistent, settle_tasks, StoreFactory, NS, START_MS};

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
