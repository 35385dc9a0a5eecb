//! Checkpoints: the ops of finished log segments applied to redb in one
//! transaction, which also records how far the log is applied; then the
//! segments are deleted. At open, every segment left is checkpointed before
//! the state is read, so recovery reads redb alone.
//!
//! A crash between the commit and the deletes leaves segments redb already
//! holds: their numbers are at most `meta.log_segment`, and they are deleted
//! unread, never replayed over newer state.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use redb::{Database, ReadableDatabase, ReadableTable};

use crate::codec;
use crate::damage::{Damage, Finding};
use crate::log::format::LogOp;
use crate::log::scan::{scan, Position, ScanError, Tail};
use crate::stats::WriterStats;

/// After a failed checkpoint (a full disk), how long before trying again.
const RETRY: Duration = Duration::from_secs(1);

/// A segment the writer is done with: everything before `end` is durable.
pub(crate) struct Finished {
    pub(crate) seq: u64,
    pub(crate) path: PathBuf,
    pub(crate) end: usize,
}

/// What the writer sends the checkpoint thread.
pub(crate) enum ToCheckpoint {
    /// A segment it is done with.
    Segment(Finished),
    /// A snapshot's cut: once every segment sent before it is applied, a
    /// read transaction of redb goes back on this channel.
    Cut(CutReply),
}

/// Where a snapshot's cut is answered: a read transaction holding every op
/// made durable before the cut, or why there is none.
pub(crate) type CutReply = std::sync::mpsc::Sender<Result<redb::ReadTransaction, String>>;

#[derive(Debug)]
pub(crate) enum CheckpointError {
    /// The log cannot be trusted; nothing was applied.
    Corrupt(Finding),
    /// redb or the file system failed; trying again may work.
    Store(String),
}

impl std::fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckpointError::Corrupt(finding) => finding.fmt(f),
            CheckpointError::Store(why) => f.write_str(why),
        }
    }
}

fn store(e: impl std::fmt::Display) -> CheckpointError {
    CheckpointError::Store(e.to_string())
}

/// How far the log is applied to redb: the last segment and commit.
pub(crate) fn checkpointed(db: &Database) -> Result<(u64, u64), String> {
    let txn = db.begin_read().map_err(|e| e.to_string())?;
    let meta = txn.open_table(codec::META).map_err(|e| e.to_string())?;
    let get = |name| -> Result<u64, String> {
        Ok(meta
            .get(name)
            .map_err(|e| e.to_string())?
            .map_or(0, |v| v.value()))
    };
    Ok((get(codec::LOG_SEGMENT)?, get(codec::LOG_FRAME)?))
}

