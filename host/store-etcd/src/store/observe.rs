//! The backend's view of every change in etcd: one watch over the prefix,
//! with each key's previous value, turned into the events of
//! docs/reference.md#events (see `events.rs`) and into the expiry index that
//! the sweeper works from; and the sweeper, which removes expired locks
//! and leases (marked expired) without waiting for a read.
//!
//! The watch starts where the read made at connect ended, and after a
//! failure (a member's death, an etcd restart) again from the last
//! revision it saw, so no change is missed unless etcd compacted it away
//! meanwhile (then it warns, reads everything again and goes on from
//! there). This backend's compactor never compacts past that revision;
//! another host's may, once the watch lags past its retention window
//! (`space.rs`).

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, Event, EventType, GetOptions, KeyValue, Txn, TxnOp, WatchOptions,
};
use lockd_core::{EventPosition, EventSender, LockError, LockEvent, PositionedEvent, EVENT_BUFFER};
use tokio::sync::broadcast;

use super::keyspace::Keyspace;
use super::queue::{Queue, WATCH_RETRY};
use super::txn::read_lease;
use crate::deadlines::Deadlines;
use crate::events::{lease_event, lock_events, Why};
use crate::floors::Floor;
use crate::keys::Target;
use crate::name::Name;
use crate::record::{from_json, LeaseRecord};
use crate::rpc::gets;

/// Real time between two sweeps at least: bounds the sweeper's work under
/// any clock (one whose sleeps end at once, say), and is the delay an
/// expiry may take to be removed, on top of a round trip or two.
const SWEEP_PAUSE: Duration = Duration::from_millis(50);

/// The longest pause between two attempts to watch again.
const MAX_WATCH_PAUSE: Duration = Duration::from_secs(5);

/// How a watch ended.
enum WatchEnd {
    /// etcd compacted revisions the watch had not reached (this one).
    Compacted(i64),
    Failed(String),
}

/// The events watch and the sweeper, with what they keep.
pub(super) struct Observer {
    ks: Arc<Keyspace>,
    queue: Arc<Queue>,
    /// Every change the watch reports, for whoever subscribed.
    events: EventSender,
    /// Expiries of the lock and lease keys, for the sweeper.
    deadlines: Deadlines,
    /// The same events with their positions (`replay.rs`), for streams
    /// that may resume on another host.
    pub(super) positioned: broadcast::Sender<PositionedEvent>,
    /// The revision up to which every change was published. Held while a
    /// revision's events are sent and while subscribing, so that a
    /// subscriber gets exactly the events after the revision it is told.
    pub(super) published: std::sync::Mutex<u64>,
}

impl Observer {
    pub(super) fn new(ks: Arc<Keyspace>, queue: Arc<Queue>) -> Observer {
        Observer {
            ks,
            queue,
            events: EventSender::default(),
            deadlines: Deadlines::default(),
            positioned: broadcast::Sender::new(EVENT_BUFFER),
            published: std::sync::Mutex::new(0),
        }
    }

    /// The keyspace, for the replay of past events.
    pub(super) fn keyspace(&self) -> &Keyspace {
        &self.ks
    }

    /// A new subscriber to the backend's events.
    pub(super) fn subscribe(&self) -> broadcast::Receiver<LockEvent> {
        self.events.subscribe()
    }

    /// The earliest expiry the sweeper knows of.
    #[cfg(test)]
    pub(super) fn earliest_expiry(&self) -> Option<u64> {
        self.deadlines.earliest()
    }

    /// The key and expiry of a lock or lease key's value, for the index.
    fn expiry_of(&self, kv: &KeyValue) -> Option<u64> {
        match self.ks.layout.classify(kv.key()) {
            Target::Lock(_) => Name::from_kv(kv).ok().and_then(|n| n.due()),
            Target::Lease(_) => from_json::<LeaseRecord>(kv.key(), kv.value())
                .ok()
                .map(|l| l.expires_at_ms),
            Target::Marker | Target::Other => None,
        }
    }

