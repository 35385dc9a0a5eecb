//! [`bind`] and [`serve`]: one HTTP listener for lockd's own routes (the
//! REST API, `/metrics`, `/healthz`, `/livez` and `/readyz` ([`ready`]),
//! `/openapi.json`, the web page) and the routes other crates mount on it
//! ([`Mount`]), plus the listeners they serve beside it
//! ([`SideListener`]); both are added through an [`Extension`]. With
//! `[tls]` files ([`crate::tls`]) every listener speaks HTTPS only, the
//! server's own HTTP/2 or HTTP/1.1 by ALPN; without, the server's own
//! speaks plain HTTP/1.1. A server stops by draining ([`drain`]): queued
//! waiters are answered, requests in flight finish, the store syncs.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hyper::body::Incoming;
use hyper::rt::{Read, Write};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use lockd_core::LockService;
use tracing::Instrument as _;

pub mod drain;
mod extension;
#[cfg(unix)]
mod notify;
pub mod ready;
mod starting;

pub use drain::{Drained, DEFAULT_SHUTDOWN_TIMEOUT, SHUTTING_DOWN};
pub use extension::{
    Accepted, BoxFuture, Context, Extended, Extension, Mount, Precedence, SideListener,
};

use self::drain::Connections;

use crate::api::{Api, ApiOptions, PeerAddr};
use crate::auth::LiveCredentials;
use crate::body::{full, Body};
use crate::config::LockdConfig;
use crate::store::StoreSpec;
use crate::tls::Tls;
use crate::ui;

/// A client has this long to send a request's complete head; a slow-loris
/// client trickling headers is disconnected after it.
pub const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Largest request head (request line and headers) accepted.
pub const MAX_HEAD_BYTES: usize = 64 << 10;

/// Whether a request came over TLS: set in every request's extensions on a
/// TLS listener, for mounts that tell the scheme (a component sees
/// `https`).
#[derive(Clone, Copy, Debug)]
pub struct OverTls;

/// What a server runs (TLS from `config.tls`). Its `Debug` never shows
/// the token.
pub struct ServeOptions {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Where locks live.
    pub store: StoreSpec,
    /// lockd's own configuration.
    pub config: LockdConfig,
    /// A bearer token accepted on lockd's own routes as an admin over every
    /// namespace, beside lockd.toml's `[[auth.tokens]]`.
    pub auth_token: Option<String>,
    /// How long an idle event stream waits before a heartbeat comment
    /// (zero: [`HEARTBEAT`](crate::api::HEARTBEAT)).
    pub events_heartbeat: Duration,
    /// What other crates add: prepared in this order, once the store is
    /// open.
    pub extensions: Vec<Box<dyn Extension>>,
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("listen", &self.listen)
            .field("store", &self.store)
            .field("config", &self.config)
            .field(
                "auth_token",
                &self.auth_token.as_ref().map(|_| "<redacted>"),
            )
            .field("events_heartbeat", &self.events_heartbeat)
            .field("extensions", &self.extensions)
            .finish()
    }
}

