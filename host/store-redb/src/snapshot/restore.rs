//! Restoring a store from a snapshot, offline.

use std::fmt;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lockd_core::{Clock, SystemClock};
use redb::{Database, ReadableDatabase as _, ReadableTableMetadata};

use super::file::{Entry, Header, Reader, Table};
use crate::codec;
use crate::recovery::{self, Bad};

/// How [`restore`] sets the restored store's token floor.
///
/// **The rule.** A snapshot records the wall-clock time `W` of its cut and
/// the engine's token ceiling `C` then. An engine never issues a token
/// above its ceiling, which grows with the monotonic clock: any token the
/// old store issued at a later wall-clock time `t` is at most
/// `C + (t - W)`, give or take how far its wall clock and monotonic clock
/// drifted apart, plus one reservation block (`EngineOptions::token_block`,
/// 2^20 by default) for each restart of the old store since the snapshot
/// whose tokens ran at or above its wall clock. The restored store resumes
/// above `max(R, H, C + (now - W) + skew_allowance, now)`, where `R` is the
/// snapshot's token reservation, `H` its highest token in a record and
/// `now` the restoring machine's wall clock, all in microseconds; `now - W`
/// counts as 0 if the restoring clock is behind the cut. The allowance
/// covers a restoring clock that is behind the old machine's (and the
/// restarts above): set it to at least the worst clock disagreement you
/// expect.
#[derive(Clone)]
#[non_exhaustive]
pub struct RestoreOptions {
    /// Added to the token floor for clocks that disagree (default 1 hour).
    pub skew_allowance: Duration,
    /// The restoring machine's clock (the system's by default).
    pub clock: Arc<dyn Clock>,
}

impl Default for RestoreOptions {
    fn default() -> Self {
        RestoreOptions {
            skew_allowance: Duration::from_secs(3_600),
            clock: Arc::new(SystemClock),
        }
    }
}

impl fmt::Debug for RestoreOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RestoreOptions")
            .field("skew_allowance", &self.skew_allowance)
            .finish_non_exhaustive()
    }
}

impl RestoreOptions {
    /// With this skew allowance.
    pub fn with_skew_allowance(mut self, allowance: Duration) -> Self {
        self.skew_allowance = allowance;
        self
    }

    /// With this clock for "now".
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
}

/// What [`restore`] built (or, from [`verify`], what a snapshot holds).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RestoreReport {
    /// The snapshot file.
    pub snapshot: PathBuf,
    /// The store built (`None` from [`verify`]).
    pub store: Option<PathBuf>,
    /// The wall-clock time of the snapshot's cut, Unix epoch microseconds.
    pub taken_at_us: u64,
    /// The old engine's token ceiling at the cut.
    pub token_ceiling: u64,
    /// The token reservation in the snapshot.
    pub snapshot_reserved: u64,
    /// The highest token in a record of the snapshot.
    pub highest_token: Option<u64>,
    /// Lock records (exclusive holders).
    pub locks: u64,
    /// Holders of names held shared, of semaphores and of elections.
    pub shares: u64,
    /// Lease records.
    pub leases: u64,
    /// The restored store's token reservation: its next token is above it
    /// (0 from [`verify`]).
    pub token_floor: u64,
}

impl fmt::Display for RestoreReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.store {
            Some(store) => writeln!(
                f,
                "restored lock store {} from snapshot {} of {}",
                store.display(),
                self.snapshot.display(),
                super::utc(self.taken_at_us)
            )?,
            None => writeln!(
                f,
                "snapshot {} of {}: intact",
                self.snapshot.display(),
                super::utc(self.taken_at_us)
            )?,
        }
        write!(
            f,
            "  {} lock records, {} shared, permit and leader holders, {} leases\n  tokens: \
             the snapshot's reservation {}, highest in a record {}, ceiling at the cut {}",
            self.locks,
            self.shares,
            self.leases,
            self.snapshot_reserved,
            self.highest_token
                .map_or_else(|| "none".to_string(), |t| t.to_string()),
            self.token_ceiling
        )?;
        if self.store.is_some() {
            write!(f, "; tokens resume above {}", self.token_floor)?;
        }
        Ok(())
    }
}

