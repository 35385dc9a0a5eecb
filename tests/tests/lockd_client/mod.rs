//! `guest/lockd-client`: the component that exports `lockd:lock@0.1.0` over
//! `wasi:http` for hosts that do not run lockd.
//!
//! Checked here by its component type: it exports every interface of
//! `lockd:lock@0.1.0` (the `imports` world's seven and `types`) with every
//! function a guest can import (the names of `rust-conformance`'s and
//! `rust-claims`' `lockd:lock` imports), and imports only WASI 0.2
//! interfaces (no `lockd:` import, no WASIp3 release candidate). Its
//! behaviour against a live server, composed into a guest, is for the
//! end-to-end tests of `lockd plug` and `tests/tests/portable.rs`.

use std::collections::BTreeSet;

use wasmtime::component::types::ComponentItem;
use wasmtime::component::Component;
use wasmtime::Engine;

/// The interfaces the client must export: every interface of the package.
const EXPORTS: [&str; 8] = [
    "lockd:lock/types@0.1.0",
    "lockd:lock/locks@0.1.0",
    "lockd:lock/guards@0.1.0",
    "lockd:lock/leases@0.1.0",
    "lockd:lock/rwlocks@0.1.0",
    "lockd:lock/semaphores@0.1.0",
    "lockd:lock/holds@0.1.0",
    "lockd:lock/elections@0.1.0",
];

/// The names of the functions and types of an imported or exported instance.
fn instance_items(engine: &Engine, item: &ComponentItem) -> BTreeSet<String> {
    let ComponentItem::ComponentInstance(instance) = item else {
        panic!("not an instance: {item:?}");
    };
    instance
        .exports(engine)
        .map(|(name, _)| name.to_string())
        .collect()
}

/// Checks that every function and resource the guest at `path` imports
/// from a `lockd:lock` interface of `version` (`"@0.1.0"`) is among
/// `exports` under the same name; answers how many interfaces it checked.
pub(crate) fn check_guest_imports(
    engine: &Engine,
    path: &str,
    version: &str,
    exports: &[(String, ComponentItem)],
) -> usize {
    let guest = Component::from_file(engine, path).unwrap();
    let mut checked = 0;
    for (name, item) in guest.component_type().imports(engine) {
        if !name.starts_with("lockd:lock/") || !name.ends_with(version) {
            continue;
        }
        let (_, exported) = exports
            .iter()
            .find(|(export, _)| export == name)
            .unwrap_or_else(|| panic!("the client does not export {name}"));
        let wanted = instance_items(engine, &item.ty);
        let offered = instance_items(engine, exported);
        assert!(
            wanted.is_subset(&offered),
            "{name}: the guest imports {wanted:?}, the client exports {offered:?}"
        );
        checked += 1;
    }
    checked
}

#[test]
pub(crate) fn lockd_client() {
    let engine = Engine::default();
    let client = Component::from_file(&engine, lockd_guest_tests::LOCKD_CLIENT).unwrap();
    let ty = client.component_type();

    let exports: Vec<(String, ComponentItem)> = ty
        .exports(&engine)
        .map(|(name, item)| (name.to_string(), item.ty))
        .collect();
    let export_names: BTreeSet<&str> = exports.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(export_names, BTreeSet::from(EXPORTS), "exports");

    let imports: Vec<String> = ty
        .imports(&engine)
        .map(|(name, _)| name.to_string())
        .collect();
    for name in &imports {
        let (interface, version) = name
            .split_once('@')
            .unwrap_or_else(|| panic!("unversioned import {name}"));
        assert!(
            interface.starts_with("wasi:") && version.starts_with("0.2.") && !version.contains('-'),
            "the client imports {name}: only WASI 0.2 releases are allowed (all imports: {imports:?})"
        );
    }
    for needed in [
        "wasi:http/outgoing-handler@",
        "wasi:http/types@",
        "wasi:cli/environment@",
        "wasi:random/random@",
    ] {
        assert!(
            imports.iter().any(|name| name.starts_with(needed)),
            "no {needed}* import in {imports:?}"
        );
    }

    // Every function and resource a guest imports from `lockd:lock` is
    // exported, under the same name.
    for (path, imported) in [
        (lockd_guest_tests::RUST_CONFORMANCE, 3),
        // types, locks, guards, rwlocks, semaphores, holds, elections.
        (lockd_guest_tests::RUST_CLAIMS, 7),
    ] {
        let checked = check_guest_imports(&engine, path, "@0.1.0", &exports);
        assert_eq!(checked, imported, "the lockd:lock imports of {path}");
    }
    let (_, guards) = exports
        .iter()
        .find(|(name, _)| name == "lockd:lock/guards@0.1.0")
        .unwrap();
    let guards = instance_items(&engine, guards);
    for method in [
        "guard",
        "[static]guard.acquire",
        "[method]guard.fencing-token",
        "[method]guard.expires-at-ms",
        "[method]guard.owner",
        "[method]guard.is-held",
        "[method]guard.extend",
        "[method]guard.release",
        "[static]guard.acquire-with",
        "[method]guard.subscribe-lost",
    ] {
        assert!(guards.contains(method), "guards lacks {method}: {guards:?}");
    }
    let (_, leases) = exports
        .iter()
        .find(|(name, _)| name == "lockd:lock/leases@0.1.0")
        .unwrap();
    let leases = instance_items(&engine, leases);
    for method in [
        "lease",
        "[static]lease.grant",
        "[method]lease.id",
        "[method]lease.expires-at-ms",
        "[method]lease.lock",
        "[method]lease.unlock",
        "[method]lease.refresh",
        "[method]lease.revoke",
        "[method]lease.is-alive",
        "[method]lease.subscribe-lost",
    ] {
        assert!(leases.contains(method), "leases lacks {method}: {leases:?}");
    }
}
