//! A stock wasmtime host: WASI 0.2 from `wasmtime-wasi` and `wasi:http` from
//! `wasmtime-wasi-http`, and nothing of lockd. A component that imports
//! `lockd:lock/*` cannot be instantiated here; one composed by `lockd plug`
//! runs, and reaches a lockd server over `wasi:http/outgoing-handler`.
//!
//! It is the one copy of the host that both the `stock-host` bin
//! (`src/bin/stock-host.rs`, for the portable tests) and the benchmark of
//! plugged guests (B7, `bench/src/b7_portable.rs`) run. This crate's library
//! depends on no lockd crate, so neither does the bin; a portable test
//! checks the bin for their symbols.
//!
//! - [`run_command`] is `wasmtime run -S http`: a `wasi:cli` command with all
//!   of WASI 0.2 (`wasmtime_wasi::p2::add_to_linker_async`) and `wasi:http`
//!   (`wasmtime_wasi_http::p2::add_only_http_to_linker_async`).
//! - [`Proxy`] and [`serve`] are `wasmtime serve -S cli`: a `wasi:http/proxy`
//!   server (HTTP/1.1, hyper) with all of WASI 0.2 linked too (Rust's std
//!   imports `wasi:cli/environment`, which `wasmtime serve` without `-S cli`
//!   does not link). Each request gets a fresh store and instance from one
//!   `ProxyPre`, on [`serve_engine`] (the pooling allocator with its default
//!   limits, as `wasmtime serve`); accepted connections have `TCP_NODELAY`.
//!   A component that fails before answering gets a 500, and its error goes
//!   to stderr.
//! - Outgoing `https://` requests are checked against webpki's roots, as in
//!   wasmtime's CLI, unless the state was made with [`StockState::trusting`]:
//!   then against the CA certificates of one PEM file only, which is how the
//!   tests trust their own CA (wasmtime's CLI has no such option).

use std::convert::Infallible;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, bail, Result};
use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store};
use wasmtime_wasi::p2::bindings::Command;
use wasmtime_wasi::{I32Exit, WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::p2::bindings::http::types::Scheme;
use wasmtime_wasi_http::p2::bindings::ProxyPre;
use wasmtime_wasi_http::{
    Error as HttpError, RequestOptions, WasiBody, WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks,
    WasiHttpView,
};

/// What a component's store holds: WASI 0.2 and wasi:http, nothing else.
pub struct StockState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    table: ResourceTable,
    hooks: TrustingHooks,
}

impl std::fmt::Debug for StockState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StockState").finish_non_exhaustive()
    }
}

impl StockState {
    /// A store's data with `wasi` (its arguments, environment and stdio).
    pub fn new(wasi: WasiCtx) -> StockState {
        StockState {
            wasi,
            http: WasiHttpCtx::new(),
            table: ResourceTable::new(),
            hooks: TrustingHooks { tls: None },
        }
    }

    /// [`StockState::new`], with outgoing `https://` requests checked
    /// against `tls`'s roots (see [`trusting_only`]) instead of webpki's.
    pub fn trusting(wasi: WasiCtx, tls: Arc<rustls::ClientConfig>) -> StockState {
        StockState {
            hooks: TrustingHooks { tls: Some(tls) },
            ..StockState::new(wasi)
        }
    }
}

/// A TLS client configuration that trusts exactly the CA certificates in the
/// PEM file `ca` (ring provider, HTTP/1.1 as wasi:http's default sender).
pub fn trusting_only(ca: &Path) -> Result<Arc<rustls::ClientConfig>> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::CertificateDer;

    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| anyhow!("{}: {e}", ca.display()))? {
        let cert = cert.map_err(|e| anyhow!("{}: {e}", ca.display()))?;
        roots
            .add(cert)
            .map_err(|e| anyhow!("{}: not a CA certificate: {e}", ca.display()))?;
    }
    if roots.is_empty() {
        bail!("{} holds no certificate", ca.display());
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| anyhow!("{e}"))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
}