/// Why [`restore`] refused, or failed. A target it refuses is left as it
/// was; a restore that fails removes what it wrote.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RestoreError {
    /// The snapshot file is not a lockd snapshot (empty, or another
    /// program's file).
    #[error("{path} is not a lockd snapshot: {detail}")]
    NotASnapshot {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        detail: String,
    },
    /// The snapshot was written by a newer lockd.
    #[error(
        "snapshot {path} has format version {found}; this lockd reads up to {supported}: \
         restore it with the lockd that wrote it, or a newer one"
    )]
    NewerFormat {
        /// The file.
        path: PathBuf,
        /// Its format version.
        found: u32,
        /// The newest this lockd reads.
        supported: u32,
    },
    /// The snapshot is damaged or cut short: nothing of it was restored.
    #[error("snapshot {path} is damaged: {detail}; nothing was restored")]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The target is not empty: a store with records, a non-empty log
    /// directory, or something that is not a store. It was left as it was.
    #[error(
        "will not restore into {path}: {detail}. It was left as it was; restore into a new path, \
         or move it aside first"
    )]
    TargetNotEmpty {
        /// The store file or its log directory.
        path: PathBuf,
        /// What is there.
        detail: String,
    },
    /// A lockd process has the target store open.
    #[error("will not restore into {path}: a lockd process has it open")]
    TargetInUse {
        /// The store file.
        path: PathBuf,
    },
    /// Reading the snapshot or writing the store failed.
    #[error("restoring {path}: {source}")]
    Io {
        /// The file being read or written.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

impl RestoreError {
    pub(super) fn io_reading(source: std::io::Error) -> RestoreError {
        RestoreError::Io {
            path: PathBuf::new(),
            source,
        }
    }

    /// The error, naming the snapshot `file` where it names none.
    fn in_file(mut self, file: &Path) -> RestoreError {
        match &mut self {
            RestoreError::NotASnapshot { path, .. }
            | RestoreError::NewerFormat { path, .. }
            | RestoreError::Damaged { path, .. }
            | RestoreError::Io { path, .. }
                if path.as_os_str().is_empty() =>
            {
                *path = file.to_path_buf()
            }
            _ => {}
        }
        self
    }
}

/// Builds the store at `store` from the snapshot file `snapshot`, offline.
///
/// The target must be empty: no file there, or a lockd store without a
/// record (and an empty or absent `-wal` directory); anything else is
/// refused and left as it was. The store is written under a temporary name
/// beside the target and renamed into place only once the whole snapshot
/// has been read and its checksum verified, so a damaged or cut-short
/// snapshot leaves nothing behind. Its token floor follows the rule in
/// [`RestoreOptions`]; every record keeps its owner, token, expiry and
/// claim, and records that expired since the snapshot are dropped at the
/// store's first open.
///
/// Stop the old server first: tokens it issues after the restore are not
/// covered.
pub fn restore(
    snapshot: impl AsRef<Path>,
    store: impl AsRef<Path>,
    options: RestoreOptions,
) -> Result<RestoreReport, RestoreError> {
    let (snapshot, store) = (snapshot.as_ref(), store.as_ref());
    check_target(store)?;
    let mut reader = open_snapshot(snapshot)?;
    let header = reader.header().map_err(|e| e.in_file(snapshot))?;
    let io_error = |source| RestoreError::Io {
        path: store.to_path_buf(),
        source,
    };
    if let Some(dir) = store.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io_error)?;
    }
    let temporary = temporary_beside(store, "restore");
    let _ = std::fs::remove_file(&temporary);
    let built = build(&temporary, &mut reader, header, &options)
        .map_err(|e| e.in_file(snapshot))
        .and_then(|report| {
            std::fs::rename(&temporary, store).map_err(io_error)?;
            crate::log::sync_dir(
                store
                    .parent()
                    .filter(|d| !d.as_os_str().is_empty())
                    .unwrap_or(Path::new(".")),
            )
            .map_err(io_error)?;
            Ok(report)
        });
    match built {
        Ok(mut report) => {
            report.snapshot = snapshot.to_path_buf();
            report.store = Some(store.to_path_buf());
            Ok(report)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&temporary);
            Err(e)
        }
    }
}

/// Reads the snapshot file `snapshot` through and checks it (its header,
/// every record decoded, its checksum), without restoring it.
pub fn verify(snapshot: impl AsRef<Path>) -> Result<RestoreReport, RestoreError> {
    let snapshot = snapshot.as_ref();
    let mut reader = open_snapshot(snapshot)?;
    let header = reader.header().map_err(|e| e.in_file(snapshot))?;
    let mut report = report_of(header);
    report.snapshot = snapshot.to_path_buf();
    loop {
        match reader.next().map_err(|e| e.in_file(snapshot))? {
            Entry::Record {
                table,
                key,
                value,
                at,
            } => count(&mut report, table, &key, &value, at).map_err(|e| e.in_file(snapshot))?,
            Entry::End { highest_token } => {
                check_end(&report, highest_token).map_err(|e| e.in_file(snapshot))?;
                return Ok(report);
            }
        }
    }
}

