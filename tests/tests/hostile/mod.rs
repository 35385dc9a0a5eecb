//! Hostile guests (docs/contract.md#isolation, wasm): `guest/rust-hostile` attacks the host
//! through the raw lock capability, run through the path `lockd run` uses
//! (`common::run_guest`), against a redb store.
//!
//! For every attack the test asserts the guest's exit status (or trap), that
//! each answer is the clear error a safe host gives (the guest prints them
//! and its verdict; the test reads the exact messages), the store afterwards,
//! and that the host stayed healthy *during* the attack: the conformance
//! guest runs again and again in its own namespace (`bystander`) while the
//! attack runs, every run must pass, and a probe task's direct lock/unlock
//! round trips must stay fast.
//!
//! `loop` and `grow` run with `RunLimits` (what `lockd run --timeout
//! --max-memory-bytes` sets); the HTTP path bounds both by default, see
//! `http_guests::http_hostile`.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockd_components::run::{RunLimits, RunOutcome, TRAP_EXIT_CODE};
use lockd_core::metrics::Op;
use lockd_core::{Limits, LockError, LockOptions, LockService, Quotas};

use crate::common::{run_guest, run_guest_limited, text};

/// The namespace the hostile guest runs in.
const HOSTILE: &str = "hostile";
/// The namespace of the well-behaved guest that runs during each attack.
const BYSTANDER: &str = "bystander";
/// The most one attack, or one bystander run, may take.
const DEADLINE: Duration = Duration::from_secs(120);
/// The slowest direct lock + unlock round trip tolerated during an attack.
const PROBE_LIMIT: Duration = Duration::from_secs(5);

/// A redb store in a fresh directory.
fn store() -> (LockService, tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.redb");
    let service = LockService::new(lockd_redb::open(&path).unwrap(), Limits::default());
    (service, dir, path)
}

/// What an attack ended with, and what ran meanwhile.
struct Attacked {
    out: RunOutcome,
    stdout: String,
    /// How long the attack ran.
    took: Duration,
    /// Bystander runs (all passed), and how many of them both started and
    /// finished while the attack ran.
    bystander_runs: usize,
    bystander_runs_inside: usize,
    /// Direct round trips of the probe, and the slowest.
    probes: usize,
    worst_probe: Duration,
}

impl std::fmt::Debug for Attacked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {} trap {:?} after {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.out.exit_code,
            self.out.trap.as_deref().map(|t| t.lines().next()),
            self.took,
            tail(&self.stdout),
            tail(&text(&self.out.stderr)),
        )
    }
}

