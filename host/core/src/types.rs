//! The values that cross every surface: keys, grants and lock state.

use std::fmt;
use std::sync::Arc;

/// Names one lock: a namespace chosen by the host and a name chosen by the
/// caller. Two namespaces never share a lock.
///
/// The parts are shared strings: the memory engine keeps a key in its map,
/// in its deadline index and in journal operations, and cloning a key must
/// not allocate on the hot path (benchmark B1, docs/benchmarks.md).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// Assigned by the host (per component) or named by a REST caller.
    pub namespace: Arc<str>,
    /// The lock name, unique within the namespace.
    pub name: Arc<str>,
}

impl Key {
    /// A key from its two parts.
    pub fn new(namespace: impl Into<Arc<str>>, name: impl Into<Arc<str>>) -> Self {
        Key {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}/{:?}", self.namespace, self.name)
    }
}

/// How long lock state survives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Durability {
    /// On disk before the call returns; back after a restart.
    #[default]
    Persistent,
    /// In memory only; lost on restart. Tokens still never go backwards.
    Ephemeral,
}

/// What a grant holds of its name: see docs/contract.md#c21-shared and
/// #c22-semaphores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Claim {
    /// The name alone: the lock of C1 to C6.
    #[default]
    Exclusive,
    /// The name beside other shared holders and no exclusive one (a read
    /// lock).
    Shared,
    /// One permit of the semaphore `name`, which has `permits` of them.
    Permit {
        /// How many holders the semaphore admits at once (at least 1).
        permits: u32,
    },
    /// The leadership of the election `name` (one leader at a time, with a
    /// value: docs/contract.md#c24-elections). Taken by `campaign`, never
    /// by `lock`.
    Leader,
}

impl Claim {
    /// Its word on every surface: `exclusive`, `shared` or `permit`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Claim::Exclusive => "exclusive",
            Claim::Shared => "shared",
            Claim::Permit { .. } => "permit",
            Claim::Leader => "leader",
        }
    }

    /// The semaphore's size, for a permit.
    pub const fn permits(self) -> Option<u32> {
        match self {
            Claim::Permit { permits } => Some(permits),
            _ => None,
        }
    }

    /// Whether a grant of `self` may hold the name beside a live grant of
    /// `other` (both of one name; a semaphore's count is checked apart).
    pub fn compatible(self, other: Claim) -> bool {
        matches!(
            (self, other),
            (Claim::Shared, Claim::Shared) | (Claim::Permit { .. }, Claim::Permit { .. })
        )
    }
}

/// Options of a `lock` call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockOptions {
    /// 0 fails at once with `busy`; more waits that long in the FIFO queue.
    pub wait_ms: u64,
    /// Durability of a fresh grant. A re-lock by the holder keeps the
    /// durability the lock already has.
    pub durability: Durability,
    /// The most locks the namespace may hold; a fresh grant past it answers
    /// `denied`. Set by [`LockService`](crate::LockService) from its
    /// configuration: whatever a caller puts here is replaced.
    pub quota: Option<u64>,
    /// The holder's own `lock` answers `busy` in place of the idempotent
    /// re-lock (docs/contract.md#c2-relock), and leaves the grant as it is:
    /// Dapr's `TryLock` is not reentrant.
    pub refuse_relock: bool,
    /// Exclusive (the default), shared, or one permit of a semaphore.
    pub claim: Claim,
    /// How long the grant's place stays blocked after it expires or is
    /// force-released (docs/contract.md#c23-lock-delay). Set by
    /// [`LockService`](crate::LockService) from its configuration, like
    /// `quota`: whatever a caller puts here is replaced.
    pub lock_delay_ms: u64,
}

/// A successful lock or extend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// Strictly above every token issued before for this name.
    pub fencing_token: u64,
    /// End of the lease, Unix epoch milliseconds.
    pub expires_at_ms: u64,
}

/// The state of a held lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockInfo {
    /// Who holds it.
    pub owner: String,
    /// The token of the current grant.
    pub fencing_token: u64,
    /// End of the lease, Unix epoch milliseconds.
    pub expires_at_ms: u64,
    /// Whether it survives a restart.
    pub durability: Durability,
}

/// One entry of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedLock {
    /// The lock name within its namespace.
    pub name: String,
    /// Its current holder.
    pub info: LockInfo,
    /// When the current grant was made, Unix epoch milliseconds (for a lock
    /// recovered after a restart, the restart), if the store knows.
    pub acquired_at_ms: Option<u64>,
    /// Callers waiting in its queue.
    pub waiters: u64,
    /// What `info`'s grant holds: for a name held shared or a semaphore,
    /// `info` is its most recent grant and `holders` has them all.
    pub claim: Claim,
    /// Every holder, by token, when the name is held shared or is a
    /// semaphore; empty for an exclusive lock (`info` is its holder).
    pub holders: Vec<Holding>,
}

/// One holder of a name, with what it holds (docs/contract.md#c21-shared).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    /// Its owner, token, expiry and durability.
    pub info: LockInfo,
    /// Exclusive, shared or a permit.
    pub claim: Claim,
    /// When it was granted, Unix epoch milliseconds, if the store knows.
    pub acquired_at_ms: Option<u64>,
}

