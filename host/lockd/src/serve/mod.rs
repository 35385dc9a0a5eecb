//! `lockd serve` and `lockd up`: one HTTP listener for lockd's own routes
//! (the REST API, `/metrics`, `/healthz`, `/openapi.json`) and the HTTP
//! components of a Spin manifest (every other path).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use lockd_core::LockService;

use crate::api::Api;
use crate::config::LockdConfig;
use crate::store::StoreSpec;

/// Every response body lockd serves.
pub type Body = BoxBody<Bytes, anyhow::Error>;

/// A complete body from bytes.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).map_err(|never| match never {}).boxed()
}

/// What `lockd serve` / `lockd up` run.
#[derive(Debug)]
pub struct ServeOptions {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Where locks live.
    pub store: StoreSpec,
    /// The Spin manifest whose HTTP components to serve, if any.
    pub manifest: Option<PathBuf>,
    /// lockd's own configuration.
    pub config: LockdConfig,
    /// Bearer token required on lockd's own routes (except `/healthz`).
    pub auth_token: Option<String>,
}

/// Opens the store with the configured limits and quotas.
pub fn open_service(store: &StoreSpec, config: &LockdConfig) -> anyhow::Result<LockService> {
    Ok(LockService::new(store.open()?, config.lock_limits()).with_quotas(config.quotas()))
}

/// Serves until `shutdown` completes. Prints `lockd listening on http://ADDR`
/// once the socket is bound (tests wait for that line).
pub async fn serve(options: ServeOptions, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let service = open_service(&options.store, &options.config)?;
    let api = Arc::new(Api::new(service.clone(), options.auth_token.clone()));
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .with_context(|| format!("binding {}", options.listen))?;
    let addr = listener.local_addr()?;
    println!("lockd listening on http://{addr}");
    let router = Arc::new(Router { api });

    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                // Out of file descriptors and the like: keep serving the rest.
                Err(e) => { eprintln!("lockd: accept failed: {e}"); continue; }
            },
            () = &mut shutdown => break,
        };
        let router = router.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let router = router.clone();
                async move { Ok::<_, Infallible>(router.route(req).await) }
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            // Connection errors (a client hanging up) concern that client only.
            let _ = builder.serve_connection(TokioIo::new(stream), service).await;
        });
    }
    Ok(())
}

struct Router {
    api: Arc<Api>,
}

impl Router {
    async fn route(&self, req: Request<Incoming>) -> Response<Body> {
        if Api::owns(req.uri().path()) {
            return self.api.handle(req).await;
        }
        not_found()
    }
}

fn not_found() -> Response<Body> {
    let mut response = Response::new(full(r#"{"status":"not_found","message":"no route"}"#));
    *response.status_mut() = StatusCode::NOT_FOUND;
    response
}

/// Runs the `[component.<id>.build] command` of every component in
/// `manifest`, like `spin up --build`.
pub fn run_build_commands(manifest: &std::path::Path) -> anyhow::Result<()> {
    anyhow::bail!("building from {} is not implemented yet", manifest.display())
}
