//! The etcd store against the lock contract (lockd_test_support::conformance)
//! over TLS with a client certificate, as etcd user `lockd` that may read
//! and write one prefix and nothing else.
//!
//! One TLS cluster with auth enabled serves every case (starting one per
//! case, as `conformance.rs` does, would cost a TLS start and the auth setup
//! each time); each case works under a prefix of its own inside the user's,
//! so cases never see each other's keys. "Reopen" is a new backend (a new
//! client, a new TLS connection and token, a new session) on the same
//! prefix.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use lockd_core::{BoxFuture, LockBackend, ManualClock};
use lockd_etcd::{ClientCert, EtcdBackend, EtcdOptions, EtcdUser};
use lockd_test_support::etcd::SecureEtcd;
use lockd_test_support::StoreFactory;

/// The prefix user `lockd` may use; each case takes one below it.
const USER_PREFIX: &str = "/lockd-tls/";

fn cluster() -> &'static SecureEtcd {
    static CLUSTER: OnceLock<SecureEtcd> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        SecureEtcd::start(1, USER_PREFIX, None)
            .expect("start a TLS etcd with auth (scripts/setup.sh installs etcd)")
    })
}

struct SecureFactory {
    prefix: String,
}

impl SecureFactory {
    fn new() -> Self {
        static CASES: AtomicU64 = AtomicU64::new(0);
        let case = CASES.fetch_add(1, Ordering::Relaxed);
        SecureFactory {
            prefix: format!("{USER_PREFIX}case-{case}"),
        }
    }
}

impl StoreFactory for SecureFactory {
    fn open(&self, clock: ManualClock) -> BoxFuture<'_, Arc<dyn LockBackend>> {
        Box::pin(async move {
            let etcd = cluster();
            let mut options = EtcdOptions::new(etcd.cluster.endpoints());
            assert!(options.uses_tls(), "{:?}", options.endpoints);
            options.prefix = self.prefix.clone();
            options.ca_file = Some(etcd.pki.ca().to_path_buf());
            options.client_cert = Some(ClientCert {
                cert_file: etcd.client.cert.clone(),
                key_file: etcd.client.key.clone(),
            });
            options.user = Some(EtcdUser {
                name: etcd.user.clone(),
                password: etcd.password.clone(),
            });
            options.lease_slack = Duration::from_secs(600);
            let backend: Arc<dyn LockBackend> = Arc::new(
                EtcdBackend::connect(options, Arc::new(clock))
                    .await
                    .expect("connect to the TLS etcd as user lockd"),
            );
            backend
        })
    }

    fn keeps_persistent_locks(&self) -> bool {
        true
    }
}

lockd_test_support::conformance_tests!(SecureFactory::new());
