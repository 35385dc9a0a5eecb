//! Leases (docs/contract.md#c16-leases): one holder, several locks, one
//! expiry, refreshed and ended in one transaction each.
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
//! (`EtcdOptions::max_locks_per_lease` bounds its size).
//!
//! Expiry needs no write: the lease and its locks carry the same
//! `expires_at_ms`, so they end at the same instant. etcd's own leases only
//! clean up, as for plain locks: a persistent lease's key and its locks'
//! keys sit on shared leases that end `lease_slack` after the expiry; an
//! ephemeral lease's keys sit on the session lease of the host that granted
//! it (recorded in its record), so they are gone when that host is.

use std::collections::BTreeMap;
use std::sync::Arc;

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp};
use lockd_core::{BoxFuture, Durability, Grant, Key, LeaseInfo, LockError, LockInfo, LockOptions};
use tokio::sync::oneshot;

use super::grant::deadline;
use super::queue::{WaitEnd, WATCH_RETRY};
use super::{nobody_queued, unchanged, Inner};
use crate::events::Why;
use crate::local::Turn;
use crate::record::{from_json, to_json, Held, LeaseRecord, Leased, LockRecord, Queued};
use crate::rpc::gets;

/// What one transaction does to the lease records it touches, by lease
/// key: each is compared with the revision read, and written back if it
/// changed.
#[derive(Debug, Default)]
pub(super) struct LeaseEdits {
    edits: BTreeMap<Vec<u8>, Edit>,
}

#[derive(Debug)]
pub(super) struct Edit {
    /// The key's `mod_revision` as read; `None`: absent.
    read: Option<i64>,
    /// The record as the transaction leaves it; `None`: absent or deleted.
    rec: Option<LeaseRecord>,
    changed: bool,
}

impl LeaseEdits {
    /// The lease at `lease_key`, as read the first time this transaction
    /// needed it, with the edits made since.
    async fn load(&mut self, inner: &Inner, lease_key: Vec<u8>) -> Result<&mut Edit, LockError> {
        if !self.edits.contains_key(&lease_key) {
            let read = inner.read_lease(&lease_key).await?;
            let edit = Edit {
                read: read.as_ref().map(|l| l.mod_revision),
                rec: read.map(|l| l.rec),
                changed: false,
            };
            self.edits.insert(lease_key.clone(), edit);
        }
        Ok(self
            .edits
            .get_mut(&lease_key)
            .expect("inserted just above if absent"))
    }

    /// Deletes the lease `l`, read at `lease_key`.
    fn delete(&mut self, lease_key: Vec<u8>, l: &Leased) {
        self.edits.insert(
            lease_key,
            Edit {
                read: Some(l.mod_revision),
                rec: None,
                changed: true,
            },
        );
    }

    /// Adds the compares (every lease key as read) and the writes (every
    /// lease record changed) to a transaction.
    pub(super) fn apply(self, when: &mut Vec<Compare>, ops: &mut Vec<TxnOp>) {
        for (key, edit) in self.edits {
            when.push(match edit.read {
                None => Compare::version(key.clone(), CompareOp::Equal, 0),
                Some(r) => Compare::mod_revision(key.clone(), CompareOp::Equal, r),
            });
            if !edit.changed {
                continue;
            }
            match edit.rec {
                // The record keeps the etcd lease its key has.
                Some(rec) => ops.push(TxnOp::put(
                    key,
                    to_json(&rec),
                    Some(PutOptions::new().with_ignore_lease()),
                )),
                None if edit.read.is_some() => ops.push(TxnOp::delete(key, None)),
                None => {}
            }
        }
    }
}

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
enum LeaseAttempt {
    /// Granted; `true` for a fresh grant, `false` for one the lease held.
    Granted(Grant, bool),
    /// Held by another owner; the lease as read.
    Busy(LockInfo, LeaseRecord),
}

