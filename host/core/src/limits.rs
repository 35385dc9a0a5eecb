//! Argument limits. Every caller input is checked here before any backend
//! sees it, so a bad argument never changes the store.

use std::collections::HashMap;

use crate::error::LockError;

/// Limits on caller input. The defaults are those of docs/contract.md#c11-limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest lock name, in bytes (default 512).
    pub max_name_bytes: usize,
    /// Longest owner, in bytes (default 256).
    pub max_owner_bytes: usize,
    /// Longest namespace, in bytes (default 128).
    pub max_namespace_bytes: usize,
    /// Longest lease, in milliseconds (default 24 h).
    pub max_ttl_ms: u64,
    /// Longest wait in the queue, in milliseconds (default 1 h).
    pub max_wait_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_name_bytes: 512,
            max_owner_bytes: 256,
            max_namespace_bytes: 128,
            max_ttl_ms: 24 * 60 * 60 * 1000,
            max_wait_ms: 60 * 60 * 1000,
        }
    }
}

impl Limits {
    pub(crate) fn check_namespace(&self, namespace: &str) -> Result<(), LockError> {
        check_len("namespace", namespace, self.max_namespace_bytes)
    }

    pub(crate) fn check_name(&self, name: &str) -> Result<(), LockError> {
        check_len("name", name, self.max_name_bytes)
    }

    pub(crate) fn check_owner(&self, owner: &str) -> Result<(), LockError> {
        check_len("owner", owner, self.max_owner_bytes)
    }

    pub(crate) fn check_ttl(&self, ttl_ms: u64) -> Result<(), LockError> {
        if ttl_ms == 0 {
            return Err(LockError::InvalidArgument(
                "ttl must be at least 1 ms".to_string(),
            ));
        }
        if ttl_ms > self.max_ttl_ms {
            return Err(LockError::InvalidArgument(format!(
                "ttl of {ttl_ms} ms is over the maximum of {} ms",
                self.max_ttl_ms
            )));
        }
        Ok(())
    }

    pub(crate) fn check_wait(&self, wait_ms: u64) -> Result<(), LockError> {
        if wait_ms > self.max_wait_ms {
            return Err(LockError::InvalidArgument(format!(
                "wait of {wait_ms} ms is over the maximum of {} ms",
                self.max_wait_ms
            )));
        }
        Ok(())
    }
}

fn check_len(what: &str, value: &str, max: usize) -> Result<(), LockError> {
    if value.is_empty() {
        return Err(LockError::InvalidArgument(format!(
            "{what} must not be empty"
        )));
    }
    if value.len() > max {
        return Err(LockError::InvalidArgument(format!(
            "{what} is {} bytes, over the limit of {max} bytes",
            value.len()
        )));
    }
    Ok(())
}

/// How long each namespace holds back a grant that expired or was
/// force-released (docs/contract.md#c23-lock-delay).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockDelays {
    /// For namespaces not listed in `per_namespace`; 0 is no delay.
    pub default_ms: u64,
    /// Delays of named namespaces.
    pub per_namespace: HashMap<String, u64>,
}

impl LockDelays {
    /// The delay of `namespace`, 0 for none.
    pub fn of(&self, namespace: &str) -> u64 {
        self.per_namespace
            .get(namespace)
            .copied()
            .unwrap_or(self.default_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundaries() {
        let l = Limits::default();
        assert!(l.check_name(&"x".repeat(512)).is_ok());
        assert!(l.check_name(&"x".repeat(513)).is_err());
        assert!(l.check_name("").is_err());
        assert!(l.check_owner(&"x".repeat(256)).is_ok());
        assert!(l.check_owner(&"x".repeat(257)).is_err());
        assert!(l.check_ttl(0).is_err());
        assert!(l.check_ttl(1).is_ok());
        assert!(l.check_ttl(l.max_ttl_ms).is_ok());
        assert!(l.check_ttl(l.max_ttl_ms + 1).is_err());
        assert!(l.check_ttl(u64::MAX).is_err());
        assert!(l.check_wait(0).is_ok());
        assert!(l.check_wait(l.max_wait_ms + 1).is_err());
    }

    #[test]
    fn messages_name_the_limit() {
        let l = Limits::default();
        let LockError::InvalidArgument(m) = l.check_name(&"x".repeat(600)).unwrap_err() else {
            panic!("wrong variant")
        };
        assert!(
            m.contains("name") && m.contains("600") && m.contains("512"),
            "{m}"
        );
        let LockError::InvalidArgument(m) = l.check_ttl(0).unwrap_err() else {
            panic!("wrong variant")
        };
        assert!(m.contains("ttl"), "{m}");
    }
}
