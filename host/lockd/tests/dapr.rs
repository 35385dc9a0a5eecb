//! Dapr's lock API, proven with Dapr's real SDKs (installed pinned by
//! scripts/install-dapr-sdks.sh): the JavaScript SDK over HTTP and gRPC, the
//! Python SDK over gRPC, each running Dapr's lock-store conformance checks
//! (tests/dapr/) against a real `lockd serve` whose lock stores Dapr
//! component files declare (examples/dapr-components), a store none
//! declares getting Dapr's error; Dapr's errors for bad input, with the
//! store left unchanged; Dapr and native owners excluding each other; the
//! token check on both listeners.

mod lockd_server;

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use crate::lockd_server::{closed_port, lockd_in_dir, raw_request, request, Reply, Server};
use serde_json::{json, Value};

/// The SDKs: `(node_modules, python)`, installed once per test process.
fn sdks() -> &'static (PathBuf, PathBuf) {
    static SDKS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    SDKS.get_or_init(|| {
        let script = repo().join("scripts/install-dapr-sdks.sh");
        let out = Command::new("bash").arg(&script).output().unwrap();
        assert!(
            out.status.success(),
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8(out.stdout).unwrap();
        let mut lines = stdout.lines().rev();
        let python = PathBuf::from(lines.next().unwrap());
        let node_modules = PathBuf::from(lines.next().unwrap());
        (node_modules, python)
    })
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `lockd serve --store memory --dapr-grpc-listen 127.0.0.1:PORT
/// --dapr-any-store EXTRA`, and the gRPC address.
fn serve_with_grpc(extra: &[&str]) -> (Server, String) {
    let grpc = format!("127.0.0.1:{}", closed_port());
    let mut args = vec![
        "--store",
        "memory",
        "--dapr-grpc-listen",
        &grpc,
        "--dapr-any-store",
    ];
    args.extend_from_slice(extra);
    (Server::start_in(None, &args, &[]), grpc)
}

/// The lock store examples/dapr-components declares in lockd.toml's
/// `[dapr.stores]` namespace [`SDK_NAMESPACE`]; it also declares
/// `jobs-lock`, and a state store and a resiliency policy lockd ignores.
const DECLARED_STORE: &str = "lockstore";
const SDK_NAMESPACE: &str = "dapr-sdk";

/// lockd.toml serving the lock stores of examples/dapr-components, with
/// `extra` appended.
fn declared_config(extra: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let components = repo().join("examples/dapr-components");
    std::fs::write(
        dir.path().join("lockd.toml"),
        format!(
            "[dapr]\ncomponents = {:?}\n[dapr.stores]\n{DECLARED_STORE} = {SDK_NAMESPACE:?}\n{extra}",
            components.display().to_string()
        ),
    )
    .unwrap();
    dir
}

/// [`serve_with_grpc`] in a directory whose lockd.toml is
/// [`declared_config`]; the directory lives as long as the server.
fn serve_declared_with_grpc() -> (Server, String, tempfile::TempDir) {
    let dir = declared_config("");
    let grpc = format!("127.0.0.1:{}", closed_port());
    let args = ["--store", "memory", "--dapr-grpc-listen", &grpc];
    let server = Server::start_in(Some(dir.path()), &args, &[]);
    (server, grpc, dir)
}

/// Runs a program of tests/dapr; its output if it exits 0.
fn run(mut cmd: Command) -> String {
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The JavaScript checks against the declared store, the store
/// `undeclared` refused first.
fn js(protocol: &str, port: &str, prefix: &str, undeclared: &str) -> Command {
    let mut cmd = Command::new("node");
    cmd.arg(repo().join("tests/dapr/conformance.cjs"))
        .env("NODE_PATH", &sdks().0)
        .env("DAPR_HOST", "127.0.0.1")
        .env("DAPR_PORT", port)
        .env("DAPR_PROTOCOL", protocol)
        .env("STORE", DECLARED_STORE)
        .env("PREFIX", prefix)
        .env("UNDECLARED", undeclared)
        .env_remove("DAPR_API_TOKEN");
    cmd
}

fn python(server: &Server, grpc: &str, program: &str, env: &[(&str, &str)]) -> String {
    run(python_command(server, grpc, program, env))
}

fn python_command(server: &Server, grpc: &str, program: &str, env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(&sdks().1);
    cmd.arg(repo().join("tests/dapr").join(program))
        .env("DAPR_HTTP_ENDPOINT", &server.url)
        .env("DAPR_GRPC_ENDPOINT", grpc)
        .env("DAPR_HEALTH_TIMEOUT", "10")
        .env_remove("DAPR_API_TOKEN")
        .envs(env.iter().copied());
    cmd
}

/// The count of passed checks in a program's output.
fn passed(output: &str) -> usize {
    output.lines().filter(|l| l.starts_with("ok ")).count()
}

/// The contention check's winner holds the lock in lockd, as an ordinary
/// lock: listed, with a fencing token, and a native owner is refused.
fn assert_winner_holds(server: &Server, output: &str, store: &str, prefix: &str) {
    let winner = output
        .lines()
        .find_map(|l| l.strip_prefix("winner "))
        .unwrap_or_else(|| panic!("no winner in:\n{output}"));
    let name = format!("{prefix}-contended");
    let listed = server.get(&format!("/v1/locks?namespace={store}&prefix={name}"));
    assert_eq!(listed.code, 200, "{}", listed.body);
    let locks = listed.json["locks"].as_array().unwrap();
    assert_eq!(locks.len(), 1, "{}", listed.body);
    assert_eq!(locks[0]["owner"], winner);
    assert!(locks[0]["fencing_token"].as_u64().unwrap() > 0);
    let native = server.post_json(
        "/v1/locks/lock",
        &json!({"namespace": store, "name": name, "owner": "native", "ttl_ms": 1000}),
    );
    assert_eq!(
        (native.code, native.status()),
        (409, "busy"),
        "{}",
        native.body
    );
    assert_eq!(native.json["owner"], winner);
}

#[test]
fn javascript_sdk_passes_the_lock_conformance_checks_over_http_and_grpc() {
    let (server, grpc, _dir) = serve_declared_with_grpc();
    let http_port = server.addr.port().to_string();
    let out = run(js("http", &http_port, "http", "lockstor"));
    assert_eq!(passed(&out), 12, "{out}");
    assert_winner_holds(&server, &out, SDK_NAMESPACE, "http");
    let grpc_port = grpc.rsplit(':').next().unwrap();
    // The namespace a declared store maps to is no store name.
    let out = run(js("grpc", grpc_port, "grpc", SDK_NAMESPACE));
    assert_eq!(passed(&out), 12, "{out}");
    assert_winner_holds(&server, &out, SDK_NAMESPACE, "grpc");
}

/// Negative control: the JavaScript checks fail when the store does not
/// behave as Dapr's (here the first lock is held already, by a native owner).
#[test]
fn javascript_checks_fail_against_a_store_that_breaks_them() {
    let server = Server::start(&["--dapr-any-store"]);
    let held = server.post_json(
        "/v1/locks/lock",
        &json!({"namespace": "dapr-js", "name": "neg-resource", "owner": "native", "ttl_ms": 600_000}),
    );
    assert_eq!(held.code, 200, "{}", held.body);
    let mut cmd = Command::new("node");
    cmd.arg(repo().join("tests/dapr/conformance.cjs"))
        .env("NODE_PATH", &sdks().0)
        .env("DAPR_HOST", "127.0.0.1")
        .env("DAPR_PORT", server.addr.port().to_string())
        .env("STORE", "dapr-js")
        .env("PREFIX", "neg");
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("FAIL acquire: got false, want true"),
        "{stdout}"
    );
}

#[test]
fn python_sdk_passes_the_lock_conformance_checks_over_grpc() {
    let (server, grpc, _dir) = serve_declared_with_grpc();
    // A component that is not a lock store is no lock store.
    let env = [
        ("STORE", DECLARED_STORE),
        ("PREFIX", "py"),
        ("UNDECLARED", "statestore"),
    ];
    let out = python(&server, &grpc, "conformance.py", &env);
    assert_eq!(passed(&out), 12, "{out}");
    assert_winner_holds(&server, &out, SDK_NAMESPACE, "py");
    // Dapr's errors and UNIMPLEMENTED for the rest of Dapr's API, on the
    // other declared store.
    let out = python(&server, &grpc, "grpc_edges.py", &[("STORE", "jobs-lock")]);
    assert!(out.contains("ok lock without an owner"), "{out}");
    assert_store_empty(&server, "jobs-lock");
}

/// Negative control: the SDK checks of an undeclared store fail against a
/// server that takes any store name (no `[dapr] components`).
#[test]
fn undeclared_store_checks_fail_against_a_server_that_takes_any_store() {
    let (server, grpc) = serve_with_grpc(&[]);
    let expect_failure = |mut cmd: Command| {
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(out.status.code(), Some(1), "{stdout}");
        assert!(
            stdout.contains("FAIL undeclared store: lock refused"),
            "{stdout}"
        );
    };
    expect_failure(js(
        "http",
        &server.addr.port().to_string(),
        "neg-js",
        "typo",
    ));
    let env = [
        ("STORE", "any"),
        ("PREFIX", "neg-py"),
        ("UNDECLARED", "typo"),
    ];
    expect_failure(python_command(&server, &grpc, "conformance.py", &env));
}

#[test]
fn grpc_listener_checks_the_token() {
    let (server, grpc) = serve_with_grpc(&["--auth-token", "s3cret"]);
    let out = python(&server, &grpc, "grpc_edges.py", &[("TOKEN", "s3cret")]);
    assert!(out.contains("ok no token: unauthenticated"), "{out}");
    assert!(out.contains("ok lock without an owner"), "{out}");
}

/// A Dapr HTTP call: `(status, body)`.
fn dapr_post(server: &Server, path: &str, content_type: &str, body: &[u8]) -> Reply {
    raw_request(
        server.addr,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: lockd\r\nContent-Type: {content_type}\r\nContent-Length: {}",
            body.len()
        ),
        body.to_vec(),
    )
}

