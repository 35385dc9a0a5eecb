//! Conversions between the core's types and the `lockd:lock@0.2.0` WIT
//! types: the one place where core errors become this version's WIT errors
//! (the 0.1.0 mapping is `crate::convert`; both map variant for variant).

use lockd_core::{Claim, Durability, Grant, LockError, LockInfo, LockOptions, NameState};

use super::wit::{guards, locks, rwlocks, types};
use crate::liveness::Cause;

/// What a host function with a WIT `result` returns: the outer error traps
/// (a host bug), the inner one is the guest's to handle.
pub(super) type WitResult<T> = wasmtime::Result<Result<T, types::Error>>;

pub(super) fn to_wit(error: LockError) -> types::Error {
    match error {
        LockError::Busy(info) => types::Error::Busy(info_to_wit(info)),
        LockError::NotOwner => types::Error::NotOwner,
        LockError::NotHeld => types::Error::NotHeld,
        LockError::InvalidArgument(m) => types::Error::InvalidArgument(m),
        LockError::Denied(m) => types::Error::Denied(m),
        LockError::Unavailable(m) => types::Error::Unavailable(m),
        // `LockError` is non-exhaustive; a variant added later must not trap.
        other => types::Error::Unavailable(other.to_string()),
    }
}

pub(super) fn info_to_wit(info: LockInfo) -> types::LockInfo {
    types::LockInfo {
        owner: info.owner,
        fencing_token: info.fencing_token,
        expires_at_ms: info.expires_at_ms,
        durability: match info.durability {
            Durability::Persistent => types::Durability::Persistent,
            Durability::Ephemeral => types::Durability::Ephemeral,
        },
    }
}

pub(super) fn grant_to_wit(grant: Grant) -> types::Grant {
    types::Grant {
        fencing_token: grant.fencing_token,
        expires_at_ms: grant.expires_at_ms,
    }
}

pub(super) fn durability_from_wit(d: types::Durability) -> Durability {
    match d {
        types::Durability::Persistent => Durability::Persistent,
        types::Durability::Ephemeral => Durability::Ephemeral,
    }
}

/// The options of `lock`.
pub(super) fn lock_options_from_wit(options: locks::LockOptions) -> LockOptions {
    LockOptions {
        wait_ms: u64::from(options.wait_ms),
        durability: durability_from_wit(options.durability),
        ..LockOptions::default()
    }
}

/// The options of `guard.acquire`: the lock's options and whether to keep
/// the guard alive.
pub(super) fn guard_options_from_wit(options: guards::GuardOptions) -> (LockOptions, bool) {
    let lock_options = LockOptions {
        wait_ms: u64::from(options.wait_ms),
        durability: durability_from_wit(options.durability),
        ..LockOptions::default()
    };
    (lock_options, options.keep_alive)
}

/// The value of a `lost` future.
pub(super) fn lost_reason_to_wit(cause: Cause) -> types::LostReason {
    match cause {
        Cause::Released => types::LostReason::Released,
        Cause::Expired => types::LostReason::Expired,
        Cause::EndedElsewhere => types::LostReason::EndedElsewhere,
    }
}

fn mode_to_wit(claim: Claim) -> rwlocks::Mode {
    match claim {
        Claim::Exclusive => rwlocks::Mode::Exclusive,
        Claim::Shared => rwlocks::Mode::Shared,
        Claim::Permit { .. } => rwlocks::Mode::Permit,
        Claim::Leader => rwlocks::Mode::Leader,
    }
}

/// `describe`'s answer: every holder with its mode, and the semaphore's
/// size when the name is one.
pub(super) fn name_state_to_wit(state: NameState) -> rwlocks::NameState {
    let permits = state.holders.iter().find_map(|h| h.claim.permits());
    rwlocks::NameState {
        holders: state
            .holders
            .into_iter()
            .map(|h| rwlocks::Holder {
                info: info_to_wit(h.info),
                mode: mode_to_wit(h.claim),
                acquired_at_ms: h.acquired_at_ms,
            })
            .collect(),
        waiters: state.waiters,
        permits,
        lock_delay_until_ms: state.delay_until_ms,
    }
}
