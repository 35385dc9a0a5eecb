//! `rust-hostile`: a command that attacks its host through the raw
//! `lockd:lock` capability, so the host tests (`tests/tests/hostile/`) can
//! check that every attack gets a clear answer and that the host stays
//! healthy meanwhile.
//!
//! Usage: `rust-hostile <attack> [args...]`, where `<attack>` is one of
//!
//! - `loop`: spins forever. Never returns.
//! - `grow`: allocates and touches 1 MiB after 1 MiB, forever (printing
//!   `grown <n> MiB` every 16 MiB). Never returns: it ends by a trap.
//! - `huge-name`: every call with a 10 MiB lock name.
//! - `huge-owner`: every call with a 10 MiB owner.
//! - `ttl`: ttl 0 and ttl `u32::MAX` for `lock`, `extend` and a guard, and
//!   wait `u32::MAX`.
//! - `quota <n>`: takes `q/0`, `q/1`, ... (ephemeral, owner `hostile`) until
//!   refused or `n` were granted; prints `granted <count>`.
//! - `other-namespace <ns> <name> <owner>`: tries to reach the lock `<name>`
//!   that `<owner>` holds in namespace `<ns>` through names such as
//!   `../<ns>/<name>`, `<ns>/<name>`, `<ns>\0<name>`. None may see it; each
//!   must be an ordinary free lock of this guest's own namespace, which it
//!   then takes (persistent, 60 s) and leaves held.
//! - `guess-owner <name>`: tries to unlock and extend `<name>` (held by
//!   somebody else in this guest's namespace) with guessed owners: fixed
//!   ones (`guard-000…`, empty, `holder`, ...) and 1,000 random
//!   `guard-<32 hex>`. All must fail; the lock must still be held.
//! - `trap-guards <n> [persistent|ephemeral]`: acquires guards `g/0`,
//!   `g/1`, ... (60 s, ephemeral by default) until refused or `n` are held,
//!   prints `acquired <count>`, then aborts (a wasm trap) without dropping
//!   them. Never returns.
//! - `waiters <n> <name>`: holds `<name>` as owner `holder`, then makes `n`
//!   sequential `lock` calls on it as `waiter-<i>` with `wait-ms` 1, each of
//!   which must time out with `busy` naming `holder`; then releases it. A
//!   wasip2 command is single-threaded and its host calls are synchronous,
//!   so one instance can have only one waiter queued at a time: this is
//!   "thousands of waits from one instance", one after the other.
//!
//! - `claims`: shared locks, semaphores and elections with bad input: 0 and
//!   `u32::MAX` permits, a 10 MiB name or value, a campaign or a permit on a
//!   lock's name, an owner asking for the other mode. Each must be
//!   `invalid-argument`; the lock it took is released at the end.
//!
//! Output: `result <attack> <step> <Debug of the host's answer>` for each
//! call that matters (bulk calls print a summary and any unexpected answer),
//! `UNEXPECTED <attack> <step>` after an answer a safe host would not give,
//! and finally `verdict <attack> safe` (exit 0) or
//! `verdict <attack> UNSAFE <n>` (exit 1). A bad usage exits non-zero too.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::hash::{BuildHasher, RandomState};
use std::io::Write;
use std::process::exit;
use std::time::Instant;

mod raw {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "lockd:lock/imports",
        // The `wasi:io/poll` the lease and guard interfaces use.
        generate_all,
    });
}

use raw::lockd::lock::guards::Guard;
use raw::lockd::lock::locks::{self, LockOptions};
use raw::lockd::lock::types::{Durability, Error};

/// 10 MiB: the size of the oversized name and owner.
const HUGE: usize = 10 * 1024 * 1024;

