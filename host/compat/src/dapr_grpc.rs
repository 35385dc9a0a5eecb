//! Dapr's lock API over gRPC, on its own listener (`lockd serve
//! --dapr-grpc-listen ADDR`): the `dapr.proto.runtime.v1.Dapr` service's
//! `TryLockAlpha1` and `UnlockAlpha1`, and `GetMetadata` (the JavaScript
//! SDK's first call). Every other method of Dapr's, and any other path,
//! answers `UNIMPLEMENTED` saying lockd serves only the lock API.
//!
//! The messages are compiled from proto/dapr_lock.proto, which keeps Dapr's
//! package, names and field numbers. Every call needs a known token (on its
//! metadata, as HTTP headers) before it is decoded; a lock call then needs
//! role `locker` (or `admin`) over its store, which only the decoded
//! request names ([`Api::authorize`]). Refusals log the peer's address.
//!
//! The server accepts the connections of its listener ([`DaprGrpc::listener`],
//! a side listener of lockd-server's), over TLS when the main listener has
//! it, and hands each to [`DaprGrpc::serve_connection`].

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper::rt::{Read, Write};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use lockd_api::Route;
use lockd_server::api::{Api, PeerAddr, MAX_BODY_BYTES};
use lockd_server::body::Body;
use lockd_server::serve::{Accepted, BoxFuture, SideListener};
use tonic::codegen::Service as _;
use tonic::{Code, Status};

use crate::dapr::{DaprError, DaprLocks};
use crate::dapr_http::served;

#[allow(missing_docs, clippy::all, clippy::pedantic)]
mod proto {
    tonic::include_proto!("dapr.proto.runtime.v1");
}

use proto::dapr_server::{Dapr, DaprServer};
use proto::{
    GetMetadataRequest, GetMetadataResponse, RegisteredComponents, TryLockRequest, TryLockResponse,
    UnlockRequest, UnlockResponse,
};

/// The service's path prefix.
const SERVICE: &str = "/dapr.proto.runtime.v1.Dapr/";

/// The methods lockd serves.
const SERVED: [&str; 3] = ["TryLockAlpha1", "UnlockAlpha1", "GetMetadata"];

/// The `Dapr` service's handlers.
struct Handlers {
    locks: DaprLocks,
    api: Arc<Api>,
}

impl Handlers {
    /// The API's check of a lock call in `store`: role `locker` over its
    /// namespace. A store that is not declared names no namespace: the
    /// known token every call needs is enough to hear Dapr's error for it.
    async fn authorize<T>(
        &self,
        request: &tonic::Request<T>,
        method: &str,
        store: &str,
    ) -> Result<(), Status> {
        let Some(namespace) = self.locks.namespace_of(store) else {
            return Ok(());
        };
        let mut probe = hyper::Request::new(());
        *probe.uri_mut() = format!("{SERVICE}{method}").parse().unwrap_or_default();
        *probe.headers_mut() = request.metadata().clone().into_headers();
        if let Some(peer) = request.extensions().get::<PeerAddr>() {
            probe.extensions_mut().insert(*peer);
        }
        match self.api.authorize(&probe, Route::Lock, Some(namespace)) {
            Some(refused) => Err(status_of_refusal(refused).await),
            None => Ok(()),
        }
    }
}

/// The one mapping of Dapr errors to gRPC: Dapr's code, Dapr's message.
fn status_of(e: DaprError) -> Status {
    Status::new(e.grpc_code(), e.message().to_string())
}

#[tonic::async_trait]
impl Dapr for Handlers {
    async fn try_lock_alpha1(
        &self,
        request: tonic::Request<TryLockRequest>,
    ) -> Result<tonic::Response<TryLockResponse>, Status> {
        self.authorize(&request, "TryLockAlpha1", &request.get_ref().store_name)
            .await?;
        let r = request.into_inner();
        let success = self
            .locks
            .try_lock(
                &r.store_name,
                &r.resource_id,
                &r.lock_owner,
                r.expiry_in_seconds,
            )
            .await
            .map_err(status_of)?;
        Ok(tonic::Response::new(TryLockResponse { success }))
    }

    async fn unlock_alpha1(
        &self,
        request: tonic::Request<UnlockRequest>,
    ) -> Result<tonic::Response<UnlockResponse>, Status> {
        self.authorize(&request, "UnlockAlpha1", &request.get_ref().store_name)
            .await?;
        let r = request.into_inner();
        let status = self
            .locks
            .unlock(&r.store_name, &r.resource_id, &r.lock_owner)
            .await
            .map_err(status_of)?;
        Ok(tonic::Response::new(UnlockResponse {
            status: status as i32,
        }))
    }

    async fn get_metadata(
        &self,
        _request: tonic::Request<GetMetadataRequest>,
    ) -> Result<tonic::Response<GetMetadataResponse>, Status> {
        let stores = self.locks.stores();
        Ok(tonic::Response::new(GetMetadataResponse {
            id: "lockd".to_string(),
            runtime_version: concat!("lockd ", env!("CARGO_PKG_VERSION")).to_string(),
            registered_components: stores
                .declared()
                .map(|s| RegisteredComponents {
                    name: s.name.clone(),
                    r#type: s.component_type.clone(),
                    version: s.version.clone(),
                    capabilities: Vec::new(),
                })
                .collect(),
            extended_metadata: [("lockd".to_string(), served(stores).to_string())].into(),
            ..GetMetadataResponse::default()
        }))
    }
}

