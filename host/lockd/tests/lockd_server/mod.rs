//! A real `lockd serve` process for tests, and a small blocking HTTP client.
//! Shared by `rest.rs` and `cli_client.rs`.
#![allow(dead_code)]

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The variables lockd reads; cleared for every child so the developer's
/// shell cannot change a test.
pub const LOCKD_ENV: [&str; 6] = [
    "LOCKD_SERVER",
    "LOCKD_AUTH_TOKEN",
    "LOCKD_STORE",
    "LOCKD_CACERT",
    "LOCKD_CLIENT_CERT",
    "LOCKD_CLIENT_KEY",
];

/// How long a server may take to start, or a CLI command to finish.
const DEADLINE: Duration = Duration::from_secs(180);

/// How long `lockd up --build` may take to start: it first builds the app's
/// components, which with both cores busy took over 180 s once (71 s on the
/// next run).
const BUILD_DEADLINE: Duration = Duration::from_secs(600);

/// A running `lockd serve`, killed on drop.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`
    pub url: String,
    /// The address it listens on.
    pub addr: SocketAddr,
    /// Its working directory (a fresh temporary one unless given).
    pub dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    token: Option<String>,
}

impl Server {
    /// `lockd serve --store memory` with `extra` arguments.
    pub fn start(extra: &[&str]) -> Server {
        let mut args = vec!["--store", "memory"];
        args.extend_from_slice(extra);
        Server::start_in(None, &args, &[])
    }

    /// `lockd serve --store memory --auth-token TOKEN`; [`Server::post`] and
    /// [`Server::get`] send the token.
    pub fn with_token(token: &str) -> Server {
        Server::with_token_and(token, &[])
    }

    /// [`Server::with_token`] with `extra` arguments.
    pub fn with_token_and(token: &str, extra: &[&str]) -> Server {
        let mut args = vec!["--auth-token", token];
        args.extend_from_slice(extra);
        let mut server = Server::start(&args);
        server.token = Some(token.to_string());
        server
    }

    /// `lockd serve --listen 127.0.0.1:0 ARGS` in `dir` (a new temporary
    /// directory if `None`), with `env` set.
    pub fn start_in(dir: Option<&Path>, args: &[&str], env: &[(&str, &str)]) -> Server {
        Server::launch("serve", dir, args, env, Stdio::inherit())
    }

    /// [`Server::start_in`] with its stderr (the log) written to `log`.
    pub fn start_logging_to(log: &Path, dir: Option<&Path>, args: &[&str]) -> Server {
        let file = std::fs::File::create(log).unwrap();
        Server::launch("serve", dir, args, &[], Stdio::from(file))
    }

    /// `lockd up --listen 127.0.0.1:0 ARGS` in `dir`, like a user in a Spin
    /// app's directory.
    pub fn up_in(dir: &Path, args: &[&str]) -> Server {
        Server::launch("up", Some(dir), args, &[], Stdio::inherit())
    }

    /// [`Server::up_in`] with the lockd at `exe` (a copy installed
    /// elsewhere) instead of the one cargo built.
    pub fn up_with(exe: &Path, dir: &Path, args: &[&str]) -> Server {
        Server::launch_exe(exe, "up", Some(dir), args, &[], Stdio::inherit())
    }

    fn launch(
        subcommand: &str,
        dir: Option<&Path>,
        args: &[&str],
        env: &[(&str, &str)],
        stderr: Stdio,
    ) -> Server {
        let exe = Path::new(env!("CARGO_BIN_EXE_lockd"));
        Server::launch_exe(exe, subcommand, dir, args, env, stderr)
    }

