//! lockd's server in this process, on a runtime of its own (so its worker
//! threads are not the load generator's), and a lean keep-alive HTTP/1.1
//! client, over plain TCP or TLS.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use bytes::Bytes;
use lockd_api::{DurabilityWord, GrantReply, LockRequest, Route, StatusReply, UnlockRequest};
use lockd_compat::Compat;
use lockd_components::serve::SpinApp;
use lockd_server::config::LockdConfig;
use lockd_server::serve::{Extension, ServeOptions};
use lockd_server::store::StoreSpec;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::drive::Pair;

/// A running `lockd serve`, stopped on drop.
pub struct Server {
    pub addr: SocketAddr,
    service: lockd_core::LockService,
    rt: Option<tokio::runtime::Runtime>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Server {
    /// Serves the REST API (and `manifest`'s components) on the redb store
    /// at `store`, with two worker threads.
    pub fn start(store: PathBuf, manifest: Option<PathBuf>) -> anyhow::Result<Server> {
        Server::start_with(store, manifest, LockdConfig::default())
    }

    /// [`Server::start`] with lockd's configuration `config` (its `[tls]`
    /// files make the listener HTTPS only).
    pub fn start_with(
        store: PathBuf,
        manifest: Option<PathBuf>,
        config: LockdConfig,
    ) -> anyhow::Result<Server> {
        Server::start_on(StoreSpec::Redb(store), manifest, config)
    }

    /// [`Server::start_with`] on any store, such as an etcd cluster shared
    /// with other servers (B6).
    pub fn start_on(
        store: StoreSpec,
        manifest: Option<PathBuf>,
        config: LockdConfig,
    ) -> anyhow::Result<Server> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("lockd-server")
            .enable_all()
            .build()?;
        // What `lockd serve` mounts: the manifest's components, if any, and
        // the compatibility routes.
        let mut extensions: Vec<Box<dyn Extension>> = Vec::new();
        if let Some(manifest) = manifest {
            extensions.push(Box::new(SpinApp::new(manifest)));
        }
        extensions.push(Box::new(Compat::new(None)));
        let server = rt.block_on(lockd_server::bind(ServeOptions {
            listen: "127.0.0.1:0".parse()?,
            store,
            config,
            auth_token: None,
            events_heartbeat: lockd_server::api::HEARTBEAT,
            extensions,
        }))?;
        let addr = server.addr();
        let service = server.service().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        rt.spawn(server.run(async {
            let _ = stopped.await;
        }));
        Ok(Server {
            addr,
            service,
            rt: Some(rt),
            stop: Some(stop),
        })
    }
}

impl Server {
    /// The store's commits and the operations they carried so far, from
    /// the service's metrics (`lockd_store_commits_total`,
    /// `lockd_store_committed_ops_total`).
    pub fn commits(&self) -> (u64, u64) {
        let metrics = self.service.render_metrics();
        let value = |name: &str| {
            metrics
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
                .unwrap_or(0)
        };
        (
            value("lockd_store_commits_total"),
            value("lockd_store_committed_ops_total"),
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(5));
        }
    }
}

/// One keep-alive HTTP/1.1 connection with a minimal client: requests are
/// formatted straight into a buffer, answers parsed just enough to find the
/// status and the `content-length` body. On a 2-core machine the load
/// generator shares the CPU with the server; a full client library spent
/// twice the server's CPU per request (perf, B4) and so measured itself.
/// Redis is driven the same way by its own lean protocol. `S` is the
/// stream: TCP, or TLS over TCP ([`Connection::open_tls`]).
pub struct Connection<S = TcpStream> {
    stream: S,
    host: String,
    out: Vec<u8>,
    buf: Vec<u8>,
}

impl Connection {
    pub async fn open(addr: SocketAddr) -> anyhow::Result<Connection> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Connection::over(stream, addr))
    }
}

