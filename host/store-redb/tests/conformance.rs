//! The redb store against the lock contract (lockd_testing::conformance).

lockd_testing::conformance_tests!(lockd_testing::RedbFactory::new());
