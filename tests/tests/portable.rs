//! Guests composed with `lockd plug` on hosts that know nothing of lockd
//! (issue 13, docs/portable.md), against a live `lockd serve` on the redb
//! store:
//!
//! - `stock-host run` (this package's `src/bin/stock-host.rs`, wasmtime with
//!   stock WASI 0.2 and wasi:http only, the equivalent of
//!   `wasmtime run -S http`): the Rust, Python, JavaScript and C conformance
//!   guests pass their 12 steps, and the server's REST API shows what each
//!   left held, in the namespace given by `LOCKD_NAMESPACE`; `rust-claims`
//!   passes its shared-lock, semaphore, hold and election steps, and REST
//!   shows the holders, permits and leader its `leave` mode left;
//! - `stock-host serve` (`wasmtime serve -Scli`): the composed `edge-jobs`
//!   as a `wasi:http/proxy` component, 20 simultaneous `POST /jobs/1`, one
//!   200 and 19 409s, and `lockd ls` shows the job lock while it runs;
//! - `jco run` in Node.js (jco installed by `scripts/install-jco.sh`): the
//!   composed Rust conformance guest passes.
//!
//! The `lockd` binary (server, `plug` and `ls`) is built by
//! `cargo build -p lockd --bin lockd` once per test process: this package
//! cannot name another package's binary, and a binary left over from an
//! earlier build could be stale.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Barrier, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// How long a server may take to start, or a component to run.
const DEADLINE: Duration = Duration::from_secs(300);

/// The variables lockd and the client read, cleared for every child so the
/// developer's shell cannot change a test.
const CLEARED_ENV: [&str; 7] = [
    "LOCKD_SERVER",
    "LOCKD_AUTH_TOKEN",
    "LOCKD_STORE",
    "LOCKD_CLIENT_WASM",
    "LOCKD_URL",
    "LOCKD_NAMESPACE",
    "LOCKD_LOG_FORMAT",
];

const STOCK_HOST: &str = env!("CARGO_BIN_EXE_stock-host");

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The `lockd` binary, built (or found up to date) by cargo in this build's
/// profile and target directory.
fn lockd_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        // target/<profile>/deps/portable-HASH: the profile directory's name.
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().and_then(Path::parent).unwrap();
        let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => "dev".to_string(),
            Some(other) => other.to_string(),
        };
        let out = command(env!("CARGO"))
            .current_dir(repo())
            .args(["build", "-p", "lockd", "--bin", "lockd", "--profile"])
            .arg(&profile)
            .args(["--message-format", "json-render-diagnostics"])
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(out.status.success(), "cargo build -p lockd failed");
        let exe = text(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "lockd")
            .find_map(|m| m["executable"].as_str().map(PathBuf::from))
            .expect("cargo named no lockd executable");
        assert!(exe.is_file(), "{}", exe.display());
        exe
    })
}

/// `lockd ARGS` without the developer's lockd variables.
fn lockd(args: &[&str]) -> Output {
    command(lockd_bin()).args(args).output().unwrap()
}

/// `lockd plug APP -o DIR/NAME.wasm` with the repository's client.
fn plug(dir: &Path, app: &str, name: &str) -> PathBuf {
    assert!(Path::new(app).is_file(), "{app} was not built");
    let out = dir.join(format!("{name}.wasm"));
    let o = lockd(&[
        "plug",
        app,
        "-o",
        out.to_str().unwrap(),
        "--client",
        lockd_tests::LOCKD_CLIENT,
    ]);
    assert!(o.status.success(), "lockd plug {app}: {}", text(&o.stderr));
    out
}

/// Reads `child`'s stdout in a thread until a line starts with `prefix`;
/// returns the rest of that line. Keeps reading afterwards, so the child
/// never blocks on a full pipe.
fn wait_for_line(child: &mut Child, prefix: &'static str, what: &str) -> String {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.strip_prefix(prefix) {
                let _ = tx.send(rest.trim().to_string());
            }
        }
    });
    match rx.recv_timeout(DEADLINE) {
        Ok(rest) => rest,
        Err(e) => {
            let _ = child.kill();
            let status = child.wait().unwrap();
            panic!("{what} did not start ({e}); it exited with {status}");
        }
    }
}