impl Connection<TlsStream<TcpStream>> {
    /// A connection to an HTTPS listener at `addr`, its certificate checked
    /// by `tls` (see [`tls_client`]) for the address's IP.
    pub async fn open_tls(
        addr: SocketAddr,
        tls: &TlsConnector,
    ) -> anyhow::Result<Connection<TlsStream<TcpStream>>> {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
        let stream = tls
            .connect(name, tcp)
            .await
            .with_context(|| format!("TLS handshake with {addr}"))?;
        Ok(Connection::over(stream, addr))
    }
}

/// A TLS client (ring, TLS 1.3 or 1.2, HTTP/1.1 by ALPN) trusting only the
/// CA certificates in the PEM file `ca`.
pub fn tls_client(ca: &Path) -> anyhow::Result<TlsConnector> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in lockd_server::pem::certificates(ca)? {
        roots.add(cert)?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(lockd_server::pem::provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(config)))
}

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<S> {
    fn over(stream: S, addr: SocketAddr) -> Connection<S> {
        Connection {
            stream,
            host: addr.to_string(),
            out: Vec::with_capacity(512),
            buf: Vec::with_capacity(1024),
        }
    }

    /// Posts `request` to `route` and reads the reply as `T`: an error
    /// unless it is a 200 that parses.
    pub async fn post<T: serde::de::DeserializeOwned>(
        &mut self,
        route: Route,
        request: &impl serde::Serialize,
    ) -> anyhow::Result<T> {
        let body = serde_json::to_string(request)?;
        let (status, reply) = self
            .send(route.method().as_str(), route.path(), Some(body))
            .await?;
        if status != 200 {
            bail!(
                "{route} answered {status}: {}",
                String::from_utf8_lossy(&reply)
            );
        }
        Ok(lockd_api::decode(route, &reply)?)
    }

    /// Sends a request and reads the whole answer: (status, body).
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        body: Option<String>,
    ) -> anyhow::Result<(u16, Bytes)> {
        use std::io::Write as _;
        use tokio::io::AsyncWriteExt as _;

        self.out.clear();
        let body = body.unwrap_or_default();
        write!(
            self.out,
            "{method} {path} HTTP/1.1\r\nhost: {}\r\n",
            self.host
        )?;
        if !body.is_empty() {
            write!(
                self.out,
                "content-type: application/json\r\ncontent-length: {}\r\n",
                body.len()
            )?;
        }
        self.out.extend_from_slice(b"\r\n");
        self.out.extend_from_slice(body.as_bytes());
        self.stream.write_all(&self.out).await?;
        // TLS may hold the records back until flushed; TCP's is a no-op.
        self.stream.flush().await?;

        self.buf.clear();
        let (head_end, status, framing) = loop {
            if let Some(end) = find(&self.buf, b"\r\n\r\n") {
                let head =
                    std::str::from_utf8(&self.buf[..end]).context("answer head is not UTF-8")?;
                let status = head
                    .split(' ')
                    .nth(1)
                    .and_then(|s| s.parse::<u16>().ok())
                    .context("answer without a status")?;
                let header = |name: &str| {
                    head.lines().find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
                    })
                };
                // Components stream their bodies (chunked); lockd's own
                // routes send a content-length.
                let framing = match (header("content-length"), header("transfer-encoding")) {
                    (Some(n), _) => Framing::Length(n.parse().context("bad content-length")?),
                    (None, Some(te)) if te.eq_ignore_ascii_case("chunked") => Framing::Chunked,
                    _ => bail!("answer with neither content-length nor chunked body"),
                };
                break (end + 4, status, framing);
            }
            self.read_more().await?;
        };
        match framing {
            Framing::Length(length) => {
                while self.buf.len() < head_end + length {
                    self.read_more().await?;
                }
                Ok((
                    status,
                    Bytes::copy_from_slice(&self.buf[head_end..head_end + length]),
                ))
            }
            Framing::Chunked => {
                let mut body = Vec::new();
                let mut at = head_end;
                loop {
                    let line_end = loop {
                        if let Some(i) = find(&self.buf[at..], b"\r\n") {
                            break at + i;
                        }
                        self.read_more().await?;
                    };
                    let size_text = std::str::from_utf8(&self.buf[at..line_end])?;
                    let size_text = size_text.split(';').next().unwrap_or("").trim();
                    let size = usize::from_str_radix(size_text, 16).context("bad chunk size")?;
                    at = line_end + 2;
                    if size == 0 {
                        // No trailers are sent: the last chunk ends with CRLF.
                        while self.buf.len() < at + 2 {
                            self.read_more().await?;
                        }
                        return Ok((status, Bytes::from(body)));
                    }
                    while self.buf.len() < at + size + 2 {
                        self.read_more().await?;
                    }
                    body.extend_from_slice(&self.buf[at..at + size]);
                    at += size + 2;
                }
            }
        }
    }

    async fn read_more(&mut self) -> anyhow::Result<()> {
        use tokio::io::AsyncReadExt as _;
        if self.stream.read_buf(&mut self.buf).await? == 0 {
            bail!("connection closed");
        }
        Ok(())
    }
}

