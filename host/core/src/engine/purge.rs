//! The purge task: removes expired holders and leases at their deadlines,
//! so that an expired lock passes to its first waiter on time even when
//! nobody calls. (Every operation also treats an expired holder as absent,
//! so the task decides when, never whether.)
//!
//! The task sleeps until the earliest deadline the last sweep left, or
//! until a sooner one appears ([`PurgeSignal::note_deadline`]). It holds
//! the engine only while sweeping: dropping the engine's last handle ends
//! it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use tokio::runtime::Handle;
use tokio::sync::Notify;

use crate::background;
use crate::clock::Clock;

/// What the purge task sweeps: the engine.
pub(super) trait Sweep: Send + Sync + 'static {
    /// The clock deadlines are read on.
    fn clock(&self) -> &dyn Clock;
    /// Removes every holder and lease expired at `now_ms` (handing freed
    /// locks to their waiters); answers the earliest deadline left.
    fn sweep(&self, now_ms: u64) -> u64;
}

/// Wakes the purge task early when a deadline sooner than the one it sleeps
/// towards appears, and when the engine is dropped.
pub(super) struct PurgeSignal {
    notify: Notify,
    /// The deadline the purge task currently sleeps towards.
    next_wake_ms: AtomicU64,
}

impl PurgeSignal {
    pub(super) fn new() -> Arc<PurgeSignal> {
        Arc::new(PurgeSignal {
            notify: Notify::new(),
            next_wake_ms: AtomicU64::new(u64::MAX),
        })
    }

    /// A holder or lease now expires at `deadline_ms`: wakes the task if it
    /// sleeps towards a later one.
    pub(super) fn note_deadline(&self, deadline_ms: u64) {
        if deadline_ms < self.next_wake_ms.load(Ordering::Acquire) {
            self.next_wake_ms.store(deadline_ms, Ordering::Release);
            self.notify.notify_one();
        }
    }

    /// The engine is gone: lets the task notice and end.
    pub(super) fn engine_dropped(&self) {
        self.notify.notify_one();
    }
}

/// The runtime the purge task of an engine will run on.
///
/// # Panics
/// Outside a tokio runtime, saying so (the crate's rule, see the
/// `background` module).
pub(super) fn runtime() -> Handle {
    background::runtime("lockd_core::Engine", "its purge task")
}

/// Starts the purge task of `engine` on `runtime`.
pub(super) fn start<E: Sweep>(runtime: &Handle, engine: &Arc<E>, signal: Arc<PurgeSignal>) {
    drop(runtime.spawn(purge_loop(Arc::downgrade(engine), signal)));
}

/// Sleeps until the earliest deadline (or an earlier one appears), then
/// sweeps.
async fn purge_loop<E: Sweep>(engine: Weak<E>, signal: Arc<PurgeSignal>) {
    loop {
        let sleep = {
            let Some(engine) = engine.upgrade() else {
                return;
            };
            // While we sweep, any new deadline may be earlier than the one we
            // will compute: have every one of them leave a wake-up permit.
            signal.next_wake_ms.store(u64::MAX, Ordering::Release);
            let next = engine.sweep(engine.clock().now_ms());
            signal.next_wake_ms.store(next, Ordering::Release);
            engine.clock().sleep_until(next)
        };
        tokio::select! {
            () = sleep => {}
            () = signal.notify.notified() => {}
        }
    }
}
