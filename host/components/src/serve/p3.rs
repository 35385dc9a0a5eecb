//! WASIp3 components (`wasi:http/handler@0.3.x`), each instance serving
//! several requests at once and many in turn, through wasmtime-wasi-http's
//! [`ProxyHandler`].
//!
//! - An instance takes at most `[limits] instance_concurrent_requests` at
//!   once and `instance_requests` in all, then is dropped once its last
//!   request is answered; an idle instance is dropped after
//!   [`IDLE_INSTANCE_TIMEOUT`]. With either limit at 1, every request gets
//!   a fresh instance.
//! - Each request has `request_timeout_ms`: past it, it answers 500 and its
//!   instance takes no more requests. A guest that never yields is bounded
//!   too: the epoch makes it yield every tick, and the worker drops the
//!   whole instance once its latest request is older than the timeout.
//! - Each request's task is tied to a [`lockd_wasm::p3::Abandon`]: a
//!   request given up (client gone, timed out, failed) has its task's lock
//!   waits leave their queues, never granted.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper::{Request, Response};
use lockd_wasm::p3::{Abandon, AbandonWatch};
use wasmtime::component::GuestTaskId;
use wasmtime::{Store, StoreContextMut};
use wasmtime_wasi_http::handler::{
    ExpirationError, HandlerState, Instance, InstantiationError, Proxy, ProxyHandler, ShouldAccept,
    TrapOrPanicError, WorkerExpiration, WorkerState, WorkerStatus,
};
use wasmtime_wasi_http::p3::bindings::ServicePre;
use wasmtime_wasi_http::WasiHttpView as _;

use super::instance::{with_https_scheme, InstanceLimits, RequestState, StoreRecipe};

/// How long an instance with no request in progress is kept for the next.
pub(super) const IDLE_INSTANCE_TIMEOUT: Duration = Duration::from_secs(1);

/// The instances of one WASIp3 component.
pub(super) struct Instances {
    handler: ProxyHandler<Spawner>,
}

impl Instances {
    pub(super) fn new(
        id: &str,
        pre: ServicePre<RequestState>,
        recipe: Arc<StoreRecipe>,
        limits: InstanceLimits,
    ) -> Self {
        Instances {
            handler: ProxyHandler::new(Spawner {
                id: id.to_string(),
                pre,
                recipe,
                limits,
                next_instance: AtomicU64::new(0),
            }),
        }
    }

    /// Answers `req` in one of the component's instances: the response
    /// body collected (bounded by `response_body_bytes`) within the
    /// request timeout.
    pub(super) async fn call(
        &self,
        req: Request<Incoming>,
        limits: InstanceLimits,
    ) -> anyhow::Result<Response<Bytes>> {
        let req = with_https_scheme(req)
            .map(|body| body.map_err(wasmtime_wasi_http::Error::from).boxed_unsync());
        let (abandon, watch) = Abandon::new();
        // Given up unless answered: dropped (the client went away) or
        // failed, the request's task lets go of its lock waits.
        let abandon = AbandonUnlessAnswered(Some(abandon));
        let data = RequestData {
            abandon: watch,
            span: tracing::Span::current(),
        };
        let run = async {
            let response = self
                .handler
                .handle(data, req)
                .await
                .map_err(describe_handler_error)?;
            let (parts, body) = response.into_parts();
            let limit = limits.response_body_bytes;
            let bytes = http_body_util::Limited::new(body, limit)
                .collect()
                .await
                .map_err(|e| match e.downcast::<http_body_util::LengthLimitError>() {
                    Ok(_) => anyhow!(
                        "the response body exceeds the limit of {limit} bytes \
                             ([limits] response_body_bytes in lockd.toml)"
                    ),
                    Err(e) => anyhow!("reading the response body: {e:?}"),
                })?
                .to_bytes();
            anyhow::Ok(Response::from_parts(parts, bytes))
        };
        let response = match tokio::time::timeout(limits.timeout, run).await {
            Ok(result) => result?,
            Err(_) => return Err(anyhow!("timed out after {:?}", limits.timeout)),
        };
        abandon.answered();
        Ok(response)
    }
}

/// Abandons the request's task when dropped, unless the request was
/// answered.
struct AbandonUnlessAnswered(Option<Abandon>);

impl AbandonUnlessAnswered {
    fn answered(mut self) {
        self.0 = None;
    }
}

impl Drop for AbandonUnlessAnswered {
    fn drop(&mut self) {
        if let Some(abandon) = self.0.take() {
            abandon.abandon();
        }
    }
}

