//! The log's bytes. Hand-rolled, little-endian and versioned, so the format
//! does not depend on a serializer's version.
//!
//! - **Segment** `<16 hex digits: its sequence number>.seg`: a 32-byte header
//!   (`"LOCKDLOG" | u32 version (1) | u32 salt | u64 sequence | u32 reserved
//!   (0) | u32 crc`), then frames, then zeros up to its preallocated size.
//! - **Frame**, one group commit: `u32 length of its records | u64 frame
//!   sequence | u32 crc of those 12 bytes`, then its records.
//! - **Record**, one journal op: `u32 payload length | u32 crc of the length
//!   and payload | payload`.
//!
//! Every crc is crc32 seeded with the segment's random salt, so bytes a
//! client chose (an owner, a name) can never pass for a frame or record of
//! the log they are stored in.
//!
//! A payload is a tag and its fields, keys and values in the encodings of the
//! redb tables (`codec`), each as `u32 length | bytes`:
//! `1 Put key record`, `2 Delete key`, `3 PutLease key lease`,
//! `4 DeleteLease key`, `5 Batch u32 count op...`, `6 ReserveTokens u64`,
//! `7 PutShare share-key share`, `8 DeleteShare share-key` (a share-key
//! names the lock and the holder's owner: the `shares` table's key).

use lockd_core::{Claim, JournalOp};

use crate::codec;
use crate::damage::{Damage, Finding};

pub(crate) const SEGMENT_MAGIC: &[u8; 8] = b"LOCKDLOG";
pub(crate) const SEGMENT_VERSION: u32 = 1;
pub(crate) const SEGMENT_HEADER: usize = 32;
pub(crate) const FRAME_HEADER: usize = 16;
pub(crate) const RECORD_HEADER: usize = 8;

const PUT: u8 = 1;
const DELETE: u8 = 2;
const PUT_LEASE: u8 = 3;
const DELETE_LEASE: u8 = 4;
const BATCH: u8 = 5;
const RESERVE_TOKENS: u8 = 6;
const PUT_SHARE: u8 = 7;
const DELETE_SHARE: u8 = 8;

/// Batches nest (a batch may hold batches); a record nesting deeper than
/// this is not one lockd wrote.
const MAX_DEPTH: usize = 8;

/// One op of a record, borrowing the keys and values in their table
/// encodings, ready to be written into redb as they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LogOp<'a> {
    Put { key: &'a [u8], value: &'a [u8] },
    Delete { key: &'a [u8] },
    PutLease { key: &'a [u8], value: &'a [u8] },
    DeleteLease { key: &'a [u8] },
    PutShare { key: &'a [u8], value: &'a [u8] },
    DeleteShare { key: &'a [u8] },
    ReserveTokens { up_to: u64 },
}

pub(crate) fn crc(salt: u32, parts: &[&[u8]]) -> u32 {
    let mut hasher = crc32fast::Hasher::new_with_initial(salt);
    for part in parts {
        hasher.update(part);
    }
    hasher.finalize()
}

pub(crate) fn segment_header(seq: u64, salt: u32) -> [u8; SEGMENT_HEADER] {
    let mut out = [0u8; SEGMENT_HEADER];
    out[..8].copy_from_slice(SEGMENT_MAGIC);
    out[8..12].copy_from_slice(&SEGMENT_VERSION.to_le_bytes());
    out[12..16].copy_from_slice(&salt.to_le_bytes());
    out[16..24].copy_from_slice(&seq.to_le_bytes());
    let sum = crc(0, &[&out[..28]]);
    out[28..32].copy_from_slice(&sum.to_le_bytes());
    out
}

/// The salt and sequence number of a segment header, or what is wrong.
/// A newer version is told apart before the checksum (a later header may be
/// laid out otherwise), as long as it is a plausible one: a version above
/// 65535 is a damaged header.
pub(crate) fn parse_segment_header(bytes: &[u8]) -> Result<(u32, u64), HeaderError> {
    let Some(header) = bytes.get(..SEGMENT_HEADER) else {
        return Err(HeaderError::Damaged(
            Damage::CutShort,
            format!(
                "file cut short: it is {} bytes long, shorter than a segment header ({SEGMENT_HEADER})",
                bytes.len()
            ),
        ));
    };
    if &header[..8] != SEGMENT_MAGIC {
        return Err(HeaderError::Damaged(
            Damage::Checksum,
            "it does not start with a lockd log segment header".to_string(),
        ));
    }
    let version = u32_at(header, 8);
    if version > SEGMENT_VERSION && version <= 0xffff {
        return Err(HeaderError::Newer(version));
    }
    if crc(0, &[&header[..28]]) != u32_at(header, 28) || version != SEGMENT_VERSION {
        return Err(HeaderError::Damaged(
            Damage::Checksum,
            "its header fails its checksum".to_string(),
        ));
    }
    Ok((u32_at(header, 12), u64_at(header, 16)))
}

/// What is wrong with a segment header.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HeaderError {
    /// Damaged, cut short, or not a segment.
    Damaged(Damage, String),
    /// In a newer format version than [`SEGMENT_VERSION`].
    Newer(u32),
}

impl HeaderError {
    /// The finding, for the segment at `file`.
    pub(crate) fn finding(self, file: &std::path::Path) -> Finding {
        match self {
            HeaderError::Damaged(damage, what) => Finding::new(file, damage, what),
            HeaderError::Newer(found) => Finding::newer(file, found, SEGMENT_VERSION),
        }
    }
}

/// Appends an empty frame header, to be filled in by [`seal_frame`] once
/// the records follow it.
pub(crate) fn begin_frame(out: &mut Vec<u8>) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0; FRAME_HEADER]);
    start
}

