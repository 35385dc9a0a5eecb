//! One call to the lockd servers through the client's [`Io`]: a `lockd-api`
//! request encoded and posted to its route, on the hosts of `LOCKD_URL` in
//! turn until one answers, and the reply read by [`crate::reply`].
//!
//! # Failover
//! A call tries the host that answered last first (per instance), then the
//! others in `LOCKD_URL`'s order, each at most once: one pass per call.
//! What one host's attempt came to decides what happens next ([`step`]):
//!
//! - a reply (any status but 503) is the answer, and its host is remembered;
//! - nothing sent (DNS, connect, TLS handshake, the host refused the
//!   request, the body not handed over: [`NoReply::NotSent`]), or a 503
//!   marked [`crate::transport::NOT_APPLIED_HEADER`] (a draining server that
//!   touched nothing): the next host;
//! - the outcome unknown (sent, then no reply: [`NoReply::Unknown`]; or a
//!   503 without the mark: the store could not finish): the next host only
//!   for a call that is safe to repeat ([`Retry::Safe`]), else `unavailable`
//!   saying the outcome is unknown (or the server's own 503);
//! - the request cannot be made at all ([`NoReply::Local`]): `unavailable`
//!   at once.
//!
//! When every host failed, the call answers `unavailable` naming each one
//! and why; the last host's 503 is answered as it came.

use lockd_api::{FreeReply, Route, Status};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::config::{Config, Server};
use crate::reply::{self, Answer};
use crate::transport::{HttpReply, NoReply};
use crate::types::Error;
use crate::Io;

/// Whether a call whose outcome is unknown may be sent again, to another
/// host (docs/contract.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Retry {
    /// Sending it twice is the same as once: a `lock` by a given owner (a
    /// re-lock, C2; a guard's, a campaign's and a lease's owner too), an
    /// `unlock`, `resign` or lease `revoke` that names its grant (C5), an
    /// `extend` or lease `refresh` (C6: keep-alive renewals), a read.
    Safe,
    /// Sending it twice may do more than once: an `unlock` by owner alone
    /// could free a later grant of the same owner, a lease `grant` mints a
    /// second lease, a `proclaim` may land after a newer one.
    Never,
}

/// The configuration, or the `unavailable` error every call answers.
pub(crate) fn config(io: &impl Io) -> Result<&Config, Error> {
    io.config()
        .as_ref()
        .map_err(|message| Error::Unavailable(message.clone()))
}

/// Posts `request` to `route` and reads the reply: `T` if its status word
/// is `success`, else the error it maps to.
///
/// `wait_ms` is how long the server may legitimately take before it answers
/// (a waiting `lock`).
pub(crate) async fn post<T: DeserializeOwned>(
    io: &impl Io,
    config: &Config,
    route: Route,
    request: &impl Serialize,
    success: Status,
    wait_ms: u32,
    retry: Retry,
) -> Result<T, Error> {
    send(io, config, route, request, wait_ms, retry)
        .await?
        .into_reply(success)
}

/// Posts a read to a route that answers `found` with a `T`, or 404
/// `not_found` for nothing there ([`Answer::into_found`]).
pub(crate) async fn find<T: DeserializeOwned>(
    io: &impl Io,
    config: &Config,
    route: Route,
    request: &impl Serialize,
) -> Result<Result<T, FreeReply>, Error> {
    send(io, config, route, request, 0, Retry::Safe)
        .await?
        .into_found()
}

/// What one host's attempt came to, as the failover sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attempt {
    /// A reply other than 503.
    Replied,
    /// 503 marked not applied.
    NotApplied,
    /// 503 without the mark: the outcome is unknown.
    StoreUnavailable,
    NotSent,
    /// Sent, no reply: the outcome is unknown.
    Unknown,
    Local,
}

impl Attempt {
    fn of(outcome: &Result<HttpReply, NoReply>) -> Attempt {
        match outcome {
            Ok(reply) if reply.status == 503 && reply.not_applied => Attempt::NotApplied,
            Ok(reply) if reply.status == 503 => Attempt::StoreUnavailable,
            Ok(_) => Attempt::Replied,
            Err(NoReply::NotSent(_)) => Attempt::NotSent,
            Err(NoReply::Unknown(_)) => Attempt::Unknown,
            Err(NoReply::Local(_)) => Attempt::Local,
        }
    }
}

/// What the call does after an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// The reply is the call's answer.
    Answer,
    /// On to the next host (or, after the last, `unavailable` naming them).
    Next,
    /// `unavailable` now, with this attempt's message.
    Stop,
}

/// The failover's decision table (see the module's documentation); `last`:
/// no host is left to try in this pass.
fn step(attempt: Attempt, retry: Retry, last: bool) -> Step {
    match attempt {
        Attempt::Replied => Step::Answer,
        Attempt::NotApplied if last => Step::Answer,
        Attempt::StoreUnavailable if last || retry == Retry::Never => Step::Answer,
        Attempt::NotApplied | Attempt::StoreUnavailable | Attempt::NotSent => Step::Next,
        Attempt::Unknown if retry == Retry::Safe => Step::Next,
        Attempt::Unknown | Attempt::Local => Step::Stop,
    }
}

/// Encodes `request` and posts it to `route`, failing over (see the
/// module's documentation).
async fn send<'c>(
    io: &impl Io,
    config: &'c Config,
    route: Route,
    request: &impl Serialize,
    wait_ms: u32,
    retry: Retry,
) -> Result<Answer<'c>, Error> {
    let body = reply::encode(request)?;
    let count = config.servers.len();
    let first = config.last_answered();
    let mut failures = Vec::new();
    let mut outcome_unknown = false;
    for tried in 0..count {
        let index = (first + tried) % count;
        let server = &config.servers[index];
        let outcome = io.post(config, server, route, body.clone(), wait_ms).await;
        let attempt = Attempt::of(&outcome);
        match (step(attempt, retry, tried + 1 == count), outcome) {
            (Step::Answer, Ok(reply)) => {
                if attempt == Attempt::Replied {
                    config.answered(index);
                }
                return Ok(Answer {
                    url: &server.url,
                    route,
                    http: reply.status,
                    body: reply.body,
                });
            }
            (Step::Stop, Err(NoReply::Unknown(message))) => {
                let others = if count > 1 {
                    " (it is not safe to send again, so no other host was tried)"
                } else {
                    ""
                };
                return Err(Error::Unavailable(format!(
                    "{message}; the request may have been applied{others}: the outcome is \
                     unknown (check with get)"
                )));
            }
            (_, outcome) => {
                outcome_unknown |= matches!(attempt, Attempt::Unknown | Attempt::StoreUnavailable);
                let stop = matches!(attempt, Attempt::Local);
                failures.push(failure(server, outcome));
                if stop {
                    break;
                }
            }
        }
    }
    let mut message = failures.join("; ");
    if outcome_unknown {
        message
            .push_str("; the outcome is unknown (the call is safe to repeat, or check with get)");
    }
    Err(Error::Unavailable(message))
}

/// What went wrong with one host, for the message of a call no host
/// answered.
fn failure(server: &Server, outcome: Result<HttpReply, NoReply>) -> String {
    match outcome {
        Ok(reply) => format!(
            "the lockd server at {} answered HTTP {}{}: {}",
            server.url,
            reply.status,
            if reply.not_applied {
                " (not applied)"
            } else {
                ""
            },
            reply::quote(&reply.body)
        ),
        Err(NoReply::NotSent(message) | NoReply::Unknown(message) | NoReply::Local(message)) => {
            message
        }
    }
}

#[cfg(test)]
mod tests;
