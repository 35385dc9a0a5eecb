//! B11, bounded growth under churn: a `lockd serve` on the embedded redb
//! store taking durable work on names it never sees twice, for minutes, with
//! the server's RSS, open files and store size on disk sampled every
//! interval. A server that keeps anything per name it has seen (a map
//! entry, a tombstone, a log it never trims) grows with the run; one that
//! does not stays flat once its log reached its largest segments.
//!
//! The server is a child process: this binary again as `--b11-child serve
//! STORE`, which is `lockd serve --store redb:STORE` without a manifest (the
//! same `lockd_server::bind`, compatibility routes and default
//! configuration, on a default multi-threaded runtime as `lockd serve`
//! builds one). A child, so that its RSS (`/proc/PID/status` VmRSS) and its
//! open files (`/proc/PID/fd`) are the server's alone, not the load
//! generator's nor what earlier benchmarks of the suite left in this
//! process.
//!
//! The load, over REST on keep-alive connections (the suite's client,
//! [`crate::rest::Connection`]):
//! - 16 connections doing persistent lock + unlock pairs, each on a fresh
//!   name (`churn/CONN/I`, never reused), every pair timed;
//! - 4 connections each doing rounds of: a persistent lease granted, two
//!   fresh names locked under it, the lease revoked (both released); one
//!   permit of each of 3 semaphores of 2 permits taken (in the same order
//!   by everyone, waiting their turn), then released; a campaign on one of
//!   2 elections (waiting for the leader to resign), then a resignation.
//!
//! Checkpoints: lockd exposes no checkpoint counter on a server
//! (`lockd_redb::WriterStats::checkpoints` exists on a `lockd_redb::Store`
//! handle, which `lockd serve` keeps to itself, and `/metrics` has commits
//! but no checkpoints). They are read off the log directory instead: a
//! checkpoint applies finished segments (`{seq:016x}.seg`) to redb and
//! deletes them, so the number of the oldest segment left advances by the
//! segments checkpointed.

use std::fmt::Write as _;
use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _};
use lockd_api::{
    CampaignRequest, DurabilityWord, GrantReply, LeaseGrantRequest, LeaseGrantedReply,
    LeaseRequest, LeaseRevokedReply, LockRequest, ResignRequest, Route, StatusReply, UnlockRequest,
};
use lockd_compat::Compat;
use lockd_server::config::LockdConfig;
use lockd_server::serve::ServeOptions;
use lockd_server::store::StoreSpec;

use crate::rest::{Connection, PairRequests};
use crate::stats::{count, latency, Latencies, Table};
use crate::Ctx;

/// A full run's length and sampling interval (`--b11-seconds`,
/// `--b11-interval`).
pub const SECONDS: u64 = 300;
pub const INTERVAL_SECONDS: u64 = 10;
/// Connections doing lock + unlock pairs (as the run by hand with wrk).
const PAIR_CONNECTIONS: usize = 16;
/// Connections doing leases, semaphores and elections.
const MIX_CONNECTIONS: usize = 4;
/// Semaphores every mix round takes a permit of, and their size.
const SEMAPHORES: usize = 3;
const PERMITS: u32 = 2;
/// Elections the mix connections campaign on (two candidates each).
const ELECTIONS: usize = 2;
/// Every grant's TTL, and how long a caller waits its turn.
const TTL_MS: u64 = 30_000;
const WAIT_MS: u64 = 30_000;
/// How long the server may take to say it listens.
const STARTUP: Duration = Duration::from_secs(15);
/// The verdict's "flat": every figure of the last third within this much
/// of the first third's.
const FLAT_PERCENT: f64 = 10.0;

/// What the connections count, and the flag that stops them.
#[derive(Default)]
struct Tally {
    rounds: AtomicU64,
    errors: AtomicU64,
    reported: AtomicBool,
    stop: AtomicBool,
}

