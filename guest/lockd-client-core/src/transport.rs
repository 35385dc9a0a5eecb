//! What the two transports (`wasi:http` 0.2 and 0.3) do alike around one
//! `POST` to one host ([`crate::Io::post`]): its timeouts, the cap on a
//! reply, which failure a reply outweighs, whether a request that got no
//! answer may have been applied ([`NoReply`], [`crate::not_sent_code!`]), and the
//! messages of a request that got no answer.

use std::fmt;

use crate::config::Server;
use crate::Route;

/// The response header a lockd server adds, with the value `1`, to a 503 it
/// gave before touching the store (it was draining): the request was not
/// applied, so any call may go on to another host.
pub const NOT_APPLIED_HEADER: &str = "lockd-not-applied";

/// The reply of one host: its HTTP status, its body, and whether it carried
/// [`NOT_APPLIED_HEADER`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpReply {
    pub status: u16,
    pub body: Vec<u8>,
    pub not_applied: bool,
}

/// Why one host gave no reply, and so what may be done next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoReply {
    /// Nothing the host could act on left this component (no connection,
    /// DNS, TLS handshake, the host refused the request, or the body was
    /// not handed over in full): the next host may have it.
    NotSent(String),
    /// The request may have reached the server and been applied: only a
    /// call that is safe to repeat goes on to the next host.
    Unknown(String),
    /// This component cannot make the request at all (a header the host
    /// refuses): every host would refuse it alike.
    Local(String),
}

/// Whether a wasi:http `error-code` (0.2's or 0.3's: the variants have the
/// same names) says the request never left for the server: it failed at
/// DNS, at connecting, in the TLS handshake, or the host refused it before
/// sending. Any other code (a connection that broke or timed out after
/// connecting, a protocol error, an internal error) may come after the
/// server took the request.
///
/// `not_sent_code!(e, ErrorCode)`, with the client's `ErrorCode` type in
/// scope under that name.
#[macro_export]
macro_rules! not_sent_code {
    ($code:expr, $ErrorCode:ident) => {
        matches!(
            $code,
            $ErrorCode::DnsTimeout
                | $ErrorCode::DnsError(_)
                | $ErrorCode::DestinationNotFound
                | $ErrorCode::DestinationUnavailable
                | $ErrorCode::DestinationIpProhibited
                | $ErrorCode::DestinationIpUnroutable
                | $ErrorCode::ConnectionRefused
                // wasmtime answers this for a connect or TLS handshake that
                // timed out; the first byte's timeout is
                // `connection-read-timeout`.
                | $ErrorCode::ConnectionTimeout
                | $ErrorCode::ConnectionLimitReached
                | $ErrorCode::TlsProtocolError
                | $ErrorCode::TlsCertificateError
                | $ErrorCode::TlsAlertReceived(_)
                | $ErrorCode::HttpRequestDenied
                | $ErrorCode::HttpRequestMethodInvalid
                | $ErrorCode::HttpRequestUriInvalid
                | $ErrorCode::HttpRequestUriTooLong
                | $ErrorCode::LoopDetected
                | $ErrorCode::ConfigurationError
        )
    };
}

/// Whether the values of [`NOT_APPLIED_HEADER`] in a reply mark it.
pub fn not_applied(values: &[Vec<u8>]) -> bool {
    values.iter().any(|value| value.trim_ascii() == b"1")
}

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

/// The message for headers the host refused ([`crate::Config::headers`]).
pub fn bad_headers(error: &impl fmt::Debug) -> String {
    format!(
        "cannot send the request headers (is LOCKD_AUTH_TOKEN a valid header value?): {error:?}"
    )
}

/// The message for a request the host refused to address to `path`.
pub fn bad_request(server: &Server, path: &str) -> String {
    format!("{:?} does not make a valid request to {path}", server.url)
}

/// The message for a request that got no HTTP reply: `error` is the host's
/// `error-code`, `denied` whether it is `HTTP-request-denied`.
pub fn cannot_reach(server: &Server, error: &impl fmt::Debug, denied: bool) -> String {
    let hint = if denied {
        " (the host refused the outgoing request: allow the server's host, \
         e.g. Spin's allowed_outbound_hosts)"
    } else {
        ""
    };
    format!(
        "cannot reach the lockd server at {}: {error:?}{hint}",
        server.url
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
pub fn cannot_read(server: &Server, route: Route, error: &str) -> String {
    format!(
        "cannot read the reply of the lockd server at {} to {route}: {error}",
        server.url
    )
}

/// What a request answers once its reply is read, unless the body was not
/// sent in full (`written`) and the reply is empty: then the server cannot
/// have had the whole request, so it applied nothing. A reply with a body
/// says more than the write's failure (the server may answer a body too
/// large before taking it).
pub fn answer(
    server: &Server,
    reply: HttpReply,
    written: Result<(), String>,
) -> Result<HttpReply, NoReply> {
    match written {
        Err(e) if reply.body.is_empty() => Err(NoReply::NotSent(not_written(server, &e))),
        _ => Ok(reply),
    }
}

/// The message for a request whose body was not handed over in full.
pub fn not_written(server: &Server, error: &str) -> String {
    format!(
        "cannot send the request to the lockd server at {}: {error}",
        server.url
    )
}
