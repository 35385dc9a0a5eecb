//! The etcd store against the lock contract (lockd_testing::conformance), on a
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
use lockd_testing::etcd::EtcdCluster;
use lockd_testing::StoreFactory;

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

lockd_testing::conformance_tests!(Etcd::new());

/// The cases of shared locks, semaphores and lock-delay (C21 to C23). The
/// election cases of `claims_conformance_tests!` (C24) are not here: this
/// store has no elections yet.
mod claims {
    use super::Etcd;

    lockd_testing::conformance_tests!(@cases Etcd::new();
        shared_holders_exclude_the_exclusive,
        an_exclusive_waiter_stops_later_readers,
        shared_grants_are_each_their_own,
        a_semaphore_never_exceeds_its_permits,
        force_unlock_releases_every_shared_holder,
        lock_delay_holds_back_an_ended_grant,
        shared_grants_and_permits_survive_restart,
        readers_behind_a_writer_enter_together,
        a_lease_lock_waits_behind_readers,
    );
}
