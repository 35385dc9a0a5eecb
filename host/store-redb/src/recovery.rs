//! The steps of opening a store file, shared by [`crate::open`] and by
//! [`crate::check`], which runs them on a copy: open the database, refuse a
//! newer format, create the tables, apply what is left of the log, and read
//! the state back. Each names damage as a [`Finding`], worded the same for
//! both.

use std::panic::AssertUnwindSafe;
use std::path::Path;

use lockd_core::{Key, Record, Recovered};
use redb::{
    AccessGuard, Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, StorageError,
};

use crate::checkpoint::{self, CheckpointError, Finished};
use crate::codec;
use crate::damage::{self, Damage, Finding};
use crate::OpenError;

/// Damage found in the store file, before its path is known.
#[derive(Debug)]
pub(crate) struct Bad {
    pub(crate) damage: Damage,
    pub(crate) detail: String,
}

impl Bad {
    pub(crate) fn undecodable(detail: impl Into<String>) -> Bad {
        Bad {
            damage: Damage::Undecodable,
            detail: detail.into(),
        }
    }

    /// The finding, in the store file at `path`.
    pub(crate) fn at(self, path: &Path) -> Finding {
        Finding::new(path, self.damage, self.detail)
    }
}

/// redb failing to read the file: its pages are damaged.
macro_rules! from_redb {
    ($($error:ty),*) => {$(
        impl From<$error> for Bad {
            fn from(e: $error) -> Bad {
                Bad {
                    damage: Damage::Checksum,
                    detail: format!("redb cannot read it ({e})"),
                }
            }
        }
    )*};
}

from_redb!(
    redb::Error,
    redb::StorageError,
    redb::TableError,
    redb::TransactionError,
    redb::CommitError
);

/// The refusal for `finding`, in the store at `store`.
pub(crate) fn refuse(store: &Path, finding: Finding) -> OpenError {
    match finding.damage {
        Damage::NewerFormat { found, supported } => OpenError::NewerFormat {
            path: finding.file,
            found,
            supported,
        },
        _ => OpenError::Corrupt {
            path: store.to_path_buf(),
            finding,
        },
    }
}

/// Opens (or, if `create`, creates) the database file `path`, naming it
/// `name` in errors (check opens a copy under the original's name). A file
/// that makes redb panic is damaged, not a reason to crash.
pub(crate) fn open_database(path: &Path, name: &Path, create: bool) -> Result<Database, OpenError> {
    damage::preflight(path, create).map_err(|f| {
        refuse(
            name,
            Finding {
                file: name.into(),
                ..f
            },
        )
    })?;
    if path.exists() {
        probe_format(path, name)?;
    }
    let opened = std::panic::catch_unwind(AssertUnwindSafe(|| {
        if create {
            crate::create_database(path)
        } else {
            Database::builder()
                .set_cache_size(crate::CACHE_BYTES)
                .open(path)
        }
    }));
    match opened {
        Ok(Ok(db)) => Ok(db),
        Ok(Err(redb::DatabaseError::DatabaseAlreadyOpen)) => Err(OpenError::InUse {
            path: name.to_path_buf(),
        }),
        Ok(Err(e)) => Err(match damage::of_database(name, &e) {
            Some(finding) => refuse(name, finding),
            None => OpenError::Io {
                path: name.to_path_buf(),
                source: std::io::Error::other(e.to_string()),
            },
        }),
        Err(panic) => Err(refuse(name, damage::of_panic(name, panic.as_ref()))),
    }
}

/// Runs redb's integrity check, which verifies the checksum of every page:
/// redb does not check them as it reads, so a damaged page would otherwise
/// be read as it is (a lock's expiry, say). Whether the file was clean;
/// `false` if redb had to repair something (its allocator state, or a
/// torn commit of its own), which the caller may report.
pub(crate) fn verify_integrity(db: &mut Database, name: &Path) -> Result<bool, OpenError> {
    match std::panic::catch_unwind(AssertUnwindSafe(|| db.check_integrity())) {
        Ok(Ok(clean)) => Ok(clean),
        Ok(Err(e)) => Err(match damage::of_database(name, &e) {
            Some(finding) => refuse(name, finding),
            None => OpenError::Io {
                path: name.to_path_buf(),
                source: std::io::Error::other(e.to_string()),
            },
        }),
        Err(panic) => Err(refuse(name, damage::of_panic(name, panic.as_ref()))),
    }
}

