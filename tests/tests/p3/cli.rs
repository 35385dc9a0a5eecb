//! `guest/rust-p3-cli` and `guest/python-p3`, WASI 0.3 commands
//! (`wasi:cli/run@0.3.0`) on `lockd:lock@0.2.0`, run as `lockd run` runs
//! them (`lockd_components::run`, which picks the engine with component-model async for
//! them): one task awaits a lock the host holds for [`WAIT`] while another
//! ticks every 20 ms on WASI 0.3's clock. The negative control runs the
//! Rust command's wait through 0.1.0's synchronous `lock`, which stops the
//! ticker for the whole wait.

use std::time::{Duration, Instant};

use lockd_core::LockOptions;

use super::{service, NAMESPACE};
use crate::common::{run_guest, text};

/// How long the host holds the lock the command waits for.
const WAIT: Duration = Duration::from_millis(1_500);

/// What the command printed: its token, when it was granted, and the
/// longest gap between two ticks.
#[derive(Debug)]
struct Waited {
    token: u64,
    granted_after: Duration,
    ticks: u32,
    longest_gap: Duration,
}

/// Runs the command `guest` with `args` (the lock's name first) while the
/// host holds that lock, for [`WAIT`] after the command starts waiting.
async fn wait_while_held(guest: &str, args: &[&str]) -> Waited {
    let name = args[0];
    let service = service();
    let held = service
        .lock(NAMESPACE, name, "host", 60_000, LockOptions::default())
        .await
        .unwrap();
    let releaser = {
        let service = service.clone();
        let name = name.to_string();
        // Held for WAIT from when the command waits (compiling and starting
        // it comes first).
        tokio::spawn(async move {
            // Compiling a 21 MB Python component shares wasmtime's compile
            // threads with the other tests' compiles: generous.
            let deadline = Instant::now() + Duration::from_secs(180);
            while service.describe(NAMESPACE, &name).await.unwrap().waiters == 0 {
                assert!(Instant::now() < deadline, "the command never waited");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            tokio::time::sleep(WAIT).await;
            service
                .unlock(NAMESPACE, &name, "host", None)
                .await
                .unwrap();
        })
    };
    let started = Instant::now();
    let outcome = run_guest(guest, &service, NAMESPACE, args).await;
    let took = started.elapsed();
    releaser.await.unwrap();
    let stdout = text(&outcome.stdout);
    assert_eq!(
        outcome.exit_code,
        0,
        "{stdout}{}{:?}",
        text(&outcome.stderr),
        outcome.trap
    );
    let numbers: Vec<u64> = stdout
        .split(|c: char| !c.is_ascii_digit())
        .filter(|word| !word.is_empty())
        .map(|word| word.parse().unwrap())
        .collect();
    let [token, granted_ms, ticks, gap_ms] = numbers[..] else {
        panic!("unexpected output: {stdout}");
    };
    let waited = Waited {
        token,
        granted_after: Duration::from_millis(granted_ms),
        ticks: ticks as u32,
        longest_gap: Duration::from_millis(gap_ms),
    };
    eprintln!("{args:?}: {waited:?} (run took {took:?})");
    assert!(
        waited.token > held.fencing_token,
        "{waited:?} after {held:?}"
    );
    assert!(
        waited.granted_after >= WAIT - Duration::from_millis(100),
        "{waited:?}"
    );
    // Released by the command: nobody holds it now.
    assert_eq!(service.get(NAMESPACE, name).await.unwrap(), None);
    waited
}

/// While the command's awaited lock waits 1.5 s, its ticker keeps ticking:
/// no gap near the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn rust_p3_cli() {
    let waited = wait_while_held(lockd_guest_tests::RUST_P3_CLI, &["cli-async", "async"]).await;
    assert!(
        waited.longest_gap < WAIT / 3,
        "the ticker stalled: {waited:?}"
    );
    assert!(waited.ticks >= 20, "{waited:?}");
}

/// The negative control: the same measurement sees 0.1.0's synchronous
/// wait stop the instance (the ticker's gap spans the wait).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synchronous_wait_stops_the_commands_other_task() {
    let waited = wait_while_held(lockd_guest_tests::RUST_P3_CLI, &["cli-sync", "sync"]).await;
    assert!(
        waited.longest_gap >= WAIT - Duration::from_millis(300),
        "the ticker ran while the synchronous lock waited: {waited:?}"
    );
}

/// The Python command (componentize-py's asyncio loop on the component
/// model's): the same wait, the same ticker, no stall.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn python_p3() {
    let waited = wait_while_held(lockd_guest_tests::PYTHON_P3, &["py-async"]).await;
    assert!(
        waited.longest_gap < WAIT / 3,
        "the ticker stalled: {waited:?}"
    );
    assert!(waited.ticks >= 20, "{waited:?}");
}
