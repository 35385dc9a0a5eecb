//! Abandoning one guest task's waits while its instance serves others.
//!
//! An embedder that serves several requests in one instance (a WASIp3 HTTP
//! handler reused across requests) cannot cancel one guest task from the
//! outside: wasmtime has no API for it. When a request is given up (its
//! client went away, or it timed out), the task serving it would wait on,
//! and be granted a lock that no one will ever use, until it finishes by
//! itself. So the embedder ties each request's task to an [`Abandon`]:
//! once abandoned, the task's waiting calls (and those of the subtasks it
//! made) leave their queues, are never granted, and answer `denied`.

use std::future::Future;

use lockd_core::LockError;
use tokio::sync::watch;
use tracing::Instrument as _;
use wasmtime::component::{Accessor, GuestTaskId};
use wasmtime::AsContextMut as _;

use crate::ctx::HasLockCtx;

/// The embedder's side: abandons the task it was registered for
/// ([`crate::LockCtx::abandon_task_on`]). Dropped without
/// [`Abandon::abandon`], it tells that the request ended normally, and the
/// task's calls go on undisturbed.
#[derive(Debug)]
pub struct Abandon(watch::Sender<bool>);

/// The instance's side, registered with its task by
/// [`crate::LockCtx::abandon_task_on`]. It carries the span current when
/// the pair was made (the request's): the task's waiting calls log in it.
#[derive(Debug, Clone)]
pub struct AbandonWatch {
    abandoned: watch::Receiver<bool>,
    span: tracing::Span,
}

impl Abandon {
    /// A new pair: the handle that abandons, and the watch to register.
    pub fn new() -> (Abandon, AbandonWatch) {
        let (tx, rx) = watch::channel(false);
        let watch = AbandonWatch {
            abandoned: rx,
            span: tracing::Span::current(),
        };
        (Abandon(tx), watch)
    }

    /// Abandons the task: its waiting calls leave their queues now, and
    /// the ones it makes later answer `denied` at once.
    pub fn abandon(&self) {
        self.0.send_replace(true);
    }
}

impl AbandonWatch {
    /// Whether the task was abandoned.
    pub(crate) fn is_abandoned(&self) -> bool {
        *self.abandoned.borrow()
    }

    /// Whether the embedder let go without abandoning: the request ended
    /// normally and nothing will abandon the task any more.
    pub(crate) fn is_settled(&self) -> bool {
        !self.is_abandoned() && self.abandoned.has_changed().is_err()
    }

    /// Resolves once the task is abandoned; never if it is not.
    async fn abandoned(mut self) {
        if self
            .abandoned
            .wait_for(|abandoned| *abandoned)
            .await
            .is_err()
        {
            std::future::pending::<()>().await;
        }
    }
}

/// The error an abandoned task's waiting call answers.
fn abandoned_error() -> LockError {
    LockError::Denied(
        "the host gave up the request this task serves (its client went away or it timed out); \
         the wait was cancelled and nothing is held"
            .to_string(),
    )
}

/// Runs `wait` (a call that may wait in a queue) unless the task making it
/// is abandoned: then `wait` is dropped, which leaves the queue and gives
/// back a grant made meanwhile, and the call answers `denied`.
///
/// The task is looked up before the first await, while the calling guest
/// task is current.
pub(super) async fn unless_abandoned<U, R>(
    accessor: &Accessor<U, HasLockCtx>,
    wait: impl Future<Output = Result<R, LockError>>,
) -> Result<R, LockError> {
    let watch = accessor.with(|mut access| {
        let root: GuestTaskId = access.as_context_mut().async_call_stack().ok()?.last()?;
        access.get().ctx.abandon_watch(root)
    });
    let Some(watch) = watch else {
        return wait.await;
    };
    if watch.is_abandoned() {
        return Err(abandoned_error());
    }
    let span = watch.span.clone();
    async {
        tokio::select! {
            result = wait => result,
            () = watch.abandoned() => Err(abandoned_error()),
        }
    }
    .instrument(span)
    .await
}

#[cfg(test)]
mod tests {
    use super::Abandon;

    #[test]
    fn a_watch_tells_abandoned_from_settled() {
        let (abandon, watch) = Abandon::new();
        assert!(!watch.is_abandoned() && !watch.is_settled());
        abandon.abandon();
        assert!(watch.is_abandoned() && !watch.is_settled());
        // Abandoned stays abandoned once the embedder lets go.
        drop(abandon);
        assert!(watch.is_abandoned() && !watch.is_settled());

        let (abandon, watch) = Abandon::new();
        drop(abandon);
        assert!(!watch.is_abandoned() && watch.is_settled());
    }
}
