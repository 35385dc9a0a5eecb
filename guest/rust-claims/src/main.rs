//! Read-write locks, semaphores, holds and leader election through the Rust
//! SDK, for the host tests (tests/tests/claims).
//!
//! Usage:
//! - `rust-claims steps PREFIX [composed]`: every name starts with
//!   `PREFIX/`; prints `ok N` for each of the steps below, `FAIL ...` on any
//!   surprise. `composed` says that `lockd:lock` comes from
//!   `guest/lockd-client` (docs/guests.md#other-hosts): keep-alive must then answer
//!   `denied`, and a lost pollable is a timer at the known expiry.
//!   1. a read-write lock: two readers together, a writer busy, then the
//!      writer once they left, and a reader busy behind it;
//!   2. a semaphore of 2: a third owner busy, another size refused;
//!   3. holds: shared holds released on drop, an exclusive one released;
//!   4. an election: campaign, leader, a rival busy, proclaim, resign, and
//!      a leader watch whose pollable becomes ready at each change;
//!   5. names keep to their kind: a lock on an election is refused.
//! - `rust-claims leave PREFIX`: takes `PREFIX/rw` shared for `reader-1`
//!   and `reader-2`, one permit of the semaphore `PREFIX/sem` of 3 for
//!   `p1`, and leads `PREFIX/election` with the value `addr:1`, and leaves
//!   them held (the leadership is forgotten, not dropped) for the caller to
//!   inspect; prints `shared TOKEN TOKEN`, `permit TOKEN` and
//!   `leader CANDIDATE TOKEN`.
//! - `rust-claims wait-exclusive NAME WAIT_MS`: takes NAME exclusive,
//!   waiting up to WAIT_MS, and prints `granted TOKEN`.
//! - `rust-claims watch NAME WAIT_MS`: opens a leader watch on NAME, prints
//!   `leader none` or `leader VALUE`, waits up to WAIT_MS for a change and
//!   prints `changed VALUE` (or `changed none`).
//!
//! Anything unexpected prints `FAIL ...` and exits 1.

use std::io::Write;
use std::process::exit;
use std::time::Duration;

use lockd_guest::{
    Error, Hold, HoldOptions, LeaderInfo, LeaderWatch, Leadership, LockOptions, Mode, Pollable,
};

const TTL: Duration = Duration::from_secs(30);

fn fail(what: &str) -> ! {
    println!("FAIL {what}");
    let _ = std::io::stdout().flush();
    exit(1);
}

fn check<T>(step: &str, result: Result<T, Error>) -> T {
    result.unwrap_or_else(|e| fail(&format!("{step}: {e}")))
}

fn expect(step: &str, ok: bool) {
    if !ok {
        fail(step);
    }
}

fn say(line: &str) {
    println!("{line}");
    let _ = std::io::stdout().flush();
}

fn number(arg: Option<String>, what: &str) -> u64 {
    arg.and_then(|a| a.parse().ok())
        .unwrap_or_else(|| fail(&format!("missing or bad {what}")))
}

/// Whether `pollable` is ready within `ms` milliseconds.
fn ready_within(pollable: &Pollable, ms: u64) -> bool {
    let timeout = wasip2::clocks::monotonic_clock::subscribe_duration(ms * 1_000_000);
    let ready = wasip2::io::poll::poll(&[pollable, &timeout]);
    ready.contains(&0)
}

