//! Spin's key-value stores and variables under `lockd up`, through the
//! example `kv-counter` (guest/kv-counter): a counter updated under a
//! lockd lock loses no update among concurrent requests, its tokens rise
//! with its values, it survives a restart on the redb store, and its step
//! comes from a Spin variable. The same updates without the lock (the
//! example's `?nolock=1` control) lose some, which shows the test can fail.

mod lockd_server;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::lockd_server::{lockd_in_dir, request, Reply, Server};
use lockd_test_support::etcd::EtcdCluster;

/// Concurrent POSTs on one counter.
const WRITERS: u64 = 50;

/// The example's components (`kv-counter` on spin-sdk 5.2, WASI 0.2;
/// `kv-counter-p3` on spin-sdk 7.0, WASI 0.3), built once per test binary
/// by `guest/build-all.sh` (a no-op when they are up to date) into
/// `target/examples/`.
fn example_wasm(name: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    BUILT.get_or_init(|| {
        let status = std::process::Command::new("bash")
            .arg(repo.join("guest/build-all.sh"))
            .args(["kv-counter", "kv-counter-p3"])
            .status()
            .unwrap();
        assert!(status.success(), "building the examples: {status}");
    });
    repo.join(format!("target/examples/{name}.wasm"))
}

/// A directory holding a spin.toml that serves the built `kv-counter` at
/// `/counter/...` with the `default` store and `counter_step` (default 1),
/// and a lockd.toml keeping the locks (and so the key-value file) in it.
fn app_dir(extra_manifest: &str, extra_config: &str) -> tempfile::TempDir {
    app_dir_on("redb:locks.redb", extra_manifest, extra_config)
}

/// [`app_dir`] with the locks (and the key-value data) in `store`.
fn app_dir_on(store: &str, extra_manifest: &str, extra_config: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("spin.toml"),
        format!(
            r#"spin_manifest_version = 2
[application]
name = "kv-counter-test"
[variables]
counter_step = {{ default = "1" }}
[[trigger.http]]
route = "/counter/..."
component = "kv-counter"
[[trigger.http]]
route = "/p3/..."
component = "kv-counter-p3"
[component.kv-counter]
source = {wasm:?}
key_value_stores = ["default"]
[component.kv-counter.variables]
counter_step = "{{{{ counter_step }}}}"
[component.kv-counter-p3]
source = {wasm_p3:?}
key_value_stores = ["default"]
[component.kv-counter-p3.variables]
counter_step = "{{{{ counter_step }}}}"
tagged = "step {{{{ counter_step }}}} of many"
{extra_manifest}"#,
            wasm = example_wasm("kv-counter").display().to_string(),
            wasm_p3 = example_wasm("kv-counter-p3").display().to_string(),
        ),
    )
    .unwrap();
    // `store` in lockd.toml rather than --store: the key-value file goes
    // beside the store lockd.toml names.
    std::fs::write(
        dir.path().join("lockd.toml"),
        format!("store = {store:?}\n{extra_config}"),
    )
    .unwrap();
    dir
}

fn up(dir: &Path, env: &[(&str, &str)]) -> Server {
    Server::start_in(Some(dir), &["--manifest", "spin.toml"], env)
}

