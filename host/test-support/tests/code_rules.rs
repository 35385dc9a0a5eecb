//! The rules the code keeps as it grows (docs/internals.md, "Code rules"),
//! checked over the whole tree so that a change which breaks one fails here:
//! - no function (free, method or trait default) in `host/*/src` or the
//!   native client's `client/src` over [`MAX_FUNCTION_LINES`] lines, tests
//!   inside `src` included;
//! - no `json!` in production code of those crates (typed `Serialize`
//!   structs spell every reply and request; `#[cfg(test)]` items and the
//!   test support crate may use it);
//! - no `#[path]` attribute reaching into another crate, anywhere in `host/`,
//!   `client/` or `guest/` (two crates that share code share a crate);
//! - no production crate (every one of those but the test support) over
//!   [`MAX_CRATE_LINES`] lines of Rust in its `src`, its unit tests not
//!   counted.
//!
//! Each rule also runs on a small source made to break it (the negative
//! controls at the bottom), so a checker that stopped seeing violations
//! fails too.

use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// The longest a function may be, counted from its signature's first line
/// to its closing brace.
const MAX_FUNCTION_LINES: usize = 100;

/// The most lines of Rust one production crate's `src` may hold.
const MAX_CRATE_LINES: usize = 8_000;

/// Crates under `host/` that no production build links.
const TEST_ONLY_CRATES: &[&str] = &["test-support"];

/// Production crates at the top of the tree, held to the same rules as
/// those under `host/`.
const TOP_LEVEL_CRATES: &[&str] = &["client"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file below `dir`, skipping build output and dependencies.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if path.is_dir() {
                if !matches!(name.as_ref(), "target" | "node_modules" | ".git") {
                    stack.push(path);
                }
            } else if name.ends_with(".rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The `src` folders of the crates under `host/` and of
/// [`TOP_LEVEL_CRATES`], by crate folder path (`host/core`, `client`).
fn host_crates() -> Vec<(String, PathBuf)> {
    let mut crates: Vec<(String, PathBuf)> = std::fs::read_dir(repo().join("host"))
        .expect("host/ is readable")
        .flatten()
        .filter(|e| e.path().join("Cargo.toml").is_file())
        .map(|e| {
            (
                format!("host/{}", e.file_name().to_string_lossy()),
                e.path().join("src"),
            )
        })
        .collect();
    for name in TOP_LEVEL_CRATES {
        let src = repo().join(name).join("src");
        assert!(src.is_dir(), "{name}/src is missing");
        crates.push((name.to_string(), src));
    }
    crates.sort();
    crates
}

/// A function longer than the limit: where, its name, its length.
#[derive(Debug, PartialEq)]
struct LongFunction {
    name: String,
    line: usize,
    lines: usize,
}

struct FunctionLengths {
    long: Vec<LongFunction>,
}

impl FunctionLengths {
    fn measure(&mut self, name: &syn::Ident, span_start: usize, span_end: usize) {
        let lines = span_end + 1 - span_start;
        if lines > MAX_FUNCTION_LINES {
            self.long.push(LongFunction {
                name: name.to_string(),
                line: span_start,
                lines,
            });
        }
    }
}

fn lines_of(spanned: &impl syn::spanned::Spanned) -> (usize, usize) {
    let span = spanned.span();
    (span.start().line, span.end().line)
}

impl<'ast> Visit<'ast> for FunctionLengths {
    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        let (start, end) = lines_of(item);
        self.measure(&item.sig.ident, start, end);
        syn::visit::visit_item_fn(self, item);
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        let (start, end) = lines_of(item);
        self.measure(&item.sig.ident, start, end);
        syn::visit::visit_impl_item_fn(self, item);
    }

    fn visit_trait_item_fn(&mut self, item: &'ast syn::TraitItemFn) {
        if item.default.is_some() {
            let (start, end) = lines_of(item);
            self.measure(&item.sig.ident, start, end);
        }
        syn::visit::visit_trait_item_fn(self, item);
    }
}

fn long_functions(source: &str) -> Vec<LongFunction> {
    let file = syn::parse_file(source).expect("the source parses");
    let mut visitor = FunctionLengths { long: Vec::new() };
    visitor.visit_file(&file);
    visitor.long
}

/// Lines (1-based) of `json!` invocations outside `#[cfg(test)]` items.
fn production_json_macros(source: &str) -> Vec<usize> {
    struct JsonMacros {
        lines: Vec<usize>,
    }
    impl<'ast> Visit<'ast> for JsonMacros {
        fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
            if !is_cfg_test(&item.attrs) {
                syn::visit::visit_item_mod(self, item);
            }
        }
        fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
            if !is_cfg_test(&item.attrs) {
                syn::visit::visit_item_fn(self, item);
            }
        }
        fn visit_macro(&mut self, mac: &'ast syn::Macro) {
            if mac.path.segments.last().is_some_and(|s| s.ident == "json") {
                self.lines.push(lines_of(&mac.path).0);
            }
            syn::visit::visit_macro(self, mac);
        }
    }
    let file = syn::parse_file(source).expect("the source parses");
    let mut visitor = JsonMacros { lines: Vec::new() };
    visitor.visit_file(&file);
    visitor.lines
}