fn value_of(leader: &Option<LeaderInfo>) -> String {
    leader
        .as_ref()
        .map_or_else(|| "none".to_string(), |l| l.value.clone())
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_default();
    match mode.as_str() {
        "steps" => {
            let prefix = args.next().unwrap_or_else(|| fail("missing PREFIX"));
            let composed = match args.next().as_deref() {
                None => false,
                Some("composed") => true,
                Some(other) => fail(&format!("unknown option {other:?}")),
            };
            rwlock(&format!("{prefix}/rw"));
            say("ok 1");
            semaphore(&format!("{prefix}/sem"));
            say("ok 2");
            holds(&format!("{prefix}/hold"), composed);
            say("ok 3");
            election(&format!("{prefix}/election"), composed);
            say("ok 4");
            kinds(&format!("{prefix}/election"));
            say("ok 5");
        }
        "leave" => {
            let prefix = args.next().unwrap_or_else(|| fail("missing PREFIX"));
            leave(&prefix);
        }
        "wait-exclusive" => {
            let name = args.next().unwrap_or_else(|| fail("missing NAME"));
            let wait = number(args.next(), "WAIT_MS");
            let options = LockOptions::default().with_wait(Duration::from_millis(wait));
            let grant = check("wait", lockd_guest::lock(&name, "writer", TTL, options));
            say(&format!("granted {}", grant.fencing_token));
        }
        "watch" => {
            let name = args.next().unwrap_or_else(|| fail("missing NAME"));
            let wait = number(args.next(), "WAIT_MS");
            let watch = check("open", LeaderWatch::open(&name));
            say(&format!(
                "leader {}",
                value_of(&check("current", watch.current()))
            ));
            expect(
                "the watch never fired",
                ready_within(&watch.changed(), wait),
            );
            say(&format!(
                "changed {}",
                value_of(&check("current", watch.current()))
            ));
        }
        _ => fail(&format!("unknown mode {mode:?}")),
    }
}

/// Two readers together, a writer busy (and busy after a wait), the writer
/// once the readers left, a reader busy behind it.
fn rwlock(name: &str) {
    let now = LockOptions::default();
    let r1 = check("reader 1", lockd_guest::lock_shared(name, "r1", TTL, now));
    let r2 = check("reader 2", lockd_guest::lock_shared(name, "r2", TTL, now));
    expect("tokens rise", r2.fencing_token > r1.fencing_token);
    let state = check("describe", lockd_guest::describe(name));
    expect(
        "two shared holders",
        state.holders.len() == 2 && state.holders.iter().all(|h| h.mode == Mode::Shared),
    );
    match lockd_guest::lock(name, "w", TTL, now) {
        Err(Error::Busy(_)) => {}
        other => fail(&format!("writer beside readers: {other:?}")),
    }
    let waited = now.with_wait(Duration::from_millis(100));
    match lockd_guest::lock(name, "w", TTL, waited) {
        Err(Error::Busy(_)) => {}
        other => fail(&format!("writer after a wait: {other:?}")),
    }
    match lockd_guest::lock(name, "r1", TTL, now) {
        Err(Error::InvalidArgument(_)) => {}
        other => fail(&format!("a reader asking for exclusive: {other:?}")),
    }
    check(
        "unlock r1",
        lockd_guest::unlock(name, "r1", Some(r1.fencing_token)),
    );
    check("unlock r2", lockd_guest::unlock(name, "r2", None));
    let w = check("writer", lockd_guest::lock(name, "w", TTL, now));
    expect("writer's token", w.fencing_token > r2.fencing_token);
    match lockd_guest::lock_shared(name, "r3", TTL, now) {
        Err(Error::Busy(holder)) => expect("busy names the writer", holder.owner == "w"),
        other => fail(&format!("reader beside a writer: {other:?}")),
    }
    check(
        "unlock w",
        lockd_guest::unlock(name, "w", Some(w.fencing_token)),
    );
}

