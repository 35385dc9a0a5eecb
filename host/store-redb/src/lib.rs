//! The embedded, persistent lock store of lockd.
//!
//! Lock semantics live in [`lockd_core::Engine`]; this crate gives it a
//! [`Journal`]: an append-only log checkpointed into
//! [redb](https://www.redb.org), as Redis's AOF and etcd's WAL with bbolt:
//!
//! - **Durable before acknowledged.** Every persistent grant, extend and
//!   unlock is written to the log and `fdatasync`ed before the engine
//!   answers the caller.
//! - **Group commit.** One writer thread owns the log. It takes every op
//!   queued while the previous commit was syncing and writes them together,
//!   one sequential write into a preallocated segment and one
//!   `fdatasync`, so N concurrent callers share one sync. Nothing blocks
//!   the async executor: callers wait on a channel.
//! - **Checkpoints.** Finished segments are applied to redb in the
//!   background and deleted, so the log stays small and commits never wait
//!   for redb.
//! - **Recovery.** Opening the store applies what is left of the log to
//!   redb, then returns every unexpired persistent lock, every unexpired
//!   holder of a name held shared or of a semaphore, and the token
//!   reservation, so tokens resume above anything issued before. A torn
//!   last commit (its sync never completed) is dropped; a damaged one that
//!   later commits follow, or a file that is not a valid store, is an error
//!   naming the file; it is never reset.
//!
//! The log lives beside the store file, in a directory named after it with
//! `-wal` ([`log_dir`]). After a clean close it is empty: the store file
//! alone holds the state.
//!
//! - **Format versions.** The store file records its format in its `meta`
//!   table ([`STORE_FORMAT`]), each log segment in its header, and each
//!   snapshot in its header. A file of a newer format is refused, naming
//!   both versions; a store written before versions is format 1, and its
//!   next open records the version in it (nothing else changes).
//! - **Check, snapshot, restore.** [`check()`] verifies a stopped store
//!   without changing it; [`snapshot::save`] writes a consistent snapshot of
//!   a serving [`Store`], and [`snapshot::restore`] builds a store from one,
//!   offline, with tokens resuming above any the old store may have issued.
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> Result<(), lockd_redb::OpenError> {
//! let engine = lockd_redb::open(".lockd/locks.redb")?;
//! # drop(engine); Ok(()) }
//! ```
#![deny(missing_docs)]

pub mod check;
mod checkpoint;
mod codec;
mod damage;
mod log;
mod recovery;
mod shares;
pub mod snapshot;
mod stats;
mod writer;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use lockd_core::{
    Clock, Engine, EngineOptions, Journal, JournalOp, Recovered, SystemClock, Ticket,
};
use redb::{Database, DatabaseError, ReadableDatabase, ReadableTable, ReadableTableMetadata};

use crate::checkpoint::{CheckpointError, CutReply};
use crate::log::spares::Spares;
use crate::log::LogConfig;
use crate::recovery::{decode_lock_row, read_meta_and_leases, read_state, refuse, Counted};
pub use check::{check, CheckError, CheckReport};
pub use codec::STORE_FORMAT;
pub use damage::{Damage, Finding};
pub use stats::WriterStats;

/// The log directory of the store file at `store`: beside it, its name with
/// `-wal` (`locks.redb-wal` for `locks.redb`). Moving or copying a store
/// while it is closed means the file and this directory together.
pub fn log_dir(store: impl AsRef<Path>) -> PathBuf {
    log::dir_of(store.as_ref())
}

/// Why a store could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The directory or file could not be created or read.
    #[error("cannot open lock store {path}: {source}")]
    Io {
        /// The store file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Another process (or handle) has the store open.
    #[error("lock store {path} is in use by another lockd process; stop it, or choose another --store path")]
    InUse {
        /// The store file.
        path: PathBuf,
    },
    /// The file is not a readable lock store, or its log is damaged; what
    /// is wrong is worded as [`check()`] words it. Its records and log were
    /// left as they were (redb may have set a flag in its header).
    #[error(
        "lock store {path} is corrupted or not a lockd store ({finding}). Its records were left \
         as they were: move it and its -wal directory aside to start empty (persistent locks in \
         it are then lost), or restore them from a backup (lockd store check lists everything wrong)"
    )]
    Corrupt {
        /// The store file.
        path: PathBuf,
        /// What is wrong, and in which file.
        finding: Finding,
    },
    /// The store file or a log segment was written by a newer lockd, in a
    /// format this one does not read. It was left untouched.
    #[error(
        "{path}: it has format version {found}; this lockd reads up to {supported}: open it with \
         the lockd that wrote it, or a newer one. It was left untouched"
    )]
    NewerFormat {
        /// The file of the newer format: the store file or a log segment.
        path: PathBuf,
        /// Its format version.
        found: u32,
        /// The newest this lockd reads.
        supported: u32,
    },
}

