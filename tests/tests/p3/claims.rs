//! `guest/rust-p3-claims`: leases, read-write locks, semaphores and holds
//! through the Rust SDK's async API for WASI 0.3 (`lockd_guest::p3`), a
//! WASI 0.3 command run as `lockd run` runs it, on a memory store. Each mode
//! prints what it saw; the tests judge it and then read the store. Where
//! the guest waits, another of its tasks frees the name once `describe`
//! shows the wait queued, so a waiter granted too early or never shows.

use std::collections::HashMap;

use lockd_core::{Claim, LockService};

use super::{eventually, service, NAMESPACE};
use crate::common::{run_guest, text};

/// What one mode printed: each line's first word, and the words after it.
struct Facts(HashMap<String, Vec<String>>);

impl Facts {
    /// The words after `key`.
    fn words(&self, key: &str) -> Vec<&str> {
        let words = self.0.get(key).unwrap_or_else(|| panic!("no {key:?} line"));
        words.iter().map(String::as_str).collect()
    }

    /// The `i`th word after `key`, as a number.
    fn number(&self, key: &str, i: usize) -> u64 {
        let word = self.words(key)[i];
        word.parse()
            .unwrap_or_else(|_| panic!("{key:?}: {word:?} is not a number"))
    }
}

/// Runs `rust-p3-claims MODE PREFIX` on `service` and answers what it
/// printed, after checking that it succeeded.
async fn run(service: &LockService, mode: &str, prefix: &str) -> Facts {
    let outcome = run_guest(
        lockd_guest_tests::RUST_P3_CLAIMS,
        service,
        NAMESPACE,
        &[mode, prefix],
    )
    .await;
    let stdout = text(&outcome.stdout);
    let failure = format!("{stdout}{}{:?}", text(&outcome.stderr), outcome.trap);
    assert_eq!(outcome.exit_code, 0, "{failure}");
    let lines = stdout.lines().map(|line| {
        let mut words = line.split_whitespace().map(String::from);
        (words.next().unwrap_or_default(), words.collect())
    });
    Facts(lines.collect())
}

/// A lease's locks share its owner and expiry, a rival is busy until the
/// revoke and then takes a lock with a greater token; a lease kept alive
/// outlives twice its TTL while one that is not expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn rust_p3_claims() {
    let service = service();
    let facts = run(&service, "lease", "ls").await;
    let id = facts.words("lease")[0].to_string();
    let (a, b) = (facts.number("locked", 0), facts.number("locked", 1));
    assert!(b > a, "{:?}", facts.words("locked"));
    // A lease that holds a lock answers its grant again.
    assert_eq!(facts.number("locked", 3), a);
    assert_eq!(facts.words("rival"), ["busy", "held-by-lease", "true"]);
    let (before, after) = (facts.number("refreshed", 0), facts.number("refreshed", 1));
    assert!(after > before, "{:?}", facts.words("refreshed"));
    assert_eq!(
        facts.words("refreshed")[3],
        "true",
        "the lock's expiry moved with it"
    );
    assert_eq!(facts.words("b-held"), ["false", "alive", "true"]);
    // Revoked here: `released`, even though the store reports the lease's
    // end to its monitor before the revoke call returns.
    assert_eq!(facts.words("revoked")[0], "released");
    let rival = facts.number("rival-took", 0);
    assert!(rival > b, "the rival's token {rival} after {b}");

    let held = service.get(NAMESPACE, "ls/a").await.unwrap().unwrap();
    assert_eq!((held.owner.as_str(), held.fencing_token), ("rival", rival));
    assert_eq!(service.get(NAMESPACE, "ls/b").await.unwrap(), None);
    assert_eq!(service.get_lease(NAMESPACE, &id).await.unwrap(), None);

    // The negative control of keep-alive: the same lease without it, lost
    // at its expiry, `expired` whether the store's expiry sweep or the
    // host's own timer sees it first.
    let plain = facts.words("plain");
    assert_eq!(plain[0], "expired", "{plain:?}");
    assert_eq!(plain[1..], ["alive", "false", "lock-held", "false"]);
    assert_eq!(facts.words("kept"), ["alive", "true", "lock-held", "true"]);
    // The instance ended, so its kept-alive lease was revoked (detached).
    eventually("the kept lease's lock is released", async || {
        service.get(NAMESPACE, "ls/kept").await.unwrap().is_none()
    })
    .await;
}