/// The last 40 lines of `s`, for panic messages.
fn tail(s: &str) -> String {
    let lines: Vec<_> = s.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

impl Attacked {
    /// The guest's verdict is `safe`: exit 0, no trap, nothing unexpected.
    fn assert_safe(&self, attack: &str) {
        assert_eq!(self.out.exit_code, 0, "{self:?}");
        assert!(self.out.trap.is_none(), "{self:?}");
        assert!(
            self.stdout
                .lines()
                .any(|l| l == format!("verdict {attack} safe")),
            "{self:?}"
        );
        assert!(!self.stdout.contains("UNEXPECTED"), "{self:?}");
    }

    /// The host's answer to `step`, as the guest printed it.
    fn answer(&self, attack: &str, step: &str) -> &str {
        let prefix = format!("result {attack} {step} ");
        self.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no answer to {step:?}: {self:?}"))
    }

    /// A line starting with `prefix`, without it.
    fn line(&self, prefix: &str) -> &str {
        self.stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no line {prefix:?}: {self:?}"))
    }
}

/// One run of the conformance guest in namespace `bystander`, under a prefix
/// of its own; it must pass every step.
async fn bystander(service: &LockService) {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let prefix = format!("B{}", RUNS.fetch_add(1, Ordering::Relaxed));
    let out = tokio::time::timeout(
        DEADLINE,
        run_guest(
            lockd_guest_tests::RUST_CONFORMANCE,
            service,
            BYSTANDER,
            &[&prefix],
        ),
    )
    .await
    .expect("a bystander run outlived the deadline");
    let stdout = text(&out.stdout);
    assert_eq!(
        out.exit_code,
        0,
        "the bystander failed during an attack:\n{stdout}\n{}\n{:?}",
        text(&out.stderr),
        out.trap
    );
    assert!(
        stdout.lines().any(|l| l == "ok 12") && !stdout.contains("FAIL"),
        "{stdout}"
    );
}

/// Runs `rust-hostile <args>` in namespace `hostile` and, while it runs, the
/// bystander guest over and over plus a probe of direct lock/unlock round
/// trips. Panics if the attack outlives [`DEADLINE`], if any bystander run
/// fails, if no bystander run overlapped the attack, or if a probe round
/// trip took longer than [`PROBE_LIMIT`].
async fn attack(service: &LockService, args: &[&str]) -> Attacked {
    attack_limited(service, args, RunLimits::default()).await
}

/// [`attack`] with time and memory bounds on the attacker's instance.
async fn attack_limited(service: &LockService, args: &[&str], limits: RunLimits) -> Attacked {
    let argv: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let attacker = {
        let service = service.clone();
        tokio::spawn(async move {
            let args: Vec<&str> = argv.iter().map(String::as_str).collect();
            let started = Instant::now();
            let out = run_guest_limited(
                lockd_guest_tests::RUST_HOSTILE,
                &service,
                HOSTILE,
                &args,
                limits,
            )
            .await;
            (out, started, Instant::now())
        })
    };
    let stop = Arc::new(AtomicBool::new(false));
    let prober = {
        let (service, stop) = (service.clone(), stop.clone());
        tokio::spawn(async move {
            let (mut n, mut worst) = (0, Duration::ZERO);
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                service
                    .lock("probe", "p", "probe", 10_000, LockOptions::default())
                    .await
                    .expect("probe lock");
                service
                    .unlock("probe", "p", "probe", None)
                    .await
                    .expect("probe unlock");
                worst = worst.max(t.elapsed());
                n += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            (n, worst)
        })
    };

    let begun = Instant::now();
    let mut windows = Vec::new();
    loop {
        let start = Instant::now();
        bystander(service).await;
        windows.push((start, Instant::now()));
        if attacker.is_finished() {
            break;
        }
        assert!(
            begun.elapsed() < DEADLINE,
            "attack {args:?} still running after {DEADLINE:?}"
        );
    }
    let (out, started, ended) = tokio::time::timeout(DEADLINE, attacker)
        .await
        .unwrap_or_else(|_| panic!("attack {args:?} outlived {DEADLINE:?}"))
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    let (probes, worst_probe) = prober.await.unwrap();

    let attacked = Attacked {
        stdout: text(&out.stdout),
        out,
        took: ended - started,
        bystander_runs: windows.len(),
        bystander_runs_inside: windows
            .iter()
            .filter(|(s, e)| *s >= started && *e <= ended)
            .count(),
        probes,
        worst_probe,
    };
    assert!(
        windows.iter().any(|(s, e)| *s < ended && started < *e),
        "no bystander run overlapped the attack {args:?}: {attacked:?}"
    );
    assert!(
        probes > 0 && worst_probe < PROBE_LIMIT,
        "probe: {probes} round trips, worst {worst_probe:?}"
    );
    let line = format!(
        "attack {args:?}: exit {} in {:?}; bystander runs {} ({} inside), probes {} (worst {:?})",
        attacked.out.exit_code,
        attacked.took,
        attacked.bystander_runs,
        attacked.bystander_runs_inside,
        attacked.probes,
        attacked.worst_probe
    );
    eprintln!("{line}");
    lockd_test_support::report(&line);
    attacked
}

/// Every lock `namespace` holds: name -> owner.
async fn held(service: &LockService, namespace: &str, prefix: &str) -> HashMap<String, String> {
    service
        .list(namespace, prefix)
        .await
        .unwrap()
        .into_iter()
        .map(|l| (l.name, l.info.owner))
        .collect()
}

/// A 10 MiB name, a 10 MiB owner, and out-of-range ttl and wait: each call
/// answers `invalid-argument` naming the limit, and nothing is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn rust_hostile() {
    let (service, _dir, _) = store();

    // Shared locks, semaphores and elections: every bad input refused, the
    // lock the attack took left free.
    let a = attack(&service, &["claims"]).await;
    a.assert_safe("claims");
    assert_eq!(service.get("hostile", "c/lock").await.unwrap(), None);

    let a = attack(&service, &["huge-name"]).await;
    a.assert_safe("huge-name");
    for step in ["lock", "get", "unlock", "extend", "guard"] {
        let answer = a.answer("huge-name", step);
        assert!(
            answer.contains(
                "Error::InvalidArgument(\"name is 10485760 bytes, over the limit of 512 bytes\")"
            ),
            "{step}: {answer}"
        );
    }
    assert!(a.took < Duration::from_secs(30), "{a:?}");

    let a = attack(&service, &["huge-owner"]).await;
    a.assert_safe("huge-owner");
    for step in ["lock", "unlock", "extend"] {
        let answer = a.answer("huge-owner", step);
        assert!(
            answer.contains(
                "Error::InvalidArgument(\"owner is 10485760 bytes, over the limit of 256 bytes\")"
            ),
            "{step}: {answer}"
        );
    }
    assert_eq!(a.answer("huge-owner", "get"), "Ok(None)");
    assert!(a.took < Duration::from_secs(30), "{a:?}");

    let a = attack(&service, &["ttl"]).await;
    a.assert_safe("ttl");
    for step in ["lock-ttl-0", "guard-ttl-0", "extend-ttl-0"] {
        let answer = a.answer("ttl", step);
        assert!(
            answer.contains("Error::InvalidArgument(\"ttl must be at least 1 ms\")"),
            "{step}: {answer}"
        );
    }
    for step in ["lock-ttl-max", "guard-ttl-max", "extend-ttl-max"] {
        let answer = a.answer("ttl", step);
        assert!(
            answer.contains(
                "Error::InvalidArgument(\"ttl of 4294967295 ms is over the maximum of 86400000 ms\")"
            ),
            "{step}: {answer}"
        );
    }
    let answer = a.answer("ttl", "lock-wait-max");
    assert!(
        answer.contains(
            "Error::InvalidArgument(\"wait of 4294967295 ms is over the maximum of 3600000 ms\")"
        ),
        "{answer}"
    );

    // None of the three attacks left anything in the guest's namespace, and
    // the failed extends did not move t/held (the guest checked its expiry).
    assert_eq!(held(&service, HOSTILE, "").await, HashMap::new());
}

