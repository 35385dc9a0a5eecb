//! The on-disk layout. Keys and records are small hand-rolled byte strings,
//! so the format is stable and does not depend on a serializer's version.
//!
//! - `locks`: key = `u16 BE namespace length | namespace | name`,
//!   value = `u8 version (1) | u64 BE token | u64 BE expires_at_ms | owner`.
//! - `leases` (since leases): key = the lock key layout with the lease id as
//!   the name, value = `u8 version (1) | u64 BE ttl_ms | u64 BE expires_at_ms`.
//!   A lock whose owner is a lease id of its namespace is held under that
//!   lease; a file written before leases simply has no such table yet.
//! - `meta`: `tokens_reserved` = the highest token that may have been issued;
//!   `log_segment` and `log_frame` = the last log segment and commit applied
//!   (absent in a store that never had a log: none).

use lockd_core::Claim;
use lockd_core::{Key, LeaseRecord, Record};
use redb::TableDefinition;

pub(crate) const LOCKS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("locks");
pub(crate) const LEASES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("leases");
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
pub(crate) const TOKENS_RESERVED: &str = "tokens_reserved";
pub(crate) const LOG_SEGMENT: &str = "log_segment";
pub(crate) const LOG_FRAME: &str = "log_frame";

const RECORD_V1: u8 = 1;

pub(crate) fn encode_key(key: &Key) -> Vec<u8> {
    // Namespaces are at most a few hundred bytes (limits are checked before
    // any op reaches the journal), far below u16::MAX.
    let ns = key.namespace.as_bytes();
    let mut out = Vec::with_capacity(2 + ns.len() + key.name.len());
    out.extend_from_slice(&(ns.len() as u16).to_be_bytes());
    out.extend_from_slice(ns);
    out.extend_from_slice(key.name.as_bytes());
    out
}

pub(crate) fn decode_key(bytes: &[u8]) -> Option<Key> {
    let len = u16::from_be_bytes(bytes.get(..2)?.try_into().ok()?) as usize;
    let namespace = std::str::from_utf8(bytes.get(2..2 + len)?).ok()?;
    let name = std::str::from_utf8(bytes.get(2 + len..)?).ok()?;
    Some(Key::new(namespace, name))
}

pub(crate) fn encode_record(record: &Record) -> Vec<u8> {
    let mut out = Vec::with_capacity(17 + record.owner.len());
    out.push(RECORD_V1);
    out.extend_from_slice(&record.token.to_be_bytes());
    out.extend_from_slice(&record.expires_at_ms.to_be_bytes());
    out.extend_from_slice(record.owner.as_bytes());
    out
}

pub(crate) fn decode_record(bytes: &[u8]) -> Option<Record> {
    if *bytes.first()? != RECORD_V1 {
        return None;
    }
    let token = u64::from_be_bytes(bytes.get(1..9)?.try_into().ok()?);
    let expires_at_ms = u64::from_be_bytes(bytes.get(9..17)?.try_into().ok()?);
    let owner = std::str::from_utf8(bytes.get(17..)?).ok()?.to_string();
    Some(Record {
        claim: Claim::Exclusive,
        owner,
        token,
        expires_at_ms,
    })
}

const LEASE_V1: u8 = 1;

pub(crate) fn encode_lease(record: &LeaseRecord) -> Vec<u8> {
    let mut out = Vec::with_capacity(17);
    out.push(LEASE_V1);
    out.extend_from_slice(&record.ttl_ms.to_be_bytes());
    out.extend_from_slice(&record.expires_at_ms.to_be_bytes());
    out
}

pub(crate) fn decode_lease(bytes: &[u8]) -> Option<LeaseRecord> {
    if bytes.len() != 17 || bytes[0] != LEASE_V1 {
        return None;
    }
    Some(LeaseRecord {
        ttl_ms: u64::from_be_bytes(bytes[1..9].try_into().ok()?),
        expires_at_ms: u64::from_be_bytes(bytes[9..17].try_into().ok()?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let key = Key::new("ns/x", "name\0with nul and ünïcode");
        assert_eq!(decode_key(&encode_key(&key)), Some(key));
        let record = Record {
            claim: Claim::Exclusive,
            owner: "o".repeat(256),
            token: u64::MAX,
            expires_at_ms: 1 << 53,
        };
        assert_eq!(decode_record(&encode_record(&record)), Some(record));
        let lease = LeaseRecord {
            ttl_ms: 30_000,
            expires_at_ms: u64::MAX,
        };
        assert_eq!(decode_lease(&encode_lease(&lease)), Some(lease));
        assert_eq!(decode_lease(&encode_lease(&lease)[..16]), None);
    }

    #[test]
    fn malformed_is_rejected_not_misread() {
        assert_eq!(decode_key(&[0]), None);
        assert_eq!(decode_key(&[0, 9, b'a']), None);
        assert_eq!(decode_record(&[]), None);
        assert_eq!(decode_record(&[2; 20]), None);
        assert_eq!(decode_record(&[1; 10]), None);
        assert_eq!(
            decode_record(&[1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0xff]),
            None
        );
    }
}