/// Opens (or creates) the store at `path` with the system clock.
///
/// # Panics
/// Outside a tokio runtime (the engine spawns its purge task).
pub fn open(path: impl AsRef<Path>) -> Result<Arc<Engine>, OpenError> {
    Store::open(path).map(|store| store.engine)
}

/// Opens (or creates) the store at `path` with an explicit clock and options.
///
/// Recovery streams: each lock record goes from redb straight into the
/// engine's table, so a million recovered locks are never held twice
/// (benchmark B5, docs/benchmarks.md).
pub fn open_with(
    path: impl AsRef<Path>,
    clock: Arc<dyn Clock>,
    options: EngineOptions,
) -> Result<Arc<Engine>, OpenError> {
    Store::open_with(path, clock, options).map(|store| store.engine)
}

/// A store opened for serving: its engine, and the handle
/// [`snapshot::save`] takes a snapshot through. Cloning it is cheap; the
/// store closes when the engine and every clone are dropped.
#[derive(Clone)]
pub struct Store {
    engine: Arc<Engine>,
    journal: Arc<RedbJournal>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.journal.path)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (or creates) the store at `path` with the system clock, as
    /// [`open`] does, keeping the handle for snapshots.
    ///
    /// # Panics
    /// Outside a tokio runtime (the engine spawns its purge task).
    pub fn open(path: impl AsRef<Path>) -> Result<Store, OpenError> {
        Store::open_with(path, Arc::new(SystemClock), EngineOptions::default())
    }

    /// Opens (or creates) the store at `path` with an explicit clock and
    /// options, as [`open_with`] does.
    pub fn open_with(
        path: impl AsRef<Path>,
        clock: Arc<dyn Clock>,
        options: EngineOptions,
    ) -> Result<Store, OpenError> {
        open_configured(path.as_ref(), clock, options, LogConfig::default())
    }

    /// The engine serving the store's locks.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        &self.journal.path
    }

    /// Commit counters, for metrics and benchmarks.
    pub fn stats(&self) -> Arc<WriterStats> {
        self.journal.stats()
    }

    pub(crate) fn journal(&self) -> &RedbJournal {
        &self.journal
    }
}

fn open_configured(
    path: &Path,
    clock: Arc<dyn Clock>,
    options: EngineOptions,
    config: LogConfig,
) -> Result<Store, OpenError> {
    let (journal, prepared) = RedbJournal::prepare(path, config)?;
    let db = &prepared.db;
    let journal = Arc::new(journal);
    let corrupt = |bad: recovery::Bad| refuse(&journal.path, bad.at(&journal.path));
    let mut recovered = read_meta_and_leases(db).map_err(corrupt)?;
    shares::recover(db, &mut recovered, clock.as_ref(), journal.as_ref()).map_err(corrupt)?;
    let engine = {
        let txn = db.begin_read().map_err(|e| corrupt(e.into()))?;
        let table = txn
            .open_table(codec::LOCKS)
            .map_err(|e| corrupt(e.into()))?;
        let count = table.len().map_err(|e| corrupt(e.into()))?;
        let rows = table.iter().map_err(|e| corrupt(e.into()))?;
        let rows = Counted {
            rows,
            left: usize::try_from(count).unwrap_or(usize::MAX),
        };
        // Ops the engine submits meanwhile (deletes of expired records) wait
        // in the queue until the writer starts, below; on an error they are
        // dropped with the journal, and the file is left untouched.
        Engine::resume(
            journal.clone(),
            recovered,
            rows.map(decode_lock_row),
            clock,
            options,
        )
        .map_err(corrupt)?
    };
    journal.start(prepared)?;
    Ok(Store { engine, journal })
}

/// The redb journal: a writer thread fed through a channel, a thread that
/// makes log segments ahead of need, and one that checkpoints them.
pub struct RedbJournal {
    path: PathBuf,
    config: LogConfig,
    queue: Mutex<Option<mpsc::Sender<writer::Pending>>>,
    spares: Arc<Spares>,
    /// The writer's, then the others.
    threads: Mutex<Vec<JoinHandle<()>>>,
    stats: Arc<WriterStats>,
}

/// An opened store, before its threads start.
struct Prepared {
    db: Database,
    queue: mpsc::Receiver<writer::Pending>,
    next_frame: u64,
}

