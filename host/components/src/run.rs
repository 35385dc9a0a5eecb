//! Running a `wasi:cli` command component to completion, with full WASI plus
//! the lock capability (`lockd run`). Whether it is a WASI 0.3 command is
//! [`Wasi`]'s rule: that picks its engine, the hosts on its linker and the
//! `wasi:cli/run` it calls.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use lockd_core::LockService;
use lockd_wasm::{LockCtx, LockCtxView, LockView};
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::p2::bindings::Command;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{I32Exit, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::epoch;
use crate::wasi::Wasi;

/// Exit code reported when the guest traps (as a process killed by SIGABRT
/// would report it).
pub const TRAP_EXIT_CODE: i32 = 134;

/// Largest captured stdout or stderr, per stream.
const CAPTURE_LIMIT: usize = 16 << 20;

/// Where the guest's stdout and stderr go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// To this process's own streams.
    Inherit,
    /// Into [`RunOutcome`], for tests.
    Capture,
}

/// Bounds on one run. A command may legitimately run for long (a worker
/// holding locks), so by default nothing is bounded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunLimits {
    /// Wall-clock time the guest may run, waits in host calls included; past
    /// it a busy guest traps at its next epoch check and a waiting one is
    /// dropped.
    pub timeout: Option<Duration>,
    /// Linear memory the guest may grow to; growing past it traps.
    pub max_memory_bytes: Option<usize>,
}

/// How to run a command component.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The namespace the guest's locks live in.
    pub namespace: String,
    /// argv, including argv\[0\].
    pub args: Vec<String>,
    /// Where output goes.
    pub output: Output,
    /// Time and memory bounds.
    pub limits: RunLimits,
}

/// What a run ended with.
#[derive(Clone, Debug)]
pub struct RunOutcome {
    /// 0 on success; the guest's own code when it calls `exit-with-code`;
    /// 1 when `run` returned an error or the guest called `exit(err)` (Rust's
    /// std on wasip2 turns any non-zero `exit` into that); [`TRAP_EXIT_CODE`]
    /// on a trap.
    pub exit_code: i32,
    /// The trap, if the guest trapped.
    pub trap: Option<String>,
    /// Captured stdout ([`Output::Capture`] only).
    pub stdout: Vec<u8>,
    /// Captured stderr ([`Output::Capture`] only).
    pub stderr: Vec<u8>,
}

/// A command's `run` call, awaited under the run's time limit: the
/// component's own result, or the trap or exit that ended it.
type RunFuture<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = wasmtime::Result<Result<(), ()>>> + Send + 'a>,
>;

struct CommandState {
    wasi: WasiCtx,
    table: ResourceTable,
    locks: LockCtx,
    limits: StoreLimits,
}

impl WasiView for CommandState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl LockView for CommandState {
    fn lock_ctx(&mut self) -> LockCtxView<'_> {
        LockCtxView {
            ctx: &mut self.locks,
            table: &mut self.table,
        }
    }
}

/// The engine configuration lockd runs command components with. Its epoch
/// advances every [`epoch::TICK`] (for [`RunLimits::timeout`]) on a thread
/// that ends with the engine.
pub fn engine() -> anyhow::Result<Engine> {
    let mut config = Config::new();
    // Commands on WASI 0.2 and lockd:lock@0.1.0 call nothing async; without
    // the component-model concurrency machinery, every host call skips the
    // creation and deletion of a host task (see docs/benchmarks.md, B1).
    config.concurrency_support(false);
    new_engine(config)
}

/// The engine for WASI 0.3 commands ([`Wasi::P3`]): with component-model
/// async, so that a task awaiting a lock leaves the instance's other tasks
/// running.
pub fn concurrent_engine() -> anyhow::Result<Engine> {
    let mut config = Config::new();
    config.wasm_component_model_async(true);
    new_engine(config)
}

/// The engine the command in `component` needs: [`concurrent_engine`] for
/// a WASI 0.3 one, else [`engine`].
pub fn engine_for(component: &[u8]) -> anyhow::Result<Engine> {
    if wants_concurrency(component)? {
        concurrent_engine()
    } else {
        engine()
    }
}

fn new_engine(mut config: Config) -> anyhow::Result<Engine> {
    config.wasm_component_model(true).epoch_interruption(true);
    let engine = Engine::new(&config)
        .map_err(anyhow::Error::from)
        .context("creating the wasm engine")?;
    epoch::start_ticker(&engine)?;
    Ok(engine)
}

/// Whether the component in `bytes` is WASI 0.3 ([`Wasi::of_bytes`]), which
/// only an engine with component-model async can run.
pub fn wants_concurrency(bytes: &[u8]) -> anyhow::Result<bool> {
    Ok(Wasi::of_bytes(bytes)? == Wasi::P3)
}

/// Compiles the component at `path`.
pub fn load(engine: &Engine, path: &Path) -> anyhow::Result<Component> {
    Component::from_file(engine, path)
        .map_err(anyhow::Error::from)
        .with_context(|| format!("loading component {}", path.display()))
}

