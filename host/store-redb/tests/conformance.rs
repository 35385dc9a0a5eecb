//! The redb store against the lock contract (lockd_test_support::conformance).

lockd_test_support::conformance_tests!(lockd_test_support::RedbFactory::new());

mod claims {
    lockd_test_support::claims_conformance_tests!(lockd_test_support::RedbFactory::new());
}

#[tokio::test]
async fn wall_clock_steps_move_no_deadline() {
    lockd_test_support::conformance::wall_clock_steps_move_no_deadline(
        &lockd_test_support::RedbFactory::new(),
    )
    .await;
}
