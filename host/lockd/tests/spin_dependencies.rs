//! The Spin manifests of docs/guests.md, kept as fixtures in
//! tests/fixtures/spin-dependencies/: `lockd up` composes `edge-jobs` with
//! the lockd-client component as its `lockd:lock` dependency, as `spin up`
//! does, and the client takes the app's locks on ANOTHER lockd over REST.
//! The inherit rules decide what the client sees (no `LOCKD_URL` without
//! `environment`, no outbound HTTP without `allowed_outbound_hosts`), and
//! the shapes Spin refuses are refused with Spin's words.

mod lockd_server;
mod stand_in;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::lockd_server::{metric_value, request, Server};

/// The address the documented manifests name; the tests put the holding
/// server's address in its place.
const DOCUMENTED_SERVER: &str = "127.0.0.1:7450";

const LOCK_OK: &str = "lockd_operations_total{op=\"lock\",outcome=\"ok\"}";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(name: &str) -> String {
    let path = repo().join("tests/fixtures/spin-dependencies").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The ```toml blocks of docs/guests.md.
fn documented_toml_blocks() -> Vec<String> {
    let doc = std::fs::read_to_string(repo().join("docs/guests.md")).unwrap();
    let mut blocks = Vec::new();
    let mut rest = doc.as_str();
    while let Some(start) = rest.find("```toml\n") {
        let body = &rest[start + "```toml\n".len()..];
        let end = body.find("```\n").expect("an unclosed ```toml block");
        blocks.push(body[..end].to_string());
        rest = &body[end..];
    }
    blocks
}

/// A Spin app directory: `manifest` as spin.toml, with `target/guests/`
/// holding the two components it names.
fn app_dir(manifest: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let guests = dir.path().join("target/guests");
    std::fs::create_dir_all(&guests).unwrap();
    for (from, name) in [
        (lockd_guest_tests::EDGE_JOBS, "edge-jobs.wasm"),
        (lockd_guest_tests::LOCKD_CLIENT, "lockd-client.wasm"),
        (lockd_guest_tests::RUST_CONFORMANCE, "rust-conformance.wasm"),
    ] {
        std::fs::copy(from, guests.join(name)).unwrap();
    }
    std::fs::write(dir.path().join("spin.toml"), manifest).unwrap();
    dir
}

/// `manifest` naming `holder` where the documentation names 7450.
fn pointed_at(manifest: &str, holder: &Server) -> String {
    assert!(manifest.contains(DOCUMENTED_SERVER), "{manifest}");
    manifest.replace(DOCUMENTED_SERVER, &holder.addr.to_string())
}

/// `lockd up` on `manifest`, serving.
fn up(manifest: &str) -> (tempfile::TempDir, Server) {
    let dir = app_dir(manifest);
    let server = Server::up_in(dir.path(), &["--store", "memory"]);
    (dir, server)
}

/// `lockd up` on `manifest`, which must refuse it: exit 2 and one line on
/// stderr, returned.
fn refused(manifest: &str) -> String {
    refused_in(app_dir(manifest))
}

fn refused_in(dir: tempfile::TempDir) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockd"))
        .args(["up", "--listen", "127.0.0.1:0", "--store", "memory"])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("lockd up accepted the manifest in {}", dir.path().display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let Output { status, stderr, .. } = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&stderr).into_owned();
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    stderr
}

fn lock_ok(server: &Server) -> u64 {
    metric_value(&server.get("/metrics").body, LOCK_OK)
}

#[test]
fn the_documented_manifests_are_the_fixtures() {
    let blocks = documented_toml_blocks();
    for name in ["spin.toml", "spin4.toml"] {
        let text = fixture(name);
        assert!(
            blocks.contains(&text),
            "docs/guests.md shows no ```toml block equal to tests/fixtures/spin-dependencies/{name}"
        );
        // Negative control: the check notices a one-character change.
        let changed = text.replace("jobs", "jobz");
        assert!(!blocks.contains(&changed));
    }
}