impl Inner {
    fn lease_key_of(&self, lease: &Key) -> Vec<u8> {
        self.layout.lease_key(&lease.namespace, &lease.name)
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

    pub(super) async fn read_lease(&self, lease_key: &[u8]) -> Result<Option<Leased>, LockError> {
        let resp = self
            .etcd
            .range("lease read", lease_key.to_vec(), None)
            .await?;
        resp.kvs().first().map(Leased::from_kv).transpose()
    }

    /// The etcd lease for the keys of the lease `rec` (its own and its
    /// locks') that must last `left_ms` from now.
    async fn etcd_lease_of(&self, rec: &LeaseRecord, left_ms: u64) -> Result<i64, LockError> {
        match rec.durability.into() {
            Durability::Persistent => self.leases.lease_for(&self.etcd, left_ms).await,
            Durability::Ephemeral => Ok(rec.session.unwrap_or_else(|| self.session.id())),
        }
    }

    /// Takes `name` out of the lock list of the lease that holds `h` (a
    /// lock with `lease` set), as part of `edits`.
    pub(super) async fn release_from_lease(
        &self,
        edits: &mut LeaseEdits,
        key: &Key,
        h: &Held,
    ) -> Result<(), LockError> {
        let lease_key = self.layout.lease_key(&key.namespace, &h.rec.owner);
        let edit = edits.load(self, lease_key).await?;
        if let Some(rec) = edit.rec.as_mut() {
            if rec.remove(&key.name) {
                edit.changed = true;
            }
        }
        Ok(())
    }

    /// The record and etcd lease of the lock `key` handed to the waiter
    /// `head` at `now`. A waiter under a lease gets the lease's expiry and
    /// durability, and the lease lists the lock (in `edits`); `None` if
    /// that lease has ended (or is full), and the waiter is to be dropped.
    pub(super) async fn grant_for_waiter(
        &self,
        key: &Key,
        head: &Queued,
        now: u64,
        edits: &mut LeaseEdits,
    ) -> Result<Option<(LockRecord, i64)>, LockError> {
        let w = &head.rec;
        let Some(lease_id) = &w.lease else {
            let durability: Durability = w.durability.into();
            let lease = match durability {
                Durability::Persistent => self.leases.lease_for(&self.etcd, w.ttl_ms).await?,
                // The waiter's own session: an ephemeral lock belongs to the
                // host whose caller holds it.
                Durability::Ephemeral => w.session,
            };
            let rec = LockRecord::fresh(
                &w.owner,
                now,
                now.saturating_add(w.ttl_ms),
                durability,
                Some(w.id.clone()),
            );
            return Ok(Some((rec, lease)));
        };
        let max = self.options.max_locks_per_lease;
        let lease_key = self.layout.lease_key(&key.namespace, lease_id);
        let edit = edits.load(self, lease_key).await?;
        let Some(l) = edit.rec.as_mut().filter(|l| l.live(now)) else {
            return Ok(None);
        };
        if !l.locks.iter().any(|n| *n == *key.name) && l.locks.len() >= max {
            return Ok(None);
        }
        l.add(&key.name);
        edit.changed = true;
        let l = l.clone();
        let etcd_lease = self.etcd_lease_of(&l, l.expires_at_ms - now).await?;
        let mut rec = LockRecord::fresh(
            lease_id,
            now,
            l.expires_at_ms,
            l.durability.into(),
            Some(w.id.clone()),
        );
        rec.lease = true;
        Ok(Some((rec, etcd_lease)))
    }

    /// Takes a waiter nobody can hand the lock to (its lease ended) out of
    /// the queue, if it is still as read.
    pub(super) async fn drop_waiter(&self, head: &Queued) -> Result<(), LockError> {
        let txn = Txn::new()
            .when(vec![Compare::mod_revision(
                head.key.clone(),
                CompareOp::Equal,
                head.mod_revision,
            )])
            .and_then(vec![TxnOp::delete(head.key.clone(), None)]);
        self.etcd.txn("drop waiter", txn).await.map(drop)
    }

    pub(crate) async fn grant_lease(
        &self,
        lease: &Key,
        ttl_ms: u64,
        durability: Durability,
    ) -> Result<u64, LockError> {
        let lease_key = self.lease_key_of(lease);
        let expires_at_ms = deadline(self.clock.now_ms(), ttl_ms)?;
        let session = (durability == Durability::Ephemeral).then(|| self.session.id());
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
        if !self.etcd.txn("lease grant", txn).await?.succeeded() {
            return Err(LockError::InvalidArgument(format!(
                "lease {:?} already exists",
                lease.name
            )));
        }
        Ok(expires_at_ms)
    }

    pub(crate) async fn get_lease(&self, lease: &Key) -> Result<Option<LeaseInfo>, LockError> {
        let read = self.read_lease(&self.lease_key_of(lease)).await?;
        let now = self.clock.now_ms();
        Ok(read.filter(|l| l.rec.live(now)).map(|l| l.rec.info()))
    }

    /// The locks `names` of `namespace` (and, with `heads`, the head of
    /// each one's queue), in one read.
    async fn read_lease_locks(
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
                    lock_key: self.layout.lock_key(&key),
                    queue: self.layout.queue_prefix(&key),
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
            .etcd
            .read_txn("lease locks read", Txn::new().and_then(ops))
            .await?;
        let gets = gets(&resp);
        let per = if heads { 2 } else { 1 };
        for (i, l) in locks.iter_mut().enumerate() {
            let first = |j: usize| gets.get(i * per + j).and_then(|g| g.kvs().first());
            l.held = first(0).map(Held::from_kv).transpose()?;
            if heads {
                l.head = first(1).map(Queued::from_kv).transpose()?;
            }
        }
        Ok(locks)
    }

    /// Moves the lease's expiry and every one of its locks' to now + its
    /// TTL, in one transaction guarded by all their revisions.
    pub(crate) async fn refresh_lease(&self, lease: &Key) -> Result<u64, LockError> {
        let lease_key = self.lease_key_of(lease);
        loop {
            let Some(l) = self.read_lease(&lease_key).await? else {
                return Err(LockError::NotHeld);
            };
            let locks = self
                .read_lease_locks(&lease.namespace, &l.rec.locks, false)
                .await?;
            let now = self.clock.now_ms();
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
                when.push(unchanged(&ll.lock_key, ll.held.as_ref()));
                // The list is exact while the lease lives; anything else
                // (not held by it) is left out of it.
                let Some(h) = ll
                    .held
                    .as_ref()
                    .filter(|h| held_by_lease(h, &lease.name, now))
                else {
                    continue;
                };
                let mut lock = h.rec.clone();
                lock.expires_at_ms = expires_at_ms;
                lock.token = Some(h.token);
                ops.push(TxnOp::put(ll.lock_key.clone(), to_json(&lock), put()));
                rec.add(&ll.name);
            }
            ops.push(TxnOp::put(lease_key.clone(), to_json(&rec), put()));
            let txn = Txn::new().when(when).and_then(ops);
            if !self.etcd.txn("lease refresh", txn).await?.succeeded() {
                continue;
            }
            // etcd cannot compare times: a refresh that landed after the old
            // expiry revived a lease others had rightly seen end. Taken back
            // (its locks pass on), as a late extend is (C6).
            if self.clock.now_ms() >= l.rec.expires_at_ms {
                match self.end_lease(lease, Why::Expired).await {
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
    pub(crate) async fn revoke_lease(&self, lease: &Key) -> Result<u64, LockError> {
        self.end_lease(lease, Why::Released).await
    }

    /// [`Inner::revoke_lease`], its transaction marked `why`.
    async fn end_lease(&self, lease: &Key, why: Why) -> Result<u64, LockError> {
        let lease_key = self.lease_key_of(lease);
        'read: loop {
            let Some(l) = self.read_lease(&lease_key).await? else {
                return Err(LockError::NotHeld);
            };
            let locks = self
                .read_lease_locks(&lease.namespace, &l.rec.locks, true)
                .await?;
            let now = self.clock.now_ms();
            if !l.rec.live(now) {
                return Err(LockError::NotHeld);
            }
            let mut edits = LeaseEdits::default();
            // Deleted here, so a waiter under this very lease gets nothing.
            edits.delete(lease_key.clone(), &l);
            let (mut when, mut ops) = (Vec::new(), Vec::new());
            let mut released = 0;
            for ll in &locks {
                when.push(unchanged(&ll.lock_key, ll.held.as_ref()));
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
                let Some((rec, etcd_lease)) =
                    self.grant_for_waiter(&key, head, now, &mut edits).await?
                else {
                    // Its lease ended: out of the queue, and read again.
                    self.drop_waiter(head).await?;
                    continue 'read;
                };
                when.push(Compare::mod_revision(
                    head.key.clone(),
                    CompareOp::Equal,
                    head.mod_revision,
                ));
                ops.push(TxnOp::put(
                    ll.lock_key.clone(),
                    to_json(&rec),
                    Some(PutOptions::new().with_lease(etcd_lease)),
                ));
                ops.push(TxnOp::delete(head.key.clone(), None));
            }
            edits.apply(&mut when, &mut ops);
            ops.push(why.marker(&self.layout));
            let txn = Txn::new().when(when).and_then(ops);
            if self.etcd.txn("lease revoke", txn).await?.succeeded() {
                return Ok(released);
            }
        }
    }

    /// One attempt at `key` under the lease: the lease's grant if it holds
    /// the lock, a fresh grant (with the lease's expiry, listed in its
    /// record, in one transaction) if the lock is free and nobody waits,
    /// or the holder. `NotHeld` if the lease is not live.
    async fn try_lease_acquire(
        &self,
        key: &Key,
        lock_key: &[u8],
        queue: &[u8],
        lease_key: &[u8],
        lease_id: &str,
        quota: Option<u64>,
    ) -> Result<LeaseAttempt, LockError> {
        loop {
            let Some(l) = self.read_lease(lease_key).await? else {
                return Err(LockError::NotHeld);
            };
            if !l.rec.live(self.clock.now_ms()) {
                return Err(LockError::NotHeld);
            }
            let snap = self.settled(lock_key, queue, None).await?;
            let now = self.clock.now_ms();
            if !l.rec.live(now) {
                return Err(LockError::NotHeld);
            }
            let holder = snap.lock.as_ref().filter(|h| h.live(now));
            if let Some(h) = holder.filter(|h| held_by_lease(h, lease_id, now)) {
                return Ok(LeaseAttempt::Granted(h.grant(), false));
            }
            // Full: refused before it could queue (a hand-off to a full
            // lease would drop the waiter).
            let max = self.options.max_locks_per_lease;
            if !l.rec.locks.iter().any(|n| *n == *key.name) && l.rec.locks.len() >= max {
                return Err(LockError::Denied(format!(
                    "lease {lease_id:?} already holds {max} locks, the most one lease may \
                     hold on this etcd store (max_locks_per_lease)"
                )));
            }
            if let Some(h) = holder {
                return Ok(LeaseAttempt::Busy(h.info(), l.rec));
            }
            if let Some(quota) = quota {
                self.check_quota(&key.namespace, quota, now).await?;
            }
            let expires_at_ms = l.rec.expires_at_ms;
            let etcd_lease = self.etcd_lease_of(&l.rec, expires_at_ms - now).await?;
            let mut rec =
                LockRecord::fresh(lease_id, now, expires_at_ms, l.rec.durability.into(), None);
            rec.lease = true;
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
            extra.extend(self.marked(Why::Expired, snap.lock.as_ref()));
            if let Some(h) = self
                .put_holder(lock_key, when, &rec, etcd_lease, extra)
                .await?
            {
                return Ok(LeaseAttempt::Granted(h.grant(), true));
            }
        }
    }

    /// Starts `lock_in_lease` in a task of its own, as `start_lock` does.
    pub(crate) fn start_lease_lock(
        self: &Arc<Self>,
        key: &Key,
        lease_id: &str,
        options: LockOptions,
    ) -> oneshot::Receiver<Result<Grant, LockError>> {
        let turn = self.turns.take(key);
        let (tx, rx) = oneshot::channel();
        let inner = self.clone();
        let (key, lease_id) = (key.clone(), lease_id.to_string());
        self.handle.spawn(async move {
            let mut caller = tx;
            let result = inner
                .lease_lock_flow(&key, &lease_id, options, turn, &mut caller)
                .await;
            inner.answer_lock(&key, &lease_id, result, caller).await;
        });
        rx
    }

    /// The whole `lock_in_lease` call: `lock_flow` with the lease's owner,
    /// expiry and durability, and `NotHeld` once the lease has ended.
    async fn lease_lock_flow(
        &self,
        key: &Key,
        lease_id: &str,
        options: LockOptions,
        mut turn: Turn,
        caller: &mut oneshot::Sender<Result<Grant, LockError>>,
    ) -> Result<(Grant, bool), LockError> {
        let wait_until = self.clock.now_ms().saturating_add(options.wait_ms);
        let lock_key = self.layout.lock_key(key);
        let queue = self.layout.queue_prefix(key);
        let lease_key = self.layout.lease_key(&key.namespace, lease_id);
        self.settle_pending(|k| k == key).await;
        turn.wait().await;
        if caller.is_closed() {
            return Err(LockError::Unavailable("the caller went away".into()));
        }
        // A grant whose lease ended before it arrived is no grant (it has
        // the lease's expiry, so it is free already).
        let live = |(g, fresh): (Grant, bool)| {
            if g.expires_at_ms > self.clock.now_ms() {
                Ok((g, fresh))
            } else {
                Err(LockError::NotHeld)
            }
        };
        let mut turn = Some(turn);
        loop {
            let attempt = self
                .try_lease_acquire(key, &lock_key, &queue, &lease_key, lease_id, options.quota)
                .await?;
            let (holder, lease) = match attempt {
                LeaseAttempt::Granted(g, fresh) => return live((g, fresh)),
                LeaseAttempt::Busy(info, lease) => (info, lease),
            };
            if options.wait_ms == 0 || self.clock.now_ms() >= wait_until || caller.is_closed() {
                return Err(LockError::Busy(holder));
            }
            let w = self
                .enqueue(
                    key,
                    lease_id,
                    lease.ttl_ms,
                    lease.durability.into(),
                    Some(lease_id),
                )
                .await?;
            drop(turn.take());
            let waited = tokio::select! {
                waited = self.wait_in_queue(&lock_key, &queue, &w, wait_until, caller) => waited,
                () = self.watch_lease_end(lease_key.clone()) => {
                    // The lease ended while waiting: leave the queue (a grant
                    // that reached it meanwhile ended with the lease, or is
                    // released now).
                    if let Some(h) = self.leave_queue(&lock_key, &w).await? {
                        let _ = self.unlock_flow(key, lease_id, Some(h.token)).await;
                    }
                    return Err(LockError::NotHeld);
                }
            };
            match waited {
                Ok(WaitEnd::Granted(g)) => return live((g, true)),
                // Dropped from the queue: the lease ended (the next attempt
                // says so) or the session was lost.
                Ok(WaitEnd::Lost) => continue,
                Ok(WaitEnd::TimedOut) => {
                    let last = self
                        .try_lease_acquire(
                            key,
                            &lock_key,
                            &queue,
                            &lease_key,
                            lease_id,
                            options.quota,
                        )
                        .await?;
                    return match last {
                        LeaseAttempt::Granted(g, fresh) => live((g, fresh)),
                        LeaseAttempt::Busy(info, _) => Err(LockError::Busy(info)),
                    };
                }
                Ok(WaitEnd::Cancelled) => {
                    return Err(LockError::Unavailable("the caller went away".into()))
                }
                Err(e) => {
                    if let Ok(Some(h)) = self.leave_queue(&lock_key, &w).await {
                        let _ = self.unlock_flow(key, lease_id, Some(h.token)).await;
                    }
                    return Err(e);
                }
            }
        }
    }

    /// A future that completes once the lease has ended: see
    /// [`Inner::watch_lease_end`].
    pub(crate) fn lease_ended(self: &Arc<Self>, lease: &Key) -> BoxFuture<'static, ()> {
        let inner = self.clone();
        let lease_key = self.lease_key_of(lease);
        Box::pin(async move { inner.watch_lease_end(lease_key).await })
    }

    /// Completes once the lease at `lease_key` is gone or expired, or etcd
    /// stayed unreachable past the last expiry read. Watches the lease key
    /// (a revoke on any host deletes it; a refresh rewrites it) and sleeps
    /// until its expiry, then reads again. No polling.
    pub(super) async fn watch_lease_end(&self, lease_key: Vec<u8>) {
        let mut known: Option<u64> = None;
        loop {
            let read = self.etcd.range("lease read", lease_key.clone(), None).await;
            let now = self.clock.now_ms();
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
                        watched = self.watch_any(&keys, revision + 1) => watched,
                        () = self.clock.sleep_until(rec.expires_at_ms) => Ok(()),
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
                () = self.clock.sleep_until(retry_until) => {}
            }
        }
    }
}
