//! B5, scale: 1M and 10M held persistent locks on the embedded store. For
//! each size a child process fills a fresh store through the lock API and
//! reports its memory; a second child opens the store (recovery: every lock
//! read back into memory, token counter resumed) and reports the time that
//! took and its memory with every lock held. Children, so that each RSS
//! figure is of a process that did only that. The figures are given per
//! held lock and per million, so that sizes compare: the goals are
//! per lock.

use std::fmt::Write as _;
use std::io::Read as _;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use lockd_core::{Limits, LockOptions, LockService};

use crate::stats::{count, Table};
use crate::Ctx;

/// Concurrent callers filling the store (group commit does the rest).
const FILLERS: u64 = 256;

/// Goal: RSS per held lock, after the fill and after recovery.
const GOAL_BYTES_PER_LOCK: f64 = 250.0;
/// Goal: recovery time per million held locks.
const GOAL_RECOVERY_S_PER_MILLION: f64 = 1.0;

/// How long a fill may take before the run stops with an error: a minute,
/// plus three minutes per million locks (six times what a fill took on the
/// 2-core machine under other builds' load: 10M in about five minutes).
fn fill_limit(locks: u64) -> Duration {
    Duration::from_secs(60 + locks.div_ceil(1_000_000) * 180)
}

/// How long a recovery may take: far above the goal, so that a slow one
/// is measured and shown, and a hung one stops the run.
fn recover_limit(locks: u64) -> Duration {
    Duration::from_secs(60 + locks.div_ceil(1_000_000) * 30)
}

/// What the two children reported for one size.
struct Sized {
    locks: u64,
    fill: Report,
    recover: Report,
    file_bytes: u64,
}

type Report = std::collections::HashMap<String, u64>;

pub fn run(ctx: &Ctx) -> anyhow::Result<String> {
    let mut sizes = Vec::new();
    for &n in &ctx.plan.b5_locks {
        sizes.push(one_size(ctx, n)?);
    }
    let mut table = Table::new([
        "held locks",
        "fill (256 callers)",
        "RSS after the fill",
        "per lock",
        "recovery",
        "per million",
        "RSS after recovery",
        "per lock",
        "store file",
    ]);
    let mb = |kb: u64| format!("{:.0} MB", kb as f64 * 1024.0 / 1e6);
    let per_lock = |kb: u64, n: u64| kb as f64 * 1024.0 / n as f64;
    let mut over = Vec::new();
    for s in &sizes {
        let n = s.locks;
        let millions = n as f64 / 1e6;
        let recovery_s = s.recover["elapsed_ms"] as f64 / 1e3;
        let fill_per_lock = per_lock(s.fill["rss_kb"], n);
        let recover_per_lock = per_lock(s.recover["rss_kb"], n);
        let per_million = recovery_s / millions;
        table.row(vec![
            count(n as f64),
            format!("{:.1} s", s.fill["elapsed_ms"] as f64 / 1e3),
            format!("{} (peak {})", mb(s.fill["rss_kb"]), mb(s.fill["hwm_kb"])),
            format!("{fill_per_lock:.0} B"),
            format!("{recovery_s:.2} s"),
            format!("{per_million:.2} s"),
            format!(
                "{} (peak {})",
                mb(s.recover["rss_kb"]),
                mb(s.recover["hwm_kb"])
            ),
            format!("{recover_per_lock:.0} B"),
            format!("{:.0} MB", s.file_bytes as f64 / 1e6),
        ]);
        let size = count(n as f64);
        if fill_per_lock > GOAL_BYTES_PER_LOCK {
            over.push(format!(
                "{size}: {fill_per_lock:.0} B per lock after the fill"
            ));
        }
        if recover_per_lock > GOAL_BYTES_PER_LOCK {
            over.push(format!(
                "{size}: {recover_per_lock:.0} B per lock after recovery"
            ));
        }
        if per_million > GOAL_RECOVERY_S_PER_MILLION {
            over.push(format!("{size}: recovery {per_million:.2} s per million"));
        }
    }
    let mut out = String::from("## B5 scale\n\n");
    out += &table.render();
    let _ = writeln!(
        out,
        "\nA fresh redb store per size. Goals: ≤ {GOAL_BYTES_PER_LOCK:.0} B of RSS per held lock \
         after the fill and after recovery; recovery ≤ {GOAL_RECOVERY_S_PER_MILLION:.0} s per million."
    );
    // What one more lock costs, from the smallest size to the largest: the
    // part of RSS that grows with the locks, without the process's fixed
    // part (runtime, redb's page cache).
    if let (Some(small), Some(large)) = (sizes.first(), sizes.last()) {
        if large.locks > small.locks {
            let added = (large.locks - small.locks) as f64;
            let marginal =
                |key: &str| (large.fill[key] as f64 - small.fill[key] as f64) * 1024.0 / added;
            let marginal_recovered =
                (large.recover["rss_kb"] as f64 - small.recover["rss_kb"] as f64) * 1024.0 / added;
            let _ = writeln!(
                out,
                "- From {} to {} locks: {:.0} B of RSS per added lock after the fill, {:.0} B after recovery.",
                count(small.locks as f64),
                count(large.locks as f64),
                marginal("rss_kb"),
                marginal_recovered,
            );
        }
    }
    if over.is_empty() {
        out += "- Every size within the goals.\n";
    } else {
        let _ = writeln!(out, "- Over the goal: {}.", over.join("; "));
    }
    Ok(out)
}

