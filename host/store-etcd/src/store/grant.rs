//! Writing a holder: a fresh grant, a hand-off to the head of the queue,
//! a refresh (`extend`, an idempotent `lock`), and the quota check.

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use lockd_core::{Durability, Grant, Key, LockError, LockInfo, LockOptions};

use super::lease::LeaseEdits;
use super::release::Who;
use super::{nobody_queued, unchanged, Inner};
use crate::events::Why;
use crate::record::{to_json, Held, LockRecord, Queued};
use crate::rpc::gets;

/// How one attempt at a lock ended.
pub(super) enum Attempt {
    /// Granted; `true` for a fresh grant, `false` for a holder's refresh.
    Granted(Grant, bool),
    Busy(LockInfo),
}

/// How a [`Inner::refresh`] ended.
enum Refresh {
    Done(Grant),
    /// The lock changed since it was read: read again.
    Changed,
    /// The write may have landed after the old expiry, and was taken back.
    Lapsed,
}

pub(super) fn deadline(now_ms: u64, ttl_ms: u64) -> Result<u64, LockError> {
    now_ms.checked_add(ttl_ms).ok_or_else(|| {
        LockError::InvalidArgument(format!("ttl of {ttl_ms} ms overflows the deadline"))
    })
}

impl Inner {
    /// The lease a grant of `durability` goes on: a shared one for a
    /// persistent lock, this backend's session for an ephemeral one.
    async fn lease_for(&self, durability: Durability, ttl_ms: u64) -> Result<i64, LockError> {
        match durability {
            Durability::Persistent => self.leases.lease_for(&self.etcd, ttl_ms).await,
            Durability::Ephemeral => Ok(self.session.id()),
        }
    }

    /// Remembers a grant this backend just wrote, for a one-step unlock.
    fn remember(&self, lock_key: &[u8], h: &Held) {
        self.recent.remember(lock_key, h, || self.clock.now_ms());
    }

    /// One attempt: grant, refresh, or report the holder.
    pub(super) async fn try_acquire(
        &self,
        key: &Key,
        lock_key: &[u8],
        queue: &[u8],
        owner: &str,
        ttl_ms: u64,
        options: LockOptions,
    ) -> Result<Attempt, LockError> {
        // The common case first: nobody holds the lock and nobody waits.
        // One transaction that writes the grant only if so; otherwise read
        // and decide below. (A quota needs a count first.)
        if options.quota.is_none() {
            let expires_at_ms = deadline(self.clock.now_ms(), ttl_ms)?;
            let absent = unchanged(lock_key, None);
            if let Some(g) = self
                .grant_fresh(
                    lock_key,
                    queue,
                    absent,
                    Vec::new(),
                    owner,
                    ttl_ms,
                    expires_at_ms,
                    options,
                )
                .await?
            {
                return Ok(Attempt::Granted(g, true));
            }
        }
        loop {
            let snap = self.settled(lock_key, queue, None).await?;
            let now = self.clock.now_ms();
            let expires_at_ms = deadline(now, ttl_ms)?;
            match snap.lock.as_ref().filter(|h| h.live(now)) {
                // Held under the lease whose id `owner` is: its grant as it
                // is (only the lease moves its expiry).
                Some(h) if h.rec.owner == owner && h.rec.lease => {
                    return Ok(Attempt::Granted(h.grant(), false));
                }
                Some(h) if h.rec.owner == owner => {
                    // Lapsed: read again, and grant afresh (a new token) if
                    // nobody queued.
                    if let Refresh::Done(g) = self
                        .refresh(lock_key, queue, h, expires_at_ms, ttl_ms)
                        .await?
                    {
                        return Ok(Attempt::Granted(g, false));
                    }
                }
                Some(h) => return Ok(Attempt::Busy(h.info())),
                None => {
                    if let Some(quota) = options.quota {
                        self.check_quota(&key.namespace, quota, now).await?;
                    }
                    // Nobody queued: settled() served any head first.
                    let as_read = unchanged(lock_key, snap.lock.as_ref());
                    // Over an expired holder: its end is marked expired.
                    let marker = self.marked(Why::Expired, snap.lock.as_ref());
                    if let Some(g) = self
                        .grant_fresh(
                            lock_key,
                            queue,
                            as_read,
                            marker,
                            owner,
                            ttl_ms,
                            expires_at_ms,
                            options,
                        )
                        .await?
                    {
                        return Ok(Attempt::Granted(g, true));
                    }
                }
            }
        }
    }

    /// The marker of a transaction that removes `current` (if any) because
    /// of `why`, for the events watch (see `events.rs`).
    pub(super) fn marked(&self, why: Why, current: Option<&Held>) -> Vec<TxnOp> {
        current
            .map(|_| why.marker(&self.layout))
            .into_iter()
            .collect()
    }

    /// Writes a fresh grant to `owner` if the lock key passes `key_as_seen`
    /// and nobody is queued, with `extra` ops, and remembers it. `None` if
    /// either changed.
    #[allow(clippy::too_many_arguments)]
    async fn grant_fresh(
        &self,
        lock_key: &[u8],
        queue: &[u8],
        key_as_seen: Compare,
        extra: Vec<TxnOp>,
        owner: &str,
        ttl_ms: u64,
        expires_at_ms: u64,
        options: LockOptions,
    ) -> Result<Option<Grant>, LockError> {
        let lease = self.lease_for(options.durability, ttl_ms).await?;
        let now = self.clock.now_ms();
        let rec = LockRecord::fresh(owner, now, expires_at_ms, options.durability, None);
        let when = vec![key_as_seen, nobody_queued(queue)];
        let written = self.put_holder(lock_key, when, &rec, lease, extra).await?;
        Ok(written.map(|h| {
            self.remember(lock_key, &h);
            h.grant()
        }))
    }