impl std::fmt::Debug for RedbJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbJournal")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl RedbJournal {
    /// Opens the file, reads what to resume from, and starts the writer.
    /// Share records are those live by the system clock (lock records are
    /// all returned: the engine drops the expired ones).
    pub fn open(path: impl AsRef<Path>) -> Result<(RedbJournal, Recovered), OpenError> {
        RedbJournal::open_configured(path.as_ref(), LogConfig::default())
    }

    fn open_configured(
        path: &Path,
        config: LogConfig,
    ) -> Result<(RedbJournal, Recovered), OpenError> {
        let (journal, prepared) = RedbJournal::prepare(path, config)?;
        let corrupt = |bad: recovery::Bad| refuse(&journal.path, bad.at(&journal.path));
        let mut recovered = read_state(&prepared.db).map_err(corrupt)?;
        shares::recover(&prepared.db, &mut recovered, &SystemClock, &journal).map_err(corrupt)?;
        journal.start(prepared)?;
        Ok((journal, recovered))
    }

    /// Opens the file, refuses a newer format, creates its tables if new,
    /// and applies what is left of the log. The journal accepts ops at
    /// once; they are written once [`RedbJournal::start`] runs.
    fn prepare(path: &Path, config: LogConfig) -> Result<(RedbJournal, Prepared), OpenError> {
        let path = path.to_path_buf();
        let io_error = |source| OpenError::Io {
            path: path.clone(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io_error)?;
        }
        let mut db = recovery::open_database(&path, &path, true)?;
        recovery::check_format(&db, &path)?;
        if !recovery::verify_integrity(&mut db, &path)? {
            tracing::warn!(path = %path.display(), "redb repaired the store file's own bookkeeping at open (lockd store check lists what it found)");
        }
        recovery::init_tables(&db).map_err(|bad| refuse(&path, bad.at(&path)))?;
        let dir = log::dir_of(&path);
        std::fs::create_dir_all(&dir).map_err(io_error)?;
        let (next_segment, next_frame) =
            recovery::recover_log(&db, &dir, true).map_err(|e| match e {
                CheckpointError::Corrupt(finding) => refuse(&path, finding),
                CheckpointError::Store(why) => io_error(std::io::Error::other(format!(
                    "applying its log {}: {why}",
                    dir.display()
                ))),
            })?;
        let (tx, rx) = mpsc::channel();
        let journal = RedbJournal {
            spares: Arc::new(Spares::new(dir, next_segment, config.clone())),
            path,
            config,
            queue: Mutex::new(Some(tx)),
            threads: Mutex::new(Vec::new()),
            stats: Arc::new(WriterStats::default()),
        };
        Ok((
            journal,
            Prepared {
                db,
                queue: rx,
                next_frame,
            },
        ))
    }

    /// Starts the threads: the writer on the queue, the checkpoints on the
    /// database.
    fn start(&self, prepared: Prepared) -> Result<(), OpenError> {
        let (finished, checkpoints) = mpsc::channel();
        let log = writer::Log {
            io: self.config.io.clone(),
            spares: self.spares.clone(),
            finished,
            next_frame: prepared.next_frame,
        };
        let mut threads = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
        let spawn = |name: &str, work: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.to_string())
                .spawn(work)
                .map_err(|source| OpenError::Io {
                    path: self.path.clone(),
                    source,
                })
        };
        let (stats, path, queue) = (self.stats.clone(), self.path.clone(), prepared.queue);
        threads.push(spawn(
            "lockd-redb-writer",
            Box::new(move || writer::run(&path, log, queue, &stats)),
        )?);
        let spares = self.spares.clone();
        threads.push(spawn(
            "lockd-redb-segments",
            Box::new(move || spares.run()),
        )?);
        let (stats, path, db) = (self.stats.clone(), self.path.clone(), prepared.db);
        let enabled = self.config.checkpoints;
        threads.push(spawn(
            "lockd-redb-checkpoint",
            Box::new(move || checkpoint::run(&path, db, checkpoints, &stats, enabled)),
        )?);
        Ok(())
    }

    /// Commit counters, for metrics and benchmarks.
    pub fn stats(&self) -> Arc<WriterStats> {
        self.stats.clone()
    }

    /// A snapshot's cut: once every op queued before it is durable, the
    /// writer moves on to a new segment and the checkpoint thread applies
    /// the log up to there, then answers a read transaction of redb that
    /// holds every one of those ops (and perhaps later ones: a consistent
    /// state all the same, the log being applied in commits). Blocks until
    /// then. Lock traffic goes on meanwhile: the writer only hands over its
    /// segment.
    pub(crate) fn cut(&self) -> Result<redb::ReadTransaction, String> {
        let (reply, answer): (CutReply, _) = mpsc::channel();
        let (done, ticket) = Ticket::pending();
        drop(ticket);
        {
            let queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(queue) = queue.as_ref() else {
                return Err("the store is closing".to_string());
            };
            let mut pending = writer::Pending::new(None, done);
            pending.cut = Some(reply);
            queue
                .send(pending)
                .map_err(|_| "the store's writer stopped".to_string())?;
        }
        match answer.recv_timeout(CUT_TIMEOUT) {
            Ok(read) => read,
            Err(mpsc::RecvTimeoutError::Timeout) => Err(format!(
                "its log could not be checkpointed for {} s (a full disk? the server's log says \
                 why); lock traffic is not affected",
                CUT_TIMEOUT.as_secs()
            )),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Err("the store's writer stopped before the cut".to_string())
            }
        }
    }
}

