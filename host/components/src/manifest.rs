//! The subset of Spin's manifest (`spin_manifest_version = 2`) that lockd
//! serves: the application, its `[variables]`, HTTP triggers, and
//! components with a local `source`, `allowed_outbound_hosts`,
//! `environment`, `key_value_stores`, `variables`, local `dependencies` and
//! a `build` command (run by [`build_components`]). Anything lockd
//! cannot honour is an error at startup, not a surprise at request time.

pub mod build_components;
pub mod dependencies;
mod withhold;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use serde::Deserialize;

/// A parsed manifest with paths resolved against its directory.
#[derive(Clone, Debug)]
pub struct Manifest {
    /// The directory holding the manifest: sources and build commands are
    /// relative to it.
    pub dir: PathBuf,
    /// `[application] name`.
    pub name: String,
    /// `[[trigger.http]]`, in file order.
    pub routes: Vec<Route>,
    /// `[component.<id>]`, by id.
    pub components: BTreeMap<String, ComponentSpec>,
    /// `[variables]`: the app's variables, by name.
    pub variables: BTreeMap<String, VariableSpec>,
}

/// One `[variables]` entry: a default, or required (not both).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VariableSpec {
    /// `default`.
    pub default: Option<String>,
    /// `required = true`: the app does not start without a value.
    pub required: bool,
}

/// One `[[trigger.http]]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The route as written: `/exact` or `/prefix/...`.
    pub pattern: String,
    /// The component serving it.
    pub component: String,
}

/// One `[component.<id>]`.
#[derive(Clone, Debug)]
pub struct ComponentSpec {
    /// The `.wasm` file, resolved.
    pub source: PathBuf,
    /// Hosts the component may send HTTP requests to (Spin syntax).
    pub allowed_outbound_hosts: Vec<String>,
    /// `environment`: the variables the component reads through
    /// `wasi:cli/environment`.
    pub environment: BTreeMap<String, String>,
    /// `key_value_stores`: the labels of the key-value stores it may open.
    pub key_value_stores: Vec<String>,
    /// `[component.<id>.variables]`: its variables, each a template over
    /// the app's (`"{{ name }}"`).
    pub variables: BTreeMap<String, String>,
    /// `[component.<id>.dependencies]`, composed into the component when it
    /// is loaded.
    pub dependencies: Vec<dependencies::Dependency>,
    /// `[component.<id>.build]`.
    pub build: Option<BuildSpec>,
}

/// `[component.<id>.build]`.
#[derive(Clone, Debug, Deserialize)]
pub struct BuildSpec {
    /// A shell command.
    pub command: String,
    /// Where to run it, relative to the manifest (default: its directory).
    pub workdir: Option<String>,
}

