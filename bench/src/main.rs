//! lockd's benchmark suite (docs/benchmarks.md): the lock capability, the
//! embedded store, edge functions and the REST API, measured against Redis
//! and etcd started by the suite itself in the same run, so that every ratio
//! compares figures taken on the same machine at the same time.
//!
//! ```text
//! cargo run --release -p lockd-bench -- [--smoke] [--only b1,b2,...,b11] [--out FILE]
//! ```
//!
//! Prints the machine, the fsync regime and one markdown table per workload
//! (B1 host call, B2 durable capability, B3 edge, B4 REST, B5 scale at 1M
//! and 10M held locks, B6 etcd mode and its growth from 1 to 3 lockd hosts
//! on a 3-member etcd, B7 portable: the capability composed with `lockd plug`, B8 the cost of
//! keep-alive, B9 TLS: REST over HTTPS against plain HTTP and Redis over
//! TLS, B10 shared locks, semaphores and leader failover on redb and etcd,
//! B11 bounded growth of a `lockd serve` under minutes of churn).
//! `--smoke` runs everything with tiny counts in seconds, to keep the suite from
//! rotting (CI); its figures mean nothing. `docs/benchmarks.md`
//! holds the figures of full runs.

mod b10_claims;
mod b10_failover;
mod b11_churn;
mod b1_host_call;
mod b2_durable;
mod b3_edge;
mod b4_rest;
mod b5_scale;
mod b6_etcd;
mod b6_growth;
mod b7_portable;
mod b8_keepalive;
mod b9_tls;
mod cpu;
mod drive;
mod fsync;
mod peers;
mod rest;
mod stats;

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;

use crate::drive::{closed_loop, Pair, Window};
use crate::peers::{EtcdRawPair, Redis, RedisMode, RedisPair};
use crate::stats::Measured;

// The allocator of the `lockd` binary, so that in-process figures are the
// binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(about = "lockd's benchmark suite")]
struct Args {
    /// Tiny counts and windows: checks that every workload runs, in seconds.
    #[arg(long)]
    smoke: bool,
    /// Workloads to run, such as `b1,b3` (default: all).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Also write the report (markdown) to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// B5's sizes in held locks, such as `1000000,10000000` (default: both
    /// in a full run, 2,000 in a smoke run).
    #[arg(long, value_delimiter = ',')]
    b5_locks: Vec<u64>,
    /// Internal: B5's child process (`fill PATH N` or `recover PATH`).
    #[arg(long, num_args = 1.., hide = true)]
    b5_child: Vec<String>,
    /// Internal: B10's child processes (`serve STORE` or `lead ADDR NAME
    /// CANDIDATE TTL_MS`).
    #[arg(long, num_args = 1.., hide = true)]
    b10_child: Vec<String>,
    /// B11's length in seconds (default 300; 3 in a smoke run).
    #[arg(long, env = "LOCKD_BENCH_B11_SECONDS")]
    b11_seconds: Option<u64>,
    /// B11's sampling interval in seconds: a row each (default 10; 1 in a
    /// smoke run).
    #[arg(long, env = "LOCKD_BENCH_B11_INTERVAL")]
    b11_interval: Option<u64>,
    /// Internal: B11's child process (`serve STORE`).
    #[arg(long, num_args = 1.., hide = true)]
    b11_child: Vec<String>,
}

/// Sizes of a run.
#[derive(Clone, Debug)]
pub struct Plan {
    pub smoke: bool,
    /// Closed-loop warmup and measuring window.
    pub window: Window,
    /// Pairs per B1 pass.
    pub b1_pairs: u32,
    /// Concurrency levels of B2.
    pub levels: Vec<usize>,
    /// B3: the offered rates tried, in requests per second, and how long each.
    pub b3_rates: Vec<u32>,
    pub b3_step: Duration,
    /// B4 connections.
    pub b4_connections: usize,
    /// B5's sizes, in held locks.
    pub b5_locks: Vec<u64>,
    /// B10's callers on one name (and each on names of its own).
    pub b10_callers: usize,
    /// B10's leader failover: rounds per store, and the leadership's TTL.
    pub b10_rounds: usize,
    pub b10_ttl_ms: u64,
    /// B11's churn: how long, and a row every `b11_interval`.
    pub b11_length: Duration,
    pub b11_interval: Duration,
}

