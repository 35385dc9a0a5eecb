//! How to reach etcd and how to use it, and the endpoint list of
//! `--store etcd:...`.

use std::path::PathBuf;
use std::time::Duration;

/// How to reach etcd and how to use it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdOptions {
    /// Client URLs of the cluster's members, such as `http://127.0.0.1:2379`
    /// or `https://etcd-1:2379`: all `http://` or all `https://`.
    pub endpoints: Vec<String>,
    /// The CA certificates (PEM) that signed the members' certificates:
    /// required with `https://` endpoints, refused with `http://` ones.
    pub ca_file: Option<PathBuf>,
    /// lockd's client certificate (PEM) and its private key (PEM), for
    /// members started with `--client-cert-auth`. Both or neither.
    pub client_cert: Option<ClientCert>,
    /// The etcd user lockd authenticates as, for a cluster with auth
    /// enabled. It needs readwrite on the prefix (see `docs/operating.md#etcd`).
    pub user: Option<EtcdUser>,
    /// Every key lockd writes starts with this (default `/lockd`). Hosts
    /// that share locks must use the same prefix.
    pub prefix: String,
    /// How long to wait for a connection to an endpoint.
    pub dial_timeout: Duration,
    /// How long any one etcd request may take before the operation answers
    /// `unavailable`.
    pub request_timeout: Duration,
    /// Added to a grant's TTL to size its etcd lease (rounded up to whole
    /// seconds). Must exceed the clock skew between lockd hosts and etcd.
    pub lease_slack: Duration,
    /// TTL of the session lease that carries this backend's waiter keys and
    /// ephemeral locks: how long they outlive a host that died (whole
    /// seconds, at least 2).
    pub session_ttl: Duration,
    /// The most locks one lease may hold (default 40). A refresh or revoke
    /// rewrites all of a lease's locks in one etcd transaction, and a
    /// revoke that hands every lock to a waiter under another lease takes
    /// three operations and three compares per lock: 40 locks stay within
    /// etcd's default `--max-txn-ops` of 128. Raise both together. A lock
    /// past it answers `denied`.
    pub max_locks_per_lease: usize,
    /// How this host keeps etcd's history of revisions bounded (see
    /// [`Compaction`]; on by default). `None`: it never compacts, and
    /// something else must (etcd's `--auto-compaction-*` flags, or an
    /// operator), or etcd's database grows with every write until it
    /// reaches its quota and refuses every write.
    pub compaction: Option<Compaction>,
    /// etcd's `--quota-backend-bytes`: the database size at which etcd
    /// raises its NOSPACE alarm and refuses every write (default 2 GiB,
    /// etcd's own default). Only reported, in
    /// [`crate::EtcdBackend::space`]: etcd before 3.6 does not say its
    /// quota, so set this to the members' flag; a member that says it
    /// (3.6+) is believed instead.
    pub quota_backend_bytes: u64,
}

/// How a host compacts etcd's history: etcd keeps every revision of every
/// key until it is compacted, so a host that never compacts fills etcd
/// (about 340 bytes per lock and unlock, measured on etcd 3.4).
///
/// Every [`Compaction::interval`] the host compacts to the revision etcd
/// was at [`Compaction::retention`] ago, keeping at least the latest
/// [`Compaction::min_revisions`] revisions and every revision its own
/// watches may still resume from. So etcd keeps between `retention` and
/// `retention + interval` of history, and its database levels off at
/// about `w × (retention + interval) × 200` bytes for a write rate `w` in
/// revisions per second (a lock and its unlock are two; the 200 bytes a
/// revision were measured on etcd 3.4 with short owners, so 6 minutes at a
/// lockd host's top rate of about 2,800 pairs a second come to about
/// 400 MB). That must fit the quota with room to spare.
///
/// Every host compacts on its own; compaction is idempotent, and a
/// compaction to a revision etcd already compacted past is refused
/// harmlessly, so hosts (and etcd's own `--auto-compaction-*`) coexist.
/// A watch of another host is safe as long as it lags less than the
/// shortest `retention` of all hosts (and of etcd's auto-compaction):
/// give every host the same settings. A watch that lags further (a host
/// cut off from etcd for longer) reads its state again; its events
/// stream then misses the changes in between, and says so in the log.
///
/// Compaction is etcd-wide: it drops the old revisions of every key, not
/// only of lockd's prefix. On an etcd shared with other applications, keep
/// a retention at least as long as any of them needs, or turn compaction
/// off here and let etcd's `--auto-compaction-*` do it.
///
/// Compaction frees space inside etcd's database for later writes; the
/// file itself shrinks only when an operator defragments each member
/// (`etcdctl defrag`), which blocks that member while it runs, so lockd
/// never does it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compaction {
    /// How often the host checks etcd's revision and compacts (default
    /// 60 s; at least 100 ms).
    pub interval: Duration,
    /// How long revisions are kept (default 5 min): far longer than any
    /// watch of a healthy host lags, so no host's watch is compacted away
    /// (see above).
    pub retention: Duration,
    /// The latest revisions always kept, however old (default 10,000).
    pub min_revisions: u64,
}

