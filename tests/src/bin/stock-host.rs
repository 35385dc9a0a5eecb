//! `stock-host`: a plain wasmtime host that knows nothing of lockd, for the
//! portable tests (`tests/tests/portable.rs`).
//!
//! It links no lockd crate. `lockd-server`, `lockd-components`, `lockd-core`,
//! `lockd-test-support` and the stores are dev-dependencies of
//! `lockd-guest-tests`, linked into its test binaries and never into a bin;
//! the host itself is the crate's
//! [`lockd_guest_tests::stock_host`], built from wasmtime, wasmtime-wasi,
//! wasmtime-wasi-http, tokio, hyper, hyper-util, http-body-util, anyhow and
//! bytes alone (the benchmark of plugged guests runs the same). A component
//! that imports `lockd:lock/locks` or `guards` fails to instantiate here; one
//! composed by `lockd plug` runs, and reaches the lockd server over
//! `wasi:http/outgoing-handler`.
//!
//! It mirrors two wasmtime CLI commands:
//!
//! - `stock-host run COMPONENT [--env K=V]... [--cacert FILE] [-- ARGS...]` is
//!   `wasmtime run -S http`: a `wasi:cli` command with all of WASI 0.2
//!   (`wasmtime_wasi::p2::add_to_linker_async`) and `wasi:http`
//!   (`wasmtime_wasi_http::p2::add_only_http_to_linker_async`). argv\[0\] is
//!   the component's file name, the environment is only the `--env` pairs,
//!   stdio is inherited, and the exit status is the command's: 0 when `run`
//!   returns `ok`, 1 when it returns `err`, the code of `exit-with-code`, and
//!   134 on a trap (printed on stderr). `--cacert FILE` makes the component's
//!   outgoing `https://` requests trust only the CA certificates in FILE
//!   (the tests' own CA), where wasmtime trusts webpki's roots.
//! - `stock-host serve COMPONENT [--listen ADDR] [--env K=V]...` is
//!   `wasmtime serve -Scli`: a `wasi:http/proxy` server (HTTP/1.1, hyper) with
//!   all of WASI 0.2 linked too (Rust's std imports `wasi:cli/environment`,
//!   which `wasmtime serve` without `-Scli` does not link). Each request gets
//!   a fresh store and instance from one `ProxyPre`, from the pooling
//!   allocator with its default limits (as `wasmtime serve`); accepted connections
//!   have `TCP_NODELAY`. `--listen` defaults to `127.0.0.1:8080`; port 0
//!   picks a free port. Once listening it prints
//!   `stock-host listening on http://ADDR` on stdout. A component that fails
//!   before answering gets a 500 and its error on stderr.
//! - `stock-host run-p3 COMPONENT [--env K=V]... [--cacert FILE] --invoke
//!   CALL...` is `wasmtime run -Wcomponent-model-async -Sp3,http --invoke
//!   CALL` for WASI 0.3 components ([`lockd_guest_tests::stock_host_p3`]): WASI 0.3
//!   and `wasi:http@0.3` beside WASI 0.2 and its `wasi:http`. Every
//!   `--invoke` (`INTERFACE#NAME(ARGS)`, e.g.
//!   `'lockd:p3-probe/probe#ping("jobs")'`) is called at once on one
//!   instance, each as its own task; each result is printed as it arrives,
//!   `invoke I: RESULT` (I counts the `--invoke`s from 0; RESULT in the
//!   WAVE style, e.g. `ok(5)`). The exit status is 0 once all have
//!   returned, 134 if one trapped (`invoke I trapped: ERROR` on stderr).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context as _, Result};
use lockd_guest_tests::stock_host::{self, CommandEnd, Proxy, StockState};
use lockd_guest_tests::stock_host_p3::{self, Invocation};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder};

/// The exit status of a trapped command (a process killed by SIGABRT).
const TRAP_EXIT_CODE: u8 = 134;

const USAGE: &str =
    "usage: stock-host run COMPONENT [--env K=V]... [--cacert FILE] [-- ARGS...]\n       \
                     stock-host serve COMPONENT [--listen ADDR] [--env K=V]...\n       \
                     stock-host run-p3 COMPONENT [--env K=V]... [--cacert FILE] --invoke CALL...";

/// The three commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Run,
    Serve,
    RunP3,
}

/// The parsed command line.
#[derive(Debug)]
struct Cli {
    mode: Mode,
    component: PathBuf,
    env: Vec<(String, String)>,
    listen: SocketAddr,
    cacert: Option<PathBuf>,
    args: Vec<String>,
    invoke: Vec<Invocation>,
}

