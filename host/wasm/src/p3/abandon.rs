//! `lockd:lock@0.2.0`'s waiting calls, given up with their task
//! ([`crate::abandon`]).

use std::future::Future;

use lockd_core::LockError;
use tracing::Instrument as _;
use wasmtime::component::{Accessor, GuestTaskId};
use wasmtime::AsContextMut as _;

use crate::ctx::HasLockCtx;

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
