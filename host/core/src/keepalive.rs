//! Keep-alive and the lost signal of a holder (docs/contract.md#c17-keep-alive,
//! #c18-lost): one rule for the wasm capability's guards and leases and for
//! `lockd exec`.
//!
//! # The rule
//! Every time below is the [`Clock`]'s monotonic [`Clock::now_ms`]. A holder
//! counts its hold from the moment it *sent* the request of its last
//! successful renewal (or of the grant); call it `t`. The store started the
//! TTL when that request reached it, so its expiry is `t + TTL` or later.
//! - Renew at `t + TTL/3`.
//! - A renewal that fails with its outcome unknown (`unavailable`, an
//!   unreachable server) is retried every clamp(TTL/10, 10 ms, 1 s).
//! - If no renewal succeeded by `t + TTL - min(TTL/10, 1 s)`, the holder is
//!   lost. The margin makes the holder stop before the store can grant the
//!   lock to anyone else, whatever a slow answer or a clock running a little
//!   fast costs.
//! - A renewal refused (any other error: `not_held`, `not_owner`, ...)
//!   means the hold is already gone: lost at once.
//! - A holding whose lost deadline passed before its keep-alive started (a
//!   grant that waited long in the queue was sent long ago) is renewed once
//!   at the start, and counted from that renewal, or lost if it fails.
//!
//! Without keep-alive (the holder renews by itself, or not at all), the
//! holding is only watched: at `t + TTL` the store is asked, and the holder
//! is lost unless the store says the hold was renewed elsewhere (the same
//! owner over REST), in which case the store's new expiry is watched.
//!
//! # Why the monotonic clock
//! A store answers its expiry in wall-clock time. Comparing that with this
//! host's wall clock would make a step of the wall clock (NTP, an
//! operator, a VM resume) fire a false loss when it jumps forward, and hide
//! a real one when it jumps back, past the moment the store hands the lock
//! to someone else (the tests step a [`ManualClock`](crate::ManualClock)'s
//! wall clock to hold this). Counting on the monotonic clock
//! from the send time needs neither wall clock; the store's wall-clock
//! expiry is kept only to tell the holder (`expires-at-ms`). The one
//! conversion left is in the watch-only mode, where the store's own answer
//! "held until X" is read through [`Clock::monotonic_of_wall_ms`], which
//! follows the steps the engine sees too.
//!
//! # Parts
//! - [`Terms`]: the policy as arithmetic, no I/O.
//! - [`Holding`]: the state one holder shares with its driver and its
//!   waiters: its current [`Terms`], updated by every renewal (keep-alive's
//!   or the holder's own), and its lost flag as a `tokio::sync::watch`.
//! - [`keep_alive`] renews through a [`Renew`]; [`watch_expiry`] checks
//!   through a [`CheckHeld`]. Both are timed by a [`Clock`], mark the holding
//!   lost when it is, and return why ([`Lost`]).

use std::fmt;
use std::future::Future;

use tokio::sync::watch;

use crate::clock::Clock;

/// Longest margin before the expiry, and longest retry interval.
const MAX_MARGIN_MS: u64 = 1_000;
/// Shortest retry interval: a tiny TTL must not turn retries into a spin.
const MIN_RETRY_MS: u64 = 10;

/// What a holder knows of its hold after its last successful renewal (or
/// the grant).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Terms {
    /// When the request of that renewal was sent, in [`Clock::now_ms`]
    /// time.
    pub renewed_at_ms: u64,
    /// The TTL it asked for (a lease's own TTL).
    pub ttl_ms: u64,
    /// The expiry the store answered, in wall-clock milliseconds: what the
    /// holder is told, never compared with a clock here.
    pub expires_at_ms: u64,
}

impl Terms {
    fn ttl(&self) -> u64 {
        self.ttl_ms.max(1)
    }

