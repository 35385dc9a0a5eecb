//! The key-value stores of Spin components (`lockd up`) on etcd, so that
//! every host serving an app sees the same data.
//!
//! ```text
//! <prefix>-kv/<label>/<key>     one entry (label and key percent-encoded)
//! <prefix>-kv/.bytes/<label>    the bytes of keys and values the store holds
//! ```
//!
//! - **Its own prefix**, `<prefix>-kv/` beside the lock store's `<prefix>/`:
//!   the lock store reads its whole prefix at start and watches it, and
//!   application data has no place in either. The etcd user needs readwrite
//!   on both prefixes.
//! - **Bounded.** A write compares the entry's and the byte count's
//!   revisions with what it read, and changes both in one transaction, so
//!   the count is exact with any number of hosts writing; a write that
//!   would pass the store's bound changes nothing ([`KvError::StoreFull`]).
//! - **Acknowledged means applied.** etcd answers a transaction once a
//!   quorum has it; an answer lost to a timeout is reported as a failure,
//!   and the guest may write again (a `set` of the same value is the same).

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp};
use lockd_core::LockError;

use lockd_etcd::connection::{
    decode_segment as decode, encode_segment as encode, gets, EtcdConnection,
};
use lockd_etcd::EtcdOptions;
use tokio::sync::OnceCell;

use crate::{entry_bytes, Backend, BoxFuture, Failed, KvError};

/// How often a write that lost a race with another writer of the same
/// store is tried again before it fails.
const WRITE_ATTEMPTS: usize = 64;

impl From<LockError> for KvError {
    fn from(e: LockError) -> Self {
        KvError::Unavailable(e.to_string())
    }
}

/// The key-value stores on one etcd cluster, under `<prefix>-kv/`.
pub struct EtcdKv {
    etcd: EtcdConnection,
    /// `<prefix>-kv`, without a trailing `/`.
    root: String,
}

impl std::fmt::Debug for EtcdKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdKv")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

/// What a write read first: the entry's and the count's revisions (0 for
/// a key that does not exist), the entry's size and the count.
struct Seen {
    entry_revision: i64,
    entry_bytes: Option<u64>,
    count_revision: i64,
    count: u64,
}

impl EtcdKv {
    /// Connects to the cluster `options` names (TLS, user as they say);
    /// the stores live under `options.prefix` + `-kv/`.
    pub async fn connect(options: &EtcdOptions) -> Result<EtcdKv, LockError> {
        let etcd = EtcdConnection::connect(options).await?;
        Ok(EtcdKv {
            etcd,
            root: format!("{}-kv", options.prefix.trim_end_matches('/')),
        })
    }

    fn entries(&self, label: &str) -> Vec<u8> {
        format!("{}/{}/", self.root, encode(label)).into_bytes()
    }

    fn entry(&self, label: &str, key: &str) -> Vec<u8> {
        format!("{}/{}/{}", self.root, encode(label), encode(key)).into_bytes()
    }

    fn count_key(&self, label: &str) -> Vec<u8> {
        format!("{}/.bytes/{}", self.root, encode(label)).into_bytes()
    }

    /// The value of `key` in store `label`.
    pub async fn get(&self, label: &str, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        let resp = self
            .etcd
            .range("key-value get", self.entry(label, key), None)
            .await?;
        Ok(resp.kvs().first().map(|kv| kv.value().to_vec()))
    }

    /// Whether store `label` holds `key`.
    pub async fn exists(&self, label: &str, key: &str) -> Result<bool, KvError> {
        let options = GetOptions::new().with_count_only();
        let resp = self
            .etcd
            .range("key-value exists", self.entry(label, key), Some(options))
            .await?;
        Ok(resp.count() > 0)
    }

    /// Every key of store `label`, in order.
    pub async fn keys(&self, label: &str) -> Result<Vec<String>, KvError> {
        let options = GetOptions::new().with_prefix().with_keys_only();
        let prefix = self.entries(label);
        let resp = self
            .etcd
            .range("key-value keys", prefix.clone(), Some(options))
            .await?;
        Ok(resp
            .kvs()
            .iter()
            .filter_map(|kv| {
                let rest = std::str::from_utf8(kv.key().strip_prefix(prefix.as_slice())?).ok()?;
                decode(rest)
            })
            .collect())
    }

    async fn read(&self, label: &str, key: &str) -> Result<Seen, KvError> {
        let txn = Txn::new().and_then(vec![
            TxnOp::get(self.entry(label, key), None),
            TxnOp::get(self.count_key(label), None),
        ]);
        let resp = self.etcd.read_txn("key-value read", txn).await?;
        let answers = gets(&resp);
        let entry = answers.first().and_then(|g| g.kvs().first());
        let count = answers.get(1).and_then(|g| g.kvs().first());
        Ok(Seen {
            entry_revision: entry.map_or(0, |kv| kv.mod_revision()),
            entry_bytes: entry.map(|kv| entry_bytes(key, kv.value().len())),
            count_revision: count.map_or(0, |kv| kv.mod_revision()),
            count: count
                .and_then(|kv| std::str::from_utf8(kv.value()).ok()?.parse().ok())
                .unwrap_or(0),
        })
    }

    /// Applies `then` if neither the entry nor the count changed since
    /// `seen`; whether it did.
    async fn write_if_unchanged(
        &self,
        label: &str,
        key: &str,
        seen: &Seen,
        then: Vec<TxnOp>,
    ) -> Result<bool, KvError> {
        let txn = Txn::new()
            .when(vec![
                Compare::mod_revision(
                    self.entry(label, key),
                    CompareOp::Equal,
                    seen.entry_revision,
                ),
                Compare::mod_revision(self.count_key(label), CompareOp::Equal, seen.count_revision),
            ])
            .and_then(then);
        Ok(self.etcd.txn("key-value write", txn).await?.succeeded())
    }

    /// Sets `key` in store `label`, unless the store would then hold more
    /// than `limit` bytes of keys and values. Applied when it returns.
    pub async fn set(
        &self,
        label: &str,
        key: &str,
        value: &[u8],
        limit: u64,
    ) -> Result<(), KvError> {
        for _ in 0..WRITE_ATTEMPTS {
            let seen = self.read(label, key).await?;
            let would_hold = seen
                .count
                .saturating_sub(seen.entry_bytes.unwrap_or(0))
                .saturating_add(entry_bytes(key, value.len()));
            if would_hold > limit {
                return Err(KvError::StoreFull { would_hold, limit });
            }
            let then = vec![
                TxnOp::put(self.entry(label, key), value.to_vec(), None),
                TxnOp::put(self.count_key(label), would_hold.to_string(), None),
            ];
            if self.write_if_unchanged(label, key, &seen, then).await? {
                return Ok(());
            }
        }
        Err(KvError::Contended)
    }

    /// Deletes `key` from store `label` (a missing key is no error).
    /// Applied when it returns.
    pub async fn delete(&self, label: &str, key: &str) -> Result<(), KvError> {
        for _ in 0..WRITE_ATTEMPTS {
            let seen = self.read(label, key).await?;
            let Some(freed) = seen.entry_bytes else {
                return Ok(());
            };
            let then = vec![
                TxnOp::delete(self.entry(label, key), None),
                TxnOp::put(
                    self.count_key(label),
                    seen.count.saturating_sub(freed).to_string(),
                    None,
                ),
            ];
            if self.write_if_unchanged(label, key, &seen, then).await? {
                return Ok(());
            }
        }
        Err(KvError::Contended)
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

fn worded(e: KvError) -> Failed {
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
