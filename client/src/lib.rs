//! `lockd-native-client`: an async Rust client for lockd's REST API
//! (docs/reference.md), for tokio services.
//!
//! - [`Servers`] and [`Transport`]: a list of lockd hosts spoken to over
//!   HTTP(S) with failover (the rule is in [`transport`]'s docs).
//! - [`Error`]: lockd's refusals, one variant per status word, and the
//!   transport's failures.
#![warn(missing_docs)]

mod error;
mod response;
mod servers;
pub mod transport;

pub use error::{Error, Unreached};
pub use servers::Servers;
pub use transport::{
    ByteStream, Request, Response, Retry, StreamResponse, Transport, TransportBuilder,
    DEFAULT_CONNECT_TIMEOUT, NOT_APPLIED_HEADER,
};
