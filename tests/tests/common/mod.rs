//! Shared helpers of the end-to-end tests.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use lockd_components::run::{self, Output, RunConfig, RunLimits, RunOutcome};
use lockd_core::LockService;
use wasmtime::component::Component;
use wasmtime::Engine;

/// The engine `lockd run` picks for a component ([`run::engine_for`]): one
/// for WASI 0.2 commands on lockd:lock@0.1.0, one with component-model
/// async for those on 0.2.0 or WASI 0.3.
fn engine(concurrent: bool) -> &'static Engine {
    static PLAIN: OnceLock<Engine> = OnceLock::new();
    static CONCURRENT: OnceLock<Engine> = OnceLock::new();
    if concurrent {
        CONCURRENT.get_or_init(|| run::concurrent_engine().unwrap())
    } else {
        PLAIN.get_or_init(|| run::engine().unwrap())
    }
}

/// Compiles each component once per test binary, for the engine it needs:
/// the big guests (Python, JS) take seconds to compile.
fn component(path: &str) -> (&'static Engine, Component) {
    static CACHE: OnceLock<Mutex<HashMap<String, (&'static Engine, Component)>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(c) = cache.lock().unwrap().get(path) {
        return c.clone();
    }
    let bytes = std::fs::read(path).unwrap();
    let engine = engine(run::wants_concurrency(&bytes).unwrap());
    let c = (engine, run::load(engine, path.as_ref()).unwrap());
    cache.lock().unwrap().insert(path.to_string(), c.clone());
    c
}

/// Runs a command component exactly as `lockd run` does, capturing output.
pub async fn run_guest(
    path: &str,
    service: &LockService,
    namespace: &str,
    args: &[&str],
) -> RunOutcome {
    run_guest_limited(path, service, namespace, args, RunLimits::default()).await
}

/// [`run_guest`] with time and memory bounds.
pub async fn run_guest_limited(
    path: &str,
    service: &LockService,
    namespace: &str,
    args: &[&str],
    limits: RunLimits,
) -> RunOutcome {
    let argv = std::iter::once("guest")
        .chain(args.iter().copied())
        .map(String::from)
        .collect();
    let config = RunConfig {
        namespace: namespace.to_string(),
        args: argv,
        output: Output::Capture,
        limits,
    };
    let (engine, component) = component(path);
    run::run_component(engine, &component, service.clone(), config)
        .await
        .unwrap()
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