fn assert_dapr_error(reply: &Reply, code: u16, error_code: &str, message: &str) {
    assert_eq!(reply.code, code, "{}", reply.body);
    assert_eq!(reply.json["errorCode"], error_code, "{}", reply.body);
    let got = reply.json["message"].as_str().unwrap_or("");
    assert!(
        got.starts_with(message),
        "{got:?} does not start with {message:?}"
    );
}

fn assert_store_empty(server: &Server, namespace: &str) {
    let listed = server.get(&format!("/v1/locks?namespace={namespace}"));
    assert_eq!(listed.code, 200, "{}", listed.body);
    assert_eq!(listed.json["locks"], json!([]), "{}", listed.body);
}

#[test]
fn bad_input_gets_daprs_errors_and_changes_nothing() {
    let server = Server::start(&["--dapr-any-store"]);
    let lock = "/v1.0-alpha1/lock/bad";
    let json_type = "application/json";
    let cases: &[(&str, &[u8], u16, &str, &str)] = &[
        (
            json_type,
            b"",
            400,
            "ERR_MALFORMED_REQUEST",
            "ExpiryInSeconds is not positive in lock store bad",
        ),
        (
            json_type,
            br#"{"resourceId":"r","lockOwner":"o"}"#,
            400,
            "ERR_MALFORMED_REQUEST",
            "ExpiryInSeconds is not positive",
        ),
        (
            json_type,
            br#"{"resourceId":"r","lockOwner":"o","expiryInSeconds":-1}"#,
            400,
            "ERR_MALFORMED_REQUEST",
            "ExpiryInSeconds is not positive",
        ),
        (
            json_type,
            br#"{"lockOwner":"o","expiryInSeconds":5}"#,
            400,
            "ERR_MALFORMED_REQUEST",
            "ResourceId is empty in lock store bad",
        ),
        (
            json_type,
            br#"{"resourceId":"r","expiryInSeconds":5}"#,
            400,
            "ERR_MALFORMED_REQUEST",
            "LockOwner is empty in lock store bad",
        ),
        (
            json_type,
            br#"{"resourceId":"r","lockOwner":"o","expiryInSeconds":2147483648}"#,
            400,
            "ERR_MALFORMED_REQUEST",
            "failed deserializing HTTP body: expiryInSeconds: ",
        ),
        (
            json_type,
            br#"{"resourceId":"r","lockOwner":"o","expiryInSeconds":2147483647}"#,
            400,
            "ERR_MALFORMED_REQUEST",
            "ttl of 2147483647000 ms is over the maximum",
        ),
        (
            json_type,
            br#"{"resourceId":7,"lockOwner":"o","expiryInSeconds":5}"#,
            400,
            "ERR_MALFORMED_REQUEST",
            "failed deserializing HTTP body: resourceId: ",
        ),
        (
            json_type,
            b"{not json",
            400,
            "ERR_MALFORMED_REQUEST",
            "failed deserializing HTTP body: ",
        ),
        // Dapr reads the body whatever the content type says.
        (
            "application/x-www-form-urlencoded",
            b"resourceId=r&lockOwner=o&expiryInSeconds=5",
            400,
            "ERR_MALFORMED_REQUEST",
            "failed deserializing HTTP body: ",
        ),
    ];
    for (content_type, body, code, error_code, message) in cases {
        let reply = dapr_post(&server, lock, content_type, body);
        assert_dapr_error(&reply, *code, error_code, message);
    }
    // A store name that is not a lockd namespace.
    let long = "s".repeat(200);
    let body = br#"{"resourceId":"r","lockOwner":"o","expiryInSeconds":5}"#;
    let reply = dapr_post(
        &server,
        &format!("/v1.0-alpha1/lock/{long}"),
        json_type,
        body,
    );
    assert_dapr_error(
        &reply,
        400,
        "ERR_LOCK_STORE_NOT_FOUND",
        &format!("lock store {long} is not found: a store name is a lockd namespace"),
    );
    let reply = dapr_post(
        &server,
        &format!("/v1.0-alpha1/unlock/{long}"),
        json_type,
        body,
    );
    assert_dapr_error(
        &reply,
        400,
        "ERR_LOCK_STORE_NOT_FOUND",
        &format!("lock store {long} is not found: a store name is a lockd namespace"),
    );
    // Over the body limit.
    let big = vec![b' '; 2 << 20];
    let reply = dapr_post(&server, lock, json_type, &big);
    assert_dapr_error(
        &reply,
        400,
        "ERR_BODY_READ",
        "failed to read request body: the body is over",
    );
    // The wrong method.
    let reply = request("GET", &server.url, lock, None, None);
    assert_eq!((reply.code, reply.header("allow")), (405, Some("POST")));
    assert_store_empty(&server, "bad");
    // A JSON body under another content type works, as on Dapr.
    let reply = dapr_post(&server, lock, "text/plain", body);
    assert_eq!(
        (reply.code, &reply.json),
        (200, &json!({"success": true})),
        "{}",
        reply.body
    );
}

