//! `edge-jobs`: the example edge app's job runner, a Spin HTTP component
//! (spin-sdk 5.2, `wasi:http/incoming-handler@0.2.0`) that runs each job while
//! holding the lockd lock `job/{id}`.
//!
//! Mounted at the route `/jobs/...`; the full request path arrives in the
//! request URI (the `spin-path-info` header is not relied on).
//!
//! - `POST /jobs/{id}` takes `job/{id}` (TTL 30 s, no waiting, persistent)
//!   for an owner unique to this request (`edge-<16 hex digits>` from
//!   `wasi:random`), works for about 200 ms, writes `job {id} token {N}` to
//!   stderr, unlocks with the fencing token and answers
//!   `200 {"status":"done","fencing_token":N}`. A lock held by someone else
//!   answers `409 {"status":"busy","holder":"<owner>"}`.
//! - `GET /jobs/{id}` answers `200 {"status":"free"}` or
//!   `200 {"status":"held","owner":"...","fencing_token":N,"expires_at_ms":M}`.
//! - Any other lock error answers `503` (`unavailable`) or `500` (anything
//!   else) with `{"status":"error","message":"..."}`.
//! - Other methods on `/jobs/{id}` answer `405`; other paths `404`.
//!
//! `{id}` is one non-empty path segment, used as it appears in the URI (not
//! percent-decoded). Tokens and times are JSON numbers (u64, exact).

use std::time::Duration;

use lockd_guest::{Error, LockInfo, LockOptions};
use serde_json::{json, Value};
use spin_sdk::http::{Method, Request, Response};
use spin_sdk::http_component;

/// The lease of a job's lock; the work takes far less.
const JOB_TTL: Duration = Duration::from_millis(30_000);
/// How long a job "works" while holding its lock.
const WORK: Duration = Duration::from_millis(200);

#[http_component]
fn handle(req: Request) -> Response {
    let Some(id) = job_id(req.path()) else {
        return json_response(404, &json!({"status": "error", "message": "not found"}));
    };
    let name = format!("job/{id}");
    match req.method() {
        Method::Post => run_job(id, &name),
        Method::Get => lock_state(&name),
        _ => Response::builder()
            .status(405)
            .header("allow", "GET, POST")
            .header("content-type", "application/json")
            .body(json!({"status": "error", "message": "method not allowed"}).to_string())
            .build(),
    }
}

/// The `{id}` of `.../jobs/{id}`: one non-empty segment, or `None`. Taking
/// what follows the last `/jobs/` lets one build be mounted at several
/// routes (`/a/jobs/...`, `/b/jobs/...`) as distinct components.
fn job_id(path: &str) -> Option<&str> {
    let (_, id) = path.rsplit_once("/jobs/")?;
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

/// `POST /jobs/{id}`: lock, work, unlock.
fn run_job(id: &str, name: &str) -> Response {
    let owner = format!("edge-{:016x}", wasi::random::random::get_random_u64());
    let grant = match lockd_guest::lock(name, &owner, JOB_TTL, LockOptions::persistent()) {
        Ok(grant) => grant,
        Err(e) => return error_response(e),
    };
    let token = grant.fencing_token;

    // The "work": a real job would pass `token` to the store it writes, so
    // that a write from a holder whose lease lapsed is rejected.
    std::thread::sleep(WORK);
    eprintln!("job {id} token {token}");

    // Unlock with the token, so that this can never release a later grant.
    if let Err(e) = lockd_guest::unlock(name, &owner, Some(token)) {
        eprintln!("job {id}: unlock failed: {e}");
        return error_response(e);
    }
    json_response(200, &json!({"status": "done", "fencing_token": token}))
}

/// `GET /jobs/{id}`: the lock's current state.
fn lock_state(name: &str) -> Response {
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
fn error_response(e: Error) -> Response {
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

fn json_response(status: u16, body: &Value) -> Response {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(body.to_string())
        .build()
}
