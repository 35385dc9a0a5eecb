//! The store's events: one for every change, in order.

use lockd_core::{Durability, EventKind, Grant, LockEvent, LockService, ManualClock};
use tokio::sync::broadcast::Receiver;

use super::support::{open, opts, persistent, settle_tasks, StoreFactory, NS, START_MS};

/// Waits (bounded) for the next event about `NS`, skipping others.
async fn next_event(events: &mut Receiver<LockEvent>) -> LockEvent {
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

/// Asserts that `event` is a `kind` naming the lock `name`, its holder
/// `owner` and its `token` (a lease's events name the lease id twice, and
/// token 0).
fn expect(event: LockEvent, kind: EventKind, name: &str, owner: &str, token: u64) {
    assert_eq!(
        (event.kind, &*event.name, &*event.owner, event.fencing_token),
        (kind, name, owner, token),
        "{event:?}"
    );
}

/// [`expect`] of the next event about `NS`.
async fn expect_next(
    events: &mut Receiver<LockEvent>,
    kind: EventKind,
    name: &str,
    owner: &str,
    token: u64,
) {
    expect(next_event(events).await, kind, name, owner, token);
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
    let handed_off = acquire_extend_and_hand_off(&s, &mut events).await;
    let_the_hand_off_expire(&s, &clock, &mut events, &handed_off).await;
    acquire_and_force_release(&s, &mut events).await;
    lock_in_a_lease_and_revoke_it(&s, &mut events).await;
    let_a_lease_expire(&s, &clock, &mut events).await;
}

/// `o1` acquires and extends `e`, `o2` waits for it, and `o1`'s release
/// hands it off to `o2`, whose grant is returned.
async fn acquire_extend_and_hand_off(s: &LockService, events: &mut Receiver<LockEvent>) -> Grant {
    let g1 = s.lock(NS, "e", "o1", 10_000, persistent()).await.unwrap();
    expect_next(events, EventKind::Acquired, "e", "o1", g1.fencing_token).await;
    s.extend(NS, "e", "o1", 20_000).await.unwrap();
    expect_next(events, EventKind::Extended, "e", "o1", g1.fencing_token).await;
    let waiter = {
        let s = s.clone();
        tokio::spawn(async move {
            s.lock(NS, "e", "o2", 100, opts(30_000, Durability::Persistent))
                .await
        })
    };
    settle_tasks().await;
    s.unlock(NS, "e", "o1", None).await.unwrap();
    expect_next(events, EventKind::Released, "e", "o1", g1.fencing_token).await;
    let g2 = waiter.await.unwrap().unwrap();
    expect_next(events, EventKind::HandedOff, "e", "o2", g2.fencing_token).await;
    g2
}

/// `o2`'s grant of `e`, 100 ms long, runs out.
async fn let_the_hand_off_expire(
    s: &LockService,
    clock: &ManualClock,
    events: &mut Receiver<LockEvent>,
    g2: &Grant,
) {
    clock.advance(100);
    // Expiry is found by the store's own timer, or by the next read.
    let _ = s.get(NS, "e").await.unwrap();
    expect_next(events, EventKind::Expired, "e", "o2", g2.fencing_token).await;
}

/// `o3` acquires the free `e`, and an operator force-releases it.
async fn acquire_and_force_release(s: &LockService, events: &mut Receiver<LockEvent>) {
    let g3 = s.lock(NS, "e", "o3", 10_000, persistent()).await.unwrap();
    expect_next(events, EventKind::Acquired, "e", "o3", g3.fencing_token).await;
    s.force_unlock(NS, "e").await.unwrap();
    expect_next(
        events,
        EventKind::ForceReleased,
        "e",
        "o3",
        g3.fencing_token,
    )
    .await;
}

/// A lease is granted, locks `le`, and is revoked: its lock's release
/// and the revoke are both reported, in either order.
async fn lock_in_a_lease_and_revoke_it(s: &LockService, events: &mut Receiver<LockEvent>) {
    let lease = s
        .grant_lease(NS, 1_000, Durability::Ephemeral)
        .await
        .unwrap();
    expect_next(events, EventKind::LeaseGranted, &lease.id, &lease.id, 0).await;
    let gl = s.lock_in_lease(NS, "le", &lease.id, 0).await.unwrap();
    expect_next(
        events,
        EventKind::Acquired,
        "le",
        &lease.id,
        gl.fencing_token,
    )
    .await;
    s.revoke_lease(NS, &lease.id).await.unwrap();
    let mut both = [next_event(events).await, next_event(events).await];
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
}

/// A 100 ms lease is granted and runs out.
async fn let_a_lease_expire(
    s: &LockService,
    clock: &ManualClock,
    events: &mut Receiver<LockEvent>,
) {
    let short = s.grant_lease(NS, 100, Durability::Ephemeral).await.unwrap();
    expect_next(events, EventKind::LeaseGranted, &short.id, &short.id, 0).await;
    clock.advance(100);
    expect_next(events, EventKind::LeaseExpired, &short.id, &short.id, 0).await;
}
