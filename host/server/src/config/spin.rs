//! What lockd.toml gives a Spin app served by `lockd up`, as Spin's runtime
//! config does: `[key_value_store.<label>]` (where each store label a
//! component lists in `key_value_stores` lives, and its limits) and
//! `[variables]` (values for the app's variables).
//!
//! ```toml
//! [key_value_store.default]          # optional: `default` needs no entry
//! max_store_bytes = 16777216
//!
//! [key_value_store.sessions]         # any other label must be declared
//! type = "lockd"                     # the server's own store
//!
//! [variables]
//! counter_step = "2"
//! ```

use serde::Deserialize;

/// Longest key a component may write, by default: keys are names, and
/// `get-keys` returns all of them at once.
pub const DEFAULT_KV_MAX_KEY_BYTES: usize = 256;
/// Largest value, by default: each value crosses into host memory and back
/// whole, and a commit of the redb store writes it at once.
pub const DEFAULT_KV_MAX_VALUE_BYTES: usize = 1 << 20;
/// Most bytes (keys and values) one store holds, by default: it lives beside
/// the locks, on their disk (or in memory with `--store memory`), so a
/// runaway component must not fill either.
pub const DEFAULT_KV_MAX_STORE_BYTES: u64 = 64 << 20;

/// One `[key_value_store.<label>]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyValueStoreConfig {
    /// Where the store lives; see [`KeyValueStoreType`].
    #[serde(default, rename = "type")]
    pub kind: KeyValueStoreType,
    /// Longest key in bytes (default [`DEFAULT_KV_MAX_KEY_BYTES`]).
    pub max_key_bytes: Option<usize>,
    /// Largest value in bytes (default [`DEFAULT_KV_MAX_VALUE_BYTES`]).
    pub max_value_bytes: Option<usize>,
    /// Most bytes of keys and values together (default
    /// [`DEFAULT_KV_MAX_STORE_BYTES`]).
    pub max_store_bytes: Option<u64>,
}

/// `type` of a `[key_value_store.<label>]`. One kind for now; the enum
/// leaves room for others (Spin's `redis`, `spin` and so on).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyValueStoreType {
    /// The server's own store, beside the locks: the redb file's directory
    /// for `redb:`, memory for `memory`. Spin's runtime config calls its
    /// built-in store `spin`, so that name means the same.
    #[default]
    #[serde(alias = "spin")]
    Lockd,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_tables_parse_and_refuse_unknown_keys() {
        let config: crate::config::LockdConfig = toml::from_str(
            "[key_value_store.default]\nmax_store_bytes = 10\n\
             [key_value_store.other]\ntype = \"lockd\"\n[variables]\nstep = \"2\"\n",
        )
        .unwrap();
        assert_eq!(config.key_value_store["default"].max_store_bytes, Some(10));
        assert_eq!(
            config.key_value_store["other"].kind,
            KeyValueStoreType::Lockd
        );
        assert_eq!(config.variables["step"], "2");
        for bad in [
            "[key_value_store.x]\ntype = \"redis\"\n",
            "[key_value_store.x]\nmax = 1\n",
        ] {
            assert!(
                toml::from_str::<crate::config::LockdConfig>(bad).is_err(),
                "{bad}"
            );
        }
    }
}
