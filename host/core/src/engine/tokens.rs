//! Fencing tokens (docs/contract.md#c9-tokens): one counter for the whole
//! engine, and the durable reservation that keeps it from going backwards
//! across a restart.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::LockError;
use crate::journal::{Journal, JournalOp};

/// Issues fencing tokens from one global counter, and makes sure a token is
/// covered by a durable reservation before any grant carrying it is
/// acknowledged. After a restart the counter resumes above the reservation,
/// so tokens never go backwards, for ephemeral locks too.
pub(super) struct TokenAllocator {
    next: AtomicU64,
    reserved_up_to: AtomicU64,
    /// How many tokens one reservation covers beyond what is asked.
    block: u64,
    refill: tokio::sync::Mutex<()>,
}

impl TokenAllocator {
    /// An allocator resuming at `next_token`, with tokens up to
    /// `reserved_up_to` already reserved on disk, reserving `block` tokens
    /// at a time.
    pub(super) fn resume(next_token: u64, reserved_up_to: u64, block: u64) -> TokenAllocator {
        TokenAllocator {
            next: AtomicU64::new(next_token.max(1)),
            reserved_up_to: AtomicU64::new(reserved_up_to),
            block: block.max(1),
            refill: tokio::sync::Mutex::new(()),
        }
    }

    /// Resumes above `token`, found in a recovered record: a grant's record
    /// can reach the disk in an earlier batch than the reservation covering
    /// it.
    pub(super) fn resume_above(&self, token: u64) {
        self.next
            .fetch_max(token.saturating_add(1), Ordering::Relaxed);
    }

    /// The token the next grant gets.
    pub(super) fn peek(&self) -> u64 {
        self.next.load(Ordering::Relaxed)
    }

    /// Called under the shard mutex, so that per name, token order is grant
    /// order.
    pub(super) fn issue(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Waits until `token` is covered by a durable reservation, writing one
    /// (a block ahead) if it is not.
    pub(super) async fn make_durable(
        &self,
        token: u64,
        journal: &dyn Journal,
    ) -> Result<(), LockError> {
        if token <= self.reserved_up_to.load(Ordering::Acquire) {
            return Ok(());
        }
        let _one_refill_at_a_time = self.refill.lock().await;
        if token <= self.reserved_up_to.load(Ordering::Acquire) {
            return Ok(());
        }
        let up_to = self
            .next
            .load(Ordering::Relaxed)
            .max(token)
            .saturating_add(self.block);
        journal
            .submit(JournalOp::ReserveTokens { up_to })
            .wait()
            .await?;
        self.reserved_up_to.fetch_max(up_to, Ordering::AcqRel);
        Ok(())
    }
}
