//! The `lockd` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use lockd::run::{self, Output, RunConfig};
use lockd::store::{StoreSpec, DEFAULT_STORE};

#[derive(Parser)]
#[command(
    name = "lockd",
    version,
    about = "Distributed locks as a WebAssembly capability"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a wasi:cli command component with full WASI and the lock capability.
    Run {
        /// The component (.wasm).
        component: PathBuf,
        /// Where locks live: redb:PATH or memory.
        #[arg(long, default_value = DEFAULT_STORE, env = "LOCKD_STORE")]
        store: StoreSpec,
        /// The namespace the component's locks live in.
        #[arg(long, default_value = "default")]
        namespace: String,
        /// Arguments passed to the component (after `--`).
        #[arg(last = true)]
        args: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(async {
        match cli.command {
            Command::Run {
                component,
                store,
                namespace,
                args,
            } => run_command(component, store, namespace, args).await,
        }
    });
    // The runtime (and with it the store's writer) shuts down before exit.
    drop(runtime);
    ExitCode::from(code.clamp(0, 255) as u8)
}

async fn run_command(
    component: PathBuf,
    store: StoreSpec,
    namespace: String,
    args: Vec<String>,
) -> i32 {
    let outcome = async {
        let service = store.open_service()?;
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
