//! The REST API (docs/reference.md, docs/contract.md#errors): JSON over HTTP/1.1
//! for non-wasm clients and the CLI. Its bodies, words and routes are the
//! types of `lockd-api`; `docs/openapi.json` describes them and is served
//! at `/openapi.json`, and `host/lockd/tests/rest.rs` keeps the two in
//! agreement.
//!
//! [`Api::handle`] authenticates the caller, checks its token's rate limit
//! and its role (the private `access` module, over the rules of
//! [`crate::auth`] and [`crate::rate_limit`]), routes the request, reads its
//! body once into the route's request type and hands that to the route's handler,
//! which returns the route's reply type or why it refused (`Refused`).
//! Every status word and HTTP code of a lock outcome comes from one
//! function, [`error_response`]; everything else (auth, routing, body
//! limits) answers before the [`LockService`] is called, so bad input never
//! reaches a store. Each handler checks the namespace it is asked about
//! against the caller's before it calls the service.

mod access;
mod admin;
mod elections;
mod reply;
mod sse;

use std::error::Error as StdError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use lockd_api::{
    EventQuery, ExtendRequest, ForceUnlockRequest, GetReply, GetRequest, GrantReply,
    LeaseFoundReply, LeaseGrantRequest, LeaseGrantedReply, LeaseRefreshedReply, LeaseRequest,
    LeaseRevokedReply, ListQuery, ListReply, LockHolder, LockRequest, Method, NamespaceSummary,
    NamespacesReply, ReleasedReply, Route, Status, StatusReply, UnlockRequest,
};
use lockd_core::{Durability, LockError, LockOptions, LockService};

use self::access::{namespace, record_namespace, Asker};
use self::reply::{answer, call, failure, text, Refused};
use crate::auth::{Caller, Credential, Credentials, LiveCredentials, Role};
use crate::body::Body;
use crate::serve::ready::ReadyCheck;

pub use access::PeerAddr;
pub use reply::error_response;

pub use lockd_api::{DEFAULT_NAMESPACE, MAX_BODY_BYTES};
pub use sse::HEARTBEAT;

/// The OpenAPI 3 document of this API, as served at `/openapi.json`.
// Read from the crate's copy of `docs/openapi.json` (a published crate
// carries nothing from outside its directory);
// host/test-support/tests/packaged_copies.rs fails when the two differ.
pub const OPENAPI_JSON: &str = include_str!("../../openapi.json");

/// The content type of `/metrics` (Prometheus text exposition format).
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4";

/// How the API behaves, beyond the service it fronts. Its `Debug` shows
/// no token.
#[derive(Clone)]
pub struct ApiOptions {
    /// The tokens it accepts, with their namespaces and roles (lockd.toml's
    /// `[[auth.tokens]]` and the `--auth-token`); none: no authentication.
    pub credentials: Credentials,
    /// How often an idle event stream sends a `: heartbeat` comment, so
    /// that proxies and clients see it alive; [`HEARTBEAT`] by default and
    /// if zero.
    pub events_heartbeat: Duration,
    /// The redb store the service serves, which `POST /v1/admin/snapshot`
    /// snapshots; `None` for another store (the route then says so).
    pub snapshots: Option<lockd_redb::Store>,
}

impl std::fmt::Debug for ApiOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiOptions")
            .field("credentials", &self.credentials)
            .field("events_heartbeat", &self.events_heartbeat)
            .field(
                "snapshots",
                &self.snapshots.as_ref().map(|s| s.path().to_path_buf()),
            )
            .finish()
    }
}

impl Default for ApiOptions {
    fn default() -> Self {
        ApiOptions {
            credentials: Credentials::default(),
            events_heartbeat: HEARTBEAT,
            snapshots: None,
        }
    }
}

