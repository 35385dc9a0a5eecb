//! What the portable tests (`portable.rs`, `portable_p3.rs`) share: a
//! `lockd serve` on the redb store, the `lockd` binary (built by
//! `cargo build -p lockd --bin lockd` once per test process: this package
//! cannot name another package's binary, and a binary left over from an
//! earlier build could be stale), `lockd plug`, `stock-host run`, and
//! plain HTTP/1.1 to the server. Each test binary uses part of it.
#![allow(dead_code)]

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// How long a server may take to start, or a component to run.
pub(crate) const DEADLINE: Duration = Duration::from_secs(300);

/// The variables lockd and the client read, cleared for every child so the
/// developer's shell cannot change a test.
pub(crate) const CLEARED_ENV: [&str; 7] = [
    "LOCKD_SERVER",
    "LOCKD_AUTH_TOKEN",
    "LOCKD_STORE",
    "LOCKD_CLIENT_WASM",
    "LOCKD_URL",
    "LOCKD_NAMESPACE",
    "LOCKD_LOG_FORMAT",
];

pub(crate) const STOCK_HOST: &str = env!("CARGO_BIN_EXE_stock-host");

pub(crate) fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The `lockd` binary, built (or found up to date) by cargo in this build's
/// profile and target directory.
pub(crate) fn lockd_bin() -> &'static Path {
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
pub(crate) fn lockd(args: &[&str]) -> Output {
    command(lockd_bin()).args(args).output().unwrap()
}

/// `lockd plug APP -o DIR/NAME.wasm` with the repository's client.
pub(crate) fn plug(dir: &Path, app: &str, name: &str) -> PathBuf {
    assert!(Path::new(app).is_file(), "{app} was not built");
    let out = dir.join(format!("{name}.wasm"));
    let o = lockd(&[
        "plug",
        app,
        "-o",
        out.to_str().unwrap(),
        "--client",
        lockd_guest_tests::LOCKD_CLIENT,
    ]);
    assert!(o.status.success(), "lockd plug {app}: {}", text(&o.stderr));
    out
}

/// Reads `child`'s stdout in a thread until a line starts with `prefix`;
/// returns the rest of that line. Keeps reading afterwards, so the child
/// never blocks on a full pipe.
pub(crate) fn wait_for_line(child: &mut Child, prefix: &'static str, what: &str) -> String {
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
pub(crate) struct Killed(pub(crate) Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A running `lockd serve --store redb:TMP/locks.redb` on a free port.
pub(crate) struct Server {
    pub(crate) _child: Killed,
    pub(crate) url: String,
    pub(crate) addr: SocketAddr,
    /// The CA that signed its certificate, if it serves HTTPS.
    pub(crate) cacert: Option<PathBuf>,
    pub(crate) _dir: tempfile::TempDir,
}

impl Server {
    pub(crate) fn start() -> Server {
        Server::launch(false)
    }

    /// [`Server::start`] over HTTPS, its certificate from a throwaway CA.
    pub(crate) fn start_tls() -> Server {
        Server::launch(true)
    }

    fn launch(tls: bool) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let store = format!("redb:{}", dir.path().join("locks.redb").display());
        let mut cmd = command(lockd_bin());
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--store", &store]);
        let mut cacert = None;
        if tls {
            let pki = lockd_test_support::certs::TestPki::new(&dir.path().join("pki"));
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
    pub(crate) fn list(&self, namespace: &str, prefix: &str) -> Vec<Value> {
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
pub(crate) fn http(addr: SocketAddr, method: &str, path: &str) -> (u16, String) {
    http_with_body(addr, method, path, "")
}

/// `POST PATH` of a JSON body: (status, the reply's JSON).
pub(crate) fn post_json(addr: SocketAddr, path: &str, body: &Value) -> (u16, Value) {
    let (code, reply) = http_with_body(addr, "POST", path, &body.to_string());
    (code, json(&reply))
}

/// [`http`] with `body`.
pub(crate) fn http_with_body(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, String) {
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
pub(crate) fn dechunk(mut body: &str) -> String {
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

pub(crate) fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// A command for `program` without the lockd variables of the developer's
/// shell.
pub(crate) fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new(program);
    for var in CLEARED_ENV {
        cmd.env_remove(var);
    }
    cmd
}

/// Runs `cmd` to completion, killing it after [`DEADLINE`].
pub(crate) fn run_bounded(mut cmd: Command, what: &str) -> Output {
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
pub(crate) fn stock_run(
    component: &Path,
    server: &Server,
    namespace: &str,
    args: &[&str],
) -> Output {
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
pub(crate) fn check_conformance(out: &Output, server: &Server, namespace: &str, language: &str) {
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
