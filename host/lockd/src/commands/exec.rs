//! `lockd exec NAME -- CMD [ARGS...]`: runs a command while holding a lock,
//! like `flock`, `etcdctl lock` and `consul lock`, over the REST API
//! (docs/contract.md#c17-keep-alive, #c18-lost).
//!
//! 1. Takes NAME (shared with `--shared`) for a fresh owner (`exec-` and 32
//!    hex digits from the OS's secure random source), waiting in its FIFO
//!    queue up to `--wait`. If it cannot: exit 75 (EX_TEMPFAIL) with one
//!    line on stderr; CMD never starts.
//! 2. Runs CMD with `LOCKD_LOCK_NAME`, `LOCKD_NAMESPACE`, `LOCKD_OWNER` and
//!    `LOCKD_FENCING_TOKEN` in its environment, and extends the lock at a
//!    third of its TTL while CMD runs. A renewal that fails with `unavailable`
//!    or an unreachable server is retried.
//! 3. The lock is lost when a renewal is refused (`not_held`, `not_owner`, or
//!    any other refusal) or when no renewal succeeded before the expiry. The
//!    expiry is counted on this host's monotonic clock from the moment the
//!    last successful request was *sent* (the server's expiry can only be
//!    later), less a safety margin of min(TTL/10, 1 s): CMD gets SIGTERM
//!    before the lock can pass to anyone else, SIGKILL after `--kill-after`,
//!    and `lockd exec` exits 76 with one line on stderr.
//!
//! Steps 2 and 3 are the core's one keep-alive rule
//! ([`lockd_core::keepalive`], the same as a guest's guards and leases),
//! driven by [`keep_alive`] over the REST API (`Held`'s [`Renew`]).
//! 4. When CMD exits, the lock is released (unlock with its fencing token)
//!    and `lockd exec` exits with CMD's status (128 + the signal if a signal
//!    killed it). SIGINT and SIGTERM sent to `lockd exec` go to CMD.

use std::future::Future;
use std::process::ExitStatus;
use std::time::Duration;

use clap::Args;
use lockd_api::{
    ExtendRequest, GrantReply, LockMode, LockRequest, Route, Status, StatusReply, UnlockRequest,
};
use lockd_core::keepalive::{keep_alive, Holding, Lost, Renew, Terms};
use lockd_core::{random_id, Clock, SystemClock};
use rustix::process::{kill_process, Pid, Signal};
use tokio::process::Child;
use tokio::signal::unix::{signal, Signal as Watched, SignalKind};
use tokio::time::Instant;

use crate::cli::client::Client;
use crate::cli::failure::{exit_code, fail, Failure};
use crate::cli::flags::{durability, ClientTls, Conn, DEFAULT_SERVER};
use crate::cli::output::Format;
use crate::cli::time::parse_duration_ms;

/// Exit code when the lock cannot be taken (EX_TEMPFAIL).
pub const EXIT_NOT_TAKEN: i32 = 75;
/// Exit code when the lock was lost while CMD ran.
pub const EXIT_LOST: i32 = 76;

