//! How a handler's outcome becomes a response: its reply with the HTTP
//! code of its status word ([`Answer`]), or why it refused ([`Refused`]),
//! with every lock error mapped to HTTP in one place ([`error_response`]).
//! Every failure is a JSON body with a `status` word and a `message`, and
//! fills in the request span's `outcome`.

use std::error::Error as StdError;
use std::future::Future;

use bytes::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use lockd_api::{
    BusyReply, ErrorReply, FoundReply, FreeReply, GetReply, GrantReply, LeaderReply,
    LeaseFoundReply, LeaseGrantedReply, LeaseRefreshedReply, LeaseRevokedReply, ListReply,
    NamespacesReply, ReadyReply, ReleasedReply, Status, StatusReply,
};
use lockd_core::LockError;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::body::{full, read_json, Body, BodyError};
use crate::serve::drain;

/// Why a handler answers with an error body in place of its reply.
#[derive(Debug)]
pub(super) enum Refused {
    /// The lock service refused: [`error_response`] says it.
    Lock(LockError),
    /// The service refused a call that names the lease (its id here):
    /// `not_held` there means the lease is not live, and the message says so.
    Lease(LockError, String),
    /// The request is wrong before the service is asked; the message is
    /// said as it is.
    InvalidArgument(String),
    /// Refused before the service is asked, for another reason: the status
    /// word and message are said as they are.
    Said(Status, String),
}

impl From<LockError> for Refused {
    fn from(e: LockError) -> Self {
        Refused::Lock(e)
    }
}

impl Refused {
    pub(super) fn into_response(self) -> Response<Body> {
        match self {
            Refused::Lock(e) => error_response(&e),
            Refused::Lease(LockError::NotHeld, lease_id) => error_response_saying(
                &LockError::NotHeld,
                format!("lease {lease_id:?} is not live: unknown, revoked or expired"),
            ),
            Refused::Lease(e, _) => error_response(&e),
            Refused::InvalidArgument(message) => {
                failure(StatusCode::BAD_REQUEST, Status::InvalidArgument, message)
            }
            Refused::Said(status, message) => failure(http_code(status), status, message),
        }
    }
}

/// A handler's reply, as a response.
pub(super) trait Answer {
    fn into_response(self) -> Response<Body>;
}

/// A reply body answers with the HTTP code of its status word.
macro_rules! answer_with_its_status {
    ($($reply:ty),+ $(,)?) => {
        $(
            impl Answer for $reply {
                fn into_response(self) -> Response<Body> {
                    json_response(http_code(self.status), &self)
                }
            }
        )+
    };
}

answer_with_its_status!(
    GrantReply,
    StatusReply,
    FoundReply,
    FreeReply,
    ListReply,
    ReleasedReply,
    LeaseGrantedReply,
    LeaseRefreshedReply,
    LeaseRevokedReply,
    LeaseFoundReply,
    NamespacesReply,
    LeaderReply,
    ReadyReply,
);

/// `get`: the holders, or 404 `not_found` for a free name.
impl Answer for GetReply {
    fn into_response(self) -> Response<Body> {
        match self {
            GetReply::Found(found) => found.into_response(),
            GetReply::Free(free) => free.into_response(),
        }
    }
}

/// An event stream, `/metrics` or `/openapi.json`: a response made already.
impl Answer for Response<Body> {
    fn into_response(self) -> Response<Body> {
        self
    }
}

/// Reads the body of `req` once into `T` and answers with what `handler`
/// makes of it.
pub(super) async fn call<T, A, B, F, Fut>(req: Request<B>, handler: F) -> Response<Body>
where
    T: DeserializeOwned,
    A: Answer,
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
    F: FnOnce(T) -> Fut,
    Fut: Future<Output = Result<A, Refused>>,
{
    match read_json(req).await {
        Ok(request) => answer(handler(request).await),
        Err(e) => body_refused(e),
    }
}

/// The response to a handler's outcome, recorded in the request span
/// (a refusal records its status word as it is built).
pub(super) fn answer(result: Result<impl Answer, Refused>) -> Response<Body> {
    match result {
        Ok(reply) => {
            record_outcome("ok");
            reply.into_response()
        }
        Err(refused) => refused.into_response(),
    }
}

/// The one mapping of lock errors to HTTP: the status word is the error's
/// [`kind`](LockError::kind), the body a [`BusyReply`] (with the holder) or
/// an [`ErrorReply`].
pub fn error_response(err: &LockError) -> Response<Body> {
    error_response_saying(err, err.to_string())
}

/// [`error_response`] with `message` in place of the error's own.
fn error_response_saying(err: &LockError, message: String) -> Response<Body> {
    // A kind added to the core later maps to `unavailable`: its outcome is
    // unknown to this surface.
    let status = Status::from(err.kind());
    match err {
        LockError::Busy(holder) => {
            record_outcome(status.as_str());
            json_response(http_code(status), &BusyReply::new(holder, message))
        }
        _ => {
            let mut response = failure(http_code(status), status, message);
            if drain::not_applied(err) {
                drain::mark_not_applied(&mut response);
            }
            response
        }
    }
}

/// The answer to a body the one reader ([`crate::body`]) refused: 413 for
/// one over [`MAX_BODY_BYTES`](crate::body::MAX_BODY_BYTES) (closing the connection, whose rest of the
/// body is never read), else 400; `invalid_argument` with the reader's words.
fn body_refused(e: BodyError) -> Response<Body> {
    match e {
        BodyError::TooLarge => {
            let mut response = failure(
                StatusCode::PAYLOAD_TOO_LARGE,
                Status::InvalidArgument,
                e.to_string(),
            );
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            response
        }
        BodyError::Unreadable(_) | BodyError::Json(_) => {
            Refused::InvalidArgument(e.to_string()).into_response()
        }
    }
}

/// Fills in the request span's `outcome`: `ok`, or the refusal's status word.
fn record_outcome(word: &'static str) {
    tracing::Span::current().record("outcome", word);
}

pub(super) fn failure(code: StatusCode, status: Status, message: String) -> Response<Body> {
    record_outcome(status.as_str());
    json_response(code, &ErrorReply { message, status })
}

/// The HTTP code of a reply with `status`.
pub(super) fn http_code(status: Status) -> StatusCode {
    // Every word's code is a valid one (a test tries them all).
    StatusCode::from_u16(status.http_code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
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

pub(super) fn text(
    code: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Body> {
    let mut response = Response::new(full(body));
    *response.status_mut() = code;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
