//! The lockd runtime as a library: the server (the REST API in [`api`],
//! who may call it in [`auth`],
//! component serving in [`serve`]), running command components ([`run`]),
//! composing components for other hosts ([`plug`]), the epoch ticker every
//! engine runs on ([`epoch`]), and how a store and lockd.toml are chosen
//! ([`store`], [`config`]), and the PEM files of TLS ([`pem`]).
//!
//! The `lockd` binary (`src/main.rs`, with its `commands/` and `cli/`
//! modules) is a command line over it: it parses flags, calls these
//! functions, and speaks the REST API as a client. The end-to-end tests
//! call the same functions.
#![deny(missing_docs)]

pub mod api;
pub mod auth;
/// Other systems' lock APIs: Dapr's (HTTP and gRPC) and Kahuna's.
pub mod compat;
pub mod config;
pub mod epoch;
/// The response body type of `lockd serve` and its helpers, shared by `api`
/// and `serve` (a leaf module: it imports neither).
pub mod http_body;
pub mod pem;
/// `lockd plug`: composes a component that imports `lockd:lock` with the
/// lockd-client component, for hosts lockd does not run.
pub mod plug;
pub mod run;
pub mod serve;
pub mod store;
