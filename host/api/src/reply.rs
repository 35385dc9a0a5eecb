//! Reply bodies, one type per body, and the events of `GET /v1/events`.
//!
//! Replies accept unknown fields (a newer server may add some), but a
//! missing or mistyped field is an error: nothing is defaulted, except
//! what older servers did not send (`waiters`, the `mode` of a grant,
//! `holders`), which is what such a server would have meant. Fields are
//! declared in alphabetical order, the order in which the server has always
//! written them, so replies stay byte for byte what they were.

use serde::{Deserialize, Serialize};

use crate::words::{DurabilityWord, EventWord, HeldMode, Status};

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

/// A body that is only a status word: `unlocked`, `get`'s `not_found`,
/// `/healthz`'s `ok`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusReply {
    /// The word.
    pub status: Status,
}

/// `GET /readyz`: `ok` (200) while the server should be sent requests;
/// otherwise `unavailable` (503) with a `message` and every reason, such as
/// `store unreachable: ...` or `shutting down`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadyReply {
    /// The reasons, in one sentence (only when not ready).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Why it is not ready, one phrase each; empty when ready.
    pub reasons: Vec<String>,
    /// `ok` or `unavailable`.
    pub status: Status,
}

/// `found`: who holds a name (`get`). The top-level fields are the most
/// recent grant's (the highest token), whatever its mode; `holders` has
/// every grant (docs/contract.md#c21-shared).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoundReply {
    /// Whether it survives a restart.
    pub durability: DurabilityWord,
    /// End of the lease, Unix epoch milliseconds.
    pub expires_at_ms: u64,
    /// The most recent grant's fencing token.
    pub fencing_token: u64,
    /// Every holder, by token (empty from a server older than this field).
    #[serde(default)]
    pub holders: Vec<Holding>,
    /// The end of a lock-delay in force (docs/contract.md#c23-lock-delay),
    /// Unix epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_delay_until_ms: Option<u64>,
    /// What the most recent grant holds.
    #[serde(default)]
    pub mode: HeldMode,
    /// The most recent grant's holder.
    pub owner: String,
    /// The semaphore's number of permits, when the name is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// `found`.
    pub status: Status,
    /// Callers waiting in its queue.
    #[serde(default)]
    pub waiters: u64,
}

/// `not_found`: nobody holds the name (`get`); during a lock-delay, when
/// it ends and who waits for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreeReply {
    /// The end of a lock-delay in force, Unix epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_delay_until_ms: Option<u64>,
    /// `not_found`.
    pub status: Status,
    /// Callers waiting for the delay to end (given with
    /// `lock_delay_until_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiters: Option<u64>,
}

/// `get`'s answer, as the server builds it: 200 with the holders, or 404
/// for a name nobody holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GetReply {
    /// Held.
    Found(FoundReply),
    /// Nobody holds it.
    Free(FreeReply),
}

/// One holder of a name, in a [`FoundReply`] or a [`ListedLock`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holding {
    /// When it was granted, Unix epoch milliseconds; absent if the store
    /// does not know.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquired_at_ms: Option<u64>,
    /// Whether it survives a restart.
    pub durability: DurabilityWord,
    /// When the grant expires, Unix epoch milliseconds.
    pub expires_at_ms: u64,
    /// Its fencing token.
    pub fencing_token: u64,
    /// What it holds.
    pub mode: HeldMode,
    /// Its holder.
    pub owner: String,
}

/// `found`: the live locks of a namespace (`list`), sorted by name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListReply {
    /// The locks.
    pub locks: Vec<ListedLock>,
    /// `found`.
    pub status: Status,
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
    /// Every holder of a shared name or a semaphore, by token; empty for
    /// an exclusive lock (its holder is the entry itself).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<Holding>,
    /// What the current grant holds (exclusive from a server older than
    /// this field).
    #[serde(default)]
    pub mode: HeldMode,
    /// The lock name.
    pub name: String,
    /// The current holder.
    pub owner: String,
    /// The semaphore's number of permits, when the name is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// Callers waiting in its queue (0 from a server older than this field).
    #[serde(default)]
    pub waiters: u64,
}

/// `found`: the namespaces the caller may see (`GET /v1/namespaces`),
/// sorted by name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespacesReply {
    /// The namespaces.
    pub namespaces: Vec<NamespaceSummary>,
    /// `found`.
    pub status: Status,
}

impl NamespacesReply {
    /// The answer listing `namespaces`.
    pub fn new(namespaces: Vec<NamespaceSummary>) -> Self {
        NamespacesReply {
            namespaces,
            status: Status::Found,
        }
    }
}

/// One namespace of a [`NamespacesReply`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceSummary {
    /// Live locks held in it.
    pub held: u64,
    /// The namespace.
    pub name: String,
    /// Callers waiting in its queues.
    pub waiters: u64,
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

/// `found`: the leader of an election (`POST /v1/elections/leader`);
/// nobody leads is 404 with a [`FreeReply`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderReply {
    /// The candidate that leads.
    pub candidate: String,
    /// Whether the leadership survives a restart.
    pub durability: DurabilityWord,
    /// End of the leadership unless extended, Unix epoch milliseconds.
    pub expires_at_ms: u64,
    /// The fencing token of the leadership.
    pub fencing_token: u64,
    /// When it became leader, Unix epoch milliseconds, if the store knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<u64>,
    /// `found`.
    pub status: Status,
    /// What the leader proclaimed.
    pub value: String,
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

