//! What can be wrong with a store's files, worded once: [`crate::check`]
//! lists these findings, and [`crate::open`] refuses a store with the
//! first one it meets, in the same words.

use std::fmt;
use std::path::{Path, PathBuf};

use redb::{DatabaseError, StorageError};

/// One thing wrong with one file of a store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The damaged file: the store file or one of its log segments.
    pub file: PathBuf,
    /// What kind of damage it is.
    pub damage: Damage,
    /// What is wrong, as a sentence that follows the file's name.
    pub detail: String,
}

/// The kinds of [`Finding`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Damage {
    /// No store file is there: nothing at the path, a directory, or an
    /// empty file.
    NotAStore,
    /// The file is shorter than what it holds says it is.
    CutShort,
    /// Bytes fail their checksum (a log record or frame, or redb's own
    /// integrity check), or the file is not in a format lockd writes.
    Checksum,
    /// A record passes its checksum but cannot be read: written by another
    /// program or version, or damaged before it was checksummed.
    Undecodable,
    /// Written by a newer lockd, in a format this one does not read.
    NewerFormat {
        /// The file's format version.
        found: u32,
        /// The newest format version this lockd reads.
        supported: u32,
    },
    /// Log segments or commits are missing or out of order.
    Sequence,
    /// The file could not be read at all (permissions, an I/O error).
    Unreadable,
}

impl Finding {
    pub(crate) fn new(file: impl Into<PathBuf>, damage: Damage, detail: impl Into<String>) -> Self {
        Finding {
            file: file.into(),
            damage,
            detail: detail.into(),
        }
    }

    /// A file in `format` version `found`, above `supported`.
    pub(crate) fn newer(file: impl Into<PathBuf>, found: u32, supported: u32) -> Self {
        Finding::new(
            file,
            Damage::NewerFormat { found, supported },
            format!(
                "it has format version {found}; this lockd reads up to {supported}: open it with \
                 the lockd that wrote it, or a newer one"
            ),
        )
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file.display(), self.detail)
    }
}

/// What is wrong with the path of a store file, before redb reads it: a
/// directory, an empty file, or (unless `may_be_missing`) nothing there.
pub(crate) fn preflight(path: &Path, may_be_missing: bool) -> Result<(), Finding> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && may_be_missing => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Finding::new(
            path,
            Damage::NotAStore,
            "there is no file here: no lock store to read",
        )),
        Err(e) => Err(Finding::new(
            path,
            Damage::Unreadable,
            format!("it cannot be read: {e}"),
        )),
        Ok(meta) if meta.is_dir() => Err(Finding::new(
            path,
            Damage::NotAStore,
            "it is a directory, not a lock store file (give the path of the store file, such as \
             .lockd/locks.redb)",
        )),
        Ok(meta) if meta.len() == 0 => Err(Finding::new(
            path,
            Damage::NotAStore,
            "it is empty (0 bytes), and a lock store file never is: it was cut short, or never \
             written (then delete it)",
        )),
        Ok(_) => Ok(()),
    }
}

/// The finding in an error of redb reading the file at `path`; `None` for
/// an error that says nothing about the file (in use, an I/O error).
pub(crate) fn of_database(path: &Path, error: &DatabaseError) -> Option<Finding> {
    match error {
        DatabaseError::DatabaseAlreadyOpen => None,
        DatabaseError::Storage(storage) => of_storage(path, storage),
        other => Some(Finding::new(
            path,
            Damage::Checksum,
            format!("redb cannot read it ({other})"),
        )),
    }
}

/// The finding in a storage error of redb reading `path`.
pub(crate) fn of_storage(path: &Path, error: &StorageError) -> Option<Finding> {
    match error {
        StorageError::Io(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Some(Finding::new(
            path,
            Damage::CutShort,
            "file cut short: it ends inside its own header",
        )),
        // redb reports a file that is not (or no longer) a database as an
        // I/O error of kind InvalidData: that is the file, not the disk.
        StorageError::Io(e) if e.kind() == std::io::ErrorKind::InvalidData => Some(Finding::new(
            path,
            Damage::Checksum,
            format!("it is not a lock store ({e})"),
        )),
        StorageError::Io(_) => None,
        StorageError::Corrupted(why) => Some(corrupted(path, why)),
        other => Some(Finding::new(
            path,
            Damage::Checksum,
            format!("redb cannot read it ({other})"),
        )),
    }
}

/// redb's word for a damaged file, with a file cut short told apart.
fn corrupted(path: &Path, why: &str) -> Finding {
    let field = |name: &str| -> Option<u64> {
        let at = why.find(name)? + name.len();
        let digits: String = why[at..].chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    if why.contains("truncated") {
        if let (Some(len), Some(layout)) = (field("file_len="), field("layout_len=")) {
            return Finding::new(
                path,
                Damage::CutShort,
                format!("file cut short: it is {len} bytes, and its header says {layout}"),
            );
        }
        return Finding::new(path, Damage::CutShort, format!("file cut short ({why})"));
    }
    Finding::new(
        path,
        Damage::Checksum,
        format!("its data fails redb's checks ({why})"),
    )
}

/// A panic's message, from redb reading a damaged file.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_string())
}

/// The finding for redb panicking while it read `path`: it met bytes it
/// never wrote.
pub(crate) fn of_panic(path: &Path, panic: &(dyn std::any::Any + Send)) -> Finding {
    Finding::new(
        path,
        Damage::Checksum,
        format!(
            "redb failed reading it ({}): its pages are damaged",
            panic_message(panic)
        ),
    )
}
