//! Authentication and authorization as the REST API applies them
//! ([`crate::auth`] holds the rules): who the caller of a request is, its
//! token's rate limit ([`over_rate_limit`], 429), the namespace it may use,
//! the same checks for other surfaces on the listener ([`authorize`],
//! behind `Api::authorize`), and the refusals, each logged with the token's
//! name (or `unknown`), the peer's address and the route.
//! No token, `Authorization` header or `access_token` value is ever part of
//! a log line or a reply.

use std::fmt;
use std::net::SocketAddr;

use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use lockd_api::{EventQuery, Route, Status, DEFAULT_NAMESPACE};

use super::reply::{failure, Refused};
use crate::auth::{self, Caller, Credentials, Forbidden, LiveCredentials, Unauthenticated};
use crate::body::Body;

/// The address of the client a request came from: the server puts it in
/// each request's extensions, and refusals log it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// The peer of `req`, as logs show it (`unknown` if the server did not
/// say).
pub(super) fn peer_of<B>(req: &Request<B>) -> Peer {
    Peer(req.extensions().get::<PeerAddr>().map(|p| p.0))
}

/// A peer address or `unknown`, for log lines.
#[derive(Clone, Copy, Debug)]
pub(super) struct Peer(Option<SocketAddr>);

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(addr) => write!(f, "{addr}"),
            None => f.write_str("unknown"),
        }
    }
}

/// Who asked for what: what a handler needs to check a namespace and to
/// log a refusal.
#[derive(Clone, Copy, Debug)]
pub(super) struct Asker<'a> {
    pub(super) caller: Caller<'a>,
    pub(super) peer: Peer,
    pub(super) route: Route,
}

impl Asker<'_> {
    /// Whether the caller may use `namespace`; a refusal is logged.
    pub(super) fn check_namespace(&self, namespace: &str) -> Result<(), Refused> {
        self.caller
            .check_namespace(namespace)
            .map_err(|e| self.forbidden(e))
    }

    /// Whether the caller may call the route at all; a refusal is logged.
    pub(super) fn check_route(&self) -> Result<(), Refused> {
        self.caller
            .check_route(self.route)
            .map_err(|e| self.forbidden(e))
    }

    /// Logs the refusal and makes it a 403 `forbidden`.
    fn forbidden(&self, refusal: Forbidden) -> Refused {
        tracing::warn!(
            token = self.caller.name(),
            peer = %self.peer,
            route = self.route.path(),
            reason = %refusal,
            "request forbidden"
        );
        Refused::Said(Status::Forbidden, refusal.0)
    }
}

/// The caller of `req`, or why not (logged; [`unauthorized`] answers it). The token comes from
/// the headers (`Authorization: Bearer`, `dapr-api-token`); on
/// `/v1/events` also from the `access_token` query parameter, since a
/// browser's `EventSource` cannot send headers.
pub(super) fn authenticate<'c, B>(
    credentials: &'c Credentials,
    req: &Request<B>,
    route: Option<Route>,
    peer: Peer,
) -> Result<Caller<'c>, Unauthenticated> {
    if credentials.is_open() {
        return Ok(Caller::Anyone);
    }
    let from_query;
    let token = match auth::token_from_headers(req.headers()) {
        Some(token) => Some(token),
        None if route == Some(Route::Events) => {
            from_query = EventQuery::parse(req.uri().query().unwrap_or(""))
                .ok()
                .and_then(|q| q.access_token);
            from_query.as_deref()
        }
        None => None,
    };
    credentials.authenticate(token).inspect_err(|refusal| {
        tracing::warn!(
            token = "unknown",
            peer = %peer,
            route = req.uri().path(),
            reason = refusal.reason(),
            "request unauthorized"
        );
    })
}