/// Every other error body: `{"message": ..., "status": ...}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorReply {
    /// What was wrong, for people.
    pub message: String,
    /// The error's word.
    pub status: Status,
}

impl ErrorReply {
    /// The message less the label a lock error's message opens with
    /// (`invalid argument: `, `denied: `, `unavailable: `): the detail alone,
    /// as lockd's own host hands it to guests. A message without the label
    /// (one about the request itself, such as a body that is not JSON) is
    /// the detail as it is.
    pub fn detail(&self) -> &str {
        detail_label(self.status)
            .and_then(|label| self.message.strip_prefix(label))
            .unwrap_or(&self.message)
    }
}

/// What the server writes before the detail of an `invalid_argument`, a
/// `denied` and an `unavailable` lock error: lockd-core's `LockError`
/// Display, which a test of the `core` feature holds equal.
pub(crate) const fn detail_label(status: Status) -> Option<&'static str> {
    match status {
        Status::InvalidArgument => Some("invalid argument: "),
        Status::Denied => Some("denied: "),
        Status::Unavailable => Some("unavailable: "),
        _ => None,
    }
}

/// One event of `GET /v1/events`, the JSON of an SSE `data:` line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// What happened.
    #[serde(rename = "type")]
    pub kind: EventWord,
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
    /// What the grant holds (`exclusive` for lease events, and from a
    /// server older than this field).
    #[serde(default)]
    pub mode: HeldMode,
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

impl LaggedEvent {
    /// The SSE event name, and the `type` of its data.
    pub const NAME: &'static str = "lagged";

    /// The event of a stream that missed `missed` events.
    pub fn new(missed: u64) -> Self {
        LaggedEvent {
            kind: LaggedEvent::NAME.to_string(),
            missed,
        }
    }
}

/// The first event of a stream asked to resume after a position it cannot
/// replay from (`event: gap`): events after that position may be missing.
/// The store keeps no history that its hosts share (redb, memory), or etcd
/// compacted it away. The stream goes on with the events from now on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GapEvent {
    /// `gap`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The position the client asked to resume after.
    pub after: String,
    /// Why the events after it cannot be told.
    pub reason: String,
}

impl GapEvent {
    /// The SSE event name, and the `type` of its data.
    pub const NAME: &'static str = "gap";

    /// The event of a stream that cannot resume after `after`, and why.
    pub fn new(after: impl Into<String>, reason: impl Into<String>) -> Self {
        GapEvent {
            kind: GapEvent::NAME.to_string(),
            after: after.into(),
            reason: reason.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_written_as_they_always_were() {
        assert_eq!(
            serde_json::to_string(&LeaseRefreshedReply::new(42)).unwrap(),
            r#"{"expires_at_ms":42,"status":"refreshed"}"#
        );
        assert_eq!(
            serde_json::to_string(&LeaseRevokedReply::new(2)).unwrap(),
            r#"{"released":2,"status":"revoked"}"#
        );
        assert_eq!(
            serde_json::to_string(&ErrorReply {
                message: "m".to_string(),
                status: Status::NotHeld
            })
            .unwrap(),
            r#"{"message":"m","status":"not_held"}"#
        );
        assert_eq!(
            serde_json::to_string(&LaggedEvent::new(3)).unwrap(),
            r#"{"type":"lagged","missed":3}"#
        );
        assert_eq!(
            serde_json::to_string(&GapEvent::new("41.2", "compacted")).unwrap(),
            r#"{"type":"gap","after":"41.2","reason":"compacted"}"#
        );
        let event = Event {
            kind: EventWord::HandedOff,
            namespace: "ns".to_string(),
            name: "a".to_string(),
            owner: "o".to_string(),
            fencing_token: u64::MAX,
            at_ms: 5,
            mode: HeldMode::Shared,
        };
        assert_eq!(
            serde_json::to_string(&event).unwrap(),
            format!(
                r#"{{"type":"handed_off","namespace":"ns","name":"a","owner":"o","fencing_token":{},"at_ms":5,"mode":"shared"}}"#,
                u64::MAX
            )
        );
        // From a server older than modes: exclusive.
        let old: Event = serde_json::from_str(
            r#"{"type":"acquired","namespace":"ns","name":"a","owner":"o","fencing_token":1,"at_ms":5}"#,
        )
        .unwrap();
        assert_eq!(old.mode, HeldMode::Exclusive);
        assert_eq!(
            serde_json::to_string(&FreeReply {
                lock_delay_until_ms: None,
                status: Status::NotFound,
                waiters: None,
            })
            .unwrap(),
            r#"{"status":"not_found"}"#
        );
    }

    #[test]
    fn the_detail_is_the_message_less_its_label() {
        let reply = |status, message: &str| ErrorReply {
            message: message.to_string(),
            status,
        };
        for (status, message, detail) in [
            (
                Status::InvalidArgument,
                "invalid argument: name too long",
                "name too long",
            ),
            (Status::Denied, "denied: quota", "quota"),
            (Status::Unavailable, "unavailable: disk", "disk"),
            // Messages about the request itself carry no label.
            (
                Status::InvalidArgument,
                "body over 1048576 bytes",
                "body over 1048576 bytes",
            ),
            // Only the status's own label goes.
            (Status::Denied, "unavailable: disk", "unavailable: disk"),
            (Status::NotHeld, "lock is not held", "lock is not held"),
        ] {
            assert_eq!(reply(status, message).detail(), detail, "{message}");
        }
    }
}
