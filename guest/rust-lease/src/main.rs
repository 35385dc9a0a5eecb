//! Keep-alive and the lost signal, for the host tests (tests/tests/leases.rs).
//!
//! Usage:
//! - `rust-lease keep-alive NAME TTL_MS WORK_MS`: takes NAME with a
//!   kept-alive guard of TTL_MS, works (sleeps) WORK_MS, and prints
//!   `held-after-work true|false`; then ends, guard still live.
//! - `rust-lease lease-lost TTL_MS KEEP_ALIVE NAME...`: grants a lease
//!   (keep-alive `yes`/`no`), takes every NAME under it, prints
//!   `lease ID`, waits on the lease's lost pollable, and prints
//!   `lost alive=BOOL` when it becomes ready.
//! - `rust-lease guard-lost NAME TTL_MS`: takes NAME with a plain guard,
//!   waits on its lost pollable, and prints `lost held=BOOL`.
//! - `rust-lease lease-steps NAME...`: the lease API end to end: grant,
//!   lock every NAME, refresh, unlock the last, revoke; prints `ok N` per
//!   step, `FAIL ...` on any surprise.
//!
//! - `rust-lease hold-leases N TTL_MS SECONDS`: grants N kept-alive
//!   leases of TTL_MS, each holding one lock `hold/<i>`, prints `holding N`,
//!   sleeps SECONDS while the host renews them, and prints `alive K` with
//!   how many are still alive (the keep-alive benchmark).
//!
//! Anything unexpected prints `FAIL ...` and exits 1.

use std::io::Write;
use std::process::exit;
use std::time::Duration;

use lockd_guest::{Error, Guard, Lease, LeaseOptions, LockOptions};

fn fail(what: &str) -> ! {
    println!("FAIL {what}");
    let _ = std::io::stdout().flush();
    exit(1);
}

fn check<T>(step: &str, result: Result<T, Error>) -> T {
    result.unwrap_or_else(|e| fail(&format!("{step}: {e}")))
}

fn number(arg: Option<String>, what: &str) -> u64 {
    arg.and_then(|a| a.parse().ok())
        .unwrap_or_else(|| fail(&format!("missing or bad {what}")))
}

fn say(line: &str) {
    println!("{line}");
    let _ = std::io::stdout().flush();
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_default();
    match mode.as_str() {
        "keep-alive" => {
            let name = args.next().unwrap_or_else(|| fail("missing NAME"));
            let ttl = number(args.next(), "TTL_MS");
            let work = number(args.next(), "WORK_MS");
            let guard = check(
                "acquire",
                Guard::acquire_kept_alive(
                    &name,
                    Duration::from_millis(ttl),
                    LockOptions::default(),
                ),
            );
            say(&format!(
                "guard {} {}",
                guard.owner(),
                guard.fencing_token()
            ));
            std::thread::sleep(Duration::from_millis(work));
            say(&format!("held-after-work {}", guard.is_held()));
            // Ends with the guard live: the host stops renewing it.
            std::mem::forget(guard);
        }
        "lease-lost" => {
            let ttl = number(args.next(), "TTL_MS");
            let options = match args.next().as_deref() {
                Some("yes") => LeaseOptions::default().kept_alive(),
                Some("no") => LeaseOptions::default(),
                _ => fail("KEEP_ALIVE must be yes or no"),
            };
            let lease = check("grant", Lease::grant(Duration::from_millis(ttl), options));
            for name in args {
                check("lock", lease.lock(&name, Duration::ZERO));
            }
            say(&format!("lease {}", lease.id()));
            lease.lost().block();
            say(&format!("lost alive={}", lease.is_alive()));
        }
        "guard-lost" => {
            let name = args.next().unwrap_or_else(|| fail("missing NAME"));
            let ttl = number(args.next(), "TTL_MS");
            let guard = check(
                "acquire",
                Guard::acquire(&name, Duration::from_millis(ttl), LockOptions::default()),
            );
            say(&format!("guard {}", guard.owner()));
            guard.lost().block();
            say(&format!("lost held={}", guard.is_held()));
        }
        "lease-steps" => {
            let names: Vec<String> = args.collect();
            if names.len() < 2 {
                fail("lease-steps needs two names or more");
            }
            let lease = check(
                "grant",
                Lease::grant(Duration::from_secs(30), LeaseOptions::default()),
            );
            if !lease.id().starts_with("lease-") {
                fail(&format!("lease id {}", lease.id()));
            }
            say("ok 1");
            let mut last = 0;
            for name in &names {
                let grant = check("lock", lease.lock(name, Duration::ZERO));
                if grant.fencing_token <= last || grant.expires_at_ms != lease.expires_at_ms() {
                    fail(&format!("grant {grant:?} under {}", lease.expires_at_ms()));
                }
                last = grant.fencing_token;
                let held = check("get", lockd_guest::get(name));
                if held.map(|h| h.owner) != Some(lease.id()) {
                    fail("a lock under the lease is not owned by its id");
                }
            }
            say("ok 2");
            let before = lease.expires_at_ms();
            std::thread::sleep(Duration::from_millis(5));
            let after = check("refresh", lease.refresh());
            if after <= before || lease.expires_at_ms() != after {
                fail(&format!("refresh moved {before} to {after}"));
            }
            for name in &names {
                let held = check("get", lockd_guest::get(name));
                if held.map(|h| h.expires_at_ms) != Some(after) {
                    fail("refresh did not move every lock");
                }
            }
            say("ok 3");
            let last_name = names.last().unwrap();
            check("unlock", lease.unlock(last_name));
            if check("get", lockd_guest::get(last_name)).is_some() {
                fail("unlock under the lease left the lock held");
            }
            say("ok 4");
            if !lease.is_alive() {
                fail("is-alive false on a live lease");
            }
            let lost = lease.lost();
            let id = lease.id();
            check("revoke", lease.revoke());
            if !lost.ready() {
                fail("lost pollable not ready after revoke");
            }
            for name in &names {
                if check("get", lockd_guest::get(name)).is_some() {
                    fail("revoke left a lock held");
                }
            }
            match lockd_guest::unlock(&names[0], &id, None) {
                Err(Error::NotHeld) => {}
                other => fail(&format!("unlock after revoke: {other:?}")),
            }
            say("ok 5");
        }
        "hold-leases" => {
            let n = number(args.next(), "N");
            let ttl = number(args.next(), "TTL_MS");
            let seconds = number(args.next(), "SECONDS");
            let prefix = args.next().unwrap_or_else(|| "hold".to_string());
            let leases: Vec<Lease> = (0..n)
                .map(|i| {
                    let lease = check(
                        "grant",
                        Lease::grant(
                            Duration::from_millis(ttl),
                            LeaseOptions::default().kept_alive(),
                        ),
                    );
                    check("lock", lease.lock(&format!("{prefix}/{i}"), Duration::ZERO));
                    lease
                })
                .collect();
            say(&format!("holding {}", leases.len()));
            std::thread::sleep(Duration::from_secs(seconds));
            let alive = leases.iter().filter(|l| l.is_alive()).count();
            say(&format!("alive {alive}"));
        }
        _ => fail("usage: rust-lease keep-alive|lease-lost|guard-lost|lease-steps|hold-leases ..."),
    }
}
