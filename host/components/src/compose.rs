//! Composing components with `wac-graph`. [`plug_files`] (what `lockd plug
//! APP.wasm -o OUT.wasm` runs) composes a component that imports
//! `lockd:lock` with the client component for the version it imports, which
//! exports those interfaces over wasi:http and talks to a lockd server, so
//! that the result imports no lock capability and runs on any host with
//! wasi:http (Spin, `wasmtime serve`, jco, `wasmtime run -S http`):
//!
//! - `lockd:lock@0.1.x` (WASI 0.2): `lockd-client.wasm` (`guest/lockd-client`),
//!   over `wasi:http/outgoing-handler@0.2`;
//! - `lockd:lock@0.2.x` (WASI 0.3): `lockd-client-p3.wasm`
//!   (`guest/lockd-client-p3`), `async func`s over `wasi:http/client@0.3.0`,
//!   for hosts with WASI 0.3 (`wasmtime run -Wcomponent-model-async -Sp3,http`).
//!
//! An app that imports both versions gets both clients. Clients given
//! explicitly (`lockd plug --client PATH`, repeatable) replace the choice.
//!
//! The composition happens in process with `wac-graph` (what `wac plug` does),
//! after checks that give a clear refusal instead of a composition that
//! silently plugs nothing:
//!
//! - APP and the clients must be components;
//! - APP must import at least one `lockd:lock` interface, in a version lockd
//!   has a client for (the refusal names the versions there are clients
//!   for);
//! - every `lockd:lock` interface APP imports must be exported by a client
//!   in a semver-compatible version (`locks@0.2.0` against `--client` for
//!   `0.1.0` is refused, naming both), with a matching type;
//! - the composed component is validated, and must import no `lockd:lock`
//!   interface with functions. A types-only interface (`lockd:lock/types`)
//!   may remain an import when the client does not export it: it carries no
//!   functions, so a host provides nothing for it (wasmtime, Spin and jco
//!   accept it).
//!
//! # Where the clients come from
//!
//! [`find_client`] looks, in order, at the client's environment variable
//! (`$LOCKD_CLIENT_WASM`, `$LOCKD_CLIENT_P3_WASM`: a developer's own
//! build wins), the clients the program built in ([`BuiltIn`]: the
//! `lockd` binary embeds the ones built from its own sources, so an
//! installed `lockd` plugs from any directory), `./target/guests/<file>`,
//! and the `target/guests/` next to the running binary (`target/debug/lockd`
//! finds `target/guests/`), and otherwise says how to build it: `bash
//! guest/build-all.sh lockd-client` (or `lockd-client-p3`).
//!
//! Every composition here, a Spin component's dependencies
//! ([`crate::manifest::dependencies`]) included, is encoded and validated
//! by one function, and refuses what is not a component the same way.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context as _, Result};
use wac_graph::types::{are_semver_compatible, ItemKind, Package, SubtypeChecker, Type, Types};
use wac_graph::{CompositionGraph, EncodeOptions, PackageId, Processor};

/// A client component `lockd plug` can choose.
#[derive(Debug)]
pub struct KnownClient {
    /// The `lockd:lock` version it exports.
    pub version: &'static str,
    /// Its file name under `target/guests/`.
    pub file: &'static str,
    /// The environment variable naming it.
    pub env: &'static str,
    /// The command that builds it.
    pub build: &'static str,
}

/// The clients, one per `lockd:lock` version.
pub const CLIENTS: [KnownClient; 2] = [
    KnownClient {
        version: "0.1.0",
        file: "lockd-client.wasm",
        env: "LOCKD_CLIENT_WASM",
        build: "bash guest/build-all.sh lockd-client",
    },
    KnownClient {
        version: "0.2.0",
        file: "lockd-client-p3.wasm",
        env: "LOCKD_CLIENT_P3_WASM",
        build: "bash guest/build-all.sh lockd-client-p3",
    },
];

/// The package whose imports are plugged.
const LOCK_PACKAGE: &str = "lockd:lock/";