impl Default for Compaction {
    fn default() -> Self {
        Compaction {
            interval: Duration::from_secs(60),
            retention: Duration::from_secs(300),
            min_revisions: 10_000,
        }
    }
}

/// etcd's default `--quota-backend-bytes`: 2 GiB.
pub const DEFAULT_QUOTA_BACKEND_BYTES: u64 = 2 << 30;

/// lockd's client certificate for etcd: two PEM files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientCert {
    /// The certificate chain, leaf first.
    pub cert_file: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
}

/// An etcd user and its password. Its `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdUser {
    /// The user name, as in `etcdctl user add NAME`.
    pub name: String,
    /// The password. Kept out of logs and `Debug` output.
    pub password: String,
}

impl std::fmt::Debug for EtcdUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdUser")
            .field("name", &self.name)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Why an etcd store's configuration was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The endpoint list names no endpoint.
    #[error("an etcd store needs at least one endpoint, as in etcd:http://127.0.0.1:2379")]
    NoEndpoints,
    /// An endpoint is not `http://HOST:PORT` or `https://HOST:PORT`.
    #[error(
        "etcd endpoint {endpoint:?} {reason}; expected http://HOST:PORT or https://HOST:PORT, \
         as in etcd:http://127.0.0.1:2379"
    )]
    BadEndpoint {
        /// The endpoint as given.
        endpoint: String,
        /// What is wrong with it, such as "has no port".
        reason: &'static str,
    },
    /// Some endpoints are `http://` and others `https://`.
    #[error(
        "etcd endpoints mix http:// and https:// ({http} and {https}); \
         a cluster's members are all reached the same way"
    )]
    MixedSchemes {
        /// An `http://` endpoint.
        http: String,
        /// An `https://` endpoint.
        https: String,
    },
    /// `https://` endpoints without a CA to check the members against.
    #[error(
        "etcd endpoint {endpoint} uses https but no CA is given: set [etcd] ca_file \
         to the CA certificate (PEM) that signed the members' certificates"
    )]
    NoCaFile {
        /// The first `https://` endpoint.
        endpoint: String,
    },
    /// TLS files given for `http://` endpoints, which would not use them.
    #[error(
        "[etcd] {field} is set but etcd endpoint {endpoint} is plain http: \
         use https:// endpoints, or remove {field}"
    )]
    TlsWithoutHttps {
        /// `ca_file`, `cert_file` or `key_file`.
        field: &'static str,
        /// The first endpoint.
        endpoint: String,
    },
    /// A user without a password, or an empty user name.
    #[error("{0}")]
    BadUser(&'static str),
}

impl EtcdOptions {
    /// Options for `endpoints` with the defaults: prefix `/lockd`, dial 5 s,
    /// requests 5 s, lease slack 5 s, session 10 s, 40 locks per lease,
    /// compaction on ([`Compaction::default`]), a quota of 2 GiB.
    pub fn new<I, S>(endpoints: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        EtcdOptions {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            ca_file: None,
            client_cert: None,
            user: None,
            prefix: "/lockd".to_string(),
            dial_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            lease_slack: Duration::from_secs(5),
            session_ttl: Duration::from_secs(10),
            max_locks_per_lease: 40,
            compaction: Some(Compaction::default()),
            quota_backend_bytes: DEFAULT_QUOTA_BACKEND_BYTES,
        }
    }

