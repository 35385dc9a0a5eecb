//! `[component.<id>.dependencies]`, read and composed as Spin reads and
//! composes them (`spin_manifest::schema::v2`, `spin_compose`), so that one
//! spin.toml runs under `lockd up` and `spin up` alike.
//!
//! - A dependency name is plain (`my-dep`) or a package name, at the package
//!   level (`lockd:lock`, `lockd:lock@0.1.0`) or the interface level
//!   (`lockd:lock/locks`, `lockd:lock/locks@0.1.0`). A package name matches
//!   every import of that package (of that interface, of exactly that
//!   version, when given); a plain name matches the plain import of that name.
//! - Each dependency is registered in the composition graph under its
//!   package name, so two entries of one package (`lockd:lock/locks` and
//!   `lockd:lock/guards`) are refused as Spin refuses them: "package
//!   `lockd:lock` has already been registered in the graph".
//! - An import is satisfied by the dependency's export of the same name
//!   (or of `export`), exactly: `locks@0.1.1` is not `locks@0.1.0`.
//! - What the dependency inherits from its component: all of it with
//!   `dependencies_inherit_configuration = true`, the listed sets with a
//!   per-dependency `inherit_configuration = [...]` (Spin 4), nothing
//!   otherwise. Withheld sets are replaced inside the composition (see
//!   `withhold`): no environment, no outbound HTTP.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context as _, Result};
use serde::Deserialize;
use wac_graph::types::{Package, SubtypeChecker, WorldId};
use wac_graph::{CompositionGraph, NodeId};

use super::withhold;
pub use super::withhold::{Inherit, CONFIGURATION_SETS};

/// One entry of `[component.<id>.dependencies]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dependency {
    /// The name as written (a key of the table).
    pub name: DependencyName,
    /// The component implementing it, resolved against the manifest's
    /// directory.
    pub path: PathBuf,
    /// The export satisfying an interface-level name, if not the import's
    /// own name.
    pub export: Option<String>,
    /// What it inherits from the component it serves.
    pub inherit: Inherit,
}

/// A dependency name: `my-dep`, `ns:pkg`, `ns:pkg@1.2.3`, `ns:pkg/iface`,
/// `ns:pkg/iface@1.2.3`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DependencyName {
    /// A kebab-case name, matching a plain import of the same name.
    Plain(String),
    /// A package, optionally narrowed to an interface and a version.
    Package {
        /// `ns:pkg`.
        package: String,
        /// `iface`.
        interface: Option<String>,
        /// `1.2.3`.
        version: Option<semver::Version>,
    },
}

impl fmt::Display for DependencyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DependencyName::Plain(name) => f.write_str(name),
            DependencyName::Package {
                package,
                interface,
                version,
            } => {
                f.write_str(package)?;
                if let Some(interface) = interface {
                    write!(f, "/{interface}")?;
                }
                if let Some(version) = version {
                    write!(f, "@{version}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::str::FromStr for DependencyName {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        if !s.contains([':', '/']) {
            check_kebab(s).with_context(|| format!("dependency name {s:?}"))?;
            return Ok(DependencyName::Plain(s.to_string()));
        }
        let (name, version) = match s.split_once('@') {
            Some((name, version)) => {
                let version = version.parse().with_context(|| {
                    format!("dependency name {s:?}: {version:?} is not a semantic version")
                })?;
                (name, Some(version))
            }
            None => (s, None),
        };
        let (package, interface) = match name.split_once('/') {
            Some((package, interface)) => (package, Some(interface)),
            None => (name, None),
        };
        let Some((namespace, pkg)) = package.split_once(':') else {
            bail!("dependency name {s:?}: {package:?} is not a package name (`namespace:name`)");
        };
        for part in [namespace, pkg].into_iter().chain(interface) {
            check_kebab(part).with_context(|| format!("dependency name {s:?}"))?;
        }
        Ok(DependencyName::Package {
            package: package.to_string(),
            interface: interface.map(str::to_string),
            version,
        })
    }
}

/// A WIT identifier: lower-case words of letters and digits joined by `-`,
/// each word starting with a letter.
fn check_kebab(s: &str) -> Result<()> {
    let ok = !s.is_empty()
        && s.split('-').all(|word| {
            word.starts_with(|c: char| c.is_ascii_lowercase())
                && word
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        });
    if ok {
        Ok(())
    } else {
        bail!(
            "{s:?} is not a kebab-case name (lower-case words of letters and digits joined by `-`)"
        )
    }
}