/// lockd's own routes.
#[derive(Debug)]
pub struct Api {
    service: LockService,
    /// The redb store `service` serves, which `POST /v1/admin/snapshot`
    /// snapshots; `None` for another store.
    snapshots: Option<lockd_redb::Store>,
    credentials: LiveCredentials,
    /// How often an idle event stream sends a heartbeat comment.
    heartbeat: Duration,
    /// Event streams open now (`lockd_event_streams`).
    event_streams: Arc<AtomicU64>,
    /// The last readiness check of the store (`/readyz`, `/metrics`).
    ready: ReadyCheck,
}

impl Api {
    /// The API over `service`, guarded by `auth_token` (an admin token over
    /// every namespace) when given, with the other options' defaults. An
    /// empty token guards nothing, so it counts as none.
    pub fn new(service: LockService, auth_token: Option<String>) -> Self {
        let tokens = auth_token
            .filter(|t| !t.is_empty())
            .map(|t| Credential::from_flag(&t));
        Api::with_options(
            service,
            ApiOptions {
                credentials: Credentials::new(tokens.into_iter().collect()),
                ..ApiOptions::default()
            },
        )
    }

    /// The API over `service`.
    pub fn with_options(service: LockService, options: ApiOptions) -> Self {
        Api {
            snapshots: options.snapshots,
            service,
            credentials: LiveCredentials::new(options.credentials),
            // A zero period would make tokio's interval panic.
            heartbeat: Some(options.events_heartbeat)
                .filter(|every| !every.is_zero())
                .unwrap_or(HEARTBEAT),
            event_streams: Arc::default(),
            ready: ReadyCheck::default(),
        }
    }

    /// The tokens it accepts, which the server replaces on SIGHUP
    /// ([`LiveCredentials::replace`]).
    pub fn credentials(&self) -> &LiveCredentials {
        &self.credentials
    }

    /// `None` if the request's token may make calls like `route` in
    /// `namespace`, else the 401 or 403 to answer (logged with the token's
    /// name, the peer and the request's path): the token check for other
    /// surfaces on the same listener, with the same tokens, headers and
    /// logging as lockd's own routes. With `namespace` `None` (a surface
    /// that cannot tell the namespace before it answers), the token must
    /// cover every namespace (`"*"`).
    pub fn authorize<B>(
        &self,
        req: &Request<B>,
        route: Route,
        namespace: Option<&str>,
    ) -> Option<Response<Body>> {
        access::authorize(&self.credentials, req, route, namespace)
    }

    /// `None` if the request carries a known token (any role, any
    /// namespaces), else the 401 to answer (logged). For calls that reveal
    /// nothing about any namespace, such as Dapr's `GET /v1.0/metadata`,
    /// which the SDKs make before their first lock call.
    pub fn check_known_token<B>(&self, req: &Request<B>) -> Option<Response<Body>> {
        access::check_known_token(&self.credentials, req)
    }

    /// Whether `path` is one of lockd's own routes, or under `/v1/`.
    pub fn owns(path: &str) -> bool {
        path.starts_with("/v1/") || Route::from_path(path).is_some()
    }