/// A semaphore of 2: two owners hold, a third is busy, another size is
/// refused, a permit returns.
fn semaphore(name: &str) {
    let now = LockOptions::default();
    let a = check(
        "permit a",
        lockd_guest::acquire_permit(name, "a", 2, TTL, now),
    );
    check(
        "permit b",
        lockd_guest::acquire_permit(name, "b", 2, TTL, now),
    );
    match lockd_guest::acquire_permit(name, "c", 2, TTL, now) {
        Err(Error::Busy(_)) => {}
        other => fail(&format!("a third permit: {other:?}")),
    }
    match lockd_guest::acquire_permit(name, "c", 3, TTL, now) {
        Err(Error::InvalidArgument(_)) => {}
        other => fail(&format!("another size: {other:?}")),
    }
    let state = check("describe", lockd_guest::describe(name));
    expect(
        "two permits of 2",
        state.permits == Some(2)
            && state.holders.len() == 2
            && state.holders.iter().all(|h| h.mode == Mode::Permit),
    );
    check(
        "release a",
        lockd_guest::unlock(name, "a", Some(a.fencing_token)),
    );
    {
        let c = check(
            "hold a permit",
            Hold::permit(name, 2, TTL, HoldOptions::default()),
        );
        expect("the permit is held", c.is_held());
        match Hold::permit(name, 2, TTL, HoldOptions::default()) {
            Err(Error::Busy(_)) => {}
            other => fail(&format!("a third permit hold: {other:?}")),
        }
    } // dropped: its permit returns
    let state = check("describe", lockd_guest::describe(name));
    expect("one permit left held", state.holders.len() == 1);
    check("release b", lockd_guest::unlock(name, "b", None));
}

/// Shared holds side by side, released when dropped; an exclusive hold
/// released by `release`.
fn holds(name: &str, composed: bool) {
    let now = HoldOptions::default();
    {
        let h1 = check("shared hold 1", Hold::shared(name, TTL, now));
        let h2 = check("shared hold 2", Hold::shared(name, TTL, now));
        expect("own owners", h1.owner() != h2.owner());
        expect("both held", h1.is_held() && h2.is_held());
        match Hold::exclusive(name, TTL, now) {
            Err(Error::Busy(_)) => {}
            other => fail(&format!("exclusive beside shared holds: {other:?}")),
        }
    } // both dropped
    let state = check("describe", lockd_guest::describe(name));
    expect("dropped holds released", state.holders.is_empty());
    let x = check("exclusive hold", Hold::exclusive(name, TTL, now));
    let lost = x.lost();
    check("extend", x.extend(TTL).map(drop));
    let token = x.fencing_token();
    check("release", x.release());
    if composed {
        // The client's lost pollable is a timer at the expiry it knows of.
        let short = format!("{name}-short");
        let brief = check(
            "short hold",
            Hold::exclusive(&short, Duration::from_millis(300), now),
        );
        expect("lost at the expiry", ready_within(&brief.lost(), 5_000));
        expect("not held after the expiry", !brief.is_held());
    } else {
        expect("lost after release", ready_within(&lost, 5_000));
    }
    expect(
        "free after release",
        check("get", lockd_guest::get(name)).is_none(),
    );
    let again = check("shared after", Hold::shared(name, TTL, now));
    expect("tokens rise", again.fencing_token() > token);
}