/// wasi:http's hooks, with `https://` requests sent over `tls` if set.
struct TrustingHooks {
    tls: Option<Arc<rustls::ClientConfig>>,
}

type SendResult = wasmtime_wasi_http::Result<(
    Response<WasiBody>,
    Box<dyn Future<Output = Result<(), HttpError>> + Send>,
)>;

impl WasiHttpHooks for TrustingHooks {
    fn send_request(
        &mut self,
        request: Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        let tls = match &self.tls {
            Some(tls) if request.uri().scheme_str() == Some("https") => tls.clone(),
            _ => return wasmtime_wasi_http::default_hooks().send_request(request, options, fut),
        };
        Box::new(send_over_tls(tls, request))
    }
}

/// Sends `request` over a fresh TLS connection made with `tls`: what
/// wasi:http's default sender does for `https://`, but with `tls`'s roots.
async fn send_over_tls(
    tls: Arc<rustls::ClientConfig>,
    mut request: Request<WasiBody>,
) -> SendResult {
    use rustls::pki_types::ServerName;

    let authority = request
        .uri()
        .authority()
        .ok_or(HttpError::HttpRequestUriInvalid)?
        .clone();
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let name = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ServerName::IpAddress(ip.into()),
        Err(_) => ServerName::try_from(host.to_string())?,
    };
    let tcp = tokio::net::TcpStream::connect((host, authority.port_u16().unwrap_or(443)))
        .await
        .map_err(HttpError::Connect)?;
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(name, tcp)
        .await
        .map_err(HttpError::Tls)?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let driver = tokio::spawn(conn);
    // The request line carries only the path, as to an origin server.
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    *request.uri_mut() = path.parse().map_err(|_| HttpError::HttpRequestUriInvalid)?;
    let response = sender.send_request(request).await?;
    let io: Box<dyn Future<Output = Result<(), HttpError>> + Send> = Box::new(async move {
        match driver.await {
            Ok(result) => result.map_err(HttpError::from),
            Err(_) => Err(HttpError::HttpProtocolError),
        }
    });
    Ok((
        response.map(|body| body.map_err(HttpError::from).boxed_unsync()),
        io,
    ))
}

impl WasiView for StockState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for StockState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

/// The engine of `wasmtime run`: wasmtime's defaults.
pub fn engine() -> Result<Engine> {
    Engine::new(&component_config()).map_err(|e| anyhow!("creating the engine: {e:?}"))
}

/// The engine of `wasmtime serve`: the pooling allocator with its default
/// limits where the machine has the address space for it, else the default
/// on-demand allocator, as there.
pub fn serve_engine() -> Result<Engine> {
    let mut pooled = component_config();
    pooled.allocation_strategy(InstanceAllocationStrategy::Pooling(
        PoolingAllocationConfig::default(),
    ));
    match Engine::new(&pooled) {
        Ok(engine) => Ok(engine),
        Err(_) => engine(),
    }
}

fn component_config() -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config
}

/// Compiles the component at `path`.
pub fn load(engine: &Engine, path: &Path) -> Result<Component> {
    Component::from_file(engine, path).map_err(|e| anyhow!("loading {}: {e:?}", path.display()))
}

/// A linker with all of WASI 0.2 and wasi:http.
pub fn linker(engine: &Engine) -> Result<Linker<StockState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(|e| anyhow!("{e:?}"))?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)
        .map_err(|e| anyhow!("{e:?}"))?;
    Ok(linker)
}

/// How a `wasi:cli` command ended.
#[derive(Debug)]
pub enum CommandEnd {
    /// `run` returned `ok`.
    Ok,
    /// `run` returned `err`.
    Err,
    /// The command called `exit-with-code`.
    Exit(i32),
    /// The command trapped.
    Trap(anyhow::Error),
}

