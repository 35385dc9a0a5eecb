//! B3, edge: the benchmark HTTP function (`guest/edge-bench`, a Spin SDK
//! component served by lockd with a fresh instance per request) with a lock
//! per request, against the same function with no lock, driven open-loop at
//! fixed rates by our own load generator.
//!
//! Open loop (as wrk2 does it): request `k` of a run is due at `k / rate`
//! seconds, whether or not earlier answers came back, and its latency is
//! counted from when it was due, so a stall is not hidden by the generator
//! waiting for it. Requests are spread round-robin over keep-alive
//! connections, each a thread that sleeps precisely until its next due time
//! (see [`open_loop`]). A rate is held when every request got a 200 and
//! p99 ≤ 10 ms; one bisection step refines the highest rate held. Then each
//! function closed loop on one connection, the shape of `wrk -t1 -c1`, for
//! the cross-check with wrk (docs/benchmarks.md), beside lockd's own
//! `/healthz` (the server's tail without a component), and closed loop on
//! all the connections, the shape of `wrk -c64`: the most the server answers,
//! from which a lock's cost is read too.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::cpu::CpuSplit;
use crate::drive::{closed_loop, Pair};
use crate::rest::{Connection, Server};
use crate::stats::{count, latency, percentiles, rate_row, Latencies, Measured, Table};
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
            lockd_guest_tests::EDGE_BENCH
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
        "send lateness p50 / p99",
        "non-200",
    ]);
    let mut closed = Table::new([
        "function",
        "req/s",
        "p50",
        "p99",
        "p99.9",
        "max",
        "p99 ÷ p50",
    ]);
    let mut saturated = Table::new([
        "function",
        "req/s",
        "p50",
        "p99",
        "p99.9",
        "server CPU per request",
        "client CPU per request",
    ]);
    let mut saturated_rates = Vec::new();
    let mut lowest_rate_p50 = Vec::new();
    let mut tails = Vec::new();
    // The control first: lockd's own `/healthz` on one connection.
    {
        let caller = ctx.rt.block_on(EdgeGet::healthz(server.addr))?;
        let mut m = ctx.rt.block_on(closed_loop(vec![caller], ctx.window()));
        crate::check_errors("B3 closed loop, /healthz", &m)?;
        let tail = closed_row(&mut closed, "REST `GET /healthz` (control)", &mut m);
        tails.push(("/healthz", tail));
    }
    for mode in ["nolock", "ephemeral", "persistent"] {
        eprintln!("B3: {mode}");
        // Warm up: instance pool, code, connections.
        open_loop(server.addr, mode, 500, Duration::from_millis(500))?;

        // Closed loop on one connection: what `wrk -t1 -c1` measures.
        let caller = ctx.rt.block_on(EdgeGet::connect(server.addr, mode, 0))?;
        let mut m = ctx.rt.block_on(closed_loop(vec![caller], ctx.window()));
        crate::check_errors(&format!("B3 closed loop, {mode}"), &m)?;
        let tail = closed_row(&mut closed, &format!("edge-bench, {mode}"), &mut m);
        tails.push((mode, tail));

        // Closed loop on all the connections: the most the server answers,
        // what `wrk -c64` measures.
        let callers = (0..CONNECTIONS)
            .map(|c| ctx.rt.block_on(EdgeGet::connect(server.addr, mode, c + 1)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut m = ctx.rt.block_on(closed_loop(callers, ctx.window()));
        crate::check_errors(
            &format!("B3 closed loop, {CONNECTIONS} connections, {mode}"),
            &m,
        )?;
        saturated.row(rate_row(format!("edge-bench, {mode}"), &mut m));
        saturated_rates.push((mode, m.rate()));

        let mut best: Option<(u32, Measured)> = None;
        let mut missed = None;
        let try_rate = |rate: u32, ladder: &mut Table| -> anyhow::Result<(bool, Measured)> {
            let (mut m, mut late) = open_loop_paced(server.addr, mode, rate, ctx.plan.b3_step)?;
            let p99 = m.latencies.quantile(0.99);
            ladder.row(vec![
                mode.into(),
                count(rate as f64),
                count(m.rate()),
                latency(m.latencies.quantile(0.5)),
                latency(p99),
                format!(
                    "{} / {}",
                    latency(late.quantile(0.5)),
                    latency(late.quantile(0.99))
                ),
                m.errors.to_string(),
            ]);
            Ok((m.errors == 0 && p99 <= P99_BOUND, m))
        };
        for (i, &rate) in ctx.plan.b3_rates.iter().enumerate() {
            let (held, mut m) = try_rate(rate, &mut ladder)?;
            if i == 0 {
                lowest_rate_p50.push((mode, rate, m.latencies.quantile(0.5)));
            }
            if held {
                best = Some((rate, m));
            } else {
                missed = Some(rate);
                break;
            }
        }
        // One bisection step between the last rate held and the first missed,
        // so that the ladder's coarse steps do not decide a lock's cost.
        if let (Some((low, _)), Some(high)) = (&best, missed) {
            let mid = ((*low + high) / 2).div_ceil(500) * 500;
            if mid > *low && mid < high {
                let (held, m) = try_rate(mid, &mut ladder)?;
                if held {
                    best = Some((mid, m));
                } else {
                    missed = Some(mid);
                }
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
        let [p50, p99, p999] = percentiles(&mut m);
        table.row(vec![
            format!("edge-bench, {mode}"),
            count(rate as f64),
            p50,
            p99,
            p999,
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
    for (mode, rate, p50) in &lowest_rate_p50 {
        let _ = writeln!(
            out,
            "- {mode}: p50 at {} req/s {} (goal ≤ 0.5 ms).",
            count(*rate as f64),
            latency(*p50)
        );
    }
    for ((mode, rate), goal) in held_rates[1..].iter().zip([10.0, 30.0]) {
        let cost = if nolock > 0.0 {
            let cost = (1.0 - *rate as f64 / nolock) * 100.0;
            let met = if cost <= goal { "met" } else { "not met" };
            format!("{cost:.1}% (goal ≤ {goal:.0}%: {met})")
        } else {
            "n/a".into()
        };
        let _ = writeln!(
            out,
            "- {mode} lock: holds {} req/s, {} of the no-lock rate; cost against no lock {cost}.",
            count(*rate as f64),
            crate::stats::ratio(*rate as f64, nolock),
        );
    }
    let _ = write!(
        out,
        "\nClosed loop, {CONNECTIONS} keep-alive connections (the most the server answers, what `wrk -c{CONNECTIONS}` measures; {} s warm-up, {} s measured):\n\n",
        ctx.window().warmup.as_secs_f64(),
        ctx.window().measure.as_secs_f64()
    );
    out += &saturated.render();
    out.push('\n');
    let saturated_nolock = saturated_rates[0].1;
    for ((mode, rate), goal) in saturated_rates[1..].iter().zip([10.0, 30.0]) {
        let cost = (1.0 - rate / saturated_nolock) * 100.0;
        let met = if cost <= goal { "met" } else { "not met" };
        let _ = writeln!(
            out,
            "- {mode} lock at {CONNECTIONS} connections: {} of the no-lock rate; cost {cost:.1}% (goal ≤ {goal:.0}%: {met}).",
            crate::stats::ratio(*rate, saturated_nolock),
        );
    }
    let _ = write!(
        out,
        "\nClosed loop, one keep-alive connection (what `wrk -t1 -c1 --latency` measures; {} s warm-up, {} s measured):\n\n",
        ctx.window().warmup.as_secs_f64(),
        ctx.window().measure.as_secs_f64()
    );
    out += &closed.render();
    out.push('\n');
    let control = tails[0].1;
    for (mode, tail) in &tails[1..] {
        let met = if *tail <= 2.0 { "met" } else { "not met" };
        let _ = writeln!(
            out,
            "- {mode}: p99 ÷ p50 {tail:.1}× (goal ≤ 2×: {met}); the server's own floor in this run, `/healthz`: {control:.1}×.",
        );
    }
    out += "\nEvery rate tried (send lateness: how late the generator sent against the due times, its own error; the last row of a function may be a bisection step):\n\n";
    out += &ladder.render();
    Ok(out)
}

/// Adds a closed-loop run's row to `table`; returns its p99 ÷ p50.
fn closed_row(table: &mut Table, what: &str, m: &mut Measured) -> f64 {
    let p50 = m.latencies.quantile(0.5);
    let p99 = m.latencies.quantile(0.99);
    let [p50s, p99s, p999s] = percentiles(m);
    let tail = p99.as_secs_f64() / p50.as_secs_f64().max(1e-9);
    table.row(vec![
        what.to_string(),
        count(m.rate()),
        p50s,
        p99s,
        p999s,
        latency(m.latencies.quantile(1.0)),
        format!("{tail:.1}×"),
    ]);
    tail
}

/// One keep-alive connection GETting the function, a fresh id per request:
/// B3's closed-loop caller.
struct EdgeGet {
    conn: Connection,
    prefix: String,
    /// GET `prefix` itself, with no id (the REST control, `/healthz`).
    fixed: bool,
}

impl EdgeGet {
    /// A caller of the function in `mode`; `tag` keeps its ids apart from
    /// those of the other connections.
    async fn connect(addr: SocketAddr, mode: &str, tag: usize) -> anyhow::Result<EdgeGet> {
        Ok(EdgeGet {
            conn: Connection::open(addr).await?,
            prefix: format!("/bench/{mode}/closed-{tag}-"),
            fixed: false,
        })
    }

    /// A caller of lockd's own `/healthz`: the same server and connection
    /// handling with no component, so its tail is the machine's and the
    /// server's, not the function's.
    async fn healthz(addr: SocketAddr) -> anyhow::Result<EdgeGet> {
        Ok(EdgeGet {
            conn: Connection::open(addr).await?,
            prefix: "/healthz".into(),
            fixed: true,
        })
    }
}

impl Pair for EdgeGet {
    async fn pair(&mut self, i: u64) -> anyhow::Result<()> {
        let path = if self.fixed {
            self.prefix.clone()
        } else {
            format!("{}{i}", self.prefix)
        };
        let (status, body) = self.conn.send("GET", &path, None).await?;
        anyhow::ensure!(
            status == 200,
            "answered {status}: {}",
            String::from_utf8_lossy(&body)
        );
        Ok(())
    }
}

/// Below this interval between requests (rates above 2,000 req/s), the
/// pacer only sleeps; at or above it, it spins the last [`SPIN`] before each
/// due time, where a few tens of microseconds of wake-up lateness would show
/// against a ~0.2 ms answer.
const SPIN_FROM_INTERVAL: Duration = Duration::from_micros(500);
const SPIN: Duration = Duration::from_micros(60);

/// Offers `rate` requests per second for `duration` and measures them
/// (B7 drives its edge functions with it too).
///
/// Each of the connections is a thread of its own with a current-thread
/// runtime: it sleeps (`nanosleep`, its timer slack set to 1 ns) until its
/// next request is due, sends it, and reads the answer on the same thread,
/// so no timer wheel (tokio's has 1 ms ticks) and no cross-thread wake-up
/// stands between the due time and the send. Latency counts from the due
/// time (coordinated-omission-correct, as wrk2): a request whose connection
/// is still busy waits, and that wait is in its figure. How late the sends
/// left against their due times is returned too (the generator's own error).
pub(crate) fn open_loop(
    addr: SocketAddr,
    mode: &str,
    rate: u32,
    duration: Duration,
) -> anyhow::Result<Measured> {
    Ok(open_loop_paced(addr, mode, rate, duration)?.0)
}

/// [`open_loop`], and the lateness of the sends against their due times.
pub(crate) fn open_loop_paced(
    addr: SocketAddr,
    mode: &str,
    rate: u32,
    duration: Duration,
) -> anyhow::Result<(Measured, Latencies)> {
    let total = (rate as f64 * duration.as_secs_f64()).round() as u64;
    let connections = CONNECTIONS.min(total.max(1) as usize);
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let spin = if interval >= SPIN_FROM_INTERVAL {
        SPIN
    } else {
        Duration::ZERO
    };
    // Every thread connects first, then all wait at the barrier; the first
    // request is due a little after the last of them is ready. (A fixed
    // head start was too short for 64 threads on 2 cores: the first
    // requests went out tens of milliseconds late and set the p99.)
    let ready = std::sync::Arc::new(std::sync::Barrier::new(connections + 1));
    let start_at = std::sync::Arc::new(std::sync::OnceLock::<Instant>::new());
    let mut threads = Vec::with_capacity(connections);
    for c in 0..connections {
        let path_prefix = format!("/bench/{mode}/c{c}-");
        let (ready, start_at) = (ready.clone(), start_at.clone());
        let thread = std::thread::Builder::new()
            .name(format!("b3-conn-{c}"))
            .spawn(move || -> anyhow::Result<(Latencies, Latencies, u64)> {
                precise_timer_slack();
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                let conn = rt.block_on(Connection::open(addr));
                ready.wait();
                let mut conn = conn?;
                let start = *start_at.wait();
                // Past this, a connection that fell hopelessly behind gives
                // up on its remaining requests, which count as failures.
                let give_up = start + duration + Duration::from_secs(2);
                let share = (total as usize / connections) + 1;
                let mut lat = Latencies::with_capacity(share);
                let mut late = Latencies::with_capacity(share);
                let mut errors = 0u64;
                let mut k = c as u64;
                while k < total {
                    let due = start + interval.mul_f64(k as f64);
                    if Instant::now() > give_up {
                        errors += (total - k).div_ceil(connections as u64);
                        break;
                    }
                    sleep_until(due, spin);
                    late.record(Instant::now().saturating_duration_since(due));
                    match rt.block_on(conn.send("GET", &format!("{path_prefix}{k}"), None)) {
                        Ok((200, _)) => lat.record(due.elapsed()),
                        other => {
                            if errors == 0 && c == 0 {
                                eprintln!("  first failure: {other:?}");
                            }
                            errors += 1;
                        }
                    }
                    k += connections as u64;
                }
                Ok((lat, late, errors))
            })?;
        threads.push(thread);
    }
    ready.wait();
    let start = Instant::now() + Duration::from_millis(20);
    let _ = start_at.set(start);
    let mut m = Measured {
        ops: 0,
        errors: 0,
        elapsed: Duration::ZERO,
        latencies: Latencies::default(),
        cpu: CpuSplit::default(),
    };
    let mut lateness = Latencies::default();
    for thread in threads {
        let (lat, late, errors) = thread
            .join()
            .map_err(|_| anyhow::anyhow!("a connection thread panicked"))??;
        m.ops += lat.len() as u64;
        m.errors += errors;
        m.latencies.merge(lat);
        lateness.merge(late);
    }
    m.elapsed = start.elapsed();
    Ok((m, lateness))
}

/// Sleeps until `due`: `nanosleep` to within `spin` of it, then spins.
fn sleep_until(due: Instant, spin: Duration) {
    let now = Instant::now();
    if due <= now {
        return;
    }
    let left = due - now;
    if left > spin {
        std::thread::sleep(left - spin);
    }
    while Instant::now() < due {
        std::hint::spin_loop();
    }
}

/// Linux lets a thread's sleeps end up to its timer slack (50 µs by default)
/// late; this thread asks for 1 ns. Best effort: elsewhere, or without
/// `/proc`, sleeps stay as they are (and the lateness the generator reports
/// shows it).
fn precise_timer_slack() {
    let Ok(link) = std::fs::read_link("/proc/thread-self") else {
        return;
    };
    // `PID/task/TID`; a thread's own slack is at /proc/TID/timerslack_ns.
    if let Some(tid) = link.file_name() {
        let path = std::path::Path::new("/proc")
            .join(tid)
            .join("timerslack_ns");
        let _ = std::fs::write(path, "1");
    }
}
