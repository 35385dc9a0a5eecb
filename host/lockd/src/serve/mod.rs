//! `lockd serve` and `lockd up`: one HTTP listener for lockd's own routes
//! (the REST API, `/metrics`, `/healthz`, `/openapi.json`) and the HTTP
//! components of a Spin manifest (every other path). With `[tls]` files
//! ([`tls`]) the listener speaks HTTPS only, HTTP/2 or HTTP/1.1 by ALPN;
//! without, plain HTTP/1.1.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use hyper::body::Incoming;
use hyper::rt::{Read, Write};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use lockd_core::LockService;
use tracing::Instrument as _;

mod build;
mod components;
pub mod manifest;
pub mod tls;
mod ui;

pub use components::App;
use manifest::Manifest;
use tls::Tls;

use crate::api::{Api, ApiOptions, PeerAddr};
use crate::auth::LiveCredentials;
use crate::compat::{self, Compat};
use crate::config::LockdConfig;
use crate::http_body::{full, Body};
use crate::store::StoreSpec;

/// A client has this long to send a request's complete head; a slow-loris
/// client trickling headers is disconnected after it.
pub const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Largest request head (request line and headers) accepted.
pub const MAX_HEAD_BYTES: usize = 64 << 10;

/// Whether a request came over TLS: set in every request's extensions on a
/// TLS listener (components see the `https` scheme).
#[derive(Clone, Copy, Debug)]
pub(crate) struct OverTls;

/// What `lockd serve` / `lockd up` run (TLS from `config.tls`). Its `Debug`
/// never shows the token.
pub struct ServeOptions {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Where locks live.
    pub store: StoreSpec,
    /// The Spin manifest whose HTTP components to serve, if any.
    pub manifest: Option<PathBuf>,
    /// lockd's own configuration.
    pub config: LockdConfig,
    /// A bearer token accepted on lockd's own routes as an admin over every
    /// namespace, beside lockd.toml's `[[auth.tokens]]`.
    pub auth_token: Option<String>,
    /// How long an idle event stream waits before a heartbeat comment
    /// (zero: [`HEARTBEAT`](crate::api::HEARTBEAT)).
    pub events_heartbeat: Duration,
    /// Where to serve Dapr's gRPC lock API, if anywhere.
    pub dapr_grpc_listen: Option<SocketAddr>,
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("listen", &self.listen)
            .field("store", &self.store)
            .field("manifest", &self.manifest)
            .field("config", &self.config)
            .field(
                "auth_token",
                &self.auth_token.as_ref().map(|_| "<redacted>"),
            )
            .field("events_heartbeat", &self.events_heartbeat)
            .field("dapr_grpc_listen", &self.dapr_grpc_listen)
            .finish()
    }
}

