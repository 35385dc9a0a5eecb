//! `edge-guard-p3`: the example edge app's WASIp3 handler, a Spin HTTP
//! component (spin-sdk 7, `wasi:http/handler@0.3.0`, async) that works while
//! holding a lockd guard, whose owner the host generates.
//!
//! Mounted at the route `/guarded/...`; the full request path arrives in the
//! request URI (the `spin-path-info` header is not relied on).
//!
//! - `POST /guarded/{id}` acquires a guard on `guarded/{id}` (TTL 30 s, no
//!   waiting, persistent), works for about 100 ms and answers
//!   `200 {"status":"done","fencing_token":N,"owner":"<guard owner>"}`. The
//!   guard is dropped before the handler returns, which makes the host
//!   release the lock. A lock held by someone else answers
//!   `409 {"status":"busy","holder":"<owner>"}`.
//! - `GET /guarded/{id}` answers `200 {"status":"free"}` or
//!   `200 {"status":"held","owner":"...","fencing_token":N,"expires_at_ms":M}`.
//! - Any other lock error answers `503` (`unavailable`) or `500` (anything
//!   else) with `{"status":"error","message":"..."}`.
//! - Other methods on `/guarded/{id}` answer `405`; other paths `404`.
//!
//! `{id}` is one non-empty path segment, used as it appears in the URI (not
//! percent-decoded). Tokens and times are JSON numbers (u64, exact).
//!
//! The lock calls are synchronous WIT functions: while one waits on the
//! host, this (single-task) instance waits with it. The work itself is an
//! async sleep (`wasi:clocks/monotonic-clock@0.3.0` `wait-for`).

use std::time::Duration;

use lockd_guest::{Error, Guard, LockInfo, LockOptions};
use serde_json::{json, Value};
use spin_sdk::http::{Method, Request, Response, StatusCode};
use spin_sdk::http_service;

/// The lease of the guard; the work takes far less.
const TTL: Duration = Duration::from_millis(30_000);
/// How long a request "works" while holding the guard.
const WORK: Duration = Duration::from_millis(100);

/// The response type: a JSON string body.
type JsonResponse = Response<String>;

#[http_service]
async fn handle(req: Request) -> JsonResponse {
    let Some(id) = guarded_id(req.uri().path()) else {
        return json_response(404, &json!({"status": "error", "message": "not found"}));
    };
    let name = format!("guarded/{id}");
    match *req.method() {
        Method::POST => run_guarded(&name).await,
        Method::GET => lock_state(&name),
        _ => {
            let mut resp = json_response(
                405,
                &json!({"status": "error", "message": "method not allowed"}),
            );
            resp.headers_mut()
                .insert("allow", "GET, POST".parse().expect("valid header value"));
            resp
        }
    }
}

/// The `{id}` of `/guarded/{id}`: one non-empty segment, or `None`.
fn guarded_id(path: &str) -> Option<&str> {
    let id = path.strip_prefix("/guarded/")?;
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

/// `POST /guarded/{id}`: acquire a guard, work, drop it.
async fn run_guarded(name: &str) -> JsonResponse {
    let guard = match Guard::acquire(name, TTL, LockOptions::persistent()) {
        Ok(guard) => guard,
        Err(e) => return error_response(e),
    };
    // The "work": a real handler would pass the token to the store it writes.
    spin_sdk::time::sleep(WORK).await;
    let body = json!({
        "status": "done",
        "fencing_token": guard.fencing_token(),
        "owner": guard.owner(),
    });
    // Dropping the guard makes the host release the lock (with its token).
    drop(guard);
    json_response(200, &body)
}

/// `GET /guarded/{id}`: the lock's current state.
fn lock_state(name: &str) -> JsonResponse {
    match lockd_guest::get(name) {
        Ok(None) => json_response(200, &json!({"status": "free"})),
        Ok(Some(LockInfo {
            owner,
            fencing_token,
            expires_at_ms,
            ..
        })) => json_response(
            200,
            &json!({
                "status": "held",
                "owner": owner,
                "fencing_token": fencing_token,
                "expires_at_ms": expires_at_ms,
            }),
        ),
        Err(e) => error_response(e),
    }
}

/// 409 for `busy` (naming the holder), 503 for `unavailable`, 500 otherwise.
fn error_response(e: Error) -> JsonResponse {
    match e {
        Error::Busy(holder) => {
            json_response(409, &json!({"status": "busy", "holder": holder.owner}))
        }
        Error::Unavailable(_) => {
            json_response(503, &json!({"status": "error", "message": e.to_string()}))
        }
        e => json_response(500, &json!({"status": "error", "message": e.to_string()})),
    }
}

fn json_response(status: u16, body: &Value) -> JsonResponse {
    let mut resp = Response::new(body.to_string());
    *resp.status_mut() = StatusCode::from_u16(status).expect("valid status code");
    resp.headers_mut().insert(
        "content-type",
        "application/json".parse().expect("valid header value"),
    );
    resp
}
