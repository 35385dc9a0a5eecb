//! The extension point: what other crates add to a server. An
//! [`Extension`] is handed to [`bind`](super::bind) in
//! [`ServeOptions`](super::ServeOptions) and prepared once the store is
//! open; it answers with routes on the server's listener ([`Mount`]) and
//! listeners of its own beside it ([`SideListener`]).
//!
//! lockd's own routes never depend on an extension: the server serves the
//! REST API, `/metrics`, `/healthz`, `/openapi.json` and the web page with
//! none at all.

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response};
use lockd_core::LockService;

use crate::api::Api;
use crate::body::Body;
use crate::config::LockdConfig;
use crate::store::StoreSpec;
use crate::tls::Handshaken;

/// A future an extension hands the server.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Something another crate adds to a server.
pub trait Extension: Send + fmt::Debug {
    /// Sets up what it serves, once the store is open and lockd's API
    /// exists, before any socket is bound. An error stops the server from
    /// starting, and is what `lockd serve` reports.
    fn prepare(self: Box<Self>, server: &Context<'_>) -> anyhow::Result<Extended>;
}

/// What an extension sees of the server it extends.
#[derive(Clone, Copy, Debug)]
pub struct Context<'a> {
    /// The lock service lockd's own routes call.
    pub service: &'a LockService,
    /// lockd.toml (its `[dapr]`, `[limits]` and `[components]` are read by
    /// the extensions they concern).
    pub config: &'a LockdConfig,
    /// The store the locks live in (`--store`, else lockd.toml's): what an
    /// extension keeps beside the locks goes where it says.
    pub store: &'a StoreSpec,
    /// lockd's own API: its token checks ([`Api::authorize`],
    /// [`Api::check_known_token`]) guard the other surfaces too.
    pub api: &'a Arc<Api>,
}

/// What an extension serves.
#[derive(Debug, Default)]
pub struct Extended {
    /// Routes on the server's listener, each with where it stands among
    /// lockd's own.
    pub mounts: Vec<(Precedence, Arc<dyn Mount>)>,
    /// Listeners of its own, beside the server's.
    pub side_listeners: Vec<Arc<dyn SideListener>>,
}

/// Where a mount's routes stand among lockd's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precedence {
    /// Asked before lockd's own routes: a path it claims is its own, even
    /// under `/v1/` (Kahuna's `/v1/locks/try-lock`). It must claim none of
    /// lockd's routes.
    BeforeOwn,
    /// Asked after lockd's own routes and the web page: it gets the paths
    /// lockd does not serve, and `/` if it claims it (otherwise `/` leads to
    /// the web page).
    AfterOwn,
}

/// Routes another crate serves on the server's listener: "answer this
/// request if it is yours".
pub trait Mount: Send + Sync + fmt::Debug {
    /// Whether a request for `path` is this mount's to answer.
    fn claims(&self, path: &str) -> bool;

    /// Answers a request whose path it [claims](Mount::claims). It runs
    /// inside the request's span, whose `route`, `component`, `namespace`
    /// and `outcome` fields it fills in.
    fn handle(&self, req: Request<Incoming>) -> BoxFuture<'_, Response<Body>>;

    /// What the startup banner says it serves, one line per route, each
    /// printed after the listener's URL (`/jobs/... -> jobs
    /// (wasi:http@0.2)`).
    fn banner(&self) -> Vec<String> {
        Vec::new()
    }
}

/// A listener an extension serves beside the server's own (Dapr's gRPC
/// API): bound just after the server's listener, and while the server runs
/// its connections are accepted as the server's are, with the same TLS
/// (certificate, reloads, handshake timeout).
pub trait SideListener: Send + Sync + fmt::Debug {
    /// Where to listen.
    fn addr(&self) -> SocketAddr;

    /// What asked for it, for the error when it cannot be bound
    /// (`--dapr-grpc-listen`).
    fn what(&self) -> &str;

    /// The startup banner's line for it, listening at `at` (over TLS if
    /// `tls`).
    fn banner(&self, at: SocketAddr, tls: bool) -> String;

    /// Serves one accepted connection from `peer` until it closes.
    fn serve_connection(&self, connection: Accepted, peer: SocketAddr) -> BoxFuture<'static, ()>;
}

/// A connection a listener accepted.
#[derive(Debug)]
pub enum Accepted {
    /// No TLS on this listener.
    Plain(tokio::net::TcpStream),
    /// Past its TLS handshake (boxed: rustls's state is large).
    Tls(Box<Handshaken>),
}
