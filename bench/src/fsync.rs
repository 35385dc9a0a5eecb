//! Which fsync regime the disk is in. On this machine kind, fdatasync takes
//! about 124 µs most of the time and slows to about 2.8 ms (360/s) in some
//! periods; durable figures only mean something next to the regime they were
//! measured in, and next to peers measured in the same run.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::stats::{latency, Latencies};

/// The outcome of a probe.
#[derive(Clone, Debug)]
pub struct Regime {
    pub p50: Duration,
    pub p99: Duration,
    pub per_second: f64,
}

impl Regime {
    /// `fast` below 400 µs at the median (the fast regime measures about
    /// 124 µs, the slow one milliseconds).
    pub fn name(&self) -> &'static str {
        if self.p50 < Duration::from_micros(400) {
            "fast"
        } else {
            "slow"
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "{} (4 KiB write + fdatasync: p50 {}, p99 {}, {:.0}/s)",
            self.name(),
            latency(self.p50),
            latency(self.p99),
            self.per_second
        )
    }
}

/// Appends 4 KiB and fdatasyncs, `rounds` times, in a file under `dir`.
pub fn probe(dir: &Path, rounds: usize) -> std::io::Result<Regime> {
    let path = dir.join("fsync-probe");
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)?;
    let block = [0x5au8; 4096];
    let mut lat = Latencies::with_capacity(rounds);
    let start = Instant::now();
    for _ in 0..rounds {
        let t = Instant::now();
        file.write_all(&block)?;
        file.sync_data()?;
        lat.record(t.elapsed());
    }
    let elapsed = start.elapsed();
    drop(file);
    let _ = std::fs::remove_file(&path);
    Ok(Regime {
        p50: lat.quantile(0.5),
        p99: lat.quantile(0.99),
        per_second: rounds as f64 / elapsed.as_secs_f64(),
    })
}