/// A bound, ready server: its sockets are listening and every extension is
/// prepared.
pub struct Server {
    listener: Arc<tokio::net::TcpListener>,
    addr: SocketAddr,
    service: LockService,
    router: Arc<Router>,
    side_listeners: Vec<(tokio::net::TcpListener, Arc<dyn SideListener>)>,
    tls: Option<Arc<Tls>>,
    /// The bound on a shutdown (`[server] shutdown_timeout_ms`).
    shutdown_timeout: Duration,
    /// The open connections of the server's listener.
    connections: Arc<Connections>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// Binds the server's listener, opens the store and prepares the
/// extensions, then binds each side listener. While the store opens (the
/// embedded store's recovery reads all of it) and the extensions prepare,
/// the listener answers probes already (the private `starting` module): `/livez` 200,
/// `/readyz` 503 `recovering`, anything else 503 `unavailable`.
pub async fn bind(options: ServeOptions) -> anyhow::Result<Server> {
    let ServeOptions {
        listen,
        store,
        config,
        auth_token,
        events_heartbeat,
        extensions,
    } = options;
    let credentials = config.auth.credentials(auth_token.as_deref())?;
    let shutdown_timeout = config.server.shutdown_timeout()?;
    // The certificate is checked before the store opens: a bad file is the
    // error to report, not a side effect after locks were recovered.
    let tls = Tls::load(&config.tls)?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let addr = listener.local_addr()?;
    let listener = Arc::new(listener);
    let starting = starting::serve(listener.clone(), tls.clone());
    let (service, snapshots) = config.open_service_and_store(&store).await?;
    let api = Arc::new(Api::with_options(
        service.clone(),
        ApiOptions {
            credentials,
            events_heartbeat,
            snapshots,
        },
    ));
    let context = Context {
        service: &service,
        config: &config,
        store: &store,
        api: &api,
    };
    let mut router = Router {
        api: api.clone(),
        before_own: Vec::new(),
        after_own: Vec::new(),
    };
    let mut sides = Vec::new();
    for extension in extensions {
        let extended = extension.prepare(&context)?;
        for (precedence, mount) in extended.mounts {
            match precedence {
                Precedence::BeforeOwn => router.before_own.push(mount),
                Precedence::AfterOwn => router.after_own.push(mount),
            }
        }
        sides.extend(extended.side_listeners);
    }
    let mut side_listeners = Vec::new();
    for side in sides {
        let at = side.addr();
        let bound = tokio::net::TcpListener::bind(at)
            .await
            .with_context(|| format!("binding {at} ({})", side.what()))?;
        side_listeners.push((bound, side));
    }
    starting.end().await;
    Ok(Server {
        listener,
        addr,
        service,
        router: Arc::new(router),
        side_listeners,
        tls,
        shutdown_timeout,
        connections: Arc::default(),
    })
}

impl Server {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where its side listeners listen, in the order the extensions gave
    /// them.
    pub fn side_addrs(&self) -> Vec<SocketAddr> {
        self.side_listeners
            .iter()
            .filter_map(|(listener, _)| listener.local_addr().ok())
            .collect()
    }

    /// The lock service behind it (tests inspect the store through it).
    pub fn service(&self) -> &LockService {
        &self.service
    }

    /// The tokens it accepts, on every surface of its listeners:
    /// [`LiveCredentials::replace`] puts new ones in force (the binary
    /// reads lockd.toml's again on SIGHUP).
    pub fn credentials(&self) -> LiveCredentials {
        self.router.api.credentials().clone()
    }

    /// Its TLS, if it serves HTTPS: [`Tls::reload`] reads the files again
    /// (the binary calls it on SIGHUP).
    pub fn tls(&self) -> Option<Arc<Tls>> {
        self.tls.clone()
    }

    /// The bound on its shutdown (`[server] shutdown_timeout_ms`).
    pub fn shutdown_timeout(&self) -> Duration {
        self.shutdown_timeout
    }

    /// Serves until `shutdown` completes, then drains ([`drain`]). Prints
    /// the side listeners, the mounted routes and then `lockd listening on
    /// http://ADDR` (`https://` with TLS; tests wait for that line).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        self.run_draining(shutdown).await.map(drop)
    }

    /// [`Server::run`], answering what the drain did: whether it finished
    /// within its bound ([`Drained::within_bound`]).
    pub async fn run_draining(
        mut self,
        shutdown: impl Future<Output = ()>,
    ) -> anyhow::Result<Drained> {
        let side_tasks = self.start_side_listeners();
        self.announce();
        #[cfg(unix)]
        notify::ready(self.addr);
        let handle = handler(self.router.clone(), self.connections.clone());
        // The listeners close when their loops end: new connections are
        // refused from then on.
        accept_loop(self.listener, self.tls.clone(), shutdown, handle).await;
        for task in side_tasks {
            task.abort();
        }
        let started = Instant::now();
        let bound = self.shutdown_timeout;
        drain::begin(&self.service, &self.connections, bound);
        Ok(drain::finish(&self.service, &self.connections, started, bound).await)
    }