/// Two readers share a name; a writer is busy, then waits, and a reader
/// that comes after it is busy (no writer starvation); the writer is
/// granted only once both readers left, with a greater token, and holds
/// the name alone afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p3_rwlock_readers_share_and_a_writer_waits() {
    let service = service();
    let facts = run(&service, "rwlock", "rw").await;
    let (r1, r2) = (facts.number("readers", 0), facts.number("readers", 1));
    assert!(r2 > r1);
    assert_eq!(facts.words("readers")[2..], ["shared", "2"]);
    assert_eq!(facts.words("writer-now"), ["busy"]);
    // With one reader left the writer still waited.
    assert_eq!(
        facts.words("late-reader"),
        ["busy", "waiters-with-one-reader", "1"]
    );
    let writer = facts.number("writer", 0);
    assert!(writer > r2, "the writer's token {writer} after {r2}");

    let state = service.describe(NAMESPACE, "rw/rw").await.unwrap();
    assert_eq!(state.waiters, 0, "{state:?}");
    assert_eq!(state.holders.len(), 1, "{state:?}");
    let holder = &state.holders[0];
    assert_eq!(
        (holder.info.owner.as_str(), holder.info.fencing_token),
        ("w", writer)
    );
    assert_eq!(holder.claim, Claim::Exclusive);
}

/// A semaphore of 2: a third owner is busy (and another size invalid),
/// then waits and gets the permit the first gives back; never more than 2
/// holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p3_semaphore_of_two_with_a_third_waiter() {
    let service = service();
    let facts = run(&service, "semaphore", "sm").await;
    let (x, y) = (facts.number("permits", 0), facts.number("permits", 1));
    assert!(y > x);
    assert_eq!(facts.words("third-now"), ["busy", "other-size", "invalid"]);
    let z = facts.number("third", 0);
    assert!(z > y, "the third permit's token {z} after {y}");
    assert_eq!(facts.words("third")[1..], ["holders-while-waiting", "2"]);
    assert_eq!(facts.words("holders"), ["y,z", "size", "2"]);

    let state = service.describe(NAMESPACE, "sm/sem").await.unwrap();
    let holders: Vec<(&str, u64)> = state
        .holders
        .iter()
        .map(|h| (h.info.owner.as_str(), h.info.fencing_token))
        .collect();
    assert_eq!(holders, [("y", y), ("z", z)]);
    assert!(state
        .holders
        .iter()
        .all(|h| h.claim == Claim::Permit { permits: 2 }));
    assert_eq!(state.waiters, 0, "{state:?}");
}

/// Holds: two shared ones with their own owners, an exclusive one busy and
/// then granted once one shared hold is dropped and the other released;
/// extended (same token) and released (`lost()` says released). A 1-permit
/// hold makes a second busy, and frees the permit when dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p3_holds_share_wait_and_release() {
    let service = service();
    let facts = run(&service, "hold", "hd").await;
    let (s1, s2) = (facts.number("shared", 0), facts.number("shared", 1));
    assert!(s2 > s1);
    assert_eq!(facts.words("shared")[2..], ["distinct-owners", "true"]);
    assert_eq!(facts.words("exclusive-now"), ["busy"]);
    let writer = facts.number("writer", 0);
    assert!(
        writer > s2,
        "the exclusive hold's token {writer} after {s2}"
    );
    assert_eq!(facts.words("writer")[1..3], ["held", "true"]);
    assert_eq!(facts.number("writer", 4), writer, "extend kept the token");
    assert_eq!(facts.words("writer-lost"), ["released"]);
    let permit = facts.number("permit", 0);
    assert_eq!(facts.words("permit")[1..], ["second", "busy"]);
    let next = facts.number("after-drop", 0);
    assert!(next > permit, "the permit's token {next} after {permit}");

    assert!(service
        .describe(NAMESPACE, "hd/hold")
        .await
        .unwrap()
        .is_idle());
    // The instance ended holding the permit: dropped, so released.
    eventually("the last permit hold is released", async || {
        service
            .describe(NAMESPACE, "hd/slots")
            .await
            .unwrap()
            .holders
            .is_empty()
    })
    .await;
}