#[test]
fn dapr_and_native_owners_exclude_each_other() {
    let server = Server::start(&["--dapr-any-store"]);
    let native = |path: &str, body: Value| server.post_json(path, &body);
    let dapr = |op: &str, body: Value| {
        dapr_post(
            &server,
            &format!("/v1.0-alpha1/{op}/jobs"),
            "application/json",
            body.to_string().as_bytes(),
        )
    };
    let held = native(
        "/v1/locks/lock",
        json!({"namespace": "jobs", "name": "n", "owner": "native", "ttl_ms": 600_000}),
    );
    assert_eq!(held.code, 200, "{}", held.body);
    let tried = dapr(
        "lock",
        json!({"resourceId": "n", "lockOwner": "d", "expiryInSeconds": 10}),
    );
    assert_eq!((tried.code, &tried.json), (200, &json!({"success": false})));
    let unlocked = dapr("unlock", json!({"resourceId": "n", "lockOwner": "d"}));
    assert_eq!(unlocked.json, json!({"status": 2}));
    native(
        "/v1/locks/unlock",
        json!({"namespace": "jobs", "name": "n", "owner": "native"}),
    );
    let tried = dapr(
        "lock",
        json!({"resourceId": "n", "lockOwner": "d", "expiryInSeconds": 10}),
    );
    assert_eq!(tried.json, json!({"success": true}));
    let refused = native(
        "/v1/locks/lock",
        json!({"namespace": "jobs", "name": "n", "owner": "native", "ttl_ms": 1000}),
    );
    assert_eq!((refused.code, refused.status()), (409, "busy"));
    assert_eq!(refused.json["owner"], "d");
    assert_eq!(refused.json["durability"], "persistent");
    // Whole seconds: the expiry is 10 s from the grant.
    let got = native("/v1/locks/get", json!({"namespace": "jobs", "name": "n"}));
    let token = got.json["fencing_token"].as_u64().unwrap();
    assert!(token > held.json["fencing_token"].as_u64().unwrap());
    let metrics = server.get("/metrics").body;
    assert!(metrics.contains("namespace=\"jobs\""), "{metrics}");
    // Not reentrant: the owner's second TryLock fails and keeps the grant.
    let again = dapr(
        "lock",
        json!({"resourceId": "n", "lockOwner": "d", "expiryInSeconds": 60}),
    );
    assert_eq!(again.json, json!({"success": false}));
    let after = native("/v1/locks/get", json!({"namespace": "jobs", "name": "n"}));
    assert_eq!(after.json["expires_at_ms"], got.json["expires_at_ms"]);
    assert_eq!(
        dapr("unlock", json!({"resourceId": "n", "lockOwner": "d"})).json,
        json!({"status": 0})
    );
    assert_eq!(
        dapr("unlock", json!({"resourceId": "n", "lockOwner": "d"})).json,
        json!({"status": 1})
    );
}

