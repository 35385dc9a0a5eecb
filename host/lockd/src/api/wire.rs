//! The REST API's wire format as types: every request body, every response
//! body, the `status` and `durability` words and the query string of
//! `GET /v1/locks`. The server parses requests and writes responses with
//! them; the CLI client (`lockd lock|unlock|extend|get|ls`) writes requests
//! and parses responses with them, so the two cannot drift apart.
//! `docs/openapi.json` describes the same bodies.
//!
//! - Requests refuse unknown fields, so a misspelt `wait_ms` is an error
//!   rather than ignored. Optional fields left out (`None`) are not written.
//! - Responses accept unknown fields (a newer server may add some), but a
//!   missing or mistyped field is an error: [`parse_reply`] names it.
//! - Response fields are declared in alphabetical order, the order in which
//!   the server has always written them, so responses stay byte for byte
//!   what they were.

use std::fmt;

use lockd_core::{
    Durability, ErrorKind, EventKind, Grant, LeaseGrant, LeaseInfo, LockEvent, LockInfo,
};
use serde::de::{self, DeserializeOwned, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// The path of `GET /v1/locks`.
pub const LIST_PATH: &str = "/v1/locks";

/// `POST /v1/locks/lock`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockRequest {
    /// The namespace; `default` if `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The lock name.
    pub name: String,
    /// Who takes the lock; `None` with `lease_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Lease length in milliseconds; given with `owner`, `None` with
    /// `lease_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// How long to wait in the lock's FIFO queue; 0 if `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// Durability of a fresh grant; persistent if `None`. `None` with
    /// `lease_id` (the lease's durability applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durability: Option<DurabilityWord>,
    /// Take the lock under this lease (docs/contract.md#c16-leases), in
    /// place of `owner` and `ttl_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
}

impl LockRequest {
    /// Where it is posted.
    pub const PATH: &'static str = "/v1/locks/lock";

    /// Who would hold the lock: exactly one of `owner` (with `ttl_ms`) and
    /// `lease_id` (without `ttl_ms` and `durability`). The error says which
    /// fields are wrong, as serde's do.
    pub fn holder(&self) -> Result<LockHolder<'_>, String> {
        match (&self.owner, &self.lease_id) {
            (Some(owner), None) => match self.ttl_ms {
                Some(ttl_ms) => Ok(LockHolder::Owner { owner, ttl_ms }),
                None => Err("missing field `ttl_ms` (a lock with `owner` needs it)".to_string()),
            },
            (None, Some(lease_id)) => {
                if self.ttl_ms.is_some() {
                    Err(
                        "`ttl_ms` is not allowed with `lease_id`: the lock has the lease's expiry"
                            .to_string(),
                    )
                } else if self.durability.is_some() {
                    Err(
                        "`durability` is not allowed with `lease_id`: the lock has the lease's durability"
                            .to_string(),
                    )
                } else {
                    Ok(LockHolder::Lease { lease_id })
                }
            }
            (Some(_), Some(_)) => {
                Err("`owner` and `lease_id` were both given; give exactly one".to_string())
            }
            (None, None) => Err("missing field `owner` (or `lease_id`)".to_string()),
        }
    }
}

/// Who takes a lock of a [`LockRequest`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockHolder<'a> {
    /// A plain lock.
    Owner {
        /// The owner.
        owner: &'a str,
        /// Its TTL in milliseconds.
        ttl_ms: u64,
    },
    /// A lock under a lease, owned by the lease id.
    Lease {
        /// The lease.
        lease_id: &'a str,
    },
}

/// `POST /v1/leases/grant`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseGrantRequest {
    /// The namespace; `default` if `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The lease's TTL in milliseconds; every refresh moves its expiry to
    /// now + this.
    pub ttl_ms: u64,
    /// Durability of the lease and its locks; persistent if `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durability: Option<DurabilityWord>,
}

impl LeaseGrantRequest {
    /// Where it is posted.
    pub const PATH: &'static str = "/v1/leases/grant";
}

/// `POST /v1/leases/refresh`, `/v1/leases/revoke` and `/v1/leases/get`:
/// one lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseRequest {
    /// The namespace; `default` if `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The lease's id, as granted.
    pub lease_id: String,
}

impl LeaseRequest {
    /// Where a refresh is posted.
    pub const REFRESH_PATH: &'static str = "/v1/leases/refresh";
    /// Where a revoke is posted.
    pub const REVOKE_PATH: &'static str = "/v1/leases/revoke";
    /// Where a get is posted.
    pub const GET_PATH: &'static str = "/v1/leases/get";
}

/// `POST /v1/locks/unlock`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnlockRequest {
    /// The namespace; `default` if `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The lock name.
    pub name: String,
    /// The owner that holds it.
    pub owner: String,
    /// Release only the grant with this token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
}

impl UnlockRequest {
    /// Where it is posted.
    pub const PATH: &'static str = "/v1/locks/unlock";
}

/// `POST /v1/locks/extend`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtendRequest {
    /// The namespace; `default` if `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The lock name.
    pub name: String,
    /// The owner that holds it.
    pub owner: String,
    /// New lease length from now, in milliseconds.
    pub ttl_ms: u64,
}

impl ExtendRequest {
    /// Where it is posted.
    pub const PATH: &'static str = "/v1/locks/extend";
}

/// `POST /v1/locks/force-unlock`: an operator releases a lock whoever
/// holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForceUnlockRequest {
    /// The namespace; `default` if `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The lock name.
    pub name: String,
}

impl ForceUnlockRequest {
    /// Where it is posted.
    pub const PATH: &'static str = "/v1/locks/force-unlock";
}

/// `POST /v1/locks/get`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GetRequest {
    /// The namespace; `default` if `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The lock name.
    pub name: String,
}

impl GetRequest {
    /// Where it is posted.
    pub const PATH: &'static str = "/v1/locks/get";
}

