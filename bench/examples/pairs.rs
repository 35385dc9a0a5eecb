//! B1's pairs, one path at a time, for profiling with instruction counts
//! (docs/benchmarks.md, "Why, from the profiles"):
//!
//! ```text
//! cargo build --release -p lockd-bench --example pairs
//! valgrind --tool=callgrind target/release/examples/pairs service 200000
//! ```
//!
//! `pairs <service|wasm|mutex> <pairs>` does `pairs` ephemeral lock + unlock
//! pairs on fresh names, as B1 does: on `LockService` over the memory
//! engine, through the wasm capability (`guest/bench-pairs`), or on a
//! `Mutex<HashMap>`. Instructions per pair are the difference between two
//! runs of different sizes divided by the difference in pairs, so setup
//! (the runtime, compiling and instantiating the guest) cancels out; for a
//! profile of the wasm path without the compiler, collect only inside
//! `run_component` (`--toggle-collect='lockd_components::run::run_component*'`).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, Context as _};
use lockd_components::run::{self, Output, RunConfig, RunLimits};
use lockd_core::{Durability, Engine, Limits, LockOptions, LockService};

/// The suite's allocator, so that allocation costs what it costs in B1.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(path), Some(pairs)) = (args.next(), args.next()) else {
        bail!("usage: pairs <service|wasm|mutex> <pairs>");
    };
    let pairs: u32 = pairs
        .parse()
        .with_context(|| format!("pairs must be a number, not {pairs:?}"))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let started = Instant::now();
    match path.as_str() {
        "service" => rt.block_on(service_pairs(pairs))?,
        "wasm" => rt.block_on(wasm_pairs(pairs))?,
        "mutex" => mutex_pairs(pairs),
        other => bail!("unknown path {other:?}: give service, wasm or mutex"),
    }
    let elapsed = started.elapsed();
    println!(
        "{path}: {pairs} pairs in {elapsed:?} ({:.0} ns per pair, setup included)",
        elapsed.as_nanos() as f64 / f64::from(pairs.max(1))
    );
    Ok(())
}

async fn service_pairs(pairs: u32) -> anyhow::Result<()> {
    let service = LockService::new(Engine::memory(), Limits::default());
    let options = LockOptions {
        durability: Durability::Ephemeral,
        ..Default::default()
    };
    let mut name = String::with_capacity(16);
    for i in 0..pairs {
        name.clear();
        let _ = write!(name, "p/{i}");
        let grant = service
            .lock("bench", &name, "bench", 60_000, options)
            .await?;
        service
            .unlock("bench", &name, "bench", Some(grant.fencing_token))
            .await?;
    }
    Ok(())
}

async fn wasm_pairs(pairs: u32) -> anyhow::Result<()> {
    let engine = run::engine()?;
    let component = run::load(&engine, lockd_guest_tests::BENCH_PAIRS.as_ref())?;
    let service = LockService::new(Engine::memory(), Limits::default());
    let config = RunConfig {
        namespace: "bench".into(),
        args: vec!["bench-pairs".into(), pairs.to_string(), "untimed".into()],
        output: Output::Capture,
        limits: RunLimits::default(),
    };
    let outcome = run::run_component(&engine, &component, service, config).await?;
    if outcome.exit_code != 0 {
        bail!(
            "bench-pairs exited {}: {}",
            outcome.exit_code,
            String::from_utf8_lossy(&outcome.stdout)
        );
    }
    Ok(())
}

fn mutex_pairs(pairs: u32) {
    let map: Mutex<HashMap<String, (String, u64)>> = Mutex::new(HashMap::new());
    let owner = "bench";
    let mut name = String::with_capacity(16);
    for i in 0..pairs {
        name.clear();
        let _ = write!(name, "p/{i}");
        map.lock()
            .unwrap()
            .insert(name.clone(), (owner.to_string(), u64::from(i)));
        let mut held = map.lock().unwrap();
        if held.get(name.as_str()).is_some_and(|(o, _)| o == owner) {
            held.remove(name.as_str());
        }
    }
    std::hint::black_box(&map);
}
