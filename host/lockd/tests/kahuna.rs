//! Kahuna's lock REST API: the `curl` commands of Kahuna's lock
//! documentation (docs/distributed-locks.md of kahunakv.github.io, "Rest"
//! tabs), run verbatim with only the host replaced, against a `lockd serve`
//! with no configuration; Kahuna's reply shapes and codes; bad input that
//! changes nothing; lockd's own 404 under /v1/ kept.

mod lockd_server;

use std::process::Command;

use crate::lockd_server::{raw_request, request, Reply, Server};
use serde_json::{json, Value};

/// The documentation's commands, as written there.
const TRY_LOCK: &str = r#"curl --location 'https://kahuna-dev.company.internal/v1/locks/try-lock' \
    --header 'Content-Type: application/json' \
    --data '{"resource":"locks/tasks/123", "owner":"e5943062358144b4b0bbff8868f7063d", "expiresMs":10000, "durability":0 }'"#;
const TRY_UNLOCK: &str = r#"curl --location 'http://kahuna-dev.company.internal/v1/locks/try-unlock' \
    --header 'Content-Type: application/json' \
    --data '{"resource":"locks/tasks/123", "owner":"e5943062358144b4b0bbff8868f7063d", "durability":0}'"#;
const TRY_EXTEND: &str = r#"curl --location 'http://kahuna-dev.company.internal/v1/locks/try-extend' \
    --header 'Content-Type: application/json' \
    --data '{"resource": "locks/tasks/123", "owner": "e5943062358144b4b0bbff8868f7063d", "expiresMs": 60000, "durability": 0}'"#;
const GET_INFO: &str = r#"curl --location 'https://kahuna-dev.company.internal/v1/locks/get-info' \
    --header 'Content-Type: application/json' \
    --data '{"resource": "locks/tasks/123", "durability": 0}'"#;

const OWNER: &str = "e5943062358144b4b0bbff8868f7063d";

/// Runs a documented command against `server` (its scheme and host
/// replaced by the server's URL); the JSON it prints.
fn curl(server: &Server, command: &str) -> Value {
    curl_at(&server.url, command, "")
}