/// A child process killed on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A running `lockd serve --store redb:TMP/locks.redb` on a free port.
struct Server {
    _child: Killed,
    url: String,
    addr: SocketAddr,
    /// The CA that signed its certificate, if it serves HTTPS.
    cacert: Option<PathBuf>,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start() -> Server {
        Server::launch(false)
    }

    /// [`Server::start`] over HTTPS, its certificate from a throwaway CA.
    fn start_tls() -> Server {
        Server::launch(true)
    }

    fn launch(tls: bool) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let store = format!("redb:{}", dir.path().join("locks.redb").display());
        let mut cmd = command(lockd_bin());
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--store", &store]);
        let mut cacert = None;
        if tls {
            let pki = lockd_testing::certs::TestPki::new(&dir.path().join("pki"));
            let server = pki.server("server");
            cmd.arg("--tls-cert").arg(&server.cert);
            cmd.arg("--tls-key").arg(&server.key);
            cacert = Some(pki.ca().to_path_buf());
        }
        let mut child = cmd
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let scheme = if tls { "https" } else { "http" };
        let prefix = if tls {
            "lockd listening on https://"
        } else {
            "lockd listening on http://"
        };
        let addr = wait_for_line(&mut child, prefix, "lockd serve");
        let addr: SocketAddr = addr.parse().unwrap();
        Server {
            _child: Killed(child),
            url: format!("{scheme}://{addr}"),
            addr,
            cacert,
            _dir: dir,
        }
    }

    /// `GET /v1/locks?namespace=NS&prefix=PREFIX`: the live locks (through
    /// `lockd ls --format json`, which prints that body, over HTTPS).
    fn list(&self, namespace: &str, prefix: &str) -> Vec<Value> {
        let body = match &self.cacert {
            None => {
                let (code, body) = http(
                    self.addr,
                    "GET",
                    &format!("/v1/locks?namespace={namespace}&prefix={prefix}"),
                );
                assert_eq!(code, 200, "{body}");
                body
            }
            Some(ca) => {
                let out = lockd(&[
                    "ls",
                    "--namespace",
                    namespace,
                    "--prefix",
                    prefix,
                    "--format",
                    "json",
                    "--server",
                    &self.url,
                    "--cacert",
                    ca.to_str().unwrap(),
                ]);
                assert!(out.status.success(), "lockd ls: {}", text(&out.stderr));
                text(&out.stdout)
            }
        };
        let reply = json(&body);
        assert_eq!(reply["status"], "found", "{body}");
        reply["locks"].as_array().unwrap().clone()
    }
}

/// One HTTP/1.1 request with an empty body on a fresh connection: (status,
/// body). Names and values in the tests need no URL encoding.
fn http(addr: SocketAddr, method: &str, path: &str) -> (u16, String) {
    http_with_body(addr, method, path, "")
}

/// `POST PATH` of a JSON body: (status, the reply's JSON).
fn post_json(addr: SocketAddr, path: &str, body: &Value) -> (u16, Value) {
    let (code, reply) = http_with_body(addr, "POST", path, &body.to_string());
    (code, json(&reply))
}

/// [`http`] with `body`.
fn http_with_body(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).unwrap();
    let reply = text(&reply);
    let (head, body) = reply
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP head in {reply:?}"));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    (code, body)
}

/// The payload of a chunked body.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap();
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
    out
}

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// A command for `program` without the lockd variables of the developer's
/// shell.
fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new(program);
    for var in CLEARED_ENV {
        cmd.env_remove(var);
    }
    cmd
}

