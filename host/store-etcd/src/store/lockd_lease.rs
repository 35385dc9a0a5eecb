//! lockd's leases (docs/contract.md#c16-leases; not etcd's leases, which
//! are in `etcd_lease.rs`): one holder, several locks, one expiry,
//! refreshed and ended in one transaction each.
//!
//! A lease is a key of its own, `<prefix>/.leases/<ns>/<id>`, holding a
//! `LeaseRecord`: its TTL, expiry, durability and the sorted names of the
//! locks it holds. Each such lock is an ordinary lock key whose record has
//! owner = the lease id, `lease: true` and the lease's expiry. Every
//! transaction that changes which locks a lease holds (a grant under it, a
//! hand-off to one of its waiters, an unlock of one of its locks, a hand-off
//! away from it) also rewrites the lease record, guarded by the lease key's
//! `mod_revision`; so the record always lists exactly the locks the lease
//! holds, and a refresh or revoke is one bounded transaction over the lease
//! key and the listed lock keys, guarded by all their revisions
//! (`EtcdOptions::max_locks_per_lease` bounds its size). Those edits are
//! `LeaseEdits` (`txn.rs`), which the hand-off to a waiter (`queue.rs`) and
//! the release of a lock (`grant.rs`) make too.
//!
//! Expiry needs no write: the lease and its locks carry the same
//! `expires_at_ms`, so they end at the same instant. etcd's own leases only
//! clean up, as for plain locks: a persistent lease's key and its locks'
//! keys sit on shared leases that end `lease_slack` after the expiry; an
//! ephemeral lease's keys sit on the session lease of the host that granted
//! it (recorded in its record), so they are gone when that host is.

use std::sync::Arc;

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp};
use lockd_core::{
    deadline, Claim, Durability, Grant, Key, LeaseInfo, LockError, LockInfo, LockOptions,
};

use super::grant::check_quota;
use super::keyspace::Keyspace;
use super::queue::{Queue, WATCH_RETRY};
use super::txn::{
    nobody_queued, read_lease, unchanged, unchanged_at, waiter_unchanged, LeaseEdits,
};
use crate::events::Why;
use crate::name::Name;
use crate::record::{from_json, to_json, Held, LeaseRecord, LockRecord, Queued};
use crate::rpc::gets;

/// Whether `h` is a lock held, live at `now`, under the lease `lease_id`.
fn held_by_lease(h: &Held, lease_id: &str, now: u64) -> bool {
    h.live(now) && h.rec.lease && h.rec.owner == lease_id
}

/// One lock a lease lists, as read for a refresh or revoke.
struct LeaseLock {
    name: String,
    lock_key: Vec<u8>,
    queue: Vec<u8>,
    held: Option<Held>,
    /// For a revoke: the head of its queue.
    head: Option<Queued>,
}

/// How one attempt at a lock under a lease ended.
pub(super) enum LeaseAttempt {
    /// Granted; `true` for a fresh grant, `false` for one the lease held.
    Granted(Grant, bool),
    /// Held by another owner; the lease as read.
    Busy(LockInfo, LeaseRecord),
}

/// lockd's leases on this store: granting, reading, refreshing and
/// revoking them, a lock attempt under one, and the watch of a lease's end.
pub(super) struct LockdLeases {
    ks: Arc<Keyspace>,
    queue: Arc<Queue>,
    /// `EtcdOptions::max_locks_per_lease`.
    max_locks_per_lease: usize,
}

impl LockdLeases {
    pub(super) fn new(ks: Arc<Keyspace>, queue: Arc<Queue>, max_locks_per_lease: usize) -> Self {
        LockdLeases {
            ks,
            queue,
            max_locks_per_lease,
        }
    }

    /// The key of the lease `lease` (its namespace and id).
    pub(super) fn lease_key(&self, lease: &Key) -> Vec<u8> {
        self.ks.layout.lease_key(&lease.namespace, &lease.name)
    }

    /// The etcd lease for the keys of the lease `rec` (its own and its
    /// locks') that must last `left_ms` from now: on an ephemeral lease,
    /// the session of the host that granted it.
    async fn etcd_lease_of(&self, rec: &LeaseRecord, left_ms: u64) -> Result<i64, LockError> {
        self.ks
            .etcd_lease(rec.durability.into(), left_ms, rec.session)
            .await
    }

