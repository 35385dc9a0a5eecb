//! `lockd plug`: composes an app with the client component for the
//! lockd:lock version it imports ([`lockd_components::compose`]).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use lockd_components::compose::{self, Plugged};

// `BUILT_IN`: the client components build.rs embedded (none when it was
// built without the guest sources).
include!(concat!(env!("OUT_DIR"), "/built_in_clients.rs"));

/// Compose a component that imports lockd:lock with lockd's client component.
///
/// The client component is the one for the version it imports, so that the
/// result runs on any host with wasi:http (Spin, `wasmtime serve`, jco,
/// `wasmtime run -S http`) and reaches a lockd server over HTTP:
/// lockd:lock@0.1.0 (WASI 0.2) gets lockd-client.wasm,
/// lockd:lock@0.2.0 (WASI 0.3) gets lockd-client-p3.wasm, which needs a
/// WASI 0.3 host (`wasmtime run -Wcomponent-model-async -Sp3,http`).
///
/// Refuses (exit 2) an APP that is not a component, imports no lockd:lock
/// interface, or imports a lockd:lock version no client exports.
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
    /// The client component, instead of the one for each version APP
    /// imports; repeat it for several (default: for lockd:lock@0.1.0
    /// $LOCKD_CLIENT_WASM, else the lockd-client.wasm built into this
    /// binary; for @0.2.0 the same with $LOCKD_CLIENT_P3_WASM and
    /// lockd-client-p3.wasm. A lockd built without them looks at
    /// ./target/guests/ and the target/guests/ next to this binary).
    #[arg(long, value_name = "CLIENT.wasm")]
    client: Vec<PathBuf>,
}

impl PlugCommand {
    /// Exits 0 with a summary on stdout, or 2 with one line on stderr.
    pub fn execute(self) -> i32 {
        match compose::plug_files(&self.app, &self.client, BUILT_IN, &self.output) {
            Ok(plugged) => {
                println!("{}", summary(&self.output, &plugged));
                0
            }
            Err(e) => {
                eprintln!("lockd plug: {e:#}");
                2
            }
        }
    }
}

/// A one-paragraph account of a successful plug, for stdout.
fn summary(out: &Path, plugged: &Plugged) -> String {
    let mut text = format!(
        "wrote {} ({} bytes): {} now provided by {}",
        out.display(),
        plugged.bytes.len(),
        plugged.plugged.join(", "),
        plugged.clients.join(" and ")
    );
    let _ = write!(text, "\nimports: {}", plugged.imports.join(", "));
    if !plugged.types_only_left.is_empty() {
        let _ = write!(
            text,
            "\n{} remains imported: it is types-only, so a host provides nothing for it",
            plugged.types_only_left.join(", ")
        );
    }
    text
}