impl DependencyName {
    /// The name the dependency is registered under in the composition
    /// graph: its package (`lockd:lock` for `lockd:lock/locks@0.1.0`), or
    /// the plain name.
    fn graph_key(&self) -> &str {
        match self {
            DependencyName::Plain(name) => name,
            DependencyName::Package { package, .. } => package,
        }
    }

    /// The order of Spin's `DependencyName` (plain names first, then by
    /// package, version and interface).
    fn spin_order(&self) -> (u8, &str, Option<&semver::Version>, Option<&str>) {
        match self {
            DependencyName::Plain(name) => (0, name, None, None),
            DependencyName::Package {
                package,
                interface,
                version,
            } => (1, package, version.as_ref(), interface.as_deref()),
        }
    }

    /// Whether this name is satisfied by (so must satisfy) the import named
    /// `import` (Spin's `matches_import`).
    pub fn matches_import(&self, import: &str) -> bool {
        match self {
            DependencyName::Plain(name) => name == import,
            DependencyName::Package {
                package,
                interface,
                version,
            } => {
                let Some((import_package, rest)) = import.split_once('/') else {
                    return false;
                };
                let (import_interface, import_version) = match rest.split_once('@') {
                    Some((i, v)) => (i, v.parse::<semver::Version>().ok()),
                    None => (rest, None),
                };
                import_package == package
                    && interface.as_deref().is_none_or(|i| i == import_interface)
                    && version
                        .as_ref()
                        .is_none_or(|v| import_version.as_ref() == Some(v))
            }
        }
    }
}

/// `"name" = { path = "...", export = "...", inherit_configuration = ... }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLocal {
    path: PathBuf,
    export: Option<String>,
    inherit_configuration: Option<RawInherit>,
}

/// `true`, `false`, or `["environment", ...]`.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawInherit {
    All(bool),
    Some(Vec<String>),
}

/// Reads component `id`'s `dependencies` table (`table`) and its
/// `dependencies_inherit_configuration` (`inherit_all`), with paths relative
/// to `dir`, checked as Spin checks them.
pub fn parse(
    id: &str,
    table: BTreeMap<String, toml::Value>,
    inherit_all: Option<bool>,
    dir: &Path,
) -> Result<Vec<Dependency>> {
    let mut dependencies = Vec::new();
    let mut per_dependency = false;
    for (key, value) in table {
        let name: DependencyName = key.parse().with_context(|| format!("component {id}"))?;
        let local = parse_local(id, &key, &name, value)?;
        per_dependency |= local.inherit_configuration.is_some();
        let inherit = inherit_of(id, &key, inherit_all, local.inherit_configuration)?;
        dependencies.push(Dependency {
            name,
            path: dir.join(local.path),
            export: local.export,
            inherit,
        });
    }
    if inherit_all.is_some() && per_dependency {
        // Spin's message (normalize_dependency_inherit_configuration).
        bail!(
            "Component `{id}` specifies both `dependencies_inherit_configuration` and \
             per-dependency `inherit_configuration`. These are mutually exclusive; use one or \
             the other."
        );
    }
    check_disjoint(id, &dependencies)?;
    Ok(dependencies)
}

/// The entry `key` (named `name`) of component `id`'s dependencies: a
/// local component, whose `export` may only satisfy an interface-level name.
fn parse_local(id: &str, key: &str, name: &DependencyName, value: toml::Value) -> Result<RawLocal> {
    let local = match &value {
        toml::Value::Table(t) if t.contains_key("path") => RawLocal::deserialize(value)
            .with_context(|| format!("component {id}: dependency {key:?}"))?,
        _ => bail!(
            "component {id}: dependency {key:?}: lockd composes only local components \
             (`{{ path = \"...\" }}`), not registry packages, URLs or other components"
        ),
    };
    let package_level = matches!(
        name,
        DependencyName::Package {
            interface: None,
            ..
        }
    );
    if local.export.is_some() && package_level {
        // Spin's message (ensure_package_names_no_export).
        bail!(
            "component {id}: using an export to satisfy the package dependency {key:?} \
             is not currently permitted"
        );
    }
    Ok(local)
}

/// What dependency `key` of component `id` inherits: everything with
/// `dependencies_inherit_configuration = true` (`inherit_all`) or its own
/// `inherit_configuration = true`, the sets its own list names, else
/// nothing.
fn inherit_of(
    id: &str,
    key: &str,
    inherit_all: Option<bool>,
    own: Option<RawInherit>,
) -> Result<Inherit> {
    Ok(match (inherit_all, own) {
        (Some(true), _) => Inherit::All,
        (_, Some(RawInherit::All(true))) => Inherit::All,
        (_, Some(RawInherit::Some(sets))) => {
            for set in &sets {
                if !CONFIGURATION_SETS.contains(&set.as_str()) {
                    bail!(
                        "component {id}: dependency {key:?}: inherit_configuration names \
                         {set:?}, which is not a configuration set (one of {})",
                        CONFIGURATION_SETS.join(", ")
                    );
                }
            }
            Inherit::Only(sets)
        }
        _ => Inherit::Only(Vec::new()),
    })
}

