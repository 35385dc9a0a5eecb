//! The lock stores Dapr's lock API serves, declared as daprd declares them:
//! by Dapr component files in a folder (`[dapr] components` in lockd.toml).
//! Each `lock.*` component names a lock store; a call to a store no
//! component declares is refused as daprd refuses it, so a mistyped store
//! name cannot put two services in different namespaces, each believing it
//! holds the same lock.
//!
//! A store's lock is an ordinary lockd lock in the namespace of the store's
//! name, or the one `[dapr.stores]` gives it. Without a folder no store is
//! declared, and every call is refused as daprd refuses it without lock
//! components; `[dapr] any_store = true` instead takes any store name as the
//! namespace of that name ([`LockStores::AnyName`]), as lockd did before it
//! read component files.
//!
//! Files are read as daprd's disk loader reads them: `*.yaml` and `*.yml`
//! directly in the folder, each with one or more documents separated by
//! `---`, and only documents of `kind: Component` are components. Unlike
//! daprd, which logs a malformed file and starts without it, lockd refuses
//! to start, naming the file, the document and the field: a store that
//! silently went missing would refuse every lock call to it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use lockd_server::config::DaprConfig;
use serde::Deserialize;

/// The `apiVersion` of Dapr's component files.
const API_VERSION: &str = "dapr.io/v1alpha1";

/// The `kind` of a component document.
const COMPONENT_KIND: &str = "Component";

/// The prefix of a lock store's `spec.type` (`lock.redis`).
const LOCK_TYPE_PREFIX: &str = "lock.";

/// The lock stores Dapr's lock API serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockStores {
    /// `[dapr] any_store`: any store name is the lockd namespace of that
    /// name.
    AnyName,
    /// The stores a component folder declares, by name; none at all is
    /// daprd's "not configured".
    Declared(BTreeMap<String, LockStore>),
}

/// One lock store a component file declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockStore {
    /// `metadata.name`: the store name clients call.
    pub name: String,
    /// `spec.type` (`lock.redis`): shown in Dapr's metadata; lockd serves
    /// every type the same way.
    pub component_type: String,
    /// `spec.version`, empty when not given.
    pub version: String,
    /// The lockd namespace its locks are in.
    pub namespace: String,
    /// The file that declares it.
    pub file: PathBuf,
}

/// What a store name is to Dapr's lock API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// A lock store, whose locks are in this namespace.
    Namespace(&'a str),
    /// No component declares a lock store at all (daprd's
    /// `ERR_LOCK_STORE_NOT_CONFIGURED`).
    NotConfigured,
    /// Lock stores are declared, but not this one
    /// (`ERR_LOCK_STORE_NOT_FOUND`).
    NotFound,
}

impl LockStores {
    /// The stores `config` declares: those of its `components` folder,
    /// each in its `[dapr.stores]` namespace or its own name's, which
    /// `check_namespace` must accept. Without a folder, none (or
    /// [`AnyName`] with `any_store`). Every file is read now; any error
    /// refuses the start.
    ///
    /// [`AnyName`]: LockStores::AnyName
    pub fn load(
        config: &DaprConfig,
        check_namespace: impl Fn(&str) -> Result<(), String>,
    ) -> anyhow::Result<Self> {
        if config.any_store && config.components.is_some() {
            anyhow::bail!(
                "[dapr] any_store and components are both set: components declares the lock \
                 stores, any_store takes any name; set one"
            );
        }
        let Some(dir) = &config.components else {
            if let Some(store) = config.stores.keys().next() {
                anyhow::bail!(
                    "[dapr.stores] names {store:?}, but [dapr] components is not set: lock \
                     stores are declared by Dapr component files; set [dapr] components \
                     (or --dapr-components) to their folder"
                );
            }
            return Ok(if config.any_store {
                LockStores::AnyName
            } else {
                LockStores::Declared(BTreeMap::new())
            });
        };
        let mut stores = BTreeMap::new();
        for file in component_files(dir)? {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading Dapr component file {}", file.display()))?;
            for component in parse_components(&file, &text)? {
                let name = component.name.clone();
                if let Some(first) = stores.insert(name.clone(), component) {
                    anyhow::bail!(
                        "{}: lock store {name:?} is declared twice (also in {})",
                        stores[&name].file.display(),
                        first.file.display()
                    );
                }
            }
        }
        assign_namespaces(&mut stores, &config.stores, check_namespace)?;
        Ok(LockStores::Declared(stores))
    }

