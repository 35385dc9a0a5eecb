//! How long lock calls wait while a snapshot is taken.
//!
//! Fills a store with 100 000 persistent locks, then runs 16 clients that
//! each lock and unlock their own persistent name in a loop, and measures
//! each lock call: for a quiet window first, then while `snapshot::save_to`
//! runs. Prints the latencies of both windows, the snapshot's report, and
//! how long a restore, a check and a reopen of the stopped store take.
//!
//! `cargo run --release -p lockd-redb --example snapshot_pause [dir] [locks]`
//! (the directory defaults to a fresh one under TMPDIR).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockd_core::{Limits, LockOptions, LockService};
use lockd_redb::snapshot::{self, RestoreOptions};
use lockd_redb::Store;

type Calls = Arc<Mutex<Vec<(Instant, Duration)>>>;

fn main() {
    let mut args = std::env::args().skip(1);
    let scratch = tempfile::tempdir().unwrap();
    let dir = args
        .next()
        .map_or_else(|| scratch.path().to_path_buf(), Into::into);
    let locks: usize = args.next().map_or(100_000, |n| n.parse().unwrap());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let path = dir.join("pause.redb");
    let file = dir.join("pause.lockd");
    runtime.block_on(measure(&path, &file, locks));
    drop(runtime);
    let restored = dir.join("restored.redb");
    let started = Instant::now();
    let report = snapshot::restore(&file, &restored, RestoreOptions::default()).unwrap();
    println!("restore: {:.0?}\n{report}", started.elapsed());
    let started = Instant::now();
    let check = lockd_redb::check(&path).unwrap();
    println!(
        "check of the stopped store: {:.0?}\n{check}",
        started.elapsed()
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let started = Instant::now();
    let engine = runtime.block_on(async { lockd_redb::open(&path).unwrap() });
    println!(
        "reopen (recovery of {locks} locks): {:.0?}",
        started.elapsed()
    );
    drop(engine);
    drop(runtime);
    let started = Instant::now();
    let mut db = redb::Database::open(&restored).unwrap();
    let opened = started.elapsed();
    let intact = db.check_integrity().unwrap();
    println!(
        "redb's integrity check of the restored store: {:.0?} (open {opened:.0?}), intact {intact}",
        started.elapsed() - opened
    );
}

async fn measure(path: &std::path::Path, file: &std::path::Path, locks: usize) {
    let store = Store::open(path).unwrap();
    let service = LockService::new(store.engine().clone(), Limits::default());
    fill(&service, locks).await;
    let calls: Calls = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..16)
        .map(|c| {
            let (service, calls, stop) = (service.clone(), calls.clone(), stop.clone());
            tokio::spawn(async move {
                let name = format!("client-{c}");
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    service
                        .lock("load", &name, "o", 60_000, LockOptions::default())
                        .await
                        .unwrap();
                    calls.lock().unwrap().push((started, started.elapsed()));
                    service.unlock("load", &name, "o", None).await.unwrap();
                }
            })
        })
        .collect();
    let quiet_from = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let snapshot_from = Instant::now();
    let (saving, to) = (store.clone(), file.to_path_buf());
    let report = tokio::task::spawn_blocking(move || snapshot::save_to(&saving, &to))
        .await
        .unwrap()
        .unwrap();
    let snapshot_to = Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await.unwrap();
    }
    let calls = calls.lock().unwrap().clone();
    println!("{report}");
    summary("quiet, 3 s", &calls, quiet_from, snapshot_from);
    summary(
        &format!(
            "while the snapshot ran ({:.0?})",
            snapshot_to - snapshot_from
        ),
        &calls,
        snapshot_from,
        snapshot_to,
    );
}

/// Grants `locks` persistent locks, 256 at a time.
async fn fill(service: &LockService, locks: usize) {
    let started = Instant::now();
    let tasks: Vec<_> = (0..256)
        .map(|t| {
            let service = service.clone();
            tokio::spawn(async move {
                for i in (t..locks).step_by(256) {
                    service
                        .lock(
                            "fill",
                            &format!("lock-{i}"),
                            "o",
                            3_600_000,
                            LockOptions::default(),
                        )
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    println!(
        "filled {locks} persistent locks in {:.1?}",
        started.elapsed()
    );
}

/// The lock calls that were waiting at some moment in `[from, to)`.
fn summary(window: &str, calls: &[(Instant, Duration)], from: Instant, to: Instant) {
    let mut waits: Vec<Duration> = calls
        .iter()
        .filter(|(started, took)| *started < to && *started + *took >= from)
        .map(|(_, took)| *took)
        .collect();
    waits.sort();
    let at = |q: f64| waits[((waits.len() - 1) as f64 * q) as usize];
    println!(
        "{window}: {} lock calls, median {:.2?}, p99 {:.2?}, p99.9 {:.2?}, longest {:.2?}",
        waits.len(),
        at(0.5),
        at(0.99),
        at(0.999),
        waits.last().unwrap()
    );
}
