//! A real etcd for tests: members on loopback, on free ports, with data in a
//! temporary directory, stopped (SIGKILL) when dropped.
//!
//! Each member runs under a small `sh` guard that kills it as soon as its
//! stdin closes, so the members die with the test process even when it is
//! killed and no destructor runs. Port 2379 is never used.
//!
//! The `etcd` binary is `$LOCKD_ETCD_BIN`, else `etcd` on `PATH`, else
//! `/usr/bin/etcd` (Debian's `etcd-server`; `scripts/setup.sh` installs it).

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a cluster may take to become healthy.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The etcd binary to run.
pub fn etcd_binary() -> io::Result<PathBuf> {
    if let Some(bin) = std::env::var_os("LOCKD_ETCD_BIN") {
        return Ok(PathBuf::from(bin));
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join("etcd");
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    let debian = PathBuf::from("/usr/bin/etcd");
    if debian.is_file() {
        return Ok(debian);
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        "etcd not found: install Debian's etcd-server (scripts/setup.sh) or set LOCKD_ETCD_BIN",
    ))
}

/// One member's fixed identity.
#[derive(Debug)]
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    process: Option<Guarded>,
}

/// A running member: its `sh` guard and the pipe whose closing kills it.
#[derive(Debug)]
struct Guarded {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Guarded {
    fn stop(mut self) {
        // Closing stdin makes the guard SIGKILL etcd and reap it.
        drop(self.stdin.take());
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
                Ok(None) => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return;
                }
            }
        }
    }
}

/// An etcd cluster of one or more members on loopback.
#[derive(Debug)]
pub struct EtcdCluster {
    dir: tempfile::TempDir,
    binary: PathBuf,
    members: Vec<Member>,
}

/// Ports that were free a moment ago (all bound at once, so distinct).
fn free_ports(n: usize) -> io::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect()
}

/// One HTTP/1.0 request to a member's client port; the whole answer, or
/// `None` if it could not be had within a few seconds.
fn http_exchange(port: u16, request: &str) -> Option<String> {
    let mut stream =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(500))
            .ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    Some(answer)
}

fn healthy(port: u16) -> bool {
    http_exchange(port, "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_some_and(|body| body.contains("\"health\":\"true\""))
}

