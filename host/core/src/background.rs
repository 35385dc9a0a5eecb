//! The one rule for constructors that start background work: the
//! [`Engine`](crate::Engine) constructors start its purge task, and
//! [`LockService::new`](crate::LockService::new) the task that follows the
//! store's events.
//!
//! Such a constructor must be called within a tokio runtime, and panics
//! outside one, naming itself, before it does anything else. Going on
//! without the task would break promises quietly: expired locks would pass
//! to their waiters only when someone calls, force-released holders would
//! never hear of it, hold times would go unmeasured. Every embedding runs
//! in a runtime anyway (the stores' I/O needs one), so the panic marks a
//! host bug, found the first time the host runs.

use tokio::runtime::Handle;

/// The current tokio runtime, for `what` to start `task` on.
///
/// # Panics
/// Outside a tokio runtime, with a message naming `what` and `task`.
pub(crate) fn runtime(what: &str, task: &str) -> Handle {
    match Handle::try_current() {
        Ok(runtime) => runtime,
        Err(_) => panic!("{what} must be created within a tokio runtime, where it starts {task}"),
    }
}

#[cfg(test)]
mod tests {
    use crate::{Engine, Limits, LockService};

    #[test]
    #[should_panic(
        expected = "lockd_core::Engine must be created within a tokio runtime, where it starts its purge task"
    )]
    fn an_engine_outside_a_runtime_panics_saying_why() {
        drop(Engine::memory());
    }

    #[test]
    #[should_panic(
        expected = "lockd_core::LockService must be created within a tokio runtime, where it starts the task that follows its store's events"
    )]
    fn a_service_outside_a_runtime_panics_saying_why() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let engine = runtime.block_on(async { Engine::memory() });
        drop(runtime);
        drop(LockService::new(engine, Limits::default()));
    }
}
