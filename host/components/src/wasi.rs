//! The one rule that tells a WASI 0.3 component from a WASI 0.2 one. Every
//! place that must know asks it: which engine runs a command and which
//! hosts its linker gets and which `wasi:cli/run` it calls ([`crate::run`]),
//! and how an HTTP component is served ([`crate::serve`]).
//!
//! A component is WASI 0.3 if any of its imports or exports is a WASI 0.3
//! interface (`wasi:…@0.3.x`) or version 0.2 of the lock capability
//! (`lockd:lock/…@0.2.x`, whose `async func`s only an engine with
//! component-model async runs). Any other component is WASI 0.2.

use anyhow::Context as _;
use wasmtime::component::Component;
use wasmtime::Engine;

/// The WASI generation of a component.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wasi {
    /// WASI 0.2 (with `lockd:lock@0.1.x`): synchronous calls only.
    P2,
    /// WASI 0.3 or `lockd:lock@0.2.x`: `async func`s, run with
    /// component-model async.
    P3,
}

impl Wasi {
    /// The rule, over the names of a component's imports and exports.
    pub fn of_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Wasi {
        if names.into_iter().any(is_p3_interface) {
            Wasi::P3
        } else {
            Wasi::P2
        }
    }

    /// The generation of a compiled component.
    pub fn of_component(component: &Component, engine: &Engine) -> Wasi {
        let ty = component.component_type();
        let imports = ty.imports(engine).map(|(name, _)| name);
        let exports = ty.exports(engine).map(|(name, _)| name);
        Wasi::of_names(imports.chain(exports))
    }

    /// The generation of the component in `bytes`, before it is compiled
    /// (which engine compiles it depends on the answer).
    pub fn of_bytes(bytes: &[u8]) -> anyhow::Result<Wasi> {
        crate::compose::check_component("the file", bytes)?;
        let mut types = wac_graph::types::Types::default();
        let package =
            wac_graph::types::Package::from_bytes("command", None, bytes.to_vec(), &mut types)
                .context("reading the component's imports")?;
        let world = &types[package.ty()];
        let names = world.imports.keys().chain(world.exports.keys());
        Ok(Wasi::of_names(names.map(String::as_str)))
    }
}

/// `wasi:...@0.3.x` or `lockd:lock/...@0.2.x`.
fn is_p3_interface(name: &str) -> bool {
    let version = name.rsplit_once('@').map_or("", |(_, version)| version);
    (name.starts_with("lockd:lock/") && version.starts_with("0.2."))
        || (name.starts_with("wasi:") && version.starts_with("0.3."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_rule_for_imports_and_exports() {
        let p2 = [
            "wasi:cli/run@0.2.6",
            "wasi:http/incoming-handler@0.2.4",
            "lockd:lock/locks@0.1.0",
            "lockd:lock/types",
        ];
        assert_eq!(Wasi::of_names(p2), Wasi::P2);
        for p3 in [
            "wasi:cli/run@0.3.0",
            "wasi:http/handler@0.3.0-rc-2025-09-16",
            "wasi:clocks/monotonic-clock@0.3.0",
            "lockd:lock/locks@0.2.0",
        ] {
            assert_eq!(Wasi::of_names(p2.into_iter().chain([p3])), Wasi::P3, "{p3}");
        }
        assert_eq!(Wasi::of_names(["lockd:lock/locks@0.3.0"]), Wasi::P2);
        assert_eq!(Wasi::of_names(["wasi:cli/run@0.30.0"]), Wasi::P2);
    }
}
