//! The HTTP client of the CLI: blocking requests (ureq) to lockd's REST API
//! (docs/reference.md), outside any async runtime, and what an answer means for
//! the command that asked.
//!
//! Requests are built and replies parsed with the server's own wire types
//! ([`lockd_api`]). A reply whose status word is known but whose
//! fields are missing or mistyped is a failure (exit 3) naming the route and
//! the field, never a default.
//!
//! `https://` servers are checked and shown a client certificate as
//! [`super::tls`] says.
//!
//! Exit codes: 0 success; 1 `busy`, `not_owner`, `not_held`, `not_found`;
//! 2 usage errors (a TLS file that cannot be used included),
//! `invalid_argument`, 401 and `denied`; 3 the server cannot be reached,
//! fails TLS (its certificate not trusted, not for its name, expired; our
//! client certificate missing or refused), is `unavailable`, or answered
//! something that is not lockd; 4 `forbidden` (the token lacks the role or
//! the namespace).

use std::time::Duration;

use lockd_api::{decode, BusyReply, ErrorReply, Problem, Reply, Route, Status};
use lockd_core::ErrorKind;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::failure::{fail, Failure};
use super::flags::{Conn, DEFAULT_SERVER};
use super::output::Format;
use super::time::remaining;
use super::tls;

/// The longest any request waits for a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A lockd answer: the route asked, the raw body and its status word. The
/// rest of the body is parsed by [`Client::reply`] or [`Client::refused`],
/// into the type the status word promises.
pub struct Answer {
    route: Route,
    body: String,
    /// The reply's status word.
    pub status: Status,
}

/// A connection to one lockd server, as the flags of [`Conn`] describe it.
pub struct Client {
    server: String,
    agent: ureq::Agent,
    auth_token: Option<String>,
    format: Format,
    /// Whether it presents a client certificate (for what a refusal means).
    client_cert: bool,
}

impl Client {
    /// A client for requests that may wait in a lock's queue for `wait_ms`.
    pub fn new(conn: Conn, wait_ms: u64) -> Result<Client, Failure> {
        // A waiting lock is answered after up to `wait_ms`; leave room for it.
        let timeout = Duration::from_millis(wait_ms).saturating_add(Duration::from_secs(60));
        Client::with_timeout(conn, timeout)
    }

    /// A client whose every request gives up after `timeout`.
    pub fn with_timeout(conn: Conn, timeout: Duration) -> Result<Client, Failure> {
        Client::build(conn, timeout.min(CONNECT_TIMEOUT), Some(timeout))
    }

    /// A client for a stream that lasts as long as it likes: connecting
    /// gives up after 10 s, reading never does.
    pub fn streaming(conn: Conn) -> Result<Client, Failure> {
        Client::build(conn, CONNECT_TIMEOUT, None)
    }

