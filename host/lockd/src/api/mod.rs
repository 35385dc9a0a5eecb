//! The REST API (docs/http.md, docs/contract.md#errors): JSON over HTTP/1.1 for non-wasm clients and
//! the CLI. `docs/openapi.json` describes it and is served at
//! `/openapi.json`; `tests/rest.rs` keeps the two in agreement.
//!
//! Every status word and HTTP code of a lock outcome comes from one function,
//! [`error_response`]; everything else (auth, routing, body limits) answers
//! before the [`LockService`] is called, so bad input never reaches a store.

mod sse;
pub mod wire;

use std::error::Error as StdError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use lockd_core::{Durability, ErrorKind, LockError, LockOptions, LockService};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::http_body::{full, Body};
use wire::{
    BusyReply, ErrorReply, EventQuery, ExtendRequest, ForceUnlockRequest, FoundReply, GetRequest,
    GrantReply, LeaseFoundReply, LeaseGrantRequest, LeaseGrantedReply, LeaseRefreshedReply,
    LeaseRequest, LeaseRevokedReply, ListQuery, ListReply, LockHolder, LockRequest, ReleasedReply,
    Status, StatusReply, UnlockRequest,
};

pub use sse::{HEARTBEAT, HEARTBEAT_ENV};

/// Largest request body accepted, in bytes.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// The namespace of requests that name none.
pub const DEFAULT_NAMESPACE: &str = "default";

/// The OpenAPI 3 document of this API, as served at `/openapi.json`.
pub const OPENAPI_JSON: &str = include_str!("../../../../docs/openapi.json");

/// The content type of `/metrics` (Prometheus text exposition format).
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4";

/// lockd's own routes.
#[derive(Debug)]
pub struct Api {
    service: LockService,
    auth_token: Option<String>,
    /// How often an idle event stream sends a heartbeat comment.
    heartbeat: Duration,
    /// Event streams open now (`lockd_event_streams`).
    event_streams: Arc<AtomicU64>,
}

/// One of lockd's own routes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    Lock,
    Unlock,
    Extend,
    Get,
    List,
    ForceUnlock,
    Events,
    LeaseGrant,
    LeaseRefresh,
    LeaseRevoke,
    LeaseGet,
    Metrics,
    Healthz,
    OpenApi,
}

impl Route {
    fn of(path: &str) -> Option<Route> {
        Some(match path {
            LockRequest::PATH => Route::Lock,
            UnlockRequest::PATH => Route::Unlock,
            ExtendRequest::PATH => Route::Extend,
            GetRequest::PATH => Route::Get,
            wire::LIST_PATH => Route::List,
            ForceUnlockRequest::PATH => Route::ForceUnlock,
            wire::EVENTS_PATH => Route::Events,
            LeaseGrantRequest::PATH => Route::LeaseGrant,
            LeaseRequest::REFRESH_PATH => Route::LeaseRefresh,
            LeaseRequest::REVOKE_PATH => Route::LeaseRevoke,
            LeaseRequest::GET_PATH => Route::LeaseGet,
            "/metrics" => Route::Metrics,
            "/healthz" => Route::Healthz,
            "/openapi.json" => Route::OpenApi,
            _ => return None,
        })
    }

    fn method(self) -> Method {
        match self {
            Route::Lock
            | Route::Unlock
            | Route::Extend
            | Route::Get
            | Route::ForceUnlock
            | Route::LeaseGrant
            | Route::LeaseRefresh
            | Route::LeaseRevoke
            | Route::LeaseGet => Method::POST,
            Route::List | Route::Events | Route::Metrics | Route::Healthz | Route::OpenApi => {
                Method::GET
            }
        }
    }

    /// The `Allow` header of the route.
    fn allow(self) -> &'static str {
        if self.method() == Method::POST {
            "POST"
        } else {
            "GET"
        }
    }
}

impl Api {
    /// The API over `service`, guarded by `auth_token` when given. An empty
    /// token guards nothing, so it counts as none. Event streams send a
    /// heartbeat every [`HEARTBEAT`], or every `LOCKD_EVENTS_HEARTBEAT_MS`
    /// milliseconds if that is set (for tests).
    pub fn new(service: LockService, auth_token: Option<String>) -> Self {
        let auth_token = auth_token.filter(|t| !t.is_empty());
        Api {
            service,
            auth_token,
            heartbeat: sse::heartbeat_from_env(),
            event_streams: Arc::default(),
        }
    }

