//! The guest programs, built for the host tests, and [`stock_host`], a
//! stock wasmtime host that runs the plugged ones where lockd is not. This
//! library depends on no lockd crate (the tests' lockd crates are
//! dev-dependencies), so the `stock-host` bin links none.
//!
//! `build.rs` runs `guest/build-all.sh`, which compiles every guest in
//! `guest/` (the Rust ones with `cargo build --target wasm32-wasip2`, the
//! others through their own `guest/<dir>/build.sh`) into
//! `target/guests/<name>.wasm`. It then generates, for each of those files:
//!
//! - a constant with the component's absolute path, named after the file in
//!   upper snake case: `target/guests/rust-conformance.wasm` becomes
//!   [`RUST_CONFORMANCE`], and
//! - one line of the [`foreach_guest!`] macro: `foreach_guest!(m)` expands to
//!   `m!(rust_conformance); m!(rust_guard_trap); ...`, one call per guest,
//!   with its name in lower snake case.
//!
//! This is the pattern of wasmtime's `crates/test-programs/artifacts`.
//!
//! # Every guest has a test
//!
//! A test module names each guest's test function after the guest, and
//! asserts at compile time that such a function exists for every guest:
//!
//! ```text
//! use lockd_guest_tests::foreach_guest;
//!
//! // Fails to compile ("unresolved import") when a guest has no test.
//! macro_rules! assert_test_exists {
//!     ($name:ident) => {
//!         #[allow(unused_imports)]
//!         use self::$name as _;
//!     };
//! }
//! foreach_guest!(assert_test_exists);
//!
//! #[test]
//! fn rust_conformance() {
//!     let component = load(lockd_guest_tests::RUST_CONFORMANCE);
//!     // ...
//! }
//! // ... and one `fn <guest>()` for every other guest.
//! ```
//!
//! So adding a program under `guest/` without a host test breaks the build of
//! the test suite rather than going unnoticed.

pub mod stock_host;
pub mod stock_host_p3;

include!(concat!(env!("OUT_DIR"), "/guests.rs"));
