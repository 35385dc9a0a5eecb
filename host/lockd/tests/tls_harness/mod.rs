//! For `tls.rs`: a throwaway PKI, a `lockd serve` / `lockd up` over TLS
//! whose stderr is kept, and TLS clients (HTTP/1.1 on a blocking rustls
//! stream, HTTP/2 through hyper) that show what the server presented.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::BodyExt as _;
use lockd_test_support::certs::{CertFiles, TestPki};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use serde_json::Value;

use crate::lockd_server::LOCKD_ENV;

/// How long a server may take to start.
const START: Duration = Duration::from_secs(180);

/// A throwaway CA, with a server certificate for 127.0.0.1 and localhost.
pub struct Pki {
    dir: tempfile::TempDir,
    pub ca: TestPki,
    pub server: CertFiles,
}

impl Pki {
    pub fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestPki::new(&dir.path().join("ca"));
        let server = ca.server("server");
        Pki { dir, ca, server }
    }

    /// A CA nobody trusts, in its own directory.
    pub fn stranger(&self) -> TestPki {
        TestPki::new(&self.dir.path().join("stranger"))
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `live.pem` and `live.key`, holding the server certificate to begin
    /// with: the files a test replaces while the server runs.
    pub fn live(&self) -> CertFiles {
        let live = CertFiles {
            cert: self.path("live.pem"),
            key: self.path("live.key"),
        };
        install(&self.server, &live);
        live
    }
}

/// Copies `files` over `live`, as an operator rotating a certificate does.
pub fn install(files: &CertFiles, live: &CertFiles) {
    std::fs::copy(&files.cert, &live.cert).unwrap();
    std::fs::copy(&files.key, &live.key).unwrap();
}

pub fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A running `lockd serve` or `lockd up` whose stderr is kept; killed on
/// drop.
pub struct TlsServer {
    child: Child,
    pub addr: SocketAddr,
    /// `https://127.0.0.1:PORT`
    pub url: String,
    stderr: Arc<Mutex<String>>,
}

impl TlsServer {
    /// `lockd serve --store memory` with `cert` and `extra` arguments.
    pub fn serve(cert: &CertFiles, extra: &[&str]) -> TlsServer {
        let mut args = vec![
            "--tls-cert",
            s(&cert.cert),
            "--tls-key",
            s(&cert.key),
            "--store",
            "memory",
        ];
        args.extend_from_slice(extra);
        TlsServer::launch("serve", None, &args)
    }

