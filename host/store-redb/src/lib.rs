//! The embedded, persistent lock store of lockd.
//!
//! Lock semantics live in [`lockd_core::Engine`]; this crate gives it a
//! [`Journal`] on [redb](https://www.redb.org):
//!
//! - **Durable before acknowledged.** Every persistent grant, extend and
//!   unlock is committed with `Durability::Immediate` (fsync) before the
//!   engine answers the caller.
//! - **Group commit.** One writer thread owns the database. It takes every op
//!   queued while the previous commit was syncing and commits them together,
//!   so N concurrent callers share one fsync. Nothing blocks the async
//!   executor: callers wait on a channel.
//! - **Recovery.** Opening the file returns every unexpired persistent lock
//!   and the token reservation, so tokens resume above anything issued before.
//!   A file that is not a valid store is an error naming the file; it is
//!   never reset.
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> Result<(), lockd_redb::OpenError> {
//! let engine = lockd_redb::open(".lockd/locks.redb")?;
//! # drop(engine); Ok(()) }
//! ```
#![deny(missing_docs)]

mod codec;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use lockd_core::{
    Clock, Engine, EngineOptions, Journal, JournalOp, Key, Record, Recovered, SystemClock, Ticket,
};
use redb::{
    AccessGuard, Database, DatabaseError, ReadableDatabase, ReadableTable, ReadableTableMetadata,
    StorageError,
};

pub use writer::WriterStats;

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
    /// The file is not a readable lock store. It was left untouched.
    #[error(
        "lock store {path} is corrupted or not a lockd store ({detail}). It was left untouched: \
         move it aside to start empty (persistent locks in it are then lost), or restore it from a backup"
    )]
    Corrupt {
        /// The store file.
        path: PathBuf,
        /// What was wrong.
        detail: String,
    },
}

/// Opens (or creates) the store at `path` with the system clock.
///
/// # Panics
/// Outside a tokio runtime (the engine spawns its purge task).
pub fn open(path: impl AsRef<Path>) -> Result<Arc<Engine>, OpenError> {
    open_with(path, Arc::new(SystemClock), EngineOptions::default())
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
    let (journal, db, queue) = RedbJournal::prepare(path.as_ref())?;
    let journal = Arc::new(journal);
    let corrupt = |detail: String| OpenError::Corrupt {
        path: journal.path.clone(),
        detail,
    };
    let recovered = read_meta_and_leases(&db).map_err(corrupt)?;
    let engine = {
        let txn = db.begin_read().map_err(|e| corrupt(e.to_string()))?;
        let table = txn
            .open_table(codec::LOCKS)
            .map_err(|e| corrupt(e.to_string()))?;
        let count = table.len().map_err(|e| corrupt(e.to_string()))?;
        let rows = table.iter().map_err(|e| corrupt(e.to_string()))?;
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
    journal.start(db, queue)?;
    Ok(engine)
}

/// The rows of a table, with their count as the iterator's size hint, so
/// the engine can size itself before it reads them.
struct Counted<I> {
    rows: I,
    left: usize,
}

impl<I: Iterator> Iterator for Counted<I> {
    type Item = I::Item;

    fn next(&mut self) -> Option<I::Item> {
        let row = self.rows.next()?;
        self.left = self.left.saturating_sub(1);
        Some(row)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, None)
    }
}

/// The redb journal: a writer thread fed through a channel.
pub struct RedbJournal {
    path: PathBuf,
    queue: Mutex<Option<mpsc::Sender<writer::Pending>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    stats: Arc<WriterStats>,
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
    pub fn open(path: impl AsRef<Path>) -> Result<(RedbJournal, Recovered), OpenError> {
        let (journal, db, queue) = RedbJournal::prepare(path.as_ref())?;
        let recovered = read_state(&db).map_err(|detail| OpenError::Corrupt {
            path: journal.path.clone(),
            detail,
        })?;
        journal.start(db, queue)?;
        Ok((journal, recovered))
    }

    /// Opens the file and creates its tables if new. The journal accepts
    /// ops at once; they are written once [`RedbJournal::start`] runs.
    fn prepare(
        path: &Path,
    ) -> Result<(RedbJournal, Database, mpsc::Receiver<writer::Pending>), OpenError> {
        let path = path.to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| OpenError::Io {
                path: path.clone(),
                source,
            })?;
        }
        let db = create_database(&path).map_err(|e| classify(&path, e))?;
        // Create the tables on first open, so reads never miss them.
        let init = || -> Result<(), redb::Error> {
            let txn = db.begin_write()?;
            txn.open_table(codec::LOCKS)?;
            txn.open_table(codec::LEASES)?;
            txn.open_table(codec::META)?;
            txn.commit()?;
            Ok(())
        };
        init().map_err(|e| OpenError::Corrupt {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        let (tx, rx) = mpsc::channel();
        let journal = RedbJournal {
            path,
            queue: Mutex::new(Some(tx)),
            thread: Mutex::new(None),
            stats: Arc::new(WriterStats::default()),
        };
        Ok((journal, db, rx))
    }

    /// Starts the writer thread on `db`, draining `queue`.
    fn start(&self, db: Database, queue: mpsc::Receiver<writer::Pending>) -> Result<(), OpenError> {
        let stats = self.stats.clone();
        let path = self.path.clone();
        let thread = std::thread::Builder::new()
            .name("lockd-redb-writer".to_string())
            .spawn(move || writer::run(&path, db, queue, &stats))
            .map_err(|source| OpenError::Io {
                path: self.path.clone(),
                source,
            })?;
        *self.thread.lock().unwrap_or_else(PoisonError::into_inner) = Some(thread);
        Ok(())
    }

    /// Commit counters, for metrics and benchmarks.
    pub fn stats(&self) -> Arc<WriterStats> {
        self.stats.clone()
    }
}

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