#[derive(Deserialize)]
struct RawManifest {
    spin_manifest_version: toml::Value,
    application: RawApplication,
    #[serde(default)]
    trigger: RawTriggers,
    #[serde(default)]
    component: BTreeMap<String, RawComponent>,
    #[serde(default)]
    variables: BTreeMap<String, RawVariable>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVariable {
    default: Option<String>,
    #[serde(default)]
    required: bool,
    /// Spin keeps a secret's value out of its logs; lockd logs no values,
    /// so it is accepted and changes nothing.
    #[serde(default, rename = "secret")]
    _secret: bool,
}

#[derive(Deserialize)]
struct RawApplication {
    name: String,
}

#[derive(Default, Deserialize)]
struct RawTriggers {
    #[serde(default)]
    http: Vec<RawHttpTrigger>,
}

#[derive(Deserialize)]
struct RawHttpTrigger {
    route: toml::Value,
    component: toml::Value,
}

#[derive(Deserialize)]
struct RawComponent {
    source: toml::Value,
    #[serde(default)]
    allowed_outbound_hosts: Vec<String>,
    #[serde(default)]
    environment: BTreeMap<String, String>,
    #[serde(default)]
    key_value_stores: Vec<String>,
    #[serde(default)]
    variables: BTreeMap<String, String>,
    // Spin capabilities lockd does not serve: refused when set, so that an
    // app counting on them fails at start, not at its first request.
    #[serde(default)]
    files: Vec<toml::Value>,
    #[serde(default)]
    sqlite_databases: Vec<toml::Value>,
    #[serde(default)]
    ai_models: Vec<toml::Value>,
    dependencies_inherit_configuration: Option<bool>,
    #[serde(default)]
    dependencies: BTreeMap<String, toml::Value>,
    build: Option<BuildSpec>,
}

impl Manifest {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> anyhow::Result<Manifest> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading manifest {}", path.display()))?;
        let raw: RawManifest = toml::from_str(&text)
            .with_context(|| format!("parsing manifest {}", path.display()))?;
        if raw.spin_manifest_version.as_integer() != Some(2) {
            bail!(
                "{}: only spin_manifest_version = 2 is supported",
                path.display()
            );
        }
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let mut components = BTreeMap::new();
        for (id, c) in raw.component {
            let Some(source) = c.source.as_str() else {
                bail!("component {id}: only a local file `source` is supported (not a URL or registry reference)");
            };
            let dependencies = dependencies::parse(
                &id,
                c.dependencies,
                c.dependencies_inherit_configuration,
                &dir,
            )?;
            for (set, listed) in [
                ("files", c.files.len()),
                ("sqlite_databases", c.sqlite_databases.len()),
                ("ai_models", c.ai_models.len()),
            ] {
                if listed > 0 {
                    bail!(
                        "component {id}: `{set}` is a Spin capability lockd does not serve \
                         (docs/guests.md#spin-key-value lists what it serves)"
                    );
                }
            }
            if let Some(bad) = c.variables.keys().find(|n| !is_valid_variable_name(n)) {
                bail!("component {id}: {bad:?} is not a valid variable name (lowercase letters, digits and single underscores, starting with a letter)");
            }
            components.insert(
                id,
                ComponentSpec {
                    source: dir.join(source),
                    allowed_outbound_hosts: c.allowed_outbound_hosts,
                    environment: c.environment,
                    key_value_stores: c.key_value_stores,
                    variables: c.variables,
                    dependencies,
                    build: c.build,
                },
            );
        }
        let mut routes = Vec::new();
        for t in raw.trigger.http {
            let Some(component) = t.component.as_str() else {
                bail!("an http trigger must name its component by id (inline components are not supported)");
            };
            let Some(pattern) = t.route.as_str() else {
                // `route = { private = true }`: not reachable over HTTP.
                continue;
            };
            if !components.contains_key(component) {
                bail!("route {pattern} names component {component:?}, which the manifest does not define");
            }
            if !pattern.starts_with('/') {
                bail!("route {pattern:?} must start with '/'");
            }
            let prefix = pattern.trim_end_matches("/...");
            if lockd_server::serve::is_own_path(prefix) {
                bail!("route {pattern} collides with lockd's own routes (/v1/..., /metrics, /healthz, /openapi.json, /ui/)");
            }
            routes.push(Route {
                pattern: pattern.to_string(),
                component: component.to_string(),
            });
        }
        Ok(Manifest {
            dir,
            name: raw.application.name,
            routes,
            components,
            variables: app_variables(raw.variables)?,
        })
    }

    /// The component serving `path`: an exact route wins over a wildcard, and
    /// a longer wildcard prefix over a shorter one (Spin's rule).
    pub fn route(&self, path: &str) -> Option<&Route> {
        let mut best: Option<(&Route, usize)> = None;
        for route in &self.routes {
            let score = match route.pattern.strip_suffix("/...") {
                None if route.pattern == path => usize::MAX,
                None => continue,
                Some(prefix) => {
                    let matches = path == prefix
                        || (path.starts_with(prefix)
                            && path.as_bytes().get(prefix.len()) == Some(&b'/'))
                        || prefix.is_empty();
                    if !matches {
                        continue;
                    }
                    prefix.len()
                }
            };
            if best.is_none_or(|(_, s)| score > s) {
                best = Some((route, score));
            }
        }
        best.map(|(r, _)| r)
    }
}

/// Whether `name` is a valid variable name, as Spin's are: lowercase ASCII
/// letters, digits and single underscores, starting with a letter and not
/// ending with an underscore.
pub fn is_valid_variable_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !name.ends_with('_')
        && !name.contains("__")
}

