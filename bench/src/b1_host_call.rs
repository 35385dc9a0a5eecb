//! B1, host call: one wasm guest (`guest/bench-pairs`) doing lock + unlock
//! pairs through the capability, ephemeral, on distinct names, on one core,
//! against the same pairs on an in-process `Mutex<HashMap>`.
//!
//! Each side runs twice: untimed for throughput, then timed per pair (one
//! extra clock read per pair) for the percentiles.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use lockd_components::run::{self, Output, RunConfig, RunLimits};
use lockd_core::{Engine, Limits, LockService};

use crate::stats::{count, latency, ratio, Latencies, Table};
use crate::Ctx;

/// Throughput and percentiles of one side.
struct Side {
    pairs_per_s: f64,
    p50: Duration,
    p99: Duration,
    p999: Duration,
}

pub fn run(ctx: &Ctx) -> anyhow::Result<String> {
    let pairs = ctx.plan.b1_pairs;
    eprintln!("B1: {pairs} pairs per pass");
    let mutex = mutex_pairs(pairs);
    // One core: a current-thread runtime on a thread of its own.
    let (guest, api) = std::thread::spawn(move || -> anyhow::Result<(Side, Side)> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok((
            rt.block_on(guest_pairs(pairs))?,
            rt.block_on(api_pairs(pairs))?,
        ))
    })
    .join()
    .map_err(|_| anyhow::anyhow!("B1 guest thread panicked"))??;

    let mut table = Table::new(["one core", "pairs/s", "p50", "p99", "p99.9", "ns per pair"]);
    for (label, side) in [
        ("wasm guest → lockd capability (memory store)", &guest),
        ("the same pairs on the lock API, no wasm", &api),
        ("in-process `Mutex<HashMap>`", &mutex),
    ] {
        table.row(vec![
            label.into(),
            count(side.pairs_per_s),
            latency(side.p50),
            latency(side.p99),
            latency(side.p999),
            format!("{:.0}", 1e9 / side.pairs_per_s),
        ]);
    }
    let mut out = String::from("## B1 host call\n\n");
    out += &table.render();
    let _ = writeln!(
        out,
        "\nGuest pairs per second: {} (goal ≥ 1,000,000); {} of the mutex pair's rate.",
        count(guest.pairs_per_s),
        ratio(guest.pairs_per_s, mutex.pairs_per_s)
    );
    Ok(out)
}

async fn guest_pairs(pairs: u32) -> anyhow::Result<Side> {
    let engine = run::engine()?;
    let component = run::load(&engine, lockd_guest_tests::BENCH_PAIRS.as_ref())?;
    let service = LockService::new(Engine::memory(), Limits::default());
    let mut fields = Vec::new();
    for mode in ["untimed", "timed"] {
        let config = RunConfig {
            namespace: "bench".into(),
            args: vec!["bench-pairs".into(), pairs.to_string(), mode.into()],
            output: Output::Capture,
            limits: RunLimits::default(),
        };
        let outcome = run::run_component(&engine, &component, service.clone(), config).await?;
        let stdout = String::from_utf8_lossy(&outcome.stdout).into_owned();
        if outcome.exit_code != 0 {
            bail!(
                "bench-pairs exited {}: {stdout} {}",
                outcome.exit_code,
                String::from_utf8_lossy(&outcome.stderr)
            );
        }
        fields.push(parse_fields(&stdout));
    }
    let field = |run: usize, key: &str| -> anyhow::Result<u64> {
        fields[run]
            .get(key)
            .copied()
            .with_context(|| format!("bench-pairs printed no {key}"))
    };
    Ok(Side {
        pairs_per_s: pairs as f64 / (field(0, "elapsed_ns")? as f64 / 1e9),
        p50: Duration::from_nanos(field(1, "p50_ns")?),
        p99: Duration::from_nanos(field(1, "p99_ns")?),
        p999: Duration::from_nanos(field(1, "p999_ns")?),
    })
}

fn parse_fields(line: &str) -> HashMap<String, u64> {
    line.split_whitespace()
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// The pairs of the guest made directly on `LockService`: what the
/// capability costs on top of the lock core.
async fn api_pairs(pairs: u32) -> anyhow::Result<Side> {
    let service = LockService::new(Engine::memory(), Limits::default());
    let options = lockd_core::LockOptions {
        durability: lockd_core::Durability::Ephemeral,
        ..Default::default()
    };
    let mut name = String::with_capacity(16);
    let mut lat = Latencies::with_capacity(pairs as usize);
    let mut untimed = Duration::ZERO;
    for timed in [false, true] {
        let start = Instant::now();
        let mut last = start;
        for i in 0..pairs {
            name.clear();
            let _ = write!(name, "p/{i}");
            let grant = service
                .lock("bench", &name, "bench", 60_000, options)
                .await?;
            service
                .unlock("bench", &name, "bench", Some(grant.fencing_token))
                .await?;
            if timed {
                let now = Instant::now();
                lat.record(now - last);
                last = now;
            }
        }
        if !timed {
            untimed = start.elapsed();
        }
    }
    Ok(Side {
        pairs_per_s: pairs as f64 / untimed.as_secs_f64(),
        p50: lat.quantile(0.5),
        p99: lat.quantile(0.99),
        p999: lat.quantile(0.999),
    })
}

/// The reference: the same pairs (fresh name, owner check on release) on a
/// `Mutex<HashMap<String, (String, u64)>>`, on this thread.
fn mutex_pairs(pairs: u32) -> Side {
    let map: Mutex<HashMap<String, (String, u64)>> = Mutex::new(HashMap::new());
    let owner = "bench";
    let mut name = String::with_capacity(16);
    let pair = |i: u32, name: &mut String| {
        name.clear();
        let _ = write!(name, "p/{i}");
        map.lock()
            .unwrap()
            .insert(name.clone(), (owner.to_string(), i as u64));
        let mut held = map.lock().unwrap();
        if held.get(name.as_str()).is_some_and(|(o, _)| o == owner) {
            held.remove(name.as_str());
        }
    };
    let start = Instant::now();
    for i in 0..pairs {
        pair(i, &mut name);
    }
    let untimed = start.elapsed();
    let mut lat = Latencies::with_capacity(pairs as usize);
    let mut last = Instant::now();
    for i in 0..pairs {
        pair(i, &mut name);
        let now = Instant::now();
        lat.record(now - last);
        last = now;
    }
    Side {
        pairs_per_s: pairs as f64 / untimed.as_secs_f64(),
        p50: lat.quantile(0.5),
        p99: lat.quantile(0.99),
        p999: lat.quantile(0.999),
    }
}
