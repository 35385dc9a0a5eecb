//! `lockd serve`: the REST API, /metrics and /healthz, and a Spin
//! manifest's HTTP components with `--manifest` ([`lockd::serve`]). Also the
//! serving loop `lockd up` shares.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use lockd::serve::tls::Tls;
use lockd::serve::ServeOptions;

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

impl ServeCommand {
    /// Exits 0 after Ctrl-C or SIGTERM, 2 when the server cannot start.
    pub fn execute(self) -> i32 {
        serve_until_signal(self.listen, self.manifest, self.common)
    }
}

/// `lockd serve` and `lockd up`: serves on a runtime of its own until Ctrl-C
/// or SIGTERM (exit 0); exit 2 when the server cannot start (a TLS file that
/// cannot be used included). With TLS, SIGHUP reloads the TLS files.
pub fn serve_until_signal(listen: SocketAddr, manifest: Option<PathBuf>, args: ServeArgs) -> i32 {
    runtime::block_on(async {
        let started = async {
            let tls_flags = args.tls_flags();
            let (mut config, store) = args.store.resolve()?;
            config.tls = config.tls.overridden_by(tls_flags);
            // Both watched before the address is announced (see
            // `shutdown_signal`).
            let shutdown = shutdown_signal();
            let reload_on_hangup = hangup_reloads(config.tls.cert.is_some());
            let options = ServeOptions {
                listen,
                store,
                manifest,
                config,
                auth_token: args.auth_token.filter(|t| !t.is_empty()),
                events_heartbeat: Duration::from_millis(args.events_heartbeat),
                dapr_grpc_listen: args.dapr_grpc_listen,
            };
            let server = lockd::serve::bind(options).await?;
            reload_on_hangup(server.tls());
            server.run(shutdown).await
        }
        .await;
        match started {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("lockd: {e:#}");
                2
            }
        }
    })
}

/// Watches SIGHUP from now on if `tls` (the server has TLS files; without
/// them SIGHUP keeps its default meaning, stop), and returns the function
/// that, given the bound server's TLS, reads its files again on every
/// SIGHUP. Watching starts before the address is announced, for the reason
/// `shutdown_signal` gives.
fn hangup_reloads(tls: bool) -> impl FnOnce(Option<Arc<Tls>>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let hangup = tls.then(|| signal(SignalKind::hangup())).and_then(|watched| {
            watched
                .map_err(|e| {
                    tracing::warn!(error = %e, "cannot watch SIGHUP; TLS files are read only at start");
                })
                .ok()
        });
        move |server_tls: Option<Arc<Tls>>| {
            if let (Some(server_tls), Some(mut hangup)) = (server_tls, hangup) {
                tokio::spawn(async move {
                    while hangup.recv().await.is_some() {
                        server_tls.reload();
                    }
                });
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tls;
        |_: Option<Arc<Tls>>| {}
    }
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
