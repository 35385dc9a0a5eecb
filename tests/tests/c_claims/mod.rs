//! Read-write locks and semaphores from C (docs/contract.md#c21-shared,
//! #c22-semaphores): `guest/c-conformance/claims.c`, built as `c-claims`,
//! run through the path `lockd run` uses, with the store checked afterwards.

use lockd_components::run::RunOutcome;
use lockd_core::{Claim, Durability, Engine, Limits, LockOptions, LockService};

use crate::common::{run_guest, text};

/// The guest's steps: 1-6 a read-write lock, 7-13 a semaphore, 14 holds,
/// 15 what it leaves for the host.
const STEPS: u32 = 15;

/// The guest's stdout when it passed: exit 0, `ok 1` to `ok 15` each
/// printed, no step past them, no `FAIL`. Otherwise what went wrong.
fn verdict(out: &RunOutcome) -> Result<String, String> {
    let stdout = text(&out.stdout);
    let report = || format!("{stdout}\n{}\n{:?}", text(&out.stderr), out.trap);
    if out.exit_code != 0 {
        return Err(format!("exit code {}:\n{}", out.exit_code, report()));
    }
    if stdout.contains("FAIL") {
        return Err(format!("a step failed:\n{}", report()));
    }
    let printed = |step: u32| stdout.lines().any(|l| l == format!("ok {step}"));
    if let Some(missing) = (1..=STEPS).find(|&step| !printed(step)) {
        return Err(format!("step {missing} missing:\n{}", report()));
    }
    if printed(STEPS + 1) {
        return Err(format!("a step past {STEPS}: update STEPS\n{}", report()));
    }
    Ok(stdout)
}

/// The numbers after `key ` on the line that starts with it.
fn tokens(stdout: &str, key: &str) -> Vec<u64> {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no `{key} ...` line:\n{stdout}"));
    line.split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect()
}

/// The guest passes every step on a redb store whose tokens start above
/// 2^53, and leaves `P/left-rw` held shared by `c1` and `c2` and one permit
/// of the semaphore `P/left-sem` of 2 held by `c`, with the exact tokens it
/// printed, persistent (still held after a reopen); nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn c_claims() {
    let dir = tempfile::tempdir().unwrap();
    let store = super::store_above_doubles(&dir).await;
    let service = super::open(&store);
    let out = run_guest(lockd_guest_tests::C_CLAIMS, &service, "c", &["P"]).await;
    let stdout = verdict(&out).unwrap_or_else(|why| panic!("c-claims failed: {why}"));
    let shared = tokens(&stdout, "shared");
    let permit = tokens(&stdout, "permit");
    assert_eq!((shared.len(), permit.len()), (2, 1), "{stdout}");
    // Steps 1-14 took more than 14 grants before these.
    assert!(shared[0] > super::ABOVE_DOUBLES + 14, "{shared:?}");

    expect_left(&service, &shared, permit[0]).await;
    // Another namespace sees none of it.
    assert!(service.list("elsewhere", "P/").await.unwrap().is_empty());
    drop(service);
    expect_left(&super::reopen(&store).await, &shared, permit[0]).await;
}

/// What `c-claims` leaves: `P/left-rw` held shared by `c1` and `c2` with
/// the tokens `shared`, one permit of `P/left-sem` of 2 held by `c` with
/// the token `permit`, all persistent; nothing else under `P/`.
async fn expect_left(service: &LockService, shared: &[u64], permit: u64) {
    let rw = service.describe("c", "P/left-rw").await.unwrap();
    let seen: Vec<(&str, u64, Claim, Durability)> = rw
        .holders
        .iter()
        .map(|h| {
            (
                h.info.owner.as_str(),
                h.info.fencing_token,
                h.claim,
                h.info.durability,
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            ("c1", shared[0], Claim::Shared, Durability::Persistent),
            ("c2", shared[1], Claim::Shared, Durability::Persistent),
        ]
    );
    let sem = service.describe("c", "P/left-sem").await.unwrap();
    assert_eq!(sem.holders.len(), 1, "{sem:?}");
    let holder = &sem.holders[0];
    assert_eq!(
        (holder.info.owner.as_str(), holder.info.fencing_token),
        ("c", permit)
    );
    assert_eq!(holder.claim, Claim::Permit { permits: 2 });
    assert_eq!(holder.info.durability, Durability::Persistent);
    let names: Vec<String> = service
        .list("c", "P/")
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert_eq!(names, ["P/left-rw", "P/left-sem"]);
}

/// Negative control of [`verdict`]: a store that breaks the guest's
/// expectations (the rwlock's name held exclusive by the host; the
/// semaphore's name holding a permit of another count) makes the guest
/// report the failing step, and the verdict refuses the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_claims_reports_a_failing_step() {
    let exclusive = LockOptions::default();
    let permit_of_5 = LockOptions {
        claim: Claim::Permit { permits: 5 },
        ..LockOptions::default()
    };
    for (name, options, failing) in [
        ("P/rw", exclusive, "FAIL 1: "),
        ("P/sem", permit_of_5, "FAIL 7: "),
    ] {
        let service = LockService::new(Engine::memory(), Limits::default());
        service
            .lock("c", name, "host", 60_000, options)
            .await
            .unwrap();
        let out = run_guest(lockd_guest_tests::C_CLAIMS, &service, "c", &["P"]).await;
        let why = verdict(&out).expect_err("the verdict passed a failing run");
        assert_eq!(out.exit_code, 1, "{why}");
        assert!(why.contains(failing), "{name}: {why}");
    }
}

/// Negative control of [`verdict`] without a guest: a run that exits 0 but
/// stops short of the last step, or goes past it, is refused too.
#[test]
fn the_verdict_wants_every_step_and_no_more() {
    let outcome = |stdout: String| RunOutcome {
        exit_code: 0,
        trap: None,
        stdout: stdout.into_bytes(),
        stderr: Vec::new(),
    };
    let steps = |n: u32| (1..=n).map(|s| format!("ok {s}\n")).collect::<String>();
    assert!(verdict(&outcome(steps(STEPS))).is_ok());
    let short = verdict(&outcome(steps(STEPS - 1))).unwrap_err();
    assert!(short.contains(&format!("step {STEPS} missing")), "{short}");
    let long = verdict(&outcome(steps(STEPS + 1))).unwrap_err();
    assert!(long.contains("a step past"), "{long}");
}
