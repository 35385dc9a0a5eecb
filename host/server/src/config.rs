//! `lockd.toml`: lockd's own runtime configuration. It never lives in
//! spin.toml, so the manifest stays valid for Spin.
//!
//! ```toml
//! store = "redb:.lockd/locks.redb"      # or "memory", or "etcd:http://HOST:PORT[,...]"
//!
//! [etcd]                                 # all optional; other stores ignore it
//! prefix = "/lockd"                      # every key lockd writes; hosts sharing locks agree
//! dial_timeout_ms = 5000                 # connecting to an endpoint
//! request_timeout_ms = 5000              # one etcd request; then `unavailable`
//! lease_slack_ms = 5000                  # added to a TTL to size its etcd lease
//! session_ttl_ms = 10000                 # waiters and ephemeral locks outlive a dead host this long
//! ca_file = "/etc/lockd/etcd-ca.pem"     # https:// endpoints: the CA of the members' certificates
//! cert_file = "/etc/lockd/etcd.pem"      # client certificate, for --client-cert-auth members
//! key_file = "/etc/lockd/etcd.key"       #   and its key (both or neither)
//! user = "lockd"                         # etcd user, for a cluster with auth enabled
//! password_file = "/etc/lockd/etcd.pw"   # its password (one line); or LOCKD_ETCD_PASSWORD
//! compaction_interval_ms = 60000         # compact etcd's history this often; 0: never (etcd's own, or an operator's)
//! compaction_retention_ms = 300000       # keep this much history (longer than any host's watch lags)
//! compaction_min_revisions = 10000       # and at least this many revisions
//! quota_backend_bytes = 2147483648       # the members' --quota-backend-bytes (reported; etcd 3.6+ says its own)
//! ```
//!
//! A password never goes in lockd.toml: a `password` key in `[etcd]` is
//! refused. The user needs readwrite on every key under the prefix (see
//! docs/operating.md#etcd, "etcd with TLS and users"). Paths are relative to the
//! working directory.
//!
//! ```toml
//! [limits]                               # all optional; defaults shown
//! max_ttl_ms = 86400000
//! max_wait_ms = 3600000
//! instance_memory_bytes = 67108864       # per component instance
//! request_timeout_ms = 30000             # epoch deadline per request
//! response_body_bytes = 16777216         # largest WASIp3 response body
//! instance_concurrent_requests = 16      # WASIp3: requests one instance serves at once
//! instance_requests = 128                # WASIp3: requests one instance serves in all
//!
//! [namespaces]
//! default_quota = 10000                  # most locks any namespace may hold
//! default_lock_delay_ms = 0              # hold an expired or force-released grant's place back
//!
//! [namespaces.quotas]                    # per namespace
//! jobs = 1000
//!
//! [namespaces.lock_delay_ms]             # per namespace (docs/contract.md#c23-lock-delay)
//! payments = 15000
//!
//! [dapr]                                 # Dapr's lock API (docs/migrating.md#compatibility-routes)
//! durability = "persistent"              # or "ephemeral": locks taken through it
//! components = "/etc/lockd/dapr"         # Dapr component files: only the lock.* stores they declare
//!
//! [dapr.stores]                          # optional: a declared store's namespace (default: its name)
//! orders = "jobs"
//!
//! [components.edge-jobs]                 # per spin.toml component id
//! namespace = "jobs"                     # default: the component id
//!
//! [server]                               # `serve` and `up`
//! shutdown_timeout_ms = 10000            # SIGTERM/SIGINT: drain within this, then exit anyway (exit 1)
//!
//! [tls]                                  # `serve` and `up`: HTTPS only, HTTP/1.1 and HTTP/2
//! cert = "/etc/lockd/server.pem"         # PEM chain, the server's own certificate first
//! key = "/etc/lockd/server.key"          # its PEM private key (PKCS#8, PKCS#1 or SEC1)
//! client_ca = "/etc/lockd/clients.pem"   # optional: mutual TLS, clients need a certificate it signed
//!
//! [[auth.tokens]]                        # one per token; none: no authentication
//! name = "ci"                            # logs and refusals name the token by it; unique
//! sha256 = "<64 hex digits>"             # SHA-256 of the token; the token is never in this file
//! namespaces = ["ci", "deploy-*"]        # exact names, prefixes ending in *, or "*" for all
//! role = "locker"                        # reader | locker | admin
//! ```
//!
//! Relative paths (`store`'s redb file, the `[tls]` files) are relative to
//! the working directory. `--tls-cert`, `--tls-key` and `--tls-client-ca`
//! replace the `[tls]` entry they name; SIGHUP reads the files again, and
//! the `[[auth.tokens]]` ([`reload_tokens`]).
//!
//! `lockd token new` prints a token and its `[[auth.tokens]]` block. The
//! server's `--auth-token` (`LOCKD_AUTH_TOKEN`) is one more token, named
//! `auth-token`: admin over `"*"`. What each role may do:
//! docs/operating.md#authentication.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use std::time::Duration;