/// [`curl`] against `url` with `extra` curl arguments.
fn curl_at(url: &str, command: &str, extra: &str) -> Value {
    let command = command
        .replace("https://kahuna-dev.company.internal", url)
        .replace("http://kahuna-dev.company.internal", url);
    let out = Command::new("sh")
        .args([
            "-c",
            &format!("{command} {extra} --silent --show-error --max-time 10"),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{command}: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// `{"servedFrom": "", "type": N, "fencingToken": T}`, Kahuna's
/// `KahunaLockResponse`; the token.
fn assert_lock_reply(reply: &Value, kind: u64) -> u64 {
    let fields: Vec<&str> = reply
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(fields, ["fencingToken", "servedFrom", "type"], "{reply}");
    assert_eq!(reply["type"], kind, "{reply}");
    reply["fencingToken"].as_u64().unwrap()
}

fn kahuna(server: &Server, path: &str, body: Value) -> Value {
    let reply = request("POST", &server.url, path, Some(&body.to_string()), None);
    assert_eq!(reply.code, 200, "{}", reply.body);
    reply.json
}

#[test]
fn documented_curl_commands_work_verbatim() {
    let server = Server::start(&[]);
    let token = assert_lock_reply(&curl(&server, TRY_LOCK), 0);
    assert!(token > 0);
    // The holder's retry: locked again, the same token (as on Kahuna).
    assert_eq!(assert_lock_reply(&curl(&server, TRY_LOCK), 0), token);
    assert_eq!(assert_lock_reply(&curl(&server, TRY_EXTEND), 2), token);
    let info = curl(&server, GET_INFO);
    assert_eq!(info["type"], 4, "{info}");
    assert_eq!(info["owner"], OWNER);
    assert_eq!(info["fencingToken"], token);
    let expires = info["expires"]["l"].as_u64().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(expires > now + 50_000 && expires <= now + 60_000, "{info}");
    // An ordinary lockd lock on the default namespace; durability 0 is ephemeral.
    let native = server.post_json("/v1/locks/get", &json!({"name": "locks/tasks/123"}));
    assert_eq!(native.json["owner"], OWNER, "{}", native.body);
    assert_eq!(native.json["durability"], "ephemeral");
    assert_eq!(native.json["fencing_token"], token);
    // Another owner: busy, and invalidOwner on extend and unlock.
    let other = json!({"resource": "locks/tasks/123", "owner": "b3RoZXI=", "expiresMs": 1000});
    assert_lock_reply(&kahuna(&server, "/v1/locks/try-lock", other.clone()), 1);
    assert_lock_reply(&kahuna(&server, "/v1/locks/try-extend", other.clone()), 103);
    assert_lock_reply(&kahuna(&server, "/v1/locks/try-unlock", other), 103);
    assert_lock_reply(&curl(&server, TRY_UNLOCK), 3);
    // Gone: lockDoesNotExist everywhere.
    assert_lock_reply(&curl(&server, TRY_UNLOCK), 102);
    assert_lock_reply(&curl(&server, TRY_EXTEND), 102);
    assert_lock_reply(&curl(&server, GET_INFO), 102);
    // A fresh grant has a higher token.
    assert!(assert_lock_reply(&curl(&server, TRY_LOCK), 0) > token);
}

fn post(server: &Server, path: &str, content_type: Option<&str>, body: &[u8]) -> Reply {
    let content_type = content_type
        .map(|t| format!("\r\nContent-Type: {t}"))
        .unwrap_or_default();
    raw_request(
        server.addr,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: lockd{content_type}\r\nContent-Length: {}",
            body.len()
        ),
        body.to_vec(),
    )
}

#[test]
fn bad_input_gets_kahunas_answers_and_changes_nothing() {
    let server = Server::start(&[]);
    let lock = "/v1/locks/try-lock";
    let json_type = Some("application/json");
    let invalid_input = [
        json!({"resource": "r", "expiresMs": 1000}),
        json!({"owner": OWNER, "expiresMs": 1000}),
        json!({"resource": "", "owner": OWNER, "expiresMs": 1000}),
        json!({"resource": "r", "owner": OWNER}),
        json!({"resource": "r", "owner": OWNER, "expiresMs": -5}),
        json!({"resource": "r", "owner": OWNER, "expiresMs": 1000, "durability": 7}),
        json!({"resource": "r", "owner": OWNER, "expiresMs": 100_000_000, "durability": 1}),
    ];
    for body in invalid_input {
        let reply = post(&server, lock, json_type, body.to_string().as_bytes());
        assert_eq!(reply.code, 200, "{body}: {}", reply.body);
        assert_eq!(reply.json["type"], 100, "{body}: {}", reply.body);
    }
    let unbindable: [&[u8]; 7] = [
        b"",
        b"{not json",
        // An array is no object, although serde would bind one by position.
        br#"[null, null]"#,
        br#"["r", "b3RoZXI=", 1000, 0]"#,
        br#"{"resource": "r", "owner": "not base64!", "expiresMs": 1000}"#,
        br#"{"resource": "r", "owner": "b3RoZXI=", "expiresMs": 3000000000}"#,
        br#"{"resource": 5, "owner": "b3RoZXI=", "expiresMs": 1000}"#,
    ];
    for body in unbindable {
        let reply = post(&server, lock, json_type, body);
        assert_eq!(
            reply.code,
            400,
            "{}: {}",
            String::from_utf8_lossy(body),
            reply.body
        );
    }
    let good = json!({"resource": "r", "owner": OWNER, "expiresMs": 1000}).to_string();
    assert_eq!(
        post(&server, lock, Some("text/plain"), good.as_bytes()).code,
        415
    );
    assert_eq!(post(&server, lock, None, good.as_bytes()).code, 415);
    assert_eq!(
        post(&server, lock, json_type, &vec![b' '; 2 << 20]).code,
        413
    );
    let get = request("GET", &server.url, lock, None, None);
    assert_eq!((get.code, get.header("allow")), (405, Some("POST")));
    let listed = server.get("/v1/locks");
    assert_eq!(listed.json["locks"], json!([]), "{}", listed.body);
    // lockd's own routes and its 404 under /v1/ are unchanged.
    let missing = request("POST", &server.url, "/v1/locks/try-lockx", Some("{}"), None);
    assert_eq!(
        (missing.code, missing.status()),
        (404, "not_found"),
        "{}",
        missing.body
    );
    let own = server.post_json(
        "/v1/locks/lock",
        &json!({"name": "r", "owner": "o", "ttl_ms": 1000}),
    );
    assert_eq!(own.code, 200, "{}", own.body);
}

#[test]
fn kahuna_routes_need_the_token() {
    let server = Server::with_token("s3cret");
    let body = json!({"resource": "r", "owner": OWNER, "expiresMs": 1000}).to_string();
    let refused = request("POST", &server.url, "/v1/locks/try-lock", Some(&body), None);
    assert_eq!(refused.code, 401, "{}", refused.body);
    let locked = server.post("/v1/locks/try-lock", &body);
    assert_eq!(locked.json["type"], 0, "{}", locked.body);
}

/// The documented commands over HTTPS with a token (curl's `--cacert` and
/// `Authorization` added): a token over `default` works, a token for
/// another namespace gets 403 `forbidden`.
#[test]
fn documented_commands_over_https_with_a_token() {
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
        entry("k", "kahuna-token-1", "default") + &entry("o", "other-token-1", "jobs"),
    )
    .unwrap();
    /// Kills the server even when an assertion fails first.
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockd"))
        .args(["serve", "--listen", "127.0.0.1:0", "--store", "memory"])
        .arg("--tls-cert")
        .arg(&cert.cert)
        .arg("--tls-key")
        .arg(&cert.key)
        .current_dir(dir.path())
        .env_remove("LOCKD_AUTH_TOKEN")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map(Killed)
        .unwrap();
    let mut lines = std::io::BufReader::new(child.0.stdout.take().unwrap()).lines();
    let url = loop {
        let line = lines.next().expect("lockd exited").unwrap();
        if let Some(addr) = line.strip_prefix("lockd listening on ") {
            break addr.trim().to_string();
        }
    };
    let ca = pki.ca().display().to_string();
    let with = |token: &str| format!("--cacert '{ca}' -H 'Authorization: Bearer {token}'");
    let locked = curl_at(&url, TRY_LOCK, &with("kahuna-token-1"));
    assert_lock_reply(&locked, 0);
    let refused = curl_at(&url, TRY_LOCK, &with("other-token-1"));
    assert_eq!(refused["status"], "forbidden", "{refused}");
}
