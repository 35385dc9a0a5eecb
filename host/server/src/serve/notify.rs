//! systemd's service notifications (`sd_notify(3)`), for a unit of
//! `Type=notify`: `READY=1` once the server answers (its store recovered,
//! its listener accepting), `STOPPING=1` when it begins to drain, and
//! `WATCHDOG=1` every half of `$WATCHDOG_USEC` while its runtime runs, so
//! that a wedged server is restarted (`WatchdogSec=`). Without
//! `$NOTIFY_SOCKET` (not started by systemd) nothing is sent.
//!
//! A failed notification is logged and otherwise ignored: systemd then
//! acts on its own timeouts, which is what it does for any service that
//! does not notify.

use std::net::SocketAddr;
use std::time::Duration;

/// Whether the process was started with a socket to notify.
fn wanted() -> bool {
    std::env::var_os("NOTIFY_SOCKET").is_some_and(|socket| !socket.is_empty())
}

/// Tells systemd the server answers at `addr`, and starts the watchdog's
/// pings if systemd asked for them. Called once the listener accepts for
/// the server itself, after recovery: a unit ordered after lockd starts
/// only when lockd serves.
pub(super) fn ready(addr: SocketAddr) {
    if !wanted() {
        return;
    }
    let status = format!("serving on {addr}");
    send(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(&status),
    ]);
    start_watchdog();
}

/// Tells systemd the server drains: it stops waiting for the start and
/// shows the unit as deactivating while requests in flight finish.
pub(super) fn stopping() {
    if !wanted() {
        return;
    }
    send(&[
        sd_notify::NotifyState::Stopping,
        sd_notify::NotifyState::Status("draining: finishing the requests in flight"),
    ]);
}

/// Pings systemd's watchdog at half its interval (what `sd_watchdog_enabled(3)`
/// advises), from a task on the server's runtime: if the runtime stops
/// making progress, the pings stop and systemd restarts the service.
fn start_watchdog() {
    let Some(interval) = watchdog_interval() else {
        return;
    };
    let every = interval / 2;
    tracing::info!(
        interval_ms = every.as_millis() as u64,
        "systemd watchdog enabled: pinging it"
    );
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        loop {
            ticks.tick().await;
            send(&[sd_notify::NotifyState::Watchdog]);
        }
    });
}

/// `$WATCHDOG_USEC`, as `sd_watchdog_enabled(3)` reads it: unless
/// `$WATCHDOG_PID` names another process (the pings are then not ours to
/// send). systemd sets both; an unset `$WATCHDOG_PID` counts as this
/// process, as libsystemd has it (sd-notify's own check requires it).
fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.trim().parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID") {
        if pid.trim().parse::<u32>().ok()? != std::process::id() {
            return None;
        }
    }
    (usec > 0).then(|| Duration::from_micros(usec))
}

fn send(states: &[sd_notify::NotifyState<'_>]) {
    // Keep $NOTIFY_SOCKET: the watchdog's pings go to it for the whole run.
    if let Err(e) = sd_notify::notify(false, states) {
        tracing::warn!(error = %e, "cannot notify systemd ($NOTIFY_SOCKET)");
    }
}
