//! Flags several commands share, each group flattened into the commands
//! that take it: [`NamespaceArg`] (every command that names a lock, a
//! semaphore, a lease or an election), [`Conn`] (the client commands) with
//! its [`ClientTls`] (also `exec`'s and `elect`'s), [`StoreArgs`] (`run`,
//! `serve`, `up`) and [`ServeArgs`] (`serve`, `up`); and the checks of
//! flags that more than one command takes.

use std::path::PathBuf;

use clap::Args;
use lockd_api::{DurabilityWord, DEFAULT_NAMESPACE};
use lockd_core::MAX_VALUE_BYTES;
use lockd_server::config::{LockdConfig, TlsConfig};
use lockd_server::store::StoreSpec;

use super::failure::{fail, Failure};
use super::output::Format;
use super::time::parse_duration_ms;

/// Where the server is when neither `--server` nor `LOCKD_SERVER` says.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7450";

/// The help of `--server`, which every client command takes.
pub const SERVER_HELP: &str = "The lockd server, or several hosts of one cluster separated by \
    commas (lockd on one etcd store). A call goes to the host that answered last, then to the \
    others in order: on to the next when a host cannot be reached, and, for a call that is \
    safe to send twice (a re-lock, an extend, an unlock with its token, a read), also when \
    its outcome on a host is unknown. A bare host:port is http://";

/// The durability an `--ephemeral` flag (`lock`, `lease grant`, `exec`)
/// asks for.
pub fn durability(ephemeral: bool) -> DurabilityWord {
    if ephemeral {
        DurabilityWord::Ephemeral
    } else {
        DurabilityWord::Persistent
    }
}

/// Exit 2 for an election's `--value` (`elect`, `proclaim`) over the
/// server's limit: known before asking, and too long to show back.
pub fn check_leader_value(value: &str) -> Result<(), Failure> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(fail(
            2,
            format!(
                "--value is {} bytes, over the limit of {MAX_VALUE_BYTES}; \
                 proclaim something short, such as an address or an id",
                value.len()
            ),
        ));
    }
    Ok(())
}

/// `--namespace NAMESPACE`, `default` unless given. Its help names a lock's
/// namespace; a command whose name is something else words it for what it
/// names with `#[command(mut_arg("namespace", |arg| arg.help(...)))]`.
#[derive(Args, Clone, Debug)]
pub struct NamespaceArg {
    /// The namespace of the lock.
    #[arg(long, default_value = DEFAULT_NAMESPACE)]
    pub namespace: String,
}

/// Options every client command takes.
#[derive(Args, Clone, Debug)]
pub struct Conn {
    #[arg(long, env = "LOCKD_SERVER", default_value = DEFAULT_SERVER, value_name = "URL[,URL...]",
          help = SERVER_HELP)]
    pub server: String,
    /// `text` for people, `json` for the server's JSON body as is.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Bearer token, if the server requires one.
    #[arg(long, env = "LOCKD_AUTH_TOKEN", hide_env_values = true)]
    pub auth_token: Option<String>,
    #[command(flatten)]
    pub tls: ClientTls,
}

/// How a client checks an `https://` server and proves who it is.
#[derive(Args, Clone, Debug, Default)]
pub struct ClientTls {
    /// Trust only the CA certificates in this PEM file for an https://
    /// server [default: the system's trusted roots].
    #[arg(long, env = "LOCKD_CACERT", value_name = "FILE")]
    pub cacert: Option<PathBuf>,
    /// Present this client certificate (PEM) to an https:// server that
    /// asks for one (mutual TLS); needs --key.
    #[arg(long, env = "LOCKD_CLIENT_CERT", value_name = "FILE", requires = "key")]
    pub cert: Option<PathBuf>,
    /// The private key (PEM) of --cert.
    #[arg(long, env = "LOCKD_CLIENT_KEY", value_name = "FILE", requires = "cert")]
    pub key: Option<PathBuf>,
}

