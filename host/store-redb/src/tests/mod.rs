//! Crash tests of the log: a file cut at every byte of its last records, a
//! power cut at every sync, and damage that must be refused. They reach the
//! log's configuration and its I/O, which the public API does not expose.

mod check;
mod cut;
mod cuts;
mod power;

use std::path::{Path, PathBuf};

use crate::log::format::{parse_frame_header, parse_segment_header, FRAME_HEADER, RECORD_HEADER};

/// A fresh directory, on tmpfs when there is one: these tests check what
/// is read back, not the disk.
fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    }
    .unwrap()
}

/// Copies the store file and its log segments (a crash image, taken while
/// the store is idle) to `to`, and returns the copy's store path.
fn copy_store(store: &Path, to: &Path) -> PathBuf {
    let copy = to.join("locks.redb");
    std::fs::copy(store, &copy).unwrap();
    let wal = crate::log::dir_of(&copy);
    std::fs::create_dir_all(&wal).unwrap();
    for entry in std::fs::read_dir(crate::log::dir_of(store)).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name().to_string_lossy().ends_with(".seg") {
            std::fs::copy(entry.path(), wal.join(entry.file_name())).unwrap();
        }
    }
    copy
}

/// The segments of the store at `store`, in order.
fn segments(store: &Path) -> Vec<PathBuf> {
    let dir = crate::log::dir_of(store);
    crate::log::list(&dir, false)
        .unwrap()
        .into_iter()
        .map(|seq| crate::log::segment_path(&dir, seq))
        .collect()
}

/// Where each frame of a segment starts, and where each of its records
/// ends, read with the log's own parsers.
struct Layout {
    frames: Vec<usize>,
    record_ends: Vec<usize>,
    end: usize,
}

fn layout(segment: &Path) -> Layout {
    let data = std::fs::read(segment).unwrap();
    let (salt, _) = parse_segment_header(&data).unwrap();
    let mut layout = Layout {
        frames: Vec::new(),
        record_ends: Vec::new(),
        end: crate::log::format::SEGMENT_HEADER,
    };
    let mut at = layout.end;
    while let Some((len, _)) = parse_frame_header(&data, at, salt) {
        layout.frames.push(at);
        let mut record = at + FRAME_HEADER;
        while record < at + FRAME_HEADER + len {
            let payload_len = u32::from_le_bytes(data[record..record + 4].try_into().unwrap());
            record += RECORD_HEADER + payload_len as usize;
            layout.record_ends.push(record);
        }
        at += FRAME_HEADER + len;
        layout.end = at;
    }
    layout
}
