//! `lockd plug APP.wasm -o OUT.wasm`: composes a component that imports
//! `lockd:lock` with the lockd-client component (which exports
//! `lockd:lock/locks` and `lockd:lock/guards` over wasi:http, talking to a
//! lockd server), so that the result imports no lock capability and runs on
//! any host with wasi:http (Spin, `wasmtime serve`, jco).
//!
//! The composition happens in process with `wac-graph` (what `wac plug` does),
//! after checks that give a clear refusal instead of a composition that
//! silently plugs nothing:
//!
//! - APP and the client must be components;
//! - APP must import at least one `lockd:lock` interface;
//! - every `lockd:lock` interface APP imports must be exported by the client
//!   in a semver-compatible version (`locks@0.2.0` against a client for
//!   `0.1.0` is refused, naming both), with a matching type;
//! - the composed component is validated, and must import no `lockd:lock`
//!   interface with functions. A types-only interface (`lockd:lock/types`)
//!   may remain an import when the client does not export it: it carries no
//!   functions, so a host provides nothing for it (wasmtime, Spin and jco
//!   accept it).
//!
//! # Where the client comes from
//!
//! The client is not embedded in the `lockd` binary: a fresh clone builds
//! `lockd` before any guest, and a build script that watched a file that may
//! not exist would rebuild `lockd` every time (or embed a stale client).
//! [`find_client`] looks, in order, at `--client PATH`, `$LOCKD_CLIENT_WASM`,
//! `./target/guests/lockd-client.wasm`, and the `target/guests/` next to the
//! running binary (`target/debug/lockd` finds `target/guests/`), and
//! otherwise says how to build it: `bash guest/build-all.sh lockd-client`.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context as _, Result};
use wac_graph::types::{are_semver_compatible, ItemKind, Package, SubtypeChecker, Type, Types};
use wac_graph::{CompositionGraph, EncodeOptions, PackageId, Processor};

/// The client component's file name under `target/guests/`.
pub const CLIENT_FILE: &str = "lockd-client.wasm";

/// The environment variable naming the client component.
pub const CLIENT_ENV: &str = "LOCKD_CLIENT_WASM";

/// The command that builds the client component.
pub const BUILD_CLIENT: &str = "bash guest/build-all.sh lockd-client";

/// The package whose imports are plugged.
const LOCK_PACKAGE: &str = "lockd:lock/";

/// A composed component, checked and ready to write.
#[derive(Debug)]
pub struct Plugged {
    /// The composed component.
    pub bytes: Vec<u8>,
    /// APP's `lockd:lock` imports that the client now provides.
    pub plugged: Vec<String>,
    /// Everything the composed component imports.
    pub imports: Vec<String>,
    /// The types-only `lockd:lock` interfaces left among the imports.
    pub types_only_left: Vec<String>,
}

/// The client component to use: `explicit` (`--client`), else
/// `$LOCKD_CLIENT_WASM`, else `./target/guests/lockd-client.wasm`, else the
/// `target/guests/` next to the running binary. The error names every place
/// looked at and how to build the client.
pub fn find_client(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(path) = explicit {
        return existing(path, "--client");
    }
    if let Some(path) = std::env::var_os(CLIENT_ENV).filter(|p| !p.is_empty()) {
        return existing(Path::new(&path), &format!("${CLIENT_ENV}"));
    }
    let mut looked = Vec::new();
    let cwd = Path::new("target").join("guests").join(CLIENT_FILE);
    if cwd.is_file() {
        return Ok(cwd);
    }
    looked.push(format!("./{}", cwd.display()));
    // target/<profile>/lockd (or target/<profile>/deps/...) -> target/guests.
    if let Ok(exe) = std::env::current_exe() {
        for dir in exe.ancestors().skip(1).take(3) {
            if dir.file_name().is_some_and(|n| n == "target") {
                let candidate = dir.join("guests").join(CLIENT_FILE);
                if candidate.is_file() {
                    return Ok(candidate);
                }
                looked.push(candidate.display().to_string());
                break;
            }
        }
    }
    bail!(
        "no lockd-client component found (looked at {}; --client and ${CLIENT_ENV} not set): \
         build it with `{BUILD_CLIENT}` or pass --client PATH",
        looked.join(", ")
    )
}

fn existing(path: &Path, from: &str) -> Result<PathBuf> {
    if path.is_file() {
        Ok(path.to_path_buf())
    } else {
        bail!(
            "the lockd-client component {} (from {from}) does not exist: \
             build it with `{BUILD_CLIENT}`",
            path.display()
        )
    }
}

