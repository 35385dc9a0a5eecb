//! Waiting in a lock's queue: a waiter's key, its watch, and leaving the
//! queue.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, WatchOptions};
use lockd_core::{Durability, Grant, Key, LockError};
use tokio::sync::oneshot;

use super::Inner;
use crate::record::{to_json, Held, WaiterRecord};
use crate::rpc::gets;

/// Pause after a watch fails (a leader change, a dropped connection) before
/// reading again: error backoff, not polling.
pub(super) const WATCH_RETRY: Duration = Duration::from_millis(200);

/// This backend's place in a wait queue.
#[derive(Debug)]
pub(super) struct Waiter {
    pub(super) key: Vec<u8>,
    pub(super) id: String,
    pub(super) create_revision: i64,
}

/// How waiting in the queue ended.
pub(super) enum WaitEnd {
    Granted(Grant),
    /// Our waiter key vanished without a grant (its session was lost).
    Lost,
    TimedOut,
    Cancelled,
}

impl Inner {
    /// Puts a waiter key (on the session lease) at the back of the queue;
    /// with `lease`, a waiter under that lease (`owner` is its id).
    pub(super) async fn enqueue(
        &self,
        key: &Key,
        owner: &str,
        ttl_ms: u64,
        durability: Durability,
        lease: Option<&str>,
    ) -> Result<Waiter, LockError> {
        let (session, id) = self.session.next_waiter();
        let wkey = self.layout.waiter_key(key, &id);
        let lease = lease.map(str::to_string);
        let rec = WaiterRecord::new(id.clone(), owner, ttl_ms, durability, session, lease);
        let txn = Txn::new()
            .when(vec![Compare::version(wkey.clone(), CompareOp::Equal, 0)])
            .and_then(vec![
                TxnOp::put(
                    wkey.clone(),
                    to_json(&rec),
                    Some(PutOptions::new().with_lease(session)),
                ),
                TxnOp::get(wkey.clone(), Some(GetOptions::new().with_keys_only())),
            ]);
        let resp = self.etcd.txn("enqueue", txn).await?;
        let create_revision = gets(&resp)
            .first()
            .and_then(|g| g.kvs().first())
            .map(|kv| kv.create_revision())
            .filter(|_| resp.succeeded())
            .ok_or_else(|| LockError::Unavailable(format!("waiter key {id} already existed")))?;
        Ok(Waiter {
            key: wkey,
            id,
            create_revision,
        })
    }

    /// Takes `w` out of the queue. If a grant was handed to it first,
    /// returns that grant's holder.
    pub(super) async fn leave_queue(
        &self,
        lock_key: &[u8],
        w: &Waiter,
    ) -> Result<Option<Held>, LockError> {
        let txn = Txn::new()
            .when(vec![Compare::version(w.key.clone(), CompareOp::Greater, 0)])
            .and_then(vec![TxnOp::delete(w.key.clone(), None)])
            .or_else(vec![TxnOp::get(lock_key.to_vec(), None)]);
        let resp = self.etcd.txn("leave queue", txn).await?;
        if resp.succeeded() {
            return Ok(None);
        }
        let gets = gets(&resp);
        let Some(kv) = gets.first().and_then(|g| g.kvs().first()) else {
            return Ok(None);
        };
        let h = Held::from_kv(kv)?;
        Ok((h.rec.waiter.as_deref() == Some(w.id.as_str())).then_some(h))
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

    /// Waits in the queue until the lock is handed to `w`, the deadline
    /// passes, or the caller goes away. Only the predecessor's deletion
    /// wakes a waiter (etcd's lock recipe), and the head also watches the
    /// lock key and sleeps until the holder's expiry.
    pub(super) async fn wait_in_queue(
        &self,
        lock_key: &[u8],
        queue: &[u8],
        w: &Waiter,
        wait_until: u64,
        caller: &mut oneshot::Sender<Result<Grant, LockError>>,
    ) -> Result<WaitEnd, LockError> {
        loop {
            let snap = self.settled(lock_key, queue, Some(w)).await?;
            if let Some(h) = &snap.lock {
                if h.rec.waiter.as_deref() == Some(w.id.as_str()) {
                    return Ok(WaitEnd::Granted(h.grant()));
                }
            }
            if !snap.own_present {
                return Ok(WaitEnd::Lost);
            }
            if self.clock.now_ms() >= wait_until {
                return Ok(match self.leave_queue(lock_key, w).await? {
                    Some(h) => WaitEnd::Granted(h.grant()),
                    None => WaitEnd::TimedOut,
                });
            }
            let mut keys = vec![w.key.clone()];
            let mut wake_at = wait_until;
            match &snap.ahead {
                Some(ahead) => keys.push(ahead.key.clone()),
                None => {
                    keys.push(lock_key.to_vec());
                    if let Some(h) = &snap.lock {
                        wake_at = wake_at.min(h.rec.expires_at_ms);
                    }
                }
            }
            let watch_failed = tokio::select! {
                watched = self.watch_any(&keys, snap.revision + 1) => watched.err(),
                () = self.clock.sleep_until(wake_at) => None,
                () = caller.closed() => return Ok(self.cancel_wait(lock_key, w).await),
            };
            if let Some(e) = watch_failed {
                tracing::warn!(
                    waiter = %w.id,
                    error = %e,
                    "etcd watch of a lock queue failed; reading the queue again"
                );
                // Say, a watch sent to a member that just died. Try again
                // soon, but never past the holder's expiry or the deadline:
                // the head must take over an expired lock at once.
                tokio::select! {
                    () = tokio::time::sleep(WATCH_RETRY) => {}
                    () = self.clock.sleep_until(wake_at) => {}
                    () = caller.closed() => return Ok(self.cancel_wait(lock_key, w).await),
                }
            }
        }
    }

    /// The caller of a waiting `lock` went away: leaves the queue, keeping a
    /// grant that reached the waiter first (released by the caller's task).
    async fn cancel_wait(&self, lock_key: &[u8], w: &Waiter) -> WaitEnd {
        match self.leave_queue(lock_key, w).await {
            Ok(Some(h)) => WaitEnd::Granted(h.grant()),
            Err(e) => {
                tracing::warn!(
                    waiter = %w.id,
                    error = %e,
                    "etcd store: a cancelled lock call could not leave the queue"
                );
                WaitEnd::Cancelled
            }
            Ok(None) => WaitEnd::Cancelled,
        }
    }
}
