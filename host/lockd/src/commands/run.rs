//! `lockd run`: runs a `wasi:cli` command component with the lock
//! capability ([`lockd_components::run`]).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use lockd_components::run::{self, Output, RunConfig, RunLimits};

use crate::cli::flags::{NamespaceArg, StoreArgs};
use crate::cli::runtime;
use crate::cli::time::parse_duration_ms;

/// Run a wasi:cli command component with full WASI and the lock capability.
#[derive(Args, Debug)]
#[command(mut_arg("namespace", |arg| arg.help("The namespace the component's locks live in")))]
pub struct RunCommand {
    /// The component (.wasm).
    component: PathBuf,
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    namespace: NamespaceArg,
    /// Stop the component after this long (e.g. 30s, 500ms); default: no limit.
    #[arg(long, value_parser = parse_duration_ms)]
    timeout: Option<u64>,
    /// Most linear memory the component may grow to, in bytes; default: no limit.
    #[arg(long)]
    max_memory_bytes: Option<usize>,
    /// Arguments passed to the component (after `--`).
    #[arg(last = true)]
    args: Vec<String>,
}

impl RunCommand {
    /// Exits with the component's exit code; 2 if it cannot start.
    pub fn execute(self) -> i32 {
        runtime::block_on(self.run())
    }

    async fn run(self) -> i32 {
        let RunCommand {
            component,
            store,
            namespace: NamespaceArg { namespace },
            timeout,
            max_memory_bytes,
            args,
        } = self;
        let limits = RunLimits {
            timeout: timeout.map(Duration::from_millis),
            max_memory_bytes,
        };
        let outcome = async {
            let (config, store) = store.resolve()?;
            let service = config.open_service(&store).await?;
            let bytes = std::fs::read(&component)
                .with_context(|| format!("loading component {}", component.display()))?;
            let engine = run::engine_for(&bytes)
                .with_context(|| format!("loading component {}", component.display()))?;
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
}
