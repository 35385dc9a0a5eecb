//! Other systems' lock APIs, so that their clients use lockd unchanged:
//! Dapr's lock building block over HTTP ([`dapr_http`], on lockd's own
//! listener) and gRPC ([`dapr_grpc`], on `--dapr-grpc-listen`), and Kahuna's
//! REST API ([`kahuna`]). Each is a thin translation onto the same
//! [`LockService`] as the native API, with the other system's errors mapped
//! in one place per surface; the locks are ordinary lockd locks.
//!
//! Requests pass the same token check as lockd's own routes
//! ([`Api::authorize`]) as lock calls in their namespace: Dapr's store name
//! (the gRPC listener checks it after decoding the call), or `default` for
//! Kahuna's routes. Dapr's metadata needs only a known token, and its
//! health probes none, as on Dapr.

pub mod dapr;
pub mod dapr_grpc;
mod dapr_http;
mod kahuna;

use std::error::Error as StdError;

use bytes::Bytes;
use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use hyper::header;
use hyper::{Request, Response};
use lockd_api::Route;
use lockd_core::LockService;
use serde::de::DeserializeOwned;

use crate::api::{Api, MAX_BODY_BYTES};
use crate::config::DaprConfig;
use crate::http_body::Body;

/// The compatibility routes of one server.
#[derive(Debug)]
pub struct Compat {
    dapr: dapr::DaprLocks,
    service: LockService,
}

impl Compat {
    /// The compatibility routes over `service`.
    pub fn new(service: LockService, config: &DaprConfig) -> Self {
        Compat {
            dapr: dapr::DaprLocks::new(service.clone(), config.durability()),
            service,
        }
    }

    /// Dapr's lock calls (the gRPC listener serves them too).
    pub fn dapr(&self) -> &dapr::DaprLocks {
        &self.dapr
    }

    /// Whether `path` is a compatibility route. None of them is one of
    /// lockd's own (`lockd_api::Route`), so the two never shadow each other.
    pub fn owns(path: &str) -> bool {
        dapr_http::owns(path) || kahuna::owns(path)
    }

    /// Answers a request to a path [`Compat::owns`], after `api`'s token
    /// check.
    pub async fn handle<B>(&self, req: Request<B>, api: &Api) -> Response<Body>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn StdError + Send + Sync>>,
    {
        let path = req.uri().path().to_string();
        let refusal = if kahuna::owns(&path) {
            api.authorize(&req, Route::Lock, Some(crate::api::DEFAULT_NAMESPACE))
        } else if let Some(store) = dapr_http::store_of(&path) {
            api.authorize(&req, Route::Lock, Some(&store))
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

/// Why a request body was not read.
#[derive(Debug)]
enum BodyError {
    /// Over [`MAX_BODY_BYTES`], declared or sent.
    TooLarge,
    /// The connection failed mid-body.
    Unreadable(String),
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::TooLarge => write!(f, "the body is over {MAX_BODY_BYTES} bytes"),
            BodyError::Unreadable(why) => f.write_str(why),
        }
    }
}

/// Reads a body of at most [`MAX_BODY_BYTES`].
async fn read_body<B>(req: Request<B>) -> Result<Bytes, BodyError>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(BodyError::TooLarge);
    }
    match Limited::new(req.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
    {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(BodyError::TooLarge),
        Err(e) => Err(BodyError::Unreadable(e.to_string())),
    }
}

/// Parses `body`, a JSON object, into `T`; the error names the field
/// (`expiryInSeconds: invalid type ...`), or says the body is not a JSON
/// object. An array is refused although serde would bind a struct from one
/// by position: neither Dapr's protojson nor Kahuna's System.Text.Json does.
fn decode_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    let first = body
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    if first != Some(&b'{') {
        return Err("the body is not a JSON object".to_string());
    }
    let mut json = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut json).map_err(|e| {
        let path = e.path().to_string();
        let named = e.path().iter().next().is_some();
        let e = e.into_inner();
        // Only a value of the wrong type or range has a field to name; a
        // syntax error's path would be serde_path_to_error's `?`.
        if e.is_data() && named {
            format!("{path}: {e}")
        } else {
            e.to_string()
        }
    })?;
    json.end().map_err(|e| e.to_string())?;
    Ok(value)
}

/// Records what the request span (`serve::Router::route`) shows.
fn record(route: &'static str, namespace: &str, outcome: &str) {
    let span = tracing::Span::current();
    span.record("route", route);
    span.record("namespace", namespace);
    span.record("outcome", outcome);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_compatibility_route_is_one_of_lockds_own() {
        for path in kahuna::PATHS.iter().chain(dapr_http::FIXED_PATHS) {
            assert!(Compat::owns(path), "{path}");
            assert_eq!(Route::from_path(path), None, "{path}");
        }
        assert!(Compat::owns("/v1.0-alpha1/lock/default"));
        assert!(Compat::owns("/v1.0-alpha1/unlock/jobs"));
        for path in Route::ALL.map(Route::path) {
            assert!(!Compat::owns(path), "{path}");
        }
        // lockd's 404 for other /v1/ paths stays lockd's.
        assert!(!Compat::owns("/v1/locks/try-lockx"));
        assert!(!Compat::owns("/v1/locks/"));
        assert!(!Compat::owns("/v1.0-alpha1/lock/"));
        assert!(!Compat::owns("/v1.0-alpha1/lock/a/b"));
    }

    #[test]
    fn decode_errors_name_the_field() {
        #[derive(serde::Deserialize, Debug)]
        struct T {
            n: u8,
        }
        let e = decode_json::<T>(br#"{"n": "x"}"#).unwrap_err();
        assert!(e.starts_with("n: invalid type"), "{e}");
        let e = decode_json::<T>(b"{not json").unwrap_err();
        assert_eq!(e, "key must be a string at line 1 column 2");
        assert!(decode_json::<T>(br#"{"n": 1} x"#).is_err());
        assert_eq!(decode_json::<T>(b" \n{\"n\": 1}").unwrap().n, 1);
        for not_an_object in [
            &b"[1]"[..],
            b"[null, null]",
            b"not json",
            b"1",
            b"null",
            b"\"n\"",
            b"",
        ] {
            let e = decode_json::<T>(not_an_object).unwrap_err();
            assert_eq!(e, "the body is not a JSON object");
        }
    }
}
