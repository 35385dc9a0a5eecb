//! The `lockd` command line.

mod client;
#[cfg(unix)]
mod exec;
mod logging;
mod watch;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use lockd::config::LockdConfig;
use lockd::run::{self, Output, RunConfig, RunLimits};
use lockd::serve::ServeOptions;
use lockd::store::StoreSpec;

// Every lock operation allocates a few small strings (the key, the owner,
// the guest's arguments); mimalloc makes those about twice as cheap as
// glibc's allocator, which shows in benchmark B1 (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "lockd",
    version,
    about = "Distributed locks as a WebAssembly capability"
)]
struct Cli {
    /// Log line format on stderr (filter with RUST_LOG, e.g. RUST_LOG=lockd=debug).
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t,
        env = "LOCKD_LOG_FORMAT"
    )]
    log_format: logging::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a wasi:cli command component with full WASI and the lock capability.
    Run {
        /// The component (.wasm).
        component: PathBuf,
        #[command(flatten)]
        store: StoreArgs,
        /// The namespace the component's locks live in.
        #[arg(long, default_value = "default")]
        namespace: String,
        /// Stop the component after this long (e.g. 30s, 500ms); default: no limit.
        #[arg(long, value_parser = client::parse_duration_ms)]
        timeout: Option<u64>,
        /// Most linear memory the component may grow to, in bytes; default: no limit.
        #[arg(long)]
        max_memory_bytes: Option<usize>,
        /// Arguments passed to the component (after `--`).
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Serve the REST API, /metrics and /healthz (and a Spin manifest's HTTP
    /// components with --manifest).
    Serve {
        /// Address to listen on (port 0 picks a free port).
        #[arg(long, default_value = "127.0.0.1:7450")]
        listen: SocketAddr,
        /// A Spin manifest whose HTTP components to serve too.
        #[arg(long)]
        manifest: Option<PathBuf>,
        #[command(flatten)]
        common: ServeArgs,
    },
    /// Serve the HTTP components of a Spin manifest, like `spin up`, together
    /// with the REST API.
    Up {
        /// Run each component's build command first, like `spin up --build`.
        #[arg(long)]
        build: bool,
        /// The Spin manifest.
        #[arg(short = 'f', long = "file", default_value = "spin.toml")]
        file: PathBuf,
        /// Address to listen on (port 0 picks a free port).
        #[arg(long, default_value = "127.0.0.1:3000", env = "LOCKD_LISTEN")]
        listen: SocketAddr,
        #[command(flatten)]
        common: ServeArgs,
    },
    /// Compose a component that imports lockd:lock with the lockd-client
    /// component, so that it runs on any host with wasi:http (Spin,
    /// `wasmtime serve`, jco) and reaches a lockd server over HTTP.
    ///
    /// Refuses (exit 2) an APP that is not a component, imports no lockd:lock
    /// interface, or imports a lockd:lock version the client does not export.
    /// The result is validated and imports no lockd:lock/locks or guards; the
    /// types-only lockd:lock/types may remain an import, which hosts accept
    /// and need provide nothing for.
    Plug {
        /// The component that imports lockd:lock (.wasm).
        app: PathBuf,
        /// Where to write the composed component.
        #[arg(short = 'o', long = "output", value_name = "OUT.wasm")]
        output: PathBuf,
        /// The lockd-client component [default: $LOCKD_CLIENT_WASM, else
        /// ./target/guests/lockd-client.wasm, else the target/guests/ next to
        /// this binary; build it with `bash guest/build-all.sh lockd-client`].
        #[arg(long, value_name = "CLIENT.wasm")]
        client: Option<PathBuf>,
    },
    #[command(flatten)]
    Client(client::ClientCommand),
    /// Run a command while holding a lock, like flock: take NAME (waiting up
    /// to --wait), run CMD with LOCKD_LOCK_NAME, LOCKD_NAMESPACE, LOCKD_OWNER
    /// and LOCKD_FENCING_TOKEN set, keep the lock alive while CMD runs,
    /// release it when CMD exits, and exit with CMD's status.
    ///
    /// Exits 75 (CMD never started) if the lock cannot be taken, and 76 if
    /// the lock is lost while CMD runs (CMD then gets SIGTERM, and SIGKILL
    /// after --kill-after). SIGINT and SIGTERM are passed on to CMD.
    #[cfg(unix)]
    Exec(exec::ExecArgs),
}

/// Where locks live and lockd.toml: every subcommand that holds locks
/// (`run`, `serve`, `up`) takes these and opens its service the same way.
#[derive(Args)]
struct StoreArgs {
    /// Where locks live: redb:PATH, memory or etcd:http://HOST:PORT[,...]
    /// [default: `store` in lockd.toml, else redb:.lockd/locks.redb].
    #[arg(long, env = "LOCKD_STORE")]
    store: Option<StoreSpec>,
    /// lockd's configuration [default: ./lockd.toml if it exists].
    #[arg(long)]
    config: Option<PathBuf>,
}

impl StoreArgs {
    /// lockd.toml and the store it and the flags choose.
    fn resolve(self) -> anyhow::Result<(LockdConfig, StoreSpec)> {
        let config = LockdConfig::load_or_default(self.config.as_deref())?;
        let store = config.store(self.store)?;
        Ok((config, store))
    }
}

/// Options `serve` and `up` share.
#[derive(Args)]
struct ServeArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Require `Authorization: Bearer <token>` on every route but /healthz.
    #[arg(long, env = "LOCKD_AUTH_TOKEN", hide_env_values = true)]
    auth_token: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init(cli.log_format);
    let code = match cli.command {
        // Blocking HTTP, no async runtime needed.
        Command::Client(command) => client::run(command),
        // Its own small runtime: blocking HTTP on its blocking threads.
        #[cfg(unix)]
        Command::Exec(args) => exec::run(args),
        Command::Plug {
            app,
            output,
            client,
        } => plug_command(&app, &output, client.as_deref()),
        command => {
            if let Command::Up {
                build: true, file, ..
            } = &command
            {
                if let Err(e) = lockd::serve::run_build_commands(file) {
                    eprintln!("lockd: {e:#}");
                    return ExitCode::from(2);
                }
            }
            with_runtime(command)
        }
    };
    ExitCode::from(code.clamp(0, 255) as u8)
}

