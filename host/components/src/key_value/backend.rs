//! Where key-value stores keep their bytes: a small object-safe trait and
//! its three implementations (memory, a redb file, etcd). A backend sees labels, keys and bytes, never
//! wasmtime types; the bounds on keys and values are checked before it is
//! called, and it enforces the one bound it alone can count (the bytes a
//! store holds) atomically with the write.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use lockd_etcd::kv::EtcdKv;
use lockd_etcd::EtcdOptions;
use lockd_redb::kv::{kv_path, KvError, KvFile};
use lockd_server::serve::BoxFuture;
use tokio::sync::OnceCell;

/// A failure, worded for the guest's `other(...)`.
type Failed = String;

/// Byte-level storage of every store, by label.
pub trait Backend: Send + Sync {
    /// The value of `key` in store `label`.
    fn get(&self, label: String, key: String) -> BoxFuture<'_, Result<Option<Vec<u8>>, Failed>>;
    /// Sets `key`, unless store `label` would then hold more than `limit`
    /// bytes of keys and values. Done when it returns.
    fn set(
        &self,
        label: String,
        key: String,
        value: Vec<u8>,
        limit: u64,
    ) -> BoxFuture<'_, Result<(), Failed>>;
    /// Deletes `key` (a missing key is no error). Done when it returns.
    fn delete(&self, label: String, key: String) -> BoxFuture<'_, Result<(), Failed>>;
    /// Whether store `label` holds `key`.
    fn exists(&self, label: String, key: String) -> BoxFuture<'_, Result<bool, Failed>>;
    /// Every key of store `label`.
    fn keys(&self, label: String) -> BoxFuture<'_, Result<Vec<String>, Failed>>;
}

/// Stores in memory (`--store memory`): nothing survives a restart.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    /// Label to its entries and the bytes they take.
    stores: Mutex<BTreeMap<String, MemoryStore>>,
}

#[derive(Debug, Default)]
struct MemoryStore {
    entries: BTreeMap<String, Vec<u8>>,
    bytes: u64,
}

fn entry_bytes(key: &str, value: &[u8]) -> u64 {
    u64::try_from(key.len().saturating_add(value.len())).unwrap_or(u64::MAX)
}

impl MemoryBackend {
    fn with<T>(&self, label: &str, f: impl FnOnce(&mut MemoryStore) -> T) -> T {
        let mut stores = self.stores.lock().unwrap_or_else(PoisonError::into_inner);
        f(stores.entry(label.to_string()).or_default())
    }
}

impl Backend for MemoryBackend {
    fn get(&self, label: String, key: String) -> BoxFuture<'_, Result<Option<Vec<u8>>, Failed>> {
        let value = self.with(&label, |s| s.entries.get(&key).cloned());
        Box::pin(async move { Ok(value) })
    }

    fn set(
        &self,
        label: String,
        key: String,
        value: Vec<u8>,
        limit: u64,
    ) -> BoxFuture<'_, Result<(), Failed>> {
        let done = self.with(&label, |s| {
            let old = s.entries.get(&key).map_or(0, |v| entry_bytes(&key, v));
            let would_hold = s
                .bytes
                .saturating_sub(old)
                .saturating_add(entry_bytes(&key, &value));
            if would_hold > limit {
                return Err(KvError::StoreFull { would_hold, limit }.to_string());
            }
            s.bytes = would_hold;
            s.entries.insert(key, value);
            Ok(())
        });
        Box::pin(async move { done })
    }

    fn delete(&self, label: String, key: String) -> BoxFuture<'_, Result<(), Failed>> {
        self.with(&label, |s| {
            if let Some(old) = s.entries.remove(&key) {
                s.bytes = s.bytes.saturating_sub(entry_bytes(&key, &old));
            }
        });
        Box::pin(async { Ok(()) })
    }

    fn exists(&self, label: String, key: String) -> BoxFuture<'_, Result<bool, Failed>> {
        let exists = self.with(&label, |s| s.entries.contains_key(&key));
        Box::pin(async move { Ok(exists) })
    }

    fn keys(&self, label: String) -> BoxFuture<'_, Result<Vec<String>, Failed>> {
        let keys = self.with(&label, |s| s.entries.keys().cloned().collect());
        Box::pin(async move { Ok(keys) })
    }
}