use anyhow::Context as _;
use lockd_core::{Limits, LockDelays, LockService, Quotas};
use lockd_etcd::{ClientCert, Compaction, EtcdUser};
use serde::Deserialize;

use crate::auth::LiveCredentials;
use crate::store::{StoreSpec, DEFAULT_STORE};

mod dapr;
mod spin;
mod tokens;
pub use dapr::DaprConfig;
pub use spin::{
    KeyValueStoreConfig, KeyValueStoreType, DEFAULT_KV_MAX_KEY_BYTES, DEFAULT_KV_MAX_STORE_BYTES,
    DEFAULT_KV_MAX_VALUE_BYTES,
};
pub use tokens::{AuthConfig, NewToken, TokenConfig};

/// The whole file. Unknown keys are errors, so a typo is not silently ignored.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockdConfig {
    /// The file this was read from, for messages; `None` for the defaults.
    #[serde(skip)]
    pub path: Option<PathBuf>,
    /// Store spec, as `--store` takes it; the flag wins when both are given.
    pub store: Option<String>,
    /// Settings of an etcd store, whether its endpoints came from `store` or
    /// from `--store`.
    #[serde(default)]
    pub etcd: EtcdConfig,
    /// Limits on callers and on component instances.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// Quotas and lock-delays per namespace.
    #[serde(default)]
    pub namespaces: NamespacesConfig,
    /// Settings per spin.toml component id.
    #[serde(default)]
    pub components: HashMap<String, ComponentConfig>,
    /// The REST API's tokens, with their namespaces and roles.
    #[serde(default)]
    pub auth: AuthConfig,
    /// Dapr's lock API.
    #[serde(default)]
    pub dapr: DaprConfig,
    /// The listener's TLS files (`lockd serve`, `lockd up`).
    #[serde(default)]
    pub tls: TlsConfig,
    /// How the server runs and stops (`lockd serve`, `lockd up`).
    #[serde(default)]
    pub server: ServerConfig,
    /// `[key_value_store.<label>]`: where the key-value stores of a Spin
    /// app's components live, and their limits (`lockd up`).
    #[serde(default)]
    pub key_value_store: std::collections::BTreeMap<String, KeyValueStoreConfig>,
    /// `[variables]`: values of a Spin app's variables, by name (`lockd
    /// up`; the environment's `SPIN_VARIABLE_<NAME>` wins over them).
    #[serde(default)]
    pub variables: std::collections::BTreeMap<String, String>,
}

/// `[server]`: how `lockd serve` and `lockd up` run and stop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// The bound on a shutdown (SIGTERM, SIGINT): queued waiters are
    /// answered, requests in flight finish and the store syncs within it,
    /// or the server exits anyway (exit 1). `--shutdown-timeout` replaces
    /// it. Default [`DEFAULT_SHUTDOWN_TIMEOUT`].
    pub shutdown_timeout_ms: Option<u64>,
}

/// The default bound on a shutdown.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// The shortest shutdown bound: answering queued waiters and closing
/// connections takes a moment.
pub const MIN_SHUTDOWN_TIMEOUT_MS: u64 = 100;

impl ServerConfig {
    /// The bound on a shutdown; refused, naming the key, below
    /// [`MIN_SHUTDOWN_TIMEOUT_MS`].
    pub fn shutdown_timeout(&self) -> anyhow::Result<Duration> {
        match self.shutdown_timeout_ms {
            None => Ok(DEFAULT_SHUTDOWN_TIMEOUT),
            Some(ms) if ms < MIN_SHUTDOWN_TIMEOUT_MS => anyhow::bail!(
                "[server] shutdown_timeout_ms is {ms}; it must be at least \
                 {MIN_SHUTDOWN_TIMEOUT_MS} (queued waiters are answered within it)"
            ),
            Some(ms) => Ok(Duration::from_millis(ms)),
        }
    }
}

/// `[tls]`: the files of the server's TLS listener. With `cert` and `key`,
/// every route is served over TLS only; with `client_ca` too, every client
/// must present a certificate that CA signed. Read at start and again on
/// SIGHUP ([`crate::tls`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The server's certificate chain (PEM), its own certificate first.
    pub cert: Option<PathBuf>,
    /// The private key of `cert` (PEM).
    pub key: Option<PathBuf>,
    /// The CA certificates (PEM) client certificates must chain to.
    pub client_ca: Option<PathBuf>,
}

impl TlsConfig {
    /// These settings with each entry `flags` gives replacing this file's.
    pub fn overridden_by(self, flags: TlsConfig) -> TlsConfig {
        TlsConfig {
            cert: flags.cert.or(self.cert),
            key: flags.key.or(self.key),
            client_ca: flags.client_ca.or(self.client_ca),
        }
    }
}

