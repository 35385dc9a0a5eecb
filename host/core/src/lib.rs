//! Lock semantics for lockd, independent of WebAssembly.
//!
//! This crate is the contract every surface of lockd keeps (the wasm
//! capability, the REST API, the CLI):
//!
//! - [`LockService`] is the one dispatch layer. It validates every argument
//!   against [`Limits`] before a backend sees it.
//! - [`LockBackend`] is the small async trait a store implements. It may fail
//!   with [`LockError::Unavailable`] and waits through notifications, never
//!   by polling, so a networked backend (etcd) fits behind it.
//! - [`Engine`] is the single-node backend: lock state in memory, sharded by
//!   name, with expiry, a FIFO wait queue and fencing tokens. What it must
//!   keep across restarts it writes through a [`Journal`]. With
//!   [`NullJournal`] it is the `memory` store; `lockd-redb` provides the
//!   persistent journal.
//! - [`Engine`]'s constructors and [`LockService::new`] start a task, so
//!   they must be called within a tokio runtime (they panic outside one,
//!   saying so).
//! - [`keepalive`] is the one keep-alive and lost rule of every holder (the
//!   wasm capability's guards and leases, `lockd exec`), timed by a
//!   [`Clock`]; [`random_id`] makes the ids of holders.
//!
//! ```
//! use lockd_core::{Engine, LockOptions, LockService, Limits};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let service = LockService::new(Engine::memory(), Limits::default());
//! let grant = service
//!     .lock("app", "job/1", "worker-a", 10_000, LockOptions::default())
//!     .await
//!     .unwrap();
//! // A second owner is refused while the lease lasts.
//! let busy = service.lock("app", "job/1", "worker-b", 10_000, LockOptions::default()).await;
//! assert!(busy.is_err());
//! service.unlock("app", "job/1", "worker-a", Some(grant.fencing_token)).await.unwrap();
//! # }
//! ```
#![deny(missing_docs)]

mod backend;
mod background;
mod clock;
mod engine;
mod error;
mod events;
mod ids;
mod journal;
pub mod keepalive;
mod limits;
pub mod metrics;
mod service;
mod types;

pub use backend::{BoxFuture, LockBackend};
pub use clock::{deadline, Clock, ManualClock, SystemClock};
pub use engine::{Engine, EngineOptions};
pub use error::{ErrorKind, LockError};
pub use events::{EventHistory, EventPosition, EventSender, PositionedEvent, EVENT_BUFFER};
pub use ids::random_id;
pub use journal::{
    Journal, JournalOp, LeaseRecord, NullJournal, Record, Recovered, Ticket, TicketSender,
};
pub use limits::{Limits, LockDelays};
pub use metrics::{BackendStats, Metrics, NamespaceStats, StoreSpace};
pub use service::{LockService, Quotas, MAX_PERMITS, MAX_VALUE_BYTES};
pub use types::{
    Claim, Durability, EventKind, Grant, Holding, Key, Leader, LeaseGrant, LeaseInfo, ListedLock,
    LockEvent, LockInfo, LockOptions, NameState,
};

/// The crate README's example, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