/// The query of `GET /v1/locks`: `?namespace=&prefix=`, URL-encoded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListQuery {
    /// The namespace; `default` if `None`.
    pub namespace: Option<String>,
    /// Only names starting with this; all if `None`.
    pub prefix: Option<String>,
}

impl ListQuery {
    /// Parses a query string (without the `?`). Unknown and repeated
    /// parameters are errors, like unknown fields in a body.
    pub fn parse(query: &str) -> Result<ListQuery, String> {
        let mut parsed = ListQuery::default();
        for (key, value) in parse_query(query)? {
            let slot = match key.as_str() {
                "namespace" => &mut parsed.namespace,
                "prefix" => &mut parsed.prefix,
                other => {
                    return Err(format!(
                        "unknown query parameter {other:?}; expected namespace or prefix"
                    ))
                }
            };
            if slot.replace(value).is_some() {
                return Err(format!("query parameter {key:?} given twice"));
            }
        }
        Ok(parsed)
    }

    /// The path and query to request: `/v1/locks?namespace=a%2Fb&prefix=job`.
    pub fn path(&self) -> String {
        let pairs: Vec<String> = [("namespace", &self.namespace), ("prefix", &self.prefix)]
            .into_iter()
            .filter_map(|(key, value)| Some(format!("{key}={}", percent_encode(value.as_ref()?))))
            .collect();
        if pairs.is_empty() {
            LIST_PATH.to_string()
        } else {
            format!("{LIST_PATH}?{}", pairs.join("&"))
        }
    }
}

/// The path of `GET /v1/events`, the Server-Sent Events stream.
pub const EVENTS_PATH: &str = "/v1/events";

/// The query of `GET /v1/events`: `?namespace=&prefix=&access_token=`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventQuery {
    /// Only events of this namespace; every namespace if `None`.
    pub namespace: Option<String>,
    /// Only events whose name starts with this; all if `None`.
    pub prefix: Option<String>,
    /// The bearer token, for clients that cannot send headers (a browser's
    /// `EventSource`); the `Authorization` header wins when both are given.
    pub access_token: Option<String>,
}

impl EventQuery {
    /// Parses a query string (without the `?`). Unknown and repeated
    /// parameters are errors.
    pub fn parse(query: &str) -> Result<EventQuery, String> {
        let mut parsed = EventQuery::default();
        for (key, value) in parse_query(query)? {
            let slot = match key.as_str() {
                "namespace" => &mut parsed.namespace,
                "prefix" => &mut parsed.prefix,
                "access_token" => &mut parsed.access_token,
                other => {
                    return Err(format!(
                    "unknown query parameter {other:?}; expected namespace, prefix or access_token"
                ))
                }
            };
            if slot.replace(value).is_some() {
                return Err(format!("query parameter {key:?} given twice"));
            }
        }
        Ok(parsed)
    }

    /// The path and query to request (without the token, which the CLI
    /// sends as a header).
    pub fn path(&self) -> String {
        let pairs: Vec<String> = [("namespace", &self.namespace), ("prefix", &self.prefix)]
            .into_iter()
            .filter_map(|(key, value)| Some(format!("{key}={}", percent_encode(value.as_ref()?))))
            .collect();
        if pairs.is_empty() {
            EVENTS_PATH.to_string()
        } else {
            format!("{EVENTS_PATH}?{}", pairs.join("&"))
        }
    }

    /// Whether `event` passes the filters.
    pub fn matches(&self, event: &LockEvent) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| *event.namespace == *ns)
            && self
                .prefix
                .as_deref()
                .is_none_or(|p| event.name.starts_with(p))
    }
}

/// One event of `GET /v1/events`, the JSON of an SSE `data:` line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// What happened: `acquired`, `extended`, `released`, `expired`,
    /// `handed_off`, `force_released`, `lease_granted`, `lease_revoked` or
    /// `lease_expired`.
    #[serde(rename = "type", with = "event_word")]
    pub kind: EventKind,
    /// The lock's (or lease's) namespace.
    pub namespace: String,
    /// The lock name; for lease events, the lease id.
    pub name: String,
    /// The holder concerned: the new one for `acquired` and `handed_off`,
    /// the one that left for `released`, `expired` and `force_released`.
    pub owner: String,
    /// The grant's fencing token; 0 for lease events.
    pub fencing_token: u64,
    /// When, Unix epoch milliseconds.
    pub at_ms: u64,
}

impl From<&LockEvent> for Event {
    fn from(e: &LockEvent) -> Self {
        Event {
            kind: e.kind,
            namespace: e.namespace.to_string(),
            name: e.name.to_string(),
            owner: e.owner.to_string(),
            fencing_token: e.fencing_token,
            at_ms: e.at_ms,
        }
    }
}

/// The final event of a stream that fell behind: `event: lagged`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaggedEvent {
    /// `lagged`.
    #[serde(rename = "type")]
    pub kind: String,
    /// How many events the stream missed before it was closed.
    pub missed: u64,
}

/// Serde of [`EventKind`] as its `type` word.
mod event_word {
    use super::*;

