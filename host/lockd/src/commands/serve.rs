//! `lockd serve`: the REST API, /metrics and /healthz
//! ([`lockd_server::serve()`]), with Dapr's and Kahuna's APIs mounted on the
//! same listener ([`lockd_compat`]), and a Spin manifest's HTTP components
//! with `--manifest` ([`lockd_components::serve`]). Also the serving loop
//! `lockd up` shares, and how it stops: on SIGTERM or Ctrl-C the server
//! drains ([`lockd_server::serve::drain`]) within a bound, and a watchdog
//! ends the process at the bound whatever is left ([`shutdown_begins`]).

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use lockd_compat::Compat;
use lockd_components::serve::SpinApp;
use lockd_server::auth::LiveCredentials;
use lockd_server::config::{reload_tokens, LockdConfig, MIN_SHUTDOWN_TIMEOUT_MS};
use lockd_server::serve::{Drained, Extension, ServeOptions};
use lockd_server::tls::Tls;

use crate::cli::flags::ServeArgs;
use crate::cli::runtime;

/// Serve the REST API, /metrics and /healthz (and a Spin manifest's HTTP
/// components with --manifest), over HTTPS with --tls-cert and --tls-key.
#[derive(Args, Debug)]
pub struct ServeCommand {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:7450")]
    listen: SocketAddr,
    /// A Spin manifest whose HTTP components to serve too.
    #[arg(long)]
    manifest: Option<PathBuf>,
    #[command(flatten)]
    common: ServeArgs,
}

/// The exit code of a shutdown that passed its bound: requests still in
/// flight were cut, or the store did not close in time.
pub const EXIT_SHUTDOWN_PAST_BOUND: i32 = 1;

impl ServeCommand {
    /// Exits 0 after Ctrl-C or SIGTERM (1 if the shutdown passed its
    /// bound), 2 when the server cannot start.
    pub fn execute(self) -> i32 {
        serve_until_signal(self.listen, self.manifest, self.common)
    }
}

/// `lockd serve` and `lockd up`: serves on a runtime of its own until Ctrl-C
/// or SIGTERM, then drains: exit 0 once done within the bound
/// (`--shutdown-timeout`, `[server] shutdown_timeout_ms`), else
/// [`EXIT_SHUTDOWN_PAST_BOUND`]; exit 2 when the server cannot start (a TLS
/// file that cannot be used included). SIGHUP reads the TLS files and
/// lockd.toml's `[[auth.tokens]]` again ([`Reload`]).
pub fn serve_until_signal(listen: SocketAddr, manifest: Option<PathBuf>, args: ServeArgs) -> i32 {
    runtime::block_on(async {
        match serve(listen, manifest, args).await {
            Ok(drained) if drained.within_bound() => 0,
            Ok(_) => {
                tracing::error!(
                    code = EXIT_SHUTDOWN_PAST_BOUND,
                    "the shutdown passed its bound; exiting with code {EXIT_SHUTDOWN_PAST_BOUND}"
                );
                EXIT_SHUTDOWN_PAST_BOUND
            }
            Err(e) => {
                eprintln!("lockd: {e:#}");
                2
            }
        }
    })
}

/// Binds, serves until the first SIGTERM or Ctrl-C, and drains.
async fn serve(
    listen: SocketAddr,
    manifest: Option<PathBuf>,
    args: ServeArgs,
) -> anyhow::Result<Drained> {
    let tls_flags = args.tls_flags();
    let config_file = LockdConfig::file_in_use(args.store.config.as_deref());
    let (mut config, store) = args.store.resolve()?;
    config.tls = config.tls.overridden_by(tls_flags);
    config.dapr = config
        .dapr
        .overridden_by(args.dapr_components.clone(), args.dapr_any_store);
    if let Some(ms) = args.shutdown_timeout {
        if ms < MIN_SHUTDOWN_TIMEOUT_MS {
            anyhow::bail!(
                "--shutdown-timeout is {ms}ms; it must be at least {MIN_SHUTDOWN_TIMEOUT_MS}ms"
            );
        }
        config.server.shutdown_timeout_ms = Some(ms);
    }
    let bound = config.server.shutdown_timeout()?;
    let auth_token = args.auth_token.filter(|t| !t.is_empty());
    // Both watched before the address is announced (see
    // `shutdown_signal`).
    let signal = shutdown_signal();
    let shutdown = async move {
        signal.await;
        shutdown_begins(bound);
    };
    let hangup = watch_hangup(config.tls.cert.is_some() || config_file.is_some());
    let options = ServeOptions {
        listen,
        store,
        config,
        auth_token: auth_token.clone(),
        events_heartbeat: Duration::from_millis(args.events_heartbeat),
        extensions: extensions(manifest, args.dapr_grpc_listen),
    };
    let server = lockd_server::bind(options).await?;
    if let Some(hangup) = hangup {
        let reload = Reload {
            tls: server.tls(),
            tokens: config_file.map(|file| (file, auth_token, server.credentials())),
        };
        tokio::spawn(reload.on_every(hangup));
    }
    server.run_draining(shutdown).await
}

