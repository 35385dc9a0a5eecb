//! The I/O over WASI 0.2 that `lockd-client-core` asks for: configuration
//! from `wasi:cli/environment`, one blocking `POST` through
//! `wasi:http/outgoing-handler`, random bytes, and the clocks' pollables.

use std::future::Future;
use std::pin::pin;
use std::sync::OnceLock;
use std::task::{Context, Poll, Waker};

use lockd_client_core::transport::{self, HttpReply, NoReply, Timeouts};
use lockd_client_core::{not_sent_code, Config, Io, Route, Server};
use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode, Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, RequestOptions, Scheme,
};
use wasip2::io::poll::Pollable;
use wasip2::io::streams::StreamError;

/// `blocking-write-and-flush` takes at most 4096 bytes per call.
const WRITE_CHUNK: usize = 4096;
/// Bytes asked for per read of the reply body.
const READ_CHUNK: u64 = 64 * 1024;

/// This component's I/O. Each request blocks until its reply, so a call of
/// the core completes in one poll ([`run`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Http;

impl Io for Http {
    /// A component on a WASI 0.2 host has no task that could renew in the
    /// background.
    const KEEP_ALIVE: bool = false;

    fn config(&self) -> &Result<Config, String> {
        static CONFIG: OnceLock<Result<Config, String>> = OnceLock::new();
        CONFIG.get_or_init(|| Config::from_env(&wasip2::cli::environment::get_environment()))
    }

    fn post(
        &self,
        config: &Config,
        server: &Server,
        route: Route,
        body: Vec<u8>,
        wait_ms: u32,
    ) -> impl Future<Output = Result<HttpReply, NoReply>> {
        // Sent and answered now: the future is ready.
        std::future::ready(post(config, server, route, &body, wait_ms))
    }

    fn random_bytes(&self) -> Vec<u8> {
        wasip2::random::random::get_random_bytes(16)
    }
}

/// Runs a call of `lockd-client-core` to its end. Over [`Http`], whose
/// requests block, it never waits: one poll completes it.
pub(crate) fn run<T>(call: impl Future<Output = T>) -> T {
    let mut call = pin!(call);
    match call.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(value) => value,
        Poll::Pending => unreachable!("a call over blocking I/O waited"),
    }
}

/// A pollable ready at `at_ms` (Unix ms) by this host's clocks: the loss a
/// composed client can know of without asking the server.
pub(crate) fn ready_at(at_ms: u64) -> Pollable {
    let now = wasip2::clocks::wall_clock::now();
    let now_ms = now.seconds * 1_000 + u64::from(now.nanoseconds / 1_000_000);
    ready_in(at_ms.saturating_sub(now_ms))
}

/// A pollable ready `ms` milliseconds from now (at once for 0).
pub(crate) fn ready_in(ms: u64) -> Pollable {
    wasip2::clocks::monotonic_clock::subscribe_duration(ms.saturating_mul(1_000_000))
}

/// [`Io::post`], blocking until the reply.
fn post(
    config: &Config,
    server: &Server,
    route: Route,
    body: &[u8],
    wait_ms: u32,
) -> Result<HttpReply, NoReply> {
    let url = &server.url;
    let headers = Fields::from_list(&config.headers())
        .map_err(|e| NoReply::Local(transport::bad_headers(&e)))?;
    let request = OutgoingRequest::new(headers);
    let path = server.path(route);
    let scheme = if server.https {
        Scheme::Https
    } else {
        Scheme::Http
    };
    let set = request
        .set_method(&Method::Post)
        .and_then(|()| request.set_scheme(Some(&scheme)))
        .and_then(|()| request.set_authority(Some(&server.authority)))
        .and_then(|()| request.set_path_with_query(Some(&path)));
    if set.is_err() {
        return Err(NoReply::NotSent(transport::bad_request(server, &path)));
    }
    let options = RequestOptions::new();
    // A host that does not support a timeout refuses to set it; the request
    // then runs under the host's own timeouts.
    let timeouts = Timeouts::new(wait_ms);
    let _ = options.set_connect_timeout(Some(timeouts.connect_ns));
    let _ = options.set_first_byte_timeout(Some(timeouts.first_byte_ns));
    let _ = options.set_between_bytes_timeout(Some(timeouts.between_bytes_ns));

    let outgoing = request
        .body()
        .map_err(|()| NoReply::Local("the host gave no request body".to_owned()))?;
    // `handle` refusing the request means nothing was sent, whatever the
    // code.
    let future = outgoing_handler::handle(request, Some(options))
        .map_err(|e| NoReply::NotSent(cannot_reach(server, &e)))?;

    // Write the body after `handle`, so that a host that streams it never
    // waits on a connection that is not open yet. A failed write is kept:
    // the server may still have answered (a body too large, say).
    let written = write_body(outgoing, body);

    future.subscribe().block();
    let response = match future.get() {
        Some(Ok(Ok(response))) => response,
        Some(Ok(Err(e))) => return Err(no_reply(server, &e, &written)),
        Some(Err(())) | None => {
            return Err(NoReply::Unknown(format!(
                "no reply from the lockd server at {url}"
            )))
        }
    };
    let status = response.status();
    let not_applied =
        transport::not_applied(&response.headers().get(transport::NOT_APPLIED_HEADER));
    let incoming = response.consume().map_err(|()| {
        NoReply::Unknown(format!(
            "the reply from the lockd server at {url} has no body"
        ))
    })?;
    let body = read_body(&incoming)
        .map_err(|e| NoReply::Unknown(transport::cannot_read(server, route, &e)));
    // The stream is gone; ending the body releases it before the response.
    drop(IncomingBody::finish(incoming));
    let reply = HttpReply {
        status,
        body: body?,
        not_applied,
    };
    transport::answer(server, reply, written)
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

/// The whole reply body, at most [`transport::append`]'s cap.
fn read_body(incoming: &IncomingBody) -> Result<Vec<u8>, String> {
    let stream = incoming
        .stream()
        .map_err(|()| "the host gave no reply body stream".to_owned())?;
    let mut body = Vec::new();
    loop {
        match stream.blocking_read(READ_CHUNK) {
            Ok(bytes) => transport::append(&mut body, &bytes)?,
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

/// A request that got no HTTP reply: not sent if the code says it never
/// left, or if its body was not handed over in full (the server cannot
/// have had the whole request); else its outcome is unknown.
fn no_reply(server: &Server, e: &ErrorCode, written: &Result<(), String>) -> NoReply {
    let message = cannot_reach(server, e);
    match written {
        _ if not_sent_code!(e, ErrorCode) => NoReply::NotSent(message),
        Err(unwritten) => NoReply::NotSent(format!("{message} ({unwritten})")),
        Ok(()) => NoReply::Unknown(message),
    }
}

/// The message for a request that got no HTTP reply.
fn cannot_reach(server: &Server, e: &ErrorCode) -> String {
    transport::cannot_reach(server, e, matches!(e, ErrorCode::HttpRequestDenied))
}