pub(crate) fn seal_frame(out: &mut [u8], start: usize, seq: u64, salt: u32) {
    let len = (out.len() - start - FRAME_HEADER) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 12].copy_from_slice(&seq.to_le_bytes());
    let sum = crc(salt, &[&out[start..start + 12]]);
    out[start + 12..start + 16].copy_from_slice(&sum.to_le_bytes());
}

/// The records' length and the sequence of a valid frame header at `at`.
pub(crate) fn parse_frame_header(bytes: &[u8], at: usize, salt: u32) -> Option<(usize, u64)> {
    let header = bytes.get(at..at + FRAME_HEADER)?;
    let len = u32_at(header, 0);
    // A frame holds at least one record.
    if (len as usize) < RECORD_HEADER + 1 || crc(salt, &[&header[..12]]) != u32_at(header, 12) {
        return None;
    }
    Some((len as usize, u64_at(header, 4)))
}

/// Appends `op` as one record.
pub(crate) fn write_record(out: &mut Vec<u8>, op: &JournalOp, salt: u32) {
    let start = out.len();
    out.extend_from_slice(&[0; RECORD_HEADER]);
    encode_op(out, op);
    let len = (out.len() - start - RECORD_HEADER) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    let sum = crc(
        salt,
        &[&out[start..start + 4], &out[start + RECORD_HEADER..]],
    );
    out[start + 4..start + 8].copy_from_slice(&sum.to_le_bytes());
}

/// The payload of a valid record at `at`, which must end by `limit`.
pub(crate) fn parse_record(bytes: &[u8], at: usize, limit: usize, salt: u32) -> Option<&[u8]> {
    let header = bytes.get(at..at + RECORD_HEADER)?;
    let len = u32_at(header, 0) as usize;
    let end = (at + RECORD_HEADER).checked_add(len)?;
    if len == 0 || end > limit {
        return None;
    }
    let payload = bytes.get(at + RECORD_HEADER..end)?;
    (crc(salt, &[&header[..4], payload]) == u32_at(header, 4)).then_some(payload)
}