/// Run a command while holding a lock, like flock: take NAME (waiting up
/// to --wait), run CMD with LOCKD_LOCK_NAME, LOCKD_NAMESPACE, LOCKD_OWNER
/// and LOCKD_FENCING_TOKEN set, keep the lock alive while CMD runs,
/// release it when CMD exits, and exit with CMD's status.
///
/// Exits 75 (CMD never started) if the lock cannot be taken, and 76 if
/// the lock is lost while CMD runs (CMD then gets SIGTERM, and SIGKILL
/// after --kill-after). SIGINT and SIGTERM are passed on to CMD.
#[derive(Args, Debug)]
pub struct ExecCommand {
    /// The lock name.
    name: String,
    /// The lock's TTL; it is extended at a third of it while CMD runs.
    #[arg(long, default_value = "30s", value_parser = parse_duration_ms, value_name = "DURATION")]
    ttl: u64,
    /// Wait this long in the lock's FIFO queue if it is held (0: fail at once).
    #[arg(long, default_value = "1m", value_parser = parse_duration_ms, value_name = "DURATION")]
    wait: u64,
    /// Keep the lock in memory only (lost if the server restarts).
    #[arg(long)]
    ephemeral: bool,
    /// Hold it shared (a read lock): CMD runs beside other shared holders,
    /// never beside an exclusive one.
    #[arg(long)]
    shared: bool,
    /// The namespace of the lock.
    #[arg(long, default_value = "default")]
    namespace: String,
    /// After the lock is lost, send SIGKILL this long after SIGTERM.
    #[arg(long, default_value = "10s", value_parser = parse_duration_ms, value_name = "DURATION")]
    kill_after: u64,
    /// The lockd server.
    #[arg(long, env = "LOCKD_SERVER", default_value = DEFAULT_SERVER)]
    server: String,
    /// Bearer token, if the server requires one.
    #[arg(long, env = "LOCKD_AUTH_TOKEN", hide_env_values = true)]
    auth_token: Option<String>,
    #[command(flatten)]
    tls: ClientTls,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

impl ExecCommand {
    /// Runs `lockd exec` on a small runtime of its own; returns the process
    /// exit code.
    pub fn execute(self) -> i32 {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("lockd exec: cannot start the async runtime: {e}");
                return EXIT_NOT_TAKEN;
            }
        };
        let code = exit_code(runtime.block_on(exec(self)), "lockd exec");
        // A renewal may still hang on a server that stopped answering; do not
        // wait for it.
        runtime.shutdown_background();
        code
    }
}

/// What `lockd exec` holds: all a renewal or the release needs.
#[derive(Clone)]
struct Held {
    conn: Conn,
    namespace: String,
    name: String,
    owner: String,
    token: u64,
}

/// Renewal over the REST API: `POST /v1/locks/extend`, answered `extended`
/// under the token `lockd exec` was granted.
impl Renew for Held {
    type Error = Failure;

    fn renew(&self, ttl_ms: u64) -> impl Future<Output = Result<u64, Failure>> + Send {
        let held = self.clone();
        blocking(move || {
            // No answer within the TTL is no use.
            let client = Client::with_timeout(held.conn.clone(), Duration::from_millis(ttl_ms))?;
            let request = ExtendRequest {
                namespace: Some(held.namespace.clone()),
                name: held.name.clone(),
                owner: held.owner.clone(),
                ttl_ms,
            };
            let answer = client.post(Route::Extend, &request)?;
            let grant: GrantReply = client.expect(&held.name, &answer, Status::Extended)?;
            if grant.fencing_token != held.token {
                return Err(fail(
                    1,
                    format!(
                        "{} is held under token {}, not {}",
                        held.name, grant.fencing_token, held.token
                    ),
                ));
            }
            Ok(grant.expires_at_ms)
        })
    }

    /// Exit code 3: unreachable, `unavailable`, or no lockd answer.
    fn is_unavailable(error: &Failure) -> bool {
        error.code == 3
    }
}

