//! Builds every guest program (`guest/build-all.sh`) and generates
//! `$OUT_DIR/guests.rs`: one path constant per component in `target/guests/`
//! and the `foreach_guest!` macro, in the manner of wasmtime's
//! `crates/test-programs/artifacts`.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let repo = manifest_dir
        .parent()
        .expect("tests/ has a parent directory")
        .to_path_buf();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));

    watch_inputs(&repo);
    build_guests(&repo);

    let guests = find_guests(&repo.join("target").join("guests"));
    fs::write(out_dir.join("guests.rs"), generate(&guests)).expect("write guests.rs");
}

/// Prints `cargo:rerun-if-changed` for every guest source, the WIT packages,
/// the wire crate the composable client is built from (host/api), and this
/// script.
///
/// Files are listed one by one: naming a directory would make cargo watch
/// build outputs inside it too, and anything a build writes after this
/// script started would make every later build rerun it.
fn watch_inputs(repo: &Path) {
    println!("cargo:rerun-if-changed=build.rs");
    for dir in ["guest", "wit", "examples/embed/wit", "host/api"] {
        let mut files = Vec::new();
        walk(&repo.join(dir), &mut files);
        files.sort();
        for file in files {
            println!("cargo:rerun-if-changed={}", file.display());
        }
    }
}

/// Directories under `guest/` that hold build outputs, installed packages or
/// caches, never sources.
const SKIPPED_DIRS: &[&str] = &[
    "target",
    "node_modules",
    "__pycache__",
    ".venv",
    "venv",
    "dist",
    "build",
    "gen",
];

/// File extensions of build outputs that may sit next to sources.
const SKIPPED_EXTENSIONS: &[&str] = &["wasm", "o", "a", "pyc", "tmp"];

/// Collects the source files under `dir` (recursively), skipping output and
/// dependency directories and hidden entries other than `.cargo`.
fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Ok(file_type) = entry.file_type() else {
            continue;
        };
        if name.starts_with('.') && name != ".cargo" {
            continue;
        }
        if file_type.is_dir() {
            if !SKIPPED_DIRS.contains(&name.as_ref()) {
                walk(&path, files);
            }
        } else {
            let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
            if !SKIPPED_EXTENSIONS.contains(&ext) {
                files.push(path);
            }
        }
    }
}

/// Runs `guest/build-all.sh`, which writes `target/guests/*.wasm`. Panics
/// with the script's output if it fails.
fn build_guests(repo: &Path) {
    let script = repo.join("guest").join("build-all.sh");
    let output = Command::new("bash")
        .arg(&script)
        .current_dir(repo)
        .output()
        .unwrap_or_else(|e| panic!("cannot run bash {}: {e}", script.display()));
    if !output.status.success() {
        panic!(
            "{} failed ({}).\n--- stderr ---\n{}\n--- stdout ---\n{}",
            script.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr),
            String::from_utf8_lossy(&output.stdout),
        );
    }
    // Shown by `cargo build -vv`, and kept in the build script's output file.
    print!("{}", String::from_utf8_lossy(&output.stdout));
}

/// The guests in `dir`: (file stem, absolute path), sorted by name.
fn find_guests(dir: &Path) -> Vec<(String, PathBuf)> {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    let mut guests: Vec<(String, PathBuf)> = entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "wasm"))
        .map(|path| {
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_else(|| panic!("guest file name is not UTF-8: {}", path.display()))
                .to_string();
            let path = path.canonicalize().unwrap_or(path);
            (stem, path)
        })
        .collect();
    guests.sort();
    guests
}

/// `rust-conformance` -> `rust_conformance`: a Rust identifier.
fn snake_name(stem: &str) -> String {
    let mut name: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    name
}

/// The text of `guests.rs`.
fn generate(guests: &[(String, PathBuf)]) -> String {
    let mut code = String::from("// Generated by tests/build.rs. Do not edit.\n\n");
    for (stem, path) in guests {
        let path = path
            .to_str()
            .unwrap_or_else(|| panic!("guest path is not UTF-8: {}", path.display()));
        writeln!(
            code,
            "/// Absolute path of the `{stem}` guest component (`target/guests/{stem}.wasm`)."
        )
        .unwrap();
        writeln!(
            code,
            "pub const {}: &str = {path:?};",
            snake_name(stem).to_ascii_uppercase()
        )
        .unwrap();
    }
    code.push_str(
        "\n/// Calls `$mac!(<guest>)` once for each guest component, with the guest's\n\
         /// name in snake case (`rust_conformance`, ...). Use it to assert that every\n\
         /// guest has a test; see the crate docs.\n\
         #[macro_export]\n\
         macro_rules! foreach_guest {\n    ($mac:ident) => {\n",
    );
    for (stem, _) in guests {
        writeln!(code, "        $mac!({});", snake_name(stem)).unwrap();
    }
    code.push_str("    };\n}\n");
    code
}