/// Applies `segments`, in order, in one transaction. Returns the log's
/// position after them and the last segment applied.
pub(crate) fn apply(
    db: &Database,
    segments: &[Finished],
) -> Result<(Position, u64), CheckpointError> {
    let txn = db.begin_write().map_err(store)?;
    let outcome = {
        let mut tables = Tables {
            locks: txn.open_table(codec::LOCKS).map_err(store)?,
            leases: txn.open_table(codec::LEASES).map_err(store)?,
            shares: txn.open_table(codec::SHARES).map_err(store)?,
            meta: txn.open_table(codec::META).map_err(store)?,
        };
        let get = |meta: &redb::Table<&str, u64>, name| -> Result<u64, CheckpointError> {
            Ok(meta.get(name).map_err(store)?.map_or(0, |v| v.value()))
        };
        let mut segment = get(&tables.meta, codec::LOG_SEGMENT)?;
        let mut position = Position::after(get(&tables.meta, codec::LOG_FRAME)?);
        for finished in segments {
            if finished.seq <= segment {
                continue;
            }
            if finished.seq != segment + 1 {
                let dir = finished.path.parent().unwrap_or(Path::new(""));
                return Err(CheckpointError::Corrupt(Finding::new(
                    crate::log::segment_path(dir, segment + 1),
                    Damage::Sequence,
                    format!(
                        "this log segment is missing: the store holds the log up to segment \
                         {segment}, and the next one in {} is {}",
                        dir.display(),
                        finished.seq
                    ),
                )));
            }
            let data = std::fs::read(&finished.path)
                .map_err(|e| store(format!("reading {}: {e}", finished.path.display())))?;
            let scanned = scan(
                &finished.path,
                &data,
                finished.seq,
                finished.end,
                position,
                &mut |ops| {
                    ops.iter()
                        .try_for_each(|op| tables.apply(op))
                        .map_err(|e| e.to_string())
                },
            )
            .map_err(|e| match e {
                ScanError::Damaged(finding) => CheckpointError::Corrupt(finding),
                ScanError::Visit(why) => store(why),
            })?;
            if let Tail::Torn { offset } = scanned.tail {
                tracing::warn!(
                    segment = %finished.path.display(),
                    offset,
                    "dropped the torn commit at the end of the log: its sync never completed, so it was never acknowledged"
                );
            }
            position = scanned.position;
            segment = finished.seq;
        }
        tables
            .meta
            .insert(codec::LOG_SEGMENT, segment)
            .map_err(store)?;
        tables
            .meta
            .insert(codec::LOG_FRAME, position.last_whole)
            .map_err(store)?;
        (position, segment)
    };
    txn.commit().map_err(store)?;
    Ok(outcome)
}

/// Deletes segments redb holds.
pub(crate) fn delete(segments: &[Finished]) {
    for finished in segments {
        if let Err(e) = std::fs::remove_file(&finished.path) {
            tracing::warn!(segment = %finished.path.display(), error = %e, "cannot delete a checkpointed log segment; the next open deletes it");
        }
    }
}

/// The checkpoint thread: applies the segments the writer finishes, until
/// the writer is gone and every segment sent is applied (or failed once
/// after that: the next open applies it). Answers each snapshot's cut once
/// the segments before it are applied.
pub(crate) fn run(
    path: &Path,
    db: Database,
    inbox: Receiver<ToCheckpoint>,
    stats: &WriterStats,
    enabled: bool,
) {
    let mut thread = Checkpointer {
        path,
        db: Some(db),
        pending: Vec::new(),
        cuts: Vec::new(),
        broken: None,
        stats,
        enabled,
    };
    loop {
        if thread.idle() {
            match inbox.recv() {
                Ok(next) => thread.take(next),
                Err(_) => return,
            }
        }
        inbox.try_iter().for_each(|next| thread.take(next));
        thread.work();
        if thread.idle() {
            continue;
        }
        // A checkpoint failed: try again after a while, or with more.
        match inbox.recv_timeout(RETRY) {
            Ok(next) => thread.take(next),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                thread.last_try();
                return;
            }
        }
    }
}

/// The checkpoint thread's state.
struct Checkpointer<'a> {
    path: &'a Path,
    /// None after a failed commit: redb refuses all work until reopened.
    db: Option<Database>,
    pending: Vec<Finished>,
    cuts: Vec<CutReply>,
    /// Why the log cannot be checkpointed: it stays as it is, for the next
    /// open to report.
    broken: Option<String>,
    stats: &'a WriterStats,
    enabled: bool,
}

