//! Authentication and authorization as the REST API applies them
//! ([`crate::auth`] holds the rules): who the caller of a request is, and
//! the refusals, each logged with the token's name (or `unknown`), the
//! peer's address and the route. No token, `Authorization` header or
//! `access_token` value is ever part of a log line or a reply.

use std::fmt;
use std::net::SocketAddr;

use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use lockd_api::{EventQuery, Route, Status};

use super::{failure, Refused};
use crate::auth::{self, Caller, Credentials, Forbidden, Unauthenticated};
use crate::http_body::Body;

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
