//! Dapr's lock API over HTTP, as Dapr's runtime serves it
//! (`pkg/api/http/lock.go`): `POST /v1.0-alpha1/lock/{storeName}` and
//! `POST /v1.0-alpha1/unlock/{storeName}`, plus what the SDKs call before
//! their first request: `GET /v1.0/metadata` (the JavaScript SDK waits for a
//! JSON body) and `GET /v1.0/healthz[/outbound]` (the Python SDK waits for a
//! 2xx). Bodies are read as Dapr's protojson reads them: the content type is
//! not checked, unknown fields are ignored, `null` is the zero value, an
//! `int32` may be a number or a string, and an empty body is all zero values.

use std::error::Error as StdError;

use bytes::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

use lockd_server::body::{full, read_body, Body};

use crate::dapr::{DaprError, DaprLocks, UnlockStatus};
use crate::dapr_components::LockStores;
use crate::request::{body_words, decode_object, record};

const LOCK_PREFIX: &str = "/v1.0-alpha1/lock/";
const UNLOCK_PREFIX: &str = "/v1.0-alpha1/unlock/";
const METADATA: &str = "/v1.0/metadata";
const HEALTHZ: &str = "/v1.0/healthz";
const HEALTHZ_OUTBOUND: &str = "/v1.0/healthz/outbound";

/// The paths without a store name in them.
#[cfg(test)]
pub(super) const FIXED_PATHS: &[&str] = &[METADATA, HEALTHZ, HEALTHZ_OUTBOUND];

/// One of Dapr's routes lockd serves.
#[derive(Debug, PartialEq, Eq)]
enum DaprRoute<'a> {
    Lock(&'a str),
    Unlock(&'a str),
    Metadata,
    Healthz,
}

impl<'a> DaprRoute<'a> {
    fn of(path: &'a str) -> Option<Self> {
        let store = |prefix: &str| {
            path.strip_prefix(prefix)
                .filter(|s| !s.is_empty() && !s.contains('/'))
        };
        if let Some(s) = store(LOCK_PREFIX) {
            return Some(DaprRoute::Lock(s));
        }
        if let Some(s) = store(UNLOCK_PREFIX) {
            return Some(DaprRoute::Unlock(s));
        }
        match path {
            METADATA => Some(DaprRoute::Metadata),
            HEALTHZ | HEALTHZ_OUTBOUND => Some(DaprRoute::Healthz),
            _ => None,
        }
    }

    fn method(&self) -> Method {
        match self {
            DaprRoute::Lock(_) | DaprRoute::Unlock(_) => Method::POST,
            DaprRoute::Metadata | DaprRoute::Healthz => Method::GET,
        }
    }

    fn allow(&self) -> HeaderValue {
        HeaderValue::from_static(if self.method() == Method::POST {
            "POST"
        } else {
            "GET"
        })
    }
}

pub(super) fn owns(path: &str) -> bool {
    DaprRoute::of(path).is_some()
}

/// The store (lockd namespace) a lock or unlock path names, decoded.
pub(super) fn store_of(path: &str) -> Option<String> {
    match DaprRoute::of(path)? {
        DaprRoute::Lock(store) | DaprRoute::Unlock(store) => Some(percent_decoded(store)),
        DaprRoute::Metadata | DaprRoute::Healthz => None,
    }
}

/// Dapr answers its health probes without the API token.
pub(super) fn is_health_probe(path: &str) -> bool {
    DaprRoute::of(path) == Some(DaprRoute::Healthz)
}

/// `TryLockRequest` as JSON; the store name comes from the path.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct TryLockBody {
    #[serde(alias = "resource_id")]
    resource_id: Option<String>,
    #[serde(alias = "lock_owner")]
    lock_owner: Option<String>,
    #[serde(alias = "expiry_in_seconds")]
    expiry_in_seconds: Option<ProtoInt32>,
}

/// `UnlockRequest` as JSON.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct UnlockBody {
    #[serde(alias = "resource_id")]
    resource_id: Option<String>,
    #[serde(alias = "lock_owner")]
    lock_owner: Option<String>,
}

#[derive(Serialize)]
struct TryLockReply {
    success: bool,
}

/// The status as a number, as Dapr writes it on HTTP.
#[derive(Serialize)]
struct UnlockReply {
    status: u8,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ErrorReply<'a> {
    error_code: &'a str,
    message: &'a str,
}

