//! The HTTP client of the CLI: requests to lockd's REST API
//! (docs/reference.md) through [`lockd_native_client::Transport`], which
//! fails over between the hosts of `--server URL[,URL...]`, and what an
//! answer means for the command that asked.
//!
//! [`Remote`] is the async client (`exec` and `elect` run on a runtime of
//! their own); [`Client`] wraps it for the commands that block, on a
//! current-thread runtime it owns. Each request body says whether it may be
//! sent again after an unknown outcome ([`Call`]).
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
//! 2 usage errors (a bad `--server` list or a TLS file that cannot be used
//! included), `invalid_argument`, 401 and `denied`; 3 no server can be
//! reached, one fails TLS (its certificate not trusted, not for its name,
//! expired; our client certificate missing or refused), is `unavailable`,
//! the outcome is unknown (sent, then the host went away), or a server
//! answered something that is not lockd; 4 `forbidden` (the token lacks the
//! role or the namespace); 5 `rate_limited` (429: nothing was done; retry
//! after its `Retry-After`).

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt as _;
use lockd_api::{decode, BusyReply, ErrorReply, Method, Problem, Reply, Route, Status};
use lockd_core::ErrorKind;
use lockd_native_client::{
    ByteStream, Error, Request, Response, Retry, Servers, StreamResponse, Transport,
};
use serde::de::DeserializeOwned;

pub use super::call::Call;
use super::failure::{fail, Failure};
use super::flags::Conn;
use super::output::Format;
use super::time::remaining;
use super::tls;

/// The longest any request waits for a connection to one host before it
/// tries the next.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Exit code of a `rate_limited` answer (429): nothing was done.
pub const EXIT_RATE_LIMITED: i32 = 5;

/// What a read says when its answer is unknown: it changed nothing.
const RETRY_LATER: &str = "retry later";

/// A lockd answer: the route asked, the raw body and its status word. The
/// rest of the body is parsed by [`Remote::reply`] or [`Remote::refused`],
/// into the type the status word promises.
pub struct Answer {
    route: Route,
    body: String,
    /// The host that answered.
    server: String,
    /// The `Retry-After` of a 429.
    retry_after: Option<Duration>,
    /// The reply's status word.
    pub status: Status,
}

impl Answer {
    /// The host that answered.
    pub fn server(&self) -> &str {
        &self.server
    }
}

/// The async client of the hosts that [`Conn`] names. Cheap to clone:
/// clones share connections and the host that answered last.
#[derive(Clone, Debug)]
pub struct Remote {
    transport: Transport,
    format: Format,
    /// Whether it presents a client certificate (for what a refusal means).
    client_cert: bool,
    /// How long one request may take on one host; `None` for streams.
    timeout: Option<Duration>,
}

impl Remote {
    /// The client of `conn`'s hosts, each request giving up on a host
    /// after `timeout` (`None`: never, for streams). Exit 2, before
    /// anything is sent, for a bad `--server` list or TLS file.
    pub fn connect(conn: &Conn, timeout: Option<Duration>) -> Result<Remote, Failure> {
        let usage = |e: Error| fail(2, format!("--server (LOCKD_SERVER): {e}"));
        let servers = Servers::parse(&conn.server).map_err(usage)?;
        let tls_given = conn.tls.cacert.is_some() || conn.tls.cert.is_some();
        servers.check_tls(tls_given).map_err(usage)?;
        let connect = timeout.map_or(CONNECT_TIMEOUT, |t| t.min(CONNECT_TIMEOUT));
        let mut builder = Transport::builder(servers).connect_timeout(connect);
        if let Some(config) = tls::config(&conn.tls)? {
            builder = builder.tls(config);
        }
        if let Some(token) = &conn.auth_token {
            builder = builder.token(token.clone());
        }
        let transport = builder
            .build()
            .map_err(|e| fail(2, format!("cannot set up the client: {e}")))?;
        Ok(Remote {
            transport,
            format: conn.format,
            client_cert: conn.tls.cert.is_some(),
            timeout,
        })
    }

    /// The host the next request goes to first: the one that answered
    /// last, as messages name it.
    pub fn server(&self) -> &str {
        self.transport.preferred_server()
    }

