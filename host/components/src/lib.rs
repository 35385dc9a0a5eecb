//! Running and composing WebAssembly components with the lock capability,
//! and nothing else:
//!
//! - [`run`]: a `wasi:cli` command component to completion (`lockd run`);
//! - [`serve`]: the HTTP components of a Spin manifest ([`manifest`]),
//!   mounted on a `lockd-server` listener ([`serve::SpinApp`], an
//!   extension of the server);
//! - [`compose`]: composing a component that imports `lockd:lock` with the
//!   lockd-client component, for hosts lockd does not run (`lockd plug`),
//!   and the composition a Spin component's dependencies need;
//! - [`key_value`] and [`variables`]: Spin's key-value stores and variables
//!   for the components [`serve`] runs;
//! - [`wasi`]: the one rule that tells a WASI 0.3 component from a 0.2 one;
//! - [`epoch`]: the epoch clock every engine here runs on.
#![deny(missing_docs)]

pub mod compose;
pub mod epoch;
pub mod key_value;
pub mod manifest;
pub mod run;
pub mod serve;
mod spin_wit;
pub mod variables;
pub mod wasi;
