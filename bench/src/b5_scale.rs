//! B5, scale: 1M held persistent locks on the embedded store. A child
//! process fills a fresh store through the lock API and reports its memory;
//! a second child opens the store (recovery: every lock read back into
//! memory, token counter resumed) and reports the time that took and its
//! memory with every lock held. Children, so that each RSS figure is of a
//! process that did only that.

use std::fmt::Write as _;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use lockd_core::{Limits, LockOptions, LockService};

use crate::stats::{count, Table};
use crate::Ctx;

/// Concurrent callers filling the store (group commit does the rest).
const FILLERS: u64 = 256;

pub fn run(ctx: &Ctx) -> anyhow::Result<String> {
    let n = ctx.plan.b5_locks;
    eprintln!("B5: {n} locks");
    let path = ctx.scratch.path().join("b5.redb");
    let path = path.to_str().context("scratch path is not UTF-8")?;
    let fill = child(&["fill", path, &n.to_string()])?;
    let recover = child(&["recover", path])?;
    if recover.get("locks") != Some(&n) {
        bail!(
            "recovery found {:?} locks, {n} were held",
            recover.get("locks")
        );
    }
    let size = std::fs::metadata(path)?.len();

    let mb = |kb: u64| format!("{:.0} MB", kb as f64 * 1024.0 / 1e6);
    let mut table = Table::new(["phase", "time", "RSS after", "peak RSS"]);
    table.row(vec![
        format!("fill {} locks ({FILLERS} callers)", count(n as f64)),
        format!("{:.2} s", fill["elapsed_ms"] as f64 / 1e3),
        mb(fill["rss_kb"]),
        mb(fill["hwm_kb"]),
    ]);
    table.row(vec![
        format!("restart: open store, recover {} locks", count(n as f64)),
        format!("{:.2} s", recover["elapsed_ms"] as f64 / 1e3),
        mb(recover["rss_kb"]),
        mb(recover["hwm_kb"]),
    ]);
    let mut out = String::from("## B5 scale\n\n");
    out += &table.render();
    let _ = writeln!(
        out,
        "\nStore file: {:.0} MB. Goals: ≤ 300 MB RSS with 1M locks held, recovery ≤ 3 s.",
        size as f64 / 1e6
    );
    Ok(out)
}

fn child(args: &[&str]) -> anyhow::Result<std::collections::HashMap<String, u64>> {
    let out = Command::new(std::env::current_exe()?)
        .arg("--b5-child")
        .args(args)
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "B5 child {args:?} failed: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
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
                let tasks: Vec<_> = (0..FILLERS)
                    .map(|f| {
                        let (service, next) = (service.clone(), next.clone());
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
                            }
                        })
                    })
                    .collect();
                for t in tasks {
                    t.await??;
                }
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
