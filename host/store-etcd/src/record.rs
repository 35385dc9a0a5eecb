//! The values stored at lock, waiter and lease keys: small JSON objects,
//! readable with `etcdctl get --prefix /lockd/`.

use lockd_core::{Claim, Durability, Grant, Holding, LeaseInfo, LockError, LockInfo};
use serde::{Deserialize, Serialize};

/// Format version of the records, and of the prefix that holds them
/// ([`FormatRecord`]).
pub(crate) const VERSION: u8 = 1;

/// The value of the prefix's format key: the format of every record under
/// it. A lockd that writes records of a new format raises it, so an older
/// lockd refuses the prefix at start instead of misreading them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FormatRecord {
    pub v: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum StoredDurability {
    Persistent,
    Ephemeral,
}

impl From<Durability> for StoredDurability {
    fn from(d: Durability) -> Self {
        match d {
            Durability::Persistent => StoredDurability::Persistent,
            Durability::Ephemeral => StoredDurability::Ephemeral,
        }
    }
}

impl From<StoredDurability> for Durability {
    fn from(d: StoredDurability) -> Self {
        match d {
            StoredDurability::Persistent => Durability::Persistent,
            StoredDurability::Ephemeral => Durability::Ephemeral,
        }
    }
}

/// The value of a lock key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LockRecord {
    pub v: u8,
    pub owner: String,
    /// The authority on expiry: the lock is free once the clock reaches it,
    /// whether or not etcd's lease has removed the key yet.
    pub expires_at_ms: u64,
    pub durability: StoredDurability,
    /// The fencing token. Absent on a fresh grant, where the token is the
    /// key's `mod_revision` (the revision of the granting transaction,
    /// unknown until it commits); a refresh writes it here, because the
    /// refresh moves `mod_revision` but must keep the token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    /// The waiter this grant was handed to, so that waiter recognises it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiter: Option<String>,
    /// Held under the lease whose id is `owner`: the lease's record lists
    /// it, its expiry is the lease's, and only the lease moves it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub lease: bool,
    /// When this grant was made (fresh or handed over; a refresh keeps
    /// it), for the events that end it. Absent in records written before
    /// lockd kept it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquired_at_ms: Option<u64>,
    /// Shared or a permit; absent: exclusive (every record written before
    /// lockd had claims).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<StoredClaim>,
    /// For a permit: the semaphore's number of permits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// The lock-delay of the grant's namespace on the host that granted it
    /// (docs/contract.md#c23-lock-delay): once the grant expires or is
    /// force-released, its place stays taken this long.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lock_delay_ms: u64,
    /// When a force-release ended the grant; it stays in the record (as a
    /// delay) until `ended_at_ms + lock_delay_ms`. An expiry sets it to the
    /// expiry when the grant has a delay to serve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at_ms: Option<u64>,
    /// For an election's leader: the value it proclaims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// For an ephemeral grant: the session of the host it belongs to. It
    /// holds only while that session's key lives (see `name.rs`), since
    /// beside other grants its key is not on that session's lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<i64>,
    /// The name's other grants (shared holders, permits, delays being
    /// served), each with its token; this record is the most recent one.
    /// Empty for an exclusive lock, whose key holds its grant alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub others: Vec<LockRecord>,
}

