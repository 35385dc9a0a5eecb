use super::*;

/// lockd's namespace rule, as far as these tests need it.
fn namespaces(ns: &str) -> Result<(), String> {
    if ns.is_empty() || ns.len() > 64 || ns.contains('/') {
        Err(format!("{ns:?} is not a namespace"))
    } else {
        Ok(())
    }
}

const REDIS_LOCK: &str = "\
apiVersion: dapr.io/v1alpha1
kind: Component
metadata:
  name: orders
  namespace: production
spec:
  type: lock.redis
  version: v1
  initTimeout: 1m
  metadata:
  - name: redisHost
    value: localhost:6379
  - name: redisPassword
    secretKeyRef:
      name: redis
      key: password
  - name: enableTLS
    value: false
scopes:
- checkout
";

fn parsed(text: &str) -> anyhow::Result<Vec<LockStore>> {
    parse_components(Path::new("dir/c.yaml"), text)
}

fn refusal(text: &str) -> String {
    format!("{:#}", parsed(text).unwrap_err())
}

#[test]
fn a_lock_component_declares_a_store_named_as_its_namespace() {
    assert_eq!(
        parsed(REDIS_LOCK).unwrap(),
        [LockStore {
            name: "orders".into(),
            component_type: "lock.redis".into(),
            version: "v1".into(),
            namespace: "orders".into(),
            file: PathBuf::from("dir/c.yaml"),
        }]
    );
    // No version, no metadata: both optional.
    let bare = "apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata: {name: b}\nspec: {type: lock.in-memory}\n";
    let stores = parsed(bare).unwrap();
    assert_eq!(
        (stores[0].name.as_str(), stores[0].version.as_str()),
        ("b", "")
    );
}

#[test]
fn several_documents_and_other_types_and_kinds() {
    let text = format!(
        "---\n# comments only\n---\n{REDIS_LOCK}---\n\
         apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata:\n  name: statestore\n\
         spec:\n  type: state.redis\n  version: v1\n---\n\
         apiVersion: dapr.io/v1alpha1\nkind: Configuration\nmetadata:\n  name: tracing\n\
         spec:\n  tracing: {{samplingRate: \"1\"}}\n---\n\
         apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata:\n  name: jobs\n\
         spec:\n  type: lock.etcd\n  version: v2\n---\n"
    );
    let names: Vec<_> = parsed(&text)
        .unwrap()
        .into_iter()
        .map(|s| (s.name, s.component_type))
        .collect();
    assert_eq!(
        names,
        [
            ("orders".to_string(), "lock.redis".to_string()),
            ("jobs".to_string(), "lock.etcd".to_string())
        ]
    );
    // Negative control: a file of other components declares no store.
    let state_only = "apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata: {name: s}\nspec: {type: state.redis, version: v1}\n";
    assert_eq!(parsed(state_only).unwrap(), []);
    assert_eq!(parsed("").unwrap(), []);
}

#[test]
fn each_malformed_document_is_refused_naming_the_file_document_and_field() {
    let lock = |body: &str| format!("apiVersion: dapr.io/v1alpha1\nkind: Component\n{body}");
    let cases: Vec<(String, &str)> = vec![
        ("kind: Component\nmetadata: [".into(), "dir/c.yaml: document 1: not YAML"),
        ("- a list\n".into(), "dir/c.yaml: document 1: invalid type: sequence"),
        ("apiVersion: dapr.io/v1alpha1\nmetadata: {name: x}\n".into(), "document 1: missing field `kind`"),
        (lock("spec: {type: lock.redis}\n"), "dir/c.yaml: document 1: missing field `metadata`"),
        (lock("metadata: {name: x}\n"), "document 1: missing field `spec`"),
        (lock("metadata: {}\nspec: {type: lock.redis}\n"), "document 1: metadata: missing field `name`"),
        (lock("metadata: {name: \"\"}\nspec: {type: lock.redis}\n"), "document 1: metadata.name: empty"),
        (lock("metadata: {name: x}\nspec: {version: v1}\n"), "document 1: spec: missing field `type`"),
        (lock("metadata: {name: x}\nspec: {type: [lock.redis]}\n"), "document 1: spec.type: invalid type: sequence"),
        (lock("metadata: {name: x}\nspec: {type: lock.redis, version: 1}\n"), "document 1: spec.version: invalid type: integer `1`"),
        (lock("metadata: {name: x}\nspec: {type: lock.redis, metadata: {redisHost: h}}\n"), "document 1: spec.metadata: invalid type: map"),
        (lock("metadata: {name: x}\nspec: {type: lock.redis, metadata: [{value: h}]}\n"), "document 1: spec.metadata[0]: missing field `name`"),
        (
            "apiVersion: dapr.io/v2\nkind: Component\nmetadata: {name: x}\nspec: {type: lock.redis}\n".into(),
            "dir/c.yaml: document 1: apiVersion: \"dapr.io/v2\" is not \"dapr.io/v1alpha1\"",
        ),
        (format!("{REDIS_LOCK}---\nkind: Component\n"), "dir/c.yaml: document 2: missing field `apiVersion`"),
    ];
    for (text, needle) in &cases {
        let m = refusal(text);
        assert!(m.contains(needle), "{text}\n=> {m}\nwants {needle}");
    }
}