/// `#[path = "..."]` attributes whose target leaves the crate's `src`:
/// any path with a `..` component.
fn cross_crate_paths(source: &str) -> Vec<String> {
    let file = syn::parse_file(source).expect("the source parses");
    struct Paths {
        found: Vec<String>,
    }
    impl<'ast> Visit<'ast> for Paths {
        fn visit_attribute(&mut self, attr: &'ast syn::Attribute) {
            if attr.path().is_ident("path") {
                if let Ok(nv) = attr.meta.require_name_value() {
                    if let syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(s),
                        ..
                    }) = &nv.value
                    {
                        if s.value().split('/').any(|part| part == "..") {
                            self.found.push(s.value());
                        }
                    }
                }
            }
        }
    }
    let mut visitor = Paths { found: Vec::new() };
    visitor.visit_file(&file);
    visitor.found
}

/// Whether a file holds only tests: `tests.rs`, or a file below a `tests`
/// folder (the files a `#[cfg(test)] mod tests;` brings in).
fn is_test_module_file(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == "tests.rs")
        || path.parent().is_some_and(|dir| {
            dir.ends_with("tests") || dir.components().any(|c| c.as_os_str() == "tests")
        })
}

/// A file's lines less those of its `#[cfg(test)]` items.
fn production_lines(source: &str) -> usize {
    let file = syn::parse_file(source).expect("the source parses");
    let test_lines: usize = file
        .items
        .iter()
        .filter(|item| match item {
            syn::Item::Mod(m) => is_cfg_test(&m.attrs),
            syn::Item::Fn(f) => is_cfg_test(&f.attrs),
            _ => false,
        })
        .map(|item| {
            let (start, end) = lines_of(item);
            end + 1 - start
        })
        .sum();
    source.lines().count() - test_lines
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.meta.require_list().is_ok_and(|list| {
                list.tokens
                    .to_string()
                    .split_whitespace()
                    .any(|t| t == "test")
            })
    })
}

