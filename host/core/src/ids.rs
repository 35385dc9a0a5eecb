//! Ids that name a holder: lease ids (`lease-`), guard owners (`guard-`)
//! and `lockd exec` owners (`exec-`), generated in this one place.

use crate::error::LockError;

/// `{prefix}-` and 32 lowercase hex digits: 128 bits from the OS's secure
/// random source. An id is the owner of the locks taken under it, so it
/// must not be guessable: another caller in the same namespace who guessed
/// it could release or extend those locks. It is no secret either
/// (docs/contract.md#c14-guards): `get` and `list` show it.
///
/// Fails with [`LockError::Unavailable`] if the OS has no randomness to
/// give; nothing was done, and a retry may succeed.
pub fn random_id(prefix: &str) -> Result<String, LockError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| LockError::Unavailable(format!("no randomness for a `{prefix}-` id: {e}")))?;
    Ok(format!("{prefix}-{:032x}", u128::from_be_bytes(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_the_prefix_and_32_lowercase_hex_digits() {
        let a = random_id("lease").unwrap();
        let b = random_id("lease").unwrap();
        assert_ne!(a, b);
        let digits = a.strip_prefix("lease-").unwrap();
        assert_eq!(digits.len(), 32);
        assert!(digits
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)));
    }
}
