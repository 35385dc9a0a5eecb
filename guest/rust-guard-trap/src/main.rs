//! Takes a guard, then traps, so the host can check that the end of an
//! instance by a trap releases the guards it held.
//!
//! Usage: `rust-guard-trap <lock-name>`. Prints `guard <owner> <token>`,
//! flushes stdout, then aborts (a wasm `unreachable` trap). It never exits
//! normally.

use std::io::Write;
use std::process::exit;
use std::time::Duration;

use lockd_guest::{Guard, LockOptions};

fn main() {
    let Some(name) = std::env::args().nth(1) else {
        eprintln!("usage: rust-guard-trap <lock-name>");
        exit(2);
    };
    let guard = match Guard::acquire(
        &name,
        Duration::from_millis(60_000),
        LockOptions::persistent(),
    ) {
        Ok(guard) => guard,
        Err(e) => {
            println!("FAIL acquire: {e:?}");
            let _ = std::io::stdout().flush();
            exit(1);
        }
    };
    println!("guard {} {}", guard.owner(), guard.fencing_token());
    // The host reads this line before the trap ends the instance.
    let _ = std::io::stdout().flush();
    // `guard` is still alive here and abort runs no destructors, so only the
    // host can release the lock: that is what the test checks.
    std::process::abort();
}