/// Whether the crate at `name` (`host/test-support`) is linked by no
/// production build.
fn is_test_only(name: &str) -> bool {
    name.strip_prefix("host/")
        .is_some_and(|folder| TEST_ONLY_CRATES.contains(&folder))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn relative(path: &Path) -> String {
    let repo = repo().canonicalize().unwrap();
    let path = path.canonicalize().unwrap();
    path.strip_prefix(&repo)
        .unwrap_or(&path)
        .display()
        .to_string()
}

#[test]
fn no_function_in_host_src_is_over_the_limit() {
    let mut found = Vec::new();
    for (_, src) in host_crates() {
        for file in rust_files(&src) {
            for f in long_functions(&read(&file)) {
                found.push(format!(
                    "{}:{} {} ({} lines)",
                    relative(&file),
                    f.line,
                    f.name,
                    f.lines
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines (split them by job):\n{}",
        found.join("\n")
    );
}

#[test]
fn no_json_macro_in_production_code() {
    let mut found = Vec::new();
    for (name, src) in host_crates() {
        if is_test_only(&name) {
            continue;
        }
        for file in rust_files(&src) {
            for line in production_json_macros(&read(&file)) {
                found.push(format!("{}:{line}", relative(&file)));
            }
        }
    }
    assert!(
        found.is_empty(),
        "json! in production code (use a typed Serialize struct):\n{}",
        found.join("\n")
    );
}

#[test]
fn no_path_attribute_reaches_into_another_crate() {
    let mut found = Vec::new();
    for top in ["host", "client", "guest", "bench", "tests", "examples"] {
        for file in rust_files(&repo().join(top)) {
            for path in cross_crate_paths(&read(&file)) {
                found.push(format!("{}: #[path = {path:?}]", relative(&file)));
            }
        }
    }
    assert!(
        found.is_empty(),
        "#[path] across crates (share a crate instead):\n{}",
        found.join("\n")
    );
}

#[test]
fn no_production_crate_is_over_the_limit() {
    let mut found = Vec::new();
    for (name, src) in host_crates() {
        if is_test_only(&name) {
            continue;
        }
        let lines: usize = rust_files(&src)
            .iter()
            .filter(|f| !is_test_module_file(f))
            .map(|f| production_lines(&read(f)))
            .sum();
        if lines > MAX_CRATE_LINES {
            found.push(format!("{name}: {lines} lines"));
        }
    }
    assert!(
        found.is_empty(),
        "crates over {MAX_CRATE_LINES} lines (give a job its own crate):\n{}",
        found.join("\n")
    );
}

// --- Negative controls: each rule sees a violation made for it. -------------

#[test]
fn a_function_one_line_over_the_limit_is_found() {
    let body = "    let _ = 1;\n".repeat(MAX_FUNCTION_LINES - 2);
    let source = format!(
        "fn fits() {{\n{body}}}\nstruct S;\nimpl S {{\n    fn too_long(&self) {{\n{body}    let _ = 2;\n    }}\n}}\n"
    );
    assert_eq!(
        long_functions(&source),
        vec![LongFunction {
            name: "too_long".into(),
            line: MAX_FUNCTION_LINES + 3,
            lines: MAX_FUNCTION_LINES + 1
        }]
    );
}

#[test]
fn a_long_trait_default_method_is_found() {
    let body = "        let _ = 1;\n".repeat(MAX_FUNCTION_LINES);
    let source = format!(
        "trait T {{\n    fn required(&self);\n    fn provided(&self) {{\n{body}    }}\n}}\n"
    );
    let long = long_functions(&source);
    assert_eq!(long.len(), 1);
    assert_eq!(long[0].name, "provided");
}

#[test]
fn json_outside_tests_is_found_and_inside_tests_is_not() {
    let source = r#"
fn reply() -> String { serde_json::json!({"a": 1}).to_string() }
#[cfg(test)]
mod tests {
    fn fixture() -> serde_json::Value { serde_json::json!({"b": 2}) }
}
#[cfg(test)]
fn helper() -> serde_json::Value { json!(null) }
"#;
    assert_eq!(production_json_macros(source), vec![2]);
}

#[test]
fn a_path_into_another_crate_is_found() {
    let source = r#"
#[path = "../../lockd-client/src/grants.rs"]
mod grants;
#[path = "local/inside.rs"]
mod inside;
"#;
    assert_eq!(
        cross_crate_paths(source),
        vec!["../../lockd-client/src/grants.rs".to_string()]
    );
}

#[test]
fn a_crate_counts_its_code_and_not_its_tests() {
    let source = "fn a() {}\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn t() {}\n}\nfn b() {}\n";
    assert_eq!(production_lines(source), 2);
    assert!(is_test_module_file(Path::new(
        "host/core/src/keepalive/tests.rs"
    )));
    assert!(!is_test_module_file(Path::new(
        "host/core/src/keepalive.rs"
    )));
}

#[test]
fn the_native_client_is_checked_with_the_host_crates() {
    let crates = host_crates();
    let names: Vec<&str> = crates.iter().map(|(name, _)| name.as_str()).collect();
    assert!(names.contains(&"client"), "{names:?}");
    assert!(names.contains(&"host/core"), "{names:?}");
    assert!(!is_test_only("client") && !is_test_only("host/core"));
    assert!(is_test_only("host/test-support"));
    // Its sources are really read: the transport's failover loop is there.
    let (_, src) = crates.iter().find(|(name, _)| name == "client").unwrap();
    assert!(rust_files(src).iter().any(|f| f.ends_with("transport.rs")));
}