    fn build(conn: Conn, connect: Duration, total: Option<Duration>) -> Result<Client, Failure> {
        let server = normalize_server(&conn.server)?;
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(connect))
            .timeout_global(total)
            .tls_config(tls::config(&conn.tls)?)
            .build();
        Ok(Client {
            server,
            agent: ureq::Agent::new_with_config(config),
            auth_token: conn.auth_token.filter(|t| !t.is_empty()),
            format: conn.format,
            client_cert: conn.tls.cert.is_some(),
        })
    }

    /// `request` with the bearer token, if there is one.
    fn authorized<B>(&self, request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.auth_token {
            Some(token) => request.header("Authorization", format!("Bearer {token}")),
            None => request,
        }
    }

    /// `GET path` as a stream: the body of a 200 answer, read as it comes;
    /// any other answer is the failure it reports.
    /// `path` is `route`'s path with its query.
    pub fn open_stream(
        &self,
        route: Route,
        path: &str,
    ) -> Result<ureq::BodyReader<'static>, Failure> {
        let request = self.authorized(self.agent.get(format!("{}{path}", self.server)));
        let response = request.call().map_err(|e| self.unreachable(e))?;
        if response.status().as_u16() == 200 {
            return Ok(response.into_body().into_reader());
        }
        let answer = self.answer(route, Ok(response))?;
        Err(self.refused("events", &answer))
    }

    /// `POST` to `route` without a body, for a route whose success is bytes
    /// (`application/octet-stream`): `Ok` with the body of that answer, to
    /// read as it comes, or `Err` with any other answer, lockd's.
    pub fn post_for_bytes(
        &self,
        route: Route,
    ) -> Result<Result<ureq::BodyReader<'static>, Answer>, Failure> {
        let request = self.authorized(self.agent.post(format!("{}{}", self.server, route.path())));
        let response = request.send_empty().map_err(|e| self.unreachable(e))?;
        let bytes = response
            .headers()
            .get("content-type")
            .is_some_and(|t| t.as_bytes() == b"application/octet-stream");
        if response.status().as_u16() == 200 && bytes {
            return Ok(Ok(response.into_body().into_reader()));
        }
        self.answer(route, Ok(response)).map(Err)
    }

    /// The server this client asks, as messages name it.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// `POST` to `route` with `body` as JSON, answered.
    pub fn post(&self, route: Route, body: &impl Serialize) -> Result<Answer, Failure> {
        let path = route.path();
        let body = serde_json::to_string(body)
            .map_err(|e| fail(2, format!("cannot encode the request to {path}: {e}")))?;
        let request = self.authorized(self.agent.post(format!("{}{path}", self.server)));
        let result = request.content_type("application/json").send(body);
        self.answer(route, result)
    }

    /// `GET path`, `route`'s path with its query, answered.
    pub fn get(&self, route: Route, path: &str) -> Result<Answer, Failure> {
        let request = self.authorized(self.agent.get(format!("{}{path}", self.server)));
        self.answer(route, request.call())
    }

    fn answer(
        &self,
        route: Route,
        result: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<Answer, Failure> {
        let response = result.map_err(|e| self.unreachable(e))?;
        let code = response.status().as_u16();
        let body = response
            .into_body()
            .read_to_string()
            .map_err(|e| self.unreachable(e))?;
        let read = Reply::read(route, body.as_bytes());
        let status = match read.as_ref().map_err(|e| e.problem()) {
            Ok(reply) => Ok(reply.status()),
            Err(Problem::UnknownStatus(word)) => Err(word.clone()),
            Err(_) => {
                let excerpt: String = body.chars().take(80).collect();
                return Err(fail(
                    3,
                    format!(
                        "the server at {} answered HTTP {code} with no lockd status ({excerpt:?}); \
                         check that --server / LOCKD_SERVER points at lockd",
                        self.server
                    ),
                ));
            }
        };
        // Printed as it is whenever it is lockd's, failures included.
        if self.format == Format::Json {
            println!("{}", body.trim_end());
        }
        let status = status.map_err(|word| {
            fail(
                3,
                format!(
                    "unexpected answer {word:?} from the server at {}: {}",
                    self.server,
                    body.trim_end()
                ),
            )
        })?;
        Ok(Answer {
            route,
            body,
            status,
        })
    }

    /// The body of `answer` as `T`, the type its status word promises.
    pub fn reply<T: DeserializeOwned>(&self, answer: &Answer) -> Result<T, Failure> {
        decode(answer.route, answer.body.as_bytes()).map_err(|e| {
            fail(
                3,
                format!(
                    "the server at {} answered {} with a malformed {:?} reply ({}); \
                     check that --server / LOCKD_SERVER points at a lockd of this version",
                    self.server,
                    answer.route,
                    answer.status.as_str(),
                    e.problem(),
                ),
            )
        })
    }

    fn unreachable(&self, error: ureq::Error) -> Failure {
        if let Some(tls_error) = tls::rustls_error(&error) {
            return tls::failure(&self.server, tls_error, self.client_cert);
        }
        let reason = match &error {
            ureq::Error::Io(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                "connection refused".to_string()
            }
            ureq::Error::Io(e) => e.to_string(),
            ureq::Error::HostNotFound => "host not found".to_string(),
            ureq::Error::ConnectionFailed => "connection failed".to_string(),
            ureq::Error::Timeout(t) => format!("timed out: {t}"),
            ureq::Error::BadUri(u) => {
                return fail(
                    2,
                    format!(
                        "invalid server URL {:?} ({u}); use for example {DEFAULT_SERVER}",
                        self.server
                    ),
                )
            }
            other => other.to_string(),
        };
        fail(
            3,
            format!(
                "cannot reach the server at {} ({reason}); start it with 'lockd serve' \
                 or set --server / LOCKD_SERVER",
                self.server
            ),
        )
    }

    /// The failure for a lockd answer that is not the success expected.
    pub fn refused(&self, name: &str, answer: &Answer) -> Failure {
        if answer.status == Status::Busy {
            return match self.reply::<BusyReply>(answer) {
                Ok(holder) => fail(
                    1,
                    format!(
                        "{name} is busy: held by {:?} (token {}) for another {}; retry later or pass --wait",
                        holder.owner,
                        holder.fencing_token,
                        remaining(holder.expires_at_ms),
                    ),
                ),
                Err(malformed) => malformed,
            };
        }
        let unexpected = || {
            fail(
                3,
                format!(
                    "unexpected answer {:?} from the server at {}: {}",
                    answer.status.as_str(),
                    self.server,
                    answer.body.trim_end()
                ),
            )
        };
        // Every other failure is an error body: a word and a message.
        let message = match answer.status {
            Status::NotOwner
            | Status::NotHeld
            | Status::InvalidArgument
            | Status::Denied
            | Status::Unavailable
            | Status::NotFound
            | Status::Unauthorized
            | Status::Forbidden => match self.reply::<ErrorReply>(answer) {
                Ok(error) => error.message,
                Err(malformed) => return malformed,
            },
            // A success word where it does not belong.
            _ => return unexpected(),
        };
        match answer.status.kind() {
            Some(ErrorKind::NotOwner) => fail(
                1,
                format!(
                    "{name} is held by another owner or under another fencing token; \
                     check --owner and --token (see 'lockd get {name}')"
                ),
            ),
            Some(ErrorKind::NotHeld) => fail(
                1,
                format!(
                    "{name} is not held (it may have expired); take it again with 'lockd lock'"
                ),
            ),
            Some(ErrorKind::InvalidArgument) => {
                fail(2, format!("{message}; fix the arguments (see --help)"))
            }
            Some(ErrorKind::Denied) => fail(
                2,
                format!("{message}; the server's policy (lockd.toml) refuses it"),
            ),
            Some(ErrorKind::Unavailable) => fail(
                3,
                format!("{message}; the store could not complete the operation, retry later"),
            ),
            Some(_) => unexpected(),
            None if answer.status == Status::NotFound => fail(1, format!("not found: {message}")),
            None if answer.status == Status::Unauthorized => fail(
                2,
                format!(
                    "the server at {} refused the request (401 unauthorized): {message}",
                    self.server
                ),
            ),
            // The message names the token and what it lacks.
            None if answer.status == Status::Forbidden => fail(
                4,
                format!(
                    "the server at {} refused the request (403 forbidden): {message}",
                    self.server
                ),
            ),
            None => unexpected(),
        }
    }

    /// The success body of `answer`, if its status is `expected`; else the
    /// failure it reports.
    pub fn expect<T: DeserializeOwned>(
        &self,
        name: &str,
        answer: &Answer,
        expected: Status,
    ) -> Result<T, Failure> {
        if answer.status == expected {
            self.reply(answer)
        } else {
            Err(self.refused(name, answer))
        }
    }

    /// Prints the line `line` makes, if the output format is text (with
    /// `--format json`, [`Client::post`] and [`Client::get`] printed the
    /// body already).
    pub fn text(&self, line: impl FnOnce() -> String) {
        if self.format == Format::Text {
            println!("{}", line());
        }
    }
}

