//! A call waiting in a queue, and the queue itself (see the `queue`
//! module for how calls wait, and `group_ops` for shared names'
//! queues).

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::leases::LeaseCell;
use crate::error::LockError;
use crate::journal::Ticket;
use crate::types::{Claim, Durability, Grant};

/// A `lock` call waiting in a lock's queue (see the `queue` module).
pub(super) struct Waiter {
    pub(super) id: u64,
    pub(super) owner: String,
    /// Exclusive or shared in a lock's queue; a permit in a semaphore's;
    /// the leadership in an election's.
    pub(super) claim: Claim,
    /// A candidate's value (elections only).
    pub(super) value: Option<Arc<str>>,
    pub(super) ttl_ms: u64,
    pub(super) durability: Durability,
    /// Waiting under a lease: granted with the lease's expiry, and refused
    /// with `not_held` if the lease ended meanwhile.
    pub(super) lease: Option<Arc<LeaseCell>>,
    pub(super) tx: oneshot::Sender<Result<Handoff, LockError>>,
}

/// A grant made on a waiter's behalf, still to be acknowledged by it.
pub(super) struct Handoff {
    pub(super) grant: Grant,
    pub(super) ticket: Ticket,
}

/// A queued `lock` call's side of its [`Waiter`]: where its grant comes.
pub(super) struct Queued {
    pub(super) id: u64,
    pub(super) rx: oneshot::Receiver<Result<Handoff, LockError>>,
    /// When its wait runs out, in the engine's clock time.
    pub(super) wait_until: u64,
}

/// A wait queue that costs one pointer while empty, as nearly every lock's
/// is.
// A boxed collection on purpose: the box is the one-pointer empty case.
#[allow(clippy::box_collection)]
#[derive(Default)]
pub(super) struct Queue(Option<Box<VecDeque<Waiter>>>);

impl Queue {
    pub(super) fn push_back(&mut self, waiter: Waiter) {
        self.0
            .get_or_insert_with(Default::default)
            .push_back(waiter);
    }

    pub(super) fn pop_front(&mut self) -> Option<Waiter> {
        let queue = self.0.as_mut()?;
        let first = queue.pop_front();
        if queue.is_empty() {
            self.0 = None;
        }
        first
    }

    pub(super) fn retain(&mut self, keep: impl FnMut(&Waiter) -> bool) {
        if let Some(queue) = self.0.as_mut() {
            queue.retain(keep);
            if queue.is_empty() {
                self.0 = None;
            }
        }
    }

    pub(super) fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |q| q.len())
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// Its waiters, first first.
    pub(super) fn into_deque(self) -> VecDeque<Waiter> {
        self.0.map(|queue| *queue).unwrap_or_default()
    }
}
