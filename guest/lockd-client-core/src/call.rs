//! One call to the lockd server through the client's [`Io`]: a `lockd-api`
//! request encoded and posted to its route, and the reply read by
//! [`crate::reply`].

use lockd_api::{FreeReply, Route, Status};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::config::Config;
use crate::reply::{self, Answer};
use crate::types::Error;
use crate::Io;

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
) -> Result<T, Error> {
    send(io, config, route, request, wait_ms)
        .await?
        .into_reply(success)
}

/// Posts `request` to a route that answers `found` with a `T`, or 404
/// `not_found` for nothing there ([`Answer::into_found`]).
pub(crate) async fn find<T: DeserializeOwned>(
    io: &impl Io,
    config: &Config,
    route: Route,
    request: &impl Serialize,
) -> Result<Result<T, FreeReply>, Error> {
    send(io, config, route, request, 0).await?.into_found()
}

/// Encodes `request` and posts it to `route`.
async fn send<'c>(
    io: &impl Io,
    config: &'c Config,
    route: Route,
    request: &impl Serialize,
    wait_ms: u32,
) -> Result<Answer<'c>, Error> {
    let body = reply::encode(request)?;
    let (http, body) = io
        .post(config, route, body, wait_ms)
        .await
        .map_err(Error::Unavailable)?;
    Ok(Answer {
        config,
        route,
        http,
        body,
    })
}