/// Adds `http://` to a bare `host:port` and drops a trailing slash.
fn normalize_server(server: &str) -> Result<String, Failure> {
    let server = server.trim().trim_end_matches('/');
    if server.is_empty() {
        return Err(fail(
            2,
            format!("--server is empty; use for example {DEFAULT_SERVER}"),
        ));
    }
    if server.starts_with("http://") || server.starts_with("https://") {
        Ok(server.to_string())
    } else if server.contains("://") {
        Err(fail(
            2,
            format!("{server}: not an http or https URL; use for example {DEFAULT_SERVER}"),
        ))
    } else {
        Ok(format!("http://{server}"))
    }
}

#[cfg(test)]
mod tests {
    use lockd_api::{FoundReply, GrantReply, ListReply};

    use super::*;

    #[test]
    fn normalizes_servers() {
        assert_eq!(
            normalize_server("127.0.0.1:7450").unwrap(),
            "http://127.0.0.1:7450"
        );
        assert_eq!(normalize_server("http://h:1/").unwrap(), "http://h:1");
        assert_eq!(normalize_server("https://h:1/").unwrap(), "https://h:1");
        assert_eq!(normalize_server("ftp://h").unwrap_err().code, 2);
        assert_eq!(normalize_server(" ").unwrap_err().code, 2);
    }

