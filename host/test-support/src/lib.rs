//! Test support for lockd backends. Not part of any production build: only
//! tests, the fuzz target and benchmarks depend on it.
//!
//! - [`conformance`]: the lock contract as a suite every backend must pass,
//!   one `#[tokio::test]` per case through [`conformance_tests!`].
//! - [`model`]: the reference model of the lock contract and the op
//!   generator (proptest) that checks a store against it.
//! - Store factories ([`StoreFactory`]): [`MemoryFactory`] and, with the
//!   `redb` feature, `RedbFactory`.
//! - [`history`]: recording what clients of a lock service saw, and
//!   checking the history against the lock contract (the kill -9, crash and
//!   partition tests).
//! - [`certs`]: a throwaway CA and the certificates it signs, for TLS
//!   tests.
//! - [`etcd`]: a real etcd cluster on loopback, started and stopped by the
//!   tests.
//! - [`redis`]: a throwaway `redis-server` and a RESP client, for the
//!   fencing recipes.
//! - [`report`]: figures of a test run, on record for CI.
//!
//! ```text
//! // tests/conformance.rs of a backend crate
//! lockd_test_support::conformance_tests!(MyFactory::new());
//! ```
#![deny(missing_docs)]

pub mod certs;
pub mod conformance;
pub mod etcd;
pub mod history;
pub mod model;
pub mod redis;
mod report;
mod stores;

pub use conformance::{StoreFactory, START_MS};
pub use report::report;
pub use stores::MemoryFactory;
#[cfg(feature = "redb")]
pub use stores::RedbFactory;