/// Runs `cmd` to completion, killing it after [`DEADLINE`].
fn run_bounded(mut cmd: Command, what: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut stdout, mut stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out = std::thread::spawn(move || {
        let mut buf = Vec::new();
        stdout.read_to_end(&mut buf).unwrap();
        buf
    });
    let err = std::thread::spawn(move || {
        let mut buf = Vec::new();
        stderr.read_to_end(&mut buf).unwrap();
        buf
    });
    let deadline = Instant::now() + DEADLINE;
    let status: ExitStatus = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} still running after {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// `stock-host run COMPONENT --env LOCKD_URL=.. --env LOCKD_NAMESPACE=.. -- ARGS`.
fn stock_run(component: &Path, server: &Server, namespace: &str, args: &[&str]) -> Output {
    let mut cmd = command(STOCK_HOST);
    cmd.arg("run")
        .arg(component)
        .args(["--env", &format!("LOCKD_URL={}", server.url)])
        .args(["--env", &format!("LOCKD_NAMESPACE={namespace}")]);
    if let Some(ca) = &server.cacert {
        cmd.arg("--cacert").arg(ca);
    }
    cmd.arg("--").args(args);
    run_bounded(cmd, "stock-host run")
}

/// Checks a conformance guest's output (its 12 steps passed) and what it
/// left on the server: `P/held`, held by `language` with the token it
/// printed, persistent, for 30-60 s more, alone under `P/` in `namespace`
/// and absent from the default namespace.
fn check_conformance(out: &Output, server: &Server, namespace: &str, language: &str) {
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "{language} guest failed ({}):\n{stdout}\n{}",
        out.status,
        text(&out.stderr)
    );
    for step in 1..=12 {
        assert!(
            stdout.lines().any(|l| l == format!("ok {step}")),
            "step {step} missing:\n{stdout}"
        );
    }
    assert!(!stdout.contains("FAIL"), "{stdout}");
    let printed: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("held "))
        .expect("no `held <token>` line")
        .parse()
        .unwrap();

    let locks = server.list(namespace, "P/");
    assert_eq!(locks.len(), 1, "{locks:?}");
    let held = &locks[0];
    assert_eq!(held["name"], "P/held", "{held}");
    assert_eq!(held["owner"], language, "{held}");
    assert_eq!(held["fencing_token"].as_u64(), Some(printed), "{held}");
    assert_eq!(held["durability"], "persistent", "{held}");
    let remaining = held["expires_at_ms"]
        .as_u64()
        .unwrap()
        .saturating_sub(now_ms());
    assert!(
        (20_000..=60_000).contains(&remaining),
        "expires in {remaining} ms"
    );
    // LOCKD_NAMESPACE chose the namespace: nothing landed in the default one.
    assert!(server.list("default", "P/").is_empty());
}

/// A conformance guest composed by `lockd plug`, run by `stock-host run`.
fn conformance_on_stock_host(app: &str, language: &str) {
    let dir = tempfile::tempdir().unwrap();
    let component = plug(dir.path(), app, &format!("{language}-plugged"));
    let server = Server::start();
    let namespace = format!("portable-{language}");
    let out = stock_run(&component, &server, &namespace, &["P"]);
    check_conformance(&out, &server, &namespace, language);
}

/// The host links stock wasmtime only: no lockd crate's symbols in the
/// binary, and a guest that imports `lockd:lock` (not plugged) cannot even
/// be instantiated there.
#[test]
fn stock_host_has_no_lock_capability() {
    let binary = std::fs::read(STOCK_HOST).unwrap();
    for krate in ["lockd_core", "lockd_wasm", "lockd_redb", "lockd_etcd"] {
        assert!(
            !binary.windows(krate.len()).any(|w| w == krate.as_bytes()),
            "stock-host contains {krate}"
        );
    }
    // A sanity check of the scan: wasmtime's own crates are there.
    assert!(binary.windows(8).any(|w| w == b"wasmtime"));

    let server = Server::start();
    let out = stock_run(
        Path::new(lockd_tests::RUST_CONFORMANCE),
        &server,
        "unplugged",
        &["P"],
    );
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("lockd:lock/"), "{stderr}");
    assert!(text(&out.stdout).is_empty());
    assert!(server.list("unplugged", "").is_empty());
}

#[test]
fn rust_conformance_plugged_on_stock_host() {
    conformance_on_stock_host(lockd_tests::RUST_CONFORMANCE, "rust");
}