    fn client() -> Client {
        Client::new(
            Conn {
                server: "127.0.0.1:7450".to_string(),
                format: Format::Text,
                auth_token: None,
                tls: Default::default(),
            },
            0,
        )
        .unwrap()
    }

    /// The answer `body` to the route written as `POST /v1/locks/lock`.
    fn answer(route: &str, body: &str) -> Answer {
        let route = Route::ALL
            .iter()
            .copied()
            .find(|r| r.to_string() == route)
            .unwrap();
        Answer {
            route,
            body: body.to_string(),
            status: Reply::read(route, body.as_bytes()).unwrap().status(),
        }
    }

    #[test]
    fn a_reply_missing_its_fencing_token_is_a_failure() {
        let client = client();
        let good = answer(
            "POST /v1/locks/lock",
            r#"{"expires_at_ms":5,"fencing_token":18446744073709551615,"status":"acquired"}"#,
        );
        let grant: GrantReply = client.expect("a", &good, Status::Acquired).unwrap();
        assert_eq!(grant.fencing_token, u64::MAX);
        for (route, body, expected, needle) in [
            (
                "POST /v1/locks/lock",
                r#"{"expires_at_ms":5,"status":"acquired"}"#,
                Status::Acquired,
                "missing field `fencing_token`",
            ),
            (
                "POST /v1/locks/extend",
                r#"{"expires_at_ms":5,"fencing_token":"12","status":"extended"}"#,
                Status::Extended,
                "`fencing_token`: invalid type: string \"12\", expected u64",
            ),
            (
                "POST /v1/locks/lock",
                r#"{"message":"m","owner":"o","expires_at_ms":5,"durability":"persistent","status":"busy"}"#,
                Status::Acquired,
                "missing field `fencing_token`",
            ),
        ] {
            let failure = client
                .expect::<GrantReply>("a", &answer(route, body), expected)
                .unwrap_err();
            assert_eq!(failure.code, 3, "{body}: {failure:?}");
            assert!(
                failure.message.contains(needle) && failure.message.contains(route),
                "{body}: {}",
                failure.message
            );
            assert!(failure.message.contains("http://127.0.0.1:7450"));
        }
        // get and ls parse the same way.
        let found = answer(
            "POST /v1/locks/get",
            r#"{"durability":"persistent","expires_at_ms":5,"owner":"o","status":"found"}"#,
        );
        let failure = client.reply::<FoundReply>(&found).unwrap_err();
        assert_eq!(failure.code, 3);
        assert!(
            failure.message.contains("missing field `fencing_token`"),
            "{}",
            failure.message
        );
        let listed = answer(
            "GET /v1/locks",
            r#"{"locks":[{"name":"a","owner":"o","fencing_token":-3,"expires_at_ms":5,"durability":"persistent"}],"status":"found"}"#,
        );
        let failure = client.reply::<ListReply>(&listed).unwrap_err();
        assert!(
            failure
                .message
                .contains("`locks[0].fencing_token`: invalid value: integer `-3`"),
            "{}",
            failure.message
        );
    }

    #[test]
    fn refusals_map_status_words_to_exit_codes() {
        let client = client();
        let busy = answer(
            "POST /v1/locks/lock",
            r#"{"durability":"persistent","expires_at_ms":0,"fencing_token":9,"message":"m","owner":"o","status":"busy"}"#,
        );
        let failure = client.refused("a", &busy);
        assert_eq!(failure.code, 1);
        assert!(
            failure
                .message
                .starts_with("a is busy: held by \"o\" (token 9)"),
            "{failure:?}"
        );
        for (word, code) in [
            ("not_owner", 1),
            ("not_held", 1),
            ("not_found", 1),
            ("invalid_argument", 2),
            ("unauthorized", 2),
            ("forbidden", 4),
            ("denied", 2),
            ("unavailable", 3),
            // A success word where a refusal was expected: not lockd's answer.
            ("found", 3),
        ] {
            let body = format!(r#"{{"message":"m","status":"{word}"}}"#);
            let failure = client.refused("a", &answer("POST /v1/locks/unlock", &body));
            assert_eq!(failure.code, code, "{word}: {failure:?}");
        }
        // An error body without its message is malformed, not defaulted.
        let failure = client.refused(
            "a",
            &answer("POST /v1/locks/unlock", r#"{"status":"denied"}"#),
        );
        assert_eq!(failure.code, 3);
        assert!(
            failure.message.contains("missing field `message`"),
            "{failure:?}"
        );
    }
}
