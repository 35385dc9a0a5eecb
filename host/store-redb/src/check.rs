//! Checking a stopped store offline, without changing it.
//!
//! [`check()`] copies the store file to a temporary directory and runs on
//! the copy what an open runs: redb's own integrity check (which may repair
//! what it checks: hence the copy), the format version, every log segment
//! left beside the store (read in place, never written: their headers,
//! checksums and sequence), and every record of every table decoded. The
//! store file and its `-wal` directory are only read.

use std::fmt;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, ReadableTable};

use crate::checkpoint::CheckpointError;
use crate::codec;
use crate::damage::{self, Damage, Finding};
use crate::recovery::{self, Bad};
use crate::OpenError;

/// What [`check()`] found: the store's contents, and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckReport {
    /// The store file checked.
    pub store: PathBuf,
    /// Its format version, if it could be read.
    pub format_version: Option<u32>,
    /// Lock records (exclusive holders), expired ones included.
    pub locks: u64,
    /// Holders of names held shared, of semaphores and of elections.
    pub shares: u64,
    /// Lease records.
    pub leases: u64,
    /// Log segments in its `-wal` directory (an open applies and deletes
    /// them; a store closed cleanly has none).
    pub segments: u64,
    /// The token reservation: no token above it was issued.
    pub tokens_reserved: u64,
    /// The highest token in a record, if there is one. It may be above the
    /// reservation (a grant's record can reach the disk in an earlier batch
    /// than the reservation covering it): an open resumes above both.
    pub highest_token: Option<u64>,
    /// Everything wrong, one finding per damaged file or record; empty for
    /// an intact store.
    pub findings: Vec<Finding>,
    /// Whether the tables could be read (the counts and tokens above are
    /// what they hold).
    pub read: bool,
}

impl CheckReport {
    fn new(store: &Path) -> CheckReport {
        CheckReport {
            store: store.to_path_buf(),
            format_version: None,
            locks: 0,
            shares: 0,
            leases: 0,
            segments: 0,
            tokens_reserved: 0,
            highest_token: None,
            findings: Vec::new(),
            read: false,
        }
    }

    /// Whether nothing is wrong: an open would resume every record.
    pub fn is_intact(&self) -> bool {
        self.findings.is_empty()
    }

    fn note_token(&mut self, token: u64) {
        self.highest_token = self.highest_token.max(Some(token));
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_intact() {
            writeln!(f, "lock store {}: intact", self.store.display())?;
        } else {
            let n = self.findings.len();
            let s = if n == 1 { "" } else { "s" };
            writeln!(
                f,
                "lock store {}: DAMAGED, {n} finding{s}",
                self.store.display()
            )?;
            for finding in &self.findings {
                writeln!(f, "  - {finding}")?;
            }
        }
        match self.format_version {
            Some(version) => writeln!(f, "  format version {version}")?,
            None => writeln!(f, "  format version unknown")?,
        }
        if !self.read {
            return write!(f, "  its records could not be read");
        }
        writeln!(
            f,
            "  {} lock records, {} shared, permit and leader holders, {} leases",
            self.locks, self.shares, self.leases
        )?;
        match self.segments {
            0 => writeln!(f, "  log: empty (closed cleanly)")?,
            n => writeln!(f, "  log: {n} segments, applied at the next open")?,
        }
        let highest = self
            .highest_token
            .map_or_else(|| "none".to_string(), |t| t.to_string());
        write!(
            f,
            "  tokens: reserved up to {}, highest in a record {highest}; the next grant is above \
             both",
            self.tokens_reserved
        )
    }
}