/// Both documented forms (Spin 3's `dependencies_inherit_configuration` and
/// Spin 4's per-dependency `inherit_configuration`) served by `lockd up`,
/// their locks held by a second lockd: the app answers for a lock taken there
/// with the CLI, its own job's lock shows in that server's REST API while it
/// runs, and the serving lockd's own lock capability is never called.
#[test]
fn lockd_up_serves_the_fixtures_with_locks_on_another_lockd() {
    let holder = Server::start(&[]);
    let o = Command::new(env!("CARGO_BIN_EXE_lockd"))
        .args(["lock", "job/2", "--owner", "cli-user", "--ttl", "60s"])
        .args(["--namespace", "jobs", "--server", &holder.url])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    for name in ["spin.toml", "spin4.toml"] {
        let (_dir, app) = up(&pointed_at(&fixture(name), &holder));
        let before = lock_ok(&holder);

        // The lock the CLI holds on the holder is what the app reports.
        let busy = app.post("/jobs/2", "");
        assert_eq!(busy.code, 409, "{name}: {}", busy.body);
        assert_eq!(busy.json["holder"], "cli-user", "{name}: {}", busy.body);

        // The app's own job: its lock is on the holder while the job runs.
        let done = Arc::new(AtomicBool::new(false));
        let watcher = {
            let done = done.clone();
            let url = holder.url.clone();
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(60);
                while !done.load(Ordering::SeqCst) && Instant::now() < deadline {
                    let r = request(
                        "GET",
                        &url,
                        "/v1/locks?namespace=jobs&prefix=job/1",
                        None,
                        None,
                    );
                    if let Some(lock) = r.json["locks"].as_array().and_then(|l| l.first()) {
                        return Some(lock.clone());
                    }
                }
                None
            })
        };
        let reply = app.post("/jobs/1", "");
        done.store(true, Ordering::SeqCst);
        assert_eq!(reply.code, 200, "{name}: {}", reply.body);
        assert_eq!(reply.json["status"], "done", "{name}: {}", reply.body);
        let token = reply.json["fencing_token"].as_u64().unwrap();
        let seen = watcher
            .join()
            .unwrap()
            .unwrap_or_else(|| panic!("{name}: job/1 never showed on the holding server"));
        assert_eq!(seen["fencing_token"].as_u64(), Some(token), "{seen}");
        assert!(
            seen["owner"].as_str().unwrap().starts_with("edge-"),
            "{seen}"
        );

        // Every lock call went to the holder; the serving lockd made none.
        assert!(lock_ok(&holder) > before);
        assert_eq!(lock_ok(&app), 0);
        assert_eq!(app.get("/jobs/1").json["status"], "free");
    }
}

/// What the client gets when the inherit rules withhold it: no environment
/// (so no `LOCKD_URL`), or no outbound HTTP. Each request fails with a
/// message naming the cause, and nothing reaches the holder.
#[test]
fn withheld_configuration_fails_requests_clearly() {
    let holder = Server::start(&[]);
    let documented = pointed_at(&fixture("spin.toml"), &holder);
    let spin4 = pointed_at(&fixture("spin4.toml"), &holder);
    let no_inherit = documented.replace("dependencies_inherit_configuration = true\n", "");
    assert_ne!(no_inherit, documented);
    let environment_only = spin4.replace("\"allowed_outbound_hosts\", ", "");
    assert_ne!(environment_only, spin4);
    let hosts_only = spin4.replace(", \"environment\"", "");
    assert_ne!(hosts_only, spin4);
    for (manifest, needle) in [
        (&no_inherit, "LOCKD_URL is not set"),
        (&hosts_only, "LOCKD_URL is not set"),
        (
            &environment_only,
            "\\\"wasi:http/outgoing-handler\\\" is not permitted (the dependency does not inherit allowed_outbound_hosts)",
        ),
    ] {
        let (_dir, app) = up(manifest);
        let reply = app.post("/jobs/1", "");
        assert_eq!(reply.code, 503, "{}", reply.body);
        assert!(reply.json["message"].as_str().unwrap().contains(needle), "{needle}: {}", reply.body);
    }
    assert_eq!(lock_ok(&holder), 0);
}

