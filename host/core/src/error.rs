//! The error model shared by every surface. It mirrors the WIT `error`
//! variant one to one, so mapping it is a single `match` in each surface.

use crate::types::LockInfo;

/// Why a lock operation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another owner holds the lock, and any wait timed out.
    #[error("lock is held by {:?} (token {})", .0.owner, .0.fencing_token)]
    Busy(LockInfo),
    /// The lock is held by another owner, or the fencing token given is not
    /// the current one.
    #[error("lock is held by another owner or under another fencing token")]
    NotOwner,
    /// Nobody holds the lock.
    #[error("lock is not held")]
    NotHeld,
    /// An argument broke a limit. Nothing changed.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Refused by policy, such as a namespace quota.
    #[error("denied: {0}")]
    Denied(String),
    /// The store could not complete the operation; the outcome is unknown.
    #[error("unavailable: {0}")]
    Unavailable(String),
}