/// The owner this guest uses for its own plain locks.
const ME: &str = "hostile";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(attack) = args.first() else {
        usage("no attack given");
    };
    let rest = &args[1..];
    match attack.as_str() {
        "loop" => spin(),
        "grow" => grow(),
        "huge-name" => huge_name(),
        "huge-owner" => huge_owner(),
        "ttl" => ttl(),
        "quota" => quota(number(rest, 0)),
        "other-namespace" => other_namespace(arg(rest, 0), arg(rest, 1), arg(rest, 2)),
        "guess-owner" => guess_owner(arg(rest, 0)),
        "trap-guards" => trap_guards(number(rest, 0), rest.get(1).map(String::as_str)),
        "waiters" => waiters(number(rest, 0), arg(rest, 1)),
        "claims" => claims(),
        other => usage(&format!("unknown attack {other:?}")),
    }
}

fn usage(why: &str) -> ! {
    eprintln!(
        "rust-hostile: {why}\nusage: rust-hostile loop | grow | huge-name | huge-owner | ttl \
         | quota <n> | other-namespace <ns> <name> <owner> | guess-owner <name> \
         | trap-guards <n> [persistent|ephemeral] | waiters <n> <name>"
    );
    exit(2);
}

fn arg(rest: &[String], i: usize) -> &str {
    rest.get(i)
        .map(String::as_str)
        .unwrap_or_else(|| usage(&format!("missing argument {}", i + 1)))
}

fn number(rest: &[String], i: usize) -> u64 {
    arg(rest, i)
        .parse()
        .unwrap_or_else(|e| usage(&format!("argument {} is not a number: {e}", i + 1)))
}

fn flush() {
    let _ = std::io::stdout().flush();
}

fn opts(wait_ms: u32, durability: Durability) -> LockOptions {
    LockOptions {
        wait_ms,
        durability,
    }
}

/// Random bits from the std hasher's random keys (seeded from the host's
/// `wasi:random`): good enough for guessing, and no extra crate.
fn random_u64() -> u64 {
    RandomState::new().hash_one(0u8)
}

fn random_u128() -> u128 {
    (u128::from(random_u64()) << 64) | u128::from(random_u64())
}

/// One attack's record of unexpected answers.
struct Attack {
    name: &'static str,
    unexpected: u32,
}

impl Attack {
    fn new(name: &'static str) -> Self {
        Attack {
            name,
            unexpected: 0,
        }
    }

    /// Prints the host's `answer` to `step`, and counts it if `expected` is
    /// false.
    fn check(&mut self, step: &str, answer: &dyn Debug, expected: bool) {
        println!("result {} {step} {answer:?}", self.name);
        self.count(step, expected);
    }

    /// Like [`Attack::check`], but prints the answer only if unexpected (for
    /// calls made by the thousand).
    fn check_quiet(&mut self, step: &str, answer: &dyn Debug, expected: bool) {
        if !expected {
            println!("result {} {step} {answer:?}", self.name);
        }
        self.count(step, expected);
    }

    fn count(&mut self, step: &str, expected: bool) {
        if !expected {
            println!("UNEXPECTED {} {step}", self.name);
            self.unexpected += 1;
        }
    }

    fn finish(self) -> ! {
        if self.unexpected == 0 {
            println!("verdict {} safe", self.name);
            flush();
            exit(0);
        }
        println!("verdict {} UNSAFE {}", self.name, self.unexpected);
        flush();
        exit(1);
    }
}

/// `Err(invalid-argument(m))` where `m` mentions every word of `words`.
fn invalid_mentioning<T>(result: &Result<T, Error>, words: &[&str]) -> bool {
    matches!(result, Err(Error::InvalidArgument(m)) if words.iter().all(|w| m.contains(w)))
}

/// A short label for an answer, for tallies.
fn kind<T>(result: &Result<T, Error>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(Error::Busy(_)) => "busy",
        Err(Error::NotOwner) => "not-owner",
        Err(Error::NotHeld) => "not-held",
        Err(Error::InvalidArgument(_)) => "invalid-argument",
        Err(Error::Denied(_)) => "denied",
        Err(Error::Unavailable(_)) => "unavailable",
    }
}

// --- loop, grow ----------------------------------------------------------

