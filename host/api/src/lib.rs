//! lockd's REST API (docs/reference.md) as types, for everything that speaks it:
//! the server (`lockd serve`), the CLI, the bench's REST client and the
//! lockd-client component. `docs/openapi.json` describes the same bodies.
//!
//! - [`Route`]: every route's path and method.
//! - Request bodies ([`LockRequest`], ...) and query strings ([`ListQuery`],
//!   [`EventQuery`]); requests refuse unknown fields.
//! - Reply bodies ([`GrantReply`], ...) with their [`Status`] words, and the
//!   events of `GET /v1/events` ([`Event`]).
//! - [`decode`] and [`Reply`]: how a client reads a reply. One that does not
//!   parse is a [`DecodeError`] naming the route and the field, never a
//!   default.
//!
//! The default build needs serde only, so it builds for `wasm32-wasip2`;
//! the `core` feature adds the server's conversions from lockd-core's types.
//!
//! A client's lock, as the lockd-client component makes it:
//!
//! ```
//! use lockd_api::{GrantReply, LockRequest, Refusal, Reply, Route, Status};
//!
//! let request = LockRequest {
//!     namespace: None,
//!     name: "deploy".to_string(),
//!     owner: Some("worker-1".to_string()),
//!     ttl_ms: Some(30_000),
//!     wait_ms: None,
//!     durability: None,
//!     lease_id: None,
//!     mode: None,
//!     permits: None,
//! };
//! let body = serde_json::to_vec(&request).unwrap();
//! assert_eq!(body, br#"{"name":"deploy","owner":"worker-1","ttl_ms":30000}"#);
//! // ... POST `body` to Route::Lock.path() and read the reply:
//! let reply = Reply::read(
//!     Route::Lock,
//!     br#"{"expires_at_ms":1700000030000,"fencing_token":7,"status":"acquired"}"#,
//! )
//! .unwrap();
//! assert_eq!(reply.refusal().unwrap(), None::<Refusal>);
//! assert_eq!(reply.status(), Status::Acquired);
//! let grant: GrantReply = reply.decode().unwrap();
//! assert_eq!(grant.fencing_token, 7);
//! ```
#![deny(missing_docs)]

#[cfg(feature = "core")]
mod core;
mod decode;
mod query;
mod reply;
mod request;
mod route;
mod words;

pub use decode::{decode, DecodeError, Problem, Refusal, Reply};
pub use query::{EventQuery, ListQuery};
pub use reply::{
    BusyReply, ErrorReply, Event, FoundReply, FreeReply, GapEvent, GetReply, GrantReply, Holding,
    LaggedEvent, LeaderReply, LeaseFoundReply, LeaseGrantedReply, LeaseRefreshedReply,
    LeaseRevokedReply, ListReply, ListedLock, NamespaceSummary, NamespacesReply, ReadyReply,
    ReleasedReply, StatusReply,
};
pub use request::{
    CampaignRequest, ExtendRequest, ForceUnlockRequest, GetRequest, LeaderRequest,
    LeaseGrantRequest, LeaseRequest, LockClaim, LockHolder, LockRequest, ProclaimRequest,
    ResignRequest, UnlockRequest,
};
pub use route::{Method, Route};
pub use words::{DurabilityWord, EventWord, HeldMode, LockMode, Status};

/// The namespace of requests that name none.
pub const DEFAULT_NAMESPACE: &str = "default";

/// The largest request body the server reads, in bytes; it answers a larger
/// one with 413 `invalid_argument`.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// The crate README's example, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