/// `[variables]`, checked: valid names, a default or `required`, not both.
fn app_variables(
    raw: BTreeMap<String, RawVariable>,
) -> anyhow::Result<BTreeMap<String, VariableSpec>> {
    let mut variables = BTreeMap::new();
    for (name, v) in raw {
        if !is_valid_variable_name(&name) {
            bail!("[variables] {name:?} is not a valid variable name (lowercase letters, digits and single underscores, starting with a letter)");
        }
        if v.required && v.default.is_some() {
            bail!("[variables] {name}: a variable is either required or has a default, not both");
        }
        variables.insert(
            name,
            VariableSpec {
                default: v.default,
                required: v.required,
            },
        );
    }
    Ok(variables)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Loads `toml_text` from a fresh directory, which lives as long as the
    /// returned guard (build commands run in it).
    fn manifest_in_dir(toml_text: &str) -> (tempfile::TempDir, anyhow::Result<Manifest>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spin.toml");
        std::fs::write(&path, toml_text).unwrap();
        let manifest = Manifest::load(&path);
        (dir, manifest)
    }

    fn manifest(toml_text: &str) -> anyhow::Result<Manifest> {
        manifest_in_dir(toml_text).1
    }

    const APP: &str = r#"
        spin_manifest_version = 2
        [application]
        name = "t"
        [[trigger.http]]
        route = "/jobs/..."
        component = "jobs"
        [[trigger.http]]
        route = "/jobs/special"
        component = "special"
        [[trigger.http]]
        route = "/..."
        component = "fallback"
        [[trigger.http]]
        route = { private = true }
        component = "jobs"
        [component.jobs]
        source = "a.wasm"
        [component.jobs.build]
        command = "true"
        [component.special]
        source = "b.wasm"
        [component.fallback]
        source = "c.wasm"
    "#;

    #[test]
    fn routes_prefer_exact_then_longest_prefix() {
        let m = manifest(APP).unwrap();
        let at = |p: &str| m.route(p).map(|r| r.component.as_str());
        assert_eq!(at("/jobs/1"), Some("jobs"));
        assert_eq!(at("/jobs"), Some("jobs"));
        assert_eq!(at("/jobs/special"), Some("special"));
        assert_eq!(at("/jobsx"), Some("fallback"));
        assert_eq!(at("/"), Some("fallback"));
        // So `/` is the app's here, and does not lead to the web page.
        assert!(m.route("/").is_some());
        assert_eq!(m.routes.len(), 3);
        assert!(m.components["jobs"].source.ends_with("a.wasm"));
    }

    #[test]
    fn rejects_what_it_cannot_serve() {
        let bad = [
            APP.replace("spin_manifest_version = 2", "spin_manifest_version = 1"),
            APP.replace(
                r#"source = "a.wasm""#,
                r#"source = { url = "https://x", digest = "y" }"#,
            ),
            APP.replace(r#"component = "special""#, r#"component = "missing""#),
            APP.replace(r#"route = "/jobs/special""#, r#"route = "/v1/locks/...""#),
            APP.replace(r#"route = "/jobs/special""#, r#"route = "/metrics""#),
            APP.replace(r#"route = "/jobs/special""#, r#"route = "/ui/...""#),
            APP.replace(r#"route = "/jobs/special""#, r#"route = "/ui""#),
            // Spin capabilities lockd does not serve.
            APP.replace(
                r#"source = "b.wasm""#,
                "source = \"b.wasm\"\nfiles = [\"static/*\"]",
            ),
            APP.replace(
                r#"source = "b.wasm""#,
                "source = \"b.wasm\"\nsqlite_databases = [\"default\"]",
            ),
            APP.replace(
                r#"source = "b.wasm""#,
                "source = \"b.wasm\"\nai_models = [\"llama2-chat\"]",
            ),
            // Variables: a bad name, both required and a default.
            format!("{APP}\n[variables]\nBad = {{ default = \"1\" }}\n"),
            format!("{APP}\n[variables]\nx = {{ default = \"1\", required = true }}\n"),
        ];
        for text in bad {
            assert!(manifest(&text).is_err(), "accepted:\n{text}");
        }
        // Empty lists ask for nothing: accepted, as Spin's own templates
        // write them.
        let empty = APP.replace(r#"source = "b.wasm""#, "source = \"b.wasm\"\nfiles = []");
        manifest(&empty).unwrap();
    }
}
