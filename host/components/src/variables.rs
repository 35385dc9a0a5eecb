//! Spin's variables for the components `lockd up` serves
//! (`fermyon:spin/variables@2.0.0` for spin-sdk 5.2,
//! `spin:variables/variables@3.0.0` for spin-sdk 7.0).
//!
//! - The app declares its variables in spin.toml's `[variables]`, each with
//!   a `default` or `required = true`; a component names the ones it reads
//!   in `[component.<id>.variables]`, as templates over the app's variables
//!   (`"{{ name }}"`, with literal text around, as Spin allows).
//! - A variable's value comes from the environment
//!   (`SPIN_VARIABLE_<NAME>`, the name upper-cased, as Spin's environment
//!   provider reads it), else lockd.toml's `[variables]`, else its default.
//!   A required variable with none refuses the app at start, naming it.
//! - Every component's values are resolved once, at start. `get` of a name
//!   that is not a valid variable name answers `invalid-name`; of a name
//!   the component does not declare, `undefined`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use anyhow::{bail, Context as _};
use wasmtime::component::{Accessor, HasData, Linker};

use crate::manifest::{is_valid_variable_name, Manifest, VariableSpec};
use crate::spin_wit::{v2, v3};

/// The environment variable Spin's environment provider reads for `name`.
pub fn env_name(name: &str) -> String {
    format!("SPIN_VARIABLE_{}", name.to_ascii_uppercase())
}

/// Where values come from besides the manifest's defaults.
pub struct Providers<'a> {
    /// The environment (`SPIN_VARIABLE_<NAME>`), read first.
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// lockd.toml's `[variables]`.
    pub config: &'a BTreeMap<String, String>,
}

impl std::fmt::Debug for Providers<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Names only: values may be secrets.
        f.debug_struct("Providers")
            .field("config", &self.config.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// The values of every app variable, from `providers` or the default; a
/// required variable with no value is refused, naming it.
pub fn resolve_app(
    declared: &BTreeMap<String, VariableSpec>,
    providers: &Providers<'_>,
) -> anyhow::Result<BTreeMap<String, String>> {
    let mut values = BTreeMap::new();
    for (name, spec) in declared {
        let value = (providers.env)(&env_name(name))
            .or_else(|| providers.config.get(name).cloned())
            .or_else(|| spec.default.clone());
        match value {
            Some(value) => {
                values.insert(name.clone(), value);
            }
            None if spec.required => bail!(
                "variable {name:?} is required and has no value: set {} in the environment, \
                 or {name} in lockd.toml's [variables]",
                env_name(name)
            ),
            None => {}
        }
    }
    Ok(values)
}

/// `template` with every `{{ name }}` replaced by that app variable's
/// value; an unknown name or an unclosed `{{` is an error.
pub fn expand(template: &str, values: &BTreeMap<String, String>) -> anyhow::Result<String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            bail!("template {template:?} has a `{{{{` without `}}}}`");
        };
        let name = after[..close].trim();
        let Some(value) = values.get(name) else {
            bail!("template {template:?} names {name:?}, which [variables] does not declare (or which has no value)");
        };
        out.push_str(value);
        rest = &after[close + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Each component's variables, resolved: component id to name to value.
pub fn resolve(
    manifest: &Manifest,
    providers: &Providers<'_>,
) -> anyhow::Result<HashMap<String, Arc<BTreeMap<String, String>>>> {
    let app = resolve_app(&manifest.variables, providers)?;
    let mut resolved = HashMap::new();
    for (id, spec) in &manifest.components {
        let mut values = BTreeMap::new();
        for (name, template) in &spec.variables {
            let value = expand(template, &app)
                .with_context(|| format!("component {id}: variable {name}"))?;
            values.insert(name.clone(), value);
        }
        resolved.insert(id.clone(), Arc::new(values));
    }
    Ok(resolved)
}

/// One component's resolved variables, as its instances see them.
#[derive(Clone, Debug, Default)]
pub(crate) struct VariablesCtx {
    pub(crate) values: Arc<BTreeMap<String, String>>,
}

/// Implemented by a store's data to hand out its [`VariablesCtx`].
pub(crate) trait VariablesView: Send {
    fn variables_ctx(&mut self) -> &mut VariablesCtx;
}

/// What the host function sees.
struct Lookup<'a>(&'a VariablesCtx);

struct HasVariables;

impl HasData for HasVariables {
    type Data<'a> = Lookup<'a>;
}

/// Adds `fermyon:spin/variables@2.0.0` and
/// `spin:variables/variables@3.0.0` to `linker`.
pub(crate) fn add_to_linker<T: VariablesView + 'static>(
    linker: &mut Linker<T>,
) -> wasmtime::Result<()> {
    v2::variables::add_to_linker::<T, HasVariables>(linker, lookup::<T>)?;
    v3::variables::add_to_linker::<T, HasVariables>(linker, lookup::<T>)
}