fn encode_op(out: &mut Vec<u8>, op: &JournalOp) {
    match op {
        JournalOp::Put(key, record) => {
            out.push(PUT);
            put_bytes(out, &codec::encode_key(key));
            put_bytes(out, &codec::encode_record(record));
        }
        JournalOp::Delete(key) => {
            out.push(DELETE);
            put_bytes(out, &codec::encode_key(key));
        }
        JournalOp::PutLease(key, lease) => {
            out.push(PUT_LEASE);
            put_bytes(out, &codec::encode_key(key));
            put_bytes(out, &codec::encode_lease(lease));
        }
        JournalOp::DeleteLease(key) => {
            out.push(DELETE_LEASE);
            put_bytes(out, &codec::encode_key(key));
        }
        JournalOp::Batch(ops) => {
            out.push(BATCH);
            out.extend_from_slice(&(ops.len() as u32).to_le_bytes());
            for op in ops {
                encode_op(out, op);
            }
        }
        JournalOp::PutShare(key, record) => {
            out.push(PUT_SHARE);
            put_bytes(out, &codec::encode_share_key(key, &record.owner));
            // `unstorable` refuses an exclusive share before it is queued.
            put_bytes(out, &codec::encode_share(record).unwrap_or_default());
        }
        JournalOp::DeleteShare(key, owner) => {
            out.push(DELETE_SHARE);
            put_bytes(out, &codec::encode_share_key(key, owner));
        }
        JournalOp::ReserveTokens { up_to } => {
            out.push(RESERVE_TOKENS);
            out.extend_from_slice(&up_to.to_le_bytes());
        }
    }
}

/// Why `op` cannot be written as it is, if it cannot: a share record must
/// hold the name shared or a permit, and a lock record exclusively (the
/// tables keep the claim only where it can vary). An engine bug, refused
/// before anything is written rather than recovered as something else.
pub(crate) fn unstorable(op: &JournalOp) -> Option<String> {
    match op {
        JournalOp::Put(key, record) if record.claim != Claim::Exclusive => Some(format!(
            "the lock record of {key:?} holds it {}, not exclusive: only shares hold a name shared \
             or a permit",
            record.claim.as_str()
        )),
        JournalOp::PutShare(key, record) if record.claim == Claim::Exclusive => Some(format!(
            "the share record of {key:?} holds it exclusive: an exclusive holder is a lock record"
        )),
        JournalOp::Batch(ops) => ops.iter().find_map(unstorable),
        _ => None,
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Decodes a record's payload into `ops` (a batch's ops in order), checking
/// that every key and value is one the tables can hold.
pub(crate) fn decode_payload<'a>(
    payload: &'a [u8],
    ops: &mut Vec<LogOp<'a>>,
) -> Result<(), String> {
    let mut reader = Reader(payload);
    decode_op(&mut reader, ops, 0)?;
    if !reader.0.is_empty() {
        return Err(format!("{} bytes follow its op", reader.0.len()));
    }
    Ok(())
}

