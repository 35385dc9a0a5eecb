//! Running a command while holding a grant over the REST API: what `lockd
//! exec` (a lock) and `lockd elect` (an election's leadership) share
//! (docs/contract.md#c17-keep-alive, #c18-lost).
//!
//! 1. [`take`] asks for the grant, waiting in the name's FIFO queue up to
//!    `--wait`. If it cannot be had: exit 75 (EX_TEMPFAIL) with one line on
//!    stderr; CMD never starts.
//! 2. [`run_while_held`] runs CMD with the grant's variables in its
//!    environment and extends the grant (`POST /v1/locks/extend`) at a
//!    third of its TTL while CMD runs. A renewal that fails with
//!    `unavailable`, an unreachable server or an unknown outcome is
//!    retried; with several hosts (`--server A,B`) each attempt fails over
//!    to the next host (an extend is safe to send twice), so the grant
//!    outlives the host that granted it where the store is shared (etcd).
//! 3. The grant is lost when a renewal is refused (`not_held`, `not_owner`,
//!    or any other refusal) or when no renewal succeeded before the expiry.
//!    The expiry is counted on this host's monotonic clock from the moment
//!    the last successful request was *sent* (the server's expiry can only
//!    be later), less a safety margin of min(TTL/10, 1 s): CMD gets SIGTERM
//!    before the grant can pass to anyone else, SIGKILL after
//!    `--kill-after`, and the command exits 76 with one line on stderr.
//!
//! Steps 2 and 3 are the core's one keep-alive rule
//! ([`lockd_core::keepalive`], the same as a guest's guards and leases),
//! driven by [`keep_alive`] over the REST API (`Held`'s [`Renew`]).
//! 4. When CMD exits, the grant is released (an unlock or a resignation,
//!    with its fencing token) and the command exits with CMD's status
//!    (128 + the signal if a signal killed it). SIGINT and SIGTERM sent to
//!    the command go to CMD.

use std::future::Future;
use std::process::ExitStatus;
use std::time::Duration;

use clap::Args;
use lockd_api::{
    ExtendRequest, GrantReply, ResignRequest, Route, Status, StatusReply, UnlockRequest,
};
use lockd_core::keepalive::{keep_alive, Holding, Lost, Renew, Terms};
use lockd_core::{Clock, SystemClock};
use rustix::process::{kill_process, Pid, Signal};
use tokio::process::Child;
use tokio::signal::unix::{signal, Signal as Watched, SignalKind};
use tokio::time::Instant;

use super::client::{Call, Remote, EXIT_RATE_LIMITED};
use super::failure::{exit_code, fail, Failure};
use super::flags::{durability, ClientTls, Conn, NamespaceArg, DEFAULT_SERVER, SERVER_HELP};
use super::output::Format;
use super::time::parse_duration_ms;

/// Exit code when the grant cannot be had (EX_TEMPFAIL).
pub const EXIT_NOT_TAKEN: i32 = 75;
/// Exit code when the grant was lost while CMD ran.
pub const EXIT_LOST: i32 = 76;

/// The flags of a command that runs CMD while it holds a grant.
#[derive(Args, Debug)]
#[command(mut_arg("namespace", |arg| arg.help("The namespace of the name")))]
pub struct HoldArgs {
    /// How long the grant lasts unless renewed; it is renewed at a third of
    /// it while CMD runs.
    #[arg(long, default_value = "30s", value_parser = parse_duration_ms, value_name = "DURATION")]
    pub ttl: u64,
    /// Wait this long in the name's FIFO queue if it is held (0: fail at
    /// once).
    #[arg(long, default_value = "1m", value_parser = parse_duration_ms, value_name = "DURATION")]
    pub wait: u64,
    /// Keep the grant in memory only (lost if the server restarts).
    #[arg(long)]
    pub ephemeral: bool,
    #[command(flatten)]
    pub namespace: NamespaceArg,
    /// After the grant is lost, send SIGKILL this long after SIGTERM.
    #[arg(long, default_value = "10s", value_parser = parse_duration_ms, value_name = "DURATION")]
    pub kill_after: u64,
    #[arg(long, env = "LOCKD_SERVER", default_value = DEFAULT_SERVER, value_name = "URL[,URL...]",
          help = SERVER_HELP)]
    pub server: String,
    /// Bearer token, if the server requires one.
    #[arg(long, env = "LOCKD_AUTH_TOKEN", hide_env_values = true)]
    pub auth_token: Option<String>,
    #[command(flatten)]
    pub tls: ClientTls,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