/// Reads APP and the client, plugs them, and writes the checked result to
/// `out` (through a temporary file next to it, so a failure leaves no partial
/// output).
pub fn plug_files(app: &Path, client: &Path, out: &Path) -> Result<Plugged> {
    let app_bytes = std::fs::read(app).with_context(|| format!("cannot read {}", app.display()))?;
    let client_bytes = std::fs::read(client)
        .with_context(|| format!("cannot read the client component {}", client.display()))?;
    let plugged = plug(
        &app.display().to_string(),
        &app_bytes,
        &client.display().to_string(),
        &client_bytes,
    )?;
    let mut tmp = out.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, &plugged.bytes)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    if let Err(e) = std::fs::rename(&tmp, out) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write {}", out.display()));
    }
    Ok(plugged)
}

/// Plugs `client`'s `lockd:lock` exports into `app`'s imports. `app_name`
/// and `client_name` (paths, usually) only appear in error messages.
pub fn plug(app_name: &str, app: &[u8], client_name: &str, client: &[u8]) -> Result<Plugged> {
    check_component(app_name, app)?;
    check_component(client_name, client)?;

    let mut graph = CompositionGraph::new();
    let app_pkg = Package::from_bytes("app", None, app.to_vec(), graph.types_mut())
        .map_err(|e| anyhow!("{app_name} is not a valid component: {e:#}"))?;
    let client_pkg = Package::from_bytes("lockd:client", None, client.to_vec(), graph.types_mut())
        .map_err(|e| anyhow!("{client_name} is not a valid component: {e:#}"))?;
    let app_id = graph.register_package(app_pkg)?;
    let client_id = graph.register_package(client_pkg)?;

    let wanted = lock_names(&graph, app_id, true);
    if wanted.is_empty() {
        bail!("{app_name} imports no lockd:lock interface; nothing to plug");
    }
    let offered = lock_names(&graph, client_id, false);
    if offered.is_empty() {
        bail!(
            "{client_name} exports no lockd:lock interface; is it the lockd-client component \
             (`{BUILD_CLIENT}`)?"
        );
    }

    // Every lockd:lock import must have a compatible export, except a
    // types-only interface the client does not export at all. Interfaces
    // with functions are checked first, so that a version mismatch names
    // `locks` rather than `types`.
    let types = graph.types();
    let app_world = &types[graph[app_id].ty()];
    let client_world = &types[graph[client_id].ty()];
    let mut wanted = wanted;
    wanted.sort_by_key(|name| is_types_only(types, app_world.imports[name.as_str()]));
    let mut plugged = Vec::new();
    let mut cache = HashSet::new();
    let mut checker = SubtypeChecker::new(&mut cache);
    for import in &wanted {
        let interface = interface_of(import);
        let export = offered
            .iter()
            .find(|e| are_semver_compatible(e, import) && interface_of(e) == interface);
        match export {
            Some(export) => {
                checker
                    .is_subtype(
                        client_world.exports[export.as_str()],
                        types,
                        app_world.imports[import.as_str()],
                        types,
                    )
                    .map_err(|e| {
                        anyhow!(
                            "{client_name} exports {export}, but its type does not match what \
                             {app_name} imports as {import}: {e:#}"
                        )
                    })?;
                plugged.push(import.clone());
            }
            None => {
                let same: Vec<&str> = offered
                    .iter()
                    .filter(|e| interface_of(e) == interface)
                    .map(String::as_str)
                    .collect();
                if !same.is_empty() {
                    bail!(
                        "{app_name} imports {import}, but the client {client_name} exports {}: \
                         build the app against that version or use a client for {}",
                        same.join(", "),
                        version_of(import).unwrap_or("this version")
                    );
                }
                if !is_types_only(types, app_world.imports[import.as_str()]) {
                    bail!(
                        "{app_name} imports {import}, which the client {client_name} does not \
                         export (it exports {})",
                        offered.join(", ")
                    );
                }
            }
        }
    }
    if plugged.is_empty() {
        bail!(
            "{app_name} imports only types-only lockd:lock interfaces ({}); nothing to plug",
            wanted.join(", ")
        );
    }

    wac_graph::plug(&mut graph, vec![client_id], app_id)
        .map_err(|e| anyhow!("composing {app_name} with {client_name}: {:#}", anyhow!(e)))?;
    let bytes = encode_checked(&graph, "lockd plug")
        .map_err(|e| anyhow!("composing {app_name} with {client_name}: {e:#}"))?;

    // What a host will see: read the result's imports afresh.
    let mut out_types = Types::default();
    let out = Package::from_bytes("out", None, bytes.clone(), &mut out_types)
        .map_err(|e| anyhow!("the composed component is not valid (a lockd bug): {e:#}"))?;
    let out_world = &out_types[out.ty()];
    let imports: Vec<String> = out_world.imports.keys().cloned().collect();
    let mut types_only_left = Vec::new();
    for (name, kind) in &out_world.imports {
        if !name.starts_with(LOCK_PACKAGE) {
            continue;
        }
        if is_types_only(&out_types, *kind) {
            types_only_left.push(name.clone());
        } else {
            bail!("the composed component still imports {name}; refusing to write it");
        }
    }
    Ok(Plugged {
        bytes,
        plugged,
        imports,
        types_only_left,
    })
}