/// The composed client speaks TLS where the host's outgoing HTTP does:
/// `LOCKD_URL=https://...`, the stock host trusting the test CA.
#[test]
fn rust_conformance_plugged_on_stock_host_over_https() {
    let dir = tempfile::tempdir().unwrap();
    let component = plug(dir.path(), lockd_tests::RUST_CONFORMANCE, "rust-plugged");
    let server = Server::start_tls();
    assert!(server.url.starts_with("https://"), "{}", server.url);
    let namespace = "portable-https";
    let out = stock_run(&component, &server, namespace, &["P"]);
    check_conformance(&out, &server, namespace, "rust");

    // Without trusting the CA, the host's TLS refuses the server: the guest
    // fails, and nothing is locked.
    let untrusted = Server {
        cacert: None,
        ..Server::start_tls()
    };
    let mut cmd = command(STOCK_HOST);
    cmd.arg("run")
        .arg(&component)
        .args(["--env", &format!("LOCKD_URL={}", untrusted.url)])
        .args(["--env", "LOCKD_NAMESPACE=untrusted", "--", "P"]);
    let out = run_bounded(cmd, "stock-host run");
    assert!(!out.status.success(), "{}", text(&out.stdout));
}

#[test]
fn python_conformance_plugged_on_stock_host() {
    conformance_on_stock_host(lockd_tests::PYTHON_CONFORMANCE, "python");
}

#[test]
fn js_conformance_plugged_on_stock_host() {
    conformance_on_stock_host(lockd_tests::JS_CONFORMANCE, "js");
}

#[test]
fn c_conformance_plugged_on_stock_host() {
    conformance_on_stock_host(lockd_tests::C_CONFORMANCE, "c");
}

