//! The `lock` and `lock_in_lease` calls from the caller's turn to the
//! grant: the first attempt, then waiting in the queue (and, under a lease,
//! for the lease's end) until the lock is handed over or the wait is up.
//! Each call runs in a task of its own (started in `mod.rs`, which also
//! undoes a grant nobody is left to receive), so that it finishes and
//! cleans up even if its caller goes away.

use std::sync::Arc;

use lockd_core::{Claim, Grant, Key, LockError, LockOptions};

use super::grant::{Attempt, Grants};
use super::keyspace::Keyspace;
use super::lockd_lease::{LeaseAttempt, LockdLeases};
use super::queue::{Caller, Queue, WaitEnd, Waiter};
use crate::local::{Pending, Turn};

/// The calls that may wait for a lock, built on the grants, the leases and
/// the queue.
pub(super) struct LockCalls {
    ks: Arc<Keyspace>,
    queue: Arc<Queue>,
    grants: Arc<Grants>,
    leases: Arc<LockdLeases>,
    /// This backend's detached releases in flight, which a call on the
    /// same name waits for first.
    pending: Arc<Pending>,
}

impl LockCalls {
    pub(super) fn new(
        ks: Arc<Keyspace>,
        queue: Arc<Queue>,
        grants: Arc<Grants>,
        leases: Arc<LockdLeases>,
        pending: Arc<Pending>,
    ) -> LockCalls {
        LockCalls {
            ks,
            queue,
            grants,
            leases,
            pending,
        }
    }

    /// Starts a call that may wait `wait_ms` from now: answers the time its
    /// waiting ends, once the caller's turn on the name has come (and this
    /// backend's detached releases of it have ended), so its first attempt
    /// may go. `Unavailable` if the caller went away meanwhile.
    async fn start(
        &self,
        key: &Key,
        wait_ms: u64,
        turn: &mut Turn,
        caller: &Caller,
    ) -> Result<u64, LockError> {
        let wait_until = self.ks.clock.now_ms().saturating_add(wait_ms);
        self.pending
            .settle(|k| k == key, self.ks.etcd.request_timeout())
            .await;
        turn.wait().await;
        if caller.is_closed() {
            return Err(LockError::Unavailable("the caller went away".into()));
        }
        Ok(wait_until)
    }

    /// After waiting failed: leaves the queue, and releases a grant handed
    /// to `w` meanwhile, in the background. The caller's answer does not
    /// wait on a store that just failed (during a partition that is one
    /// more request timeout); the next call on the name through this
    /// backend waits for it first ([`LockCalls::start`]). Best effort: the
    /// session lease is the net.
    fn leave_detached(&self, key: &Key, lock_key: Vec<u8>, w: Waiter, owner: &str) {
        let pending = self.pending.begin(key);
        let (queue, grants) = (self.queue.clone(), self.grants.clone());
        let (key, owner) = (key.clone(), owner.to_string());
        tokio::spawn(async move {
            if let Ok(Some(h)) = queue.leave(&lock_key, &w).await {
                let _ = grants.unlock(&key, &owner, Some(h.token)).await;
            }
            drop(pending);
        });
    }

