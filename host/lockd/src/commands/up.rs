//! `lockd up`: like `spin up`, serves a Spin manifest's HTTP components
//! together with the REST API.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use super::serve::serve_until_signal;
use crate::cli::flags::ServeArgs;

/// Serve the HTTP components of a Spin manifest, like `spin up`, together
/// with the REST API.
#[derive(Args, Debug)]
pub struct UpCommand {
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
}

impl UpCommand {
    /// Exits 0 after Ctrl-C or SIGTERM (1 if the shutdown passed its
    /// bound, as `lockd serve`), 2 when a build command fails or the server
    /// cannot start.
    pub fn execute(self) -> i32 {
        // The builds run before any runtime exists: they only wait for
        // child processes.
        if self.build {
            if let Err(e) =
                lockd_components::manifest::build_components::run_build_commands(&self.file)
            {
                eprintln!("lockd: {e:#}");
                return 2;
            }
        }
        serve_until_signal(self.listen, Some(self.file), self.common)
    }
}