/// A grant's claim as stored; exclusive is the absence of one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum StoredClaim {
    Shared,
    Permit,
    /// Kept faithfully should one be stored; `lock` never takes one.
    Leader,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The value of a waiter key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct WaiterRecord {
    pub v: u8,
    /// Unique among all waiters ever: `<session lease hex>-<sequence>`.
    pub id: String,
    pub owner: String,
    pub ttl_ms: u64,
    pub durability: StoredDurability,
    /// The waiter's session lease: its key's lease, and the lease of an
    /// ephemeral grant handed to it.
    pub session: i64,
    /// The lease (an id of the lock's namespace) this waiter takes the lock
    /// under: a hand-off gives it the lease's expiry and durability and
    /// adds it to the lease's record, or drops the waiter if the lease has
    /// ended. `owner` is the lease id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,
    /// What the waiter asks for; absent: exclusive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<StoredClaim>,
    /// For a permit: the semaphore's number of permits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// The lock-delay its grant will carry (its host's, for its namespace).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lock_delay_ms: u64,
    /// For a candidate of an election: the value it will proclaim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// The value of a lease key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LeaseRecord {
    pub v: u8,
    /// Every refresh moves the expiry to now + this.
    pub ttl_ms: u64,
    /// The authority on expiry, as for locks; every lock under the lease
    /// carries the same expiry in its own record.
    pub expires_at_ms: u64,
    pub durability: StoredDurability,
    /// For an ephemeral lease: the session lease of the host that granted
    /// it, which carries its key and the keys of all its locks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<i64>,
    /// The names of the locks held under the lease, sorted, without
    /// duplicates. Every transaction that grants, hands over or releases
    /// such a lock rewrites this list, guarded by the lease key's
    /// `mod_revision`.
    pub locks: Vec<String>,
}

impl LeaseRecord {
    pub(crate) fn new(
        ttl_ms: u64,
        expires_at_ms: u64,
        durability: Durability,
        session: Option<i64>,
    ) -> Self {
        LeaseRecord {
            v: VERSION,
            ttl_ms,
            expires_at_ms,
            durability: durability.into(),
            session,
            locks: Vec::new(),
        }
    }

    /// Whether the lease has not run out at `now_ms`.
    pub(crate) fn live(&self, now_ms: u64) -> bool {
        self.expires_at_ms > now_ms
    }

    /// Adds `name` to the lock list (kept sorted, without duplicates).
    pub(crate) fn add(&mut self, name: &str) {
        if let Err(at) = self.locks.binary_search_by(|n| n.as_str().cmp(name)) {
            self.locks.insert(at, name.to_string());
        }
    }

    /// Whether the lease lists `name` or has room for it under `max`
    /// locks.
    pub(crate) fn has_room_for(&self, name: &str, max: usize) -> bool {
        self.locks.iter().any(|n| n == name) || self.locks.len() < max
    }

    /// Removes `name` from the lock list; whether it was there.
    pub(crate) fn remove(&mut self, name: &str) -> bool {
        match self.locks.binary_search_by(|n| n.as_str().cmp(name)) {
            Ok(at) => {
                self.locks.remove(at);
                true
            }
            Err(_) => false,
        }
    }

    pub(crate) fn info(&self) -> LeaseInfo {
        LeaseInfo {
            ttl_ms: self.ttl_ms,
            expires_at_ms: self.expires_at_ms,
            durability: self.durability.into(),
            locks: self.locks.clone(),
        }
    }
}

impl LockRecord {
    /// A fresh grant made at `now_ms`.
    pub(crate) fn fresh(
        owner: &str,
        now_ms: u64,
        expires_at_ms: u64,
        durability: Durability,
        waiter: Option<String>,
    ) -> Self {
        LockRecord {
            v: VERSION,
            owner: owner.to_string(),
            expires_at_ms,
            durability: durability.into(),
            token: None,
            waiter,
            lease: false,
            acquired_at_ms: Some(now_ms),
            claim: None,
            permits: None,
            lock_delay_ms: 0,
            ended_at_ms: None,
            value: None,
            session: None,
            others: Vec::new(),
        }
    }

    /// The same record, an ephemeral grant of the session `session`.
    pub(crate) fn on_session(mut self, session: Option<i64>) -> Self {
        if Durability::from(self.durability) == Durability::Ephemeral {
            self.session = session;
        }
        self
    }