impl HoldArgs {
    /// The client of the servers (text output: these commands print
    /// nothing of their own on stdout, which is CMD's). Requests have
    /// their own timeouts ([`take`], renewals, the release). Exit 2 for a
    /// bad `--server` list or TLS file, before anything is sent.
    pub fn remote(&self) -> Result<Remote, Failure> {
        let conn = Conn {
            server: self.server.clone(),
            format: Format::Text,
            auth_token: self.auth_token.clone(),
            tls: self.tls.clone(),
        };
        Remote::connect(&conn, None)
    }

    /// The durability `--ephemeral` asks for.
    pub fn durability(&self) -> lockd_api::DurabilityWord {
        durability(self.ephemeral)
    }
}

/// What is held: it says how to release it and how to name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A lock (`lockd exec`), released by an unlock.
    Lock,
    /// An election's leadership (`lockd elect`), released by resigning.
    Leadership,
}

impl Kind {
    /// The command, as the prefix of its lines on stderr.
    pub fn command(self) -> &'static str {
        match self {
            Kind::Lock => "lockd exec",
            Kind::Leadership => "lockd elect",
        }
    }

    /// `the lock NAME` or `the leadership of NAME`.
    fn what(self, name: &str) -> String {
        match self {
            Kind::Lock => format!("the lock {name}"),
            Kind::Leadership => format!("the leadership of {name}"),
        }
    }
}

/// Runs `future` (a command's whole work) on a small runtime of its own;
/// returns the process exit code.
pub fn execute(kind: Kind, future: impl Future<Output = Result<i32, Failure>>) -> i32 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{}: cannot start the async runtime: {e}", kind.command());
            return EXIT_NOT_TAKEN;
        }
    };
    let code = exit_code(runtime.block_on(future), kind.command());
    // A renewal may still hang on a server that stopped answering; do not
    // wait for it.
    runtime.shutdown_background();
    code
}

/// A granted name: all a renewal or the release needs.
#[derive(Clone)]
pub struct Held {
    /// What it is.
    pub kind: Kind,
    /// The hosts it is renewed and released through (the one that granted
    /// it first).
    pub remote: Remote,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its owner (an election's candidate).
    pub owner: String,
    /// The fencing token it was granted under.
    pub token: u64,
}

/// Renewal over the REST API: `POST /v1/locks/extend`, answered `extended`
/// under the token it was granted.
impl Renew for Held {
    type Error = Failure;

    fn renew(&self, ttl_ms: u64) -> impl Future<Output = Result<u64, Failure>> + Send {
        let held = self.clone();
        async move {
            let request = ExtendRequest {
                namespace: Some(held.namespace.clone()),
                name: held.name.clone(),
                owner: held.owner.clone(),
                ttl_ms,
            };
            let timeout = Some(renewal_timeout(ttl_ms));
            let answer = held
                .remote
                .post_within(Route::Extend, &request, timeout)
                .await?;
            let grant: GrantReply = held.remote.expect(&held.name, &answer, Status::Extended)?;
            if grant.fencing_token != held.token {
                return Err(fail(
                    1,
                    format!(
                        "{} is held under token {}, not {}",
                        held.name, grant.fencing_token, held.token
                    ),
                ));
            }
            tracing::debug!(
                name = %held.name,
                server = answer.server(),
                expires_at_ms = grant.expires_at_ms,
                "renewed"
            );
            Ok(grant.expires_at_ms)
        }
    }

