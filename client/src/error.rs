//! The client's one error type: lockd's refusals, one variant per status
//! word of the REST API (docs/contract.md#errors), and what the transport
//! met on the way (no host reachable, an outcome unknown, TLS, a reply that
//! is not lockd's).

use std::fmt;
use std::time::Duration;

use lockd_api::{BusyReply, Status};

/// Why a call failed.
///
/// Two kinds leave the outcome **unknown** ([`Error::outcome_unknown`]):
/// [`Error::Unknown`] (the request was sent, then the connection broke or
/// timed out) and [`Error::Unavailable`] (the store could not complete it,
/// docs/contract.md#c13-unavailable). A retry of a call that is idempotent
/// by owner (a re-lock, an unlock with its token, an extend) is safe; other
/// calls should be checked with a read first.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `busy` (409): another owner holds the lock, and any wait ran out. The
    /// reply carries the holder.
    #[error("{} (held by {:?}, fencing token {})", holder.message, holder.owner, holder.fencing_token)]
    Busy {
        /// The holder, as the server answered it.
        holder: Box<BusyReply>,
    },
    /// `not_held` (409): nobody holds it; it may have expired.
    #[error("{message}")]
    NotHeld {
        /// The server's message.
        message: String,
    },
    /// `not_owner` (409): another owner holds it, or under another token.
    #[error("{message}")]
    NotOwner {
        /// The server's message.
        message: String,
    },
    /// `not_found` (404) with a message: the path is no route of this
    /// server (a proxy prefix missing, or an older lockd).
    #[error("{message}")]
    NotFound {
        /// The server's message.
        message: String,
    },
    /// `invalid_argument` (400, 405, 413): a limit broken or a malformed
    /// request; nothing changed.
    #[error("{message}")]
    InvalidArgument {
        /// The server's message (or the client's, for a request it could not
        /// encode).
        message: String,
    },
    /// `denied` (403): refused by policy, such as a namespace quota.
    #[error("{message}")]
    Denied {
        /// The server's message.
        message: String,
    },
    /// `forbidden` (403): the token is known but lacks the namespace or the
    /// role; the message names what it lacks, never the secret.
    #[error("the server at {server} refused the request (403 forbidden): {message}")]
    Forbidden {
        /// The host that answered.
        server: String,
        /// The server's message.
        message: String,
    },
    /// `unauthorized` (401): the bearer token is missing or wrong.
    #[error("the server at {server} refused the request (401 unauthorized): {message}")]
    Unauthorized {
        /// The host that answered.
        server: String,
        /// The server's message.
        message: String,
    },
    /// `rate_limited` (429): the token is over its rate limit; nothing was
    /// done.
    #[error("the server at {server} is rate limiting this token: {message}")]
    RateLimited {
        /// The host that answered.
        server: String,
        /// The server's message.
        message: String,
        /// When to try again, from the `Retry-After` header.
        retry_after: Option<Duration>,
    },
    /// `unavailable` (503) without the not-applied marker: the store could
    /// not complete the call; its outcome is unknown.
    #[error("the server at {server} answered unavailable, outcome unknown: {message}")]
    Unavailable {
        /// The host that answered.
        server: String,
        /// The server's message.
        message: String,
    },
    /// The client is configured wrongly (a server list, a TLS setting); no
    /// request was sent.
    #[error("{0}")]
    Config(String),
    /// No host could be sent the request: each failed before it was sent
    /// (refused, timed out connecting, TLS, draining).
    #[error("no lockd server could be reached: {}", Unreached::list(failures))]
    Unreachable {
        /// Each host tried, with why.
        failures: Vec<Unreached>,
    },
    /// The request was sent and then the connection broke or timed out: it
    /// may or may not have been applied.
    #[error("the call to {server} ended with its outcome unknown: {reason}")]
    Unknown {
        /// The host it was sent to.
        server: String,
        /// What happened.
        reason: String,
    },
    /// Every host failed its TLS handshake (the same TLS settings serve
    /// them all): the first host's error, which says whether its
    /// certificate was not trusted, named another host or had expired, or
    /// the client's certificate was refused.
    #[error("TLS with {server} failed: {source}")]
    Tls {
        /// The first host that failed.
        server: String,
        /// What rustls said.
        source: rustls::Error,
    },
    /// The answer is not lockd's (no status word, not JSON: another service
    /// at that address), or lockd's but malformed or not one the call
    /// expects.
    #[error("the server at {server} gave a reply that is not lockd's: {reason}")]
    Protocol {
        /// The host that answered.
        server: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl Error {
    /// The lockd status word of a refusal; `None` for the transport's
    /// errors.
    pub fn status(&self) -> Option<Status> {
        Some(match self {
            Error::Busy { .. } => Status::Busy,
            Error::NotHeld { .. } => Status::NotHeld,
            Error::NotOwner { .. } => Status::NotOwner,
            Error::NotFound { .. } => Status::NotFound,
            Error::InvalidArgument { .. } => Status::InvalidArgument,
            Error::Denied { .. } => Status::Denied,
            Error::Forbidden { .. } => Status::Forbidden,
            Error::Unauthorized { .. } => Status::Unauthorized,
            Error::RateLimited { .. } => Status::RateLimited,
            Error::Unavailable { .. } => Status::Unavailable,
            Error::Config(_)
            | Error::Unreachable { .. }
            | Error::Unknown { .. }
            | Error::Tls { .. }
            | Error::Protocol { .. } => return None,
        })
    }

    /// Whether the call may have been applied although it failed:
    /// [`Error::Unknown`] and [`Error::Unavailable`].
    pub fn outcome_unknown(&self) -> bool {
        matches!(self, Error::Unknown { .. } | Error::Unavailable { .. })
    }

    /// Whether trying again later can succeed without anything changing on
    /// the caller's side: an unknown outcome, no host reachable, a rate
    /// limit, or a reply that was not lockd's (a proxy between restarts).
    /// Keep-alive retries these and counts every other error as a refusal.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Unknown { .. }
                | Error::Unavailable { .. }
                | Error::Unreachable { .. }
                | Error::RateLimited { .. }
                | Error::Protocol { .. }
        )
    }

    /// The holder of a `busy` refusal.
    pub fn busy_holder(&self) -> Option<&BusyReply> {
        match self {
            Error::Busy { holder } => Some(holder),
            _ => None,
        }
    }
}

