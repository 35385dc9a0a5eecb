//! Elections through `lockd:lock@0.2.0`: a campaign awaited in the queue
//! while the instance's other tasks are answered, a leadership's `lost`
//! future on force-release and on expiry, a campaign given up without a
//! trace, and a `leader-watch` whose `changed` returns on each change the
//! host makes.

use std::time::{Duration, Instant};

use lockd_core::LockOptions;

use super::bindings::lockd::lock0_2_0::types::LostReason;
use super::{eventually, instance, service, NAMESPACE};

/// The bound of each test's guest calls: a `lost` or `changed` that never
/// returned would otherwise hang the test.
const BOUND: Duration = Duration::from_secs(20);

/// The host leads `E`; the guest's campaign waits in the queue while a
/// ping of the same instance is answered; once the host resigns the guest
/// leads, proclaims, and its `lost` future resolves with `ended-elsewhere`
/// when the host force-releases it. Beside it, a leadership of 300 ms
/// without keep-alive is lost with `expired`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_waits_proclaims_and_is_lost() {
    let service = service();
    let host = service
        .campaign(NAMESPACE, "E", "host", "h", 60_000, LockOptions::default())
        .await
        .unwrap();
    let (mut store, guest) = instance(&service).await;
    let probe = guest.lockd_p3_probe_probe();
    let other = service.clone();
    let run = store.run_concurrent(async |accessor| {
        let started = Instant::now();
        let leading =
            probe.call_lead_until_lost(accessor, "E".into(), "g".into(), 60_000, 10_000, true);
        let expiring = probe.call_lead_until_lost(accessor, "X".into(), "x".into(), 300, 0, false);
        let host_side = async {
            eventually("the guest waits in E's queue", async || {
                other.describe(NAMESPACE, "E").await.unwrap().waiters == 1
            })
            .await;
            // Answered while the campaign waits.
            assert!(probe.call_ping(accessor, "E".into()).await.unwrap());
            let pinged_at = started.elapsed();
            tokio::time::sleep(Duration::from_millis(200)).await;
            let resigned_at = started.elapsed();
            other.unlock(NAMESPACE, "E", "host", None).await.unwrap();
            eventually("the guest leads E with its proclaimed value", async || {
                other
                    .leader(NAMESPACE, "E")
                    .await
                    .unwrap()
                    .is_some_and(|l| l.value == "g!")
            })
            .await;
            other.force_unlock(NAMESPACE, "E").await.unwrap();
            (pinged_at, resigned_at)
        };
        let (led, (pinged_at, resigned_at), expired) = tokio::join!(leading, host_side, expiring);
        (led.unwrap(), pinged_at, resigned_at, expired.unwrap())
    });
    let (led, pinged_at, resigned_at, expired) = tokio::time::timeout(BOUND, run)
        .await
        .expect("the guest's leadership was never lost")
        .unwrap();
    assert!(pinged_at < resigned_at);
    let (token, candidate, reason) = led.unwrap();
    assert!(token > host.fencing_token);
    assert!(candidate.starts_with("candidate-"), "{candidate}");
    assert_eq!(reason, LostReason::EndedElsewhere);
    let (_, _, reason) = expired.unwrap();
    assert_eq!(reason, LostReason::Expired);
    for name in ["E", "X"] {
        assert_eq!(service.leader(NAMESPACE, name).await.unwrap(), None);
    }
    assert_eq!(store.data().locks.live_guards(), 0);
}

/// A `leader-watch`'s `changed` returns when the leader or its value
/// changes: the guest follows `W` until its value is `done` while the host
/// campaigns and proclaims twice, one step after another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_watch_changed_follows_the_host() {
    let service = service();
    let (mut store, guest) = instance(&service).await;
    let probe = guest.lockd_p3_probe_probe();
    let other = service.clone();
    let run = store.run_concurrent(async |accessor| {
        let watching = probe.call_watch_until(accessor, "W".into(), "done".into());
        let host_side = async {
            // Once the watch is open (it counts as one of the instance's
            // resources), change the leader three times.
            eventually("the guest's watch is open", async || {
                accessor.with(|mut access| access.get().locks.live_guards()) == 1
            })
            .await;
            let grant = other
                .campaign(
                    NAMESPACE,
                    "W",
                    "host",
                    "one",
                    60_000,
                    LockOptions::default(),
                )
                .await
                .unwrap();
            for value in ["two", "done"] {
                tokio::time::sleep(Duration::from_millis(100)).await;
                other
                    .proclaim(NAMESPACE, "W", "host", grant.fencing_token, value)
                    .await
                    .unwrap();
            }
        };
        let (changes, ()) = tokio::join!(watching, host_side);
        changes.unwrap()
    });
    let changes = tokio::time::timeout(BOUND, run)
        .await
        .expect("the guest's watch never saw `done`")
        .unwrap();
    let changes = changes.unwrap();
    eprintln!("leader-watch: changed returned {changes} times for 3 changes");
    // At least one wake-up (it did wait), at most one per change (it did
    // not spin).
    assert!(
        (1..=3).contains(&changes),
        "changed returned {changes} times"
    );
    assert_eq!(store.data().locks.live_guards(), 0);
}

/// A campaign the guest gives up (drops after 300 ms) leaves the election's
/// queue: no waiter is left, and once the host resigns nobody leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_up_campaign_leaves_no_waiter_and_no_leader() {
    let service = service();
    let host = service
        .campaign(NAMESPACE, "C", "host", "h", 60_000, LockOptions::default())
        .await
        .unwrap();
    let (mut store, guest) = instance(&service).await;
    let probe = guest.lockd_p3_probe_probe();
    let run = store.run_concurrent(async |accessor| {
        probe
            .call_give_up_campaign(accessor, "C".into(), 30_000, 300)
            .await
    });
    let led = tokio::time::timeout(BOUND, run)
        .await
        .expect("the guest never gave up")
        .unwrap()
        .unwrap();
    assert!(matches!(led, Ok(false)), "{led:?}");
    let state = service.describe(NAMESPACE, "C").await.unwrap();
    assert_eq!(state.waiters, 0, "a candidate is stuck: {state:?}");
    assert_eq!(state.holders.len(), 1, "{state:?}");
    assert_eq!(state.holders[0].info.fencing_token, host.fencing_token);
    service.unlock(NAMESPACE, "C", "host", None).await.unwrap();
    assert_eq!(service.leader(NAMESPACE, "C").await.unwrap(), None);
    assert!(service.describe(NAMESPACE, "C").await.unwrap().is_idle());
    assert_eq!(store.data().locks.live_guards(), 0);
}