fn folder(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

fn config(dir: &Path, stores: &[(&str, &str)]) -> DaprConfig {
    DaprConfig {
        components: Some(dir.to_path_buf()),
        stores: stores
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..DaprConfig::default()
    }
}

fn lock_component(name: &str) -> String {
    format!(
        "apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata:\n  name: {name}\nspec:\n  type: lock.redis\n  version: v1\n"
    )
}

#[test]
fn a_folder_declares_its_yaml_files_stores_with_the_mapped_namespaces() {
    let dir = folder(&[
        ("a.yaml", &lock_component("orders")),
        ("b.yml", &lock_component("jobs")),
        ("c.yaml.bak", &lock_component("ignored")),
        ("README.md", "# not YAML"),
    ]);
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/d.yaml"), lock_component("nested")).unwrap();
    let stores = LockStores::load(&config(dir.path(), &[("orders", "shop")]), namespaces).unwrap();
    assert_eq!(stores.lookup("orders"), Lookup::Namespace("shop"));
    assert_eq!(stores.lookup("jobs"), Lookup::Namespace("jobs"));
    // Negative controls: undeclared names, and a namespace is not a store.
    for name in ["ignored", "nested", "shop", "order", "Orders"] {
        assert_eq!(stores.lookup(name), Lookup::NotFound, "{name}");
    }
    let declared: Vec<_> = stores.declared().map(|s| s.name.as_str()).collect();
    assert_eq!(declared, ["jobs", "orders"]);
    let line = stores.start_up_line(Some(dir.path()));
    assert!(
        line.contains("jobs (namespace jobs) orders (namespace shop)"),
        "{line}"
    );
}

#[test]
fn no_folder_is_not_configured_any_store_takes_any_name_and_a_folder_without_lock_stores_is_not_configured(
) {
    let none = LockStores::load(&DaprConfig::default(), namespaces).unwrap();
    assert_eq!(none.lookup("whatever"), Lookup::NotConfigured);
    let line = none.start_up_line(None);
    assert!(
        line.contains("ERR_LOCK_STORE_NOT_CONFIGURED") && line.contains("any_store"),
        "{line}"
    );
    let any_store = DaprConfig {
        any_store: true,
        ..DaprConfig::default()
    };
    let any = LockStores::load(&any_store, namespaces).unwrap();
    assert_eq!(any, LockStores::AnyName);
    assert_eq!(any.lookup("whatever"), Lookup::Namespace("whatever"));
    assert_eq!(any.declared().count(), 0);
    assert!(any.start_up_line(None).contains("--dapr-components"));
    // Both: which one is meant is unclear, so the start is refused.
    let both = DaprConfig {
        components: Some(PathBuf::from("somewhere")),
        ..any_store
    };
    let refused = LockStores::load(&both, namespaces).unwrap_err().to_string();
    assert!(refused.contains("set one"), "{refused}");
    let state = "apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata: {name: s}\nspec: {type: state.redis}\n";
    let dir = folder(&[("state.yaml", state)]);
    let none = LockStores::load(&config(dir.path(), &[]), namespaces).unwrap();
    assert_eq!(none.lookup("s"), Lookup::NotConfigured);
    assert!(none
        .start_up_line(Some(dir.path()))
        .contains("ERR_LOCK_STORE_NOT_CONFIGURED"));
    let empty = folder(&[]);
    let none = LockStores::load(&config(empty.path(), &[]), namespaces).unwrap();
    assert_eq!(none.lookup("s"), Lookup::NotConfigured);
}

#[test]
fn a_folder_that_cannot_serve_is_refused_naming_why() {
    let load = |dir: &Path, stores: &[(&str, &str)]| {
        format!(
            "{:#}",
            LockStores::load(&config(dir, stores), namespaces).unwrap_err()
        )
    };
    let dir = folder(&[("a.yaml", &lock_component("orders"))]);
    let missing = dir.path().join("nope");
    let m = load(&missing, &[]);
    assert!(
        m.contains("reading the Dapr components folder") && m.contains("nope"),
        "{m}"
    );
    let m = load(dir.path(), &[("order", "shop")]);
    assert!(
        m.contains("[dapr.stores] names \"order\"") && m.contains("declared: orders"),
        "{m}"
    );
    let m = load(dir.path(), &[("orders", "a/b")]);
    assert!(
        m.contains("[dapr.stores] orders = \"a/b\" is not a lockd namespace"),
        "{m}"
    );
    let long = "x".repeat(65);
    let bad_name = folder(&[("long.yaml", &lock_component(&long))]);
    let m = load(bad_name.path(), &[]);
    assert!(
        m.contains("long.yaml: lock store") && m.contains("[dapr.stores]"),
        "{m}"
    );
    // ...unless [dapr.stores] gives it a namespace.
    let config_long = config(bad_name.path(), &[(long.as_str(), "ok")]);
    let stores = LockStores::load(&config_long, namespaces).unwrap();
    assert_eq!(stores.lookup(&long), Lookup::Namespace("ok"));
    let twice = folder(&[
        ("a.yaml", &lock_component("orders")),
        ("b.yaml", &lock_component("orders")),
    ]);
    let m = load(twice.path(), &[]);
    assert!(
        m.contains("b.yaml: lock store \"orders\" is declared twice") && m.contains("a.yaml"),
        "{m}"
    );
    let broken = folder(&[
        ("a.yaml", &lock_component("orders")),
        ("b.yaml", "kind: Component\nspec: ["),
    ]);
    let m = load(broken.path(), &[]);
    assert!(m.contains("b.yaml: document 1: not YAML"), "{m}");
    let no_folder = DaprConfig {
        stores: [("orders".to_string(), "shop".to_string())].into(),
        ..DaprConfig::default()
    };
    let m = format!(
        "{:#}",
        LockStores::load(&no_folder, namespaces).unwrap_err()
    );
    assert!(
        m.contains("[dapr] components is not set") && m.contains("--dapr-components"),
        "{m}"
    );
}