/// Dapr's gRPC lock API, for the connections of one listener.
#[derive(Clone)]
pub struct DaprGrpc {
    server: DaprServer<Handlers>,
    api: Arc<Api>,
}

impl std::fmt::Debug for DaprGrpc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaprGrpc").finish_non_exhaustive()
    }
}

impl DaprGrpc {
    /// The service over `locks`, with `api`'s token checks.
    pub fn new(locks: DaprLocks, api: Arc<Api>) -> Self {
        let handlers = Handlers {
            locks,
            api: api.clone(),
        };
        let server = DaprServer::new(handlers).max_decoding_message_size(MAX_BODY_BYTES);
        DaprGrpc { server, api }
    }

    /// This service on a listener of its own at `addr`, for the server to
    /// bind and accept on.
    pub fn listener(self, addr: SocketAddr) -> Arc<dyn SideListener> {
        Arc::new(GrpcListener { addr, grpc: self })
    }

    /// Serves the calls of one connection (plain or past its TLS handshake)
    /// from `peer` until it closes.
    pub async fn serve_connection<I>(&self, io: I, peer: SocketAddr)
    where
        I: Read + Write + Unpin + Send + 'static,
    {
        let server = self.server.clone();
        let api = self.api.clone();
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            let mut server = server.clone();
            let api = api.clone();
            // Refusals log who asked; tonic hands the extensions on to the
            // handlers.
            req.extensions_mut().insert(PeerAddr(peer));
            async move {
                let started = std::time::Instant::now();
                let path = req.uri().path().to_string();
                let response = if let Some(refused) = unknown_token(&api, &req).await {
                    refused.into_http()
                } else if !SERVED.contains(&path.strip_prefix(SERVICE).unwrap_or("")) {
                    Status::unimplemented(format!(
                        "{path}: lockd serves only Dapr's lock API \
                         (dapr.proto.runtime.v1.Dapr/TryLockAlpha1, UnlockAlpha1, GetMetadata)"
                    ))
                    .into_http()
                } else {
                    server.call(req).await?
                };
                // `RUST_LOG=lockd=debug` logs every call, as for HTTP.
                let elapsed_us = started.elapsed().as_micros() as u64;
                tracing::debug!(%peer, path, elapsed_us, "gRPC call");
                Ok::<_, Infallible>(response)
            }
        });
        // gRPC is HTTP/2 only; refusing HTTP/1 leaves no slow request head
        // to wait for.
        let mut builder =
            hyper_util::server::conn::auto::Builder::new(TokioExecutor::new()).http2_only();
        builder.http2().timer(TokioTimer::new());
        if let Err(e) = builder.serve_connection(io, service).await {
            tracing::debug!(%peer, error = %e, "gRPC connection ended");
        }
    }
}

/// Dapr's gRPC lock API on its own listener (`--dapr-grpc-listen`).
#[derive(Debug)]
struct GrpcListener {
    addr: SocketAddr,
    grpc: DaprGrpc,
}

impl SideListener for GrpcListener {
    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn what(&self) -> &str {
        "--dapr-grpc-listen"
    }

    fn banner(&self, at: SocketAddr, tls: bool) -> String {
        let scheme = if tls { "grpcs" } else { "grpc" };
        format!("{scheme}://{at} -> Dapr's lock API (dapr.proto.runtime.v1.Dapr)")
    }

    fn serve_connection(&self, connection: Accepted, peer: SocketAddr) -> BoxFuture<'static, ()> {
        let grpc = self.grpc.clone();
        Box::pin(async move {
            match connection {
                Accepted::Plain(stream) => grpc.serve_connection(TokioIo::new(stream), peer).await,
                Accepted::Tls(done) => {
                    grpc.serve_connection(TokioIo::new(done.stream), peer).await;
                }
            }
        })
    }
}

/// A call without a known token (on its metadata, as HTTP headers):
/// `UNAUTHENTICATED` with the API's message.
async fn unknown_token(api: &Api, req: &hyper::Request<Incoming>) -> Option<Status> {
    let mut probe = hyper::Request::new(());
    *probe.uri_mut() = req.uri().clone();
    *probe.headers_mut() = req.headers().clone();
    if let Some(peer) = req.extensions().get::<PeerAddr>() {
        probe.extensions_mut().insert(*peer);
    }
    let refused = api.check_known_token(&probe)?;
    Some(status_of_refusal(refused).await)
}

/// The API's 401, 403 or 429 as a gRPC status (`UNAUTHENTICATED`,
/// `PERMISSION_DENIED`, `RESOURCE_EXHAUSTED`: the token is over its rate
/// limit) with the API's message.
async fn status_of_refusal(refused: hyper::Response<Body>) -> Status {
    let code = match refused.status() {
        hyper::StatusCode::FORBIDDEN => Code::PermissionDenied,
        hyper::StatusCode::TOO_MANY_REQUESTS => Code::ResourceExhausted,
        _ => Code::Unauthenticated,
    };
    let body = refused
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let message = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| "refused".to_string());
    Status::new(code, message)
}