/// Runs `component` as a `wasi:cli` command in a store holding `state`; an
/// error if it cannot be instantiated.
pub async fn run_command(
    engine: &Engine,
    component: &Component,
    state: StockState,
) -> Result<CommandEnd> {
    let mut store = Store::new(engine, state);
    let command = Command::instantiate_async(&mut store, component, &linker(engine)?)
        .await
        .map_err(|e| anyhow!("instantiating: {e:?}"))?;
    let result = command.wasi_cli_run().call_run(&mut store).await;
    Ok(match result {
        Ok(Ok(())) => CommandEnd::Ok,
        Ok(Err(())) => CommandEnd::Err,
        Err(e) => match e.downcast_ref::<I32Exit>() {
            Some(exit) => CommandEnd::Exit(exit.0),
            None => CommandEnd::Trap(anyhow!("{e:?}")),
        },
    })
}

/// A response body.
pub type Body = UnsyncBoxBody<Bytes, anyhow::Error>;

/// A `wasi:http/proxy` component ready to serve: one instance per request.
pub struct Proxy {
    pre: ProxyPre<StockState>,
    wasi: Box<dyn Fn() -> WasiCtx + Send + Sync>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy").finish_non_exhaustive()
    }
}

impl Proxy {
    /// Links `component`; each request's store gets a fresh `wasi()`.
    pub fn new(
        engine: &Engine,
        component: &Component,
        wasi: impl Fn() -> WasiCtx + Send + Sync + 'static,
    ) -> Result<Proxy> {
        let pre = linker(engine)?
            .instantiate_pre(component)
            .map_err(|e| anyhow!("linking: {e:?}"))?;
        let pre =
            ProxyPre::new(pre).map_err(|e| anyhow!("not a wasi:http/proxy component: {e:?}"))?;
        Ok(Proxy {
            pre,
            wasi: Box::new(wasi),
        })
    }

    /// Answers `req`: the component's response, or a 500 if it failed
    /// before answering.
    pub async fn handle(&self, req: Request<Incoming>) -> Response<Body> {
        match self.call(req).await {
            Ok(response) => response,
            Err(e) => {
                eprintln!("stock-host: the component failed: {e:#}");
                Response::builder()
                    .status(500)
                    .body(
                        Full::new(Bytes::from(format!("{e:#}\n")))
                            .map_err(|never| match never {})
                            .boxed_unsync(),
                    )
                    .unwrap()
            }
        }
    }

    /// One request in a fresh store and instance.
    async fn call(&self, req: Request<Incoming>) -> Result<Response<Body>> {
        let mut store = Store::new(self.pre.engine(), StockState::new((self.wasi)()));
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let request = store
            .data_mut()
            .http()
            .new_incoming_request(Scheme::Http, req)
            .map_err(|e| anyhow!("{e:?}"))?;
        let out = store
            .data_mut()
            .http()
            .new_response_outparam(sender)
            .map_err(|e| anyhow!("{e:?}"))?;
        let pre = self.pre.clone();
        // The guest runs in its own task: it may keep writing the body after
        // the response head has gone.
        let task = tokio::spawn(async move {
            let proxy = pre.instantiate_async(&mut store).await?;
            proxy
                .wasi_http_incoming_handler()
                .call_handle(&mut store, request, out)
                .await
        });
        match receiver.await {
            Ok(Ok(response)) => {
                Ok(response.map(|body| body.map_err(|e| anyhow!("{e:?}")).boxed_unsync()))
            }
            Ok(Err(code)) => bail!("the component answered with error {code:?}"),
            Err(_) => match task.await {
                Ok(Ok(())) => bail!("the component returned without setting a response"),
                Ok(Err(e)) => Err(anyhow!("{e:?}")),
                Err(e) => bail!("the request task failed: {e}"),
            },
        }
    }
}

/// Serves `proxy` on `listener` over HTTP/1.1 until the task is dropped.
pub async fn serve(listener: tokio::net::TcpListener, proxy: Arc<Proxy>) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                eprintln!("stock-host: accept failed: {e}");
                continue;
            }
        };
        // Without it, a body written after the head waits for the client's
        // delayed ACK (Nagle's algorithm).
        let _ = stream.set_nodelay(true);
        let proxy = proxy.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let proxy = proxy.clone();
                async move { Ok::<_, Infallible>(proxy.handle(req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