/// Campaign, learn the leader, a rival busy, proclaim, resign, drop; a
/// watch ready at each change and not before.
fn election(name: &str, composed: bool) {
    expect(
        "nobody leads",
        check("leader", lockd_guest::leader(name)).is_none(),
    );
    let watch = check("watch", LeaderWatch::open(name));
    let changed = watch.changed();
    expect("no change yet", !ready_within(&changed, 50));

    let lead = check(
        "campaign",
        Leadership::campaign(name, "a:1", TTL, HoldOptions::default()),
    );
    let leader = check("leader", lockd_guest::leader(name)).unwrap_or_else(|| fail("no leader"));
    expect(
        "the leader is this candidate",
        leader.candidate == lead.candidate()
            && leader.value == "a:1"
            && leader.fencing_token == lead.fencing_token(),
    );
    expect(
        "the watch saw the new leader",
        ready_within(&changed, 5_000),
    );
    let seen = check("current", watch.current());
    expect("current is the leader", value_of(&seen) == "a:1");
    expect("quiet after current", !ready_within(&watch.changed(), 50));

    match Leadership::campaign(name, "b:1", TTL, HoldOptions::default()) {
        Err(Error::Busy(holder)) => {
            expect("busy names the leader", holder.owner == lead.candidate())
        }
        other => fail(&format!("a rival: {other:?}")),
    }
    let state = check("describe", lockd_guest::describe(name));
    expect(
        "one leader",
        state.holders.len() == 1 && state.holders[0].mode == Mode::Leader,
    );

    check("proclaim", lead.proclaim("a:2"));
    expect(
        "the watch saw the value",
        ready_within(&watch.changed(), 5_000),
    );
    expect(
        "new value",
        value_of(&check("current", watch.current())) == "a:2",
    );
    expect("still leads", lead.is_leader());
    let token = lead.fencing_token();
    check("resign", lead.resign());
    expect(
        "the watch saw the resign",
        ready_within(&watch.changed(), 5_000),
    );
    expect("nobody leads", check("current", watch.current()).is_none());

    {
        let kept_alive =
            Leadership::campaign(name, "b:1", TTL, HoldOptions::default().kept_alive());
        let next = if composed {
            match kept_alive {
                Err(Error::Denied(why)) if why.contains("keep-alive") => {}
                other => fail(&format!("keep-alive through the client: {other:?}")),
            }
            check(
                "campaign again",
                Leadership::campaign(name, "b:1", TTL, HoldOptions::default()),
            )
        } else {
            check("campaign again", kept_alive)
        };
        expect("a new token", next.fencing_token() > token);
        expect("the watch saw it", ready_within(&watch.changed(), 5_000));
        expect(
            "b leads",
            value_of(&check("current", watch.current())) == "b:1",
        );
    } // dropped: resigns
    expect(
        "the watch saw the drop",
        ready_within(&watch.changed(), 5_000),
    );
    expect(
        "nobody leads after drop",
        check("current", watch.current()).is_none(),
    );
}

/// An election's name is no lock, and a lock's name no election.
fn kinds(election: &str) {
    let _lead = check(
        "campaign",
        Leadership::campaign(election, "v", TTL, HoldOptions::default()),
    );
    match lockd_guest::lock(election, "x", TTL, LockOptions::default()) {
        Err(Error::InvalidArgument(_)) => {}
        other => fail(&format!("a lock on an election: {other:?}")),
    }
    let lock = format!("{election}-lock");
    check(
        "lock",
        lockd_guest::lock(&lock, "x", TTL, LockOptions::default()),
    );
    match lockd_guest::leader(&lock) {
        Err(Error::InvalidArgument(_)) => {}
        other => fail(&format!("leader of a lock: {other:?}")),
    }
    check("unlock", lockd_guest::unlock(&lock, "x", None));
}

/// Takes a shared lock twice, a permit and a leadership, and leaves them
/// held for the caller to inspect.
fn leave(prefix: &str) {
    let now = LockOptions::default();
    let rw = format!("{prefix}/rw");
    let r1 = check(
        "reader 1",
        lockd_guest::lock_shared(&rw, "reader-1", TTL, now),
    );
    let r2 = check(
        "reader 2",
        lockd_guest::lock_shared(&rw, "reader-2", TTL, now),
    );
    say(&format!("shared {} {}", r1.fencing_token, r2.fencing_token));
    let sem = format!("{prefix}/sem");
    let p1 = check(
        "permit",
        lockd_guest::acquire_permit(&sem, "p1", 3, TTL, now),
    );
    say(&format!("permit {}", p1.fencing_token));
    let lead = check(
        "campaign",
        Leadership::campaign(
            &format!("{prefix}/election"),
            "addr:1",
            TTL,
            HoldOptions::default(),
        ),
    );
    say(&format!(
        "leader {} {}",
        lead.candidate(),
        lead.fencing_token()
    ));
    // Not dropped, so not resigned here: it leads until its TTL (or, on
    // lockd's own host, until the instance ends).
    std::mem::forget(lead);
}