    /// Starts accepting on the side listeners, printing each one's banner.
    fn start_side_listeners(&mut self) -> Vec<tokio::task::JoinHandle<()>> {
        let tls = self.tls.clone();
        std::mem::take(&mut self.side_listeners)
            .into_iter()
            .filter_map(|(listener, side)| {
                let at = listener.local_addr().ok()?;
                println!("  {}", side.banner(at, tls.is_some()));
                let handle = move |accepted: Accepted, peer| side.serve_connection(accepted, peer);
                let never = std::future::pending();
                let listener = Arc::new(listener);
                Some(tokio::spawn(accept_loop(
                    listener,
                    tls.clone(),
                    never,
                    handle,
                )))
            })
            .collect()
    }

    /// Prints the mounted routes and then `lockd listening on ...`.
    fn announce(&self) {
        let addr = self.addr;
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        for mount in self.router.before_own.iter().chain(&self.router.after_own) {
            for line in mount.banner() {
                println!("  {scheme}://{addr}{line}");
            }
        }
        println!("  {scheme}://{addr}/ui/ -> the web page (locks and events, live)");
        println!("lockd listening on {scheme}://{addr}");
        tracing::info!(%addr, tls = self.tls.is_some(), "serving");
    }
}

/// How the server's listener handles a connection: counted in
/// `connections`, its requests answered by `responder` until it closes or
/// the connections are asked to close.
fn handler<R: Respond>(
    responder: Arc<R>,
    connections: Arc<Connections>,
) -> impl Fn(Accepted, SocketAddr) -> BoxFuture<'static, ()> + Clone + Send + 'static {
    move |accepted: Accepted, peer| {
        let responder = responder.clone();
        let open = connections.open();
        let stopping = connections.stopping();
        Box::pin(async move {
            let _open = open;
            match accepted {
                Accepted::Plain(stream) => {
                    let io = TokioIo::new(stream);
                    serve_connection(io, (false, false), responder, peer, stopping).await;
                }
                Accepted::Tls(done) => {
                    let io = TokioIo::new(done.stream);
                    serve_connection(io, (true, done.http2), responder, peer, stopping).await;
                }
            }
        })
    }
}

/// Who answers the requests of the server's listener: the [`Router`], and
/// while the server starts, `starting::Starting`.
trait Respond: Send + Sync + 'static {
    fn respond(&self, req: Request<Incoming>) -> impl Future<Output = Response<Body>> + Send;
}

impl Respond for Router {
    fn respond(&self, req: Request<Incoming>) -> impl Future<Output = Response<Body>> + Send {
        self.route(req)
    }
}

/// Accepts connections on `listener` until `shutdown` completes, each in a
/// task of its own: with `tls`, after its handshake (the certificate
/// [`Tls::reload`] last loaded), then `handle`d. Every listener (the
/// server's and the side listeners) accepts here, so they share the
/// certificate, its reloads and the handshake timeout.
async fn accept_loop<H, F>(
    listener: Arc<tokio::net::TcpListener>,
    tls: Option<Arc<Tls>>,
    shutdown: impl Future<Output = ()>,
    handle: H,
) where
    H: Fn(Accepted, SocketAddr) -> F + Clone + Send + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                // Out of file descriptors and the like: keep serving the rest.
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // A component may write its body after its headers: with Nagle's
        // algorithm on, that second write waited for the client's
        // delayed ACK (40 ms on Linux) before leaving.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "setting TCP_NODELAY failed");
        }
        let handle = handle.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let Some(tls) = tls else {
                return handle(Accepted::Plain(stream), peer).await;
            };
            match tls.handshake(stream).await {
                Ok(done) => handle(Accepted::Tls(Box::new(done)), peer).await,
                // Scanners and stray plain-HTTP clients are routine:
                // debug, not warn.
                Err(e) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
            }
        });
    }
}

