//! Snapshots of a serving store, and restoring a store from one, offline.
//!
//! - [`save`] writes a consistent snapshot of a serving [`Store`] without
//!   stopping lock traffic: every change acknowledged before it was called
//!   is in it (every persistent lock, share, semaphore permit, election
//!   leader and lease, with owners, tokens and expiries, and the token
//!   reservation), along with the wall-clock time of the cut and the
//!   engine's token ceiling then. Lock-delays are not in it: no store keeps
//!   them (they are configuration).
//! - [`restore`] builds a store from a snapshot file, offline, into an empty
//!   target, and sets its token floor so that no fencing token ever goes
//!   backwards, even for tokens the old store issued after the snapshot:
//!   see [`RestoreOptions`] for the rule.
//! - [`verify`] reads a snapshot file through, checking it, without
//!   restoring it.
//!
//! The file format is described in [`FORMAT_VERSION`]'s module: magic bytes
//! naming lockd, the format version, the time and token ceiling of the cut,
//! the records, and a checksum over everything.

mod file;
mod restore;

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use redb::ReadableTable;

use crate::codec;
use crate::recovery::{self, Bad};
use crate::Store;
pub use file::FORMAT_VERSION;
use file::{Header, Table, Writer};
pub use restore::{restore, verify, RestoreError, RestoreOptions, RestoreReport};

/// What [`save`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SnapshotReport {
    /// The store the snapshot is of.
    pub store: PathBuf,
    /// The wall-clock time of the cut, Unix epoch microseconds.
    pub taken_at_us: u64,
    /// The engine's token ceiling at the cut: no token it issued by then is
    /// above it, and none it issues `d` microseconds later is above it plus
    /// `d`.
    pub token_ceiling: u64,
    /// The token reservation in the snapshot.
    pub tokens_reserved: u64,
    /// The highest token in a record of the snapshot.
    pub highest_token: Option<u64>,
    /// Lock records (exclusive holders).
    pub locks: u64,
    /// Holders of names held shared, of semaphores and of elections.
    pub shares: u64,
    /// Lease records.
    pub leases: u64,
    /// The size of the snapshot, in bytes.
    pub bytes: u64,
    /// How long the cut took: until every change acknowledged before the
    /// call was in redb and a read transaction held it. Lock calls do not
    /// wait for it.
    pub cut: Duration,
    /// How long the whole snapshot took.
    pub elapsed: Duration,
}

impl fmt::Display for SnapshotReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "snapshot of lock store {} at {}",
            self.store.display(),
            utc(self.taken_at_us)
        )?;
        writeln!(
            f,
            "  {} lock records, {} shared, permit and leader holders, {} leases",
            self.locks, self.shares, self.leases
        )?;
        writeln!(
            f,
            "  tokens: reserved up to {}, highest in a record {}, ceiling {}",
            self.tokens_reserved,
            self.highest_token
                .map_or_else(|| "none".to_string(), |t| t.to_string()),
            self.token_ceiling
        )?;
        write!(
            f,
            "  {} bytes in {:.1?} (the cut took {:.1?})",
            self.bytes, self.elapsed, self.cut
        )
    }
}