    pub(super) async fn check_quota(
        &self,
        namespace: &str,
        quota: u64,
        now: u64,
    ) -> Result<(), LockError> {
        let resp = self
            .etcd
            .range(
                "quota count",
                self.layout.list_prefix(namespace, ""),
                Some(GetOptions::new().with_prefix()),
            )
            .await?;
        let held = resp
            .kvs()
            .iter()
            .filter_map(|kv| Held::from_kv(kv).ok())
            .filter(|h| h.live(now))
            .count() as u64;
        if held >= quota {
            return Err(LockError::Denied(format!(
                "namespace {namespace:?} already holds {quota} locks, its quota"
            )));
        }
        Ok(())
    }

    /// Grants the lock to the waiter `head`, taking it out of the queue, in
    /// one transaction that holds only if neither changed since the read.
    /// Returns whether it held; `current` (expired, or being unlocked) is
    /// replaced then.
    ///
    /// Leases: a live `current` under a lease leaves that lease's record,
    /// and a waiter under a lease enters its lease's record, in the same
    /// transaction (guarded by the lease keys' revisions). A waiter whose
    /// lease has ended is dropped from the queue instead (`false`: read
    /// again), so no lock is handed to a lease that ended.
    ///
    /// `why` is why `current` leaves (the transaction's marker).
    pub(super) async fn hand_off(
        &self,
        lock_key: &[u8],
        current: Option<&Held>,
        head: &Queued,
        now: u64,
        why: Why,
    ) -> Result<bool, LockError> {
        let key = self.key_of(lock_key)?;
        let mut edits = LeaseEdits::default();
        if let Some(h) = current.filter(|h| h.rec.lease && h.live(now)) {
            self.release_from_lease(&mut edits, &key, h).await?;
        }
        let Some((rec, lease)) = self.grant_for_waiter(&key, head, now, &mut edits).await? else {
            self.drop_waiter(head).await?;
            return Ok(false);
        };
        let mut when = vec![
            unchanged(lock_key, current),
            Compare::mod_revision(head.key.clone(), CompareOp::Equal, head.mod_revision),
        ];
        let mut extra = vec![TxnOp::delete(head.key.clone(), None)];
        extra.extend(self.marked(why, current));
        edits.apply(&mut when, &mut extra);
        Ok(self
            .put_holder(lock_key, when, &rec, lease, extra)
            .await?
            .is_some())
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

    pub(super) async fn extend_flow(
        &self,
        key: &Key,
        owner: &str,
        ttl_ms: u64,
    ) -> Result<Grant, LockError> {
        let lock_key = self.layout.lock_key(key);
        let queue = self.layout.queue_prefix(key);
        loop {
            // Settled: a lock that expired while someone waits is that
            // waiter's (`NotOwner`), not free (`NotHeld`).
            let snap = self.settled(&lock_key, &queue, None).await?;
            let now = self.clock.now_ms();
            let expires_at_ms = deadline(now, ttl_ms)?;
            let Some(h) = snap.lock.filter(|h| h.live(now)) else {
                return Err(LockError::NotHeld);
            };
            if h.rec.owner != owner {
                return Err(LockError::NotOwner);
            }
            if h.rec.lease {
                return Err(LockError::InvalidArgument(format!(
                    "lock {:?} is held under lease {owner:?}, which sets its expiry; \
                     refresh the lease",
                    key.name
                )));
            }
            match self
                .refresh(&lock_key, &queue, &h, expires_at_ms, ttl_ms)
                .await?
            {
                Refresh::Done(g) => return Ok(g),
                Refresh::Changed => {}
                Refresh::Lapsed => return Err(LockError::NotHeld),
            }
        }
    }

    /// Moves a live holder's expiry to `expires_at_ms`, keeping its token,
    /// owner and durability.
    ///
    /// The holder was live when read, but etcd cannot compare times, so the
    /// write may land after the old expiry: the lock would have been free
    /// for a moment (a `get` may have said so) and then held again under the
    /// same token. Such a refresh is taken back (the lock is released, to
    /// the queue's head if any) and reported as [`Refresh::Lapsed`], exactly
    /// as if it had come after the expiry.
    async fn refresh(
        &self,
        lock_key: &[u8],
        queue: &[u8],
        h: &Held,
        expires_at_ms: u64,
        ttl_ms: u64,
    ) -> Result<Refresh, LockError> {
        let mut rec = h.rec.clone();
        rec.expires_at_ms = expires_at_ms;
        rec.token = Some(h.token);
        let lease = self.lease_for(rec.durability.into(), ttl_ms).await?;
        let when = vec![unchanged(lock_key, Some(h))];
        let Some(new) = self
            .put_holder(lock_key, when, &rec, lease, Vec::new())
            .await?
        else {
            return Ok(Refresh::Changed);
        };
        if self.clock.now_ms() >= h.rec.expires_at_ms {
            let who = Who::Owner(&h.rec.owner, Some(h.token));
            self.release(lock_key, queue, who, Why::Expired)
                .await
                .map(drop)
                .or_else(|e| match e {
                    // Changed again meanwhile: not ours to release.
                    LockError::NotHeld | LockError::NotOwner => Ok(()),
                    e => Err(e),
                })?;
            return Ok(Refresh::Lapsed);
        }
        self.remember(lock_key, &new);
        Ok(Refresh::Done(new.grant()))
    }
}
