//! How a client reads a reply. [`decode`] is the one parse: a body that is
//! not the type its route and status word promise is a [`DecodeError`]
//! naming the route and the field (`locks[2].fencing_token`, through
//! `serde_path_to_error`), never a default. [`Reply`] reads the status word
//! first, which says what the rest of the body is.

use std::fmt;

use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::reply::{BusyReply, ErrorReply};
use crate::route::Route;
use crate::words::Status;

/// Parses a reply to `route` (or an event of its stream) into `T`. Unknown
/// fields are ignored; a missing field or one of the wrong type is an error
/// naming it, with its path for nested ones.
pub fn decode<T: DeserializeOwned>(route: Route, body: &[u8]) -> Result<T, DecodeError> {
    let mut json = serde_json::Deserializer::from_slice(body);
    let problem = match serde_path_to_error::deserialize(&mut json) {
        Ok(value) => match json.end() {
            Ok(()) => return Ok(value),
            Err(e) => Problem::NotJson(e.to_string()),
        },
        Err(e) => {
            let field = if e.path().iter().next().is_none() {
                String::new()
            } else {
                e.path().to_string()
            };
            let e = e.into_inner();
            if e.is_syntax() || e.is_eof() {
                Problem::NotJson(e.to_string())
            } else {
                Problem::Field {
                    field,
                    message: e.to_string(),
                }
            }
        }
    };
    Err(DecodeError { route, problem })
}

/// A reply to `route` that does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    route: Route,
    problem: Problem,
}

impl DecodeError {
    /// The route whose reply it is.
    pub fn route(&self) -> Route {
        self.route
    }

    /// What is wrong with it.
    pub fn problem(&self) -> &Problem {
        &self.problem
    }
}

/// `malformed reply to POST /v1/locks/lock: `fencing_token`: invalid type: ...`
impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed reply to {}: {}", self.route, self.problem)
    }
}

impl std::error::Error for DecodeError {}

/// What is wrong with a reply.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// The body is not JSON.
    NotJson(String),
    /// The body is JSON without a string `status`: it is not lockd's.
    NoStatus,
    /// The `status` is a string but no lockd status word.
    UnknownStatus(String),
    /// A field is missing or has the wrong type.
    Field {
        /// Its path (`locks[1].fencing_token`); empty for the body itself
        /// (a missing field, or a body that is not an object).
        field: String,
        /// What is wrong, as serde says it.
        message: String,
    },
}

impl Problem {
    /// Whether the body is not lockd's at all (not JSON, or no status word):
    /// the server asked is likely not a lockd.
    pub fn is_foreign(&self) -> bool {
        matches!(self, Problem::NotJson(_) | Problem::NoStatus)
    }
}

/// `` `locks[1]`: missing field `fencing_token` ``, without the route.
impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::NotJson(e) => write!(f, "the body is not JSON ({e})"),
            Problem::NoStatus => f.write_str("the body has no status word"),
            Problem::UnknownStatus(word) => write!(f, "unknown status word {word:?}"),
            Problem::Field { field, message } if field.is_empty() => f.write_str(message),
            Problem::Field { field, message } => write!(f, "`{field}`: {message}"),
        }
    }
}

/// A reply read as far as its `status` word.
#[derive(Clone, Copy, Debug)]
pub struct Reply<'a> {
    route: Route,
    status: Status,
    body: &'a [u8],
}

impl<'a> Reply<'a> {
    /// Reads the status word of `body`, a reply to `route`. An error if the
    /// body has none ([`Problem::is_foreign`]) or the word is not lockd's.
    pub fn read(route: Route, body: &'a [u8]) -> Result<Reply<'a>, DecodeError> {
        #[derive(Deserialize)]
        struct Head {
            status: String,
        }
        let fail = |problem| DecodeError { route, problem };
        let head: Head = match serde_json::from_slice(body) {
            Ok(head) => head,
            Err(e) if e.is_syntax() || e.is_eof() => {
                return Err(fail(Problem::NotJson(e.to_string())))
            }
            Err(_) => return Err(fail(Problem::NoStatus)),
        };
        let status = Status::from_word(&head.status)
            .ok_or_else(|| fail(Problem::UnknownStatus(head.status)))?;
        Ok(Reply {
            route,
            status,
            body,
        })
    }

    /// The route it answers.
    pub fn route(&self) -> Route {
        self.route
    }

    /// Its status word.
    pub fn status(&self) -> Status {
        self.status
    }

    /// The body as it came.
    pub fn body(&self) -> &'a [u8] {
        self.body
    }