    /// When keep-alive renews: a third of the TTL after
    /// [`Terms::renewed_at_ms`], so that two attempts fit before the loss.
    pub fn renew_at_ms(&self) -> u64 {
        self.renewed_at_ms.saturating_add((self.ttl() / 3).max(1))
    }

    /// How long before the earliest expiry the holder counts itself lost:
    /// min(TTL/10, 1 s).
    pub fn margin_ms(&self) -> u64 {
        (self.ttl() / 10).min(MAX_MARGIN_MS)
    }

    /// When a holder with keep-alive is lost if no renewal succeeded:
    /// [`Terms::expires_by_ms`] less [`Terms::margin_ms`].
    pub fn lost_at_ms(&self) -> u64 {
        self.renewed_at_ms
            .saturating_add(self.ttl() - self.margin_ms())
    }

    /// The earliest the store's expiry can be, in [`Clock::now_ms`] time:
    /// the send time plus the TTL.
    pub fn expires_by_ms(&self) -> u64 {
        self.renewed_at_ms.saturating_add(self.ttl())
    }

    /// How long after a failed renewal the next is tried:
    /// clamp(TTL/10, 10 ms, 1 s).
    pub fn retry_every_ms(&self) -> u64 {
        (self.ttl() / 10).clamp(MIN_RETRY_MS, MAX_MARGIN_MS)
    }
}

/// One holder's terms and lost flag, shared by the holder, its driver
/// ([`keep_alive`] or [`watch_expiry`]) and whoever waits for the loss.
#[derive(Debug)]
pub struct Holding {
    terms: watch::Sender<Terms>,
    lost: watch::Sender<bool>,
}

impl Holding {
    /// A holding granted on `terms`, not lost.
    pub fn new(terms: Terms) -> Holding {
        Holding {
            terms: watch::Sender::new(terms),
            lost: watch::Sender::new(false),
        }
    }

    /// The terms of the last renewal.
    pub fn terms(&self) -> Terms {
        *self.terms.borrow()
    }

    /// The store's expiry after the last renewal, in wall-clock milliseconds.
    pub fn expires_at_ms(&self) -> u64 {
        self.terms.borrow().expires_at_ms
    }

    /// Records a successful renewal, by keep-alive or by the holder itself
    /// (`extend`, `refresh`), and wakes the driver to reschedule. An answer
    /// to a request sent before the one already recorded changes nothing:
    /// the store applied the later one last. Answers whether it was
    /// recorded.
    pub fn renewed(&self, terms: Terms) -> bool {
        self.terms.send_if_modified(|current| {
            if terms.renewed_at_ms < current.renewed_at_ms || terms == *current {
                return false;
            }
            *current = terms;
            true
        })
    }

    /// Marks it lost (also when its holder released or revoked it, so that
    /// no waiter is left hanging) and wakes every waiter. Answers whether
    /// this call marked it.
    pub fn mark_lost(&self) -> bool {
        !self.lost.send_replace(true)
    }

    /// Whether it is lost.
    pub fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// The lost flag, to wait on (a `wasi:io` pollable is built on it). The
    /// flag only ever turns true; a closed channel means the holding is
    /// gone, which holds nothing either.
    pub fn subscribe_lost(&self) -> watch::Receiver<bool> {
        self.lost.subscribe()
    }
}

/// Renews a hold in its store, for [`keep_alive`].
pub trait Renew: Send + Sync {
    /// A failed renewal.
    type Error: Send;

    /// Renews the hold for `ttl_ms` (a lease: for its own TTL). Answers the
    /// store's new expiry in wall-clock milliseconds.
    fn renew(&self, ttl_ms: u64) -> impl Future<Output = Result<u64, Self::Error>> + Send;

    /// Whether `error` leaves the outcome unknown (`unavailable`, no
    /// answer), so that the renewal is retried; any other error is a
    /// refusal, and the holder is lost.
    fn is_unavailable(error: &Self::Error) -> bool;
}

/// Asks a store whether a hold still holds, for [`watch_expiry`].
pub trait CheckHeld: Send + Sync {
    /// A failed check.
    type Error: Send;

