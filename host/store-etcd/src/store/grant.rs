//! A lock's holder, from its grant to its release: a fresh grant when the
//! lock is free and nobody waits, a refresh (`extend`, an idempotent
//! `lock`), a release (handing the lock to the queue's head if anyone
//! waits), and the reads of who holds what.
//!
//! A fresh grant's fencing token is the `mod_revision` of the transaction
//! that wrote it; a refresh writes the token into the record, since the
//! refresh moves `mod_revision`. This backend remembers the grants it
//! wrote ([`RecentGrants`]), so their owner's unlock is one conditional
//! delete.

use lockd_core::Claim;
use std::sync::Arc;

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp};
use lockd_core::{deadline, Grant, Key, ListedLock, LockError, LockInfo, LockOptions};

use super::keyspace::Keyspace;
use super::queue::Queue;
use super::txn::{nobody_queued, unchanged, LeaseEdits};
use crate::events::Why;
use crate::recent::RecentGrants;
use crate::record::{Held, LockRecord};

/// How one attempt at a lock ended.
pub(super) enum Attempt {
    /// Granted; `true` for a fresh grant, `false` for a holder's refresh.
    Granted(Grant, bool),
    Busy(LockInfo),
}

/// How a [`Grants::refresh`] ended.
enum Refresh {
    Done(Grant),
    /// The lock changed since it was read: read again.
    Changed,
    /// The write may have landed after the old expiry, and was taken back.
    Lapsed,
}

/// Whose lock a release may release.
#[derive(Clone, Copy, Debug)]
enum Who<'a> {
    /// The owner's, with this token if given; else `NotOwner`.
    Owner(&'a str, Option<u64>),
    /// Whoever holds it (force-unlock).
    Anyone,
}

