//! The two ends of one call to the lockd server, whatever carries it: a
//! `lockd-api` request encoded, and the reply read by `lockd-api` into the
//! type its status word promises or turned into the [`Error`] of the same
//! name (the WIT error each client converts it to).
//!
//! Replies are treated as hostile: anything that is not what the API
//! documents (a missing field, a wrong type, a token that is not an
//! unsigned 64-bit integer, an unknown status word, a success word that is
//! not the route's, an HTTP code that is not the word's) is `unavailable`
//! with a message saying what was wrong. Nothing here panics.

use lockd_api::{DecodeError, FreeReply, Refusal, Reply, Route, Status, MAX_BODY_BYTES};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::types::{Error, LockInfo};

/// Longest piece of an unexpected reply quoted in an error message.
const QUOTE_BYTES: usize = 200;

/// A reply as it came: its HTTP status and body, and the host that gave it
/// (for messages).
pub(crate) struct Answer<'c> {
    pub(crate) url: &'c str,
    pub(crate) route: Route,
    pub(crate) http: u16,
    pub(crate) body: Vec<u8>,
}

/// `request` as a body: JSON, at most [`MAX_BODY_BYTES`].
pub(crate) fn encode(request: &impl Serialize) -> Result<Vec<u8>, Error> {
    let body = serde_json::to_vec(request)
        .map_err(|e| Error::InvalidArgument(format!("cannot encode the request: {e}")))?;
    // The server answers a larger body with 413 `invalid_argument`, often
    // before the body is sent, which the connection reports as a protocol
    // error. Refused here instead, with the same answer.
    if body.len() > MAX_BODY_BYTES {
        return Err(Error::InvalidArgument(format!(
            "body over {MAX_BODY_BYTES} bytes (a name or owner far over its limit)"
        )));
    }
    Ok(body)
}

impl Answer<'_> {
    /// The reply as `T` if its status word is `success`, else the error it
    /// maps to.
    pub(crate) fn into_reply<T: DeserializeOwned>(self, success: Status) -> Result<T, Error> {
        self.expect(self.status()?, success)
    }

    /// The reply of a route that answers `found` with a `T`, or 404
    /// `not_found` without a message for nothing there (`/v1/locks/get` of a
    /// free name, `/v1/elections/leader` of an election nobody leads).
    pub(crate) fn into_found<T: DeserializeOwned>(self) -> Result<Result<T, FreeReply>, Error> {
        match self.status()? {
            Status::NotFound => self.expect(Status::NotFound, Status::NotFound).map(Err),
            status => self.expect(status, Status::Found).map(Ok),
        }
    }

    /// The status word of a reply that is no refusal, with the HTTP code it
    /// comes with (a success word with an error's code is not lockd's
    /// answer); a refusal is the error it maps to.
    fn status(&self) -> Result<Status, Error> {
        let reply = self.read()?;
        if let Some(refusal) = reply.refusal().map_err(|e| self.malformed(&e))? {
            return Err(self.refused(refusal));
        }
        let status = reply.status();
        if self.http != status.http_code() {
            return Err(self.unexpected(&format!("the status word {:?}", status.as_str())));
        }
        Ok(status)
    }

    /// The reply as `T`, if its status word (as [`Answer::status`] read
    /// it) is `success`.
    fn expect<T: DeserializeOwned>(&self, status: Status, success: Status) -> Result<T, Error> {
        if status != success {
            // A server that answers `unlocked` to a `lock` is not one to trust.
            return Err(Error::Unavailable(format!(
                "the lockd server at {} answered {:?} where {:?} was due",
                self.url,
                status.as_str(),
                success.as_str()
            )));
        }
        lockd_api::decode(self.route, &self.body).map_err(|e| self.malformed(&e))
    }

    fn read(&self) -> Result<Reply<'_>, Error> {
        Reply::read(self.route, &self.body).map_err(|e| self.malformed(&e))
    }

    fn malformed(&self, e: &DecodeError) -> Error {
        self.unexpected(&e.problem().to_string())
    }

    fn unexpected(&self, what: &str) -> Error {
        Error::Unavailable(format!(
            "the lockd server at {} answered {} with HTTP {} and {what}: {}",
            self.url,
            self.route,
            self.http,
            quote(&self.body)
        ))
    }

    /// The error of a refusal: the variant of the same name, with the
    /// message's detail as lockd's own host gives it.
    fn refused(&self, refusal: Refusal) -> Error {
        let error = match refusal {
            Refusal::Busy(holder) => {
                return Error::Busy(LockInfo {
                    owner: holder.owner,
                    fencing_token: holder.fencing_token,
                    expires_at_ms: holder.expires_at_ms,
                    durability: holder.durability,
                })
            }
            Refusal::Error(error) => error,
        };
        match error.status {
            Status::NotOwner => Error::NotOwner,
            Status::NotHeld => Error::NotHeld,
            Status::InvalidArgument => Error::InvalidArgument(error.detail().to_owned()),
            Status::Denied => Error::Denied(error.detail().to_owned()),
            Status::Unavailable => Error::Unavailable(error.detail().to_owned()),
            Status::Unauthorized => Error::Denied(format!(
                "the lockd server at {} refused the bearer token (HTTP {}): {}; \
                 set LOCKD_AUTH_TOKEN to the server's token",
                self.url, self.http, error.message
            )),
            // The token is known but scoped elsewhere: the message says
            // which token lacks what.
            Status::Forbidden => Error::Denied(format!(
                "the lockd server at {} refused the request (HTTP {}): {}",
                self.url, self.http, error.message
            )),
            // `not_found` with a message: the path is no route (a LOCKD_URL
            // with a wrong path), which must not read as "free".
            other => self.unexpected(&format!("the status word {:?}", other.as_str())),
        }
    }
}

/// The start of an unexpected body, for a message: lossy UTF-8, cut at
/// [`QUOTE_BYTES`].
pub(crate) fn quote(body: &[u8]) -> String {
    let cut = &body[..body.len().min(QUOTE_BYTES)];
    let mut text = format!("{:?}", String::from_utf8_lossy(cut));
    if body.len() > QUOTE_BYTES {
        text.push_str("...");
    }
    text
}
