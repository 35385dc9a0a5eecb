//! Kahuna's lock REST API, as Kahuna's server answers it
//! (`Kahuna.Server/Communication/External/Rest/LocksHandlers.cs`) and its
//! documentation's `curl` commands call it: `POST /v1/locks/try-lock`,
//! `/try-extend`, `/try-unlock` and `/get-info`, on the default namespace.
//!
//! Every outcome is a 200 with a numeric `type` (Kahuna's
//! `LockResponseType`); a missing resource or owner, or an `expiresMs` that
//! is not positive, is `invalidInput` (100). A body ASP.NET would not bind
//! (not JSON, a field of the wrong type, an owner that is not base64) is a
//! 400; a content type other than JSON a 415; a body over the limit a 413.
//!
//! Kahuna's owner is bytes, base64 on the wire; lockd's owner is the
//! canonical base64 of those bytes, so the documented hex-looking owner
//! (valid base64) shows as itself in `lockd ls`. Kahuna's re-lock by the
//! holder answers `locked` with the same token, as lockd's idempotent
//! re-lock does.

use std::error::Error as StdError;

use base64::Engine as _;
use bytes::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use lockd_core::{Durability, LockError, LockOptions, LockService};
use lockd_server::api::DEFAULT_NAMESPACE;
use lockd_server::body::{full, read_body, Body, BodyError};
use serde::{Deserialize, Serialize};

use crate::request::{body_words, decode_object, record};

const TRY_LOCK: &str = "/v1/locks/try-lock";
const TRY_EXTEND: &str = "/v1/locks/try-extend";
const TRY_UNLOCK: &str = "/v1/locks/try-unlock";
const GET_INFO: &str = "/v1/locks/get-info";

/// Kahuna's lock paths.
pub(super) const PATHS: &[&str] = &[TRY_LOCK, TRY_EXTEND, TRY_UNLOCK, GET_INFO];

pub(super) fn owns(path: &str) -> bool {
    PATHS.contains(&path)
}

/// Kahuna's `LockResponseType`, by number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KahunaType {
    Locked = 0,
    Busy = 1,
    Extended = 2,
    Unlocked = 3,
    Got = 4,
    Errored = 99,
    InvalidInput = 100,
    LockDoesNotExist = 102,
    InvalidOwner = 103,
}

/// `KahunaLockRequest` (try-lock, try-extend, try-unlock) and
/// `KahunaGetLockRequest` (get-info, which reads `resource` and
/// `durability` only).
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct KahunaRequest {
    resource: Option<String>,
    /// Base64, as .NET reads a `byte[]`.
    owner: Option<String>,
    expires_ms: i32,
    /// 0 ephemeral (the default, as in Kahuna), 1 persistent.
    durability: i32,
}

/// `KahunaLockResponse` and `KahunaGetLockResponse` in one: get-info adds
/// `owner` and `expires`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct KahunaReply {
    served_from: &'static str,
    #[serde(rename = "type")]
    kind: u8,
    fencing_token: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    owner: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires: Option<HlcTimestamp>,
}

/// Kahuna's hybrid logical clock time; `l` is the expiry in Unix
/// milliseconds, node and counter are 0.
#[derive(Debug, Serialize)]
struct HlcTimestamp {
    n: u32,
    l: u64,
    c: u32,
}

impl KahunaReply {
    fn of(kind: KahunaType, fencing_token: u64) -> Self {
        KahunaReply {
            served_from: "",
            kind: kind as u8,
            fencing_token,
            owner: None,
            expires: None,
        }
    }
}