    /// Whether `path` is one of lockd's own routes.
    pub fn owns(path: &str) -> bool {
        path == wire::LIST_PATH
            || path.starts_with("/v1/")
            || matches!(path, "/metrics" | "/healthz" | "/openapi.json")
    }

    /// Answers one request. Never panics on client input: every failure is a
    /// JSON body with a `status` word and a `message`.
    pub async fn handle<B>(&self, req: Request<B>) -> Response<Body>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn StdError + Send + Sync>>,
    {
        let path = req.uri().path().to_string();
        let route = Route::of(&path);
        // Everything but /healthz needs the token, unknown paths included, so
        // an unauthenticated caller learns nothing about the routes.
        if route != Some(Route::Healthz) {
            if let Some(refusal) = self.check_auth(&req, route == Some(Route::Events)) {
                return refusal;
            }
        }
        if route.is_some() {
            tracing::Span::current().record("route", path.as_str());
        }
        let Some(route) = route else {
            return failure(
                StatusCode::NOT_FOUND,
                Status::NotFound,
                format!("no route {path}; see /openapi.json for the API"),
            );
        };
        if req.method() != route.method() {
            let allowed = route.method();
            let mut response = failure(
                StatusCode::METHOD_NOT_ALLOWED,
                Status::InvalidArgument,
                format!("{path} takes {allowed}, not {}", req.method()),
            );
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static(route.allow()));
            return response;
        }
        let result = match route {
            Route::Lock => self.lock(req).await,
            Route::Unlock => self.unlock(req).await,
            Route::Extend => self.extend(req).await,
            Route::Get => self.get(req).await,
            Route::List => self.list(req.uri().query().unwrap_or("")).await,
            Route::ForceUnlock => self.force_unlock(req).await,
            Route::Events => self.events(req.uri().query().unwrap_or("")).await,
            Route::LeaseGrant => self.grant_lease(req).await,
            Route::LeaseRefresh => self.refresh_lease(req).await,
            Route::LeaseRevoke => self.revoke_lease(req).await,
            Route::LeaseGet => self.get_lease(req).await,
            Route::Metrics => Ok(text(StatusCode::OK, METRICS_CONTENT_TYPE, self.metrics())),
            Route::Healthz => Ok(json_response(
                StatusCode::OK,
                &StatusReply { status: Status::Ok },
            )),
            Route::OpenApi => Ok(text(StatusCode::OK, "application/json", OPENAPI_JSON)),
        };
        match result {
            Ok(response) => {
                record_outcome("ok");
                response
            }
            // Refusals recorded their status word as they were built.
            Err(response) => response,
        }
    }

    /// `None` when the request may pass, else the 401 to answer. With
    /// `query_token` (`/v1/events` only: a browser's `EventSource` cannot
    /// send headers), a request without an `Authorization` header may give
    /// the token as the query parameter `access_token`.
    fn check_auth<B>(&self, req: &Request<B>, query_token: bool) -> Option<Response<Body>> {
        let expected = self.auth_token.as_deref()?;
        let from_query;
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, token) = v.trim().split_once(' ')?;
                scheme
                    .eq_ignore_ascii_case("bearer")
                    .then_some(token.trim_start())
            });
        let given = match given {
            Some(token) => Some(token),
            None if query_token => {
                from_query = EventQuery::parse(req.uri().query().unwrap_or(""))
                    .ok()
                    .and_then(|q| q.access_token);
                from_query.as_deref()
            }
            None => None,
        };
        let message = match given {
            None => {
                "this server requires a bearer token: send 'Authorization: Bearer <token>' \
                     (the lockd CLI takes --auth-token or LOCKD_AUTH_TOKEN)"
            }
            Some(token) if constant_time_eq(token.as_bytes(), expected.as_bytes()) => return None,
            Some(_) => "the bearer token is wrong; use the token the server was started with",
        };
        let mut response = failure(
            StatusCode::UNAUTHORIZED,
            Status::Unauthorized,
            message.to_string(),
        );
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        Some(response)
    }

    async fn lock<B>(&self, req: Request<B>) -> Result<Response<Body>, Response<Body>>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn StdError + Send + Sync>>,
    {
        let r: LockRequest = read_json(req).await?;
        let holder = r.holder().map_err(invalid_argument)?;
        let wait_ms = r.wait_ms.unwrap_or(0);
        let namespace = r.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
        record_namespace(namespace);
        // A waiting lock parks here, in the engine's FIFO queue. If the client
        // hangs up, hyper drops this future and the waiter leaves the queue.
        let grant = match holder {
            LockHolder::Owner { owner, ttl_ms } => {
                let options = LockOptions {
                    wait_ms,
                    durability: r.durability.map_or(Durability::Persistent, Into::into),
                    ..LockOptions::default()
                };
                self.service
                    .lock(namespace, &r.name, owner, ttl_ms, options)
                    .await
                    .map_err(|e| error_response(&e))?
            }
            LockHolder::Lease { lease_id } => self
                .service
                .lock_in_lease(namespace, &r.name, lease_id, wait_ms)
                .await
                .map_err(|e| lease_error(&e, lease_id))?,
        };
        Ok(json_response(StatusCode::OK, &GrantReply::acquired(grant)))
    }

    async fn unlock<B>(&self, req: Request<B>) -> Result<Response<Body>, Response<Body>>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn StdError + Send + Sync>>,
    {
        let r: UnlockRequest = read_json(req).await?;
        let namespace = r.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
        record_namespace(namespace);
        self.service
            .unlock(namespace, &r.name, &r.owner, r.fencing_token)
            .await
            .map_err(|e| error_response(&e))?;
        Ok(json_response(
            StatusCode::OK,
            &StatusReply {
                status: Status::Unlocked,
            },
        ))
    }

    async fn extend<B>(&self, req: Request<B>) -> Result<Response<Body>, Response<Body>>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn StdError + Send + Sync>>,
    {
        let r: ExtendRequest = read_json(req).await?;
        let namespace = r.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
        record_namespace(namespace);
        let grant = self
            .service
            .extend(namespace, &r.name, &r.owner, r.ttl_ms)
            .await
            .map_err(|e| error_response(&e))?;
        Ok(json_response(StatusCode::OK, &GrantReply::extended(grant)))
    }

    async fn get<B>(&self, req: Request<B>) -> Result<Response<Body>, Response<Body>>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn StdError + Send + Sync>>,
    {
        let r: GetRequest = read_json(req).await?;
        let namespace = r.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
        record_namespace(namespace);
        let info = self
            .service
            .get(namespace, &r.name)
            .await
            .map_err(|e| error_response(&e))?;
        Ok(match info {
            Some(info) => json_response(StatusCode::OK, &FoundReply::from(info)),
            None => json_response(
                StatusCode::NOT_FOUND,
                &StatusReply {
                    status: Status::NotFound,
                },
            ),
        })
    }

    async fn grant_lease<B>(&self, req: Request<B>) -> Result<Response<Body>, Response<Body>>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn StdError + Send + Sync>>,
    {
        let r: LeaseGrantRequest = read_json(req).await?;
        let namespace = r.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
        record_namespace(namespace);
        let durability = r.durability.map_or(Durability::Persistent, Into::into);
        let grant = self
            .service
            .grant_lease(namespace, r.ttl_ms, durability)
            .await
            .map_err(|e| error_response(&e))?;
        Ok(json_response(
            StatusCode::OK,
            &LeaseGrantedReply::from(grant),
        ))
    }

    async fn refresh_lease<B>(&self, req: Request<B>) -> Result<Response<Body>, Response<Body>>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn StdError + Send + Sync>>,
    {
        let r: LeaseRequest = read_json(req).await?;
        let namespace = r.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
        record_namespace(namespace);
        let expires_at_ms = self
            .service
            .refresh_lease(namespace, &r.lease_id)
            .await
            .map_err(|e| lease_error(&e, &r.lease_id))?;
        Ok(json_response(
            StatusCode::OK,
            &LeaseRefreshedReply::new(expires_at_ms),
        ))
    }

    async fn revoke_lease<B>(&self, req: Request<B>) -> Result<Response<Body>, Response<Body>>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn StdError + Send + Sync>>,
    {
        let r: LeaseRequest = read_json(req).await?;
        let namespace = r.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
        record_namespace(namespace);
        let released = self
            .service
            .revoke_lease(namespace, &r.lease_id)
            .await
            .map_err(|e| lease_error(&e, &r.lease_id))?;
        Ok(json_response(
            StatusCode::OK,
            &LeaseRevokedReply::new(released),
        ))
    }

    async fn get_lease<B>(&self, req: Request<B>) -> Result<Response<Body>, Response<Body>>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn StdError + Send + Sync>>,
    {
        let r: LeaseRequest = read_json(req).await?;
        let namespace = r.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
        record_namespace(namespace);
        let info = self
            .service
            .get_lease(namespace, &r.lease_id)
            .await
            .map_err(|e| lease_error(&e, &r.lease_id))?;
        // Unlike a free lock (404 `not_found`), a lease that is not live is
        // `not_held`, as every other lease route answers it.
        let info = info.ok_or_else(|| lease_error(&LockError::NotHeld, &r.lease_id))?;
        Ok(json_response(StatusCode::OK, &LeaseFoundReply::from(info)))
    }

    /// `/metrics`: the service's metrics and the open event streams.
    fn metrics(&self) -> String {
        let mut out = self.service.render_metrics();
        out.push_str(
            "# HELP lockd_event_streams Open GET /v1/events streams.\n\
             # TYPE lockd_event_streams gauge\n",
        );
        let open = self.event_streams.load(Ordering::Relaxed);
        out.push_str(&format!("lockd_event_streams {open}\n"));
        out
    }

    async fn force_unlock<B>(&self, req: Request<B>) -> Result<Response<Body>, Response<Body>>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn StdError + Send + Sync>>,
    {
        let r: ForceUnlockRequest = read_json(req).await?;
        let namespace = r.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
        record_namespace(namespace);
        let released = self
            .service
            .force_unlock(namespace, &r.name)
            .await
            .map_err(|e| error_response(&e))?;
        // The core logs it (a warning naming the lock, owner and token),
        // inside this request's span.
        Ok(json_response(
            StatusCode::OK,
            &ReleasedReply::from(released),
        ))
    }

    /// `GET /v1/events`: a stream that runs until the client hangs up, the
    /// client falls behind (`lagged`) or the store goes away.
    async fn events(&self, query: &str) -> Result<Response<Body>, Response<Body>> {
        let query = EventQuery::parse(query).map_err(invalid_argument)?;
        if let Some(namespace) = &query.namespace {
            record_namespace(namespace);
        }
        let Some(events) = self.service.events() else {
            return Err(failure(
                StatusCode::SERVICE_UNAVAILABLE,
                Status::Unavailable,
                "this store publishes no events".to_string(),
            ));
        };
        let body = sse::stream(events, query, self.heartbeat, self.event_streams.clone());
        let mut response = Response::new(body);
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        // Proxies such as nginx would otherwise hold events back.
        headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
        Ok(response)
    }

    async fn list(&self, query: &str) -> Result<Response<Body>, Response<Body>> {
        let query = ListQuery::parse(query).map_err(invalid_argument)?;
        let namespace = query.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
        record_namespace(namespace);
        let locks = self
            .service
            .list(namespace, query.prefix.as_deref().unwrap_or(""))
            .await
            .map_err(|e| error_response(&e))?;
        Ok(json_response(StatusCode::OK, &ListReply::new(locks)))
    }
}

