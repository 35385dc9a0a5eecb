//! The transport: configuration from `wasi:cli/environment@0.3.0`, and one
//! `POST` through `wasi:http/client@0.3.0`'s `send`, awaited: a waiting
//! `lock` is a request in flight, and the guest's other tasks run on.

use std::future::Future;
use std::pin::pin;
use std::sync::OnceLock;
use std::task::Poll;

use lockd_api::Route;
use wit_bindgen::StreamResult;

use crate::bindings::exports::lockd::lock::types::Error;
use crate::bindings::wasi::http::client;
use crate::bindings::wasi::http::types::{
    ErrorCode, Fields, Method, Request, RequestOptions, Response, Scheme,
};
use crate::bindings::{wit_future, wit_stream};
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
/// Bytes asked for per read of the reply body.
const READ_CHUNK: usize = 64 * 1024;

/// The configuration, or the `unavailable` message every call answers.
pub(crate) fn config() -> Result<&'static Config, Error> {
    static CONFIG: OnceLock<Result<Config, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            Config::from_env(&crate::bindings::wasi::cli::environment::get_environment())
        })
        .as_ref()
        .map_err(|message| Error::Unavailable(message.clone()))
}

/// `POST` `body` to `{LOCKD_URL}` + `route`'s path: the reply's HTTP status
/// and body, or why there is none.
///
/// `wait_ms` is how long the server may legitimately take before it answers
/// (a waiting `lock`); the first-byte timeout is that plus a margin.
pub(crate) async fn post(
    config: &Config,
    route: Route,
    body: Vec<u8>,
    wait_ms: u32,
) -> Result<(u16, Vec<u8>), String> {
    let server = &config.url;
    let headers = Fields::from_list(&config.headers()).map_err(|e| {
        format!(
            "cannot send the request headers (is LOCKD_AUTH_TOKEN a valid header value?): {e:?}"
        )
    })?;
    let options = RequestOptions::new();
    // A host that does not support a timeout refuses to set it; the request
    // then runs under the host's own timeouts.
    let _ = options.set_connect_timeout(Some(ms_to_ns(CONNECT_TIMEOUT_MS)));
    let _ =
        options.set_first_byte_timeout(Some(ms_to_ns(u64::from(wait_ms) + FIRST_BYTE_MARGIN_MS)));
    let _ = options.set_between_bytes_timeout(Some(ms_to_ns(BETWEEN_BYTES_TIMEOUT_MS)));

    let (mut contents, contents_reader) = wit_stream::new::<u8>();
    // No trailers: the writer's default, written when it is dropped after
    // the body.
    let (trailers, trailers_reader) = wit_future::new(|| Ok(None));
    let (request, _transmitted) = Request::new(
        headers,
        Some(contents_reader),
        trailers_reader,
        Some(options),
    );
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
    // The body is written while `send` runs: the host reads it only once
    // the request is on its way.
    let write = async move {
        let unsent = contents.write_all(body).await;
        drop(contents);
        drop(trailers);
        unsent.is_empty()
    };
    let (response, written) = join(client::send(request), write).await;
    let response = response.map_err(|e| cannot_reach(server, &e))?;
    let status = response.get_status_code();
    let reply = read_body(response).await.map_err(|e| {
        format!("cannot read the reply of the lockd server at {server} to {route}: {e}")
    })?;
    if !written && reply.is_empty() {
        // An answer with a body says more than the write's failure.
        return Err(format!(
            "cannot send the request to the lockd server at {server}: the body was not taken"
        ));
    }
    Ok((status, reply))
}

/// The whole reply body, at most [`MAX_REPLY_BYTES`].
async fn read_body(response: Response) -> Result<Vec<u8>, String> {
    let (done, done_reader) = wit_future::new(|| Ok(()));
    let (mut stream, trailers) = Response::consume_body(response, done_reader);
    let mut body = Vec::new();
    loop {
        let (result, chunk) = stream.read(Vec::with_capacity(READ_CHUNK)).await;
        match result {
            StreamResult::Complete(_) => {
                if body.len() + chunk.len() > MAX_REPLY_BYTES {
                    return Err(format!("the reply is over {MAX_REPLY_BYTES} bytes"));
                }
                body.extend_from_slice(&chunk);
            }
            StreamResult::Dropped | StreamResult::Cancelled => break,
        }
    }
    drop(stream);
    let ended = trailers.await;
    drop(done);
    match ended {
        Ok(_) => Ok(body),
        Err(e) => Err(format!("{e:?}")),
    }
}

/// Both futures' outputs, polled together.
async fn join<A: Future, B: Future>(a: A, b: B) -> (A::Output, B::Output) {
    let (mut a, mut b) = (pin!(a), pin!(b));
    let (mut out_a, mut out_b) = (None, None);
    std::future::poll_fn(|cx| {
        if out_a.is_none() {
            if let Poll::Ready(out) = a.as_mut().poll(cx) {
                out_a = Some(out);
            }
        }
        if out_b.is_none() {
            if let Poll::Ready(out) = b.as_mut().poll(cx) {
                out_b = Some(out);
            }
        }
        if out_a.is_some() && out_b.is_some() {
            Poll::Ready((out_a.take().unwrap(), out_b.take().unwrap()))
        } else {
            Poll::Pending
        }
    })
    .await
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
