//! The writer thread: group commit into the log.

use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;

use lockd_core::{JournalOp, TicketSender};

use crate::checkpoint::{CutReply, Finished, ToCheckpoint};
use crate::log::format::{begin_frame, seal_frame, write_record, SEGMENT_HEADER};
use crate::log::spares::Spares;
use crate::log::{LogIo, Segment};
use crate::stats::WriterStats;

/// Upper bound on ops per commit, so one huge burst cannot delay the first
/// callers in it for long.
const MAX_BATCH: usize = 4096;

/// One message to the writer: an op to make durable, or (`op: None`) a
/// flush barrier, which resolves once everything queued before it is durable.
/// A barrier with a `cut` is a snapshot's: once everything before it is
/// durable, the writer hands its segment to the checkpoint thread, and the
/// cut after it, so the snapshot reads redb with every op before the cut.
pub(crate) struct Pending {
    pub(crate) op: Option<JournalOp>,
    pub(crate) done: TicketSender,
    pub(crate) cut: Option<CutReply>,
}

impl Pending {
    /// An op, or a barrier (`None`).
    pub(crate) fn new(op: Option<JournalOp>, done: TicketSender) -> Pending {
        Pending {
            op,
            done,
            cut: None,
        }
    }
}

/// The writer's side of the log.
pub(crate) struct Log {
    pub(crate) io: Arc<dyn LogIo>,
    pub(crate) spares: Arc<Spares>,
    /// Where finished segments (and cuts) go: the checkpoint thread.
    pub(crate) finished: Sender<ToCheckpoint>,
    /// The number of the next commit.
    pub(crate) next_frame: u64,
}

/// Takes everything queued while the previous commit synced, and writes it
/// as one frame of the log with one write and one `fdatasync`. Runs until
/// the queue is closed and drained, then hands its segment to the
/// checkpoint thread.
///
/// A failed write or sync (an I/O error; a full disk when a new segment
/// cannot be made) answers the batch `unavailable` and leaves the segment:
/// what the failed write left in it is at most a torn commit, which
/// recovery drops, and the next commit goes into a new segment.
///
/// The ops of a failed commit are not forgotten: their callers were told
/// `unavailable` (outcome unknown), but the engine's memory already shows
/// them (and the engine's own corrections, such as releasing a grant whose
/// write failed, come as later ops). They go first into the next commit,
/// under the same commit number, so the log converges to what memory
/// showed, in order, and a flush barrier resolves only once they are
/// durable.
pub(crate) fn run(path: &Path, log: Log, queue: Receiver<Pending>, stats: &WriterStats) {
    let mut writer = Writer {
        log,
        active: None,
        frame: Vec::new(),
        failing: false,
    };
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
                writer.answer(pending, &Ok(()));
            }
            continue;
        }
        stats.commits.fetch_add(1, Ordering::Relaxed);
        stats.committed_ops.fetch_add(ops, Ordering::Relaxed);
        let outcome = writer
            .commit(&carried, &batch)
            .map_err(|e| format!("lock store write failed: {e}"));
        match &outcome {
            Ok(()) => {
                stats
                    .durable
                    .fetch_add(carried.count + ops, Ordering::Release);
                carried = Carried::default();
                if std::mem::take(&mut writer.failing) {
                    stats.reopens.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(path = %path.display(), "the lock store writes again");
                }
            }
            Err(why) => {
                tracing::error!(
                    path = %path.display(),
                    ops = batch.len(),
                    error = %why,
                    "lock store commit failed; its callers get unavailable, and the next commit writes these ops first, into a new log segment"
                );
                stats.failed_commits.fetch_add(1, Ordering::Relaxed);
                writer.failing = true;
            }
        }
        for pending in batch.drain(..) {
            if let (Err(_), Some(op)) = (&outcome, &pending.op) {
                carried.push(op.clone());
            }
            writer.answer(pending, &outcome);
        }
    }
    writer.retire();
}

struct Writer {
    log: Log,
    /// The segment being written and the end of its durable commits; none
    /// after a failure or before the first commit.
    active: Option<(Segment, u64)>,
    frame: Vec<u8>,
    failing: bool,
}

impl Writer {
    fn commit(&mut self, carried: &Carried, batch: &[Pending]) -> io::Result<()> {
        if self.active.is_none() {
            self.rotate(0)?;
        }
        self.encode(carried, batch);
        let fits = |(segment, end): &(Segment, u64)| end + self.frame.len() as u64 <= segment.size;
        if !self.active.as_ref().is_some_and(fits) {
            self.rotate((SEGMENT_HEADER + self.frame.len()) as u64)?;
            // Records are checksummed with their segment's salt.
            self.encode(carried, batch);
        }
        let Some((segment, end)) = self.active.as_mut() else {
            return Err(io::Error::other("no log segment"));
        };
        let written = self
            .log
            .io
            .write_at(&segment.file, &self.frame, *end)
            .and_then(|()| self.log.io.sync(&segment.file));
        match written {
            Ok(()) => {
                *end += self.frame.len() as u64;
                self.log.next_frame += 1;
                Ok(())
            }
            Err(e) => {
                // Never write after what a failed write may have left.
                self.retire();
                Err(e)
            }
        }
    }

    fn encode(&mut self, carried: &Carried, batch: &[Pending]) {
        let salt = self.active.as_ref().map_or(0, |(segment, _)| segment.salt);
        self.frame.clear();
        let start = begin_frame(&mut self.frame);
        for op in carried
            .ops
            .iter()
            .chain(batch.iter().filter_map(|p| p.op.as_ref()))
        {
            write_record(&mut self.frame, op, salt);
        }
        seal_frame(&mut self.frame, start, self.log.next_frame, salt);
    }

    /// Moves on to the next segment, with room for `needed` bytes.
    fn rotate(&mut self, needed: u64) -> io::Result<()> {
        self.retire();
        let segment = self.log.spares.take(needed)?;
        self.active = Some((segment, SEGMENT_HEADER as u64));
        Ok(())
    }

    /// Hands the segment being written to the checkpoint thread.
    fn retire(&mut self) {
        if let Some((segment, end)) = self.active.take() {
            // If the checkpoint thread is gone, the next open applies it.
            let _ = self.log.finished.send(ToCheckpoint::Segment(Finished {
                seq: segment.seq,
                path: segment.path,
                end: end as usize,
            }));
        }
    }

    /// Tells a caller how its commit went. A snapshot's cut after a
    /// successful one hands the segment to the checkpoint thread, then the
    /// cut: the next commit goes into a new segment, made ahead.
    fn answer(&mut self, pending: Pending, outcome: &Result<(), String>) {
        if let Some(cut) = pending.cut {
            match outcome {
                Ok(()) => {
                    self.retire();
                    if let Err(unsent) = self.log.finished.send(ToCheckpoint::Cut(cut)) {
                        if let ToCheckpoint::Cut(cut) = unsent.0 {
                            let _ = cut.send(Err("the store is closing".to_string()));
                        }
                    }
                }
                Err(why) => drop(cut.send(Err(why.clone()))),
            }
        }
        pending.done.complete(outcome.clone());
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