    /// The same record with `claim` and `lock_delay_ms`.
    pub(crate) fn claiming(mut self, claim: Claim, lock_delay_ms: u64) -> Self {
        (self.claim, self.permits) = stored_claim(claim);
        self.lock_delay_ms = lock_delay_ms;
        self
    }

    /// What the grant holds.
    pub(crate) fn claim(&self) -> Claim {
        claim_of(self.claim, self.permits)
    }
}

/// A claim as stored: the claim field and, for a permit, the count.
pub(crate) fn stored_claim(claim: Claim) -> (Option<StoredClaim>, Option<u32>) {
    match claim {
        Claim::Exclusive => (None, None),
        Claim::Shared => (Some(StoredClaim::Shared), None),
        Claim::Permit { permits } => (Some(StoredClaim::Permit), Some(permits)),
        Claim::Leader => (Some(StoredClaim::Leader), None),
    }
}

/// The claim stored as `claim` and `permits`.
pub(crate) fn claim_of(claim: Option<StoredClaim>, permits: Option<u32>) -> Claim {
    match claim {
        None => Claim::Exclusive,
        Some(StoredClaim::Shared) => Claim::Shared,
        Some(StoredClaim::Permit) => Claim::Permit {
            permits: permits.unwrap_or(1),
        },
        Some(StoredClaim::Leader) => Claim::Leader,
    }
}

impl WaiterRecord {
    pub(crate) fn new(
        id: String,
        owner: &str,
        ttl_ms: u64,
        durability: Durability,
        session: i64,
        lease: Option<String>,
    ) -> Self {
        WaiterRecord {
            v: VERSION,
            id,
            owner: owner.to_string(),
            ttl_ms,
            durability: durability.into(),
            session,
            lease,
            claim: None,
            permits: None,
            lock_delay_ms: 0,
            value: None,
        }
    }

    /// The same waiter asking for `claim`, its grant to carry
    /// `lock_delay_ms`.
    pub(crate) fn claiming(mut self, claim: Claim, lock_delay_ms: u64) -> Self {
        (self.claim, self.permits) = stored_claim(claim);
        self.lock_delay_ms = lock_delay_ms;
        self
    }

    /// What the waiter asks for.
    pub(crate) fn claim(&self) -> Claim {
        claim_of(self.claim, self.permits)
    }
}

pub(crate) fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing plain structs of strings and integers cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

pub(crate) fn from_json<T: for<'de> Deserialize<'de>>(
    key: &[u8],
    value: &[u8],
) -> Result<T, LockError> {
    serde_json::from_slice(value).map_err(|e| {
        LockError::Unavailable(format!(
            "etcd key {:?} holds a value lockd cannot read ({e}); \
             was it written by something other than lockd?",
            String::from_utf8_lossy(key)
        ))
    })
}

/// A lock key as read: its record, its etcd metadata and its token.
#[derive(Clone, Debug)]
pub(crate) struct Held {
    pub mod_revision: i64,
    pub rec: LockRecord,
    pub token: u64,
}

impl Held {
    /// Whether the grant holds at `now_ms`: not ended, not expired.
    pub(crate) fn live(&self, now_ms: u64) -> bool {
        self.rec.ended_at_ms.is_none() && self.rec.expires_at_ms > now_ms
    }

    /// When the grant ends (or ended): its force-release, else its expiry.
    pub(crate) fn end(&self) -> u64 {
        self.rec.ended_at_ms.unwrap_or(self.rec.expires_at_ms)
    }

    /// Until when its place stays taken: its end plus its lock-delay.
    pub(crate) fn blocks_until(&self) -> u64 {
        self.end().saturating_add(self.rec.lock_delay_ms)
    }

    /// Whether its place is taken at `now_ms` (held, or a delay).
    pub(crate) fn blocks(&self, now_ms: u64) -> bool {
        self.blocks_until() > now_ms
    }

    /// The record to write back: its token in it, and no other grants.
    pub(crate) fn stored(&self) -> LockRecord {
        let mut rec = self.rec.clone();
        rec.token = Some(self.token);
        rec.others = Vec::new();
        rec
    }