    /// Reads every lock and lease key (not the waiters) into the expiry
    /// index, and answers the revision read: the watch goes on from there.
    pub(super) async fn scan(&self) -> Result<i64, LockError> {
        let all = self.ks.layout.all();
        let waiters = self.ks.layout.all_waiters();
        // [<prefix>/, <prefix>/.queue/) and [<prefix>/.queue0, <prefix>0):
        // everything but the waiters.
        let txn = Txn::new().and_then(vec![
            TxnOp::get(
                all.clone(),
                Some(GetOptions::new().with_range(waiters.clone())),
            ),
            TxnOp::get(
                successor(&waiters),
                Some(GetOptions::new().with_range(successor(&all))),
            ),
        ]);
        let resp = self.ks.etcd.read_txn("scan", txn).await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        let mut entries = Vec::new();
        for get in gets(&resp) {
            for kv in get.kvs() {
                if let Some(at) = self.expiry_of(kv) {
                    entries.push((kv.key().to_vec(), at));
                }
            }
        }
        self.deadlines.replace_all(entries);
        Ok(revision)
    }

    /// Runs the events watch for the backend's life, from `revision` + 1.
    ///
    /// Holds a floor at the revision it would resume from (`floors.rs`),
    /// so this backend's compactor never compacts away what a watch opened
    /// again after a failure needs; only another host's compaction can,
    /// once the watch lags past its retention window.
    pub(super) async fn watch(self: Arc<Self>, mut revision: i64) {
        let floor = self.ks.floors.hold(revision + 1);
        self.advance(revision);
        let mut pause = WATCH_RETRY;
        loop {
            let seen = revision;
            let end = self.watch_events(&mut revision, &floor).await;
            if revision > seen {
                pause = WATCH_RETRY;
            }
            match end {
                WatchEnd::Compacted(compacted) => {
                    tracing::warn!(
                        from = revision + 1,
                        compacted,
                        "etcd store: etcd compacted revisions the events watch had not \
                         reached; their events are lost. Reading every lock again"
                    );
                    match self.scan().await {
                        Ok(r) => {
                            revision = r;
                            self.advance(r);
                            floor.set(r + 1);
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "etcd store: reading every lock failed");
                            tokio::time::sleep(pause).await;
                            pause = (pause * 2).min(MAX_WATCH_PAUSE);
                        }
                    }
                }
                WatchEnd::Failed(e) => {
                    tracing::warn!(
                        error = %e,
                        from = revision + 1,
                        "etcd store: the events watch failed; watching again from the \
                         last revision seen"
                    );
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_WATCH_PAUSE);
                }
            }
        }
    }

    /// One watch from `revision` + 1 until it fails; `revision` follows the
    /// revisions it delivered, and `floor` the revision after it.
    async fn watch_events(&self, revision: &mut i64, floor: &Floor<'_>) -> WatchEnd {
        // Progress notifications move `revision` on while nothing changes,
        // so a watch opened again after a quiet spell starts at a recent
        // revision, less likely compacted.
        let options = WatchOptions::new()
            .with_prefix()
            .with_prev_key()
            .with_progress_notify()
            .with_start_revision(*revision + 1);
        let all = self.ks.layout.all();
        let stream = self
            .ks
            .etcd
            .rpc("events watch", || {
                let mut wc = self.ks.etcd.client().watch_client();
                let (key, options) = (all.clone(), options.clone());
                async move { wc.watch(key, Some(options)).await }
            })
            .await;
        let mut stream = match stream {
            Ok(s) => s,
            Err(e) => return WatchEnd::Failed(e.to_string()),
        };
        loop {
            match stream.message().await {
                Ok(Some(resp)) => {
                    if resp.compact_revision() > 0 {
                        return WatchEnd::Compacted(resp.compact_revision());
                    }
                    if resp.canceled() {
                        return WatchEnd::Failed(format!(
                            "etcd cancelled the watch: {}",
                            resp.cancel_reason()
                        ));
                    }
                    if resp.events().is_empty() && !resp.created() {
                        // A progress notification: every change up to its
                        // revision was delivered. (Not the creation answer:
                        // the changes since `revision` follow it.)
                        if let Some(h) = resp.header() {
                            *revision = (*revision).max(h.revision());
                            self.advance(*revision);
                        }
                    }
                    self.publish(resp.events(), revision);
                    floor.set(*revision + 1);
                }
                Ok(None) => return WatchEnd::Failed("the stream closed".into()),
                Err(e) => return WatchEnd::Failed(e.to_string()),
            }
        }
    }

    /// Publishes the events of `events` (whole revisions, in order) and
    /// keeps the expiry index.
    fn publish(&self, events: &[Event], revision: &mut i64) {
        let now = self.ks.clock.now_ms();
        for (at, why, group) in revisions(events, &self.ks.layout.marker_key()) {
            let mut published = self.published.lock().unwrap_or_else(|e| e.into_inner());
            let positioned = self.positioned.receiver_count() > 0;
            let mut index = 0;
            for e in group {
                self.index_expiry(e);
                for event in self.events_of(e, why, now) {
                    if positioned {
                        let position = EventPosition::at(at.unsigned_abs(), index);
                        let _ = self.positioned.send(PositionedEvent {
                            position,
                            event: event.clone(),
                        });
                    }
                    index += 1;
                    self.events.emit(|| event);
                }
            }
            *published = (*published).max(at.unsigned_abs());
            *revision = (*revision).max(at);
        }
    }

    /// Records that every change up to `revision` was published.
    fn advance(&self, revision: i64) {
        let mut published = self.published.lock().unwrap_or_else(|e| e.into_inner());
        *published = (*published).max(revision.unsigned_abs());
    }

    /// Keeps the expiry index of the key `e` changed.
    fn index_expiry(&self, e: &Event) {
        let Some(kv) = e.kv() else { return };
        let put = e.event_type() == EventType::Put;
        let due = match self.ks.layout.classify(kv.key()) {
            Target::Lock(_) => put
                .then(|| Name::from_kv(kv).ok())
                .flatten()
                .and_then(|n| n.due()),
            Target::Lease(_) => put
                .then(|| from_json::<LeaseRecord>(kv.key(), kv.value()).ok())
                .flatten()
                .map(|l| l.expires_at_ms),
            Target::Marker | Target::Other => return,
        };
        match due {
            Some(at) => self.deadlines.set(kv.key(), at),
            None => self.deadlines.remove(kv.key()),
        }
    }

    /// The events of one change `e`, in a revision marked `why`, seen at
    /// `now`: the same on every host, bar the kinds that depend on the
    /// clock (an end past its expiry is `expired`).
    pub(super) fn events_of(&self, e: &Event, why: Option<Why>, now: u64) -> Vec<LockEvent> {
        let Some(kv) = e.kv() else { return Vec::new() };
        let put = e.event_type() == EventType::Put;
        match self.ks.layout.classify(kv.key()) {
            Target::Lock(key) => {
                let new = put.then(|| Name::from_kv(kv).ok()).flatten();
                let prev = e.prev_kv().and_then(|p| Name::from_kv(p).ok());
                let before = prev.as_ref().map_or(&[][..], |n| &n.grants[..]);
                let after = new.as_ref().map_or(&[][..], |n| &n.grants[..]);
                lock_events(&key, before, after, why, now)
            }
            Target::Lease(lease) => {
                let read = |kv: &KeyValue| from_json::<LeaseRecord>(kv.key(), kv.value()).ok();
                let new = put.then(|| read(kv)).flatten();
                let prev = e.prev_kv().and_then(read);
                lease_event(&lease, prev.as_ref(), new.as_ref(), why, now)
                    .into_iter()
                    .collect()
            }
            Target::Marker | Target::Other => Vec::new(),
        }
    }

    /// Runs the sweeper for the backend's life: sleeps (on the backend's
    /// clock) until the earliest expiry it knows of, then removes every
    /// lock and lease that expired by then, marked expired; an expired
    /// lock with waiters goes to the head of its queue instead.
    pub(super) async fn sweep(self: Arc<Self>) {
        loop {
            match self.deadlines.earliest() {
                Some(at) => tokio::select! {
                    () = self.ks.clock.sleep_until(at) => {}
                    () = self.deadlines.added() => {}
                },
                None => self.deadlines.added().await,
            }
            tokio::time::sleep(SWEEP_PAUSE).await;
            let now = self.ks.clock.now_ms();
            let mut failed = false;
            for key in self.deadlines.take_due(now) {
                if let Err(e) = self.sweep_key(&key).await {
                    tracing::warn!(
                        key = %String::from_utf8_lossy(&key),
                        error = %e,
                        "etcd store: removing an expired key failed; trying again"
                    );
                    self.deadlines.set(&key, now);
                    failed = true;
                }
            }
            if failed {
                tokio::time::sleep(MAX_WATCH_PAUSE.min(self.ks.etcd.request_timeout())).await;
            }
        }
    }

    /// Removes the lock or lease at `key` if it has expired (each host's
    /// sweeper may try; the compares let one succeed).
    async fn sweep_key(&self, key: &[u8]) -> Result<(), LockError> {
        match self.ks.layout.classify(key) {
            Target::Lock(lock) => {
                let queue = self.ks.layout.queue_prefix(&lock);
                // Hands an expired lock to the head of its queue, if any.
                let snap = self.queue.settled(key, &queue, None).await?;
                let now = self.ks.clock.now_ms();
                if let Some(n) = snap.lock.as_ref().filter(|n| n.untidy(now)) {
                    self.ks.tidy(key, &queue, n, now).await?;
                }
                Ok(())
            }
            Target::Lease(_) => {
                let Some(l) = read_lease(&self.ks.etcd, key).await? else {
                    return Ok(());
                };
                if l.rec.live(self.ks.clock.now_ms()) {
                    return Ok(());
                }
                let txn = Txn::new()
                    .when(vec![Compare::mod_revision(
                        key.to_vec(),
                        CompareOp::Equal,
                        l.mod_revision,
                    )])
                    .and_then(vec![
                        TxnOp::delete(key.to_vec(), None),
                        Why::Expired.marker(&self.ks.layout),
                    ]);
                self.ks
                    .etcd
                    .txn("remove expired lease", txn)
                    .await
                    .map(drop)
            }
            Target::Marker | Target::Other => Ok(()),
        }
    }
}

/// `events` (whole revisions, in order) cut into revisions: each one's
/// number, the reason its marker (written in the same transaction as
/// `marker`) gives, and its changes.
pub(super) fn revisions<'a>(
    events: &'a [Event],
    marker: &[u8],
) -> Vec<(i64, Option<Why>, &'a [Event])> {
    let mut cut = Vec::new();
    let mut rest = events;
    while let Some(first) = rest.first() {
        let at = revision_of(first);
        let n = rest
            .iter()
            .position(|e| revision_of(e) != at)
            .unwrap_or(rest.len());
        let (group, next) = rest.split_at(n);
        let why = group.iter().find_map(|e| {
            let kv = e.kv().filter(|kv| kv.key() == marker)?;
            (e.event_type() == EventType::Put)
                .then(|| Why::from_marker(kv.value()))
                .flatten()
        });
        cut.push((at, why, group));
        rest = next;
    }
    cut
}

/// The revision of the change an event reports (a delete's too).
fn revision_of(e: &Event) -> i64 {
    e.kv().map_or(0, KeyValue::mod_revision)
}

/// The first key after every key that starts with `prefix` (which ends
/// in `/`): the prefix with its last byte raised by one.
fn successor(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}
