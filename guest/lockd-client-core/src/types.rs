//! The values the clients exchange with the core: those of `lockd:lock`'s
//! WIT (the records of `0.1.0` and `0.2.0` are the same), in plain Rust.
//! Durabilities and modes are `lockd-api`'s wire words. Each client converts
//! them to and from its own bindings' types.

use lockd_api::{DurabilityWord, HeldMode};

/// Why a call failed: `lockd:lock`'s `error`, one variant per case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// Held by another owner: the holder.
    Busy(LockInfo),
    NotOwner,
    NotHeld,
    InvalidArgument(String),
    Denied(String),
    Unavailable(String),
}

/// A grant: its fencing token and when it expires (Unix ms).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    pub fencing_token: u64,
    pub expires_at_ms: u64,
}

/// A holder as `locks.get` and `busy` describe it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockInfo {
    pub owner: String,
    pub fencing_token: u64,
    pub expires_at_ms: u64,
    pub durability: DurabilityWord,
}

/// `lock-options`: how long a lock may wait, and its durability.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockOptions {
    pub wait_ms: u32,
    pub durability: DurabilityWord,
}

/// `guard-options` and `campaign-options`: a lock's options and whether
/// the grant is kept alive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuardOptions {
    pub wait_ms: u32,
    pub durability: DurabilityWord,
    pub keep_alive: bool,
}

impl GuardOptions {
    /// The options of the lock request.
    pub(crate) fn lock(&self) -> LockOptions {
        LockOptions {
            wait_ms: self.wait_ms,
            durability: self.durability,
        }
    }
}

/// `lease-options`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseOptions {
    pub durability: DurabilityWord,
    pub keep_alive: bool,
}

/// One holder of a name, as `rwlocks.describe` gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub info: LockInfo,
    pub mode: HeldMode,
    pub acquired_at_ms: Option<u64>,
}

/// `rwlocks.describe`'s answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameState {
    pub holders: Vec<Holder>,
    pub waiters: u64,
    pub permits: Option<u32>,
    pub lock_delay_until_ms: Option<u64>,
}

/// An election's leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderInfo {
    pub candidate: String,
    pub value: String,
    pub fencing_token: u64,
    pub since_ms: Option<u64>,
    pub expires_at_ms: u64,
    pub durability: DurabilityWord,
}

/// Why a grant or lease no longer holds (`lockd:lock@0.2.0`'s
/// `lost-reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LostReason {
    /// Released, resigned or revoked here, or dropped.
    Released,
    /// Its TTL ran out.
    Expired,
    /// Ended by somebody else: force-released, revoked, taken over.
    EndedElsewhere,
}