    /// Grants the lease `lease` (an id not in use in its namespace) for
    /// `ttl_ms`, holding no lock yet. Answers its expiry.
    pub(super) async fn grant(
        &self,
        lease: &Key,
        ttl_ms: u64,
        durability: Durability,
    ) -> Result<u64, LockError> {
        let lease_key = self.lease_key(lease);
        let expires_at_ms = deadline(self.ks.clock.now_ms(), ttl_ms)?;
        let session = (durability == Durability::Ephemeral).then(|| self.ks.etcd_leases.session());
        let rec = LeaseRecord::new(ttl_ms, expires_at_ms, durability, session);
        let etcd_lease = self.etcd_lease_of(&rec, ttl_ms).await?;
        let txn = Txn::new()
            .when(vec![Compare::version(
                lease_key.clone(),
                CompareOp::Equal,
                0,
            )])
            .and_then(vec![TxnOp::put(
                lease_key,
                to_json(&rec),
                Some(PutOptions::new().with_lease(etcd_lease)),
            )]);
        if !self.ks.etcd.txn("lease grant", txn).await?.succeeded() {
            return Err(LockError::InvalidArgument(format!(
                "lease {:?} already exists",
                lease.name
            )));
        }
        Ok(expires_at_ms)
    }

    /// The lease `lease`, if it is live.
    pub(super) async fn get(&self, lease: &Key) -> Result<Option<LeaseInfo>, LockError> {
        let read = read_lease(&self.ks.etcd, &self.lease_key(lease)).await?;
        let now = self.ks.clock.now_ms();
        Ok(read.filter(|l| l.rec.live(now)).map(|l| l.rec.info()))
    }

