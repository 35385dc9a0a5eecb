//! etcd's space: how full its database is, whether it refuses writes for
//! lack of space, and the compactor that keeps its history bounded.
//!
//! etcd keeps every revision of every key until someone compacts the
//! history, so lock churn grows its database without end (about 340 bytes
//! per lock and unlock on etcd 3.4) until it reaches its quota
//! (`--quota-backend-bytes`, 2 GiB by default). etcd then raises its
//! NOSPACE alarm and refuses every write (`etcdserver: mvcc: database space
//! exceeded`) until an operator frees space, defragments and disarms it.
//!
//! # What the compactor compacts to, and why no watch breaks
//!
//! Every [`Compaction::interval`] the compactor notes the revision etcd is
//! at, and compacts to the smallest of:
//!
//! - the revision etcd was at [`Compaction::retention`] ago (the window);
//! - the current revision less [`Compaction::min_revisions`];
//! - the oldest revision this backend's own watches and reads may still
//!   ask etcd for (`floors.rs`).
//!
//! A compaction to `r` keeps `r` and every later revision. A watch etcd
//! has caught up with is not touched by compaction at all; only a watch
//! that starts, or resumes, from a revision older than the compacted one
//! is cancelled (`required revision has been compacted`). So:
//!
//! - this backend's watches: each holds a floor at the revision it starts
//!   from until etcd registered it, and the events watch holds one at the
//!   revision it would resume from for the backend's life: the compactor
//!   never compacts past them, even when its window would;
//! - another host's watches (each host compacts on its own, and may be
//!   first): a watch starts from a read just made, and the events watch
//!   resumes from the last revision it saw, so they need revisions at most
//!   as old as their lag: seconds for a healthy host, far less than the
//!   window (5 min by default);
//! - a watch that lags past the window anyway (a host cut off from etcd
//!   for longer) is cancelled as compacted, and recovers: a waiter's or a
//!   lease's watch reads its state again and watches from there
//!   (`Keyspace::watch_any`); the events watch reads every lock again and
//!   goes on from that read, warning that the events in between are lost
//!   (`store/observe.rs`).
//!
//! The events watch's floor moves with every change under the prefix, and
//! with etcd's progress notifications (every 10 minutes by default) while
//! nothing changes there: on an etcd that other applications keep busy,
//! an idle lockd compacts up to that much less. (Progress requested on
//! demand is not used: older etcd 3.4 and 3.5 releases may answer it with
//! a revision ahead of events not yet sent (etcd issue 15220), and a
//! resume from there would miss them.)
//!
//! Compacting to a revision etcd already compacted past (another host, or
//! etcd's `--auto-compaction-*`) is refused, as is one past the current
//! revision (after a restore from an older snapshot): both are harmless and
//! not counted as failures. A failed compaction is a warning; no lock call
//! waits for one.
//!
//! # Space that compaction frees
//!
//! Compaction frees pages inside etcd's database file, and later writes
//! reuse them, so under steady churn the file stops growing: etcd's quota
//! counts the file's size, not the pages in use. The file shrinks only when
//! an operator defragments each member (`etcdctl defrag`), which blocks the
//! member while it runs: lockd never defragments.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use etcd_client::{AlarmAction, AlarmType};
use lockd_core::metrics::StoreSpace;
use lockd_core::LockError;

use crate::floors::Floors;
use crate::options::Compaction;
use crate::rpc::Etcd;

/// The shortest interval between two compactions.
const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// Whether a compaction's failure says another compaction already covers
/// it (etcd compacted at or past the target) or the target is past the
/// current revision (etcd restored from an older snapshot): neither is a
/// failure.
fn harmless_refusal(e: &LockError) -> bool {
    let message = e.to_string();
    message.contains("required revision has been compacted")
        || message.contains("required revision is a future revision")
}

/// What this backend knows of etcd's space, and its compactions.
#[derive(Debug)]
pub(crate) struct Space {
    /// `EtcdOptions::quota_backend_bytes`, for members that do not say.
    quota: u64,
    /// The figures of the last check.
    last: Mutex<StoreSpace>,
    /// Whether a check runs in the background (see [`Space::start_refresh`]).
    refreshing: AtomicBool,
    compactions: AtomicU64,
    failed_compactions: AtomicU64,
    /// The revision this backend last compacted to, or found compacted.
    compacted: AtomicI64,
}

impl Space {
    pub(crate) fn new(quota: u64) -> Space {
        Space {
            quota,
            last: Mutex::new(StoreSpace {
                quota_bytes: quota,
                ..StoreSpace::default()
            }),
            refreshing: AtomicBool::new(false),
            compactions: AtomicU64::new(0),
            failed_compactions: AtomicU64::new(0),
            compacted: AtomicI64::new(0),
        }
    }