/// Denies a fresh grant in `namespace` if it already holds `quota` live
/// locks at `now`. A read before the grant's transaction, not inside it,
/// so grants racing may overshoot the quota (docs/scale-out.md, "Quotas
/// are not atomic across hosts").
pub(super) async fn check_quota(
    ks: &Keyspace,
    namespace: &str,
    quota: u64,
    now: u64,
) -> Result<(), LockError> {
    let resp = ks
        .etcd
        .range(
            "quota count",
            ks.layout.list_prefix(namespace, ""),
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

/// Taking, extending, releasing and reading locks held by an owner (locks
/// under a lease are taken in `lockd_lease.rs`, and released here).
pub(super) struct Grants {
    ks: Arc<Keyspace>,
    queue: Arc<Queue>,
    /// Grants this backend made and may release in one round trip.
    recent: RecentGrants,
}

impl Grants {
    pub(super) fn new(ks: Arc<Keyspace>, queue: Arc<Queue>) -> Grants {
        Grants {
            ks,
            queue,
            recent: RecentGrants::default(),
        }
    }

    /// Remembers a grant this backend just wrote, for a one-step unlock.
    fn remember(&self, lock_key: &[u8], h: &Held) {
        self.recent.remember(lock_key, h, || self.ks.clock.now_ms());
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
            let expires_at_ms = deadline(self.ks.clock.now_ms(), ttl_ms)?;
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
            let snap = self.queue.settled(lock_key, queue, None).await?;
            let now = self.ks.clock.now_ms();
            let expires_at_ms = deadline(now, ttl_ms)?;
            match snap.lock.as_ref().filter(|h| h.live(now)) {
                // Held under the lease whose id `owner` is: its grant as it
                // is (only the lease moves its expiry).
                Some(h) if h.rec.owner == owner && options.refuse_relock && !h.rec.lease => {
                    return Ok(Attempt::Busy(h.info()));
                }
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
                        check_quota(&self.ks, &key.namespace, quota, now).await?;
                    }
                    // Nobody queued: settled() served any head first.
                    let as_read = unchanged(lock_key, snap.lock.as_ref());
                    // Over an expired holder: its end is marked expired.
                    let marker = self.ks.marked(Why::Expired, snap.lock.as_ref());
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
        let lease = self.ks.etcd_lease(options.durability, ttl_ms, None).await?;
        let now = self.ks.clock.now_ms();
        let rec = LockRecord::fresh(owner, now, expires_at_ms, options.durability, None);
        let when = vec![key_as_seen, nobody_queued(queue)];
        let written = self
            .ks
            .put_holder(lock_key, when, &rec, lease, extra)
            .await?;
        Ok(written.map(|h| {
            self.remember(lock_key, &h);
            h.grant()
        }))
    }

    /// Moves `owner`'s live grant of `key` to expire `ttl_ms` from now.
    pub(super) async fn extend(
        &self,
        key: &Key,
        owner: &str,
        ttl_ms: u64,
    ) -> Result<Grant, LockError> {
        let lock_key = self.ks.layout.lock_key(key);
        let queue = self.ks.layout.queue_prefix(key);
        loop {
            // Settled: a lock that expired while someone waits is that
            // waiter's (`NotOwner`), not free (`NotHeld`).
            let snap = self.queue.settled(&lock_key, &queue, None).await?;
            let now = self.ks.clock.now_ms();
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
        let lease = self
            .ks
            .etcd_lease(rec.durability.into(), ttl_ms, None)
            .await?;
        let when = vec![unchanged(lock_key, Some(h))];
        let Some(new) = self
            .ks
            .put_holder(lock_key, when, &rec, lease, Vec::new())
            .await?
        else {
            return Ok(Refresh::Changed);
        };
        if self.ks.clock.now_ms() >= h.rec.expires_at_ms {
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

    /// Releases `owner`'s grant of `key` (`token`, if given): in one round
    /// trip for a grant this backend wrote and nobody changed since, else
    /// after a read, handing it to the queue's head if anyone waits.
    pub(super) async fn unlock(
        &self,
        key: &Key,
        owner: &str,
        token: Option<u64>,
    ) -> Result<(), LockError> {
        let lock_key = self.ks.layout.lock_key(key);
        let queue = self.ks.layout.queue_prefix(key);
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
    pub(super) async fn force_release(&self, key: &Key) -> Result<Held, LockError> {
        let lock_key = self.ks.layout.lock_key(key);
        let queue = self.ks.layout.queue_prefix(key);
        self.release(&lock_key, &queue, Who::Anyone, Why::Forced)
            .await
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
        let now = self.ks.clock.now_ms();
        let Some(mod_revision) = self.recent.take(lock_key, owner, token, now) else {
            return Ok(false);
        };
        let txn = Txn::new()
            .when(vec![
                Compare::mod_revision(lock_key.to_vec(), CompareOp::Equal, mod_revision),
                nobody_queued(queue),
            ])
            .and_then(vec![TxnOp::delete(lock_key.to_vec(), None)]);
        Ok(self.ks.etcd.txn("unlock", txn).await?.succeeded())
    }

    /// Releases the live lock of `who`, handing it to the queue's head if
    /// anyone waits, in a transaction marked `why`. A lock found expired
    /// with someone waiting is handed over first, so the answer is then
    /// `NotOwner` (or, for [`Who::Anyone`], the release of that waiter).
    /// Answers the holder it released.
    async fn release(
        &self,
        lock_key: &[u8],
        queue: &[u8],
        who: Who<'_>,
        why: Why,
    ) -> Result<Held, LockError> {
        loop {
            let snap = self.queue.settled(lock_key, queue, None).await?;
            let now = self.ks.clock.now_ms();
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
                Some(head) => {
                    self.queue
                        .hand_off(lock_key, Some(h), head, now, why)
                        .await?
                }
                None => {
                    // The queue must still be empty: a waiter that joined
                    // since the read makes this a hand-off instead.
                    let mut when = vec![unchanged(lock_key, Some(h)), nobody_queued(queue)];
                    let mut ops = vec![TxnOp::delete(lock_key.to_vec(), None)];
                    ops.extend(self.ks.marked(why, Some(h)));
                    if h.rec.lease {
                        // Out of its lease's record in the same step.
                        let key = self.ks.key_of(lock_key)?;
                        let lease_key = self.ks.layout.lease_key(&key.namespace, &h.rec.owner);
                        let mut edits = LeaseEdits::new(&self.ks.etcd);
                        edits.remove_lock(lease_key, &key.name).await?;
                        edits.apply(&mut when, &mut ops);
                    }
                    let txn = Txn::new().when(when).and_then(ops);
                    self.ks.etcd.txn("unlock", txn).await?.succeeded()
                }
            };
            if released {
                return Ok(h.clone());
            }
        }
    }

    /// The live holder. A lock found expired while someone waits is first
    /// handed to the head of the queue (as every other path does), so `get`
    /// never reports a lock free that a waiter is about to take: between
    /// the expiry and the head's own hand-off, that would show a free
    /// moment no caller could use.
    pub(super) async fn get(&self, key: &Key) -> Result<Option<LockInfo>, LockError> {
        let lock_key = self.ks.layout.lock_key(key);
        let queue = self.ks.layout.queue_prefix(key);
        // Liveness is judged at the time the read was asked, not when its
        // answer arrived: an answer held up in the network (a partition
        // healing) may show an expiry that has passed since, while the
        // holder extended meanwhile. Judged at the asking, a read's answer
        // is true at one moment between its call and its return
        // (host/lockd/tests/partitions.rs, `answered_late`).
        let now = self.ks.clock.now_ms();
        let snap = self.queue.settled(&lock_key, &queue, None).await?;
        if let Some(h) = snap.lock.as_ref().filter(|h| !h.live(now)) {
            // Found expired: removed now, so every host's event stream
            // hears of it. The answer does not wait on the cleanup.
            if let Err(e) = self.ks.remove_expired(&lock_key, &queue, h).await {
                tracing::debug!(error = %e, "etcd store: removing an expired lock failed");
            }
        }
        Ok(snap.lock.filter(|h| h.live(now)).map(|h| h.info()))
    }

    /// Live locks under a name prefix, from one read. Unlike `get`, it does
    /// not hand over expired locks that have waiters: such a lock is left
    /// out until its head claims it, a round trip after the expiry.
    pub(super) async fn list(
        &self,
        namespace: &str,
        prefix: &str,
    ) -> Result<Vec<ListedLock>, LockError> {
        // Judged at the asking, as in `get`.
        let now = self.ks.clock.now_ms();
        let resp = self
            .ks
            .etcd
            .range(
                "list",
                self.ks.layout.list_prefix(namespace, prefix),
                Some(GetOptions::new().with_prefix()),
            )
            .await?;
        // Queue lengths from the waiter keys, read at the revision of the
        // locks read above.
        let queues = self
            .ks
            .etcd
            .range(
                "list queues",
                self.ks.layout.queues_prefix(namespace, prefix),
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_keys_only()
                        .with_revision(resp.header().map_or(0, |h| h.revision())),
                ),
            )
            .await?;
        let mut waiters: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
        for kv in queues.kvs() {
            if let Some(name) = self.ks.layout.queued_name_of(namespace, kv.key()) {
                *waiters.entry(name).or_default() += 1;
            }
        }
        let mut out = Vec::new();
        for kv in resp.kvs() {
            let h = Held::from_kv(kv)?;
            if !h.live(now) {
                continue;
            }
            let Some(name) = self.ks.layout.name_of(namespace, kv.key()) else {
                continue;
            };
            out.push(ListedLock {
                claim: Claim::Exclusive,
                holders: Vec::new(),
                waiters: waiters.get(&name).copied().unwrap_or(0),
                acquired_at_ms: h.rec.acquired_at_ms,
                name,
                info: h.info(),
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
}