/// `[etcd]`: how an etcd store uses the cluster. Unset fields keep the
/// defaults of [`lockd_etcd::EtcdOptions::new`].
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdConfig {
    /// Every key lockd writes starts with this; all hosts that share locks
    /// must use the same prefix.
    pub prefix: Option<String>,
    /// How long to wait for a connection to an endpoint.
    pub dial_timeout_ms: Option<u64>,
    /// How long one etcd request may take before the call answers
    /// `unavailable`.
    pub request_timeout_ms: Option<u64>,
    /// Added to a grant's TTL to size its etcd lease; must exceed the clock
    /// skew between hosts and etcd.
    pub lease_slack_ms: Option<u64>,
    /// TTL of each host's session lease (whole seconds, at least 2 s): how
    /// long a dead host's waiters and ephemeral locks stay in etcd.
    pub session_ttl_ms: Option<u64>,
    /// The CA certificate(s), PEM, that signed the members' certificates;
    /// required with `https://` endpoints.
    pub ca_file: Option<PathBuf>,
    /// lockd's client certificate (PEM), for members that require one.
    pub cert_file: Option<PathBuf>,
    /// The private key (PEM) of `cert_file`.
    pub key_file: Option<PathBuf>,
    /// The etcd user lockd authenticates as.
    pub user: Option<String>,
    /// A file holding the user's password (its first line); else the
    /// environment variable [`ETCD_PASSWORD_ENV`].
    pub password_file: Option<PathBuf>,
    /// Present only to be refused with a message that says where the
    /// password goes instead; never read, never shown.
    #[serde(default)]
    password: Option<serde::de::IgnoredAny>,
    /// How often this host compacts etcd's history (at least 100); 0 turns
    /// its compaction off ([`lockd_etcd::Compaction`]).
    pub compaction_interval_ms: Option<u64>,
    /// How much of etcd's history a compaction keeps (at least 1).
    pub compaction_retention_ms: Option<u64>,
    /// The latest revisions a compaction always keeps.
    pub compaction_min_revisions: Option<u64>,
    /// The members' `--quota-backend-bytes`, reported in `/metrics` (at
    /// least 1).
    pub quota_backend_bytes: Option<u64>,
}

/// The environment variable holding the etcd user's password, when
/// `[etcd] password_file` is not set.
pub const ETCD_PASSWORD_ENV: &str = "LOCKD_ETCD_PASSWORD";

/// The shortest session lease etcd-backed lockd accepts: a keep-alive must
/// fit comfortably inside it.
const MIN_SESSION_TTL_MS: u64 = 2_000;

/// The shortest interval between compactions of etcd's history (0 aside).
const MIN_COMPACTION_INTERVAL_MS: u64 = 100;

impl EtcdConfig {
    /// `store` with these settings applied if it is an etcd store. Other
    /// stores ignore them, so one lockd.toml also serves a `--store memory`
    /// run on a laptop; a password written into the table is refused
    /// whatever the store. The password comes from `password_file`, else
    /// from [`ETCD_PASSWORD_ENV`].
    pub fn apply(&self, store: StoreSpec) -> anyhow::Result<StoreSpec> {
        self.apply_with(store, std::env::var(ETCD_PASSWORD_ENV).ok())
    }

    /// [`EtcdConfig::apply`] with `env_password` as the value of
    /// [`ETCD_PASSWORD_ENV`].
    fn apply_with(
        &self,
        store: StoreSpec,
        env_password: Option<String>,
    ) -> anyhow::Result<StoreSpec> {
        if self.password.is_some() {
            anyhow::bail!(
                "[etcd] password is not allowed: lockd.toml never holds a password. \
                 Put it in a file readable only by lockd and name it in [etcd] password_file, \
                 or set {ETCD_PASSWORD_ENV}"
            );
        }
        let StoreSpec::Etcd(mut options) = store else {
            return Ok(store);
        };
        if let Some(prefix) = &self.prefix {
            // Layout ignores a trailing `/`; an empty or relative prefix
            // would put lockd's keys beside anything else in the cluster.
            if !prefix.starts_with('/') || prefix.trim_end_matches('/').is_empty() {
                anyhow::bail!("[etcd] prefix {prefix:?} must start with / and not be just /");
            }
            options.prefix = prefix.clone();
        }
        let positive = |field: &str, value: Option<u64>| -> anyhow::Result<Option<Duration>> {
            match value {
                Some(0) => anyhow::bail!("[etcd] {field} must be at least 1"),
                other => Ok(other.map(Duration::from_millis)),
            }
        };
        if let Some(d) = positive("dial_timeout_ms", self.dial_timeout_ms)? {
            options.dial_timeout = d;
        }
        if let Some(d) = positive("request_timeout_ms", self.request_timeout_ms)? {
            options.request_timeout = d;
        }
        if let Some(ms) = self.lease_slack_ms {
            options.lease_slack = Duration::from_millis(ms);
        }
        if let Some(ms) = self.session_ttl_ms {
            if ms < MIN_SESSION_TTL_MS {
                anyhow::bail!("[etcd] session_ttl_ms must be at least {MIN_SESSION_TTL_MS}");
            }
            options.session_ttl = Duration::from_millis(ms);
        }
        options.ca_file = self.ca_file.clone();
        options.client_cert = match (&self.cert_file, &self.key_file) {
            (Some(cert_file), Some(key_file)) => Some(ClientCert {
                cert_file: cert_file.clone(),
                key_file: key_file.clone(),
            }),
            (None, None) => None,
            (Some(_), None) => {
                anyhow::bail!("[etcd] cert_file is set but key_file is not: give both")
            }
            (None, Some(_)) => {
                anyhow::bail!("[etcd] key_file is set but cert_file is not: give both")
            }
        };
        options.user = self.user(env_password)?;
        options.compaction = self.compaction()?;
        if let Some(bytes) = self.quota_backend_bytes {
            if bytes == 0 {
                anyhow::bail!("[etcd] quota_backend_bytes must be at least 1 (etcd's default is 2 GiB, 2147483648)");
            }
            options.quota_backend_bytes = bytes;
        }
        options.check()?;
        Ok(StoreSpec::Etcd(options))
    }

