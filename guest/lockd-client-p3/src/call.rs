//! One call to the lockd server over `wasi:http@0.3`: a `lockd-api` request
//! posted to its route and awaited, read by [`crate::reply`].

use lockd_api::{FreeReply, Route, Status};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::bindings::exports::lockd::lock::types::Error;
use crate::config::Config;
use crate::http;
use crate::reply::{self, Answer};

/// Posts `request` to `route` and reads the reply: `T` if its status word
/// is `success`, else the error it maps to. `wait_ms` is how long the
/// server may legitimately take before it answers (a waiting `lock`).
pub(crate) async fn post<T: DeserializeOwned>(
    config: &Config,
    route: Route,
    request: &impl Serialize,
    success: Status,
    wait_ms: u32,
) -> Result<T, Error> {
    send(config, route, request, wait_ms)
        .await?
        .into_reply(success)
}

/// Posts `request` to a route that answers `found` with a `T`, or 404
/// `not_found` for nothing there ([`Answer::into_found`]).
pub(crate) async fn find<T: DeserializeOwned>(
    config: &Config,
    route: Route,
    request: &impl Serialize,
) -> Result<Result<T, FreeReply>, Error> {
    send(config, route, request, 0).await?.into_found()
}

async fn send<'c>(
    config: &'c Config,
    route: Route,
    request: &impl Serialize,
    wait_ms: u32,
) -> Result<Answer<'c>, Error> {
    let body = reply::encode(request)?;
    let (http, body) = http::post(config, route, body, wait_ms)
        .await
        .map_err(Error::Unavailable)?;
    Ok(Answer {
        config,
        route,
        http,
        body,
    })
}