impl Tally {
    fn failed(&self, what: &str, e: &anyhow::Error) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if !self.reported.swap(true, Ordering::Relaxed) {
            eprintln!("  B11 first error ({what}): {e:#}");
        }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// One pair connection's latencies since the last sample.
type Timed = Arc<Mutex<Latencies>>;

/// Persistent lock + unlock pairs on fresh names until stopped. After a
/// failure the connection is opened again (its stream may be mid-answer).
async fn pairs(addr: SocketAddr, c: usize, tally: Arc<Tally>, timed: Timed) -> anyhow::Result<()> {
    let requests = PairRequests {
        namespace: None,
        owner: format!("churn-{c}"),
        durability: DurabilityWord::Persistent,
    };
    let mut conn = Connection::open(addr).await?;
    let mut i = 0u64;
    while !tally.stopped() {
        let name = format!("churn/{c}/{i}");
        i += 1;
        let began = Instant::now();
        let pair = async {
            let grant: GrantReply = conn.post(Route::Lock, &requests.lock(&name)).await?;
            let _: StatusReply = conn
                .post(Route::Unlock, &requests.unlock(name, &grant))
                .await?;
            anyhow::Ok(())
        };
        match pair.await {
            Ok(()) => timed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .record(began.elapsed()),
            Err(e) => {
                tally.failed("lock + unlock", &e);
                conn = Connection::open(addr).await?;
            }
        }
    }
    Ok(())
}

/// Rounds of leases, semaphores and elections until stopped.
async fn mix(addr: SocketAddr, w: usize, tally: Arc<Tally>) -> anyhow::Result<()> {
    let mut conn = Connection::open(addr).await?;
    let mut round = 0u64;
    while !tally.stopped() {
        match mix_round(&mut conn, w, round).await {
            Ok(()) => {
                tally.rounds.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                tally.failed("lease, semaphore or election", &e);
                conn = Connection::open(addr).await?;
            }
        }
        round += 1;
    }
    Ok(())
}

async fn mix_round(conn: &mut Connection, w: usize, round: u64) -> anyhow::Result<()> {
    let persistent = Some(DurabilityWord::Persistent);
    // A lease, two fresh names under it, the revoke releasing both.
    let lease: LeaseGrantedReply = conn
        .post(
            Route::LeaseGrant,
            &LeaseGrantRequest {
                namespace: None,
                ttl_ms: TTL_MS,
                durability: persistent,
            },
        )
        .await?;
    for part in ["a", "b"] {
        let under_lease = LockRequest {
            name: format!("lease/{w}/{round}/{part}"),
            lease_id: Some(lease.lease_id.clone()),
            ..LockRequest::default()
        };
        let _: GrantReply = conn.post(Route::Lock, &under_lease).await?;
    }
    let revoked: LeaseRevokedReply = conn
        .post(
            Route::LeaseRevoke,
            &LeaseRequest {
                namespace: None,
                lease_id: lease.lease_id,
            },
        )
        .await?;
    ensure!(
        revoked.released == 2,
        "the revoke released {} locks, not 2",
        revoked.released
    );
    // A permit of each semaphore, taken in the same order by everyone.
    let owner = format!("mix-{w}");
    let mut held = Vec::new();
    for s in 0..SEMAPHORES {
        let permit = LockRequest {
            name: format!("semaphore/{s}"),
            owner: Some(owner.clone()),
            ttl_ms: Some(TTL_MS),
            wait_ms: Some(WAIT_MS),
            durability: persistent,
            permits: Some(PERMITS),
            ..LockRequest::default()
        };
        let grant: GrantReply = conn.post(Route::Lock, &permit).await?;
        held.push((permit.name, grant.fencing_token));
    }
    for (name, token) in held {
        let release = UnlockRequest {
            namespace: None,
            name,
            owner: owner.clone(),
            fencing_token: Some(token),
        };
        let _: StatusReply = conn.post(Route::Unlock, &release).await?;
    }
    // A campaign, waiting for the other candidate to resign, then resigning.
    let name = format!("election/{}", w % ELECTIONS);
    let campaign = CampaignRequest {
        namespace: None,
        name: name.clone(),
        candidate: owner.clone(),
        value: format!("round {round}"),
        ttl_ms: TTL_MS,
        wait_ms: Some(WAIT_MS),
        durability: persistent,
    };
    let leading: GrantReply = conn.post(Route::Campaign, &campaign).await?;
    let resign = ResignRequest {
        namespace: None,
        name,
        candidate: owner,
        fencing_token: Some(leading.fencing_token),
    };
    let _: StatusReply = conn.post(Route::Resign, &resign).await?;
    Ok(())
}

/// The server child: `lockd serve --store redb:STORE` on a free loopback
/// port. It stops when its stdin closes (then is killed if it lingers).
struct ServerProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    addr: SocketAddr,
}

