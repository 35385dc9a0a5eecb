//! `--store` specs: which backend holds the locks.

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use anyhow::Context as _;
use lockd_core::{Engine, LockBackend, SystemClock};
use lockd_etcd::{EtcdBackend, EtcdOptions};

/// Where lock state lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreSpec {
    /// The embedded persistent store at this path (the default).
    Redb(PathBuf),
    /// Memory only: nothing survives a restart.
    Memory,
    /// An etcd cluster shared by many lockd hosts (`etcd:URL[,URL...]`,
    /// all `http://` or all `https://`). The spec gives the endpoints; the
    /// other options (TLS files and user included) keep their defaults
    /// unless `[etcd]` in lockd.toml sets them. Boxed: the options are
    /// many times the size of the other variants.
    Etcd(Box<EtcdOptions>),
}

/// The default store: `.lockd/locks.redb` under the working directory.
pub const DEFAULT_STORE: &str = "redb:.lockd/locks.redb";

/// What every refusal lists: the forms a spec may take.
const EXPECTED: &str = "redb:PATH (for example redb:.lockd/locks.redb), memory, \
                        or etcd:http://HOST:PORT[,http://HOST:PORT...] \
                        (https:// with [etcd] ca_file in lockd.toml)";

impl FromStr for StoreSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once(':') {
            _ if s == "memory" => Ok(StoreSpec::Memory),
            Some(("redb", path)) if !path.is_empty() => Ok(StoreSpec::Redb(PathBuf::from(path))),
            Some(("etcd", list)) => match EtcdOptions::from_endpoint_list(list) {
                Ok(options) => Ok(StoreSpec::Etcd(Box::new(options))),
                Err(why) => Err(format!("bad store {s:?}: {why}")),
            },
            _ => Err(format!("unknown store {s:?}: expected {EXPECTED}")),
        }
    }
}

impl StoreSpec {
    /// Opens the store. Must run inside a tokio runtime, which the engine's
    /// purge task and an etcd store's background work (session keep-alive,
    /// watches) then run on. A redb store's recovery reads the whole file,
    /// so it runs on a blocking thread, off the executor.
    pub async fn open(&self) -> anyhow::Result<Arc<dyn LockBackend>> {
        Ok(self.open_with_handle().await?.0)
    }

    /// [`open`](Self::open), with the [`lockd_redb::Store`] handle of a
    /// redb store (what snapshots are taken through); `None` for the other
    /// stores.
    pub async fn open_with_handle(
        &self,
    ) -> anyhow::Result<(Arc<dyn LockBackend>, Option<lockd_redb::Store>)> {
        Ok(match self {
            StoreSpec::Memory => (Engine::memory(), None),
            StoreSpec::Redb(path) => {
                let runtime = tokio::runtime::Handle::current();
                let file = path.clone();
                let recovery = tokio::task::spawn_blocking(move || {
                    // The engine spawns its purge task on the caller's runtime.
                    let _entered = runtime.enter();
                    lockd_redb::Store::open(file)
                });
                let opened = match recovery.await {
                    Ok(opened) => opened,
                    // A panic in recovery stays a panic, as if it had run here.
                    Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                    Err(e) => anyhow::bail!("opening store {}: {e}", path.display()),
                };
                let store = opened.with_context(|| format!("opening store {}", path.display()))?;
                let engine: Arc<dyn LockBackend> = store.engine().clone();
                (engine, Some(store))
            }
            StoreSpec::Etcd(options) => (
                Arc::new(
                    EtcdBackend::connect((**options).clone(), Arc::new(SystemClock))
                        .await
                        .with_context(|| {
                            format!("opening store etcd:{}", options.endpoints.join(","))
                        })?,
                ),
                None,
            ),
        })
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
        let unknown = "postgres://x".parse::<StoreSpec>().unwrap_err();
        for form in ["redb:PATH", "memory", "etcd:http://HOST:PORT"] {
            assert!(unknown.contains(form), "{unknown}");
        }
    }

    #[test]
    fn parses_etcd_specs() {
        let one = "etcd:http://127.0.0.1:2379".parse::<StoreSpec>().unwrap();
        assert_eq!(
            one,
            StoreSpec::Etcd(Box::new(EtcdOptions::new(["http://127.0.0.1:2379"])))
        );
        let StoreSpec::Etcd(three) = "etcd:http://a:1,http://b:2,http://c:3"
            .parse::<StoreSpec>()
            .unwrap()
        else {
            panic!("not an etcd spec");
        };
        assert_eq!(three.endpoints, ["http://a:1", "http://b:2", "http://c:3"]);
        assert_eq!(three.prefix, "/lockd");
    }

    #[test]
    fn bad_etcd_specs_say_why() {
        let empty = "etcd:".parse::<StoreSpec>().unwrap_err();
        assert!(empty.contains("at least one endpoint"), "{empty}");
        let commas = "etcd:,,".parse::<StoreSpec>().unwrap_err();
        assert!(commas.contains("at least one endpoint"), "{commas}");
        let mixed = "etcd:https://e:2379,http://f:2379"
            .parse::<StoreSpec>()
            .unwrap_err();
        assert!(
            mixed.contains("mix") && mixed.contains("\"etcd:https://e:2379,http://f:2379\""),
            "{mixed}"
        );
        let bare = "etcd:127.0.0.1:2379".parse::<StoreSpec>().unwrap_err();
        assert!(bare.contains("not an http:// or https:// URL"), "{bare}");
    }

    #[test]
    fn parses_https_etcd_specs() {
        let StoreSpec::Etcd(tls) = "etcd:https://a:2379,https://b:2379"
            .parse::<StoreSpec>()
            .unwrap()
        else {
            panic!("not an etcd spec");
        };
        assert!(tls.uses_tls());
        assert_eq!(tls.endpoints, ["https://a:2379", "https://b:2379"]);
    }
}