/// A composed component, checked and ready to write.
#[derive(Debug)]
pub struct Plugged {
    /// The composed component.
    pub bytes: Vec<u8>,
    /// The client components plugged in (as named to [`plug`]).
    pub clients: Vec<String>,
    /// APP's `lockd:lock` imports that the clients now provide.
    pub plugged: Vec<String>,
    /// Everything the composed component imports.
    pub imports: Vec<String>,
    /// The types-only `lockd:lock` interfaces left among the imports.
    pub types_only_left: Vec<String>,
}

/// The clients for the `lockd:lock` versions `app` imports (those of its
/// imports with functions, or of all if it has only types-only ones); an
/// error naming the versions lockd has clients for if one is unknown.
pub fn clients_for(app_name: &str, app: &[u8]) -> Result<Vec<&'static KnownClient>> {
    check_component(app_name, app)?;
    let mut types = Types::default();
    let package = Package::from_bytes("app", None, app.to_vec(), &mut types)
        .map_err(|e| anyhow!("{app_name} is not a valid component: {e:#}"))?;
    let world = &types[package.ty()];
    let locks: Vec<(&String, ItemKind)> = world
        .imports
        .iter()
        .filter(|(name, _)| name.starts_with(LOCK_PACKAGE))
        .map(|(name, kind)| (name, *kind))
        .collect();
    if locks.is_empty() {
        bail!("{app_name} imports no lockd:lock interface; nothing to plug");
    }
    let with_functions: Vec<&String> = locks
        .iter()
        .filter(|(_, kind)| !is_types_only(&types, *kind))
        .map(|(name, _)| *name)
        .collect();
    let names = if with_functions.is_empty() {
        locks.iter().map(|(name, _)| *name).collect()
    } else {
        with_functions
    };
    let mut chosen: Vec<&'static KnownClient> = Vec::new();
    for name in names {
        let client = CLIENTS
            .iter()
            .find(|c| {
                let offered = format!("{LOCK_PACKAGE}{}@{}", interface_of(name), c.version);
                are_semver_compatible(&offered, name)
            })
            .ok_or_else(|| {
                let known: Vec<String> = CLIENTS
                    .iter()
                    .map(|c| format!("{} ({})", c.version, c.file))
                    .collect();
                anyhow!(
                    "{app_name} imports {name}; lockd plug has clients for lockd:lock {} only: \
                     build the app against one of those versions, or pass --client",
                    known.join(" and ")
                )
            })?;
        if !chosen.iter().any(|c| std::ptr::eq(*c, client)) {
            chosen.push(client);
        }
    }
    Ok(chosen)
}

/// A client component compiled into the program that plugs.
#[derive(Debug, Clone, Copy)]
pub struct BuiltIn {
    /// Its [`KnownClient::file`].
    pub file: &'static str,
    /// The component.
    pub bytes: &'static [u8],
}

/// Where [`find_client`] found a client.
#[derive(Debug)]
pub enum Found {
    /// A file on disk.
    File(PathBuf),
    /// Compiled into the program.
    BuiltIn(BuiltIn),
}

impl Found {
    /// How messages name it: its path, or `built-in FILE`.
    pub fn name(&self) -> String {
        match self {
            Found::File(path) => path.display().to_string(),
            Found::BuiltIn(built_in) => format!("built-in {}", built_in.file),
        }
    }

    /// Its bytes.
    pub fn read(&self) -> Result<Vec<u8>> {
        match self {
            Found::File(path) => std::fs::read(path)
                .with_context(|| format!("cannot read the client component {}", path.display())),
            Found::BuiltIn(built_in) => Ok(built_in.bytes.to_vec()),
        }
    }
}

