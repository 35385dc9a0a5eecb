//! `kv-counter`: an example Spin HTTP component (spin-sdk 5.2,
//! `wasi:http/incoming-handler@0.2.0`) that keeps counters in Spin's
//! key-value store and serialises their updates with a lockd lock.
//!
//! Mounted at `/counter/...`:
//!
//! - `POST /counter/{name}` takes the lock `counter/{name}` (waiting up to
//!   5 s in lockd's queue), reads the counter from the `default` store, adds
//!   the variable `counter_step` (default 1; `SPIN_VARIABLE_COUNTER_STEP`
//!   overrides it), writes the sum back with the lock's fencing token,
//!   releases the lock, and answers `200 {"value":N,"fencing_token":T}`.
//!   A stored token above this grant's (a newer holder already wrote)
//!   answers `409` and writes nothing.
//! - `POST /counter/{name}?nolock=1` is the negative control: the same
//!   read-add-write without the lock, pausing 50 ms between the read and
//!   the write as real work would. Concurrent requests then lose updates;
//!   it answers `200 {"value":N}`.
//! - `GET /counter/{name}` answers `200 {"value":N}` (0 for a new counter).
//! - A busy lock answers `409`, a store or lock failure `500`, both with
//!   `{"error":"..."}`; other methods `405`, other paths `404`.
//!
//! The stored value is JSON, `{"value":N,"fencing_token":T}`, under the key
//! `counter/{name}`.

use std::time::Duration;

use lockd_guest::{Guard, LockOptions};
use serde_json::{json, Value};
use spin_sdk::http::{Method, Request, Response};
use spin_sdk::http_component;
use spin_sdk::key_value::Store;

/// The lock's lease: an update takes milliseconds.
const LOCK_TTL: Duration = Duration::from_secs(10);
/// How long a POST waits for the lock in lockd's queue.
const LOCK_WAIT: Duration = Duration::from_secs(5);
/// The control's pause between its read and its write.
const CONTROL_PAUSE: Duration = Duration::from_millis(50);

/// A counter as stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counter {
    value: u64,
    fencing_token: u64,
}

#[http_component]
fn handle(req: Request) -> Response {
    let Some(name) = counter_name(req.path()) else {
        return json_response(404, &json!({"error": "not found"}));
    };
    let result = match (req.method(), req.query() == "nolock=1") {
        (Method::Post, false) => increment(name),
        (Method::Post, true) => increment_without_lock(name),
        (Method::Get, _) => read(name),
        _ => return json_response(405, &json!({"error": "method not allowed"})),
    };
    result.unwrap_or_else(|(status, message)| json_response(status, &json!({"error": message})))
}

type Answer = Result<Response, (u16, String)>;

/// The `{name}` of `.../counter/{name}`: one non-empty segment.
fn counter_name(path: &str) -> Option<&str> {
    let (_, name) = path.rsplit_once("/counter/")?;
    (!name.is_empty() && !name.contains('/')).then_some(name)
}

fn failed(e: impl std::fmt::Display) -> (u16, String) {
    (500, e.to_string())
}

/// `counter_step`, a positive integer.
fn step() -> Result<u64, (u16, String)> {
    let text = spin_sdk::variables::get("counter_step").map_err(failed)?;
    match text.trim().parse::<u64>() {
        Ok(step) if step > 0 => Ok(step),
        _ => Err((
            500,
            format!("counter_step is {text:?}, not a positive integer"),
        )),
    }
}

fn load(store: &Store, key: &str) -> Result<Counter, (u16, String)> {
    let Some(bytes) = store.get(key).map_err(failed)? else {
        return Ok(Counter::default());
    };
    let stored: Value = serde_json::from_slice(&bytes).map_err(failed)?;
    Ok(Counter {
        value: stored["value"].as_u64().unwrap_or(0),
        fencing_token: stored["fencing_token"].as_u64().unwrap_or(0),
    })
}

fn save(store: &Store, key: &str, counter: Counter) -> Result<(), (u16, String)> {
    let stored = json!({"value": counter.value, "fencing_token": counter.fencing_token});
    store
        .set(key, stored.to_string().as_bytes())
        .map_err(failed)
}

/// `POST /counter/{name}`: lock, read, add, write with the token, release.
fn increment(name: &str) -> Answer {
    let step = step()?;
    let key = format!("counter/{name}");
    let guard = match Guard::acquire(&key, LOCK_TTL, LockOptions::default().with_wait(LOCK_WAIT)) {
        Ok(guard) => guard,
        Err(lockd_guest::Error::Busy(_)) => return Err((409, format!("{key} is busy"))),
        Err(e) => return Err(failed(e)),
    };
    let token = guard.fencing_token();
    let store = Store::open_default().map_err(failed)?;
    let current = load(&store, &key)?;
    // The fence: a write from a holder whose lease lapsed (a newer grant
    // already wrote) is refused.
    if current.fencing_token > token {
        return Err((
            409,
            format!(
                "a newer holder (token {}) already wrote",
                current.fencing_token
            ),
        ));
    }
    let next = Counter {
        value: current.value.saturating_add(step),
        fencing_token: token,
    };
    save(&store, &key, next)?;
    guard.release().map_err(failed)?;
    Ok(json_response(
        200,
        &json!({"value": next.value, "fencing_token": token}),
    ))
}

/// `POST /counter/{name}?nolock=1`: the negative control, unprotected.
fn increment_without_lock(name: &str) -> Answer {
    let step = step()?;
    let key = format!("counter/{name}");
    let store = Store::open_default().map_err(failed)?;
    let current = load(&store, &key)?;
    // Real work between read and write: other requests interleave here.
    std::thread::sleep(CONTROL_PAUSE);
    let next = Counter {
        value: current.value.saturating_add(step),
        ..current
    };
    save(&store, &key, next)?;
    Ok(json_response(200, &json!({"value": next.value})))
}

/// `GET /counter/{name}`.
fn read(name: &str) -> Answer {
    let store = Store::open_default().map_err(failed)?;
    let current = load(&store, &format!("counter/{name}"))?;
    Ok(json_response(200, &json!({"value": current.value})))
}

fn json_response(status: u16, body: &Value) -> Response {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(body.to_string())
        .build()
}
