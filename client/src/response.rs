//! What an answer means: the success body a call expects, or the [`Error`]
//! its refusal is. Replies are read with lockd-api's own parse, so a body
//! missing a field is an error naming it, never a default.

use lockd_api::{decode, Problem, Refusal, Reply, Route, Status};
use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::transport::Response;

impl Response {
    /// The answer read as far as its status word. [`Error::Protocol`] when
    /// it has none (not lockd's) or an unknown one.
    pub fn reply(&self, route: Route) -> Result<Reply<'_>, Error> {
        Reply::read(route, &self.body).map_err(|e| {
            let reason = match e.problem() {
                Problem::UnknownStatus(word) => format!(
                    "HTTP {} with the unknown status word {word:?} to {route}",
                    self.status
                ),
                problem if problem.is_foreign() => format!(
                    "HTTP {} with no lockd status word to {route} ({:?}); check that the \
                     server list points at lockd",
                    self.status,
                    excerpt(&self.body)
                ),
                problem => format!("HTTP {} to {route}: {problem}", self.status),
            };
            self.protocol(reason)
        })
    }

    /// Whether this is the `not_found` without a message with which `get`
    /// and `leader` answer "nobody holds it" (a `not_found` with a message
    /// is a path that is no route).
    pub(crate) fn is_nothing_found(&self, route: Route) -> bool {
        self.reply(route).is_ok_and(|reply| {
            reply.status() == Status::NotFound && matches!(reply.refusal(), Ok(None))
        })
    }

    /// The body as `T` if its status word is `expected`; else the error the
    /// answer is ([`Response::refusal`]).
    pub fn expect<T: DeserializeOwned>(&self, route: Route, expected: Status) -> Result<T, Error> {
        let reply = self.reply(route)?;
        if reply.status() == expected {
            self.decode(route)
        } else {
            Err(self.refusal(route))
        }
    }

    /// The body as `T`, the type its status word promises.
    pub fn decode<T: DeserializeOwned>(&self, route: Route) -> Result<T, Error> {
        decode(route, &self.body).map_err(|e| {
            self.protocol(format!(
                "a malformed reply to {route} ({}); is it a lockd of this version?",
                e.problem()
            ))
        })
    }

    /// The error this answer is: a refusal as its status word says, or
    /// [`Error::Protocol`] for a success word (a call that expected another)
    /// and for a body that is not lockd's.
    pub fn refusal(&self, route: Route) -> Error {
        let reply = match self.reply(route) {
            Ok(reply) => reply,
            Err(e) => return e,
        };
        let refusal = match reply.refusal() {
            Ok(Some(refusal)) => refusal,
            Ok(None) if reply.status() == Status::NotFound => {
                return Error::NotFound {
                    message: format!("nothing found at {route}"),
                }
            }
            Ok(None) => {
                return self.protocol(format!(
                    "the answer {:?} where {route} expected another",
                    reply.status().as_str()
                ))
            }
            Err(e) => {
                return self.protocol(format!(
                    "a malformed {:?} reply to {route} ({})",
                    reply.status().as_str(),
                    e.problem()
                ))
            }
        };
        self.refusal_error(refusal)
    }

    fn refusal_error(&self, refusal: Refusal) -> Error {
        let error = match refusal {
            Refusal::Busy(holder) => {
                return Error::Busy {
                    holder: Box::new(holder),
                }
            }
            Refusal::Error(error) => error,
        };
        let server = self.server.clone();
        let message = error.message;
        match error.status {
            Status::NotHeld => Error::NotHeld { message },
            Status::NotOwner => Error::NotOwner { message },
            Status::NotFound => Error::NotFound { message },
            Status::InvalidArgument => Error::InvalidArgument { message },
            Status::Denied => Error::Denied { message },
            Status::Forbidden => Error::Forbidden { server, message },
            Status::Unauthorized => Error::Unauthorized { server, message },
            Status::RateLimited => Error::RateLimited {
                server,
                message,
                retry_after: self.retry_after,
            },
            Status::Unavailable => Error::Unavailable { server, message },
            other => self.protocol(format!(
                "the refusal word {:?} with HTTP {}",
                other.as_str(),
                self.status
            )),
        }
    }

    fn protocol(&self, reason: String) -> Error {
        Error::Protocol {
            server: self.server.clone(),
            reason,
        }
    }
}

/// The start of a body, for a message.
fn excerpt(body: &[u8]) -> String {
    String::from_utf8_lossy(body).chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use lockd_api::GrantReply;

    use super::*;

    fn response(status: u16, body: &str) -> Response {
        Response {
            status,
            body: Bytes::from(body.to_string()),
            server: "http://a:1".to_string(),
            retry_after: Some(Duration::from_secs(2)),
        }
    }

    #[test]
    fn a_success_is_decoded_and_a_refusal_typed() {
        let grant: GrantReply = response(
            200,
            r#"{"expires_at_ms":5,"fencing_token":18446744073709551615,"status":"acquired"}"#,
        )
        .expect(Route::Lock, Status::Acquired)
        .unwrap();
        assert_eq!(grant.fencing_token, u64::MAX);
        let busy = response(
            409,
            r#"{"durability":"persistent","expires_at_ms":9,"fencing_token":4,"message":"m","owner":"w","status":"busy"}"#,
        )
        .expect::<GrantReply>(Route::Lock, Status::Acquired)
        .unwrap_err();
        assert_eq!(busy.busy_holder().unwrap().owner, "w");
        for (word, code, check) in [
            ("not_held", 409, Status::NotHeld),
            ("not_owner", 409, Status::NotOwner),
            ("invalid_argument", 400, Status::InvalidArgument),
            ("denied", 403, Status::Denied),
            ("forbidden", 403, Status::Forbidden),
            ("unauthorized", 401, Status::Unauthorized),
            ("rate_limited", 429, Status::RateLimited),
            ("not_found", 404, Status::NotFound),
        ] {
            let body = format!(r#"{{"message":"m","status":"{word}"}}"#);
            let error = response(code, &body).refusal(Route::Unlock);
            assert_eq!(error.status(), Some(check), "{word}: {error:?}");
        }
        let limited = response(429, r#"{"message":"slow down","status":"rate_limited"}"#)
            .refusal(Route::Lock);
        assert!(matches!(
            limited,
            Error::RateLimited { retry_after: Some(d), .. } if d == Duration::from_secs(2)
        ));
    }

    #[test]
    fn what_is_not_lockd_is_a_protocol_error() {
        for (body, needle) in [
            ("<html>bad gateway</html>", "no lockd status word"),
            (r#"{"status":"given"}"#, "unknown status word \"given\""),
            (r#"{"status":"acquired"}"#, "missing field `expires_at_ms`"),
            (r#"{"status":"not_owner"}"#, "missing field `message`"),
        ] {
            let error = response(200, body)
                .expect::<GrantReply>(Route::Lock, Status::Acquired)
                .unwrap_err();
            let Error::Protocol { server, reason } = &error else {
                panic!("{body}: {error:?}");
            };
            assert_eq!(server, "http://a:1");
            assert!(reason.contains(needle), "{body}: {reason}");
        }
        // A success word where a refusal was expected.
        let error = response(200, r#"{"status":"found","message":"m"}"#).refusal(Route::Unlock);
        assert!(matches!(error, Error::Protocol { .. }), "{error:?}");
    }
}
