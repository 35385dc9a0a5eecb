//! The fencing pattern for a guest (docs/fencing.md): take a guard, send its
//! fencing token with every write, and let the resource refuse a stale one.
//!
//! Usage: `rust-fenced <name> <ttl-ms> <work-ms> <value>`. Takes a guard on
//! `<name>` for `<ttl-ms>` (not kept alive), prints `token <N>`, works for
//! `<work-ms>` (longer than the TTL, it plays the holder that stalled), then
//! prints the write it asks its host to make, token included:
//! `write <name> <N> <value>`. The host applies it through the fence
//! (contrib/fencing/redis.lua: `FCALL lockd_fenced_set 2 fence:<name>
//! <name> <N> <value>`; contrib/fencing/postgres.sql: `lockd_fence(<name>,
//! <N>)` in the write's transaction), which refuses it if a holder with a
//! newer token wrote meanwhile. Asking `is_held()` before writing would not
//! do: the lock can pass on between the check and the write; the fence
//! checks at the write. Finally releases the guard and prints `released`,
//! or `release: <error>` when the lock had already passed on.
//!
//! A bad argument prints `usage: ...` and exits 2; a failed acquire prints
//! `FAIL <error>` and exits 1.

use std::process::exit;
use std::time::Duration;

use lockd_guest::{Guard, LockOptions};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (name, ttl_ms, work_ms, value) = match args.as_slice() {
        [name, ttl, work, value] => match (ttl.parse::<u64>(), work.parse::<u64>()) {
            (Ok(ttl), Ok(work)) => (name.as_str(), ttl, work, value.as_str()),
            _ => usage(),
        },
        _ => usage(),
    };
    let guard = match Guard::acquire(name, Duration::from_millis(ttl_ms), LockOptions::default()) {
        Ok(guard) => guard,
        Err(e) => {
            println!("FAIL {e:?}");
            exit(1);
        }
    };
    // The token is a u64: keep it one, and send it as its digits.
    let token: u64 = guard.fencing_token();
    println!("token {token}");
    std::thread::sleep(Duration::from_millis(work_ms));
    println!("write {name} {token} {value}");
    match guard.release() {
        Ok(()) => println!("released"),
        Err(e) => println!("release: {e:?}"),
    }
}

fn usage() -> ! {
    println!("usage: rust-fenced <name> <ttl-ms> <work-ms> <value>");
    exit(2);
}
