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

use std::sync::Arc;

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp};
use lockd_core::{
    deadline, Claim, Grant, Key, Leader, ListedLock, LockError, LockInfo, LockOptions, NameState,
};

use super::keyspace::Keyspace;
use super::queue::{admits, leaving_leases, Queue, Snap};
use super::txn::{nobody_queued, read_lease, unchanged, LeaseEdits};
use crate::events::Why;
use crate::name::{check_same_kind, check_same_mode, Name};
use crate::recent::RecentGrants;
use crate::record::{Held, LockRecord, Queued};

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

/// Whether the head of the queue may join `keep`, what a release leaves of
/// `name` at `now`.
fn admits_after(keep: &[LockRecord], name: &Name, now: u64) -> impl Fn(&Queued) -> bool {
    let after = Name {
        mod_revision: name.mod_revision,
        grants: keep
            .iter()
            .map(|rec| Held {
                mod_revision: name.mod_revision,
                token: rec.token.unwrap_or(0),
                rec: rec.clone(),
            })
            .collect(),
    };
    move |head: &Queued| admits(Some(&after), head.rec.claim(), now)
}

/// What one `lock` call asks for, as [`Grants::try_acquire`]'s steps
/// share it.
struct Ask<'a> {
    key: &'a Key,
    lock_key: &'a [u8],
    queue: &'a [u8],
    owner: &'a str,
    ttl_ms: u64,
    options: LockOptions,
    value: Option<&'a str>,
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
/// grants at `now` (every holder of a shared name or semaphore counts). A
/// read before the grant's transaction, not inside it, so grants racing
/// may overshoot the quota (docs/operating.md#etcd, "Quotas are not atomic
/// across hosts").
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
        .filter_map(|kv| Name::from_kv(kv).ok())
        .map(|n| n.live(now).count() as u64)
        .sum::<u64>();
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

    /// Remembers a grant this backend just wrote, for a one-step unlock,
    /// if the key holds it alone (a delete then releases nothing else).
    fn remember(&self, lock_key: &[u8], name: &Name, h: &Held) {
        if name.grants.len() == 1 {
            self.recent.remember(lock_key, h, || self.ks.clock.now_ms());
        }
    }

    /// One attempt: grant, refresh, or report the grant in the way.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn try_acquire(
        &self,
        key: &Key,
        lock_key: &[u8],
        queue: &[u8],
        owner: &str,
        ttl_ms: u64,
        options: LockOptions,
        value: Option<&str>,
    ) -> Result<Attempt, LockError> {
        if options.claim != Claim::Exclusive {
            self.refuse_lease_owner(key, owner).await?;
        }
        let ask = Ask {
            key,
            lock_key,
            queue,
            owner,
            ttl_ms,
            options,
            value,
        };
        // The common case first: nobody holds the lock and nobody waits.
        // One transaction that writes the grant only if so; otherwise read
        // and decide below. (A quota needs a count first.)
        if options.quota.is_none() {
            let absent = unchanged(lock_key, None);
            if let Some(g) = self.grant_to(&ask, absent, None, Vec::new()).await? {
                return Ok(Attempt::Granted(g, true));
            }
        }
        loop {
            let snap = self.queue.settled(lock_key, queue, None).await?;
            if let Some(attempt) = self.decide(&ask, &snap).await? {
                return Ok(attempt);
            }
        }
    }

    /// Decides `ask` on `snap`, a read in which the queue's head cannot
    /// take the lock: a refresh of the owner's own grant, the grant in the
    /// way, or a fresh grant. `None` if the lock changed since the read (a
    /// transaction's compare failed): read again.
    async fn decide(&self, ask: &Ask<'_>, snap: &Snap) -> Result<Option<Attempt>, LockError> {
        let now = self.ks.clock.now_ms();
        deadline(now, ask.ttl_ms)?;
        let claim = ask.options.claim;
        let name = snap.lock.as_ref();
        if let Some(n) = name {
            let queued = snap.head.as_ref().map(|h| h.rec.claim());
            n.check_claim(&ask.key.name, claim, queued, now)?;
        } else if let Some(head) = &snap.head {
            check_same_kind(&ask.key.name, claim, head.rec.claim())?;
        }
        if let Some(n) = name {
            if let Some(h) = n.of_owner(ask.owner, now) {
                return self.renew_own(ask, n, h, now).await;
            }
            if let Some(info) = n.in_the_way(claim, now) {
                return Ok(Some(Attempt::Busy(info)));
            }
        }
        if let Some(quota) = ask.options.quota {
            check_quota(&self.ks, &ask.key.namespace, quota, now).await?;
        }
        // Nobody queued, or a waiter ahead that cannot join yet (the
        // compare on the queue then fails, and the next read says who is
        // in the way).
        if let Some(head) = &snap.head {
            let in_way = name.and_then(|n| n.in_the_way(head.rec.claim(), now));
            if let Some(info) = in_way.or_else(|| name?.latest(now).map(Held::info)) {
                return Ok(Some(Attempt::Busy(info)));
            }
        }
        let as_read = unchanged(ask.lock_key, name);
        // Over an expired holder: its end is marked expired.
        let marker = self.ks.marked(Why::Expired, name);
        let granted = self.grant_to(ask, as_read, name, marker).await?;
        Ok(granted.map(|g| Attempt::Granted(g, true)))
    }

    /// `ask`'s owner already holds `h`, a live grant of `name`: its grant
    /// as it is if the lease whose id the owner is holds it (only the lease
    /// moves its expiry), `busy` if the call refuses a re-lock, else the
    /// grant refreshed to the call's TTL. `None` if the refresh found the
    /// lock changed (or lapsed): read again, and grant afresh (a new token)
    /// if nobody queued.
    async fn renew_own(
        &self,
        ask: &Ask<'_>,
        name: &Name,
        h: &Held,
        now: u64,
    ) -> Result<Option<Attempt>, LockError> {
        check_same_mode(&ask.key.name, h, ask.options.claim)?;
        if ask.options.refuse_relock && !h.rec.lease {
            return Ok(Some(Attempt::Busy(h.info())));
        }
        if h.rec.lease {
            return Ok(Some(Attempt::Granted(h.grant(), false)));
        }
        let expires_at_ms = deadline(now, ask.ttl_ms)?;
        let refreshed = self
            .refresh(ask.lock_key, ask.queue, name, h, expires_at_ms, ask.value)
            .await?;
        Ok(match refreshed {
            Refresh::Done(g) => Some(Attempt::Granted(g, false)),
            Refresh::Changed | Refresh::Lapsed => None,
        })
    }

    /// A fresh grant for `ask` (see [`Grants::grant_fresh`]).
    async fn grant_to(
        &self,
        ask: &Ask<'_>,
        key_as_seen: Compare,
        current: Option<&Name>,
        extra: Vec<TxnOp>,
    ) -> Result<Option<Grant>, LockError> {
        self.grant_fresh(
            ask.lock_key,
            ask.queue,
            key_as_seen,
            current,
            extra,
            ask.owner,
            ask.ttl_ms,
            ask.options,
            ask.value,
        )
        .await
    }

    /// `invalid_argument` if `owner` is the id of a live lease of the
    /// namespace: shared grants and permits are not taken under a lease.
    async fn refuse_lease_owner(&self, key: &Key, owner: &str) -> Result<(), LockError> {
        if !owner.starts_with("lease-") {
            return Ok(());
        }
        let lease_key = self.ks.layout.lease_key(&key.namespace, owner);
        let now = self.ks.clock.now_ms();
        if read_lease(&self.ks.etcd, &lease_key)
            .await?
            .is_some_and(|l| l.rec.live(now))
        {
            return Err(LockError::InvalidArgument(format!(
                "{owner:?} is a lease: shared locks and permits are not taken under a lease; \
                 take them with an owner of their own"
            )));
        }
        Ok(())
    }

    /// Writes a fresh grant to `owner` beside the grants of `current` that
    /// stay, if the lock key passes `key_as_seen` and nobody is queued,
    /// with `extra` ops, and remembers it. `None` if either changed.
    #[allow(clippy::too_many_arguments)]
    async fn grant_fresh(
        &self,
        lock_key: &[u8],
        queue: &[u8],
        key_as_seen: Compare,
        current: Option<&Name>,
        extra: Vec<TxnOp>,
        owner: &str,
        ttl_ms: u64,
        options: LockOptions,
        value: Option<&str>,
    ) -> Result<Option<Grant>, LockError> {
        let now = self.ks.clock.now_ms();
        let expires_at_ms = deadline(now, ttl_ms)?;
        let session = Some(self.ks.etcd_leases.session());
        let mut rec = LockRecord::fresh(owner, now, expires_at_ms, options.durability, None)
            .claiming(options.claim, options.lock_delay_ms)
            .on_session(session);
        rec.value = value.map(str::to_string);
        let keep = current.map(|n| n.tidied(now).0).unwrap_or_default();
        let when = vec![key_as_seen, nobody_queued(queue)];
        let written = self
            .ks
            .put_grant(lock_key, when, keep, rec, session, now, extra)
            .await?;
        Ok(written.map(|(name, h)| {
            self.remember(lock_key, &name, &h);
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
            let Some(name) = snap.lock.as_ref().filter(|n| n.held(now)) else {
                return Err(LockError::NotHeld);
            };
            let Some(h) = name.of_owner(owner, now) else {
                return Err(LockError::NotOwner);
            };
            if h.rec.lease {
                return Err(LockError::InvalidArgument(format!(
                    "lock {:?} is held under lease {owner:?}, which sets its expiry; \
                     refresh the lease",
                    key.name
                )));
            }
            match self
                .refresh(&lock_key, &queue, name, h, expires_at_ms, None)
                .await?
            {
                Refresh::Done(g) => return Ok(g),
                Refresh::Changed => {}
                Refresh::Lapsed => return Err(LockError::NotHeld),
            }
        }
    }

    /// Moves the live grant `h` of `name` to expire at `expires_at_ms`,
    /// keeping its token, owner, claim and durability, and the name's other
    /// grants.
    ///
    /// The grant was live when read, but etcd cannot compare times, so the
    /// write may land after the old expiry: the lock would have been free
    /// for a moment (a `get` may have said so) and then held again under the
    /// same token. Such a refresh is taken back (the grant is released, to
    /// the queue's head if any) and reported as [`Refresh::Lapsed`], exactly
    /// as if it had come after the expiry.
    async fn refresh(
        &self,
        lock_key: &[u8],
        queue: &[u8],
        name: &Name,
        h: &Held,
        expires_at_ms: u64,
        value: Option<&str>,
    ) -> Result<Refresh, LockError> {
        let now = self.ks.clock.now_ms();
        let (mut keep, _) = name.tidied(now);
        let session = Some(self.ks.etcd_leases.session());
        for rec in keep.iter_mut().filter(|r| r.token == Some(h.token)) {
            rec.expires_at_ms = expires_at_ms;
            if let Some(value) = value {
                rec.value = Some(value.to_string());
            }
            // An ephemeral grant belongs to the host that last refreshed it.
            if rec.session.is_some() {
                rec.session = session;
            }
        }
        let lease = self.ks.lease_for(&keep, now, session).await?;
        let when = vec![unchanged(lock_key, Some(name))];
        let marker = self.ks.marked(Why::Expired, Some(name));
        let Some(Some(new)) = self
            .ks
            .put_name(lock_key, when, keep, lease, marker)
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
        let Some(g) = new.grants.iter().find(|g| g.token == h.token) else {
            return Ok(Refresh::Changed);
        };
        self.remember(lock_key, &new, g);
        Ok(Refresh::Done(g.grant()))
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

    /// Releases every holder of `key`, to the head of its queue if anyone
    /// waits, in one transaction marked force-released (a lock under a
    /// lease leaves the lease's record in it too; a grant with a lock-delay
    /// stays as a delay). Answers the most recent holder it released;
    /// `NotHeld` if the lock is free.
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

    /// Releases the live grants of `who`, handing the name to the queue's
    /// head if it can then join, in a transaction marked `why`. A grant
    /// force-released or expired with a lock-delay stays as a delay (ended
    /// now). Answers the most recent grant it released.
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
            let Some(name) = snap.lock.as_ref().filter(|n| n.held(now)) else {
                return Err(LockError::NotHeld);
            };
            let leaving: Vec<&Held> = match who {
                Who::Owner(owner, token) => {
                    let mine = name
                        .of_owner(owner, now)
                        .filter(|h| token.is_none_or(|t| t == h.token));
                    let Some(h) = mine else {
                        return Err(LockError::NotOwner);
                    };
                    vec![h]
                }
                Who::Anyone => name.live(now).collect(),
            };
            let last = (*leaving.last().expect("a live grant was found")).clone();
            let (mut keep, _) = name.tidied(now);
            keep.retain_mut(|rec| {
                let Some(h) = leaving.iter().find(|h| Some(h.token) == rec.token) else {
                    return true;
                };
                if why == Why::Released || h.rec.lock_delay_ms == 0 {
                    return false;
                }
                rec.ended_at_ms = Some(now);
                true
            });
            let after = admits_after(&keep, name, now);
            let released = match snap.head.as_ref().filter(|head| after(head)) {
                // Release and hand-off are one transaction, so no caller on
                // any host sees the lock free while someone waits (as in
                // the engine), and the next holder is in place when unlock
                // returns.
                Some(head) => {
                    self.queue
                        .hand_off(lock_key, Some(name), keep, head, now, why)
                        .await?
                }
                None => {
                    // A waiter that joined since the read makes this a
                    // hand-off instead (when the name ends free).
                    let mut when = vec![unchanged(lock_key, Some(name))];
                    if snap.head.is_none() {
                        when.push(nobody_queued(queue));
                    }
                    let mut ops = self.ks.marked(why, Some(name));
                    let key = self.ks.key_of(lock_key)?;
                    let mut edits = LeaseEdits::new(&self.ks.etcd);
                    for h in leaving_leases(Some(name), &keep, now) {
                        // Out of its lease's record in the same step.
                        let lease_key = self.ks.layout.lease_key(&key.namespace, &h.rec.owner);
                        edits.remove_lock(lease_key, &key.name).await?;
                    }
                    edits.apply(&mut when, &mut ops);
                    let lease = self.ks.lease_for(&keep, now, None).await?;
                    self.ks
                        .put_name(lock_key, when, keep, lease, ops)
                        .await?
                        .is_some()
                }
            };
            if released {
                return Ok(last);
            }
        }
    }

    /// The most recent live grant. A lock found expired while someone waits
    /// is first handed to the head of the queue (as every other path does),
    /// so `get` never reports a lock free that a waiter is about to take:
    /// between the expiry and the head's own hand-off, that would show a
    /// free moment no caller could use. During a lock-delay nobody holds it.
    pub(super) async fn get(&self, key: &Key) -> Result<Option<LockInfo>, LockError> {
        Ok(self
            .read(key)
            .await?
            .and_then(|(n, now)| n.latest(now).map(Held::info)))
    }

    /// Everything about `key`: every live grant with its claim, the queue's
    /// length, a lock-delay in force.
    pub(super) async fn describe(&self, key: &Key) -> Result<NameState, LockError> {
        let queue = self.ks.layout.queue_prefix(key);
        let read = self.read(key).await?;
        let waiters = self
            .ks
            .etcd
            .range(
                "describe queue",
                queue,
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
            .await?
            .count()
            .max(0) as u64;
        let Some((name, now)) = read else {
            return Ok(NameState {
                waiters,
                ..NameState::default()
            });
        };
        Ok(NameState {
            holders: name.live(now).map(Held::holding).collect(),
            waiters,
            delay_until_ms: name.delay_until(now),
        })
    }

    /// The leader of the election `key`: its most recent live grant, when
    /// that leads. `invalid_argument` for a lock or a semaphore.
    pub(super) async fn leader(&self, key: &Key) -> Result<Option<Leader>, LockError> {
        let Some((name, now)) = self.read(key).await? else {
            return Ok(None);
        };
        if let Some(current) = name.claim(now) {
            check_same_kind(&key.name, Claim::Leader, current)?;
        }
        Ok(name.latest(now).map(|h| Leader {
            info: h.info(),
            value: h.rec.value.clone().unwrap_or_default(),
            since_ms: h.rec.acquired_at_ms,
        }))
    }

    /// Sets the value of the leadership `candidate` holds under `token`,
    /// keeping its token and expiry.
    pub(super) async fn proclaim(
        &self,
        key: &Key,
        candidate: &str,
        token: u64,
        value: &str,
    ) -> Result<(), LockError> {
        let lock_key = self.ks.layout.lock_key(key);
        let queue = self.ks.layout.queue_prefix(key);
        loop {
            let snap = self.queue.settled(&lock_key, &queue, None).await?;
            let now = self.ks.clock.now_ms();
            let Some(name) = snap.lock.as_ref() else {
                if let Some(head) = &snap.head {
                    check_same_kind(&key.name, Claim::Leader, head.rec.claim())?;
                }
                return Err(LockError::NotHeld);
            };
            let queued = snap.head.as_ref().map(|h| h.rec.claim());
            name.check_claim(&key.name, Claim::Leader, queued, now)?;
            if !name.held(now) {
                return Err(LockError::NotHeld);
            }
            let Some(h) = name.of_owner(candidate, now).filter(|h| h.token == token) else {
                return Err(LockError::NotOwner);
            };
            let (mut keep, _) = name.tidied(now);
            for rec in keep.iter_mut().filter(|r| r.token == Some(h.token)) {
                rec.value = Some(value.to_string());
            }
            let session = Some(self.ks.etcd_leases.session());
            let lease = self.ks.lease_for(&keep, now, session).await?;
            let when = vec![unchanged(&lock_key, Some(name))];
            let marker = self.ks.marked(Why::Expired, Some(name));
            if self
                .ks
                .put_name(&lock_key, when, keep, lease, marker)
                .await?
                .is_some()
            {
                return Ok(());
            }
        }
    }

    /// The name `key` as settled (see [`Grants::get`]), and the time its
    /// grants are judged at; tidies expired grants in passing.
    async fn read(&self, key: &Key) -> Result<Option<(Name, u64)>, LockError> {
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
        if let Some(n) = snap.lock.as_ref().filter(|n| n.untidy(now)) {
            // Found expired: removed now, so every host's event stream
            // hears of it. The answer does not wait on the cleanup.
            if let Err(e) = self.ks.tidy(&lock_key, &queue, n, now).await {
                tracing::debug!(error = %e, "etcd store: removing an expired lock failed");
            }
        }
        Ok(snap.lock.map(|n| (n, now)))
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
        // The reads below are made at the revision of the one above: the
        // compactor keeps it meanwhile (`floors.rs`).
        let revision = resp.header().map_or(0, |h| h.revision());
        let _floor = self.ks.floors.hold(revision);
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
                        .with_revision(revision),
                ),
            )
            .await?;
        // The live sessions, at the same revision (ephemeral grants of
        // others are gone).
        let sessions = self
            .ks
            .etcd
            .range(
                "list sessions",
                self.ks.layout.all_sessions(),
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_keys_only()
                        .with_revision(revision),
                ),
            )
            .await?;
        let alive = self.ks.sessions(Some(&sessions));
        let mut waiters: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
        for kv in queues.kvs() {
            if let Some(name) = self.ks.layout.queued_name_of(namespace, kv.key()) {
                *waiters.entry(name).or_default() += 1;
            }
        }
        let mut out = Vec::new();
        for kv in resp.kvs() {
            let n = Name::from_kv(kv)?.without_dead(&alive);
            let Some(h) = n.latest(now) else {
                continue;
            };
            let Some(name) = self.ks.layout.name_of(namespace, kv.key()) else {
                continue;
            };
            let claim = h.rec.claim();
            let holders = match claim {
                Claim::Exclusive => Vec::new(),
                _ => n.live(now).map(Held::holding).collect(),
            };
            out.push(ListedLock {
                claim,
                holders,
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