/// A bound, ready server: the socket is listening and every component is
/// compiled.
pub struct Server {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    service: LockService,
    router: Arc<Router>,
    dapr_grpc: Option<tokio::net::TcpListener>,
    tls: Option<Arc<Tls>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// Opens the store, loads the manifest's components and binds the socket.
pub async fn bind(options: ServeOptions) -> anyhow::Result<Server> {
    let credentials = options
        .config
        .auth
        .credentials(options.auth_token.as_deref())?;
    // The certificate is checked before the store opens: a bad file is the
    // error to report, not a side effect after locks were recovered.
    let tls = Tls::load(&options.config.tls)?;
    let service = options.config.open_service(&options.store).await?;
    let api = Arc::new(Api::with_options(
        service.clone(),
        ApiOptions {
            credentials,
            events_heartbeat: options.events_heartbeat,
        },
    ));
    let app = match &options.manifest {
        Some(path) => {
            let manifest = Manifest::load(path)?;
            Some(Arc::new(App::new(
                manifest,
                &options.config,
                service.clone(),
            )?))
        }
        None => None,
    };
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .with_context(|| format!("binding {}", options.listen))?;
    let addr = listener.local_addr()?;
    let dapr_grpc = match options.dapr_grpc_listen {
        Some(at) => Some(
            tokio::net::TcpListener::bind(at)
                .await
                .with_context(|| format!("binding {at} (--dapr-grpc-listen)"))?,
        ),
        None => None,
    };
    let compat = Compat::new(service.clone(), &options.config.dapr);
    Ok(Server {
        listener,
        addr,
        service,
        router: Arc::new(Router { api, app, compat }),
        dapr_grpc,
        tls,
    })
}

impl Server {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where Dapr's gRPC lock API listens, if it does.
    pub fn dapr_grpc_addr(&self) -> Option<SocketAddr> {
        self.dapr_grpc.as_ref().and_then(|l| l.local_addr().ok())
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

    /// Serves until `shutdown` completes. Prints the routes and then
    /// `lockd listening on http://ADDR` (`https://` with TLS; tests wait
    /// for that line).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let addr = self.addr;
        let dapr_grpc = self
            .dapr_grpc_addr()
            .zip(self.dapr_grpc)
            .map(|(at, listener)| {
                let scheme = if self.tls.is_some() { "grpcs" } else { "grpc" };
                println!("  {scheme}://{at} -> Dapr's lock API (dapr.proto.runtime.v1.Dapr)");
                let grpc = compat::dapr_grpc::DaprGrpc::new(
                    self.router.compat.dapr().clone(),
                    self.router.api.clone(),
                );
                let handle = move |accepted: Accepted, peer| {
                    let grpc = grpc.clone();
                    async move {
                        match accepted {
                            Accepted::Plain(stream) => {
                                grpc.serve_connection(TokioIo::new(stream), peer).await;
                            }
                            Accepted::Tls(done) => {
                                grpc.serve_connection(TokioIo::new(done.stream), peer).await;
                            }
                        }
                    }
                };
                let tls = self.tls.clone();
                tokio::spawn(accept_loop(listener, tls, std::future::pending(), handle))
            });
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        if let Some(app) = &self.router.app {
            for (route, component, kind) in app.routes() {
                println!("  {scheme}://{addr}{route} -> {component} ({kind})");
            }
        }
        println!("  {scheme}://{addr}/ui/ -> the web page (locks and events, live)");
        println!("lockd listening on {scheme}://{addr}");
        tracing::info!(%addr, tls = self.tls.is_some(), "serving");
        let router = self.router.clone();
        let handle = move |accepted: Accepted, peer| {
            let router = router.clone();
            async move {
                match accepted {
                    Accepted::Plain(stream) => {
                        serve_connection(TokioIo::new(stream), false, false, router, peer).await;
                    }
                    Accepted::Tls(done) => {
                        let io = TokioIo::new(done.stream);
                        serve_connection(io, true, done.http2, router, peer).await;
                    }
                }
            }
        };
        accept_loop(self.listener, self.tls.clone(), shutdown, handle).await;
        if let Some(task) = dapr_grpc {
            task.abort();
        }
        Ok(())
    }
}

/// A connection accepted by [`accept_loop`].
enum Accepted {
    /// No TLS on this listener.
    Plain(tokio::net::TcpStream),
    /// Past its TLS handshake (boxed: rustls's state is large).
    Tls(Box<tls::Handshaken>),
}

/// Accepts connections on `listener` until `shutdown` completes, each in a
/// task of its own: with `tls`, after its handshake (the certificate
/// [`Tls::reload`] last loaded), then `handle`d. Both listeners (lockd's
/// and Dapr's gRPC) accept here, so they share the certificate, its
/// reloads and the handshake timeout.
async fn accept_loop<H, F>(
    listener: tokio::net::TcpListener,
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

/// Serves the requests of one connection (HTTP/2 if `http2`, else
/// HTTP/1.1) until it closes. Its errors (a client hanging up) concern
/// that client only.
async fn serve_connection<I>(
    io: I,
    over_tls: bool,
    http2: bool,
    router: Arc<Router>,
    peer: SocketAddr,
) where
    I: Read + Write + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        let router = router.clone();
        // Refusals log who asked (crate::api::PeerAddr).
        req.extensions_mut().insert(PeerAddr(peer));
        if over_tls {
            req.extensions_mut().insert(OverTls);
        }
        async move { Ok::<_, Infallible>(router.route(req).await) }
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
    if let Err(e) = builder.serve_connection(io, service).await {
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

struct Router {
    api: Arc<Api>,
    app: Option<Arc<App>>,
    compat: Compat,
}

impl Router {
    /// Answers one request inside its span. The handlers fill in what they
    /// learn (`route`, `component`, `namespace`, `outcome`); the span closes
    /// with a `debug` line carrying the status and duration, so
    /// `RUST_LOG=lockd=debug` logs every request and the default costs
    /// nothing but the span.
    async fn route(&self, req: Request<Incoming>) -> Response<Body> {
        let started = std::time::Instant::now();
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
        if status >= 500 {
            tracing::warn!(parent: &span, status, elapsed_us, "request failed");
        } else {
            tracing::debug!(parent: &span, status, elapsed_us, "request");
        }
        response
    }

    async fn dispatch(&self, req: Request<Incoming>) -> Response<Body> {
        let path = req.uri().path();
        // Before `Api::owns`: Kahuna's routes are under /v1/ too.
        if Compat::owns(path) {
            return self.compat.handle(req, &self.api).await;
        }
        if Api::owns(path) {
            return self.api.handle(req).await;
        }
        if ui::owns(path) {
            tracing::Span::current().record("route", "/ui/");
            return ui::handle(req.method(), path);
        }
        // `/` shows the page, unless the manifest serves `/` itself.
        if path == "/" && !self.app.as_ref().is_some_and(|app| app.claims(path)) {
            return ui::redirect(ui::UI_PATH);
        }
        if let Some(app) = &self.app {
            // `handle` consumes the request; route first to keep 404s cheap.
            return app.handle(req).await.unwrap_or_else(not_found);
        }
        not_found()
    }
}

fn not_found() -> Response<Body> {
    let mut response = Response::new(full(r#"{"status":"not_found","message":"no route"}"#));
    *response.status_mut() = StatusCode::NOT_FOUND;
    response
}

/// Runs the `[component.<id>.build] command` of every component in the
/// manifest at `path`, like `spin up --build`.
pub fn run_build_commands(path: &std::path::Path) -> anyhow::Result<()> {
    build::run_build_commands(&Manifest::load(path)?)
}
