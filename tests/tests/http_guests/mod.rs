//! The HTTP components, served in process by lockd-server with
//! lockd-components' `SpinApp` mounted, as `lockd serve --manifest` serves
//! them (without Dapr's and Kahuna's routes, which no test here calls).

use std::net::SocketAddr;
use std::path::Path;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use lockd_components::serve::SpinApp;
use lockd_server::config::LockdConfig;
use lockd_server::serve::{ServeOptions, Server};
use lockd_server::store::StoreSpec;
use serde_json::Value;

mod edge_wait;
pub(crate) use edge_wait::edge_wait_p3;

/// A running server and what it needs to live.
pub struct Running {
    pub addr: SocketAddr,
    pub service: lockd_core::LockService,
    _dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Writes a manifest routing `routes` (pattern, component id, wasm path) and
/// a lockd.toml, and serves them on a free loopback port.
pub async fn serve(routes: &[(&str, &str, &str)], lockd_toml: &str) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let mut manifest = String::from("spin_manifest_version = 2\n[application]\nname = \"test\"\n");
    let mut defined = std::collections::BTreeMap::new();
    for (pattern, id, wasm) in routes {
        manifest += &format!("[[trigger.http]]\nroute = \"{pattern}\"\ncomponent = \"{id}\"\n");
        defined.insert(*id, *wasm);
    }
    for (id, wasm) in defined {
        manifest +=
            &format!("[component.{id}]\nsource = \"{wasm}\"\nallowed_outbound_hosts = []\n");
    }
    let manifest_path = dir.path().join("spin.toml");
    std::fs::write(&manifest_path, manifest).unwrap();
    let config: LockdConfig = toml::from_str(lockd_toml).unwrap();
    let server: Server = lockd_server::bind(ServeOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        store: StoreSpec::Redb(dir.path().join("locks.redb")),
        config,
        auth_token: None,
        events_heartbeat: lockd_server::api::HEARTBEAT,
        extensions: vec![Box::new(SpinApp::new(manifest_path))],
    })
    .await
    .unwrap();
    let (addr, service) = (server.addr(), server.service().clone());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));
    Running {
        addr,
        service,
        _dir: dir,
        stop: Some(stop),
    }
}

/// One request on a fresh connection: (status, body).
pub async fn request(addr: SocketAddr, method: &str, path: impl AsRef<str>) -> (u16, String) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::builder()
        .method(method)
        .uri(path.as_ref())
        .header("host", addr.to_string())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = sender.send_request(req).await.unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