    fn launch_exe(
        exe: &Path,
        subcommand: &str,
        dir: Option<&Path>,
        args: &[&str],
        env: &[(&str, &str)],
        stderr: Stdio,
    ) -> Server {
        let (tmp, dir) = match dir {
            Some(d) => (None, d.to_path_buf()),
            None => {
                let t = tempfile::tempdir().unwrap();
                let d = t.path().to_path_buf();
                (Some(t), d)
            }
        };
        let mut cmd = Command::new(exe);
        cmd.arg(subcommand)
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr);
        for var in LOCKD_ENV {
            cmd.env_remove(var);
        }
        cmd.envs(env.iter().copied());
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            // Keep reading after the line, so the server never blocks on a
            // full pipe.
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.strip_prefix("lockd listening on http://") {
                    let _ = tx.send(addr.trim().to_string());
                }
            }
        });
        let start_deadline = if args.contains(&"--build") {
            BUILD_DEADLINE
        } else {
            DEADLINE
        };
        let addr = match rx.recv_timeout(start_deadline) {
            Ok(addr) => addr,
            Err(e) => {
                let _ = child.kill();
                let status = child.wait().unwrap();
                panic!("lockd serve did not start ({e}); it exited with {status}");
            }
        };
        let addr: SocketAddr = addr.parse().unwrap();
        Server {
            child,
            url: format!("http://{addr}"),
            addr,
            dir,
            _tmp: tmp,
            token: None,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the process (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the process to exit by itself, up to the deadline.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "lockd serve did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// POSTs `body` (sent as is) to `path`, with this server's token if any.
    pub fn post(&self, path: &str, body: &str) -> Reply {
        request("POST", &self.url, path, Some(body), self.token.as_deref())
    }

    /// POSTs a JSON value.
    pub fn post_json(&self, path: &str, body: &Value) -> Reply {
        self.post(path, &body.to_string())
    }

    /// GETs `path`, with this server's token if any.
    pub fn get(&self, path: &str) -> Reply {
        request("GET", &self.url, path, None, self.token.as_deref())
    }

    /// Whether `/healthz` answers 200 `{"status":"ok"}`.
    pub fn assert_healthy(&self) {
        let r = self.get("/healthz");
        assert_eq!((r.code, r.status()), (200, "ok"), "{}", r.body);
    }

    /// The value of the metric line `series` (name plus labels, exactly as
    /// rendered).
    pub fn metric(&self, series: &str) -> u64 {
        let r = self.get("/metrics");
        assert_eq!(r.code, 200);
        metric_value(&r.body, series)
    }

    /// Waits until `lockd_waiters` is `n`.
    pub fn wait_for_waiters(&self, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let now = self.metric("lockd_waiters");
            if now == n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "lockd_waiters stayed {now}, expected {n}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The value of `series` in Prometheus text `metrics`.
///
/// A `series` without labels names a whole family: the sum of its samples
/// (`lockd_locks_held` is kept per namespace and durability).
pub fn metric_value(metrics: &str, series: &str) -> u64 {
    let samples: Vec<u64> = metrics
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(series)?;
            let value = match rest.strip_prefix(' ') {
                Some(value) => value,
                None if !series.contains('{') && rest.starts_with('{') => rest.split_once("} ")?.1,
                None => return None,
            };
            Some(value.trim().parse().unwrap())
        })
        .collect();
    // A family with no samples yet (no namespace holds a lock) is zero.
    let family = series.split('{').next().unwrap_or(series);
    assert!(
        !samples.is_empty() || metrics.contains(&format!("# TYPE {family} ")),
        "no metric {series} in:\n{metrics}"
    );
    samples.iter().sum()
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status code.
    pub code: u16,
    /// The body as text.
    pub body: String,
    /// The body parsed, or `Null` if it is not JSON.
    pub json: Value,
    /// Response headers, names lower-case.
    pub headers: Vec<(String, String)>,
}

impl Reply {
    /// The `status` word of the body.
    pub fn status(&self) -> &str {
        self.json["status"].as_str().unwrap_or("<none>")
    }

    /// The `message` of the body.
    pub fn message(&self) -> &str {
        self.json["message"].as_str().unwrap_or("<none>")
    }

    /// A header value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn agent() -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(DEADLINE))
        .build();
    ureq::Agent::new_with_config(config)
}

/// One request with ureq; any method, optional body and bearer token.
pub fn request(
    method: &str,
    base: &str,
    path: &str,
    body: Option<&str>,
    token: Option<&str>,
) -> Reply {
    let req = ureq::http::Request::builder()
        .method(method)
        .uri(format!("{base}{path}"));
    let req = match token {
        Some(t) => req.header("Authorization", format!("Bearer {t}")),
        None => req,
    };
    let result = match body {
        Some(b) => agent().run(
            req.header("Content-Type", "application/json")
                .body(b.to_string())
                .unwrap(),
        ),
        None => agent().run(req.body(ureq::SendBody::none()).unwrap()),
    };
    let response = result.unwrap_or_else(|e| panic!("{method} {base}{path} failed: {e}"));
    let code = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let body = response.into_body().read_to_string().unwrap();
    let json = serde_json::from_str(&body).unwrap_or(Value::Null);
    Reply {
        code,
        body,
        json,
        headers,
    }
}

/// Sends `head` (request line and headers, without the blank line) and then
/// `body` over a raw socket, writing from a second thread and ignoring write
/// errors (the server may answer and close before reading it all).
pub fn raw_request(addr: SocketAddr, head: &str, body: Vec<u8>) -> Reply {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let head = format!("{head}\r\nConnection: close\r\n\r\n");
    let sender = std::thread::spawn(move || {
        let _ = writer.write_all(head.as_bytes());
        let _ = writer.write_all(&body);
        let _ = writer.flush();
    });
    let mut answer = Vec::new();
    // The server may reset the connection after answering (unread body);
    // what arrived before that is kept.
    let mut buf = [0u8; 8192];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
        }
    }
    drop(stream);
    let _ = sender.join();
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
    let mut lines = head.lines();
    let code = lines
        .next()
        .and_then(|status| status.strip_prefix("HTTP/1.1 "))
        .and_then(|rest| rest.get(..3))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Reply {
        code,
        body: body.to_string(),
        json: serde_json::from_str(body).unwrap_or(Value::Null),
        headers,
    }
}

