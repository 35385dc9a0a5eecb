//! While a server starts: its listener is bound before the store opens
//! (the embedded store's recovery reads all of it; an etcd store connects)
//! and the extensions prepare, and answers probes meanwhile, so that a
//! liveness probe does not restart a server that is recovering: `/livez`
//! 200 `ok`, `/readyz` 503 `recovering`, anything else 503 `unavailable`
//! (nothing is served before the store is open). Once the server is
//! ready to serve, [`Phase::end`] stops accepting and asks these
//! connections to close; the server's own loop accepts from then on.

use std::future::Future;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use lockd_api::{ErrorReply, Route, Status, StatusReply};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::drain::Connections;
use super::ready::Readiness;
use super::{accept_loop, handler, Respond};
use crate::body::{full, Body};
use crate::tls::Tls;

/// What a request other than a probe is answered while the server starts.
pub const STARTING: &str = "lockd is starting: its store is being opened; retry shortly";

/// The responder of the starting phase.
pub(super) struct Starting;

impl Respond for Starting {
    fn respond(&self, req: Request<Incoming>) -> impl Future<Output = Response<Body>> + Send {
        std::future::ready(answer(req.uri().path()))
    }
}

/// The answer to a request for `path` while the server starts.
fn answer(path: &str) -> Response<Body> {
    match Route::from_path(path) {
        Some(Route::Livez) => json(StatusCode::OK, &StatusReply { status: Status::Ok }),
        Some(Route::Readyz) => json(
            StatusCode::SERVICE_UNAVAILABLE,
            &Readiness::recovering().reply(),
        ),
        // Nothing is applied before the store is open: another server
        // may take the call.
        _ => {
            let mut response = json(
                StatusCode::SERVICE_UNAVAILABLE,
                &ErrorReply {
                    message: STARTING.to_string(),
                    status: Status::Unavailable,
                },
            );
            super::drain::mark_not_applied(&mut response);
            response
        }
    }
}

fn json(code: StatusCode, body: &impl Serialize) -> Response<Body> {
    let mut response = Response::new(full(serde_json::to_vec(body).unwrap_or_default()));
    *response.status_mut() = code;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The starting phase, serving until [`Phase::end`] (or until dropped:
/// the server could not start).
pub(super) struct Phase {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
    connections: Arc<Connections>,
}

/// Starts answering on `listener` (through `tls`, if given).
pub(super) fn serve(listener: Arc<TcpListener>, tls: Option<Arc<Tls>>) -> Phase {
    let (stop, stopped) = oneshot::channel::<()>();
    let connections = Arc::new(Connections::default());
    let handle = handler(Arc::new(Starting), connections.clone());
    let stopped = async {
        let _ = stopped.await;
    };
    let task = tokio::spawn(accept_loop(listener, tls, stopped, handle));
    Phase {
        stop: Some(stop),
        task,
        connections,
    }
}

impl Phase {
    /// Stops accepting, and asks the connections accepted meanwhile to
    /// close once their request in flight is answered (they are not waited
    /// for: each answer is immediate).
    pub(super) async fn end(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
        self.connections.close_all();
    }
}

impl Drop for Phase {
    fn drop(&mut self) {
        self.task.abort();
        self.connections.close_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt as _;

    async fn body(response: Response<Body>) -> serde_json::Value {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn probes_answer_and_everything_else_is_unavailable() {
        let live = answer("/livez");
        assert_eq!(live.status(), StatusCode::OK);
        assert_eq!(body(live).await, serde_json::json!({"status": "ok"}));
        let ready = answer("/readyz");
        assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
        // A probe's answer is not a refused call.
        assert!(ready.headers().get(Status::NOT_APPLIED_HEADER).is_none());
        let ready = body(ready).await;
        assert_eq!(ready["status"], "unavailable");
        assert!(ready["reasons"][0]
            .as_str()
            .unwrap()
            .starts_with("recovering"));
        for path in ["/healthz", "/metrics", "/v1/locks/lock", "/nothing"] {
            let other = answer(path);
            assert_eq!(other.status(), StatusCode::SERVICE_UNAVAILABLE, "{path}");
            assert_eq!(
                other.headers().get(Status::NOT_APPLIED_HEADER).unwrap(),
                "1",
                "{path}"
            );
            assert_eq!(body(other).await["message"], STARTING, "{path}");
        }
    }
}
