//! The `lockd` binary's log output. Library crates only emit `tracing`
//! events; this installs the one subscriber that writes them, to stderr.
//!
//! - `RUST_LOG` filters, with the `tracing-subscriber` `EnvFilter` syntax
//!   (`RUST_LOG=lockd=debug,lockd_etcd=trace`); the default shows `info` and
//!   above. Per-request lines are `debug`, so the default costs the hot path
//!   nothing but a span.
//! - `--log-format text` (the default; colours on a terminal) or `json`
//!   (one JSON object per line, with the enclosing spans' fields).

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the subscriber. A malformed `RUST_LOG` is reported and the
/// default filter used, rather than refusing to start.
pub fn init(format: LogFormat) {
    let filter = match EnvFilter::try_from_default_env() {
        Ok(filter) => filter,
        Err(e) => {
            if std::env::var_os("RUST_LOG").is_some() {
                eprintln!("lockd: ignoring RUST_LOG: {e}");
            }
            EnvFilter::new("info")
        }
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
    if let Err(e) = installed {
        eprintln!("lockd: logging is off: {e}");
    }
}