    /// The compaction the `compaction_*` keys describe, from
    /// [`Compaction::default`]; `None` when `compaction_interval_ms` is 0,
    /// and then the other keys are refused (they would do nothing).
    fn compaction(&self) -> anyhow::Result<Option<Compaction>> {
        let mut compaction = Compaction::default();
        match self.compaction_interval_ms {
            Some(0) => {
                let set = [
                    (
                        "compaction_retention_ms",
                        self.compaction_retention_ms.is_some(),
                    ),
                    (
                        "compaction_min_revisions",
                        self.compaction_min_revisions.is_some(),
                    ),
                ];
                if let Some((key, _)) = set.iter().find(|(_, set)| *set) {
                    anyhow::bail!(
                        "[etcd] {key} is set but compaction_interval_ms = 0 turns compaction \
                         off: remove one of them"
                    );
                }
                return Ok(None);
            }
            Some(ms) if ms < MIN_COMPACTION_INTERVAL_MS => anyhow::bail!(
                "[etcd] compaction_interval_ms is {ms}; it must be at least \
                 {MIN_COMPACTION_INTERVAL_MS}, or 0 to turn compaction off"
            ),
            Some(ms) => compaction.interval = Duration::from_millis(ms),
            None => {}
        }
        match self.compaction_retention_ms {
            Some(0) => anyhow::bail!(
                "[etcd] compaction_retention_ms must be at least 1: it is how much history \
                 every host's watches may still read (default 300000, 5 min)"
            ),
            Some(ms) => compaction.retention = Duration::from_millis(ms),
            None => {}
        }
        if let Some(revisions) = self.compaction_min_revisions {
            compaction.min_revisions = revisions;
        }
        Ok(Some(compaction))
    }

    /// The etcd user and its password, from `password_file` or
    /// `env_password`.
    fn user(&self, env_password: Option<String>) -> anyhow::Result<Option<EtcdUser>> {
        let Some(name) = &self.user else {
            if let Some(file) = &self.password_file {
                anyhow::bail!(
                    "[etcd] password_file {} is set but [etcd] user is not",
                    file.display()
                );
            }
            return Ok(None);
        };
        let password = match (&self.password_file, env_password) {
            (Some(file), Some(_)) => anyhow::bail!(
                "[etcd] password_file {} and {ETCD_PASSWORD_ENV} are both set: keep one",
                file.display()
            ),
            (Some(file), None) => {
                let text = std::fs::read_to_string(file)
                    .with_context(|| format!("reading [etcd] password_file {}", file.display()))?;
                text.lines().next().unwrap_or("").to_string()
            }
            (None, Some(password)) => password,
            (None, None) => anyhow::bail!(
                "[etcd] user {name} needs a password: name a file holding it in \
                 [etcd] password_file, or set {ETCD_PASSWORD_ENV}"
            ),
        };
        if password.is_empty() {
            anyhow::bail!("the password of [etcd] user {name} is empty");
        }
        Ok(Some(EtcdUser {
            name: name.clone(),
            password,
        }))
    }
}

/// `[limits]`
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// Longest lease.
    pub max_ttl_ms: Option<u64>,
    /// Longest wait in a queue.
    pub max_wait_ms: Option<u64>,
    /// Linear memory one component instance may grow to.
    pub instance_memory_bytes: Option<usize>,
    /// How long one request may run inside a component.
    pub request_timeout_ms: Option<u64>,
    /// Largest response body a WASIp3 component may return (it is collected
    /// before it is sent); past it the request answers 500.
    pub response_body_bytes: Option<usize>,
    /// Most requests one WASIp3 component instance serves at once (1: one
    /// at a time). WASIp2 instances serve one request each.
    pub instance_concurrent_requests: Option<usize>,
    /// Most requests one WASIp3 component instance serves before it is
    /// dropped (1: a fresh instance per request).
    pub instance_requests: Option<usize>,
}

/// `[namespaces]`
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespacesConfig {
    /// Quota of every namespace not listed in `quotas`.
    pub default_quota: Option<u64>,
    /// Quotas by namespace.
    #[serde(default)]
    pub quotas: HashMap<String, u64>,
    /// Lock-delay of every namespace not listed in `lock_delay_ms`; none
    /// (0) if unset.
    pub default_lock_delay_ms: Option<u64>,
    /// Lock-delays by namespace.
    #[serde(default)]
    pub lock_delay_ms: HashMap<String, u64>,
}

