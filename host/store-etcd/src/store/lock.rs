//! The `lock` call end to end: the first attempt, waiting in the queue,
//! and undoing a grant nobody is left to receive.

use std::sync::Arc;

use lockd_core::{Grant, Key, LockError, LockOptions};
use tokio::sync::oneshot;

use super::grant::Attempt;
use super::queue::WaitEnd;
use super::{log_unavailable, Inner};
use crate::local::Turn;

impl Inner {
    /// Starts a `lock` call in a task of its own and returns where its
    /// answer will arrive. Takes the caller's turn on the name at once
    /// (before any await), so call order is queue order.
    pub(crate) fn start_lock(
        self: &Arc<Self>,
        key: &Key,
        owner: &str,
        ttl_ms: u64,
        options: LockOptions,
    ) -> oneshot::Receiver<Result<Grant, LockError>> {
        let turn = self.turns.take(key);
        let (tx, rx) = oneshot::channel();
        let task =
            self.clone()
                .lock_task(key.clone(), owner.to_string(), ttl_ms, options, turn, tx);
        self.handle.spawn(task);
        rx
    }

    /// The task behind `lock`: answers the caller, or undoes a fresh grant
    /// nobody is left to receive.
    async fn lock_task(
        self: Arc<Self>,
        key: Key,
        owner: String,
        ttl_ms: u64,
        options: LockOptions,
        turn: Turn,
        mut caller: oneshot::Sender<Result<Grant, LockError>>,
    ) {
        let result = self
            .lock_flow(&key, &owner, ttl_ms, options, turn, &mut caller)
            .await;
        self.answer_lock(&key, &owner, result, caller).await;
    }

    /// Answers a `lock` (or `lock_in_lease`) caller, or undoes a fresh
    /// grant nobody is left to receive.
    pub(super) async fn answer_lock(
        &self,
        key: &Key,
        owner: &str,
        result: Result<(Grant, bool), LockError>,
        caller: oneshot::Sender<Result<Grant, LockError>>,
    ) {
        match result {
            Ok((grant, fresh)) => {
                if caller.send(Ok(grant)).is_err() && fresh {
                    let undone = self
                        .unlock_flow(key, owner, Some(grant.fencing_token))
                        .await;
                    // Nobody waits for this answer; a failure leaves the
                    // lock to expire.
                    let _ = log_unavailable("undo of an unreceived grant", key, undone);
                }
            }
            // Nobody is left to see the failure: not a store failure to
            // report (it may be "the caller went away").
            Err(e) if caller.is_closed() => {
                tracing::debug!(error = %e, "lock call ended after its caller went away");
            }
            Err(e) => {
                let _ = caller.send(log_unavailable("lock", key, Err(e)));
            }
        }
    }

    /// The whole `lock` call, run in its own task so that it finishes (and
    /// cleans up) even if the caller goes away. Returns the grant and
    /// whether it is fresh (a refresh is not undone when the caller left).
    async fn lock_flow(
        &self,
        key: &Key,
        owner: &str,
        ttl_ms: u64,
        options: LockOptions,
        mut turn: Turn,
        caller: &mut oneshot::Sender<Result<Grant, LockError>>,
    ) -> Result<(Grant, bool), LockError> {
        let wait_until = self.clock.now_ms().saturating_add(options.wait_ms);
        let lock_key = self.layout.lock_key(key);
        let queue = self.layout.queue_prefix(key);
        self.settle_pending(|k| k == key).await;
        turn.wait().await;
        if caller.is_closed() {
            return Err(LockError::Unavailable("the caller went away".into()));
        }
        let mut turn = Some(turn);
        loop {
            let holder = match self
                .try_acquire(key, &lock_key, &queue, owner, ttl_ms, options)
                .await?
            {
                Attempt::Granted(g, fresh) => return Ok((g, fresh)),
                Attempt::Busy(info) => info,
            };
            if options.wait_ms == 0 || self.clock.now_ms() >= wait_until || caller.is_closed() {
                return Err(LockError::Busy(holder));
            }
            let w = self
                .enqueue(key, owner, ttl_ms, options.durability, None)
                .await?;
            // In the queue: the next local caller may go.
            drop(turn.take());
            match self
                .wait_in_queue(&lock_key, &queue, &w, wait_until, caller)
                .await
            {
                Ok(WaitEnd::Granted(g)) => return Ok((g, true)),
                Ok(WaitEnd::Lost) => continue,
                Ok(WaitEnd::TimedOut) => {
                    // Out of the queue; free with nobody ahead means ours.
                    return match self
                        .try_acquire(key, &lock_key, &queue, owner, ttl_ms, options)
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
                    // Best effort: leave the queue, and release a grant
                    // handed over meanwhile. The session lease is the net.
                    if let Ok(Some(h)) = self.leave_queue(&lock_key, &w).await {
                        let _ = self.unlock_flow(key, owner, Some(h.token)).await;
                    }
                    return Err(e);
                }
            }
        }
    }
}