/// Stores in a redb file beside a `redb:` lock store ([`kv_path`]). Each
/// call runs on a blocking thread: a write waits for its commit's sync.
#[derive(Debug)]
pub struct RedbBackend {
    file: Arc<KvFile>,
}

impl RedbBackend {
    /// Opens (or creates) the key-value file beside the lock store at
    /// `store`.
    pub fn open(store: &Path) -> anyhow::Result<RedbBackend> {
        let file = KvFile::open(kv_path(store))?;
        Ok(RedbBackend {
            file: Arc::new(file),
        })
    }

    fn run<T: Send + 'static>(
        &self,
        call: impl FnOnce(&KvFile) -> Result<T, KvError> + Send + 'static,
    ) -> BoxFuture<'_, Result<T, Failed>> {
        let file = self.file.clone();
        Box::pin(async move {
            match tokio::task::spawn_blocking(move || call(&file)).await {
                Ok(result) => result.map_err(|e| {
                    if matches!(e, KvError::Storage { .. }) {
                        tracing::error!(error = %e, "key-value store call failed");
                    }
                    e.to_string()
                }),
                Err(e) => Err(format!("the key-value store call failed: {e}")),
            }
        })
    }
}

impl Backend for RedbBackend {
    fn get(&self, label: String, key: String) -> BoxFuture<'_, Result<Option<Vec<u8>>, Failed>> {
        self.run(move |f| f.get(&label, &key))
    }

    fn set(
        &self,
        label: String,
        key: String,
        value: Vec<u8>,
        limit: u64,
    ) -> BoxFuture<'_, Result<(), Failed>> {
        self.run(move |f| f.set(&label, &key, &value, limit))
    }

    fn delete(&self, label: String, key: String) -> BoxFuture<'_, Result<(), Failed>> {
        self.run(move |f| f.delete(&label, &key))
    }

    fn exists(&self, label: String, key: String) -> BoxFuture<'_, Result<bool, Failed>> {
        self.run(move |f| f.exists(&label, &key))
    }

    fn keys(&self, label: String) -> BoxFuture<'_, Result<Vec<String>, Failed>> {
        self.run(move |f| f.keys(&label))
    }
}

/// Stores on the etcd cluster of an `etcd:` lock store, under its prefix
/// with `-kv` ([`EtcdKv`]), shared by every host serving the app. The
/// client connects at the first call: the lock store proved the cluster
/// reachable at start, and a cluster away later fails calls, not the app.
#[derive(Debug)]
pub struct EtcdKvBackend {
    options: EtcdOptions,
    kv: OnceCell<EtcdKv>,
}

impl EtcdKvBackend {
    /// The stores of the cluster `options` names.
    pub fn new(options: EtcdOptions) -> EtcdKvBackend {
        EtcdKvBackend {
            options,
            kv: OnceCell::new(),
        }
    }

    async fn kv(&self) -> Result<&EtcdKv, Failed> {
        self.kv
            .get_or_try_init(|| EtcdKv::connect(&self.options))
            .await
            .map_err(|e| format!("the key-value store on etcd: {e}"))
    }
}

fn worded(e: lockd_etcd::kv::KvError) -> Failed {
    e.to_string()
}

impl Backend for EtcdKvBackend {
    fn get(&self, label: String, key: String) -> BoxFuture<'_, Result<Option<Vec<u8>>, Failed>> {
        Box::pin(async move { self.kv().await?.get(&label, &key).await.map_err(worded) })
    }

    fn set(
        &self,
        label: String,
        key: String,
        value: Vec<u8>,
        limit: u64,
    ) -> BoxFuture<'_, Result<(), Failed>> {
        Box::pin(async move {
            let kv = self.kv().await?;
            kv.set(&label, &key, &value, limit).await.map_err(worded)
        })
    }

    fn delete(&self, label: String, key: String) -> BoxFuture<'_, Result<(), Failed>> {
        Box::pin(async move { self.kv().await?.delete(&label, &key).await.map_err(worded) })
    }

    fn exists(&self, label: String, key: String) -> BoxFuture<'_, Result<bool, Failed>> {
        Box::pin(async move { self.kv().await?.exists(&label, &key).await.map_err(worded) })
    }

    fn keys(&self, label: String) -> BoxFuture<'_, Result<Vec<String>, Failed>> {
        Box::pin(async move { self.kv().await?.keys(&label).await.map_err(worded) })
    }
}
