//! A host application with plugins: the embedding use case of lockd.
//!
//! This application is not lockd. It has its own wasmtime setup and its own
//! plugin world (`wit/plugin.wit`: one export, `run-job`). Its plugins need
//! locks, so it adds the capability to its linker with
//! [`lockd_wasm::add_to_linker`] — one call — and gives each plugin instance
//! a [`LockCtx`] in the namespace it chooses.
//!
//! The plugin is compiled with Rust's standard library for `wasm32-wasip2`,
//! which imports a few WASI interfaces, so the host also links WASI with an
//! empty sandbox (no files, no environment, no network).

use std::path::Path;

use anyhow::Context as _;
use lockd_core::LockService;
use lockd_wasm::{LockCtx, LockCtxView, LockView};
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// What each plugin instance's store holds.
struct PluginState {
    locks: LockCtx,
    wasi: WasiCtx,
    table: ResourceTable,
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl LockView for PluginState {
    fn lock_ctx(&mut self) -> LockCtxView<'_> {
        LockCtxView {
            ctx: &mut self.locks,
            table: &mut self.table,
        }
    }
}

/// Runs jobs through a plugin component.
pub struct JobRunner {
    engine: Engine,
    linker: Linker<PluginState>,
    component: Component,
    service: LockService,
    namespace: String,
}

impl std::fmt::Debug for JobRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobRunner")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl JobRunner {
    /// Loads the plugin at `path`; its locks live in `namespace`.
    pub fn new(path: &Path, service: LockService, namespace: &str) -> anyhow::Result<Self> {
        let engine = Engine::new(&Config::new()).map_err(anyhow::Error::from)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        // The whole lock integration: one call.
        lockd_wasm::add_to_linker(&mut linker)?;
        let component = Component::from_file(&engine, path)
            .map_err(anyhow::Error::from)
            .with_context(|| format!("loading plugin {}", path.display()))?;
        Ok(JobRunner {
            engine,
            linker,
            component,
            service,
            namespace: namespace.to_string(),
        })
    }

    /// Runs job `id` in a fresh plugin instance as `worker`. The outer error
    /// is a host failure (or a plugin trap); the inner one is the plugin's
    /// answer, such as `busy: held by ...`.
    pub async fn run_job(&self, id: &str, worker: &str) -> anyhow::Result<Result<u64, String>> {
        let state = PluginState {
            locks: LockCtx::new(self.service.clone(), self.namespace.clone()),
            wasi: WasiCtx::builder().build(),
            table: ResourceTable::new(),
        };
        let mut store = Store::new(&self.engine, state);
        let instance = self
            .linker
            .instantiate_async(&mut store, &self.component)
            .await?;
        let run_job = instance
            .get_typed_func::<(String, String), (Result<u64, String>,)>(&mut store, "run-job")
            .map_err(anyhow::Error::from)
            .context("the plugin does not export run-job")?;
        let (answer,) = run_job
            .call_async(&mut store, (id.to_string(), worker.to_string()))
            .await?;
        Ok(answer)
    }
}