/// `n` POSTs to `path` at once, each on its own thread; their replies.
fn concurrent_posts(server: &Server, path: &str, n: u64) -> Vec<Reply> {
    let url = server.url.clone();
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (url, path) = (url.clone(), path.to_string());
            std::thread::spawn(move || request("POST", &url, &path, Some(""), None))
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// Every reply is 200 and the values are exactly step, 2 step, ... in
/// some order, with tokens rising with them; the last (value, token).
fn assert_serialised(replies: &[Reply], step: u64, from: u64) -> (u64, u64) {
    let mut answers: Vec<(u64, u64)> = replies
        .iter()
        .map(|r| {
            assert_eq!(r.code, 200, "{}", r.body);
            (
                r.json["value"].as_u64().unwrap(),
                r.json["fencing_token"].as_u64().unwrap(),
            )
        })
        .collect();
    answers.sort_unstable();
    let values: Vec<u64> = answers.iter().map(|a| a.0).collect();
    let expected: Vec<u64> = (1..=replies.len() as u64)
        .map(|i| from + i * step)
        .collect();
    assert_eq!(values, expected, "an update was lost or doubled");
    for pair in answers.windows(2) {
        assert!(
            pair[0].1 < pair[1].1,
            "tokens do not rise with values: {answers:?}"
        );
    }
    *answers.last().unwrap()
}

#[test]
fn locked_updates_are_serialised_durable_and_the_unlocked_control_loses_some() {
    let started = Instant::now();
    let dir = app_dir("", "");
    let (value, token) = {
        let server = up(dir.path(), &[]);
        let replies = concurrent_posts(&server, "/counter/hits", WRITERS);
        let last = assert_serialised(&replies, 1, 0);
        assert_eq!(last.0, WRITERS);
        let read = server.get("/counter/hits");
        assert_eq!(
            (read.code, read.json["value"].as_u64()),
            (200, Some(WRITERS)),
            "{}",
            read.body
        );

        // The control: the same updates without the lock lose some.
        let replies = concurrent_posts(&server, "/counter/unlocked?nolock=1", WRITERS);
        assert!(replies.iter().all(|r| r.code == 200));
        let read = server.get("/counter/unlocked");
        let unlocked = read.json["value"].as_u64().unwrap();
        assert!(
            unlocked < WRITERS,
            "no update was lost without the lock ({unlocked})"
        );
        last
        // The server is killed here (SIGKILL): what `set` acknowledged is on disk.
    };
    let server = up(dir.path(), &[]);
    let read = server.get("/counter/hits");
    assert_eq!(read.json["value"].as_u64(), Some(value), "{}", read.body);
    let next = server.post("/counter/hits", "");
    assert_eq!(next.code, 200, "{}", next.body);
    assert_eq!(
        next.json["value"].as_u64(),
        Some(value + 1),
        "{}",
        next.body
    );
    assert!(
        next.json["fencing_token"].as_u64().unwrap() > token,
        "{}",
        next.body
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn the_step_comes_from_spin_variable_counter_step() {
    let dir = app_dir("", "");
    let server = up(dir.path(), &[("SPIN_VARIABLE_COUNTER_STEP", "5")]);
    let replies = concurrent_posts(&server, "/counter/fives", 10);
    assert_serialised(&replies, 5, 0);
    drop(server);
    // lockd.toml's [variables] gives a value too; the environment wins over it.
    let dir = app_dir("", "[variables]\ncounter_step = \"3\"\n");
    let server = up(dir.path(), &[]);
    assert_eq!(server.post("/counter/threes", "").json["value"], 3);
    drop(server);
    let server = up(dir.path(), &[("SPIN_VARIABLE_COUNTER_STEP", "7")]);
    assert_eq!(server.post("/counter/threes", "").json["value"], 10);
}

#[test]
fn an_app_the_server_cannot_serve_is_refused_at_start_naming_why() {
    let refused = |manifest: &str, config: &str, words: &[&str]| {
        let dir = app_dir(manifest, config);
        let run = lockd_in_dir(
            Some(dir.path()),
            &["up", "--listen", "127.0.0.1:0", "-f", "spin.toml"],
            &[],
        );
        assert_eq!(run.code, Some(2), "{}", run.stderr);
        for word in words {
            assert!(run.stderr.contains(word), "no {word:?} in: {}", run.stderr);
        }
    };
    // A label lockd.toml does not declare, naming it and the component.
    let other_store = "[[trigger.http]]\nroute = \"/other/...\"\ncomponent = \"other\"\n\
                       [component.other]\nsource = \"other.wasm\"\n\
                       key_value_stores = [\"sessions\"]\n";
    refused(other_store, "", &["\"sessions\"", "component other"]);
    // A required variable without a value, naming it.
    refused(
        "[variables.api_key]\nrequired = true\n",
        "",
        &["\"api_key\" is required", "SPIN_VARIABLE_API_KEY"],
    );
}

/// The same counter on spin-sdk 7.0 (WASI 0.3: `spin:key-value@3.0.0` and
/// `spin:variables@3.0.0`, async, under a `lockd:lock@0.2.0` guard): exact
/// under concurrency; the store is the one the 0.2 component writes (the
/// label `default` is the app's, as in Spin); `get-keys` streams its keys;
/// `exists` and `delete` agree; a label the component does not list is
/// denied; a variable's template expands, and a bad or undeclared name gets
/// Spin's error case.
#[test]
fn spin_sdk_7_async_key_value_and_variables() {
    let dir = app_dir("", "");
    let server = up(dir.path(), &[("SPIN_VARIABLE_COUNTER_STEP", "2")]);
    let replies = concurrent_posts(&server, "/p3/counter/async", 20);
    assert_serialised(&replies, 2, 0);
    // One store for the app: the 0.3 component lists what the 0.2 one wrote.
    assert_eq!(server.post("/counter/sync", "").code, 200);
    let keys = server.get("/p3/counters");
    assert_eq!(
        keys.json["keys"],
        serde_json::json!(["counter-p3/async", "counter/sync"]),
        "{}",
        keys.body
    );
    let deleted = |existed: bool| {
        let reply = request("DELETE", &server.url, "/p3/counter/async", None, None);
        assert_eq!(
            (reply.code, reply.json["existed"].as_bool()),
            (200, Some(existed)),
            "{}",
            reply.body
        );
    };
    deleted(true);
    deleted(false);
    assert_eq!(server.get("/p3/counter/async").json["value"], 0);
    for (label, answer) in [
        ("default", serde_json::json!({"opened": true})),
        ("sessions", serde_json::json!({"error": "access-denied"})),
    ] {
        let reply = server.get(&format!("/p3/open/{label}"));
        assert_eq!(reply.json, answer, "{label}: {}", reply.body);
    }
    for (name, answer) in [
        ("counter_step", serde_json::json!({"value": "2"})),
        ("tagged", serde_json::json!({"value": "step 2 of many"})),
        ("Tagged", serde_json::json!({"error": "invalid-name"})),
        ("not_declared", serde_json::json!({"error": "undefined"})),
    ] {
        let reply = server.get(&format!("/p3/variable/{name}"));
        assert_eq!(reply.json, answer, "{name}: {}", reply.body);
    }
}

/// On etcd, two `lockd up` hosts serve one app: POSTs spread over both
/// count exactly (the locks and the key-value store are the cluster's), and
/// each host reads what the other wrote.
#[test]
fn two_hosts_on_etcd_share_the_counter() {
    let etcd = EtcdCluster::start().expect("etcd did not start");
    let store = format!("etcd:{}", etcd.endpoints().join(","));
    let dirs = [app_dir_on(&store, "", ""), app_dir_on(&store, "", "")];
    let hosts: Vec<Server> = dirs.iter().map(|d| up(d.path(), &[])).collect();
    // Both components at once, each on its own counter, each request to
    // either host.
    let threads: Vec<_> = (0..WRITERS + 10)
        .map(|i| {
            let url = hosts[(i % 2) as usize].url.clone();
            let path = if i < WRITERS {
                "/counter/shared"
            } else {
                "/p3/counter/shared"
            };
            std::thread::spawn(move || request("POST", &url, path, Some(""), None))
        })
        .collect();
    let mut replies: Vec<Reply> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let p3 = replies.split_off(WRITERS as usize);
    assert_serialised(&replies, 1, 0);
    assert_serialised(&p3, 1, 0);
    for host in &hosts {
        let read = host.get("/counter/shared");
        assert_eq!(read.json["value"].as_u64(), Some(WRITERS), "{}", read.body);
        assert_eq!(host.get("/p3/counter/shared").json["value"], 10);
    }
}
