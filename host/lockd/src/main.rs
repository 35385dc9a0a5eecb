//! The `lockd` binary, lockd's command line and nothing else: parses the
//! command line and runs one command. Each command is a file of
//! [`commands`] (its flags and its `execute`); the plumbing they share is in
//! [`cli`]. The work is the libraries': the REST server (`lockd-server`),
//! which `lockd serve` and `lockd up` assemble with Dapr's and Kahuna's APIs
//! (`lockd-compat`) and a manifest's components (`lockd-components`, which
//! also runs and composes components for `lockd run` and `lockd plug`), and
//! the redb store's (`lockd-redb`), which `lockd snapshot` and `lockd store
//! check` call.

mod cli;
mod commands;

use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};

use cli::logging::{self, LogFormat};
use commands::completions::CompletionsCommand;
#[cfg(unix)]
use commands::elect::ElectCommand;
#[cfg(unix)]
use commands::exec::ExecCommand;
use commands::extend::ExtendCommand;
use commands::force_unlock::ForceUnlockCommand;
use commands::get::GetCommand;
use commands::leader::LeaderCommand;
use commands::lease::LeaseCommand;
use commands::lock::LockCommand;
use commands::ls::LsCommand;
use commands::man::ManCommand;
use commands::plug::PlugCommand;
use commands::proclaim::ProclaimCommand;
use commands::run::RunCommand;
use commands::sem::SemCommand;
use commands::serve::ServeCommand;
use commands::snapshot::SnapshotCommand;
use commands::store::StoreCommand;
use commands::token::TokenCommand;
use commands::unlock::UnlockCommand;
use commands::up::UpCommand;
use commands::watch::WatchCommand;

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
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// Every subcommand; each runs synchronously and returns the exit code.
/// Those that need an async runtime (`run`, `serve`, `up`, `exec`, `elect`) build
/// it inside their own `execute`.
#[derive(Subcommand)]
enum Command {
    Run(RunCommand),
    Serve(ServeCommand),
    Up(UpCommand),
    Plug(PlugCommand),
    Lock(LockCommand),
    Unlock(UnlockCommand),
    Extend(ExtendCommand),
    Get(GetCommand),
    Ls(LsCommand),
    ForceUnlock(ForceUnlockCommand),
    Watch(WatchCommand),
    Lease(LeaseCommand),
    Sem(SemCommand),
    Token(TokenCommand),
    #[cfg(unix)]
    Exec(ExecCommand),
    #[cfg(unix)]
    Elect(ElectCommand),
    Leader(LeaderCommand),
    Proclaim(ProclaimCommand),
    Snapshot(SnapshotCommand),
    Store(StoreCommand),
    Completions(CompletionsCommand),
    Man(ManCommand),
}

impl Command {
    fn execute(self) -> i32 {
        match self {
            Command::Run(command) => command.execute(),
            Command::Serve(command) => command.execute(),
            Command::Up(command) => command.execute(),
            Command::Plug(command) => command.execute(),
            Command::Lock(command) => command.execute(),
            Command::Unlock(command) => command.execute(),
            Command::Extend(command) => command.execute(),
            Command::Get(command) => command.execute(),
            Command::Ls(command) => command.execute(),
            Command::ForceUnlock(command) => command.execute(),
            Command::Watch(command) => command.execute(),
            Command::Lease(command) => command.execute(),
            Command::Sem(command) => command.execute(),
            Command::Token(command) => command.execute(),
            #[cfg(unix)]
            Command::Exec(command) => command.execute(),
            #[cfg(unix)]
            Command::Elect(command) => command.execute(),
            Command::Leader(command) => command.execute(),
            Command::Proclaim(command) => command.execute(),
            Command::Snapshot(command) => command.execute(),
            Command::Store(command) => command.execute(),
            Command::Completions(command) => command.execute(),
            Command::Man(command) => command.execute(),
        }
    }
}

/// The one-line summaries `lockd --help` shows for the commands whose own
/// description is longer than a line and is kept in another file; each
/// command's full description stays what `lockd CMD --help` shows.
const SUMMARIES: [(&str, &str); 2] = [
    (
        "serve",
        "Serve the REST API, /metrics and /healthz (with --manifest, its components too)",
    ),
    (
        "up",
        "Serve a Spin manifest's HTTP components, like `spin up`, with the REST API",
    ),
];

/// [`Cli`] with [`SUMMARIES`] in place of those commands' descriptions,
/// which become their long help (what `lockd CMD --help` shows).
fn command() -> clap::Command {
    Cli::command().mut_subcommands(|command| {
        let Some((_, summary)) = SUMMARIES
            .iter()
            .find(|(name, _)| *name == command.get_name())
        else {
            return command;
        };
        match command.get_long_about().or(command.get_about()).cloned() {
            Some(long) => command.about(*summary).long_about(long),
            None => command.about(*summary),
        }
    })
}

/// The command line, parsed as [`command`] describes it (as `Cli::parse`
/// does: a usage error is printed and exits 2).
fn parse() -> Cli {
    let mut command = command();
    let mut matches = command.get_matches_mut();
    Cli::from_arg_matches_mut(&mut matches).unwrap_or_else(|e| e.format(&mut command).exit())
}

fn main() -> ExitCode {
    let cli = parse();
    logging::init(cli.log_format);
    let code = cli.command.execute();
    ExitCode::from(code.clamp(0, 255) as u8)
}