/// Where `client` is: `${client.env}`, else among `built_in`, else
/// `./target/guests/<file>`, else the `target/guests/` next to the running
/// binary. The error names every place looked at and how to build the
/// client.
pub fn find_client(client: &KnownClient, built_in: &[BuiltIn]) -> Result<Found> {
    let env = client.env;
    if let Some(path) = std::env::var_os(env).filter(|p| !p.is_empty()) {
        return existing(Path::new(&path), &format!("${env}"), client).map(Found::File);
    }
    if let Some(found) = built_in.iter().find(|b| b.file == client.file) {
        return Ok(Found::BuiltIn(*found));
    }
    let mut looked = Vec::new();
    let cwd = Path::new("target").join("guests").join(client.file);
    if cwd.is_file() {
        return Ok(Found::File(cwd));
    }
    looked.push(format!("./{}", cwd.display()));
    // target/<profile>/lockd (or target/<profile>/deps/...) -> target/guests.
    if let Ok(exe) = std::env::current_exe() {
        for dir in exe.ancestors().skip(1).take(3) {
            if dir.file_name().is_some_and(|n| n == "target") {
                let candidate = dir.join("guests").join(client.file);
                if candidate.is_file() {
                    return Ok(Found::File(candidate));
                }
                looked.push(candidate.display().to_string());
                break;
            }
        }
    }
    bail!(
        "no {} component found for lockd:lock@{} (this program has none built in; looked at {}; \
         --client and ${env} not set): build it with `{}` or pass --client PATH",
        client.file,
        client.version,
        looked.join(", "),
        client.build
    )
}

/// `path` (named by `from`) if it exists; otherwise an error that says how
/// to build `client`.
fn existing(path: &Path, from: &str, client: &KnownClient) -> Result<PathBuf> {
    if path.is_file() {
        Ok(path.to_path_buf())
    } else {
        bail!(
            "the client component {} (from {from}) does not exist: build it with `{}`",
            path.display(),
            client.build
        )
    }
}

/// `--client` paths as given, each checked to exist.
pub fn explicit_clients(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    paths
        .iter()
        .map(|path| {
            if path.is_file() {
                Ok(path.clone())
            } else {
                let builds: Vec<&str> = CLIENTS.iter().map(|c| c.build).collect();
                bail!(
                    "the client component {} (from --client) does not exist: build it with `{}`",
                    path.display(),
                    builds.join("` or `")
                )
            }
        })
        .collect()
}

/// Reads APP and the clients (`explicit`, the `--client` paths, or else
/// those [`clients_for`] the versions APP imports, found by
/// [`find_client`] among `built_in` and on disk), plugs them, and writes the
/// checked result to `out` (through a temporary file next to it, so a
/// failure leaves no partial output).
pub fn plug_files(
    app: &Path,
    explicit: &[PathBuf],
    built_in: &[BuiltIn],
    out: &Path,
) -> Result<Plugged> {
    let app_bytes = std::fs::read(app).with_context(|| format!("cannot read {}", app.display()))?;
    let app_name = app.display().to_string();
    let found = if explicit.is_empty() {
        clients_for(&app_name, &app_bytes)?
            .into_iter()
            .map(|client| find_client(client, built_in))
            .collect::<Result<Vec<_>>>()?
    } else {
        explicit_clients(explicit)?
            .into_iter()
            .map(Found::File)
            .collect()
    };
    let mut clients = Vec::new();
    for client in &found {
        clients.push((client.name(), client.read()?));
    }
    let plugged = plug_all(&app_name, &app_bytes, &clients)?;
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
    plug_all(app_name, app, &[(client_name.to_owned(), client.to_vec())])
}

