//! Clock skew between hosts on the etcd store (docs/operating.md#clock-assumptions):
//! expiries are wall-clock times written by the granting host and compared
//! by every other host, so a host whose clock runs 2 s ahead sees a lock
//! expire 2 s early and may hand it on then. The overlap is the skew,
//! never more; tokens still rise, so a fenced resource stays safe. This
//! test measures it on a real etcd with real time.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockd_core::{Clock, Key, LockBackend, LockOptions, SystemClock};
use lockd_etcd::{EtcdBackend, EtcdOptions};
use lockd_test_support::etcd::EtcdCluster;

/// The system clock, `ahead_ms` fast: a host whose NTP is off.
#[derive(Debug)]
struct AheadClock {
    ahead_ms: u64,
}

impl Clock for AheadClock {
    fn now_ms(&self) -> u64 {
        SystemClock.now_ms() + self.ahead_ms
    }

    fn sleep_until(&self, deadline_ms: u64) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        SystemClock.sleep_until(deadline_ms.saturating_sub(self.ahead_ms))
    }
}

const SKEW_MS: u64 = 2_000;
const TTL_MS: u64 = 4_000;

async fn connect(etcd: &EtcdCluster, clock: Arc<dyn Clock>) -> EtcdBackend {
    EtcdBackend::connect(EtcdOptions::new(etcd.endpoints()), clock)
        .await
        .unwrap()
}

/// A waiter on the fast host takes a lock held on the right-clocked host
/// `SKEW_MS` before its holder's expiry, and not sooner; with a higher
/// token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_2_s_ahead_takes_a_lock_over_2_s_early_and_no_sooner() {
    let etcd = EtcdCluster::start().unwrap();
    let right = connect(&etcd, Arc::new(SystemClock)).await;
    let fast = Arc::new(connect(&etcd, Arc::new(AheadClock { ahead_ms: SKEW_MS })).await);
    let key = Key::new("skew", "job");
    let granted_at = Instant::now();
    let held = right
        .lock(&key, "on-time", TTL_MS, LockOptions::default())
        .await
        .unwrap();
    let waiter = {
        let fast = fast.clone();
        let key = key.clone();
        tokio::spawn(async move {
            let options = LockOptions {
                wait_ms: 20_000,
                ..LockOptions::default()
            };
            let grant = fast.lock(&key, "ahead", TTL_MS, options).await;
            (grant, Instant::now())
        })
    };
    let (grant, taken_at) = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("the waiter was never served")
        .unwrap();
    let grant = grant.unwrap();
    assert!(grant.fencing_token > held.fencing_token);
    let after = taken_at.duration_since(granted_at).as_millis() as u64;
    let early_by = TTL_MS.saturating_sub(after);
    report(after, early_by);
    // Taken over as soon as the fast clock says the lock expired: TTL - skew
    // after the grant (plus the watch and transaction round trips), and never
    // sooner than that.
    assert!(
        after >= TTL_MS - SKEW_MS,
        "taken {after} ms after the grant: earlier than the skew explains"
    );
    assert!(
        after < TTL_MS,
        "taken {after} ms after the grant: a 2 s fast clock should have taken it before the expiry"
    );
    // The store is shared: the right-clocked host sees the new holder too,
    // while its old holder may still believe it holds the lock (for up to
    // the skew); only its token is stale.
    let now = right.get(&key).await.unwrap().unwrap();
    assert_eq!(now.owner, "ahead");
}

fn report(after_ms: u64, early_by_ms: u64) {
    eprintln!(
        "skew {SKEW_MS} ms, ttl {TTL_MS} ms: taken over {after_ms} ms after the grant, {early_by_ms} ms before the holder's expiry"
    );
}
