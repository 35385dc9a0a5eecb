//! A WASI 0.3 command (`wasi:cli/run@0.3.0`, an `async func`) on
//! `lockd:lock@0.2.0`, for `lockd run`: `run` polls two tasks at once.
//! One waits for a lock; the
//! other ticks every 20 ms on WASI 0.3's monotonic clock (an `async func`)
//! until the wait ends, and notes the longest gap between its ticks. With
//! 0.2.0's awaited `lock` the ticker keeps ticking; with 0.1.0's
//! synchronous `lock` (`sync`) the whole instance stops until the grant,
//! and the gap shows it.
//!
//! Usage: `rust-p3-cli NAME async|sync`. Locks NAME as owner `cli` for
//! 60 s, waiting up to 30 s, then unlocks it, and prints
//! `granted TOKEN after MS ms; TICKS ticks, longest gap GAP ms`. A failed
//! lock prints `FAIL NAME: ERROR` and exits 1.

mod bindings {
    wit_bindgen::generate!({
        path: [
            "../wit-p3-command/deps/wasi-clocks/clocks.wit",
            "../wit-p3-command/deps/wasi-cli/cli.wit",
            "wit/cli.wit",
        ],
        world: "lockd:p3-cli/cli",
        generate_all,
    });
}

use std::cell::Cell;
use std::future::Future;
use std::pin::pin;
use std::process::exit;
use std::task::Poll;
use std::time::{Duration, Instant};

use bindings::wasi::clocks::monotonic_clock;
use lockd_guest::{p3, LockOptions};

const TICK: Duration = Duration::from_millis(20);

struct Cli;

bindings::export!(Cli with_types_in bindings);

impl bindings::exports::wasi::cli::run::Guest for Cli {
    async fn run() -> Result<(), ()> {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let (name, sync) = match args.as_slice() {
            [name, mode] if mode == "async" => (name.clone(), false),
            [name, mode] if mode == "sync" => (name.clone(), true),
            _ => {
                eprintln!("usage: rust-p3-cli NAME async|sync");
                exit(2);
            }
        };
        let started = Instant::now();
        let done = Cell::new(false);
        let (granted, (ticks, gap)) = both(
            async {
                let granted = wait_for(&name, sync).await;
                done.set(true);
                granted
            },
            ticker(started, &done),
        )
        .await;
        match granted {
            Ok(token) => {
                println!(
                    "granted {token} after {} ms; {ticks} ticks, longest gap {} ms",
                    started.elapsed().as_millis(),
                    gap.as_millis()
                );
                Ok(())
            }
            Err(e) => {
                println!("FAIL {name}: {e}");
                exit(1);
            }
        }
    }
}

/// Takes and releases `name`: awaited through 0.2.0, or (`sync`) through
/// 0.1.0's blocking call.
async fn wait_for(name: &str, sync: bool) -> Result<u64, String> {
    let ttl = Duration::from_secs(60);
    let options = LockOptions::ephemeral().with_wait(Duration::from_secs(30));
    let grant = if sync {
        lockd_guest::lock(name, "cli", ttl, options)
    } else {
        p3::lock(name, "cli", ttl, options).await
    }
    .map_err(|e| format!("{e:?}"))?;
    p3::unlock(name, "cli", Some(grant.fencing_token))
        .await
        .map_err(|e| format!("{e:?}"))?;
    Ok(grant.fencing_token)
}

/// Ticks every [`TICK`] from `started` until `done`: how many ticks, and
/// the longest time without one (from `started` to the first, between
/// two, from the last to when it saw `done`).
async fn ticker(started: Instant, done: &Cell<bool>) -> (u32, Duration) {
    let (mut ticks, mut longest, mut last) = (0, Duration::ZERO, started);
    while !done.get() {
        monotonic_clock::wait_for(TICK.as_nanos() as u64).await;
        longest = longest.max(last.elapsed());
        last = Instant::now();
        ticks += 1;
    }
    (ticks, longest.max(last.elapsed()))
}

/// Both futures' outputs, polled in turn (`a` first).
async fn both<A: Future, B: Future>(a: A, b: B) -> (A::Output, B::Output) {
    let (mut a, mut b) = (pin!(a), pin!(b));
    let (mut out_a, mut out_b) = (None, None);
    std::future::poll_fn(|cx| {
        if out_a.is_none() {
            if let Poll::Ready(out) = a.as_mut().poll(cx) {
                out_a = Some(out);
            }
        }
        if out_b.is_none() {
            if let Poll::Ready(out) = b.as_mut().poll(cx) {
                out_b = Some(out);
            }
        }
        match (out_a.take(), out_b.take()) {
            (Some(a), Some(b)) => Poll::Ready((a, b)),
            (a, b) => {
                (out_a, out_b) = (a, b);
                Poll::Pending
            }
        }
    })
    .await
}