impl Plan {
    fn new(smoke: bool) -> Plan {
        if smoke {
            Plan {
                smoke,
                window: Window {
                    warmup: Duration::from_millis(50),
                    measure: Duration::from_millis(250),
                },
                b1_pairs: 2_000,
                levels: vec![1, 8],
                b3_rates: vec![100, 200],
                b3_step: Duration::from_millis(400),
                b4_connections: 8,
                b5_locks: vec![2_000],
                b10_callers: 4,
                b10_rounds: 1,
                b10_ttl_ms: 600,
                b11_length: Duration::from_secs(3),
                b11_interval: Duration::from_secs(1),
            }
        } else {
            Plan {
                smoke,
                window: Window {
                    warmup: Duration::from_secs(1),
                    measure: Duration::from_secs(5),
                },
                b1_pairs: 2_000_000,
                levels: vec![1, 8, 64],
                b3_rates: vec![
                    1_000, 2_000, 4_000, 6_000, 8_000, 10_000, 12_000, 14_000, 16_000, 18_000,
                    20_000, 22_000, 25_000, 28_000,
                ],
                b3_step: Duration::from_secs(3),
                b4_connections: 64,
                b5_locks: vec![1_000_000, 10_000_000],
                b10_callers: 64,
                b10_rounds: 8,
                b10_ttl_ms: 2_000,
                b11_length: Duration::from_secs(b11_churn::SECONDS),
                b11_interval: Duration::from_secs(b11_churn::INTERVAL_SECONDS),
            }
        }
    }
}

/// What the workloads share: the plan, the runtime the callers run on, a
/// scratch directory on the disk under test, the peers (started on first
/// use) and the peer figures measured so far (a peer is measured once per
/// concurrency level and quoted by every workload that compares with it).
#[derive(Debug)]
pub struct Ctx {
    pub plan: Plan,
    pub rt: tokio::runtime::Runtime,
    pub scratch: tempfile::TempDir,
    pub regime: fsync::Regime,
    redis: RefCell<HashMap<&'static str, Redis>>,
    etcd: RefCell<Option<lockd_test_support::etcd::EtcdCluster>>,
    peer_figures: RefCell<HashMap<(String, usize), Measured>>,
}

impl Ctx {
    pub fn window(&self) -> Window {
        self.plan.window
    }

    /// Runs `callers` closed-loop on the callers' runtime.
    pub fn run<P: Pair>(&self, callers: Vec<P>) -> Measured {
        self.rt.block_on(closed_loop(callers, self.window()))
    }

    /// Client URLs of the single-node etcd, started on first use.
    pub fn etcd_endpoints(&self) -> anyhow::Result<Vec<String>> {
        let mut etcd = self.etcd.borrow_mut();
        if etcd.is_none() {
            *etcd = Some(lockd_test_support::etcd::EtcdCluster::start().context("starting etcd")?);
        }
        Ok(etcd.as_ref().unwrap().endpoints())
    }

    /// A client of the Redis in `mode`, started on first use.
    pub fn redis_client(&self, mode: RedisMode) -> anyhow::Result<redis::Client> {
        let mut servers = self.redis.borrow_mut();
        if let Some(r) = servers.get(mode.label()) {
            return Ok(r.client.clone());
        }
        let r = Redis::start(mode)?;
        let client = r.client.clone();
        servers.insert(mode.label(), r);
        Ok(client)
    }

    /// A peer's pairs at `clients` concurrent callers (measured once).
    pub fn peer(&self, peer: Peer, clients: usize) -> anyhow::Result<Measured> {
        let key = (peer.label().to_string(), clients);
        if let Some(m) = self.peer_figures.borrow().get(&key) {
            return Ok(m.clone());
        }
        let measured = match peer {
            Peer::Redis(mode) => {
                let client = self.redis_client(mode)?;
                let callers = self.rt.block_on(async {
                    let mut callers = Vec::new();
                    for c in 0..clients {
                        callers.push(RedisPair::connect(&client, c).await?);
                    }
                    anyhow::Ok(callers)
                })?;
                self.run(callers)
            }
            Peer::Etcd => {
                let endpoints = self.etcd_endpoints()?;
                let client = self
                    .rt
                    .block_on(etcd_client::Client::connect(endpoints, None))?;
                self.run(
                    (0..clients)
                        .map(|c| EtcdRawPair::new(client.clone(), c))
                        .collect(),
                )
            }
        };
        check_errors(peer.label(), &measured)?;
        self.peer_figures.borrow_mut().insert(key, measured.clone());
        Ok(measured)
    }
}