/// Runs `component`'s `wasi:cli/run` export to completion. The instance and
/// its store are dropped before this returns, so guards it still held are
/// released.
pub async fn run_component(
    engine: &Engine,
    component: &Component,
    service: LockService,
    config: RunConfig,
) -> anyhow::Result<RunOutcome> {
    let started = std::time::Instant::now();
    let wasi = Wasi::of_component(component, engine);
    let linker = linker(engine, wasi)?;
    let (state, captured) = CommandState::new(service, &config);
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.limits);
    store.set_epoch_deadline(
        config
            .limits
            .timeout
            .map_or(u64::MAX / 2, epoch::deadline_ticks),
    );
    let run = start(&mut store, component, &linker, wasi).await?;
    let result = match config.limits.timeout {
        None => Some(run.await),
        // The epoch deadline stops a guest that computes; the wall clock
        // also stops one parked in a host call (a lock wait, a sleep).
        Some(limit) => tokio::time::timeout(limit + epoch::TICK * 10, run)
            .await
            .ok(),
    };
    // End the instance: its resource table drops the guards and leases it
    // still holds, and each releases (or revokes) itself.
    drop(store);
    let (exit_code, trap) = ending(result, config.limits.timeout);
    log_ending(&config, exit_code, trap.as_deref(), started);
    let (stdout, stderr) = match captured {
        Some((out, err)) => (out.contents().to_vec(), err.contents().to_vec()),
        None => (Vec::new(), Vec::new()),
    };
    Ok(RunOutcome {
        exit_code,
        trap,
        stdout,
        stderr,
    })
}

/// A command's linker: WASI 0.2 and `lockd:lock@0.1.0`, and for a WASI 0.3
/// command also WASI 0.3 and `lockd:lock@0.2.0` beside them (Rust's std
/// imports wasi:cli 0.2 in a component whose locks are 0.2.0). A WASI 0.3
/// component compiled only on a [`concurrent_engine`].
fn linker(engine: &Engine, wasi: Wasi) -> anyhow::Result<Linker<CommandState>> {
    let mut linker = Linker::<CommandState>::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    lockd_wasm::add_to_linker(&mut linker)?;
    if wasi == Wasi::P3 {
        wasmtime_wasi::p3::add_to_linker(&mut linker)?;
        lockd_wasm::p3::add_to_linker(&mut linker)?;
    }
    Ok(linker)
}

/// The captured stdout and stderr of a run, when [`Output::Capture`].
type Captured = Option<(MemoryOutputPipe, MemoryOutputPipe)>;

impl CommandState {
    /// A command's store state: its arguments and the host's environment,
    /// its output where `config` sends it, its namespace's locks, and its
    /// memory bound.
    fn new(service: LockService, config: &RunConfig) -> (CommandState, Captured) {
        let mut wasi = WasiCtxBuilder::new();
        wasi.args(&config.args).inherit_env();
        let captured = match config.output {
            Output::Inherit => {
                wasi.inherit_stdio();
                None
            }
            Output::Capture => {
                let (out, err) = (
                    MemoryOutputPipe::new(CAPTURE_LIMIT),
                    MemoryOutputPipe::new(CAPTURE_LIMIT),
                );
                wasi.stdout(out.clone()).stderr(err.clone());
                Some((out, err))
            }
        };
        let mut memory = StoreLimitsBuilder::new().trap_on_grow_failure(true);
        if let Some(bytes) = config.limits.max_memory_bytes {
            memory = memory.memory_size(bytes);
        }
        let state = CommandState {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            locks: LockCtx::new(service, config.namespace.clone()),
            limits: memory.build(),
        };
        (state, captured)
    }
}

/// Instantiates the command and returns its `run` call, not yet awaited. A
/// WASI 0.3 command's `run` is an `async func`: its tasks (and the lock
/// waits they await) run on the store's event loop.
async fn start<'a>(
    store: &'a mut Store<CommandState>,
    component: &Component,
    linker: &Linker<CommandState>,
    wasi: Wasi,
) -> anyhow::Result<RunFuture<'a>> {
    const NOT_A_COMMAND: &str = "instantiating the component (is it a wasi:cli command?)";
    Ok(match wasi {
        Wasi::P3 => {
            let command = wasmtime_wasi::p3::bindings::Command::instantiate_async(
                &mut *store,
                component,
                linker,
            )
            .await
            .map_err(anyhow::Error::from)
            .context(NOT_A_COMMAND)?;
            Box::pin(async move {
                store
                    .run_concurrent(async move |accessor| {
                        command.wasi_cli_run().call_run(accessor).await
                    })
                    .await
                    .and_then(|result| result)
            })
        }
        Wasi::P2 => {
            let command = Command::instantiate_async(&mut *store, component, linker)
                .await
                .map_err(anyhow::Error::from)
                .context(NOT_A_COMMAND)?;
            Box::pin(async move { command.wasi_cli_run().call_run(store).await })
        }
    })
}

/// The exit code and trap of a run that ended with `result` (`None`: past
/// its time limit, `timeout`).
fn ending(
    result: Option<wasmtime::Result<Result<(), ()>>>,
    timeout: Option<Duration>,
) -> (i32, Option<String>) {
    let past_limit = || {
        Some(format!(
            "the component ran past its time limit of {:?}",
            timeout.unwrap_or_default()
        ))
    };
    match result {
        Some(Ok(Ok(()))) => (0, None),
        Some(Ok(Err(()))) => (1, None),
        Some(Err(e)) => match e.downcast_ref::<I32Exit>() {
            Some(exit) => (exit.0, None),
            None if e.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::Interrupt) => {
                (TRAP_EXIT_CODE, past_limit())
            }
            None => (TRAP_EXIT_CODE, Some(format!("{e:?}"))),
        },
        None => (TRAP_EXIT_CODE, past_limit()),
    }
}

/// Logs how a run ended: an error for a trap, else a debug line.
fn log_ending(config: &RunConfig, exit_code: i32, trap: Option<&str>, started: std::time::Instant) {
    match trap {
        Some(trap) => tracing::error!(
            component = config.args.first().map(String::as_str),
            namespace = %config.namespace,
            %trap,
            "component trapped"
        ),
        None => tracing::debug!(
            component = config.args.first().map(String::as_str),
            namespace = %config.namespace,
            exit_code,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "component exited"
        ),
    }
}
