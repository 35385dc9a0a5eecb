//! `http-hostile`: a component that misbehaves on purpose, to prove the host
//! bounds every instance and serves awkward responses promptly.
//!
//! - `GET /hostile/loop` spins forever (the epoch deadline must stop it).
//! - `GET /hostile/alloc` allocates and touches memory without bound (the
//!   per-instance memory cap must stop it).
//! - `GET /hostile/slow-body` streams its response: it hands the host the
//!   head (`200`, `content-length: 9`) first, sleeps about 5 ms, then writes
//!   and flushes the body `slow body` and finishes. The body is a second
//!   small write on the connection after the head: with Nagle's algorithm on
//!   the accepted socket it waits for the client's delayed ACK (~40 ms)
//!   instead of following the head ~5 ms later.
//! - `GET /hostile/ok` answers `200 ok`: the same component still works
//!   for the next request, in a fresh instance.
//! - Anything else answers `404 not found`.

use std::time::Duration;

use futures::SinkExt as _;
use spin_sdk::http::{Fields, IncomingRequest, OutgoingResponse, ResponseOutparam};
use spin_sdk::http_component;

/// How long `/hostile/slow-body` waits between its head and its body.
const HEAD_TO_BODY: Duration = Duration::from_millis(5);

#[http_component]
async fn handle(req: IncomingRequest, out: ResponseOutparam) {
    let path = req.path_with_query().unwrap_or_default();
    let path = path.split('?').next().unwrap_or_default();
    match path {
        "/hostile/loop" => spin_forever(),
        "/hostile/alloc" => grow_forever(),
        "/hostile/slow-body" => slow_body(out).await,
        "/hostile/ok" => respond(out, 200, b"ok").await,
        _ => respond(out, 404, b"not found").await,
    }
}

/// A whole response: the head, then the body right away.
async fn respond(out: ResponseOutparam, status: u16, body: &[u8]) {
    let response = head(status, body.len());
    let mut sink = response.take_body();
    out.set(response);
    // The host hung up: nobody is left to tell.
    let _ = sink.send(body.to_vec()).await;
}

/// The head now, the body [`HEAD_TO_BODY`] later.
async fn slow_body(out: ResponseOutparam) {
    const BODY: &[u8] = b"slow body";
    let response = head(200, BODY.len());
    let mut sink = response.take_body();
    // Setting the outparam hands the head to the host, which sends it while
    // this instance sleeps.
    out.set(response);
    std::thread::sleep(HEAD_TO_BODY);
    // `send` writes and flushes; dropping the sink finishes the body.
    let _ = sink.send(BODY.to_vec()).await;
    drop(sink);
}

fn head(status: u16, length: usize) -> OutgoingResponse {
    let headers = Fields::from_list(&[
        ("content-type".to_owned(), b"text/plain".to_vec()),
        ("content-length".to_owned(), length.to_string().into_bytes()),
    ])
    .expect("valid headers");
    let response = OutgoingResponse::new(headers);
    response.set_status_code(status).expect("a valid status");
    response
}

fn spin_forever() -> ! {
    let mut n: u64 = 0;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

fn grow_forever() -> ! {
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    loop {
        // Touch every page so the memory is really used.
        chunks.push(vec![1u8; 1 << 20]);
        std::hint::black_box(&chunks);
    }
}
