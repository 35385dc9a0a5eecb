//! Time, injected.
//!
//! A running host measures TTLs on a **monotonic** clock, so a step of
//! the wall clock (NTP, an operator, a VM resume) moves no deadline. The
//! wall clock is read only at the edges: to write an expiry that must mean
//! the same thing after a restart, and to answer `expires_at_ms` to callers
//! (docs/contract.md#c8-expiry). [`Clock::now_ms`] is the monotonic time
//! every deadline is compared with; [`Clock::to_wall_ms`] and
//! [`Clock::monotonic_of_wall_ms`] convert at those edges. Tests drive a
//! [`ManualClock`] instead of sleeping, and step its wall clock alone with
//! [`ManualClock::step_wall`].

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use crate::error::LockError;

/// A source of time that can also sleep.
pub trait Clock: Send + Sync + 'static {
    /// Now, in the clock's monotonic milliseconds: never steps, and reads as
    /// Unix epoch milliseconds near the time the process started.
    fn now_ms(&self) -> u64;
    /// Completes at or after `deadline_ms` (in [`Clock::now_ms`] time).
    fn sleep_until(&self, deadline_ms: u64) -> Pin<Box<dyn Future<Output = ()> + Send>>;
    /// The wall-clock time (Unix epoch milliseconds) of the monotonic time
    /// `ms`: what callers are told and what survives a restart.
    fn to_wall_ms(&self, ms: u64) -> u64 {
        ms
    }
    /// The monotonic time of the wall-clock time `wall_ms` (a recovered
    /// expiry).
    fn monotonic_of_wall_ms(&self, wall_ms: u64) -> u64 {
        wall_ms
    }
}

/// The deadline `ttl_ms` after `now_ms`, on the same clock. A TTL that
/// overflows it is refused, nothing changed: a deadline that saturated
/// instead would hold a lock forever.
pub fn deadline(now_ms: u64, ttl_ms: u64) -> Result<u64, LockError> {
    now_ms.checked_add(ttl_ms).ok_or_else(|| {
        LockError::InvalidArgument(format!("a ttl of {ttl_ms} ms overflows the clock"))
    })
}

/// Moves `ms` by `offset`, saturating.
fn shift(ms: u64, offset: i64) -> u64 {
    if offset >= 0 {
        ms.saturating_add(offset as u64)
    } else {
        ms.saturating_sub(offset.unsigned_abs())
    }
}

/// Microseconds since the Unix epoch on the wall clock (0 before 1970).
/// The unit of the token ceiling and of the `memory` store's first token:
/// 2^53 µs after 1970 is the year 2255, so a token that follows this clock
/// stays exact in a double until then (docs/contract.md#c9-tokens).
pub(crate) fn wall_clock_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn wall_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The system's clocks: monotonic time anchored to the wall clock once, at
/// the first read in this process; tokio timers for sleeping.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

/// Wall time and monotonic instant of the first read, shared by every
/// `SystemClock` of the process (so all stores agree).
fn anchor() -> &'static (u64, Instant) {
    static ANCHOR: OnceLock<(u64, Instant)> = OnceLock::new();
    ANCHOR.get_or_init(|| (wall_now_ms(), Instant::now()))
}

/// Longest single timer. Callers re-check the time after waking, so a cap
/// costs nothing and keeps far-away deadlines from overflowing tokio's
/// `Instant` arithmetic.
const MAX_SLEEP: Duration = Duration::from_secs(3600);

/// Wall-clock moves smaller than this are read as jitter and drift, not a
/// step: the offset stays put, so two conversions a moment apart agree to
/// the millisecond (a lease and its locks share one expiry).
const STEP_THRESHOLD_MS: i64 = 1_000;

/// Wall time minus monotonic time, as last measured (see
/// [`SystemClock::now_ms`]).
static OFFSET_MS: AtomicI64 = AtomicI64::new(0);

/// The monotonic time of the last measurement of [`OFFSET_MS`].
static OFFSET_CHECKED_AT_MS: AtomicU64 = AtomicU64::new(0);

impl SystemClock {
    /// Measures wall time minus monotonic time at the monotonic time `now`:
    /// zero at the anchor, then the sum of the wall-clock steps since,
    /// updated when it moves by more than [`STEP_THRESHOLD_MS`].
    fn check_wall_offset(now: u64) {
        OFFSET_CHECKED_AT_MS.store(now, Ordering::Relaxed);
        let measured = wall_now_ms() as i64 - now as i64;
        let current = OFFSET_MS.load(Ordering::Relaxed);
        if (measured - current).abs() > STEP_THRESHOLD_MS {
            OFFSET_MS.store(measured, Ordering::Relaxed);
        }
    }

