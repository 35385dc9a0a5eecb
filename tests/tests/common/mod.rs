//! Shared helpers of the end-to-end tests.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use lockd::run::{self, Output, RunConfig, RunLimits, RunOutcome};
use lockd_core::LockService;
use wasmtime::component::Component;
use wasmtime::Engine;

fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| run::engine().unwrap())
}

/// Compiles each component once per test binary: the big guests (Python,
/// JS) take seconds to compile.
fn component(path: &str) -> Component {
    static CACHE: OnceLock<Mutex<HashMap<String, Component>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(c) = cache.lock().unwrap().get(path) {
        return c.clone();
    }
    let c = run::load(engine(), path.as_ref()).unwrap();
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
    run::run_component(engine(), &component(path), service.clone(), config)
        .await
        .unwrap()
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