/// Answers a request to a path [`owns`] says is Dapr's.
pub(super) async fn handle<B>(dapr: &DaprLocks, req: Request<B>) -> Response<Body>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let path = req.uri().path().to_string();
    let Some(route) = DaprRoute::of(&path) else {
        return plain(StatusCode::NOT_FOUND, "");
    };
    if req.method() != route.method() {
        // What Dapr's router (chi) does: 405, an Allow header, no body.
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "");
        response.headers_mut().insert(header::ALLOW, route.allow());
        return response;
    }
    let result = match route {
        DaprRoute::Lock(store) => {
            let store = percent_decoded(store);
            record("POST /v1.0-alpha1/lock/{storeName}", &store, "");
            try_lock(dapr, &store, req).await
        }
        DaprRoute::Unlock(store) => {
            let store = percent_decoded(store);
            record("POST /v1.0-alpha1/unlock/{storeName}", &store, "");
            unlock(dapr, &store, req).await
        }
        DaprRoute::Metadata => Ok(json(StatusCode::OK, &metadata(dapr.stores()))),
        // Dapr answers its probes with 204.
        DaprRoute::Healthz => Ok(plain(StatusCode::NO_CONTENT, "")),
    };
    result.unwrap_or_else(|e| error_response(&e))
}

async fn try_lock<B>(
    dapr: &DaprLocks,
    store: &str,
    req: Request<B>,
) -> Result<Response<Body>, DaprError>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let body: TryLockBody = read(req).await?;
    let success = dapr
        .try_lock(
            store,
            body.resource_id.as_deref().unwrap_or(""),
            body.lock_owner.as_deref().unwrap_or(""),
            body.expiry_in_seconds.map_or(0, |e| e.0),
        )
        .await?;
    tracing::Span::current().record("outcome", if success { "ok" } else { "busy" });
    Ok(json(StatusCode::OK, &TryLockReply { success }))
}

async fn unlock<B>(
    dapr: &DaprLocks,
    store: &str,
    req: Request<B>,
) -> Result<Response<Body>, DaprError>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let body: UnlockBody = read(req).await?;
    let status = dapr
        .unlock(
            store,
            body.resource_id.as_deref().unwrap_or(""),
            body.lock_owner.as_deref().unwrap_or(""),
        )
        .await?;
    let outcome = match status {
        UnlockStatus::Success => "ok",
        UnlockStatus::LockDoesNotExist => "not_held",
        UnlockStatus::LockBelongsToOthers => "not_owner",
        UnlockStatus::InternalError => "unavailable",
    };
    tracing::Span::current().record("outcome", outcome);
    Ok(json(
        StatusCode::OK,
        &UnlockReply {
            status: status as u8,
        },
    ))
}

/// Reads the body as Dapr does: an empty one is all zero values.
async fn read<T, B>(req: Request<B>) -> Result<T, DaprError>
where
    T: serde::de::DeserializeOwned + Default,
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let bytes = read_body(req).await.map_err(|e| {
        DaprError::BodyRead(format!("failed to read request body: {}", body_words(&e)))
    })?;
    if bytes.is_empty() {
        return Ok(T::default());
    }
    decode_object(&bytes)
        .map_err(|e| DaprError::Malformed(format!("failed deserializing HTTP body: {e}")))
}

/// The one mapping of Dapr errors to HTTP: Dapr's status and
/// `{"errorCode", "message"}`.
fn error_response(e: &DaprError) -> Response<Body> {
    tracing::Span::current().record("outcome", e.error_code());
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json(
        status,
        &ErrorReply {
            error_code: e.error_code(),
            message: e.message(),
        },
    )
}

/// `GET /v1.0/metadata`'s body, with Dapr's field names (in alphabetical
/// order).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct MetadataReply<'a> {
    components: Vec<ComponentReply<'a>>,
    enabled_features: Vec<String>,
    extended: ExtendedMetadata,
    id: &'static str,
    runtime_version: &'static str,
}

/// One registered component, as Dapr lists it: here, a declared lock
/// store.
#[derive(Debug, Serialize)]
struct ComponentReply<'a> {
    name: &'a str,
    #[serde(rename = "type")]
    component_type: &'a str,
    version: &'a str,
}

/// `extended` of [`MetadataReply`].
#[derive(Debug, Serialize)]
struct ExtendedMetadata {
    lockd: &'static str,
}

/// `GET /v1.0/metadata`: who answers, that it serves locks only, and the
/// lock stores declared.
fn metadata(stores: &LockStores) -> MetadataReply<'_> {
    MetadataReply {
        components: stores
            .declared()
            .map(|s| ComponentReply {
                name: &s.name,
                component_type: &s.component_type,
                version: &s.version,
            })
            .collect(),
        enabled_features: Vec::new(),
        extended: ExtendedMetadata {
            lockd: served(stores),
        },
        id: "lockd",
        runtime_version: concat!("lockd ", env!("CARGO_PKG_VERSION")),
    }
}

/// What lockd serves of Dapr's API, for the metadata's `extended.lockd`.
pub(super) fn served(stores: &LockStores) -> &'static str {
    match stores {
        LockStores::AnyName => {
            "serves only Dapr's lock API (TryLockAlpha1, UnlockAlpha1); any store name \
             that is a lockd namespace is a lock store"
        }
        LockStores::Declared(_) => {
            "serves only Dapr's lock API (TryLockAlpha1, UnlockAlpha1), for the lock stores \
             its Dapr component files declare"
        }
    }
}

