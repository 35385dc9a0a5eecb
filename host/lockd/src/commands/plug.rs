//! `lockd plug`: composes an app with the lockd-client component
//! ([`lockd::plug`]).

use std::path::PathBuf;

use clap::Args;

/// Compose a component that imports lockd:lock with the lockd-client
/// component, so that it runs on any host with wasi:http (Spin,
/// `wasmtime serve`, jco) and reaches a lockd server over HTTP.
///
/// Refuses (exit 2) an APP that is not a component, imports no lockd:lock
/// interface, or imports a lockd:lock version the client does not export.
/// The result is validated and imports no lockd:lock/locks or guards; the
/// types-only lockd:lock/types may remain an import, which hosts accept
/// and need provide nothing for.
#[derive(Args, Debug)]
pub struct PlugCommand {
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
}

impl PlugCommand {
    /// Exits 0 with a summary on stdout, or 2 with one line on stderr.
    pub fn execute(self) -> i32 {
        let plugged = lockd::plug::find_client(self.client.as_deref())
            .and_then(|client| lockd::plug::plug_files(&self.app, &client, &self.output));
        match plugged {
            Ok(plugged) => {
                println!("{}", lockd::plug::summary(&self.output, &plugged));
                0
            }
            Err(e) => {
                eprintln!("lockd plug: {e:#}");
                2
            }
        }
    }
}