/// Two names of one package must differ in interface or in compatible
/// version (Spin's `ensure_disjoint`).
fn check_disjoint(id: &str, dependencies: &[Dependency]) -> Result<()> {
    for (i, this) in dependencies.iter().enumerate() {
        for other in &dependencies[i + 1..] {
            let (
                DependencyName::Package {
                    package: p1,
                    interface: i1,
                    version: v1,
                },
                DependencyName::Package {
                    package: p2,
                    interface: i2,
                    version: v2,
                },
            ) = (&this.name, &other.name)
            else {
                continue;
            };
            if p1 != p2 {
                continue;
            }
            if let (Some(v1), Some(v2)) = (v1, v2) {
                if compatible_version(v1) != compatible_version(v2) {
                    continue;
                }
            }
            if let (Some(i1), Some(i2)) = (i1, i2) {
                if i1 != i2 {
                    continue;
                }
            }
            bail!(
                "component {id}: dependency \"{}\" conflicts with \"{}\"",
                this.name,
                other.name
            );
        }
    }
    Ok(())
}

/// The part of a version that decides compatibility (semver: the major, or
/// the minor under 1.0, or the patch under 0.1).
fn compatible_version(v: &semver::Version) -> semver::Version {
    let mut v = v.clone();
    v.build = semver::BuildMetadata::EMPTY;
    if !v.pre.is_empty() {
        return v;
    }
    if v.major > 0 {
        v.minor = 0;
        v.patch = 0;
    } else if v.minor > 0 {
        v.patch = 0;
    }
    v
}

/// Composes component `id` (`app`, its bytes) with its dependencies, as
/// `spin up` does before it runs it. Errors read as Spin's.
pub fn compose(id: &str, app: &[u8], dependencies: &[Dependency]) -> Result<Vec<u8>> {
    compose_inner(id, app, dependencies)
        .with_context(|| format!("failed to resolve dependencies for component {id:?}"))
}

fn compose_inner(id: &str, app: &[u8], dependencies: &[Dependency]) -> Result<Vec<u8>> {
    let mut graph = CompositionGraph::new();
    let (app_world, app_node) = register(&mut graph, id, app.to_vec())?;
    let mappings = register_matching(&mut graph, id, app_world, dependencies)?;
    let arguments = satisfy_imports(&mut graph, app_world, mappings)?;
    for (import, node) in arguments {
        graph
            .set_instantiation_argument(app_node, &import, node)
            .map_err(|e| anyhow!("{e:#}"))?;
    }
    let exports: Vec<String> = graph.types()[app_world].exports.keys().cloned().collect();
    for export in exports {
        let node = graph
            .alias_instance_export(app_node, &export)
            .map_err(|e| anyhow!("{e:#}"))?;
        graph.export(node, &export).map_err(|e| anyhow!("{e:#}"))?;
    }
    crate::compose::encode_checked(&graph, "lockd up")
}

/// Registers every dependency in `graph` and maps each import of the app
/// (`app_world`) it matches to it; an import two dependencies match is a
/// conflict, as on Spin.
fn register_matching(
    graph: &mut CompositionGraph,
    id: &str,
    app_world: WorldId,
    dependencies: &[Dependency],
) -> Result<BTreeMap<String, Registered>> {
    let imports: Vec<String> = graph.types()[app_world].imports.keys().cloned().collect();
    // Spin keeps a component's dependencies in a map ordered by name, and
    // stops at the first that fails: the same order gives the same refusal.
    let mut ordered: Vec<&Dependency> = dependencies.iter().collect();
    ordered.sort_by(|a, b| a.name.spin_order().cmp(&b.name.spin_order()));
    // Import name -> the dependencies matching it, each registered once.
    let mut mappings: BTreeMap<String, Vec<Registered>> = BTreeMap::new();
    for dependency in ordered {
        let matched: Vec<&String> = imports
            .iter()
            .filter(|import| dependency.name.matches_import(import))
            .collect();
        if matched.is_empty() {
            bail!(
                "dependency '{}' doesn't match any imports of component '{id}'",
                dependency.name
            );
        }
        let registered = register_dependency(graph, dependency)
            .context("an error occurred when preparing dependencies")?;
        for import in matched {
            mappings
                .entry(import.clone())
                .or_default()
                .push(registered.clone());
        }
    }
    let conflicts: Vec<String> = mappings
        .iter()
        .filter(|(_, deps)| deps.len() > 1)
        .map(|(import, deps)| {
            let names: Vec<String> = deps.iter().map(|d| d.name.to_string()).collect();
            format!(
                "import '{import}' satisfied by dependencies: '{}'",
                names.join(", ")
            )
        })
        .collect();
    if !conflicts.is_empty() {
        bail!(
            "component '{id}' has dependency conflicts: {}",
            conflicts.join("; ")
        );
    }
    Ok(mappings
        .into_iter()
        .filter_map(|(import, mut deps)| Some((import, deps.pop()?)))
        .collect())
}

