//! The plumbing the commands share, none of it a command itself: the HTTP
//! client of the REST API and its TLS, the shared flags, output formats,
//! durations and times, failures and exit codes, logging, and the async
//! runtime of the commands that need one. Imports run one way: [`failure`],
//! [`time`] and [`logging`] are leaves; [`output`] uses `time`; [`flags`]
//! uses `output`; [`tls`] uses `failure` and `flags`; [`client`] uses the
//! rest.

pub mod client;
pub mod failure;
pub mod flags;
pub mod logging;
pub mod output;
pub mod runtime;
pub mod time;
pub mod tls;
