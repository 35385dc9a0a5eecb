//! `lockd-native-client`: an async Rust client for lockd's REST API
//! (docs/reference.md), for tokio services.
//!
//! - [`Client`]: one namespace of a lockd cluster. [`Client::lock`],
//!   [`Client::read_lock`] and [`Client::semaphore`] answer a [`Guard`] that
//!   renews itself ([`LockBuilder::keep_alive`]), says when it is lost
//!   ([`Guard::lost`]) and releases on drop; [`Client::lease`] a [`Lease`];
//!   [`Client::campaign`] a [`Leadership`]. Plain calls: [`Client::get`],
//!   [`Client::describe`], [`Client::list`], [`Client::unlock`],
//!   [`Client::extend`], [`Client::force_unlock`], [`Client::leader`].
//! - [`Servers`] and [`Transport`]: a list of lockd hosts spoken to over
//!   HTTP(S) with failover (the rule is in [`transport`]'s docs).
//! - [`Error`]: lockd's refusals, one variant per status word, and the
//!   transport's failures.
//!
//! ```no_run
//! use std::time::Duration;
//! use lockd_native_client::{Client, Error, LostReason};
//!
//! # async fn run() -> Result<(), Error> {
//! let client = Client::builder()
//!     .servers(["http://10.0.0.1:7450", "http://10.0.0.2:7450"])
//!     .build()?;
//! match client.lock("deploy").ttl(Duration::from_secs(10)).keep_alive().await {
//!     Ok(guard) => {
//!         let lost = guard.lost();
//!         // ... work, passing guard.fencing_token() to what it writes ...
//!         guard.release().await?;
//!         assert!(matches!(lost.await, LostReason::Released));
//!     }
//!     Err(Error::Busy { holder }) => println!("held by {} (token {})", holder.owner, holder.fencing_token),
//!     Err(e) => return Err(e),
//! }
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod client;
mod election;
mod error;
mod guard;
mod holding;
mod lease;
mod response;
mod servers;
pub mod transport;

pub use client::{Client, ClientBuilder, Grant, DEFAULT_REQUEST_TIMEOUT};
pub use election::{CampaignBuilder, LeaderWatch, Leadership};
pub use error::{Error, Unreached};
pub use guard::{Guard, LockBuilder, DEFAULT_TTL};
pub use holding::LostReason;
pub use lease::{Lease, LeaseBuilder};
pub use lockd_api::{
    DurabilityWord as Durability, FoundReply, GetReply, HeldMode, LeaderReply, ListedLock,
};
pub use servers::Servers;
pub use transport::{
    ByteStream, Request, Response, Retry, StreamResponse, Transport, TransportBuilder,
    DEFAULT_CONNECT_TIMEOUT, NOT_APPLIED_HEADER,
};

/// The crate README's example, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
