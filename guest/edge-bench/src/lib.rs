//! The HTTP function of benchmark B3 (edge): the shape of the example app's
//! `edge-jobs` (spin-sdk 5.2, `wasi:http/incoming-handler@0.2.0`, a lock per
//! request under an owner unique to the request) without its 200 ms of
//! simulated work, so that what is measured is serving plus the lock.
//!
//! - `GET .../bench/ephemeral/{id}`: locks `req/{id}` ephemeral for 10 s,
//!   unlocks with the token, answers `200 {"status":"done","fencing_token":N}`.
//! - `GET .../bench/persistent/{id}`: the same with a persistent lock, so
//!   both the grant and the release are on disk before the answer.
//! - `GET .../bench/nolock/{id}`: the same function without the lock: the
//!   same owner generation and the same answer, with `fencing_token` 0.
//!
//! A lock error answers 409 (busy) or 500 with `{"status":"error",...}`;
//! other paths answer 404.

use std::time::Duration;

use lockd_guest::LockOptions;
use serde_json::json;
use spin_sdk::http::{Request, Response};
use spin_sdk::http_component;

const TTL: Duration = Duration::from_secs(10);

#[http_component]
fn handle(req: Request) -> Response {
    let Some((mode, id)) = route(req.path()) else {
        return json_response(404, json!({"status": "error", "message": "not found"}));
    };
    let owner = format!("edge-{:016x}", wasi::random::random::get_random_u64());
    let options = match mode {
        "nolock" => return json_response(200, json!({"status": "done", "fencing_token": 0})),
        "ephemeral" => LockOptions::ephemeral(),
        "persistent" => LockOptions::persistent(),
        _ => return json_response(404, json!({"status": "error", "message": "not found"})),
    };
    let name = format!("req/{id}");
    let pair = lockd_guest::lock(&name, &owner, TTL, options).and_then(|grant| {
        lockd_guest::unlock(&name, &owner, Some(grant.fencing_token)).map(|()| grant)
    });
    match pair {
        Ok(grant) => json_response(
            200,
            json!({"status": "done", "fencing_token": grant.fencing_token}),
        ),
        Err(lockd_guest::Error::Busy(holder)) => {
            json_response(409, json!({"status": "busy", "holder": holder.owner}))
        }
        Err(e) => json_response(500, json!({"status": "error", "message": e.to_string()})),
    }
}

/// `(mode, id)` of `.../bench/{mode}/{id}`.
fn route(path: &str) -> Option<(&str, &str)> {
    let (_, rest) = path.rsplit_once("/bench/")?;
    let (mode, id) = rest.split_once('/')?;
    (!id.is_empty() && !id.contains('/')).then_some((mode, id))
}

fn json_response(status: u16, body: serde_json::Value) -> Response {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(body.to_string())
        .build()
}