/// `None` if the caller's token is within its rate limit (a request is
/// taken from its bucket), else the 429 `rate_limited` to answer, with a
/// `Retry-After` of whole seconds: counted by token name, and logged as a
/// warning at most once per [`WARN_EVERY`](crate::rate_limit::WARN_EVERY)
/// for a token (at debug level between). Called once per request, right
/// after authentication and before anything else is done for it; an event
/// stream is one request, when it is opened.
pub(super) fn over_rate_limit(
    caller: Caller<'_>,
    peer: Peer,
    path: &str,
) -> Option<Response<Body>> {
    let throttled = caller.admit().err()?;
    let wait = throttled.retry_after.whole_seconds();
    let limit = throttled.limit;
    match throttled.warn {
        Some(refused) => tracing::warn!(
            token = caller.name(),
            peer = %peer,
            route = path,
            %limit,
            refused,
            "requests refused: the token is over its rate limit"
        ),
        None => tracing::debug!(
            token = caller.name(),
            peer = %peer,
            route = path,
            "request refused: the token is over its rate limit"
        ),
    }
    let mut response = failure(
        StatusCode::TOO_MANY_REQUESTS,
        Status::RateLimited,
        format!(
            "token {:?} is over its rate limit ({limit}); retry in {wait} s",
            caller.name()
        ),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(wait));
    Some(response)
}