    /// Answers one request. Never panics on client input: every failure is a
    /// JSON body with a `status` word and a `message`.
    pub async fn handle<B>(&self, req: Request<B>) -> Response<Body>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn StdError + Send + Sync>>,
    {
        let path = req.uri().path().to_string();
        let route = Route::from_path(&path);
        let peer = access::peer_of(&req);
        // Everything but the probes (/healthz, /livez, /readyz) needs a
        // token, unknown paths included, so an unauthenticated caller
        // learns nothing about the routes.
        let tokens = self.credentials.current();
        let caller = if route.is_some_and(|r| Role::needed_for(r).is_none()) {
            Caller::Anyone
        } else {
            match access::authenticate(&tokens, &req, route, peer) {
                Ok(caller) => caller,
                Err(refusal) => return access::unauthorized(refusal),
            }
        };
        if let Some(refused) = access::over_rate_limit(caller, peer, &path) {
            return refused;
        }
        let Some(route) = route else {
            return failure(
                StatusCode::NOT_FOUND,
                Status::NotFound,
                format!("no route {path}; see /openapi.json for the API"),
            );
        };
        tracing::Span::current().record("route", route.path());
        let allowed = match route.method() {
            Method::Get => hyper::Method::GET,
            Method::Post => hyper::Method::POST,
        };
        if req.method() != allowed {
            let mut response = failure(
                StatusCode::METHOD_NOT_ALLOWED,
                Status::InvalidArgument,
                format!("{path} takes {allowed}, not {}", req.method()),
            );
            response.headers_mut().insert(
                header::ALLOW,
                HeaderValue::from_static(route.method().as_str()),
            );
            return response;
        }
        let a = Asker {
            caller,
            peer,
            route,
        };
        if let Err(refused) = a.check_route() {
            return refused.into_response();
        }
        match route {
            Route::Lock => call(req, |r| self.lock(a, r)).await,
            Route::Unlock => call(req, |r| self.unlock(a, r)).await,
            Route::Extend => call(req, |r| self.extend(a, r)).await,
            Route::Get => call(req, |r| self.get(a, r)).await,
            Route::ForceUnlock => call(req, |r| self.force_unlock(a, r)).await,
            Route::Snapshot => answer(admin::snapshot(self.snapshots.as_ref(), a).await),
            Route::LeaseGrant => call(req, |r| self.grant_lease(a, r)).await,
            Route::LeaseRefresh => call(req, |r| self.refresh_lease(a, r)).await,
            Route::LeaseRevoke => call(req, |r| self.revoke_lease(a, r)).await,
            Route::LeaseGet => call(req, |r| self.get_lease(a, r)).await,
            Route::Campaign => call(req, |r| elections::campaign(&self.service, a, r)).await,
            Route::Proclaim => call(req, |r| elections::proclaim(&self.service, a, r)).await,
            Route::Resign => call(req, |r| elections::resign(&self.service, a, r)).await,
            Route::Leader => call(req, |r| elections::leader(&self.service, a, r)).await,
            Route::List => answer(self.list(a, req.uri().query().unwrap_or("")).await),
            Route::Events => answer(self.events(a, req.uri().query().unwrap_or(""), &req)),
            Route::Namespaces => answer(self.namespaces(a).await),
            Route::Metrics => self.metrics_with_readiness().await,
            Route::Livez => answer(Ok(StatusReply { status: Status::Ok })),
            Route::Readyz => answer(Ok(self.ready.check(&self.service).await.reply())),
            Route::Healthz => answer(
                self.service
                    .health()
                    .await
                    .map(|()| StatusReply { status: Status::Ok })
                    .map_err(Refused::from),
            ),
            Route::OpenApi => answer(Ok(text(StatusCode::OK, "application/json", OPENAPI_JSON))),
        }
    }

    async fn lock(&self, a: Asker<'_>, r: LockRequest) -> Result<GrantReply, Refused> {
        let holder = r.holder().map_err(Refused::InvalidArgument)?;
        let claim = r.claim().map_err(Refused::InvalidArgument)?;
        let wait_ms = r.wait_ms.unwrap_or(0);
        let namespace = namespace(a, r.namespace.as_deref())?;
        // A waiting lock parks here, in the engine's FIFO queue. If the client
        // hangs up, hyper drops this future and the waiter leaves the queue.
        let grant = match holder {
            LockHolder::Owner { owner, ttl_ms } => {
                let options = LockOptions {
                    wait_ms,
                    durability: r.durability.map_or(Durability::Persistent, Into::into),
                    claim: claim.into(),
                    ..LockOptions::default()
                };
                self.service
                    .lock(namespace, &r.name, owner, ttl_ms, options)
                    .await?
            }
            // `claim` refused anything but exclusive under a lease.
            LockHolder::Lease { lease_id } => self
                .service
                .lock_in_lease(namespace, &r.name, lease_id, wait_ms)
                .await
                .map_err(|e| Refused::Lease(e, lease_id.to_string()))?,
        };
        Ok(GrantReply::acquired(grant))
    }

