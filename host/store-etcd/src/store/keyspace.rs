//! lockd's keys in etcd as every part of the store reaches them: the
//! cluster, where each key lives, the etcd leases that carry them, the
//! clock that says when a record has expired; and the one-transaction
//! writes several parts make.

use std::collections::HashSet;
use std::sync::Arc;

use etcd_client::{Compare, GetResponse, PutOptions, Txn, TxnOp, WatchOptions};
use lockd_core::{Clock, Durability, Key, LockError};

use super::txn::{nobody_queued, unchanged};
use crate::etcd_lease::EtcdLeases;
use crate::events::Why;
use crate::floors::Floors;
use crate::keys::Layout;
use crate::name::{compose, Name};
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
    /// The revisions this backend's watches and reads still need, which
    /// its compactor keeps (`floors.rs`).
    pub(super) floors: Floors,
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

    /// The live sessions a read of [`Layout::all_sessions`] found.
    pub(super) fn sessions(&self, read: Option<&GetResponse>) -> HashSet<i64> {
        read.map_or(&[][..], |r| r.kvs())
            .iter()
            .filter_map(|kv| self.layout.session_of(kv.key()))
            .collect()
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
    pub(super) fn marked(&self, why: Why, current: Option<&Name>) -> Vec<TxnOp> {
        current
            .map(|_| why.marker(&self.layout))
            .into_iter()
            .collect()
    }

    /// The etcd lease for a lock key holding `grants` at `now`: a lone
    /// ephemeral grant lives on its host's session (the one its record
    /// names, else `session`), and anything else on a persistent lease that
    /// outlasts the last grant, delays included. An ephemeral grant beside
    /// others holds while its session's key lives (`Name::without_dead`).
    /// No grant: no lease (0).
    pub(super) async fn lease_for(
        &self,
        grants: &[LockRecord],
        now: u64,
        session: Option<i64>,
    ) -> Result<i64, LockError> {
        if grants.is_empty() {
            // Nothing to write: the key is deleted.
            return Ok(0);
        }
        if let [one] = grants {
            let session = one.session.or(session);
            if let Some(session) =
                session.filter(|_| Durability::from(one.durability) == Durability::Ephemeral)
            {
                return Ok(session);
            }
        }
        let longest = grants
            .iter()
            .map(|r| {
                r.ended_at_ms
                    .unwrap_or(r.expires_at_ms)
                    .saturating_add(r.lock_delay_ms)
                    .saturating_sub(now)
            })
            .max()
            .unwrap_or(0)
            .max(1);
        self.etcd_lease(Durability::Persistent, longest, None).await
    }

    /// Writes `grants` at the lock key (deletes it for none) if `when`
    /// holds, with `extra` ops in the same transaction, and returns the
    /// name as written (`Some(None)`: deleted; `None`: `when` failed).
    pub(super) async fn put_name(
        &self,
        lock_key: &[u8],
        when: Vec<Compare>,
        grants: Vec<LockRecord>,
        lease: i64,
        extra: Vec<TxnOp>,
    ) -> Result<Option<Option<Name>>, LockError> {
        let mut ops = match compose(grants) {
            Some(rec) => vec![TxnOp::put(
                lock_key.to_vec(),
                to_json(&rec),
                Some(PutOptions::new().with_lease(lease)),
            )],
            None => vec![TxnOp::delete(lock_key.to_vec(), None)],
        };
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
        let kv = gets.last().and_then(|g| g.kvs().first());
        kv.map(Name::from_kv).transpose().map(Some)
    }

    /// Writes `rec`, a grant this transaction makes, beside `keep` (the
    /// grants kept, tokens in them), as [`Keyspace::put_name`]; answers the
    /// name as written and the new grant, or `None` if `when` failed.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn put_grant(
        &self,
        lock_key: &[u8],
        when: Vec<Compare>,
        mut keep: Vec<LockRecord>,
        rec: LockRecord,
        session: Option<i64>,
        now: u64,
        extra: Vec<TxnOp>,
    ) -> Result<Option<(Name, Held)>, LockError> {
        let owner = rec.owner.clone();
        keep.push(rec);
        let lease = self.lease_for(&keep, now, session).await?;
        let Some(written) = self.put_name(lock_key, when, keep, lease, extra).await? else {
            return Ok(None);
        };
        let name = written
            .ok_or_else(|| LockError::Unavailable("etcd lost a lock it just wrote".into()))?;
        // The new grant is the most recent: the key's revision is its token.
        let g = name
            .grants
            .last()
            .filter(|g| g.rec.owner == owner)
            .cloned()
            .ok_or_else(|| LockError::Unavailable("etcd lost a lock it just wrote".into()))?;
        Ok(Some((name, g)))
    }

    /// Writes the name `n` tidied at `now` (expired grants out, or marked
    /// ended where they serve a delay) if it is still as read, marked
    /// expired; the key is deleted only while nobody waits (a waiter would
    /// have it handed over instead). Whether it did.
    pub(super) async fn tidy(
        &self,
        lock_key: &[u8],
        queue: &[u8],
        n: &Name,
        now: u64,
    ) -> Result<bool, LockError> {
        let (kept, changed) = n.tidied(now);
        if !changed {
            return Ok(true);
        }
        let mut when = vec![unchanged(lock_key, Some(n))];
        if kept.is_empty() {
            when.push(nobody_queued(queue));
        }
        let lease = self.lease_for(&kept, now, None).await?;
        let marker = vec![Why::Expired.marker(&self.layout)];
        Ok(self
            .put_name(lock_key, when, kept, lease, marker)
            .await?
            .is_some())
    }

    /// Waits for any event on `keys` from `revision` on. Also returns
    /// `Ok` if etcd cancels the watch, as it does when it compacted past
    /// `revision` first: the caller reads again either way.
    ///
    /// Holds a floor at `revision` until etcd confirmed every key's watch,
    /// so this backend's compactor does not compact it away meanwhile
    /// (`floors.rs`); once registered, a watch is safe from compaction.
    pub(super) async fn watch_any(&self, keys: &[Vec<u8>], revision: i64) -> Result<(), LockError> {
        let options = || Some(WatchOptions::new().with_start_revision(revision));
        let Some((first, rest)) = keys.split_first() else {
            return Ok(());
        };
        let mut floor = Some(self.floors.hold(revision));
        let mut unconfirmed = keys.len();
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
                Ok(Some(resp)) => {
                    if resp.created() {
                        unconfirmed = unconfirmed.saturating_sub(1);
                        if unconfirmed == 0 {
                            drop(floor.take());
                        }
                    }
                }
                Ok(None) => return Err(self.etcd.unavailable("watch", "the stream closed")),
                Err(e) => return Err(self.etcd.unavailable("watch", e)),
            }
        }
    }
}
