//! The guest of benchmark B1 (host-call cost): `lock` + `unlock` pairs on
//! distinct names, ephemeral, no waiting, as fast as the capability allows.
//!
//! Usage: `bench-pairs <pairs> [timed]`. Prints one line,
//! `pairs=<n> elapsed_ns=<t>`, measured with the monotonic clock around the
//! whole loop. With `timed`, each pair is timed too (one extra clock call
//! per pair) and the line goes on with `p50_ns=.. p99_ns=.. p999_ns=..
//! max_ns=..`. Any lock error prints `FAIL <pair>: <error>` and exits 1.

use std::fmt::Write as _;
use std::process::exit;
use std::time::{Duration, Instant};

use lockd_guest::{lock, unlock, LockOptions};

const OWNER: &str = "bench";
const TTL: Duration = Duration::from_secs(60);

fn main() {
    let mut args = std::env::args().skip(1);
    let pairs: u32 = match args.next().map(|n| n.parse()) {
        Some(Ok(n)) => n,
        _ => {
            eprintln!("usage: bench-pairs <pairs> [timed]");
            exit(2);
        }
    };
    let timed = args.next().as_deref() == Some("timed"); // anything else: untimed

    // One name buffer, rewritten per pair: the guest's own allocations
    // should not dominate what is measured.
    let mut name = String::with_capacity(16);
    let mut latencies: Vec<u32> = Vec::with_capacity(if timed { pairs as usize } else { 0 });
    let start = Instant::now();
    let mut last = start;
    for i in 0..pairs {
        name.clear();
        let _ = write!(name, "p/{i}");
        let pair = lock(&name, OWNER, TTL, LockOptions::ephemeral())
            .and_then(|grant| unlock(&name, OWNER, Some(grant.fencing_token)));
        if let Err(e) = pair {
            println!("FAIL {i}: {e}");
            exit(1);
        }
        if timed {
            let now = Instant::now();
            latencies.push((now - last).as_nanos().min(u32::MAX as u128) as u32);
            last = now;
        }
    }
    let elapsed = start.elapsed().as_nanos();

    let mut line = format!("pairs={pairs} elapsed_ns={elapsed}");
    if timed && !latencies.is_empty() {
        latencies.sort_unstable();
        let at =
            |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
        let _ = write!(
            line,
            " p50_ns={} p99_ns={} p999_ns={} max_ns={}",
            at(0.50),
            at(0.99),
            at(0.999),
            latencies[latencies.len() - 1]
        );
    }
    println!("{line}");
}
