//! The one place where core errors become WIT errors.

use lockd_core::{Durability, LockError, LockInfo};

use crate::bindings::types;

pub(crate) fn to_wit(error: LockError) -> types::Error {
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

pub(crate) fn info_to_wit(info: LockInfo) -> types::LockInfo {
    types::LockInfo {
        owner: info.owner,
        fencing_token: info.fencing_token,
        expires_at_ms: info.expires_at_ms,
        durability: durability_to_wit(info.durability),
    }
}

pub(crate) fn durability_to_wit(d: Durability) -> types::Durability {
    match d {
        Durability::Persistent => types::Durability::Persistent,
        Durability::Ephemeral => types::Durability::Ephemeral,
    }
}

pub(crate) fn durability_from_wit(d: types::Durability) -> Durability {
    match d {
        types::Durability::Persistent => Durability::Persistent,
        types::Durability::Ephemeral => Durability::Ephemeral,
    }
}
