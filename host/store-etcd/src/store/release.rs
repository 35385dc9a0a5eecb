//! Releasing a lock: in one round trip for a grant this backend wrote and
//! nobody changed since, else after a read, handing it to the queue's head
//! if anyone waits; and force-unlock, the same release whoever holds it.

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use lockd_core::{Key, LockError, LockInfo};

use super::lease::LeaseEdits;
use super::{nobody_queued, unchanged, Inner};
use crate::events::Why;
use crate::record::Held;

/// Whose lock a release may release.
#[derive(Clone, Copy, Debug)]
pub(super) enum Who<'a> {
    /// The owner's, with this token if given; else `NotOwner`.
    Owner(&'a str, Option<u64>),
    /// Whoever holds it (force-unlock).
    Anyone,
}

impl Inner {
    pub(super) async fn unlock_flow(
        &self,
        key: &Key,
        owner: &str,
        token: Option<u64>,
    ) -> Result<(), LockError> {
        let lock_key = self.layout.lock_key(key);
        let queue = self.layout.queue_prefix(key);
        if self.unlock_recent(&lock_key, &queue, owner, token).await? {
            return Ok(());
        }
        self.release(&lock_key, &queue, Who::Owner(owner, token), Why::Released)
            .await
            .map(drop)
    }

    /// Releases `key` whoever holds it, to the head of its queue if anyone
    /// waits, in one transaction marked force-released (a lock under a
    /// lease leaves the lease's record in it too). Answers the holder it
    /// released; `NotHeld` if the lock is free.
    pub(crate) async fn force_unlock(&self, key: &Key) -> Result<LockInfo, LockError> {
        self.settle_turns(key).await;
        self.settle_pending(|k| k == key).await;
        let lock_key = self.layout.lock_key(key);
        let queue = self.layout.queue_prefix(key);
        let result = self
            .release(&lock_key, &queue, Who::Anyone, Why::Forced)
            .await;
        let info = super::log_unavailable("force-unlock", key, result)?.info();
        tracing::warn!(
            namespace = &*key.namespace,
            name = &*key.name,
            owner = %info.owner,
            token = info.fencing_token,
            "lock force-released"
        );
        Ok(info)
    }

    /// The unlock of a grant this backend wrote and nobody changed since,
    /// by its owner, with nobody queued: one transaction that deletes the
    /// key only if it is still at the revision written, so it cannot
    /// touch anything else. `false` means: take the general path.
    async fn unlock_recent(
        &self,
        lock_key: &[u8],
        queue: &[u8],
        owner: &str,
        token: Option<u64>,
    ) -> Result<bool, LockError> {
        let now = self.clock.now_ms();
        let Some(mod_revision) = self.recent.take(lock_key, owner, token, now) else {
            return Ok(false);
        };
        let txn = Txn::new()
            .when(vec![
                Compare::mod_revision(lock_key.to_vec(), CompareOp::Equal, mod_revision),
                nobody_queued(queue),
            ])
            .and_then(vec![TxnOp::delete(lock_key.to_vec(), None)]);
        Ok(self.etcd.txn("unlock", txn).await?.succeeded())
    }

    /// Releases the live lock of `who`, handing it to the queue's head if
    /// anyone waits, in a transaction marked `why`. A lock found expired
    /// with someone waiting is handed over first, so the answer is then
    /// `NotOwner` (or, for [`Who::Anyone`], the release of that waiter).
    /// Answers the holder it released.
    pub(super) async fn release(
        &self,
        lock_key: &[u8],
        queue: &[u8],
        who: Who<'_>,
        why: Why,
    ) -> Result<Held, LockError> {
        loop {
            let snap = self.settled(lock_key, queue, None).await?;
            let now = self.clock.now_ms();
            let Some(h) = snap.lock.as_ref().filter(|h| h.live(now)) else {
                return Err(LockError::NotHeld);
            };
            if let Who::Owner(owner, token) = who {
                if h.rec.owner != owner || token.is_some_and(|t| t != h.token) {
                    return Err(LockError::NotOwner);
                }
            }
            let released = match &snap.head {
                // Release and hand-off are one transaction, so no caller on
                // any host sees the lock free while someone waits (as in
                // the engine), and the next holder is in place when unlock
                // returns.
                Some(head) => self.hand_off(lock_key, Some(h), head, now, why).await?,
                None => {
                    // The queue must still be empty: a waiter that joined
                    // since the read makes this a hand-off instead.
                    let mut when = vec![unchanged(lock_key, Some(h)), nobody_queued(queue)];
                    let mut ops = vec![TxnOp::delete(lock_key.to_vec(), None)];
                    ops.extend(self.marked(why, Some(h)));
                    if h.rec.lease {
                        // Out of its lease's record in the same step.
                        let mut edits = LeaseEdits::default();
                        let key = self.key_of(lock_key)?;
                        self.release_from_lease(&mut edits, &key, h).await?;
                        edits.apply(&mut when, &mut ops);
                    }
                    let txn = Txn::new().when(when).and_then(ops);
                    self.etcd.txn("unlock", txn).await?.succeeded()
                }
            };
            if released {
                return Ok(h.clone());
            }
        }
    }
}
