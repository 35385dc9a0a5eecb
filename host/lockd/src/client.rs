//! The CLI client: `lockd lock | unlock | extend | get | ls | force-unlock |
//! watch` over the REST API (docs/http.md), with blocking HTTP (ureq),
//! outside any async runtime.
//!
//! Requests are built and replies parsed with the server's own wire types
//! ([`lockd::api::wire`]). A reply whose status word is known but whose
//! fields are missing or mistyped is a failure (exit 3) naming the field,
//! never a default.
//!
//! Exit codes: 0 success; 1 `busy`, `not_owner`, `not_held`, `not_found`;
//! 2 usage errors, `invalid_argument`, 401 and 403; 3 the server cannot be
//! reached, is `unavailable`, or answered something that is not lockd.
//! Every failure is one line on stderr.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand, ValueEnum};
use lockd::api::wire::{
    self, BusyReply, DurabilityWord, ErrorReply, ExtendRequest, FoundReply, GetRequest, GrantReply,
    LeaseFoundReply, LeaseGrantRequest, LeaseGrantedReply, LeaseRefreshedReply, LeaseRequest,
    LeaseRevokedReply, ListQuery, ListReply, ListedLock, LockRequest, Status, StatusReply,
    UnlockRequest,
};
use lockd::api::wire::{EventQuery, ForceUnlockRequest, ReleasedReply};
use lockd::api::DEFAULT_NAMESPACE;
use lockd_core::ErrorKind;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Where the server is when neither `--server` nor `LOCKD_SERVER` says.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7450";

/// Options every client command takes.
#[derive(Args, Clone, Debug)]
pub struct Conn {
    /// The lockd server.
    #[arg(long, env = "LOCKD_SERVER", default_value = DEFAULT_SERVER)]
    pub server: String,
    /// `text` for people, `json` for the server's JSON body as is.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Bearer token, if the server requires one.
    #[arg(long, env = "LOCKD_AUTH_TOKEN", hide_env_values = true)]
    pub auth_token: Option<String>,
}

/// Output format of the client commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Human-readable lines.
    Text,
    /// The server's JSON response body.
    Json,
}

