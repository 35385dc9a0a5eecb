//! Dapr's lock API over gRPC, on its own listener (`lockd serve
//! --dapr-grpc-listen ADDR`): the `dapr.proto.runtime.v1.Dapr` service's
//! `TryLockAlpha1` and `UnlockAlpha1`, and `GetMetadata` (the JavaScript
//! SDK's first call). Every other method of Dapr's, and any other path,
//! answers `UNIMPLEMENTED` saying lockd serves only the lock API.
//!
//! The messages are compiled from proto/dapr_lock.proto, which keeps Dapr's
//! package, names and field numbers. A call passes the same token check as
//! the REST API ([`Api::check_auth`], on the call's metadata as headers)
//! before it is dispatched.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tonic::codegen::Service as _;
use tonic::{Code, Status};

use super::dapr::{DaprError, DaprLocks};
use crate::api::{Api, MAX_BODY_BYTES};

#[allow(missing_docs, clippy::all, clippy::pedantic)]
mod proto {
    tonic::include_proto!("dapr.proto.runtime.v1");
}

use proto::dapr_server::{Dapr, DaprServer};
use proto::{
    GetMetadataRequest, GetMetadataResponse, TryLockRequest, TryLockResponse, UnlockRequest,
    UnlockResponse,
};

/// The service's path prefix.
const SERVICE: &str = "/dapr.proto.runtime.v1.Dapr/";

/// The methods lockd serves.
const SERVED: [&str; 3] = ["TryLockAlpha1", "UnlockAlpha1", "GetMetadata"];

struct DaprGrpc {
    locks: DaprLocks,
}

/// The one mapping of Dapr errors to gRPC: Dapr's code, Dapr's message.
fn status_of(e: DaprError) -> Status {
    Status::new(e.grpc_code(), e.message().to_string())
}

#[tonic::async_trait]
impl Dapr for DaprGrpc {
    async fn try_lock_alpha1(
        &self,
        request: tonic::Request<TryLockRequest>,
    ) -> Result<tonic::Response<TryLockResponse>, Status> {
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
        Ok(tonic::Response::new(GetMetadataResponse {
            id: "lockd".to_string(),
            runtime_version: concat!("lockd ", env!("CARGO_PKG_VERSION")).to_string(),
            extended_metadata: [(
                "lockd".to_string(),
                "serves only Dapr's lock API (TryLockAlpha1, UnlockAlpha1)".to_string(),
            )]
            .into(),
            ..GetMetadataResponse::default()
        }))
    }
}

/// Serves Dapr's gRPC lock API on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    locks: DaprLocks,
    api: Arc<Api>,
    shutdown: impl Future<Output = ()>,
) {
    let server = DaprServer::new(DaprGrpc { locks }).max_decoding_message_size(MAX_BODY_BYTES);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer): (_, SocketAddr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a gRPC connection failed");
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let server = server.clone();
        let api = api.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                let mut server = server.clone();
                let api = api.clone();
                async move {
                    let started = std::time::Instant::now();
                    let path = req.uri().path().to_string();
                    let response = if let Some(refused) = refusal(&api, &req).await {
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
            // gRPC is HTTP/2 only; refusing HTTP/1 leaves no slow request
            // head to wait for.
            let mut builder =
                hyper_util::server::conn::auto::Builder::new(TokioExecutor::new()).http2_only();
            builder.http2().timer(TokioTimer::new());
            if let Err(e) = builder
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "gRPC connection ended");
            }
        });
    }
}

/// The API's token check on the call's metadata (HTTP/2 headers), as a
/// gRPC status: `UNAUTHENTICATED` (or `PERMISSION_DENIED`) with the API's
/// message.
async fn refusal(api: &Api, req: &hyper::Request<Incoming>) -> Option<Status> {
    let mut probe = hyper::Request::new(());
    *probe.headers_mut() = req.headers().clone();
    let refused = api.check_auth(&probe, false)?;
    let code = match refused.status() {
        hyper::StatusCode::FORBIDDEN => Code::PermissionDenied,
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
    Some(Status::new(code, message))
}
