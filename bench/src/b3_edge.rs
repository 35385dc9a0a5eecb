//! B3, edge: the benchmark HTTP function (`guest/edge-bench`, a Spin SDK
//! component served by lockd with a fresh instance per request) with a lock
//! per request, against the same function with no lock, driven open-loop at
//! fixed rates by our own load generator.
//!
//! Open loop (as wrk2 does it): request `k` of a run is due at `k / rate`
//! seconds, whether or not earlier answers came back, and its latency is
//! counted from when it was due, so a stall is not hidden by the generator
//! waiting for it. Requests are spread round-robin over keep-alive
//! connections. A rate is held when every request got a 200 and p99 ≤ 10 ms.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::rest::{Connection, Server};
use crate::stats::{count, latency, Latencies, Measured, Table};
use crate::Ctx;

const CONNECTIONS: usize = 64;
const P99_BOUND: Duration = Duration::from_millis(10);

pub fn run(ctx: &Ctx) -> anyhow::Result<String> {
    let dir = ctx.scratch.path().join("b3");
    std::fs::create_dir_all(&dir)?;
    let manifest = dir.join("spin.toml");
    std::fs::write(
        &manifest,
        format!(
            "spin_manifest_version = 2\n[application]\nname = \"bench\"\n\
             [[trigger.http]]\nroute = \"/bench/...\"\ncomponent = \"edge-bench\"\n\
             [component.edge-bench]\nsource = \"{}\"\nallowed_outbound_hosts = []\n",
            lockd_tests::EDGE_BENCH
        ),
    )?;
    let server = Server::start(dir.join("locks.redb"), Some(manifest))?;

    let mut table = Table::new([
        "function",
        "highest rate held (req/s)",
        "p50",
        "p99",
        "p99.9",
        "first rate missed",
    ]);
    let mut held_rates = Vec::new();
    let mut ladder = Table::new([
        "function",
        "offered req/s",
        "achieved req/s",
        "p50",
        "p99",
        "non-200",
    ]);
    for mode in ["nolock", "ephemeral", "persistent"] {
        eprintln!("B3: {mode}");
        // Warm up: instance pool, code, connections.
        ctx.rt.block_on(open_loop(
            server.addr,
            mode,
            500,
            Duration::from_millis(500),
        ))?;
        let mut best: Option<(u32, Measured)> = None;
        let mut missed = None;
        for &rate in &ctx.plan.b3_rates {
            let mut m = ctx
                .rt
                .block_on(open_loop(server.addr, mode, rate, ctx.plan.b3_step))?;
            let p99 = m.latencies.quantile(0.99);
            ladder.row(vec![
                mode.into(),
                count(rate as f64),
                count(m.rate()),
                latency(m.latencies.quantile(0.5)),
                latency(p99),
                m.errors.to_string(),
            ]);
            if m.errors == 0 && p99 <= P99_BOUND {
                best = Some((rate, m));
            } else {
                missed = Some(rate);
                break;
            }
        }
        let missed = missed.map_or("none tried".into(), |r| count(r as f64));
        let Some((rate, mut m)) = best else {
            let lowest = count(ctx.plan.b3_rates[0] as f64);
            let none = || "-".to_string();
            table.row(vec![
                format!("edge-bench, {mode}"),
                format!("< {lowest}"),
                none(),
                none(),
                none(),
                missed,
            ]);
            held_rates.push((mode, 0));
            continue;
        };
        table.row(vec![
            format!("edge-bench, {mode}"),
            count(rate as f64),
            latency(m.latencies.quantile(0.5)),
            latency(m.latencies.quantile(0.99)),
            latency(m.latencies.quantile(0.999)),
            missed,
        ]);
        held_rates.push((mode, rate));
    }
    drop(server);

    let mut out = format!(
        "## B3 edge ({CONNECTIONS} connections, open loop, {} s per rate)\n\n",
        ctx.plan.b3_step.as_secs_f64()
    );
    out += &table.render();
    let nolock = held_rates[0].1 as f64;
    out.push('\n');
    for (mode, rate) in &held_rates[1..] {
        let cost = if nolock > 0.0 {
            format!("{:.1}%", (1.0 - *rate as f64 / nolock) * 100.0)
        } else {
            "n/a".into()
        };
        let _ = writeln!(
            out,
            "- {mode} lock: holds {} req/s (goal ≥ 15,000 at p99 ≤ 10 ms); cost against no lock {cost} (goal ≤ 15%).",
            count(*rate as f64),
        );
    }
    out += "\nEvery rate tried:\n\n";
    out += &ladder.render();
    Ok(out)
}

/// Offers `rate` requests per second for `duration` and measures them
/// (B7 drives its edge functions with it too).
pub(crate) async fn open_loop(
    addr: SocketAddr,
    mode: &str,
    rate: u32,
    duration: Duration,
) -> anyhow::Result<Measured> {
    let total = (rate as f64 * duration.as_secs_f64()).round() as u64;
    let start = Instant::now() + Duration::from_millis(20);
    // Past this, a connection that fell hopelessly behind gives up on its
    // remaining requests, which count as failures.
    let give_up = start + duration + Duration::from_secs(2);
    let interval = 1.0 / rate as f64;
    let mut tasks = Vec::new();
    for c in 0..CONNECTIONS.min(total.max(1) as usize) {
        let mut conn = Connection::open(addr).await?;
        let path_prefix = format!("/bench/{mode}/c{c}-");
        tasks.push(tokio::spawn(async move {
            let mut lat = Latencies::with_capacity((total as usize / CONNECTIONS) + 1);
            let mut errors = 0u64;
            let mut k = c as u64;
            while k < total {
                let due = start + Duration::from_secs_f64(k as f64 * interval);
                if Instant::now() > give_up {
                    errors += (total - k).div_ceil(CONNECTIONS as u64);
                    break;
                }
                tokio::time::sleep_until(due.into()).await;
                match conn.send("GET", &format!("{path_prefix}{k}"), None).await {
                    Ok((200, _)) => lat.record(due.elapsed()),
                    other => {
                        if errors == 0 && c == 0 {
                            eprintln!("  first failure: {other:?}");
                        }
                        errors += 1;
                    }
                }
                k += CONNECTIONS as u64;
            }
            (lat, errors)
        }));
    }
    let mut m = Measured {
        ops: 0,
        errors: 0,
        elapsed: Duration::ZERO,
        latencies: Latencies::default(),
    };
    for task in tasks {
        let (lat, errors) = task.await?;
        m.ops += lat.len() as u64;
        m.errors += errors;
        m.latencies.merge(lat);
    }
    m.elapsed = start.elapsed();
    Ok(m)
}