    async fn unlock(&self, a: Asker<'_>, r: UnlockRequest) -> Result<StatusReply, Refused> {
        let namespace = namespace(a, r.namespace.as_deref())?;
        self.service
            .unlock(namespace, &r.name, &r.owner, r.fencing_token)
            .await?;
        Ok(StatusReply {
            status: Status::Unlocked,
        })
    }

    async fn extend(&self, a: Asker<'_>, r: ExtendRequest) -> Result<GrantReply, Refused> {
        let namespace = namespace(a, r.namespace.as_deref())?;
        let grant = self
            .service
            .extend(namespace, &r.name, &r.owner, r.ttl_ms)
            .await?;
        Ok(GrantReply::extended(grant))
    }

    /// Every holder, or 404 `not_found` for a free name (with a lock-delay
    /// in force, when it ends).
    async fn get(&self, a: Asker<'_>, r: GetRequest) -> Result<GetReply, Refused> {
        let namespace = namespace(a, r.namespace.as_deref())?;
        let state = self.service.describe(namespace, &r.name).await?;
        Ok(GetReply::from(state))
    }

    async fn force_unlock(
        &self,
        a: Asker<'_>,
        r: ForceUnlockRequest,
    ) -> Result<ReleasedReply, Refused> {
        let namespace = namespace(a, r.namespace.as_deref())?;
        // The core logs what it released (a warning naming the lock, owner
        // and fencing token) inside this request's span; this says who asked.
        tracing::warn!(
            token = a.caller.name(),
            peer = %a.peer,
            route = a.route.path(),
            namespace,
            name = %r.name,
            "force-unlock requested"
        );
        let released = self.service.force_unlock(namespace, &r.name).await?;
        Ok(ReleasedReply::from(released))
    }

    async fn list(&self, a: Asker<'_>, query: &str) -> Result<ListReply, Refused> {
        let query = ListQuery::parse(query).map_err(Refused::InvalidArgument)?;
        let namespace = namespace(a, query.namespace.as_deref())?;
        let locks = self
            .service
            .list(namespace, query.prefix.as_deref().unwrap_or(""))
            .await?;
        Ok(ListReply::new(locks))
    }

    async fn grant_lease(
        &self,
        a: Asker<'_>,
        r: LeaseGrantRequest,
    ) -> Result<LeaseGrantedReply, Refused> {
        let namespace = namespace(a, r.namespace.as_deref())?;
        let durability = r.durability.map_or(Durability::Persistent, Into::into);
        let grant = self
            .service
            .grant_lease(namespace, r.ttl_ms, durability)
            .await?;
        Ok(LeaseGrantedReply::from(grant))
    }

    async fn refresh_lease(
        &self,
        a: Asker<'_>,
        r: LeaseRequest,
    ) -> Result<LeaseRefreshedReply, Refused> {
        let namespace = namespace(a, r.namespace.as_deref())?;
        let expires_at_ms = self
            .service
            .refresh_lease(namespace, &r.lease_id)
            .await
            .map_err(|e| Refused::Lease(e, r.lease_id.clone()))?;
        Ok(LeaseRefreshedReply::new(expires_at_ms))
    }

    async fn revoke_lease(
        &self,
        a: Asker<'_>,
        r: LeaseRequest,
    ) -> Result<LeaseRevokedReply, Refused> {
        let namespace = namespace(a, r.namespace.as_deref())?;
        let released = self
            .service
            .revoke_lease(namespace, &r.lease_id)
            .await
            .map_err(|e| Refused::Lease(e, r.lease_id.clone()))?;
        Ok(LeaseRevokedReply::new(released))
    }

