//! The lockd:lock conformance scenario, as a wasi:cli command.
//!
//! Usage: `rust-conformance <prefix>`. Every lock name starts with
//! `<prefix>/`, so one host can run the scenario many times. For each step it
//! prints `ok <step>`, or `FAIL <step>: <detail>` and exits 1 at once. It
//! exits 0 only if every step passed, and leaves `<prefix>/held` locked by
//! owner `rust` for 60 s (printing `held <token>`), so the host can check
//! that persistent state outlives the instance.

use std::fmt::Debug;
use std::io::Write;
use std::process::exit;
use std::time::Duration;

use lockd_guest::{extend, get, lock, unlock, Error, Guard, LockOptions};

/// The TTL of every plain lock in the scenario unless a step says otherwise.
const TTL: Duration = Duration::from_millis(10_000);

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(prefix) = args.next() else {
        eprintln!("usage: rust-conformance <lock-name-prefix>");
        exit(2);
    };
    run(&prefix);
}

/// Reports a passed step.
fn ok(step: u32) {
    println!("ok {step}");
    flush();
}

/// Reports a failed step and ends the program with status 1.
fn fail(step: u32, detail: impl Debug) -> ! {
    println!("FAIL {step}: {detail:?}");
    flush();
    exit(1);
}

fn flush() {
    // Nothing useful can be done if stdout is gone; the exit status still
    // tells the host the outcome.
    let _ = std::io::stdout().flush();
}

fn run(p: &str) {
    let a = format!("{p}/a");
    let b = format!("{p}/b");
    let g = format!("{p}/g");
    let held = format!("{p}/held");
    let persistent = LockOptions::persistent();

    // 1. A free lock is granted.
    let t1 = match lock(&a, "o1", TTL, persistent) {
        Ok(grant) => grant.fencing_token,
        Err(e) => fail(1, e),
    };
    ok(1);

    // 2. Another owner gets `busy`, naming the holder and its token.
    match lock(&a, "o2", TTL, persistent) {
        Err(Error::Busy(info)) if info.owner == "o1" && info.fencing_token == t1 => {}
        other => fail(2, other),
    }
    ok(2);

    // 3. Re-locking by the holder is a retry: same token.
    let expiry3 = match lock(&a, "o1", TTL, persistent) {
        Ok(grant) if grant.fencing_token == t1 => grant.expires_at_ms,
        other => fail(3, (format!("expected token {t1}"), other)),
    };
    ok(3);

    // 4. Only the holder may extend.
    match extend(&a, "o2", TTL) {
        Err(Error::NotOwner) => {}
        other => fail(4, other),
    }
    ok(4);

    // 5. Extending keeps the token and moves the expiry later.
    match extend(&a, "o1", Duration::from_millis(20_000)) {
        Ok(grant) if grant.fencing_token == t1 && grant.expires_at_ms > expiry3 => {}
        other => fail(
            5,
            (format!("expected token {t1}, expiry > {expiry3}"), other),
        ),
    }
    ok(5);

    // 6. An unlock with a wrong token releases nothing.
    match unlock(&a, "o1", Some(t1.wrapping_add(1))) {
        Err(Error::NotOwner) => {}
        other => fail(6, other),
    }
    ok(6);

    // 7. An unlock with the right token releases the lock.
    if let Err(e) = unlock(&a, "o1", Some(t1)) {
        fail(7, e);
    }
    match get(&a) {
        Ok(None) => {}
        other => fail(7, other),
    }
    ok(7);

    // 8. The next grant of the same name has a greater token.
    let t2 = match lock(&a, "o2", TTL, persistent) {
        Ok(grant) if grant.fencing_token > t1 => grant.fencing_token,
        other => fail(8, (format!("expected token > {t1}"), other)),
    };
    if let Err(e) = unlock(&a, "o2", Some(t2)) {
        fail(8, e);
    }
    ok(8);

    // 9. An ephemeral lease expires by itself, and the next token is greater.
    let tb = match lock(
        &b,
        "o1",
        Duration::from_millis(100),
        LockOptions::ephemeral(),
    ) {
        Ok(grant) => grant.fencing_token,
        Err(e) => fail(9, e),
    };
    std::thread::sleep(Duration::from_millis(300));
    match get(&b) {
        Ok(None) => {}
        other => fail(9, ("expected the lease to have expired", other)),
    }
    match lock(&b, "o2", TTL, LockOptions::ephemeral()) {
        Ok(grant) if grant.fencing_token > tb => {
            // Leave P/b free, like P/a.
            if let Err(e) = unlock(&b, "o2", Some(grant.fencing_token)) {
                fail(9, e);
            }
        }
        other => fail(9, (format!("expected token > {tb}"), other)),
    }
    ok(9);

    // 10. Limits are enforced.
    let long_name = "n".repeat(600);
    let cases: [(&str, &str, Duration); 3] = [
        ("empty name", "", TTL),
        ("600-byte name", &long_name, TTL),
        ("ttl 0", &a, Duration::ZERO),
    ];
    for (what, name, ttl) in cases {
        match lock(name, "o1", ttl, persistent) {
            Err(Error::InvalidArgument(_)) => {}
            other => fail(10, (what, other)),
        }
    }
    ok(10);

    // 11. A guard holds the lock under a host-generated owner and releases it
    // when dropped.
    let guard = match Guard::acquire(&g, TTL, persistent) {
        Ok(guard) => guard,
        Err(e) => fail(11, ("acquire", e)),
    };
    let (owner, token) = (guard.owner(), guard.fencing_token());
    match lock(&g, "o3", TTL, persistent) {
        Err(Error::Busy(info)) if info.owner == owner && info.fencing_token == token => {}
        other => fail(
            11,
            (format!("expected busy by {owner:?} token {token}"), other),
        ),
    }
    if !guard.is_held() {
        fail(11, "is_held() returned false");
    }
    drop(guard);
    match get(&g) {
        Ok(None) => {}
        other => fail(11, ("expected free after dropping the guard", other)),
    }
    match lock(&g, "o3", TTL, persistent) {
        Ok(grant) => {
            if let Err(e) = unlock(&g, "o3", Some(grant.fencing_token)) {
                fail(11, e);
            }
        }
        Err(e) => fail(11, e),
    }
    ok(11);

    // 12. Leave a persistent lock behind for the host to inspect.
    match lock(&held, "rust", Duration::from_millis(60_000), persistent) {
        Ok(grant) => println!("held {}", grant.fencing_token),
        Err(e) => fail(12, e),
    }
    ok(12);
}