/// Plugs the `lockd:lock` exports of `clients` (name, bytes) into `app`'s
/// imports. `app_name` and the clients' names (paths, usually) only appear
/// in messages.
pub fn plug_all(app_name: &str, app: &[u8], clients: &[(String, Vec<u8>)]) -> Result<Plugged> {
    check_component(app_name, app)?;
    if clients.is_empty() {
        bail!("no client component to plug into {app_name}");
    }
    for (name, bytes) in clients {
        check_component(name, bytes)?;
    }
    let mut plugging = Plugging::register(app_name, app, clients)?;
    let wanted = lock_names(&plugging.graph, plugging.app, true);
    if wanted.is_empty() {
        bail!("{app_name} imports no lockd:lock interface; nothing to plug");
    }
    let offered = plugging.offered()?;
    let (wanted, wiring) = plugging.wiring(wanted, &offered)?;
    if wiring.is_empty() {
        bail!(
            "{app_name} imports only types-only lockd:lock interfaces ({}); nothing to plug",
            wanted.join(", ")
        );
    }
    let client_name = &plugging.client_name;
    wire_up(
        &mut plugging.graph,
        plugging.app,
        &plugging.client_ids,
        &wiring,
    )
    .map_err(|e| anyhow!("composing {app_name} with {client_name}: {e:#}"))?;
    let bytes = encode_checked(&plugging.graph, "lockd plug")
        .map_err(|e| anyhow!("composing {app_name} with {client_name}: {e:#}"))?;
    let (imports, types_only_left) = imports_of_result(&bytes)?;
    Ok(Plugged {
        bytes,
        clients: clients.iter().map(|(name, _)| name.clone()).collect(),
        plugged: wiring.into_iter().map(|(_, _, import)| import).collect(),
        imports,
        types_only_left,
    })
}

/// One plugging in progress: APP and the clients registered in a graph.
struct Plugging<'a> {
    graph: CompositionGraph,
    app: PackageId,
    app_name: &'a str,
    client_ids: Vec<PackageId>,
    clients: &'a [(String, Vec<u8>)],
    /// The clients' names joined, for messages.
    client_name: String,
}

