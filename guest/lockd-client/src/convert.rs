//! Between `lockd-client-core`'s types and this package's WIT types
//! (`lockd:lock@0.1.0`): the same records, field for field.

use lockd_client_core::{self as core_types, DurabilityWord, HeldMode, LockClaim};

use crate::bindings::exports::lockd::lock::elections::{CampaignOptions, LeaderInfo};
use crate::bindings::exports::lockd::lock::guards::GuardOptions;
use crate::bindings::exports::lockd::lock::holds::HoldMode;
use crate::bindings::exports::lockd::lock::leases::LeaseOptions;
use crate::bindings::exports::lockd::lock::locks::LockOptions;
use crate::bindings::exports::lockd::lock::rwlocks::{Holder, Mode, NameState};
use crate::bindings::exports::lockd::lock::types::{Durability, Error, Grant, LockInfo};

/// A core result as the WIT's.
pub(crate) fn wit<T, U: From<T>>(result: Result<T, core_types::Error>) -> Result<U, Error> {
    result.map(U::from).map_err(Error::from)
}

impl From<core_types::Error> for Error {
    fn from(error: core_types::Error) -> Self {
        match error {
            core_types::Error::Busy(holder) => Error::Busy(holder.into()),
            core_types::Error::NotOwner => Error::NotOwner,
            core_types::Error::NotHeld => Error::NotHeld,
            core_types::Error::InvalidArgument(message) => Error::InvalidArgument(message),
            core_types::Error::Denied(message) => Error::Denied(message),
            core_types::Error::Unavailable(message) => Error::Unavailable(message),
        }
    }
}

impl From<DurabilityWord> for Durability {
    fn from(word: DurabilityWord) -> Self {
        match word {
            DurabilityWord::Persistent => Durability::Persistent,
            DurabilityWord::Ephemeral => Durability::Ephemeral,
        }
    }
}

impl From<Durability> for DurabilityWord {
    fn from(durability: Durability) -> Self {
        match durability {
            Durability::Persistent => DurabilityWord::Persistent,
            Durability::Ephemeral => DurabilityWord::Ephemeral,
        }
    }
}

impl From<core_types::Grant> for Grant {
    fn from(grant: core_types::Grant) -> Self {
        Grant {
            fencing_token: grant.fencing_token,
            expires_at_ms: grant.expires_at_ms,
        }
    }
}

impl From<core_types::LockInfo> for LockInfo {
    fn from(info: core_types::LockInfo) -> Self {
        LockInfo {
            owner: info.owner,
            fencing_token: info.fencing_token,
            expires_at_ms: info.expires_at_ms,
            durability: info.durability.into(),
        }
    }
}

impl From<LockOptions> for core_types::LockOptions {
    fn from(options: LockOptions) -> Self {
        core_types::LockOptions {
            wait_ms: options.wait_ms,
            durability: options.durability.into(),
        }
    }
}

impl From<GuardOptions> for core_types::GuardOptions {
    fn from(options: GuardOptions) -> Self {
        core_types::GuardOptions {
            wait_ms: options.wait_ms,
            durability: options.durability.into(),
            keep_alive: options.keep_alive,
        }
    }
}

impl From<CampaignOptions> for core_types::GuardOptions {
    fn from(options: CampaignOptions) -> Self {
        core_types::GuardOptions {
            wait_ms: options.wait_ms,
            durability: options.durability.into(),
            keep_alive: options.keep_alive,
        }
    }
}

impl From<LeaseOptions> for core_types::LeaseOptions {
    fn from(options: LeaseOptions) -> Self {
        core_types::LeaseOptions {
            durability: options.durability.into(),
            keep_alive: options.keep_alive,
        }
    }
}

impl From<HoldMode> for LockClaim {
    fn from(mode: HoldMode) -> Self {
        match mode {
            HoldMode::Exclusive => LockClaim::Exclusive,
            HoldMode::Shared => LockClaim::Shared,
        }
    }
}

impl From<HeldMode> for Mode {
    fn from(mode: HeldMode) -> Self {
        match mode {
            HeldMode::Exclusive => Mode::Exclusive,
            HeldMode::Shared => Mode::Shared,
            HeldMode::Permit => Mode::Permit,
            HeldMode::Leader => Mode::Leader,
        }
    }
}

impl From<core_types::NameState> for NameState {
    fn from(state: core_types::NameState) -> Self {
        NameState {
            holders: state
                .holders
                .into_iter()
                .map(|holder| Holder {
                    info: holder.info.into(),
                    mode: holder.mode.into(),
                    acquired_at_ms: holder.acquired_at_ms,
                })
                .collect(),
            waiters: state.waiters,
            permits: state.permits,
            lock_delay_until_ms: state.lock_delay_until_ms,
        }
    }
}

impl From<core_types::LeaderInfo> for LeaderInfo {
    fn from(leader: core_types::LeaderInfo) -> Self {
        LeaderInfo {
            candidate: leader.candidate,
            value: leader.value,
            fencing_token: leader.fencing_token,
            since_ms: leader.since_ms,
            expires_at_ms: leader.expires_at_ms,
            durability: leader.durability.into(),
        }
    }
}
