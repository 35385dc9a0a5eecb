//! A real etcd for tests: members on loopback, on free ports, with data in a
//! temporary directory, stopped (SIGKILL) when dropped.
//!
//! Each member runs under a small `sh` guard that kills it as soon as its
//! stdin closes, so the members die with the test process even when it is
//! killed and no destructor runs. Port 2379 is never used.
//!
//! The `etcd` binary is `$LOCKD_ETCD_BIN`, else `etcd` on `PATH`, else
//! `/usr/bin/etcd` (Debian's `etcd-server`; `scripts/setup.sh` installs it).
//!
//! [`EtcdCluster::start_tls`] starts members that serve clients over TLS
//! only and require a client certificate (`--client-cert-auth`), as etcd's
//! security guide runs them. Each such member also listens on a plain-HTTP
//! admin URL on loopback, which only the harness uses: its health checks,
//! and the users, roles and `auth enable` of [`EtcdCluster::add_user`] and
//! [`EtcdCluster::enable_auth`] (etcd's JSON gateway, as `etcdctl` would).

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

/// The TLS files of members started by [`EtcdCluster::start_tls`] (PEM).
#[derive(Clone, Debug)]
pub struct EtcdTls {
    /// The members' certificate (`--cert-file`): serverAuth, with a
    /// subjectAltName for 127.0.0.1.
    pub cert: PathBuf,
    /// Its key (`--key-file`).
    pub key: PathBuf,
    /// The CA client certificates must be signed by (`--trusted-ca-file`).
    pub trusted_ca: PathBuf,
}

/// One member's fixed identity.
#[derive(Debug)]
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    /// The plain-HTTP port the harness talks to: the client port, or with
    /// TLS a second client URL on loopback.
    admin_port: u16,
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
    /// TLS on the client URLs, if any.
    tls: Option<EtcdTls>,
    /// `--auth-token-ttl` in seconds, if set.
    auth_token_ttl: Option<u32>,
    /// The root password, once [`EtcdCluster::enable_auth`] ran.
    root_password: Option<String>,
    /// More flags for every member, as [`EtcdCluster::start_with_flags`]
    /// was given them.
    extra_flags: Vec<String>,
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

