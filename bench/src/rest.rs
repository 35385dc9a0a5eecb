//! lockd's server in this process, on a runtime of its own (so its worker
//! threads are not the load generator's), and a keep-alive HTTP/1.1 client.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context as _};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use lockd::config::LockdConfig;
use lockd::serve::ServeOptions;
use lockd::store::StoreSpec;

use crate::drive::Pair;

/// A running `lockd serve`, stopped on drop.
pub struct Server {
    pub addr: SocketAddr,
    rt: Option<tokio::runtime::Runtime>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Server {
    /// Serves the REST API (and `manifest`'s components) on the redb store
    /// at `store`, with two worker threads.
    pub fn start(store: PathBuf, manifest: Option<PathBuf>) -> anyhow::Result<Server> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("lockd-server")
            .enable_all()
            .build()?;
        let server = rt.block_on(lockd::serve::bind(ServeOptions {
            listen: "127.0.0.1:0".parse()?,
            store: StoreSpec::Redb(store),
            manifest,
            config: LockdConfig::default(),
            auth_token: None,
        }))?;
        let addr = server.addr();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        rt.spawn(server.run(async {
            let _ = stopped.await;
        }));
        Ok(Server {
            addr,
            rt: Some(rt),
            stop: Some(stop),
        })
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

/// One keep-alive HTTP/1.1 connection.
pub struct Connection {
    sender: SendRequest<Full<Bytes>>,
    host: String,
}

impl Connection {
    pub async fn open(addr: SocketAddr) -> anyhow::Result<Connection> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        Ok(Connection {
            sender,
            host: addr.to_string(),
        })
    }

    /// Sends a request and reads the whole answer: (status, body).
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        body: Option<String>,
    ) -> anyhow::Result<(u16, Bytes)> {
        self.sender.ready().await.context("connection closed")?;
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", &self.host);
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        let req = req.body(Full::new(Bytes::from(body.unwrap_or_default())))?;
        let resp = self.sender.send_request(req).await?;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }
}

/// A REST caller: `POST /v1/locks/lock` then `POST /v1/locks/unlock` with the
/// token, on its own keep-alive connection.
pub struct RestPair {
    conn: Connection,
    owner: String,
    prefix: String,
    durability: &'static str,
}

impl RestPair {
    pub async fn connect(
        addr: SocketAddr,
        caller: usize,
        durability: &'static str,
    ) -> anyhow::Result<RestPair> {
        Ok(RestPair {
            conn: Connection::open(addr).await?,
            owner: format!("owner-{caller}"),
            prefix: format!("c{caller}/"),
            durability,
        })
    }
}

impl Pair for RestPair {
    async fn pair(&mut self, i: u64) -> anyhow::Result<()> {
        let name = format!("{}{i}", self.prefix);
        let lock = serde_json::json!({
            "name": name,
            "owner": self.owner,
            "ttl_ms": 30_000,
            "durability": self.durability,
        });
        let (status, body) = self
            .conn
            .send("POST", "/v1/locks/lock", Some(lock.to_string()))
            .await?;
        if status != 200 {
            bail!("lock answered {status}: {}", String::from_utf8_lossy(&body));
        }
        let grant: serde_json::Value = serde_json::from_slice(&body)?;
        let token = grant["fencing_token"]
            .as_u64()
            .context("lock answer without fencing_token")?;
        let unlock = serde_json::json!({
            "name": name,
            "owner": self.owner,
            "fencing_token": token,
        });
        let (status, body) = self
            .conn
            .send("POST", "/v1/locks/unlock", Some(unlock.to_string()))
            .await?;
        if status != 200 {
            bail!(
                "unlock answered {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        Ok(())
    }
}
