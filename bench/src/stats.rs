//! Latencies, throughput and the markdown tables the suite prints.

use std::fmt::Write as _;
use std::time::Duration;

use crate::cpu::CpuSplit;

/// Latencies of one run, in nanoseconds.
#[derive(Clone, Debug, Default)]
pub struct Latencies {
    samples: Vec<u64>,
    sorted: bool,
}

impl Latencies {
    pub fn with_capacity(n: usize) -> Self {
        Latencies {
            samples: Vec::with_capacity(n),
            sorted: false,
        }
    }

    pub fn record(&mut self, latency: Duration) {
        self.samples
            .push(latency.as_nanos().min(u64::MAX as u128) as u64);
        self.sorted = false;
    }

    pub fn merge(&mut self, other: Latencies) {
        self.samples.extend(other.samples);
        self.sorted = false;
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// The latency below which a fraction `q` of the samples fall.
    pub fn quantile(&mut self, q: f64) -> Duration {
        if self.samples.is_empty() {
            return Duration::ZERO;
        }
        if !self.sorted {
            self.samples.sort_unstable();
            self.sorted = true;
        }
        let i = ((self.samples.len() as f64 * q).ceil() as usize).clamp(1, self.samples.len()) - 1;
        Duration::from_nanos(self.samples[i])
    }
}

/// One measured line: `ops` operations (pairs, requests) in `elapsed`.
#[derive(Clone, Debug)]
pub struct Measured {
    pub ops: u64,
    pub errors: u64,
    pub elapsed: Duration,
    pub latencies: Latencies,
    /// CPU spent over the measured window, where the run took it (closed
    /// loops do; zero otherwise).
    pub cpu: CpuSplit,
}

impl Measured {
    pub fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// A markdown table built row by row.
#[derive(Debug)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<const N: usize>(header: [&str; N]) -> Self {
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.header.len());
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        out += &line(&self.header);
        let _ = writeln!(out, "|{}", "---|".repeat(self.header.len()));
        for row in &self.rows {
            out += &line(row);
        }
        out
    }
}

/// `12,345` style.
pub fn count(n: f64) -> String {
    let n = n.round() as u64;
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A closed-loop run's row: `label`, its rate, p50, p99 and p99.9, and the
/// CPU per operation of each side.
pub fn rate_row(label: String, m: &mut Measured) -> Vec<String> {
    let [p50, p99, p999] = percentiles(m);
    let [server_cpu, client_cpu] = cpu_per_op(m);
    vec![
        label,
        count(m.rate()),
        p50,
        p99,
        p999,
        server_cpu,
        client_cpu,
    ]
}

/// The CPU a measured run spent per operation, server side and client
/// side, as two table cells (see [`crate::cpu`]).
pub fn cpu_per_op(m: &Measured) -> [String; 2] {
    let (server, client) = m.cpu.per_op_us(m.ops);
    [format!("{server:.1} µs"), format!("{client:.1} µs")]
}

/// A latency with a unit that keeps three significant figures.
pub fn latency(d: Duration) -> String {
    let ns = d.as_nanos() as f64;
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        let us = format!("{:.3}", ns / 1e3);
        format!("{} µs", us.trim_end_matches('0').trim_end_matches('.'))
    } else {
        format!("{:.2} ms", ns / 1e6)
    }
}

/// `2.3×`.
pub fn ratio(ours: f64, theirs: f64) -> String {
    if theirs <= 0.0 {
        return "n/a".into();
    }
    format!("{:.2}×", ours / theirs)
}

/// The p50 / p99 / p99.9 cells of a run.
pub fn percentiles(m: &mut Measured) -> [String; 3] {
    [
        latency(m.latencies.quantile(0.50)),
        latency(m.latencies.quantile(0.99)),
        latency(m.latencies.quantile(0.999)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_pick_the_right_sample() {
        let mut l = Latencies::default();
        for ns in (1..=1000).rev() {
            l.record(Duration::from_nanos(ns));
        }
        assert_eq!(l.quantile(0.5), Duration::from_nanos(500));
        assert_eq!(l.quantile(0.99), Duration::from_nanos(990));
        assert_eq!(l.quantile(0.999), Duration::from_nanos(999));
        assert_eq!(l.quantile(1.0), Duration::from_nanos(1000));
    }

    #[test]
    fn formats() {
        assert_eq!(count(1234567.4), "1,234,567");
        assert_eq!(count(12.0), "12");
        assert_eq!(latency(Duration::from_nanos(165)), "165 ns");
        assert_eq!(latency(Duration::from_nanos(124_500)), "124.5 µs");
        assert_eq!(latency(Duration::from_micros(2_340)), "2.34 ms");
        assert_eq!(ratio(3.0, 2.0), "1.50×");
        let mut t = Table::new(["a", "b"]);
        t.row(vec!["1".into(), "2".into()]);
        assert_eq!(t.render(), "| a | b |\n|---|---|\n| 1 | 2 |\n");
    }
}