pub fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// Fires `n` identical requests at once and returns their (status, body).
pub async fn concurrently(
    addr: SocketAddr,
    n: usize,
    method: &'static str,
    path: String,
) -> Vec<(u16, String)> {
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(n));
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (barrier, path) = (barrier.clone(), path.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                request(addr, method, path).await
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

/// Mutual exclusion through a job endpoint: of `n` simultaneous POSTs to
/// `path`, exactly one runs the job (200 with its token) and the others are
/// told who holds it (409). Returns the path of the round that showed it,
/// and the job's token.
///
/// The job holds its lock for about 200 ms. On a busy machine the `n`
/// requests may reach the component spread over longer than that, and one
/// that arrives after the job ended rightly runs it again (each run under
/// its own grant). Such a round proves nothing either way, so it is run
/// again under a new job id (`{path}-{round}`), up to five rounds; any
/// other answer fails at once.
pub async fn exactly_one_runs(addr: SocketAddr, path: &str, n: usize) -> (String, u64) {
    const ROUNDS: usize = 5;
    let mut round = 0;
    loop {
        let path = if round == 0 {
            path.to_string()
        } else {
            format!("{path}-{round}")
        };
        let results = concurrently(addr, n, "POST", path.clone()).await;
        let done: Vec<_> = results.iter().filter(|(s, _)| *s == 200).collect();
        let busy: Vec<_> = results.iter().filter(|(s, _)| *s == 409).collect();
        let mut tokens: Vec<u64> = done
            .iter()
            .filter_map(|(_, body)| json(body)["fencing_token"].as_u64())
            .collect();
        tokens.sort_unstable();
        tokens.dedup();
        let late_runs = done.len() > 1
            && done.len() + busy.len() == n
            && tokens.len() == done.len()
            && round + 1 < ROUNDS;
        if late_runs {
            round += 1;
            println!(
                "{path}: {} runs, each under its own grant: requests arrived after the job \
                 ended; again under a new id",
                done.len()
            );
            continue;
        }
        assert_eq!((done.len(), busy.len()), (1, n - 1), "{results:?}");
        let done = json(&done[0].1);
        assert_eq!(done["status"], "done");
        for (_, body) in busy {
            let b = json(body);
            assert_eq!(b["status"], "busy");
            assert!(
                b["holder"].as_str().is_some_and(|h| !h.is_empty()),
                "{body}"
            );
        }
        let token = done["fencing_token"]
            .as_u64()
            .expect("fencing_token is a u64");
        return (path, token);
    }
}

pub fn wasm(path: &str) -> &str {
    assert!(Path::new(path).exists(), "{path} was not built");
    path
}

/// The example edge app's job endpoint (spin-sdk 5.2, WASIp2): 20
/// simultaneous POSTs, exactly one runs; the lock lives in the component's
/// namespace and is free afterwards; the next run gets a higher token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn edge_jobs() {
    let wasm = wasm(lockd_guest_tests::EDGE_JOBS);
    let app = serve(&[("/jobs/...", "edge-jobs", wasm)], "").await;
    let (path, t1) = exactly_one_runs(app.addr, "/jobs/1", 20).await;
    let (status, body) = request(app.addr, "GET", &path).await;
    assert_eq!(
        (status, json(&body)["status"].as_str()),
        (200, Some("free")),
        "{body}"
    );
    let (status, body) = request(app.addr, "POST", &path).await;
    assert_eq!(status, 200, "{body}");
    assert!(json(&body)["fencing_token"].as_u64().unwrap() > t1);

    // While someone else holds job/2 in the component's namespace, the
    // endpoint reports them; the state endpoint shows the holder.
    let held = app
        .service
        .lock("edge-jobs", "job/2", "someone", 10_000, Default::default())
        .await
        .unwrap();
    let (status, body) = request(app.addr, "POST", "/jobs/2").await;
    assert_eq!(
        (status, json(&body)["holder"].as_str()),
        (409, Some("someone")),
        "{body}"
    );
    let (status, body) = request(app.addr, "GET", "/jobs/2").await;
    let state = json(&body);
    assert_eq!(
        (status, state["status"].as_str()),
        (200, Some("held")),
        "{body}"
    );
    assert_eq!(state["owner"], "someone");
    assert_eq!(state["fencing_token"].as_u64(), Some(held.fencing_token));
    // The same name in another namespace is another lock.
    assert_eq!(app.service.get("default", "job/2").await.unwrap(), None);
    let (status, _) = request(app.addr, "DELETE", "/jobs/2").await;
    assert_eq!(status, 405);
}

/// A WASIp3 component (spin-sdk 7) using a guard: served next to p2, one
/// winner among simultaneous calls, and the guard released when dropped.
/// The B3 benchmark function: each mode answers 200 with its token (0
/// without a lock); the lock modes leave nothing held, and a name held by
/// someone else makes them answer 409 while `nolock` does not care.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn edge_bench() {
    let wasm = wasm(lockd_guest_tests::EDGE_BENCH);
    let app = serve(&[("/bench/...", "edge-bench", wasm)], "").await;
    let mut last = 0;
    for mode in ["ephemeral", "persistent"] {
        let (status, body) = request(app.addr, "GET", format!("/bench/{mode}/1")).await;
        assert_eq!(status, 200, "{body}");
        let token = json(&body)["fencing_token"].as_u64().unwrap();
        assert!(token > last, "{mode}: {body}");
        last = token;
    }
    let (status, body) = request(app.addr, "GET", "/bench/nolock/1").await;
    assert_eq!(
        (status, json(&body)["fencing_token"].as_u64()),
        (200, Some(0))
    );
    assert!(app.service.list("edge-bench", "").await.unwrap().is_empty());

    app.service
        .lock("edge-bench", "req/2", "someone", 10_000, Default::default())
        .await
        .unwrap();
    let (status, body) = request(app.addr, "GET", "/bench/ephemeral/2").await;
    assert_eq!(
        (status, json(&body)["holder"].as_str()),
        (409, Some("someone"))
    );
    let (status, _) = request(app.addr, "GET", "/bench/nolock/2").await;
    assert_eq!(status, 200);
    let (status, _) = request(app.addr, "GET", "/bench/other/2").await;
    assert_eq!(status, 404);
}