fn lookup<T: VariablesView>(data: &mut T) -> Lookup<'_> {
    Lookup(data.variables_ctx())
}

/// Why `get` refused, in no version's words yet.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Refused {
    InvalidName(String),
    Undefined(String),
}

impl VariablesCtx {
    /// What `get(name)` answers.
    fn lookup(&self, name: &str) -> Result<String, Refused> {
        if !is_valid_variable_name(name) {
            return Err(Refused::InvalidName(format!(
                "{name:?} is not a valid variable name (lowercase letters, digits and single \
                 underscores, starting with a letter)"
            )));
        }
        self.values
            .get(name)
            .cloned()
            .ok_or_else(|| Refused::Undefined(format!("no variable for {name:?}")))
    }
}

impl v2::variables::Host for Lookup<'_> {
    async fn get(
        &mut self,
        name: String,
    ) -> wasmtime::Result<Result<String, v2::variables::Error>> {
        use v2::variables::Error;
        Ok(self.0.lookup(&name).map_err(|refused| match refused {
            Refused::InvalidName(why) => Error::InvalidName(why),
            Refused::Undefined(why) => Error::Undefined(why),
        }))
    }
}

impl v3::variables::Host for Lookup<'_> {}

impl<U> v3::variables::HostWithStore<U> for HasVariables {
    async fn get(
        accessor: &Accessor<U, Self>,
        name: String,
    ) -> wasmtime::Result<Result<String, v3::variables::Error>> {
        use v3::variables::Error;
        let answer = accessor.with(|mut access| access.get().0.lookup(&name));
        Ok(answer.map_err(|refused| match refused {
            Refused::InvalidName(why) => Error::InvalidName(why),
            Refused::Undefined(why) => Error::Undefined(why),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(default: Option<&str>, required: bool) -> VariableSpec {
        VariableSpec {
            default: default.map(str::to_string),
            required,
        }
    }

    #[test]
    fn names_follow_spins_rule() {
        for good in ["a", "counter_step", "a1_b2"] {
            assert!(is_valid_variable_name(good), "{good}");
        }
        for bad in ["", "A", "1a", "_a", "a_", "a__b", "a-b", "a.b", "é"] {
            assert!(!is_valid_variable_name(bad), "{bad}");
        }
        assert_eq!(env_name("counter_step"), "SPIN_VARIABLE_COUNTER_STEP");
    }

    #[test]
    fn environment_then_lockd_toml_then_default_and_required_refused() {
        let declared = BTreeMap::from([
            ("a".to_string(), spec(Some("da"), false)),
            ("b".to_string(), spec(Some("db"), false)),
            ("c".to_string(), spec(Some("dc"), false)),
            ("r".to_string(), spec(None, true)),
        ]);
        let config = BTreeMap::from([
            ("a".to_string(), "ta".to_string()),
            ("b".to_string(), "tb".to_string()),
            ("r".to_string(), "tr".to_string()),
        ]);
        let env = |k: &str| (k == "SPIN_VARIABLE_A").then(|| "ea".to_string());
        let providers = Providers {
            env: &env,
            config: &config,
        };
        let values = resolve_app(&declared, &providers).unwrap();
        assert_eq!(values["a"], "ea");
        assert_eq!(values["b"], "tb");
        assert_eq!(values["c"], "dc");
        let empty = BTreeMap::new();
        let missing = resolve_app(
            &declared,
            &Providers {
                env: &env,
                config: &empty,
            },
        )
        .unwrap_err();
        assert!(
            missing.to_string().contains("\"r\" is required"),
            "{missing}"
        );
    }

    #[test]
    fn templates_expand_with_literal_text() {
        let values = BTreeMap::from([
            ("host".to_string(), "example.com".to_string()),
            ("port".to_string(), "8080".to_string()),
        ]);
        assert_eq!(
            expand("https://{{ host }}:{{port}}/x", &values).unwrap(),
            "https://example.com:8080/x"
        );
        assert_eq!(expand("plain", &values).unwrap(), "plain");
        assert!(expand("{{ nope }}", &values).is_err());
        assert!(expand("{{ host", &values).is_err());
    }

    #[test]
    fn get_answers_invalid_name_then_undefined() {
        let ctx = VariablesCtx {
            values: Arc::new(BTreeMap::from([("step".to_string(), "5".to_string())])),
        };
        assert_eq!(ctx.lookup("step").unwrap(), "5");
        assert!(matches!(ctx.lookup("Step"), Err(Refused::InvalidName(_))));
        assert!(matches!(ctx.lookup("other"), Err(Refused::Undefined(_))));
    }
}