#[test]
fn sdk_start_up_calls_and_the_token() {
    let server = Server::with_token_and("s3cret", &["--dapr-any-store"]);
    let open = request("GET", &server.url, "/v1.0/healthz", None, None);
    assert_eq!(open.code, 204);
    assert_eq!(
        request("GET", &server.url, "/v1.0/healthz/outbound", None, None).code,
        204
    );
    let refused = request("GET", &server.url, "/v1.0/metadata", None, None);
    assert_eq!(refused.code, 401, "{}", refused.body);
    let refused = request("POST", &server.url, "/v1.0-alpha1/lock/x", Some("{}"), None);
    assert_eq!(refused.code, 401, "{}", refused.body);
    let metadata = server.get("/v1.0/metadata");
    assert_eq!(metadata.code, 200, "{}", metadata.body);
    assert_eq!(metadata.json["id"], "lockd");
    let locked = server.post(
        "/v1.0-alpha1/lock/x",
        r#"{"resourceId":"r","lockOwner":"o","expiryInSeconds":5}"#,
    );
    assert_eq!(locked.json, json!({"success": true}), "{}", locked.body);
}

/// docs/openapi.json describes exactly the compatibility routes, tagged as
/// such, and each answer below has a documented status.
#[test]
fn openapi_describes_the_compatibility_routes() {
    let doc: Value = serde_json::from_str(include_str!("../../../docs/openapi.json")).unwrap();
    let mut tagged = std::collections::BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let tags = operation["tags"].to_string();
            if tags.contains("compatibility") {
                tagged.insert((method.as_str(), path.as_str(), tags.contains("Dapr")));
            }
        }
    }
    let expected = std::collections::BTreeSet::from([
        ("post", "/v1.0-alpha1/lock/{storeName}", true),
        ("post", "/v1.0-alpha1/unlock/{storeName}", true),
        ("get", "/v1.0/metadata", true),
        ("get", "/v1.0/healthz", true),
        ("get", "/v1.0/healthz/outbound", true),
        ("post", "/v1/locks/try-lock", false),
        ("post", "/v1/locks/try-extend", false),
        ("post", "/v1/locks/try-unlock", false),
        ("post", "/v1/locks/get-info", false),
    ]);
    assert_eq!(tagged, expected);
    let server = Server::start(&["--dapr-any-store"]);
    for (method, path, _) in expected {
        let url_path = path.replace("{storeName}", "doc");
        let bodies: &[Option<&str>] = if method == "get" {
            &[None]
        } else {
            &[
                Some(
                    r#"{"resourceId":"r","lockOwner":"o","expiryInSeconds":5,"resource":"r","owner":"b3duZXI=","expiresMs":5000}"#,
                ),
                Some(r#"{"expiryInSeconds":"x","expiresMs":"x"}"#),
            ]
        };
        for body in bodies {
            let reply = request(&method.to_uppercase(), &server.url, &url_path, *body, None);
            let code = reply.code.to_string();
            let documented = &doc["paths"][path][method]["responses"][&code];
            assert!(
                documented.is_object(),
                "{method} {path} answered {code}, undocumented"
            );
        }
    }
}