/// For each import of the app (`app_world`) and the dependency satisfying
/// it, the node of the dependency's export of the same name (or of its
/// `export`), checked to be of a type the import accepts.
fn satisfy_imports(
    graph: &mut CompositionGraph,
    app_world: WorldId,
    mappings: BTreeMap<String, Registered>,
) -> Result<Vec<(String, NodeId)>> {
    let mut cache = Default::default();
    let mut checker = SubtypeChecker::new(&mut cache);
    let mut arguments = Vec::new();
    for (import, dep) in mappings {
        let export = dep.export.clone().unwrap_or_else(|| import.clone());
        let types = graph.types();
        let Some(export_ty) = types[dep.world].exports.get(&export) else {
            bail!(
                "dependency '{}' doesn't export '{export}' to satisfy import '{import}'",
                dep.name
            );
        };
        let import_ty = types[app_world].imports[&import];
        checker
            .is_subtype(*export_ty, types, import_ty, types)
            .with_context(|| {
                format!(
                    "dependency '{}' exports '{export}' which is not compatible with import \
                     '{import}'",
                    dep.name
                )
            })
            .context("an error occurred when preparing dependencies")?;
        let export_node = graph
            .alias_instance_export(dep.node, &export)
            .map_err(|e| anyhow!("{e:#}"))?;
        arguments.push((import, export_node));
    }
    Ok(arguments)
}

#[derive(Clone)]
struct Registered {
    name: DependencyName,
    world: WorldId,
    node: NodeId,
    export: Option<String>,
}

fn register_dependency(graph: &mut CompositionGraph, dep: &Dependency) -> Result<Registered> {
    let bytes = std::fs::read(&dep.path).with_context(|| {
        format!(
            "failed to read component source from disk at path \"{}\"",
            dep.path.display()
        )
    })?;
    crate::compose::check_component(&dep.path.display().to_string(), &bytes)?;
    let bytes = withhold::apply(&dep.name.to_string(), bytes, &dep.inherit)?;
    let (world, node) = register(graph, dep.name.graph_key(), bytes)?;
    Ok(Registered {
        name: dep.name.clone(),
        world,
        node,
        export: dep.export.clone(),
    })
}