fn one_size(ctx: &Ctx, n: u64) -> anyhow::Result<Sized> {
    eprintln!("B5: {} locks", count(n as f64));
    let path = ctx.scratch.path().join(format!("b5-{n}.redb"));
    let path_str = path.to_str().context("scratch path is not UTF-8")?;
    let fill = child(&["fill", path_str, &n.to_string()], fill_limit(n))?;
    eprintln!(
        "B5: filled in {:.1} s; recovering",
        fill["elapsed_ms"] as f64 / 1e3
    );
    let recover = child(&["recover", path_str], recover_limit(n))?;
    if recover.get("locks") != Some(&n) {
        bail!(
            "recovery found {:?} locks, {n} were held",
            recover.get("locks")
        );
    }
    let file_bytes = std::fs::metadata(&path)?.len();
    // Ten million locks take gigabytes on disk: the next size needs room.
    std::fs::remove_file(&path)?;
    Ok(Sized {
        locks: n,
        fill,
        recover,
        file_bytes,
    })
}

/// Runs a B5 child with `args`, its progress going to our stderr, and
/// stops it with an error if it runs longer than `limit`.
fn child(args: &[&str], limit: Duration) -> anyhow::Result<Report> {
    let mut process = Command::new(std::env::current_exe()?)
        .arg("--b5-child")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = process.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = process.kill();
            let _ = process.wait();
            bail!("B5 child {args:?} ran longer than {limit:?}; stopped it");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // The child prints one short line at its end: it never fills the pipe.
    let mut stdout = String::new();
    if let Some(mut pipe) = process.stdout.take() {
        pipe.read_to_string(&mut stdout)?;
    }
    if !status.success() {
        bail!("B5 child {args:?} failed ({status}): {stdout}");
    }
    Ok(stdout
        .split_whitespace()
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect())
}

/// The child's side: `fill PATH N` or `recover PATH`.
pub fn child_main(args: &[String]) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    match args {
        [cmd, path, n] if cmd == "fill" => {
            let n: u64 = n.parse()?;
            let started = Instant::now();
            rt.block_on(async {
                let service = LockService::new(lockd_redb::open(path)?, Limits::default());
                let next = Arc::new(AtomicU64::new(0));
                let done = Arc::new(AtomicU64::new(0));
                let progress = tokio::spawn(report_progress(done.clone(), n, started));
                let tasks: Vec<_> = (0..FILLERS)
                    .map(|f| {
                        let (service, next, done) = (service.clone(), next.clone(), done.clone());
                        tokio::spawn(async move {
                            let owner = format!("holder-{f}");
                            loop {
                                let i = next.fetch_add(1, Ordering::Relaxed);
                                if i >= n {
                                    return anyhow::Ok(());
                                }
                                service
                                    .lock(
                                        "scale",
                                        &format!("lock/{i}"),
                                        &owner,
                                        3_600_000,
                                        LockOptions::default(),
                                    )
                                    .await?;
                                done.fetch_add(1, Ordering::Relaxed);
                            }
                        })
                    })
                    .collect();
                for t in tasks {
                    t.await??;
                }
                progress.abort();
                // With every lock still held.
                print_memory(started.elapsed());
                anyhow::Ok(())
            })?;
        }
        [cmd, path] if cmd == "recover" => {
            let started = Instant::now();
            let engine = rt.block_on(async { lockd_redb::open(path) })?;
            let elapsed = started.elapsed();
            let locks = engine.live_locks();
            print_memory(elapsed);
            println!("locks={locks}");
            drop(engine);
        }
        _ => bail!("usage: --b5-child fill PATH N | recover PATH"),
    }
    drop(rt);
    Ok(())
}

/// Prints how far the fill is every ten seconds (a 10M fill takes minutes).
async fn report_progress(done: Arc<AtomicU64>, n: u64, started: Instant) {
    let mut tick = tokio::time::interval(Duration::from_secs(10));
    tick.tick().await;
    loop {
        tick.tick().await;
        let done = done.load(Ordering::Relaxed);
        let secs = started.elapsed().as_secs_f64();
        eprintln!(
            "  B5 fill: {} of {} locks in {secs:.0} s ({}/s)",
            count(done as f64),
            count(n as f64),
            count(done as f64 / secs),
        );
    }
}

fn print_memory(elapsed: Duration) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    println!(
        "elapsed_ms={} rss_kb={} hwm_kb={}",
        elapsed.as_millis(),
        kb("VmRSS:"),
        kb("VmHWM:")
    );
}