fn percent_decoded(segment: &str) -> String {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8_lossy()
        .into_owned()
}

fn json(status: StatusCode, body: &impl Serialize) -> Response<Body> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut response = Response::new(full(bytes));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(full(text));
    *response.status_mut() = status;
    response
}

/// A protobuf `int32` as protojson reads it: a JSON number with no
/// fraction, or a string of one, within `i32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ProtoInt32(i32);

impl<'de> Deserialize<'de> for ProtoInt32 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Int32;
        impl Visitor<'_> for Int32 {
            type Value = ProtoInt32;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a 32-bit integer")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ProtoInt32, E> {
                i32::try_from(v)
                    .map(ProtoInt32)
                    .map_err(|_| E::custom(format!("{v} is out of the int32 range")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ProtoInt32, E> {
                i32::try_from(v)
                    .map(ProtoInt32)
                    .map_err(|_| E::custom(format!("{v} is out of the int32 range")))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<ProtoInt32, E> {
                if v.fract() == 0.0 && v >= f64::from(i32::MIN) && v <= f64::from(i32::MAX) {
                    Ok(ProtoInt32(v as i32))
                } else {
                    Err(E::custom(format!("{v} is not an int32")))
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ProtoInt32, E> {
                v.parse::<i32>()
                    .map(ProtoInt32)
                    .map_err(|_| E::custom(format!("{v:?} is not an int32")))
            }
        }
        deserializer.deserialize_any(Int32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dapr_components::LockStore;

    #[test]
    fn routes_take_one_store_segment() {
        assert_eq!(
            DaprRoute::of("/v1.0-alpha1/lock/s"),
            Some(DaprRoute::Lock("s"))
        );
        assert_eq!(
            DaprRoute::of("/v1.0-alpha1/unlock/s"),
            Some(DaprRoute::Unlock("s"))
        );
        assert_eq!(DaprRoute::of("/v1.0-alpha1/lock/"), None);
        assert_eq!(DaprRoute::of("/v1.0-alpha1/lock/a/b"), None);
        assert_eq!(
            DaprRoute::of("/v1.0/healthz/outbound"),
            Some(DaprRoute::Healthz)
        );
        assert_eq!(DaprRoute::of("/v1.0/state/s"), None);
    }

    #[test]
    fn metadata_is_daprs_shape() {
        let json = serde_json::to_string(&metadata(&LockStores::AnyName)).unwrap();
        assert_eq!(
            json,
            concat!(
                r#"{"components":[],"enabledFeatures":[],"extended":{"lockd":"#,
                r#""serves only Dapr's lock API (TryLockAlpha1, UnlockAlpha1); "#,
                r#"any store name that is a lockd namespace is a lock store"},"#,
                r#""id":"lockd","runtimeVersion":"lockd "#,
                env!("CARGO_PKG_VERSION"),
                r#""}"#
            )
        );
        let declared = LockStores::Declared(
            [(
                "orders".to_string(),
                LockStore {
                    name: "orders".to_string(),
                    component_type: "lock.redis".to_string(),
                    version: "v1".to_string(),
                    namespace: "shop".to_string(),
                    file: "c.yaml".into(),
                },
            )]
            .into(),
        );
        let json = serde_json::to_value(metadata(&declared)).unwrap();
        assert_eq!(
            json["components"].to_string(),
            r#"[{"name":"orders","type":"lock.redis","version":"v1"}]"#
        );
        assert!(
            json["extended"]["lockd"]
                .as_str()
                .unwrap()
                .contains("component files declare"),
            "{json}"
        );
    }

    #[test]
    fn bodies_read_as_protojson_reads_them() {
        let b: TryLockBody = decode_object(
            br#"{"resource_id": "r", "lockOwner": null, "expiryInSeconds": "7", "extra": 1}"#,
        )
        .unwrap();
        assert_eq!(b.resource_id.as_deref(), Some("r"));
        assert_eq!(b.lock_owner, None);
        assert_eq!(b.expiry_in_seconds, Some(ProtoInt32(7)));
        let b: TryLockBody = decode_object(br#"{"expiryInSeconds": 1e1}"#).unwrap();
        assert_eq!(b.expiry_in_seconds, Some(ProtoInt32(10)));
        for bad in [
            r#"{"expiryInSeconds": 2147483648}"#,
            r#"{"expiryInSeconds": 1.5}"#,
            r#"{"expiryInSeconds": "x"}"#,
            r#"{"expiryInSeconds": true}"#,
        ] {
            let e = decode_object::<TryLockBody>(bad.as_bytes()).unwrap_err();
            assert!(e.starts_with("expiryInSeconds: "), "{bad}: {e}");
        }
        let e = decode_object::<TryLockBody>(br#"{"resourceId": 5}"#).unwrap_err();
        assert!(e.starts_with("resourceId: "), "{e}");
    }
}