/// `rust-claims`, plugged, on the stock host: its five steps (shared locks,
/// a semaphore, holds, an election with a leader watch, names keeping to
/// their kind) pass over REST with nothing left held; then what its `leave`
/// mode left held is what the server's REST API shows: two shared holders,
/// one permit of 3, and the leader with its value and token.
#[test]
fn rust_claims_plugged_on_stock_host() {
    let dir = tempfile::tempdir().unwrap();
    let component = plug(dir.path(), lockd_tests::RUST_CLAIMS, "claims-plugged");
    let server = Server::start();
    let namespace = "portable-claims";
    let out = stock_run(&component, &server, namespace, &["steps", "C", "composed"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(!stdout.contains("FAIL"), "{stdout}");
    for step in 1..=5 {
        assert!(
            stdout.lines().any(|l| l == format!("ok {step}")),
            "{stdout}"
        );
    }
    assert_eq!(server.list(namespace, "C/"), Vec::<Value>::new());

    let out = stock_run(&component, &server, namespace, &["leave", "L"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let printed = |prefix: &str| -> Vec<String> {
        let line = stdout.lines().find_map(|l| l.strip_prefix(prefix));
        let line = line.unwrap_or_else(|| panic!("no {prefix:?} line: {stdout}"));
        line.split(' ').map(str::to_string).collect()
    };
    let (shared, permit, leader) = (printed("shared "), printed("permit "), printed("leader "));
    let locks = server.list(namespace, "L/");
    let names: Vec<&str> = locks.iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["L/election", "L/rw", "L/sem"], "{locks:?}");
    let holders = |lock: &Value| -> Vec<(String, String, String)> {
        let holders = lock["holders"].as_array().unwrap().iter();
        holders
            .map(|h| {
                let field = |key: &str| h[key].to_string().trim_matches('"').to_string();
                (field("owner"), field("fencing_token"), field("mode"))
            })
            .collect()
    };
    let (rw, sem) = (&locks[1], &locks[2]);
    let shared_holders = [("reader-1", &shared[0]), ("reader-2", &shared[1])]
        .map(|(owner, token)| (owner.to_string(), token.clone(), "shared".to_string()));
    assert_eq!(holders(rw), shared_holders, "{rw}");
    assert_eq!(sem["permits"], 3, "{sem}");
    let permit_holder = ("p1".to_string(), permit[0].clone(), "permit".to_string());
    assert_eq!(holders(sem), [permit_holder], "{sem}");
    assert_eq!(locks[0]["mode"], "leader", "{}", locks[0]);

    let ask = serde_json::json!({"namespace": namespace, "name": "L/election"});
    let (code, found) = post_json(server.addr, "/v1/elections/leader", &ask);
    assert_eq!(
        (code, &found["status"]),
        (200, &Value::from("found")),
        "{found}"
    );
    assert_eq!(found["candidate"], leader[0].as_str(), "{found}");
    assert!(leader[0].starts_with("candidate-"), "{found}");
    assert_eq!(found["value"], "addr:1", "{found}");
    assert_eq!(found["fencing_token"].to_string(), leader[1], "{found}");
}

/// `lockd ls --namespace NS` against `server`: (name, owner, token) rows.
fn lockd_ls(server: &Server, namespace: &str) -> Vec<(String, String, u64)> {
    let o = lockd(&["ls", "--server", &server.url, "--namespace", namespace]);
    assert!(o.status.success(), "lockd ls: {}", text(&o.stderr));
    let stdout = text(&o.stdout);
    if stdout.trim() == format!("no locks held in namespace {namespace:?}") {
        return Vec::new();
    }
    let mut lines = stdout.lines();
    let header = lines.next().unwrap_or_default();
    assert!(header.starts_with("NAME"), "{stdout}");
    lines
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            assert!(cols.len() >= 3, "{stdout}");
            (
                cols[0].to_string(),
                cols[1].to_string(),
                cols[2].parse().unwrap(),
            )
        })
        .collect()
}

/// `edge-jobs` composed and served by `stock-host serve` (a
/// `wasi:http/proxy` component, one instance per request): of 20 simultaneous
/// `POST /jobs/1`, one runs its 200 ms job under `job/1` and 19 are told who
/// holds it; `lockd ls` lists the lock while the job runs, and nothing after.
#[test]
fn edge_jobs_plugged_under_stock_host_serve() {
    let dir = tempfile::tempdir().unwrap();
    let component = plug(dir.path(), lockd_tests::EDGE_JOBS, "edge-jobs-plugged");
    let server = Server::start();
    let namespace = "portable-edge";
    let mut child = command(STOCK_HOST)
        .arg("serve")
        .arg(&component)
        .args(["--listen", "127.0.0.1:0"])
        .args(["--env", &format!("LOCKD_URL={}", server.url)])
        .args(["--env", &format!("LOCKD_NAMESPACE={namespace}")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let app = wait_for_line(
        &mut child,
        "stock-host listening on http://",
        "stock-host serve",
    );
    let _app_process = Killed(child);
    let app: SocketAddr = app.parse().unwrap();

    // The component answers (a path that is no job is its 404).
    let (code, body) = http(app, "GET", "/nothing");
    assert_eq!(code, 404, "{body}");

    // `lockd ls` in a loop while the 20 requests run; it stops once it has
    // seen job/1 or the requests are done.
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let done = done.clone();
        let url = server.url.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + DEADLINE;
            let mut listings = 0;
            while !done.load(Ordering::SeqCst) && Instant::now() < deadline {
                let o = lockd(&["ls", "--server", &url, "--namespace", namespace]);
                assert!(o.status.success(), "lockd ls: {}", text(&o.stderr));
                listings += 1;
                let stdout = text(&o.stdout);
                if let Some(row) = stdout.lines().find(|l| l.starts_with("job/1 ")) {
                    return (Some(row.to_string()), listings);
                }
            }
            (None, listings)
        })
    };

    let n = 20;
    let barrier = Arc::new(Barrier::new(n));
    let posts: Vec<_> = (0..n)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                http(app, "POST", "/jobs/1")
            })
        })
        .collect();
    let results: Vec<(u16, String)> = posts.into_iter().map(|t| t.join().unwrap()).collect();
    done.store(true, Ordering::SeqCst);
    let (row, listings) = watcher.join().unwrap();

    let ok: Vec<_> = results.iter().filter(|(c, _)| *c == 200).collect();
    let busy: Vec<_> = results.iter().filter(|(c, _)| *c == 409).collect();
    assert_eq!((ok.len(), busy.len()), (1, n - 1), "{results:?}");
    let done_body = json(&ok[0].1);
    assert_eq!(done_body["status"], "done", "{done_body}");
    let token = done_body["fencing_token"].as_u64().unwrap();
    let mut holders: Vec<String> = busy
        .iter()
        .map(|(_, b)| {
            let b = json(b);
            assert_eq!(b["status"], "busy", "{b}");
            b["holder"].as_str().unwrap().to_string()
        })
        .collect();
    holders.dedup();
    assert_eq!(holders.len(), 1, "one holder: {holders:?}");
    assert!(holders[0].starts_with("edge-"), "{holders:?}");

    // What `lockd ls` showed while the job ran: the winner's lock.
    let row = row.unwrap_or_else(|| {
        panic!("lockd ls never showed job/1 while the job ran ({listings} listings)")
    });
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[1], holders[0], "{row}");
    assert_eq!(cols[2].parse::<u64>().unwrap(), token, "{row}");
    assert!(row.ends_with("persistent"), "{row}");

    // The job unlocked when it finished: free for the component and the CLI.
    let (code, body) = http(app, "GET", "/jobs/1");
    assert_eq!((code, json(&body)["status"].as_str()), (200, Some("free")));
    assert!(lockd_ls(&server, namespace).is_empty());
    assert!(server.list(namespace, "").is_empty());
    // The next job gets a higher token.
    let (code, body) = http(app, "POST", "/jobs/1");
    assert_eq!(code, 200, "{body}");
    assert!(json(&body)["fencing_token"].as_u64().unwrap() > token);

    // A lock held from outside (the CLI) is what the component reports.
    let o = lockd(&[
        "lock",
        "job/2",
        "--owner",
        "cli-user",
        "--ttl",
        "30s",
        "--server",
        &server.url,
        "--namespace",
        namespace,
    ]);
    assert!(o.status.success(), "lockd lock: {}", text(&o.stderr));
    let (code, body) = http(app, "POST", "/jobs/2");
    assert_eq!(
        (code, json(&body)["holder"].as_str()),
        (409, Some("cli-user")),
        "{body}"
    );
    let rows = lockd_ls(&server, namespace);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0].0.as_str(), rows[0].1.as_str()),
        ("job/2", "cli-user")
    );
}

