//! A connection to etcd made as the lock store makes its own (endpoints,
//! TLS, user, timeouts, which failed requests are sent again), for data
//! that lives beside the locks on the same cluster under a prefix of its
//! own: `lockd-kv`'s key-value stores.

use etcd_client::{GetOptions, GetResponse, Txn, TxnResponse};
use lockd_core::LockError;

use crate::options::EtcdOptions;
use crate::rpc::Etcd;
use crate::store::connect_etcd;

/// A client of the cluster `EtcdOptions` name. Every failure is
/// `unavailable`, naming the endpoints.
pub struct EtcdConnection {
    etcd: Etcd,
}

impl std::fmt::Debug for EtcdConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdConnection").finish_non_exhaustive()
    }
}

impl EtcdConnection {
    /// Checks `options` and connects, as the lock store does at start.
    pub async fn connect(options: &EtcdOptions) -> Result<EtcdConnection, LockError> {
        Ok(EtcdConnection {
            etcd: connect_etcd(options).await?,
        })
    }

    /// A range read (`what` names it in errors), sent again after any
    /// transient failure.
    pub async fn range(
        &self,
        what: &str,
        key: Vec<u8>,
        options: Option<GetOptions>,
    ) -> Result<GetResponse, LockError> {
        self.etcd.range(what, key, options).await
    }

    /// A transaction of reads only, sent again after any transient failure.
    pub async fn read_txn(&self, what: &str, txn: Txn) -> Result<TxnResponse, LockError> {
        self.etcd.read_txn(what, txn).await
    }

    /// A transaction that writes: sent again only if it never reached etcd,
    /// so an error may leave it applied or not.
    pub async fn txn(&self, what: &str, txn: Txn) -> Result<TxnResponse, LockError> {
        self.etcd.txn(what, txn).await
    }
}

/// The answers of a transaction's get operations, in order.
pub fn gets(resp: &TxnResponse) -> Vec<GetResponse> {
    crate::rpc::gets(resp)
}

/// `s` as one segment of a key: percent-encoded, so it holds no `/` and
/// keeps prefixes (see the key layout of the lock store).
pub fn encode_segment(s: &str) -> String {
    crate::keys::encode(s)
}

/// Reverses [`encode_segment`]; `None` for what it cannot produce.
pub fn decode_segment(s: &str) -> Option<String> {
    crate::keys::decode(s)
}