/// Answers a request to a path [`owns`] says is Kahuna's.
pub(super) async fn handle<B>(service: &LockService, req: Request<B>) -> Response<Body>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let path = req.uri().path().to_string();
    let route: &'static str = PATHS
        .iter()
        .find(|p| **p == path)
        .copied()
        .unwrap_or(TRY_LOCK);
    record(route, DEFAULT_NAMESPACE, "");
    if req.method() != hyper::Method::POST {
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, format!("{path} takes POST"));
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return response;
    }
    if !is_json(req.headers().get(header::CONTENT_TYPE)) {
        return plain(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "send the body as JSON with 'Content-Type: application/json'".to_string(),
        );
    }
    let bytes = match read_body(req).await {
        Ok(bytes) => bytes,
        Err(e @ BodyError::TooLarge) => {
            return plain(StatusCode::PAYLOAD_TOO_LARGE, body_words(&e))
        }
        Err(e) => return plain(StatusCode::BAD_REQUEST, body_words(&e)),
    };
    let request: KahunaRequest = match decode_object(&bytes) {
        Ok(request) => request,
        Err(e) => {
            return plain(
                StatusCode::BAD_REQUEST,
                format!("invalid request body: {e}"),
            )
        }
    };
    let reply = match answer(service, route, request).await {
        Ok(reply) => reply,
        Err(e) => {
            return plain(
                StatusCode::BAD_REQUEST,
                format!("invalid request body: {e}"),
            )
        }
    };
    tracing::Span::current().record("outcome", reply.kind);
    let mut response = Response::new(full(serde_json::to_vec(&reply).unwrap_or_default()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    response
}

/// The reply to a well-formed request; `Err` for an owner that is not
/// base64 (a body Kahuna would not bind).
async fn answer(
    service: &LockService,
    route: &str,
    r: KahunaRequest,
) -> Result<KahunaReply, String> {
    let invalid = Ok(KahunaReply::of(KahunaType::InvalidInput, 0));
    let Some(resource) = r.resource.filter(|r| !r.is_empty()) else {
        return invalid;
    };
    let durability = match r.durability {
        0 => Durability::Ephemeral,
        1 => Durability::Persistent,
        _ => return invalid,
    };
    let ns = DEFAULT_NAMESPACE;
    if route == GET_INFO {
        return Ok(match service.get(ns, &resource).await {
            Ok(Some(info)) => KahunaReply {
                owner: Some(info.owner),
                expires: Some(HlcTimestamp {
                    n: 0,
                    l: info.expires_at_ms,
                    c: 0,
                }),
                ..KahunaReply::of(KahunaType::Got, info.fencing_token)
            },
            Ok(None) => KahunaReply::of(KahunaType::LockDoesNotExist, 0),
            Err(e) => reply_to_error(&e),
        });
    }
    let Some(owner) = r.owner else {
        return invalid;
    };
    let owner = canonical_owner(&owner).map_err(|e| format!("owner: {e}"))?;
    if route == TRY_UNLOCK {
        return Ok(match service.unlock(ns, &resource, &owner, None).await {
            Ok(()) => KahunaReply::of(KahunaType::Unlocked, 0),
            Err(e) => reply_to_error(&e),
        });
    }
    let Ok(ttl_ms) = u64::try_from(r.expires_ms) else {
        return invalid;
    };
    if ttl_ms == 0 {
        return invalid;
    }
    Ok(if route == TRY_EXTEND {
        match service.extend(ns, &resource, &owner, ttl_ms).await {
            Ok(grant) => KahunaReply::of(KahunaType::Extended, grant.fencing_token),
            Err(e) => reply_to_error(&e),
        }
    } else {
        let options = LockOptions {
            durability,
            ..LockOptions::default()
        };
        match service.lock(ns, &resource, &owner, ttl_ms, options).await {
            Ok(grant) => KahunaReply::of(KahunaType::Locked, grant.fencing_token),
            Err(e) => reply_to_error(&e),
        }
    })
}

/// The one mapping of lock errors to Kahuna's types.
fn reply_to_error(e: &LockError) -> KahunaReply {
    let kind = match e {
        LockError::Busy(_) => KahunaType::Busy,
        LockError::NotHeld => KahunaType::LockDoesNotExist,
        LockError::NotOwner => KahunaType::InvalidOwner,
        LockError::InvalidArgument(_) => KahunaType::InvalidInput,
        _ => KahunaType::Errored,
    };
    KahunaReply::of(kind, 0)
}

/// The owner bytes, base64-encoded the one standard way.
fn canonical_owner(owner: &str) -> Result<String, base64::DecodeError> {
    let engine = base64::engine::general_purpose::STANDARD;
    engine.decode(owner).map(|bytes| engine.encode(bytes))
}

/// `application/json` or `application/*+json`, with any parameters, as
/// ASP.NET's JSON body binding accepts.
fn is_json(content_type: Option<&HeaderValue>) -> bool {
    let Some(value) = content_type.and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

fn plain(status: StatusCode, text: String) -> Response<Body> {
    let mut response = Response::new(full(text));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_owner_is_its_own_canonical_base64() {
        let owner = "e5943062358144b4b0bbff8868f7063d";
        assert_eq!(canonical_owner(owner).unwrap(), owner);
        assert!(canonical_owner("not base64!").is_err());
    }

    #[test]
    fn json_content_types() {
        let ok = |v: &'static str| is_json(Some(&HeaderValue::from_static(v)));
        assert!(ok("application/json"));
        assert!(ok("Application/JSON; charset=utf-8"));
        assert!(ok("application/problem+json"));
        assert!(!ok("text/plain"));
        assert!(!ok("application/x-www-form-urlencoded"));
        assert!(!is_json(None));
    }

    #[test]
    fn types_have_kahunas_numbers() {
        let numbers = [
            (KahunaType::Locked, 0),
            (KahunaType::Busy, 1),
            (KahunaType::Extended, 2),
            (KahunaType::Unlocked, 3),
            (KahunaType::Got, 4),
            (KahunaType::Errored, 99),
            (KahunaType::InvalidInput, 100),
            (KahunaType::LockDoesNotExist, 102),
            (KahunaType::InvalidOwner, 103),
        ];
        for (kind, n) in numbers {
            assert_eq!(kind as u8, n, "{kind:?}");
        }
    }
}
