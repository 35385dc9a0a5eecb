//! A service that shuts down ([`LockService::shutdown`](super::LockService::shutdown)):
//! every call waiting in a queue is answered `unavailable` at once, and no
//! call waits after, so that its client can tell "not granted, ask
//! elsewhere" from a connection lost with the process.
//!
//! Each call that may wait races its store call against the shutdown
//! signal. When the signal wins, the store call is dropped, as when a
//! client hangs up: it leaves the queue, and a grant handed to it
//! meanwhile is released (never acknowledged, so never used).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

use crate::error::LockError;

/// Whether the service shuts down, and its calls that wait meanwhile.
#[derive(Debug)]
pub(super) struct Closing {
    /// `Some(reason)` once shutdown began.
    reason: watch::Sender<Option<Arc<str>>>,
    /// Calls that may wait, in flight now.
    waiting: AtomicU64,
    /// Waiting calls answered `unavailable` because the service shut down.
    answered: AtomicU64,
}

impl Default for Closing {
    fn default() -> Self {
        Closing {
            reason: watch::Sender::new(None),
            waiting: AtomicU64::new(0),
            answered: AtomicU64::new(0),
        }
    }
}

/// Counts a waiting call for as long as it runs.
struct Counted<'a>(&'a AtomicU64);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Closing {
    /// Begins the shutdown with `reason` (the first call's reason stands);
    /// answers how many calls were waiting then, each of which is now
    /// answered `unavailable` unless its own answer came first.
    pub(super) fn begin(&self, reason: &str) -> u64 {
        // Read first: once told, the waiters leave at once.
        let waiting = self.waiting.load(Ordering::Relaxed);
        let first = self.reason.send_if_modified(|now| {
            if now.is_some() {
                return false;
            }
            *now = Some(Arc::from(reason));
            true
        });
        if first {
            waiting
        } else {
            0
        }
    }

    /// The reason, once the shutdown began.
    pub(super) fn reason(&self) -> Option<Arc<str>> {
        self.reason.borrow().clone()
    }

    /// Waiting calls answered `unavailable` by the shutdown so far.
    pub(super) fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }

    /// Completes once the shutdown begins (at once if it has), or once the
    /// service is gone.
    pub(super) fn closed(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.reason.subscribe();
        async move {
            let _ = rx.wait_for(Option::is_some).await;
        }
    }

    /// `call`'s answer, unless the shutdown begins first: then
    /// `unavailable` with its reason (and `call` is dropped). After the
    /// shutdown began, `call` is not made at all.
    pub(super) async fn unless_closing<T>(
        &self,
        call: impl Future<Output = Result<T, LockError>>,
    ) -> Result<T, LockError> {
        let mut rx = self.reason.subscribe();
        if let Some(reason) = rx.borrow_and_update().clone() {
            return Err(LockError::Unavailable(reason.to_string()));
        }
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let _counted = Counted(&self.waiting);
        tokio::select! {
            // An answer ready at the same moment wins: it may be a grant.
            biased;
            result = call => result,
            Ok(reason) = rx.wait_for(Option::is_some) => {
                let reason = reason.as_deref().unwrap_or_default().to_string();
                self.answered.fetch_add(1, Ordering::Relaxed);
                Err(LockError::Unavailable(reason))
            }
        }
    }
}