    /// The whole `lock` call. Returns the grant and whether it is fresh (a
    /// refresh is not undone when the caller left).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn lock(
        &self,
        key: &Key,
        owner: &str,
        ttl_ms: u64,
        options: LockOptions,
        value: Option<&str>,
        mut turn: Turn,
        caller: &mut Caller,
    ) -> Result<(Grant, bool), LockError> {
        let wait_until = self.start(key, options.wait_ms, &mut turn, caller).await?;
        let lock_key = self.ks.layout.lock_key(key);
        let queue = self.ks.layout.queue_prefix(key);
        let mut turn = Some(turn);
        loop {
            let holder = match self
                .grants
                .try_acquire(key, &lock_key, &queue, owner, ttl_ms, options, value)
                .await?
            {
                Attempt::Granted(g, fresh) => return Ok((g, fresh)),
                Attempt::Busy(info) => info,
            };
            if options.wait_ms == 0 || self.ks.clock.now_ms() >= wait_until || caller.is_closed() {
                return Err(LockError::Busy(holder));
            }
            let w = self
                .queue
                .enqueue(
                    key,
                    owner,
                    ttl_ms,
                    options.durability,
                    None,
                    options.claim,
                    options.lock_delay_ms,
                    value,
                )
                .await?;
            // In the queue: the next local caller may go.
            drop(turn.take());
            match self
                .queue
                .wait(&lock_key, &queue, &w, wait_until, caller)
                .await
            {
                Ok(WaitEnd::Granted(g)) => return Ok((g, true)),
                Ok(WaitEnd::Lost) => continue,
                Ok(WaitEnd::TimedOut) => {
                    // Out of the queue; free with nobody ahead means ours.
                    return match self
                        .grants
                        .try_acquire(key, &lock_key, &queue, owner, ttl_ms, options, value)
                        .await?
                    {
                        Attempt::Granted(g, fresh) => Ok((g, fresh)),
                        Attempt::Busy(info) => Err(LockError::Busy(info)),
                    };
                }
                Ok(WaitEnd::Cancelled) => {
                    return Err(LockError::Unavailable("the caller went away".into()))
                }
                Err(e) => {
                    self.leave_detached(key, lock_key, w, owner);
                    return Err(e);
                }
            }
        }
    }

    /// The whole `lock_in_lease` call: [`LockCalls::lock`] with the lease's
    /// owner, expiry and durability, and `NotHeld` once the lease has ended.
    pub(super) async fn lock_in_lease(
        &self,
        key: &Key,
        lease_id: &str,
        options: LockOptions,
        mut turn: Turn,
        caller: &mut Caller,
    ) -> Result<(Grant, bool), LockError> {
        if options.claim != Claim::Exclusive {
            return Err(LockError::InvalidArgument(format!(
                "shared locks and permits are not taken under a lease: take {:?} with an \
                 owner of its own",
                key.name
            )));
        }
        let wait_until = self.start(key, options.wait_ms, &mut turn, caller).await?;
        let lock_key = self.ks.layout.lock_key(key);
        let queue = self.ks.layout.queue_prefix(key);
        let lease_key = self.ks.layout.lease_key(&key.namespace, lease_id);
        // A grant whose lease ended before it arrived is no grant (it has
        // the lease's expiry, so it is free already).
        let live = |(g, fresh): (Grant, bool)| {
            if g.expires_at_ms > self.ks.clock.now_ms() {
                Ok((g, fresh))
            } else {
                Err(LockError::NotHeld)
            }
        };
        let mut turn = Some(turn);
        loop {
            let attempt = self
                .leases
                .try_acquire(key, &lock_key, &queue, &lease_key, lease_id, options)
                .await?;
            let (holder, lease) = match attempt {
                LeaseAttempt::Granted(g, fresh) => return live((g, fresh)),
                LeaseAttempt::Busy(info, lease) => (info, lease),
            };
            if options.wait_ms == 0 || self.ks.clock.now_ms() >= wait_until || caller.is_closed() {
                return Err(LockError::Busy(holder));
            }
            let w = self
                .queue
                .enqueue(
                    key,
                    lease_id,
                    lease.ttl_ms,
                    lease.durability.into(),
                    Some(lease_id),
                    Claim::Exclusive,
                    options.lock_delay_ms,
                    None,
                )
                .await?;
            drop(turn.take());
            let waited = tokio::select! {
                waited = self.queue.wait(&lock_key, &queue, &w, wait_until, caller) => waited,
                () = self.leases.watch_end(lease_key.clone()) => {
                    // The lease ended while waiting: leave the queue (a grant
                    // that reached it meanwhile ended with the lease, or is
                    // released now).
                    if let Some(h) = self.queue.leave(&lock_key, &w).await? {
                        let _ = self.grants.unlock(key, lease_id, Some(h.token)).await;
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
                        .leases
                        .try_acquire(key, &lock_key, &queue, &lease_key, lease_id, options)
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
                    self.leave_detached(key, lock_key, w, lease_id);
                    return Err(e);
                }
            }
        }
    }
}
