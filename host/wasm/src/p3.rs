//! `lockd:lock@0.2.0`: the lock capability in WASI 0.3's own terms
//! (`wit/p3/lock.wit`). Waiting operations are `async func`s, so a task of
//! a component that awaits a lock parks alone while the instance's other
//! tasks run on; the lost signal is a `future<lost-reason>`; there is no
//! `wasi:io` import.
//!
//! The same [`LockCtx`](crate::LockCtx) and [`LockView`]
//! serve both versions, on the same [`LockService`](lockd_core::LockService):
//! link this beside [`crate::add_to_linker`] and a host runs 0.2 guests and
//! 0.3 guests side by side, over the same locks.
//!
//! The engine needs the component model's concurrency
//! (`Config::wasm_component_model_async(true)`; concurrency support is on by
//! default) and the guest's exports are called with `call_concurrent` inside
//! `Store::run_concurrent`.
//!
//! Interfaces served: `types`, `locks`, `guards`, `leases`, `rwlocks`,
//! `semaphores`, `holds` and `elections`.

mod abandon;
mod convert;
mod elections;
mod grants;
mod guards;
mod holds;
mod leases;
mod locks;
mod rwlocks;
mod wit;

use wasmtime::component::Linker;

pub use crate::abandon::{Abandon, AbandonWatch};

use crate::ctx::{HasLockCtx, LockView};

/// Adds the interfaces of the `lockd:lock@0.2.0` world `imports` to
/// `linker`: `types`, `locks`, `guards`, `leases`, `rwlocks`,
/// `semaphores`, `holds` and `elections`.
///
/// Fails if the engine was configured without concurrency support
/// (`Config::concurrency_support(false)`), which `async func` imports need.
/// Keep-alive and lost futures run on the tokio runtime the instance is
/// called from.
pub fn add_to_linker<T: LockView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    wit::types::add_to_linker::<T, HasLockCtx>(linker, T::lock_ctx)?;
    wit::locks::add_to_linker::<T, HasLockCtx>(linker, T::lock_ctx)?;
    wit::guards::add_to_linker::<T, HasLockCtx>(linker, T::lock_ctx)?;
    wit::leases::add_to_linker::<T, HasLockCtx>(linker, T::lock_ctx)?;
    wit::rwlocks::add_to_linker::<T, HasLockCtx>(linker, T::lock_ctx)?;
    wit::semaphores::add_to_linker::<T, HasLockCtx>(linker, T::lock_ctx)?;
    wit::holds::add_to_linker::<T, HasLockCtx>(linker, T::lock_ctx)?;
    wit::elections::add_to_linker::<T, HasLockCtx>(linker, T::lock_ctx)
}
