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
}