/// Everything about one name: its holders, its queue and its lock-delay
/// (`GET /v1/locks/{name}`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NameState {
    /// Every live holder, by token.
    pub holders: Vec<Holding>,
    /// Callers waiting in its queue.
    pub waiters: u64,
    /// The end of a lock-delay in force (docs/contract.md#c23-lock-delay),
    /// Unix epoch milliseconds.
    pub delay_until_ms: Option<u64>,
}

impl NameState {
    /// Whether nothing holds, waits for or delays the name.
    pub fn is_idle(&self) -> bool {
        self.holders.is_empty() && self.waiters == 0 && self.delay_until_ms.is_none()
    }
}

/// The leader of an election (docs/contract.md#c24-elections).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// The candidate that leads (its owner string), its token, the end of
    /// its term unless extended, and its durability.
    pub info: LockInfo,
    /// What it proclaimed: the value of its campaign or its last `proclaim`.
    pub value: String,
    /// When it became leader, Unix epoch milliseconds (for a leader
    /// recovered after a restart, the restart), if the store knows.
    pub since_ms: Option<u64>,
}

/// A lease just granted: see docs/contract.md#leases.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseGrant {
    /// The lease's id, generated by the host: `lease-` and 32 hex digits
    /// (128 random bits). It is the owner of every lock taken under it.
    pub id: String,
    /// End of the lease, Unix epoch milliseconds.
    pub expires_at_ms: u64,
}

/// The state of a live lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseInfo {
    /// Its time to live; every refresh moves the expiry to now + this.
    pub ttl_ms: u64,
    /// End of the lease, Unix epoch milliseconds.
    pub expires_at_ms: u64,
    /// Whether it and its locks survive a restart.
    pub durability: Durability,
    /// The names of the locks it holds, sorted.
    pub locks: Vec<String>,
}

/// What changed, in a [`LockEvent`]: see docs/reference.md#events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A free lock was granted.
    Acquired,
    /// A holder moved its expiry (`extend`, a re-lock, a lease refresh).
    Extended,
    /// The holder released it (`unlock`, a guard's drop, a lease revoke).
    Released,
    /// Its expiry passed.
    Expired,
    /// It passed from a holder to the head of its queue.
    HandedOff,
    /// An operator released it, whoever held it (`force-unlock`).
    ForceReleased,
    /// A lease was granted.
    LeaseGranted,
    /// A lease was revoked (its locks are released in the same step).
    LeaseRevoked,
    /// A lease's expiry passed.
    LeaseExpired,
    /// An election's leader proclaimed a new value.
    Proclaimed,
}

impl EventKind {
    /// Every kind, in declaration order.
    pub const ALL: [EventKind; 10] = [
        EventKind::Acquired,
        EventKind::Extended,
        EventKind::Released,
        EventKind::Expired,
        EventKind::HandedOff,
        EventKind::ForceReleased,
        EventKind::LeaseGranted,
        EventKind::LeaseRevoked,
        EventKind::LeaseExpired,
        EventKind::Proclaimed,
    ];

    /// The event's `type` word: `acquired`, `extended`, `released`,
    /// `expired`, `handed_off`, `force_released`, `lease_granted`,
    /// `lease_revoked`, `lease_expired` or `proclaimed`.
    pub const fn as_str(self) -> &'static str {
        match self {
            EventKind::Acquired => "acquired",
            EventKind::Extended => "extended",
            EventKind::Released => "released",
            EventKind::Expired => "expired",
            EventKind::HandedOff => "handed_off",
            EventKind::ForceReleased => "force_released",
            EventKind::LeaseGranted => "lease_granted",
            EventKind::LeaseRevoked => "lease_revoked",
            EventKind::LeaseExpired => "lease_expired",
            EventKind::Proclaimed => "proclaimed",
        }
    }

    /// The kind whose word is `word`.
    pub fn from_word(word: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == word)
    }

    /// Whether the event ends a holder's grant (for hold-time metrics).
    pub const fn ends_a_grant(self) -> bool {
        matches!(
            self,
            EventKind::Released | EventKind::Expired | EventKind::ForceReleased
        )
    }
}

/// One change to lock state, as a store reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockEvent {
    /// What happened.
    pub kind: EventKind,
    /// The lock's (or lease's) namespace.
    pub namespace: Arc<str>,
    /// The lock's name; for lease events, the lease id.
    pub name: Arc<str>,
    /// The holder the event is about: the new holder for `acquired` and
    /// `handed_off`, the one that left for `released`, `expired` and
    /// `force_released`; the lease id for lease events.
    pub owner: Arc<str>,
    /// The grant's token; 0 for lease events.
    pub fencing_token: u64,
    /// When, Unix epoch milliseconds.
    pub at_ms: u64,
    /// When the grant ended by this event was made (`released`,
    /// `expired`, `force_released`), if the store knows: hold-time
    /// metrics read it.
    pub acquired_at_ms: Option<u64>,
    /// What the grant holds (exclusive for lease events).
    pub claim: Claim,
}