/// Why [`save`] could not write a snapshot.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The store could not take the cut: it is closing, its writes fail, or
    /// its log cannot be checkpointed.
    #[error("cannot snapshot lock store {path}: {detail}")]
    Cut {
        /// The store file.
        path: PathBuf,
        /// Why.
        detail: String,
    },
    /// redb failed reading the store, or a record in it cannot be read: a
    /// snapshot of it would not restore. `lockd store check` on the stopped
    /// store lists what is wrong.
    #[error("cannot snapshot lock store {path}: {finding}")]
    Corrupt {
        /// The store file.
        path: PathBuf,
        /// What is wrong.
        finding: crate::Finding,
    },
    /// Writing the snapshot failed.
    #[error("writing the snapshot of lock store {path} to {to} failed: {source}")]
    Write {
        /// The store file.
        path: PathBuf,
        /// Where it was written ("the writer" when not a file).
        to: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Writes a consistent snapshot of the serving `store` to `out`, without
/// stopping lock traffic.
///
/// The cut: the wall-clock time and the engine's token ceiling are read,
/// then a barrier goes through the store's writer queue; once every change
/// queued before it is durable, the writer hands its log segment to the
/// checkpoint thread and goes on writing into a new one, and the
/// checkpoint thread applies the log into redb and opens a read
/// transaction. The snapshot is written from that transaction while lock
/// calls go on: they wait for nothing the snapshot does (at most, for the
/// next log segment, which is made ahead). So every change acknowledged
/// before the call is in the snapshot; changes made while it is taken may
/// be too, whole commits at a time (a consistent state all the same).
///
/// Blocks the calling thread (in an async server, call it from
/// `spawn_blocking`). `out` is written sequentially; buffer it.
pub fn save(store: &Store, out: impl Write) -> Result<SnapshotReport, SnapshotError> {
    save_as(store, out, "the writer")
}

/// [`save`] into the file `path`: written beside it under a temporary
/// name, synced, then renamed over it, so that `path` always holds a whole
/// snapshot (the previous one until the new one is complete).
pub fn save_to(store: &Store, path: impl AsRef<Path>) -> Result<SnapshotReport, SnapshotError> {
    let path = path.as_ref();
    let write_error = |source| SnapshotError::Write {
        path: store.path().to_path_buf(),
        to: path.display().to_string(),
        source,
    };
    let temporary = restore::temporary_beside(path, "snapshot");
    let file = std::fs::File::create(&temporary).map_err(write_error)?;
    let written = (|| {
        let mut out = std::io::BufWriter::with_capacity(1 << 20, &file);
        let report = save_as(store, &mut out, &path.display().to_string())?;
        out.flush().map_err(write_error)?;
        drop(out);
        file.sync_all().map_err(write_error)?;
        std::fs::rename(&temporary, path).map_err(write_error)?;
        crate::log::sync_dir(
            path.parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new(".")),
        )
        .map_err(write_error)?;
        Ok(report)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

fn save_as(store: &Store, out: impl Write, to: &str) -> Result<SnapshotReport, SnapshotError> {
    let started = Instant::now();
    let path = store.path().to_path_buf();
    // The wall clock first, then the ceiling: a token issued at a later
    // time t is at most the ceiling plus (t - the time read).
    let taken_at_us = wall_clock_us();
    let token_ceiling = store.engine().token_ceiling();
    let read = store.journal().cut().map_err(|detail| SnapshotError::Cut {
        path: path.clone(),
        detail,
    })?;
    let cut = started.elapsed();
    let mut report = SnapshotReport {
        store: path.clone(),
        taken_at_us,
        token_ceiling,
        tokens_reserved: 0,
        highest_token: None,
        locks: 0,
        shares: 0,
        leases: 0,
        bytes: 0,
        cut,
        elapsed: Duration::ZERO,
    };
    dump(&read, out, &mut report).map_err(|e| match e {
        Dump::Bad(bad) => SnapshotError::Corrupt {
            finding: bad.at(&path),
            path: path.clone(),
        },
        Dump::Write(source) => SnapshotError::Write {
            path: path.clone(),
            to: to.to_string(),
            source,
        },
    })?;
    report.elapsed = started.elapsed();
    Ok(report)
}

enum Dump {
    Bad(Bad),
    Write(std::io::Error),
}

impl<E> From<E> for Dump
where
    Bad: From<E>,
{
    fn from(e: E) -> Dump {
        Dump::Bad(Bad::from(e))
    }
}

/// Writes every record the read transaction holds, each checked to decode.
fn dump(
    read: &redb::ReadTransaction,
    out: impl Write,
    report: &mut SnapshotReport,
) -> Result<(), Dump> {
    let meta = read.open_table(codec::META)?;
    report.tokens_reserved = meta.get(codec::TOKENS_RESERVED)?.map_or(0, |v| v.value());
    let header = Header {
        taken_at_us: report.taken_at_us,
        token_ceiling: report.token_ceiling,
        tokens_reserved: report.tokens_reserved,
    };
    let mut writer = Writer::new(out, &header).map_err(Dump::Write)?;
    for row in read.open_table(codec::LOCKS)?.iter()? {
        let (k, v) = row?;
        let (_, record) = recovery::decode_lock(k.value(), v.value()).map_err(Dump::Bad)?;
        report.highest_token = report.highest_token.max(Some(record.token));
        report.locks += 1;
        writer
            .entry(Table::Locks, k.value(), v.value())
            .map_err(Dump::Write)?;
    }
    for row in read.open_table(codec::SHARES)?.iter()? {
        let (k, v) = row?;
        let (_, record) = recovery::decode_share_row(k.value(), v.value()).map_err(Dump::Bad)?;
        report.highest_token = report.highest_token.max(Some(record.token));
        report.shares += 1;
        writer
            .entry(Table::Shares, k.value(), v.value())
            .map_err(Dump::Write)?;
    }
    for row in read.open_table(codec::LEASES)?.iter()? {
        let (k, v) = row?;
        recovery::decode_lease_row(k.value(), v.value()).map_err(Dump::Bad)?;
        report.leases += 1;
        writer
            .entry(Table::Leases, k.value(), v.value())
            .map_err(Dump::Write)?;
    }
    report.bytes = writer.finish(report.highest_token).map_err(Dump::Write)?;
    Ok(())
}

/// The wall clock, Unix epoch microseconds (0 before 1970): the unit of
/// the token ceiling.
fn wall_clock_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// `us` (Unix epoch microseconds) as an RFC 3339 UTC time, to the
/// millisecond.
pub(crate) fn utc(us: u64) -> String {
    let secs = us / 1_000_000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's days-to-civil algorithm.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60,
        us % 1_000_000 / 1_000
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_renders_known_times() {
        assert_eq!(super::utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            super::utc(7_258_122_000_000_123),
            "2200-01-01T01:00:00.000Z"
        );
        assert_eq!(
            super::utc(1_709_210_096_789_000),
            "2024-02-29T12:34:56.789Z"
        );
    }
}