/// 100,000 attempts against a quota of 1,000: exactly 1,000 granted, then
/// `denied` naming the quota, for plain locks and guards alike; other
/// namespaces are not limited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota() {
    let (service, _dir, _) = store();
    let service = service.with_quotas(Quotas {
        default: None,
        per_namespace: HashMap::from([(HOSTILE.to_string(), 1_000)]),
    });
    let a = attack(&service, &["quota", "100000"]).await;
    a.assert_safe("quota");
    assert!(
        a.line("granted ").starts_with("1000 of 100000 attempts"),
        "{a:?}"
    );
    let refusal =
        "Error::Denied(\"namespace \\\"hostile\\\" already holds 1000 locks, its quota\")";
    assert_eq!(a.answer("quota", "refusal"), refusal);
    assert_eq!(a.answer("quota", "guard"), format!("Err({refusal})"));
    assert!(a.answer("quota", "retry q/0").starts_with("Ok("), "{a:?}");

    let held = held(&service, HOSTILE, "").await;
    assert_eq!(held.len(), 1_000);
    assert!((0..1_000).all(|i| held.get(&format!("q/{i}")).map(String::as_str) == Some("hostile")));
    // The host's own calls in that namespace are held to the quota too.
    let denied = service
        .lock(HOSTILE, "q/host", "host", 1_000, LockOptions::default())
        .await;
    assert!(matches!(denied, Err(LockError::Denied(_))), "{denied:?}");
    // Other namespaces are not limited by it.
    assert!(service.list(BYSTANDER, "").await.unwrap().len() >= a.bystander_runs);
    service
        .lock("elsewhere", "x", "host", 1_000, LockOptions::default())
        .await
        .unwrap();
    assert!(a.took < Duration::from_secs(60), "{a:?}");
}

