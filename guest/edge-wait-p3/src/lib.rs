//! `edge-wait-p3`: an edge handler that awaits a lock without stalling its
//! instance. A Spin HTTP component (spin-sdk 7, `wasi:http/handler@0.3.0`)
//! importing `lockd:lock/locks@0.2.0`, whose `lock` is an `async func`.
//!
//! Mounted at the route `/wait/...`:
//!
//! - `POST /wait/{id}?wait_ms=W` waits up to `W` ms (default 5000) for the
//!   lock `wait/{id}` (owner `edge-wait`, TTL 30 s, ephemeral) and, in the
//!   same instance at the same time, runs a ticker: a 20 ms sleep after
//!   another until the lock call returns. It then releases the lock and
//!   answers `200 {"status":"done","via":"0.2.0","fencing_token":N,
//!   "waited_ms":T,"ticks":K,"longest_tick_gap_ms":G}`, or
//!   `409 {"status":"busy","holder":"<owner>",...}` (same tick fields) if
//!   the wait ran out. `G` near 20 says the instance went on working while
//!   its lock call waited.
//! - `&via=0.1.0` waits through `lockd:lock/locks@0.1.0`'s synchronous
//!   `lock` instead, the contrast: a synchronous import call holds the whole
//!   instance, so the ticker stops for the whole wait (`G` near `T`).
//! - `&via=spin` never answers: it computes forever without yielding, a
//!   runaway guest for the host's request timeout to stop. `&via=trap`
//!   traps (a Rust panic) at once.
//! - `GET /wait/{id}` answers `200 {"status":"free"}` or
//!   `200 {"status":"held","owner":"...","fencing_token":N}`.
//! - Other lock errors answer `503` (`unavailable`) or `500`; other methods
//!   `405`, other paths `404`. Bodies are JSON, tokens u64 numbers.
//! - Every JSON answer also carries `"instance"`, a random u64 drawn once
//!   per instance, and `"requests_taken"`, how many requests that instance
//!   had begun when it answered: requests that show the same `instance`
//!   were served by one instance.
//!
//! lockd serve lets one instance serve several requests at once (`[limits]
//! instance_concurrent_requests`): a request waiting for a lock here does
//! not hold up the others. The ticker shows the same within one request.

use std::cell::Cell;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{json, Value};
use spin_sdk::http::{Method, Request, Response, StatusCode};
use spin_sdk::http_service;
use spin_sdk::wasip3::clocks::monotonic_clock;
use spin_sdk::wasip3::random::random;

mod bindings {
    // spin-sdk's own wit-bindgen (0.57): one async runtime in the component
    // runs the handler's task and the lock call's subtask.
    spin_sdk::wit_bindgen::generate!({
        runtime_path: "spin_sdk::wit_bindgen::rt",
        path: ["../../wit", "../../wit/p3", "wit"],
        world: "lockd:edge-wait-p3/locks-used",
        generate_all,
    });
}

use bindings::lockd::lock0_1_0::{locks as locks_v1, types as types_v1};
use bindings::lockd::lock0_2_0::locks::{self, LockOptions};
use bindings::lockd::lock0_2_0::types::{Durability, Error, LockInfo};

/// The owner this component locks as.
const OWNER: &str = "edge-wait";
/// The lease of the lock; it is released as soon as it is granted.
const TTL_MS: u32 = 30_000;
/// How long `POST` waits unless `wait_ms` says otherwise.
const DEFAULT_WAIT_MS: u32 = 5_000;
/// The ticker's period.
const TICK: Duration = Duration::from_millis(20);

type JsonResponse = Response<String>;

/// This instance's id, drawn at its first request.
static INSTANCE: OnceLock<u64> = OnceLock::new();
/// How many requests this instance has begun.
static REQUESTS_TAKEN: AtomicU64 = AtomicU64::new(0);

#[http_service]
async fn handle(req: Request) -> JsonResponse {
    INSTANCE.get_or_init(random::get_random_u64);
    REQUESTS_TAKEN.fetch_add(1, Ordering::Relaxed);
    let path = req.uri().path();
    let Some(id) = path
        .strip_prefix("/wait/")
        .filter(|id| !id.is_empty() && !id.contains('/'))
    else {
        return json_response(404, &json!({"status": "error", "message": "not found"}));
    };
    let name = format!("wait/{id}");
    let query = req.uri().query().unwrap_or("");
    match *req.method() {
        Method::POST => {
            let wait_ms = match query_value(query, "wait_ms").map(str::parse::<u32>) {
                None => DEFAULT_WAIT_MS,
                Some(Ok(ms)) => ms,
                Some(Err(_)) => {
                    return json_response(
                        400,
                        &json!({"status": "error", "message": "wait_ms must be a whole number of milliseconds (0 to 4294967295)"}),
                    )
                }
            };
            match query_value(query, "via") {
                None | Some("0.2.0") => wait_and_tick(&name, wait_ms, false).await,
                Some("0.1.0") => wait_and_tick(&name, wait_ms, true).await,
                Some("spin") => spin(),
                Some("trap") => panic!("via=trap: this request traps its instance"),
                Some(_) => json_response(
                    400,
                    &json!({"status": "error", "message": "via must be 0.2.0, 0.1.0, spin or trap"}),
                ),
            }
        }
        Method::GET => match locks::get(name).await {
            Ok(None) => json_response(200, &json!({"status": "free"})),
            Ok(Some(info)) => json_response(
                200,
                &json!({"status": "held", "owner": info.owner, "fencing_token": info.fencing_token}),
            ),
            Err(e) => error_response(e),
        },
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

/// The value of `key` in a `k=v&k=v` query (not percent-decoded).
fn query_value<'q>(query: &'q str, key: &str) -> Option<&'q str> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find_map(|(k, v)| (k == key).then_some(v))
}