    /// The body as `T`, the type its status word promises: see [`decode`].
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, DecodeError> {
        decode(self.route, self.body)
    }

    /// The refusal this reply is, if its status word is an error's: `busy`
    /// with the holder, every other error with its message. `not_found` is a
    /// refusal when it has a message (the path is no route); without one it
    /// is `get`'s answer for a free lock, and this is `None`.
    pub fn refusal(&self) -> Result<Option<Refusal>, DecodeError> {
        #[derive(Deserialize)]
        struct Message {
            message: Option<serde::de::IgnoredAny>,
        }
        Ok(Some(match self.status {
            Status::Busy => Refusal::Busy(self.decode()?),
            Status::NotFound => {
                let message: Message = self.decode()?;
                if message.message.is_none() {
                    return Ok(None);
                }
                Refusal::Error(self.decode()?)
            }
            status if status.http_code() >= 400 => Refusal::Error(self.decode()?),
            _ => return Ok(None),
        }))
    }
}

/// A reply that refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `busy`, with the holder.
    Busy(BusyReply),
    /// Every other refusal.
    Error(ErrorReply),
}

impl Refusal {
    /// Its status word.
    pub fn status(&self) -> Status {
        match self {
            Refusal::Busy(busy) => busy.status,
            Refusal::Error(error) => error.status,
        }
    }