/// Regression: a component writes its response head, then its body. With
/// Nagle's algorithm on the accepted socket, the body (a second small
/// write) waited for the client's delayed ACK, about 40 ms (wrk -c1 saw p99
/// 17-33 ms against a p50 of 0.2 ms). The server now sets TCP_NODELAY.
///
/// `/hostile/slow-body` sends its head, sleeps 5 ms, then writes its body,
/// so every one of its responses meets the stall when Nagle is on. 40
/// sequential keep-alive requests on one connection measure, on each
/// response, how long after the end of its head the end of its body
/// arrives: 5-8 ms with TCP_NODELAY, about 40 ms without. A scheduling hiccup
/// on a busy CI machine can delay one body, so the test tolerates one body
/// 30 ms or more late and fails on a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn component_bodies_follow_their_heads_without_a_stall() {
    use std::time::Duration;
    const REQUESTS: usize = 40;
    const STALL: Duration = Duration::from_millis(30);
    let wasm = wasm(lockd_guest_tests::HTTP_HOSTILE);
    let app = serve(&[("/hostile/...", "http-hostile", wasm)], "").await;
    let addr = app.addr;
    let gaps = tokio::task::spawn_blocking(move || {
        use std::io::Write as _;
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        // Only the server's Nagle is under test, not this side's.
        stream.set_nodelay(true).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let budget = std::time::Instant::now();
        let mut gaps = Vec::new();
        while gaps.len() < REQUESTS && budget.elapsed() < Duration::from_secs(15) {
            // One write: `write!` would send each piece of the format on its
            // own and meet Nagle on this side.
            let request = format!("GET /hostile/slow-body HTTP/1.1\r\nHost: {addr}\r\n\r\n");
            stream.write_all(request.as_bytes()).unwrap();
            gaps.push(head_to_body(&mut stream));
        }
        gaps
    })
    .await
    .unwrap();
    let late: Vec<_> = gaps.iter().filter(|gap| **gap >= STALL).collect();
    let mut sorted = gaps.clone();
    sorted.sort();
    let median = sorted[sorted.len() / 2];
    lockd_test_support::report(&format!(
        "no-stall: {} keep-alive requests to a component that writes its body 5 ms after its head: \
         head to body median {median:?}, max {:?}, {} bodies 30 ms or more after their heads",
        gaps.len(),
        sorted[sorted.len() - 1],
        late.len()
    ));
    assert_eq!(gaps.len(), REQUESTS, "too slow: {gaps:?}");
    // The head must really leave before the body, or there is no second
    // write for Nagle to hold and the test proves nothing.
    assert!(
        median >= Duration::from_millis(3),
        "the heads did not arrive ahead of their bodies: {gaps:?}"
    );
    assert!(
        late.len() <= 1,
        "{} of {} bodies arrived 30 ms or more after their heads: {gaps:?}",
        late.len(),
        gaps.len()
    );
}