/// Why [`check()`] could not check a store (as opposed to what it found
/// wrong with it, which its report lists).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// A lockd process has the store open: check verifies a stopped store.
    #[error(
        "lock store {path} is in use by a lockd process; stop it first (check reads a stopped \
         store; a serving one is backed up with a snapshot)"
    )]
    InUse {
        /// The store file.
        path: PathBuf,
    },
    /// The temporary copy that redb's integrity check runs on could not be
    /// made.
    #[error(
        "cannot check lock store {path}: copying it to a temporary directory failed ({source}); \
         set TMPDIR to a directory with room for a copy of it"
    )]
    Scratch {
        /// The store file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Verifies the stopped store at `store` without changing it: the store
/// file, on a temporary copy (redb's integrity check, the format version,
/// every record decoded), and its log segments, read in place (their
/// checksums, their sequence, every record decoded). Returns a report: the
/// store's contents, and a finding for each thing wrong, in the words
/// [`crate::open`] uses to refuse it.
///
/// Needs room in the temporary directory (`TMPDIR`) for a copy of the
/// store file. A store in use by a lockd process is refused.
pub fn check(store: impl AsRef<Path>) -> Result<CheckReport, CheckError> {
    let store = store.as_ref();
    let mut report = CheckReport::new(store);
    if let Err(finding) = damage::preflight(store, false) {
        report.findings.push(finding);
        return Ok(report);
    }
    let scratch_error = |source| CheckError::Scratch {
        path: store.to_path_buf(),
        source,
    };
    let scratch = tempfile::Builder::new()
        .prefix("lockd-check-")
        .tempdir()
        .map_err(scratch_error)?;
    let copy = scratch.path().join("store.redb");
    {
        // Held while copying, so that no lockd starts on it meanwhile.
        let _unused = refuse_in_use(store)?;
        std::fs::copy(store, &copy).map_err(scratch_error)?;
    }
    make_writable(&copy).map_err(scratch_error)?;
    check_copy(&copy, store, &mut report);
    report.segments = crate::log::list(&crate::log::dir_of(store), false)
        .map_or(0, |segments| segments.len() as u64);
    Ok(report)
}

/// A read-only handle on `store`, which redb refuses while a lockd has it
/// open; `None` where it cannot be had for another reason (damage, or a
/// file redb must repair first: the check of the copy tells).
fn refuse_in_use(store: &Path) -> Result<Option<redb::ReadOnlyDatabase>, CheckError> {
    let probe = std::panic::catch_unwind(|| {
        redb::Builder::new()
            .set_cache_size(1 << 20)
            .open_read_only(store)
    });
    match probe {
        Ok(Ok(db)) => Ok(Some(db)),
        Ok(Err(redb::DatabaseError::DatabaseAlreadyOpen)) => Err(CheckError::InUse {
            path: store.to_path_buf(),
        }),
        _ => Ok(None),
    }
}

fn make_writable(copy: &Path) -> std::io::Result<()> {
    let mut permissions = std::fs::metadata(copy)?.permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    permissions.set_readonly(false);
    std::fs::set_permissions(copy, permissions)
}

/// Runs an open's steps on `copy`, naming `store` in what it finds.
fn check_copy(copy: &Path, store: &Path, report: &mut CheckReport) {
    let mut db = match recovery::open_database(copy, store, false) {
        Ok(db) => db,
        Err(e) => return report.findings.push(finding_of(store, e)),
    };
    match recovery::check_format(&db, store) {
        Ok(version) => report.format_version = version,
        Err(e) => return report.findings.push(finding_of(store, e)),
    }
    let integrity = std::panic::catch_unwind(AssertUnwindSafe(|| db.check_integrity()));
    match integrity {
        Ok(Ok(true)) => {}
        Ok(Ok(false)) => report.findings.push(Finding::new(
            store,
            Damage::Checksum,
            "it fails redb's integrity check (redb could repair a copy of it; the file itself \
             was not changed)",
        )),
        Ok(Err(e)) => {
            report
                .findings
                .push(damage::of_database(store, &e).unwrap_or_else(|| unreadable(store, &e)));
            // A failed check leaves the handle unusable; what a reopen
            // (which repairs what it can) reads is still worth listing.
            drop(db);
            match recovery::open_database(copy, store, false) {
                Ok(reopened) => db = reopened,
                Err(_) => return,
            }
        }
        Err(panic) => {
            return report
                .findings
                .push(damage::of_panic(store, panic.as_ref()))
        }
    }
    let rest = std::panic::catch_unwind(AssertUnwindSafe(|| {
        replay_and_read(&db, store, report);
    }));
    if let Err(panic) = rest {
        report
            .findings
            .push(damage::of_panic(store, panic.as_ref()));
    }
}

/// Applies the store's log to the copy (reading the segments in place) and
/// decodes every record.
fn replay_and_read(db: &Database, store: &Path, report: &mut CheckReport) {
    if let Err(bad) = recovery::init_tables(db) {
        return report.findings.push(bad.at(store));
    }
    let log = crate::log::dir_of(store);
    match recovery::recover_log(db, &log, false) {
        Ok(_) => {}
        Err(CheckpointError::Corrupt(finding)) => report.findings.push(finding),
        Err(CheckpointError::Store(why)) => report.findings.push(Finding::new(
            &log,
            Damage::Unreadable,
            format!("its log cannot be read: {why}"),
        )),
    }
    if let Err(bad) = read_records(db, store, report) {
        report.findings.push(bad.at(store));
    }
}

/// At most this many records that do not decode are listed one by one.
const MAX_RECORD_FINDINGS: usize = 20;

/// Decodes every record of every table into `report`.
fn read_records(db: &Database, store: &Path, report: &mut CheckReport) -> Result<(), Bad> {
    let txn = db.begin_read()?;
    let meta = txn.open_table(codec::META)?;
    report.tokens_reserved = meta.get(codec::TOKENS_RESERVED)?.map_or(0, |v| v.value());
    let mut bad_rows = 0usize;
    let mut found = |report: &mut CheckReport, bad: Bad| {
        bad_rows += 1;
        if bad_rows <= MAX_RECORD_FINDINGS {
            report.findings.push(bad.at(store));
        }
    };
    for row in txn.open_table(codec::LOCKS)?.iter()? {
        let (k, v) = row?;
        match recovery::decode_lock(k.value(), v.value()) {
            Ok((_, record)) => {
                report.locks += 1;
                report.note_token(record.token);
            }
            Err(bad) => found(report, bad),
        }
    }
    for row in txn.open_table(codec::SHARES)?.iter()? {
        let (k, v) = row?;
        match recovery::decode_share_row(k.value(), v.value()) {
            Ok((_, record)) => {
                report.shares += 1;
                report.note_token(record.token);
            }
            Err(bad) => found(report, bad),
        }
    }
    for row in txn.open_table(codec::LEASES)?.iter()? {
        let (k, v) = row?;
        match recovery::decode_lease_row(k.value(), v.value()) {
            Ok(_) => report.leases += 1,
            Err(bad) => found(report, bad),
        }
    }
    report.read = true;
    if bad_rows > MAX_RECORD_FINDINGS {
        report.findings.push(Finding::new(
            store,
            Damage::Undecodable,
            format!(
                "{} more records cannot be read",
                bad_rows - MAX_RECORD_FINDINGS
            ),
        ));
    }
    Ok(())
}

fn unreadable(store: &Path, e: &dyn fmt::Display) -> Finding {
    Finding::new(store, Damage::Unreadable, format!("it cannot be read: {e}"))
}

/// The finding in an open's refusal.
fn finding_of(store: &Path, e: OpenError) -> Finding {
    match e {
        OpenError::Corrupt { finding, .. } => finding,
        OpenError::NewerFormat {
            path,
            found,
            supported,
        } => Finding::newer(path, found, supported),
        other => unreadable(store, &other),
    }
}
