//! What a dependency does not inherit from its component, withheld inside
//! the composition, as Spin's deny adapter does (`spin_capabilities`): the
//! composed component has one set of imports, so the host cannot give the
//! dependency less than its component; the dependency's withheld imports are
//! satisfied by a small component instead.
//!
//! - `environment` withheld: `wasi:cli/environment@0.2.x` answers an empty
//!   environment, no arguments and no working directory.
//! - `allowed_outbound_hosts` withheld: `wasi:http/outgoing-handler@0.2.x`
//!   answers every request with `internal-error("\"wasi:http/outgoing-handler\"
//!   is not permitted ...")`, as Spin's adapter does, without sending it.
//! - A withheld set the dependency imports in a form lockd has no adapter for
//!   (WASI 0.3's `wasi:cli/environment`, `wasi:http/client`, and Spin's
//!   key-value stores and variables, `key_value_stores` and `variables`) is
//!   refused at startup, naming the setting that lets the dependency
//!   inherit it.
//!
//! The other sets Spin names (`files`, `sqlite_databases`, `ai_models`) are
//! capabilities lockd gives no component, so there is nothing to withhold.

use anyhow::{anyhow, bail, Result};
use wac_graph::types::Package;
use wac_graph::CompositionGraph;

/// The configuration sets Spin knows by name (`spin_capabilities`).
pub const CONFIGURATION_SETS: [&str; 7] = [
    "ai_models",
    "allowed_outbound_hosts",
    "environment",
    "files",
    "key_value_stores",
    "sqlite_databases",
    "variables",
];

/// What a dependency inherits from its component.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inherit {
    /// Every configuration set.
    All,
    /// Only these sets (none when empty).
    Only(Vec<String>),
}

impl Inherit {
    /// Whether the set named `set` (one of [`CONFIGURATION_SETS`]) is
    /// inherited.
    pub fn allows(&self, set: &str) -> bool {
        match self {
            Inherit::All => true,
            Inherit::Only(sets) => sets.iter().any(|s| s == set),
        }
    }
}

/// The environment interface of WASI 0.2, whatever its patch release.
const ENVIRONMENT_P2: &str = "wasi:cli/environment@0.2.";

/// Outgoing HTTP of WASI 0.2, and the types it uses.
const OUTGOING_HANDLER_P2: &str = "wasi:http/outgoing-handler@0.2.";
const HTTP_TYPES_P2: &str = "wasi:http/types@0.2.";

/// Spin's own capabilities lockd serves, by the configuration set that
/// grants them, with the interface names they are imported under.
const SPIN_CAPABILITIES: [(&str, [&str; 2]); 2] = [
    (
        "key_value_stores",
        ["fermyon:spin/key-value@", "spin:key-value/"],
    ),
    ("variables", ["fermyon:spin/variables@", "spin:variables/"]),
];

/// What a dependency without `allowed_outbound_hosts` gets for each request:
/// Spin's words, and why.
pub const HTTP_DENIED: &str = "\"wasi:http/outgoing-handler\" is not permitted \
    (the dependency does not inherit allowed_outbound_hosts)";

/// Returns `bytes` (the dependency `name`) with what `inherit` withholds
/// replaced, or unchanged when it withholds nothing it imports.
pub fn apply(name: &str, bytes: Vec<u8>, inherit: &Inherit) -> Result<Vec<u8>> {
    let mut graph = CompositionGraph::new();
    let package = Package::from_bytes("dependency", None, bytes.clone(), graph.types_mut())
        .map_err(|e| anyhow!("dependency '{name}' is not a valid component: {e:#}"))?;
    let imports: Vec<String> = graph.types()[package.ty()]
        .imports
        .keys()
        .cloned()
        .collect();
    let mut plugs = Vec::new();
    for import in &imports {
        for (set, prefixes) in SPIN_CAPABILITIES {
            if !inherit.allows(set) && prefixes.iter().any(|p| import.starts_with(p)) {
                bail!(withheld_unsupported(name, import, set));
            }
        }
        if !inherit.allows("environment") {
            if import.starts_with(ENVIRONMENT_P2) {
                plugs.push(empty_environment(import)?);
            } else if import.starts_with("wasi:cli/environment@") {
                bail!(withheld_unsupported(name, import, "environment"));
            }
        }
        if !inherit.allows("allowed_outbound_hosts") {
            if import.starts_with(OUTGOING_HANDLER_P2) {
                let Some(types) = imports.iter().find(|i| i.starts_with(HTTP_TYPES_P2)) else {
                    bail!("dependency '{name}' imports {import} without {HTTP_TYPES_P2}x");
                };
                plugs.push(denied_outgoing_http(import, types)?);
            } else if import.starts_with("wasi:http/outgoing-handler@")
                || import.starts_with("wasi:http/client@")
            {
                bail!(withheld_unsupported(name, import, "allowed_outbound_hosts"));
            }
        }
    }
    if plugs.is_empty() {
        return Ok(bytes);
    }
    let socket = graph.register_package(package)?;
    let mut plug_ids = Vec::new();
    for (i, plug) in plugs.into_iter().enumerate() {
        let package = Package::from_bytes(
            &format!("lockd:withheld-{i}"),
            None,
            plug,
            graph.types_mut(),
        )
        .map_err(|e| anyhow!("a lockd withholding adapter is not valid (a lockd bug): {e:#}"))?;
        plug_ids.push(graph.register_package(package)?);
    }
    wac_graph::plug(&mut graph, plug_ids, socket)
        .map_err(|e| anyhow!("withholding configuration from dependency '{name}': {e:#}"))?;
    crate::compose::encode_checked(&graph, "lockd up")
}

