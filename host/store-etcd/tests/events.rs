//! Events on the etcd store come from etcd: two hosts (backends) on one
//! etcd each see the other's changes on their own stream, expiries are
//! reported without any read, and the watch outlives an etcd restart.
//!
//! Time is a `ManualClock` shared by both hosts; etcd's own leases get a
//! long slack, so they never run out while the test clock stands still.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::Client;
use lockd_core::{
    Durability, EventKind, Limits, LockError, LockEvent, LockOptions, LockService, ManualClock,
};
use lockd_etcd::{EtcdBackend, EtcdOptions};
use lockd_test_support::etcd::EtcdCluster;
use tokio::sync::broadcast::Receiver;

const NS: &str = "test";
const START_MS: u64 = 1_700_000_000_000;

fn persistent() -> LockOptions {
    LockOptions::default()
}

async fn host(etcd: &EtcdCluster, clock: &ManualClock) -> LockService {
    let mut o = EtcdOptions::new(etcd.endpoints());
    o.lease_slack = Duration::from_secs(600);
    o.request_timeout = Duration::from_secs(5);
    let backend = EtcdBackend::connect(o, Arc::new(clock.clone()))
        .await
        .unwrap();
    LockService::new(Arc::new(backend), Limits::default())
}

/// The next event about `NS` (bounded wait).
async fn next(events: &mut Receiver<LockEvent>) -> LockEvent {
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("no event within 10 s")
            .expect("the event stream ended or lagged");
        if &*event.namespace == NS {
            return event;
        }
    }
}

/// (kind, name, owner, token) of an event.
fn summary(e: &LockEvent) -> (EventKind, String, String, u64) {
    (
        e.kind,
        e.name.to_string(),
        e.owner.to_string(),
        e.fencing_token,
    )
}

fn expected(
    kind: EventKind,
    name: &str,
    owner: &str,
    token: u64,
) -> (EventKind, String, String, u64) {
    (kind, name.to_string(), owner.to_string(), token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_host_sees_the_other_hosts_changes() {
    let etcd = EtcdCluster::start().unwrap();
    let clock = ManualClock::new(START_MS);
    let (a, b) = (host(&etcd, &clock).await, host(&etcd, &clock).await);
    let mut on_a = a.events().expect("the etcd store publishes events");
    let mut on_b = b.events().expect("the etcd store publishes events");

    // Taken through A: B hears of it.
    let g = a
        .lock(NS, "job", "alice", 60_000, persistent())
        .await
        .unwrap();
    let acquired = next(&mut on_b).await;
    assert_eq!(
        summary(&acquired),
        expected(EventKind::Acquired, "job", "alice", g.fencing_token)
    );
    assert_eq!(acquired.at_ms, START_MS);

    // Force-unlocked through B: A hears of it, with the grant's start.
    clock.advance(5_000);
    let released = b.force_unlock(NS, "job").await.unwrap();
    assert_eq!(
        (released.owner.as_str(), released.fencing_token),
        ("alice", g.fencing_token)
    );
    assert_eq!(
        summary(&next(&mut on_a).await),
        expected(EventKind::Acquired, "job", "alice", g.fencing_token)
    );
    let forced = next(&mut on_a).await;
    assert_eq!(
        summary(&forced),
        expected(EventKind::ForceReleased, "job", "alice", g.fencing_token)
    );
    assert_eq!(forced.acquired_at_ms, Some(START_MS));
    assert_eq!(forced.at_ms, START_MS + 5_000);
    assert!(matches!(
        a.unlock(NS, "job", "alice", Some(g.fencing_token)).await,
        Err(LockError::NotHeld | LockError::NotOwner)
    ));
    assert_eq!(
        summary(&next(&mut on_b).await),
        expected(EventKind::ForceReleased, "job", "alice", g.fencing_token)
    );

    // A lease granted and revoked on A: B hears both.
    let lease = a
        .grant_lease(NS, 60_000, Durability::Persistent)
        .await
        .unwrap();
    assert_eq!(
        summary(&next(&mut on_b).await),
        expected(EventKind::LeaseGranted, &lease.id, &lease.id, 0)
    );
    a.revoke_lease(NS, &lease.id).await.unwrap();
    assert_eq!(
        summary(&next(&mut on_b).await),
        expected(EventKind::LeaseRevoked, &lease.id, &lease.id, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiries_are_reported_without_any_read() {
    let etcd = EtcdCluster::start().unwrap();
    let clock = ManualClock::new(START_MS);
    let (a, b) = (host(&etcd, &clock).await, host(&etcd, &clock).await);
    let mut on_b = b.events().unwrap();
    let g = a.lock(NS, "x", "alice", 1_000, persistent()).await.unwrap();
    let lease = a
        .grant_lease(NS, 1_000, Durability::Persistent)
        .await
        .unwrap();
    let mut seen = vec![
        summary(&next(&mut on_b).await),
        summary(&next(&mut on_b).await),
    ];
    seen.sort_by_key(|s| s.0.as_str());
    assert_eq!(
        seen,
        [
            expected(EventKind::Acquired, "x", "alice", g.fencing_token),
            expected(EventKind::LeaseGranted, &lease.id, &lease.id, 0),
        ]
    );
    clock.advance(1_000);
    // No call on either host: the sweepers remove both.
    let mut seen = vec![
        summary(&next(&mut on_b).await),
        summary(&next(&mut on_b).await),
    ];
    seen.sort_by_key(|s| s.0.as_str());
    assert_eq!(
        seen,
        [
            expected(EventKind::Expired, "x", "alice", g.fencing_token),
            expected(EventKind::LeaseExpired, &lease.id, &lease.id, 0),
        ]
    );
    // And the keys are gone from etcd (their etcd leases have minutes left).
    let mut client = Client::connect(etcd.endpoints(), None).await.unwrap();
    for key in [
        "/lockd/test/x".to_string(),
        format!("/lockd/.leases/test/{}", lease.id),
    ] {
        assert!(
            client
                .get(key.as_str(), None)
                .await
                .unwrap()
                .kvs()
                .is_empty(),
            "{key}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_events_watch_outlives_an_etcd_restart() {
    let mut etcd = EtcdCluster::start().unwrap();
    let clock = ManualClock::new(START_MS);
    let (a, b) = (host(&etcd, &clock).await, host(&etcd, &clock).await);
    let mut on_b = b.events().unwrap();
    let g1 = a
        .lock(NS, "r", "alice", 60_000, persistent())
        .await
        .unwrap();
    assert_eq!(
        summary(&next(&mut on_b).await),
        expected(EventKind::Acquired, "r", "alice", g1.fencing_token)
    );
    etcd.restart_member(0).unwrap();
    // The first change after the restart likely lands before B's watch is
    // back; it resumes from the last revision it saw, so it is not lost.
    // (A retry after `unavailable` may find its first attempt applied.)
    let mut tries = 0;
    loop {
        match a.unlock(NS, "r", "alice", Some(g1.fencing_token)).await {
            Ok(()) => break,
            Err(LockError::NotHeld) if tries > 0 => break,
            Err(LockError::Unavailable(e)) if tries < 50 => {
                tries += 1;
                eprintln!("unlock after the restart: {e}; trying again");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    let g2 = a.lock(NS, "r", "bob", 60_000, persistent()).await.unwrap();
    assert_eq!(
        summary(&next(&mut on_b).await),
        expected(EventKind::Released, "r", "alice", g1.fencing_token)
    );
    assert_eq!(
        summary(&next(&mut on_b).await),
        expected(EventKind::Acquired, "r", "bob", g2.fencing_token)
    );
}