    /// `POST` to `route` with `body` as JSON, answered.
    pub async fn post<R: Call>(&self, route: Route, body: &R) -> Result<Answer, Failure> {
        self.post_within(route, body, self.timeout).await
    }

    /// [`Remote::post`], giving up on a host after `timeout` (`None`:
    /// never).
    pub async fn post_within<R: Call>(
        &self,
        route: Route,
        body: &R,
        timeout: Option<Duration>,
    ) -> Result<Answer, Failure> {
        let request = Request::route(route)
            .json(body)
            .map_err(|e| fail(2, e.to_string()))?
            .retry(body.retry());
        let request = match timeout {
            Some(timeout) => request.timeout(timeout),
            None => request,
        };
        match self.transport.send(request).await {
            Ok(response) => self.answer(route, response),
            Err(e) => Err(self.failure(e, &body.if_unknown())),
        }
    }

    /// `GET path`, `route`'s path with its query, answered.
    pub async fn get(&self, route: Route, path: &str) -> Result<Answer, Failure> {
        let mut request = Request::new(Method::Get, path).retry(Retry::Safe);
        if let Some(timeout) = self.timeout {
            request = request.timeout(timeout);
        }
        match self.transport.send(request).await {
            Ok(response) => self.answer(route, response),
            Err(e) => Err(self.failure(e, RETRY_LATER)),
        }
    }

    /// A stream from `route` (a read: any host may answer): `Ok` with the
    /// body of a 200 answer, to read as it comes, or `Err` with any other
    /// answer, lockd's.
    async fn open(
        &self,
        route: Route,
        path: &str,
    ) -> Result<Result<StreamResponse, Answer>, Failure> {
        let request = Request::new(route.method(), path).retry(Retry::Safe);
        let response = self
            .transport
            .open(request)
            .await
            .map_err(|e| self.failure(e, RETRY_LATER))?;
        if response.status == 200 {
            return Ok(Ok(response));
        }
        let response = response
            .collect()
            .await
            .map_err(|e| self.failure(e, RETRY_LATER))?;
        self.answer(route, response).map(Err)
    }

    /// What a request that got no lockd answer means: `if_unknown` says
    /// how to find out what happened when the outcome is unknown.
    fn failure(&self, error: Error, if_unknown: &str) -> Failure {
        match error {
            Error::Config(message) => fail(2, message),
            Error::InvalidArgument { message } => fail(2, message),
            Error::Tls { server, source } => tls::failure(&server, &source, self.client_cert),
            Error::Unreachable { failures } => {
                let reasons: Vec<String> = failures.iter().map(ToString::to_string).collect();
                let hosts = match reasons.as_slice() {
                    [one] => format!("the server at {one}"),
                    all => format!("any server of the list: {}", all.join("; ")),
                };
                fail(
                    3,
                    format!(
                        "cannot reach {hosts}; start it with 'lockd serve' or set --server / \
                         LOCKD_SERVER"
                    ),
                )
            }
            Error::Unknown { server, reason } => fail(
                3,
                format!(
                    "the outcome is unknown: the request was sent to {server}, then {reason}; \
                     {if_unknown}"
                ),
            ),
            Error::Unavailable { server, message } => {
                // Printed as it is, as every lockd answer is.
                if self.format == Format::Json {
                    let reply = ErrorReply {
                        message: message.clone(),
                        status: Status::Unavailable,
                    };
                    println!("{}", serde_json::to_string(&reply).unwrap_or_default());
                }
                fail(
                    3,
                    format!(
                        "{message}; the store behind {server} could not complete the \
                         operation, so its outcome is unknown; {if_unknown}"
                    ),
                )
            }
            Error::Protocol { server, reason } => fail(
                3,
                format!(
                    "the server at {server} answered something that is not lockd's ({reason}); \
                     check that --server / LOCKD_SERVER points at lockd"
                ),
            ),
            other => fail(3, other.to_string()),
        }
    }

