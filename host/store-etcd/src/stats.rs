//! The cluster-wide counts `stats()` answers. `stats` cannot wait for
//! etcd, so it answers the counts of the previous refresh and starts the
//! next one.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use etcd_client::{GetOptions, Txn, TxnOp};
use lockd_core::BackendStats;

use crate::keys::Layout;
use crate::rpc::{gets, Etcd};

/// Counts from the previous scrape.
#[derive(Debug, Default)]
pub(crate) struct StatsCache {
    locks: AtomicU64,
    waiters: AtomicU64,
    refreshing: AtomicBool,
}

impl StatsCache {
    /// The counts of the previous refresh.
    pub(crate) fn last(&self) -> BackendStats {
        BackendStats {
            locks_held: self.locks.load(Ordering::Relaxed),
            waiters: self.waiters.load(Ordering::Relaxed),
            commits: 0,
            committed_ops: 0,
            failed_commits: 0,
        }
    }

    /// Whether the caller is to refresh the counts: `false` while another
    /// refresh runs. A `true` must be followed by [`StatsCache::refresh`].
    pub(crate) fn start_refresh(&self) -> bool {
        !self.refreshing.swap(true, Ordering::AcqRel)
    }

    /// Counts lock and waiter keys in one read and keeps the counts (lease
    /// keys and the events marker are neither). A failure keeps the
    /// previous counts.
    pub(crate) async fn refresh(&self, etcd: &Etcd, layout: &Layout) {
        let count =
            |k: Vec<u8>| TxnOp::get(k, Some(GetOptions::new().with_prefix().with_count_only()));
        let txn = Txn::new().and_then(vec![
            count(layout.all()),
            count(layout.all_waiters()),
            count(layout.all_leases()),
            TxnOp::get(
                layout.marker_key(),
                Some(GetOptions::new().with_count_only()),
            ),
        ]);
        match etcd.txn("stats", txn).await {
            Ok(resp) => {
                let counts: Vec<u64> = gets(&resp).iter().map(|g| g.count() as u64).collect();
                if let [all, waiters, leases, marker] = counts[..] {
                    self.locks.store(
                        all.saturating_sub(waiters)
                            .saturating_sub(leases)
                            .saturating_sub(marker),
                        Ordering::Relaxed,
                    );
                    self.waiters.store(waiters, Ordering::Relaxed);
                }
            }
            Err(e) => tracing::warn!(error = %e, "etcd store: counting locks for stats failed"),
        }
        self.refreshing.store(false, Ordering::Release);
    }
}