    /// The figures of the last check, with the compaction counts now.
    pub(crate) fn last(&self) -> StoreSpace {
        let last = *self.last.lock().unwrap_or_else(PoisonError::into_inner);
        StoreSpace {
            compactions: self.compactions.load(Ordering::Relaxed),
            failed_compactions: self.failed_compactions.load(Ordering::Relaxed),
            compacted_revision: self.compacted.load(Ordering::Relaxed).max(0) as u64,
            ..last
        }
    }

    /// Whether the caller is to check in the background: `false` while
    /// another background check runs. A `true` must be followed by
    /// [`Space::end_refresh`].
    pub(crate) fn start_refresh(&self) -> bool {
        !self.refreshing.swap(true, Ordering::AcqRel)
    }

    pub(crate) fn end_refresh(&self) {
        self.refreshing.store(false, Ordering::Release);
    }

    /// Asks etcd (one member's status, and the cluster's alarms) and keeps
    /// the figures; answers them and the member's current revision.
    pub(crate) async fn check(&self, etcd: &Etcd) -> Result<(StoreSpace, i64), LockError> {
        let status = etcd.idempotent_rpc("status", || {
            let mut maintenance = etcd.client().maintenance_client();
            async move { maintenance.status().await }
        });
        let alarms = etcd.idempotent_rpc("alarm list", || {
            let mut maintenance = etcd.client().maintenance_client();
            async move {
                maintenance
                    .alarm(AlarmAction::Get, AlarmType::None, None)
                    .await
            }
        });
        let (status, alarms) = tokio::join!(status, alarms);
        let (status, alarms) = (status?, alarms?);
        let out_of_space = alarms
            .alarms()
            .iter()
            .any(|a| a.alarm() == AlarmType::Nospace);
        if !out_of_space {
            etcd.forget_out_of_space();
        }
        let reported_quota = u64::try_from(status.db_size_quota()).unwrap_or(0);
        let figures = StoreSpace {
            db_size_bytes: u64::try_from(status.db_size()).unwrap_or(0),
            db_size_in_use_bytes: u64::try_from(status.raft_used_db_size()).unwrap_or(0),
            quota_bytes: if reported_quota > 0 {
                reported_quota
            } else {
                self.quota
            },
            out_of_space,
            ..StoreSpace::default()
        };
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = figures;
        let revision = status.header().map_or(0, |h| h.revision());
        Ok((self.last(), revision))
    }

    /// `unavailable` while etcd's NOSPACE alarm is raised. Asks etcd only
    /// if the last check found the alarm or a request failed for lack of
    /// space since; otherwise answers at once.
    pub(crate) async fn health(&self, etcd: &Etcd) -> Result<(), LockError> {
        let suspected = etcd.saw_out_of_space()
            || self
                .last
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .out_of_space;
        if !suspected {
            return Ok(());
        }
        let (figures, _) = self.check(etcd).await?;
        if figures.out_of_space {
            return Err(LockError::Unavailable(format!(
                "etcd is out of space: its NOSPACE alarm is raised (database {} bytes, \
                 quota {} bytes) and it refuses every write until an operator compacts, \
                 defragments every member and disarms the alarm",
                figures.db_size_bytes, figures.quota_bytes
            )));
        }
        Ok(())
    }

    /// Compacts etcd's history to `target` (see the module docs).
    async fn compact(&self, etcd: &Etcd, target: i64, warned: &mut bool) {
        let result = etcd
            .idempotent_rpc("compact", || {
                let mut kv = etcd.client().kv_client();
                async move { kv.compact(target, None).await }
            })
            .await;
        match result {
            Ok(_) => {
                self.compacted.fetch_max(target, Ordering::Relaxed);
                self.compactions.fetch_add(1, Ordering::Relaxed);
                *warned = false;
                tracing::debug!(revision = target, "etcd store: compacted etcd's history");
            }
            Err(e) if harmless_refusal(&e) => {
                // Another host (or etcd itself) compacted at least as far.
                self.compacted.fetch_max(target, Ordering::Relaxed);
                tracing::debug!(revision = target, error = %e, "etcd store: compaction not needed");
            }
            Err(e) => {
                self.failed_compactions.fetch_add(1, Ordering::Relaxed);
                // Once until a compaction succeeds: a lasting refusal (a
                // user not allowed to compact) warns once, not every tick.
                if !*warned {
                    *warned = true;
                    tracing::warn!(
                        revision = target,
                        error = %e,
                        "etcd store: compacting etcd's history failed; trying again at the \
                         next interval (lock calls are not affected, but etcd grows until \
                         something compacts it)"
                    );
                } else {
                    tracing::debug!(revision = target, error = %e, "etcd store: compaction failed");
                }
            }
        }
    }