    pub fn serialize<S: Serializer>(kind: &EventKind, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(kind.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<EventKind, D::Error> {
        let word = String::deserialize(d)?;
        EventKind::from_word(&word).ok_or_else(|| {
            const WORDS: [&str; EventKind::ALL.len()] = {
                let mut words = [""; EventKind::ALL.len()];
                let mut i = 0;
                while i < words.len() {
                    words[i] = EventKind::ALL[i].as_str();
                    i += 1;
                }
                words
            };
            de::Error::unknown_variant(&word, &WORDS)
        })
    }
}

/// The `status` word of every response body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// `acquired`: `lock` granted.
    Acquired,
    /// `unlocked`: `unlock` released the lock.
    Unlocked,
    /// `extended`: `extend` moved the expiry.
    Extended,
    /// `found`: `get` found a holder, `list` answered, or a lease's `get`
    /// found it live.
    Found,
    /// `not_found`: `get` of a free lock, or a path that is not a route.
    NotFound,
    /// `busy`: another owner holds the lock; the body carries the holder.
    Busy,
    /// `not_owner`: held by another owner or under another fencing token.
    NotOwner,
    /// `not_held`: nobody holds the lock.
    NotHeld,
    /// `invalid_argument`: bad input; nothing changed.
    InvalidArgument,
    /// `unauthorized`: the bearer token is missing or wrong.
    Unauthorized,
    /// `denied`: refused by policy, such as a namespace quota.
    Denied,
    /// `unavailable`: the store could not complete the operation.
    Unavailable,
    /// `ok`: `/healthz`.
    Ok,
    /// `granted`: a lease was granted.
    Granted,
    /// `refreshed`: a lease's expiry moved.
    Refreshed,
    /// `revoked`: a lease ended and its locks were released.
    Revoked,
    /// `released`: a force-unlock released the lock from its holder.
    Released,
}

impl Status {
    /// Every status word.
    pub const ALL: [Status; 17] = [
        Status::Acquired,
        Status::Unlocked,
        Status::Extended,
        Status::Found,
        Status::NotFound,
        Status::Busy,
        Status::NotOwner,
        Status::NotHeld,
        Status::InvalidArgument,
        Status::Unauthorized,
        Status::Denied,
        Status::Unavailable,
        Status::Ok,
        Status::Granted,
        Status::Refreshed,
        Status::Revoked,
        Status::Released,
    ];

    /// The word on the wire. The words of lock errors are those of
    /// [`ErrorKind::as_str`], their one definition.
    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Acquired => "acquired",
            Status::Unlocked => "unlocked",
            Status::Extended => "extended",
            Status::Found => "found",
            Status::NotFound => "not_found",
            Status::Busy => ErrorKind::Busy.as_str(),
            Status::NotOwner => ErrorKind::NotOwner.as_str(),
            Status::NotHeld => ErrorKind::NotHeld.as_str(),
            Status::InvalidArgument => ErrorKind::InvalidArgument.as_str(),
            Status::Unauthorized => "unauthorized",
            Status::Denied => ErrorKind::Denied.as_str(),
            Status::Unavailable => ErrorKind::Unavailable.as_str(),
            Status::Ok => "ok",
            Status::Granted => "granted",
            Status::Refreshed => "refreshed",
            Status::Revoked => "revoked",
            Status::Released => "released",
        }
    }

    /// The status whose word is `word`.
    pub fn from_word(word: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.as_str() == word)
    }

    /// The lock error this status reports, if it reports one.
    pub fn kind(self) -> Option<ErrorKind> {
        Some(match self {
            Status::Busy => ErrorKind::Busy,
            Status::NotOwner => ErrorKind::NotOwner,
            Status::NotHeld => ErrorKind::NotHeld,
            Status::InvalidArgument => ErrorKind::InvalidArgument,
            Status::Denied => ErrorKind::Denied,
            Status::Unavailable => ErrorKind::Unavailable,
            _ => return None,
        })
    }

    const WORDS: [&'static str; Status::ALL.len()] = {
        let mut words = [""; Status::ALL.len()];
        let mut i = 0;
        while i < words.len() {
            words[i] = Status::ALL[i].as_str();
            i += 1;
        }
        words
    };
}

impl From<ErrorKind> for Status {
    fn from(kind: ErrorKind) -> Status {
        match kind {
            ErrorKind::Busy => Status::Busy,
            ErrorKind::NotOwner => Status::NotOwner,
            ErrorKind::NotHeld => Status::NotHeld,
            ErrorKind::InvalidArgument => Status::InvalidArgument,
            ErrorKind::Denied => Status::Denied,
            ErrorKind::Unavailable => Status::Unavailable,
            // A kind added to the core later: its outcome is unknown to this
            // surface, which is what `unavailable` says.
            _ => Status::Unavailable,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `durability` as it is spelt on the wire: `persistent` or `ephemeral`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DurabilityWord {
    /// `persistent`: on disk before the call returns.
    Persistent,
    /// `ephemeral`: in memory only.
    Ephemeral,
}

impl DurabilityWord {
    /// Both words.
    pub const ALL: [DurabilityWord; 2] = [DurabilityWord::Persistent, DurabilityWord::Ephemeral];

    /// The word on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            DurabilityWord::Persistent => "persistent",
            DurabilityWord::Ephemeral => "ephemeral",
        }
    }

    const WORDS: [&'static str; 2] = [
        DurabilityWord::ALL[0].as_str(),
        DurabilityWord::ALL[1].as_str(),
    ];
}

impl fmt::Display for DurabilityWord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<DurabilityWord> for Durability {
    fn from(d: DurabilityWord) -> Self {
        match d {
            DurabilityWord::Persistent => Durability::Persistent,
            DurabilityWord::Ephemeral => Durability::Ephemeral,
        }
    }
}

impl From<Durability> for DurabilityWord {
    fn from(d: Durability) -> Self {
        match d {
            Durability::Persistent => DurabilityWord::Persistent,
            Durability::Ephemeral => DurabilityWord::Ephemeral,
        }
    }
}

/// Serde for the word enums, from their `as_str`, so each word is written
/// once. An unknown word is refused as serde refuses an unknown variant.
macro_rules! word_serde {
    ($ty:ident, $expecting:literal) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct WordVisitor;
                impl Visitor<'_> for WordVisitor {
                    type Value = $ty;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($expecting)
                    }
                    fn visit_str<E: de::Error>(self, word: &str) -> Result<$ty, E> {
                        $ty::ALL
                            .into_iter()
                            .find(|w| w.as_str() == word)
                            .ok_or_else(|| E::unknown_variant(word, &$ty::WORDS))
                    }
                }
                deserializer.deserialize_str(WordVisitor)
            }
        }
    };
}

