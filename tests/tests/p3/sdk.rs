//! The Rust SDK's async API for WASI 0.3 (`lockd_guest::p3`, used by
//! `guest/rust-p3`): a `Guard` awaited in the queue, whose `lost()` future
//! resolves when the host force-releases it, and which releases its lock
//! when dropped; a `Leadership` and a `LeaderWatch`.

use std::time::Duration;

use lockd_core::LockOptions;

use super::bindings::lockd::lock0_2_0::types::LostReason;
use super::{eventually, instance, service, NAMESPACE};

/// The host holds `G`; the SDK guard waits for it, is granted once the
/// host releases it, and its `lost()` future resolves with
/// `ended-elsewhere` when the host force-releases it. Then a guard the
/// guest drops releases its lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_guard_waits_is_lost_and_releases_when_dropped() {
    let service = service();
    let host = service
        .lock(NAMESPACE, "G", "host", 60_000, LockOptions::default())
        .await
        .unwrap();
    let (mut store, guest) = instance(&service).await;
    let probe = guest.lockd_p3_probe_probe();
    let other = service.clone();
    let run = store.run_concurrent(async |accessor| {
        let guarding = probe.call_sdk_guard(accessor, "G".into(), 60_000, 10_000);
        let host_side = async {
            eventually("the guest queues for G", async || {
                other.describe(NAMESPACE, "G").await.unwrap().waiters == 1
            })
            .await;
            other.unlock(NAMESPACE, "G", "host", None).await.unwrap();
            eventually("the guest takes G", async || {
                other.get(NAMESPACE, "G").await.unwrap().is_some()
            })
            .await;
            let owner = other.get(NAMESPACE, "G").await.unwrap().unwrap().owner;
            // Time for the guest's own `get` before the lock goes.
            tokio::time::sleep(Duration::from_millis(200)).await;
            other.force_unlock(NAMESPACE, "G").await.unwrap();
            owner
        };
        let (guarded, owner) = tokio::join!(guarding, host_side);
        let dropped = probe.call_sdk_drop(accessor, "D".into()).await;
        (guarded.unwrap(), owner, dropped.unwrap())
    });
    let (guarded, forced_owner, dropped) = tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("the SDK guard's lost future never resolved")
        .unwrap();
    let (token, owner, reason) = guarded.unwrap();
    assert!(token > host.fencing_token);
    assert!(owner.starts_with("guard-"), "{owner}");
    assert_eq!(owner, forced_owner);
    assert_eq!(reason, LostReason::EndedElsewhere);
    assert!(dropped.unwrap() > token);
    // The drop releases without waiting for the store: bounded wait.
    eventually("the dropped guard releases D", async || {
        service.get(NAMESPACE, "D").await.unwrap().is_none()
    })
    .await;
    assert_eq!(store.data().locks.live_guards(), 0);
}

/// The SDK's `Leadership`: its campaign waits while the host leads, leads
/// once the host resigns, proclaims (its `LeaderWatch` sees the new value),
/// and its `lost()` resolves with `ended-elsewhere` on a force-release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_leadership_waits_proclaims_and_is_lost() {
    let service = service();
    let host = service
        .campaign(NAMESPACE, "L", "host", "h", 60_000, LockOptions::default())
        .await
        .unwrap();
    let (mut store, guest) = instance(&service).await;
    let probe = guest.lockd_p3_probe_probe();
    let other = service.clone();
    let run = store.run_concurrent(async |accessor| {
        let leading = probe.call_sdk_lead(accessor, "L".into(), "g".into(), 10_000);
        let host_side = async {
            eventually("the guest queues for L", async || {
                other.describe(NAMESPACE, "L").await.unwrap().waiters == 1
            })
            .await;
            other.unlock(NAMESPACE, "L", "host", None).await.unwrap();
            eventually("the guest leads L with its proclaimed value", async || {
                other
                    .leader(NAMESPACE, "L")
                    .await
                    .unwrap()
                    .is_some_and(|l| l.value == "g!")
            })
            .await;
            // Time for the guest's watch to see the value before it goes.
            tokio::time::sleep(Duration::from_millis(200)).await;
            other.force_unlock(NAMESPACE, "L").await.unwrap()
        };
        let (led, forced) = tokio::join!(leading, host_side);
        (led.unwrap(), forced)
    });
    let (led, forced) = tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("the SDK leadership's lost future never resolved")
        .unwrap();
    let (token, reason) = led.unwrap();
    assert!(token > host.fencing_token);
    assert_eq!(forced.fencing_token, token);
    assert_eq!(reason, LostReason::EndedElsewhere);
    assert_eq!(service.leader(NAMESPACE, "L").await.unwrap(), None);
    assert_eq!(store.data().locks.live_guards(), 0);
}
