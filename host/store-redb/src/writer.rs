//! The writer thread: group commit.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Receiver;

use lockd_core::{JournalOp, TicketSender};
use redb::{Database, ReadableTable};

use crate::codec;

/// Upper bound on ops per commit, so one huge burst cannot delay the first
/// callers in it for long.
const MAX_BATCH: usize = 4096;

/// One message to the writer: an op to make durable, or (`op: None`) a
/// flush barrier, which resolves once everything queued before it is durable.
pub(crate) struct Pending {
    pub(crate) op: Option<JournalOp>,
    pub(crate) done: TicketSender,
}

/// Counters of the writer, for metrics.
#[derive(Debug, Default)]
pub struct WriterStats {
    /// Ops submitted.
    pub queued: AtomicU64,
    /// Ops durable: every op before them in the queue is durable too.
    pub durable: AtomicU64,
    /// Commits (each one fsync) attempted.
    pub commits: AtomicU64,
    /// Ops in those commits.
    pub committed_ops: AtomicU64,
    /// Commits that failed; their ops were reported unavailable.
    pub failed_commits: AtomicU64,
    /// Times the database was reopened after a failure.
    pub reopens: AtomicU64,
}

/// Takes everything queued while the previous commit synced, and commits it
/// as one transaction. Runs until the queue is closed and drained.
///
/// After a failed commit (a full disk, an I/O error) redb refuses all further
/// work until the database is closed and reopened, so the writer drops it and
/// reopens the file before the next batch. Until that succeeds every batch is
/// answered `unavailable`; once space returns, the store recovers by itself.
///
/// The ops of a failed commit are not forgotten: their callers were told
/// `unavailable` (outcome unknown), but the engine's memory already shows
/// them (and the engine's own corrections, such as releasing a grant whose
/// write failed, come as later ops). They go first into the next commit, so
/// the file converges to what memory showed, in order, and a flush barrier
/// resolves only once they are durable.
pub(crate) fn run(path: &Path, db: Database, queue: Receiver<Pending>, stats: &WriterStats) {
    let mut db = Some(db);
    let mut batch = Vec::new();
    let mut carried = Carried::default();
    while let Ok(first) = queue.recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let ops = batch.iter().filter(|p| p.op.is_some()).count() as u64;
        if ops == 0 && carried.is_empty() {
            // Only barriers, and everything before them is durable.
            for pending in batch.drain(..) {
                pending.done.complete(Ok(()));
            }
            continue;
        }
        if db.is_none() {
            match crate::create_database(path) {
                Ok(reopened) => {
                    stats.reopens.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(path = %path.display(), "lock store reopened after a failed commit; writes resume");
                    db = Some(reopened);
                }
                Err(e) => tracing::error!(
                    path = %path.display(),
                    error = %e,
                    "reopening the lock store failed; this batch is answered unavailable"
                ),
            }
        }
        stats.commits.fetch_add(1, Ordering::Relaxed);
        stats.committed_ops.fetch_add(ops, Ordering::Relaxed);
        let outcome = match &db {
            Some(open) => {
                commit(open, &carried, &batch).map_err(|e| format!("lock store write failed: {e}"))
            }
            None => Err(format!(
                "lock store {} is unavailable: it could not be reopened after a write failure",
                path.display()
            )),
        };
        match &outcome {
            Ok(()) => {
                stats
                    .durable
                    .fetch_add(carried.count + ops, Ordering::Release);
                carried = Carried::default();
            }
            Err(why) => {
                tracing::error!(
                    path = %path.display(),
                    ops = batch.len(),
                    error = %why,
                    "lock store commit failed; its callers get unavailable, the next batch reopens the store and writes these ops first"
                );
                stats.failed_commits.fetch_add(1, Ordering::Relaxed);
                // Close it now; the next batch reopens it.
                db = None;
            }
        }
        for pending in batch.drain(..) {
            if let (Err(_), Some(op)) = (&outcome, &pending.op) {
                carried.push(op.clone());
            }
            pending.done.complete(outcome.clone());
        }
    }
}

/// The ops of failed commits, to be written before anything newer.
#[derive(Default)]
struct Carried {
    ops: Vec<JournalOp>,
    /// Ops submitted that these stand for.
    count: u64,
}

impl Carried {
    fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    fn push(&mut self, op: JournalOp) {
        self.ops.push(op);
        self.count += 1;
    }
}

fn commit(db: &Database, carried: &Carried, batch: &[Pending]) -> Result<(), redb::Error> {
    // Durability::Immediate is redb's default: commit returns after fsync.
    let txn = db.begin_write()?;
    {
        let mut tables = Tables {
            locks: txn.open_table(codec::LOCKS)?,
            leases: txn.open_table(codec::LEASES)?,
            meta: txn.open_table(codec::META)?,
        };
        for op in carried
            .ops
            .iter()
            .chain(batch.iter().filter_map(|p| p.op.as_ref()))
        {
            tables.apply(op)?;
        }
    }
    txn.commit()?;
    Ok(())
}

struct Tables<'txn> {
    locks: redb::Table<'txn, &'static [u8], &'static [u8]>,
    leases: redb::Table<'txn, &'static [u8], &'static [u8]>,
    meta: redb::Table<'txn, &'static str, u64>,
}

impl Tables<'_> {
    fn apply(&mut self, op: &JournalOp) -> Result<(), redb::Error> {
        match op {
            JournalOp::Put(key, record) => {
                self.locks.insert(
                    codec::encode_key(key).as_slice(),
                    codec::encode_record(record).as_slice(),
                )?;
            }
            JournalOp::Delete(key) => {
                self.locks.remove(codec::encode_key(key).as_slice())?;
            }
            JournalOp::PutLease(lease, record) => {
                self.leases.insert(
                    codec::encode_key(lease).as_slice(),
                    codec::encode_lease(record).as_slice(),
                )?;
            }
            JournalOp::DeleteLease(lease) => {
                self.leases.remove(codec::encode_key(lease).as_slice())?;
            }
            // Part of the one transaction every op of the batch shares.
            JournalOp::Batch(ops) => {
                for op in ops {
                    self.apply(op)?;
                }
            }
            JournalOp::ReserveTokens { up_to } => {
                let current = self
                    .meta
                    .get(codec::TOKENS_RESERVED)?
                    .map_or(0, |v| v.value());
                if *up_to > current {
                    self.meta.insert(codec::TOKENS_RESERVED, *up_to)?;
                }
            }
        }
        Ok(())
    }
}