/// Serves the requests of one connection (over TLS and HTTP/2 as
/// `(over_tls, http2)` say, else HTTP/1.1) until it closes, or, once
/// `stopping` completes, until its request in flight is answered
/// (HTTP/1.1: no keep-alive; HTTP/2: GOAWAY). Its errors (a client
/// hanging up) concern that client only.
async fn serve_connection<I, R: Respond>(
    io: I,
    (over_tls, http2): (bool, bool),
    responder: Arc<R>,
    peer: SocketAddr,
    stopping: impl Future<Output = ()>,
) where
    I: Read + Write + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        let responder = responder.clone();
        // Refusals log who asked (crate::api::PeerAddr).
        req.extensions_mut().insert(PeerAddr(peer));
        if over_tls {
            req.extensions_mut().insert(OverTls);
        }
        async move { Ok::<_, Infallible>(responder.respond(req).await) }
    });
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    let mut builder = if http2 {
        builder.http2_only()
    } else {
        builder.http1_only()
    };
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(MAX_HEAD_BYTES as u32);
    let connection = builder.serve_connection(io, service);
    tokio::pin!(connection);
    let ended = tokio::select! {
        ended = connection.as_mut() => ended,
        () = stopping => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(e) = ended {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}

/// Binds and serves until `shutdown` completes.
pub async fn serve(
    options: ServeOptions,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    bind(options).await?.run(shutdown).await
}

/// Whether `path` is lockd's own: the REST API's (anything under `/v1/`
/// included), `/metrics`, `/healthz`, `/livez`, `/readyz`, `/openapi.json`
/// or the web page's. A
/// mount asked after lockd's own routes never gets such a path.
pub fn is_own_path(path: &str) -> bool {
    Api::owns(path) || ui::owns(path)
}

/// Who answers a request on the server's listener.
struct Router {
    api: Arc<Api>,
    /// Mounts asked before lockd's own routes.
    before_own: Vec<Arc<dyn Mount>>,
    /// Mounts asked after lockd's own routes and the web page.
    after_own: Vec<Arc<dyn Mount>>,
}

impl Router {
    /// Answers one request inside its span. The handlers fill in what they
    /// learn (`route`, `component`, `namespace`, `outcome`); the span closes
    /// with a `debug` line carrying the status and duration, so
    /// `RUST_LOG=lockd=debug` logs every request and the default costs
    /// nothing but the span.
    async fn route(&self, req: Request<Incoming>) -> Response<Body> {
        let started = std::time::Instant::now();
        // A 503 from /readyz is an answer, not a failure.
        let probe = req.uri().path() == lockd_api::Route::Readyz.path();
        let span = tracing::info_span!(
            "request",
            method = %req.method(),
            path = %req.uri().path(),
            route = tracing::field::Empty,
            component = tracing::field::Empty,
            namespace = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        let response = self.dispatch(req).instrument(span.clone()).await;
        let status = response.status().as_u16();
        let elapsed_us = started.elapsed().as_micros() as u64;
        if status >= 500 && !probe {
            tracing::warn!(parent: &span, status, elapsed_us, "request failed");
        } else {
            tracing::debug!(parent: &span, status, elapsed_us, "request");
        }
        response
    }

    async fn dispatch(&self, req: Request<Incoming>) -> Response<Body> {
        let path = req.uri().path();
        // Before `Api::owns`: such a mount may claim paths under /v1/ (the
        // compatibility routes do).
        if let Some(mount) = self.before_own.iter().find(|m| m.claims(path)) {
            return mount.handle(req).await;
        }
        if Api::owns(path) {
            return self.api.handle(req).await;
        }
        if ui::owns(path) {
            tracing::Span::current().record("route", "/ui/");
            return ui::handle(req.method(), path);
        }
        // `/` shows the page, unless a mount serves `/` itself.
        if path == "/" && !self.after_own.iter().any(|m| m.claims(path)) {
            return ui::redirect(ui::UI_PATH);
        }
        match self.after_own.iter().find(|m| m.claims(path)) {
            Some(mount) => mount.handle(req).await,
            None => not_found(),
        }
    }
}

/// lockd's 404 for a path no route serves.
pub fn not_found() -> Response<Body> {
    let mut response = Response::new(full(r#"{"status":"not_found","message":"no route"}"#));
    *response.status_mut() = StatusCode::NOT_FOUND;
    response
}
