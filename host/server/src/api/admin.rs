//! `POST /v1/admin/snapshot`: a consistent snapshot of the serving redb
//! store, sent as the snapshot file's bytes (`application/octet-stream`),
//! taken without stopping lock traffic ([`lockd_redb::snapshot::save`]).
//! Only an admin token over every namespace may take one: a snapshot holds
//! every namespace's locks. `lockd snapshot save FILE` writes it to a file,
//! `lockd snapshot restore` builds a store from it, offline.
//!
//! The snapshot is written on a blocking thread into a small channel that
//! the response body reads, so the server never holds more than a few
//! chunks of it. A failure before the first chunk is an error reply
//! (`unavailable`); one after it ends the body early, and the client's
//! check of the file (its checksum) tells it was cut short.
//!
//! **The store's handle.** A snapshot is taken through the
//! [`lockd_redb::Store`] the server opened, which the lock service does
//! not expose: the server passes it in [`ApiOptions::snapshots`](super::ApiOptions::snapshots)
//! ([`crate::config::LockdConfig::open_service_and_store`]).

use std::io::{self, Write};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::Frame;
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};
use lockd_api::Status;
use tokio::sync::{mpsc, oneshot};

use super::access::Asker;
use super::reply::Refused;
use crate::body::Body;

/// What the route answers a server whose store is not redb.
const NOT_REDB: &str = "this server's store is not lockd's embedded redb store, so lockd cannot \
                        snapshot it: a memory store keeps nothing, and an etcd store is backed up \
                        with `etcdctl snapshot save`";

/// The size of the chunks the snapshot is sent in.
const CHUNK_BYTES: usize = 256 << 10;

/// Chunks written ahead of the client before the snapshot waits for it.
const CHUNKS_IN_FLIGHT: usize = 4;

/// `POST /v1/admin/snapshot`: the snapshot of `store` as a stream of its
/// bytes, for an admin token (the route's role, checked before) over every
/// namespace.
pub(super) async fn snapshot(
    store: Option<&lockd_redb::Store>,
    a: Asker<'_>,
) -> Result<Response<Body>, Refused> {
    if let Some(scope) = a.caller.scope() {
        let refusal = format!(
            "token {:?} may not take a snapshot, which holds every namespace; it needs \
             namespaces [\"*\"] (its namespaces are {scope})",
            a.caller.name()
        );
        tracing::warn!(
            token = a.caller.name(),
            peer = %a.peer,
            route = a.route.path(),
            reason = %refusal,
            "request forbidden"
        );
        return Err(Refused::Said(Status::Forbidden, refusal));
    }
    let Some(store) = store.cloned() else {
        return Err(Refused::InvalidArgument(NOT_REDB.to_string()));
    };
    tracing::info!(token = a.caller.name(), peer = %a.peer, "snapshot requested");
    let (chunks, body) = mpsc::channel(CHUNKS_IN_FLIGHT);
    let (started, start) = oneshot::channel();
    tokio::task::spawn_blocking(move || send_snapshot(&store, chunks, started));
    match start.await {
        Ok(Ok(())) => {
            let mut response = Response::new(SnapshotBody(body).boxed_unsync());
            *response.status_mut() = StatusCode::OK;
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            Ok(response)
        }
        Ok(Err(why)) => Err(Refused::Said(Status::Unavailable, why)),
        Err(_) => Err(Refused::Said(
            Status::Unavailable,
            "the snapshot stopped before it started; the server's log says why".to_string(),
        )),
    }
}

/// Writes the snapshot of `store` into `chunks`, telling `started` once
/// the first chunk is ready (or why there will be none). Runs on a
/// blocking thread.
fn send_snapshot(
    store: &lockd_redb::Store,
    chunks: mpsc::Sender<Result<Bytes, anyhow::Error>>,
    started: oneshot::Sender<Result<(), String>>,
) {
    let mut out = Chunks {
        chunks,
        buffer: Vec::with_capacity(CHUNK_BYTES),
        started: Some(started),
    };
    let sent = lockd_redb::snapshot::save(store, &mut out)
        .map_err(|e| e.to_string())
        .and_then(|report| {
            out.finish()
                .map(|()| report)
                .map_err(|e| format!("sending the snapshot failed: {e}"))
        });
    match sent {
        Ok(report) => tracing::info!(
            locks = report.locks,
            shares = report.shares,
            leases = report.leases,
            highest_token = report.highest_token,
            bytes = report.bytes,
            elapsed_ms = report.elapsed.as_millis() as u64,
            "snapshot sent"
        ),
        Err(why) => {
            tracing::warn!(error = %why, "snapshot failed");
            out.fail(why);
        }
    }
}

/// The snapshot's bytes on their way to the response body, a chunk at a
/// time.
struct Chunks {
    chunks: mpsc::Sender<Result<Bytes, anyhow::Error>>,
    buffer: Vec<u8>,
    /// Told when the first chunk goes (then the reply is 200), or why none
    /// will.
    started: Option<oneshot::Sender<Result<(), String>>>,
}

impl Chunks {
    /// Sends what is buffered.
    fn send(&mut self) -> io::Result<()> {
        if let Some(started) = self.started.take() {
            let _ = started.send(Ok(()));
        }
        let chunk = std::mem::replace(&mut self.buffer, Vec::with_capacity(CHUNK_BYTES));
        self.chunks
            .blocking_send(Ok(Bytes::from(chunk)))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the client went away"))
    }

    /// Sends the rest, once the snapshot is written whole.
    fn finish(&mut self) -> io::Result<()> {
        if self.buffer.is_empty() && self.started.is_none() {
            return Ok(());
        }
        self.send()
    }

    /// Says why the snapshot failed: in the reply if it has not started,
    /// else by ending the body with an error, which cuts the response short.
    fn fail(mut self, why: String) {
        match self.started.take() {
            Some(started) => {
                let _ = started.send(Err(why));
            }
            None => {
                let _ = self.chunks.blocking_send(Err(anyhow::anyhow!(why)));
            }
        }
    }
}

impl Write for Chunks {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.buffer.extend_from_slice(bytes);
        if self.buffer.len() >= CHUNK_BYTES {
            self.send()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A response body fed by the snapshot's chunks; it ends when the sender
/// is dropped, early with an error if the snapshot failed.
struct SnapshotBody(mpsc::Receiver<Result<Bytes, anyhow::Error>>);

impl hyper::body::Body for SnapshotBody {
    type Data = Bytes;
    type Error = anyhow::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|bytes| bytes.map(Frame::data)))
    }
}
