//! Reading a segment back: at recovery, and when a finished segment is
//! checkpointed into redb.
//!
//! Only the last commit written can be torn: every commit is synced before
//! the next one is written, and a segment is never written again after a
//! failed write or a restart (the writer moves on to a new one). So a
//! damaged frame or record ends the segment if nothing valid follows it
//! there: that is a commit whose sync never completed, never acknowledged,
//! and it is dropped. If a valid commit follows, the damaged one had been
//! synced, and so acknowledged: the log is corrupt, and nothing is applied.

use std::path::Path;

use crate::damage::{Damage, Finding};

use super::format::{
    decode_payload, parse_frame_header, parse_record, parse_segment_header, LogOp, FRAME_HEADER,
    RECORD_HEADER, SEGMENT_HEADER,
};

/// Where the log stands before a segment: which commit its first frame may
/// carry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Position {
    /// The last commit read whole.
    pub(crate) last_whole: u64,
    /// The last commit whose frame header was read (whole or torn).
    pub(crate) last_seen: u64,
}

impl Position {
    /// After the commits checkpointed into redb, the last being `frame`.
    pub(crate) fn after(frame: u64) -> Position {
        Position {
            last_whole: frame,
            last_seen: frame,
        }
    }

    /// Whether `seq` may be the first frame of the next segment: the next
    /// commit, or a retry of the last one written. A failed write leaves
    /// its segment, and the writer writes the same commit again, its ops
    /// first, into a new segment: each attempt is a prefix of the next, so
    /// replaying an earlier attempt and then the later one ends in the
    /// later one's state.
    fn may_start_segment(self, seq: u64) -> bool {
        seq == self.last_whole + 1 || seq == self.last_seen
    }
}

/// How a segment's readable part ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tail {
    /// At zeros (the preallocated area), its end, or the given limit.
    Clean,
    /// At a torn commit, from this byte on: never acknowledged, dropped.
    Torn { offset: usize },
}

/// What reading a segment found.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scanned {
    pub(crate) position: Position,
    pub(crate) tail: Tail,
    /// Records applied.
    pub(crate) records: u64,
}

/// Why a scan stopped.
#[derive(Debug)]
pub(crate) enum ScanError {
    /// The segment is damaged: nothing of it may be trusted.
    Damaged(Finding),
    /// The visitor failed, with this message.
    Visit(String),
}

/// Reads segment `seq` (the bytes of `file`) up to `limit`, calling `visit`
/// with the ops of each whole record in order, and checks that its commits
/// continue the log from `position`. Findings name the file and the offset.
pub(crate) fn scan(
    file: &Path,
    data: &[u8],
    seq: u64,
    limit: usize,
    position: Position,
    visit: &mut dyn FnMut(&[LogOp<'_>]) -> Result<(), String>,
) -> Result<Scanned, ScanError> {
    let fail = |damage, what: String| ScanError::Damaged(Finding::new(file, damage, what));
    let (salt, header_seq) =
        parse_segment_header(data).map_err(|e| ScanError::Damaged(e.finding(file)))?;
    if header_seq != seq {
        return Err(fail(
            Damage::Sequence,
            format!("its header says segment {header_seq} but its name says {seq}"),
        ));
    }
    let data = &data[..limit.min(data.len())];
    let mut scanned = Scanned {
        position,
        tail: Tail::Clean,
        records: 0,
    };
    let mut ops = Vec::new();
    let mut first = true;
    let mut at = SEGMENT_HEADER;
    while at < data.len() {
        let Some((len, frame)) = parse_frame_header(data, at, salt) else {
            scanned.tail =
                end_of_log(data, at, None, salt).map_err(|e| fail(Damage::Checksum, e))?;
            return Ok(scanned);
        };
        let expected_next = scanned.position.last_whole + 1;
        let continues = if first {
            scanned.position.may_start_segment(frame)
        } else {
            frame == expected_next
        };
        if !continues {
            return Err(fail(
                Damage::Sequence,
                format!(
                    "the commit at byte {at} is number {frame}, where {expected_next} was \
                     expected: commits are missing (a segment file lost, or the store file \
                     replaced)"
                ),
            ));
        }
        first = false;
        scanned.position.last_seen = frame;
        let frame_end = at + FRAME_HEADER + len;
        let mut record = at + FRAME_HEADER;
        while record < frame_end {
            let Some(payload) = parse_record(data, record, frame_end, salt) else {
                scanned.tail = end_of_log(data, record, Some(frame_end), salt)
                    .map_err(|e| fail(Damage::Checksum, e))?;
                return Ok(scanned);
            };
            ops.clear();
            decode_payload(payload, &mut ops).map_err(|why| {
                fail(
                    Damage::Undecodable,
                    format!(
                        "the record at byte {record} passes its checksum but cannot be read \
                         ({why}): it was written by another version of lockd, or damaged"
                    ),
                )
            })?;
            visit(&ops).map_err(ScanError::Visit)?;
            scanned.records += 1;
            record += RECORD_HEADER + payload.len();
        }
        scanned.position.last_whole = frame;
        at = frame_end;
    }
    Ok(scanned)
}

/// The log's end at `at`, where no valid frame or record starts: clean
/// (zeros at a frame boundary), a torn last commit, or, if a valid frame
/// follows, corruption. `frame_end` is the end of the commit a record at
/// `at` belongs to; `None` at a frame boundary.
fn end_of_log(data: &[u8], at: usize, frame_end: Option<usize>, salt: u32) -> Result<Tail, String> {
    if let Some(later) = next_frame(data, at + 1, salt) {
        return Err(format!(
            "{}, yet a valid commit follows at byte {later}, so it had been written and synced: \
             the log is corrupt. Nothing was applied; restore the store from a backup, or move \
             the file aside to drop this segment and what follows it",
            what_fails(data, at, frame_end)
        ));
    }
    if frame_end.is_none() && data[at..].iter().all(|&b| b == 0) {
        Ok(Tail::Clean)
    } else {
        Ok(Tail::Torn { offset: at })
    }
}

/// What fails at `at`: a commit header (at a frame boundary) or a record.
fn what_fails(data: &[u8], at: usize, frame_end: Option<usize>) -> String {
    let Some(frame_end) = frame_end else {
        return format!("the commit header at byte {at} fails its checksum");
    };
    let len = data
        .get(at..at + 4)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap_or_default()) as usize);
    match len {
        Some(0) => format!("the record at byte {at} has length 0"),
        Some(len) if at + RECORD_HEADER + len > frame_end => format!(
            "the record at byte {at} says it is {len} bytes long, past the end of its commit \
             (byte {frame_end})"
        ),
        _ => format!("the record at byte {at} fails its checksum"),
    }
}

/// The offset of the first valid frame header at or after `from`.
fn next_frame(data: &[u8], from: usize, salt: u32) -> Option<usize> {
    let mut at = from;
    while at + FRAME_HEADER <= data.len() {
        // A frame's length is never zero: skip runs of zeros (the
        // preallocated area) without checksumming every offset.
        if data[at..at + 4] == [0; 4] {
            let next = data[at + 4..].iter().position(|&b| b != 0)?;
            at = (at + 4 + next).saturating_sub(3).max(at + 1);
            continue;
        }
        if parse_frame_header(data, at, salt).is_some() {
            return Some(at);
        }
        at += 1;
    }
    None
}
