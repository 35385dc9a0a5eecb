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

/// Concurrent POSTs on one counter.
const WRITERS: u64 = 50;

/// The example's component, built once per test binary by
/// `guest/build-all.sh kv-counter` (a no-op when it is up to date) into
/// `target/examples/`.
fn kv_counter_wasm() -> &'static Path {
    static WASM: OnceLock<PathBuf> = OnceLock::new();
    WASM.get_or_init(|| {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let status = std::process::Command::new("bash")
            .arg(repo.join("guest/build-all.sh"))
            .arg("kv-counter")
            .status()
            .unwrap();
        assert!(status.success(), "building kv-counter: {status}");
        repo.join("target/examples/kv-counter.wasm")
    })
}

/// A directory holding a spin.toml that serves the built `kv-counter` at
/// `/counter/...` with the `default` store and `counter_step` (default 1),
/// and a lockd.toml keeping the locks (and so the key-value file) in it.
fn app_dir(extra_manifest: &str, extra_config: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let wasm = kv_counter_wasm();
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
[component.kv-counter]
source = {wasm:?}
key_value_stores = ["default"]
[component.kv-counter.variables]
counter_step = "{{{{ counter_step }}}}"
{extra_manifest}"#,
            wasm = wasm.display().to_string()
        ),
    )
    .unwrap();
    // `store` in lockd.toml rather than --store: the key-value file goes
    // beside the store lockd.toml names.
    std::fs::write(
        dir.path().join("lockd.toml"),
        format!("store = \"redb:locks.redb\"\n{extra_config}"),
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
