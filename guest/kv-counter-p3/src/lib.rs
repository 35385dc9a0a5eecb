//! `kv-counter-p3`: the example's counter as a Spin WASIp3 HTTP component
//! (spin-sdk 7.0, `wasi:http/handler@0.3.0`): Spin's key-value store
//! (`spin:key-value/key-value@3.0.0`) and variables
//! (`spin:variables/variables@3.0.0`) as async calls, under a lockd guard
//! (`lockd:lock@0.2.0`).
//!
//! Mounted at `/p3/...`. Its counters are its own (keys and locks
//! `counter-p3/{name}`): its locks live in its own namespace, so sharing
//! kv-counter's keys would let the two update one counter at once.
//!
//! - `POST /p3/counter/{name}` takes the guard `counter-p3/{name}` (waiting up
//!   to 5 s), adds the variable `counter_step` to the stored counter, writes
//!   it back with the guard's fencing token, and answers
//!   `200 {"value":N,"fencing_token":T}`.
//! - `GET /p3/counter/{name}` answers `200 {"value":N}`.
//! - `DELETE /p3/counter/{name}` deletes it: `200 {"existed":B}`.
//! - `GET /p3/counters` lists the store's keys (`get-keys`, a stream):
//!   `200 {"keys":[...]}`.
//! - `GET /p3/open/{label}` opens the store `label` and answers
//!   `200 {"opened":true}` or `200 {"error":"access-denied"|"no-such-store"|...}`:
//!   what a component gets for a store it may not open.
//! - `GET /p3/variable/{name}` answers `200 {"value":"..."}` or
//!   `200 {"error":"invalid-name"|"undefined"|...}`.
//! - A busy lock answers `409`, other failures `500`, with `{"error":"..."}`.

use std::time::Duration;

use lockd_guest::p3::Guard;
use lockd_guest::LockOptions;
use serde_json::{json, Value};
use spin_sdk::http::{Method, Request, Response};
use spin_sdk::http_service;
use spin_sdk::key_value::{Error as KvError, Store};

/// The guard's lease: an update takes milliseconds.
const LOCK_TTL: Duration = Duration::from_secs(10);
/// How long a POST waits for the lock in lockd's queue.
const LOCK_WAIT: Duration = Duration::from_secs(5);

type Answer = Result<Response<String>, (u16, String)>;

#[http_service]
async fn handle(req: Request) -> Response<String> {
    let path = req.uri().path().to_string();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let answer = match (req.method().clone(), segments.as_slice()) {
        (Method::POST, ["p3", "counter", name]) => increment(name).await,
        (Method::GET, ["p3", "counter", name]) => read(name).await,
        (Method::DELETE, ["p3", "counter", name]) => delete(name).await,
        (Method::GET, ["p3", "counters"]) => keys().await,
        (Method::GET, ["p3", "open", label]) => open(label).await,
        (Method::GET, ["p3", "variable", name]) => variable(name).await,
        _ => Err((404, "not found".to_string())),
    };
    answer.unwrap_or_else(|(status, message)| json_response(status, &json!({"error": message})))
}

fn failed(e: impl std::fmt::Display) -> (u16, String) {
    (500, e.to_string())
}

/// Spin's error case as a word, the way the WIT names it.
fn kv_error_word(e: &KvError) -> String {
    match e {
        KvError::StoreTableFull => "store-table-full".to_string(),
        KvError::NoSuchStore => "no-such-store".to_string(),
        KvError::AccessDenied => "access-denied".to_string(),
        KvError::Other(why) => format!("other: {why}"),
    }
}

async fn step() -> Result<u64, (u16, String)> {
    let text = spin_sdk::variables::get("counter_step").await.map_err(failed)?;
    match text.trim().parse::<u64>() {
        Ok(step) if step > 0 => Ok(step),
        _ => Err((500, format!("counter_step is {text:?}, not a positive integer"))),
    }
}

/// The stored counter: `(value, fencing_token)`.
async fn load(store: &Store, key: &str) -> Result<(u64, u64), (u16, String)> {
    let Some(bytes) = store.get(key).await.map_err(failed)? else {
        return Ok((0, 0));
    };
    let stored: Value = serde_json::from_slice(&bytes).map_err(failed)?;
    Ok((
        stored["value"].as_u64().unwrap_or(0),
        stored["fencing_token"].as_u64().unwrap_or(0),
    ))
}

async fn increment(name: &str) -> Answer {
    let step = step().await?;
    let key = format!("counter-p3/{name}");
    let guard = match Guard::acquire(&key, LOCK_TTL, LockOptions::default().with_wait(LOCK_WAIT))
        .await
    {
        Ok(guard) => guard,
        Err(lockd_guest::Error::Busy(_)) => return Err((409, format!("{key} is busy"))),
        Err(e) => return Err(failed(e)),
    };
    let token = guard.fencing_token();
    let store = Store::open_default().await.map_err(failed)?;
    let (value, stored_token) = load(&store, &key).await?;
    // The fence: a newer holder already wrote.
    if stored_token > token {
        return Err((409, format!("a newer holder (token {stored_token}) already wrote")));
    }
    let next = value.saturating_add(step);
    let stored = json!({"value": next, "fencing_token": token});
    store
        .set(&key, stored.to_string().as_bytes())
        .await
        .map_err(failed)?;
    guard.release().await.map_err(failed)?;
    Ok(json_response(200, &json!({"value": next, "fencing_token": token})))
}

async fn read(name: &str) -> Answer {
    let store = Store::open_default().await.map_err(failed)?;
    let (value, _) = load(&store, &format!("counter-p3/{name}")).await?;
    Ok(json_response(200, &json!({"value": value})))
}

async fn delete(name: &str) -> Answer {
    let key = format!("counter-p3/{name}");
    let store = Store::open_default().await.map_err(failed)?;
    let existed = store.exists(&key).await.map_err(failed)?;
    store.delete(&key).await.map_err(failed)?;
    Ok(json_response(200, &json!({"existed": existed})))
}

async fn keys() -> Answer {
    let store = Store::open_default().await.map_err(failed)?;
    let keys = store.get_keys().await.collect().await.map_err(failed)?;
    Ok(json_response(200, &json!({"keys": keys})))
}

async fn open(label: &str) -> Answer {
    Ok(match Store::open(label).await {
        Ok(_) => json_response(200, &json!({"opened": true})),
        Err(e) => json_response(200, &json!({"error": kv_error_word(&e)})),
    })
}

async fn variable(name: &str) -> Answer {
    use spin_sdk::variables::Error;
    Ok(match spin_sdk::variables::get(name).await {
        Ok(value) => json_response(200, &json!({"value": value})),
        Err(Error::InvalidName(_)) => json_response(200, &json!({"error": "invalid-name"})),
        Err(Error::Undefined(_)) => json_response(200, &json!({"error": "undefined"})),
        Err(e) => json_response(200, &json!({"error": e.to_string()})),
    })
}

fn json_response(status: u16, body: &Value) -> Response<String> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(body.to_string())
        .expect("a valid response")
}