impl Checkpointer<'_> {
    fn idle(&self) -> bool {
        self.pending.is_empty() && self.cuts.is_empty()
    }

    fn take(&mut self, message: ToCheckpoint) {
        match message {
            ToCheckpoint::Segment(finished) => self.pending.push(finished),
            ToCheckpoint::Cut(reply) => self.cuts.push(reply),
        }
    }

    /// Applies the pending segments, then answers the cuts; on a failure
    /// that may pass, leaves both pending.
    fn work(&mut self) {
        if !self.enabled {
            self.pending.clear();
            self.fail_cuts("this store does not checkpoint its log");
            return;
        }
        if let Some(why) = self.broken.clone() {
            self.pending.clear();
            self.fail_cuts(&why);
            return;
        }
        if !self.pending.is_empty() && !self.checkpoint() {
            return;
        }
        if self.cuts.is_empty() || !self.open() {
            return;
        }
        let cuts = std::mem::take(&mut self.cuts);
        if let Some(db) = &self.db {
            for cut in cuts {
                let _ = cut.send(db.begin_read().map_err(|e| e.to_string()));
            }
        }
    }

    fn fail_cuts(&mut self, why: &str) {
        for cut in self.cuts.drain(..) {
            let _ = cut.send(Err(why.to_string()));
        }
    }

    /// Whether the database is open, reopened if a failed commit closed it.
    fn open(&mut self) -> bool {
        if self.db.is_none() {
            match crate::create_database(self.path) {
                Ok(reopened) => self.db = Some(reopened),
                Err(e) => {
                    tracing::error!(path = %self.path.display(), error = %e, "reopening the lock store for a checkpoint failed")
                }
            }
        }
        self.db.is_some()
    }

    /// Applies the pending segments; whether it did.
    fn checkpoint(&mut self) -> bool {
        self.open();
        let outcome = match &self.db {
            Some(open) => apply(open, &self.pending),
            None => Err(store("the store is not open")),
        };
        match outcome {
            Ok(_) => {
                self.stats.checkpoints.fetch_add(1, Ordering::Relaxed);
                delete(&self.pending);
                self.pending.clear();
                true
            }
            Err(CheckpointError::Corrupt(finding)) => {
                tracing::error!(path = %self.path.display(), error = %finding, "the log cannot be checkpointed; it is kept, and the next open reports it");
                let why = format!("the log cannot be checkpointed: {finding}");
                self.pending.clear();
                self.fail_cuts(&why);
                self.broken = Some(why);
                false
            }
            Err(CheckpointError::Store(why)) => {
                tracing::warn!(path = %self.path.display(), error = %why, "checkpoint failed; the log keeps the ops and it is retried");
                self.stats
                    .failed_checkpoints
                    .fetch_add(1, Ordering::Relaxed);
                self.db = None;
                false
            }
        }
    }

    /// Closing: one last try, then the next open applies the rest.
    fn last_try(&mut self) {
        if self.broken.is_some() || self.pending.is_empty() {
            return;
        }
        self.open();
        if let Some(open) = &self.db {
            if apply(open, &self.pending).is_ok() {
                delete(&self.pending);
            }
        }
    }
}

struct Tables<'txn> {
    locks: redb::Table<'txn, &'static [u8], &'static [u8]>,
    leases: redb::Table<'txn, &'static [u8], &'static [u8]>,
    shares: redb::Table<'txn, &'static [u8], &'static [u8]>,
    meta: redb::Table<'txn, &'static str, u64>,
}

impl Tables<'_> {
    fn apply(&mut self, op: &LogOp<'_>) -> Result<(), redb::Error> {
        match *op {
            LogOp::Put { key, value } => {
                self.locks.insert(key, value)?;
            }
            LogOp::Delete { key } => {
                self.locks.remove(key)?;
            }
            LogOp::PutLease { key, value } => {
                self.leases.insert(key, value)?;
            }
            LogOp::DeleteLease { key } => {
                self.leases.remove(key)?;
            }
            LogOp::PutShare { key, value } => {
                self.shares.insert(key, value)?;
            }
            LogOp::DeleteShare { key } => {
                self.shares.remove(key)?;
            }
            LogOp::ReserveTokens { up_to } => {
                let current = self
                    .meta
                    .get(codec::TOKENS_RESERVED)?
                    .map_or(0, |v| v.value());
                if up_to > current {
                    self.meta.insert(codec::TOKENS_RESERVED, up_to)?;
                }
            }
        }
        Ok(())
    }
}
