//! Time, injected. Lease deadlines are wall-clock milliseconds (they must
//! mean the same thing after a restart), and tests drive a [`ManualClock`]
//! instead of sleeping.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

/// A source of wall-clock time that can also sleep.
pub trait Clock: Send + Sync + 'static {
    /// Now, in Unix epoch milliseconds.
    fn now_ms(&self) -> u64;
    /// Completes at or after `deadline_ms` (Unix epoch milliseconds).
    fn sleep_until(&self, deadline_ms: u64) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// The system's wall clock and tokio timers.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

/// Longest single timer. Callers re-check the time after waking, so a cap
/// costs nothing and keeps far-away deadlines from overflowing tokio's
/// `Instant` arithmetic.
const MAX_SLEEP: Duration = Duration::from_secs(3600);

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }

    fn sleep_until(&self, deadline_ms: u64) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let wait = Duration::from_millis(deadline_ms.saturating_sub(self.now_ms())).min(MAX_SLEEP);
        Box::pin(tokio::time::sleep(wait))
    }
}

/// A clock that moves only when told to. Sleepers wake as soon as
/// [`ManualClock::advance`] passes their deadline.
#[derive(Clone, Debug)]
pub struct ManualClock {
    now: Arc<watch::Sender<u64>>,
}

impl ManualClock {
    /// A clock reading `start_ms`.
    pub fn new(start_ms: u64) -> Self {
        ManualClock {
            now: Arc::new(watch::Sender::new(start_ms)),
        }
    }

    /// Moves time forward by `ms` and wakes every sleeper whose deadline passed.
    pub fn advance(&self, ms: u64) {
        self.now.send_modify(|now| *now = now.saturating_add(ms));
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
}