    /// Exit code 3 (unreachable, `unavailable`, an unknown outcome, or no
    /// lockd answer) and a rate limit: trying again can succeed.
    fn is_unavailable(error: &Failure) -> bool {
        error.code == 3 || error.code == EXIT_RATE_LIMITED
    }
}

impl Held {
    /// Releases the grant (with its token, so that a retry on another host
    /// is safe); a failure is one line on stderr, and the TTL ends the
    /// grant.
    async fn release(&self) {
        let namespace = Some(self.namespace.clone());
        let (name, owner) = (self.name.clone(), self.owner.clone());
        let timeout = Some(Duration::from_secs(10));
        let (answer, done) = match self.kind {
            Kind::Lock => {
                let request = UnlockRequest {
                    namespace,
                    name,
                    owner,
                    fencing_token: Some(self.token),
                };
                let answer = self.remote.post_within(Route::Unlock, &request, timeout);
                (answer.await, Status::Unlocked)
            }
            Kind::Leadership => {
                let request = ResignRequest {
                    namespace,
                    name,
                    candidate: owner,
                    fencing_token: Some(self.token),
                };
                let answer = self.remote.post_within(Route::Resign, &request, timeout);
                (answer.await, Status::Resigned)
            }
        };
        let result = answer.and_then(|answer| {
            self.remote
                .expect::<StatusReply>(&self.name, &answer, done)
                .map(drop)
        });
        if let Err(f) = result {
            eprintln!(
                "{}: could not release {} ({}); it ends at its TTL",
                self.kind.command(),
                self.kind.what(&self.name),
                f.message
            );
        }
    }
}

/// How long one renewal may wait for one host before it tries the next: a
/// quarter of the TTL (at least 100 ms, at most 10 s), so that a host that
/// stopped answering leaves time to renew through another before the
/// holder's lost deadline (docs/contract.md#c17-keep-alive).
fn renewal_timeout(ttl_ms: u64) -> Duration {
    Duration::from_millis((ttl_ms / 4).clamp(100, 10_000))
}

/// When a grant was asked for, in [`Clock::now_ms`] time, and the answer.
pub struct Taken {
    /// When the request was sent: the server's expiry is at least this +
    /// the TTL.
    pub sent_at_ms: u64,
    /// The grant.
    pub grant: GrantReply,
}

/// Posts `request` to `route` (a lock or a campaign, which may wait up to
/// `wait_ms` in the queue) and expects `acquired`. Anything else is exit 75,
/// `cannot {verb} NAME: ...`.
pub async fn take<R: Call>(
    remote: &Remote,
    route: Route,
    request: R,
    name: &str,
    wait_ms: u64,
    verb: &str,
) -> Result<Taken, Failure> {
    let sent_at_ms = SystemClock.now_ms();
    // A waiting grant is answered after up to `wait_ms`; leave room for it.
    let timeout = Duration::from_millis(wait_ms).saturating_add(Duration::from_secs(60));
    let grant = async {
        let answer = remote.post_within(route, &request, Some(timeout)).await?;
        remote.expect::<GrantReply>(name, &answer, Status::Acquired)
    }
    .await
    .map_err(|f| not_taken(verb, name, f))?;
    Ok(Taken { sent_at_ms, grant })
}

/// Exit 75: `cannot {verb} NAME: why`.
pub fn not_taken(verb: &str, name: &str, why: Failure) -> Failure {
    fail(
        EXIT_NOT_TAKEN,
        format!("cannot {verb} {name}: {}", why.message),
    )
}

/// Runs `command` with `env` while `held` is kept alive (steps 2 to 4 of the
/// module's doc); returns CMD's exit code, or [`EXIT_LOST`].
pub async fn run_while_held(
    held: Held,
    taken: &Taken,
    args: &HoldArgs,
    env: &[(&str, String)],
) -> Result<i32, Failure> {
    let (ttl, command, prefix) = (args.ttl, &args.command, held.kind.command());
    let clock = SystemClock;
    let holding = Holding::new(starting_terms(&held, taken, ttl).await?);

    // Watch the signals to forward before CMD exists, so none is missed.
    let mut interrupt = watch(SignalKind::interrupt());
    let mut terminate = watch(SignalKind::terminate());
    let mut child = spawn(&held, command, env).await?;

    let keeping = keep_alive(&clock, &holding, &held);
    tokio::pin!(keeping);
    let lost = loop {
        tokio::select! {
            // Biased: CMD's exit counts before a loss when both are ready.
            biased;
            status = child.wait() => {
                let code = match status {
                    Ok(status) => child_exit_code(status),
                    Err(e) => {
                        eprintln!("{prefix}: cannot wait for {:?}: {e}", command[0]);
                        1
                    }
                };
                held.release().await;
                return Ok(code);
            }
            Some(()) = next_signal(&mut interrupt) => forward(&child, Signal::INT),
            Some(()) = next_signal(&mut terminate) => forward(&child, Signal::TERM),
            lost = &mut keeping => break lost,
        }
    };
    let lost = match lost {
        Lost::Refused(why) => format!("a renewal was refused: {}", why.message),
        // Nothing marks the holding from outside: `Marked` cannot come.
        Lost::Expired { .. } | Lost::Marked => {
            format!("no successful renewal within its TTL of {ttl} ms")
        }
    };
    eprintln!(
        "{prefix}: lost {} ({lost}); stopping {:?} (exit {EXIT_LOST})",
        held.kind.what(&held.name),
        command[0]
    );
    let signals = (&mut interrupt, &mut terminate);
    stop(&mut child, signals, Duration::from_millis(args.kill_after)).await;
    Ok(EXIT_LOST)
}

/// The terms CMD starts under. A long wait in the queue leaves less of the
/// TTL than the send time says: renew once before CMD starts, so that it
/// starts with a whole TTL, or not at all (exit 75, released).
async fn starting_terms(held: &Held, taken: &Taken, ttl: u64) -> Result<Terms, Failure> {
    let clock = SystemClock;
    let terms = Terms {
        renewed_at_ms: taken.sent_at_ms,
        ttl_ms: ttl,
        expires_at_ms: taken.grant.expires_at_ms,
    };
    if clock.now_ms().saturating_sub(taken.sent_at_ms) <= terms.margin_ms() {
        return Ok(terms);
    }
    let renewed_at_ms = clock.now_ms();
    match held.renew(ttl).await {
        Ok(expires_at_ms) => Ok(Terms {
            renewed_at_ms,
            ttl_ms: ttl,
            expires_at_ms,
        }),
        Err(why) => {
            held.release().await;
            Err(fail(
                EXIT_NOT_TAKEN,
                format!(
                    "cannot keep {} after taking it: {}",
                    held.kind.what(&held.name),
                    why.message
                ),
            ))
        }
    }
}

/// Starts CMD with `env`; if it cannot start, `held` is released and the
/// exit is 127 (not found) or 126.
async fn spawn(held: &Held, command: &[String], env: &[(&str, String)]) -> Result<Child, Failure> {
    let spawned = tokio::process::Command::new(&command[0])
        .args(&command[1..])
        .envs(env.iter().map(|(key, value)| (key, value)))
        .spawn();
    match spawned {
        Ok(child) => Ok(child),
        Err(e) => {
            held.release().await;
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            Err(fail(code, format!("cannot run {:?}: {e}", command[0])))
        }
    }
}

/// After a loss: SIGTERM to CMD, SIGKILL `kill_after` later if it is still
/// running, and the watched signals passed on meanwhile; returns once it
/// has exited.
async fn stop(
    child: &mut Child,
    (interrupt, terminate): (&mut Option<Watched>, &mut Option<Watched>),
    kill_after: Duration,
) {
    forward(child, Signal::TERM);
    let kill_at = Instant::now() + kill_after;
    let mut killed = false;
    loop {
        tokio::select! {
            _ = child.wait() => break,
            Some(()) = next_signal(interrupt) => forward(child, Signal::INT),
            Some(()) = next_signal(terminate) => forward(child, Signal::TERM),
            () = tokio::time::sleep_until(kill_at), if !killed => {
                killed = true;
                let _ = child.start_kill();
            }
        }
    }
}

fn watch(kind: SignalKind) -> Option<Watched> {
    signal(kind).ok()
}

/// The next delivery of a watched signal; never, if it cannot be watched.
async fn next_signal(signal: &mut Option<Watched>) -> Option<()> {
    match signal {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

/// Sends `sig` to CMD, if it has not been reaped yet (so its pid is still
/// its own).
fn forward(child: &Child, sig: Signal) {
    let pid = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .and_then(Pid::from_raw);
    if let Some(pid) = pid {
        let _ = kill_process(pid, sig);
    }
}

/// CMD's exit code, or 128 + the signal that killed it.
fn child_exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_of_signals() {
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(child_exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(child_exit_code(ExitStatus::from_raw(15)), 128 + 15);
    }
}