/// The end's highest token must be the highest the records hold.
fn check_end(report: &RestoreReport, highest_token: u64) -> Result<(), RestoreError> {
    let found = report.highest_token.unwrap_or(0);
    if found != highest_token {
        return Err(RestoreError::Damaged {
            path: PathBuf::new(),
            detail: format!(
                "its end says its highest token is {highest_token}, and its records hold {found}"
            ),
        });
    }
    Ok(())
}

fn open_snapshot(snapshot: &Path) -> Result<Reader<BufReader<std::fs::File>>, RestoreError> {
    if snapshot.is_dir() {
        return Err(RestoreError::NotASnapshot {
            path: snapshot.to_path_buf(),
            detail: "it is a directory".to_string(),
        });
    }
    let file = std::fs::File::open(snapshot).map_err(|source| RestoreError::Io {
        path: snapshot.to_path_buf(),
        source,
    })?;
    Ok(Reader::new(BufReader::with_capacity(1 << 20, file)))
}

/// `path` with `.<what>-<pid>.tmp` appended: beside it, on its file
/// system, so that renaming it into place is atomic.
pub(crate) fn temporary_beside(path: &Path, what: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{what}-{}.tmp", std::process::id()));
    PathBuf::from(name)
}

fn report_of(header: Header) -> RestoreReport {
    RestoreReport {
        snapshot: PathBuf::new(),
        store: None,
        taken_at_us: header.taken_at_us,
        token_ceiling: header.token_ceiling,
        snapshot_reserved: header.tokens_reserved,
        highest_token: None,
        locks: 0,
        shares: 0,
        leases: 0,
        token_floor: 0,
    }
}

/// Checks one record of a snapshot and counts it.
fn count(
    report: &mut RestoreReport,
    table: Table,
    key: &[u8],
    value: &[u8],
    at: u64,
) -> Result<(), RestoreError> {
    let decoded = match table {
        Table::Locks => recovery::decode_lock(key, value).map(|(_, r)| Some(r.token)),
        Table::Shares => recovery::decode_share_row(key, value).map(|(_, r)| Some(r.token)),
        Table::Leases => recovery::decode_lease_row(key, value).map(|_| None),
    };
    let token = decoded.map_err(|bad| RestoreError::Damaged {
        path: PathBuf::new(),
        detail: format!("the record at byte {at} cannot be read ({})", bad.detail),
    })?;
    report.highest_token = report.highest_token.max(token);
    match table {
        Table::Locks => report.locks += 1,
        Table::Shares => report.shares += 1,
        Table::Leases => report.leases += 1,
    }
    Ok(())
}

/// Records written per redb transaction: bounds the memory a large restore
/// holds before a commit.
const CHUNK: usize = 20_000;

/// Writes the snapshot's records into a new database at `temporary`, then
/// its token floor.
fn build(
    temporary: &Path,
    reader: &mut Reader<BufReader<std::fs::File>>,
    header: Header,
    options: &RestoreOptions,
) -> Result<RestoreReport, RestoreError> {
    let io_error = |e: &dyn fmt::Display| RestoreError::Io {
        path: temporary.to_path_buf(),
        source: std::io::Error::other(e.to_string()),
    };
    let db = crate::create_database(temporary).map_err(|e| io_error(&e))?;
    recovery::init_tables(&db).map_err(|bad| io_error(&bad.detail))?;
    let mut report = report_of(header);
    let mut chunk = Vec::with_capacity(CHUNK);
    loop {
        match reader.next()? {
            Entry::Record {
                table,
                key,
                value,
                at,
            } => {
                count(&mut report, table, &key, &value, at)?;
                chunk.push((table, key, value));
                if chunk.len() == CHUNK {
                    write_chunk(&db, &mut chunk).map_err(|bad| io_error(&bad.detail))?;
                }
            }
            Entry::End { highest_token } => {
                check_end(&report, highest_token)?;
                break;
            }
        }
    }
    write_chunk(&db, &mut chunk).map_err(|bad| io_error(&bad.detail))?;
    report.token_floor = token_floor(&report, options);
    write_floor(&db, report.token_floor).map_err(|bad| io_error(&bad.detail))?;
    Ok(report)
}

fn write_floor(db: &Database, floor: u64) -> Result<(), Bad> {
    let txn = db.begin_write()?;
    txn.open_table(codec::META)?
        .insert(codec::TOKENS_RESERVED, floor)?;
    txn.commit()?;
    Ok(())
}

fn write_chunk(db: &Database, chunk: &mut Vec<(Table, Vec<u8>, Vec<u8>)>) -> Result<(), Bad> {
    if chunk.is_empty() {
        return Ok(());
    }
    let txn = db.begin_write()?;
    {
        let mut locks = txn.open_table(codec::LOCKS)?;
        let mut leases = txn.open_table(codec::LEASES)?;
        let mut shares = txn.open_table(codec::SHARES)?;
        for (table, key, value) in chunk.drain(..) {
            let table = match table {
                Table::Locks => &mut locks,
                Table::Leases => &mut leases,
                Table::Shares => &mut shares,
            };
            table.insert(&key[..], &value[..])?;
        }
    }
    txn.commit()?;
    Ok(())
}

