//! Serving the HTTP components of a Spin manifest on a `lockd-server`
//! listener: [`SpinApp`] is the server's extension, [`App`] the routes it
//! mounts after lockd's own.
//!
//! - Each component is compiled once and pre-instantiated (`ProxyPre` for
//!   WASIp2 `wasi:http/incoming-handler@0.2.x`, `ServicePre` for WASIp3
//!   `wasi:http/handler@0.3.x`); which one is [`Wasi`]'s rule.
//! - A WASIp2 request gets a fresh instance in a fresh store, from the
//!   pooling allocator (copy-on-write memory images keep that cheap), as
//!   Spin does. A WASIp3 instance serves several requests at once and many
//!   in turn, as `[limits]` allows (`p3`).
//! - Every instance is bounded: an epoch deadline (a runaway loop traps, or
//!   for WASIp3 yields until its instance is dropped), a memory cap (growth
//!   past it traps), and a wall-clock timeout around the whole request (a
//!   guest parked in a host call is dropped). A failing guest gets a 500
//!   and the host carries on.
//! - Each component's locks live in its namespace (the component id unless
//!   lockd.toml says otherwise). Its key-value stores
//!   ([`crate::key_value`]) live beside the locks; its variables
//!   ([`crate::variables`]) are resolved at start. Components import `lockd:lock@0.1.0`,
//!   `lockd:lock@0.2.0` (WASI 0.3: `async func`s, lost futures) or both.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{anyhow, Context as _};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use lockd_core::LockService;
use lockd_server::body::{full, Body};
use lockd_server::config::LockdConfig;
use lockd_server::serve::{
    self, BoxFuture, Context, Extended, Extension, Mount, OverTls, Precedence,
};
use lockd_server::store::StoreSpec;
use serde::Serialize;
use tracing::Instrument as _;
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};
use wasmtime_wasi_http::WasiHttpView as _;

use crate::epoch;
use crate::key_value::KeyValueStores;
use crate::manifest::{dependencies, ComponentSpec, Manifest};
use crate::wasi::Wasi;

mod instance;
mod p3;

use instance::{InstanceLimits, OutboundRule, RequestState, StoreRecipe};

/// The HTTP components of the Spin manifest at a path, as an [`Extension`]
/// of lockd's server (`lockd up`, `lockd serve --manifest`): when the
/// server binds, the manifest is read and every routed component compiled,
/// and its routes are mounted after lockd's own.
#[derive(Clone, Debug)]
pub struct SpinApp {
    manifest: PathBuf,
}

impl SpinApp {
    /// The app of the manifest at `manifest`. Its key-value stores live
    /// beside the locks, in the store the server opened.
    pub fn new(manifest: impl Into<PathBuf>) -> Self {
        SpinApp {
            manifest: manifest.into(),
        }
    }
}

impl Extension for SpinApp {
    fn prepare(self: Box<Self>, server: &Context<'_>) -> anyhow::Result<Extended> {
        let manifest = Manifest::load(&self.manifest)?;
        let app = App::new(
            manifest,
            server.config,
            server.service.clone(),
            server.store,
        )?;
        Ok(Extended {
            mounts: vec![(Precedence::AfterOwn, Arc::new(app))],
            side_listeners: Vec::new(),
        })
    }
}

impl Mount for App {
    fn claims(&self, path: &str) -> bool {
        App::claims(self, path)
    }

    fn handle(&self, req: Request<Incoming>) -> BoxFuture<'_, Response<Body>> {
        Box::pin(async move {
            App::handle(self, req)
                .await
                .unwrap_or_else(serve::not_found)
        })
    }

    fn banner(&self) -> Vec<String> {
        self.routes()
            .map(|(route, component, kind)| format!("{route} -> {component} ({kind})"))
            .collect()
    }
}