fn withheld_unsupported(name: &str, import: &str, set: &str) -> String {
    format!(
        "dependency '{name}' imports {import}, which lockd cannot withhold from it: let it \
         inherit the component's `{set}` (`dependencies_inherit_configuration = true`, or \
         `inherit_configuration = [\"{set}\", ...]` on the dependency)"
    )
}

/// A component exporting `interface` (a `wasi:cli/environment@0.2.x`) whose
/// functions answer nothing: every result is read from zeroed memory, which
/// is an empty list or `none`.
fn empty_environment(interface: &str) -> Result<Vec<u8>> {
    let wat = format!(
        r#"(component
  (core module $m
    (memory (export "memory") 1)
    (func (export "nothing") (result i32) (i32.const 0)))
  (core instance $i (instantiate $m))
  (func $get-environment (result (list (tuple string string)))
    (canon lift (core func $i "nothing") (memory (core memory $i "memory"))))
  (func $get-arguments (result (list string))
    (canon lift (core func $i "nothing") (memory (core memory $i "memory"))))
  (func $initial-cwd (result (option string))
    (canon lift (core func $i "nothing") (memory (core memory $i "memory"))))
  (instance $environment
    (export "get-environment" (func $get-environment))
    (export "get-arguments" (func $get-arguments))
    (export "initial-cwd" (func $initial-cwd)))
  (export "{interface}" (instance $environment)))"#
    );
    wat::parse_str(wat).map_err(|e| anyhow!("the empty environment (a lockd bug): {e}"))
}

/// A component exporting `interface` (a `wasi:http/outgoing-handler@0.2.x`,
/// over the `types` import) whose `handle` sends nothing and answers
/// `err(internal-error(some(HTTP_DENIED)))`.
///
/// The answer is a constant in memory, laid out by the canonical ABI:
/// `result<own<future-incoming-response>, error-code>` has its tag at 0 and
/// its payload at 8 (`error-code` holds `u64`s, so aligns to 8); the
/// `error-code` tag (38, `internal-error`) at 8 and its payload at 16
/// (again 8-aligned); that `option<string>`'s tag at 16 and the string's
/// pointer and length at 20 and 24. The message itself sits at 64.
fn denied_outgoing_http(interface: &str, types: &str) -> Result<Vec<u8>> {
    const INTERNAL_ERROR: u8 = 38;
    let len = HTTP_DENIED.len();
    let message: String = HTTP_DENIED.bytes().map(|b| format!("\\{b:02x}")).collect();
    let len_bytes: String = (len as u32)
        .to_le_bytes()
        .iter()
        .map(|b| format!("\\{b:02x}"))
        .collect();
    let types_import = http_types_import(types);
    let wat = format!(
        r#"(component
{types_import}
  (alias export $types "outgoing-request" (type $outgoing-request))
  (alias export $types "request-options" (type $request-options))
  (alias export $types "future-incoming-response" (type $future-incoming-response))
  (alias export $types "error-code" (type $error-code))
  (core module $m
    (memory (export "memory") 1)
    (data (i32.const 0) "\01")
    (data (i32.const 8) "\{INTERNAL_ERROR:02x}")
    (data (i32.const 16) "\01")
    (data (i32.const 20) "\40\00\00\00")
    (data (i32.const 24) "{len_bytes}")
    (data (i32.const 64) "{message}")
    (func (export "handle") (param i32 i32 i32) (result i32) (i32.const 0)))
  (core instance $i (instantiate $m))
  (func $handle
    (param "request" (own $outgoing-request))
    (param "options" (option (own $request-options)))
    (result (result (own $future-incoming-response) (error $error-code)))
    (canon lift (core func $i "handle") (memory (core memory $i "memory"))))
  (instance $outgoing-handler
    (export "outgoing-request" (type $outgoing-request))
    (export "request-options" (type $request-options))
    (export "future-incoming-response" (type $future-incoming-response))
    (export "error-code" (type $error-code))
    (export "handle" (func $handle)))
  (export "{interface}" (instance $outgoing-handler)))"#
    );
    wat::parse_str(wat).map_err(|e| anyhow!("the outgoing HTTP denial (a lockd bug): {e}"))
}

