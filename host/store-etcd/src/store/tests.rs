//! A watch whose start revision another host compacted away (this host's
//! floors cannot stop another host; see `floors.rs` and `space.rs`) is
//! cancelled by etcd, and must recover: the events watch reads every lock
//! again and reports changes from that read on, and a waiter's watch
//! returns so that its caller reads again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::Client;
use lockd_core::{EventKind, Key, LockOptions, ManualClock};
use lockd_test_support::etcd::EtcdCluster;

use super::Inner;
use crate::options::EtcdOptions;

const START_MS: u64 = 1_700_000_000_000;

/// A store on `etcd` that never compacts by itself, on a clock that stands
/// still (etcd's leases get a long slack).
async fn store(etcd: &EtcdCluster) -> Arc<Inner> {
    let mut options = EtcdOptions::new(etcd.endpoints());
    options.compaction = None;
    options.lease_slack = Duration::from_secs(600);
    Inner::connect(options, Arc::new(ManualClock::new(START_MS)))
        .await
        .expect("connect")
}

/// Writes one more key and compacts etcd's history up to that write, as a
/// client other than the store: every revision before it is gone (a
/// compaction keeps the revision it compacts to). Answers that revision.
async fn compact_everything(etcd: &EtcdCluster) -> i64 {
    let mut raw = Client::connect(etcd.endpoints(), None).await.unwrap();
    let put = raw.put("/elsewhere", "v", None).await.unwrap();
    let revision = put.header().unwrap().revision();
    raw.compact(revision, None).await.unwrap();
    revision
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_events_watch_reads_everything_again_after_a_compaction_past_it() {
    let etcd = EtcdCluster::start().expect("start etcd");
    let inner = store(&etcd).await;
    let stale = inner.scan().await.unwrap();
    assert_eq!(inner.observer.earliest_expiry(), None);
    // A grant the watch will never see: written, then compacted away.
    let key = Key::new("ns", "x");
    let grant = inner
        .start_lock(&key, "a", 60_000, LockOptions::default(), None)
        .await
        .unwrap()
        .unwrap();
    let compacted = compact_everything(&etcd).await;
    let mut events = inner.subscribe();
    let watch = tokio::spawn(inner.observer.clone().watch(stale));
    // The watch finds its start compacted and reads every lock again: the
    // sweeper learns of the grant's expiry from that read.
    let until = Instant::now() + Duration::from_secs(10);
    while inner.observer.earliest_expiry() != Some(grant.expires_at_ms) {
        assert!(Instant::now() < until, "the locks were never read again");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Its floor moved past the compaction with it.
    assert!(
        inner.ks.floors.oldest().is_some_and(|f| f > compacted),
        "{:?}",
        inner.ks.floors.oldest()
    );
    // It goes on from that read: the next change is the first event (the
    // grant before the compaction is not replayed).
    inner
        .unlock(&key, "a", Some(grant.fencing_token))
        .await
        .unwrap();
    let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
        .await
        .expect("no event within 10 s")
        .unwrap();
    assert_eq!(
        (event.kind, event.owner.as_ref(), event.fencing_token),
        (EventKind::Released, "a", grant.fencing_token)
    );
    watch.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_a_compacted_revision_returns_to_read_again() {
    let etcd = EtcdCluster::start().expect("start etcd");
    let inner = store(&etcd).await;
    let stale = inner.scan().await.unwrap();
    let compacted = compact_everything(&etcd).await;
    assert!(stale < compacted);
    // Keys nothing writes: only the cancellation can end the watch.
    let keys = [
        b"/lockd/nothing".to_vec(),
        b"/lockd/nothing-either".to_vec(),
    ];
    tokio::time::timeout(Duration::from_secs(10), inner.ks.watch_any(&keys, stale))
        .await
        .expect("the watch never returned")
        .expect("a cancelled watch is not a failure");
    // Its floor is gone with it.
    assert_eq!(inner.ks.floors.oldest(), None);
}

/// The prefix's format key: written at the first start, kept at the next,
/// and a newer format refuses the start naming both versions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_of_a_newer_format_is_refused_at_start() {
    let etcd = EtcdCluster::start().expect("start etcd");
    let mut raw = Client::connect(etcd.endpoints(), None).await.unwrap();
    drop(store(&etcd).await);
    let written = raw.get("/lockd/.format", None).await.unwrap();
    assert_eq!(written.kvs()[0].value(), br#"{"v":1}"#);
    drop(store(&etcd).await);
    raw.put("/lockd/.format", r#"{"v":3}"#, None).await.unwrap();
    let mut options = EtcdOptions::new(etcd.endpoints());
    options.compaction = None;
    let refused = Inner::connect(options, Arc::new(ManualClock::new(START_MS)))
        .await
        .err()
        .expect("a newer format is refused");
    let message = refused.to_string();
    assert!(
        message.contains("format version 3") && message.contains("reads up to 1"),
        "{message}"
    );
    // Nothing was written over it.
    let kept = raw.get("/lockd/.format", None).await.unwrap();
    assert_eq!(kept.kvs()[0].value(), br#"{"v":3}"#);
}
