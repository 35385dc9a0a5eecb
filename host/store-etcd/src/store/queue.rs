//! A lock's FIFO wait queue: waiter keys, reading a lock together with its
//! queue, handing the lock to the head, and waiting one's turn.
//!
//! A waiter key lives under the lock's queue prefix, on the session lease
//! of its host; etcd's `create_revision` orders the queue. Whoever finds
//! the lock free while someone waits hands it to the head first
//! ([`Queue::settled`]), in one transaction that writes the lock (marked
//! with the waiter's id) and deletes the waiter key, so nobody barges past
//! the queue. A waiter watches only the waiter just ahead of it (and its
//! own key); the head also watches the lock key and sleeps until the
//! holder's expiry. No polling.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp};
use lockd_core::{Claim, Durability, Grant, Key, LockError};
use tokio::sync::oneshot;

use super::keyspace::Keyspace;
use super::txn::{unchanged, waiter_unchanged, LeaseEdits};
use crate::events::Why;
use crate::name::Name;
use crate::record::{to_json, Held, LockRecord, Queued, WaiterRecord};
use crate::rpc::gets;

/// Whether a waiter asking for `claim` may join the grants of `name` at
/// `now`.
pub(super) fn admits(name: Option<&Name>, claim: Claim, now: u64) -> bool {
    name.is_none_or(|n| n.in_the_way(claim, now).is_none())
}

/// The live grants of `current` under a lease that `keep` leaves out: they
/// leave their lease's record in the same transaction.
pub(super) fn leaving_leases<'a>(
    current: Option<&'a Name>,
    keep: &'a [LockRecord],
    now: u64,
) -> impl Iterator<Item = &'a Held> + 'a {
    current
        .into_iter()
        .flat_map(move |n| n.live(now))
        .filter(move |h| {
            h.rec.lease
                && !keep
                    .iter()
                    .any(|k| k.token == Some(h.token) && k.ended_at_ms.is_none())
        })
}

/// Pause after a watch fails (a leader change, a dropped connection) before
/// reading again: error backoff, not polling.
pub(super) const WATCH_RETRY: Duration = Duration::from_millis(200);

/// Where the answer of a `lock` call goes; a waiter leaves the queue once
/// its caller has gone away.
pub(super) type Caller = oneshot::Sender<Result<Grant, LockError>>;

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

/// One consistent read of a lock and its queue.
pub(super) struct Snap {
    pub(super) revision: i64,
    pub(super) lock: Option<Name>,
    /// The first waiter (lowest create revision).
    pub(super) head: Option<Queued>,
    /// For a waiter: whether its own key still exists.
    pub(super) own_present: bool,
    /// For a waiter: the waiter just ahead of it.
    pub(super) ahead: Option<Queued>,
}

/// The wait queues of every lock, as this backend joins and serves them.
pub(super) struct Queue {
    ks: Arc<Keyspace>,
    /// `EtcdOptions::max_locks_per_lease`: a waiter under a lease that
    /// holds this many other locks is dropped rather than served.
    max_locks_per_lease: usize,
    /// The sequence number of this backend's next waiter key.
    next_waiter: AtomicU64,
}

impl Queue {
    pub(super) fn new(ks: Arc<Keyspace>, max_locks_per_lease: usize) -> Queue {
        Queue {
            ks,
            max_locks_per_lease,
            next_waiter: AtomicU64::new(0),
        }
    }