/// One host that could not be sent a request, and why.
#[derive(Clone, Debug)]
pub struct Unreached {
    /// The host's base URL.
    pub server: String,
    /// Why, for people: `connection refused`, `draining: ...`.
    pub reason: String,
    /// The TLS error, when the handshake failed.
    pub tls: Option<rustls::Error>,
}

impl Unreached {
    fn list(failures: &[Unreached]) -> String {
        failures
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// `http://a:7450 (connection refused)`
impl fmt::Display for Unreached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.server, self.reason)
    }
}

#[cfg(test)]
mod tests {
    use lockd_api::DurabilityWord;

    use super::*;

    #[test]
    fn messages_name_hosts_and_holders() {
        let busy = Error::Busy {
            holder: Box::new(BusyReply {
                durability: DurabilityWord::Persistent,
                expires_at_ms: 5,
                fencing_token: 7,
                message: "busy: held by another owner".to_string(),
                owner: "w1".to_string(),
                status: Status::Busy,
            }),
        };
        assert_eq!(
            busy.to_string(),
            "busy: held by another owner (held by \"w1\", fencing token 7)"
        );
        assert_eq!(busy.status(), Some(Status::Busy));
        assert_eq!(busy.busy_holder().unwrap().fencing_token, 7);
        assert!(!busy.is_transient() && !busy.outcome_unknown());
        let unreachable = Error::Unreachable {
            failures: vec![
                Unreached {
                    server: "http://a:1".to_string(),
                    reason: "connection refused".to_string(),
                    tls: None,
                },
                Unreached {
                    server: "http://b:1".to_string(),
                    reason: "draining".to_string(),
                    tls: None,
                },
            ],
        };
        assert_eq!(
            unreachable.to_string(),
            "no lockd server could be reached: http://a:1 (connection refused); http://b:1 (draining)"
        );
        assert!(unreachable.is_transient() && !unreachable.outcome_unknown());
        assert_eq!(unreachable.status(), None);
        let unknown = Error::Unknown {
            server: "http://a:1".to_string(),
            reason: "connection reset".to_string(),
        };
        assert!(unknown.outcome_unknown() && unknown.is_transient());
        assert!(!Error::Config("x".to_string()).is_transient());
    }
}