/// Where the process begins to stop, once the first SIGTERM or Ctrl-C
/// arrived: the server drains next (it logs what it does). This is the
/// place for a service manager's notice (systemd's `STOPPING=1`). From now
/// on a watchdog ends the process at `bound` with
/// [`EXIT_SHUTDOWN_PAST_BOUND`] if it is still running (the drain itself
/// ends by the bound; closing the store after it may not), and a second
/// signal ends it at once with the same code.
fn shutdown_begins(bound: Duration) {
    let watchdog = std::thread::Builder::new()
        .name("lockd-shutdown-watchdog".to_string())
        .spawn(move || {
            std::thread::sleep(bound);
            tracing::error!(
                bound_ms = bound.as_millis() as u64,
                code = EXIT_SHUTDOWN_PAST_BOUND,
                "the shutdown did not finish within its bound; exiting now with code \
                 {EXIT_SHUTDOWN_PAST_BOUND} (changes acknowledged to clients were durable already)"
            );
            std::process::exit(EXIT_SHUTDOWN_PAST_BOUND);
        });
    if let Err(e) = watchdog {
        tracing::warn!(error = %e, "cannot start the shutdown's watchdog; the drain is bounded still");
    }
    let again = shutdown_signal();
    tokio::spawn(async move {
        again.await;
        tracing::error!(
            code = EXIT_SHUTDOWN_PAST_BOUND,
            "a second signal: exiting now with code {EXIT_SHUTDOWN_PAST_BOUND}"
        );
        std::process::exit(EXIT_SHUTDOWN_PAST_BOUND);
    });
}

/// What `lockd serve` and `lockd up` add to the server: a manifest's HTTP
/// components, then Dapr's and Kahuna's APIs (with Dapr's gRPC API on
/// `dapr_grpc_listen`).
fn extensions(
    manifest: Option<PathBuf>,
    dapr_grpc_listen: Option<SocketAddr>,
) -> Vec<Box<dyn Extension>> {
    let mut extensions: Vec<Box<dyn Extension>> = Vec::new();
    if let Some(manifest) = manifest {
        extensions.push(Box::new(SpinApp::new(manifest)));
    }
    extensions.push(Box::new(Compat::new(dapr_grpc_listen)));
    extensions
}

/// What SIGHUP reads again: the TLS files, and the tokens of the lockd.toml
/// the server started with (with its `--auth-token`). Each is logged, and
/// one that fails leaves what is in force as it was.
struct Reload {
    tls: Option<Arc<Tls>>,
    tokens: Option<(PathBuf, Option<String>, LiveCredentials)>,
}

impl Reload {
    #[cfg(unix)]
    async fn on_every(self, mut hangup: tokio::signal::unix::Signal) {
        while hangup.recv().await.is_some() {
            if let Some(tls) = &self.tls {
                tls.reload();
            }
            if let Some((file, flag_token, live)) = &self.tokens {
                match reload_tokens(file, flag_token.as_deref(), live) {
                    Ok(names) => tracing::info!(
                        file = %file.display(),
                        tokens = %names.join(","),
                        "tokens reloaded"
                    ),
                    Err(e) => tracing::error!(
                        error = %format!("{e:#}"),
                        "tokens not reloaded; the tokens in force stay"
                    ),
                }
            }
        }
    }

    #[cfg(not(unix))]
    async fn on_every(self, never: std::future::Pending<()>) {
        never.await
    }
}

/// Watches SIGHUP from now on if `wanted` (there is something to read
/// again; otherwise SIGHUP keeps its default meaning, stop). Watching starts
/// before the address is announced, for the reason `shutdown_signal` gives.
#[cfg(unix)]
fn watch_hangup(wanted: bool) -> Option<tokio::signal::unix::Signal> {
    use tokio::signal::unix::{signal, SignalKind};
    if !wanted {
        return None;
    }
    signal(SignalKind::hangup())
        .map_err(|e| {
            tracing::warn!(error = %e, "cannot watch SIGHUP; TLS files and tokens are read only at start");
        })
        .ok()
}

#[cfg(not(unix))]
fn watch_hangup(_wanted: bool) -> Option<std::future::Pending<()>> {
    None
}

/// Watches Ctrl-C and, on Unix, SIGTERM from the moment it is called, and
/// returns a future that completes on the first of them. Watching starts
/// before the server announces its address: registered on the future's first
/// poll instead, a SIGTERM sent right after the announcement could still meet
/// the default action and kill the process (`serve_stops_on_sigterm` saw it).
/// A signal that cannot be watched never completes, rather than stopping the
/// server at once.
fn shutdown_signal() -> impl Future<Output = ()> {
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