word_serde!(Status, "a lockd status word");
word_serde!(
    DurabilityWord,
    "a durability word (persistent or ephemeral)"
);

/// `acquired` (lock) or `extended` (extend): the grant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantReply {
    /// End of the lease, Unix epoch milliseconds.
    pub expires_at_ms: u64,
    /// The grant's fencing token (all 64 bits).
    pub fencing_token: u64,
    /// `acquired` or `extended`.
    pub status: Status,
}

impl GrantReply {
    /// The answer to a granted `lock`.
    pub fn acquired(grant: Grant) -> Self {
        GrantReply::new(Status::Acquired, grant)
    }

    /// The answer to a granted `extend`.
    pub fn extended(grant: Grant) -> Self {
        GrantReply::new(Status::Extended, grant)
    }

    fn new(status: Status, grant: Grant) -> Self {
        GrantReply {
            expires_at_ms: grant.expires_at_ms,
            fencing_token: grant.fencing_token,
            status,
        }
    }
}

/// A body that is only a status word: `unlocked`, `get`'s `not_found`,
/// `/healthz`'s `ok`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusReply {
    /// The word.
    pub status: Status,
}

/// `found`: the holder of a lock (`get`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoundReply {
    /// Whether it survives a restart.
    pub durability: DurabilityWord,
    /// End of the lease, Unix epoch milliseconds.
    pub expires_at_ms: u64,
    /// The current grant's fencing token.
    pub fencing_token: u64,
    /// The current holder.
    pub owner: String,
    /// `found`.
    pub status: Status,
}

impl From<LockInfo> for FoundReply {
    fn from(info: LockInfo) -> Self {
        FoundReply {
            durability: info.durability.into(),
            expires_at_ms: info.expires_at_ms,
            fencing_token: info.fencing_token,
            owner: info.owner,
            status: Status::Found,
        }
    }
}

/// `found`: the live locks of a namespace (`list`), sorted by name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListReply {
    /// The locks.
    pub locks: Vec<ListedLock>,
    /// `found`.
    pub status: Status,
}

impl ListReply {
    /// The answer listing `locks`.
    pub fn new(locks: Vec<lockd_core::ListedLock>) -> Self {
        ListReply {
            locks: locks.into_iter().map(ListedLock::from).collect(),
            status: Status::Found,
        }
    }
}

/// One lock of a [`ListReply`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedLock {
    /// When the current grant was made, Unix epoch milliseconds (a
    /// recovered lock: the restart); absent if the store does not know.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquired_at_ms: Option<u64>,
    /// Whether it survives a restart.
    pub durability: DurabilityWord,
    /// End of the lease, Unix epoch milliseconds.
    pub expires_at_ms: u64,
    /// The current grant's fencing token.
    pub fencing_token: u64,
    /// The lock name.
    pub name: String,
    /// The current holder.
    pub owner: String,
    /// Callers waiting in its queue (0 from a server older than this field).
    #[serde(default)]
    pub waiters: u64,
}

impl From<lockd_core::ListedLock> for ListedLock {
    fn from(lock: lockd_core::ListedLock) -> Self {
        ListedLock {
            acquired_at_ms: lock.acquired_at_ms,
            durability: lock.info.durability.into(),
            expires_at_ms: lock.info.expires_at_ms,
            fencing_token: lock.info.fencing_token,
            name: lock.name,
            owner: lock.info.owner,
            waiters: lock.waiters,
        }
    }
}

/// `released`: the holder a force-unlock released
/// (`POST /v1/locks/force-unlock`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleasedReply {
    /// The released grant's fencing token.
    pub fencing_token: u64,
    /// The holder it was released from.
    pub owner: String,
    /// `released`.
    pub status: Status,
}

impl From<LockInfo> for ReleasedReply {
    fn from(info: LockInfo) -> Self {
        ReleasedReply {
            fencing_token: info.fencing_token,
            owner: info.owner,
            status: Status::Released,
        }
    }
}

/// `granted`: a new lease (`POST /v1/leases/grant`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseGrantedReply {
    /// End of the lease, Unix epoch milliseconds.
    pub expires_at_ms: u64,
    /// The lease's id: the owner of every lock taken under it.
    pub lease_id: String,
    /// `granted`.
    pub status: Status,
}

impl From<LeaseGrant> for LeaseGrantedReply {
    fn from(grant: LeaseGrant) -> Self {
        LeaseGrantedReply {
            expires_at_ms: grant.expires_at_ms,
            lease_id: grant.id,
            status: Status::Granted,
        }
    }
}

/// `refreshed`: the lease's new expiry (`POST /v1/leases/refresh`), which
/// is also that of every lock under it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRefreshedReply {
    /// End of the lease, Unix epoch milliseconds.
    pub expires_at_ms: u64,
    /// `refreshed`.
    pub status: Status,
}

impl LeaseRefreshedReply {
    /// The answer to a refresh that moved the expiry to `expires_at_ms`.
    pub fn new(expires_at_ms: u64) -> Self {
        LeaseRefreshedReply {
            expires_at_ms,
            status: Status::Refreshed,
        }
    }
}

/// `revoked`: the lease ended (`POST /v1/leases/revoke`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRevokedReply {
    /// How many locks the revoke released.
    pub released: u64,
    /// `revoked`.
    pub status: Status,
}

impl LeaseRevokedReply {
    /// The answer to a revoke that released `released` locks.
    pub fn new(released: u64) -> Self {
        LeaseRevokedReply {
            released,
            status: Status::Revoked,
        }
    }
}

