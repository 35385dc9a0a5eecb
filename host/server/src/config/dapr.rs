//! `[dapr]`: Dapr's lock API. Which lock stores it serves comes from Dapr's
//! own component files, so one folder declares the stores for daprd and
//! for lockd alike; `lockd-compat` reads the folder when the server
//! starts.
//!
//! ```toml
//! [dapr]
//! durability = "persistent"              # or "ephemeral"
//! components = "/etc/lockd/dapr"         # or `lockd serve --dapr-components DIR`
//! # any_store = true                     # instead of components: any store name is a namespace
//!
//! [dapr.stores]                          # a declared store's namespace, if not its name
//! orders = "jobs"
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

/// `[dapr]`: which lock stores Dapr's lock API serves, and how its locks
/// behave.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaprConfig {
    /// Durability of the locks Dapr's clients take (Dapr's API has no
    /// word for it); persistent when unset.
    pub durability: Option<lockd_api::DurabilityWord>,
    /// A folder of Dapr component files (`*.yaml`, `*.yml`). Each
    /// `lock.*` component declares a lock store, and a store none declares
    /// is refused as daprd refuses it. Unset (and no `any_store`): no
    /// store is declared, and every lock call is refused as daprd refuses
    /// it without lock components. Relative to the working directory;
    /// `--dapr-components` replaces it ([`DaprConfig::overridden_by`]).
    pub components: Option<PathBuf>,
    /// Take any store name as the lockd namespace of that name, without
    /// component files (`--dapr-any-store`): what lockd did before it read
    /// them, kept for deployments that count on it. A mistyped store name
    /// then locks in another namespace. Refused together with `components`.
    #[serde(default)]
    pub any_store: bool,
    /// `[dapr.stores]`: the lockd namespace of a declared lock store whose
    /// namespace is not its own name. Each key must be a store the
    /// components declare.
    #[serde(default)]
    pub stores: BTreeMap<String, String>,
}

impl DaprConfig {
    /// These settings with the folder `--dapr-components` names, if given,
    /// in place of `components`, and `--dapr-any-store` if set.
    pub fn overridden_by(
        self,
        components_flag: Option<PathBuf>,
        any_store_flag: bool,
    ) -> DaprConfig {
        DaprConfig {
            components: components_flag.or(self.components),
            any_store: any_store_flag || self.any_store,
            ..self
        }
    }

    /// The durability of a Dapr `TryLock`.
    pub fn durability(&self) -> lockd_core::Durability {
        self.durability
            .map_or(lockd_core::Durability::Persistent, Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LockdConfig;

    fn dapr(text: &str) -> Result<DaprConfig, toml::de::Error> {
        toml::from_str::<LockdConfig>(text).map(|c| c.dapr)
    }

    #[test]
    fn dapr_durability_is_a_durability_word() {
        let config = dapr("[dapr]\ndurability = \"ephemeral\"").unwrap();
        assert_eq!(config.durability(), lockd_core::Durability::Ephemeral);
        assert_eq!(
            dapr("").unwrap().durability(),
            lockd_core::Durability::Persistent
        );
        let typo = dapr("[dapr]\ndurability = \"forever\"").unwrap_err();
        assert!(typo.to_string().contains("forever"), "{typo}");
        assert!(dapr("[dapr]\ndurable = true").is_err());
    }

    #[test]
    fn components_and_stores_are_read_and_the_flag_replaces_the_folder() {
        let config =
            dapr("[dapr]\ncomponents = \"dapr/components\"\n[dapr.stores]\norders = \"jobs\"\n")
                .unwrap();
        assert_eq!(config.components, Some(PathBuf::from("dapr/components")));
        assert_eq!(
            config.stores,
            BTreeMap::from([("orders".to_string(), "jobs".to_string())])
        );
        let flagged = config
            .clone()
            .overridden_by(Some(PathBuf::from("/etc/dapr")), false);
        assert_eq!(flagged.components, Some(PathBuf::from("/etc/dapr")));
        assert_eq!(flagged.stores, config.stores);
        assert_eq!(config.clone().overridden_by(None, false), config);
        assert!(config.clone().overridden_by(None, true).any_store);
        assert!(dapr("[dapr]\nany_store = true\n").unwrap().any_store);
        assert_eq!(dapr("").unwrap().components, None);
        assert!(!dapr("").unwrap().any_store);
        for (bad, needle) in [
            ("[dapr]\ncomponent = \"d\"", "component"),
            ("[dapr]\ncomponents = 5", "components"),
            ("[dapr.stores]\norders = 5", "orders"),
        ] {
            let err = dapr(bad).unwrap_err().to_string();
            assert!(err.contains(needle), "{bad}: {err}");
        }
    }
}
