//! `stock-host`: a plain wasmtime host that knows nothing of lockd, for the
//! portable tests (`tests/tests/portable.rs`).
//!
//! It links no lockd crate. `lockd`, `lockd-core` and the stores are
//! dev-dependencies of `lockd-tests`, linked into its test binaries and never
//! into a bin; this bin names none of the crate's other dependencies either
//! (`lockd-testing`, the `lockd_tests` lib), so it is built from wasmtime,
//! wasmtime-wasi, wasmtime-wasi-http, tokio, hyper, hyper-util,
//! http-body-util, anyhow and bytes alone. A component that imports `lockd:lock/locks` or `guards` fails to
//! instantiate here; one composed by `lockd plug` runs, and reaches the lockd
//! server over `wasi:http/outgoing-handler`.
//!
//! It mirrors two wasmtime CLI commands:
//!
//! - `stock-host run COMPONENT [--env K=V]... [-- ARGS...]` is
//!   `wasmtime run -S http`: a `wasi:cli` command with all of WASI 0.2
//!   (`wasmtime_wasi::p2::add_to_linker_async`) and `wasi:http`
//!   (`wasmtime_wasi_http::p2::add_only_http_to_linker_async`). argv\[0\] is
//!   the component's file name, the environment is only the `--env` pairs,
//!   stdio is inherited, and the exit status is the command's: 0 when `run`
//!   returns `ok`, 1 when it returns `err`, the code of `exit-with-code`, and
//!   134 on a trap (printed on stderr).
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

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context as _, Result};
use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store};
use wasmtime_wasi::p2::bindings::Command;
use wasmtime_wasi::{I32Exit, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::p2::bindings::http::types::Scheme;
use wasmtime_wasi_http::p2::bindings::ProxyPre;
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

/// The exit status of a trapped command (a process killed by SIGABRT).
const TRAP_EXIT_CODE: u8 = 134;

const USAGE: &str = "usage: stock-host run COMPONENT [--env K=V]... [-- ARGS...]\n       \
                     stock-host serve COMPONENT [--listen ADDR] [--env K=V]...";

/// What a component's store holds: WASI 0.2 and wasi:http, nothing else.
struct HostState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    table: ResourceTable,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: wasmtime_wasi_http::default_hooks(),
        }
    }
}

/// The parsed command line.
#[derive(Debug)]
struct Cli {
    serve: bool,
    component: PathBuf,
    env: Vec<(String, String)>,
    listen: SocketAddr,
    args: Vec<String>,
}

fn parse(mut argv: impl Iterator<Item = String>) -> Result<Cli> {
    let serve = match argv.next().as_deref() {
        Some("run") => false,
        Some("serve") => true,
        Some(other) => bail!("unknown command {other:?}"),
        None => bail!("no command"),
    };
    let mut cli = Cli {
        serve,
        component: PathBuf::new(),
        env: Vec::new(),
        listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
        args: Vec::new(),
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
            "--" if !serve => {
                cli.args.extend(argv.by_ref());
            }
            _ if arg.starts_with("--") => bail!("unknown option {arg}"),
            _ if component.is_none() => component = Some(PathBuf::from(arg)),
            _ => bail!("unexpected argument {arg:?} (arguments for the component go after --)"),
        }
    }
    cli.component = component.context("no COMPONENT")?;
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
        if cli.serve {
            serve(&cli).await.map(|()| ExitCode::SUCCESS)
        } else {
            run(&cli).await
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

/// The engine: wasmtime's defaults, and for `serve` the pooling allocator
/// with its default limits, as `wasmtime serve` uses where the machine has
/// the address space for it (else the default on-demand allocator, as there).
fn engine(pooling: bool) -> Result<Engine> {
    let mut config = Config::new();
    config.wasm_component_model(true);
    if pooling {
        let mut pooled = config.clone();
        pooled.allocation_strategy(InstanceAllocationStrategy::Pooling(
            PoolingAllocationConfig::default(),
        ));
        if let Ok(engine) = Engine::new(&pooled) {
            return Ok(engine);
        }
    }
    Engine::new(&config).map_err(|e| anyhow!("creating the engine: {e:?}"))
}

fn load(engine: &Engine, path: &Path) -> Result<Component> {
    Component::from_file(engine, path).map_err(|e| anyhow!("loading {}: {e:?}", path.display()))
}

/// A linker with all of WASI 0.2 and wasi:http.
fn linker(engine: &Engine) -> Result<Linker<HostState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(|e| anyhow!("{e:?}"))?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)
        .map_err(|e| anyhow!("{e:?}"))?;
    Ok(linker)
}

fn state(cli: &Cli, args: &[String]) -> HostState {
    let mut wasi = WasiCtxBuilder::new();
    wasi.inherit_stdio().args(args);
    for (k, v) in &cli.env {
        wasi.env(k, v);
    }
    HostState {
        wasi: wasi.build(),
        http: WasiHttpCtx::new(),
        table: ResourceTable::new(),
    }
}

