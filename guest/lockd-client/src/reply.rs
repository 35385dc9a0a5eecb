//! What a lockd server's REST reply means: the one mapping from a reply's
//! HTTP status and JSON body to a result or a WIT error.
//!
//! Replies are treated as hostile: anything that is not the JSON object the
//! API documents (a missing field, a wrong type, a token that is not an
//! unsigned 64-bit integer, an unknown status word) is `unavailable` with a
//! message saying what was wrong. Nothing here panics.

use serde_json::{Map, Value};

use crate::bindings::exports::lockd::lock::types::{Durability, Error, Grant, LockInfo};

/// Longest reply body read from the server. lockd's replies are a few
/// hundred bytes; a name or owner echoed back is at most 512 bytes.
pub(crate) const MAX_REPLY_BYTES: usize = 1 << 20;

/// Longest piece of an unexpected reply quoted in an error message.
const QUOTE_BYTES: usize = 200;

/// A reply whose status word names a success, as a JSON object.
#[derive(Debug)]
pub(crate) struct Success {
    /// The `status` word: `acquired`, `unlocked`, `extended`, `found`,
    /// `granted`, `refreshed`, `revoked`, or `not_found` (for `get` only).
    pub(crate) word: String,
    pub(crate) body: Map<String, Value>,
}

/// Reads a reply: a success word with its body, or the error it maps to.
///
/// `server` (the configured URL) and `route` only make messages useful.
pub(crate) fn read(server: &str, route: &str, http: u16, body: &[u8]) -> Result<Success, Error> {
    let unexpected = |what: &str| {
        Error::Unavailable(format!(
            "the lockd server at {server} answered {route} with HTTP {http} and {what}: {}",
            quote(body)
        ))
    };
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(body) else {
        return Err(unexpected("a body that is not a JSON object"));
    };
    let Some(word) = map.get("status").and_then(Value::as_str).map(str::to_owned) else {
        return Err(unexpected("no status word"));
    };
    let message = map
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    // The server's messages are `LockError`'s Display, which prefixes the
    // kind ("invalid argument: ..."); the native host hands guests the inner
    // message, so the prefix goes.
    let inner = |prefix: &str| {
        message
            .strip_prefix(prefix)
            .unwrap_or(message.as_str())
            .to_owned()
    };
    let success = (200..300).contains(&http);
    match word.as_str() {
        "acquired" | "unlocked" | "extended" | "found" | "granted" | "refreshed" | "revoked"
            if success =>
        {
            Ok(Success { word, body: map })
        }
        // `get` of a free lock: 404 without a message. A 404 that carries a
        // message is lockd saying the path is no route (a LOCKD_URL with a
        // wrong path), which must not read as "free".
        "not_found" if http == 404 && !map.contains_key("message") => {
            Ok(Success { word, body: map })
        }
        "busy" => match lock_info(&map) {
            Ok(holder) => Err(Error::Busy(holder)),
            Err(what) => Err(unexpected(&format!("a busy reply with {what}"))),
        },
        "not_owner" => Err(Error::NotOwner),
        "not_held" => Err(Error::NotHeld),
        "invalid_argument" => Err(Error::InvalidArgument(inner("invalid argument: "))),
        "denied" => Err(Error::Denied(inner("denied: "))),
        "unauthorized" => Err(Error::Denied(format!(
            "the lockd server at {server} refused the bearer token (HTTP {http}): {message}; \
             set LOCKD_AUTH_TOKEN to the server's token"
        ))),
        "unavailable" => Err(Error::Unavailable(inner("unavailable: "))),
        _ => Err(unexpected(&format!("the status word {word:?}"))),
    }
}

/// The grant in an `acquired` or `extended` reply.
pub(crate) fn grant(server: &str, reply: &Success) -> Result<Grant, Error> {
    let field = |name: &str| {
        u64_field(&reply.body, name).map_err(|what| {
            Error::Unavailable(format!(
                "the lockd server at {server} answered {:?} with {what}",
                reply.word
            ))
        })
    };
    Ok(Grant {
        fencing_token: field("fencing_token")?,
        expires_at_ms: field("expires_at_ms")?,
    })
}

/// The holder in a `found` reply of `get`.
pub(crate) fn found(server: &str, reply: &Success) -> Result<LockInfo, Error> {
    lock_info(&reply.body).map_err(|what| {
        Error::Unavailable(format!(
            "the lockd server at {server} answered \"found\" with {what}"
        ))
    })
}

/// `owner`, `fencing_token`, `expires_at_ms` and `durability`, as in `busy`
/// and `found` replies. The error says which field was wrong.
fn lock_info(map: &Map<String, Value>) -> Result<LockInfo, String> {
    let owner = match map.get("owner") {
        Some(Value::String(owner)) => owner.clone(),
        _ => return Err("no owner string".to_owned()),
    };
    let durability = match map.get("durability").and_then(Value::as_str) {
        Some("persistent") => Durability::Persistent,
        Some("ephemeral") => Durability::Ephemeral,
        _ => return Err("no durability (persistent or ephemeral)".to_owned()),
    };
    Ok(LockInfo {
        owner,
        fencing_token: u64_field(map, "fencing_token")?,
        expires_at_ms: u64_field(map, "expires_at_ms")?,
        durability,
    })
}

/// An unsigned 64-bit field, exact: serde_json keeps integers that fit in a
/// u64 as integers, and a float, a negative number or a string is refused.
pub(crate) fn u64_field(map: &Map<String, Value>, name: &str) -> Result<u64, String> {
    map.get(name)
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("no unsigned 64-bit {name}"))
}

/// The start of an unexpected body, for a message: lossy UTF-8, cut at
/// [`QUOTE_BYTES`].
pub(crate) fn quote(body: &[u8]) -> String {
    let cut = &body[..body.len().min(QUOTE_BYTES)];
    let mut text = format!("{:?}", String::from_utf8_lossy(cut));
    if body.len() > QUOTE_BYTES {
        text.push_str("...");
    }
    text
}
