//! Builds the client components `lockd plug` composes (`guest/lockd-client`
//! for `lockd:lock@0.1.x`, `guest/lockd-client-p3` for `@0.2.x`) and embeds
//! them in the binary, so that an installed `lockd` (`cargo install --path
//! host/lockd`, the .deb) plugs from any directory, with the clients built
//! from the same sources as the server they talk to.
//!
//! - In a checkout (the guest sources beside this crate), the clients are
//!   built by `guest/build-all.sh lockd-client lockd-client-p3`: the guest
//!   workspace's own build, into the target directory tests/build.rs uses
//!   too (`target/guest-build`), so whichever build runs second finds
//!   them up to date.
//! - `$LOCKD_CLIENTS_DIR` names a directory holding `lockd-client.wasm` and
//!   `lockd-client-p3.wasm` built already (a packager's); nothing is built.
//! - Otherwise (the crate alone, as crates.io has it) nothing is embedded:
//!   `lockd plug` then looks on disk and says how to get a client.
//!
//! Generates `$OUT_DIR/built_in_clients.rs`: the `BUILT_IN` list.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// (guest crate, file the build and `lockd plug` name it by).
const CLIENTS: [(&str, &str); 2] = [
    ("lockd-client", "lockd-client.wasm"),
    ("lockd-client-p3", "lockd-client-p3.wasm"),
];

/// What the clients are built from besides their own crates: the shared
/// client core, the wire crate (host/api), the WIT packages, the guest
/// workspace's manifest and lock.
const SHARED_INPUTS: [&str; 5] = [
    "guest/lockd-client-core",
    "host/api",
    "wit",
    "guest/Cargo.toml",
    "guest/Cargo.lock",
];

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let repo = manifest_dir.join("../..");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=LOCKD_CLIENTS_DIR");

    let from = if let Some(dir) = env::var_os("LOCKD_CLIENTS_DIR").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        for (_, file) in CLIENTS {
            println!("cargo:rerun-if-changed={}", dir.join(file).display());
        }
        Some(dir)
    } else if CLIENTS
        .iter()
        .all(|(name, _)| repo.join("guest").join(name).join("Cargo.toml").is_file())
    {
        watch_sources(&repo);
        build_clients(&repo);
        Some(repo.join("target").join("guests"))
    } else {
        println!(
            "cargo:warning=the guest sources are not beside this crate and LOCKD_CLIENTS_DIR is \
             not set: this lockd embeds no client component (`lockd plug` then needs --client \
             or $LOCKD_CLIENT_WASM)"
        );
        None
    };

    let mut generated = String::from(
        "/// The client components built into this binary (empty when it was built \
         without them).\npub const BUILT_IN: &[lockd_components::compose::BuiltIn] = &[\n",
    );
    if let Some(dir) = from {
        for (_, file) in CLIENTS {
            // A copy in OUT_DIR: what is embedded cannot change under rustc
            // while another build rewrites target/guests.
            let source = dir.join(file);
            let copy = out_dir.join(file);
            fs::copy(&source, &copy).unwrap_or_else(|e| {
                panic!("cannot copy the client component {}: {e}", source.display())
            });
            let _ = writeln!(
                generated,
                "    lockd_components::compose::BuiltIn {{ file: {file:?}, bytes: include_bytes!({:?}) }},",
                copy.display().to_string()
            );
        }
    }
    generated.push_str("];\n");
    fs::write(out_dir.join("built_in_clients.rs"), generated).expect("write built_in_clients.rs");
}

/// Reruns this script when a client's sources change (files one by one:
/// naming a directory would also watch what builds write inside it).
fn watch_sources(repo: &Path) {
    let mut files = Vec::new();
    for (name, _) in CLIENTS {
        walk(&repo.join("guest").join(name), &mut files);
    }
    for input in SHARED_INPUTS {
        let path = repo.join(input);
        if path.is_dir() {
            walk(&path, &mut files);
        } else {
            files.push(path);
        }
    }
    files.sort();
    for file in files {
        println!("cargo:rerun-if-changed={}", file.display());
    }
}

/// The source files under `dir`, skipping build outputs and hidden entries.
fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') || name == "target" {
            continue;
        }
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => walk(&path, files),
            Ok(_) => files.push(path),
            Err(_) => {}
        }
    }
}

/// Runs `guest/build-all.sh` for the clients (it clears the environment
/// cargo gives build scripts and writes `target/guests/<file>` by rename, so
/// a reader never sees half a file). Panics with its output if it fails:
/// a checkout's lockd without its clients would fail later, less clearly.
fn build_clients(repo: &Path) {
    let script = repo.join("guest").join("build-all.sh");
    let output = Command::new("bash")
        .arg(&script)
        .args(CLIENTS.map(|(name, _)| name))
        .current_dir(repo)
        .output()
        .unwrap_or_else(|e| panic!("cannot run bash {}: {e}", script.display()));
    if !output.status.success() {
        panic!(
            "{} failed ({}); set LOCKD_CLIENTS_DIR to a directory holding the built clients to \
             skip it.\n--- stderr ---\n{}\n--- stdout ---\n{}",
            script.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr),
            String::from_utf8_lossy(&output.stdout),
        );
    }
}
