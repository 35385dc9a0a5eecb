//! The transport: configuration from `wasi:cli/environment`, and one blocking
//! `POST` through `wasi:http/outgoing-handler`.

use std::sync::OnceLock;

use lockd_api::Route;
use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode, Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, RequestOptions, Scheme,
};
use wasip2::io::streams::StreamError;

use crate::bindings::exports::lockd::lock::types::Error;
use crate::config::Config;

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
/// `blocking-write-and-flush` takes at most 4096 bytes per call.
const WRITE_CHUNK: usize = 4096;
/// Bytes asked for per read of the reply body.
const READ_CHUNK: u64 = 64 * 1024;

/// The configuration, or the `unavailable` message every call answers.
pub(crate) fn config() -> Result<&'static Config, Error> {
    static CONFIG: OnceLock<Result<Config, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| Config::from_env(&wasip2::cli::environment::get_environment()))
        .as_ref()
        .map_err(|message| Error::Unavailable(message.clone()))
}

/// `POST` `body` to `{LOCKD_URL}` + `route`'s path: the reply's HTTP status
/// and body, or why there is none.
///
/// `wait_ms` is how long the server may legitimately take before it answers
/// (a waiting `lock`); the first-byte timeout is that plus a margin.
pub(crate) fn post(
    config: &Config,
    route: Route,
    body: &[u8],
    wait_ms: u32,
) -> Result<(u16, Vec<u8>), String> {
    let server = &config.url;
    let headers = Fields::from_list(&config.headers()).map_err(|e| {
        format!(
            "cannot send the request headers (is LOCKD_AUTH_TOKEN a valid header value?): {e:?}"
        )
    })?;
    let request = OutgoingRequest::new(headers);
    let path = config.path(route);
    let scheme = if config.https {
        Scheme::Https
    } else {
        Scheme::Http
    };
    let set = request
        .set_method(&Method::Post)
        .and_then(|()| request.set_scheme(Some(&scheme)))
        .and_then(|()| request.set_authority(Some(&config.authority)))
        .and_then(|()| request.set_path_with_query(Some(&path)));
    if set.is_err() {
        return Err(format!(
            "LOCKD_URL={server:?} does not make a valid request to {path}"
        ));
    }
    let options = RequestOptions::new();
    // A host that does not support a timeout refuses to set it; the request
    // then runs under the host's own timeouts.
    let _ = options.set_connect_timeout(Some(ms_to_ns(CONNECT_TIMEOUT_MS)));
    let _ =
        options.set_first_byte_timeout(Some(ms_to_ns(u64::from(wait_ms) + FIRST_BYTE_MARGIN_MS)));
    let _ = options.set_between_bytes_timeout(Some(ms_to_ns(BETWEEN_BYTES_TIMEOUT_MS)));

    let outgoing = request
        .body()
        .map_err(|()| "the host gave no request body".to_owned())?;
    let future =
        outgoing_handler::handle(request, Some(options)).map_err(|e| cannot_reach(server, &e))?;

    // Write the body after `handle`, so that a host that streams it never
    // waits on a connection that is not open yet. A failed write is kept:
    // the server may still have answered (a body too large, say).
    let written = write_body(outgoing, body);

    future.subscribe().block();
    let response = match future.get() {
        Some(Ok(Ok(response))) => response,
        Some(Ok(Err(e))) => return Err(cannot_reach(server, &e)),
        Some(Err(())) | None => return Err(format!("no reply from the lockd server at {server}")),
    };
    let status = response.status();
    let incoming = response
        .consume()
        .map_err(|()| format!("the reply from the lockd server at {server} has no body"))?;
    let reply = read_body(&incoming).map_err(|e| {
        format!("cannot read the reply of the lockd server at {server} to {route}: {e}")
    });
    // The stream is gone; ending the body releases it before the response.
    drop(IncomingBody::finish(incoming));
    let reply = reply?;
    if let Err(e) = written {
        // An answer arrived anyway; it says more than the write error.
        if reply.is_empty() {
            return Err(format!(
                "cannot send the request to the lockd server at {server}: {e}"
            ));
        }
    }
    Ok((status, reply))
}

/// Writes and finishes the request body.
fn write_body(outgoing: OutgoingBody, body: &[u8]) -> Result<(), String> {
    let stream = outgoing
        .write()
        .map_err(|()| "the host gave no request body stream".to_owned())?;
    let mut result = Ok(());
    for chunk in body.chunks(WRITE_CHUNK) {
        if let Err(e) = stream.blocking_write_and_flush(chunk) {
            result = Err(stream_error(&e));
            break;
        }
    }
    drop(stream);
    let finished = OutgoingBody::finish(outgoing, None).map_err(|e| format!("{e:?}"));
    result.and(finished)
}

/// The whole reply body, at most [`MAX_REPLY_BYTES`].
fn read_body(incoming: &IncomingBody) -> Result<Vec<u8>, String> {
    let stream = incoming
        .stream()
        .map_err(|()| "the host gave no reply body stream".to_owned())?;
    let mut body = Vec::new();
    loop {
        match stream.blocking_read(READ_CHUNK) {
            Ok(bytes) => {
                if body.len() + bytes.len() > MAX_REPLY_BYTES {
                    return Err(format!("the reply is over {MAX_REPLY_BYTES} bytes"));
                }
                body.extend_from_slice(&bytes);
            }
            Err(StreamError::Closed) => return Ok(body),
            Err(e) => return Err(stream_error(&e)),
        }
    }
}

fn stream_error(e: &StreamError) -> String {
    match e {
        StreamError::Closed => "the stream closed".to_owned(),
        StreamError::LastOperationFailed(error) => error.to_debug_string(),
    }
}

/// The message for a request that got no HTTP reply.
fn cannot_reach(server: &str, e: &ErrorCode) -> String {
    let hint = match e {
        ErrorCode::HttpRequestDenied => {
            " (the host refused the outgoing request: allow the server's host, \
             e.g. Spin's allowed_outbound_hosts)"
        }
        _ => "",
    };
    format!("cannot reach the lockd server at {server}: {e:?}{hint}")
}

fn ms_to_ns(ms: u64) -> u64 {
    ms.saturating_mul(1_000_000)
}
