//! The stores of one app: each label's backend and bounds, and the checks
//! every call passes before its backend sees it. What a guest's `store`
//! handle stands for ([`OpenStore`]) is one of these.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use anyhow::bail;
use lockd_server::config::{
    KeyValueStoreConfig, KeyValueStoreType, LockdConfig, DEFAULT_KV_MAX_KEY_BYTES,
    DEFAULT_KV_MAX_STORE_BYTES, DEFAULT_KV_MAX_VALUE_BYTES,
};
use lockd_server::store::StoreSpec;

use lockd_kv::{Backend, EtcdKvBackend, MemoryBackend, RedbBackend};

/// The stores one instance may have open at once; opening more answers
/// `store-table-full` (Spin's table holds as many).
pub const MAX_OPEN_STORES: usize = 256;

/// The label every component may list without configuration.
pub const DEFAULT_LABEL: &str = "default";

/// The bounds of one store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvLimits {
    /// Longest key, in bytes.
    pub max_key_bytes: usize,
    /// Largest value, in bytes.
    pub max_value_bytes: usize,
    /// Most bytes of keys and values the store holds.
    pub max_store_bytes: u64,
}

impl KvLimits {
    fn of(config: Option<&KeyValueStoreConfig>) -> KvLimits {
        KvLimits {
            max_key_bytes: config
                .and_then(|c| c.max_key_bytes)
                .unwrap_or(DEFAULT_KV_MAX_KEY_BYTES),
            max_value_bytes: config
                .and_then(|c| c.max_value_bytes)
                .unwrap_or(DEFAULT_KV_MAX_VALUE_BYTES),
            max_store_bytes: config
                .and_then(|c| c.max_store_bytes)
                .unwrap_or(DEFAULT_KV_MAX_STORE_BYTES),
        }
    }
}

/// One store: its label, where it lives, its bounds.
#[derive(Clone)]
pub struct LabeledStore {
    label: String,
    backend: Arc<dyn Backend>,
    limits: KvLimits,
}

impl std::fmt::Debug for LabeledStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LabeledStore")
            .field("label", &self.label)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// An open store: what a guest's `store` resource stands for.
#[derive(Debug)]
pub struct OpenStore(pub(crate) LabeledStore);

/// Why a store call failed, in the words the guest gets (`other(...)`).
pub(crate) type KvFailure = String;

impl LabeledStore {
    fn check_key(&self, key: &str) -> Result<(), KvFailure> {
        if key.len() > self.limits.max_key_bytes {
            return Err(format!(
                "the key is {} bytes, over the limit of {} (max_key_bytes of \
                 [key_value_store.{}] in lockd.toml)",
                key.len(),
                self.limits.max_key_bytes,
                self.label
            ));
        }
        Ok(())
    }

    pub(crate) async fn get(&self, key: String) -> Result<Option<Vec<u8>>, KvFailure> {
        self.check_key(&key)?;
        self.backend.get(self.label.clone(), key).await
    }

    pub(crate) async fn exists(&self, key: String) -> Result<bool, KvFailure> {
        self.check_key(&key)?;
        self.backend.exists(self.label.clone(), key).await
    }

    pub(crate) async fn delete(&self, key: String) -> Result<(), KvFailure> {
        self.check_key(&key)?;
        self.backend.delete(self.label.clone(), key).await
    }

    pub(crate) async fn keys(&self) -> Result<Vec<String>, KvFailure> {
        self.backend.keys(self.label.clone()).await
    }

    pub(crate) async fn set(&self, key: String, value: Vec<u8>) -> Result<(), KvFailure> {
        self.check_key(&key)?;
        if value.len() > self.limits.max_value_bytes {
            return Err(format!(
                "the value is {} bytes, over the limit of {} (max_value_bytes of \
                 [key_value_store.{}] in lockd.toml)",
                value.len(),
                self.limits.max_value_bytes,
                self.label
            ));
        }
        let limit = self.limits.max_store_bytes;
        self.backend
            .set(self.label.clone(), key, value, limit)
            .await
            .map_err(|why| {
                format!(
                    "{why} (max_store_bytes of [key_value_store.{}] in lockd.toml)",
                    self.label
                )
            })
    }
}

/// Every store the server has for one app, by label.
#[derive(Clone, Debug, Default)]
pub struct KeyValueStores {
    stores: HashMap<String, LabeledStore>,
}