    fn answer(&self, route: Route, response: Response) -> Result<Answer, Failure> {
        let Response {
            status: code,
            body,
            server,
            retry_after,
            ..
        } = response;
        let body = String::from_utf8_lossy(&body).into_owned();
        let read = Reply::read(route, body.as_bytes());
        let status = match read.as_ref().map_err(|e| e.problem()) {
            Ok(reply) => Ok(reply.status()),
            Err(Problem::UnknownStatus(word)) => Err(word.clone()),
            Err(_) => {
                let excerpt: String = body.chars().take(80).collect();
                return Err(fail(
                    3,
                    format!(
                        "the server at {server} answered HTTP {code} with no lockd status \
                         ({excerpt:?}); check that --server / LOCKD_SERVER points at lockd"
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
                    "unexpected answer {word:?} from the server at {server}: {}",
                    body.trim_end()
                ),
            )
        })?;
        Ok(Answer {
            route,
            body,
            server,
            retry_after,
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
                    answer.server,
                    answer.route,
                    answer.status.as_str(),
                    e.problem(),
                ),
            )
        })
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
                    answer.server,
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
            | Status::Forbidden
            | Status::RateLimited => match self.reply::<ErrorReply>(answer) {
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
            None => self
                .refused_by_server(answer, message)
                .unwrap_or_else(unexpected),
        }
    }

    /// The refusals only the REST API has (no lock error kind): `not_found`,
    /// 401, 403 and 429.
    fn refused_by_server(&self, answer: &Answer, message: String) -> Option<Failure> {
        let server = &answer.server;
        Some(match answer.status {
            Status::NotFound => fail(1, format!("not found: {message}")),
            Status::Unauthorized => fail(
                2,
                format!("the server at {server} refused the request (401 unauthorized): {message}"),
            ),
            // The message names the token and what it lacks.
            Status::Forbidden => fail(
                4,
                format!("the server at {server} refused the request (403 forbidden): {message}"),
            ),
            Status::RateLimited => {
                let when = answer.retry_after.map_or_else(
                    || "retry later".to_string(),
                    |after| format!("retry in {} s (Retry-After)", after.as_secs()),
                );
                fail(
                    EXIT_RATE_LIMITED,
                    format!(
                        "the server at {server} is rate limiting this token (429): {message}; \
                         nothing was done, {when}"
                    ),
                )
            }
            _ => return None,
        })
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
    /// `--format json`, [`Remote::post`] and [`Remote::get`] printed the
    /// body already).
    pub fn text(&self, line: impl FnOnce() -> String) {
        if self.format == Format::Text {
            println!("{}", line());
        }
    }
}

/// A blocking client of the hosts that [`Conn`] names, for the commands
/// that have no runtime: each call runs [`Remote`]'s on a current-thread
/// runtime of its own.
pub struct Client {
    remote: Remote,
    runtime: Arc<tokio::runtime::Runtime>,
}

impl Client {
    /// A client for requests that may wait in a lock's queue for `wait_ms`.
    pub fn new(conn: Conn, wait_ms: u64) -> Result<Client, Failure> {
        // A waiting lock is answered after up to `wait_ms`; leave room for it.
        let timeout = Duration::from_millis(wait_ms).saturating_add(Duration::from_secs(60));
        Client::with_timeout(conn, timeout)
    }

    /// A client whose every request gives up on a host after `timeout`.
    pub fn with_timeout(conn: Conn, timeout: Duration) -> Result<Client, Failure> {
        Client::build(conn, Some(timeout))
    }

    /// A client for a stream that lasts as long as it likes: connecting
    /// gives up after 10 s, reading never does.
    pub fn streaming(conn: Conn) -> Result<Client, Failure> {
        Client::build(conn, None)
    }