/// A one-paragraph account of a successful plug, for stdout.
pub fn summary(out: &Path, plugged: &Plugged) -> String {
    let mut text = format!(
        "wrote {} ({} bytes): {} now provided by lockd-client",
        out.display(),
        plugged.bytes.len(),
        plugged.plugged.join(", ")
    );
    let _ = write!(text, "\nimports: {}", plugged.imports.join(", "));
    if !plugged.types_only_left.is_empty() {
        let _ = write!(
            text,
            "\n{} remains imported: it is types-only, so a host provides nothing for it",
            plugged.types_only_left.join(", ")
        );
    }
    text
}

/// Encodes a composition (its components defined in it) and validates the
/// result. `processor` names the lockd command in the component's
/// `producers` section.
pub(crate) fn encode_checked(graph: &CompositionGraph, processor: &str) -> Result<Vec<u8>> {
    let bytes = graph
        .encode(EncodeOptions {
            define_components: true,
            // Validated below, with wasmparser's full checks.
            validate: false,
            processor: Some(Processor {
                name: processor,
                version: env!("CARGO_PKG_VERSION"),
            }),
        })
        .map_err(|e| anyhow!("encoding the composition: {e:#}"))?;
    Package::from_bytes("composed", None, bytes.clone(), &mut Types::default())
        .map_err(|e| anyhow!("the composed component is not valid (a lockd bug): {e:#}"))?;
    Ok(bytes)
}

/// Refuses what is not a WebAssembly component, before wac-graph's own
/// (terser) message.
pub(crate) fn check_component(name: &str, bytes: &[u8]) -> Result<()> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        bail!("{name} is not a WebAssembly binary");
    }
    // The layer field: 0 for a core module, 1 for a component.
    if bytes[6..8] == [0, 0] {
        bail!(
            "{name} is a core WebAssembly module, not a component \
             (build it for wasm32-wasip2, or wrap it with `wasm-tools component new`)"
        );
    }
    Ok(())
}

/// The `lockd:lock/...` imports (or exports) of a package.
fn lock_names(graph: &CompositionGraph, package: PackageId, imports: bool) -> Vec<String> {
    let world = &graph.types()[graph[package].ty()];
    let items = if imports {
        &world.imports
    } else {
        &world.exports
    };
    items
        .keys()
        .filter(|name| name.starts_with(LOCK_PACKAGE))
        .cloned()
        .collect()
}

/// `locks` for `lockd:lock/locks@0.1.0`.
fn interface_of(name: &str) -> &str {
    let rest = name.strip_prefix(LOCK_PACKAGE).unwrap_or(name);
    rest.split('@').next().unwrap_or(rest)
}

/// `0.1.0` for `lockd:lock/locks@0.1.0`.
fn version_of(name: &str) -> Option<&str> {
    name.split_once('@').map(|(_, v)| v)
}

/// An instance that holds only value types (no functions, no resources): a
/// host need provide nothing for it.
fn is_types_only(types: &Types, kind: ItemKind) -> bool {
    let ItemKind::Instance(id) = kind else {
        return false;
    };
    types[id]
        .exports
        .values()
        .all(|item| matches!(item, ItemKind::Type(Type::Value(_))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(interface_of("lockd:lock/locks@0.1.0"), "locks");
        assert_eq!(interface_of("lockd:lock/guards"), "guards");
        assert_eq!(version_of("lockd:lock/locks@0.2.0"), Some("0.2.0"));
        assert_eq!(version_of("lockd:lock/locks"), None);
    }

    #[test]
    fn not_a_component() {
        let err = check_component("x.wasm", b"hello").unwrap_err();
        assert!(err.to_string().contains("not a WebAssembly binary"));
        let module = b"\0asm\x01\0\0\0";
        let err = check_component("m.wasm", module).unwrap_err();
        assert!(err.to_string().contains("core WebAssembly module"), "{err}");
    }
}
