//! Logs of a real `lockd serve`: with `RUST_LOG=lockd=debug` and
//! `--log-format json`, every request is one JSON line on stderr carrying its
//! span's fields (route, namespace, outcome) and its status and duration.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn post(addr: &str, path: &str, body: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

#[test]
fn every_request_is_a_json_line_with_its_span_fields() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stderr.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockd"))
        .args(["--log-format", "json", "serve", "--store", "memory"])
        .args(["--listen", "127.0.0.1:0"])
        .env("RUST_LOG", "lockd=debug")
        .env_remove("LOCKD_AUTH_TOKEN")
        .env_remove("LOCKD_STORE")
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let addr = loop {
        let mut line = String::new();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "lockd exited");
        if let Some(url) = line.trim().strip_prefix("lockd listening on http://") {
            break url.to_string();
        }
    };
    let lock = r#"{"namespace":"logs-ns","name":"a","owner":"o1","ttl_ms":10000}"#;
    assert!(post(&addr, "/v1/locks/lock", lock).starts_with("HTTP/1.1 200"));
    let busy = r#"{"namespace":"logs-ns","name":"a","owner":"o2","ttl_ms":10000}"#;
    assert!(post(&addr, "/v1/locks/lock", busy).starts_with("HTTP/1.1 409"));

    // The request line is written when the request's span closes, just after
    // the response; give the server a moment, then stop it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let lines = loop {
        let text = std::fs::read_to_string(&log).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .filter(|v: &Value| v["message"] == "request")
            .collect();
        if lines.len() >= 2 || Instant::now() > deadline {
            break lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(lines.len(), 2, "{lines:?}");
    for (line, (status, outcome)) in lines.iter().zip([(200, "ok"), (409, "busy")]) {
        assert_eq!(line["level"], "DEBUG", "{line}");
        assert_eq!(line["status"], status, "{line}");
        assert!(line["elapsed_us"].as_u64().is_some(), "{line}");
        let span = &line["span"];
        assert_eq!(span["route"], "/v1/locks/lock", "{line}");
        assert_eq!(span["namespace"], "logs-ns", "{line}");
        assert_eq!(span["outcome"], outcome, "{line}");
        assert_eq!(span["method"], "POST", "{line}");
    }
}