/// Milliseconds since `start` on the monotonic clock.
fn elapsed_ms(start: u64) -> u64 {
    monotonic_clock::now().saturating_sub(start) / 1_000_000
}

/// `POST /wait/{id}`: the lock wait and the ticker, side by side.
async fn wait_and_tick(name: &str, wait_ms: u32, via_v1: bool) -> JsonResponse {
    let start = monotonic_clock::now();
    let ticks = Cell::new(0u64);
    let longest_gap = Cell::new(0u64);
    let last_tick = Cell::new(start);
    let note_gap = || {
        let now = monotonic_clock::now();
        let gap = now.saturating_sub(last_tick.replace(now)) / 1_000_000;
        longest_gap.set(longest_gap.get().max(gap));
    };
    let ticker = async {
        loop {
            spin_sdk::time::sleep(TICK).await;
            ticks.set(ticks.get() + 1);
            note_gap();
        }
    };
    let lock = async {
        if via_v1 {
            lock_v1(name, wait_ms)
        } else {
            let options = LockOptions {
                wait_ms,
                durability: Durability::Ephemeral,
            };
            locks::lock(name.to_string(), OWNER.to_string(), TTL_MS, options)
                .await
                .map(|grant| grant.fencing_token)
        }
    };
    let result = until_done(lock, ticker).await;
    // The gap still open when the lock call returned counts too.
    note_gap();
    let waited_ms = elapsed_ms(start);
    // `status` first: its value is set below.
    let mut body = json!({
        "status": Value::Null,
        "via": if via_v1 { "0.1.0" } else { "0.2.0" },
        "waited_ms": waited_ms,
        "ticks": ticks.get(),
        "longest_tick_gap_ms": longest_gap.get(),
    });
    match result {
        Ok(token) => {
            if let Err(e) = locks::unlock(name.to_string(), OWNER.to_string(), Some(token)).await {
                return error_response(e);
            }
            body["status"] = json!("done");
            body["fencing_token"] = json!(token);
            json_response(200, &body)
        }
        Err(Error::Busy(LockInfo { owner, .. })) => {
            body["status"] = json!("busy");
            body["holder"] = json!(owner);
            json_response(409, &body)
        }
        Err(e) => error_response(e),
    }
}

/// Computes forever, never yielding to the host.
fn spin() -> JsonResponse {
    let mut x = 0u64;
    loop {
        x = std::hint::black_box(x.wrapping_add(1));
    }
}

/// `locks@0.1.0`'s synchronous `lock`, its error in 0.2.0's terms.
fn lock_v1(name: &str, wait_ms: u32) -> Result<u64, Error> {
    let options = locks_v1::LockOptions {
        wait_ms,
        durability: types_v1::Durability::Ephemeral,
    };
    locks_v1::lock(name, OWNER, TTL_MS, options)
        .map(|grant| grant.fencing_token)
        .map_err(|e| match e {
            types_v1::Error::Busy(info) => Error::Busy(LockInfo {
                owner: info.owner,
                fencing_token: info.fencing_token,
                expires_at_ms: info.expires_at_ms,
                durability: Durability::Ephemeral,
            }),
            types_v1::Error::NotOwner => Error::NotOwner,
            types_v1::Error::NotHeld => Error::NotHeld,
            types_v1::Error::InvalidArgument(m) => Error::InvalidArgument(m),
            types_v1::Error::Denied(m) => Error::Denied(m),
            types_v1::Error::Unavailable(m) => Error::Unavailable(m),
        })
}

/// Runs `work` alongside `main` (both polled by this task, `work` first)
/// until `main` finishes; `work` is then dropped.
async fn until_done<M: Future, W: Future<Output = ()>>(main: M, work: W) -> M::Output {
    let (mut main, mut work) = (pin!(main), pin!(work));
    std::future::poll_fn(|cx| {
        let _ = work.as_mut().poll(cx);
        main.as_mut().poll(cx)
    })
    .await
}

fn error_response(e: Error) -> JsonResponse {
    let (status, message) = match e {
        Error::Unavailable(m) => (503, format!("store unavailable: {m}")),
        other => (500, format!("{other:?}")),
    };
    json_response(status, &json!({"status": "error", "message": message}))
}

fn json_response(status: u16, body: &Value) -> JsonResponse {
    let mut body = body.clone();
    if let Some(fields) = body.as_object_mut() {
        fields.insert("instance".into(), json!(INSTANCE.get().copied()));
        fields.insert(
            "requests_taken".into(),
            json!(REQUESTS_TAKEN.load(Ordering::Relaxed)),
        );
    }
    let mut resp = Response::new(body.to_string());
    *resp.status_mut() = StatusCode::from_u16(status).expect("valid status code");
    resp.headers_mut().insert(
        "content-type",
        "application/json".parse().expect("valid header value"),
    );
    resp
}