    /// Options from a comma-separated endpoint list, as in
    /// `--store etcd:http://a:2379,http://b:2379` (the part after `etcd:`).
    /// Every endpoint must be `http://HOST:PORT`, or every one
    /// `https://HOST:PORT` (then [`EtcdOptions::ca_file`] must be set before
    /// connecting); a bare `HOST:PORT` is refused rather than guessed at.
    pub fn from_endpoint_list(list: &str) -> Result<Self, ConfigError> {
        let endpoints: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        if endpoints.is_empty() {
            return Err(ConfigError::NoEndpoints);
        }
        for endpoint in &endpoints {
            check_endpoint(endpoint).map_err(|reason| ConfigError::BadEndpoint {
                endpoint: endpoint.to_string(),
                reason,
            })?;
        }
        let http = endpoints.iter().find(|e| !is_https(e));
        let https = endpoints.iter().find(|e| is_https(e));
        if let (Some(http), Some(https)) = (http, https) {
            return Err(ConfigError::MixedSchemes {
                http: http.to_string(),
                https: https.to_string(),
            });
        }
        Ok(EtcdOptions::new(endpoints))
    }

    /// Whether the endpoints are `https://` (all of them are, or none).
    pub fn uses_tls(&self) -> bool {
        self.endpoints.first().is_some_and(|e| is_https(e))
    }

    /// Checks that the TLS files and the user fit the endpoints: `https://`
    /// needs a CA file, `http://` takes no TLS file, a user needs a name.
    /// [`crate::EtcdBackend::connect`] checks this first; a configuration
    /// loader may check it earlier.
    pub fn check(&self) -> Result<(), ConfigError> {
        let Some(first) = self.endpoints.first() else {
            return Err(ConfigError::NoEndpoints);
        };
        if let Some(https) = self.endpoints.iter().find(|e| is_https(e)) {
            if let Some(http) = self.endpoints.iter().find(|e| !is_https(e)) {
                return Err(ConfigError::MixedSchemes {
                    http: http.clone(),
                    https: https.clone(),
                });
            }
            if self.ca_file.is_none() {
                return Err(ConfigError::NoCaFile {
                    endpoint: https.clone(),
                });
            }
        } else {
            let field = if self.ca_file.is_some() {
                Some("ca_file")
            } else if self.client_cert.is_some() {
                Some("cert_file")
            } else {
                None
            };
            if let Some(field) = field {
                return Err(ConfigError::TlsWithoutHttps {
                    field,
                    endpoint: first.clone(),
                });
            }
        }
        if let Some(user) = &self.user {
            if user.name.is_empty() {
                return Err(ConfigError::BadUser("[etcd] user is empty"));
            }
        }
        Ok(())
    }

    pub(crate) fn session_ttl_secs(&self) -> i64 {
        (self.session_ttl.as_secs().max(2)).min(i64::MAX as u64) as i64
    }
}

fn is_https(endpoint: &str) -> bool {
    endpoint.starts_with("https://")
}

/// `HOST:PORT` of an endpoint that passed [`check_endpoint`].
pub(crate) fn authority(endpoint: &str) -> &str {
    let rest = endpoint
        .strip_prefix("https://")
        .or_else(|| endpoint.strip_prefix("http://"))
        .unwrap_or(endpoint);
    rest.trim_end_matches('/')
}