/// Spin's refusals, word for word where Spin words them.
#[test]
fn shapes_spin_refuses_are_refused() {
    let documented = fixture("spin.toml");
    let client = r#"{ path = "target/guests/lockd-client.wasm" }"#;
    let entry = format!("\"lockd:lock\" = {client}");
    assert!(documented.contains(&entry), "{documented}");
    let conformance = documented.replace("edge-jobs.wasm", "rust-conformance.wasm");
    let with = |text: &str, entries: &str| text.replace(&entry, entries);

    // One entry per interface: each registers package `lockd:lock`. The
    // conformance guest imports `locks` and `guards`.
    let two = with(
        &conformance,
        &format!("\"lockd:lock/locks\" = {client}\n\"lockd:lock/guards\" = {client}"),
    );
    let err = refused(&two);
    assert!(
        err.contains(
            "failed to resolve dependencies for component \"edge-jobs\": an error occurred when \
             preparing dependencies: package `lockd:lock` has already been registered in the graph"
        ),
        "{err}"
    );
    // The shape the documentation once showed: Spin stops at the first
    // entry (in name order) that fails, here `leases`, which the guest does
    // not import.
    let three = with(
        &conformance,
        &format!(
            "\"lockd:lock/locks\" = {client}\n\"lockd:lock/guards\" = {client}\n\
             \"lockd:lock/leases\" = {client}"
        ),
    );
    let err = refused(&three);
    assert!(
        err.contains(
            "dependency 'lockd:lock/leases' doesn't match any imports of component 'edge-jobs'"
        ),
        "{err}"
    );

    // Versions match exactly: the app imports lockd:lock@0.1.0.
    let err = refused(&with(
        &documented,
        &format!("\"lockd:lock@0.2.0\" = {client}"),
    ));
    assert!(
        err.contains(
            "dependency 'lockd:lock@0.2.0' doesn't match any imports of component 'edge-jobs'"
        ),
        "{err}"
    );
    // The matching version is accepted (the negative control of the above).
    let (_dir, _app) = up(&with(
        &documented,
        &format!("\"lockd:lock@0.1.0\" = {client}"),
    ));

    // Both inherit settings at once.
    let err = refused(&documented.replace(
        &entry,
        r#""lockd:lock" = { path = "target/guests/lockd-client.wasm", inherit_configuration = true }"#,
    ));
    assert!(
        err.contains("These are mutually exclusive; use one or the other."),
        "{err}"
    );

    // An app built against 0.1.1, which `lockd plug` accepts (semver), has no
    // export of exactly its import's name in the 0.1.0 client (the first in
    // name order is named).
    let dir = app_dir(&documented.replace("edge-jobs.wasm", "app-0.1.1.wasm"));
    let app = stand_in::component_from_wit(&stand_in::lock_wit("0.1.1", ""), "imports");
    std::fs::write(dir.path().join("target/guests/app-0.1.1.wasm"), app).unwrap();
    let err = refused_in(dir);
    assert!(
        err.contains(
            "dependency 'lockd:lock' doesn't export 'lockd:lock/elections@0.1.1' to satisfy \
             import 'lockd:lock/elections@0.1.1'"
        ),
        "{err}"
    );

    // A path relative to the manifest that is not there.
    let err = refused(&documented.replace("guests/lockd-client.wasm", "guests/missing.wasm"));
    assert!(
        err.contains("failed to read component source from disk at path"),
        "{err}"
    );
    assert!(err.contains("target/guests/missing.wasm"), "{err}");
}
