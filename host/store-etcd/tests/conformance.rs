//! The etcd store against the lock contract (lockd_test_support::conformance), on a
//! real etcd started for each case.
//!
//! The suite drives a `ManualClock`, which the backend uses for every expiry
//! decision; etcd's leases run on real time, so the factory gives them a long
//! slack (leases never run out while a test's clock stands still). "Reopen"
//! is a new backend (a new client and session) on the same etcd.

use std::sync::Arc;
use std::time::Duration;

use lockd_core::{BoxFuture, LockBackend, ManualClock};
use lockd_etcd::{EtcdBackend, EtcdOptions};
use lockd_test_support::etcd::EtcdCluster;
use lockd_test_support::StoreFactory;

struct Etcd {
    cluster: EtcdCluster,
}

impl Etcd {
    fn new() -> Self {
        let cluster = EtcdCluster::start().expect("start etcd (scripts/setup.sh installs it)");
        Etcd { cluster }
    }
}

impl StoreFactory for Etcd {
    fn open(&self, clock: ManualClock) -> BoxFuture<'_, Arc<dyn LockBackend>> {
        Box::pin(async move {
            let mut options = EtcdOptions::new(self.cluster.endpoints());
            options.lease_slack = Duration::from_secs(600);
            let backend: Arc<dyn LockBackend> = Arc::new(
                EtcdBackend::connect(options, Arc::new(clock))
                    .await
                    .expect("connect to the test etcd"),
            );
            backend
        })
    }

    fn keeps_persistent_locks(&self) -> bool {
        true
    }
}

lockd_test_support::conformance_tests!(Etcd::new());

mod claims {
    use super::Etcd;

    lockd_test_support::claims_conformance_tests!(Etcd::new());
}
