//! The `lockd` subcommands, one file each: its clap arguments and an
//! `execute` that returns the process exit code. The server commands
//! (`serve`, `up`, `run`) hand the work to the libraries (`lockd-server`,
//! `lockd-compat`, `lockd-components`) inside a runtime of their own;
//! `plug` calls `lockd-components` directly; `token new` makes its token
//! with `lockd-server`; the client commands, `exec` and `elect` speak the
//! REST API through [`crate::cli::client`]; `snapshot restore` and `store
//! check` work on a stopped redb store with `lockd-redb`; `completions`
//! and `man` print what clap generates from the definition in `main.rs`.

pub mod completions;
#[cfg(unix)]
pub mod elect;
#[cfg(unix)]
pub mod exec;
pub mod extend;
pub mod force_unlock;
pub mod get;
pub mod leader;
pub mod lease;
pub mod lock;
pub mod ls;
pub mod man;
pub mod plug;
pub mod proclaim;
pub mod run;
pub mod sem;
pub mod serve;
pub mod snapshot;
pub mod store;
pub mod token;
pub mod unlock;
pub mod up;
pub mod watch;