async fn exec(args: ExecCommand) -> Result<i32, Failure> {
    let ExecCommand {
        name,
        ttl,
        wait,
        ephemeral,
        shared,
        namespace,
        kill_after,
        server,
        auth_token,
        tls,
        command,
    } = args;
    let conn = Conn {
        server,
        format: Format::Text,
        auth_token,
        tls,
    };
    let not_taken = |f: Failure| fail(EXIT_NOT_TAKEN, format!("cannot take {name}: {}", f.message));
    let owner = random_id("exec").map_err(|e| not_taken(fail(3, e.to_string())))?;
    let request = LockRequest {
        namespace: Some(namespace.clone()),
        name: name.clone(),
        owner: Some(owner.clone()),
        ttl_ms: Some(ttl),
        wait_ms: Some(wait),
        durability: Some(durability(ephemeral)),
        lease_id: None,
        mode: shared.then_some(LockMode::Shared),
        permits: None,
    };
    let clock = SystemClock;
    // The server's expiry is at least the send time + TTL.
    let sent_at_ms = clock.now_ms();
    let lock_conn = conn.clone();
    let grant = blocking(move || {
        let client = Client::new(lock_conn, wait)?;
        let answer = client.post(Route::Lock, &request)?;
        client.expect::<GrantReply>(&request.name, &answer, Status::Acquired)
    })
    .await
    .map_err(not_taken)?;
    let held = Held {
        conn,
        namespace,
        name: name.clone(),
        owner,
        token: grant.fencing_token,
    };
    let mut terms = Terms {
        renewed_at_ms: sent_at_ms,
        ttl_ms: ttl,
        expires_at_ms: grant.expires_at_ms,
    };
    // A long wait in the queue leaves less of the TTL than the send time
    // says: renew once before CMD starts, so that it starts with a whole
    // TTL, or not at all.
    if clock.now_ms().saturating_sub(sent_at_ms) > terms.margin_ms() {
        let renewed_at_ms = clock.now_ms();
        match held.renew(ttl).await {
            Ok(expires_at_ms) => {
                terms = Terms {
                    renewed_at_ms,
                    ttl_ms: ttl,
                    expires_at_ms,
                }
            }
            Err(why) => {
                release(&held).await;
                return Err(fail(
                    EXIT_NOT_TAKEN,
                    format!("cannot keep {name} after taking it: {}", why.message),
                ));
            }
        }
    }
    let holding = Holding::new(terms);

    // Watch the signals to forward before CMD exists, so none is missed.
    let mut interrupt = watch(SignalKind::interrupt());
    let mut terminate = watch(SignalKind::terminate());
    let mut child = match tokio::process::Command::new(&command[0])
        .args(&command[1..])
        .env("LOCKD_LOCK_NAME", &held.name)
        .env("LOCKD_NAMESPACE", &held.namespace)
        .env("LOCKD_OWNER", &held.owner)
        .env("LOCKD_FENCING_TOKEN", held.token.to_string())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            release(&held).await;
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            return Err(fail(code, format!("cannot run {:?}: {e}", command[0])));
        }
    };

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
                        eprintln!("lockd exec: cannot wait for {:?}: {e}", command[0]);
                        1
                    }
                };
                release(&held).await;
                return Ok(code);
            }
            Some(()) = next_signal(&mut interrupt) => forward(&child, Signal::INT),
            Some(()) = next_signal(&mut terminate) => forward(&child, Signal::TERM),
            lost = &mut keeping => break lost,
        }
    };
    let lost = match lost {
        Lost::Refused(why) => format!("a renewal was refused: {}", why.message),
        // Nothing marks exec's holding from outside: `Marked` cannot come.
        Lost::Expired { .. } | Lost::Marked => {
            format!("no successful renewal within its TTL of {ttl} ms")
        }
    };

    eprintln!(
        "lockd exec: lost the lock {} ({lost}); stopping {:?} (exit {EXIT_LOST})",
        held.name, command[0]
    );
    forward(&child, Signal::TERM);
    let kill_at = Instant::now() + Duration::from_millis(kill_after);
    let mut killed = false;
    loop {
        tokio::select! {
            _ = child.wait() => break,
            Some(()) = next_signal(&mut interrupt) => forward(&child, Signal::INT),
            Some(()) = next_signal(&mut terminate) => forward(&child, Signal::TERM),
            () = tokio::time::sleep_until(kill_at), if !killed => {
                killed = true;
                let _ = child.start_kill();
            }
        }
    }
    Ok(EXIT_LOST)
}

/// Releases the lock (with its token); a failure is one line on stderr, and
/// the TTL ends the lock.
async fn release(held: &Held) {
    let held = held.clone();
    let name = held.name.clone();
    let result = blocking(move || {
        let client = Client::with_timeout(held.conn.clone(), Duration::from_secs(10))?;
        let request = UnlockRequest {
            namespace: Some(held.namespace.clone()),
            name: held.name.clone(),
            owner: held.owner.clone(),
            fencing_token: Some(held.token),
        };
        let answer = client.post(Route::Unlock, &request)?;
        client
            .expect::<StatusReply>(&held.name, &answer, Status::Unlocked)
            .map(drop)
    })
    .await;
    if let Err(f) = result {
        eprintln!(
            "lockd exec: could not release {name} ({}); it ends at its TTL",
            f.message
        );
    }
}

/// Runs blocking HTTP off the runtime's thread.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Failure> + Send + 'static,
) -> Result<T, Failure> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(fail(3, format!("the request failed: {e}"))))
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