    /// The wall offset, measured in the current millisecond.
    fn wall_offset_ms(&self) -> i64 {
        // Reading the time measures the offset if it was not this millisecond.
        self.now_ms();
        OFFSET_MS.load(Ordering::Relaxed)
    }
}

impl Clock for SystemClock {
    /// Also measures the wall offset, once per millisecond at most: a lock
    /// and unlock pair reads the time twice and converts an expiry to wall
    /// time once, and each clock read costs about a tenth of the pair
    /// (docs/benchmarks.md, B1), so conversions reuse the offset measured
    /// in the same millisecond, and a wall-clock step is seen within one.
    fn now_ms(&self) -> u64 {
        let (wall, at) = anchor();
        let now = wall.saturating_add(at.elapsed().as_millis() as u64);
        if OFFSET_CHECKED_AT_MS.load(Ordering::Relaxed) != now {
            Self::check_wall_offset(now);
        }
        now
    }

    fn sleep_until(&self, deadline_ms: u64) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let wait = Duration::from_millis(deadline_ms.saturating_sub(self.now_ms())).min(MAX_SLEEP);
        Box::pin(tokio::time::sleep(wait))
    }

    fn to_wall_ms(&self, ms: u64) -> u64 {
        shift(ms, self.wall_offset_ms())
    }

    fn monotonic_of_wall_ms(&self, wall_ms: u64) -> u64 {
        shift(wall_ms, -self.wall_offset_ms())
    }
}

/// A clock that moves only when told to. Sleepers wake as soon as
/// [`ManualClock::advance`] passes their deadline. Its wall clock can be
/// stepped on its own ([`ManualClock::step_wall`]).
#[derive(Clone, Debug)]
pub struct ManualClock {
    now: Arc<watch::Sender<u64>>,
    wall_offset: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock reading `start_ms`.
    pub fn new(start_ms: u64) -> Self {
        ManualClock {
            now: Arc::new(watch::Sender::new(start_ms)),
            wall_offset: Arc::new(AtomicI64::new(0)),
        }
    }

    /// Moves time forward by `ms` and wakes every sleeper whose deadline passed.
    pub fn advance(&self, ms: u64) {
        self.now.send_modify(|now| *now = now.saturating_add(ms));
    }

    /// Steps the wall clock by `delta_ms` (forward or back), as NTP or an
    /// operator would, while monotonic time stands still.
    pub fn step_wall(&self, delta_ms: i64) {
        self.wall_offset.fetch_add(delta_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        *self.now.borrow()
    }

    fn sleep_until(&self, deadline_ms: u64) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let mut rx = self.now.subscribe();
        Box::pin(async move {
            // The sender lives as long as any clock handle; if it is gone,
            // time can never reach the deadline, so sleep forever.
            if rx.wait_for(|now| *now >= deadline_ms).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }

    fn to_wall_ms(&self, ms: u64) -> u64 {
        shift(ms, self.wall_offset.load(Ordering::SeqCst))
    }

    fn monotonic_of_wall_ms(&self, wall_ms: u64) -> u64 {
        shift(wall_ms, -self.wall_offset.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_is_monotonic_and_reads_as_wall_time() {
        let clock = SystemClock;
        let a = clock.now_ms();
        let b = clock.now_ms();
        assert!(b >= a);
        // Anchored to the wall clock: close to it unless it stepped during
        // this test, and the conversions undo each other.
        assert!(wall_now_ms().abs_diff(a) < 60_000);
        // The offset measured once a millisecond agrees with the clocks:
        // no step seen where there was none.
        let wall = clock.to_wall_ms(clock.now_ms());
        assert!(wall.abs_diff(wall_now_ms()) <= 50, "{wall}");
        let t = a + 12_345;
        assert!(clock.monotonic_of_wall_ms(clock.to_wall_ms(t)).abs_diff(t) <= 1);
    }

    #[test]
    fn a_wall_step_moves_only_the_wall_view() {
        let clock = ManualClock::new(1_000_000);
        clock.step_wall(3_600_000);
        assert_eq!(clock.now_ms(), 1_000_000);
        assert_eq!(clock.to_wall_ms(1_000_500), 4_600_500);
        assert_eq!(clock.monotonic_of_wall_ms(4_600_500), 1_000_500);
        clock.step_wall(-7_200_000);
        assert_eq!(clock.to_wall_ms(1_000_000), 0, "saturates below the epoch");
    }

    #[test]
    fn a_deadline_that_overflows_is_refused() {
        assert_eq!(deadline(10, 5), Ok(15));
        assert!(matches!(
            deadline(u64::MAX - 1, 2),
            Err(LockError::InvalidArgument(_))
        ));
    }
}