impl ServerProcess {
    fn start(store: &Path) -> anyhow::Result<ServerProcess> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg("--b11-child")
            .arg("serve")
            .arg(format!("redb:{}", store.display()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting the B11 server")?;
        let stdout = child.stdout.take().context("child without stdout")?;
        let (send, lines) = mpsc::channel();
        // Reads every line the child prints, so it never writes to a
        // closed pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = send.send(line);
            }
        });
        let stdin = child.stdin.take();
        let mut server = ServerProcess {
            child,
            stdin,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        let line = lines
            .recv_timeout(STARTUP)
            .context("the B11 server did not say where it listens (its stderr is above)")?;
        server.addr = line
            .strip_prefix("listening ")
            .with_context(|| format!("the B11 server printed {line:?}"))?
            .parse()?;
        Ok(server)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Closes its stdin and waits for it to exit (killed after 10 s).
    fn stop(&mut self) -> anyhow::Result<()> {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                ensure!(status.success(), "the B11 server exited with {status}");
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child.kill()?;
        self.child.wait()?;
        bail!("the B11 server did not stop within 10 s of its stdin closing; killed it")
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if self.stdin.is_some() {
            let _ = self.stop();
        }
    }
}

/// What one interval measured.
struct Sample {
    elapsed: Duration,
    span: Duration,
    latencies: Latencies,
    rounds: u64,
    disk: Disk,
    server: Process,
    /// CPU the server spent during the interval.
    cpu: Duration,
    /// The machine's load average over the last minute (other work on
    /// the cores shows here).
    load: f64,
    /// Log segments checkpointed during the interval.
    checkpointed: u64,
}

/// The store on disk: bytes allocated (as `du` counts them) to the redb
/// file and to its `-wal` directory, and the log's segment numbers.
#[derive(Clone, Copy, Default)]
struct Disk {
    redb: u64,
    /// The redb file's length (its allocated blocks may be fewer).
    redb_len: u64,
    wal: u64,
    /// The oldest and newest segment in the log directory.
    oldest: Option<u64>,
    newest: Option<u64>,
}

impl Disk {
    fn read(store: &Path) -> anyhow::Result<Disk> {
        let file = std::fs::metadata(store)?;
        let mut disk = Disk {
            redb: file.blocks() * 512,
            redb_len: file.len(),
            ..Disk::default()
        };
        let dir = lockd_redb::log_dir(store);
        for entry in std::fs::read_dir(&dir).with_context(|| format!("{}", dir.display()))? {
            let entry = entry?;
            // A segment may be deleted (checkpointed) while listed.
            let Ok(meta) = entry.metadata() else { continue };
            disk.wal += meta.blocks() * 512;
            let name = entry.file_name();
            let seq = name
                .to_str()
                .and_then(|n| n.strip_suffix(".seg"))
                .and_then(|n| u64::from_str_radix(n, 16).ok());
            if let Some(seq) = seq {
                disk.oldest = Some(disk.oldest.map_or(seq, |o| o.min(seq)));
                disk.newest = Some(disk.newest.map_or(seq, |n| n.max(seq)));
            }
        }
        Ok(disk)
    }

    fn total(&self) -> u64 {
        self.redb + self.wal
    }
}

