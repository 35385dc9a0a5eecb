//! `--store` specs: which backend holds the locks.

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use anyhow::Context as _;
use lockd_core::{Engine, Limits, LockBackend, LockService};

/// Where lock state lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreSpec {
    /// The embedded persistent store at this path (the default).
    Redb(PathBuf),
    /// Memory only: nothing survives a restart.
    Memory,
}

/// The default store: `.lockd/locks.redb` under the working directory.
pub const DEFAULT_STORE: &str = "redb:.lockd/locks.redb";

impl FromStr for StoreSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once(':') {
            _ if s == "memory" => Ok(StoreSpec::Memory),
            Some(("redb", path)) if !path.is_empty() => Ok(StoreSpec::Redb(PathBuf::from(path))),
            _ => Err(format!(
                "unknown store {s:?}: expected redb:PATH (for example {DEFAULT_STORE}) or memory"
            )),
        }
    }
}

impl StoreSpec {
    /// Opens the store. Must run inside a tokio runtime.
    pub fn open(&self) -> anyhow::Result<Arc<dyn LockBackend>> {
        Ok(match self {
            StoreSpec::Memory => Engine::memory(),
            StoreSpec::Redb(path) => lockd_redb::open(path)
                .with_context(|| format!("opening store {}", path.display()))?,
        })
    }

    /// Opens the store behind a service with default limits.
    pub fn open_service(&self) -> anyhow::Result<LockService> {
        Ok(LockService::new(self.open()?, Limits::default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_specs() {
        assert_eq!("memory".parse(), Ok(StoreSpec::Memory));
        assert_eq!(
            "redb:/tmp/x.redb".parse(),
            Ok(StoreSpec::Redb(PathBuf::from("/tmp/x.redb")))
        );
        assert!("redb:".parse::<StoreSpec>().is_err());
        assert!("etcd:http://x"
            .parse::<StoreSpec>()
            .unwrap_err()
            .contains("redb:PATH"));
    }
}