    /// The hold's expiry in the store (wall-clock milliseconds) if the
    /// holder still holds it; `None` if it does not.
    fn held_until(&self) -> impl Future<Output = Result<Option<u64>, Self::Error>> + Send;
}

/// Why a holding was lost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lost<E> {
    /// A renewal was refused: the hold was already gone.
    Refused(E),
    /// No renewal succeeded before the lost deadline ([`keep_alive`]), or
    /// the store no longer held it after its expiry ([`watch_expiry`]).
    /// `last_error` is the last failed attempt's, if one failed.
    Expired {
        /// The error of the last failed renewal or check.
        last_error: Option<E>,
    },
    /// Marked lost from outside ([`Holding::mark_lost`]): released,
    /// revoked, or force-released.
    Marked,
}

impl<E: fmt::Display> fmt::Display for Lost<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lost::Refused(e) => write!(f, "a renewal was refused: {e}"),
            Lost::Expired {
                last_error: Some(e),
            } => write!(f, "no successful renewal before its deadline: {e}"),
            Lost::Expired { last_error: None } => {
                f.write_str("no successful renewal before its deadline")
            }
            Lost::Marked => f.write_str("it ended"),
        }
    }
}

/// Completes once `lost` is marked (or its holding is gone).
async fn marked(lost: &mut watch::Receiver<bool>) {
    // Err: the sender is gone with its holding, which holds nothing.
    let _ = lost.wait_for(|lost| *lost).await;
}

/// The outcome of one renewal attempt, while the lost deadline runs.
enum Attempt<E> {
    Answered(Result<u64, E>),
    Lost(Lost<E>),
}

/// Sends one renewal (sent at `sent_at_ms`) and waits for its answer, or
/// for the holding's lost deadline, whichever comes first. An answer and the
/// deadline ready together count as an answer.
async fn attempt<R: Renew>(
    clock: &dyn Clock,
    holding: &Holding,
    renewer: &R,
    ttl_ms: u64,
    last_error: &mut Option<R::Error>,
) -> Attempt<R::Error> {
    let mut terms = holding.terms.subscribe();
    let mut lost = holding.lost.subscribe();
    let renewal = renewer.renew(ttl_ms);
    tokio::pin!(renewal);
    loop {
        // A renewal by the holder meanwhile may move the deadline either way
        // (a shorter TTL): wake on it.
        let lost_at = terms.borrow_and_update().lost_at_ms();
        tokio::select! {
            biased;
            answer = &mut renewal => return Attempt::Answered(answer),
            () = marked(&mut lost) => return Attempt::Lost(Lost::Marked),
            () = clock.sleep_until(lost_at) => {
                if clock.now_ms() >= holding.terms().lost_at_ms() {
                    return Attempt::Lost(Lost::Expired { last_error: last_error.take() });
                }
            }
            _ = terms.changed() => {}
        }
    }
}