/// A Dapr lock is an event like any other, `[dapr] durability =
/// "ephemeral"` in lockd.toml makes Dapr's locks ephemeral, and a quota's
/// refusal is `ERR_TRY_LOCK`.
#[test]
fn dapr_locks_are_events_and_take_the_configured_durability() {
    use std::io::{BufRead as _, BufReader, Write as _};
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("lockd.toml"),
        "[dapr]\ndurability = \"ephemeral\"\nany_store = true\n[namespaces.quotas]\nev = 1\n",
    )
    .unwrap();
    let server = Server::start_in(Some(dir.path()), &["--store", "memory"], &[]);
    let mut events = std::net::TcpStream::connect(server.addr).unwrap();
    events
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    write!(
        events,
        "GET /v1/events?namespace=ev HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    .unwrap();
    let mut lines = BufReader::new(events);
    let mut line = String::new();
    // The stream's opening comment: from then on it sees every event.
    while !line.starts_with(':') {
        line.clear();
        lines.read_line(&mut line).unwrap();
    }
    let body = json!({"resourceId": "n", "lockOwner": "d", "expiryInSeconds": 10}).to_string();
    let locked = dapr_post(
        &server,
        "/v1.0-alpha1/lock/ev",
        "application/json",
        body.as_bytes(),
    );
    assert_eq!(locked.json, json!({"success": true}), "{}", locked.body);
    let data = loop {
        line.clear();
        lines.read_line(&mut line).unwrap();
        if let Some(data) = line.trim_end().strip_prefix("data: ") {
            break serde_json::from_str::<Value>(data).unwrap();
        }
    };
    assert_eq!(
        (&data["name"], &data["owner"]),
        (&json!("n"), &json!("d")),
        "{data}"
    );
    let got = server.post_json("/v1/locks/get", &json!({"namespace": "ev", "name": "n"}));
    assert_eq!(got.json["durability"], "ephemeral", "{}", got.body);
    // A refusal by the store (here the namespace's quota) is Dapr's ERR_TRY_LOCK.
    let body = json!({"resourceId": "m", "lockOwner": "d", "expiryInSeconds": 10}).to_string();
    let refused = dapr_post(
        &server,
        "/v1.0-alpha1/lock/ev",
        "application/json",
        body.as_bytes(),
    );
    assert_dapr_error(
        &refused,
        500,
        "ERR_TRY_LOCK",
        "failed to try acquiring lock: ",
    );
}