    fn build(conn: Conn, timeout: Option<Duration>) -> Result<Client, Failure> {
        let remote = Remote::connect(&conn, timeout)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| fail(3, format!("cannot start the async runtime: {e}")))?;
        Ok(Client {
            remote,
            runtime: Arc::new(runtime),
        })
    }

    /// `GET path` as a stream: the body of a 200 answer, read as it comes;
    /// any other answer is the failure it reports.
    /// `path` is `route`'s path with its query.
    pub fn open_stream(&self, route: Route, path: &str) -> Result<BodyReader, Failure> {
        match self.runtime.block_on(self.remote.open(route, path))? {
            Ok(stream) => Ok(self.reader(stream)),
            Err(answer) => Err(self.remote.refused("events", &answer)),
        }
    }

    /// `POST` to `route` without a body, for a route whose success is bytes
    /// (the snapshot, a read): `Ok` with the body of a 200 answer, to read
    /// as it comes, or `Err` with any other answer, lockd's.
    pub fn post_for_bytes(&self, route: Route) -> Result<Result<BodyReader, Answer>, Failure> {
        let opened = self
            .runtime
            .block_on(self.remote.open(route, route.path()))?;
        Ok(opened.map(|stream| self.reader(stream)))
    }

    fn reader(&self, stream: StreamResponse) -> BodyReader {
        BodyReader {
            runtime: self.runtime.clone(),
            server: stream.server,
            body: stream.body,
            chunk: Bytes::new(),
        }
    }

    /// The server that answered last, as messages name it.
    pub fn server(&self) -> &str {
        self.remote.server()
    }

    /// `POST` to `route` with `body` as JSON, answered.
    pub fn post<R: Call>(&self, route: Route, body: &R) -> Result<Answer, Failure> {
        self.runtime.block_on(self.remote.post(route, body))
    }

    /// `GET path`, `route`'s path with its query, answered.
    pub fn get(&self, route: Route, path: &str) -> Result<Answer, Failure> {
        self.runtime.block_on(self.remote.get(route, path))
    }

    /// See [`Remote::reply`].
    pub fn reply<T: DeserializeOwned>(&self, answer: &Answer) -> Result<T, Failure> {
        self.remote.reply(answer)
    }

    /// See [`Remote::refused`].
    pub fn refused(&self, name: &str, answer: &Answer) -> Failure {
        self.remote.refused(name, answer)
    }

    /// See [`Remote::expect`].
    pub fn expect<T: DeserializeOwned>(
        &self,
        name: &str,
        answer: &Answer,
        expected: Status,
    ) -> Result<T, Failure> {
        self.remote.expect(name, answer, expected)
    }

    /// See [`Remote::text`].
    pub fn text(&self, line: impl FnOnce() -> String) {
        self.remote.text(line)
    }
}

/// The body of a streamed answer as a blocking [`Read`]: each read that
/// finds nothing buffered runs the client's runtime until the next chunk.
pub struct BodyReader {
    runtime: Arc<tokio::runtime::Runtime>,
    /// The host that answered, for a broken stream's error.
    server: String,
    body: ByteStream,
    /// What is left of the last chunk.
    chunk: Bytes,
}

impl Read for BodyReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.chunk.is_empty() {
            match self.runtime.block_on(self.body.next()) {
                None => return Ok(0),
                Some(Ok(chunk)) => self.chunk = chunk,
                Some(Err(e)) => {
                    let why = match e {
                        Error::Unknown { reason, .. } => reason,
                        other => other.to_string(),
                    };
                    return Err(std::io::Error::other(format!("{}: {why}", self.server)));
                }
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk.split_to(n));
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use lockd_api::{FoundReply, GrantReply, ListReply};

    use super::*;

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
            server: "http://127.0.0.1:7450".to_string(),
            retry_after: Some(Duration::from_secs(3)),
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
            ("rate_limited", EXIT_RATE_LIMITED),
            // A success word where a refusal was expected: not lockd's answer.
            ("found", 3),
        ] {
            let body = format!(r#"{{"message":"m","status":"{word}"}}"#);
            let failure = client.refused("a", &answer("POST /v1/locks/unlock", &body));
            assert_eq!(failure.code, code, "{word}: {failure:?}");
        }
        let limited = client.refused(
            "a",
            &answer(
                "POST /v1/locks/lock",
                r#"{"message":"token \"ci\" is over its rate limit","status":"rate_limited"}"#,
            ),
        );
        assert!(
            limited.message.contains("rate limiting this token (429)")
                && limited
                    .message
                    .contains("nothing was done, retry in 3 s (Retry-After)"),
            "{limited:?}"
        );
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