/// `(this member's id, the leader it knows of)` from etcd's JSON gateway
/// (`/v3/maintenance/status`); ids are decimal strings there. The leader is
/// `"0"` while the member knows of none.
fn member_status(port: u16) -> Option<(String, String)> {
    let body = "{}";
    let answer = http_exchange(
        port,
        &format!(
            "POST /v3/maintenance/status HTTP/1.0\r\nHost: 127.0.0.1\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    )?;
    let (_, json) = answer.split_once("\r\n\r\n")?;
    let status: serde_json::Value = serde_json::from_str(json).ok()?;
    let member = status["header"]["member_id"].as_str()?.to_string();
    let leader = status["leader"].as_str()?.to_string();
    Some((member, leader))
}

impl EtcdCluster {
    /// Starts a single-member cluster and waits until it is healthy.
    pub fn start() -> io::Result<Self> {
        Self::start_members(1)
    }

    /// Starts a cluster of `n` members and waits until every one is healthy.
    /// Retries with new ports if one was taken in the meantime.
    pub fn start_members(n: usize) -> io::Result<Self> {
        let mut last = None;
        for _ in 0..3 {
            match Self::try_start(n) {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("etcd did not start")))
    }

    fn try_start(n: usize) -> io::Result<Self> {
        let binary = etcd_binary()?;
        let dir = tempfile::Builder::new().prefix("lockd-etcd-").tempdir()?;
        let ports = free_ports(2 * n)?;
        let members = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client_port: ports[2 * i],
                peer_port: ports[2 * i + 1],
                process: None,
            })
            .collect();
        let mut cluster = EtcdCluster {
            dir,
            binary,
            members,
        };
        for i in 0..n {
            cluster.spawn_member(i, "new")?;
        }
        cluster.wait_healthy(0..n)?;
        Ok(cluster)
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn spawn_member(&mut self, i: usize, state: &str) -> io::Result<()> {
        let initial_cluster = self.initial_cluster();
        let m = &self.members[i];
        let data = self.dir.path().join(&m.name);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{}.log", m.name)))?;
        let client = format!("http://127.0.0.1:{}", m.client_port);
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let mut child = Command::new("sh")
            .arg("-c")
            // Run etcd in the background; when our stdin closes (the test
            // dropped us, or died), kill it and reap it.
            .arg("\"$@\" & pid=$!; read _; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null")
            .arg("etcd-guard")
            .arg(&self.binary)
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(&data)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &initial_cluster])
            .args(["--initial-cluster-state", state])
            .args(["--initial-cluster-token", "lockd-test"])
            .args(["--log-level", "warn", "--logger", "zap"])
            .stdin(Stdio::piped())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        let stdin = child.stdin.take();
        self.members[i].process = Some(Guarded { child, stdin });
        Ok(())
    }

    fn wait_healthy(&mut self, members: impl Iterator<Item = usize> + Clone) -> io::Result<()> {
        let until = Instant::now() + START_TIMEOUT;
        loop {
            if members
                .clone()
                .all(|i| healthy(self.members[i].client_port))
            {
                return Ok(());
            }
            for i in members.clone() {
                if let Some(p) = &mut self.members[i].process {
                    if let Ok(Some(status)) = p.child.try_wait() {
                        return Err(io::Error::other(format!(
                            "etcd member {} exited ({status}); log: {}",
                            self.members[i].name,
                            self.log_tail(i)
                        )));
                    }
                }
            }
            if Instant::now() > until {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("etcd not healthy after {START_TIMEOUT:?}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log_tail(&self, i: usize) -> String {
        let path = self
            .dir
            .path()
            .join(format!("{}.log", self.members[i].name));
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let start = text.len().saturating_sub(2000);
        text.get(start..).unwrap_or_default().to_string()
    }

    /// Client URLs of all members.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("http://127.0.0.1:{}", m.client_port))
            .collect()
    }

    /// The client URL of member `i`.
    pub fn endpoint(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.members[i].client_port)
    }

    /// The directory holding the members' data and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The index of the member that is the Raft leader, as a running member
    /// reports it, or `None` if no running member names a running leader
    /// (during an election).
    pub fn leader(&self) -> Option<usize> {
        let running = || {
            self.members
                .iter()
                .enumerate()
                .filter(|(_, m)| m.process.is_some())
        };
        let statuses: Vec<(usize, String, String)> = running()
            .filter_map(|(i, m)| {
                member_status(m.client_port).map(|(member, leader)| (i, member, leader))
            })
            .collect();
        statuses.iter().find_map(|(_, _, leader)| {
            statuses
                .iter()
                .find(|(_, member, _)| member == leader)
                .map(|(i, _, _)| *i)
        })
    }

    /// Waits up to `limit` until a running member is the leader, and returns
    /// it.
    pub fn wait_for_leader(&self, limit: Duration) -> io::Result<usize> {
        let until = Instant::now() + limit;
        loop {
            if let Some(i) = self.leader() {
                return Ok(i);
            }
            if Instant::now() > until {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no etcd leader within {limit:?}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILLs member `i` (a crash); its data stays for
    /// [`EtcdCluster::restart_member`].
    pub fn kill_member(&mut self, i: usize) {
        if let Some(p) = self.members[i].process.take() {
            p.stop();
        }
    }

    /// Starts member `i` again on its data and ports, and waits until it is
    /// healthy.
    pub fn restart_member(&mut self, i: usize) -> io::Result<()> {
        self.kill_member(i);
        self.spawn_member(i, "existing")?;
        self.wait_healthy(std::iter::once(i))
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(p) = m.process.take() {
                p.stop();
            }
        }
    }
}