    async fn get_lease(&self, a: Asker<'_>, r: LeaseRequest) -> Result<LeaseFoundReply, Refused> {
        let namespace = namespace(a, r.namespace.as_deref())?;
        let info = self
            .service
            .get_lease(namespace, &r.lease_id)
            .await
            .map_err(|e| Refused::Lease(e, r.lease_id.clone()))?;
        // Unlike a free lock (404 `not_found`), a lease that is not live is
        // `not_held`, as every other lease route answers it.
        let info = info.ok_or(Refused::Lease(LockError::NotHeld, r.lease_id))?;
        Ok(LeaseFoundReply::from(info))
    }

    /// `GET /v1/events`: a stream that runs until the client hangs up, the
    /// client falls behind (`lagged`) or the store goes away.
    fn events<B>(
        &self,
        a: Asker<'_>,
        query: &str,
        req: &Request<B>,
    ) -> Result<Response<Body>, Refused> {
        let query = EventQuery::parse(query).map_err(Refused::InvalidArgument)?;
        if let Some(namespace) = &query.namespace {
            record_namespace(namespace);
            a.check_namespace(namespace)?;
        }
        let after = sse::resume_after(&query, req.headers()).map_err(Refused::InvalidArgument)?;
        // A store with a shared history gives positions and replays.
        let source = match self.service.event_history() {
            Some(history) => sse::Source::Shared(history),
            None => sse::Source::Local(self.service.events().ok_or_else(|| {
                Refused::Said(
                    Status::Unavailable,
                    "this store publishes no events".to_string(),
                )
            })?),
        };
        // A scoped token's stream carries its namespaces only, filter or not.
        let scope = a.caller.scope().cloned();
        let body = sse::stream(
            source,
            after,
            sse::Filter { query, scope },
            self.heartbeat,
            self.event_streams.clone(),
            self.service.closed(),
        );
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

    /// `GET /v1/namespaces`: the namespaces the caller may see with their
    /// held locks and waiters; a scoped token also sees the namespaces it
    /// names exactly while they are empty.
    async fn namespaces(&self, a: Asker<'_>) -> Result<NamespacesReply, Refused> {
        let mut rows: Vec<NamespaceSummary> = self
            .service
            .namespaces()
            .await?
            .into_iter()
            .filter(|row| a.caller.check_namespace(&row.namespace).is_ok())
            .map(|row| NamespaceSummary {
                held: row.persistent + row.ephemeral,
                name: row.namespace,
                waiters: row.waiters,
            })
            .collect();
        if let Some(scope) = a.caller.scope() {
            for name in scope.exact_names() {
                if !rows.iter().any(|row| row.name == name) {
                    rows.push(NamespaceSummary {
                        held: 0,
                        name: name.to_string(),
                        waiters: 0,
                    });
                }
            }
        }
        rows.sort_by(|x, y| x.name.cmp(&y.name));
        Ok(NamespacesReply::new(rows))
    }

    /// `/metrics`: [`Api::metrics`] and whether the server is ready
    /// (`lockd_ready`, `lockd_not_ready`).
    async fn metrics_with_readiness(&self) -> Response<Body> {
        let mut out = self.metrics();
        self.ready.check(&self.service).await.render(&mut out);
        answer(Ok(text(StatusCode::OK, METRICS_CONTENT_TYPE, out)))
    }

    /// `/metrics`: the service's metrics, the open event streams and the
    /// tokens' rate limits.
    fn metrics(&self) -> String {
        let mut out = self.service.render_metrics();
        out.push_str(
            "# HELP lockd_event_streams Open GET /v1/events streams.\n\
             # TYPE lockd_event_streams gauge\n",
        );
        let open = self.event_streams.load(Ordering::Relaxed);
        out.push_str(&format!("lockd_event_streams {open}\n"));
        self.credentials.current().render_rate_limits(&mut out);
        out
    }
}

#[cfg(test)]
mod tests;
