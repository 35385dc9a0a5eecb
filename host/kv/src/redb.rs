//! A small durable key-value store for the key-value stores of Spin
//! components (`lockd up`): a redb file of its own beside the lock store
//! ([`kv_path`]), holding byte values under string keys, grouped in stores
//! by label.
//!
//! - **Durable before acknowledged.** Every `set` and `delete` is one redb
//!   write transaction committed with redb's default (immediate) durability
//!   before it returns.
//! - **Bounded.** Each store counts the bytes of its keys and values in the
//!   same transaction as the write; a write that would pass the store's
//!   bound is refused and changes nothing ([`KvError::StoreFull`]).
//! - **Blocking.** Calls block on disk: callers on an async executor run them
//!   on a blocking thread.
//!
//! It is a file of its own, not a table of the lock store: the lock store's
//! file is the checkpoint target of its log, written by one thread and read
//! by snapshots and `lockd store check`, which neither know nor need these
//! records.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use crate::{entry_bytes, Backend, BoxFuture, Failed, KvError};

/// `(store label, key)` to value.
const ENTRIES: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("kv_entries");
/// Store label to the bytes its keys and values take.
const STORE_BYTES: TableDefinition<&str, u64> = TableDefinition::new("kv_store_bytes");

/// The key-value file of the lock store at `store`: beside it, its name
/// with `-kv` (`locks.redb-kv` for `locks.redb`).
pub fn kv_path(store: impl AsRef<Path>) -> PathBuf {
    let store = store.as_ref();
    let mut name = store.file_name().unwrap_or_default().to_os_string();
    name.push("-kv");
    store.with_file_name(name)
}

/// One key-value file: every store's entries and byte counts.
#[derive(Debug)]
pub struct KvFile {
    path: PathBuf,
    db: Database,
}

impl KvFile {
    /// Opens (or creates) the file at `path` (see [`kv_path`]).
    pub fn open(path: impl AsRef<Path>) -> Result<KvFile, KvError> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| storage(&path, e))?;
        }
        let db = Database::builder()
            // Reads go to redb on every call (there is no other copy), but
            // values are small and few next to the lock store's cache.
            .set_cache_size(16 << 20)
            .create(&path)
            .map_err(|e| storage(&path, e))?;
        let file = KvFile { path, db };
        let txn = file.db.begin_write().map_err(|e| file.storage(e))?;
        txn.open_table(ENTRIES).map_err(|e| file.storage(e))?;
        txn.open_table(STORE_BYTES).map_err(|e| file.storage(e))?;
        txn.commit().map_err(|e| file.storage(e))?;
        Ok(file)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn storage(&self, e: impl std::fmt::Display) -> KvError {
        storage(&self.path, e)
    }

    /// The value of `key` in store `label`.
    pub fn get(&self, label: &str, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        let txn = self.db.begin_read().map_err(|e| self.storage(e))?;
        let table = txn.open_table(ENTRIES).map_err(|e| self.storage(e))?;
        let value = table.get((label, key)).map_err(|e| self.storage(e))?;
        Ok(value.map(|v| v.value().to_vec()))
    }

    /// Whether store `label` holds `key`.
    pub fn exists(&self, label: &str, key: &str) -> Result<bool, KvError> {
        let txn = self.db.begin_read().map_err(|e| self.storage(e))?;
        let table = txn.open_table(ENTRIES).map_err(|e| self.storage(e))?;
        Ok(table
            .get((label, key))
            .map_err(|e| self.storage(e))?
            .is_some())
    }

    /// Every key of store `label`, in byte order.
    pub fn keys(&self, label: &str) -> Result<Vec<String>, KvError> {
        let txn = self.db.begin_read().map_err(|e| self.storage(e))?;
        let table = txn.open_table(ENTRIES).map_err(|e| self.storage(e))?;
        let mut keys = Vec::new();
        for row in table.range((label, "")..).map_err(|e| self.storage(e))? {
            let (key, _) = row.map_err(|e| self.storage(e))?;
            let (row_label, row_key) = key.value();
            if row_label != label {
                break;
            }
            keys.push(row_key.to_string());
        }
        Ok(keys)
    }

    /// The bytes store `label` holds (its keys and values).
    pub fn store_bytes(&self, label: &str) -> Result<u64, KvError> {
        let txn = self.db.begin_read().map_err(|e| self.storage(e))?;
        let table = txn.open_table(STORE_BYTES).map_err(|e| self.storage(e))?;
        let bytes = table.get(label).map_err(|e| self.storage(e))?;
        Ok(bytes.map_or(0, |b| b.value()))
    }

    /// Sets `key` to `value` in store `label`, durably, unless the store
    /// would then hold more than `limit` bytes.
    pub fn set(&self, label: &str, key: &str, value: &[u8], limit: u64) -> Result<(), KvError> {
        let txn = self.db.begin_write().map_err(|e| self.storage(e))?;
        {
            let mut entries = txn.open_table(ENTRIES).map_err(|e| self.storage(e))?;
            let mut totals = txn.open_table(STORE_BYTES).map_err(|e| self.storage(e))?;
            let held = totals
                .get(label)
                .map_err(|e| self.storage(e))?
                .map_or(0, |b| b.value());
            let old = entries
                .get((label, key))
                .map_err(|e| self.storage(e))?
                .map(|v| entry_bytes(key, v.value().len()));
            let would_hold = held
                .saturating_sub(old.unwrap_or(0))
                .saturating_add(entry_bytes(key, value.len()));
            if would_hold > limit {
                return Err(KvError::StoreFull { would_hold, limit });
            }
            entries
                .insert((label, key), value)
                .map_err(|e| self.storage(e))?;
            totals
                .insert(label, would_hold)
                .map_err(|e| self.storage(e))?;
        }
        txn.commit().map_err(|e| self.storage(e))
    }

    /// Deletes `key` from store `label`, durably; deleting a missing key
    /// succeeds.
    pub fn delete(&self, label: &str, key: &str) -> Result<(), KvError> {
        let txn = self.db.begin_write().map_err(|e| self.storage(e))?;
        {
            let mut entries = txn.open_table(ENTRIES).map_err(|e| self.storage(e))?;
            let removed = entries
                .remove((label, key))
                .map_err(|e| self.storage(e))?
                .map(|v| entry_bytes(key, v.value().len()));
            if let Some(removed) = removed {
                let mut totals = txn.open_table(STORE_BYTES).map_err(|e| self.storage(e))?;
                let held = totals
                    .get(label)
                    .map_err(|e| self.storage(e))?
                    .map_or(0, |b| b.value());
                totals
                    .insert(label, held.saturating_sub(removed))
                    .map_err(|e| self.storage(e))?;
            }
        }
        txn.commit().map_err(|e| self.storage(e))
    }
}

