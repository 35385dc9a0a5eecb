//! The state behind a guest's `guard` resource.

/// A lock held through the `guards` interface, as the host keeps it.
#[derive(Debug, Clone)]
pub struct Guard {
    pub(crate) id: u64,
    pub(crate) name: String,
    pub(crate) owner: String,
    pub(crate) token: u64,
    pub(crate) expires_at_ms: u64,
    pub(crate) released: bool,
}

/// A fresh owner for a guard: 128 random bits, so another guest in the same
/// namespace cannot guess it and release the lock.
pub(crate) fn fresh_owner() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)?;
    Ok(format!("guard-{:032x}", u128::from_be_bytes(bytes)))
}
