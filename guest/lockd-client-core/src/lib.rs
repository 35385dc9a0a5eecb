//! `lockd-client-core`: what the two composable clients do alike, without
//! bindings. `guest/lockd-client` (`lockd:lock@0.1.0` over `wasi:http` 0.2,
//! blocking) and `guest/lockd-client-p3` (`lockd:lock@0.2.0`'s `async func`s
//! over `wasi:http@0.3`) each hold only their bindings, one module that
//! converts between this crate's types and their WIT types, and their I/O:
//! an [`Io`] (and for p3 a [`Runtime`]) that reads the environment, sends
//! one HTTP request, draws random bytes, and keeps time.
//!
//! Here, written once:
//!
//! - the configuration from `LOCKD_URL` (one host or several),
//!   `LOCKD_NAMESPACE` and `LOCKD_AUTH_TOKEN` ([`Config`]);
//! - failover: a call goes to the host that answered last, and on to the
//!   next one when it was not sent, not applied, or is safe to repeat
//!   (`call`'s documentation has the rule);
//! - the REST requests (`lockd-api`'s types) and the reading of their
//!   replies, treated as hostile, into values or the [`Error`] of the same
//!   name as the WIT's;
//! - the calls of `locks`, `rwlocks`, `semaphores` and `elections`
//!   ([`lock`], [`unlock`], [`extend`], [`get`], [`describe`], [`leader`]);
//! - the state behind the resources: [`HeldGrant`] (guards, holds,
//!   leaderships), [`HeldLease`], [`LeaderWatch`], and what they do alike
//!   ([`Held`]: released here, the expiry last seen, give-back on drop);
//! - keep-alive: a client without tasks answers `keep-alive: true` with
//!   [`no_keep_alive`]; one with tasks watches each resource ([`Watch`]: its
//!   `lost` futures, renewals, give-back on drop).
//!
//! Every call is `async`: the p3 client awaits it on its task, and the p2
//! client, whose [`Io`] blocks and completes each request before it
//! returns, runs it to its end in one poll.
//!
//! This is a plain library: `guest/build-all.sh` makes no component of it.

mod call;
mod config;
mod convert_macro;
mod elections;
mod grants;
mod held;
mod leases;
mod locks;
mod reply;
pub mod transport;
mod types;
mod watch;
mod wire;

use std::future::Future;

pub use lockd_api::{DurabilityWord, HeldMode, LockClaim, Route};

pub use config::{Config, Server};
pub use elections::{leader, LeaderWatch, LEADER_POLL_MS};
pub use grants::HeldGrant;
pub use held::Held;
pub use leases::HeldLease;
pub use locks::{describe, extend, get, lock, unlock};
pub use types::{
    Error, Grant, GuardOptions, Holder, LeaderInfo, LeaseOptions, LockInfo, LockOptions,
    LostReason, NameState,
};
pub use watch::{Runtime, Watch, POLL_MS};

/// What a client does for the core: the I/O of its WASI release.
pub trait Io {
    /// Whether this client renews grants and leases in the background
    /// (keep-alive, through a [`Watch`]). If not, `keep-alive: true` answers
    /// [`no_keep_alive`] and takes nothing.
    const KEEP_ALIVE: bool;

    /// The configuration from the component's environment, read once per
    /// instance ([`Config::from_env`]), or the `unavailable` message every
    /// call answers.
    fn config(&self) -> &Result<Config, String>;

    /// `POST` `body` to `server` + `route`'s path ([`Server::path`]) with
    /// [`Config::headers`]: the reply's HTTP status, body, and
    /// [`transport::NOT_APPLIED_HEADER`], or why there is none and whether
    /// the server may have taken the request ([`transport::NoReply`]).
    ///
    /// `wait_ms` is how long the server may legitimately take before it
    /// answers (a waiting `lock`).
    fn post(
        &self,
        config: &Config,
        server: &Server,
        route: Route,
        body: Vec<u8>,
        wait_ms: u32,
    ) -> impl Future<Output = Result<transport::HttpReply, transport::NoReply>>;

    /// 16 random bytes, for an owner or candidate nobody can guess.
    fn random_bytes(&self) -> Vec<u8>;
}

/// What `keep-alive: true` answers on a client without tasks: a component
/// on a WASI 0.2 host has no task that could renew in the background
/// (docs/guests.md#other-hosts).
pub fn no_keep_alive() -> Error {
    Error::Denied(
        "keep-alive needs lockd's own host; composed with lockd-client, refresh or extend \
         yourself before the TTL runs out"
            .to_owned(),
    )
}