/// What one entry counts against its store's bound.
fn storage(path: &Path, e: impl std::fmt::Display) -> KvError {
    KvError::Storage {
        path: path.to_path_buf(),
        why: e.to_string(),
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
    pub fn open(store: &Path) -> Result<RedbBackend, KvError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_are_separate_bounded_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = kv_path(dir.path().join("locks.redb"));
        assert!(path.ends_with("locks.redb-kv"));
        {
            let kv = KvFile::open(&path).unwrap();
            kv.set("a", "k1", b"one", 100).unwrap();
            kv.set("a", "k2", b"two", 100).unwrap();
            kv.set("b", "k1", b"other", 100).unwrap();
            assert_eq!(kv.get("a", "k1").unwrap().as_deref(), Some(&b"one"[..]));
            assert_eq!(kv.keys("a").unwrap(), ["k1", "k2"]);
            assert_eq!(kv.keys("b").unwrap(), ["k1"]);
            assert_eq!(kv.store_bytes("a").unwrap(), 10);
            // Overwriting counts the difference; a write past the bound
            // changes nothing.
            kv.set("a", "k1", b"1", 100).unwrap();
            assert_eq!(kv.store_bytes("a").unwrap(), 8);
            let full = kv.set("a", "k3", &[0; 100], 100).unwrap_err();
            assert!(
                matches!(full, KvError::StoreFull { limit: 100, .. }),
                "{full}"
            );
            assert!(!kv.exists("a", "k3").unwrap());
            kv.delete("a", "k2").unwrap();
            kv.delete("a", "missing").unwrap();
            assert_eq!(kv.store_bytes("a").unwrap(), 3);
        }
        let kv = KvFile::open(&path).unwrap();
        assert_eq!(kv.keys("a").unwrap(), ["k1"]);
        assert_eq!(kv.get("a", "k1").unwrap().as_deref(), Some(&b"1"[..]));
        assert_eq!(kv.get("b", "k1").unwrap().as_deref(), Some(&b"other"[..]));
        assert_eq!(kv.store_bytes("a").unwrap(), 3);
    }
}