/// Names shaped like paths into another namespace, with NULs, or spelling
/// the store's own key layout reach only the guest's own namespace: the
/// victim's lock is invisible and untouched, before and after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_namespace() {
    let (service, _dir, path) = store();
    let victim = service
        .lock(
            "victim",
            "secret",
            "victim-owner",
            60_000,
            LockOptions::default(),
        )
        .await
        .unwrap();
    let a = attack(
        &service,
        &["other-namespace", "victim", "secret", "victim-owner"],
    )
    .await;
    a.assert_safe("other-namespace");
    assert_eq!(
        a.answer("other-namespace", "lock \"\""),
        "Err(Error::InvalidArgument(\"name must not be empty\"))"
    );

    let check = |service: LockService| async move {
        let info = service.get("victim", "secret").await.unwrap().unwrap();
        assert_eq!(
            (info.owner.as_str(), info.fencing_token, info.expires_at_ms),
            ("victim-owner", victim.fencing_token, victim.expires_at_ms),
            "the victim's lock changed"
        );
        assert_eq!(held(&service, "victim", "").await.len(), 1);
        let mine = held(&service, HOSTILE, "").await;
        assert_eq!(mine.len(), 15, "{mine:?}");
        assert!(mine.values().all(|o| o == "hostile"), "{mine:?}");
        for name in [
            "secret",
            "victim/secret",
            "../victim/secret",
            "../../victim/secret",
            "victim\0secret",
            "\0victim/secret",
            "\0\u{6}victimsecret",
        ] {
            assert!(mine.contains_key(name), "{name:?} not in {mine:?}");
        }
    };
    check(service.clone()).await;
    // The odd names are persistent: after a restart each is still in the
    // guest's namespace and nothing leaked into the victim's.
    drop(service);
    let service = LockService::new(lockd_redb::open(&path).unwrap(), Limits::default());
    check(service).await;
}

/// Guessed owners (fixed ones like `guard-000…`, and 1,000 random
/// `guard-<hex>`) cannot unlock, extend or take a lock held by a
/// guard-style owner in the guest's own namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guess_owner() {
    let (service, _dir, _) = store();
    let random = RandomState::new();
    let owner = format!(
        "guard-{:016x}{:016x}",
        random.hash_one(1u8),
        random.hash_one(2u8)
    );
    let grant = service
        .lock(HOSTILE, "guarded", &owner, 60_000, LockOptions::default())
        .await
        .unwrap();
    let a = attack(&service, &["guess-owner", "guarded"]).await;
    a.assert_safe("guess-owner");
    let tally = a.line("result guess-owner tally ");
    assert!(tally.starts_with("1020 guesses"), "{tally}");
    assert!(!tally.contains(":ok"), "a guess worked: {tally}");
    assert_eq!(
        a.answer(
            "guess-owner",
            "unlock \"guard-00000000000000000000000000000000\""
        ),
        "Err(Error::NotOwner)"
    );
    assert_eq!(
        a.answer("guess-owner", "unlock \"\""),
        "Err(Error::InvalidArgument(\"owner must not be empty\"))"
    );
    let info = service.get(HOSTILE, "guarded").await.unwrap().unwrap();
    assert_eq!(
        (info.owner, info.fencing_token, info.expires_at_ms),
        (owner, grant.fencing_token, grant.expires_at_ms),
        "the lock changed hands or its lease moved"
    );
}

/// A guest that traps while holding guards: 1,000 ephemeral, 5,000 (past the
/// 4,096-guard cap: `denied`), and 100 persistent ones. Each run ends in a
/// trap (exit 134 with the trap message), and every guard lock is free at
/// once afterwards, on disk too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trap_guards() {
    let (service, _dir, path) = store();
    for (n, durability, acquired) in [
        ("1000", "ephemeral", 1_000),
        ("5000", "ephemeral", 4_096),
        ("100", "persistent", 100),
    ] {
        let before = service.metrics().count(Op::Lock, "ok");
        let a = attack(&service, &["trap-guards", n, durability]).await;
        assert_eq!(a.out.exit_code, TRAP_EXIT_CODE, "{a:?}");
        let trap = a.out.trap.as_deref().unwrap_or_default();
        assert!(trap.contains("unreachable"), "{trap}");
        assert_eq!(
            a.line("acquired ").parse::<usize>().unwrap(),
            acquired,
            "{a:?}"
        );
        if n == "5000" {
            assert_eq!(
                a.line("result trap-guards refused g/4096 "),
                "Error::Denied(\"this instance already holds 4096 guards and leases, the most allowed\")"
            );
        }
        assert!(service.metrics().count(Op::Lock, "ok") >= before + acquired as u64);
        // Released when the instance ended: nothing to wait for.
        let left = held(&service, HOSTILE, "g/").await;
        assert!(
            left.is_empty(),
            "{} guard locks left after the trap",
            left.len()
        );
        let next = service
            .lock(HOSTILE, "g/0", "next", 1_000, LockOptions::default())
            .await
            .unwrap();
        service
            .unlock(HOSTILE, "g/0", "next", Some(next.fencing_token))
            .await
            .unwrap();
        assert!(a.took < Duration::from_secs(60), "{a:?}");
    }
    // The persistent guards' releases reached the disk.
    drop(service);
    let service = LockService::new(lockd_redb::open(&path).unwrap(), Limits::default());
    assert_eq!(held(&service, HOSTILE, "").await, HashMap::new());
}