impl<'a> Plugging<'a> {
    /// Registers APP and every client in a fresh graph.
    fn register(
        app_name: &'a str,
        app: &[u8],
        clients: &'a [(String, Vec<u8>)],
    ) -> Result<Plugging<'a>> {
        let mut graph = CompositionGraph::new();
        let app_pkg = Package::from_bytes("app", None, app.to_vec(), graph.types_mut())
            .map_err(|e| anyhow!("{app_name} is not a valid component: {e:#}"))?;
        let app_id = graph.register_package(app_pkg)?;
        let mut client_ids = Vec::new();
        for (i, (name, bytes)) in clients.iter().enumerate() {
            let package_name = format!("lockd:client{i}");
            let pkg = Package::from_bytes(&package_name, None, bytes.clone(), graph.types_mut())
                .map_err(|e| anyhow!("{name} is not a valid component: {e:#}"))?;
            client_ids.push(graph.register_package(pkg)?);
        }
        let client_name = clients
            .iter()
            .map(|(name, _)| name.as_str())
            .collect::<Vec<_>>()
            .join(" and ");
        Ok(Plugging {
            graph,
            app: app_id,
            app_name,
            client_ids,
            clients,
            client_name,
        })
    }

    /// Every client's `lockd:lock` exports, with the client's index; a
    /// client that exports none is refused.
    fn offered(&self) -> Result<Vec<(usize, String)>> {
        let mut offered = Vec::new();
        for (i, id) in self.client_ids.iter().enumerate() {
            let names = lock_names(&self.graph, *id, false);
            if names.is_empty() {
                let builds: Vec<&str> = CLIENTS.iter().map(|c| c.build).collect();
                bail!(
                    "{} exports no lockd:lock interface; is it a lockd client component (`{}`)?",
                    self.clients[i].0,
                    builds.join("`, `")
                );
            }
            offered.extend(names.into_iter().map(|name| (i, name)));
        }
        Ok(offered)
    }

    /// Which client export satisfies which of APP's `wanted` imports:
    /// (client, its export, APP's import) for every import to plug, with
    /// `wanted` in the order it was checked. Every lockd:lock import must
    /// have a compatible export, except a types-only interface the client
    /// does not export at all. Interfaces with functions are checked first,
    /// so that a version mismatch names `locks` rather than `types`.
    fn wiring(
        &self,
        mut wanted: Vec<String>,
        offered: &[(usize, String)],
    ) -> Result<(Vec<String>, Vec<Wire>)> {
        let types = self.graph.types();
        let app_world = &types[self.graph[self.app].ty()];
        // A composition cannot export an instance whose types come from a
        // component inside it (wasmparser: "instance not valid to be used as
        // export"), so when APP exports an interface of its own (which may
        // name lockd:lock types, as `use lockd:lock/types@0.2.0.{error}`
        // does), its types-only lockd:lock imports stay imports of the
        // result.
        let keep_types_imported = app_world
            .exports
            .keys()
            .any(|name| !name.starts_with("wasi:"));
        wanted.sort_by_key(|name| is_types_only(types, app_world.imports[name.as_str()]));
        let mut wiring = Vec::new();
        let mut cache = HashSet::new();
        let mut checker = SubtypeChecker::new(&mut cache);
        for import in &wanted {
            let interface = interface_of(import);
            let export = offered
                .iter()
                .find(|(_, e)| are_semver_compatible(e, import) && interface_of(e) == interface);
            let Some((i, export)) = export else {
                self.refuse_unmatched(import, offered)?;
                continue;
            };
            let client_world = &types[self.graph[self.client_ids[*i]].ty()];
            let client_name = &self.clients[*i].0;
            let app_name = self.app_name;
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
            let types_only = is_types_only(types, app_world.imports[import.as_str()]);
            if !(types_only && keep_types_imported) {
                wiring.push((*i, export.clone(), import.clone()));
            }
        }
        Ok((wanted, wiring))
    }

    /// The refusal of an `import` no client export satisfies, unless it is
    /// types-only (a host provides nothing for it; it stays an import).
    fn refuse_unmatched(&self, import: &str, offered: &[(usize, String)]) -> Result<()> {
        let (app_name, client_name) = (self.app_name, &self.client_name);
        let interface = interface_of(import);
        let same: Vec<&str> = offered
            .iter()
            .filter(|(_, e)| interface_of(e) == interface)
            .map(|(_, e)| e.as_str())
            .collect();
        if !same.is_empty() {
            bail!(
                "{app_name} imports {import}, but the client {client_name} exports {}: \
                 build the app against that version or use a client for {}",
                same.join(", "),
                version_of(import).unwrap_or("this version")
            );
        }
        let types = self.graph.types();
        let app_world = &types[self.graph[self.app].ty()];
        if !is_types_only(types, app_world.imports[import]) {
            bail!(
                "{app_name} imports {import}, which the client {client_name} does not \
                 export (it exports {})",
                offered
                    .iter()
                    .map(|(_, e)| e.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        Ok(())
    }
}

/// A client's export wired to one of APP's imports: (client, export,
/// import).
type Wire = (usize, String, String);

/// What a host will see of the composed component `bytes`, read afresh:
/// every import, and the types-only `lockd:lock` ones among them. An import
/// of a `lockd:lock` interface with functions is refused.
fn imports_of_result(bytes: &[u8]) -> Result<(Vec<String>, Vec<String>)> {
    let mut out_types = Types::default();
    let out = Package::from_bytes("out", None, bytes.to_vec(), &mut out_types)
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
    Ok((imports, types_only_left))
}

/// What `wac plug` does, for the pairs in `wiring` only: instantiates APP
/// with each (client, export, import) pair's client export as its import,
/// and exports what APP exports. APP's other imports become the result's.
fn wire_up(
    graph: &mut CompositionGraph,
    app: PackageId,
    clients: &[PackageId],
    wiring: &[Wire],
) -> Result<()> {
    let app_instance = graph.instantiate(app);
    let mut instances = vec![None; clients.len()];
    for (client, export, import) in wiring {
        let instance =
            *instances[*client].get_or_insert_with(|| graph.instantiate(clients[*client]));
        let item = graph.alias_instance_export(instance, export)?;
        graph.set_instantiation_argument(app_instance, import, item)?;
    }
    let exports: Vec<String> = graph.types()[graph[app].ty()]
        .exports
        .keys()
        .cloned()
        .collect();
    for name in exports {
        let item = graph.alias_instance_export(app_instance, &name)?;
        graph.export(item, &name)?;
    }
    Ok(())
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
