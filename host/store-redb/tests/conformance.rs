//! The redb store against the lock contract (lockd_testing::conformance).

lockd_testing::conformance_tests!(lockd_testing::RedbFactory::new());

mod claims {
    lockd_testing::claims_conformance_tests!(lockd_testing::RedbFactory::new());
}

#[tokio::test]
async fn wall_clock_steps_move_no_deadline() {
    lockd_testing::conformance::wall_clock_steps_move_no_deadline(
        &lockd_testing::RedbFactory::new(),
    )
    .await;
}