/// A local port nobody listens on (bound, then closed).
pub fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A finished CLI command.
#[derive(Debug)]
pub struct Run {
    /// Exit code (`None` if killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Run {
    /// Asserts stderr is exactly one line and returns it.
    pub fn one_stderr_line(&self) -> &str {
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(
            lines.len(),
            1,
            "expected one stderr line, got: {:?}",
            self.stderr
        );
        lines[0]
    }
}

/// Runs `lockd ARGS` with `env` (and none of the developer's LOCKD_*
/// variables), killing it if it outlives the deadline.
pub fn lockd(args: &[&str], env: &[(&str, &str)]) -> Run {
    lockd_in_dir(None, args, env)
}

/// [`lockd`] in the working directory `dir`.
pub fn lockd_in_dir(dir: Option<&Path>, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockd"));
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for var in LOCKD_ENV {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    let child = cmd.spawn().unwrap();
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let output: Output = match rx.recv_timeout(DEADLINE) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("lockd {args:?} did not finish within {DEADLINE:?}");
        }
    };
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// `GET path` over a raw socket, reading only the response head: for a
/// stream (`/v1/events`) that does not end. The body is left empty.
pub fn stream_head(addr: SocketAddr, path: &str, token: Option<&str>) -> Reply {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\n{auth}\r\n").unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.lines();
    let code = lines
        .next()
        .and_then(|status| status.strip_prefix("HTTP/1.1 "))
        .and_then(|rest| rest.get(..3))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Reply {
        code,
        body: String::new(),
        json: Value::Null,
        headers,
    }
}

/// A `lockd ARGS` running in the background (`exec`, `elect`, `leader
/// --watch`), none of the developer's LOCKD_* variables set; killed
/// (SIGKILL) on drop.
pub struct Background {
    /// The `lockd` process.
    pub child: Child,
    lines: Option<mpsc::Receiver<String>>,
}

impl Background {
    /// Starts `lockd ARGS`; its stdout is discarded.
    pub fn start(args: &[&str]) -> Background {
        Background::spawn(args, Stdio::null())
    }

    /// Starts `lockd ARGS`; its stdout is read line by line
    /// ([`Background::next_line`]).
    pub fn reading(args: &[&str]) -> Background {
        let mut background = Background::spawn(args, Stdio::piped());
        let stdout = background.child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        background.lines = Some(rx);
        background
    }

    fn spawn(args: &[&str], stdout: Stdio) -> Background {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockd"));
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(Stdio::piped());
        for var in LOCKD_ENV {
            cmd.env_remove(var);
        }
        Background {
            child: cmd.spawn().unwrap(),
            lines: None,
        }
    }

    /// The next line of stdout, waiting up to `limit` for it.
    pub fn next_line(&self, limit: Duration) -> String {
        self.line_within(limit)
            .unwrap_or_else(|| panic!("no line on stdout within {limit:?}"))
    }

    /// The next line of stdout, if one comes within `limit`.
    pub fn line_within(&self, limit: Duration) -> Option<String> {
        let lines = self.lines.as_ref();
        lines
            .expect("started with Background::reading")
            .recv_timeout(limit)
            .ok()
    }

    /// Waits up to `limit` for the exit; returns the code and stderr.
    pub fn finish(&mut self, limit: Duration) -> (Option<i32>, String) {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "lockd did not finish");
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut stderr = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        (status.code(), stderr)
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits up to 20 s for `path` to exist.
pub fn wait_for_file(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The number of milliseconds written in the file `path` (`date +%s%3N`).
pub fn read_ms(path: &Path) -> u64 {
    let text = std::fs::read_to_string(path).unwrap();
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{}: {text:?}: {e}", path.display()))
}

/// This host's wall clock, Unix epoch milliseconds (as the server's
/// expiries are).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}
