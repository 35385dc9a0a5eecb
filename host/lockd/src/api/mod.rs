//! The REST API (design.md §4): JSON over HTTP/1.1 for non-wasm clients and
//! the CLI.

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use lockd_core::LockService;

use crate::serve::{full, Body};

/// lockd's own routes.
#[derive(Debug)]
pub struct Api {
    service: LockService,
    auth_token: Option<String>,
}

impl Api {
    /// The API over `service`, guarded by `auth_token` when given.
    pub fn new(service: LockService, auth_token: Option<String>) -> Self {
        Api { service, auth_token }
    }

    /// Whether `path` is one of lockd's own routes.
    pub fn owns(path: &str) -> bool {
        path == "/v1/locks"
            || path.starts_with("/v1/")
            || matches!(path, "/metrics" | "/healthz" | "/openapi.json")
    }

    /// Answers one request.
    pub async fn handle(&self, req: Request<Incoming>) -> Response<Body> {
        let _ = (&self.service, &self.auth_token, req);
        let mut response = Response::new(full("not implemented yet"));
        *response.status_mut() = StatusCode::NOT_IMPLEMENTED;
        response
    }
}