/// `[components.<id>]`
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComponentConfig {
    /// The namespace of this component's locks. Two components given the same
    /// namespace share their locks.
    pub namespace: Option<String>,
}

/// Default linear memory per component instance.
pub const DEFAULT_INSTANCE_MEMORY_BYTES: usize = 64 << 20;
/// Default time one request may run inside a component.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 30_000;
/// Default largest response body of a WASIp3 component.
pub const DEFAULT_RESPONSE_BODY_BYTES: usize = 16 << 20;
/// Default most requests one WASIp3 instance serves at once (as
/// `wasmtime serve`).
pub const DEFAULT_INSTANCE_CONCURRENT_REQUESTS: usize = 16;
/// Default most requests one WASIp3 instance serves in all (as
/// `wasmtime serve`).
pub const DEFAULT_INSTANCE_REQUESTS: usize = 128;

impl LockdConfig {
    /// Reads `path`.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let config: Self =
            toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        // A bad token entry stops every command that reads the file, not
        // only the server.
        config
            .auth
            .validate()
            .with_context(|| format!("in {}", path.display()))?;
        Ok(LockdConfig {
            path: Some(path.to_path_buf()),
            ..config
        })
    }

    /// The store to use: `flag` (`--store` or `LOCKD_STORE`) when given,
    /// else `store` in this file, else [`DEFAULT_STORE`].
    pub fn store(&self, flag: Option<StoreSpec>) -> anyhow::Result<StoreSpec> {
        if let Some(store) = flag {
            return Ok(store);
        }
        match &self.store {
            Some(spec) => spec.parse().map_err(anyhow::Error::msg).with_context(|| {
                let file = self.path.as_deref().unwrap_or(Path::new("lockd.toml"));
                format!("`store` in {}", file.display())
            }),
            None => DEFAULT_STORE.parse().map_err(anyhow::Error::msg),
        }
    }

    /// Opens `store` behind the lock service this file describes: `[etcd]`
    /// applied, its limits, quotas and lock-delays in force. Every subcommand
    /// that holds
    /// locks (`run`, `serve`, `up`) opens its service here, so none of
    /// them ignores a setting.
    pub async fn open_service(&self, store: &StoreSpec) -> anyhow::Result<LockService> {
        Ok(self.open_service_and_store(store).await?.0)
    }

    /// [`open_service`](Self::open_service), with the handle of a redb
    /// store, through which a server takes snapshots (`None` for the other
    /// stores).
    pub async fn open_service_and_store(
        &self,
        store: &StoreSpec,
    ) -> anyhow::Result<(LockService, Option<lockd_redb::Store>)> {
        let store = self.etcd.apply(store.clone())?;
        let (backend, handle) = store.open_with_handle().await?;
        let service = LockService::new(backend, self.lock_limits())
            .with_quotas(self.quotas())
            .with_lock_delays(self.lock_delays());
        Ok((service, handle))
    }

    /// Reads `path` if given; otherwise `./lockd.toml` if it exists; otherwise
    /// the defaults.
    pub fn load_or_default(path: Option<&Path>) -> anyhow::Result<Self> {
        match Self::file_in_use(path) {
            Some(p) => Self::load(&p),
            None => Ok(Self::default()),
        }
    }

    /// The file [`load_or_default`](Self::load_or_default) reads, if any.
    pub fn file_in_use(path: Option<&Path>) -> Option<PathBuf> {
        match path {
            Some(p) => Some(p.to_path_buf()),
            None if Path::new("lockd.toml").exists() => Some(PathBuf::from("lockd.toml")),
            None => None,
        }
    }

    /// Caller limits.
    pub fn lock_limits(&self) -> Limits {
        let mut limits = Limits::default();
        if let Some(v) = self.limits.max_ttl_ms {
            limits.max_ttl_ms = v;
        }
        if let Some(v) = self.limits.max_wait_ms {
            limits.max_wait_ms = v;
        }
        limits
    }

    /// Namespace quotas.
    pub fn quotas(&self) -> Quotas {
        Quotas {
            default: self.namespaces.default_quota,
            per_namespace: self.namespaces.quotas.clone(),
        }
    }

    /// Namespace lock-delays (docs/contract.md#c23-lock-delay).
    pub fn lock_delays(&self) -> LockDelays {
        LockDelays {
            default_ms: self.namespaces.default_lock_delay_ms.unwrap_or(0),
            per_namespace: self.namespaces.lock_delay_ms.clone(),
        }
    }

    /// The namespace of component `id`.
    pub fn namespace_of(&self, id: &str) -> String {
        self.components
            .get(id)
            .and_then(|c| c.namespace.clone())
            .unwrap_or_else(|| id.to_string())
    }
}

