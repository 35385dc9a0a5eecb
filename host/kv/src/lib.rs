//! The key-value stores of Spin components that `lockd up` serves, kept
//! beside the locks: a small object-safe trait, [`Backend`], and its three
//! implementations: [`MemoryBackend`] (`--store memory`), [`RedbBackend`]
//! (a redb file of its own beside a `redb:` store, [`redb`]) and
//! [`EtcdKvBackend`] (the lock store's etcd cluster, under a prefix of its
//! own, [`etcd`]). A backend sees labels, keys and bytes, never
//! wasmtime types; the bounds on keys and values are checked before it is
//! called, and it enforces the one bound it alone can count (the bytes a
//! store holds) atomically with the write.

#![deny(missing_docs)]

pub mod etcd;
pub mod redb;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};

pub use etcd::EtcdKvBackend;
pub use redb::RedbBackend;

/// A backend's answer, to await.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a key-value operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KvError {
    /// The write would make the store hold more than its bound; nothing
    /// changed.
    #[error(
        "the store would hold {would_hold} bytes of keys and values, over its limit of {limit}"
    )]
    StoreFull {
        /// Bytes it would hold after the write.
        would_hold: u64,
        /// Its bound.
        limit: u64,
    },
    /// The redb file could not be read or written.
    #[error("key-value file {path}: {why}")]
    Storage {
        /// The file.
        path: PathBuf,
        /// What redb said.
        why: String,
    },
    /// etcd did not answer, or refused.
    #[error("{0}")]
    Unavailable(String),
    /// Other writers of the store won every attempt (etcd).
    #[error("the write lost every race with other writers of the store; try again")]
    Contended,
}

/// A failure, worded for the guest's `other(...)`.
pub(crate) type Failed = String;

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

/// The bytes one entry counts against its store's bound: its key's and its
/// value's, in every backend alike.
pub(crate) fn entry_bytes(key: &str, value_len: usize) -> u64 {
    u64::try_from(key.len().saturating_add(value_len)).unwrap_or(u64::MAX)
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
            let old = s
                .entries
                .get(&key)
                .map_or(0, |v| entry_bytes(&key, v.len()));
            let would_hold = s
                .bytes
                .saturating_sub(old)
                .saturating_add(entry_bytes(&key, value.len()));
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
                s.bytes = s.bytes.saturating_sub(entry_bytes(&key, old.len()));
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