/// `found`: a live lease (`POST /v1/leases/get`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseFoundReply {
    /// Whether the lease and its locks survive a restart.
    pub durability: DurabilityWord,
    /// End of the lease, Unix epoch milliseconds.
    pub expires_at_ms: u64,
    /// The names of the locks it holds, sorted.
    pub locks: Vec<String>,
    /// `found`.
    pub status: Status,
    /// Its TTL in milliseconds.
    pub ttl_ms: u64,
}

impl From<LeaseInfo> for LeaseFoundReply {
    fn from(info: LeaseInfo) -> Self {
        LeaseFoundReply {
            durability: info.durability.into(),
            expires_at_ms: info.expires_at_ms,
            locks: info.locks,
            status: Status::Found,
            ttl_ms: info.ttl_ms,
        }
    }
}

/// `busy`: an error body that also carries the holder.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BusyReply {
    /// Whether the holder's lock survives a restart.
    pub durability: DurabilityWord,
    /// End of the holder's lease, Unix epoch milliseconds.
    pub expires_at_ms: u64,
    /// The holder's fencing token.
    pub fencing_token: u64,
    /// What happened.
    pub message: String,
    /// The holder.
    pub owner: String,
    /// `busy`.
    pub status: Status,
}

impl BusyReply {
    /// The answer naming `holder`.
    pub fn new(holder: &LockInfo, message: String) -> Self {
        BusyReply {
            durability: holder.durability.into(),
            expires_at_ms: holder.expires_at_ms,
            fencing_token: holder.fencing_token,
            message,
            owner: holder.owner.clone(),
            status: Status::Busy,
        }
    }
}

/// Every other error body: `{"message": ..., "status": ...}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorReply {
    /// What was wrong, for people.
    pub message: String,
    /// The error's word.
    pub status: Status,
}

/// A response body that is not what its status word promises: a field is
/// missing or has the wrong type. The message names the field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MalformedReply(String);

impl fmt::Display for MalformedReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for MalformedReply {}

/// The `status` word of a response body, before the rest is parsed:
/// `Ok(None)` if the body is not JSON or has no string `status` (it is not
/// lockd's), `Err(word)` for a string that is no lockd status word.
pub fn reply_status(body: &str) -> Result<Option<Status>, String> {
    #[derive(Deserialize)]
    struct Head {
        status: String,
    }
    match serde_json::from_str::<Head>(body) {
        Ok(head) => Status::from_word(&head.status).map(Some).ok_or(head.status),
        Err(_) => Ok(None),
    }
}

/// Parses a response body into `T`. Unknown fields are ignored; a missing
/// field or one of the wrong type is an error naming it, with its path for
/// nested ones (`locks[2].fencing_token`). Nothing is defaulted.
pub fn parse_reply<T: DeserializeOwned>(body: &str) -> Result<T, MalformedReply> {
    let value: Value = serde_json::from_str(body)
        .map_err(|e| MalformedReply(format!("the body is not JSON ({e})")))?;
    T::deserialize(At {
        value,
        path: String::new(),
    })
    .map_err(|e| MalformedReply(e.to_string()))
}

/// A JSON value at `path` in a response body: a deserializer that prefixes
/// an error with the path of the value it concerns.
struct At {
    value: Value,
    path: String,
}

fn at_path(path: &str, e: serde_json::Error) -> serde_json::Error {
    if path.is_empty() {
        e
    } else {
        de::Error::custom(format_args!("`{path}`: {e}"))
    }
}

impl<'de> Deserializer<'de> for At {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        let At { value, path } = self;
        match value {
            Value::Object(map) => {
                let mut fields = Fields {
                    iter: map.into_iter(),
                    pending: None,
                    path: &path,
                    inner_failed: false,
                };
                let result = visitor.visit_map(&mut fields);
                // An inner value's error already carries its own path.
                let inner_failed = fields.inner_failed;
                result.map_err(|e| if inner_failed { e } else { at_path(&path, e) })
            }
            Value::Array(items) => {
                let mut elements = Elements {
                    iter: items.into_iter().enumerate(),
                    path: &path,
                    inner_failed: false,
                };
                let result = visitor.visit_seq(&mut elements);
                let inner_failed = elements.inner_failed;
                result.map_err(|e| if inner_failed { e } else { at_path(&path, e) })
            }
            scalar => scalar
                .deserialize_any(visitor)
                .map_err(|e| at_path(&path, e)),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let At { value, path } = self;
        value
            .deserialize_enum(name, variants, visitor)
            .map_err(|e| at_path(&path, e))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct
        identifier ignored_any
    }
}

struct Fields<'p> {
    iter: serde_json::map::IntoIter,
    pending: Option<(String, Value)>,
    path: &'p str,
    inner_failed: bool,
}

impl<'de> de::MapAccess<'de> for Fields<'_> {
    type Error = serde_json::Error;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        let Some((key, value)) = self.iter.next() else {
            return Ok(None);
        };
        let k = seed.deserialize(de::value::StrDeserializer::<serde_json::Error>::new(&key))?;
        self.pending = Some((key, value));
        Ok(Some(k))
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Self::Error> {
        let Some((key, value)) = self.pending.take() else {
            return Err(de::Error::custom("a value was asked for before its key"));
        };
        let path = if self.path.is_empty() {
            key
        } else {
            format!("{}.{key}", self.path)
        };
        seed.deserialize(At { value, path }).inspect_err(|_| {
            self.inner_failed = true;
        })
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

struct Elements<'p> {
    iter: std::iter::Enumerate<std::vec::IntoIter<Value>>,
    path: &'p str,
    inner_failed: bool,
}