/// 2,000 waits from one instance on a held lock (one after the other: a
/// wasip2 command is single-threaded), each with `wait-ms` 1: all time out
/// with `busy` naming the holder, each really waited, no waiter is left
/// queued, and the bystander completes whole runs meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters() {
    let (service, _dir, _) = store();
    let busy_before = service.metrics().count(Op::Lock, "busy");
    let a = attack(&service, &["waiters", "2000", "w/hot"]).await;
    a.assert_safe("waiters");
    let summary = a.answer("waiters", "busy");
    let (count, ms) = summary
        .strip_suffix(" ms")
        .and_then(|s| s.split_once(" of 2000 in "))
        .unwrap_or_else(|| panic!("{summary}"));
    assert_eq!(count, "2000", "{a:?}");
    let ms: u64 = ms.parse().unwrap();
    assert!(ms >= 2_000, "2,000 waits of 1 ms took only {ms} ms");
    assert!(service.metrics().count(Op::Lock, "busy") >= busy_before + 2_000);
    assert_eq!(service.stats().waiters, 0, "a waiter was left queued");
    assert_eq!(service.get(HOSTILE, "w/hot").await.unwrap(), None);
    assert!(
        a.bystander_runs_inside >= 1,
        "no bystander run completed inside the attack: {a:?}"
    );
    assert!(a.took < Duration::from_secs(60), "{a:?}");
}

/// A runaway loop is stopped at its time limit (a trap, exit 134, a message
/// naming the limit) while the bystander keeps running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runaway_loop() {
    let (service, _dir, _path) = store();
    let limits = RunLimits {
        timeout: Some(Duration::from_secs(1)),
        max_memory_bytes: None,
    };
    let started = Instant::now();
    let attacked = attack_limited(&service, &["loop"], limits).await;
    let out = &attacked.out;
    assert_eq!(out.exit_code, TRAP_EXIT_CODE, "{:?}", out.trap);
    let trap = out.trap.as_deref().unwrap_or_default();
    assert!(trap.contains("time limit"), "{trap}");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(30),
        "took {took:?}"
    );
}

/// Unbounded memory growth traps at the memory cap, having grown no further
/// than it, while the bystander keeps running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbounded_growth() {
    let (service, _dir, _path) = store();
    let cap = 32 << 20;
    let limits = RunLimits {
        timeout: Some(Duration::from_secs(60)),
        max_memory_bytes: Some(cap),
    };
    let attacked = attack_limited(&service, &["grow"], limits).await;
    let out = &attacked.out;
    assert_eq!(
        out.exit_code,
        TRAP_EXIT_CODE,
        "{:?}\n{}",
        out.trap,
        text(&out.stdout)
    );
    let trap = out.trap.as_deref().unwrap_or_default();
    assert!(
        !trap.contains("time limit"),
        "stopped by time, not memory: {trap}"
    );
    let stdout = text(&out.stdout);
    let grown: usize = stdout
        .lines()
        .filter_map(|l| {
            l.strip_prefix("grown ")
                .and_then(|r| r.split_whitespace().next())
        })
        .filter_map(|n| n.parse().ok())
        .max()
        .unwrap_or(0);
    assert!(grown > 0, "the guest never grew: {stdout}");
    assert!(
        grown <= cap >> 20,
        "grew to {grown} MiB past the {} MiB cap",
        cap >> 20
    );
}