/// Refuses a file of a newer format without writing to it: opening a file
/// for writing, redb writes to it even if nothing is changed. A file that
/// was not closed cleanly cannot be read so (redb must repair it first):
/// its format is checked once it is open.
fn probe_format(path: &Path, name: &Path) -> Result<(), OpenError> {
    let probe = std::panic::catch_unwind(|| {
        redb::Builder::new()
            .set_cache_size(1 << 20)
            .open_read_only(path)
    });
    match probe {
        Ok(Ok(db)) => check_format(&db, name).map(drop),
        Ok(Err(redb::DatabaseError::DatabaseAlreadyOpen)) => Err(OpenError::InUse {
            path: name.to_path_buf(),
        }),
        // Damaged, or to be repaired: the open that follows tells which.
        _ => Ok(()),
    }
}

/// The store's format version: `None` for a new file, 1 for one written
/// before stores carried it. Refuses a newer one, before anything is
/// written.
pub(crate) fn check_format(
    db: &impl ReadableDatabase,
    name: &Path,
) -> Result<Option<u32>, OpenError> {
    let read = || -> Result<Option<u64>, Bad> {
        let txn = db.begin_read()?;
        let meta = match txn.open_table(codec::META) {
            Ok(meta) => meta,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let version = meta.get(codec::FORMAT_VERSION)?.map(|v| v.value());
        // A store written before format versions has a meta table (its
        // first open made every table) but no version in it.
        Ok(Some(version.unwrap_or(1)))
    };
    let version = read().map_err(|bad| refuse(name, bad.at(name)))?;
    match version {
        Some(found) if found > u64::from(codec::STORE_FORMAT) => {
            let found = u32::try_from(found).unwrap_or(u32::MAX);
            Err(refuse(
                name,
                Finding::newer(name, found, codec::STORE_FORMAT),
            ))
        }
        other => Ok(other.map(|v| v as u32)),
    }
}

/// Creates the tables a new file lacks (and those of features newer than
/// the file), and records the format version: opening upgrades a store
/// written before versions in place, by adding the version alone.
pub(crate) fn init_tables(db: &Database) -> Result<(), Bad> {
    let txn = db.begin_write()?;
    txn.open_table(codec::LOCKS)?;
    txn.open_table(codec::LEASES)?;
    txn.open_table(codec::SHARES)?;
    {
        let mut meta = txn.open_table(codec::META)?;
        if meta.get(codec::FORMAT_VERSION)?.is_none() {
            meta.insert(codec::FORMAT_VERSION, u64::from(codec::STORE_FORMAT))?;
        }
    }
    txn.commit()?;
    Ok(())
}

/// Applies every segment left in the log directory to redb (the last one
/// possibly torn) and returns the numbers of the next segment and the next
/// commit. With `delete`, removes what it applied (and segments never
/// finished, or already applied); without, leaves the directory as it is.
pub(crate) fn recover_log(
    db: &Database,
    dir: &Path,
    delete: bool,
) -> Result<(u64, u64), CheckpointError> {
    let store = |e: String| CheckpointError::Store(e);
    let found = crate::log::list(dir, delete)
        .map_err(|e| store(format!("listing {}: {e}", dir.display())))?;
    let (segment, frame) = checkpoint::checkpointed(db).map_err(store)?;
    let (applied, left): (Vec<u64>, Vec<u64>) = found.into_iter().partition(|&s| s <= segment);
    let as_finished = |seqs: Vec<u64>| -> Vec<Finished> {
        seqs.into_iter()
            .map(|seq| Finished {
                seq,
                path: crate::log::segment_path(dir, seq),
                end: usize::MAX,
            })
            .collect()
    };
    if delete {
        // Left by a crash between a checkpoint's commit and its deletes.
        checkpoint::delete(&as_finished(applied));
    }
    let left = as_finished(left);
    if left.is_empty() {
        return Ok((segment + 1, frame + 1));
    }
    let (position, last) = checkpoint::apply(db, &left)?;
    if delete {
        checkpoint::delete(&left);
    }
    Ok((last + 1, position.last_whole + 1))
}

/// The rows of a table, with their count as the iterator's size hint, so
/// the engine can size itself before it reads them.
pub(crate) struct Counted<I> {
    pub(crate) rows: I,
    pub(crate) left: usize,
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

/// Everything to resume from, the lock records included (materialised:
/// [`crate::RedbJournal::open`]'s contract).
pub(crate) fn read_state(db: &Database) -> Result<Recovered, Bad> {
    let mut recovered = read_meta_and_leases(db)?;
    let txn = db.begin_read()?;
    let table = txn.open_table(codec::LOCKS)?;
    // Sized exactly: with a million locks, doubling growth would hold up to
    // twice their size at the peak of a restart.
    let rows = table.len()?;
    recovered.locks = Vec::with_capacity(usize::try_from(rows).unwrap_or(0));
    for row in table.iter()? {
        recovered.locks.push(decode_lock_row(row)?);
    }
    Ok(recovered)
}

/// The token reservation and the leases; no locks.
pub(crate) fn read_meta_and_leases(db: &Database) -> Result<Recovered, Bad> {
    let txn = db.begin_read()?;
    let meta = txn.open_table(codec::META)?;
    let reserved = meta.get(codec::TOKENS_RESERVED)?.map_or(0, |v| v.value());
    let table = txn.open_table(codec::LEASES)?;
    let mut leases = Vec::new();
    for row in table.iter()? {
        let (k, v) = row?;
        leases.push(decode_lease_row(k.value(), v.value())?);
    }
    Ok(Recovered {
        shares: Vec::new(),
        locks: Vec::new(),
        leases,
        next_token: reserved.saturating_add(1),
        reserved_up_to: reserved,
    })
}

/// One row of the `leases` table, decoded.
pub(crate) fn decode_lease_row(
    key: &[u8],
    value: &[u8],
) -> Result<(Key, lockd_core::LeaseRecord), Bad> {
    let lease =
        codec::decode_key(key).ok_or_else(|| Bad::undecodable("a lease key is malformed"))?;
    let record = codec::decode_lease(value)
        .ok_or_else(|| Bad::undecodable(format!("the record of lease {lease:?} is malformed")))?;
    Ok((lease, record))
}

/// One row of the `shares` table, decoded.
pub(crate) fn decode_share_row(key: &[u8], value: &[u8]) -> Result<(Key, Record), Bad> {
    let (key, owner) =
        codec::decode_share_key(key).ok_or_else(|| Bad::undecodable("a share key is malformed"))?;
    let record = codec::decode_share(value, &owner).map_err(|why| {
        Bad::undecodable(format!(
            "the share record of {owner:?} on {key:?} is malformed: {why}"
        ))
    })?;
    Ok((key, record))
}

pub(crate) type LockRow<'a> = Result<
    (
        AccessGuard<'a, &'static [u8]>,
        AccessGuard<'a, &'static [u8]>,
    ),
    StorageError,
>;

/// One row of the `locks` table, decoded.
pub(crate) fn decode_lock_row(row: LockRow<'_>) -> Result<(Key, Record), Bad> {
    let (k, v) = row?;
    decode_lock(k.value(), v.value())
}

/// A `locks` row's key and value, decoded.
pub(crate) fn decode_lock(key: &[u8], value: &[u8]) -> Result<(Key, Record), Bad> {
    let key = codec::decode_key(key).ok_or_else(|| Bad::undecodable("a lock key is malformed"))?;
    let record = codec::decode_record(value)
        .ok_or_else(|| Bad::undecodable(format!("the record of lock {key:?} is malformed")))?;
    Ok((key, record))
}