/// The peers.
#[derive(Clone, Copy, Debug)]
pub enum Peer {
    Redis(RedisMode),
    Etcd,
}

impl Peer {
    pub fn label(self) -> &'static str {
        match self {
            Peer::Redis(mode) => mode.label(),
            Peer::Etcd => "etcd single node",
        }
    }
}

/// A benchmark whose pairs fail measures nothing: stop with the error.
pub fn check_errors(what: &str, m: &Measured) -> anyhow::Result<()> {
    anyhow::ensure!(
        m.errors == 0 && m.ops > 0,
        "{what}: {} pairs failed, {} succeeded",
        m.errors,
        m.ops
    );
    Ok(())
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0.0, |kb| kb as f64 / (1 << 20) as f64);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{cores} cores ({cpu}), {mem_gib:.0} GiB RAM, Linux {}",
        kernel.trim()
    )
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if !args.b5_child.is_empty() {
        return b5_scale::child_main(&args.b5_child);
    }
    if !args.b10_child.is_empty() {
        return b10_failover::child_main(&args.b10_child);
    }
    if !args.b11_child.is_empty() {
        return b11_churn::child_main(&args.b11_child);
    }
    let mut plan = Plan::new(args.smoke);
    if !args.b5_locks.is_empty() {
        anyhow::ensure!(
            args.b5_locks.iter().all(|&n| n > 0),
            "--b5-locks: every size must be at least 1 lock, as in --b5-locks 1000000,10000000"
        );
        plan.b5_locks = args.b5_locks.clone();
    }
    if let Some(seconds) = args.b11_seconds {
        plan.b11_length = Duration::from_secs(seconds);
    }
    if let Some(seconds) = args.b11_interval {
        plan.b11_interval = Duration::from_secs(seconds);
    }
    let wanted =
        |w: &str| args.only.is_empty() || args.only.iter().any(|o| o.eq_ignore_ascii_case(w));

    // Scratch data (stores, peers' data) on the disk the store would use.
    let scratch = tempfile::Builder::new().prefix("lockd-bench-").tempdir()?;
    let regime = fsync::probe(scratch.path(), if plan.smoke { 50 } else { 2_000 })?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(cpu::CLIENT_THREAD)
        .enable_all()
        .build()?;
    let ctx = Ctx {
        plan,
        rt,
        scratch,
        regime,
        redis: RefCell::default(),
        etcd: RefCell::default(),
        peer_figures: RefCell::default(),
    };

    let mut report = String::new();
    let mut emit = |section: String| {
        println!("{section}");
        report += &section;
        report.push('\n');
    };
    emit(format!(
        "# lockd benchmarks{}\n\n- machine: {}\n- fsync regime: {}\n- scratch: {}\n",
        if ctx.plan.smoke {
            " (smoke run: figures mean nothing)"
        } else {
            ""
        },
        machine(),
        ctx.regime.describe(),
        ctx.scratch.path().display(),
    ));
    if wanted("b1") {
        emit(b1_host_call::run(&ctx)?);
    }
    if wanted("b2") {
        emit(b2_durable::run(&ctx)?);
    }
    if wanted("b3") {
        emit(b3_edge::run(&ctx)?);
    }
    if wanted("b4") {
        emit(b4_rest::run(&ctx)?);
    }
    if wanted("b5") {
        emit(b5_scale::run(&ctx)?);
    }
    if wanted("b6") {
        emit(b6_etcd::run(&ctx)?);
    }
    if wanted("b7") {
        emit(b7_portable::run(&ctx)?);
    }
    if wanted("b8") {
        emit(b8_keepalive::run(&ctx)?);
    }
    if wanted("b9") {
        emit(b9_tls::run(&ctx)?);
    }
    if wanted("b10") {
        emit(b10_claims::run(&ctx)?);
    }
    if wanted("b11") {
        emit(b11_churn::run(&ctx)?);
    }
    if let Some(out) = &args.out {
        std::fs::write(out, &report).with_context(|| format!("writing {}", out.display()))?;
    }
    Ok(())
}
