//! Stand-in components built from WIT text, whose functions all trap:
//! enough to compose, not to run. Shared by `plug.rs` and
//! `spin_dependencies.rs`.
#![allow(dead_code)]

/// A component built from `wit` (a whole package) for `world`, whose
/// functions all trap: enough to compose, not to run.
pub fn component_from_wit(wit: &str, world: &str) -> Vec<u8> {
    let mut resolve = wit_parser::Resolve::default();
    // The `wasi:io` release lock.wit uses (its pollables).
    resolve
        .push_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../../wit/deps/io"))
        .unwrap();
    let package = resolve.push_str("test.wit", wit).unwrap();
    let world = resolve.select_world(&[package], Some(world)).unwrap();
    let mut module =
        wit_component::dummy_module(&resolve, world, wit_parser::ManglingAndAbi::Standard32);
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .unwrap();
    wit_component::ComponentEncoder::default()
        .module(&module)
        .unwrap()
        .validate(true)
        .encode()
        .unwrap()
}

/// `wit/lock.wit` with its version replaced by `version` and `extra_world`
/// appended.
pub fn lock_wit(version: &str, extra_world: &str) -> String {
    let wit = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../wit/lock.wit"))
        .unwrap();
    let wit = wit.replace(
        "package lockd:lock@0.1.0;",
        &format!("package lockd:lock@{version};"),
    );
    format!("{wit}\n{extra_world}\n")
}
