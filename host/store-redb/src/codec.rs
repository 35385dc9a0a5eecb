//! The on-disk layout. Keys and records are small hand-rolled byte strings,
//! so the format is stable and does not depend on a serializer's version.
//!
//! - `locks`: key = `u16 BE namespace length | namespace | name`,
//!   value = `u8 version (1) | u64 BE token | u64 BE expires_at_ms | owner`.
//! - `leases` (since leases): key = the lock key layout with the lease id as
//!   the name, value = `u8 version (1) | u64 BE ttl_ms | u64 BE expires_at_ms`.
//!   A lock whose owner is a lease id of its namespace is held under that
//!   lease; a file written before leases simply has no such table yet.
//! - `shares`: one row per holder of a name held shared or of a semaphore
//!   (a name has either a `locks` row or share rows, never both).
//!   key = `u16 BE namespace length | namespace | u32 BE name length | name
//!   | owner`, so a name's holders sort together and no name and owner can
//!   pass for another; value = `u8 version (1) | u64 BE token | u64 BE
//!   expires_at_ms | u8 claim`, the claim `1` shared, `2` permit followed
//!   by `u32 BE permits`, or `3` an election's leader followed by the UTF-8
//!   value it proclaimed (to the end). A `locks` row is always
//!   [`Claim::Exclusive`].
//! - `meta`: `format_version` = the store's format ([`STORE_FORMAT`]; absent
//!   in a store written before versions, which is format 1 and gets it at its
//!   next open); `tokens_reserved` = the highest token that may have been
//!   issued; `log_segment` and `log_frame` = the last log segment and commit
//!   applied (absent in a store that never had a log: none).
//!
//! A store whose `format_version` is above [`STORE_FORMAT`] is refused
//! before anything is written to it. Values carry their own version byte
//! too, so a later format can add a kind of record beside these.

use lockd_core::Claim;
use lockd_core::{Key, LeaseRecord, Record};
use redb::TableDefinition;

pub(crate) const LOCKS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("locks");
pub(crate) const LEASES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("leases");
pub(crate) const SHARES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("shares");
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
pub(crate) const TOKENS_RESERVED: &str = "tokens_reserved";
pub(crate) const LOG_SEGMENT: &str = "log_segment";
pub(crate) const LOG_FRAME: &str = "log_frame";
pub(crate) const FORMAT_VERSION: &str = "format_version";

/// The format version of the store file this lockd writes, and the newest
/// it reads. Format 1 is the format of stores written before the version
/// was recorded.
pub const STORE_FORMAT: u32 = 1;

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
        value: None,
    })
}

const SHARE_V1: u8 = 1;
const CLAIM_SHARED: u8 = 1;
const CLAIM_PERMIT: u8 = 2;
const CLAIM_LEADER: u8 = 3;

pub(crate) fn encode_share_key(key: &Key, owner: &str) -> Vec<u8> {
    let (ns, name) = (key.namespace.as_bytes(), key.name.as_bytes());
    let mut out = Vec::with_capacity(6 + ns.len() + name.len() + owner.len());
    out.extend_from_slice(&(ns.len() as u16).to_be_bytes());
    out.extend_from_slice(ns);
    // Names are far below 4 GiB: a u32 length cannot be cut short.
    out.extend_from_slice(&(name.len() as u32).to_be_bytes());
    out.extend_from_slice(name);
    out.extend_from_slice(owner.as_bytes());
    out
}

pub(crate) fn decode_share_key(bytes: &[u8]) -> Option<(Key, String)> {
    let ns_len = u16::from_be_bytes(bytes.get(..2)?.try_into().ok()?) as usize;
    let namespace = std::str::from_utf8(bytes.get(2..2 + ns_len)?).ok()?;
    let rest = bytes.get(2 + ns_len..)?;
    let name_len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let name = std::str::from_utf8(rest.get(4..4usize.checked_add(name_len)?)?).ok()?;
    let owner = std::str::from_utf8(rest.get(4 + name_len..)?).ok()?;
    Some((Key::new(namespace, name), owner.to_string()))
}

/// The value of a share row: `None` for an exclusive record, which belongs
/// in `locks` (the journal refuses such an op before it is written).
pub(crate) fn encode_share(record: &Record) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(22);
    out.push(SHARE_V1);
    out.extend_from_slice(&record.token.to_be_bytes());
    out.extend_from_slice(&record.expires_at_ms.to_be_bytes());
    match record.claim {
        Claim::Exclusive => return None,
        Claim::Shared => out.push(CLAIM_SHARED),
        Claim::Permit { permits } => {
            out.push(CLAIM_PERMIT);
            out.extend_from_slice(&permits.to_be_bytes());
        }
        Claim::Leader => {
            out.push(CLAIM_LEADER);
            out.extend_from_slice(record.value.as_deref().unwrap_or_default().as_bytes());
        }
    }
    Some(out)
}