/// Scoped tokens on the compatibility routes: Dapr's store is the
/// namespace checked, Kahuna's routes are `default`'s, metadata needs any
/// known token, and a refusal is lockd's 403 `forbidden`.
#[test]
fn scoped_tokens_reach_only_their_stores() {
    use ::lockd_server::auth::{digest, to_hex};
    let entry = |name: &str, token: &str, namespaces: &str| {
        format!(
            "[[auth.tokens]]\nname = {name:?}\nsha256 = {:?}\nnamespaces = {namespaces}\nrole = \"locker\"\n\n",
            to_hex(&digest(token))
        )
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("lockd.toml"),
        "[dapr]\nany_store = true\n\n".to_string()
            + &entry("jobs", "jobs-token-1", r#"["jobs"]"#)
            + &entry("dflt", "dflt-token-1", r#"["default"]"#),
    )
    .unwrap();
    let server = Server::start_in(Some(dir.path()), &["--store", "memory"], &[]);
    let body = r#"{"resourceId":"r","lockOwner":"o","expiryInSeconds":5}"#;
    let dapr_with = |store: &str, token: &str| {
        raw_request(
            server.addr,
            &format!(
                "POST /v1.0-alpha1/lock/{store} HTTP/1.1\r\nHost: lockd\r\ndapr-api-token: {token}\r\nContent-Length: {}",
                body.len()
            ),
            body.as_bytes().to_vec(),
        )
    };
    let ok = dapr_with("jobs", "jobs-token-1");
    assert_eq!(
        (ok.code, &ok.json),
        (200, &json!({"success": true})),
        "{}",
        ok.body
    );
    let refused = dapr_with("jobs", "dflt-token-1");
    assert_eq!(
        (refused.code, refused.status()),
        (403, "forbidden"),
        "{}",
        refused.body
    );
    assert_eq!(dapr_with("jobs", "nope").code, 401);
    let metadata = request(
        "GET",
        &server.url,
        "/v1.0/metadata",
        None,
        Some("dflt-token-1"),
    );
    assert_eq!(metadata.code, 200, "{}", metadata.body);
    let kahuna = |token: &str| {
        request(
            "POST",
            &server.url,
            "/v1/locks/try-lock",
            Some(r#"{"resource":"k","owner":"b3duZXI=","expiresMs":5000}"#),
            Some(token),
        )
    };
    let locked = kahuna("dflt-token-1");
    assert_eq!(
        (locked.code, &locked.json["type"]),
        (200, &json!(0)),
        "{}",
        locked.body
    );
    let refused = kahuna("jobs-token-1");
    assert_eq!(
        (refused.code, refused.status()),
        (403, "forbidden"),
        "{}",
        refused.body
    );
}

/// `lockd serve` over TLS (certificates from `TestPki`) with Dapr's gRPC
/// listener and scoped tokens in lockd.toml; killed on drop.
struct TlsServer {
    child: std::process::Child,
    https: String,
    grpc: String,
    ca: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const STORE_TOKEN: &str = "store-token-3f1c9a";
const OTHER_TOKEN: &str = "other-token-8d2e47";

fn serve_tls_with_scoped_tokens(store: &str) -> TlsServer {
    use ::lockd_server::auth::{digest, to_hex};
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap();
    let pki = lockd_test_support::certs::TestPki::new(&dir.path().join("pki"));
    let cert = pki.server("lockd");
    let entry = |name: &str, token: &str, namespace: &str| {
        format!(
            "[[auth.tokens]]\nname = {name:?}\nsha256 = {:?}\nnamespaces = [{namespace:?}]\nrole = \"locker\"\n\n",
            to_hex(&digest(token))
        )
    };
    std::fs::write(
        dir.path().join("lockd.toml"),
        "[dapr]\nany_store = true\n\n".to_string()
            + &entry("store", STORE_TOKEN, store)
            + &entry("other", OTHER_TOKEN, "elsewhere"),
    )
    .unwrap();
    let grpc = format!("127.0.0.1:{}", closed_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockd"))
        .args(["serve", "--listen", "127.0.0.1:0", "--store", "memory"])
        .args(["--dapr-grpc-listen", &grpc])
        .arg("--tls-cert")
        .arg(&cert.cert)
        .arg("--tls-key")
        .arg(&cert.key)
        .current_dir(dir.path())
        .env_remove("LOCKD_AUTH_TOKEN")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(addr) = line.strip_prefix("lockd listening on https://") {
                let _ = tx.send(addr.trim().to_string());
            }
        }
    });
    let addr = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("lockd serve over TLS did not start");
    TlsServer {
        child,
        https: format!("https://{addr}"),
        grpc: format!("https://{grpc}"),
        ca: pki.ca().to_path_buf(),
        _dir: dir,
    }
}

/// Dapr's Python SDK over TLS (gRPC, and its health probe over HTTPS) with
/// a token scoped to the store passes the checks; a token for another
/// namespace gets `PERMISSION_DENIED`.
#[test]
fn python_sdk_over_tls_with_a_scoped_token() {
    let server = serve_tls_with_scoped_tokens("dapr-tls");
    let py = |token: &str, env: &[(&str, &str)]| {
        let mut cmd = Command::new(&sdks().1);
        cmd.arg(repo().join("tests/dapr/conformance.py"))
            .env("DAPR_HTTP_ENDPOINT", &server.https)
            .env("DAPR_GRPC_ENDPOINT", &server.grpc)
            .env("DAPR_HEALTH_TIMEOUT", "10")
            .env("DAPR_API_TOKEN", token)
            .env("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", &server.ca)
            .env("SSL_CERT_FILE", &server.ca)
            .env("STORE", "dapr-tls")
            .envs(env.iter().copied());
        run(cmd)
    };
    let out = py(STORE_TOKEN, &[("PREFIX", "pytls")]);
    assert_eq!(
        out.lines().filter(|l| l.starts_with("ok ")).count(),
        10,
        "{out}"
    );
    let out = py(
        OTHER_TOKEN,
        &[("PREFIX", "pyno"), ("EXPECT_REFUSAL", "PERMISSION_DENIED")],
    );
    assert!(out.contains("ok refused: PERMISSION_DENIED"), "{out}");
}

/// Dapr's JavaScript SDK over HTTPS with a token scoped to the store
/// passes the checks; a token for another namespace gets 403.
#[test]
fn javascript_sdk_over_https_with_a_scoped_token() {
    let server = serve_tls_with_scoped_tokens("dapr-tls");
    let port = server.https.rsplit(':').next().unwrap().to_string();
    let js = |token: &str, env: &[(&str, &str)]| {
        let mut cmd = Command::new("node");
        cmd.arg(repo().join("tests/dapr/conformance.cjs"))
            .env("NODE_PATH", &sdks().0)
            .env("NODE_EXTRA_CA_CERTS", &server.ca)
            .env("DAPR_HOST", "https://127.0.0.1")
            .env("DAPR_PORT", &port)
            .env("DAPR_PROTOCOL", "http")
            .env("DAPR_API_TOKEN", token)
            .env("STORE", "dapr-tls")
            .envs(env.iter().copied());
        run(cmd)
    };
    let out = js(STORE_TOKEN, &[("PREFIX", "jstls")]);
    assert_eq!(
        out.lines().filter(|l| l.starts_with("ok ")).count(),
        10,
        "{out}"
    );
    let out = js(
        OTHER_TOKEN,
        &[("PREFIX", "jsno"), ("EXPECT_REFUSAL", "403")],
    );
    assert!(out.contains("ok refused: 403"), "{out}");
}

/// A Dapr HTTP lock call with a `dapr-api-token`.
fn dapr_with_token(server: &Server, op: &str, store: &str, token: &str, body: &Value) -> Reply {
    let body = body.to_string();
    raw_request(
        server.addr,
        &format!(
            "POST /v1.0-alpha1/{op}/{store} HTTP/1.1\r\nHost: lockd\r\ndapr-api-token: {token}\r\nContent-Length: {}",
            body.len()
        ),
        body.into_bytes(),
    )
}

/// With `[dapr] components`, only the declared lock stores are served, in
/// their namespaces; any other store name gets daprd's own error, checked
/// in daprd's order, after a known token; the metadata lists the stores;
/// the start-up log says what lockd does.
#[test]
fn only_declared_stores_are_served_and_others_get_daprs_error() {
    use ::lockd_server::auth::{digest, to_hex};
    let token = |name: &str, secret: &str, namespace: &str| {
        format!(
            "[[auth.tokens]]\nname = {name:?}\nsha256 = {:?}\nnamespaces = [{namespace:?}]\nrole = \"locker\"\n",
            to_hex(&digest(secret))
        )
    };
    let dir = declared_config(
        &(token("sdk", "sdk-token-51c2", SDK_NAMESPACE)
            + &token("named", "named-token-9e07", DECLARED_STORE)),
    );
    let log = dir.path().join("lockd.log");
    let server = Server::start_logging_to(&log, Some(dir.path()), &["--store", "memory"]);
    let lock = json!({"resourceId": "r", "lockOwner": "o", "expiryInSeconds": 10});
    let ok = dapr_with_token(&server, "lock", DECLARED_STORE, "sdk-token-51c2", &lock);
    assert_eq!(ok.json, json!({"success": true}), "{}", ok.body);
    let got = request(
        "POST",
        &server.url,
        "/v1/locks/get",
        Some(&json!({"namespace": SDK_NAMESPACE, "name": "r"}).to_string()),
        Some("sdk-token-51c2"),
    );
    assert_eq!(got.json["owner"], "o", "{}", got.body);
    // The token check is on the store's namespace, not on its name.
    let refused = dapr_with_token(&server, "lock", DECLARED_STORE, "named-token-9e07", &lock);
    assert_eq!(refused.code, 403, "{}", refused.body);
    // Undeclared: a typo, a namespace, a component that is no lock store.
    for store in ["lockstor", SDK_NAMESPACE, "statestore"] {
        for op in ["lock", "unlock"] {
            let reply = dapr_with_token(&server, op, store, "named-token-9e07", &lock);
            assert_eq!(reply.code, 400, "{op} {store}: {}", reply.body);
            assert_eq!(
                reply.json,
                json!({"errorCode": "ERR_LOCK_STORE_NOT_FOUND",
                       "message": format!("lock store {store} is not found")}),
                "{op} {store}"
            );
        }
    }
    assert_eq!(
        dapr_with_token(&server, "lock", "lockstor", "nope", &lock).code,
        401
    );
    // daprd checks the request before it looks the store up.
    let no_owner = json!({"resourceId": "r", "expiryInSeconds": 10});
    let reply = dapr_with_token(&server, "lock", "lockstor", "sdk-token-51c2", &no_owner);
    assert_dapr_error(
        &reply,
        400,
        "ERR_MALFORMED_REQUEST",
        "LockOwner is empty in lock store lockstor",
    );
    let metadata = request(
        "GET",
        &server.url,
        "/v1.0/metadata",
        None,
        Some("named-token-9e07"),
    );
    assert_eq!(
        metadata.json["components"],
        json!([{"name": "jobs-lock", "type": "lock.redis", "version": "v1"},
               {"name": "lockstore", "type": "lock.redis", "version": "v1"}]),
        "{}",
        metadata.body
    );
    let logged = std::fs::read_to_string(&log).unwrap();
    for line in [
        "lock stores from",
        "jobs-lock (namespace jobs-lock) lockstore (namespace dapr-sdk)",
        "ERR_LOCK_STORE_NOT_FOUND",
    ] {
        assert!(logged.contains(line), "{line} not in:\n{logged}");
    }
    // One line for each thing ignored.
    assert_eq!(logged.matches("name=\"statestore\"").count(), 1, "{logged}");
    assert_eq!(logged.matches("kind=\"Resiliency\"").count(), 1, "{logged}");
}

/// A components folder with no lock store: every lock call gets daprd's
/// "not configured" (HTTP 500, gRPC FAILED_PRECONDITION); so does no
/// folder at all, and the start-up log says why and what to set. With
/// `--dapr-any-store`, any store name is served, and the log says the risk.
#[test]
fn no_lock_store_declared_is_not_configured_and_any_store_takes_any_name() {
    let dir = tempfile::tempdir().unwrap();
    let components = dir.path().join("components");
    std::fs::create_dir(&components).unwrap();
    std::fs::write(
        components.join("state.yaml"),
        "apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata:\n  name: s\nspec:\n  type: state.redis\n  version: v1\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("lockd.toml"),
        "[dapr]\ncomponents = \"components\"\n",
    )
    .unwrap();
    let grpc = format!("127.0.0.1:{}", closed_port());
    let args = ["--store", "memory", "--dapr-grpc-listen", &grpc];
    let server = Server::start_in(Some(dir.path()), &args, &[]);
    let body = br#"{"resourceId":"r","lockOwner":"o","expiryInSeconds":5}"#;
    for op in ["lock", "unlock"] {
        let reply = dapr_post(
            &server,
            &format!("/v1.0-alpha1/{op}/s"),
            "application/json",
            body,
        );
        assert_eq!(reply.code, 500, "{}", reply.body);
        assert_eq!(
            reply.json,
            json!({"errorCode": "ERR_LOCK_STORE_NOT_CONFIGURED",
                   "message": "lock store s is not configured"})
        );
    }
    let out = python(&server, &grpc, "grpc_edges.py", &[("NOT_CONFIGURED", "1")]);
    assert!(out.contains("ok no lock store configured: unlock"), "{out}");
    drop(server);
    let log = dir.path().join("none.log");
    let none = Server::start_logging_to(&log, None, &["--store", "memory"]);
    let reply = dapr_post(
        &none,
        "/v1.0-alpha1/lock/anything",
        "application/json",
        body,
    );
    assert_eq!(reply.code, 500, "{}", reply.body);
    assert_eq!(reply.json["errorCode"], "ERR_LOCK_STORE_NOT_CONFIGURED");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("[dapr] components is not set, so no lock store is declared")
            && logged.contains("--dapr-any-store"),
        "{logged}"
    );
    drop(none);
    let log = dir.path().join("any.log");
    let any = Server::start_logging_to(&log, None, &["--store", "memory", "--dapr-any-store"]);
    let reply = dapr_post(&any, "/v1.0-alpha1/lock/anything", "application/json", body);
    assert_eq!(reply.json, json!({"success": true}), "{}", reply.body);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("WARN")
            && logged.contains(
                "[dapr] any_store is set, so any store name is taken as the lockd namespace"
            ),
        "{logged}"
    );
}

