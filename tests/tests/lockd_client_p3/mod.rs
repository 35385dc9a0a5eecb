//! `guest/lockd-client-p3`: the component that exports `lockd:lock@0.2.0`
//! (WASI 0.3) over `wasi:http@0.3` for hosts that do not run lockd.
//!
//! Checked here by its component type: it exports every interface of
//! `lockd:lock@0.2.0` with everything `rust-p3` imports of them, and imports
//! only WASI 0.3.0 and 0.2 releases (no `lockd:` import), `wasi:http/client`
//! among them. Its behaviour against a live server, composed into
//! `rust-p3`, is `tests/tests/portable_p3.rs`'s.

use wasmtime::component::types::ComponentItem;
use wasmtime::component::Component;
use wasmtime::{Config, Engine};

use crate::lockd_client::check_guest_imports;

/// The interfaces the client must export: every interface of the package.
const EXPORTS: [&str; 8] = [
    "lockd:lock/types@0.2.0",
    "lockd:lock/locks@0.2.0",
    "lockd:lock/guards@0.2.0",
    "lockd:lock/leases@0.2.0",
    "lockd:lock/rwlocks@0.2.0",
    "lockd:lock/semaphores@0.2.0",
    "lockd:lock/holds@0.2.0",
    "lockd:lock/elections@0.2.0",
];

#[test]
pub(crate) fn lockd_client_p3() {
    let mut config = Config::new();
    config.wasm_component_model_async(true);
    let engine = Engine::new(&config).unwrap();
    let client = Component::from_file(&engine, lockd_guest_tests::LOCKD_CLIENT_P3).unwrap();
    let ty = client.component_type();

    let exports: Vec<(String, ComponentItem)> = ty
        .exports(&engine)
        .map(|(name, item)| (name.to_string(), item.ty))
        .collect();
    let mut names: Vec<&str> = exports.iter().map(|(name, _)| name.as_str()).collect();
    names.sort_unstable();
    let mut wanted = EXPORTS.to_vec();
    wanted.sort_unstable();
    assert_eq!(names, wanted, "exports");

    let imports: Vec<String> = ty
        .imports(&engine)
        .map(|(name, _)| name.to_string())
        .collect();
    for name in &imports {
        let (interface, version) = name
            .split_once('@')
            .unwrap_or_else(|| panic!("unversioned import {name}"));
        assert!(
            interface.starts_with("wasi:")
                && (version == "0.3.0" || version.starts_with("0.2."))
                && !version.contains('-'),
            "the client imports {name}: only WASI releases are allowed (all: {imports:?})"
        );
    }
    for needed in [
        "wasi:http/client@0.3.0",
        "wasi:http/types@0.3.0",
        "wasi:cli/environment@0.3.0",
        "wasi:random/random@0.3.0",
    ] {
        assert!(
            imports.iter().any(|n| n == needed),
            "no {needed} in {imports:?}"
        );
    }

    // Every function and resource rust-p3 imports from lockd:lock@0.2.0 is
    // exported under the same name.
    let checked = check_guest_imports(&engine, lockd_guest_tests::RUST_P3, "@0.2.0", &exports);
    // types, locks, guards, leases, rwlocks, semaphores, holds, elections.
    assert_eq!(checked, 8, "rust-p3's lockd:lock@0.2.0 imports");
}