    /// The locks `names` of `namespace` (and, with `heads`, the head of
    /// each one's queue), in one read.
    async fn read_locks(
        &self,
        namespace: &str,
        names: &[String],
        heads: bool,
    ) -> Result<Vec<LeaseLock>, LockError> {
        let mut locks: Vec<LeaseLock> = names
            .iter()
            .map(|name| {
                let key = Key::new(namespace, name.as_str());
                LeaseLock {
                    name: name.clone(),
                    lock_key: self.ks.layout.lock_key(&key),
                    queue: self.ks.layout.queue_prefix(&key),
                    held: None,
                    head: None,
                }
            })
            .collect();
        if locks.is_empty() {
            return Ok(locks);
        }
        let first_waiter = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1);
        let mut ops = Vec::new();
        for l in &locks {
            ops.push(TxnOp::get(l.lock_key.clone(), None));
            if heads {
                ops.push(TxnOp::get(l.queue.clone(), Some(first_waiter.clone())));
            }
        }
        let resp = self
            .ks
            .etcd
            .read_txn("lease locks read", Txn::new().and_then(ops))
            .await?;
        let gets = gets(&resp);
        let per = if heads { 2 } else { 1 };
        for (i, l) in locks.iter_mut().enumerate() {
            let first = |j: usize| gets.get(i * per + j).and_then(|g| g.kvs().first());
            // The lease's grant is a lone exclusive one: the most recent.
            l.held = first(0)
                .map(Name::from_kv)
                .transpose()?
                .and_then(|n| n.grants.last().cloned());
            if heads {
                l.head = first(1).map(Queued::from_kv).transpose()?;
            }
        }
        Ok(locks)
    }

    /// Moves the lease's expiry and every one of its locks' to now + its
    /// TTL, in one transaction guarded by all their revisions.
    pub(super) async fn refresh(&self, lease: &Key) -> Result<u64, LockError> {
        let lease_key = self.lease_key(lease);
        loop {
            let Some(l) = read_lease(&self.ks.etcd, &lease_key).await? else {
                return Err(LockError::NotHeld);
            };
            let locks = self
                .read_locks(&lease.namespace, &l.rec.locks, false)
                .await?;
            let now = self.ks.clock.now_ms();
            if !l.rec.live(now) {
                return Err(LockError::NotHeld);
            }
            let expires_at_ms = deadline(now, l.rec.ttl_ms)?;
            let etcd_lease = self.etcd_lease_of(&l.rec, l.rec.ttl_ms).await?;
            let put = || Some(PutOptions::new().with_lease(etcd_lease));
            let mut rec = l.rec.clone();
            rec.expires_at_ms = expires_at_ms;
            rec.locks.clear();
            let mut when = vec![Compare::mod_revision(
                lease_key.clone(),
                CompareOp::Equal,
                l.mod_revision,
            )];
            let mut ops = Vec::new();
            for ll in &locks {
                when.push(unchanged_at(
                    &ll.lock_key,
                    ll.held.as_ref().map(|h| h.mod_revision),
                ));
                // The list is exact while the lease lives; anything else
                // (not held by it) is left out of it.
                let Some(h) = ll
                    .held
                    .as_ref()
                    .filter(|h| held_by_lease(h, &lease.name, now))
                else {
                    continue;
                };
                // Alone: beside a live exclusive grant nothing takes a
                // place, so nothing else is kept.
                let mut lock = h.stored();
                lock.expires_at_ms = expires_at_ms;
                ops.push(TxnOp::put(ll.lock_key.clone(), to_json(&lock), put()));
                rec.add(&ll.name);
            }
            ops.push(TxnOp::put(lease_key.clone(), to_json(&rec), put()));
            let txn = Txn::new().when(when).and_then(ops);
            if !self.ks.etcd.txn("lease refresh", txn).await?.succeeded() {
                continue;
            }
            // etcd cannot compare times: a refresh that landed after the old
            // expiry revived a lease others had rightly seen end. Taken back
            // (its locks pass on), as a late extend is (C6).
            if self.ks.clock.now_ms() >= l.rec.expires_at_ms {
                match self.end(lease, Why::Expired).await {
                    Ok(_) | Err(LockError::NotHeld) => {}
                    Err(e) => return Err(e),
                }
                return Err(LockError::NotHeld);
            }
            return Ok(expires_at_ms);
        }
    }

    /// Deletes the lease and releases all its locks, each to the head of its
    /// queue, in one transaction guarded by all their revisions (and the
    /// heads'). Answers how many locks it released.
    pub(super) async fn revoke(&self, lease: &Key) -> Result<u64, LockError> {
        self.end(lease, Why::Released).await
    }

    /// [`LockdLeases::revoke`], its transaction marked `why`.
    async fn end(&self, lease: &Key, why: Why) -> Result<u64, LockError> {
        let lease_key = self.lease_key(lease);
        'read: loop {
            let Some(l) = read_lease(&self.ks.etcd, &lease_key).await? else {
                return Err(LockError::NotHeld);
            };
            let locks = self
                .read_locks(&lease.namespace, &l.rec.locks, true)
                .await?;
            let now = self.ks.clock.now_ms();
            if !l.rec.live(now) {
                return Err(LockError::NotHeld);
            }
            let mut edits = LeaseEdits::new(&self.ks.etcd);
            // Deleted here, so a waiter under this very lease gets nothing.
            edits.delete(lease_key.clone(), &l);
            let (mut when, mut ops) = (Vec::new(), Vec::new());
            let mut released = 0;
            for ll in &locks {
                when.push(unchanged_at(
                    &ll.lock_key,
                    ll.held.as_ref().map(|h| h.mod_revision),
                ));
                if !ll
                    .held
                    .as_ref()
                    .is_some_and(|h| held_by_lease(h, &lease.name, now))
                {
                    continue;
                }
                released += 1;
                let Some(head) = &ll.head else {
                    when.push(nobody_queued(&ll.queue));
                    ops.push(TxnOp::delete(ll.lock_key.clone(), None));
                    continue;
                };
                let key = Key::new(lease.namespace.clone(), ll.name.as_str());
                let Some((rec, session)) = self
                    .queue
                    .grant_for_waiter(&key, head, now, &mut edits)
                    .await?
                else {
                    // Its lease ended: out of the queue, and read again.
                    self.queue.drop_waiter(head).await?;
                    continue 'read;
                };
                let etcd_lease = self
                    .ks
                    .lease_for(std::slice::from_ref(&rec), now, session)
                    .await?;
                when.push(waiter_unchanged(head));
                ops.push(TxnOp::put(
                    ll.lock_key.clone(),
                    to_json(&rec),
                    Some(PutOptions::new().with_lease(etcd_lease)),
                ));
                ops.push(TxnOp::delete(head.key.clone(), None));
            }
            edits.apply(&mut when, &mut ops);
            ops.push(why.marker(&self.ks.layout));
            let txn = Txn::new().when(when).and_then(ops);
            if self.ks.etcd.txn("lease revoke", txn).await?.succeeded() {
                return Ok(released);
            }
        }
    }

    /// One attempt at `key` under the lease: the lease's grant if it holds
    /// the lock, a fresh grant (with the lease's expiry, listed in its
    /// record, in one transaction) if the lock is free and nobody waits,
    /// or the holder. `NotHeld` if the lease is not live.
    pub(super) async fn try_acquire(
        &self,
        key: &Key,
        lock_key: &[u8],
        queue: &[u8],
        lease_key: &[u8],
        lease_id: &str,
        options: LockOptions,
    ) -> Result<LeaseAttempt, LockError> {
        loop {
            let Some(l) = read_lease(&self.ks.etcd, lease_key).await? else {
                return Err(LockError::NotHeld);
            };
            if !l.rec.live(self.ks.clock.now_ms()) {
                return Err(LockError::NotHeld);
            }
            let snap = self.queue.settled(lock_key, queue, None).await?;
            let now = self.ks.clock.now_ms();
            if !l.rec.live(now) {
                return Err(LockError::NotHeld);
            }
            let name = snap.lock.as_ref();
            if let Some(n) = name {
                let queued = snap.head.as_ref().map(|h| h.rec.claim());
                n.check_claim(&key.name, Claim::Exclusive, queued, now)?;
            }
            if let Some(h) = name
                .and_then(|n| n.latest(now))
                .filter(|h| held_by_lease(h, lease_id, now))
            {
                return Ok(LeaseAttempt::Granted(h.grant(), false));
            }
            // Full: refused before it could queue (a hand-off to a full
            // lease would drop the waiter).
            let max = self.max_locks_per_lease;
            if !l.rec.has_room_for(&key.name, max) {
                return Err(LockError::Denied(format!(
                    "lease {lease_id:?} already holds {max} locks, the most one lease may \
                     hold on this etcd store (max_locks_per_lease)"
                )));
            }
            let in_way = name.and_then(|n| {
                n.in_the_way(Claim::Exclusive, now)
                    .or_else(|| snap.head.as_ref().and(n.latest(now).map(Held::info)))
            });
            if let Some(info) = in_way {
                return Ok(LeaseAttempt::Busy(info, l.rec));
            }
            if let Some(quota) = options.quota {
                check_quota(&self.ks, &key.namespace, quota, now).await?;
            }
            let expires_at_ms = l.rec.expires_at_ms;
            let mut rec =
                LockRecord::fresh(lease_id, now, expires_at_ms, l.rec.durability.into(), None)
                    .claiming(Claim::Exclusive, options.lock_delay_ms)
                    .on_session(l.rec.session);
            rec.lease = true;
            let keep = name.map(|n| n.tidied(now).0).unwrap_or_default();
            let mut listed = l.rec.clone();
            listed.add(&key.name);
            let when = vec![
                unchanged(lock_key, snap.lock.as_ref()),
                nobody_queued(queue),
                Compare::mod_revision(lease_key.to_vec(), CompareOp::Equal, l.mod_revision),
            ];
            let mut extra = vec![TxnOp::put(
                lease_key.to_vec(),
                to_json(&listed),
                Some(PutOptions::new().with_ignore_lease()),
            )];
            // Over an expired holder: its end is marked expired.
            extra.extend(self.ks.marked(Why::Expired, snap.lock.as_ref()));
            if let Some((_, h)) = self
                .ks
                .put_grant(lock_key, when, keep, rec, l.rec.session, now, extra)
                .await?
            {
                return Ok(LeaseAttempt::Granted(h.grant(), true));
            }
        }
    }

    /// Completes once the lease at `lease_key` is gone or expired, or etcd
    /// stayed unreachable past the last expiry read. Watches the lease key
    /// (a revoke on any host deletes it; a refresh rewrites it) and sleeps
    /// until its expiry, then reads again. No polling.
    pub(super) async fn watch_end(&self, lease_key: Vec<u8>) {
        let mut known: Option<u64> = None;
        loop {
            let read = self
                .ks
                .etcd
                .range("lease read", lease_key.clone(), None)
                .await;
            let now = self.ks.clock.now_ms();
            let retry_until = match read {
                Ok(resp) => {
                    let rec = resp
                        .kvs()
                        .first()
                        .map(|kv| from_json::<LeaseRecord>(kv.key(), kv.value()));
                    // Gone (revoked, or its session or etcd lease ended), or
                    // unreadable: ended as far as this store can tell.
                    let Some(Ok(rec)) = rec else { return };
                    if !rec.live(now) {
                        return;
                    }
                    known = Some(rec.expires_at_ms);
                    let revision = resp.header().map_or(0, |h| h.revision());
                    let keys = [lease_key.clone()];
                    let watched = tokio::select! {
                        watched = self.ks.watch_any(&keys, revision + 1) => watched,
                        () = self.ks.clock.sleep_until(rec.expires_at_ms) => Ok(()),
                    };
                    match watched {
                        Ok(()) => continue,
                        Err(e) => {
                            tracing::warn!(error = %e, "etcd watch of a lease failed; reading it again");
                            rec.expires_at_ms
                        }
                    }
                }
                Err(e) => {
                    if known.is_some_and(|expiry| now >= expiry) {
                        // Unreachable past its expiry: lost (C18).
                        return;
                    }
                    tracing::warn!(error = %e, "etcd store: reading a lease failed; trying again");
                    known.unwrap_or(u64::MAX)
                }
            };
            // Error backoff, never past the expiry last read.
            tokio::select! {
                () = tokio::time::sleep(WATCH_RETRY) => {}
                () = self.ks.clock.sleep_until(retry_until) => {}
            }
        }
    }
}