impl<'de> de::SeqAccess<'de> for Elements<'_> {
    type Error = serde_json::Error;

    fn next_element_seed<T: de::DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Self::Error> {
        let Some((i, value)) = self.iter.next() else {
            return Ok(None);
        };
        let path = format!("{}[{i}]", self.path);
        seed.deserialize(At { value, path })
            .map(Some)
            .inspect_err(|_| self.inner_failed = true)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

/// Percent-encodes a query component: every byte but the unreserved
/// characters (`A-Z a-z 0-9 - . _ ~`) becomes `%XX`.
pub fn percent_encode(value: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Percent-decodes one query component (`+` is a space, as in
/// `application/x-www-form-urlencoded`); the result must be UTF-8.
pub fn percent_decode(s: &str) -> Result<String, String> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = [bytes.next(), bytes.next()];
                let byte = match hex {
                    [Some(h), Some(l)] => hex_value(h).zip(hex_value(l)).map(|(h, l)| h << 4 | l),
                    _ => None,
                };
                out.push(byte.ok_or_else(|| format!("bad percent-encoding in query {s:?}"))?);
            }
            b => out.push(b),
        }
    }
    String::from_utf8(out).map_err(|_| format!("query value {s:?} is not UTF-8 once decoded"))
}

/// Splits an `application/x-www-form-urlencoded` query into decoded pairs.
fn parse_query(query: &str) -> Result<Vec<(String, String)>, String> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((percent_decode(key)?, percent_decode(value)?))
        })
        .collect()
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_queries() {
        assert_eq!(
            parse_query("namespace=a%2Fb&prefix=job+1%20x").unwrap(),
            vec![
                ("namespace".to_string(), "a/b".to_string()),
                ("prefix".to_string(), "job 1 x".to_string())
            ]
        );
        assert_eq!(parse_query("").unwrap(), vec![]);
        assert_eq!(
            parse_query("prefix").unwrap(),
            vec![("prefix".to_string(), String::new())]
        );
        assert_eq!(
            parse_query("prefix=%C3%A9").unwrap()[0].1,
            "\u{e9}".to_string()
        );
        assert!(parse_query("prefix=%zz").is_err());
        assert!(parse_query("prefix=%4").is_err());
        assert!(parse_query("prefix=%ff").is_err());
    }

    #[test]
    fn encodes_and_decodes_as_a_pair() {
        assert_eq!(percent_encode("a/b c&d=é"), "a%2Fb%20c%26d%3D%C3%A9");
        assert_eq!(percent_encode("job-1_x.y~"), "job-1_x.y~");
        for s in ["", "a/b c&d=é+%", "job-1_x.y~", "\u{1F512} lock?#"] {
            assert_eq!(percent_decode(&percent_encode(s)).unwrap(), s, "{s}");
        }
    }

    #[test]
    fn list_queries_round_trip() {
        let q = ListQuery {
            namespace: Some("a/b".to_string()),
            prefix: Some("job 1&".to_string()),
        };
        assert_eq!(q.path(), "/v1/locks?namespace=a%2Fb&prefix=job%201%26");
        let path = q.path();
        let query = path.strip_prefix("/v1/locks?").unwrap();
        assert_eq!(ListQuery::parse(query).unwrap(), q);
        assert_eq!(ListQuery::default().path(), "/v1/locks");
        assert_eq!(ListQuery::parse("").unwrap(), ListQuery::default());
        assert!(ListQuery::parse("names=x")
            .unwrap_err()
            .contains("unknown query parameter \"names\""));
        assert!(ListQuery::parse("prefix=a&prefix=b")
            .unwrap_err()
            .contains("given twice"));
    }

    #[test]
    fn rejects_unknown_fields_and_bad_numbers() {
        let ok: LockRequest =
            serde_json::from_str(r#"{"name":"a","owner":"o","ttl_ms":1,"durability":"ephemeral"}"#)
                .unwrap();
        assert_eq!(ok.durability, Some(DurabilityWord::Ephemeral));
        for bad in [
            r#"{"name":"a","owner":"o","ttl_ms":1,"wait":5}"#,
            r#"{"name":"a","owner":"o","ttl_ms":-1}"#,
            r#"{"name":"a","owner":"o","ttl_ms":1.5}"#,
            r#"{"name":"a","owner":"o","ttl_ms":18446744073709551616}"#,
            r#"{"name":"a","owner":"o","ttl_ms":"10"}"#,
            r#"{"name":"a","owner":"o","ttl_ms":1,"durability":"forever"}"#,
            r#"{"name":1,"owner":"o","ttl_ms":1}"#,
            r#"{"owner":"o","ttl_ms":1}"#,
        ] {
            assert!(serde_json::from_str::<LockRequest>(bad).is_err(), "{bad}");
        }
        let forever = serde_json::from_str::<LockRequest>(
            r#"{"name":"a","owner":"o","ttl_ms":1,"durability":"forever"}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            forever.contains("unknown variant `forever`, expected `persistent` or `ephemeral`"),
            "{forever}"
        );
        // null is "not given", as the OpenAPI document's `nullable` says.
        let nulls: UnlockRequest = serde_json::from_str(
            r#"{"namespace":null,"name":"a","owner":"o","fencing_token":null}"#,
        )
        .unwrap();
        assert_eq!((nulls.namespace, nulls.fencing_token), (None, None));
    }

    #[test]
    fn requests_round_trip_and_leave_out_what_is_not_given() {
        let lock = LockRequest {
            namespace: Some("ns".to_string()),
            name: "a".to_string(),
            owner: Some("o".to_string()),
            ttl_ms: Some(10),
            wait_ms: None,
            durability: Some(DurabilityWord::Persistent),
            lease_id: None,
        };
        let text = serde_json::to_string(&lock).unwrap();
        assert_eq!(
            text,
            r#"{"namespace":"ns","name":"a","owner":"o","ttl_ms":10,"durability":"persistent"}"#
        );
        assert_eq!(serde_json::from_str::<LockRequest>(&text).unwrap(), lock);
        let unlock = UnlockRequest {
            namespace: None,
            name: "a".to_string(),
            owner: "o".to_string(),
            fencing_token: Some(u64::MAX),
        };
        let text = serde_json::to_string(&unlock).unwrap();
        assert_eq!(
            text,
            format!(r#"{{"name":"a","owner":"o","fencing_token":{}}}"#, u64::MAX)
        );
        assert_eq!(
            serde_json::from_str::<UnlockRequest>(&text).unwrap(),
            unlock
        );
    }

    #[test]
    fn every_status_word_round_trips() {
        let mut seen = std::collections::HashSet::new();
        for status in Status::ALL {
            // Exhaustive, so a new status fails to compile until it is here
            // (and in ALL, which the count below checks).
            let word = match status {
                Status::Acquired => "acquired",
                Status::Unlocked => "unlocked",
                Status::Extended => "extended",
                Status::Found => "found",
                Status::NotFound => "not_found",
                Status::Busy => "busy",
                Status::NotOwner => "not_owner",
                Status::NotHeld => "not_held",
                Status::InvalidArgument => "invalid_argument",
                Status::Unauthorized => "unauthorized",
                Status::Denied => "denied",
                Status::Unavailable => "unavailable",
                Status::Ok => "ok",
                Status::Granted => "granted",
                Status::Refreshed => "refreshed",
                Status::Revoked => "revoked",
                Status::Released => "released",
            };
            assert!(seen.insert(word), "{word} twice");
            assert_eq!(status.as_str(), word);
            assert_eq!(status.to_string(), word);
            let json = serde_json::to_string(&status).unwrap();
            assert_eq!(json, format!("\"{word}\""));
            assert_eq!(serde_json::from_str::<Status>(&json).unwrap(), status);
            assert_eq!(Status::from_word(word), Some(status));
            assert_eq!(
                reply_status(&format!(r#"{{"status":"{word}"}}"#)),
                Ok(Some(status))
            );
            // The words of lock errors are the core's.
            if let Some(kind) = status.kind() {
                assert_eq!(kind.as_str(), word);
                assert_eq!(Status::from(kind), status);
            }
        }
        assert_eq!(seen.len(), Status::ALL.len());
        for kind in ErrorKind::ALL {
            assert_eq!(Status::from(kind).kind(), Some(kind));
        }
        let err = serde_json::from_str::<Status>("\"Busy\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown variant `Busy`"), "{err}");
        for d in DurabilityWord::ALL {
            let json = serde_json::to_string(&d).unwrap();
            assert_eq!(json, format!("\"{d}\""));
            assert_eq!(serde_json::from_str::<DurabilityWord>(&json).unwrap(), d);
            assert_eq!(DurabilityWord::from(Durability::from(d)), d);
        }
    }

    #[test]
    fn responses_are_written_as_they_always_were() {
        let grant = Grant {
            fencing_token: u64::MAX,
            expires_at_ms: 42,
        };
        assert_eq!(
            serde_json::to_string(&GrantReply::acquired(grant)).unwrap(),
            format!(
                r#"{{"expires_at_ms":42,"fencing_token":{},"status":"acquired"}}"#,
                u64::MAX
            )
        );
        let info = LockInfo {
            owner: "w1".to_string(),
            fencing_token: 7,
            expires_at_ms: 42,
            durability: Durability::Ephemeral,
        };
        assert_eq!(
            serde_json::to_string(&FoundReply::from(info.clone())).unwrap(),
            r#"{"durability":"ephemeral","expires_at_ms":42,"fencing_token":7,"owner":"w1","status":"found"}"#
        );
        assert_eq!(
            serde_json::to_string(&BusyReply::new(&info, "m".to_string())).unwrap(),
            r#"{"durability":"ephemeral","expires_at_ms":42,"fencing_token":7,"message":"m","owner":"w1","status":"busy"}"#
        );
        let list = ListReply::new(vec![lockd_core::ListedLock {
            name: "a".to_string(),
            info,
            acquired_at_ms: Some(40),
            waiters: 2,
        }]);
        assert_eq!(
            serde_json::to_string(&list).unwrap(),
            r#"{"locks":[{"acquired_at_ms":40,"durability":"ephemeral","expires_at_ms":42,"fencing_token":7,"name":"a","owner":"w1","waiters":2}],"status":"found"}"#
        );
        assert_eq!(
            serde_json::to_string(&ErrorReply {
                message: "m".to_string(),
                status: Status::NotHeld
            })
            .unwrap(),
            r#"{"message":"m","status":"not_held"}"#
        );
        // And each parses back into itself.
        let text = serde_json::to_string(&list).unwrap();
        assert_eq!(parse_reply::<ListReply>(&text).unwrap(), list);
    }

    #[test]
    fn a_reply_without_a_fencing_token_is_an_error() {
        let ok: GrantReply =
            parse_reply(r#"{"status":"acquired","fencing_token":18446744073709551615,"expires_at_ms":5,"extra":[1]}"#)
                .unwrap();
        assert_eq!(ok.fencing_token, u64::MAX);
        for (body, needle) in [
            (
                r#"{"status":"acquired","expires_at_ms":5}"#,
                "missing field `fencing_token`",
            ),
            (
                r#"{"status":"acquired","fencing_token":"7","expires_at_ms":5}"#,
                "`fencing_token`: invalid type: string \"7\", expected u64",
            ),
            (
                r#"{"status":"acquired","fencing_token":-1,"expires_at_ms":5}"#,
                "`fencing_token`: invalid value: integer `-1`",
            ),
            (
                r#"{"status":"acquired","fencing_token":1.5,"expires_at_ms":5}"#,
                "`fencing_token`: invalid type: floating point",
            ),
            (
                r#"{"status":"acquired","fencing_token":null,"expires_at_ms":5}"#,
                "`fencing_token`: invalid type: null",
            ),
            (
                r#"{"status":"given","fencing_token":1,"expires_at_ms":5}"#,
                "`status`: unknown variant `given`",
            ),
            (r#"{"status":"acquired","#, "not JSON"),
            ("[1]", "expected struct GrantReply"),
        ] {
            let err = parse_reply::<GrantReply>(body).unwrap_err().to_string();
            assert!(err.contains(needle), "{body}: {err}");
        }
        // The same holds for every reply with a token, nested ones included.
        let err = parse_reply::<BusyReply>(
            r#"{"status":"busy","owner":"o","expires_at_ms":5,"durability":"persistent","message":"m"}"#,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("missing field `fencing_token`"),
            "{err}"
        );
        let err = parse_reply::<ListReply>(
            r#"{"status":"found","locks":[{"name":"a","owner":"o","fencing_token":1,"expires_at_ms":5,"durability":"persistent"},{"name":"b","owner":"o","expires_at_ms":5,"durability":"persistent"}]}"#,
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "`locks[1]`: missing field `fencing_token`");
        let err = parse_reply::<ListReply>(
            r#"{"status":"found","locks":[{"name":"a","owner":"o","fencing_token":true,"expires_at_ms":5,"durability":"persistent"}]}"#,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("`locks[0].fencing_token`: invalid type: boolean `true`"),
            "{err}"
        );
        let err = parse_reply::<FoundReply>(
            r#"{"status":"found","owner":"o","fencing_token":1,"expires_at_ms":5,"durability":"forever"}"#,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("`durability`: unknown variant `forever`"),
            "{err}"
        );
    }

    #[test]
    fn a_lock_names_exactly_one_holder() {
        let parse = |body: &str| serde_json::from_str::<LockRequest>(body).unwrap();
        assert_eq!(
            parse(r#"{"name":"a","owner":"o","ttl_ms":5}"#).holder(),
            Ok(LockHolder::Owner {
                owner: "o",
                ttl_ms: 5
            })
        );
        assert_eq!(
            parse(r#"{"name":"a","lease_id":"l","wait_ms":5}"#).holder(),
            Ok(LockHolder::Lease { lease_id: "l" })
        );
        for (body, needle) in [
            (r#"{"name":"a","ttl_ms":5}"#, "missing field `owner`"),
            (r#"{"name":"a","owner":"o"}"#, "missing field `ttl_ms`"),
            (
                r#"{"name":"a","owner":"o","lease_id":"l"}"#,
                "`owner` and `lease_id` were both given",
            ),
            (
                r#"{"name":"a","lease_id":"l","ttl_ms":5}"#,
                "`ttl_ms` is not allowed with `lease_id`",
            ),
            (
                r#"{"name":"a","lease_id":"l","durability":"ephemeral"}"#,
                "`durability` is not allowed with `lease_id`",
            ),
        ] {
            let err = parse(body).holder().unwrap_err();
            assert!(err.contains(needle), "{body}: {err}");
        }
        // Written without the fields not given.
        let lease = LockRequest {
            namespace: None,
            name: "a".to_string(),
            owner: None,
            ttl_ms: None,
            wait_ms: Some(1),
            durability: None,
            lease_id: Some("l".to_string()),
        };
        assert_eq!(
            serde_json::to_string(&lease).unwrap(),
            r#"{"name":"a","wait_ms":1,"lease_id":"l"}"#
        );
    }

    #[test]
    fn lease_bodies_round_trip() {
        let grant: LeaseGrantRequest =
            serde_json::from_str(r#"{"ttl_ms":5,"durability":"ephemeral"}"#).unwrap();
        assert_eq!(grant.durability, Some(DurabilityWord::Ephemeral));
        assert!(serde_json::from_str::<LeaseGrantRequest>(r#"{"ttl_ms":5,"ttl":1}"#).is_err());
        assert!(serde_json::from_str::<LeaseGrantRequest>(r#"{}"#).is_err());
        assert!(serde_json::from_str::<LeaseRequest>(r#"{"lease_id":"l","name":"a"}"#).is_err());
        assert_eq!(
            serde_json::to_string(&LeaseGrantedReply::from(LeaseGrant {
                id: "lease-1".to_string(),
                expires_at_ms: 42,
            }))
            .unwrap(),
            r#"{"expires_at_ms":42,"lease_id":"lease-1","status":"granted"}"#
        );
        assert_eq!(
            serde_json::to_string(&LeaseRefreshedReply::new(42)).unwrap(),
            r#"{"expires_at_ms":42,"status":"refreshed"}"#
        );
        assert_eq!(
            serde_json::to_string(&LeaseRevokedReply::new(2)).unwrap(),
            r#"{"released":2,"status":"revoked"}"#
        );
        let found = LeaseFoundReply::from(LeaseInfo {
            ttl_ms: 10,
            expires_at_ms: 42,
            durability: Durability::Persistent,
            locks: vec!["a".to_string(), "b".to_string()],
        });
        let text = serde_json::to_string(&found).unwrap();
        assert_eq!(
            text,
            r#"{"durability":"persistent","expires_at_ms":42,"locks":["a","b"],"status":"found","ttl_ms":10}"#
        );
        assert_eq!(parse_reply::<LeaseFoundReply>(&text).unwrap(), found);
        let err = parse_reply::<LeaseFoundReply>(
            r#"{"durability":"persistent","expires_at_ms":42,"locks":["a",7],"status":"found","ttl_ms":10}"#,
        )
        .unwrap_err();
        assert!(err.to_string().starts_with("`locks[1]`"), "{err}");
    }

    #[test]
    fn reply_status_tells_lockd_from_others() {
        assert_eq!(reply_status("upstream"), Ok(None));
        assert_eq!(reply_status(r#"{"status":5}"#), Ok(None));
        assert_eq!(reply_status(r#"{"message":"x"}"#), Ok(None));
        assert_eq!(
            reply_status(r#"{"status":"done"}"#),
            Err("done".to_string())
        );
        assert_eq!(
            reply_status(r#"{"message":"m","status":"busy"}"#),
            Ok(Some(Status::Busy))
        );
    }
}