/// The one mapping of lock errors to HTTP: the status word is the error's
/// [`kind`](LockError::kind), the body a [`BusyReply`] (with the holder) or
/// an [`ErrorReply`].
pub fn error_response(err: &LockError) -> Response<Body> {
    error_response_saying(err, err.to_string())
}

/// [`error_response`] for a call that names a lease: `not_held` there means
/// the lease is not live, and the message says so.
fn lease_error(err: &LockError, lease_id: &str) -> Response<Body> {
    match err {
        LockError::NotHeld => error_response_saying(
            err,
            format!("lease {lease_id:?} is not live: unknown, revoked or expired"),
        ),
        _ => error_response(err),
    }
}

/// [`error_response`] with `message` in place of the error's own.
fn error_response_saying(err: &LockError, message: String) -> Response<Body> {
    let kind = err.kind();
    let code = match kind {
        ErrorKind::Busy | ErrorKind::NotOwner | ErrorKind::NotHeld => StatusCode::CONFLICT,
        ErrorKind::InvalidArgument => StatusCode::BAD_REQUEST,
        ErrorKind::Denied => StatusCode::FORBIDDEN,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        // A kind added to the core later: its outcome is unknown to this
        // surface, which is what `unavailable` (its status word) says.
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    match err {
        LockError::Busy(holder) => {
            record_outcome(kind.as_str());
            json_response(code, &BusyReply::new(holder, message))
        }
        _ => failure(code, Status::from(kind), message),
    }
}

/// Reads a JSON body of at most [`MAX_BODY_BYTES`] into `T`.
async fn read_json<T, B>(req: Request<B>) -> Result<T, Response<Body>>
where
    T: DeserializeOwned,
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let too_large = || {
        let mut response = failure(
            StatusCode::PAYLOAD_TOO_LARGE,
            Status::InvalidArgument,
            format!("body over {MAX_BODY_BYTES} bytes"),
        );
        // The rest of the body is never read, so the connection cannot be reused.
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        response
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(too_large());
    }
    let bytes = match Limited::new(req.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => return Err(too_large()),
        Err(e) => {
            return Err(invalid_argument(format!(
                "cannot read the request body: {e}"
            )))
        }
    };
    serde_json::from_slice(&bytes)
        .map_err(|e| invalid_argument(format!("invalid request body: {e}")))
}