    /// What `store` is to Dapr's lock API.
    pub fn lookup<'a>(&'a self, store: &'a str) -> Lookup<'a> {
        match self {
            LockStores::AnyName => Lookup::Namespace(store),
            LockStores::Declared(stores) if stores.is_empty() => Lookup::NotConfigured,
            LockStores::Declared(stores) => stores
                .get(store)
                .map_or(Lookup::NotFound, |s| Lookup::Namespace(&s.namespace)),
        }
    }

    /// The declared stores, by name; none for [`LockStores::AnyName`].
    pub fn declared(&self) -> impl Iterator<Item = &LockStore> {
        let stores = match self {
            LockStores::AnyName => None,
            LockStores::Declared(stores) => Some(stores.values()),
        };
        stores.into_iter().flatten()
    }

    /// The start-up line saying what Dapr's lock API does with store
    /// names, and why; `dir` is the component folder.
    pub fn start_up_line(&self, dir: Option<&Path>) -> String {
        let Some(dir) = dir else {
            return match self {
                LockStores::AnyName => "Dapr lock API: [dapr] any_store is set, so any store \
                     name is taken as the lockd namespace of that name and a mistyped store \
                     name silently locks in another namespace; set [dapr] components (or \
                     --dapr-components) to a folder of Dapr component files instead to serve \
                     only the lock stores they declare, as daprd does"
                    .to_string(),
                LockStores::Declared(_) => "Dapr lock API: [dapr] components is not set, so \
                     no lock store is declared and every Dapr lock call is refused with \
                     ERR_LOCK_STORE_NOT_CONFIGURED, as daprd refuses it; set [dapr] components \
                     (or --dapr-components) to the app's Dapr component folder, or [dapr] \
                     any_store = true (--dapr-any-store) to take any store name as the \
                     namespace of that name"
                    .to_string(),
            };
        };
        let dir = dir.display();
        match self {
            // `load` refuses any_store beside a folder.
            LockStores::AnyName => self.start_up_line(None),
            LockStores::Declared(stores) if stores.is_empty() => format!(
                "Dapr lock API: {dir} declares no lock store (no component of type lock.*), \
                 so every Dapr lock call is refused with ERR_LOCK_STORE_NOT_CONFIGURED, as \
                 daprd does"
            ),
            LockStores::Declared(stores) => {
                let mut line = format!("Dapr lock API: lock stores from {dir}:");
                for store in stores.values() {
                    let _ = write!(line, " {} (namespace {})", store.name, store.namespace);
                }
                line.push_str(
                    "; other store names are refused with ERR_LOCK_STORE_NOT_FOUND, as daprd \
                     refuses them",
                );
                line
            }
        }
    }
}

/// The YAML files directly in `dir`, in name order (daprd reads no
/// subfolder); other files are logged and skipped, as daprd does.
fn component_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir).with_context(|| {
        format!(
            "reading the Dapr components folder {} ([dapr] components)",
            dir.display()
        )
    })?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry
            .with_context(|| format!("reading the Dapr components folder {}", dir.display()))?
            .path();
        if !path.is_file() {
            continue;
        }
        let yaml = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        );
        if yaml {
            files.push(path);
        } else {
            tracing::info!(file = %path.display(), "not a YAML file; Dapr's lock API ignores it");
        }
    }
    files.sort();
    Ok(files)
}

/// A component document, as far as lockd reads it. Fields lockd does not
/// use (`scopes`, `auth`, `metadata.namespace`, `spec.initTimeout`, a
/// metadata item's `value` or `secretKeyRef`) are allowed and ignored.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Component {
    api_version: String,
    metadata: ComponentMeta,
    spec: ComponentSpec,
}

#[derive(Debug, Deserialize)]
struct ComponentMeta {
    name: String,
}

