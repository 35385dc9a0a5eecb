//! `lockd.toml`: lockd's own runtime configuration. It never lives in
//! spin.toml, so the manifest stays valid for Spin.
//!
//! ```toml
//! store = "redb:.lockd/locks.redb"      # or "memory"
//!
//! [limits]                               # all optional; defaults shown
//! max_ttl_ms = 86400000
//! max_wait_ms = 3600000
//! instance_memory_bytes = 67108864       # per component instance
//! request_timeout_ms = 30000             # epoch deadline per request
//!
//! [namespaces]
//! default_quota = 10000                  # most locks any namespace may hold
//!
//! [namespaces.quotas]                    # per namespace
//! jobs = 1000
//!
//! [components.edge-jobs]                 # per spin.toml component id
//! namespace = "jobs"                     # default: the component id
//! ```

use std::collections::HashMap;
use std::path::Path;

use anyhow::Context as _;
use lockd_core::{Limits, Quotas};
use serde::Deserialize;

/// The whole file. Unknown keys are errors, so a typo is not silently ignored.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockdConfig {
    /// Store spec, as `--store` takes it; the flag wins when both are given.
    pub store: Option<String>,
    /// Limits on callers and on component instances.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// Quotas per namespace.
    #[serde(default)]
    pub namespaces: NamespacesConfig,
    /// Settings per spin.toml component id.
    #[serde(default)]
    pub components: HashMap<String, ComponentConfig>,
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

impl LockdConfig {
    /// Reads `path`.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }

    /// Reads `path` if given; otherwise `./lockd.toml` if it exists; otherwise
    /// the defaults.
    pub fn load_or_default(path: Option<&Path>) -> anyhow::Result<Self> {
        match path {
            Some(p) => Self::load(p),
            None if Path::new("lockd.toml").exists() => Self::load(Path::new("lockd.toml")),
            None => Ok(Self::default()),
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

    /// The namespace of component `id`.
    pub fn namespace_of(&self, id: &str) -> String {
        self.components
            .get(id)
            .and_then(|c| c.namespace.clone())
            .unwrap_or_else(|| id.to_string())
    }
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
        assert_eq!(config.quotas().of("jobs"), Some(2));
        assert_eq!(config.quotas().of("other"), Some(5));
        assert_eq!(config.namespace_of("a"), "shared");
        assert_eq!(config.namespace_of("b"), "shared");
        assert_eq!(config.namespace_of("c"), "c");
        assert!(toml::from_str::<LockdConfig>("[limits]\nmax_ttl = 5").is_err());
    }
}
