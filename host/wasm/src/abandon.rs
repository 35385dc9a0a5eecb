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

use tokio::sync::watch;

/// The embedder's side: abandons the task it was registered for
/// ([`LockCtx::abandon_task_on`](crate::LockCtx::abandon_task_on)). Dropped without
/// [`Abandon::abandon`], it tells that the request ended normally, and the
/// task's calls go on undisturbed.
#[derive(Debug)]
pub struct Abandon(watch::Sender<bool>);

/// The instance's side, registered with its task by
/// [`LockCtx::abandon_task_on`](crate::LockCtx::abandon_task_on). It carries the span current when
/// the pair was made (the request's): the task's waiting calls log in it.
#[derive(Debug, Clone)]
pub struct AbandonWatch {
    abandoned: watch::Receiver<bool>,
    pub(crate) span: tracing::Span,
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
    pub(crate) async fn abandoned(mut self) {
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