/// The HTTP components of one manifest, ready to serve.
pub struct App {
    manifest: Manifest,
    components: HashMap<String, Arc<Served>>,
    limits: InstanceLimits,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("name", &self.manifest.name)
            .field("components", &self.components.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

struct Served {
    id: String,
    recipe: Arc<StoreRecipe>,
    pre: Pre,
}

enum Pre {
    P2(wasmtime_wasi_http::p2::bindings::ProxyPre<RequestState>),
    P3(p3::Instances),
}

/// The engine for serving components: pooling allocator, epochs, and the
/// component-model-async support WASIp3 needs.
fn engine(memory_bytes: usize) -> anyhow::Result<Engine> {
    let mut pool = PoolingAllocationConfig::default();
    // Generous per-component shapes: componentize-py and componentize-js
    // output has many core instances, memories and large tables.
    pool.total_component_instances(256)
        .total_core_instances(2048)
        .total_memories(512)
        .total_tables(1024)
        .total_stacks(256)
        .max_component_instance_size(4 << 20)
        .max_core_instance_size(4 << 20)
        .max_core_instances_per_component(64)
        .max_memories_per_component(16)
        .max_tables_per_component(64)
        .max_memories_per_module(2)
        .max_tables_per_module(8)
        .table_elements(200_000)
        .max_memory_size(memory_bytes)
        // A fresh instance per request means a slot reset per request. By
        // default the reset madvises memory away, and every madvise flushes
        // the TLB of each core running this process (IPIs; costly in a VM):
        // that, not the guest, capped the edge benchmark (B3). Instead, keep
        // the first pages resident and reset them with memset, only the
        // pages actually touched (PAGEMAP_SCAN, Linux 6.7+, where present),
        // and batch what is still decommitted.
        .linear_memory_keep_resident(4 << 20)
        .table_keep_resident(1 << 20)
        .pagemap_scan(wasmtime::Enabled::Auto)
        .decommit_batch_size(64);
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .wasm_component_model_async(true)
        .epoch_interruption(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    let engine = Engine::new(&config)
        .map_err(anyhow::Error::from)
        .context("creating the component engine")?;
    epoch::start_ticker(&engine)?;
    Ok(engine)
}

fn linker(engine: &Engine) -> anyhow::Result<Linker<RequestState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    wasmtime_wasi::p3::add_to_linker(&mut linker)?;
    wasmtime_wasi_http::p3::add_to_linker(&mut linker)?;
    lockd_wasm::add_to_linker(&mut linker)?;
    lockd_wasm::p3::add_to_linker(&mut linker)?;
    crate::key_value::add_to_linker(&mut linker)?;
    crate::variables::add_to_linker(&mut linker)?;
    Ok(linker)
}

/// Compiles component `id`, composed with its dependencies if it has any.
fn load(engine: &Engine, id: &str, spec: &ComponentSpec) -> anyhow::Result<Component> {
    let read_error = || {
        format!(
            "loading component {id} from {} (build it first, or use `lockd up --build`)",
            spec.source.display()
        )
    };
    if spec.dependencies.is_empty() {
        return Component::from_file(engine, &spec.source)
            .map_err(anyhow::Error::from)
            .with_context(read_error);
    }
    let bytes = std::fs::read(&spec.source).with_context(read_error)?;
    let composed = dependencies::compose(id, &bytes, &spec.dependencies)?;
    Component::new(engine, &composed)
        .map_err(anyhow::Error::from)
        .with_context(|| format!("compiling component {id} composed with its dependencies"))
}

/// What every component of one app is served with.
struct Serving<'a> {
    engine: Engine,
    linker: Linker<RequestState>,
    config: &'a LockdConfig,
    service: LockService,
    limits: InstanceLimits,
    key_value: Arc<KeyValueStores>,
    variables: HashMap<String, Arc<std::collections::BTreeMap<String, String>>>,
}

impl Serving<'_> {
    /// Compiles component `id` and pre-instantiates it as its WASI
    /// generation is served.
    fn component(&self, id: &str, spec: &ComponentSpec) -> anyhow::Result<Served> {
        let component = load(&self.engine, id, spec)?;
        let pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(anyhow::Error::from)
            .with_context(|| format!("linking component {id}"))?;
        let outbound = spec
            .allowed_outbound_hosts
            .iter()
            .map(|h| OutboundRule::parse(h))
            .collect::<anyhow::Result<Vec<_>>>()
            .with_context(|| format!("component {id}: allowed_outbound_hosts"))?;
        let recipe = Arc::new(StoreRecipe {
            namespace: self.config.namespace_of(id),
            service: self.service.clone(),
            outbound: Arc::new(outbound),
            environment: spec
                .environment
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            limits: self.limits,
            key_value: self.key_value.clone(),
            key_value_labels: Arc::new(spec.key_value_stores.clone()),
            variables: self.variables.get(id).cloned().unwrap_or_default(),
        });
        let neither = || {
            format!(
                "component {id} exports neither wasi:http/incoming-handler@0.2 nor wasi:http/handler@0.3"
            )
        };
        let pre = match Wasi::of_component(&component, &self.engine) {
            Wasi::P3 => {
                let pre = wasmtime_wasi_http::p3::bindings::ServicePre::new(pre)
                    .map_err(anyhow::Error::from)
                    .with_context(neither)?;
                Pre::P3(p3::Instances::new(id, pre, recipe.clone(), self.limits))
            }
            Wasi::P2 => Pre::P2(
                wasmtime_wasi_http::p2::bindings::ProxyPre::new(pre)
                    .map_err(anyhow::Error::from)
                    .with_context(neither)?,
            ),
        };
        Ok(Served {
            id: id.to_string(),
            recipe,
            pre,
        })
    }
}