fn invalid_argument(message: String) -> Response<Body> {
    failure(StatusCode::BAD_REQUEST, Status::InvalidArgument, message)
}

fn failure(code: StatusCode, status: Status, message: String) -> Response<Body> {
    record_outcome(status.as_str());
    json_response(code, &ErrorReply { message, status })
}

/// Fills in the request span's `namespace` (see `serve::Router::route`).
fn record_namespace(namespace: &str) {
    tracing::Span::current().record("namespace", namespace);
}

/// Fills in the request span's `outcome`: `ok`, or the refusal's status word.
fn record_outcome(word: &'static str) {
    tracing::Span::current().record("outcome", word);
}

fn json_response(code: StatusCode, body: &impl Serialize) -> Response<Body> {
    match serde_json::to_vec(body) {
        Ok(json) => text(code, "application/json", json),
        // The wire types hold strings and integers only, so this cannot
        // happen; if it did, the client learns it without a panic.
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain",
            format!("cannot encode the response: {e}"),
        ),
    }
}

fn text(code: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(full(body));
    *response.status_mut() = code;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// Compares without stopping at the first difference, so the time taken
/// does not tell how much of a guessed token was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= std::hint::black_box(x ^ y);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[test]
    fn constant_time_eq_compares() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn routes_have_one_method() {
        for path in [
            "/v1/locks/lock",
            "/v1/locks/unlock",
            "/v1/locks/extend",
            "/v1/locks/get",
            "/v1/locks",
            "/v1/locks/force-unlock",
            "/v1/events",
            "/v1/leases/grant",
            "/v1/leases/refresh",
            "/v1/leases/revoke",
            "/v1/leases/get",
            "/metrics",
            "/healthz",
            "/openapi.json",
        ] {
            assert!(Api::owns(path), "{path}");
            assert!(Route::of(path).is_some(), "{path}");
        }
        assert!(Route::of("/v1/locks/").is_none());
    }

    fn body_of(response: Response<Body>) -> Value {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let bytes = rt
            .block_on(response.into_body().collect())
            .unwrap()
            .to_bytes();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[test]
    fn one_mapping_from_lock_errors_to_http() {
        let holder = lockd_core::LockInfo {
            owner: "w1".to_string(),
            fencing_token: u64::MAX,
            expires_at_ms: 42,
            durability: Durability::Ephemeral,
        };
        let cases = [
            (LockError::Busy(holder), 409, "busy"),
            (LockError::NotOwner, 409, "not_owner"),
            (LockError::NotHeld, 409, "not_held"),
            (
                LockError::InvalidArgument("x".into()),
                400,
                "invalid_argument",
            ),
            (LockError::Denied("quota".into()), 403, "denied"),
            (LockError::Unavailable("disk".into()), 503, "unavailable"),
        ];
        for (err, code, word) in cases {
            let response = error_response(&err);
            assert_eq!(response.status().as_u16(), code, "{err:?}");
            assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
            let body = body_of(response);
            assert_eq!(body["status"], word);
            assert_eq!(body["message"], err.to_string());
        }
        let busy = body_of(error_response(&LockError::Busy(lockd_core::LockInfo {
            owner: "w1".to_string(),
            fencing_token: u64::MAX,
            expires_at_ms: 42,
            durability: Durability::Ephemeral,
        })));
        // u64 tokens stay exact JSON numbers.
        assert_eq!(busy["fencing_token"].as_u64(), Some(u64::MAX));
        assert_eq!(busy["owner"], "w1");
        assert_eq!(busy["expires_at_ms"], 42);
        assert_eq!(busy["durability"], "ephemeral");
    }

    #[test]
    fn openapi_document_is_json() {
        let doc: Value = serde_json::from_str(OPENAPI_JSON).unwrap();
        assert_eq!(doc["openapi"], "3.0.3");
    }
}
