//! The FIFO wait queue of a held lock (docs/contract.md#c3-queue).
//!
//! A `lock` that finds the lock held, and may wait, joins the lock's queue
//! ([`Engine::enqueue`]). Whoever removes the holder hands the lock on the
//! spot to the first waiter still listening ([`Engine::hand_off`], under
//! the shard mutex), so nobody barges past the queue; the waiter then
//! acknowledges the grant itself, as any grant. A waiter whose wait runs out
//! leaves with `busy` unless a hand-off raced its timer
//! ([`Engine::time_out`]); one that goes away leaves the queue and releases
//! anything handed to it meanwhile ([`Waiting`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::leases::LeaseCell;
use super::table::Shard;
use super::waiter::{Handoff, Queued, Waiter};
use super::{Attempt, Engine, Request};
use crate::error::LockError;
use crate::journal::{JournalOp, Ticket};
use crate::types::{Claim, EventKind, Grant, Key, LockOptions};

impl Engine {
    /// Queues `owner` behind the holder of the lock at `at`, for up to
    /// `options.wait_ms` after `now`. The caller holds the shard mutex.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn enqueue(
        &self,
        shard: &mut Shard,
        at: usize,
        owner: &str,
        ttl_ms: u64,
        options: LockOptions,
        lease: Option<&Arc<LeaseCell>>,
        now: u64,
    ) -> Queued {
        let (waiter, queued) = self.new_waiter(owner, ttl_ms, options, lease, now);
        let lock = shard.at_mut(at);
        lock.namespace.note_lock_delay(options.lock_delay_ms);
        lock.waiters.push_back(waiter);
        queued
    }

    /// A waiter for a queue, and the queued call's side of it.
    pub(super) fn new_waiter(
        &self,
        owner: &str,
        ttl_ms: u64,
        options: LockOptions,
        lease: Option<&Arc<LeaseCell>>,
        now: u64,
    ) -> (Waiter, Queued) {
        let id = self.next_waiter_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let waiter = Waiter {
            id,
            owner: owner.to_string(),
            claim: options.claim,
            value: None,
            ttl_ms,
            durability: options.durability,
            lease: lease.cloned(),
            tx,
        };
        let queued = Queued {
            id,
            rx,
            wait_until: now.saturating_add(options.wait_ms),
        };
        (waiter, queued)
    }

    /// Grants the free lock at `at`, named `key`, to its first live waiter,
    /// or forgets the lock if nobody waits.
    pub(super) fn hand_off(&self, shard: &mut Shard, at: usize, key: &Key, now: u64) {
        loop {
            let lock = shard.at_mut(at);
            if lock.holder().is_some() {
                return;
            }
            let Some(waiter) = lock.waiters.pop_front() else {
                shard.remove(at);
                return;
            };
            if waiter.tx.is_closed() {
                continue;
            }
            if waiter.claim == Claim::Shared {
                // Shared holders live in a group (the `group_ops` module).
                self.table_to_group(shard, at, key, waiter, now);
                return;
            }
            let expires_at_ms = match &waiter.lease {
                // A lease that ended while its caller waited gets nothing.
                Some(lease) => match lease.attach_if_live(&key.name, now) {
                    Some(expires_at_ms) => expires_at_ms,
                    None => {
                        let _ = waiter.tx.send(Err(LockError::NotHeld));
                        continue;
                    }
                },
                // The ttl was validated when the waiter queued; saturate
                // rather than fail here, where nobody could be told.
                None => now.saturating_add(waiter.ttl_ms),
            };
            // The lock changes hands within its namespace: counted, but never
            // refused by a quota.
            lock.namespace.add();
            let lease = waiter.lease.clone();
            let (grant, ticket) = self.install_counted(
                shard,
                at,
                key,
                &waiter.owner,
                expires_at_ms,
                waiter.durability,
                waiter.lease,
                now,
            );
            if waiter.tx.send(Ok(Handoff { grant, ticket })).is_ok() {
                self.emit(EventKind::HandedOff, shard.at(at), key);
                return;
            }
            // The waiter left between the check and the send: undo, try the next.
            if let Some(lease) = &lease {
                lease.detach(&key.name);
            }
            if let Some(h) = shard.take_holder(at) {
                shard.at(at).namespace.remove();
                drop(self.journal_if_persistent(h.durability, || JournalOp::Delete(key.clone())));
            }
        }
    }

    /// Waits in the queue until the lock is handed over or the wait runs
    /// out, then acknowledges the grant, if any.
    pub(super) async fn wait_in_queue(
        &self,
        key: &Key,
        request: Request<'_>,
        lease: Option<&Arc<LeaseCell>>,
        queued: Queued,
    ) -> Result<Grant, LockError> {
        let owner = request.owner;
        let Queued { id, rx, wait_until } = queued;
        let mut waiting = Waiting {
            engine: self,
            key,
            owner,
            id,
            rx,
            queued: true,
        };
        tokio::select! {
            biased;
            handoff = &mut waiting.rx => {
                waiting.queued = false;
                let Ok(handoff) = handoff else {
                    return Err(LockError::Unavailable("the lock store shut down".to_string()));
                };
                let handoff = handoff?;
                return self.acknowledge(key, owner, handoff.grant, handoff.ticket).await;
            }
            () = self.clock.sleep_until(wait_until) => {}
        }
        waiting.queued = false;
        let (grant, ticket) = self.time_out(key, request, lease, &mut waiting)?;
        self.acknowledge(key, owner, grant, ticket).await
    }

    /// A queued call's wait ran out. A hand-off may have raced the timer: if
    /// so, it wins; otherwise the caller leaves the queue with `busy`, or
    /// takes the name if it is free for it at that moment.
    fn time_out(
        &self,
        key: &Key,
        request: Request<'_>,
        lease: Option<&Arc<LeaseCell>>,
        waiting: &mut Waiting<'_>,
    ) -> Result<(Grant, Ticket), LockError> {
        let (mut guard, hash) = self.shard(key);
        let shard = &mut *guard;
        let now = self.clock.now_ms();
        self.settle_all(shard, key, hash, now);
        if let Ok(handoff) = waiting.rx.try_recv() {
            let handoff = handoff?;
            return Ok((handoff.grant, handoff.ticket));
        }
        self.leave_queue(shard, key, hash, waiting.id, now);
        let request = Request {
            options: LockOptions {
                wait_ms: 0,
                ..request.options
            },
            ..request
        };
        match self.decide(shard, key, hash, request, lease, now)? {
            Attempt::Granted(grant, ticket) | Attempt::Refreshed(grant, ticket) => {
                Ok((grant, ticket))
            }
            Attempt::Queued(_) => unreachable!("a call that may not wait is never queued"),
        }
    }

    /// Takes the waiter `id` out of the queue of `key`, wherever the name
    /// is.
    pub(super) fn leave_queue(&self, shard: &mut Shard, key: &Key, hash: u64, id: u64, now: u64) {
        if let Some(at) = shard.find(hash, key) {
            shard.at_mut(at).waiters.retain(|w| w.id != id);
            shard.forget_if_idle(at);
        } else {
            self.leave_group_queue(shard, key, id, now);
        }
    }
}

/// A queued `lock` call. If the call goes away (its future is dropped), it
/// leaves the queue; if a grant was handed to it meanwhile, that grant is
/// released.
struct Waiting<'a> {
    engine: &'a Engine,
    key: &'a Key,
    owner: &'a str,
    id: u64,
    rx: oneshot::Receiver<Result<Handoff, LockError>>,
    queued: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.queued {
            return;
        }
        let (mut guard, hash) = self.engine.shard(self.key);
        let now = self.engine.clock.now_ms();
        self.engine
            .leave_queue(&mut guard, self.key, hash, self.id, now);
        // A grant handed over before the waiter left is released under the
        // same mutex: released after it, a call of the same owner could
        // take it meanwhile as its own (a re-lock keeps the token) and be
        // answered a grant that is then released, with a token older than
        // grants made since.
        if let Ok(Ok(handoff)) = self.rx.try_recv() {
            self.engine.release_in_shard(
                &mut guard,
                self.key,
                hash,
                self.owner,
                handoff.grant.fencing_token,
                now,
            );
        }
    }
}