impl App {
    /// Compiles and pre-instantiates every routed component of `manifest`,
    /// its key-value stores beside `store`. Its variables are resolved and
    /// its key-value labels checked first: a required variable without a
    /// value or an undeclared label refuses the app.
    pub fn new(
        manifest: Manifest,
        config: &LockdConfig,
        service: LockService,
        store: &StoreSpec,
    ) -> anyhow::Result<App> {
        let limits = InstanceLimits::from_config(config)?;
        let env = |name: &str| std::env::var(name).ok();
        let variables = crate::variables::resolve(
            &manifest,
            &crate::variables::Providers {
                env: &env,
                config: &config.variables,
            },
        )?;
        let key_value = Arc::new(KeyValueStores::open(
            &routed_key_value_labels(&manifest),
            config,
            store,
        )?);
        let engine = engine(limits.memory_bytes)?;
        let serving = Serving {
            linker: linker(&engine)?,
            engine,
            config,
            service,
            limits,
            key_value,
            variables,
        };
        let mut components = HashMap::new();
        for route in &manifest.routes {
            if components.contains_key(&route.component) {
                continue;
            }
            let spec = &manifest.components[&route.component];
            let served = serving.component(&route.component, spec)?;
            components.insert(route.component.clone(), Arc::new(served));
        }
        Ok(App {
            manifest,
            components,
            limits,
        })
    }

    /// The manifest's routes, for the startup banner.
    pub fn routes(&self) -> impl Iterator<Item = (&str, &str, &str)> {
        self.manifest.routes.iter().map(|r| {
            let served = &self.components[&r.component];
            let kind = match served.pre {
                Pre::P2(_) => "wasi:http@0.2",
                Pre::P3(_) => "wasi:http@0.3",
            };
            (r.pattern.as_str(), r.component.as_str(), kind)
        })
    }

    /// Whether a route of the manifest matches `path`.
    pub fn claims(&self, path: &str) -> bool {
        self.manifest.route(path).is_some()
    }