/// Reads one `200` response with a `content-length` from `stream` and
/// returns how long after the end of its head the end of its body arrived.
fn head_to_body(stream: &mut std::net::TcpStream) -> std::time::Duration {
    use std::io::Read as _;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut head: Option<(usize, usize, std::time::Instant)> = None;
    loop {
        let n = stream.read(&mut chunk).unwrap();
        assert!(n > 0, "the server closed the connection");
        buf.extend_from_slice(&chunk[..n]);
        if head.is_none() {
            let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let text = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            assert!(text.starts_with("http/1.1 200"), "{text}");
            let length = text
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse::<usize>().unwrap())
                .unwrap_or_else(|| panic!("no content-length: {text}"));
            head = Some((end + 4, length, std::time::Instant::now()));
        }
        let (body_start, length, head_done) = head.unwrap();
        if buf.len() >= body_start + length {
            assert_eq!(buf.len(), body_start + length, "more than one response");
            return head_done.elapsed();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn edge_guard_p3() {
    let app = serve(
        &[
            (
                "/guarded/...",
                "edge-guard-p3",
                wasm(lockd_guest_tests::EDGE_GUARD_P3),
            ),
            ("/jobs/...", "edge-jobs", wasm(lockd_guest_tests::EDGE_JOBS)),
        ],
        "",
    )
    .await;
    let (status, body) = request(app.addr, "POST", "/guarded/1").await;
    assert_eq!(status, 200, "{body}");
    let done = json(&body);
    assert!(
        done["owner"].as_str().unwrap().starts_with("guard-"),
        "{body}"
    );
    let t1 = done["fencing_token"].as_u64().unwrap();
    assert_eq!(
        app.service.get("edge-guard-p3", "guarded/1").await.unwrap(),
        None,
        "guard not released"
    );
    let (_, t2) = exactly_one_runs(app.addr, "/guarded/1", 8).await;
    assert!(t2 > t1);
    // The p2 component on the same server keeps working.
    let (status, _) = request(app.addr, "POST", "/jobs/9").await;
    assert_eq!(status, 200);
}

/// A WASIp3 response body is collected before it is sent, so it is bounded:
/// past `[limits] response_body_bytes` the request answers 500, the guest's
/// guard is released with its instance, and the server carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p3_response_body_is_bounded() {
    let app = serve(
        &[(
            "/guarded/...",
            "edge-guard-p3",
            wasm(lockd_guest_tests::EDGE_GUARD_P3),
        )],
        "[limits]\nresponse_body_bytes = 8\n",
    )
    .await;
    let (status, body) = request(app.addr, "POST", "/guarded/1").await;
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("exceeds the limit of 8 bytes"), "{body}");
    assert_eq!(
        app.service.get("edge-guard-p3", "guarded/1").await.unwrap(),
        None,
        "guard not released"
    );
    let (status, body) = request(app.addr, "GET", "/guarded/1").await;
    assert_eq!(status, 500, "{body}");
}

/// The JavaScript edge function (componentize-js, WASIp2): mutual exclusion
/// under 20 simultaneous POSTs, u64 tokens intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn js_edge() {
    let app = serve(
        &[("/js/jobs/...", "js-edge", wasm(lockd_guest_tests::JS_EDGE))],
        "",
    )
    .await;
    let (path, t1) = exactly_one_runs(app.addr, "/js/jobs/1", 20).await;
    let (status, body) = request(app.addr, "GET", &path).await;
    assert_eq!(
        (status, json(&body)["status"].as_str()),
        (200, Some("free")),
        "{body}"
    );
    let (status, body) = request(app.addr, "POST", &path).await;
    assert_eq!(status, 200, "{body}");
    assert!(json(&body)["fencing_token"].as_u64().unwrap() > t1);

    // The token the JavaScript guest reads (a BigInt) is the REST API's,
    // digit for digit.
    let taken = post_json(
        app.addr,
        "/v1/locks/lock",
        r#"{"namespace":"js-edge","name":"js-job/held","owner":"rest","ttl_ms":30000}"#,
    )
    .await;
    let (status, body) = request(app.addr, "GET", "/js/jobs/held").await;
    assert_eq!(status, 200, "{body}");
    let shown = json(&body);
    assert_eq!(shown["owner"], "rest", "{body}");
    assert_eq!(
        shown["fencing_token"].as_u64(),
        json(&taken)["fencing_token"].as_u64(),
        "JS guest {body}, REST {taken}"
    );
    assert!(shown["fencing_token"].as_u64().is_some(), "{body}");
}