/// The 401 `unauthorized` answer to `refusal`.
pub(super) fn unauthorized(refusal: Unauthenticated) -> Response<Body> {
    let mut response = failure(
        StatusCode::UNAUTHORIZED,
        Status::Unauthorized,
        refusal.message().to_string(),
    );
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// `None` if the request's token may make calls like `route` in
/// `namespace`, else the 401, 429 or 403 to answer (logged with the
/// token's name, the peer and the request's path). With `namespace` `None`
/// (a surface that cannot tell the namespace before it answers), the token
/// must cover every namespace (`"*"`). The token check for other surfaces
/// on the same listener (the compatibility routes of other systems' lock
/// APIs): the same tokens, rate limits, headers and logging as lockd's own
/// routes. Each call takes one request from the token's bucket.
pub(super) fn authorize<B>(
    credentials: &LiveCredentials,
    req: &Request<B>,
    route: Route,
    namespace: Option<&str>,
) -> Option<Response<Body>> {
    let peer = peer_of(req);
    let tokens = credentials.current();
    let caller = match authenticate(&tokens, req, None, peer) {
        Ok(caller) => caller,
        Err(refusal) => return Some(unauthorized(refusal)),
    };
    if let Some(refused) = over_rate_limit(caller, peer, req.uri().path()) {
        return Some(refused);
    }
    let checked = caller.check_route(route).and_then(|()| match namespace {
        Some(namespace) => caller.check_namespace(namespace),
        None => match caller.scope() {
            None => Ok(()),
            Some(scope) => Err(Forbidden(format!(
                "token {:?} may not use {}, which is not checked per namespace; \
                 it needs namespaces [\"*\"] (its namespaces are {scope})",
                caller.name(),
                req.uri().path()
            ))),
        },
    });
    let refusal = checked.err()?;
    tracing::warn!(
        token = caller.name(),
        peer = %peer,
        route = req.uri().path(),
        reason = %refusal,
        "request forbidden"
    );
    Some(failure(StatusCode::FORBIDDEN, Status::Forbidden, refusal.0))
}

/// `None` if the request carries a known token (any role, any namespaces),
/// else the 401 to answer (logged). Takes nothing from the token's rate
/// limit: it is a check of who is calling (Dapr's metadata, the gRPC
/// surface's first look at a call), not a call; [`authorize`] counts the
/// calls.
pub(super) fn check_known_token<B>(
    credentials: &LiveCredentials,
    req: &Request<B>,
) -> Option<Response<Body>> {
    authenticate(&credentials.current(), req, None, peer_of(req))
        .err()
        .map(unauthorized)
}

/// The request's namespace (`default` if it names none), recorded in the
/// request span (see `serve::Router::route`), if the caller may use it.
pub(super) fn namespace<'r>(a: Asker<'_>, given: Option<&'r str>) -> Result<&'r str, Refused> {
    let namespace = given.unwrap_or(DEFAULT_NAMESPACE);
    record_namespace(namespace);
    a.check_namespace(namespace)?;
    Ok(namespace)
}

/// Fills in the request span's `namespace`.
pub(super) fn record_namespace(namespace: &str) {
    tracing::Span::current().record("namespace", namespace);
}

#[cfg(test)]
mod tests {
    use hyper::Request;

    use super::*;
    use crate::api::{Api, ApiOptions};
    use crate::auth::{digest, Credential, NamespacePattern, Role, Scope};

    fn api() -> Api {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let service = rt
            .block_on(
                crate::config::LockdConfig::default()
                    .open_service(&crate::store::StoreSpec::Memory),
            )
            .unwrap();
        let ci = Scope::new(vec![NamespacePattern::Exact("ci".into())]);
        let credentials = Credentials::new(vec![
            Credential::new("ci", digest("ci-token"), ci.clone(), Role::Locker),
            Credential::new("ro", digest("ro-token"), Scope::every(), Role::Reader),
            Credential::from_flag("root"),
        ]);
        Api::with_options(
            service,
            ApiOptions {
                credentials,
                ..ApiOptions::default()
            },
        )
    }

    fn with(header: &str, value: &str) -> Request<()> {
        Request::builder()
            .uri("/v1.0-alpha1/lock/store")
            .header(header, value)
            .body(())
            .unwrap()
    }

    #[test]
    fn other_surfaces_get_the_same_checks() {
        let api = api();
        let code = |r: Option<Response<Body>>| r.map_or(200, |r| r.status().as_u16());
        let dapr = |t: &str| with(auth::DAPR_TOKEN_HEADER, t);
        assert_eq!(
            code(api.authorize(&dapr("ci-token"), Route::Lock, Some("ci"))),
            200
        );
        assert_eq!(
            code(api.authorize(&dapr("ci-token"), Route::Lock, Some("prod"))),
            403
        );
        // A namespace the surface cannot name: only "*" tokens.
        assert_eq!(
            code(api.authorize(&dapr("ci-token"), Route::Lock, None)),
            403
        );
        assert_eq!(code(api.check_known_token(&dapr("root"))), 200);
        assert_eq!(
            code(api.check_known_token(&with("authorization", "Bearer root"))),
            200
        );
        // A reader over "*" may read, not lock.
        assert_eq!(
            code(api.authorize(&dapr("ro-token"), Route::Get, None)),
            200
        );
        // Any known token passes the bare check; an unknown one is 401.
        assert_eq!(code(api.check_known_token(&dapr("ci-token"))), 200);
        assert_eq!(code(api.check_known_token(&dapr("nope"))), 401);
        assert_eq!(code(api.check_known_token(&Request::new(()))), 401);
    }

    #[test]
    fn a_token_over_its_rate_limit_is_refused_with_429_and_retry_after() {
        let limit = crate::rate_limit::RateLimit::new(0.5, Some(2)).unwrap();
        let limited = Credential::new("slow", digest("slow-token"), Scope::every(), Role::Locker)
            .with_rate_limit(Some(limit));
        let credentials = LiveCredentials::new(Credentials::new(vec![
            limited,
            Credential::from_flag("root"),
        ]));
        let dapr = |t: &str| with(auth::DAPR_TOKEN_HEADER, t);
        for _ in 0..2 {
            assert!(authorize(&credentials, &dapr("slow-token"), Route::Lock, None).is_none());
        }
        let refused = authorize(&credentials, &dapr("slow-token"), Route::Lock, None).unwrap();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.headers()[header::RETRY_AFTER], "2");
        let body = refused.into_body();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let bytes = rt
            .block_on(http_body_util::BodyExt::collect(body))
            .unwrap()
            .to_bytes();
        let reply: lockd_api::ErrorReply = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(reply.status, Status::RateLimited);
        assert_eq!(
            reply.message,
            "token \"slow\" is over its rate limit (0.5 requests a second, burst 2); \
             retry in 2 s"
        );
        // Other tokens have their own buckets (or none); the bare identity
        // check takes nothing from the bucket.
        assert!(authorize(&credentials, &dapr("root"), Route::Lock, None).is_none());
        assert!(check_known_token(&credentials, &dapr("slow-token")).is_none());
        let tokens = credentials.current();
        assert_eq!(tokens.tokens()[0].limiter().refused(), 1);
    }
}
