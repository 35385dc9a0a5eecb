//! The log in front of redb: each group commit is one sequential write of
//! its records into a preallocated segment and one `fdatasync`; finished
//! segments are checkpointed into redb in the background
//! (docs/internals.md, "The redb journal").

pub(crate) mod format;
pub(crate) mod scan;
pub(crate) mod spares;

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The log directory of the store file `store`: its name with `-wal`.
pub fn dir_of(store: &Path) -> PathBuf {
    let mut name = store.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

pub(crate) fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:016x}.seg"))
}

const TEMPORARY: &str = ".seg.tmp";

/// The writes and syncs of the log's files, so that tests can cut the power
/// at any sync.
pub(crate) trait LogIo: Send + Sync + 'static {
    /// Writes all of `bytes` at `offset` of `file`.
    fn write_at(&self, file: &File, bytes: &[u8], offset: u64) -> io::Result<()>;
    /// Makes what was written to `file` durable (`fdatasync`).
    fn sync(&self, file: &File) -> io::Result<()>;
}

/// The operating system's files.
#[derive(Debug)]
pub(crate) struct FileIo;

impl LogIo for FileIo {
    fn write_at(&self, file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
        file.write_all_at(bytes, offset)
    }

    fn sync(&self, file: &File) -> io::Result<()> {
        file.sync_data()
    }
}

/// How the log sizes its segments and reaches its files.
#[derive(Clone)]
pub(crate) struct LogConfig {
    /// The size of the first segment after an open; each next one doubles,
    /// up to `max_segment`, so that a store little used stays small and
    /// one under load rotates rarely.
    pub(crate) first_segment: u64,
    pub(crate) max_segment: u64,
    pub(crate) io: Arc<dyn LogIo>,
    /// Whether finished segments are checkpointed while the store is open
    /// (always, but in tests that keep the log to look at it).
    pub(crate) checkpoints: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            first_segment: 256 << 10,
            max_segment: 16 << 20,
            io: Arc::new(FileIo),
            checkpoints: true,
        }
    }
}

/// A preallocated segment, open for writing.
pub(crate) struct Segment {
    pub(crate) seq: u64,
    pub(crate) salt: u32,
    pub(crate) size: u64,
    pub(crate) path: PathBuf,
    pub(crate) file: File,
}

/// Creates segment `seq` of `size` bytes: its header, then zeros, written
/// and synced, then renamed into place and the directory synced. Writing
/// the zeros (rather than `fallocate`, whose unwritten extents are converted
/// at the first write) means a commit's `fdatasync` has no block allocation
/// or file size to record, only the data.
pub(crate) fn create_segment(
    dir: &Path,
    seq: u64,
    size: u64,
    io: &dyn LogIo,
) -> io::Result<Segment> {
    let path = segment_path(dir, seq);
    let temporary = dir.join(format!("{seq:016x}{TEMPORARY}"));
    let made = (|| {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&temporary)?;
        let salt = random_salt();
        io.write_at(&file, &format::segment_header(seq, salt), 0)?;
        let zeros = vec![0u8; (1 << 20).min(size as usize)];
        let mut at = format::SEGMENT_HEADER as u64;
        while at < size {
            let n = zeros.len().min((size - at) as usize);
            io.write_at(&file, &zeros[..n], at)?;
            at += n as u64;
        }
        io.sync(&file)?;
        std::fs::rename(&temporary, &path)?;
        sync_dir(dir)?;
        Ok(Segment {
            seq,
            salt,
            size,
            path: path.clone(),
            file,
        })
    })();
    if made.is_err() {
        // Give back the space at once: a full disk is the likely cause.
        let _ = std::fs::remove_file(&temporary);
    }
    made
}

/// The segments in `dir`, in order; with `tidy`, removes segments never
/// finished (a crash while one was being created). A directory that does
/// not exist holds none.
pub(crate) fn list(dir: &Path, tidy: bool) -> io::Result<Vec<u64>> {
    let mut segments = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound && !tidy => return Ok(segments),
        other => other?,
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.ends_with(TEMPORARY) {
            if tidy {
                std::fs::remove_file(entry.path())?;
            }
        } else if let Some(seq) = name
            .strip_suffix(".seg")
            .filter(|hex| hex.len() == 16)
            .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        {
            segments.push(seq);
        }
    }
    segments.sort_unstable();
    Ok(segments)
}

pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn random_salt() -> u32 {
    let mut bytes = [0u8; 4];
    if getrandom::fill(&mut bytes).is_err() {
        // Any value works; a random one keeps crafted record bytes from
        // passing for records. The clock is the fallback.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        bytes = nanos.to_le_bytes();
    }
    u32::from_le_bytes(bytes)
}
