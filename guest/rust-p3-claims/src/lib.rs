//! Leases, read-write locks, semaphores and holds through the Rust SDK's
//! async API for WASI 0.3 (`lockd_guest::p3`), as a WASI 0.3 command
//! (`wasi:cli/run@0.3.0`) for `lockd run`; the host tests are in
//! tests/tests/p3/claims.rs.
//!
//! Usage: `rust-p3-claims MODE PREFIX`; every name starts with `PREFIX/`.
//! Each mode prints what it saw, one fact a line (`WORD VALUE...`), for the
//! host to judge, and `FAIL STEP: ERROR` (exit 1) when a call that must
//! succeed fails. Where a task waits, another task of the same instance
//! frees what it waits for, once the host shows it queued.
//!
//! - `lease`: a lease holds `a` and `b` (a retry answers the same token), a
//!   rival is `busy` with the lease as holder, a refresh moves the lease's
//!   and its locks' expiry, `b` is unlocked, the lease is revoked (its
//!   `lost()` says `released`) and the rival then takes `a`, which it
//!   keeps. Then two leases of 300 ms, one kept alive: after 700 ms the
//!   other is lost as `expired` and the kept one still holds `kept`.
//! - `rwlock`: `r1` and `r2` read `rw` together, a writer `w` is `busy`,
//!   then waits; a late reader is `busy` behind it; `w` is granted once
//!   both readers unlocked, and keeps `rw`.
//! - `semaphore`: `x` and `y` take the 2 permits of `sem`, `z` is `busy`
//!   (and another size `invalid`), then waits, and gets `x`'s permit once
//!   `x` unlocks; `y` and `z` keep theirs.
//! - `hold`: two shared holds of `hold`, an exclusive one `busy`, then
//!   waiting until one shared hold is dropped and the other released; it is
//!   extended and released (`lost()` says `released`). A 1-permit hold of
//!   `slots` makes a second `busy`, and a waiting one gets it after the
//!   first is dropped.

mod bindings {
    wit_bindgen::generate!({
        path: [
            "../wit-p3-command/deps/wasi-clocks/clocks.wit",
            "../wit-p3-command/deps/wasi-cli/cli.wit",
            "wit/claims.wit",
        ],
        world: "lockd:p3-claims/claims",
        generate_all,
    });
}

mod modes;

use std::process::exit;
use std::time::Duration;

use bindings::wasi::clocks::monotonic_clock;
use lockd_guest::p3::{self, LostReason};
use lockd_guest::Error;

/// How long every grant lives unless released.
const TTL: Duration = Duration::from_secs(30);

/// How long a task waits in a queue: far longer than the freeing takes.
const WAIT: Duration = Duration::from_secs(5);

struct Claims;

bindings::export!(Claims with_types_in bindings);

impl bindings::exports::wasi::cli::run::Guest for Claims {
    async fn run() -> Result<(), ()> {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let [mode, prefix] = args.as_slice() else {
            fail("usage: rust-p3-claims lease|rwlock|semaphore|hold PREFIX");
        };
        match mode.as_str() {
            "lease" => modes::lease(prefix).await,
            "rwlock" => modes::rwlock(prefix).await,
            "semaphore" => modes::semaphore(prefix).await,
            "hold" => modes::hold(prefix).await,
            _ => fail(&format!("unknown mode {mode:?}")),
        }
        Ok(())
    }
}

/// Stops the command on a call that had to succeed. (Rust's stdout is
/// line-buffered: the line is out before the exit.)
fn fail(what: &str) -> ! {
    println!("FAIL {what}");
    exit(1);
}

/// The value of a call that must succeed.
fn check<T>(step: &str, result: Result<T, Error>) -> T {
    result.unwrap_or_else(|e| fail(&format!("{step}: {e}")))
}

/// A call's outcome in one word, for the host to judge.
fn outcome<T>(result: &Result<T, Error>) -> &'static str {
    match result {
        Ok(_) => "granted",
        Err(Error::Busy(_)) => "busy",
        Err(Error::NotOwner) => "not-owner",
        Err(Error::NotHeld) => "not-held",
        Err(Error::InvalidArgument(_)) => "invalid",
        Err(_) => "error",
    }
}

fn reason(reason: LostReason) -> &'static str {
    match reason {
        LostReason::Released => "released",
        LostReason::Expired => "expired",
        LostReason::EndedElsewhere => "ended-elsewhere",
    }
}

/// Sleeps on WASI 0.3's clock: only this task waits.
async fn sleep(duration: Duration) {
    monotonic_clock::wait_for(duration.as_nanos() as u64).await;
}

/// Returns once `describe` shows `name` with a waiter (bounded: 5 s).
async fn until_waiting(name: &str) {
    for _ in 0..500 {
        if check("describe", p3::describe(name).await).waiters > 0 {
            return;
        }
        sleep(Duration::from_millis(10)).await;
    }
    fail(&format!("nobody ever waited for {name}"));
}
