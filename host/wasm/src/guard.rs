//! The state behind a guest's `guard` resource.

use std::sync::Arc;

use crate::liveness::{Liveness, Monitor};

/// A lock held through the `guards` interface, as the host keeps it.
#[derive(Debug)]
pub struct Guard {
    pub(crate) id: u64,
    pub(crate) name: String,
    pub(crate) owner: String,
    pub(crate) token: u64,
    pub(crate) released: bool,
    /// Its expiry and lost flag, shared with the monitor and pollables.
    pub(crate) liveness: Arc<Liveness>,
    /// Renews it (keep-alive) or watches it (once a guest subscribed to its
    /// loss); none until either is asked for. Aborted with the guard.
    pub(crate) monitor: Option<Monitor>,
}

/// A fresh owner for a guard: 128 random bits, so another guest in the same
/// namespace cannot guess it and release the lock.
pub(crate) fn fresh_owner() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)?;
    Ok(format!("guard-{:032x}", u128::from_be_bytes(bytes)))
}
