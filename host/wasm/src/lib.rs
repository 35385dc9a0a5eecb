//! The lockd lock capability for wasmtime.
//!
//! Any wasmtime embedder gives its components the `lockd:lock` interfaces
//! (`locks`, `guards`, `leases`, `rwlocks`, `semaphores`, `holds` and
//! `elections`) with one call to [`add_to_linker`]. The store's data
//! holds a [`LockCtx`] — the lock service plus the namespace this instance may
//! use — and implements [`LockView`] to hand it out.
//!
//! That is `lockd:lock@0.1.0` (`wit/lock.wit`). WASI 0.3 components may
//! import `lockd:lock@0.2.0` (`wit/p3/lock.wit`: `async func`s, the lost
//! signal as a `future`), which [`p3::add_to_linker`] adds beside it, on the
//! same [`LockCtx`].
//!
//! ```no_run
//! use lockd_core::{Engine as LockEngine, Limits, LockService};
//! use lockd_wasm::{LockCtx, LockCtxView, LockView};
//! use wasmtime::component::{Component, Linker, ResourceTable};
//! use wasmtime::{Config, Engine, Store};
//!
//! struct Plugin {
//!     locks: LockCtx,
//!     table: ResourceTable,
//! }
//!
//! impl LockView for Plugin {
//!     fn lock_ctx(&mut self) -> LockCtxView<'_> {
//!         LockCtxView { ctx: &mut self.locks, table: &mut self.table }
//!     }
//! }
//!
//! # async fn run() -> wasmtime::Result<()> {
//! let engine = Engine::new(&Config::new())?;
//! let mut linker = Linker::<Plugin>::new(&engine);
//! lockd_wasm::add_to_linker(&mut linker)?;
//!
//! let service = LockService::new(LockEngine::memory(), Limits::default());
//! let state = Plugin {
//!     // The host, never the guest, picks the namespace.
//!     locks: LockCtx::new(service, "my-plugin"),
//!     table: ResourceTable::new(),
//! };
//! let mut store = Store::new(&engine, state);
//! let component = Component::from_file(&engine, "plugin.wasm")?;
//! let instance = linker.instantiate_async(&mut store, &component).await?;
//! # drop(instance); Ok(()) }
//! ```
//!
//! Guarantees to the embedder:
//! - Guest input is validated by [`LockService`](lockd_core::LockService)
//!   before it reaches the store; a bad argument is an `invalid-argument`
//!   error, never a trap or a panic.
//! - Host functions are async: a `lock` that waits parks only its own guest.
//! - Guards, holds, leaderships and leases still held when the instance
//!   ends (normally or by a trap) are released, resigned and revoked: each gives back what it holds when the
//!   store's resource table drops it.
#![deny(missing_docs)]

mod abandon;
mod convert;
mod convert_macro;
mod ctx;
mod elections;
mod grants;
mod guards;
mod holds;
mod leases;
mod liveness;
mod locks;
pub mod p3;
mod resources;
mod rwlocks;
mod watch;
mod wit;

pub use ctx::{add_to_linker, LockCtx, LockCtxView, LockView, DEFAULT_MAX_GUARDS};
pub use resources::{Guard, Hold, Leadership, Lease};
pub use watch::LeaderWatch;
