//! The store's counters, shared by the writer and the checkpoint thread.

use std::sync::atomic::AtomicU64;

/// Counters of the writer and the checkpoints, for metrics.
#[derive(Debug, Default)]
pub struct WriterStats {
    /// Ops submitted.
    pub queued: AtomicU64,
    /// Ops durable: every op before them in the queue is durable too.
    pub durable: AtomicU64,
    /// Commits (each one write and one `fdatasync` of the log) attempted.
    pub commits: AtomicU64,
    /// Ops in those commits.
    pub committed_ops: AtomicU64,
    /// Commits that failed; their ops were reported unavailable.
    pub failed_commits: AtomicU64,
    /// Times writing resumed after failed commits (a commit succeeded after
    /// one or more failed).
    pub reopens: AtomicU64,
    /// Checkpoints: finished log segments applied to redb and deleted.
    pub checkpoints: AtomicU64,
    /// Checkpoints that failed (and were retried).
    pub failed_checkpoints: AtomicU64,
}
