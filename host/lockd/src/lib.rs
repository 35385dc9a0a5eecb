//! The lockd runtime as a library: store selection and running command
//! components with the lock capability. The `lockd` binary is a thin CLI
//! over it, and the end-to-end tests call the same functions.
#![deny(missing_docs)]

pub mod api;
pub mod config;
pub mod epoch;
/// The response body type of `lockd serve` and its helpers, shared by `api`
/// and `serve` (a leaf module: it imports neither).
pub mod http_body;
/// `lockd plug`: composes a component that imports `lockd:lock` with the
/// lockd-client component, for hosts lockd does not run.
pub mod plug;
pub mod run;
pub mod serve;
pub mod store;