    /// Answers `req` with the component its path routes to, or `None` if no
    /// route matches.
    pub async fn handle(&self, req: Request<Incoming>) -> Option<Response<Body>> {
        let route = self.manifest.route(req.uri().path())?;
        let served = self.components.get(&route.component)?.clone();
        let span = tracing::Span::current();
        span.record("route", route.pattern.as_str());
        span.record("component", served.id.as_str());
        span.record("namespace", served.recipe.namespace.as_str());
        Some(match served.call(req, self.limits).await {
            Ok(response) => {
                span.record("outcome", "answered");
                response
            }
            Err(e) => {
                span.record("outcome", "failed");
                // A trap, a timeout, a bad response: the guest's fault, and
                // the host carries on. `{e:?}` keeps the wasm backtrace.
                tracing::error!(component = %served.id, error = ?e, "component failed");
                let body = ComponentFailed {
                    message: format!("component {} failed: {e}", served.id),
                    status: "error",
                };
                let json = serde_json::to_vec(&body).unwrap_or_default();
                let mut response = Response::new(full(json));
                *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                response
            }
        })
    }
}

/// The key-value labels the routed components list, each with the
/// components that list it.
fn routed_key_value_labels(manifest: &Manifest) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut labels: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for route in &manifest.routes {
        let spec = &manifest.components[&route.component];
        for label in &spec.key_value_stores {
            let listing = labels.entry(label.clone()).or_default();
            if !listing.contains(&route.component) {
                listing.push(route.component.clone());
            }
        }
    }
    labels
}

/// The body of a 500 for a component that failed, whose status word is
/// always `error`.
#[derive(Serialize)]
struct ComponentFailed {
    message: String,
    status: &'static str,
}

impl Served {
    async fn call(
        &self,
        req: Request<Incoming>,
        limits: InstanceLimits,
    ) -> anyhow::Result<Response<Body>> {
        match &self.pre {
            Pre::P2(pre) => self.call_p2(pre, req, limits).await,
            Pre::P3(instances) => Ok(instances.call(req, limits).await?.map(full)),
        }
    }

    async fn call_p2(
        &self,
        pre: &wasmtime_wasi_http::p2::bindings::ProxyPre<RequestState>,
        req: Request<Incoming>,
        limits: InstanceLimits,
    ) -> anyhow::Result<Response<Body>> {
        use wasmtime_wasi_http::p2::bindings::http::types::Scheme;

        let mut store = self.recipe.store(pre.engine());
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let scheme = if req.extensions().get::<OverTls>().is_some() {
            Scheme::Https
        } else {
            Scheme::Http
        };
        let request = store.data_mut().http().new_incoming_request(scheme, req)?;
        let out = store.data_mut().http().new_response_outparam(sender)?;
        let pre = pre.clone();
        // The guest runs in its own task: it may keep streaming the body
        // after the response head is sent. The timeout bounds all of it.
        let task = tokio::spawn(
            async move {
                let run = async {
                    let proxy = pre.instantiate_async(&mut store).await?;
                    proxy
                        .wasi_http_incoming_handler()
                        .call_handle(&mut store, request, out)
                        .await
                };
                match tokio::time::timeout(limits.timeout, run).await {
                    Ok(result) => result.map_err(anyhow::Error::from),
                    Err(_) => Err(anyhow!("timed out after {:?}", limits.timeout)),
                }
            }
            .instrument(tracing::Span::current()),
        );
        match receiver.await {
            Ok(Ok(response)) => {
                // A guest that fails after its response head (a trap while
                // it streams the body) shows here, as the body's error;
                // failures before the head reach `App::handle`.
                let span = tracing::Span::current();
                Ok(response.map(|body| {
                    body.map_err(move |e| {
                        tracing::error!(parent: &span, error = ?e, "component failed while writing its response body");
                        anyhow!("{e:?}")
                    })
                    .boxed_unsync()
                }))
            }
            Ok(Err(code)) => Err(anyhow!("the component answered with error {code:?}")),
            Err(_) => match task.await {
                Ok(Ok(())) => Err(anyhow!("the component returned without setting a response")),
                Ok(Err(e)) => Err(e),
                Err(e) => Err(anyhow!("the request task failed: {e}")),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ComponentFailed;

    #[test]
    fn a_failed_component_is_answered_with_the_message_first() {
        let body = ComponentFailed {
            message: "component x failed: boom".to_string(),
            status: "error",
        };
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"message":"component x failed: boom","status":"error"}"#
        );
    }
}
