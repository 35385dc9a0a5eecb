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
use crate::log::format::LogOp;
use crate::log::scan::{scan, Position, Tail};
use crate::stats::WriterStats;

/// After a failed checkpoint (a full disk), how long before trying again.
const RETRY: Duration = Duration::from_secs(1);

/// A segment the writer is done with: everything before `end` is durable.
pub(crate) struct Finished {
    pub(crate) seq: u64,
    pub(crate) path: PathBuf,
    pub(crate) end: usize,
}

#[derive(Debug)]
pub(crate) enum CheckpointError {
    /// The log cannot be trusted; nothing was applied.
    Corrupt(String),
    /// redb or the file system failed; trying again may work.
    Store(String),
}

impl std::fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckpointError::Corrupt(why) | CheckpointError::Store(why) => f.write_str(why),
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
                return Err(CheckpointError::Corrupt(format!(
                    "log segment {} is missing from {}: the store holds the log up to segment \
                     {segment}, and the next one there is {}",
                    segment + 1,
                    finished.path.parent().unwrap_or(Path::new("")).display(),
                    finished.seq
                )));
            }
            let data = std::fs::read(&finished.path)
                .map_err(|e| store(format!("reading {}: {e}", finished.path.display())))?;
            let mut failed = None;
            let scanned = scan(
                &finished.path,
                &data,
                finished.seq,
                finished.end,
                position,
                &mut |ops| {
                    for op in ops {
                        if let Err(e) = tables.apply(op) {
                            failed = Some(e);
                            return Err(String::new());
                        }
                    }
                    Ok(())
                },
            );
            if let Some(e) = failed {
                return Err(store(e));
            }
            let scanned = scanned.map_err(CheckpointError::Corrupt)?;
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
/// after that: the next open applies it).
pub(crate) fn run(
    path: &Path,
    db: Database,
    finished: Receiver<Finished>,
    stats: &WriterStats,
    enabled: bool,
) {
    if !enabled {
        finished.iter().for_each(drop);
        return;
    }
    let mut db = Some(db);
    let mut pending: Vec<Finished> = Vec::new();
    let mut broken = false;
    loop {
        if pending.is_empty() {
            match finished.recv() {
                Ok(next) => pending.push(next),
                Err(_) => return,
            }
        }
        pending.extend(finished.try_iter());
        if broken {
            // A corrupt log stays as it is, for the next open to report.
            pending.clear();
            continue;
        }
        if db.is_none() {
            match crate::create_database(path) {
                Ok(reopened) => db = Some(reopened),
                Err(e) => {
                    tracing::error!(path = %path.display(), error = %e, "reopening the lock store for a checkpoint failed")
                }
            }
        }
        let outcome = match &db {
            Some(open) => apply(open, &pending),
            None => Err(store("the store is not open")),
        };
        match outcome {
            Ok(_) => {
                stats.checkpoints.fetch_add(1, Ordering::Relaxed);
                delete(&pending);
                pending.clear();
                continue;
            }
            Err(CheckpointError::Corrupt(why)) => {
                tracing::error!(path = %path.display(), error = %why, "the log cannot be checkpointed; it is kept, and the next open reports it");
                broken = true;
            }
            Err(CheckpointError::Store(why)) => {
                tracing::warn!(path = %path.display(), error = %why, "checkpoint failed; the log keeps the ops and it is retried");
                stats.failed_checkpoints.fetch_add(1, Ordering::Relaxed);
                // redb refuses all work after a failed commit until reopened.
                db = None;
            }
        }
        match finished.recv_timeout(RETRY) {
            Ok(next) => pending.push(next),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) if broken => return,
            // Closing: one last try, then the next open applies the rest.
            Err(RecvTimeoutError::Disconnected) => {
                if let Some(open) = db.take().or_else(|| crate::create_database(path).ok()) {
                    if apply(&open, &pending).is_ok() {
                        delete(&pending);
                    }
                }
                return;
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
