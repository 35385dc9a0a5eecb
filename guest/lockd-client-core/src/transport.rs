//! What the two transports (`wasi:http` 0.2 and 0.3) do alike around one
//! `POST` ([`crate::Io::post`]): its timeouts, the cap on a reply, which
//! failure a reply outweighs, and the messages of a request that got no
//! answer.

use std::fmt;

use crate::{Config, Route};

/// How long connecting to the server may take.
const CONNECT_TIMEOUT_MS: u64 = 5_000;
/// Added to a lock's `wait-ms` for the time until the reply's first byte: the
/// server answers a waiting `lock` when the wait ends, a moment after.
const FIRST_BYTE_MARGIN_MS: u64 = 30_000;
/// The longest pause between two bytes of a reply.
const BETWEEN_BYTES_TIMEOUT_MS: u64 = 30_000;

/// Longest reply body read from the server. lockd's replies are a few
/// hundred bytes; a name or owner echoed back is at most 512 bytes.
const MAX_REPLY_BYTES: usize = 1 << 20;

/// The timeouts of one request, in nanoseconds (wasi:http's unit). A host
/// that does not support one refuses to set it; the request then runs under
/// the host's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    pub connect_ns: u64,
    /// `wait_ms` (how long the server may legitimately take before it
    /// answers: a waiting `lock`) plus a margin.
    pub first_byte_ns: u64,
    pub between_bytes_ns: u64,
}

impl Timeouts {
    /// The timeouts of a request the server may hold for `wait_ms`.
    pub fn new(wait_ms: u32) -> Timeouts {
        Timeouts {
            connect_ns: ms_to_ns(CONNECT_TIMEOUT_MS),
            first_byte_ns: ms_to_ns(u64::from(wait_ms) + FIRST_BYTE_MARGIN_MS),
            between_bytes_ns: ms_to_ns(BETWEEN_BYTES_TIMEOUT_MS),
        }
    }
}

fn ms_to_ns(ms: u64) -> u64 {
    ms.saturating_mul(1_000_000)
}

/// The message for headers the host refused ([`Config::headers`]).
pub fn bad_headers(error: &impl fmt::Debug) -> String {
    format!(
        "cannot send the request headers (is LOCKD_AUTH_TOKEN a valid header value?): {error:?}"
    )
}

/// The message for a request the host refused to address to `path`.
pub fn bad_request(config: &Config, path: &str) -> String {
    format!(
        "LOCKD_URL={:?} does not make a valid request to {path}",
        config.url
    )
}

/// The message for a request that got no HTTP reply: `error` is the host's
/// `error-code`, `denied` whether it is `HTTP-request-denied`.
pub fn cannot_reach(config: &Config, error: &impl fmt::Debug, denied: bool) -> String {
    let hint = if denied {
        " (the host refused the outgoing request: allow the server's host, \
         e.g. Spin's allowed_outbound_hosts)"
    } else {
        ""
    };
    format!(
        "cannot reach the lockd server at {}: {error:?}{hint}",
        config.url
    )
}

/// Adds `chunk` to the reply `body` read so far, unless that makes it
/// longer than [`MAX_REPLY_BYTES`].
pub fn append(body: &mut Vec<u8>, chunk: &[u8]) -> Result<(), String> {
    if body.len() + chunk.len() > MAX_REPLY_BYTES {
        return Err(format!("the reply is over {MAX_REPLY_BYTES} bytes"));
    }
    body.extend_from_slice(chunk);
    Ok(())
}

/// The message for a reply to `route` whose body could not be read.
pub fn cannot_read(config: &Config, route: Route, error: &str) -> String {
    format!(
        "cannot read the reply of the lockd server at {} to {route}: {error}",
        config.url
    )
}

/// What a request answers once its reply is read: the HTTP status and
/// body, unless the body was not sent in full (`written`) and the reply is
/// empty. A reply with a body says more than the write's failure (the
/// server may answer a body too large before taking it).
pub fn answer(
    config: &Config,
    status: u16,
    reply: Vec<u8>,
    written: Result<(), String>,
) -> Result<(u16, Vec<u8>), String> {
    match written {
        Err(e) if reply.is_empty() => Err(format!(
            "cannot send the request to the lockd server at {}: {e}",
            config.url
        )),
        _ => Ok((status, reply)),
    }
}