    /// How a listing or `describe` shows it.
    pub(crate) fn holding(&self) -> Holding {
        Holding {
            info: self.info(),
            claim: self.rec.claim(),
            acquired_at_ms: self.rec.acquired_at_ms,
        }
    }

    /// How `busy` shows it: a delay with its end as the expiry.
    pub(crate) fn busy_info(&self, now_ms: u64) -> LockInfo {
        let mut info = self.info();
        if !self.live(now_ms) {
            info.expires_at_ms = self.blocks_until();
        }
        info
    }

    pub(crate) fn info(&self) -> LockInfo {
        LockInfo {
            owner: self.rec.owner.clone(),
            fencing_token: self.token,
            expires_at_ms: self.rec.expires_at_ms,
            durability: self.rec.durability.into(),
        }
    }

    pub(crate) fn grant(&self) -> Grant {
        Grant {
            fencing_token: self.token,
            expires_at_ms: self.rec.expires_at_ms,
        }
    }
}

/// A waiter key as read.
#[derive(Clone, Debug)]
pub(crate) struct Queued {
    pub key: Vec<u8>,
    pub mod_revision: i64,
    pub rec: WaiterRecord,
}

impl Queued {
    pub(crate) fn from_kv(kv: &etcd_client::KeyValue) -> Result<Queued, LockError> {
        Ok(Queued {
            key: kv.key().to_vec(),
            mod_revision: kv.mod_revision(),
            rec: from_json(kv.key(), kv.value())?,
        })
    }
}

/// A lease key as read.
#[derive(Clone, Debug)]
pub(crate) struct Leased {
    pub mod_revision: i64,
    pub rec: LeaseRecord,
}

impl Leased {
    pub(crate) fn from_kv(kv: &etcd_client::KeyValue) -> Result<Leased, LockError> {
        Ok(Leased {
            mod_revision: kv.mod_revision(),
            rec: from_json(kv.key(), kv.value())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_stay_small() {
        let r = LockRecord::fresh("o1", 7, 17, Durability::Ephemeral, None);
        let json = to_json(&r);
        assert_eq!(
            std::str::from_utf8(&json).unwrap(),
            r#"{"v":1,"owner":"o1","expires_at_ms":17,"durability":"ephemeral","acquired_at_ms":7}"#
        );
        assert_eq!(from_json::<LockRecord>(b"k", &json).unwrap(), r);
        // Records written before `acquired_at_ms` existed still read.
        let old: LockRecord = from_json(
            b"k",
            br#"{"v":1,"owner":"o1","expires_at_ms":17,"durability":"ephemeral"}"#,
        )
        .unwrap();
        assert_eq!(old.acquired_at_ms, None);
        let mut leased = r.clone();
        leased.lease = true;
        assert!(std::str::from_utf8(&to_json(&leased))
            .unwrap()
            .ends_with(r#","lease":true,"acquired_at_ms":7}"#));
        assert_eq!(
            from_json::<LockRecord>(b"k", &to_json(&leased)).unwrap(),
            leased
        );
        let mut l = LeaseRecord::new(1_000, 17, Durability::Persistent, None);
        for n in ["b", "a", "b", "c"] {
            l.add(n);
        }
        assert!(l.remove("c") && !l.remove("c"));
        assert!(l.has_room_for("a", 2) && !l.has_room_for("c", 2) && l.has_room_for("c", 3));
        assert_eq!(
            std::str::from_utf8(&to_json(&l)).unwrap(),
            r#"{"v":1,"ttl_ms":1000,"expires_at_ms":17,"durability":"persistent","locks":["a","b"]}"#
        );
        assert!(matches!(
            from_json::<LockRecord>(b"k", b"nope"),
            Err(LockError::Unavailable(m)) if m.contains("\"k\"")
        ));
    }
}
