//! The API's own unit tests: routes, status words and the one error
//! mapping.

use http_body_util::BodyExt as _;
use serde_json::Value;

use super::reply::http_code;
use super::*;

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
        "/v1/namespaces",
        "/v1/leases/grant",
        "/v1/leases/refresh",
        "/v1/leases/revoke",
        "/v1/leases/get",
        "/metrics",
        "/healthz",
        "/openapi.json",
    ] {
        assert!(Api::owns(path), "{path}");
        assert!(Route::from_path(path).is_some(), "{path}");
    }
    assert!(Route::from_path("/v1/locks/").is_none());
    assert!(Api::owns("/v1/locks/"));
    assert!(!Api::owns("/ui/"));
}

#[test]
fn every_status_word_has_a_valid_http_code() {
    for status in Status::ALL {
        assert_eq!(http_code(status).as_u16(), status.http_code(), "{status}");
    }
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
