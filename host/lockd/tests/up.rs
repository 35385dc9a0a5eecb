//! The README's main job: `lockd up --build` in the repository root builds
//! the example app's components and serves them next to the REST API.

mod lockd_server;

use std::path::Path;

use crate::lockd_server::Server;

#[test]
fn up_build_serves_the_example_app() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let store = tempfile::tempdir().unwrap();
    let spec = format!("redb:{}", store.path().join("locks.redb").display());
    let app = Server::up_in(&root, &["--build", "--store", &spec]);

    // The Rust (p2) job endpoint, the p3 guard endpoint and the JS function.
    for (path, namespace) in [
        ("/jobs/1", "edge-jobs"),
        ("/guarded/1", "edge-guard-p3"),
        ("/js/jobs/1", "js-edge"),
    ] {
        let reply = app.post(path, "");
        assert_eq!(reply.code, 200, "POST {path}: {}", reply.body);
        assert_eq!(reply.json["status"], "done", "{}", reply.body);
        assert!(
            reply.json["fencing_token"].as_u64().is_some(),
            "{}",
            reply.body
        );
        // The component's lock is in its own namespace, and free again.
        let listed = app.get(&format!("/v1/locks?namespace={namespace}"));
        assert_eq!(listed.code, 200, "{}", listed.body);
        assert_eq!(
            listed.json["locks"].as_array().map(Vec::len),
            Some(0),
            "{}",
            listed.body
        );
    }
    let state = app.get("/jobs/1");
    assert_eq!(
        (state.code, state.json["status"].as_str()),
        (200, Some("free")),
        "{}",
        state.body
    );
    // The REST API and metrics are served on the same port.
    app.assert_healthy();
    assert!(app.metric("lockd_operations_total{op=\"lock\",outcome=\"ok\"}") >= 3);
}