    pub fn launch(subcommand: &str, dir: Option<&Path>, args: &[&str]) -> TlsServer {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockd"));
        if let Some(dir) = dir {
            cmd.current_dir(dir);
        }
        cmd.arg(subcommand)
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for var in LOCKD_ENV {
            cmd.env_remove(var);
        }
        let mut child = cmd.spawn().unwrap();
        let (tx, rx) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.strip_prefix("lockd listening on ") {
                    let _ = tx.send(addr.trim().to_string());
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                eprintln!("[lockd] {line}");
                let mut all = sink.lock().unwrap();
                all.push_str(&line);
                all.push('\n');
            }
        });
        let url = match rx.recv_timeout(START) {
            Ok(url) => url,
            Err(e) => {
                let _ = child.kill();
                panic!(
                    "lockd {subcommand} did not start ({e}): {}",
                    stderr.lock().unwrap()
                );
            }
        };
        let addr = url
            .strip_prefix("https://")
            .unwrap_or_else(|| panic!("not an https listener: {url}"))
            .parse()
            .unwrap();
        TlsServer {
            child,
            addr,
            url,
            stderr,
        }
    }

    /// Sends SIGHUP.
    pub fn hangup(&self) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::HUP).unwrap();
    }

    /// Waits until stderr holds a line with every one of `needles`.
    pub fn wait_for_log(&self, needles: &[&str]) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let stderr = self.stderr.lock().unwrap().clone();
            if let Some(line) = stderr
                .lines()
                .find(|l| needles.iter().all(|n| l.contains(n)))
            {
                return line.to_string();
            }
            assert!(
                Instant::now() < deadline,
                "no log line with {needles:?} in:\n{stderr}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A rustls client trusting `ca`, presenting `client` if given, offering
/// `alpn`.
pub fn client_config(ca: &Path, client: Option<&CertFiles>, alpn: &[&[u8]]) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for cert in ::lockd_server::pem::certificates(ca).unwrap() {
        roots.add(cert).unwrap();
    }
    let builder = ClientConfig::builder_with_provider(::lockd_server::pem::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match client {
        Some(c) => builder
            .with_client_auth_cert(
                ::lockd_server::pem::certificates(&c.cert).unwrap(),
                ::lockd_server::pem::private_key(&c.key).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

pub type Tls = StreamOwned<ClientConnection, TcpStream>;

/// A TLS connection to `addr` as `127.0.0.1`, past its handshake.
pub fn connect(addr: SocketAddr, config: Arc<ClientConfig>) -> std::io::Result<Tls> {
    let tcp = TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(Duration::from_secs(15)))?;
    let name = ServerName::IpAddress(addr.ip().into());
    let conn = ClientConnection::new(config, name).map_err(std::io::Error::other)?;
    let mut tls = StreamOwned::new(conn, tcp);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock)?;
    }
    Ok(tls)
}

/// The DER bytes of the certificate the server presented.
pub fn peer_cert(tls: &Tls) -> Vec<u8> {
    tls.conn.peer_certificates().unwrap()[0].to_vec()
}

/// The DER bytes of the first certificate in a PEM file.
pub fn der(pem: &Path) -> Vec<u8> {
    ::lockd_server::pem::certificates(pem).unwrap()[0].to_vec()
}

/// One HTTP/1.1 request on a kept-alive connection: (status, body).
pub fn request(
    tls: &mut Tls,
    method: &str,
    path: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    write!(
        tls,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    tls.flush()?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        tls.read_exact(&mut byte)?;
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap().to_ascii_lowercase();
    let code = head[9..12].parse().unwrap();
    let header = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
    };
    let body = match header("content-length:") {
        Some(length) => {
            let mut body = vec![0u8; length.parse().unwrap()];
            tls.read_exact(&mut body)?;
            body
        }
        None => {
            assert_eq!(
                header("transfer-encoding:").as_deref(),
                Some("chunked"),
                "{head}"
            );
            read_chunked(tls)?
        }
    };
    Ok((code, String::from_utf8(body).unwrap()))
}

/// A chunked body (a component's streamed response).
fn read_chunked(tls: &mut Tls) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        while !line.ends_with(b"\r\n") {
            tls.read_exact(&mut byte)?;
            line.push(byte[0]);
        }
        let size = usize::from_str_radix(std::str::from_utf8(&line).unwrap().trim(), 16).unwrap();
        let mut chunk = vec![0u8; size + 2];
        tls.read_exact(&mut chunk)?;
        if size == 0 {
            return Ok(body);
        }
        body.extend_from_slice(&chunk[..size]);
    }
}

pub fn healthz(tls: &mut Tls) -> std::io::Result<u16> {
    request(tls, "GET", "/healthz", "").map(|(code, _)| code)
}

pub type H2 = hyper::client::conn::http2::SendRequest<http_body_util::Full<bytes::Bytes>>;

/// Runs `session` with an HTTP/2 connection to `addr` (trusting `ca`), after
/// checking that ALPN chose `h2` over the `http/1.1` also offered.
pub fn h2<F: std::future::Future<Output = ()>>(
    addr: SocketAddr,
    ca: &Path,
    session: impl FnOnce(H2) -> F,
) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let config = client_config(ca, None, &[b"h2", b"http/1.1"]);
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = ServerName::IpAddress(addr.ip().into());
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(b"h2".as_slice()));
        let (sender, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(tls),
        )
        .await
        .unwrap();
        tokio::spawn(conn);
        session(sender).await;
    });
}

pub fn h2_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> hyper::Request<http_body_util::Full<bytes::Bytes>> {
    hyper::Request::builder()
        .method(method)
        .uri(format!("https://{addr}{path}"))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_string(),
        )))
        .unwrap()
}

/// One request over HTTP/2: (status, JSON body).
pub async fn h2_call(
    sender: &mut H2,
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, Value) {
    let response = sender
        .send_request(h2_request(addr, method, path, body))
        .await
        .unwrap();
    assert_eq!(response.version(), hyper::Version::HTTP_2);
    let code = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (code, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// A CA (its PEM file) and a certificate for 127.0.0.1 it signed that
/// expired in 2020, in `dir`.
pub fn expired_server(dir: &Path) -> (PathBuf, CertFiles) {
    use rcgen::{
        date_time_ymd, BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
        Issuer, KeyPair,
    };
    std::fs::create_dir_all(dir).unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "lockd expired-test CA");
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.not_before = date_time_ymd(2020, 1, 1);
    leaf.not_after = date_time_ymd(2020, 1, 2);
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    let files = CertFiles {
        cert: dir.join("expired.pem"),
        key: dir.join("expired.key"),
    };
    std::fs::write(dir.join("ca.pem"), ca_pem).unwrap();
    std::fs::write(&files.cert, cert.pem()).unwrap();
    std::fs::write(&files.key, key.serialize_pem()).unwrap();
    (dir.join("ca.pem"), files)
}