    /// Reads the lock key, its queue head and, for a waiter, its own key and
    /// the waiter ahead of it, all at one revision.
    async fn snapshot(
        &self,
        lock_key: &[u8],
        queue: &[u8],
        me: Option<&Waiter>,
    ) -> Result<Snap, LockError> {
        let first_waiter = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1);
        let mut ops = vec![
            TxnOp::get(lock_key.to_vec(), None),
            TxnOp::get(queue.to_vec(), Some(first_waiter)),
            TxnOp::get(
                self.ks.layout.all_sessions(),
                Some(GetOptions::new().with_prefix().with_keys_only()),
            ),
        ];
        if let Some(w) = me {
            ops.push(TxnOp::get(
                w.key.clone(),
                Some(GetOptions::new().with_keys_only()),
            ));
            let ahead = GetOptions::new()
                .with_prefix()
                .with_max_create_revision((w.create_revision - 1).max(1))
                .with_sort(SortTarget::Create, SortOrder::Descend)
                .with_limit(1);
            ops.push(TxnOp::get(queue.to_vec(), Some(ahead)));
        }
        let resp = self
            .ks
            .etcd
            .read_txn("read", Txn::new().and_then(ops))
            .await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        let gets = gets(&resp);
        let first = |i: usize| gets.get(i).and_then(|g| g.kvs().first());
        let alive = self.ks.sessions(gets.get(2));
        let lock = first(0)
            .map(Name::from_kv)
            .transpose()?
            .map(|n| n.without_dead(&alive));
        let head = first(1).map(Queued::from_kv).transpose()?;
        let (own_present, ahead) = match me {
            Some(w) => {
                let ahead = first(4)
                    .filter(|kv| {
                        kv.key() != w.key.as_slice() && kv.create_revision() < w.create_revision
                    })
                    .map(Queued::from_kv)
                    .transpose()?;
                (first(3).is_some(), ahead)
            }
            None => (false, None),
        };
        Ok(Snap {
            revision,
            lock,
            head,
            own_present,
            ahead,
        })
    }

    /// A snapshot in which the head of the queue, if any, cannot join the
    /// name's grants: while it can, it is handed its grant first (so
    /// consecutive shared waiters at the head are granted one after the
    /// other). Every path (a waiter, a `wait = 0` caller, an unlock) goes
    /// through here, so nobody can take a lock past the queue.
    pub(super) async fn settled(
        &self,
        lock_key: &[u8],
        queue: &[u8],
        me: Option<&Waiter>,
    ) -> Result<Snap, LockError> {
        loop {
            let snap = self.snapshot(lock_key, queue, me).await?;
            let now = self.ks.clock.now_ms();
            match &snap.head {
                Some(head) if admits(snap.lock.as_ref(), head.rec.claim(), now) => {
                    // Either way, read again: handed off, or raced.
                    let keep = snap.lock.as_ref().map(|n| n.tidied(now).0);
                    self.hand_off(
                        lock_key,
                        snap.lock.as_ref(),
                        keep.unwrap_or_default(),
                        head,
                        now,
                        Why::Expired,
                    )
                    .await?;
                }
                _ => return Ok(snap),
            }
        }
    }

    /// Grants the waiter `head` its claim beside `keep` (the grants of
    /// `current` that stay, tokens in them), taking it out of the queue, in
    /// one transaction that holds only if neither changed since the read.
    /// Returns whether it held.
    ///
    /// Leases: a live grant of `current` under a lease that `keep` leaves
    /// out leaves that lease's record, and a waiter under a lease enters its
    /// lease's record, in the same transaction (guarded by the lease keys'
    /// revisions). A waiter whose lease has ended is dropped from the queue
    /// instead (`false`: read again), so no lock is handed to a lease that
    /// ended.
    ///
    /// `why` is why grants of `current` leave (the transaction's marker).
    pub(super) async fn hand_off(
        &self,
        lock_key: &[u8],
        current: Option<&Name>,
        keep: Vec<LockRecord>,
        head: &Queued,
        now: u64,
        why: Why,
    ) -> Result<bool, LockError> {
        let key = self.ks.key_of(lock_key)?;
        let mut edits = LeaseEdits::new(&self.ks.etcd);
        for h in leaving_leases(current, &keep, now) {
            let lease_key = self.ks.layout.lease_key(&key.namespace, &h.rec.owner);
            edits.remove_lock(lease_key, &key.name).await?;
        }
        let Some((rec, session)) = self.grant_for_waiter(&key, head, now, &mut edits).await? else {
            self.drop_waiter(head).await?;
            return Ok(false);
        };
        let mut when = vec![unchanged(lock_key, current), waiter_unchanged(head)];
        let mut extra = vec![TxnOp::delete(head.key.clone(), None)];
        extra.extend(self.ks.marked(why, current));
        edits.apply(&mut when, &mut extra);
        Ok(self
            .ks
            .put_grant(lock_key, when, keep, rec, session, now, extra)
            .await?
            .is_some())
    }

    /// The record of the lock `key` handed to the waiter `head` at `now`,
    /// and the session an ephemeral grant lives on. A waiter under a lease
    /// gets the lease's expiry and durability, and the lease lists the lock
    /// (in `edits`); `None` if that lease has ended (or is full), and the
    /// waiter is to be dropped.
    pub(super) async fn grant_for_waiter(
        &self,
        key: &Key,
        head: &Queued,
        now: u64,
        edits: &mut LeaseEdits<'_>,
    ) -> Result<Option<(LockRecord, Option<i64>)>, LockError> {
        let w = &head.rec;
        let Some(lease_id) = &w.lease else {
            // On the waiter's own session if ephemeral: an ephemeral lock
            // belongs to the host whose caller holds it.
            let rec = LockRecord::fresh(
                &w.owner,
                now,
                now.saturating_add(w.ttl_ms),
                w.durability.into(),
                Some(w.id.clone()),
            )
            .claiming(w.claim(), w.lock_delay_ms)
            .on_session(Some(w.session));
            let rec = LockRecord {
                value: w.value.clone(),
                ..rec
            };
            return Ok(Some((rec, Some(w.session))));
        };
        let lease_key = self.ks.layout.lease_key(&key.namespace, lease_id);
        let added = edits
            .add_lock(lease_key, &key.name, now, self.max_locks_per_lease)
            .await?;
        let Some(l) = added.cloned() else {
            return Ok(None);
        };
        let mut rec = LockRecord::fresh(
            lease_id,
            now,
            l.expires_at_ms,
            l.durability.into(),
            Some(w.id.clone()),
        )
        .claiming(Claim::Exclusive, w.lock_delay_ms)
        .on_session(l.session);
        rec.lease = true;
        Ok(Some((rec, l.session)))
    }

    /// Takes a waiter nobody can hand the lock to (its lease ended) out of
    /// the queue, if it is still as read.
    pub(super) async fn drop_waiter(&self, head: &Queued) -> Result<(), LockError> {
        let txn = Txn::new()
            .when(vec![waiter_unchanged(head)])
            .and_then(vec![TxnOp::delete(head.key.clone(), None)]);
        self.ks.etcd.txn("drop waiter", txn).await.map(drop)
    }

    /// Puts a waiter key (on the session lease) asking for `claim` at the
    /// back of the queue; with `lease`, a waiter under that lease (`owner`
    /// is its id). Its grant will carry `lock_delay_ms` (and, for a
    /// candidate, its `value`).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn enqueue(
        &self,
        key: &Key,
        owner: &str,
        ttl_ms: u64,
        durability: Durability,
        lease: Option<&str>,
        claim: Claim,
        lock_delay_ms: u64,
        value: Option<&str>,
    ) -> Result<Waiter, LockError> {
        // Unique among all waiters ever: `<session lease hex>-<sequence>`.
        let session = self.ks.etcd_leases.session();
        let id = format!(
            "{session:x}-{}",
            self.next_waiter.fetch_add(1, Ordering::Relaxed)
        );
        let wkey = self.ks.layout.waiter_key(key, &id);
        let lease = lease.map(str::to_string);
        let mut rec = WaiterRecord::new(id.clone(), owner, ttl_ms, durability, session, lease)
            .claiming(claim, lock_delay_ms);
        rec.value = value.map(str::to_string);
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
        let resp = self.ks.etcd.txn("enqueue", txn).await?;
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
    pub(super) async fn leave(
        &self,
        lock_key: &[u8],
        w: &Waiter,
    ) -> Result<Option<Held>, LockError> {
        let txn = Txn::new()
            .when(vec![Compare::version(w.key.clone(), CompareOp::Greater, 0)])
            .and_then(vec![TxnOp::delete(w.key.clone(), None)])
            .or_else(vec![TxnOp::get(lock_key.to_vec(), None)]);
        let resp = self.ks.etcd.txn("leave queue", txn).await?;
        if resp.succeeded() {
            return Ok(None);
        }
        let gets = gets(&resp);
        let Some(kv) = gets.first().and_then(|g| g.kvs().first()) else {
            return Ok(None);
        };
        Ok(Name::from_kv(kv)?.of_waiter(&w.id).cloned())
    }

    /// Waits in the queue until the lock is handed to `w`, the deadline
    /// passes, or the caller goes away. Only the predecessor's deletion
    /// wakes a waiter (etcd's lock recipe), and the head also watches the
    /// lock key and sleeps until the holder's expiry.
    pub(super) async fn wait(
        &self,
        lock_key: &[u8],
        queue: &[u8],
        w: &Waiter,
        wait_until: u64,
        caller: &mut Caller,
    ) -> Result<WaitEnd, LockError> {
        loop {
            let snap = self.settled(lock_key, queue, Some(w)).await?;
            if let Some(h) = snap.lock.as_ref().and_then(|n| n.of_waiter(&w.id)) {
                return Ok(WaitEnd::Granted(h.grant()));
            }
            if !snap.own_present {
                return Ok(WaitEnd::Lost);
            }
            if self.ks.clock.now_ms() >= wait_until {
                return Ok(match self.leave(lock_key, w).await? {
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
                    // Until a grant's expiry or the end of a delay.
                    let now = self.ks.clock.now_ms();
                    if let Some(at) = snap.lock.as_ref().and_then(|n| n.next_change(now)) {
                        wake_at = wake_at.min(at);
                    }
                }
            }
            let watch_failed = tokio::select! {
                watched = self.ks.watch_any(&keys, snap.revision + 1) => watched.err(),
                () = self.ks.clock.sleep_until(wake_at) => None,
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
                    () = self.ks.clock.sleep_until(wake_at) => {}
                    () = caller.closed() => return Ok(self.cancel_wait(lock_key, w).await),
                }
            }
        }
    }

    /// The caller of a waiting `lock` went away: leaves the queue, keeping a
    /// grant that reached the waiter first (released by the caller's task).
    async fn cancel_wait(&self, lock_key: &[u8], w: &Waiter) -> WaitEnd {
        match self.leave(lock_key, w).await {
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