    /// Runs the compactor for the backend's life (see the module docs).
    pub(crate) async fn compact_forever(&self, etcd: &Etcd, floors: &Floors, settings: Compaction) {
        let mut window = Window::new(settings);
        let mut ticks = tokio::time::interval(settings.interval.max(MIN_INTERVAL));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut warned = false;
        loop {
            ticks.tick().await;
            let revision = match self.check(etcd).await {
                Ok((_, revision)) => revision,
                Err(e) => {
                    tracing::debug!(error = %e, "etcd store: reading etcd's status failed");
                    continue;
                }
            };
            if revision < self.compacted.load(Ordering::Relaxed) {
                // etcd was restored from an older snapshot: start over.
                self.compacted.store(0, Ordering::Relaxed);
            }
            let now = Instant::now();
            window.note(now, revision);
            let Some(target) = window.target(now, revision, floors.oldest()) else {
                continue;
            };
            if target > self.compacted.load(Ordering::Relaxed) {
                self.compact(etcd, target, &mut warned).await;
            }
        }
    }
}

/// The revisions etcd was at when the compactor looked, as far back as
/// the retention window needs.
#[derive(Debug)]
struct Window {
    settings: Compaction,
    /// (when, revision), oldest first.
    seen: VecDeque<(Instant, i64)>,
}

impl Window {
    fn new(settings: Compaction) -> Window {
        Window {
            settings,
            seen: VecDeque::new(),
        }
    }

    /// Notes that etcd was at `revision` at `at`, and forgets what the
    /// window no longer needs: of the notes older than the retention, only
    /// the latest.
    fn note(&mut self, at: Instant, revision: i64) {
        self.seen.push_back((at, revision));
        let Some(edge) = at.checked_sub(self.settings.retention) else {
            return;
        };
        while self.seen.get(1).is_some_and(|(t, _)| *t <= edge) {
            self.seen.pop_front();
        }
    }

    /// The revision to compact to at `now`, with etcd at `current` and the
    /// oldest revision this backend still needs `floor`: the revision etcd
    /// was at `retention` ago, no later than `min_revisions` before
    /// `current`, nor than `floor`. `None` while nothing is that old.
    fn target(&self, now: Instant, current: i64, floor: Option<i64>) -> Option<i64> {
        let edge = now.checked_sub(self.settings.retention)?;
        let by_time = self
            .seen
            .iter()
            .rev()
            .find(|(t, _)| *t <= edge)
            .map(|(_, r)| *r)?;
        let min_revisions = i64::try_from(self.settings.min_revisions).unwrap_or(i64::MAX);
        let by_count = current.saturating_sub(min_revisions);
        let target = by_time.min(by_count).min(floor.unwrap_or(i64::MAX));
        // Revision 1 is etcd's first: compacting to it removes nothing.
        (target > 1).then_some(target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(retention_s: u64, min_revisions: u64) -> Compaction {
        Compaction {
            interval: Duration::from_secs(1),
            retention: Duration::from_secs(retention_s),
            min_revisions,
        }
    }

    #[test]
    fn the_target_is_the_revision_seen_a_retention_ago() {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut w = Window::new(settings(10, 0));
        w.note(at(0), 100);
        // Nothing is 10 s old yet.
        assert_eq!(w.target(at(5), 150, None), None);
        w.note(at(5), 150);
        w.note(at(10), 200);
        assert_eq!(w.target(at(10), 200, None), Some(100));
        w.note(at(15), 400);
        assert_eq!(w.target(at(15), 400, None), Some(150));
        // Only the latest note older than the window is kept.
        assert_eq!(w.seen.front(), Some(&(at(5), 150)));
        w.note(at(40), 900);
        assert_eq!(w.target(at(40), 900, None), Some(400));
        assert_eq!(w.seen.len(), 2);
    }

    #[test]
    fn the_target_keeps_min_revisions_and_every_floor() {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut w = Window::new(settings(1, 50));
        w.note(at(0), 1_000);
        w.note(at(2), 1_020);
        // The window says 1,000; 50 revisions before 1,020 is 970.
        assert_eq!(w.target(at(2), 1_020, None), Some(970));
        // A watch still needs 900 (and what follows).
        assert_eq!(w.target(at(2), 1_020, Some(900)), Some(900));
        // A floor past the window changes nothing.
        assert_eq!(w.target(at(2), 1_020, Some(5_000)), Some(970));
        // A young etcd: nothing to compact.
        assert_eq!(w.target(at(2), 30, None), None);
    }

    #[test]
    fn refusals_covered_by_another_compaction_are_harmless() {
        for message in [
            "etcd compact failed (endpoints e): grpc request error: code: 'Out of range', \
             message: \"etcdserver: mvcc: required revision has been compacted\"",
            "etcdserver: mvcc: required revision is a future revision",
        ] {
            assert!(harmless_refusal(&LockError::Unavailable(message.into())));
        }
        assert!(!harmless_refusal(&LockError::Unavailable(
            "etcdserver: permission denied".into()
        )));
    }
}