/// A share row's record, its owner taken from the row's key; what is wrong
/// with it otherwise.
pub(crate) fn decode_share(bytes: &[u8], owner: &str) -> Result<Record, String> {
    let (Some(&SHARE_V1), Some(token), Some(expires), Some(&tag)) = (
        bytes.first(),
        bytes.get(1..9),
        bytes.get(9..17),
        bytes.get(17),
    ) else {
        return Err(format!(
            "it is not a share record of version {SHARE_V1} ({} bytes)",
            bytes.len()
        ));
    };
    let mut value = None;
    let (claim, len) = match tag {
        CLAIM_SHARED => (Claim::Shared, 18),
        CLAIM_PERMIT => {
            let permits = bytes.get(18..22).ok_or("its permit count is cut short")?;
            let permits = u32::from_be_bytes(permits.try_into().unwrap_or_default());
            (Claim::Permit { permits }, 22)
        }
        CLAIM_LEADER => {
            let proclaimed = std::str::from_utf8(&bytes[18..])
                .map_err(|_| "its leader's value is not UTF-8".to_string())?;
            value = Some(proclaimed.to_string());
            (Claim::Leader, bytes.len())
        }
        other => {
            return Err(format!(
                "its claim is {other}, which this lockd does not know (1 shared, 2 permit, \
                 3 leader); open it with the lockd that wrote it"
            ))
        }
    };
    if bytes.len() != len {
        return Err(format!("it is {} bytes long, not {len}", bytes.len()));
    }
    Ok(Record {
        claim,
        owner: owner.to_string(),
        token: u64::from_be_bytes(token.try_into().unwrap_or_default()),
        expires_at_ms: u64::from_be_bytes(expires.try_into().unwrap_or_default()),
        value,
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
            value: None,
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
    fn shares_round_trip() {
        let key = Key::new("ns/x", "name\0with nul and ünïcode");
        for claim in [
            Claim::Shared,
            Claim::Permit { permits: 1 },
            Claim::Permit { permits: u32::MAX },
        ] {
            let record = Record {
                value: None,
                claim,
                owner: "ö".repeat(128),
                token: u64::MAX,
                expires_at_ms: 1 << 53,
            };
            let row_key = encode_share_key(&key, &record.owner);
            let (decoded_key, owner) = decode_share_key(&row_key).unwrap();
            assert_eq!(
                (&decoded_key, owner.as_str()),
                (&key, record.owner.as_str())
            );
            let value = encode_share(&record).unwrap();
            assert_eq!(decode_share(&value, &owner), Ok(record));
        }
        let exclusive = Record {
            value: None,
            claim: Claim::Exclusive,
            owner: "o".to_string(),
            token: 1,
            expires_at_ms: 2,
        };
        assert_eq!(encode_share(&exclusive), None);
        // An empty owner and name are still told apart.
        let empty = encode_share_key(&Key::new("", ""), "");
        assert_eq!(
            decode_share_key(&empty),
            Some((Key::new("", ""), String::new()))
        );
    }

    #[test]
    fn share_keys_group_a_name_and_never_collide() {
        let row = |ns: &str, name: &str, owner: &str| encode_share_key(&Key::new(ns, name), owner);
        // The same bytes split differently between name and owner.
        assert_ne!(row("ns", "ab", "c"), row("ns", "a", "bc"));
        assert_ne!(row("n", "sab", "c"), row("ns", "ab", "c"));
        // A name's holders sort together, apart from a name it prefixes.
        let mut rows = [
            row("ns", "a", "z"),
            row("ns", "ab", "a"),
            row("ns", "a", "a"),
            row("ns", "b", "m"),
        ];
        rows.sort();
        let names: Vec<_> = rows
            .iter()
            .map(|r| decode_share_key(r).unwrap())
            .map(|(k, owner)| format!("{}:{owner}", k.name))
            .collect();
        assert_eq!(names, ["a:a", "a:z", "b:m", "ab:a"]);
    }

    #[test]
    fn malformed_shares_are_rejected_not_misread() {
        assert_eq!(decode_share_key(&[]), None);
        assert_eq!(decode_share_key(&[0, 1, b'n', 0, 0, 0]), None);
        assert_eq!(decode_share_key(&[0, 0, 0, 0, 0, 9, b'a']), None);
        assert_eq!(decode_share_key(&[0, 0, 0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(decode_share_key(&[0, 0, 0, 0, 0, 1, 0xff]), None);
        let shared = encode_share(&Record {
            value: None,
            claim: Claim::Shared,
            owner: String::new(),
            token: 5,
            expires_at_ms: 6,
        })
        .unwrap();
        let permit = encode_share(&Record {
            value: None,
            claim: Claim::Permit { permits: 3 },
            owner: String::new(),
            token: 5,
            expires_at_ms: 6,
        })
        .unwrap();
        for cut in 0..shared.len() {
            assert!(decode_share(&shared[..cut], "o").is_err(), "cut {cut}");
        }
        for cut in 0..permit.len() {
            assert!(decode_share(&permit[..cut], "o").is_err(), "cut {cut}");
        }
        assert!(decode_share(&[shared.clone(), vec![0]].concat(), "o").is_err());
        let mut version = shared.clone();
        version[0] = 2;
        assert!(decode_share(&version, "o").is_err());
        let mut unknown = shared.clone();
        unknown[17] = 4;
        let why = decode_share(&unknown, "o").unwrap_err();
        assert!(why.contains("claim is 4"), "{why}");
        // A leader's value runs to the end and must be UTF-8.
        let leader = Record {
            value: Some("10.0.0.7:8080 ü".to_string()),
            claim: Claim::Leader,
            owner: "candidate".to_string(),
            token: 9,
            expires_at_ms: 10,
        };
        let encoded = encode_share(&leader).unwrap();
        assert_eq!(decode_share(&encoded, "candidate"), Ok(leader));
        let mut not_utf8 = encoded;
        not_utf8.push(0xff);
        assert!(decode_share(&not_utf8, "candidate").is_err());
        let mut exclusive = shared;
        exclusive[17] = 0;
        assert!(decode_share(&exclusive, "o").is_err());
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
