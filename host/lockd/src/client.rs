//! The CLI client: `lockd lock | unlock | extend | get | ls` over the REST
//! API (design.md §4), with blocking HTTP (ureq), outside any async runtime.
//!
//! Exit codes: 0 success; 1 `busy`, `not_owner`, `not_held`, `not_found`;
//! 2 usage errors, `invalid_argument`, 401 and 403; 3 the server cannot be
//! reached or is `unavailable`. Every failure is one line on stderr.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand, ValueEnum};
use serde_json::{json, Value};

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
        #[arg(long)]
        owner: String,
        /// Lease length.
        #[arg(long, value_parser = parse_duration_ms, value_name = "DURATION")]
        ttl: u64,
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
struct Failure {
    code: i32,
    message: String,
}

fn fail(code: i32, message: impl Into<String>) -> Failure {
    Failure {
        code,
        message: message.into(),
    }
}

/// A lockd answer: HTTP code, the raw body, and the body parsed.
struct Answer {
    body: String,
    json: Value,
    status: String,
}

impl Answer {
    fn u64(&self, field: &str) -> u64 {
        self.json[field].as_u64().unwrap_or(0)
    }

    fn str(&self, field: &str) -> &str {
        self.json[field].as_str().unwrap_or("?")
    }

    fn message(&self) -> &str {
        self.json["message"].as_str().unwrap_or(&self.status)
    }
}

struct Client {
    server: String,
    agent: ureq::Agent,
    auth_token: Option<String>,
    format: Format,
}

