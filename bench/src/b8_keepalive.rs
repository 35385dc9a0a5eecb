//! B8, the cost of keep-alive (docs/contract.md#c17-keep-alive): 10,000
//! persistent leases with a 30 s TTL, each holding one lock, kept alive by
//! the host for `guest/rust-lease hold-leases` guests (three instances,
//! since an instance holds at most 4,096 guards and leases) on the redb
//! store. Measured over a window once every lease is held: the process's
//! CPU time, the store's commits (fsyncs) and journal ops per second, and
//! the refreshes made.
//!
//! The expected refresh rate is leases / (TTL / 3): each lease is renewed a
//! third of its TTL after the last renewal.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use lockd_components::run::{self, Output, RunConfig, RunLimits};
use lockd_core::metrics::Op;
use lockd_core::{Limits, LockService};

use crate::stats::{count, Table};
use crate::Ctx;

/// Leases one guest instance holds (below the 4,096 cap).
const PER_INSTANCE: u64 = 3_334;

pub fn run(ctx: &Ctx) -> anyhow::Result<String> {
    let (leases, ttl_ms, window) = if ctx.plan.smoke {
        // A TTL that leaves a renewal (due a third of it after the last) a
        // second to land, on a busy CI machine too; a window of more than
        // two TTLs, so that every lease is renewed.
        (30, 1_500, Duration::from_millis(3_500))
    } else {
        (10_000, 30_000, Duration::from_secs(60))
    };
    eprintln!(
        "B8: {leases} kept-alive leases, TTL {ttl_ms} ms, window {} s",
        window.as_secs()
    );
    let dir = tempfile::tempdir_in(ctx.scratch.path())?;
    ctx.rt.block_on(async {
        let service = LockService::new(
            lockd_redb::open(dir.path().join("keepalive.redb"))?,
            Limits::default(),
        );
        let engine = run::engine()?;
        let component = run::load(&engine, lockd_guest_tests::RUST_LEASE.as_ref())?;
        // The guests sleep long enough for the grants and the window; they
        // are cancelled once the window is measured.
        let hold_s = (window.as_secs() + 300).to_string();
        let mut guests = Vec::new();
        let mut left = leases;
        let mut instance = 0;
        while left > 0 {
            let n = left.min(PER_INSTANCE);
            left -= n;
            let config = RunConfig {
                namespace: "keepalive".into(),
                args: vec![
                    "rust-lease".into(),
                    "hold-leases".into(),
                    n.to_string(),
                    ttl_ms.to_string(),
                    hold_s.clone(),
                    format!("i{instance}"),
                ],
                output: Output::Capture,
                limits: RunLimits::default(),
            };
            instance += 1;
            let (engine, component, service) = (engine.clone(), component.clone(), service.clone());
            guests.push(tokio::spawn(async move {
                run::run_component(&engine, &component, service, config).await
            }));
        }
        let granting = Instant::now();
        while service.stats().locks_held < leases {
            if guests.iter().any(|g| g.is_finished()) {
                bail!("a hold-leases guest ended before holding its leases");
            }
            if granting.elapsed() > Duration::from_secs(600) {
                bail!("granting {leases} leases took over 10 minutes");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let grant_time = granting.elapsed();

        let cpu_before = process_cpu()?;
        let stats_before = service.stats();
        let refreshed_before = service.metrics().count(Op::LeaseRefresh, "ok");
        let failed_before = service.metrics().count(Op::LeaseRefresh, "not_held")
            + service.metrics().count(Op::LeaseRefresh, "unavailable");
        let started = Instant::now();
        tokio::time::sleep(window).await;
        let elapsed = started.elapsed().as_secs_f64();
        let cpu = process_cpu()? - cpu_before;
        let stats = service.stats();
        let refreshed = service.metrics().count(Op::LeaseRefresh, "ok") - refreshed_before;
        let failed = service.metrics().count(Op::LeaseRefresh, "not_held")
            + service.metrics().count(Op::LeaseRefresh, "unavailable")
            - failed_before;
        let held_after = stats.locks_held;
        for g in &guests {
            g.abort();
        }

        if held_after < leases {
            bail!("only {held_after} of {leases} leases' locks were held after the window");
        }
        let expected = leases as f64 / (ttl_ms as f64 / 3.0 / 1000.0);
        let mut table = Table::new(["over the window", "per second", "total"]);
        let per_s = |n: f64| count(n / elapsed);
        table.row(vec![
            "lease refreshes made by keep-alive".into(),
            per_s(refreshed as f64),
            refreshed.to_string(),
        ]);
        table.row(vec![
            "refreshes refused or failed".into(),
            per_s(failed as f64),
            failed.to_string(),
        ]);
        table.row(vec![
            "store commits (fsyncs)".into(),
            per_s((stats.commits - stats_before.commits) as f64),
            (stats.commits - stats_before.commits).to_string(),
        ]);
        table.row(vec![
            "journal ops written".into(),
            per_s((stats.committed_ops - stats_before.committed_ops) as f64),
            (stats.committed_ops - stats_before.committed_ops).to_string(),
        ]);
        table.row(vec![
            "process CPU (cores busy)".into(),
            format!("{:.3}", cpu.as_secs_f64() / elapsed),
            format!("{:.1} s", cpu.as_secs_f64()),
        ]);
        let mut out = String::from("## B8 keep-alive cost\n\n");
        let _ = writeln!(
            out,
            "{leases} persistent leases (TTL {} s, one lock each) kept alive by the host, redb \
             store; measured for {:.0} s once all were held ({:.1} s to grant them). Expected \
             refreshes: {} per second (leases / (TTL / 3)).\n",
            ttl_ms / 1000,
            elapsed,
            grant_time.as_secs_f64(),
            count(expected)
        );
        out += &table.render();
        Ok(out)
    })
}

/// CPU time (user + system) of this process so far, from /proc/self/stat.
fn process_cpu() -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").context("reading /proc/self/stat")?;
    // Fields after the command name, which is in parentheses and may hold
    // spaces: utime and stime are the 12th and 13th of them.
    let after = stat
        .rsplit_once(')')
        .context("no ')' in /proc/self/stat")?
        .1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields
        .get(11)
        .and_then(|u| u.parse::<u64>().ok())
        .zip(fields.get(12).and_then(|s| s.parse::<u64>().ok()))
        .map(|(u, s)| u + s)
        .context("no utime/stime in /proc/self/stat")?;
    // USER_HZ is 100 on Linux.
    Ok(Duration::from_millis(ticks * 10))
}