/// Where locks live and lockd.toml: every subcommand that holds locks
/// (`run`, `serve`, `up`) takes these and opens its service the same way.
#[derive(Args, Debug)]
pub struct StoreArgs {
    /// Where locks live: redb:PATH, memory or etcd:http://HOST:PORT[,...]
    /// [default: `store` in lockd.toml, else redb:.lockd/locks.redb].
    #[arg(long, env = "LOCKD_STORE")]
    pub store: Option<StoreSpec>,
    /// lockd's configuration [default: ./lockd.toml if it exists].
    #[arg(long)]
    pub config: Option<PathBuf>,
}

impl StoreArgs {
    /// lockd.toml and the store it and the flags choose.
    pub fn resolve(self) -> anyhow::Result<(LockdConfig, StoreSpec)> {
        let config = LockdConfig::load_or_default(self.config.as_deref())?;
        let store = config.store(self.store)?;
        Ok((config, store))
    }
}

/// The redb store file that `store` names (`--store`, else lockd.toml's
/// `store`, else the default), for the offline `command`; exit 2 for a
/// store that is not redb, or a lockd.toml that cannot be read.
pub fn redb_path(store: StoreArgs, command: &str) -> Result<PathBuf, Failure> {
    let (_, spec) = store.resolve().map_err(|e| fail(2, format!("{e:#}")))?;
    match spec {
        StoreSpec::Redb(path) => Ok(path),
        StoreSpec::Memory => Err(fail(
            2,
            format!("{command} needs --store redb:PATH: a memory store keeps nothing"),
        )),
        StoreSpec::Etcd(_) => Err(fail(
            2,
            format!(
                "{command} needs --store redb:PATH: an etcd store is backed up, restored and \
                 checked with etcd's own tools (etcdctl snapshot save, etcdutl)"
            ),
        )),
    }
}

/// Options `serve` and `up` share.
#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Require `Authorization: Bearer <token>` on every route but /healthz.
    #[arg(long, env = "LOCKD_AUTH_TOKEN", hide_env_values = true)]
    pub auth_token: Option<String>,
    /// How long an idle event stream (/v1/events) waits before sending a
    /// heartbeat comment, which keeps proxies from closing it.
    #[arg(long, default_value = "15s", value_parser = parse_duration_ms, value_name = "DURATION")]
    pub events_heartbeat: u64,
    /// Also serve Dapr's gRPC lock API (dapr.proto.runtime.v1.Dapr
    /// TryLockAlpha1/UnlockAlpha1, for Dapr's SDKs) on this address.
    #[arg(long, value_name = "ADDR")]
    pub dapr_grpc_listen: Option<std::net::SocketAddr>,
    /// Serve Dapr's lock API only for the lock stores that the Dapr
    /// component files in this folder declare (`spec.type: lock.*`); any
    /// other store name is refused as daprd refuses it [default: `[dapr]
    /// components` in lockd.toml; with neither, every Dapr lock call is
    /// refused, as daprd refuses it without lock components].
    #[arg(long, value_name = "DIR")]
    pub dapr_components: Option<PathBuf>,
    /// Take any Dapr store name as the lockd namespace of that name, without
    /// component files (a mistyped store name then locks in another
    /// namespace) [default: `[dapr] any_store` in lockd.toml].
    #[arg(long)]
    pub dapr_any_store: bool,
    /// Serve HTTPS only, with this certificate chain (PEM, the server's own
    /// certificate first) [default: `[tls] cert` in lockd.toml]. SIGHUP
    /// reads it again.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert [default: `[tls] key`].
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Require a client certificate signed by a CA in this PEM file (mutual
    /// TLS) [default: `[tls] client_ca`].
    #[arg(long, value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,
    /// The bound on a shutdown (SIGTERM, Ctrl-C): queued waiters are
    /// answered `unavailable`, requests in flight finish and the store
    /// syncs within it, or lockd exits 1 anyway [default: `[server]
    /// shutdown_timeout_ms` in lockd.toml, else 10s].
    #[arg(long, value_parser = parse_duration_ms, value_name = "DURATION")]
    pub shutdown_timeout: Option<u64>,
}

impl ServeArgs {
    /// The `--tls-*` flags, as the `[tls]` entries they replace.
    pub fn tls_flags(&self) -> TlsConfig {
        TlsConfig {
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
            client_ca: self.tls_client_ca.clone(),
        }
    }
}