/// The client subcommands.
#[derive(Subcommand, Debug)]
pub enum ClientCommand {
    /// Take a lock (durations: 500ms, 10s, 5m, 1h30m; a plain number is ms).
    Lock {
        /// The lock name.
        name: String,
        /// Who takes it; use the same owner to unlock, extend or re-lock.
        #[arg(long, required_unless_present = "lease")]
        owner: Option<String>,
        /// Lease length.
        #[arg(long, value_parser = parse_duration_ms, value_name = "DURATION",
              required_unless_present = "lease")]
        ttl: Option<u64>,
        /// Take it under this lease (from 'lockd lease grant') instead of
        /// --owner and --ttl: the lease id owns it, with the lease's expiry.
        #[arg(long, value_name = "LEASE_ID", conflicts_with_all = ["owner", "ttl", "ephemeral"])]
        lease: Option<String>,
        /// Wait this long in the lock's FIFO queue if it is held.
        #[arg(long, value_parser = parse_duration_ms, value_name = "DURATION")]
        wait: Option<u64>,
        /// Keep the lock in memory only (lost if the server restarts).
        #[arg(long)]
        ephemeral: bool,
        /// The namespace of the lock.
        #[arg(long, default_value = "default")]
        namespace: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Release a lock.
    Unlock {
        /// The lock name.
        name: String,
        /// The owner that holds it.
        #[arg(long)]
        owner: String,
        /// Release only the grant with this fencing token.
        #[arg(long)]
        token: Option<u64>,
        /// The namespace of the lock.
        #[arg(long, default_value = "default")]
        namespace: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Move the expiry of a held lock to now + TTL.
    Extend {
        /// The lock name.
        name: String,
        /// The owner that holds it.
        #[arg(long)]
        owner: String,
        /// New lease length, from now.
        #[arg(long, value_parser = parse_duration_ms, value_name = "DURATION")]
        ttl: u64,
        /// The namespace of the lock.
        #[arg(long, default_value = "default")]
        namespace: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Show who holds a lock (exit 1 if nobody does).
    Get {
        /// The lock name.
        name: String,
        /// The namespace of the lock.
        #[arg(long, default_value = "default")]
        namespace: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// List the live locks of a namespace.
    Ls {
        /// Only names starting with this.
        #[arg(long, default_value = "")]
        prefix: String,
        /// The namespace to list.
        #[arg(long, default_value = "default")]
        namespace: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Release a lock whoever holds it (an operator's action, logged by the
    /// server); the head of its queue gets it next. Exits 1 if it is not held.
    ForceUnlock {
        /// The lock name.
        name: String,
        /// The namespace of the lock.
        #[arg(long, default_value = "default")]
        namespace: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Print lock events live (acquired, extended, released, expired,
    /// handed_off, force_released, lease_*), one line each, until
    /// interrupted. Exits 1 if the server closes the stream because this
    /// client fell behind, 3 if the stream ends otherwise.
    Watch {
        /// Only events of this namespace [default: every namespace].
        #[arg(long)]
        namespace: Option<String>,
        /// Only events of locks whose name starts with this.
        #[arg(long)]
        prefix: Option<String>,
        #[command(flatten)]
        conn: Conn,
    },
    /// Leases: one expiry for several locks (take locks under a lease with
    /// the REST API's `lease_id`).
    Lease {
        #[command(subcommand)]
        command: LeaseCommand,
    },
}

/// `lockd lease ...`
#[derive(Subcommand, Debug)]
pub enum LeaseCommand {
    /// Grant a lease and print its id.
    Grant {
        /// The lease's TTL; each refresh moves its expiry to now + this.
        #[arg(long, value_parser = parse_duration_ms, value_name = "DURATION")]
        ttl: u64,
        /// Keep the lease and its locks in memory only (lost if the server restarts).
        #[arg(long)]
        ephemeral: bool,
        /// The namespace of the lease and its locks.
        #[arg(long, default_value = "default")]
        namespace: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Move the expiry of a lease and of all its locks to now + its TTL.
    Refresh {
        /// The lease id.
        id: String,
        /// The namespace of the lease.
        #[arg(long, default_value = "default")]
        namespace: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// End a lease and release all its locks at once.
    Revoke {
        /// The lease id.
        id: String,
        /// The namespace of the lease.
        #[arg(long, default_value = "default")]
        namespace: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Show a lease's expiry, durability and locks (exit 1 if it is not live).
    Get {
        /// The lease id.
        id: String,
        /// The namespace of the lease.
        #[arg(long, default_value = "default")]
        namespace: String,
        #[command(flatten)]
        conn: Conn,
    },
}

/// Runs one client command; returns the process exit code.
pub fn run(command: ClientCommand) -> i32 {
    match execute(command) {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("lockd: {}", failure.message);
            failure.code
        }
    }
}

/// A failed command: one stderr line and an exit code.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: i32,
    pub(crate) message: String,
}

pub(crate) fn fail(code: i32, message: impl Into<String>) -> Failure {
    Failure {
        code,
        message: message.into(),
    }
}

/// A lockd answer: the route asked, the raw body and its status word. The
/// rest of the body is parsed by [`Client::reply`] or [`Client::refused`],
/// into the type the status word promises.
pub(crate) struct Answer {
    route: String,
    body: String,
    status: Status,
}

pub(crate) struct Client {
    server: String,
    agent: ureq::Agent,
    auth_token: Option<String>,
    format: Format,
}

impl Client {
    pub(crate) fn new(conn: Conn, wait_ms: u64) -> Result<Client, Failure> {
        // A waiting lock is answered after up to `wait_ms`; leave room for it.
        let timeout = Duration::from_millis(wait_ms).saturating_add(Duration::from_secs(60));
        Client::with_timeout(conn, timeout)
    }

    /// A client whose every request gives up after `timeout`.
    pub(crate) fn with_timeout(conn: Conn, timeout: Duration) -> Result<Client, Failure> {
        let server = normalize_server(&conn.server)?;
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(timeout.min(Duration::from_secs(10))))
            .timeout_global(Some(timeout))
            .build();
        Ok(Client {
            server,
            agent: ureq::Agent::new_with_config(config),
            auth_token: conn.auth_token.filter(|t| !t.is_empty()),
            format: conn.format,
        })
    }

    /// A client for a stream that lasts as long as it likes: connecting
    /// gives up after 10 s, reading never does.
    pub(crate) fn streaming(conn: Conn) -> Result<Client, Failure> {
        let server = normalize_server(&conn.server)?;
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(10)))
            .build();
        Ok(Client {
            server,
            agent: ureq::Agent::new_with_config(config),
            auth_token: conn.auth_token.filter(|t| !t.is_empty()),
            format: conn.format,
        })
    }

    /// `GET path` as a stream: the body of a 200 answer, read as it comes;
    /// any other answer is the failure it reports.
    pub(crate) fn open_stream(&self, path: &str) -> Result<ureq::BodyReader<'static>, Failure> {
        let mut request = self.agent.get(format!("{}{path}", self.server));
        if let Some(token) = &self.auth_token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        let route = path.split_once('?').map_or(path, |(route, _)| route);
        let response = request.call().map_err(|e| self.unreachable(e))?;
        if response.status().as_u16() == 200 {
            return Ok(response.into_body().into_reader());
        }
        let answer = self.answer(format!("GET {route}"), Ok(response))?;
        Err(self.refused("events", &answer))
    }

    pub(crate) fn post(&self, path: &str, body: &impl Serialize) -> Result<Answer, Failure> {
        let body = serde_json::to_string(body)
            .map_err(|e| fail(2, format!("cannot encode the request to {path}: {e}")))?;
        let mut request = self.agent.post(format!("{}{path}", self.server));
        if let Some(token) = &self.auth_token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        let result = request.content_type("application/json").send(body);
        self.answer(format!("POST {path}"), result)
    }

    fn get(&self, path: &str) -> Result<Answer, Failure> {
        let mut request = self.agent.get(format!("{}{path}", self.server));
        if let Some(token) = &self.auth_token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        let route = path.split_once('?').map_or(path, |(route, _)| route);
        self.answer(format!("GET {route}"), request.call())
    }

    fn answer(
        &self,
        route: String,
        result: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<Answer, Failure> {
        let response = result.map_err(|e| self.unreachable(e))?;
        let code = response.status().as_u16();
        let body = response
            .into_body()
            .read_to_string()
            .map_err(|e| self.unreachable(e))?;
        let status = match wire::reply_status(&body) {
            Ok(Some(status)) => Ok(status),
            Err(word) => Err(word),
            Ok(None) => {
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
    fn reply<T: DeserializeOwned>(&self, answer: &Answer) -> Result<T, Failure> {
        wire::parse_reply(&answer.body).map_err(|e| {
            fail(
                3,
                format!(
                    "the server at {} answered {} with a malformed {:?} reply ({e}); \
                     check that --server / LOCKD_SERVER points at a lockd of this version",
                    self.server,
                    answer.route,
                    answer.status.as_str()
                ),
            )
        })
    }

    fn unreachable(&self, error: ureq::Error) -> Failure {
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
    fn refused(&self, name: &str, answer: &Answer) -> Failure {
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
            | Status::Unauthorized => match self.reply::<ErrorReply>(answer) {
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
            None => unexpected(),
        }
    }

    /// The success body of `answer`, if its status is `expected`; else the
    /// failure it reports.
    pub(crate) fn expect<T: DeserializeOwned>(
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

    fn text(&self, line: impl FnOnce() -> String) {
        if self.format == Format::Text {
            println!("{}", line());
        }
    }
}

fn execute(command: ClientCommand) -> Result<i32, Failure> {
    match command {
        ClientCommand::Lock {
            name,
            owner,
            ttl,
            lease,
            wait,
            ephemeral,
            namespace,
            conn,
        } => {
            let client = Client::new(conn, wait.unwrap_or(0))?;
            let request = LockRequest {
                namespace: Some(namespace),
                name,
                owner,
                ttl_ms: ttl,
                wait_ms: wait,
                // Under a lease, the lease's durability applies.
                durability: lease.is_none().then_some(if ephemeral {
                    DurabilityWord::Ephemeral
                } else {
                    DurabilityWord::Persistent
                }),
                lease_id: lease,
            };
            let answer = client.post(LockRequest::PATH, &request)?;
            let name = request.name;
            if let Some(id) = &request.lease_id {
                if answer.status == Status::NotHeld {
                    let _: ErrorReply = client.reply(&answer)?;
                    return Err(lease_not_live(id));
                }
            }
            let grant: GrantReply = client.expect(&name, &answer, Status::Acquired)?;
            client.text(|| {
                format!(
                    "acquired {name} token {} expires {}",
                    grant.fencing_token,
                    rfc3339(grant.expires_at_ms)
                )
            });
            Ok(0)
        }
        ClientCommand::Unlock {
            name,
            owner,
            token,
            namespace,
            conn,
        } => {
            let client = Client::new(conn, 0)?;
            let request = UnlockRequest {
                namespace: Some(namespace),
                name,
                owner,
                fencing_token: token,
            };
            let answer = client.post(UnlockRequest::PATH, &request)?;
            let name = request.name;
            let _: StatusReply = client.expect(&name, &answer, Status::Unlocked)?;
            client.text(|| format!("unlocked {name}"));
            Ok(0)
        }
        ClientCommand::Extend {
            name,
            owner,
            ttl,
            namespace,
            conn,
        } => {
            let client = Client::new(conn, 0)?;
            let request = ExtendRequest {
                namespace: Some(namespace),
                name,
                owner,
                ttl_ms: ttl,
            };
            let answer = client.post(ExtendRequest::PATH, &request)?;
            let name = request.name;
            let grant: GrantReply = client.expect(&name, &answer, Status::Extended)?;
            client.text(|| {
                format!(
                    "extended {name} token {} expires {}",
                    grant.fencing_token,
                    rfc3339(grant.expires_at_ms)
                )
            });
            Ok(0)
        }
        ClientCommand::Get {
            name,
            namespace,
            conn,
        } => {
            let client = Client::new(conn, 0)?;
            let request = GetRequest {
                namespace: Some(namespace),
                name,
            };
            let answer = client.post(GetRequest::PATH, &request)?;
            let name = request.name;
            match answer.status {
                Status::Found => {
                    let found: FoundReply = client.reply(&answer)?;
                    client.text(|| {
                        format!(
                            "{name} held by {} token {} expires in {} ({})",
                            found.owner,
                            found.fencing_token,
                            remaining(found.expires_at_ms),
                            found.durability,
                        )
                    });
                    Ok(0)
                }
                // A free lock is an answer, not an error: like grep finding
                // nothing, it exits 1 without complaining on stderr.
                Status::NotFound => {
                    let _: StatusReply = client.reply(&answer)?;
                    client.text(|| format!("{name} is free"));
                    Ok(1)
                }
                _ => Err(client.refused(&name, &answer)),
            }
        }
        ClientCommand::Ls {
            prefix,
            namespace,
            conn,
        } => {
            let client = Client::new(conn, 0)?;
            let query = ListQuery {
                namespace: Some(namespace),
                prefix: Some(prefix).filter(|p| !p.is_empty()),
            };
            let answer = client.get(&query.path())?;
            let namespace = query.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
            let list: ListReply = client.expect(namespace, &answer, Status::Found)?;
            let prefix = query.prefix.as_deref().unwrap_or("");
            client.text(|| table(&list.locks, namespace, prefix));
            Ok(0)
        }
        ClientCommand::ForceUnlock {
            name,
            namespace,
            conn,
        } => {
            let client = Client::new(conn, 0)?;
            let request = ForceUnlockRequest {
                namespace: Some(namespace),
                name,
            };
            let answer = client.post(ForceUnlockRequest::PATH, &request)?;
            let name = request.name;
            if answer.status == Status::NotHeld {
                let _: ErrorReply = client.reply(&answer)?;
                return Err(fail(1, format!("{name} is not held; nothing to release")));
            }
            let released: ReleasedReply = client.expect(&name, &answer, Status::Released)?;
            client.text(|| {
                format!(
                    "force-released {name} from {} (token {})",
                    released.owner, released.fencing_token
                )
            });
            Ok(0)
        }
        ClientCommand::Watch {
            namespace,
            prefix,
            conn,
        } => {
            let query = EventQuery {
                namespace,
                prefix: prefix.filter(|p| !p.is_empty()),
                access_token: None,
            };
            let format = conn.format;
            let client = Client::streaming(conn)?;
            let events = client.open_stream(&query.path())?;
            crate::watch::print(events, format, &mut std::io::stdout().lock())
        }
        ClientCommand::Lease { command } => lease(command),
    }
}

fn lease_not_live(id: &str) -> Failure {
    fail(
        1,
        format!(
            "lease {id} is not live (unknown, revoked or expired, or in another namespace); \
             grant a new one with 'lockd lease grant'"
        ),
    )
}

fn lease(command: LeaseCommand) -> Result<i32, Failure> {
    let (path, id, namespace, conn) = match command {
        LeaseCommand::Grant {
            ttl,
            ephemeral,
            namespace,
            conn,
        } => {
            let client = Client::new(conn, 0)?;
            let request = LeaseGrantRequest {
                namespace: Some(namespace),
                ttl_ms: ttl,
                durability: Some(if ephemeral {
                    DurabilityWord::Ephemeral
                } else {
                    DurabilityWord::Persistent
                }),
            };
            let answer = client.post(LeaseGrantRequest::PATH, &request)?;
            let granted: LeaseGrantedReply = client.expect("lease", &answer, Status::Granted)?;
            // The id alone, so that `ID=$(lockd lease grant --ttl 30s)` works.
            client.text(|| granted.lease_id.clone());
            return Ok(0);
        }
        LeaseCommand::Refresh {
            id,
            namespace,
            conn,
        } => (LeaseRequest::REFRESH_PATH, id, namespace, conn),
        LeaseCommand::Revoke {
            id,
            namespace,
            conn,
        } => (LeaseRequest::REVOKE_PATH, id, namespace, conn),
        LeaseCommand::Get {
            id,
            namespace,
            conn,
        } => (LeaseRequest::GET_PATH, id, namespace, conn),
    };
    let client = Client::new(conn, 0)?;
    let request = LeaseRequest {
        namespace: Some(namespace),
        lease_id: id,
    };
    let answer = client.post(path, &request)?;
    let id = request.lease_id;
    if answer.status == Status::NotHeld {
        let _: ErrorReply = client.reply(&answer)?;
        return Err(lease_not_live(&id));
    }
    match path {
        LeaseRequest::REFRESH_PATH => {
            let r: LeaseRefreshedReply = client.expect(&id, &answer, Status::Refreshed)?;
            client.text(|| format!("refreshed {id} expires {}", rfc3339(r.expires_at_ms)));
        }
        LeaseRequest::REVOKE_PATH => {
            let r: LeaseRevokedReply = client.expect(&id, &answer, Status::Revoked)?;
            let s = if r.released == 1 { "" } else { "s" };
            client.text(|| format!("revoked {id}, released {} lock{s}", r.released));
        }
        _ => {
            let r: LeaseFoundReply = client.expect(&id, &answer, Status::Found)?;
            client.text(|| {
                let locks = if r.locks.is_empty() {
                    "no locks".to_string()
                } else {
                    format!("locks: {}", r.locks.join(", "))
                };
                format!(
                    "{id} expires in {} (ttl {}.{}s, {}), {locks}",
                    remaining(r.expires_at_ms),
                    r.ttl_ms / 1000,
                    r.ttl_ms % 1000 / 100,
                    r.durability,
                )
            });
        }
    }
    Ok(0)
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
    if server.starts_with("https://") {
        return Err(fail(
            2,
            format!("{server}: this client speaks plain http only; use an http:// URL"),
        ));
    }
    if server.starts_with("http://") {
        Ok(server.to_string())
    } else if server.contains("://") {
        Err(fail(
            2,
            format!("{server}: not an http URL; use for example {DEFAULT_SERVER}"),
        ))
    } else {
        Ok(format!("http://{server}"))
    }
}

fn table(locks: &[ListedLock], namespace: &str, prefix: &str) -> String {
    if locks.is_empty() {
        return if prefix.is_empty() {
            format!("no locks held in namespace {namespace:?}")
        } else {
            format!("no locks named {prefix:?}... held in namespace {namespace:?}")
        };
    }
    let mut rows = vec![[
        "NAME".to_string(),
        "OWNER".to_string(),
        "TOKEN".to_string(),
        "HELD".to_string(),
        "EXPIRES".to_string(),
        "WAITERS".to_string(),
        "DURABILITY".to_string(),
    ]];
    for lock in locks {
        rows.push([
            lock.name.clone(),
            lock.owner.clone(),
            lock.fencing_token.to_string(),
            lock.acquired_at_ms.map_or_else(
                || "-".to_string(),
                |at| seconds(now_ms().saturating_sub(at)),
            ),
            format!("in {}", remaining(lock.expires_at_ms)),
            lock.waiters.to_string(),
            lock.durability.to_string(),
        ]);
    }
    let mut widths = [0; 7];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}  ");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.pop();
    out
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Time left until `expires_at_ms`, in seconds with one decimal: `9.8s`.
fn remaining(expires_at_ms: u64) -> String {
    seconds(expires_at_ms.saturating_sub(now_ms()))
}

/// `ms` as seconds with one decimal: `12.3s`.
fn seconds(ms: u64) -> String {
    format!("{}.{}s", ms / 1000, ms % 1000 / 100)
}

/// Unix milliseconds as RFC 3339 UTC: `2025-01-31T12:00:00.250Z`.
pub(crate) fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// Parses a human duration into milliseconds: `500ms`, `10s`, `5m`, `1h`,
/// `1h30m`, `2d`; a plain number is milliseconds. Units go from largest to
/// smallest, each at most once.
pub fn parse_duration_ms(input: &str) -> Result<u64, String> {
    let bad = |why: &str| {
        format!(
            "invalid duration {input:?}: {why}; use a whole number with a unit \
             (ms, s, m, h, d) such as 500ms, 10s, 5m or 1h30m, or a plain number of milliseconds"
        )
    };
    let s = input.trim();
    if s.is_empty() {
        return Err(bad("it is empty"));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse::<u64>().map_err(|_| bad("it is too large"));
    }
    const UNITS: [(&str, u64); 5] = [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
        ("ms", 1),
    ];
    let mut rest = s;
    let mut total: u64 = 0;
    // Index into UNITS of the last unit used; the next must come after it.
    let mut last: Option<usize> = None;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad("expected a number"));
        }
        let number: u64 = rest[..digits].parse().map_err(|_| bad("it is too large"))?;
        rest = &rest[digits..];
        let letters = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = &rest[..letters];
        rest = &rest[letters..];
        let Some(i) = UNITS.iter().position(|(u, _)| *u == unit) else {
            return Err(if unit.is_empty() {
                bad("a number without a unit must stand alone")
            } else {
                bad(&format!("unknown unit {unit:?}"))
            });
        };
        if last.is_some_and(|l| i <= l) {
            return Err(bad("units must go from largest to smallest, each once"));
        }
        last = Some(i);
        total = number
            .checked_mul(UNITS[i].1)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(|| bad("it is too large"))?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_durations() {
        for (input, ms) in [
            ("500ms", 500),
            ("10s", 10_000),
            ("5m", 300_000),
            ("1h", 3_600_000),
            ("1h30m", 5_400_000),
            ("1m30s500ms", 90_500),
            ("2d", 172_800_000),
            ("250", 250),
            ("0", 0),
            ("0s", 0),
            (" 10s ", 10_000),
        ] {
            assert_eq!(parse_duration_ms(input), Ok(ms), "{input}");
        }
    }

    #[test]
    fn rejects_bad_durations_clearly() {
        for input in [
            "",
            "10x",
            "s",
            "1.5s",
            "-1s",
            "10 s",
            "30m1h",
            "1s1s",
            "1h 30m",
            "ten",
            "10S",
            "99999999999999999999",
            "9999999999999999d",
            "5ms3",
        ] {
            let err = parse_duration_ms(input).unwrap_err();
            assert!(
                err.contains("invalid duration") && err.contains("500ms"),
                "{input}: {err}"
            );
        }
        assert!(parse_duration_ms("10x")
            .unwrap_err()
            .contains("unknown unit \"x\""));
    }

    #[test]
    fn formats_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339(1_735_689_599_999), "2024-12-31T23:59:59.999Z");
        assert_eq!(rfc3339(4_102_444_800_000), "2100-01-01T00:00:00.000Z");
    }

    #[test]
    fn normalizes_servers() {
        assert_eq!(
            normalize_server("127.0.0.1:7450").unwrap(),
            "http://127.0.0.1:7450"
        );
        assert_eq!(normalize_server("http://h:1/").unwrap(), "http://h:1");
        assert_eq!(normalize_server("https://h").unwrap_err().code, 2);
        assert_eq!(normalize_server("ftp://h").unwrap_err().code, 2);
        assert_eq!(normalize_server(" ").unwrap_err().code, 2);
    }

    #[test]
    fn tables_align() {
        let locks: ListReply = wire::parse_reply(
            r#"{"status": "found", "locks": [
                {"name": "a", "owner": "worker-1", "fencing_token": 7, "expires_at_ms": 0, "durability": "persistent"},
                {"name": "long-name", "owner": "w", "fencing_token": 12345, "expires_at_ms": 0, "durability": "ephemeral"}
            ]}"#,
        )
        .unwrap();
        let t = table(&locks.locks, "default", "");
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(
            lines[0].starts_with("NAME       OWNER     TOKEN  HELD  EXPIRES  WAITERS  DURABILITY"),
            "{t}"
        );
        // A reply without acquired_at_ms (an older server) shows "-".
        assert!(
            lines[2].starts_with("long-name  w         12345  -     in 0.0s  0        ephemeral"),
            "{t}"
        );
        assert_eq!(table(&[], "ns", ""), "no locks held in namespace \"ns\"");
    }

    fn client() -> Client {
        Client::new(
            Conn {
                server: "127.0.0.1:7450".to_string(),
                format: Format::Text,
                auth_token: None,
            },
            0,
        )
        .unwrap()
    }

    fn answer(route: &str, body: &str) -> Answer {
        Answer {
            route: route.to_string(),
            body: body.to_string(),
            status: wire::reply_status(body).unwrap().unwrap(),
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