fn decode_op<'a>(r: &mut Reader<'a>, ops: &mut Vec<LogOp<'a>>, depth: usize) -> Result<(), String> {
    let tag = r.take(1)?[0];
    let op = match tag {
        PUT => {
            let (key, value) = (r.key()?, r.bytes()?);
            codec::decode_record(value).ok_or("a lock record is malformed")?;
            LogOp::Put { key, value }
        }
        DELETE => LogOp::Delete { key: r.key()? },
        PUT_LEASE => {
            let (key, value) = (r.key()?, r.bytes()?);
            codec::decode_lease(value).ok_or("a lease record is malformed")?;
            LogOp::PutLease { key, value }
        }
        DELETE_LEASE => LogOp::DeleteLease { key: r.key()? },
        PUT_SHARE => {
            let key = r.share_key()?;
            let value = r.bytes()?;
            codec::decode_share(value, "")
                .map_err(|why| format!("a share record is malformed: {why}"))?;
            LogOp::PutShare { key, value }
        }
        DELETE_SHARE => LogOp::DeleteShare {
            key: r.share_key()?,
        },
        BATCH if depth < MAX_DEPTH => {
            let count = u32::from_le_bytes(r.take(4)?.try_into().unwrap_or_default());
            for _ in 0..count {
                decode_op(r, ops, depth + 1)?;
            }
            return Ok(());
        }
        BATCH => return Err("its batches nest too deep".to_string()),
        RESERVE_TOKENS => LogOp::ReserveTokens {
            up_to: u64::from_le_bytes(r.take(8)?.try_into().unwrap_or_default()),
        },
        other => return Err(format!("unknown op {other}")),
    };
    ops.push(op);
    Ok(())
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("it ends inside an op".to_string());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let len = u32::from_le_bytes(self.take(4)?.try_into().unwrap_or_default());
        self.take(len as usize)
    }

    fn key(&mut self) -> Result<&'a [u8], String> {
        let key = self.bytes()?;
        codec::decode_key(key).ok_or("a key is malformed")?;
        Ok(key)
    }

    fn share_key(&mut self) -> Result<&'a [u8], String> {
        let key = self.bytes()?;
        codec::decode_share_key(key).ok_or("a share key is malformed")?;
        Ok(key)
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default())
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use lockd_core::{Key, LeaseRecord, Record};

    use super::*;

    fn ops() -> Vec<JournalOp> {
        let key = Key::new("ns", "name\0ü");
        let record = Record {
            value: None,
            claim: Claim::Exclusive,
            owner: "o".repeat(300),
            token: u64::MAX,
            expires_at_ms: 1 << 50,
        };
        let lease = LeaseRecord {
            ttl_ms: 1,
            expires_at_ms: 2,
        };
        let share = |claim| Record {
            value: None,
            claim,
            owner: "reader ü".to_string(),
            token: 1 << 40,
            expires_at_ms: 3,
        };
        vec![
            JournalOp::Put(key.clone(), record.clone()),
            JournalOp::Delete(key.clone()),
            JournalOp::PutLease(key.clone(), lease),
            JournalOp::DeleteLease(key.clone()),
            JournalOp::ReserveTokens { up_to: 7 },
            JournalOp::Batch(vec![
                JournalOp::ReserveTokens { up_to: 9 },
                JournalOp::Batch(vec![JournalOp::Delete(key.clone())]),
                JournalOp::Put(key.clone(), record),
            ]),
            JournalOp::PutShare(key.clone(), share(Claim::Shared)),
            JournalOp::Batch(vec![
                JournalOp::PutShare(key.clone(), share(Claim::Permit { permits: 8 })),
                JournalOp::DeleteShare(key, "reader ü".to_string()),
            ]),
        ]
    }

    #[test]
    fn records_round_trip_and_flatten_batches() {
        let salt = 0x1234_5678;
        let mut out = Vec::new();
        for op in ops() {
            write_record(&mut out, &op, salt);
        }
        let mut at = 0;
        let mut decoded = Vec::new();
        while at < out.len() {
            let payload = parse_record(&out, at, out.len(), salt).unwrap();
            decode_payload(payload, &mut decoded).unwrap();
            at += RECORD_HEADER + payload.len();
        }
        let tags: Vec<_> = decoded
            .iter()
            .map(|op| match op {
                LogOp::Put { .. } => "put",
                LogOp::Delete { .. } => "delete",
                LogOp::PutLease { .. } => "put-lease",
                LogOp::DeleteLease { .. } => "delete-lease",
                LogOp::PutShare { .. } => "put-share",
                LogOp::DeleteShare { .. } => "delete-share",
                LogOp::ReserveTokens { .. } => "reserve",
            })
            .collect();
        let expected = [
            "put",
            "delete",
            "put-lease",
            "delete-lease",
            "reserve",
            "reserve",
            "delete",
            "put",
            "put-share",
            "put-share",
            "delete-share",
        ];
        assert_eq!(tags, expected);
        assert_eq!(decoded[5], LogOp::ReserveTokens { up_to: 9 });
        // The ops carry the tables' rows as they are.
        let key = Key::new("ns", "name\0ü");
        let share_key = codec::encode_share_key(&key, "reader ü");
        let LogOp::PutShare { key: row, value } = decoded[9] else {
            panic!("{:?}", decoded[9]);
        };
        assert_eq!(row, &share_key[..]);
        let permit = codec::decode_share(value, "reader ü").unwrap();
        assert_eq!(permit.claim, Claim::Permit { permits: 8 });
        assert_eq!(decoded[10], LogOp::DeleteShare { key: &share_key });
        // Another salt (another segment) reads none of it.
        assert_eq!(parse_record(&out, 0, out.len(), salt ^ 1), None);
    }

    #[test]
    fn damaged_or_cut_records_are_not_read() {
        let salt = 7;
        let mut out = Vec::new();
        write_record(&mut out, &ops()[0], salt);
        for cut in 0..out.len() {
            assert_eq!(parse_record(&out[..cut], 0, cut, salt), None, "cut {cut}");
        }
        for i in 0..out.len() {
            let mut bad = out.clone();
            bad[i] ^= 0x10;
            assert_eq!(parse_record(&bad, 0, bad.len(), salt), None, "flip {i}");
        }
        let mut frame = Vec::new();
        let start = begin_frame(&mut frame);
        write_record(&mut frame, &ops()[1], salt);
        seal_frame(&mut frame, start, 42, salt);
        assert_eq!(
            parse_frame_header(&frame, 0, salt),
            Some((frame.len() - FRAME_HEADER, 42))
        );
        assert_eq!(parse_frame_header(&[0; FRAME_HEADER], 0, salt), None);
        assert!(decode_payload(&[9], &mut Vec::new()).is_err());
        assert!(decode_payload(&[DELETE, 1, 0, 0, 0], &mut Vec::new()).is_err());
    }

    /// A share op is read back only whole and well-formed: every cut of its
    /// payload, a lock key where a share key belongs, an unknown claim and
    /// trailing bytes are errors, never another op.
    #[test]
    fn share_payloads_are_checked_strictly() {
        let key = Key::new("ns", "n");
        let share = Record {
            value: None,
            claim: Claim::Permit { permits: 2 },
            owner: "o".to_string(),
            token: 1,
            expires_at_ms: 2,
        };
        for op in [
            JournalOp::PutShare(key.clone(), share.clone()),
            JournalOp::DeleteShare(key.clone(), "o".to_string()),
        ] {
            let mut payload = Vec::new();
            encode_op(&mut payload, &op);
            assert_eq!(decode_payload(&payload, &mut Vec::new()), Ok(()));
            for cut in 0..payload.len() {
                assert!(
                    decode_payload(&payload[..cut], &mut Vec::new()).is_err(),
                    "{op:?} cut at {cut}"
                );
            }
            let mut longer = payload.clone();
            longer.push(0);
            assert!(decode_payload(&longer, &mut Vec::new()).is_err());
        }
        // A lock key (no u32 name length) is no share key.
        let mut lock_key = vec![DELETE_SHARE];
        put_bytes(&mut lock_key, &codec::encode_key(&Key::new("ns", "n\u{1}")));
        assert!(decode_payload(&lock_key, &mut Vec::new()).is_err());
        // The claim byte of a put-share is the payload's last byte but four.
        let mut payload = Vec::new();
        encode_op(&mut payload, &JournalOp::PutShare(key, share));
        let claim_at = payload.len() - 5;
        assert_eq!(payload[claim_at], 2);
        payload[claim_at] = 9;
        let why = decode_payload(&payload, &mut Vec::new()).unwrap_err();
        assert!(why.contains("claim is 9"), "{why}");
    }

    #[test]
    fn records_that_would_change_their_claim_are_unstorable() {
        let key = Key::new("ns", "n");
        let with = |claim| Record {
            value: None,
            claim,
            owner: "o".to_string(),
            token: 1,
            expires_at_ms: 2,
        };
        assert_eq!(
            unstorable(&JournalOp::Put(key.clone(), with(Claim::Exclusive))),
            None
        );
        assert_eq!(
            unstorable(&JournalOp::PutShare(key.clone(), with(Claim::Shared))),
            None
        );
        let put_shared = JournalOp::Put(key.clone(), with(Claim::Shared));
        assert!(unstorable(&put_shared).unwrap().contains("holds it shared"));
        let nested = JournalOp::Batch(vec![
            JournalOp::ReserveTokens { up_to: 1 },
            JournalOp::Batch(vec![JournalOp::PutShare(key, with(Claim::Exclusive))]),
        ]);
        assert!(unstorable(&nested).unwrap().contains("exclusive"));
    }

    #[test]
    fn segment_headers_check_themselves() {
        let header = segment_header(5, 99);
        assert_eq!(parse_segment_header(&header), Ok((99, 5)));
        let mut bad = header;
        bad[17] ^= 1;
        assert!(matches!(
            parse_segment_header(&bad),
            Err(HeaderError::Damaged(Damage::Checksum, why)) if why.contains("checksum")
        ));
        assert!(matches!(
            parse_segment_header(&header[..10]),
            Err(HeaderError::Damaged(Damage::CutShort, _))
        ));
        assert!(parse_segment_header(&[0; 32]).is_err());
        // A newer version is named as such, whatever its checksum.
        let mut newer = header;
        newer[8] = 3;
        assert_eq!(parse_segment_header(&newer), Err(HeaderError::Newer(3)));
    }
}
