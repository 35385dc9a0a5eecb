//! Other systems' lock APIs on lockd, and nothing else, so that their
//! clients use lockd unchanged: Dapr's lock building block over HTTP
//! (`dapr_http`, on lockd's own listener) and gRPC ([`dapr_grpc`], on a
//! listener of its own), and Kahuna's REST API (`kahuna`). Each is a thin
//! translation onto the same [`LockService`] as the native API, with the
//! other system's errors mapped in one place per surface; the locks are
//! ordinary lockd locks.
//!
//! [`Compat`] adds them to a `lockd-server` server (its
//! [`Extension`]): the HTTP routes are a [`Mount`] asked before lockd's own
//! routes, since Kahuna's are under `/v1/` too. Request bodies are read by
//! the server's one reader (`lockd_server::body`), whose errors each
//! surface words as its system does.
//!
//! Dapr's lock stores are those Dapr component files declare
//! ([`dapr_components`], `[dapr] components` in lockd.toml), or any store
//! name when no folder is set.
//!
//! Requests pass the same token check as lockd's own routes
//! ([`Api::authorize`]) as lock calls in their namespace: a Dapr store's
//! namespace (the gRPC listener checks it after decoding the call), or
//! `default` for Kahuna's routes. Dapr's metadata, and a call to a store
//! that is not declared (which then gets Dapr's error), need only a known
//! token, and its health probes none, as on Dapr.
#![deny(missing_docs)]

pub mod dapr;
pub mod dapr_components;
pub mod dapr_grpc;
mod dapr_http;
mod kahuna;
mod request;

use std::error::Error as StdError;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Request, Response};
use lockd_api::Route;
use lockd_core::LockService;
use lockd_server::api::{Api, DEFAULT_NAMESPACE};
use lockd_server::body::{read_body, Body};
use lockd_server::serve::{BoxFuture, Context, Extended, Extension, Mount, Precedence};

use crate::dapr_components::LockStores;

/// Dapr's and Kahuna's APIs as an [`Extension`] of lockd's server: their
/// HTTP routes on its listener ([`Routes`]), and Dapr's gRPC API on a
/// listener of its own when given an address.
#[derive(Clone, Copy, Debug, Default)]
pub struct Compat {
    dapr_grpc_listen: Option<SocketAddr>,
}

impl Compat {
    /// The compatibility APIs, with Dapr's gRPC API on `dapr_grpc_listen`
    /// if given (`lockd serve --dapr-grpc-listen`).
    pub fn new(dapr_grpc_listen: Option<SocketAddr>) -> Self {
        Compat { dapr_grpc_listen }
    }
}

impl Extension for Compat {
    fn prepare(self: Box<Self>, server: &Context<'_>) -> anyhow::Result<Extended> {
        let dapr_config = &server.config.dapr;
        let stores = LockStores::load(dapr_config, |namespace| {
            server
                .service
                .check_namespace(namespace)
                .map_err(|e| e.to_string())
        })?;
        let start_up = stores.start_up_line(dapr_config.components.as_deref());
        let folder_without_stores = dapr_config.components.is_some()
            && matches!(&stores, LockStores::Declared(declared) if declared.is_empty());
        if folder_without_stores || stores == LockStores::AnyName {
            // A folder without lock stores fails every Dapr lock call, most
            // likely not what the operator meant; any_store lets a typo
            // split two services' locks.
            tracing::warn!("{start_up}");
        } else {
            tracing::info!("{start_up}");
        }
        let dapr = dapr::DaprLocks::new(server.service.clone(), dapr_config.durability())
            .with_stores(stores);
        let routes = Routes::new(server.service.clone(), dapr, server.api.clone());
        let side_listeners = match self.dapr_grpc_listen {
            Some(addr) => vec![
                dapr_grpc::DaprGrpc::new(routes.dapr.clone(), server.api.clone()).listener(addr),
            ],
            None => Vec::new(),
        };
        Ok(Extended {
            mounts: vec![(Precedence::BeforeOwn, Arc::new(routes))],
            side_listeners,
        })
    }
}

/// The compatibility routes of one server, after the token check of its
/// API.
#[derive(Debug)]
pub struct Routes {
    dapr: dapr::DaprLocks,
    service: LockService,
    api: Arc<Api>,
}

impl Routes {
    /// The compatibility routes over `service`, Dapr's through `dapr`;
    /// `api` checks every caller's token.
    pub fn new(service: LockService, dapr: dapr::DaprLocks, api: Arc<Api>) -> Self {
        Routes { dapr, service, api }
    }

    /// Whether `path` is a compatibility route. None of them is one of
    /// lockd's own (`lockd_api::Route`), so the two never shadow each other.
    pub fn owns(path: &str) -> bool {
        dapr_http::owns(path) || kahuna::owns(path)
    }

    /// Answers a request to a path [`Routes::owns`], after the API's token
    /// check.
    pub async fn handle<B>(&self, req: Request<B>) -> Response<Body>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn StdError + Send + Sync>>,
    {
        let api = &self.api;
        let path = req.uri().path().to_string();
        let refusal = if kahuna::owns(&path) {
            api.authorize(&req, Route::Lock, Some(DEFAULT_NAMESPACE))
        } else if let Some(store) = dapr_http::store_of(&path) {
            match self.dapr.namespace_of(&store) {
                Some(namespace) => api.authorize(&req, Route::Lock, Some(namespace)),
                // Dapr's error for a store that is not declared needs
                // only a known token: it names no namespace.
                None => api.check_known_token(&req),
            }
        } else if req.method() == hyper::Method::GET && dapr_http::is_health_probe(&path) {
            None
        } else {
            api.check_known_token(&req)
        };
        if let Some(refusal) = refusal {
            // Read what the client is sending before refusing it: an
            // HTTP/2 answer sent while the request's body is still coming
            // ends with a stream reset, which curl 7.88 reports as
            // "(92) Stream error in the HTTP/2 framing layer" instead of
            // the 401 or 403 (one run in eight here). The read is bounded
            // as any body is.
            let _ = read_body(req).await;
            return refusal;
        }
        if kahuna::owns(&path) {
            return kahuna::handle(&self.service, req).await;
        }
        dapr_http::handle(&self.dapr, req).await
    }
}

impl Mount for Routes {
    fn claims(&self, path: &str) -> bool {
        Routes::owns(path)
    }

    fn handle(&self, req: Request<Incoming>) -> BoxFuture<'_, Response<Body>> {
        Box::pin(Routes::handle(self, req))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_compatibility_route_is_one_of_lockds_own() {
        for path in kahuna::PATHS.iter().chain(dapr_http::FIXED_PATHS) {
            assert!(Routes::owns(path), "{path}");
            assert_eq!(Route::from_path(path), None, "{path}");
        }
        assert!(Routes::owns("/v1.0-alpha1/lock/default"));
        assert!(Routes::owns("/v1.0-alpha1/unlock/jobs"));
        for path in Route::ALL.map(Route::path) {
            assert!(!Routes::owns(path), "{path}");
        }
        // lockd's 404 for other /v1/ paths stays lockd's.
        assert!(!Routes::owns("/v1/locks/try-lockx"));
        assert!(!Routes::owns("/v1/locks/"));
        assert!(!Routes::owns("/v1.0-alpha1/lock/"));
        assert!(!Routes::owns("/v1.0-alpha1/lock/a/b"));
    }
}