impl KeyValueStores {
    /// The stores for an app whose components list `wanted` (label to the
    /// components listing it), kept where `store` keeps the locks, bounded
    /// as lockd.toml says. A label other than `default` that lockd.toml does
    /// not declare is refused, naming it and a component that lists it.
    pub fn open(
        wanted: &BTreeMap<String, Vec<String>>,
        config: &LockdConfig,
        store: &StoreSpec,
    ) -> anyhow::Result<KeyValueStores> {
        if wanted.is_empty() {
            return Ok(KeyValueStores::default());
        }
        for (label, components) in wanted {
            let declared = config.key_value_store.get(label);
            if declared.is_none() && label != DEFAULT_LABEL {
                bail!(
                    "component {} lists key-value store {label:?}, which lockd.toml does not \
                     declare: add [key_value_store.{label}] with type = \"lockd\" (only \
                     \"default\" needs no entry)",
                    components.first().map_or("?", String::as_str)
                );
            }
            // Exhaustive, so that a new kind cannot slip past unserved.
            match declared.map(|c| c.kind) {
                None | Some(KeyValueStoreType::Lockd) => {}
            }
        }
        let backend: Arc<dyn Backend> = match store {
            StoreSpec::Memory => Arc::new(MemoryBackend::default()),
            StoreSpec::Redb(path) => Arc::new(RedbBackend::open(path)?),
            StoreSpec::Etcd(options) => Arc::new(EtcdKvBackend::new((**options).clone())),
        };
        let stores = wanted
            .keys()
            .map(|label| {
                let store = LabeledStore {
                    label: label.clone(),
                    backend: backend.clone(),
                    limits: KvLimits::of(config.key_value_store.get(label)),
                };
                (label.clone(), store)
            })
            .collect();
        Ok(KeyValueStores { stores })
    }

    /// The store of `label`, if the server has one.
    pub(crate) fn get(&self, label: &str) -> Option<&LabeledStore> {
        self.stores.get(label)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stores(config: &str, wanted: &[(&str, &str)]) -> anyhow::Result<KeyValueStores> {
        let config: LockdConfig = toml::from_str(config).unwrap();
        let mut map: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (label, component) in wanted {
            map.entry(label.to_string())
                .or_default()
                .push(component.to_string());
        }
        KeyValueStores::open(&map, &config, &StoreSpec::Memory)
    }

    #[test]
    fn an_undeclared_label_is_refused_naming_it_and_the_component() {
        let e = stores("", &[("default", "a"), ("sessions", "web")]).unwrap_err();
        let e = e.to_string();
        assert!(
            e.contains("\"sessions\"") && e.contains("component web"),
            "{e}"
        );
        let ok = stores(
            "[key_value_store.sessions]\ntype = \"lockd\"\n",
            &[("default", "a"), ("sessions", "web")],
        )
        .unwrap();
        assert!(ok.get("sessions").is_some() && ok.get("default").is_some());
        assert!(ok.get("other").is_none());
    }

    #[tokio::test]
    async fn every_limit_answers_a_message_naming_it() {
        let s = stores(
            "[key_value_store.default]\nmax_key_bytes = 4\nmax_value_bytes = 8\nmax_store_bytes = 20\n",
            &[("default", "a")],
        )
        .unwrap();
        let store = s.get("default").unwrap();
        let long_key = store.set("12345".into(), vec![]).await.unwrap_err();
        assert!(long_key.contains("max_key_bytes"), "{long_key}");
        assert!(store
            .get("12345".into())
            .await
            .unwrap_err()
            .contains("max_key_bytes"));
        let big = store.set("k".into(), vec![0; 9]).await.unwrap_err();
        assert!(big.contains("max_value_bytes"), "{big}");
        store.set("k1".into(), vec![0; 8]).await.unwrap();
        store.set("k2".into(), vec![0; 8]).await.unwrap();
        let full = store.set("k3".into(), vec![0; 1]).await.unwrap_err();
        assert!(full.contains("max_store_bytes"), "{full}");
        // Replacing a value with a smaller one fits; freeing makes room.
        store.set("k2".into(), vec![0; 1]).await.unwrap();
        store.set("k3".into(), vec![0; 1]).await.unwrap();
        store.delete("k1".into()).await.unwrap();
        assert_eq!(store.keys().await.unwrap(), ["k2", "k3"]);
        assert!(!store.exists("k1".into()).await.unwrap());
    }
}