/// Registers `bytes` as package `name` and instantiates it once.
fn register(graph: &mut CompositionGraph, name: &str, bytes: Vec<u8>) -> Result<(WorldId, NodeId)> {
    let package = Package::from_bytes(name, None, bytes, graph.types_mut())
        .map_err(|e| anyhow!("{name} is not a valid component: {e:#}"))?;
    let world = package.ty();
    let package = graph.register_package(package)?;
    Ok((world, graph.instantiate(package)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> DependencyName {
        s.parse().unwrap()
    }

    /// Spin's own table (`spin_compose`'s `test_matches_import`).
    #[test]
    fn names_match_imports_as_spin_matches_them() {
        for (dep, imports) in [
            ("foo:bar/baz@0.1.0", vec!["foo:bar/baz@0.1.0"]),
            ("foo:bar/baz", vec!["foo:bar/baz@0.1.0", "foo:bar/baz"]),
            ("foo:bar", vec!["foo:bar/baz@0.1.0", "foo:bar/baz"]),
            ("foo:bar@0.1.0", vec!["foo:bar/baz@0.1.0"]),
            ("foo-bar", vec!["foo-bar"]),
        ] {
            for import in imports {
                assert!(name(dep).matches_import(import), "{dep} !~ {import}");
            }
        }
        for (dep, imports) in [
            (
                "foo:bar/baz@0.1.0",
                vec!["foo:bar/baz", "foo:bar/baz@0.1.1"],
            ),
            ("foo:bar/baz", vec!["foo:bar/bub", "foo:bar/bub@0.1.0"]),
            ("foo:bar", vec!["foo:bub/bib"]),
            ("foo:bar@0.1.0", vec!["foo:bar/baz", "foo:bar/baz@0.2.0"]),
            ("foo:bar/baz", vec!["foo:bar/baz-bub", "foo-bar"]),
        ] {
            for import in imports {
                assert!(!name(dep).matches_import(import), "{dep} ~ {import}");
            }
        }
    }

    #[test]
    fn names_round_trip_and_bad_names_are_refused() {
        for s in [
            "lockd:lock",
            "lockd:lock@0.1.0",
            "lockd:lock/locks",
            "a:b/c@1.2.3-rc.1",
            "my-dep",
        ] {
            assert_eq!(name(s).to_string(), s);
        }
        for s in [
            "lock_d",
            "Lockd:lock",
            "lockd:lock@x",
            ":lock",
            "lockd:lock/",
            "a b",
        ] {
            assert!(s.parse::<DependencyName>().is_err(), "{s} accepted");
        }
    }

    fn parse_toml(text: &str, inherit_all: Option<bool>) -> Result<Vec<Dependency>> {
        let table: BTreeMap<String, toml::Value> = toml::from_str(text).unwrap();
        parse("app", table, inherit_all, Path::new("/m"))
    }

    #[test]
    fn inherit_settings_follow_spin() {
        let deps = parse_toml(r#""lockd:lock" = { path = "c.wasm" }"#, Some(true)).unwrap();
        assert_eq!(deps[0].inherit, Inherit::All);
        assert_eq!(deps[0].path, Path::new("/m/c.wasm"));
        let deps = parse_toml(r#""lockd:lock" = { path = "c.wasm" }"#, None).unwrap();
        assert_eq!(deps[0].inherit, Inherit::Only(vec![]));
        let deps = parse_toml(r#""lockd:lock" = { path = "c.wasm" }"#, Some(false)).unwrap();
        assert_eq!(deps[0].inherit, Inherit::Only(vec![]));
        let deps = parse_toml(
            r#""lockd:lock" = { path = "c.wasm", inherit_configuration = ["environment"] }"#,
            None,
        )
        .unwrap();
        assert!(deps[0].inherit.allows("environment"));
        assert!(!deps[0].inherit.allows("allowed_outbound_hosts"));
        let deps = parse_toml(
            r#""lockd:lock" = { path = "c.wasm", inherit_configuration = true }"#,
            None,
        )
        .unwrap();
        assert_eq!(deps[0].inherit, Inherit::All);

        let both = parse_toml(
            r#""lockd:lock" = { path = "c.wasm", inherit_configuration = true }"#,
            Some(true),
        )
        .unwrap_err();
        assert!(
            format!("{both:#}").contains("mutually exclusive"),
            "{both:#}"
        );
        let unknown = parse_toml(
            r#""lockd:lock" = { path = "c.wasm", inherit_configuration = ["enviroment"] }"#,
            None,
        )
        .unwrap_err();
        assert!(
            format!("{unknown:#}").contains("\"enviroment\""),
            "{unknown:#}"
        );
    }

    #[test]
    fn refused_shapes() {
        for (text, needle) in [
            (r#""lockd:lock" = "0.1.0""#, "only local components"),
            (r#""lockd:lock" = { url = "https://x", digest = "sha256:0" }"#, "only local"),
            (r#""lockd:lock" = { component = "other" }"#, "only local"),
            (r#""lockd:lock" = { path = "c.wasm", export = "x" }"#, "not currently permitted"),
            (r#""lockd:lock" = { path = "c.wasm", colour = "red" }"#, "colour"),
            (
                "\"lockd:lock\" = { path = \"c.wasm\" }\n\"lockd:lock/locks\" = { path = \"c.wasm\" }",
                "conflicts with",
            ),
        ] {
            let err = parse_toml(text, None).unwrap_err();
            assert!(format!("{err:#}").contains(needle), "{text}: {err:#}");
        }
        // Three interfaces of one package are disjoint names: the manifest
        // reads, and composition refuses them
        // (host/lockd/tests/spin_dependencies.rs).
        let three = "\"lockd:lock/locks\" = { path = \"c.wasm\" }\n\
                     \"lockd:lock/guards\" = { path = \"c.wasm\" }\n\
                     \"lockd:lock/leases\" = { path = \"c.wasm\" }";
        assert_eq!(parse_toml(three, Some(true)).unwrap().len(), 3);
        // Versions of one package that are not compatible are disjoint too.
        let versions = "\"lockd:lock@0.1.0\" = { path = \"c.wasm\" }\n\
                        \"lockd:lock@0.2.0\" = { path = \"c.wasm\" }";
        assert_eq!(parse_toml(versions, None).unwrap().len(), 2);
    }
}