/// `POST path` with a JSON `body` to etcd's JSON gateway on `port`, with
/// an auth `token` if given; the answer's JSON, or an error saying what
/// etcd answered.
fn gateway(
    port: u16,
    path: &str,
    body: &serde_json::Value,
    token: Option<&str>,
) -> io::Result<serde_json::Value> {
    let body = body.to_string();
    let auth = token.map_or(String::new(), |t| format!("Authorization: {t}\r\n"));
    let answer = http_exchange(
        port,
        &format!(
            "POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n{auth}\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    )
    .ok_or_else(|| io::Error::other(format!("etcd {path}: no answer")))?;
    let (head, json) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        return Err(io::Error::other(format!("etcd {path}: {answer}")));
    }
    serde_json::from_str(json).map_err(|e| io::Error::other(format!("etcd {path}: {e}: {json}")))
}

/// Standard base64 with padding, as the JSON gateway takes bytes.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The end of the key range of every key starting with `prefix`.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
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
        Self::start_with(n, None, None)
    }

    /// Starts `n` members as [`EtcdCluster::start_members`] does, each also
    /// given `flags` (such as `--quota-backend-bytes=16777216`).
    pub fn start_with_flags(n: usize, flags: &[&str]) -> io::Result<Self> {
        let mut last = None;
        for _ in 0..3 {
            match Self::try_start_flagged(n, None, None, flags) {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("etcd did not start")))
    }

    /// Starts `n` members that serve clients over TLS only, with `tls`'s
    /// certificate, and require a client certificate signed by its CA;
    /// `auth_token_ttl` sets `--auth-token-ttl` (seconds). Waits until every
    /// one is healthy. Auth stays off until [`EtcdCluster::enable_auth`].
    pub fn start_tls(n: usize, tls: EtcdTls, auth_token_ttl: Option<u32>) -> io::Result<Self> {
        Self::start_with(n, Some(tls), auth_token_ttl)
    }

    fn start_with(n: usize, tls: Option<EtcdTls>, auth_token_ttl: Option<u32>) -> io::Result<Self> {
        let mut last = None;
        for _ in 0..3 {
            match Self::try_start(n, tls.clone(), auth_token_ttl) {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("etcd did not start")))
    }

    fn try_start(n: usize, tls: Option<EtcdTls>, auth_token_ttl: Option<u32>) -> io::Result<Self> {
        Self::try_start_flagged(n, tls, auth_token_ttl, &[])
    }

    fn try_start_flagged(
        n: usize,
        tls: Option<EtcdTls>,
        auth_token_ttl: Option<u32>,
        flags: &[&str],
    ) -> io::Result<Self> {
        let binary = etcd_binary()?;
        let dir = tempfile::Builder::new().prefix("lockd-etcd-").tempdir()?;
        let ports = free_ports(3 * n)?;
        let members = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client_port: ports[3 * i],
                peer_port: ports[3 * i + 1],
                admin_port: if tls.is_some() {
                    ports[3 * i + 2]
                } else {
                    ports[3 * i]
                },
                process: None,
            })
            .collect();
        let mut cluster = EtcdCluster {
            dir,
            binary,
            members,
            tls,
            auth_token_ttl,
            root_password: None,
            extra_flags: flags.iter().map(|f| f.to_string()).collect(),
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
        let client = self.endpoint(i);
        let listen = match &self.tls {
            Some(_) => format!("{client},http://127.0.0.1:{}", m.admin_port),
            None => client.clone(),
        };
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let mut security: Vec<std::ffi::OsString> = Vec::new();
        if let Some(tls) = &self.tls {
            security.push("--cert-file".into());
            security.push(tls.cert.clone().into());
            security.push("--key-file".into());
            security.push(tls.key.clone().into());
            security.push("--trusted-ca-file".into());
            security.push(tls.trusted_ca.clone().into());
            security.push("--client-cert-auth".into());
        }
        if let Some(ttl) = self.auth_token_ttl {
            security.push("--auth-token-ttl".into());
            security.push(ttl.to_string().into());
        }
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
            .args(["--listen-client-urls", &listen])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &initial_cluster])
            .args(["--initial-cluster-state", state])
            .args(["--initial-cluster-token", "lockd-test"])
            .args(["--log-level", "warn", "--logger", "zap"])
            .args(&security)
            .args(&self.extra_flags)
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
            if members.clone().all(|i| healthy(self.members[i].admin_port)) {
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

    /// Client URLs of all members (`https://` with TLS).
    pub fn endpoints(&self) -> Vec<String> {
        (0..self.members.len()).map(|i| self.endpoint(i)).collect()
    }

    /// The client URL of member `i` (`https://` with TLS).
    pub fn endpoint(&self, i: usize) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.members[i].client_port)
    }

    /// The plain-HTTP client URL of member `i` that only the harness uses
    /// (the client URL itself without TLS).
    pub fn admin_endpoint(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.members[i].admin_port)
    }

    /// A root token once auth is on, for the gateway calls.
    fn root_token(&self) -> io::Result<Option<String>> {
        let Some(password) = &self.root_password else {
            return Ok(None);
        };
        let answer = gateway(
            self.members[0].admin_port,
            "/v3/auth/authenticate",
            &serde_json::json!({"name": "root", "password": password}),
            None,
        )?;
        Ok(answer["token"].as_str().map(str::to_string))
    }

    /// Adds etcd user `name` with `password`, and a role of the same name
    /// granted readwrite on every key starting with `prefix` (etcdctl's
    /// `role grant-permission NAME --prefix=true readwrite PREFIX`), and
    /// nothing else.
    pub fn add_user(&self, name: &str, password: &str, prefix: &str) -> io::Result<()> {
        self.add_user_with(name, password, prefix, "READWRITE")
    }

    /// [`EtcdCluster::add_user`] granting `permission` (`READ`, `WRITE` or
    /// `READWRITE`) on `prefix`.
    pub fn add_user_with(
        &self,
        name: &str,
        password: &str,
        prefix: &str,
        permission: &str,
    ) -> io::Result<()> {
        let token = self.root_token()?;
        let port = self.members[0].admin_port;
        let call = |path: &str, body: serde_json::Value| {
            gateway(port, path, &body, token.as_deref()).map(drop)
        };
        call(
            "/v3/auth/user/add",
            serde_json::json!({"name": name, "password": password}),
        )?;
        call("/v3/auth/role/add", serde_json::json!({"name": name}))?;
        call(
            "/v3/auth/role/grant",
            serde_json::json!({"name": name, "perm": {
                "permType": permission,
                "key": base64(prefix.as_bytes()),
                "range_end": base64(&prefix_end(prefix.as_bytes())),
            }}),
        )?;
        call(
            "/v3/auth/user/grant",
            serde_json::json!({"user": name, "role": name}),
        )
    }

    /// Takes back from role `role` its permission on `prefix` (etcdctl's
    /// `role revoke-permission ROLE --prefix=true PREFIX`).
    pub fn revoke_permission(&self, role: &str, prefix: &str) -> io::Result<()> {
        let token = self.root_token()?;
        gateway(
            self.members[0].admin_port,
            "/v3/auth/role/revoke",
            &serde_json::json!({
                "role": role,
                "key": base64(prefix.as_bytes()),
                "range_end": base64(&prefix_end(prefix.as_bytes())),
            }),
            token.as_deref(),
        )
        .map(drop)
    }

    /// Grants role `role` readwrite on `prefix` again.
    pub fn grant_permission(&self, role: &str, prefix: &str) -> io::Result<()> {
        let token = self.root_token()?;
        gateway(
            self.members[0].admin_port,
            "/v3/auth/role/grant",
            &serde_json::json!({"name": role, "perm": {
                "permType": "READWRITE",
                "key": base64(prefix.as_bytes()),
                "range_end": base64(&prefix_end(prefix.as_bytes())),
            }}),
            token.as_deref(),
        )
        .map(drop)
    }

    /// Adds user `root` (role `root`) with `root_password` and turns auth
    /// on: from then on every request needs a user's token.
    pub fn enable_auth(&mut self, root_password: &str) -> io::Result<()> {
        let port = self.members[0].admin_port;
        let call = |path: &str, body: serde_json::Value| gateway(port, path, &body, None).map(drop);
        call(
            "/v3/auth/user/add",
            serde_json::json!({"name": "root", "password": root_password}),
        )?;
        call("/v3/auth/role/add", serde_json::json!({"name": "root"}))?;
        call(
            "/v3/auth/user/grant",
            serde_json::json!({"user": "root", "role": "root"}),
        )?;
        call("/v3/auth/enable", serde_json::json!({}))?;
        self.root_password = Some(root_password.to_string());
        Ok(())
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
                member_status(m.admin_port).map(|(member, leader)| (i, member, leader))
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

/// An etcd run the way its security guide asks, and lockd's way in: TLS
/// members requiring client certificates, auth on, and a user `lockd`
/// allowed readwrite on one prefix only. The files live in the cluster's
/// directory.
#[derive(Debug)]
pub struct SecureEtcd {
    /// The members (TLS, auth enabled).
    pub cluster: EtcdCluster,
    /// The CA that signed the members' and lockd's certificates.
    pub pki: crate::certs::TestPki,
    /// lockd's client certificate.
    pub client: crate::certs::CertFiles,
    /// The user's name: `lockd`.
    pub user: String,
    /// Its password.
    pub password: String,
    /// The prefix it may read and write (it has no other permission).
    pub prefix: String,
    /// Holds the certificates.
    _pki_dir: tempfile::TempDir,
}

impl SecureEtcd {
    /// `members` TLS members with `--auth-token-ttl auth_token_ttl` (if
    /// given), user `lockd` granted readwrite on `prefix` (and keys under
    /// it), auth enabled.
    pub fn start(members: usize, prefix: &str, auth_token_ttl: Option<u32>) -> io::Result<Self> {
        Self::start_with_hosts(members, prefix, auth_token_ttl, None)
    }

    /// [`SecureEtcd::start`] with a member certificate naming only
    /// `server_hosts` (default: 127.0.0.1, ::1 and localhost).
    pub fn start_with_hosts(
        members: usize,
        prefix: &str,
        auth_token_ttl: Option<u32>,
        server_hosts: Option<&[&str]>,
    ) -> io::Result<Self> {
        let pki_dir = tempfile::Builder::new()
            .prefix("lockd-etcd-pki-")
            .tempdir()?;
        let pki = crate::certs::TestPki::new(pki_dir.path());
        let server = match server_hosts {
            Some(hosts) => pki.server_for("etcd", hosts),
            None => pki.server("etcd"),
        };
        let client = pki.client("lockd");
        let tls = EtcdTls {
            cert: server.cert,
            key: server.key,
            trusted_ca: pki.ca().to_path_buf(),
        };
        let mut cluster = EtcdCluster::start_tls(members, tls, auth_token_ttl)?;
        let password = "lockd-test-password".to_string();
        cluster.add_user("lockd", &password, prefix)?;
        cluster.enable_auth("root-test-password")?;
        Ok(SecureEtcd {
            cluster,
            pki,
            client,
            user: "lockd".into(),
            password,
            prefix: prefix.into(),
            _pki_dir: pki_dir,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"/lockd/"), "L2xvY2tkLw==");
    }

    #[test]
    fn prefix_ends_follow_the_prefix() {
        assert_eq!(prefix_end(b"/lockd/"), b"/lockd0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff"), vec![0]);
    }
}
