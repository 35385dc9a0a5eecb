//! lockd's REST server, and nothing else: one listener ([`serve()`]) for the
//! REST API ([`api`]), who may call it ([`auth`]), `/metrics`, `/healthz`,
//! `/openapi.json` and the web page ([`ui`]), over HTTPS when lockd.toml
//! names TLS files ([`tls`], [`pem`]). lockd.toml is read in one place
//! ([`config`]), and so is the choice of store ([`store`]); request bodies
//! are read by one reader ([`body`]).
//!
//! Other crates add what they serve through [`serve::Extension`]: routes on
//! the same listener ([`serve::Mount`]) and listeners of their own beside it
//! ([`serve::SideListener`]). The `lockd` binary mounts Dapr's and Kahuna's
//! APIs (`lockd-compat`) and a Spin manifest's HTTP components
//! (`lockd-components`) that way; this crate knows neither.
#![deny(missing_docs)]

pub mod api;
pub mod auth;
pub mod body;
pub mod config;
pub mod pem;
pub mod rate_limit;
pub mod serve;
pub mod store;
pub mod tls;
pub mod ui;

pub use serve::{bind, serve, ServeOptions, Server};