/// `POST path` with a JSON body on a fresh connection; the reply body of a
/// 200.
async fn post_json(addr: SocketAddr, path: &str, body: &'static str) -> String {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::builder()
        .method("POST")
        .uri(path)
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .unwrap();
    let response = sender.send_request(req).await.unwrap();
    let status = response.status().as_u16();
    let reply = response.into_body().collect().await.unwrap().to_bytes();
    let reply = String::from_utf8_lossy(&reply).into_owned();
    assert_eq!(status, 200, "{path}: {reply}");
    reply
}

/// A runaway loop and unbounded memory growth each get a 500 within the
/// configured deadline, while another component keeps answering during the
/// attack and the hostile one works again for its next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn http_hostile() {
    let limits = "[limits]\nrequest_timeout_ms = 1000\ninstance_memory_bytes = 33554432\n";
    let app = serve(
        &[
            (
                "/hostile/...",
                "http-hostile",
                wasm(lockd_guest_tests::HTTP_HOSTILE),
            ),
            ("/jobs/...", "edge-jobs", wasm(lockd_guest_tests::EDGE_JOBS)),
        ],
        limits,
    )
    .await;
    let started = std::time::Instant::now();
    let looping = tokio::spawn(request(app.addr, "GET", "/hostile/loop"));
    let growing = tokio::spawn(request(app.addr, "GET", "/hostile/alloc"));
    // During the attack, the well-behaved component keeps working.
    for id in 0..3 {
        let (status, body) = request(app.addr, "POST", &format!("/jobs/{id}")).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = looping.await.unwrap();
    assert_eq!(status, 500, "{body}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "loop ran {:?}",
        started.elapsed()
    );
    let (status, body) = growing.await.unwrap();
    assert_eq!(status, 500, "{body}");
    assert_eq!(json(&body)["status"], "error");
    let (status, body) = request(app.addr, "GET", "/hostile/ok").await;
    assert_eq!((status, body.as_str()), (200, "ok"));
}

/// Two components using the same lock name: each has its own namespace
/// (its component id) unless lockd.toml makes them share one; a namespace
/// quota refuses a guest's lock past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_isolate_components() {
    let jobs = wasm(lockd_guest_tests::EDGE_JOBS);
    let routes = [
        ("/a/jobs/...", "team-a", jobs),
        ("/b/jobs/...", "team-b", jobs),
    ];
    let both_run = |app: &Running| {
        let addr = app.addr;
        async move {
            let a = tokio::spawn(request(addr, "POST", "/a/jobs/1"));
            let b = tokio::spawn(request(addr, "POST", "/b/jobs/1"));
            let mut codes = [a.await.unwrap().0, b.await.unwrap().0];
            codes.sort();
            codes
        }
    };
    let separate = serve(&routes, "").await;
    assert_eq!(
        both_run(&separate).await,
        [200, 200],
        "job/1 of team-a and team-b are distinct locks"
    );

    let shared = "[components.team-a]\nnamespace = \"shared\"\n[components.team-b]\nnamespace = \"shared\"\n";
    let app = serve(&routes, shared).await;
    assert_eq!(
        both_run(&app).await,
        [200, 409],
        "a shared namespace is one lock"
    );

    let quota = "[namespaces.quotas]\nteam-a = 1\n";
    let app = serve(&routes, quota).await;
    app.service
        .lock("team-a", "job/held", "someone", 10_000, Default::default())
        .await
        .unwrap();
    let (status, body) = request(app.addr, "POST", "/a/jobs/2").await;
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("quota"), "{body}");
    let (status, _) = request(app.addr, "POST", "/b/jobs/2").await;
    assert_eq!(
        status, 200,
        "another namespace is not limited by team-a's quota"
    );
}
