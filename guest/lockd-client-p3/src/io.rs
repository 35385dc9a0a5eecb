//! The I/O over WASI 0.3 that `lockd-client-core` asks for: configuration
//! from `wasi:cli/environment@0.3.0`, one `POST` through
//! `wasi:http/client@0.3.0`'s `send`, awaited (a waiting `lock` is a request
//! in flight, and the guest's other tasks run on), random bytes, the clocks,
//! and the tasks a resource's watcher runs on.

use std::future::Future;
use std::pin::pin;
use std::sync::OnceLock;
use std::task::Poll;

use lockd_client_core::transport::{self, Timeouts};
use lockd_client_core::{Config, Io, LostReason, Route, Runtime};
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
        route: Route,
        body: Vec<u8>,
        wait_ms: u32,
    ) -> impl Future<Output = Result<(u16, Vec<u8>), String>> {
        post(config, route, body, wait_ms)
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
    route: Route,
    body: Vec<u8>,
    wait_ms: u32,
) -> Result<(u16, Vec<u8>), String> {
    let headers = Fields::from_list(&config.headers()).map_err(|e| transport::bad_headers(&e))?;
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
        return Err(transport::bad_request(config, &path));
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
    let response = response.map_err(|e| cannot_reach(config, &e))?;
    let status = response.get_status_code();
    let reply = read_body(response)
        .await
        .map_err(|e| transport::cannot_read(config, route, &e))?;
    transport::answer(config, status, reply, written)
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

/// The message for a request that got no HTTP reply.
fn cannot_reach(config: &Config, e: &ErrorCode) -> String {
    transport::cannot_reach(config, e, matches!(e, ErrorCode::HttpRequestDenied))
}
