//! Closed-loop drivers: N callers, each doing acquire + release pairs back
//! to back, with every pair timed.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cpu::{CpuSplit, Snapshot};
use crate::stats::{Latencies, Measured};

/// How long a closed-loop run warms up and then measures.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub warmup: Duration,
    pub measure: Duration,
}

/// One caller's acquire + release. `i` counts the caller's pairs, so a
/// caller can use a fresh name each time.
pub trait Pair: Send + 'static {
    fn pair(&mut self, i: u64) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// Runs every caller concurrently on the current runtime for `window`.
/// Pairs that end inside the measuring window count; a failed pair counts
/// as an error (the first one is printed) and the caller goes on.
pub async fn closed_loop<P: Pair>(callers: Vec<P>, window: Window) -> Measured {
    let start = Instant::now() + Duration::from_millis(5);
    let measure_from = start + window.warmup;
    let stop_at = measure_from + window.measure;
    let reported = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = callers
        .into_iter()
        .map(|mut caller| {
            let reported = reported.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(start.into()).await;
                let mut latencies = Latencies::with_capacity(1 << 16);
                let (mut ops, mut errors) = (0u64, 0u64);
                let mut i = 0u64;
                loop {
                    let began = Instant::now();
                    if began >= stop_at {
                        break;
                    }
                    let result = caller.pair(i).await;
                    i += 1;
                    let ended = Instant::now();
                    if began < measure_from {
                        continue;
                    }
                    match result {
                        Ok(()) => {
                            ops += 1;
                            latencies.record(ended - began);
                        }
                        Err(e) => {
                            errors += 1;
                            if !reported.swap(true, Ordering::Relaxed) {
                                eprintln!("  first error: {e:#}");
                            }
                        }
                    }
                }
                (ops, errors, latencies)
            })
        })
        .collect();
    // Blocking reads of /proc, a few milliseconds at each end of the window.
    let cpu = tokio::spawn(async move {
        tokio::time::sleep_until(measure_from.into()).await;
        let first = Snapshot::take();
        tokio::time::sleep_until(stop_at.into()).await;
        Snapshot::take().since(&first)
    });
    let mut total = Measured {
        ops: 0,
        errors: 0,
        elapsed: Duration::ZERO,
        latencies: Latencies::default(),
        cpu: CpuSplit::default(),
    };
    for task in tasks {
        let (ops, errors, latencies) = task.await.expect("a caller panicked");
        total.ops += ops;
        total.errors += errors;
        total.latencies.merge(latencies);
    }
    // Callers stop starting pairs at `stop_at`; the last ones end a little
    // after it, and that tail is part of the measured time.
    total.elapsed = Instant::now().saturating_duration_since(measure_from);
    total.cpu = cpu.await.expect("the CPU sampler panicked");
    total
}