/// `stock-host run`: the command's exit status.
async fn run(cli: &Cli) -> Result<ExitCode> {
    let engine = engine(false)?;
    let component = load(&engine, &cli.component)?;
    let linker = linker(&engine)?;
    let argv0 = cli
        .component
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let args: Vec<String> = std::iter::once(argv0)
        .chain(cli.args.iter().cloned())
        .collect();
    let mut store = Store::new(&engine, state(cli, &args));
    let command = Command::instantiate_async(&mut store, &component, &linker)
        .await
        .map_err(|e| anyhow!("instantiating {}: {e:?}", cli.component.display()))?;
    let result = command.wasi_cli_run().call_run(&mut store).await;
    drop(store);
    Ok(match result {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(())) => ExitCode::FAILURE,
        Err(e) => match e.downcast_ref::<I32Exit>() {
            // Exit codes are 0-255 on the platforms this runs on.
            Some(exit) => ExitCode::from(exit.0 as u8),
            None => {
                eprintln!("stock-host: the component trapped: {e:?}");
                ExitCode::from(TRAP_EXIT_CODE)
            }
        },
    })
}

type Body = UnsyncBoxBody<Bytes, anyhow::Error>;

/// `stock-host serve`: serves until killed.
async fn serve(cli: &Cli) -> Result<()> {
    let engine = engine(true)?;
    let component = load(&engine, &cli.component)?;
    let linker = linker(&engine)?;
    let pre = linker
        .instantiate_pre(&component)
        .map_err(|e| anyhow!("linking {}: {e:?}", cli.component.display()))?;
    let pre = ProxyPre::new(pre).map_err(|e| {
        anyhow!(
            "{} is not a wasi:http/proxy component: {e:?}",
            cli.component.display()
        )
    })?;
    let listener = tokio::net::TcpListener::bind(cli.listen)
        .await
        .with_context(|| format!("cannot listen on {}", cli.listen))?;
    let addr = listener.local_addr()?;
    println!("stock-host listening on http://{addr}");
    let argv0 = cli
        .component
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let host = std::sync::Arc::new(Served {
        pre,
        env: cli.env.clone(),
        argv0,
    });
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                eprintln!("stock-host: accept failed: {e}");
                continue;
            }
        };
        // Without it, a body written after the head waits for the client's
        // delayed ACK (Nagle's algorithm).
        let _ = stream.set_nodelay(true);
        let host = host.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let host = host.clone();
                async move { Ok::<_, Infallible>(host.handle(req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// What every request needs.
struct Served {
    pre: ProxyPre<HostState>,
    env: Vec<(String, String)>,
    argv0: String,
}

impl Served {
    async fn handle(&self, req: Request<Incoming>) -> Response<Body> {
        match self.call(req).await {
            Ok(response) => response,
            Err(e) => {
                eprintln!("stock-host: the component failed: {e:#}");
                Response::builder()
                    .status(500)
                    .body(
                        Full::new(Bytes::from(format!("{e:#}\n")))
                            .map_err(|never| match never {})
                            .boxed_unsync(),
                    )
                    .unwrap()
            }
        }
    }

    /// One request in a fresh store and instance.
    async fn call(&self, req: Request<Incoming>) -> Result<Response<Body>> {
        let mut wasi = WasiCtxBuilder::new();
        wasi.inherit_stdio().args(std::slice::from_ref(&self.argv0));
        for (k, v) in &self.env {
            wasi.env(k, v);
        }
        let mut store = Store::new(
            self.pre.engine(),
            HostState {
                wasi: wasi.build(),
                http: WasiHttpCtx::new(),
                table: ResourceTable::new(),
            },
        );
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let request = store
            .data_mut()
            .http()
            .new_incoming_request(Scheme::Http, req)
            .map_err(|e| anyhow!("{e:?}"))?;
        let out = store
            .data_mut()
            .http()
            .new_response_outparam(sender)
            .map_err(|e| anyhow!("{e:?}"))?;
        let pre = self.pre.clone();
        // The guest runs in its own task: it may keep writing the body after
        // the response head has gone.
        let task = tokio::spawn(async move {
            let proxy = pre.instantiate_async(&mut store).await?;
            proxy
                .wasi_http_incoming_handler()
                .call_handle(&mut store, request, out)
                .await
        });
        match receiver.await {
            Ok(Ok(response)) => {
                Ok(response.map(|body| body.map_err(|e| anyhow!("{e:?}")).boxed_unsync()))
            }
            Ok(Err(code)) => bail!("the component answered with error {code:?}"),
            Err(_) => match task.await {
                Ok(Ok(())) => bail!("the component returned without setting a response"),
                Ok(Err(e)) => Err(anyhow!("{e:?}")),
                Err(e) => bail!("the request task failed: {e}"),
            },
        }
    }
}