fn spin() -> ! {
    println!("looping");
    flush();
    let mut n: u64 = 0;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

fn grow() -> ! {
    println!("growing");
    flush();
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    loop {
        // `vec![1; ..]` writes every byte, so every page is really used.
        chunks.push(vec![1u8; 1 << 20]);
        std::hint::black_box(&chunks);
        if chunks.len().is_multiple_of(16) {
            println!("grown {} MiB", chunks.len());
            flush();
        }
    }
}

// --- oversized and out-of-range arguments -----------------------------------

fn huge_name() -> ! {
    let mut a = Attack::new("huge-name");
    let name = "n".repeat(HUGE);
    let o = opts(0, Durability::Persistent);
    let words = ["name", "limit"];

    let r = locks::lock(&name, ME, 10_000, o);
    a.check("lock", &r, invalid_mentioning(&r, &words));
    let r = locks::get(&name);
    a.check("get", &r, invalid_mentioning(&r, &words));
    let r = locks::unlock(&name, ME, None);
    a.check("unlock", &r, invalid_mentioning(&r, &words));
    let r = locks::extend(&name, ME, 10_000);
    a.check("extend", &r, invalid_mentioning(&r, &words));
    let r = Guard::acquire(&name, 10_000, o);
    a.check("guard", &r, invalid_mentioning(&r, &words));
    a.finish()
}

fn claims() -> ! {
    use raw::lockd::lock::elections::{self, CampaignOptions, LeaderWatch, Leadership};
    use raw::lockd::lock::guards::GuardOptions;
    use raw::lockd::lock::holds::Hold;
    use raw::lockd::lock::{rwlocks, semaphores};

    let mut a = Attack::new("claims");
    let o = opts(0, Durability::Ephemeral);
    let huge = "n".repeat(HUGE);
    let campaign = CampaignOptions {
        wait_ms: 0,
        durability: Durability::Ephemeral,
        keep_alive: false,
    };
    let guard = GuardOptions {
        wait_ms: 0,
        durability: Durability::Ephemeral,
        keep_alive: false,
    };

    let r = semaphores::acquire("c/sem", ME, 0, 10_000, o);
    a.check("permits-0", &r, invalid_mentioning(&r, &["permits"]));
    let r = semaphores::acquire("c/sem", ME, u32::MAX, 10_000, o);
    a.check("permits-max", &r, invalid_mentioning(&r, &["permits"]));
    let r = Hold::acquire_permit("c/sem", 0, 10_000, guard);
    a.check("hold-permits-0", &r, invalid_mentioning(&r, &["permits"]));
    let r = rwlocks::lock_shared(&huge, ME, 10_000, o);
    a.check(
        "shared-huge-name",
        &r,
        invalid_mentioning(&r, &["name", "limit"]),
    );
    let r = rwlocks::describe(&huge);
    a.check(
        "describe-huge-name",
        &r,
        invalid_mentioning(&r, &["name", "limit"]),
    );
    let r = elections::leader(&huge);
    a.check(
        "leader-huge-name",
        &r,
        invalid_mentioning(&r, &["name", "limit"]),
    );
    let r = LeaderWatch::open(&huge);
    a.check(
        "watch-huge-name",
        &r,
        invalid_mentioning(&r, &["name", "limit"]),
    );
    let r = Leadership::campaign("c/election", &huge, 10_000, campaign);
    a.check(
        "campaign-huge-value",
        &r,
        invalid_mentioning(&r, &["value", "limit"]),
    );

    let held = locks::lock("c/lock", ME, 10_000, o);
    a.check("lock", &held, held.is_ok());
    let r = Leadership::campaign("c/lock", "v", 10_000, campaign);
    a.check(
        "campaign-on-lock",
        &r,
        matches!(r, Err(Error::InvalidArgument(_))),
    );
    let r = semaphores::acquire("c/lock", "other", 2, 10_000, o);
    a.check(
        "permit-on-lock",
        &r,
        matches!(r, Err(Error::InvalidArgument(_))),
    );
    let r = rwlocks::lock_shared("c/lock", ME, 10_000, o);
    a.check(
        "both-modes",
        &r,
        matches!(r, Err(Error::InvalidArgument(_))),
    );
    let r = elections::leader("c/lock");
    a.check(
        "leader-of-lock",
        &r,
        matches!(r, Err(Error::InvalidArgument(_))),
    );
    let r = locks::unlock("c/lock", ME, None);
    a.check("unlock", &r, r.is_ok());
    a.finish()
}

fn huge_owner() -> ! {
    let mut a = Attack::new("huge-owner");
    let owner = "o".repeat(HUGE);
    let name = "h/owner";
    let words = ["owner", "limit"];

    let r = locks::lock(name, &owner, 10_000, opts(0, Durability::Persistent));
    a.check("lock", &r, invalid_mentioning(&r, &words));
    let r = locks::unlock(name, &owner, None);
    a.check("unlock", &r, invalid_mentioning(&r, &words));
    let r = locks::extend(name, &owner, 10_000);
    a.check("extend", &r, invalid_mentioning(&r, &words));
    // Nothing changed.
    let r = locks::get(name);
    a.check("get", &r, matches!(r, Ok(None)));
    a.finish()
}

fn ttl() -> ! {
    let mut a = Attack::new("ttl");
    let o = opts(0, Durability::Persistent);
    let zero = ["ttl"];
    let over = ["ttl", "maximum"];

    let r = locks::lock("t/zero", ME, 0, o);
    a.check("lock-ttl-0", &r, invalid_mentioning(&r, &zero));
    let r = locks::lock("t/max", ME, u32::MAX, o);
    a.check("lock-ttl-max", &r, invalid_mentioning(&r, &over));
    let r = Guard::acquire("t/guard", 0, o);
    a.check("guard-ttl-0", &r, invalid_mentioning(&r, &zero));
    let r = Guard::acquire("t/guard", u32::MAX, o);
    a.check("guard-ttl-max", &r, invalid_mentioning(&r, &over));
    let r = locks::lock("t/wait", ME, 10_000, opts(u32::MAX, Durability::Persistent));
    a.check(
        "lock-wait-max",
        &r,
        invalid_mentioning(&r, &["wait", "maximum"]),
    );

    // Extending a held lock with a bad ttl changes nothing.
    let held = locks::lock("t/held", ME, 10_000, o);
    a.check("lock-held", &held, held.is_ok());
    let r = locks::extend("t/held", ME, 0);
    a.check("extend-ttl-0", &r, invalid_mentioning(&r, &zero));
    let r = locks::extend("t/held", ME, u32::MAX);
    a.check("extend-ttl-max", &r, invalid_mentioning(&r, &over));
    if let Ok(grant) = held {
        let r = locks::get("t/held");
        let unchanged = matches!(&r, Ok(Some(info))
            if info.owner == ME
                && info.fencing_token == grant.fencing_token
                && info.expires_at_ms == grant.expires_at_ms);
        a.check("get-held", &r, unchanged);
        let r = locks::unlock("t/held", ME, Some(grant.fencing_token));
        a.check("unlock-held", &r, r.is_ok());
    }
    for name in ["t/zero", "t/max", "t/guard", "t/wait", "t/held"] {
        let r = locks::get(name);
        a.check(&format!("get {name}"), &r, matches!(r, Ok(None)));
    }
    a.finish()
}

// --- quota -------------------------------------------------------------------

fn quota(max: u64) -> ! {
    let mut a = Attack::new("quota");
    let o = opts(0, Durability::Ephemeral);
    let started = Instant::now();
    let mut granted = 0u64;
    let mut refusal = None;
    for i in 0..max {
        match locks::lock(&format!("q/{i}"), ME, 60_000, o) {
            Ok(_) => granted += 1,
            Err(e) => {
                refusal = Some(e);
                break;
            }
        }
    }
    println!(
        "granted {granted} of {max} attempts in {} ms",
        started.elapsed().as_millis()
    );
    match refusal {
        None => a.check("refusal", &"none: every lock was granted", false),
        Some(e) => {
            let denied = matches!(&e, Error::Denied(m) if m.contains("quota"));
            a.check("refusal", &e, denied);
            // Past the quota, a guard is refused too...
            let r = Guard::acquire("q/guard", 60_000, o);
            a.check(
                "guard",
                &r,
                matches!(&r, Err(Error::Denied(m)) if m.contains("quota")),
            );
            // ...but retrying a lock already held is not a new lock.
            if granted > 0 {
                let r = locks::lock("q/0", ME, 60_000, o);
                a.check("retry q/0", &r, r.is_ok());
            }
        }
    }
    a.finish()
}

// --- namespaces and owners ---------------------------------------------------

fn other_namespace(ns: &str, name: &str, owner: &str) -> ! {
    let mut a = Attack::new("other-namespace");
    let be = (ns.len() as u16).to_be_bytes();
    let le = (ns.len() as u16).to_le_bytes();
    let names = [
        // The same name: in this namespace it is another lock.
        name.to_string(),
        format!("{ns}/{name}"),
        format!("/{ns}/{name}"),
        format!("../{ns}/{name}"),
        format!("../../{ns}/{name}"),
        format!("./../{ns}/{name}"),
        format!("{ns}/../{ns}/{name}"),
        format!("{ns}\0{name}"),
        format!("\0{ns}/{name}"),
        format!("{ns}\0\0{name}"),
        format!("{ns}:{name}"),
        format!("{ns}\\{name}"),
        format!("%2e%2e%2f{ns}%2f{name}"),
        // A redb key is u16-BE length | namespace | name: spell the victim's.
        format!("{}{}{ns}{name}", be[0] as char, be[1] as char),
        format!("{}{}{ns}{name}", le[0] as char, le[1] as char),
    ];
    let p = opts(0, Durability::Persistent);
    for n in &names {
        let shown = format!("{n:?}");
        let r = locks::get(n);
        a.check(&format!("get {shown}"), &r, matches!(r, Ok(None)));
        let r = locks::unlock(n, owner, None);
        a.check(
            &format!("unlock-as-owner {shown}"),
            &r,
            matches!(r, Err(Error::NotHeld)),
        );
        let r = locks::extend(n, owner, 60_000);
        a.check(
            &format!("extend-as-owner {shown}"),
            &r,
            matches!(r, Err(Error::NotHeld)),
        );
        let r = locks::lock(n, ME, 60_000, p);
        a.check(&format!("lock {shown}"), &r, r.is_ok());
        let r = locks::get(n);
        a.check(
            &format!("get-after {shown}"),
            &r,
            matches!(&r, Ok(Some(info)) if info.owner == ME),
        );
    }
    // The empty name is refused, not mapped to anything.
    let r = locks::get("");
    a.check("get \"\"", &r, invalid_mentioning(&r, &["name"]));
    let r = locks::lock("", ME, 60_000, p);
    a.check("lock \"\"", &r, invalid_mentioning(&r, &["name"]));
    a.finish()
}

fn guess_owner(name: &str) -> ! {
    let mut a = Attack::new("guess-owner");
    let mut guesses: Vec<String> = [
        "",
        "guard",
        "guard-",
        "guard-00000000000000000000000000000000",
        "guard-00000000000000000000000000000001",
        "guard-ffffffffffffffffffffffffffffffff",
        "GUARD-00000000000000000000000000000000",
        "guard-*",
        "*",
        "%",
        ".*",
        "\0",
        "holder",
        "hostile",
        "owner",
        "test",
        "victim",
        "rust",
        "root",
        "admin",
    ]
    .map(String::from)
    .to_vec();
    let fixed = guesses.len();
    guesses.extend((0..1000).map(|_| format!("guard-{:032x}", random_u128())));

    // Refused (not-owner), or invalid for the empty owner; never anything else.
    fn refused<T>(r: &Result<T, Error>) -> bool {
        matches!(r, Err(Error::NotOwner | Error::InvalidArgument(_)))
    }
    let mut tally: BTreeMap<String, u32> = BTreeMap::new();
    for (i, guess) in guesses.iter().enumerate() {
        let step = format!("{guess:?}");
        let unlock = locks::unlock(name, guess, None);
        let unlock_token = locks::unlock(name, guess, Some(random_u64()));
        let extend = locks::extend(name, guess, 60_000);
        // Taking it "as" the guessed owner must not take it over either.
        let take = locks::lock(name, guess, 60_000, opts(0, Durability::Persistent));
        let take_ok = matches!(&take, Err(Error::Busy(_) | Error::InvalidArgument(_)));
        for (what, kind) in [
            ("unlock", kind(&unlock)),
            ("unlock-token", kind(&unlock_token)),
            ("extend", kind(&extend)),
            ("lock", kind(&take)),
        ] {
            *tally.entry(format!("{what}:{kind}")).or_default() += 1;
        }
        if i < fixed {
            a.check(&format!("unlock {step}"), &unlock, refused(&unlock));
            a.check(
                &format!("unlock-token {step}"),
                &unlock_token,
                refused(&unlock_token),
            );
            a.check(&format!("extend {step}"), &extend, refused(&extend));
            a.check(&format!("lock {step}"), &take, take_ok);
        } else {
            a.check_quiet(&format!("unlock {step}"), &unlock, refused(&unlock));
            a.check_quiet(
                &format!("unlock-token {step}"),
                &unlock_token,
                refused(&unlock_token),
            );
            a.check_quiet(&format!("extend {step}"), &extend, refused(&extend));
            a.check_quiet(&format!("lock {step}"), &take, take_ok);
        }
    }
    println!(
        "result guess-owner tally {} guesses {tally:?}",
        guesses.len()
    );
    let r = locks::get(name);
    a.check("still-held", &r, matches!(r, Ok(Some(_))));
    a.finish()
}

// --- guards, waiters -----------------------------------------------------------

fn trap_guards(n: u64, durability: Option<&str>) -> ! {
    let durability = match durability {
        None | Some("ephemeral") => Durability::Ephemeral,
        Some("persistent") => Durability::Persistent,
        Some(other) => usage(&format!("unknown durability {other:?}")),
    };
    let mut guards = Vec::new();
    for i in 0..n {
        match Guard::acquire(&format!("g/{i}"), 60_000, opts(0, durability)) {
            Ok(guard) => guards.push(guard),
            Err(e) => {
                println!("result trap-guards refused g/{i} {e:?}");
                break;
            }
        }
    }
    println!("acquired {}", guards.len());
    flush();
    std::hint::black_box(&guards);
    // No destructor runs: only the host can release the guards.
    std::process::abort();
}

fn waiters(n: u64, name: &str) -> ! {
    let mut a = Attack::new("waiters");
    let o = opts(0, Durability::Ephemeral);
    let held = locks::lock(name, "holder", 60_000, o);
    a.check("hold", &held, held.is_ok());
    let started = Instant::now();
    let mut busy = 0u64;
    for i in 0..n {
        let r = locks::lock(
            name,
            &format!("waiter-{i}"),
            10_000,
            opts(1, Durability::Ephemeral),
        );
        let expected = matches!(&r, Err(Error::Busy(info)) if info.owner == "holder");
        busy += u64::from(expected);
        a.check_quiet(&format!("wait {i}"), &r, expected);
    }
    println!(
        "result waiters busy {busy} of {n} in {} ms",
        started.elapsed().as_millis()
    );
    if let Ok(grant) = held {
        let r = locks::unlock(name, "holder", Some(grant.fencing_token));
        a.check("unlock", &r, r.is_ok());
    }
    let r = locks::get(name);
    a.check("free", &r, matches!(r, Ok(None)));
    a.finish()
}