fn with_runtime(command: Command) -> i32 {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return 1;
        }
    };
    let code = runtime.block_on(async {
        match command {
            Command::Run {
                component,
                store,
                namespace,
                timeout,
                max_memory_bytes,
                args,
            } => {
                let limits = RunLimits {
                    timeout: timeout.map(std::time::Duration::from_millis),
                    max_memory_bytes,
                };
                run_command(component, store, namespace, limits, args).await
            }
            Command::Serve {
                listen,
                manifest,
                common,
            } => serve_command(listen, manifest, common).await,
            Command::Up {
                file,
                listen,
                common,
                ..
            } => serve_command(listen, Some(file), common).await,
            Command::Client(_) => unreachable!("client commands run without a runtime"),
            Command::Plug { .. } => unreachable!("plug runs without a runtime"),
            #[cfg(unix)]
            Command::Exec(_) => unreachable!("exec runs its own runtime"),
        }
    });
    // The runtime (and with it the store's writer) shuts down before exit.
    drop(runtime);
    code
}

async fn run_command(
    component: PathBuf,
    store: StoreArgs,
    namespace: String,
    limits: RunLimits,
    args: Vec<String>,
) -> i32 {
    let outcome = async {
        let (config, store) = store.resolve()?;
        let service = config.open_service(&store).await?;
        let engine = run::engine()?;
        let loaded = run::load(&engine, &component)?;
        let argv0 = component
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "component".to_string());
        let config = RunConfig {
            namespace,
            args: std::iter::once(argv0).chain(args).collect(),
            output: Output::Inherit,
            limits,
        };
        run::run_component(&engine, &loaded, service, config).await
    }
    .await;
    match outcome {
        Ok(outcome) => {
            if let Some(trap) = outcome.trap {
                eprintln!("error: the component trapped: {trap}");
            }
            outcome.exit_code
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            2
        }
    }
}

/// `lockd plug`: exits 0 with a summary on stdout, or 2 with one line on
/// stderr.
fn plug_command(
    app: &std::path::Path,
    output: &std::path::Path,
    client: Option<&std::path::Path>,
) -> i32 {
    let plugged = lockd::plug::find_client(client)
        .and_then(|client| lockd::plug::plug_files(app, &client, output));
    match plugged {
        Ok(plugged) => {
            println!("{}", lockd::plug::summary(output, &plugged));
            0
        }
        Err(e) => {
            eprintln!("lockd plug: {e:#}");
            2
        }
    }
}

/// `lockd serve` and `lockd up`: exits 0 after Ctrl-C or SIGTERM, 2 when the
/// server cannot start.
async fn serve_command(listen: SocketAddr, manifest: Option<PathBuf>, args: ServeArgs) -> i32 {
    let started = async {
        let (config, store) = args.store.resolve()?;
        let options = ServeOptions {
            listen,
            store,
            manifest,
            config,
            auth_token: args.auth_token.filter(|t| !t.is_empty()),
        };
        lockd::serve::serve(options, shutdown_signal()).await
    }
    .await;
    match started {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("lockd: {e:#}");
            2
        }
    }
}

/// Watches Ctrl-C and, on Unix, SIGTERM from the moment it is called, and
/// returns a future that completes on the first of them. Watching starts
/// before the server announces its address: registered on the future's first
/// poll instead, a SIGTERM sent right after the announcement could still meet
/// the default action and kill the process (`serve_stops_on_sigterm` saw it).
/// A signal that cannot be watched never completes, rather than stopping the
/// server at once.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, Signal, SignalKind};
        async fn first(signal: Option<Signal>) {
            match signal {
                Some(mut s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        }
        let interrupt = signal(SignalKind::interrupt()).ok();
        let terminate = signal(SignalKind::terminate()).ok();
        async move {
            tokio::select! {
                () = first(interrupt) => {}
                () = first(terminate) => {}
            }
        }
    }
    #[cfg(not(unix))]
    async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
