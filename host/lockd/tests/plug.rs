//! `lockd plug` as a user runs it: what the composed component imports, the
//! refusals and their messages, and the plugged conformance guest run on a
//! plain wasmtime host with wasi:http (no lockd capability) against a real
//! `lockd serve`.

mod lockd_server;
mod stand_in;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::lockd_server::Server;
use stand_in::{component_from_wit, lock_wit};
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store};
use wasmtime_wasi::p2::bindings::Command as CliCommand;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

/// `lockd ARGS` in `dir` (the package directory if `None`), without the
/// developer's `$LOCKD_CLIENT_WASM` or `$LOCKD_CLIENT_P3_WASM`.
fn lockd_in(dir: Option<&Path>, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockd"));
    cmd.args(args)
        .env_remove("LOCKD_CLIENT_WASM")
        .env_remove("LOCKD_CLIENT_P3_WASM");
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn lockd(args: &[&str]) -> Output {
    lockd_in(None, args, &[])
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `lockd plug APP -o DIR/out.wasm --client CLIENT`; returns the output path.
fn plug_ok(dir: &Path, app: &str, client: &str) -> PathBuf {
    let out = dir.join("out.wasm");
    let o = lockd(&["plug", app, "-o", path(&out), "--client", client]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    out
}

/// Asserts a refusal: exit code 2 and one line on stderr containing every
/// one of `needles`; returns that line.
fn refused(o: &Output, needles: &[&str]) -> String {
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    for needle in needles {
        assert!(stderr.contains(needle), "{needle:?} not in {stderr:?}");
    }
    stderr
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn engine() -> Engine {
    let mut config = Config::new();
    config.wasm_component_model(true);
    // WASI 0.3 components (lockd-client-p3, rust-p3) have async lifts.
    config.wasm_component_model_async(true);
    Engine::new(&config).unwrap()
}

/// The import names of the component at `path`, as wasmtime sees them.
fn imports(engine: &Engine, path: &Path) -> Vec<String> {
    let component = Component::from_file(engine, path).unwrap();
    component
        .component_type()
        .imports(engine)
        .map(|(name, _)| name.to_string())
        .collect()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn plugging_rust_conformance_leaves_no_lock_imports() {
    let dir = tempfile::tempdir().unwrap();
    let out = plug_ok(
        dir.path(),
        lockd_guest_tests::RUST_CONFORMANCE,
        lockd_guest_tests::LOCKD_CLIENT,
    );
    let engine = engine();
    let before = imports(&engine, Path::new(lockd_guest_tests::RUST_CONFORMANCE));
    assert!(before.iter().any(|i| i.starts_with("lockd:lock/locks@")));

    let after = imports(&engine, &out);
    for name in &after {
        assert!(
            !name.starts_with("lockd:lock/locks") && !name.starts_with("lockd:lock/guards"),
            "{name} still imported: {after:?}"
        );
    }
    // The app's own WASI imports remain, and the client brings wasi:http.
    for wasi in before.iter().filter(|i| i.starts_with("wasi:")) {
        assert!(after.contains(wasi), "{wasi} lost: {after:?}");
    }
    assert!(
        after
            .iter()
            .any(|i| i.starts_with("wasi:http/outgoing-handler@")),
        "{after:?}"
    );
    // Exports are kept: it is still a wasi:cli command.
    let component = Component::from_file(&engine, &out).unwrap();
    let exports: Vec<String> = component
        .component_type()
        .exports(&engine)
        .map(|(name, _)| name.to_string())
        .collect();
    assert!(
        exports.iter().any(|e| e.starts_with("wasi:cli/run@")),
        "{exports:?}"
    );
}

#[test]
fn summary_names_what_was_plugged() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.wasm");
    let o = lockd(&[
        "plug",
        lockd_guest_tests::RUST_CONFORMANCE,
        "-o",
        path(&out),
        "--client",
        lockd_guest_tests::LOCKD_CLIENT,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    assert!(stdout.contains("lockd:lock/locks@0.1.0"), "{stdout}");
    assert!(stdout.contains("lockd:lock/guards@0.1.0"), "{stdout}");
    assert!(!dir.path().join("out.wasm.tmp").exists());
}

#[test]
fn default_client_is_built_in_and_the_env_wins() {
    // From a directory with no target/guests/, the client built into the
    // binary is plugged (tests/package.rs runs a copy far from target/).
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.wasm");
    let o = lockd_in(
        Some(dir.path()),
        &[
            "plug",
            lockd_guest_tests::RUST_CONFORMANCE,
            "-o",
            path(&out),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(out.is_file());
    let stdout = text(&o.stdout);
    assert!(
        stdout.contains("provided by built-in lockd-client.wasm"),
        "{stdout}"
    );

    // $LOCKD_CLIENT_WASM wins over the defaults, and a wrong one is an error.
    let o = lockd_in(
        Some(dir.path()),
        &[
            "plug",
            lockd_guest_tests::RUST_CONFORMANCE,
            "-o",
            path(&out),
        ],
        &[("LOCKD_CLIENT_WASM", "/nonexistent/client.wasm")],
    );
    refused(
        &o,
        &[
            "/nonexistent/client.wasm",
            "$LOCKD_CLIENT_WASM",
            "bash guest/build-all.sh lockd-client",
        ],
    );
}

#[test]
fn each_lock_version_gets_its_client() {
    // rust-p3 imports lockd:lock@0.2.0 (WASI 0.3) and, for its contrast,
    // locks@0.1.0: with no --client, both clients built into the binary
    // are plugged.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.wasm");
    let args = ["plug", lockd_guest_tests::RUST_P3, "-o", path(&out)];
    let o = lockd_in(Some(dir.path()), &args, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    for needle in [
        "lockd:lock/locks@0.2.0",
        "lockd:lock/elections@0.2.0",
        "lockd:lock/locks@0.1.0",
        "lockd-client-p3.wasm",
        "lockd-client.wasm",
    ] {
        assert!(stdout.contains(needle), "{needle:?} not in {stdout}");
    }
    let after = imports(&engine(), &out);
    for name in &after {
        assert!(
            !name.starts_with("lockd:lock/") || name.starts_with("lockd:lock/types@"),
            "{name} still imported: {after:?}"
        );
    }
    for http in ["wasi:http/client@0.3.0", "wasi:http/outgoing-handler@0.2"] {
        assert!(
            after.iter().any(|i| i.starts_with(http)),
            "{http} not in {after:?}"
        );
    }

    // --client replaces the choice: both given, both plugged; the 0.1.0
    // client alone is refused, naming both versions.
    let both = [
        "plug",
        lockd_guest_tests::RUST_P3,
        "-o",
        path(&out),
        "--client",
        lockd_guest_tests::LOCKD_CLIENT_P3,
        "--client",
        lockd_guest_tests::LOCKD_CLIENT,
    ];
    let o = lockd(&both);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let one = [
        "plug",
        lockd_guest_tests::RUST_P3,
        "-o",
        path(&out),
        "--client",
        lockd_guest_tests::LOCKD_CLIENT,
    ];
    refused(&lockd(&one), &["lockd:lock/", "@0.2.0", "@0.1.0"]);

    // $LOCKD_CLIENT_P3_WASM names the 0.2.0 client; a wrong one is an error
    // that says how to build it.
    let o = lockd_in(
        Some(dir.path()),
        &args,
        &[("LOCKD_CLIENT_P3_WASM", "/nonexistent/p3-client.wasm")],
    );
    refused(
        &o,
        &[
            "/nonexistent/p3-client.wasm",
            "$LOCKD_CLIENT_P3_WASM",
            "bash guest/build-all.sh lockd-client-p3",
        ],
    );
}

#[test]
fn unknown_lock_version_is_refused_naming_the_clients() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.wasm");
    let app = component_from_wit(&lock_wit("0.3.0", ""), "imports");
    let app = write(dir.path(), "app-0.3.0.wasm", &app);
    let o = lockd(&["plug", path(&app), "-o", path(&out)]);
    refused(
        &o,
        &[
            "app-0.3.0.wasm",
            "@0.3.0",
            "0.1.0 (lockd-client.wasm)",
            "0.2.0 (lockd-client-p3.wasm)",
        ],
    );
    assert!(!out.exists());
}

#[test]
fn missing_client_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.wasm");
    let o = lockd(&[
        "plug",
        lockd_guest_tests::RUST_CONFORMANCE,
        "-o",
        path(&out),
        "--client",
        "/nonexistent/lockd-client.wasm",
    ]);
    refused(
        &o,
        &[
            "/nonexistent/lockd-client.wasm",
            "does not exist",
            "bash guest/build-all.sh lockd-client",
        ],
    );
    assert!(!out.exists());
}

#[test]
fn app_without_lock_imports_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.wasm");
    for app in [
        lockd_guest_tests::HTTP_HOSTILE,
        lockd_guest_tests::LOCKD_CLIENT,
    ] {
        let o = lockd(&[
            "plug",
            app,
            "-o",
            path(&out),
            "--client",
            lockd_guest_tests::LOCKD_CLIENT,
        ]);
        refused(
            &o,
            &[app, "imports no lockd:lock interface; nothing to plug"],
        );
    }
    assert!(!out.exists());
}

#[test]
fn app_that_is_not_a_component_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.wasm");
    let junk = write(dir.path(), "junk.wasm", b"not wasm at all");
    let module = write(dir.path(), "module.wasm", b"\0asm\x01\0\0\0");
    let cases: [(&Path, &[&str]); 3] = [
        (&junk, &["junk.wasm", "is not a WebAssembly binary"]),
        (
            &module,
            &["module.wasm", "core WebAssembly module, not a component"],
        ),
        (
            Path::new("/nonexistent/app.wasm"),
            &["cannot read /nonexistent/app.wasm"],
        ),
    ];
    for (app, needles) in cases {
        let o = lockd(&[
            "plug",
            path(app),
            "-o",
            path(&out),
            "--client",
            lockd_guest_tests::LOCKD_CLIENT,
        ]);
        refused(&o, needles);
    }
    assert!(!out.exists());
}

#[test]
fn other_lock_version_is_refused_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.wasm");
    // An app built against lockd:lock@0.2.0 (the same WIT, another version).
    let app = component_from_wit(&lock_wit("0.2.0", ""), "imports");
    let app = write(dir.path(), "app-0.2.0.wasm", &app);
    let o = lockd(&[
        "plug",
        path(&app),
        "-o",
        path(&out),
        "--client",
        lockd_guest_tests::LOCKD_CLIENT,
    ]);
    refused(&o, &["lockd:lock/", "@0.2.0", "@0.1.0", "app-0.2.0.wasm"]);
    assert!(!out.exists());

    // A compatible patch version (0.1.1) is plugged, as wac does.
    let app = component_from_wit(&lock_wit("0.1.1", ""), "imports");
    let app = write(dir.path(), "app-0.1.1.wasm", &app);
    plug_ok(dir.path(), path(&app), lockd_guest_tests::LOCKD_CLIENT);
}

#[test]
fn client_without_types_export_leaves_only_the_types_only_import() {
    // A stand-in client that exports locks and guards but not the types-only
    // interface: `types` becomes its import (wac#141), and remains one in OUT.
    let dir = tempfile::tempdir().unwrap();
    let client = component_from_wit(
        &lock_wit(
            "0.1.0",
            "world client {\n    export locks;\n    export guards;\n}",
        ),
        "client",
    );
    let client = write(dir.path(), "stand-in-client.wasm", &client);
    let out = dir.path().join("out.wasm");
    let o = lockd(&[
        "plug",
        lockd_guest_tests::RUST_CONFORMANCE,
        "-o",
        path(&out),
        "--client",
        path(&client),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("types-only"),
        "{}",
        text(&o.stdout)
    );
    let engine = engine();
    let lock_imports: Vec<String> = imports(&engine, &out)
        .into_iter()
        .filter(|i| i.starts_with("lockd:"))
        .collect();
    assert_eq!(lock_imports, ["lockd:lock/types@0.1.0"]);
}

#[test]
fn client_that_exports_no_lock_interface_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.wasm");
    let o = lockd(&[
        "plug",
        lockd_guest_tests::RUST_CONFORMANCE,
        "-o",
        path(&out),
        "--client",
        lockd_guest_tests::HTTP_HOSTILE,
    ]);
    refused(&o, &["exports no lockd:lock interface"]);
}

/// What a plain wasmtime host with WASI 0.2 and wasi:http gives a command.
struct HostState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    table: ResourceTable,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: wasmtime_wasi_http::default_hooks(),
        }
    }
}

/// Runs the command component at `path` with `args` and `env` on a host
/// that knows nothing of lockd:lock; returns (success, stdout).
fn run_on_plain_host(path: &Path, args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let engine = engine();
        let component = Component::from_file(&engine, path).unwrap();
        let mut linker = Linker::<HostState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).unwrap();
        let stdout = MemoryOutputPipe::new(1 << 20);
        let mut wasi = WasiCtxBuilder::new();
        wasi.args(args).stdout(stdout.clone()).inherit_stderr();
        for (k, v) in env {
            wasi.env(k, v);
        }
        let state = HostState {
            wasi: wasi.build(),
            http: WasiHttpCtx::new(),
            table: ResourceTable::new(),
        };
        let mut store = Store::new(&engine, state);
        let command = CliCommand::instantiate_async(&mut store, &component, &linker)
            .await
            .unwrap();
        let result = command.wasi_cli_run().call_run(&mut store).await;
        drop(store);
        let ok = matches!(result, Ok(Ok(())));
        (ok, text(&stdout.contents()))
    })
}

#[test]
fn plugged_conformance_runs_on_a_plain_host_against_lockd_serve() {
    let dir = tempfile::tempdir().unwrap();
    let out = plug_ok(
        dir.path(),
        lockd_guest_tests::RUST_CONFORMANCE,
        lockd_guest_tests::LOCKD_CLIENT,
    );
    let server = Server::start(&[]);
    let (ok, stdout) = run_on_plain_host(
        &out,
        &["rust-conformance", "plugged"],
        &[("LOCKD_URL", &server.url), ("LOCKD_NAMESPACE", "plug-test")],
    );
    assert!(ok, "{stdout}");
    assert!(stdout.contains("ok 12"), "{stdout}");
    // The locks live on the server: the scenario leaves `plugged/held`.
    let reply = server.post_json(
        "/v1/locks/get",
        &serde_json::json!({"namespace": "plug-test", "name": "plugged/held"}),
    );
    assert_eq!(reply.code, 200, "{}", reply.body);
    assert_eq!(reply.json["owner"], "rust", "{}", reply.body);
}