/// Waits for the log's first segment, which the store makes as it opens
/// (perhaps after the server said it listens): the number the checkpoints
/// are counted from.
fn first_segment(store: &Path) -> anyhow::Result<()> {
    let deadline = Instant::now() + STARTUP;
    while Disk::read(store)?.oldest.is_none() {
        ensure!(
            Instant::now() < deadline,
            "no log segment in {} within {STARTUP:?} of the server's start",
            lockd_redb::log_dir(store).display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// The server process's figures, from /proc.
#[derive(Clone, Copy, Default)]
struct Process {
    /// VmRSS, in kB.
    rss_kb: u64,
    /// Entries of /proc/PID/fd.
    open_files: u64,
    /// CPU time so far (`utime + stime`), in clock ticks.
    cpu_ticks: u64,
}

impl Process {
    fn read(pid: u32) -> anyhow::Result<Process> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let rss_kb = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .context("no VmRSS in the server's /proc status")?;
        let open_files = std::fs::read_dir(format!("/proc/{pid}/fd"))?.count() as u64;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        // After the command (which may hold spaces): state (field 3) ...
        // utime (14), stime (15).
        let ticks: Vec<u64> = stat
            .rsplit_once(')')
            .map(|(_, tail)| tail.split_whitespace().skip(11).take(2))
            .into_iter()
            .flatten()
            .filter_map(|t| t.parse().ok())
            .collect();
        ensure!(ticks.len() == 2, "no CPU times in the server's /proc stat");
        Ok(Process {
            rss_kb,
            open_files,
            cpu_ticks: ticks[0] + ticks[1],
        })
    }

    /// The CPU spent from `earlier` to this reading.
    fn cpu_since(&self, earlier: &Process) -> Duration {
        let per_second = rustix::param::clock_ticks_per_second().max(1);
        Duration::from_secs_f64(
            self.cpu_ticks.saturating_sub(earlier.cpu_ticks) as f64 / per_second as f64,
        )
    }
}

/// The machine's load average over the last minute (0 if unknown).
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

pub fn run(ctx: &Ctx) -> anyhow::Result<String> {
    let (length, interval) = (ctx.plan.b11_length, ctx.plan.b11_interval);
    ensure!(
        interval > Duration::ZERO && length >= interval,
        "B11: the run ({length:?}) must last at least one interval ({interval:?})"
    );
    eprintln!(
        "B11: {} s of churn, a row every {} s",
        length.as_secs_f64(),
        interval.as_secs_f64()
    );
    let store = ctx.scratch.path().join("b11-churn.redb");
    let mut server = ServerProcess::start(&store)?;
    first_segment(&store)?;
    let tally = Arc::new(Tally::default());
    let timed: Vec<Timed> = (0..PAIR_CONNECTIONS).map(|_| Timed::default()).collect();
    let mut workers = Vec::new();
    for (c, timed) in timed.iter().enumerate() {
        let (tally, timed) = (tally.clone(), timed.clone());
        workers.push(ctx.rt.spawn(pairs(server.addr, c, tally, timed)));
    }
    for w in 0..MIX_CONNECTIONS {
        workers.push(ctx.rt.spawn(mix(server.addr, w, tally.clone())));
    }
    let sampled = sample(&server, &store, &tally, &timed, length, interval);
    tally.stop.store(true, Ordering::Relaxed);
    let stopped = ctx.rt.block_on(async {
        let limit = Duration::from_millis(WAIT_MS) + STARTUP;
        for worker in workers {
            tokio::time::timeout(limit, worker)
                .await
                .context("a B11 connection did not stop")???;
        }
        anyhow::Ok(())
    });
    let closed = server.stop();
    let samples = sampled?;
    stopped?;
    closed?;
    let errors = tally.errors.load(Ordering::Relaxed);
    ensure!(
        errors == 0,
        "B11: {errors} requests failed (the first is above)"
    );
    let after_close = Disk::read(&store)?;
    Ok(report(samples, after_close, length, interval))
}

/// Takes a sample every `interval` until `length` has passed, printing
/// each row as it comes.
fn sample(
    server: &ServerProcess,
    store: &Path,
    tally: &Tally,
    timed: &[Timed],
    length: Duration,
    interval: Duration,
) -> anyhow::Result<Vec<Sample>> {
    let started = Instant::now();
    let mut last = (
        started,
        Disk::read(store)?,
        0u64,
        Process::read(server.pid())?,
    );
    let mut samples = Vec::new();
    let intervals = (length.as_secs_f64() / interval.as_secs_f64()).round() as u32;
    for k in 1..=intervals {
        let due = started + interval * k;
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        let now = Instant::now();
        let mut latencies = Latencies::default();
        for t in timed {
            let mut t = t.lock().unwrap_or_else(PoisonError::into_inner);
            latencies.merge(std::mem::take(&mut *t));
        }
        let rounds = tally.rounds.load(Ordering::Relaxed);
        let disk = Disk::read(store)?;
        let process = Process::read(server.pid())?;
        let checkpointed = match (last.1.oldest, disk.oldest) {
            (Some(before), Some(after)) => after.saturating_sub(before),
            _ => 0,
        };
        let mut s = Sample {
            elapsed: now - started,
            span: now - last.0,
            latencies,
            rounds: rounds - last.2,
            disk,
            server: process,
            cpu: process.cpu_since(&last.3),
            load: load_average(),
            checkpointed,
        };
        eprintln!("  B11 {}", row(&mut s).join(" | "));
        last = (now, disk, rounds, process);
        samples.push(s);
    }
    Ok(samples)
}

/// A size in MB, or in kB below one MB (a store file of a few pages).
fn mb(bytes: u64) -> String {
    if bytes < 1_000_000 {
        format!("{:.0} kB", bytes as f64 / 1e3)
    } else {
        format!("{:.1} MB", bytes as f64 / 1e6)
    }
}

/// A sample's cells, in the table's order.
fn row(s: &mut Sample) -> Vec<String> {
    let per_s = |n: f64| count(n / s.span.as_secs_f64().max(1e-9));
    let pairs = s.latencies.len() as f64;
    vec![
        format!("{:.0} s", s.elapsed.as_secs_f64()),
        per_s(pairs),
        per_s(s.rounds as f64),
        mb(s.disk.redb),
        mb(s.disk.wal),
        mb(s.disk.total()),
        mb(s.server.rss_kb * 1024),
        s.server.open_files.to_string(),
        latency(s.latencies.quantile(0.50)),
        latency(s.latencies.quantile(0.99)),
        latency(s.latencies.quantile(1.0)),
        format!("{:.1} µs", s.cpu.as_secs_f64() * 1e6 / pairs.max(1.0)),
        format!("{:.2}", s.load),
        if s.checkpointed > 0 {
            format!("✓ {}", s.checkpointed)
        } else {
            String::new()
        },
    ]
}

const HEADER: [&str; 14] = [
    "elapsed",
    "pairs/s",
    "mix rounds/s",
    "redb file",
    "-wal dir",
    "store",
    "server RSS",
    "open files",
    "pair p50",
    "pair p99",
    "pair max",
    "server CPU per pair",
    "machine load",
    "checkpoint (segments)",
];

fn report(
    mut samples: Vec<Sample>,
    after_close: Disk,
    length: Duration,
    interval: Duration,
) -> String {
    let mut table = Table::new(HEADER);
    for s in &mut samples {
        table.row(row(s));
    }
    let pairs: usize = samples.iter().map(|s| s.latencies.len()).sum();
    let rounds: u64 = samples.iter().map(|s| s.rounds).sum();
    let checkpointed: u64 = samples.iter().map(|s| s.checkpointed).sum();
    let secs = samples.last().map_or(0.0, |s| s.elapsed.as_secs_f64());
    let mut out = format!(
        "## B11 churn ({} s, a row every {} s)\n\n",
        length.as_secs_f64(),
        interval.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "A `lockd serve` child process on a fresh redb store. {PAIR_CONNECTIONS} keep-alive REST \
         connections do persistent lock + unlock pairs, each on a name never used before; \
         {MIX_CONNECTIONS} more do rounds of a persistent lease (grant, two fresh names locked \
         under it, revoke), a permit of each of {SEMAPHORES} semaphores of {PERMITS} (acquire, \
         release) and a campaign on one of {ELECTIONS} elections (campaign, resign). Per \
         interval: the pairs' rate and latency, the store on disk (blocks allocated, as `du` \
         counts them), the server's VmRSS and open files (/proc/PID/fd), its CPU divided by the \
         pairs (the mix's share included: a rate that falls while it holds was the cores being \
         shared), the machine's 1-minute load average, and the log segments checkpointed into \
         redb (the oldest segment's number in the -wal directory advancing).\n"
    );
    out += &table.render();
    let _ = writeln!(
        out,
        "\n- In all: {} pairs ({}/s), {} mix rounds, {checkpointed} log segments checkpointed. \
         After the server stopped: redb file {} on disk ({} long), -wal dir {}.",
        count(pairs as f64),
        count(pairs as f64 / secs.max(1e-9)),
        count(rounds as f64),
        mb(after_close.redb),
        mb(after_close.redb_len),
        mb(after_close.wal),
    );
    out += &verdict(&samples);
    out
}

/// A figure the verdict compares: its name, where a sample has it, how it
/// is shown.
type Figure = (&'static str, fn(&Sample) -> u64, fn(u64) -> String);

/// The last third against the first third, by the median of each: not
/// moved by the log's first seconds (its segments double up to their
/// largest) nor by a sample taken mid-checkpoint (a third segment on disk,
/// the segment being applied in memory). The peaks are given beside.
fn verdict(samples: &[Sample]) -> String {
    let n = samples.len();
    let third = (n / 3).max(1);
    let (first, last) = (
        &samples[..third.min(n)],
        &samples[n.saturating_sub(third)..],
    );
    let median = |part: &[Sample], f: fn(&Sample) -> u64| {
        let mut values: Vec<u64> = part.iter().map(f).collect();
        values.sort_unstable();
        values
            .get(values.len().saturating_sub(1) / 2)
            .copied()
            .unwrap_or(0)
    };
    let peak = |part: &[Sample], f: fn(&Sample) -> u64| part.iter().map(f).max().unwrap_or(0);
    let mut moved = Vec::new();
    let mut cells = Vec::new();
    let figures: [Figure; 3] = [
        ("store", |s| s.disk.total(), mb),
        ("RSS", |s| s.server.rss_kb * 1024, mb),
        ("open files", |s| s.server.open_files, |n| n.to_string()),
    ];
    for (what, f, show) in figures {
        let (a, b) = (median(first, f), median(last, f));
        let growth = (b as f64 - a as f64) * 100.0 / (a as f64).max(1.0);
        cells.push(format!(
            "{what} {} → {} ({growth:+.1} %; peaks {} → {})",
            show(a),
            show(b),
            show(peak(first, f)),
            show(peak(last, f)),
        ));
        if growth.abs() > FLAT_PERCENT {
            moved.push(what);
        }
    }
    let judged = if moved.is_empty() {
        format!("flat (each median within ±{FLAT_PERCENT:.0} %)")
    } else {
        format!(
            "NOT flat: {} moved more than ±{FLAT_PERCENT:.0} %",
            moved.join(", ")
        )
    };
    format!(
        "- Verdict, median of the last third of the intervals against the first third's ({third} \
         of {n} each): {}: {judged}.\n",
        cells.join("; ")
    )
}

/// The child: `serve STORE`, a lockd server on a free loopback port that
/// prints `listening ADDR` and serves until its stdin closes.
pub fn child_main(args: &[String]) -> anyhow::Result<()> {
    let [cmd, store] = args else {
        bail!("usage: --b11-child serve STORE");
    };
    ensure!(cmd == "serve", "usage: --b11-child serve STORE");
    let store: StoreSpec = store.parse().map_err(anyhow::Error::msg)?;
    // As `lockd serve` builds its runtime.
    let rt = tokio::runtime::Runtime::new()?;
    let served = rt.block_on(async {
        let server = lockd_server::bind(ServeOptions {
            listen: "127.0.0.1:0".parse()?,
            store,
            config: LockdConfig::default(),
            auth_token: None,
            events_heartbeat: lockd_server::api::HEARTBEAT,
            extensions: vec![Box::new(Compat::new(None))],
        })
        .await?;
        println!("listening {}", server.addr());
        server.run(stdin_closed()).await
    });
    // The engine's tasks hold the store: once they are dropped the store
    // closes, checkpointing its log (a clean close leaves the -wal
    // directory empty). Bounded, for a `run` that failed before stdin
    // closed (its blocking read would still be on).
    rt.shutdown_timeout(Duration::from_secs(5));
    served
}

async fn stdin_closed() {
    use tokio::io::AsyncReadExt as _;
    let mut rest = Vec::new();
    let _ = tokio::io::stdin().read_to_end(&mut rest).await;
}