    /// Its message, for people.
    pub fn message(&self) -> &str {
        match self {
            Refusal::Busy(busy) => &busy.message,
            Refusal::Error(error) => &error.message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::{FoundReply, GrantReply, LeaseFoundReply, ListReply};

    fn problem<T: DeserializeOwned + fmt::Debug>(body: &str) -> String {
        decode::<T>(Route::Lock, body.as_bytes())
            .unwrap_err()
            .problem()
            .to_string()
    }

    #[test]
    fn a_reply_without_a_fencing_token_is_an_error() {
        let ok: GrantReply = decode(
            Route::Lock,
            br#"{"status":"acquired","fencing_token":18446744073709551615,"expires_at_ms":5,"extra":[1]}"#,
        )
        .unwrap();
        assert_eq!(ok.fencing_token, u64::MAX);
        for (body, needle) in [
            (
                r#"{"status":"acquired","expires_at_ms":5}"#,
                "missing field `fencing_token`",
            ),
            (
                r#"{"status":"acquired","fencing_token":"7","expires_at_ms":5}"#,
                "`fencing_token`: invalid type: string \"7\", expected u64",
            ),
            (
                r#"{"status":"acquired","fencing_token":-1,"expires_at_ms":5}"#,
                "`fencing_token`: invalid value: integer `-1`",
            ),
            (
                r#"{"status":"acquired","fencing_token":1.5,"expires_at_ms":5}"#,
                "`fencing_token`: invalid type: floating point",
            ),
            (
                r#"{"status":"acquired","fencing_token":null,"expires_at_ms":5}"#,
                "`fencing_token`: invalid type: null",
            ),
            (
                r#"{"status":"given","fencing_token":1,"expires_at_ms":5}"#,
                "`status`: unknown variant `given`",
            ),
            (r#"{"status":"acquired","#, "the body is not JSON"),
            (
                r#"{"status":"acquired","fencing_token":1,"expires_at_ms":5} x"#,
                "the body is not JSON (trailing characters",
            ),
            ("[1]", "invalid length 1, expected struct GrantReply"),
        ] {
            let err = problem::<GrantReply>(body);
            assert!(err.starts_with(needle), "{body}: {err}");
        }
        // The route is named.
        let err = decode::<GrantReply>(Route::Extend, b"{}").unwrap_err();
        assert_eq!(err.route(), Route::Extend);
        assert!(
            err.to_string()
                .starts_with("malformed reply to POST /v1/locks/extend: missing field"),
            "{err}"
        );
    }

    #[test]
    fn nested_fields_are_named_by_their_path() {
        let err = problem::<BusyReply>(
            r#"{"status":"busy","owner":"o","expires_at_ms":5,"durability":"persistent","message":"m"}"#,
        );
        assert!(err.starts_with("missing field `fencing_token`"), "{err}");
        let err = problem::<ListReply>(
            r#"{"status":"found","locks":[{"name":"a","owner":"o","fencing_token":1,"expires_at_ms":5,"durability":"persistent"},{"name":"b","owner":"o","expires_at_ms":5,"durability":"persistent"}]}"#,
        );
        assert!(
            err.starts_with("`locks[1]`: missing field `fencing_token`"),
            "{err}"
        );
        let err = problem::<ListReply>(
            r#"{"status":"found","locks":[{"name":"a","owner":"o","fencing_token":true,"expires_at_ms":5,"durability":"persistent"}]}"#,
        );
        assert!(
            err.starts_with("`locks[0].fencing_token`: invalid type: boolean `true`"),
            "{err}"
        );
        let err = problem::<FoundReply>(
            r#"{"status":"found","owner":"o","fencing_token":1,"expires_at_ms":5,"durability":"forever"}"#,
        );
        assert!(
            err.starts_with("`durability`: unknown variant `forever`"),
            "{err}"
        );
        let err = problem::<LeaseFoundReply>(
            r#"{"durability":"persistent","expires_at_ms":42,"locks":["a",7],"status":"found","ttl_ms":10}"#,
        );
        assert!(err.starts_with("`locks[1]`"), "{err}");
    }

    #[test]
    fn the_status_word_tells_lockd_from_others() {
        let read = |body: &str| Reply::read(Route::Get, body.as_bytes()).map(|r| r.status());
        for body in ["upstream", r#"{"status":5}"#, r#"{"message":"x"}"#, "[]"] {
            let err = read(body).unwrap_err();
            assert!(err.problem().is_foreign(), "{body}: {err}");
        }
        assert_eq!(
            read(r#"{"status":"done"}"#).unwrap_err().problem(),
            &Problem::UnknownStatus("done".to_string())
        );
        assert_eq!(read(r#"{"message":"m","status":"busy"}"#), Ok(Status::Busy));
        for status in Status::ALL {
            assert_eq!(read(&format!(r#"{{"status":"{status}"}}"#)), Ok(status));
        }
    }

    #[test]
    fn refusals_carry_their_body() {
        let refusal = |body: &str| Reply::read(Route::Get, body.as_bytes()).unwrap().refusal();
        assert_eq!(refusal(r#"{"status":"found"}"#), Ok(None));
        // A free lock, and a path that is no route.
        assert_eq!(refusal(r#"{"status":"not_found"}"#), Ok(None));
        let no_route = refusal(r#"{"message":"no route /x","status":"not_found"}"#)
            .unwrap()
            .unwrap();
        assert_eq!(
            (no_route.status(), no_route.message()),
            (Status::NotFound, "no route /x")
        );
        let busy = refusal(
            r#"{"durability":"ephemeral","expires_at_ms":42,"fencing_token":7,"message":"m","owner":"w1","status":"busy"}"#,
        )
        .unwrap()
        .unwrap();
        assert!(matches!(&busy, Refusal::Busy(b) if b.owner == "w1" && b.fencing_token == 7));
        let denied = refusal(r#"{"message":"denied: quota","status":"denied"}"#)
            .unwrap()
            .unwrap();
        assert!(matches!(&denied, Refusal::Error(e) if e.detail() == "quota"));
        // A refusal must carry what its word promises.
        let err = refusal(r#"{"status":"not_owner"}"#).unwrap_err();
        assert!(err.to_string().contains("missing field `message`"), "{err}");
        let err = refusal(r#"{"status":"busy","message":"m"}"#).unwrap_err();
        assert!(err.to_string().contains("missing field"), "{err}");
    }
}