/// The restored store's reservation, by the rule in [`RestoreOptions`].
fn token_floor(report: &RestoreReport, options: &RestoreOptions) -> u64 {
    let clock = &options.clock;
    let now_us = clock.to_wall_ms(clock.now_ms()).saturating_mul(1_000);
    let since_cut = now_us.saturating_sub(report.taken_at_us);
    let skew = u64::try_from(options.skew_allowance.as_micros()).unwrap_or(u64::MAX);
    let by_ceiling = report
        .token_ceiling
        .saturating_add(since_cut)
        .saturating_add(skew);
    report
        .snapshot_reserved
        .max(report.highest_token.unwrap_or(0))
        .max(by_ceiling)
        .max(now_us)
}

/// Refuses a target that is not empty, leaving it as it was: the store
/// file first (in use, or holding records), then its log directory.
fn check_target(store: &Path) -> Result<(), RestoreError> {
    let refuse = |path: &Path, detail: String| RestoreError::TargetNotEmpty {
        path: path.to_path_buf(),
        detail,
    };
    match std::fs::metadata(store) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(RestoreError::Io {
                path: store.to_path_buf(),
                source,
            })
        }
        Ok(meta) if meta.is_dir() => return Err(refuse(store, "it is a directory".to_string())),
        Ok(meta) if meta.len() == 0 => {
            return Err(refuse(store, "an empty file is there".to_string()))
        }
        Ok(_) => check_target_store(store)?,
    }
    let log = crate::log::dir_of(store);
    if log.is_file() {
        return Err(refuse(
            &log,
            "a file is where its log directory goes".to_string(),
        ));
    }
    if let Ok(entries) = std::fs::read_dir(&log) {
        let n = entries.count();
        if n > 0 {
            return Err(refuse(&log, format!("its log directory holds {n} files")));
        }
    }
    Ok(())
}

/// Refuses an existing store file that is in use, holds anything, or is
/// not a store.
fn check_target_store(store: &Path) -> Result<(), RestoreError> {
    let refuse = |detail: String| RestoreError::TargetNotEmpty {
        path: store.to_path_buf(),
        detail,
    };
    let probe = std::panic::catch_unwind(|| {
        redb::Builder::new()
            .set_cache_size(1 << 20)
            .open_read_only(store)
    });
    let db = match probe {
        Ok(Ok(db)) => db,
        Ok(Err(redb::DatabaseError::DatabaseAlreadyOpen)) => {
            return Err(RestoreError::TargetInUse {
                path: store.to_path_buf(),
            })
        }
        Ok(Err(redb::DatabaseError::RepairAborted)) => {
            return Err(refuse(
                "a store is there that was not closed cleanly".to_string(),
            ))
        }
        Ok(Err(e)) => {
            return Err(refuse(format!(
                "a file that is not a lock store is there ({e})"
            )))
        }
        Err(_) => return Err(refuse("a damaged file is there".to_string())),
    };
    match holds(&db) {
        Ok(None) => Ok(()),
        Ok(Some(what)) => Err(refuse(format!("a lock store is there, holding {what}"))),
        Err(bad) => Err(refuse(format!(
            "a file that is not a readable lock store is there ({})",
            bad.detail
        ))),
    }
}

/// What an existing store holds, if anything: records, or a token
/// reservation (tokens were issued from it).
fn holds(db: &redb::ReadOnlyDatabase) -> Result<Option<String>, Bad> {
    let txn = db.begin_read()?;
    let mut held = Vec::new();
    for (table, what) in [
        (codec::LOCKS, "lock records"),
        (codec::SHARES, "shared, permit and leader holders"),
        (codec::LEASES, "leases"),
    ] {
        match txn.open_table(table) {
            Ok(table) if table.len()? > 0 => held.push(format!("{} {what}", table.len()?)),
            Ok(_) | Err(redb::TableError::TableDoesNotExist(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    match txn.open_table(codec::META) {
        Ok(meta) => {
            let reserved = meta.get(codec::TOKENS_RESERVED)?.map_or(0, |v| v.value());
            if reserved > 0 {
                held.push(format!("a token reservation up to {reserved}"));
            }
        }
        Err(redb::TableError::TableDoesNotExist(_)) => {}
        Err(e) => return Err(e.into()),
    }
    Ok((!held.is_empty()).then(|| held.join(", ")))
}
