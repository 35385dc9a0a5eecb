//! lockd's keys in etcd as every part of the store reaches them: the
//! cluster, where each key lives, the etcd leases that carry them, the
//! clock that says when a record has expired; and the one-transaction
//! writes several parts make.

use std::sync::Arc;

use etcd_client::{Compare, PutOptions, Txn, TxnOp, WatchOptions};
use lockd_core::{Clock, Durability, Key, LockError};

use super::txn::{nobody_queued, unchanged};
use crate::etcd_lease::EtcdLeases;
use crate::events::Why;
use crate::keys::Layout;
use crate::record::{to_json, Held, LockRecord};
use crate::rpc::{gets, Etcd};

/// The ground every part of the store stands on.
pub(super) struct Keyspace {
    /// The cluster: requests, resends, the endpoints in rotation.
    pub(super) etcd: Etcd,
    /// Where each lock, waiter and lease key lives.
    pub(super) layout: Layout,
    /// The authority on expiry: a record is live while this clock is
    /// before its `expires_at_ms`.
    pub(super) clock: Arc<dyn Clock>,
    /// The etcd leases the keys live on (this backend's session, and the
    /// leases persistent keys share).
    pub(super) etcd_leases: EtcdLeases,
}

impl Keyspace {
    /// The etcd lease for a key of `durability` that must last `ttl_ms`
    /// (see [`EtcdLeases::for_key`]).
    pub(super) async fn etcd_lease(
        &self,
        durability: Durability,
        ttl_ms: u64,
        session: Option<i64>,
    ) -> Result<i64, LockError> {
        self.etcd_leases
            .for_key(&self.etcd, durability, ttl_ms, session)
            .await
    }

    /// The lock named by one of this layout's lock keys.
    pub(super) fn key_of(&self, lock_key: &[u8]) -> Result<Key, LockError> {
        self.layout.key_of(lock_key).ok_or_else(|| {
            LockError::Unavailable(format!(
                "{:?} is not a lock key of this store",
                String::from_utf8_lossy(lock_key)
            ))
        })
    }

    /// The marker of a transaction that removes `current` (if any) because
    /// of `why`, for the events watch (see `events.rs`).
    pub(super) fn marked(&self, why: Why, current: Option<&Held>) -> Vec<TxnOp> {
        current
            .map(|_| why.marker(&self.layout))
            .into_iter()
            .collect()
    }

    /// Writes `rec` at the lock key if `when` holds, with `extra` ops in the
    /// same transaction, and returns the lock as written.
    pub(super) async fn put_holder(
        &self,
        lock_key: &[u8],
        when: Vec<Compare>,
        rec: &LockRecord,
        lease: i64,
        extra: Vec<TxnOp>,
    ) -> Result<Option<Held>, LockError> {
        let mut ops = vec![TxnOp::put(
            lock_key.to_vec(),
            to_json(rec),
            Some(PutOptions::new().with_lease(lease)),
        )];
        ops.extend(extra);
        ops.push(TxnOp::get(lock_key.to_vec(), None));
        let resp = self
            .etcd
            .txn("grant", Txn::new().when(when).and_then(ops))
            .await?;
        if !resp.succeeded() {
            return Ok(None);
        }
        let gets = gets(&resp);
        let kv = gets
            .last()
            .and_then(|g| g.kvs().first())
            .ok_or_else(|| LockError::Unavailable("etcd lost a lock it just wrote".into()))?;
        Held::from_kv(kv).map(Some)
    }

    /// Deletes the expired lock `h` if it is still as read and nobody
    /// waits (a waiter would have it handed over instead), marked expired.
    /// Whether it did.
    pub(super) async fn remove_expired(
        &self,
        lock_key: &[u8],
        queue: &[u8],
        h: &Held,
    ) -> Result<bool, LockError> {
        let mut ops = vec![TxnOp::delete(lock_key.to_vec(), None)];
        ops.extend(self.marked(Why::Expired, Some(h)));
        let txn = Txn::new()
            .when(vec![unchanged(lock_key, Some(h)), nobody_queued(queue)])
            .and_then(ops);
        Ok(self.etcd.txn("remove expired", txn).await?.succeeded())
    }

    /// Waits for any event on `keys` from `revision` on.
    pub(super) async fn watch_any(&self, keys: &[Vec<u8>], revision: i64) -> Result<(), LockError> {
        let options = || Some(WatchOptions::new().with_start_revision(revision));
        let Some((first, rest)) = keys.split_first() else {
            return Ok(());
        };
        let mut stream = self
            .etcd
            .rpc("watch", || {
                let mut wc = self.etcd.client().watch_client();
                let (key, options) = (first.clone(), options());
                async move { wc.watch(key, options).await }
            })
            .await?;
        for k in rest {
            // A request on the stream just opened: a local send, no retry.
            let limit = self.etcd.request_timeout();
            match tokio::time::timeout(limit, stream.watch(k.clone(), options())).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(self.etcd.unavailable("watch", e)),
                Err(_) => return Err(self.etcd.unavailable("watch", "timed out")),
            }
        }
        loop {
            match stream.message().await {
                // Cancelled (say, compacted past `revision`): read again.
                Ok(Some(resp)) if resp.canceled() || !resp.events().is_empty() => return Ok(()),
                Ok(Some(_)) => {}
                Ok(None) => return Err(self.etcd.unavailable("watch", "the stream closed")),
                Err(e) => return Err(self.etcd.unavailable("watch", e)),
            }
        }
    }
}