/// Keeps `holding` alive by the rule of this module: renews it through
/// `renewer` at a third of its TTL, retries a renewal whose outcome is
/// unknown until the lost deadline, and marks the holding lost when a
/// renewal is refused, when none succeeded by the lost deadline, or when it
/// was marked from outside. Returns why. Renewals recorded by the holder
/// itself ([`Holding::renewed`]) reschedule it.
pub async fn keep_alive<R: Renew>(
    clock: &dyn Clock,
    holding: &Holding,
    renewer: &R,
) -> Lost<R::Error> {
    let mut terms_rx = holding.terms.subscribe();
    let mut lost_rx = holding.lost.subscribe();
    // After a failed attempt: the terms it was made under and when to retry.
    let mut retry: Option<(Terms, u64)> = None;
    let mut last_error: Option<R::Error> = None;
    // A start past the lost deadline gets one attempt before it is judged.
    let mut stale_start = clock.now_ms() >= holding.terms().lost_at_ms();
    loop {
        if *lost_rx.borrow() {
            return Lost::Marked;
        }
        let terms = *terms_rx.borrow_and_update();
        if retry.is_some_and(|(failed_under, _)| failed_under != terms) {
            // The holder renewed by itself since: back to the schedule.
            retry = None;
            last_error = None;
        }
        let now = clock.now_ms();
        if now >= terms.lost_at_ms() && !stale_start {
            holding.mark_lost();
            return Lost::Expired { last_error };
        }
        let renew_at = retry.map_or(terms.renew_at_ms(), |(_, at)| at);
        if now < renew_at && !stale_start {
            tokio::select! {
                () = clock.sleep_until(renew_at.min(terms.lost_at_ms())) => {}
                _ = terms_rx.changed() => {}
                () = marked(&mut lost_rx) => return Lost::Marked,
            }
            continue;
        }
        let sent_at_ms = clock.now_ms();
        let answer = if std::mem::take(&mut stale_start) {
            // No deadline to race: it passed already. The answer decides.
            tokio::select! {
                answer = renewer.renew(terms.ttl_ms) => answer,
                () = marked(&mut lost_rx) => return Lost::Marked,
            }
        } else {
            match attempt(clock, holding, renewer, terms.ttl_ms, &mut last_error).await {
                Attempt::Answered(answer) => answer,
                Attempt::Lost(why) => {
                    holding.mark_lost();
                    return why;
                }
            }
        };
        match answer {
            Ok(expires_at_ms) => {
                holding.renewed(Terms {
                    renewed_at_ms: sent_at_ms,
                    ttl_ms: terms.ttl_ms,
                    expires_at_ms,
                });
                retry = None;
                last_error = None;
            }
            Err(e) if R::is_unavailable(&e) => {
                let at = clock.now_ms().saturating_add(terms.retry_every_ms());
                retry = Some((terms, at));
                last_error = Some(e);
            }
            Err(e) => {
                holding.mark_lost();
                return Lost::Refused(e);
            }
        }
    }
}

/// Watches `holding` without renewing it (no keep-alive): at its earliest
/// expiry ([`Terms::expires_by_ms`]) asks the store through `check`, and
/// marks it lost unless the store still holds it for longer (renewed
/// elsewhere), in which case it watches the store's expiry. Renewals by the
/// holder ([`Holding::renewed`]) reschedule it. Returns why it was lost.
pub async fn watch_expiry<C: CheckHeld>(
    clock: &dyn Clock,
    holding: &Holding,
    check: &C,
) -> Lost<C::Error> {
    let mut terms_rx = holding.terms.subscribe();
    let mut lost_rx = holding.lost.subscribe();
    loop {
        if *lost_rx.borrow() {
            return Lost::Marked;
        }
        let terms = *terms_rx.borrow_and_update();
        if clock.now_ms() < terms.expires_by_ms() {
            tokio::select! {
                () = clock.sleep_until(terms.expires_by_ms()) => {}
                _ = terms_rx.changed() => {}
                () = marked(&mut lost_rx) => return Lost::Marked,
            }
            continue;
        }
        let held = tokio::select! {
            held = check.held_until() => held,
            () = marked(&mut lost_rx) => return Lost::Marked,
        };
        if holding.terms() != terms {
            continue; // the holder renewed meanwhile
        }
        let last_error = match held {
            Ok(Some(until)) => {
                // The store's expiry, read on this clock.
                let until_ms = clock.monotonic_of_wall_ms(until);
                if until_ms > clock.now_ms() {
                    holding.renewed(Terms {
                        renewed_at_ms: until_ms.saturating_sub(terms.ttl()),
                        ttl_ms: terms.ttl_ms,
                        expires_at_ms: until,
                    });
                    continue;
                }
                None
            }
            Ok(None) => None,
            Err(e) => Some(e),
        };
        holding.mark_lost();
        return Lost::Expired { last_error };
    }
}

#[cfg(test)]
mod tests;