fn classify(path: &Path, e: DatabaseError) -> OpenError {
    match e {
        DatabaseError::DatabaseAlreadyOpen => OpenError::InUse {
            path: path.to_path_buf(),
        },
        // redb reports a file that is not (or no longer) a database as an
        // I/O error of kind InvalidData: that is corruption, not the disk.
        DatabaseError::Storage(redb::StorageError::Io(source))
            if source.kind() == std::io::ErrorKind::InvalidData =>
        {
            OpenError::Corrupt {
                path: path.to_path_buf(),
                detail: source.to_string(),
            }
        }
        DatabaseError::Storage(redb::StorageError::Io(source)) => OpenError::Io {
            path: path.to_path_buf(),
            source,
        },
        other => OpenError::Corrupt {
            path: path.to_path_buf(),
            detail: other.to_string(),
        },
    }
}

/// Everything to resume from, the lock records included (materialised:
/// [`RedbJournal::open`]'s contract).
fn read_state(db: &Database) -> Result<Recovered, String> {
    let mut recovered = read_meta_and_leases(db)?;
    let txn = db.begin_read().map_err(|e| e.to_string())?;
    let table = txn.open_table(codec::LOCKS).map_err(|e| e.to_string())?;
    // Sized exactly: with a million locks, doubling growth would hold up to
    // twice their size at the peak of a restart.
    let rows = table.len().map_err(|e| e.to_string())?;
    recovered.locks = Vec::with_capacity(usize::try_from(rows).unwrap_or(0));
    for row in table.iter().map_err(|e| e.to_string())? {
        recovered.locks.push(decode_lock_row(row)?);
    }
    Ok(recovered)
}

/// The token reservation and the leases; no locks.
fn read_meta_and_leases(db: &Database) -> Result<Recovered, String> {
    let txn = db.begin_read().map_err(|e| e.to_string())?;
    let meta = txn.open_table(codec::META).map_err(|e| e.to_string())?;
    let reserved = meta
        .get(codec::TOKENS_RESERVED)
        .map_err(|e| e.to_string())?
        .map_or(0, |v| v.value());
    let table = txn.open_table(codec::LEASES).map_err(|e| e.to_string())?;
    let mut leases = Vec::new();
    for row in table.iter().map_err(|e| e.to_string())? {
        let (k, v) = row.map_err(|e| e.to_string())?;
        let lease = codec::decode_key(k.value()).ok_or("a lease key is malformed")?;
        let record = codec::decode_lease(v.value())
            .ok_or_else(|| format!("the record of lease {lease:?} is malformed"))?;
        leases.push((lease, record));
    }
    Ok(Recovered {
        locks: Vec::new(),
        leases,
        next_token: reserved.saturating_add(1),
        reserved_up_to: reserved,
    })
}

type LockRow<'a> = Result<
    (
        AccessGuard<'a, &'static [u8]>,
        AccessGuard<'a, &'static [u8]>,
    ),
    StorageError,
>;

/// One row of the `locks` table, decoded.
fn decode_lock_row(row: LockRow<'_>) -> Result<(Key, Record), String> {
    let (k, v) = row.map_err(|e| e.to_string())?;
    let key = codec::decode_key(k.value()).ok_or("a lock key is malformed")?;
    let record = codec::decode_record(v.value())
        .ok_or_else(|| format!("the record of lock {key:?} is malformed"))?;
    Ok((key, record))
}

impl Journal for RedbJournal {
    fn submit(&self, op: JournalOp) -> Ticket {
        let (done, ticket) = Ticket::pending();
        let queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(queue) = queue.as_ref() {
            self.stats.queued.fetch_add(1, Ordering::Relaxed);
            // If the writer is gone, `done` is dropped with the message and
            // the ticket reports the store unavailable.
            let _ = queue.send(writer::Pending { op: Some(op), done });
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
            let _ = queue.send(writer::Pending { op: None, done });
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
        // Closing the queue lets the writer finish what is queued and exit;
        // joining it releases the file for the next open.
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = thread.join();
        }
    }
}
