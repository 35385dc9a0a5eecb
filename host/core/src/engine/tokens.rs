//! Fencing tokens (docs/contract.md#c9-tokens): one counter for the whole
//! engine, the durable reservation that keeps it from going backwards
//! across a restart, and the clock ceiling that keeps it below 2^53.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::clock::wall_clock_micros;
use crate::error::LockError;
use crate::journal::{Journal, JournalOp, Ticket};

/// Issues fencing tokens from one global counter, and makes sure a token is
/// covered by a durable reservation before any grant carrying it is
/// acknowledged. After a restart the counter resumes above the reservation,
/// so tokens never go backwards, for ephemeral locks too.
///
/// The counter never passes the **ceiling**: its value when the allocator
/// started (the wall clock in microseconds, or the resumed counter if that
/// is higher) plus the microseconds elapsed since, on the monotonic clock.
/// Tokens are thus issued at most one per microsecond on average; a burst
/// uses the microseconds left unused before it, and past them a grant waits
/// for the next microsecond (in practice engines grant well under a million
/// locks a second, and never wait). Two things follow, whatever the grant
/// rate: tokens stay below the wall clock in microseconds, so below 2^53
/// until the year 2255, and the `memory` store, which keeps nothing, starts
/// above every token of its previous process by starting at the wall clock.
pub(super) struct TokenAllocator {
    next: AtomicU64,
    reserved_up_to: AtomicU64,
    /// How many tokens one reservation covers beyond what is asked.
    block: u64,
    refill: tokio::sync::Mutex<()>,
    /// The ceiling at `started`.
    ceiling_at_start: AtomicU64,
    started: Instant,
}

impl TokenAllocator {
    /// An allocator resuming at `next_token`, with tokens up to
    /// `reserved_up_to` already reserved on disk, reserving `block` tokens
    /// at a time.
    pub(super) fn resume(next_token: u64, reserved_up_to: u64, block: u64) -> TokenAllocator {
        let next_token = next_token.max(1);
        TokenAllocator {
            next: AtomicU64::new(next_token),
            reserved_up_to: AtomicU64::new(reserved_up_to),
            block: block.max(1),
            refill: tokio::sync::Mutex::new(()),
            ceiling_at_start: AtomicU64::new(wall_clock_micros().max(next_token)),
            started: Instant::now(),
        }
    }

    /// Resumes above `token`, found in a recovered record: a grant's record
    /// can reach the disk in an earlier batch than the reservation covering
    /// it.
    pub(super) fn resume_above(&self, token: u64) {
        let next = token.saturating_add(1);
        self.next.fetch_max(next, Ordering::Relaxed);
        // A store that already issued tokens above the clock (written by a
        // version without the ceiling) goes on from them, never back.
        self.ceiling_at_start.fetch_max(next, Ordering::Relaxed);
    }

    /// The token the next grant gets.
    pub(super) fn peek(&self) -> u64 {
        self.next.load(Ordering::Relaxed)
    }

    /// The highest token that may be issued now.
    pub(super) fn ceiling(&self) -> u64 {
        let elapsed = u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.ceiling_at_start
            .load(Ordering::Relaxed)
            .saturating_add(elapsed)
    }

    /// Called under the shard mutex, so that per name, token order is grant
    /// order. Waits (spinning: for a few microseconds at most, one per
    /// token issued concurrently past the ceiling) until the token is under
    /// the ceiling.
    pub(super) fn issue(&self) -> u64 {
        let token = self.next.fetch_add(1, Ordering::Relaxed);
        if token <= self.ceiling_at_start.load(Ordering::Relaxed) {
            return token;
        }
        while token > self.ceiling() {
            std::hint::spin_loop();
        }
        token
    }

    /// Whether a durable reservation covers `token` already.
    pub(super) fn is_durable(&self, token: u64) -> bool {
        token <= self.reserved_up_to.load(Ordering::Acquire)
    }

    /// Submits a reservation covering `token` if none does yet, answering
    /// its ceiling and ticket; once the ticket resolved, [`Self::reserved`]
    /// records it. For a caller that must not hold the journal while it
    /// waits. Two such reservations at once are harmless (the larger wins).
    pub(super) fn reserve(&self, token: u64, journal: &dyn Journal) -> Option<(u64, Ticket)> {
        if self.is_durable(token) {
            return None;
        }
        let up_to = self
            .next
            .load(Ordering::Relaxed)
            .max(token)
            .saturating_add(self.block);
        Some((up_to, journal.submit(JournalOp::ReserveTokens { up_to })))
    }

    /// Records that a reservation up to `up_to` is durable.
    pub(super) fn reserved(&self, up_to: u64) {
        self.reserved_up_to.fetch_max(up_to, Ordering::AcqRel);
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

impl super::Engine {
    /// The engine's token ceiling now: no token it has issued is above it,
    /// and none it issues later, at a moment `d` microseconds on from now
    /// (on the monotonic clock), is above it plus `d`. A store's snapshot
    /// records it, so that a restore can resume above every token the
    /// engine may have issued after the snapshot
    /// (docs/contract.md#c9-tokens).
    pub fn token_ceiling(&self) -> u64 {
        self.tokens.ceiling()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// An allocator started at the clock (the `memory` store's start) issues
    /// at most one token per microsecond: 20 000 tokens take 20 ms or more,
    /// and every token is at most the clock in microseconds when issued.
    #[test]
    fn started_at_the_clock_it_follows_the_clock() {
        let tokens = TokenAllocator::resume(wall_clock_micros(), u64::MAX, 1);
        let started = Instant::now();
        let mut last = 0;
        for i in 0..20_000 {
            let token = tokens.issue();
            assert!(token > last);
            last = token;
            if i % 1_000 == 0 {
                // The wall clock read after the issue; a microsecond of
                // slack for the truncation of both readings.
                assert!(
                    token <= wall_clock_micros() + 1,
                    "{token} ahead of the clock"
                );
            }
        }
        assert!(
            started.elapsed() >= Duration::from_millis(19),
            "{:?}",
            started.elapsed()
        );
        assert!(last < 1 << 53);
    }

    /// A counter far below the clock (the `redb` store's) is not held back:
    /// 200 000 tokens in well under the 200 ms the ceiling would take.
    #[test]
    fn far_below_the_clock_it_issues_at_full_speed() {
        let tokens = TokenAllocator::resume(1, u64::MAX, 1);
        let started = Instant::now();
        for expected in 1..=200_000 {
            assert_eq!(tokens.issue(), expected);
        }
        assert!(
            started.elapsed() < Duration::from_millis(150),
            "{:?}",
            started.elapsed()
        );
    }

    /// A store resumed above the clock (tokens of an older version) goes on
    /// from them at once, never back and never stalled.
    #[test]
    fn resumed_above_the_clock_goes_on_from_there() {
        let old = 1_795_627_369_420_013_901;
        let tokens = TokenAllocator::resume(1, u64::MAX, 1);
        tokens.resume_above(old);
        let started = Instant::now();
        assert_eq!(tokens.issue(), old + 1);
        assert_eq!(tokens.issue(), old + 2);
        assert!(started.elapsed() < Duration::from_millis(50));
    }
}