/// Reads the `[[auth.tokens]]` of the lockd.toml at `path` again and puts
/// them, with the server's `--auth-token` (`flag_token`), in force in
/// `live`; returns the names now in force. On any error (the file does not
/// parse, an entry is wrong, or no token is left: see
/// [`LiveCredentials::replace`]) nothing changes. Only the tokens are read
/// again: other settings take effect at the next start.
pub fn reload_tokens(
    path: &Path,
    flag_token: Option<&str>,
    live: &LiveCredentials,
) -> anyhow::Result<Vec<String>> {
    let config = LockdConfig::load(path)?;
    let next = config
        .auth
        .credentials(flag_token)
        .map_err(|e| anyhow::anyhow!("{}: {e:#}", path.display()))?;
    let names = next.tokens().iter().map(|c| c.name().to_string()).collect();
    live.replace(next)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_section_and_rejects_typos() {
        let config: LockdConfig = toml::from_str(
            r#"
            store = "memory"
            [limits]
            max_ttl_ms = 1000
            instance_memory_bytes = 1048576
            instance_concurrent_requests = 4
            instance_requests = 1
            [namespaces]
            default_quota = 5
            [namespaces.quotas]
            jobs = 2
            [components.a]
            namespace = "shared"
            [components.b]
            namespace = "shared"
            "#,
        )
        .unwrap();
        assert_eq!(config.lock_limits().max_ttl_ms, 1000);
        assert_eq!(config.limits.instance_concurrent_requests, Some(4));
        assert_eq!(config.limits.instance_requests, Some(1));
        assert_eq!(config.dapr.durability(), lockd_core::Durability::Persistent);
        assert_eq!(config.quotas().of("jobs"), Some(2));
        assert_eq!(config.quotas().of("other"), Some(5));
        assert_eq!(config.namespace_of("a"), "shared");
        assert_eq!(config.namespace_of("b"), "shared");
        assert_eq!(config.namespace_of("c"), "c");
        assert!(toml::from_str::<LockdConfig>("[limits]\nmax_ttl = 5").is_err());
    }

    #[test]
    fn lock_delays_are_read_like_quotas() {
        let config: LockdConfig = toml::from_str(
            r#"
            [namespaces]
            default_lock_delay_ms = 300
            [namespaces.lock_delay_ms]
            payments = 15000
            fast = 0
            "#,
        )
        .unwrap();
        let delays = config.lock_delays();
        assert_eq!(
            (delays.of("payments"), delays.of("fast"), delays.of("other")),
            (15_000, 0, 300)
        );
        assert_eq!(LockdConfig::default().lock_delays().of("any"), 0);
        for (bad, needle) in [
            ("[namespaces]\ndefault_lock_delay = 5", "unknown field"),
            ("[namespaces]\ndefault_lock_delay_ms = -1", "invalid value"),
            (
                "[namespaces]\ndefault_lock_delay_ms = \"1s\"",
                "invalid type",
            ),
            ("[namespaces.lock_delay_ms]\njobs = 1.5", "invalid type"),
            ("[namespaces.lock_delay_ms]\njobs = \"5\"", "invalid type"),
        ] {
            let err = toml::from_str::<LockdConfig>(bad).unwrap_err().to_string();
            assert!(err.contains(needle), "{bad}: {err}");
        }
    }

    #[test]
    fn tls_table_is_read_and_flags_replace_its_entries() {
        let config: LockdConfig = toml::from_str(
            r#"
            [tls]
            cert = "server.pem"
            key = "server.key"
            client_ca = "clients.pem"
            "#,
        )
        .unwrap();
        assert_eq!(config.tls.cert.as_deref(), Some(Path::new("server.pem")));
        let flags = TlsConfig {
            key: Some(PathBuf::from("other.key")),
            ..TlsConfig::default()
        };
        let merged = config.tls.clone().overridden_by(flags);
        assert_eq!(
            merged,
            TlsConfig {
                cert: Some(PathBuf::from("server.pem")),
                key: Some(PathBuf::from("other.key")),
                client_ca: Some(PathBuf::from("clients.pem")),
            }
        );
        let typo = toml::from_str::<LockdConfig>("[tls]\ncertificate = \"a\"").unwrap_err();
        assert!(typo.to_string().contains("certificate"), "{typo}");
    }

    fn etcd_spec() -> StoreSpec {
        "etcd:http://127.0.0.1:2379".parse().unwrap()
    }

    #[test]
    fn etcd_table_sets_the_etcd_options() {
        let config: LockdConfig = toml::from_str(
            r#"
            store = "etcd:http://10.0.0.1:2379,http://10.0.0.2:2379"
            [etcd]
            prefix = "/apps/locks"
            dial_timeout_ms = 1500
            request_timeout_ms = 2500
            lease_slack_ms = 0
            session_ttl_ms = 4000
            "#,
        )
        .unwrap();
        let spec: StoreSpec = config.store.as_deref().unwrap().parse().unwrap();
        let StoreSpec::Etcd(options) = config.etcd.apply(spec).unwrap() else {
            panic!("not an etcd store");
        };
        assert_eq!(
            options.endpoints,
            ["http://10.0.0.1:2379", "http://10.0.0.2:2379"]
        );
        assert_eq!(options.prefix, "/apps/locks");
        assert_eq!(options.dial_timeout, Duration::from_millis(1500));
        assert_eq!(options.request_timeout, Duration::from_millis(2500));
        assert_eq!(options.lease_slack, Duration::ZERO);
        assert_eq!(options.session_ttl, Duration::from_secs(4));

        // Without the table, the spec's defaults stand.
        assert_eq!(
            EtcdConfig::default().apply(etcd_spec()).unwrap(),
            etcd_spec()
        );
        assert_eq!(
            EtcdConfig::default().apply(StoreSpec::Memory).unwrap(),
            StoreSpec::Memory
        );
    }

    #[test]
    fn etcd_table_refuses_typos_and_bad_values() {
        let typo = toml::from_str::<LockdConfig>("[etcd]\nlease_slack = 5").unwrap_err();
        assert!(typo.to_string().contains("lease_slack"), "{typo}");
        let table = |text: &str| toml::from_str::<LockdConfig>(text).unwrap().etcd;
        let refusal =
            |text: &str, store: StoreSpec| table(text).apply(store).unwrap_err().to_string();
        assert!(refusal("[etcd]\nprefix = \"lockd\"", etcd_spec()).contains("start with /"));
        assert!(refusal("[etcd]\nprefix = \"/\"", etcd_spec()).contains("start with /"));
        assert!(refusal("[etcd]\ndial_timeout_ms = 0", etcd_spec()).contains("dial_timeout_ms"));
        assert!(
            refusal("[etcd]\nrequest_timeout_ms = 0", etcd_spec()).contains("request_timeout_ms")
        );
        assert!(refusal("[etcd]\nsession_ttl_ms = 1999", etcd_spec()).contains("at least 2000"));
        assert!(refusal("[etcd]\ncert_file = \"c.pem\"", etcd_spec()).contains("key_file"));
        // TLS files with an http:// endpoint would go unused.
        assert!(refusal("[etcd]\nca_file = \"ca.pem\"", etcd_spec()).contains("plain http"));
        // Other stores ignore the table, bad values included.
        assert_eq!(
            table("[etcd]\nprefix = \"x\"")
                .apply(StoreSpec::Memory)
                .unwrap(),
            StoreSpec::Memory
        );
    }

    #[test]
    fn etcd_compaction_and_quota_keys_set_the_etcd_options() {
        let options = |text: &str| {
            let table = toml::from_str::<LockdConfig>(text).unwrap().etcd;
            etcd_options(table.apply(etcd_spec()).unwrap())
        };
        // Unset: the defaults, compaction on.
        let defaults = options("");
        assert_eq!(defaults.compaction, Some(Compaction::default()));
        assert_eq!(defaults.quota_backend_bytes, 2 << 30);
        let set = options(
            "[etcd]\ncompaction_interval_ms = 15000\ncompaction_retention_ms = 120000\n\
             compaction_min_revisions = 500\nquota_backend_bytes = 8589934592",
        );
        assert_eq!(
            set.compaction,
            Some(Compaction {
                interval: Duration::from_secs(15),
                retention: Duration::from_secs(120),
                min_revisions: 500,
            })
        );
        assert_eq!(set.quota_backend_bytes, 8 << 30);
        // One key: the others keep their defaults.
        let one = options("[etcd]\ncompaction_min_revisions = 0");
        assert_eq!(
            one.compaction,
            Some(Compaction {
                min_revisions: 0,
                ..Compaction::default()
            })
        );
        // 0 turns lockd's compaction off.
        assert_eq!(
            options("[etcd]\ncompaction_interval_ms = 0").compaction,
            None
        );
    }

    #[test]
    fn bad_etcd_compaction_and_quota_values_are_refused_naming_the_key() {
        let refusal = |text: &str| {
            let table = toml::from_str::<LockdConfig>(text).unwrap().etcd;
            table.apply(etcd_spec()).unwrap_err().to_string()
        };
        for (text, needles) in [
            (
                "[etcd]\ncompaction_interval_ms = 99",
                &["compaction_interval_ms is 99", "at least 100", "0 to turn"][..],
            ),
            (
                "[etcd]\ncompaction_retention_ms = 0",
                &["compaction_retention_ms must be at least 1"],
            ),
            (
                "[etcd]\nquota_backend_bytes = 0",
                &["quota_backend_bytes must be at least 1"],
            ),
            (
                "[etcd]\ncompaction_interval_ms = 0\ncompaction_retention_ms = 1000",
                &[
                    "compaction_retention_ms is set",
                    "compaction_interval_ms = 0",
                ],
            ),
            (
                "[etcd]\ncompaction_interval_ms = 0\ncompaction_min_revisions = 5",
                &["compaction_min_revisions is set"],
            ),
        ] {
            let m = refusal(text);
            for needle in needles {
                assert!(m.contains(needle), "{text}: {m}");
            }
        }
        // Wrong types and typos are the parser's refusals, naming the key.
        for (text, needle) in [
            (
                "[etcd]\ncompaction_interval_ms = -1",
                "compaction_interval_ms",
            ),
            (
                "[etcd]\nquota_backend_bytes = \"2GiB\"",
                "quota_backend_bytes",
            ),
            ("[etcd]\ncompaction_interval = 5", "compaction_interval"),
        ] {
            let m = toml::from_str::<LockdConfig>(text).unwrap_err().to_string();
            assert!(m.contains(needle), "{text}: {m}");
        }
        // Other stores ignore the table, as they ignore its other keys.
        let table = toml::from_str::<LockdConfig>("[etcd]\nquota_backend_bytes = 0")
            .unwrap()
            .etcd;
        assert_eq!(table.apply(StoreSpec::Memory).unwrap(), StoreSpec::Memory);
    }

    #[test]
    fn server_table_bounds_the_shutdown() {
        let bound = |text: &str| {
            toml::from_str::<LockdConfig>(text)
                .unwrap()
                .server
                .shutdown_timeout()
        };
        assert_eq!(bound("").unwrap(), Duration::from_secs(10));
        assert_eq!(
            bound("[server]\nshutdown_timeout_ms = 2500").unwrap(),
            Duration::from_millis(2500)
        );
        let short = bound("[server]\nshutdown_timeout_ms = 99")
            .unwrap_err()
            .to_string();
        assert!(
            short.contains("[server] shutdown_timeout_ms is 99") && short.contains("at least 100"),
            "{short}"
        );
        let typo = toml::from_str::<LockdConfig>("[server]\nshutdown_timeout = 5").unwrap_err();
        assert!(typo.to_string().contains("shutdown_timeout"), "{typo}");
    }

    fn https_spec() -> StoreSpec {
        "etcd:https://10.0.0.1:2379,https://10.0.0.2:2379"
            .parse()
            .unwrap()
    }

    fn etcd_options(spec: StoreSpec) -> lockd_etcd::EtcdOptions {
        match spec {
            StoreSpec::Etcd(options) => *options,
            other => panic!("not an etcd store: {other:?}"),
        }
    }

    #[test]
    fn etcd_tls_and_user_come_from_the_table_and_the_password_from_a_file_or_env() {
        let dir = tempfile::tempdir().unwrap();
        let pw = dir.path().join("etcd.pw");
        std::fs::write(&pw, "s3cret-from-file\n").unwrap();
        let text = format!(
            "[etcd]\nca_file = \"ca.pem\"\ncert_file = \"c.pem\"\nkey_file = \"c.key\"\n\
             user = \"lockd\"\npassword_file = {:?}\n",
            pw.display().to_string()
        );
        let table = toml::from_str::<LockdConfig>(&text).unwrap().etcd;
        let o = etcd_options(table.apply_with(https_spec(), None).unwrap());
        assert_eq!(o.ca_file.as_deref(), Some(Path::new("ca.pem")));
        let cc = o.client_cert.clone().unwrap();
        assert_eq!(
            (cc.cert_file.to_str(), cc.key_file.to_str()),
            (Some("c.pem"), Some("c.key"))
        );
        let user = o.user.clone().unwrap();
        assert_eq!(
            (user.name.as_str(), user.password.as_str()),
            ("lockd", "s3cret-from-file")
        );
        assert!(!format!("{o:?}").contains("s3cret"));
        // The file and the variable together are ambiguous.
        let both = table
            .apply_with(https_spec(), Some("env".into()))
            .unwrap_err()
            .to_string();
        assert!(
            both.contains(ETCD_PASSWORD_ENV) && both.contains("both"),
            "{both}"
        );

        let from_env =
            toml::from_str::<LockdConfig>("[etcd]\nca_file = \"ca.pem\"\nuser = \"lockd\"")
                .unwrap()
                .etcd;
        let o = etcd_options(
            from_env
                .apply_with(https_spec(), Some("s3cret-from-env".into()))
                .unwrap(),
        );
        assert_eq!(o.user.unwrap().password, "s3cret-from-env");
        let none = from_env
            .apply_with(https_spec(), None)
            .unwrap_err()
            .to_string();
        assert!(
            none.contains("password_file") && none.contains(ETCD_PASSWORD_ENV),
            "{none}"
        );
        // https needs the CA.
        let no_ca = EtcdConfig::default()
            .apply_with(https_spec(), None)
            .unwrap_err()
            .to_string();
        assert!(no_ca.contains("ca_file"), "{no_ca}");
    }

    #[test]
    fn a_password_in_the_file_is_refused_without_showing_it() {
        let config =
            toml::from_str::<LockdConfig>("[etcd]\nuser = \"lockd\"\npassword = \"hunter2\"")
                .unwrap();
        for store in [https_spec(), StoreSpec::Memory] {
            let m = config.etcd.apply_with(store, None).unwrap_err().to_string();
            assert!(
                m.contains("password_file") && m.contains(ETCD_PASSWORD_ENV),
                "{m}"
            );
            assert!(!m.contains("hunter2"), "{m}");
        }
        assert!(!format!("{config:?}").contains("hunter2"));
    }
}