/// jco, installed into target/node-jco by `scripts/install-jco.sh` (which
/// installs Node.js first if it is missing): its path. The test runs the
/// script itself, so a missing jco is installed or fails the test, never
/// skips it.
fn jco() -> PathBuf {
    let script = repo().join("scripts/install-jco.sh");
    let mut cmd = command("bash");
    cmd.arg(&script);
    let o = run_bounded(cmd, "scripts/install-jco.sh");
    assert!(
        o.status.success(),
        "scripts/install-jco.sh failed:\n{}",
        text(&o.stderr)
    );
    let path = PathBuf::from(text(&o.stdout).lines().last().unwrap_or_default().trim());
    assert!(path.is_file(), "no jco at {}", path.display());
    path
}

/// The composed Rust conformance guest under `jco run` in Node.js: it gets
/// the server's address from the process environment, as any command does
/// there.
#[test]
fn rust_conformance_plugged_under_jco_run() {
    let jco = jco();
    let dir = tempfile::tempdir().unwrap();
    let component = plug(dir.path(), lockd_tests::RUST_CONFORMANCE, "rust-plugged");
    let server = Server::start();
    let namespace = "portable-jco";
    let mut cmd = command(&jco);
    cmd.arg("run")
        .arg(&component)
        .arg("P")
        .current_dir(dir.path())
        .env("LOCKD_URL", &server.url)
        .env("LOCKD_NAMESPACE", namespace);
    let out = run_bounded(cmd, "jco run");
    check_conformance(&out, &server, namespace, "rust");
}