/// How an answer's body ends.
enum Framing {
    Length(usize),
    Chunked,
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The request bodies of one lock + unlock pair: `owner` takes a lock for
/// 30 s, then releases it under the grant's token.
pub struct PairRequests {
    pub namespace: Option<String>,
    pub owner: String,
    pub durability: DurabilityWord,
}

impl PairRequests {
    pub fn lock(&self, name: &str) -> LockRequest {
        LockRequest {
            namespace: self.namespace.clone(),
            name: name.to_string(),
            owner: Some(self.owner.clone()),
            ttl_ms: Some(30_000),
            wait_ms: None,
            durability: Some(self.durability),
            lease_id: None,
            mode: None,
            permits: None,
        }
    }

    pub fn unlock(&self, name: String, grant: &GrantReply) -> UnlockRequest {
        UnlockRequest {
            namespace: self.namespace.clone(),
            name,
            owner: self.owner.clone(),
            fencing_token: Some(grant.fencing_token),
        }
    }
}

/// A REST caller: `POST /v1/locks/lock` then `POST /v1/locks/unlock` with the
/// token, on its own keep-alive connection (TCP, or TLS: `S`).
pub struct RestPair<S = TcpStream> {
    conn: Connection<S>,
    requests: PairRequests,
    prefix: String,
}

impl RestPair {
    pub async fn connect(
        addr: SocketAddr,
        caller: usize,
        durability: DurabilityWord,
    ) -> anyhow::Result<RestPair> {
        Ok(RestPair::over(
            Connection::open(addr).await?,
            caller,
            durability,
        ))
    }
}

impl RestPair<TlsStream<TcpStream>> {
    /// [`RestPair::connect`] to an HTTPS listener, trusting what `tls` does.
    pub async fn connect_tls(
        addr: SocketAddr,
        tls: &TlsConnector,
        caller: usize,
        durability: DurabilityWord,
    ) -> anyhow::Result<RestPair<TlsStream<TcpStream>>> {
        Ok(RestPair::over(
            Connection::open_tls(addr, tls).await?,
            caller,
            durability,
        ))
    }
}

impl<S> RestPair<S> {
    fn over(conn: Connection<S>, caller: usize, durability: DurabilityWord) -> RestPair<S> {
        RestPair {
            conn,
            requests: PairRequests {
                namespace: None,
                owner: format!("owner-{caller}"),
                durability,
            },
            prefix: format!("c{caller}/"),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Pair for RestPair<S> {
    async fn pair(&mut self, i: u64) -> anyhow::Result<()> {
        let name = format!("{}{i}", self.prefix);
        let grant: GrantReply = self
            .conn
            .post(Route::Lock, &self.requests.lock(&name))
            .await?;
        let unlock = self.requests.unlock(name, &grant);
        let _: StatusReply = self.conn.post(Route::Unlock, &unlock).await?;
        Ok(())
    }
}

impl RestPair<TlsStream<TcpStream>> {
    /// The TLS version and cipher suite this connection agreed on.
    pub fn negotiated(&self) -> String {
        let (_, session) = self.conn.stream.get_ref();
        match (
            session.protocol_version(),
            session.negotiated_cipher_suite(),
        ) {
            (Some(version), Some(suite)) => format!("{version:?}, {:?}", suite.suite()),
            _ => "unknown".into(),
        }
    }
}