/// The import of `types` (a `wasi:http/types@0.2.x`) with what the denying
/// `handle` names: the request, options and future-response resources, and
/// `error-code` with every case of WASI 0.2's.
fn http_types_import(types: &str) -> String {
    format!(
        r#"  (import "{types}" (instance $types
    (export "outgoing-request" (type (sub resource)))
    (export "request-options" (type (sub resource)))
    (export "future-incoming-response" (type (sub resource)))
    (type $dns (record (field "rcode" (option string)) (field "info-code" (option u16))))
    (export "DNS-error-payload" (type $dns-payload (eq $dns)))
    (type $tls (record (field "alert-id" (option u8)) (field "alert-message" (option string))))
    (export "TLS-alert-received-payload" (type $tls-payload (eq $tls)))
    (type $field (record (field "field-name" (option string)) (field "field-size" (option u32))))
    (export "field-size-payload" (type $field-payload (eq $field)))
    (type $error (variant
      (case "DNS-timeout")
      (case "DNS-error" $dns-payload)
      (case "destination-not-found")
      (case "destination-unavailable")
      (case "destination-IP-prohibited")
      (case "destination-IP-unroutable")
      (case "connection-refused")
      (case "connection-terminated")
      (case "connection-timeout")
      (case "connection-read-timeout")
      (case "connection-write-timeout")
      (case "connection-limit-reached")
      (case "TLS-protocol-error")
      (case "TLS-certificate-error")
      (case "TLS-alert-received" $tls-payload)
      (case "HTTP-request-denied")
      (case "HTTP-request-length-required")
      (case "HTTP-request-body-size" (option u64))
      (case "HTTP-request-method-invalid")
      (case "HTTP-request-URI-invalid")
      (case "HTTP-request-URI-too-long")
      (case "HTTP-request-header-section-size" (option u32))
      (case "HTTP-request-header-size" (option $field-payload))
      (case "HTTP-request-trailer-section-size" (option u32))
      (case "HTTP-request-trailer-size" $field-payload)
      (case "HTTP-response-incomplete")
      (case "HTTP-response-header-section-size" (option u32))
      (case "HTTP-response-header-size" $field-payload)
      (case "HTTP-response-body-size" (option u64))
      (case "HTTP-response-trailer-section-size" (option u32))
      (case "HTTP-response-trailer-size" $field-payload)
      (case "HTTP-response-transfer-coding" (option string))
      (case "HTTP-response-content-coding" (option string))
      (case "HTTP-response-timeout")
      (case "HTTP-upgrade-failed")
      (case "HTTP-protocol-error")
      (case "loop-detected")
      (case "configuration-error")
      (case "internal-error" (option string))))
    (export "error-code" (type (eq $error)))))"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The adapters are valid components exporting what they replace.
    /// (host/lockd/tests/spin_dependencies.rs runs them composed with the client.)
    #[test]
    fn adapters_are_valid_components() {
        for (bytes, export) in [
            (
                empty_environment("wasi:cli/environment@0.2.6").unwrap(),
                "wasi:cli/environment@0.2.6",
            ),
            (
                denied_outgoing_http("wasi:http/outgoing-handler@0.2.4", "wasi:http/types@0.2.4")
                    .unwrap(),
                "wasi:http/outgoing-handler@0.2.4",
            ),
        ] {
            let mut types = wac_graph::types::Types::default();
            let package = Package::from_bytes("adapter", None, bytes, &mut types).unwrap();
            let world = &types[package.ty()];
            assert_eq!(world.exports.keys().collect::<Vec<_>>(), [export]);
        }
    }

    #[test]
    fn nothing_to_withhold_leaves_the_bytes_alone() {
        // A component importing nothing: any inherit setting returns it as is.
        let bytes = wat::parse_str("(component)").unwrap();
        let out = apply("d", bytes.clone(), &Inherit::Only(Vec::new())).unwrap();
        assert_eq!(out, bytes);
    }
}