/// The handler's errors in words for the 500 answer; the trap itself is
/// logged with its instance ([`Worker::drop`]).
fn describe_handler_error(e: wasmtime::Error) -> anyhow::Error {
    if e.is::<ExpirationError>() {
        anyhow!("timed out (its instance takes no more requests)")
    } else if e.is::<TrapOrPanicError>() {
        anyhow!("its instance trapped (the instance's other requests failed with it)")
    } else if let Some(e) = e.downcast_ref::<InstantiationError<RequestData>>() {
        anyhow!("instantiating: {:?}", e.error)
    } else {
        anyhow::Error::from(e)
    }
}

/// What a request brings to the instance that takes it.
struct RequestData {
    abandon: AbandonWatch,
    /// The request's span, for what the instance logs about it.
    span: tracing::Span,
}

/// Makes the component's instances: a store from the recipe, instantiated.
struct Spawner {
    id: String,
    pre: ServicePre<RequestState>,
    recipe: Arc<StoreRecipe>,
    limits: InstanceLimits,
    next_instance: AtomicU64,
}

impl HandlerState for Spawner {
    type StoreData = RequestState;
    type WorkerExpiration = Expiration;
    type WorkerState = Worker;

    async fn instantiate(&self) -> wasmtime::Result<Instance<RequestState, Expiration, Worker>> {
        let instance = self.next_instance.fetch_add(1, Ordering::Relaxed);
        let mut store = self.recipe.store(self.pre.engine());
        // An instance outlives any one request, so its epoch deadline cannot
        // be a request's: the guest yields every tick instead, which lets
        // the worker check its requests' expiry ([`Expiration`]).
        store.epoch_deadline_async_yield_and_update(1);
        store.set_epoch_deadline(1);
        let service =
            match tokio::time::timeout(self.limits.timeout, self.pre.instantiate_async(&mut store))
                .await
            {
                Ok(service) => service?,
                Err(_) => {
                    wasmtime::bail!("instantiation timed out after {:?}", self.limits.timeout)
                }
            };
        tracing::debug!(component = %self.id, instance, "component instance started");
        Ok(Instance {
            store,
            proxy: Proxy::P3(service),
            view: RequestState::http,
            expiration: Expiration {
                request_timeout: self.limits.timeout,
                sleep: Box::pin(tokio::time::sleep(Duration::MAX)),
            },
            state: Worker {
                component: self.id.clone(),
                instance,
                limits: self.limits,
            },
        })
    }
}

/// One instance's bookkeeping.
struct Worker {
    component: String,
    instance: u64,
    limits: InstanceLimits,
}

impl WorkerState for Worker {
    type StoreData = RequestState;
    type RequestData = RequestData;

    fn should_accept_request(&self, concurrent: usize, total: usize) -> ShouldAccept {
        if total >= self.limits.reuse.requests {
            ShouldAccept::Never
        } else if concurrent >= self.limits.reuse.concurrent_requests {
            ShouldAccept::No
        } else {
            ShouldAccept::Yes
        }
    }

    fn on_request_start(
        &self,
        mut store: StoreContextMut<'_, RequestState>,
        data: RequestData,
        task: GuestTaskId,
    ) -> Pin<Box<dyn Future<Output = ()> + 'static + Send + Sync>> {
        tracing::debug!(parent: &data.span, instance = self.instance, "taken by instance");
        store.data_mut().locks.abandon_task_on(task, data.abandon);
        Box::pin(tokio::time::sleep(self.limits.timeout))
    }

    fn drop(&self, store: Store<RequestState>, result: wasmtime::Result<()>) {
        // The store's drop gives back what its guards and leases hold.
        drop(store);
        match result {
            Ok(()) => tracing::debug!(
                component = %self.component,
                instance = self.instance,
                "component instance ended"
            ),
            // `{e:?}` keeps the wasm backtrace.
            Err(e) => tracing::error!(
                component = %self.component,
                instance = self.instance,
                error = ?e,
                "component instance failed; its requests in progress answered 500"
            ),
        }
    }
}

/// When an instance is dropped: idle past [`IDLE_INSTANCE_TIMEOUT`], or
/// with a request (or the work after one) older than the request timeout.
/// Polled outside the instance's event loop, so it holds even while the
/// guest keeps the store busy.
struct Expiration {
    request_timeout: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl WorkerExpiration for Expiration {
    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        status: WorkerStatus,
        start: Instant,
    ) -> Poll<()> {
        let timeout = match status {
            WorkerStatus::Idle => IDLE_INSTANCE_TIMEOUT,
            WorkerStatus::Requests | WorkerStatus::PostReturn => self.request_timeout,
        };
        let Some(deadline) = start.checked_add(timeout) else {
            return Poll::Pending;
        };
        let deadline = tokio::time::Instant::from_std(deadline);
        if self.sleep.deadline() != deadline {
            self.sleep.as_mut().reset(deadline);
        }
        self.sleep.as_mut().poll(cx)
    }
}