#[derive(Debug, Deserialize)]
struct ComponentSpec {
    #[serde(rename = "type")]
    component_type: String,
    #[serde(default)]
    version: String,
    /// Checked for shape only: lockd's stores take no settings from it.
    #[serde(default, rename = "metadata")]
    _metadata: Vec<MetadataItem>,
}

#[derive(Debug, Deserialize)]
struct MetadataItem {
    #[serde(rename = "name")]
    _name: String,
}

/// Any Dapr resource: its `kind` says whether it is a component.
#[derive(Debug, Deserialize)]
struct Resource {
    kind: String,
}

/// The lock stores the documents of `file` (whose text is `text`)
/// declare, each with its own name as namespace; other components and
/// other kinds are logged and skipped. An error names the file, the
/// document (counted from 1) and the field.
fn parse_components(file: &Path, text: &str) -> anyhow::Result<Vec<LockStore>> {
    let mut stores = Vec::new();
    for (index, document) in yaml_serde::Deserializer::from_str(text).enumerate() {
        let at = format!("{}: document {}", file.display(), index + 1);
        let value = yaml_serde::Value::deserialize(document)
            .map_err(|e| anyhow::anyhow!("{at}: not YAML: {e}"))?;
        if value.is_null() {
            // An empty document: a leading `---`, or only comments.
            continue;
        }
        let resource: Resource = typed(&at, value.clone())?;
        if resource.kind != COMPONENT_KIND {
            tracing::info!(
                file = %file.display(),
                kind = resource.kind,
                "not a Dapr Component; Dapr's lock API ignores it"
            );
            continue;
        }
        let component: Component = typed(&at, value)?;
        if component.api_version != API_VERSION {
            anyhow::bail!(
                "{at}: apiVersion: {:?} is not {API_VERSION:?}",
                component.api_version
            );
        }
        let Component { metadata, spec, .. } = component;
        if metadata.name.is_empty() {
            anyhow::bail!("{at}: metadata.name: empty");
        }
        if !spec.component_type.starts_with(LOCK_TYPE_PREFIX) {
            tracing::info!(
                file = %file.display(),
                name = metadata.name,
                r#type = spec.component_type,
                "a Dapr component that is not a lock store; Dapr's lock API ignores it"
            );
            continue;
        }
        stores.push(LockStore {
            namespace: metadata.name.clone(),
            name: metadata.name,
            component_type: spec.component_type,
            version: spec.version,
            file: file.to_path_buf(),
        });
    }
    Ok(stores)
}

/// `value` as a `T`; an error names the field (`spec.type: ...`).
fn typed<T: serde::de::DeserializeOwned>(at: &str, value: yaml_serde::Value) -> anyhow::Result<T> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            anyhow::anyhow!("{at}: {}", e.inner())
        } else {
            anyhow::anyhow!("{at}: {path}: {}", e.inner())
        }
    })
}

/// Gives each store its namespace: its `[dapr.stores]` entry (`mapped`),
/// else its name; each must be one `check_namespace` accepts, and each
/// entry must name a declared store.
fn assign_namespaces(
    stores: &mut BTreeMap<String, LockStore>,
    mapped: &BTreeMap<String, String>,
    check_namespace: impl Fn(&str) -> Result<(), String>,
) -> anyhow::Result<()> {
    if let Some(unknown) = mapped.keys().find(|name| !stores.contains_key(*name)) {
        anyhow::bail!(
            "[dapr.stores] names {unknown:?}, which no lock.* component declares (declared: {})",
            names(stores)
        );
    }
    for store in stores.values_mut() {
        if let Some(namespace) = mapped.get(&store.name) {
            check_namespace(namespace).map_err(|why| {
                anyhow::anyhow!(
                    "[dapr.stores] {} = {namespace:?} is not a lockd namespace: {why}",
                    store.name
                )
            })?;
            store.namespace = namespace.clone();
        } else {
            check_namespace(&store.name).map_err(|why| {
                anyhow::anyhow!(
                    "{}: lock store {:?} is not a lockd namespace ({why}); give it one in \
                     [dapr.stores]",
                    store.file.display(),
                    store.name
                )
            })?;
        }
    }
    Ok(())
}

fn names(stores: &BTreeMap<String, LockStore>) -> String {
    if stores.is_empty() {
        return "none".to_string();
    }
    stores.keys().cloned().collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests;