/// The longest a snapshot waits for its cut: the checkpoint of the log
/// before it, which a full disk can hold up (the checkpoint retries every
/// second meanwhile).
const CUT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// redb's page cache. The store is a journal: lock state is served from
/// memory and redb is read only at start, so its cache needs to hold just
/// the pages a commit touches. redb's default (1 GiB) would keep the whole
/// file read during recovery resident for as long as the process lives
/// (benchmark B5, docs/benchmarks.md).
const CACHE_BYTES: usize = 32 << 20;

/// Opens (or creates) the database file with lockd's settings.
pub(crate) fn create_database(path: &Path) -> Result<Database, DatabaseError> {
    Database::builder().set_cache_size(CACHE_BYTES).create(path)
}

impl Journal for RedbJournal {
    fn submit(&self, op: JournalOp) -> Ticket {
        let (done, ticket) = Ticket::pending();
        if let Some(why) = log::format::unstorable(&op) {
            tracing::error!(error = %why, "refused a journal op that the store cannot keep as it is");
            done.complete(Err(format!("the store cannot keep this change: {why}")));
            return ticket;
        }
        let queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(queue) = queue.as_ref() {
            self.stats.queued.fetch_add(1, Ordering::Relaxed);
            // If the writer is gone, `done` is dropped with the message and
            // the ticket reports the store unavailable.
            let _ = queue.send(writer::Pending::new(Some(op), done));
        }
        ticket
    }

    fn flushed(&self) -> Ticket {
        let queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        // Submissions count under this mutex, and the writer counts an op
        // durable only with every op queued before it: when the counts meet,
        // nothing submitted so far is waiting.
        if self.stats.durable.load(Ordering::Acquire) >= self.stats.queued.load(Ordering::Relaxed) {
            return Ticket::ready();
        }
        let (done, ticket) = Ticket::pending();
        if let Some(queue) = queue.as_ref() {
            let _ = queue.send(writer::Pending::new(None, done));
        }
        ticket
    }

    fn submitted(&self) -> u64 {
        self.stats.queued.load(Ordering::Acquire)
    }

    fn flushed_through(&self, position: u64) -> Ticket {
        // The writer counts an op durable only with every op queued before
        // it: once `durable` reaches `position`, the first `position` ops
        // are on disk.
        if self.stats.durable.load(Ordering::Acquire) >= position {
            return Ticket::ready();
        }
        // A barrier resolves once everything queued before it is durable:
        // more than asked, and as soon as the commit in flight (or the one
        // after it) lands.
        let (done, ticket) = Ticket::pending();
        let queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(queue) = queue.as_ref() {
            let _ = queue.send(writer::Pending::new(None, done));
        }
        ticket
    }

    fn commit_stats(&self) -> (u64, u64, u64) {
        (
            self.stats.commits.load(Ordering::Relaxed),
            self.stats.committed_ops.load(Ordering::Relaxed),
            self.stats.failed_commits.load(Ordering::Relaxed),
        )
    }
}

impl Drop for RedbJournal {
    fn drop(&mut self) {
        // Closing the queue lets the writer finish what is queued, hand its
        // segment to the checkpoint thread and exit; then the other threads
        // stop, the checkpoint thread once it has applied the log. Joining
        // them releases the file for the next open.
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let threads =
            std::mem::take(&mut *self.threads.lock().unwrap_or_else(PoisonError::into_inner));
        let mut threads = threads.into_iter();
        if let Some(writer) = threads.next() {
            let _ = writer.join();
        }
        self.spares.stop();
        for thread in threads {
            let _ = thread.join();
        }
    }
}

/// The crate README's example, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