fn parse(mut argv: impl Iterator<Item = String>) -> Result<Cli> {
    let mode = match argv.next().as_deref() {
        Some("run") => Mode::Run,
        Some("serve") => Mode::Serve,
        Some("run-p3") => Mode::RunP3,
        Some(other) => bail!("unknown command {other:?}"),
        None => bail!("no command"),
    };
    let serve = mode == Mode::Serve;
    let mut cli = Cli {
        mode,
        component: PathBuf::new(),
        env: Vec::new(),
        listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
        cacert: None,
        args: Vec::new(),
        invoke: Vec::new(),
    };
    let mut component = None;
    while let Some(arg) = argv.next() {
        match arg.as_str() {
            "--env" => {
                let pair = argv.next().context("--env needs K=V")?;
                let (k, v) = pair
                    .split_once('=')
                    .with_context(|| format!("--env {pair:?} is not K=V"))?;
                cli.env.push((k.to_string(), v.to_string()));
            }
            "--listen" if serve => {
                let addr = argv.next().context("--listen needs ADDR")?;
                cli.listen = addr
                    .parse()
                    .with_context(|| format!("--listen {addr:?} is not HOST:PORT"))?;
            }
            "--cacert" if !serve => {
                cli.cacert = Some(PathBuf::from(argv.next().context("--cacert needs FILE")?));
            }
            "--invoke" if mode == Mode::RunP3 => {
                let call = argv.next().context("--invoke needs CALL")?;
                cli.invoke.push(call.parse()?);
            }
            "--" if mode == Mode::Run => {
                cli.args.extend(argv.by_ref());
            }
            _ if arg.starts_with("--") => bail!("unknown option {arg}"),
            _ if component.is_none() => component = Some(PathBuf::from(arg)),
            _ => bail!("unexpected argument {arg:?} (arguments for the component go after --)"),
        }
    }
    cli.component = component.context("no COMPONENT")?;
    if mode == Mode::RunP3 && cli.invoke.is_empty() {
        bail!("run-p3 needs at least one --invoke CALL");
    }
    Ok(cli)
}

fn main() -> ExitCode {
    let cli = match parse(std::env::args().skip(1)) {
        Ok(cli) => cli,
        Err(e) => {
            eprintln!("stock-host: {e:#}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("stock-host: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.mode {
            Mode::Serve => serve(&cli).await.map(|()| ExitCode::SUCCESS),
            Mode::Run => run(&cli).await,
            Mode::RunP3 => run_p3(&cli).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("stock-host: {e:#}");
            ExitCode::FAILURE
        }
    }
}

impl Cli {
    /// The component's file name: its `argv[0]`.
    fn argv0(&self) -> String {
        self.component
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

/// A component's WASI context: inherited stdio, `args`, and only the `--env`
/// pairs.
fn wasi(args: &[String], env: &[(String, String)]) -> WasiCtx {
    let mut wasi = WasiCtxBuilder::new();
    wasi.inherit_stdio().args(args);
    for (k, v) in env {
        wasi.env(k, v);
    }
    wasi.build()
}

impl Cli {
    /// The store's data: WASI with argv and the `--env` pairs, and the
    /// `--cacert` roots if given.
    fn state(&self) -> Result<StockState> {
        let args: Vec<String> = std::iter::once(self.argv0())
            .chain(self.args.iter().cloned())
            .collect();
        let wasi = wasi(&args, &self.env);
        Ok(match &self.cacert {
            Some(ca) => StockState::trusting(wasi, stock_host::trusting_only(ca)?),
            None => StockState::new(wasi),
        })
    }
}

/// `stock-host run`: the command's exit status.
async fn run(cli: &Cli) -> Result<ExitCode> {
    let engine = stock_host::engine()?;
    let component = stock_host::load(&engine, &cli.component)?;
    let state = cli.state()?;
    let end = stock_host::run_command(&engine, &component, state)
        .await
        .with_context(|| cli.component.display().to_string())?;
    Ok(match end {
        CommandEnd::Ok => ExitCode::SUCCESS,
        CommandEnd::Err => ExitCode::FAILURE,
        // Exit codes are 0-255 on the platforms this runs on.
        CommandEnd::Exit(code) => ExitCode::from(code as u8),
        CommandEnd::Trap(e) => {
            eprintln!("stock-host: the component trapped: {e:?}");
            ExitCode::from(TRAP_EXIT_CODE)
        }
    })
}

/// `stock-host run-p3`: every `--invoke` at once; 134 if one trapped.
async fn run_p3(cli: &Cli) -> Result<ExitCode> {
    let engine = stock_host_p3::engine()?;
    let component = stock_host::load(&engine, &cli.component)?;
    let mut trapped = false;
    stock_host_p3::invoke_concurrently(
        &engine,
        &component,
        cli.state()?,
        &cli.invoke,
        |i, result| match result {
            Ok(text) => println!("invoke {i}: {text}"),
            Err(e) => {
                eprintln!("invoke {i} trapped: {e:#}");
                trapped = true;
            }
        },
    )
    .await
    .with_context(|| cli.component.display().to_string())?;
    Ok(if trapped {
        ExitCode::from(TRAP_EXIT_CODE)
    } else {
        ExitCode::SUCCESS
    })
}

/// `stock-host serve`: serves until killed.
async fn serve(cli: &Cli) -> Result<()> {
    let engine = stock_host::serve_engine()?;
    let component = stock_host::load(&engine, &cli.component)?;
    let (args, env) = ([cli.argv0()], cli.env.clone());
    let proxy = Proxy::new(&engine, &component, move || wasi(&args, &env))
        .with_context(|| cli.component.display().to_string())?;
    let listener = tokio::net::TcpListener::bind(cli.listen)
        .await
        .with_context(|| format!("cannot listen on {}", cli.listen))?;
    let addr = listener.local_addr()?;
    println!("stock-host listening on http://{addr}");
    stock_host::serve(listener, Arc::new(proxy)).await;
    Ok(())
}
