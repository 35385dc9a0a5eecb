//! How to reach etcd and how to use it, and the endpoint list of
//! `--store etcd:...`.

use std::time::Duration;

/// How to reach etcd and how to use it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdOptions {
    /// Client URLs of the cluster's members, such as `http://127.0.0.1:2379`.
    pub endpoints: Vec<String>,
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
}

/// Why an etcd store's configuration was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The endpoint list names no endpoint.
    #[error("an etcd store needs at least one endpoint, as in etcd:http://127.0.0.1:2379")]
    NoEndpoints,
    /// An endpoint is not `http://HOST:PORT`.
    #[error(
        "etcd endpoint {endpoint:?} {reason}; expected http://HOST:PORT, \
         as in etcd:http://127.0.0.1:2379"
    )]
    BadEndpoint {
        /// The endpoint as given.
        endpoint: String,
        /// What is wrong with it, such as "has no port".
        reason: &'static str,
    },
}

impl EtcdOptions {
    /// Options for `endpoints` with the defaults: prefix `/lockd`, dial 5 s,
    /// requests 5 s, lease slack 5 s, session 10 s, 40 locks per lease.
    pub fn new<I, S>(endpoints: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        EtcdOptions {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            prefix: "/lockd".to_string(),
            dial_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            lease_slack: Duration::from_secs(5),
            session_ttl: Duration::from_secs(10),
            max_locks_per_lease: 40,
        }
    }

    /// Options from a comma-separated endpoint list, as in
    /// `--store etcd:http://a:2379,http://b:2379` (the part after `etcd:`).
    /// Every endpoint must be `http://HOST:PORT`: the client is built
    /// without TLS, so an `https://` endpoint could never connect, and a
    /// bare `HOST:PORT` is refused rather than guessed at.
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
        Ok(EtcdOptions::new(endpoints))
    }

    pub(crate) fn session_ttl_secs(&self) -> i64 {
        (self.session_ttl.as_secs().max(2)).min(i64::MAX as u64) as i64
    }
}

/// Why `endpoint` is not `http://HOST:PORT`, if it is not.
fn check_endpoint(endpoint: &str) -> Result<(), &'static str> {
    let Some(authority) = endpoint.strip_prefix("http://") else {
        return Err(if endpoint.starts_with("https://") {
            "uses https, which this build does not support"
        } else {
            "is not an http:// URL"
        });
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
    }

    #[test]
    fn bad_endpoints_say_what_is_wrong() {
        assert!(refusal("").contains("at least one endpoint"));
        assert!(refusal(" , ").contains("at least one endpoint"));
        assert!(refusal("https://e:2379").contains("https"));
        assert!(refusal("127.0.0.1:2379").contains("not an http:// URL"));
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
    }
}
