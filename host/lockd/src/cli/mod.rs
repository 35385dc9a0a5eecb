//! The plumbing the commands share, none of it a command itself: the HTTP
//! client of the REST API and its TLS, the shared flags, output formats,
//! durations and times, failures and exit codes, logging, and the async
//! runtime of the commands that need one. Imports run one way: [`failure`],
//! [`time`] and [`logging`] are leaves; [`events`] uses `failure`;
//! [`output`] uses `time`; [`flags`] uses `output` and `failure`; [`tls`]
//! uses `failure` and `flags`; [`call`] (what a request may do twice) is a
//! leaf; [`client`] uses the rest; [`supervise`]
//! (running a command while holding a grant: `exec` and `elect`) uses
//! `client` and what it uses.

pub mod call;
pub mod client;
pub mod events;
pub mod failure;
pub mod flags;
pub mod logging;
pub mod output;
pub mod runtime;
#[cfg(unix)]
pub mod supervise;
pub mod time;
pub mod tls;
