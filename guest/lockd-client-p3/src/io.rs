//! The I/O over WASI 0.3 that `lockd-client-core` asks for: configuration
//! from `wasi:cli/environment@0.3.0`, one `POST` through
//! `wasi:http/client@0.3.0`'s `send`, awaited (a waiting `lock` is a request
//! in flight, and the guest's other tasks run on), random bytes, the clocks,
//! and the tasks a resource's watcher runs on.

use std::future::Future;
use std::pin::pin;
use std::sync::OnceLock;
use std::task::Poll;

use lockd_client_core::transport::{self, HttpReply, NoReply, Timeouts};
use lockd_client_core::{not_sent_code, Config, Io, LostReason, Route, Runtime, Server};
use wit_bindgen::{FutureWriter, StreamResult};

use crate::bindings::exports::lockd::lock::types;
use crate::bindings::wasi::clocks::{monotonic_clock, system_clock};
use crate::bindings::wasi::http::client;
use crate::bindings::wasi::http::types::{
    ErrorCode, Fields, Method, Request, RequestOptions, Response, Scheme,
};
use crate::bindings::{wit_future, wit_stream};

/// Bytes asked for per read of the reply body.
const READ_CHUNK: usize = 64 * 1024;

/// This component's I/O.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Http;

impl Io for Http {
    /// A resource's watcher renews it on the task of the call that made it.
    const KEEP_ALIVE: bool = true;

    fn config(&self) -> &Result<Config, String> {
        static CONFIG: OnceLock<Result<Config, String>> = OnceLock::new();
        CONFIG.get_or_init(|| {
            Config::from_env(&crate::bindings::wasi::cli::environment::get_environment())
        })
    }

    fn post(
        &self,
        config: &Config,
        server: &Server,
        route: Route,
        body: Vec<u8>,
        wait_ms: u32,
    ) -> impl Future<Output = Result<HttpReply, NoReply>> {
        post(config, server, route, body, wait_ms)
    }

    fn random_bytes(&self) -> Vec<u8> {
        crate::bindings::wasi::random::random::get_random_bytes(16)
    }
}

impl Runtime for Http {
    type Waiter = FutureWriter<types::LostReason>;

    fn now_ms(&self) -> u64 {
        let now = system_clock::now();
        let seconds = u64::try_from(now.seconds).unwrap_or(0);
        seconds * 1_000 + u64::from(now.nanoseconds / 1_000_000)
    }

    async fn sleep_ms(&self, ms: u64) {
        monotonic_clock::wait_for(ms.saturating_mul(1_000_000)).await;
    }

    fn spawn(&self, task: impl Future<Output = ()> + 'static) {
        wit_bindgen::spawn_local(task);
    }

    /// Each write on a task of its own, which waits until the reader takes
    /// it.
    fn resolve(&self, waiters: Vec<Self::Waiter>, reason: LostReason) {
        let reason = types::LostReason::from(reason);
        for writer in waiters {
            wit_bindgen::spawn_local(async move {
                // A reader dropped meanwhile wants no answer.
                let _ = writer.write(reason).await;
            });
        }
    }
}

/// A new `lost` future: its reader for the guest, its writer for the
/// watcher (dropped unwritten, it says `released`).
pub(crate) fn lost_future() -> (
    FutureWriter<types::LostReason>,
    wit_bindgen::FutureReader<types::LostReason>,
) {
    wit_future::new(|| types::LostReason::Released)
}

/// [`Io::post`], awaited.
async fn post(
    config: &Config,
    server: &Server,
    route: Route,
    body: Vec<u8>,
    wait_ms: u32,
) -> Result<HttpReply, NoReply> {
    let headers = Fields::from_list(&config.headers())
        .map_err(|e| NoReply::Local(transport::bad_headers(&e)))?;
    let options = RequestOptions::new();
    // A host that does not support a timeout refuses to set it; the request
    // then runs under the host's own timeouts.
    let timeouts = Timeouts::new(wait_ms);
    let _ = options.set_connect_timeout(Some(timeouts.connect_ns));
    let _ = options.set_first_byte_timeout(Some(timeouts.first_byte_ns));
    let _ = options.set_between_bytes_timeout(Some(timeouts.between_bytes_ns));

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
    // The body is written while `send` runs: the host reads it only once
    // the request is on its way.
    let write = async move {
        let unsent = contents.write_all(body).await;
        drop(contents);
        drop(trailers);
        if unsent.is_empty() {
            Ok(())
        } else {
            Err("the body was not taken".to_owned())
        }
    };
    let (response, written) = join(client::send(request), write).await;
    let response = response.map_err(|e| no_reply(server, &e, &written))?;
    let status = response.get_status_code();
    let not_applied =
        transport::not_applied(&response.get_headers().get(transport::NOT_APPLIED_HEADER));
    let body = read_body(response)
        .await
        .map_err(|e| NoReply::Unknown(transport::cannot_read(server, route, &e)))?;
    let reply = HttpReply {
        status,
        body,
        not_applied,
    };
    transport::answer(server, reply, written)
}

/// The whole reply body, at most [`transport::append`]'s cap.
async fn read_body(response: Response) -> Result<Vec<u8>, String> {
    let (done, done_reader) = wit_future::new(|| Ok(()));
    let (mut stream, trailers) = Response::consume_body(response, done_reader);
    let mut body = Vec::new();
    loop {
        let (result, chunk) = stream.read(Vec::with_capacity(READ_CHUNK)).await;
        match result {
            StreamResult::Complete(_) => transport::append(&mut body, &chunk)?,
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

/// A request that got no HTTP reply: not sent if the code says it never
/// left, or if its body was not taken in full (the server cannot have had
/// the whole request); else its outcome is unknown.
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