/// A component file lockd cannot read refuses the start, naming the file
/// and the field; so does a `[dapr.stores]` entry naming no declared store.
#[test]
fn a_malformed_component_file_refuses_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let components = dir.path().join("components");
    std::fs::create_dir(&components).unwrap();
    std::fs::write(
        components.join("broken.yaml"),
        "apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata:\n  name: locks\nspec:\n  version: v1\n",
    )
    .unwrap();
    let serve = |toml: &str| {
        std::fs::write(dir.path().join("lockd.toml"), toml).unwrap();
        let run = lockd_in_dir(
            Some(dir.path()),
            &["serve", "--listen", "127.0.0.1:0", "--store", "memory"],
            &[],
        );
        assert_eq!(run.code, Some(2), "{}", run.stderr);
        run.stderr
    };
    let refused = serve("[dapr]\ncomponents = \"components\"\n");
    assert!(
        refused.contains("broken.yaml: document 1: spec: missing field `type`"),
        "{refused}"
    );
    std::fs::write(
        components.join("broken.yaml"),
        "apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata:\n  name: locks\nspec:\n  type: lock.redis\n",
    )
    .unwrap();
    let refused = serve("[dapr]\ncomponents = \"components\"\n[dapr.stores]\nlock = \"jobs\"\n");
    assert!(
        refused.contains("[dapr.stores] names \"lock\", which no lock.* component declares"),
        "{refused}"
    );
}

/// `--dapr-components DIR` declares the stores as `[dapr] components` does,
/// and wins over it: the example folder's `lockstore` is served, a typo of
/// it gets daprd's error.
#[test]
fn the_dapr_components_flag_declares_the_stores() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("lockd.toml"),
        "[dapr]\ncomponents = \"no-such-folder\"\n",
    )
    .unwrap();
    let examples = repo().join("examples/dapr-components");
    let args = [
        "--store",
        "memory",
        "--dapr-components",
        examples.to_str().unwrap(),
    ];
    let server = Server::start_in(Some(dir.path()), &args, &[]);
    let body = br#"{"resourceId":"r","lockOwner":"o","expiryInSeconds":5}"#;
    let reply = dapr_post(
        &server,
        "/v1.0-alpha1/lock/lockstore",
        "application/json",
        body,
    );
    assert_eq!(reply.json, json!({"success": true}), "{}", reply.body);
    let reply = dapr_post(
        &server,
        "/v1.0-alpha1/lock/lockstor",
        "application/json",
        body,
    );
    assert_dapr_error(
        &reply,
        400,
        "ERR_LOCK_STORE_NOT_FOUND",
        "lock store lockstor is not found",
    );
}