impl Client {
    fn new(conn: Conn, wait_ms: u64) -> Result<Client, Failure> {
        let server = normalize_server(&conn.server)?;
        // A waiting lock is answered after up to `wait_ms`; leave room for it.
        let timeout = Duration::from_millis(wait_ms).saturating_add(Duration::from_secs(60));
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(10)))
            .timeout_global(Some(timeout))
            .build();
        Ok(Client {
            server,
            agent: ureq::Agent::new_with_config(config),
            auth_token: conn.auth_token.filter(|t| !t.is_empty()),
            format: conn.format,
        })
    }

    fn post(&self, path: &str, body: &Value) -> Result<Answer, Failure> {
        let mut request = self.agent.post(format!("{}{path}", self.server));
        if let Some(token) = &self.auth_token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        let result = request
            .content_type("application/json")
            .send(body.to_string());
        self.answer(result)
    }

    fn get(&self, path: &str) -> Result<Answer, Failure> {
        let mut request = self.agent.get(format!("{}{path}", self.server));
        if let Some(token) = &self.auth_token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        self.answer(request.call())
    }

    fn answer(
        &self,
        result: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<Answer, Failure> {
        let response = result.map_err(|e| self.unreachable(e))?;
        let code = response.status().as_u16();
        let body = response
            .into_body()
            .read_to_string()
            .map_err(|e| self.unreachable(e))?;
        let json: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        let Some(status) = json["status"].as_str().map(str::to_string) else {
            let excerpt: String = body.chars().take(80).collect();
            return Err(fail(
                3,
                format!(
                    "the server at {} answered HTTP {code} with no lockd status ({excerpt:?}); \
                     check that --server / LOCKD_SERVER points at lockd",
                    self.server
                ),
            ));
        };
        if self.format == Format::Json {
            println!("{}", body.trim_end());
        }
        Ok(Answer { body, json, status })
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
        let message = answer.message();
        match answer.status.as_str() {
            "busy" => fail(
                1,
                format!(
                    "{name} is busy: held by {:?} (token {}) for another {}; retry later or pass --wait",
                    answer.str("owner"),
                    answer.u64("fencing_token"),
                    remaining(answer.u64("expires_at_ms")),
                ),
            ),
            "not_owner" => fail(
                1,
                format!(
                    "{name} is held by another owner or under another fencing token; \
                     check --owner and --token (see 'lockd get {name}')"
                ),
            ),
            "not_held" => fail(
                1,
                format!("{name} is not held (it may have expired); take it again with 'lockd lock'"),
            ),
            "not_found" => fail(1, format!("not found: {message}")),
            "invalid_argument" => fail(2, format!("{message}; fix the arguments (see --help)")),
            "unauthorized" => fail(
                2,
                format!(
                    "the server at {} refused the request (401 unauthorized): {message}",
                    self.server
                ),
            ),
            "denied" => fail(2, format!("{message}; the server's policy (lockd.toml) refuses it")),
            "unavailable" => fail(
                3,
                format!("{message}; the store could not complete the operation, retry later"),
            ),
            other => fail(
                3,
                format!(
                    "unexpected answer {other:?} from the server at {}: {}",
                    self.server,
                    answer.body.trim_end()
                ),
            ),
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
            wait,
            ephemeral,
            namespace,
            conn,
        } => {
            let client = Client::new(conn, wait.unwrap_or(0))?;
            let mut body = json!({
                "namespace": namespace,
                "name": name,
                "owner": owner,
                "ttl_ms": ttl,
                "durability": if ephemeral { "ephemeral" } else { "persistent" },
            });
            if let Some(wait) = wait {
                body["wait_ms"] = wait.into();
            }
            let answer = client.post("/v1/locks/lock", &body)?;
            if answer.status != "acquired" {
                return Err(client.refused(&name, &answer));
            }
            client.text(|| {
                format!(
                    "acquired {name} token {} expires {}",
                    answer.u64("fencing_token"),
                    rfc3339(answer.u64("expires_at_ms"))
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
            let mut body = json!({"namespace": namespace, "name": name, "owner": owner});
            if let Some(token) = token {
                body["fencing_token"] = token.into();
            }
            let answer = client.post("/v1/locks/unlock", &body)?;
            if answer.status != "unlocked" {
                return Err(client.refused(&name, &answer));
            }
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
            let body = json!({"namespace": namespace, "name": name, "owner": owner, "ttl_ms": ttl});
            let answer = client.post("/v1/locks/extend", &body)?;
            if answer.status != "extended" {
                return Err(client.refused(&name, &answer));
            }
            client.text(|| {
                format!(
                    "extended {name} token {} expires {}",
                    answer.u64("fencing_token"),
                    rfc3339(answer.u64("expires_at_ms"))
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
            let answer = client.post(
                "/v1/locks/get",
                &json!({"namespace": namespace, "name": name}),
            )?;
            match answer.status.as_str() {
                "found" => {
                    client.text(|| {
                        format!(
                            "{name} held by {} token {} expires in {} ({})",
                            answer.str("owner"),
                            answer.u64("fencing_token"),
                            remaining(answer.u64("expires_at_ms")),
                            answer.str("durability"),
                        )
                    });
                    Ok(0)
                }
                // A free lock is an answer, not an error: like grep finding
                // nothing, it exits 1 without complaining on stderr.
                "not_found" => {
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
            let mut path = format!("/v1/locks?namespace={}", encode_query(&namespace));
            if !prefix.is_empty() {
                let _ = write!(path, "&prefix={}", encode_query(&prefix));
            }
            let answer = client.get(&path)?;
            if answer.status != "found" {
                return Err(client.refused(&namespace, &answer));
            }
            client.text(|| table(&answer.json["locks"], &namespace, &prefix));
            Ok(0)
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

fn table(locks: &Value, namespace: &str, prefix: &str) -> String {
    let locks = locks.as_array().map(Vec::as_slice).unwrap_or_default();
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
        "EXPIRES IN".to_string(),
        "DURABILITY".to_string(),
    ]];
    for lock in locks {
        let s = |field: &str| lock[field].as_str().unwrap_or("?").to_string();
        rows.push([
            s("name"),
            s("owner"),
            lock["fencing_token"].as_u64().unwrap_or(0).to_string(),
            remaining(lock["expires_at_ms"].as_u64().unwrap_or(0)),
            s("durability"),
        ]);
    }
    let mut widths = [0; 5];
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
    let ms = expires_at_ms.saturating_sub(now_ms());
    format!("{}.{}s", ms / 1000, ms % 1000 / 100)
}

/// Unix milliseconds as RFC 3339 UTC: `2025-01-31T12:00:00.250Z`.
fn rfc3339(ms: u64) -> String {
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

/// Percent-encodes a query value (everything but unreserved characters).
fn encode_query(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
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
    fn encodes_queries() {
        assert_eq!(encode_query("a/b c&d=é"), "a%2Fb%20c%26d%3D%C3%A9");
        assert_eq!(encode_query("job-1_x.y~"), "job-1_x.y~");
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
        let locks = json!([
            {"name": "a", "owner": "worker-1", "fencing_token": 7, "expires_at_ms": 0, "durability": "persistent"},
            {"name": "long-name", "owner": "w", "fencing_token": 12345, "expires_at_ms": 0, "durability": "ephemeral"},
        ]);
        let t = table(&locks, "default", "");
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(
            lines[0].starts_with("NAME       OWNER     TOKEN  EXPIRES IN  DURABILITY"),
            "{t}"
        );
        assert!(
            lines[2].starts_with("long-name  w         12345  0.0s"),
            "{t}"
        );
        assert_eq!(
            table(&json!([]), "ns", ""),
            "no locks held in namespace \"ns\""
        );
    }
}
