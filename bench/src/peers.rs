//! The peers lockd is measured against, started and stopped by the suite:
//! redis-server (appendfsync always, or no persistence) and a single-node
//! etcd, each on a free loopback port with a throwaway data dir on the same
//! disk as lockd's store. And their clients' acquire + release pairs.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use etcd_client::{Compare, CompareOp, Txn, TxnOp};

use crate::drive::Pair;

/// How Redis keeps its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedisMode {
    /// AOF with `appendfsync always`: fsync before every reply.
    Always,
    /// No AOF, no snapshots: memory only.
    NoPersistence,
}

impl RedisMode {
    pub fn label(self) -> &'static str {
        match self {
            RedisMode::Always => "Redis appendfsync always",
            RedisMode::NoPersistence => "Redis no persistence",
        }
    }
}

/// A redis-server child process, killed on drop.
#[derive(Debug)]
pub struct Redis {
    child: Child,
    pub url: String,
    /// A client of this server (over TLS if it was started with TLS).
    pub client: redis::Client,
    _dir: tempfile::TempDir,
}

/// The files of a Redis TLS port: the server's certificate and key, and the
/// CA its clients trust (client certificates are not asked for).
#[derive(Clone, Debug)]
pub struct RedisTls {
    pub server: lockd_test_support::certs::CertFiles,
    pub ca: PathBuf,
}

impl Redis {
    pub fn start(mode: RedisMode) -> anyhow::Result<Redis> {
        Redis::launch(mode, None)
    }

    /// A redis-server speaking TLS only (`--port 0 --tls-port`), on
    /// `tls`'s certificate.
    pub fn start_tls(mode: RedisMode, tls: &RedisTls) -> anyhow::Result<Redis> {
        Redis::launch(mode, Some(tls))
    }

    fn launch(mode: RedisMode, tls: Option<&RedisTls>) -> anyhow::Result<Redis> {
        let dir = tempfile::Builder::new()
            .prefix("lockd-bench-redis-")
            .tempdir()?;
        let port = free_port()?.to_string();
        let mut cmd = Command::new("redis-server");
        cmd.args(["--bind", "127.0.0.1", "--save", ""]);
        match tls {
            None => cmd.args(["--port", &port]),
            Some(tls) => cmd
                .args([
                    "--port",
                    "0",
                    "--tls-port",
                    &port,
                    "--tls-auth-clients",
                    "no",
                ])
                .arg("--tls-cert-file")
                .arg(&tls.server.cert)
                .arg("--tls-key-file")
                .arg(&tls.server.key)
                .arg("--tls-ca-cert-file")
                .arg(&tls.ca),
        };
        cmd.arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        match mode {
            RedisMode::Always => cmd.args(["--appendonly", "yes", "--appendfsync", "always"]),
            RedisMode::NoPersistence => cmd.args(["--appendonly", "no"]),
        };
        let (url, client) = match tls {
            None => {
                let url = format!("redis://127.0.0.1:{port}/");
                let client = redis::Client::open(url.as_str())?;
                (url, client)
            }
            Some(tls) => {
                let url = format!("rediss://127.0.0.1:{port}/");
                let ca = std::fs::read(&tls.ca)
                    .with_context(|| format!("reading {}", tls.ca.display()))?;
                let client = redis::Client::build_with_tls(
                    url.as_str(),
                    redis::TlsCertificates {
                        client_tls: None,
                        root_cert: Some(ca),
                    },
                )?;
                (url, client)
            }
        };
        let child = cmd
            .spawn()
            .context("starting redis-server (scripts/setup.sh installs it)")?;
        let redis = Redis {
            child,
            url,
            client,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut conn) = redis.client.get_connection() {
                if redis::cmd("PING").query::<String>(&mut conn).is_ok() {
                    return Ok(redis);
                }
            }
            if Instant::now() > deadline {
                bail!("redis-server did not answer on {}", redis.url);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The usual single-instance Redis lock: `SET name owner NX PX ttl`, then a
/// script that deletes the key only if it still holds this owner.
pub struct RedisPair {
    conn: redis::aio::MultiplexedConnection,
    release: redis::Script,
    owner: String,
    prefix: String,
}

const REDIS_RELEASE: &str = r#"
if redis.call("GET", KEYS[1]) == ARGV[1] then
    return redis.call("DEL", KEYS[1])
else
    return 0
end"#;

impl RedisPair {
    /// One connection per caller, as one client process each would have.
    pub async fn connect(client: &redis::Client, caller: usize) -> anyhow::Result<RedisPair> {
        let conn = client.get_multiplexed_async_connection().await?;
        Ok(RedisPair {
            conn,
            release: redis::Script::new(REDIS_RELEASE),
            owner: format!("owner-{caller}"),
            prefix: format!("c{caller}/"),
        })
    }
}

impl Pair for RedisPair {
    async fn pair(&mut self, i: u64) -> anyhow::Result<()> {
        let name = format!("{}{i}", self.prefix);
        let set: Option<String> = redis::cmd("SET")
            .arg(&name)
            .arg(&self.owner)
            .arg("NX")
            .arg("PX")
            .arg(30_000)
            .query_async(&mut self.conn)
            .await?;
        if set.as_deref() != Some("OK") {
            bail!("SET NX refused {name}");
        }
        let deleted: i64 = self
            .release
            .key(&name)
            .arg(&self.owner)
            .invoke_async(&mut self.conn)
            .await?;
        if deleted != 1 {
            bail!("release of {name} deleted {deleted} keys");
        }
        Ok(())
    }
}

/// Raw etcd: a transaction that creates the key if absent, then one that
/// deletes it if it still holds this owner. The least any etcd lock can do.
pub struct EtcdRawPair {
    client: etcd_client::Client,
    owner: String,
    prefix: String,
}

impl EtcdRawPair {
    pub fn new(client: etcd_client::Client, caller: usize) -> EtcdRawPair {
        EtcdRawPair {
            client,
            owner: format!("owner-{caller}"),
            prefix: format!("/raw/c{caller}/"),
        }
    }
}

impl Pair for EtcdRawPair {
    async fn pair(&mut self, i: u64) -> anyhow::Result<()> {
        let key = format!("{}{i}", self.prefix);
        let acquire = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.as_str(), self.owner.as_str(), None)]);
        if !self.client.txn(acquire).await?.succeeded() {
            bail!("{key} was taken");
        }
        let release = Txn::new()
            .when([Compare::value(
                key.as_str(),
                CompareOp::Equal,
                self.owner.as_str(),
            )])
            .and_then([TxnOp::delete(key.as_str(), None)]);
        if !self.client.txn(release).await?.succeeded() {
            bail!("{key} was not ours at release");
        }
        Ok(())
    }
}

pub fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