/// Why `endpoint` is not `http://HOST:PORT` or `https://HOST:PORT`, if it
/// is not.
fn check_endpoint(endpoint: &str) -> Result<(), &'static str> {
    let Some(authority) = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
    else {
        return Err("is not an http:// or https:// URL");
    };
    // A trailing `/` is harmless; any other path is a mistake.
    let authority = authority.strip_suffix('/').unwrap_or(authority);
    if authority.contains(['/', '?', '#', '@']) || authority.contains(char::is_whitespace) {
        return Err("has a path, query, user or spaces after the host");
    }
    let Some((host, port)) = authority.rsplit_once(':') else {
        return Err("has no port");
    };
    if host.is_empty() || host == "[]" {
        return Err("has no host");
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err("has no valid port"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(list: &str) -> String {
        match EtcdOptions::from_endpoint_list(list) {
            Err(e) => e.to_string(),
            other => panic!("{list:?} was accepted: {other:?}"),
        }
    }

    #[test]
    fn endpoint_lists_parse_with_defaults() {
        let o =
            EtcdOptions::from_endpoint_list("http://127.0.0.1:2379, http://[::1]:2380/,").unwrap();
        assert_eq!(o.endpoints, ["http://127.0.0.1:2379", "http://[::1]:2380/"]);
        assert_eq!(o, EtcdOptions::new(o.endpoints.clone()));
        assert_eq!(o.prefix, "/lockd");
        let compaction = o.compaction.expect("compaction is on by default");
        assert_eq!(compaction.interval, Duration::from_secs(60));
        assert_eq!(compaction.retention, Duration::from_secs(300));
        assert_eq!(o.quota_backend_bytes, 2_147_483_648);
    }

    #[test]
    fn bad_endpoints_say_what_is_wrong() {
        assert!(refusal("").contains("at least one endpoint"));
        assert!(refusal(" , ").contains("at least one endpoint"));
        assert!(refusal("127.0.0.1:2379").contains("not an http:// or https:// URL"));
        assert!(refusal("https://e").contains("no port"));
        assert!(refusal("http://e").contains("no port"));
        assert!(refusal("http://:2379").contains("no host"));
        assert!(refusal("http://e:0").contains("no valid port"));
        assert!(refusal("http://e:99999").contains("no valid port"));
        assert!(refusal("http://e:2379/v3").contains("path"));
        // The good endpoint does not excuse the bad one, which is named.
        let m = refusal("http://a:2379,ftp://b:2379");
        assert!(
            m.contains("\"ftp://b:2379\"") && m.contains("http://HOST:PORT"),
            "{m}"
        );
        let mixed = refusal("https://a:2379,http://b:2379");
        assert!(
            mixed.contains("mix")
                && mixed.contains("http://b:2379")
                && mixed.contains("https://a:2379"),
            "{mixed}"
        );
    }

    #[test]
    fn https_needs_a_ca_and_http_takes_no_tls_files() {
        let mut o = EtcdOptions::from_endpoint_list("https://e:2379,https://f:2379").unwrap();
        assert!(o.uses_tls());
        let m = o.check().unwrap_err().to_string();
        assert!(m.contains("ca_file") && m.contains("https://e:2379"), "{m}");
        o.ca_file = Some("ca.pem".into());
        o.check().unwrap();

        let mut plain = EtcdOptions::new(["http://e:2379"]);
        assert!(!plain.uses_tls());
        plain.check().unwrap();
        plain.client_cert = Some(ClientCert {
            cert_file: "c.pem".into(),
            key_file: "c.key".into(),
        });
        let m = plain.check().unwrap_err().to_string();
        assert!(m.contains("cert_file") && m.contains("plain http"), "{m}");
        plain.client_cert = None;
        plain.ca_file = Some("ca.pem".into());
        assert!(plain.check().unwrap_err().to_string().contains("ca_file"));

        // Built by hand rather than parsed: mixing is still refused.
        let mut mixed = EtcdOptions::new(["http://a:1", "https://b:2"]);
        mixed.ca_file = Some("ca.pem".into());
        assert!(mixed.check().unwrap_err().to_string().contains("mix"));
    }

    #[test]
    fn debug_output_never_shows_the_password() {
        let mut o = EtcdOptions::new(["https://e:2379"]);
        o.user = Some(EtcdUser {
            name: "lockd".into(),
            password: "hunter2-secret".into(),
        });
        let shown = format!("{o:?} {o:#?}");
        assert!(!shown.contains("hunter2-secret"), "{shown}");
        assert!(
            shown.contains("lockd") && shown.contains("<redacted>"),
            "{shown}"
        );
    }
}
