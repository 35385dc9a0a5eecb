//! TLS on the listener and in the CLI, against the real `lockd` binary:
//! HTTPS on every route (REST, events, /metrics, a Spin component) with
//! HTTP/1.1 and HTTP/2 chosen by ALPN, mutual TLS, certificates rotated on
//! SIGHUP, handshakes that cannot hold the server up, and the CLI's checks
//! of a server's certificate. Every certificate comes from `TestPki`.

mod lockd_server;
mod tls_harness;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::lockd_server::{lockd, Run, LOCKD_ENV};
use http_body_util::BodyExt as _;
use lockd_test_support::certs::CertFiles;
use serde_json::Value;
use tls_harness::*;

/// `lockd ARGS --server URL` plus `tls_args`.
fn cli(server: &str, args: &[&str], tls_args: &[&str]) -> Run {
    let mut all = args.to_vec();
    all.extend_from_slice(&["--server", server]);
    all.extend_from_slice(tls_args);
    lockd(&all, &[])
}

fn assert_fails(run: &Run, code: i32, needles: &[&str]) {
    let line = run.one_stderr_line();
    assert_eq!(run.code, Some(code), "{run:?}");
    for needle in needles {
        assert!(line.contains(needle), "{needle:?} not in {line:?}");
    }
}

#[test]
fn rest_answers_over_http1_and_http2_chosen_by_alpn() {
    let pki = Pki::new();
    let server = TlsServer::serve(&pki.server, &[]);

    // HTTP/1.1: asked for by ALPN, and without ALPN at all.
    for alpn in [&[b"http/1.1".as_slice()][..], &[]] {
        let mut tls = connect(server.addr, client_config(pki.ca.ca(), None, alpn)).unwrap();
        let expected: Option<&[u8]> = alpn.first().copied();
        assert_eq!(tls.conn.alpn_protocol(), expected);
        assert_eq!(peer_cert(&tls), der(&pki.server.cert));
        let lock = r#"{"name":"h1","owner":"o","ttl_ms":60000}"#;
        let (code, body) = request(&mut tls, "POST", "/v1/locks/lock", lock).unwrap();
        assert_eq!(code, 200, "{body}");
        let (code, body) = request(&mut tls, "POST", "/v1/locks/unlock", &{
            let token = serde_json::from_str::<Value>(&body).unwrap()["fencing_token"].clone();
            format!(r#"{{"name":"h1","owner":"o","fencing_token":{token}}}"#)
        })
        .unwrap();
        assert_eq!((code, body.contains("unlocked")), (200, true), "{body}");
        let (code, metrics) = request(&mut tls, "GET", "/metrics", "").unwrap();
        assert_eq!(code, 200);
        assert!(metrics.contains("lockd_operations_total"), "{metrics}");
    }

    // HTTP/2, chosen by ALPN: the event stream and two calls share one
    // connection.
    h2(server.addr, pki.ca.ca(), |mut sender| async move {
        let events = sender
            .send_request(h2_request(server.addr, "GET", "/v1/events", ""))
            .await
            .unwrap();
        assert_eq!(events.version(), hyper::Version::HTTP_2);
        assert_eq!(events.status(), 200);
        for (path, body) in [
            (
                "/v1/locks/lock",
                r#"{"name":"h2","owner":"o","ttl_ms":60000}"#,
            ),
            ("/v1/locks/get", r#"{"name":"h2"}"#),
        ] {
            let (code, json) = h2_call(&mut sender, server.addr, "POST", path, body).await;
            assert_eq!(code, 200, "{json}");
            assert!(json["fencing_token"].as_u64().is_some(), "{json}");
        }
        // The stream opens with a comment; the lock's event follows.
        let mut events = events.into_body();
        let mut seen = String::new();
        while !seen.contains(r#""type":"acquired""#) {
            let frame = tokio::time::timeout(Duration::from_secs(10), events.frame())
                .await
                .unwrap_or_else(|_| panic!("no acquired event within 10 s: {seen:?}"))
                .unwrap()
                .unwrap();
            seen.push_str(std::str::from_utf8(&frame.into_data().unwrap()).unwrap());
        }
        assert!(seen.contains("\"name\":\"h2\""), "{seen}");
    });
}

#[test]
fn cli_locks_over_https_with_cacert_flag_or_env() {
    let pki = Pki::new();
    let server = TlsServer::serve(&pki.server, &[]);
    let ca = ["--cacert", s(pki.ca.ca())];
    let lock = cli(
        &server.url,
        &[
            "lock", "job", "--owner", "o", "--ttl", "1m", "--format", "json",
        ],
        &ca,
    );
    assert_eq!(lock.code, Some(0), "{lock:?}");
    let token = serde_json::from_str::<Value>(&lock.stdout).unwrap()["fencing_token"].to_string();

    let env = [
        ("LOCKD_SERVER", server.url.as_str()),
        ("LOCKD_CACERT", s(pki.ca.ca())),
    ];
    let get = lockd(&["get", "job"], &env);
    assert_eq!(get.code, Some(0), "{get:?}");
    assert!(get.stdout.starts_with("job held by o token "), "{get:?}");
    let unlock = lockd(&["unlock", "job", "--owner", "o", "--token", &token], &env);
    assert_eq!(unlock.code, Some(0), "{unlock:?}");

    // Plain http:// to the TLS port: the server's hint, no lock taken.
    let plain = server.url.replace("https://", "http://");
    let run = cli(&plain, &["get", "job"], &[]);
    assert_fails(&run, 2, &["https://"]);
}

#[test]
fn cli_refuses_untrusted_and_mismatched_certificates_with_exit_3() {
    let pki = Pki::new();
    let server = TlsServer::serve(&pki.server, &[]);
    let stranger = pki.stranger();
    let get = ["get", "job"];
    // Signed by a CA the client was not given, or not in the system's roots.
    let run = cli(&server.url, &get, &["--cacert", s(stranger.ca())]);
    assert_fails(&run, 3, &["not trusted", "--cacert", &server.url]);
    let run = cli(&server.url, &get, &[]);
    assert_fails(&run, 3, &["not trusted", "--cacert"]);
    // An expired certificate, from a CA the client trusts.
    let (expired_ca, expired) = expired_server(&pki.path("expired"));
    let stale = TlsServer::serve(&expired, &[]);
    let run = cli(&stale.url, &get, &["--cacert", s(&expired_ca)]);
    assert_fails(&run, 3, &["has expired"]);
    // A certificate for another name.
    let other = pki.ca.server_for("other", &["other.example"]);
    let mismatched = TlsServer::serve(&other, &[]);
    let run = cli(&mismatched.url, &get, &["--cacert", s(pki.ca.ca())]);
    assert_fails(&run, 3, &["does not name this server", "other.example"]);
    // https:// to a plain-HTTP server: an error, never a retry over http.
    let plain = lockd_server::Server::start(&[]);
    let run = cli(&plain.url.replace("http://", "https://"), &get, &[]);
    assert_fails(&run, 3, &["does not speak TLS"]);
    // A CA file that is not one is a usage error naming it.
    let garbage = pki.path("garbage.pem");
    std::fs::write(&garbage, "nothing here").unwrap();
    let run = cli(&server.url, &get, &["--cacert", s(&garbage)]);
    assert_fails(&run, 2, &["garbage.pem", "holds no certificate"]);
}

#[test]
fn mutual_tls_requires_a_client_certificate_from_the_configured_ca() {
    let pki = Pki::new();
    // The client CA comes from lockd.toml's [tls] table.
    let config = pki.path("lockd.toml");
    std::fs::write(
        &config,
        format!("[tls]\nclient_ca = {:?}\n", s(pki.ca.ca())),
    )
    .unwrap();
    let server = TlsServer::serve(&pki.server, &["--config", s(&config)]);
    let client = pki.ca.client("client");
    let strangers = pki.stranger().client("intruder");
    let ca = pki.ca.ca();

    // Raw TLS: without a certificate, or with another CA's, no answer.
    for presented in [None, Some(&strangers)] {
        let refused = connect(server.addr, client_config(ca, presented, &[]))
            .and_then(|mut tls| healthz(&mut tls));
        assert!(refused.is_err(), "{presented:?}: {refused:?}");
    }
    let mut tls = connect(server.addr, client_config(ca, Some(&client), &[])).unwrap();
    assert_eq!(healthz(&mut tls).unwrap(), 200);

    // The CLI says what is missing, and works with --cert and --key.
    let get = ["get", "job"];
    let run = cli(&server.url, &get, &["--cacert", s(ca)]);
    assert_fails(&run, 3, &["requires a client certificate", "--cert"]);
    let foreign = [
        "--cacert",
        s(ca),
        "--cert",
        s(&strangers.cert),
        "--key",
        s(&strangers.key),
    ];
    let run = cli(&server.url, &get, &foreign);
    assert_fails(&run, 3, &["refused this client's certificate"]);
    let mine = [
        "--cacert",
        s(ca),
        "--cert",
        s(&client.cert),
        "--key",
        s(&client.key),
    ];
    let run = cli(
        &server.url,
        &["lock", "job", "--owner", "o", "--ttl", "1m"],
        &mine,
    );
    assert_eq!(run.code, Some(0), "{run:?}");
    let env = [
        ("LOCKD_SERVER", server.url.as_str()),
        ("LOCKD_CACERT", s(ca)),
        ("LOCKD_CLIENT_CERT", s(&client.cert)),
        ("LOCKD_CLIENT_KEY", s(&client.key)),
    ];
    let run = lockd(&get, &env);
    assert_eq!(run.code, Some(0), "{run:?}");
    // A key that is not the certificate's is a usage error naming both.
    let wrong = [
        "--cacert",
        s(ca),
        "--cert",
        s(&client.cert),
        "--key",
        s(&strangers.key),
    ];
    let run = cli(&server.url, &get, &wrong);
    assert_fails(
        &run,
        2,
        &["intruder.key", "does not belong to", "client.pem"],
    );
}

#[test]
fn sighup_rotates_the_certificate_without_dropping_connections() {
    let pki = Pki::new();
    let live = pki.live();
    let cert = &live.cert;
    let server = TlsServer::serve(&live, &[]);
    let config = client_config(pki.ca.ca(), None, &[]);
    let mut kept = connect(server.addr, config.clone()).unwrap();
    assert_eq!(peer_cert(&kept), der(&pki.server.cert));
    assert_eq!(healthz(&mut kept).unwrap(), 200);

    let next = pki.ca.server("next");
    install(&next, &live);
    server.hangup();
    server.wait_for_log(&["TLS files reloaded"]);
    let fresh = connect(server.addr, config.clone()).unwrap();
    assert_eq!(
        peer_cert(&fresh),
        der(&next.cert),
        "a new connection gets the new certificate"
    );
    // The connection opened before the reload still answers.
    assert_eq!(healthz(&mut kept).unwrap(), 200);

    // A file that does not parse is refused by name; the current one stays.
    std::fs::write(cert, "-----BEGIN CERTIFICATE-----\nnot base64!\n").unwrap();
    server.hangup();
    server.wait_for_log(&["TLS reload refused", "live.pem"]);
    let after = connect(server.addr, config.clone()).unwrap();
    assert_eq!(peer_cert(&after), der(&next.cert));
    // So is a key that does not match the certificate.
    std::fs::copy(&pki.server.cert, cert).unwrap();
    server.hangup();
    server.wait_for_log(&["TLS reload refused", "does not belong to"]);
    let mut after = connect(server.addr, config).unwrap();
    assert_eq!(peer_cert(&after), der(&next.cert));
    assert_eq!(healthz(&mut after).unwrap(), 200);
    assert_eq!(healthz(&mut kept).unwrap(), 200);
}

/// Dapr's gRPC listener serves with the main listener's TLS: the same client
/// CA (a client without a certificate from it gets no HTTP/2 at all) and
/// the same SIGHUP rotation.
#[test]
fn daprs_grpc_listener_shares_the_client_ca_and_the_rotation() {
    let pki = Pki::new();
    let live = pki.live();
    let grpc: SocketAddr = format!("127.0.0.1:{}", lockd_server::closed_port())
        .parse()
        .unwrap();
    let grpc_arg = grpc.to_string();
    let ca = pki.ca.ca();
    let server = TlsServer::serve(
        &live,
        &["--tls-client-ca", s(ca), "--dapr-grpc-listen", &grpc_arg],
    );
    let client = pki.ca.client("client");
    let strangers = pki.stranger().client("intruder");
    // The client's HTTP/2 preface and an empty SETTINGS frame, then the
    // head of the server's first frame: the certificate it presented and
    // that frame's type (4, SETTINGS), or the error that ended it.
    let first_frame = |presented: Option<&CertFiles>| -> std::io::Result<(Vec<u8>, u8)> {
        let mut tls = connect(grpc, client_config(ca, presented, &[b"h2"]))?;
        tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")?;
        tls.flush()?;
        let mut head = [0u8; 9];
        tls.read_exact(&mut head)?;
        Ok((peer_cert(&tls), head[3]))
    };
    for presented in [None, Some(&strangers)] {
        let refused = first_frame(presented);
        assert!(refused.is_err(), "{presented:?}: {refused:?}");
    }
    let (presented, frame) = first_frame(Some(&client)).unwrap();
    assert_eq!((presented, frame), (der(&pki.server.cert), 4));

    let next = pki.ca.server("next");
    install(&next, &live);
    server.hangup();
    server.wait_for_log(&["TLS files reloaded"]);
    let (presented, frame) = first_frame(Some(&client)).unwrap();
    assert_eq!(
        (presented, frame),
        (der(&next.cert), 4),
        "a new gRPC connection gets the new certificate"
    );
}

#[test]
fn bad_tls_files_stop_the_start_with_the_file_named() {
    let pki = Pki::new();
    let garbage = pki.path("garbage.pem");
    std::fs::write(&garbage, "no certificate here\n").unwrap();
    let other_key = pki.ca.server("other").key;
    let serve = |tls: &[&str]| {
        let mut args = vec!["serve", "--listen", "127.0.0.1:0", "--store", "memory"];
        args.extend_from_slice(tls);
        lockd(&args, &[])
    };
    let (cert, key) = (s(&pki.server.cert), s(&pki.server.key));
    for (tls, needles) in [
        (
            vec!["--tls-cert", s(&garbage), "--tls-key", key],
            vec!["garbage.pem", "no certificate"],
        ),
        (
            vec!["--tls-cert", cert, "--tls-key", s(&garbage)],
            vec!["garbage.pem", "no private key"],
        ),
        (
            vec!["--tls-cert", cert, "--tls-key", s(&other_key)],
            vec!["other.key", "does not belong to", "server.pem"],
        ),
        (
            vec![
                "--tls-cert",
                cert,
                "--tls-key",
                key,
                "--tls-client-ca",
                s(&garbage),
            ],
            vec!["garbage.pem"],
        ),
        (vec!["--tls-cert", cert], vec!["needs --tls-key"]),
        (
            vec!["--tls-cert", cert, "--tls-key", "/nonexistent/k.pem"],
            vec!["/nonexistent/k.pem"],
        ),
    ] {
        let run = serve(&tls);
        assert_eq!(run.code, Some(2), "{tls:?}: {run:?}");
        for needle in needles {
            assert!(
                run.stderr.contains(needle),
                "{tls:?}: {needle:?} not in {}",
                run.stderr
            );
        }
        assert!(!run.stdout.contains("listening"), "{run:?}");
    }
}

/// A TCP connection that sends `bytes` and then reads until the server
/// closes it; returns what it read and when it was closed.
fn send_and_wait_for_close(addr: SocketAddr, bytes: &[u8]) -> (Vec<u8>, Duration) {
    let started = Instant::now();
    let mut tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    tcp.write_all(bytes).unwrap();
    let mut answer = Vec::new();
    let _ = tcp.read_to_end(&mut answer);
    (answer, started.elapsed())
}

#[test]
fn plain_http_garbage_and_stalled_handshakes_cost_one_connection() {
    let pki = Pki::new();
    let server = TlsServer::serve(&pki.server, &[]);
    let config = client_config(pki.ca.ca(), None, &[]);
    let addr = server.addr;

    // Two clients that stall: one silent, one after part of a ClientHello.
    let stalled: Vec<_> = [
        &b""[..],
        &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc][..],
    ]
    .into_iter()
    .map(|bytes| std::thread::spawn(move || send_and_wait_for_close(addr, bytes)))
    .collect();

    // Meanwhile a plain-HTTP request gets the hint, garbage is closed, and
    // everyone else is answered.
    let (answer, _) = send_and_wait_for_close(addr, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(answer.contains("https://"), "{answer}");
    for garbage in [
        &[0u8; 64][..],
        &[0x16; 64][..],
        &[0xff, 0x00, 0x13, 0x37][..],
    ] {
        let (_, closed_after) = send_and_wait_for_close(addr, garbage);
        assert!(
            closed_after < Duration::from_secs(5),
            "{garbage:?}: {closed_after:?}"
        );
    }
    for _ in 0..5 {
        let mut tls = connect(addr, config.clone()).unwrap();
        assert_eq!(healthz(&mut tls).unwrap(), 200);
    }

    // The stalled ones are dropped after the 10 s handshake timeout.
    for handle in stalled {
        let (answer, closed_after) = handle.join().unwrap();
        assert!(answer.is_empty(), "{answer:?}");
        assert!(
            closed_after >= Duration::from_secs(9) && closed_after < Duration::from_secs(15),
            "closed after {closed_after:?}"
        );
    }
    let mut tls = connect(addr, config).unwrap();
    assert_eq!(healthz(&mut tls).unwrap(), 200);
}

#[test]
fn exec_and_watch_work_over_https() {
    let pki = Pki::new();
    let client = pki.ca.client("client");
    let server = TlsServer::serve(&pki.server, &["--tls-client-ca", s(pki.ca.ca())]);
    let tls_args = [
        "--cacert",
        s(pki.ca.ca()),
        "--cert",
        s(&client.cert),
        "--key",
        s(&client.key),
    ];

    let mut watch = Command::new(env!("CARGO_BIN_EXE_lockd"));
    watch
        .args(["watch", "--format", "json", "--server", &server.url])
        .args(tls_args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for var in LOCKD_ENV {
        watch.env_remove(var);
    }
    let mut watch = KillOnDrop(watch.spawn().unwrap());
    let (tx, lines) = mpsc::channel();
    let stdout = watch.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // Locks taken until the watcher, once subscribed, reports one.
    let deadline = Instant::now() + Duration::from_secs(30);
    let event: Value = loop {
        let exec = cli(
            &server.url,
            &["exec", "nightly", "--ttl", "10s"],
            &[
                &tls_args[..],
                &["--", "sh", "-c", "echo token=$LOCKD_FENCING_TOKEN"],
            ]
            .concat(),
        );
        assert_eq!(exec.code, Some(0), "{exec:?}");
        assert!(exec.stdout.starts_with("token="), "{exec:?}");
        if let Ok(line) = lines.recv_timeout(Duration::from_millis(500)) {
            break serde_json::from_str(&line).unwrap();
        }
        assert!(Instant::now() < deadline, "lockd watch printed nothing");
    };
    assert_eq!(event["name"], "nightly", "{event}");
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn up_serves_a_spin_component_and_the_web_page_over_https() {
    let pki = Pki::new();
    let app = tempfile::tempdir().unwrap();
    std::fs::write(
        app.path().join("spin.toml"),
        format!(
            "spin_manifest_version = 2\n\
             [application]\nname = \"tls\"\n\
             [[trigger.http]]\nroute = \"/jobs/...\"\ncomponent = \"edge-jobs\"\n\
             [[trigger.http]]\nroute = \"/guarded/...\"\ncomponent = \"edge-guard-p3\"\n\
             [component.edge-jobs]\nsource = '{}'\n\
             [component.edge-guard-p3]\nsource = '{}'\n",
            lockd_guest_tests::EDGE_JOBS,
            lockd_guest_tests::EDGE_GUARD_P3,
        ),
    )
    .unwrap();
    std::fs::write(
        app.path().join("lockd.toml"),
        format!(
            "store = \"memory\"\n[tls]\ncert = {:?}\nkey = {:?}\n",
            s(&pki.server.cert),
            s(&pki.server.key)
        ),
    )
    .unwrap();
    let server = TlsServer::launch("up", Some(app.path()), &[]);
    let mut tls = connect(server.addr, client_config(pki.ca.ca(), None, &[])).unwrap();
    // A WASIp2 and a WASIp3 component.
    for path in ["/jobs/7", "/guarded/7"] {
        let (code, body) = request(&mut tls, "POST", path, "").unwrap();
        assert_eq!(code, 200, "{path}: {body}");
        let json: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(json["status"], "done", "{path}: {body}");
    }
    let (code, page) = request(&mut tls, "GET", "/ui/", "").unwrap();
    assert_eq!(code, 200);
    assert!(
        page.contains("<html") || page.contains("<!doctype"),
        "{page}"
    );
}
