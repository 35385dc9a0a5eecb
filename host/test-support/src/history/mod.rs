//! Recording the operations clients ran against a lock service, and checking
//! the recorded history against the lock contract (docs/contract.md).
//!
//! The harness in `host/lockd/tests/crash_under_load.rs` records every call
//! it makes with a [`Recorder`], SIGKILLs the server at random moments
//! ([`Recorder::kill_started`] / [`Recorder::kill_done`]), and finally runs
//! [`check`] over the [`History`]. The checker knows nothing of the server's
//! internals: it judges only what clients saw, with times from one common
//! clock ([`Clock`]: a monotonic clock anchored to the wall clock once, in
//! milliseconds, invocation times rounded down and completion times rounded
//! up so that `[invoke_ms, complete_ms]` always contains the real call).
//!
//! # What a call tells us
//!
//! A call with a definite outcome took effect at one instant inside
//! `[invoke_ms, complete_ms]`, its *window*. A call whose outcome is
//! [`Outcome::Unknown`] (connection reset, timeout, `unavailable`, in flight
//! at a kill) took effect at one instant in `[invoke_ms, deadline]`, or
//! never. Its *deadline* is the end of the first kill that finished at or
//! after the call completed (the process that received the request is dead
//! by then), or unbounded if no kill followed. A call that certainly never
//! reached a server (connection refused) should not be recorded at all.
//!
//! Expiry follows the server's `expires_at_ms`: a lock is held while
//! `now < expires_at_ms`. A lock, relock or extend sets the expiry to its
//! own `now + ttl`, so an unknown-outcome relock or extend may have set any
//! expiry `>= invoke_ms + ttl_ms`. Every comparison between a client time and
//! a server expiry keeps [`MARGIN_MS`] of slack.
//!
//! # Leases and their certain windows
//!
//! A *lease* is one `(name, fencing token, owner)` that was acknowledged:
//! some lock or extend by that owner answered `Ok` with that token. Its *settings* are those `Ok`
//! answers (the fresh grant, idempotent relocks, extends); each set the
//! expiry to the value it returned, at an instant inside its window.
//!
//! The lease's *certain window* `[c, end)` is where the checker can prove
//! the lease was held:
//!
//! - `c` is the completion of its first acknowledged setting.
//! - It ends at the invocation of the first *possible release*: an
//!   acknowledged or unknown-outcome unlock by the owner with that token or
//!   with none. A possible release is ignored when it certainly took effect
//!   before some setting of this lease was invoked (its completion, or
//!   deadline if unknown, `<=` that invocation): had it released the lease,
//!   that later setting could not have returned the token.
//! - Within that, it reaches the last `τ` with `τ + MARGIN_MS < lower(τ)`,
//!   where `lower(τ)` bounds the lease's expiry at `τ` from below: the
//!   minimum over the *candidates* at `τ`, i.e. the settings and the owner's
//!   unknown-outcome locks and extends on the name (`invoke_ms + ttl_ms`)
//!   invoked at or before `τ`, minus those certainly overridden (an
//!   acknowledged setting invoked after they took effect has completed by
//!   `τ`). Why this is sound: had the grant expired at some `τ' <= τ`, the
//!   setter of the expiry in force at `τ'` (value `<= τ'`) would still be a
//!   candidate at `τ` (nothing can override it once the grant is dead: a
//!   later call answers `not_held` or makes a new token), so
//!   `lower(τ) <= τ`. Hence the condition at `τ` proves the lease was held
//!   on all of `[c, τ]`. Crashes do not change this: an acknowledged setting
//!   is durable and, per name, journal order is decision order, so a restart
//!   restores a state some candidate wrote.
//!
//! Only persistent locks may appear in a history (an ephemeral lock is
//! legitimately lost on a restart).
//!
//! # Rules
//!
//! 1. **No acknowledged grant is lost** ([`Rule::LostGrant`]). Every call on
//!    the name whose whole window lies in a lease's certain window must agree
//!    that the owner holds it with that token: a `get` answers `found` with
//!    that owner and token; a `busy` to anyone else names that owner and
//!    token; the owner's own lock or extend returns that token and is never
//!    `busy`, `not_held` or `not_owner`; the owner's unlock with that token
//!    (or none) is never `not_held` / `not_owner`; nobody gets `not_held`.
//! 2. **No overlap** ([`Rule::Overlap`]). Inside a certain window nobody
//!    else is granted the lock, extends it or unlocks it, and no stale token
//!    of the owner unlocks it; and the certain windows of two leases of one
//!    name never intersect. A grant or unlock of unknown outcome is treated
//!    as either: it only ever shortens certain windows.
//! 3. **Tokens rise strictly per name** ([`Rule::TokenOrder`]), restarts
//!    included. For each acknowledged setting `A` and each answer `B` on the
//!    same name that carries a token (a grant, an extend, a `busy`, a
//!    `found`) and was invoked after `A` completed: `token(B) > token(A)`,
//!    or the same token with the same owner (an idempotent relock, or the
//!    same lease observed again). Also, one acknowledged token never has two
//!    owners. Tokens a client saw but that were never acknowledged bind
//!    nothing (docs/contract.md#c13-unavailable: the server may reissue them after a crash).
//! 4. **A released lock stays released** ([`Rule::LostUnlock`]). After an
//!    acknowledged unlock with an explicit token of an acknowledged lease
//!    completed, no call invoked later shows that token alive.
//! 5. **Waiters are woken in FIFO order** ([`Rule::FifoOrder`]). Only a
//!    waiter whose lock call (`wait_ms > 0`) ended `busy` gives certain
//!    evidence: the server answers `busy` to a waiter only when its wait ran
//!    out, so it was queued, and listening, during
//!    `Q = [complete - wait + margin, invoke + wait - margin]` (it was
//!    queued by `complete - wait` and stayed at least `wait` from no earlier
//!    than `invoke`), all within one server process (its connection
//!    survived). A violation is either
//!    - a call whose whole window lies in `Q` answering `not_found` /
//!      `not_held`: the lock was free while a listening waiter queued; or
//!    - a token of another owner *created* inside `Q` by a lock call
//!      certainly invoked after the waiter queued. "Created inside `Q`":
//!      it was seen alive (grant, extend, `busy`, `found`, in the same
//!      server process) by a call completed by the end of `Q`, and a call
//!      invoked no earlier than the start of `Q` saw the name free or held
//!      under another token before it was first seen alive. "Invoked after
//!      the waiter queued": every lock call of that owner on the name that
//!      could have created it (answered `Ok` with it, or unknown) was
//!      invoked at or after the start of `Q`. A waiter that was already
//!      ahead in line, a holder's relock, an unknown-outcome waiter left
//!      behind in the queue, an expiry hand-off: none of these can satisfy
//!      both conditions.
//!
//!    A waiter that was eventually granted gives no usable evidence: from
//!    the client's side one cannot tell when its request joined the queue.
//!
//! # Leases (docs/contract.md#c16-leases)
//!
//! Lease calls ([`OpKind::LeaseGrant`], [`OpKind::LeaseRefresh`],
//! [`OpKind::LeaseRevoke`], [`OpKind::LeaseGet`]) name no lock: their
//! `owner` is the lease id (for a grant, the id is in the answer). A lock
//! taken under a lease is an ordinary `lock` whose owner is the lease id,
//! and the rules above judge it as any other lock, except for its certain
//! window, which follows the lease:
//!
//! - A persistent lease is live on a prefix of time from its grant (once
//!   revoked or expired it never lives again), and its expiry never goes
//!   back: a refresh sets `now + ttl`, a lock under it answers the lease's
//!   current expiry, and an acknowledged refresh is durable. Every
//!   acknowledged answer that carries the lease's expiry (grant, refresh,
//!   lease `get`, a lock under it) was given while it was live with an
//!   expiry of at least that value from then on. So the lease is certainly
//!   live from its grant's completion until the largest acknowledged expiry
//!   (less [`MARGIN_MS`]), or until the first *possible revoke* (an
//!   acknowledged or unknown-outcome revoke, unless it certainly took effect
//!   before an acknowledged answer showing the lease live was invoked).
//! - A lock under it is held from its acknowledgement until the lease's
//!   certain end, or the lock's own first possible release (an unlock by
//!   the lease id, as for any owner), whichever comes first.
//!
//! Rule 1 then reports a lease's lock lost before its expiry (seen free, or
//! held by another, while the lease was certainly live), and a lease call
//! within the lease's certain window answering `not_held`, or a lease `get`
//! that omits a lock certainly held under it ([`Rule::LostGrant`]). Rule 3
//! covers lease locks' tokens like any others.
//!
//! 6. **A revoked lease holds nothing** ([`Rule::HeldAfterRevoke`]). After
//!    an acknowledged revoke completed, no call invoked later shows any lock
//!    held by the lease id (a grant, `busy`, `found`), and no lease call
//!    finds the lease live (`refreshed`, a lease `found`).
//!
//! # Shared locks and semaphores (docs/contract.md C21, C22)
//!
//! A `lock` records what it asked for (`claim`: exclusive, shared, or one
//! permit of a semaphore of N). Each grant, shared or a permit, is a lease
//! of its own `(name, token, owner)` with its own certain window, found as
//! above: its owner's settings and releases are its own. What a lease holds
//! is the claim of its acknowledged `lock`s (or of the unknown-outcome ones
//! that may have made it, if they agree). On a name that any `lock` took
//! shared or as a permit, several holders are legal, so rules 1 to 3 are
//! restated for it:
//!
//! - Rule 1 for an exclusive grant is as above. Beside a shared grant or a
//!   permit certainly held, nobody sees the name free or `not_held`, a
//!   `get` or a `busy` shows a token no older than it (they show the most
//!   recent grant), and its owner's own calls find it; other owners may be
//!   granted, extend and unlock their own grants.
//! - Rule 2: an exclusive grant's certain window meets no other certain
//!   window of the name, and no exclusive grant is acknowledged inside a
//!   shared grant's or a permit's.
//! - Rule 3 compares fresh grants only: a `lock` answered `Ok` with no
//!   earlier acknowledgement of its owner and token, and no earlier `lock`
//!   of its owner of unknown outcome, carries a token above every token
//!   acknowledged before it was invoked. A relock answers its own grant's
//!   token, and a `get` or `busy` the most recent grant still held: both
//!   may be older than a grant acknowledged since.
//!
//! An election's leadership (docs/contract.md C24; recorded as a `lock`
//! with claim `leader`, made by `POST /v1/elections/campaign`) holds its
//! name alone, as an exclusive grant does: every rule for an exclusive
//! grant applies to it, so two leaders' certain windows never meet.
//!
//! 7. **Never more holders than permits** ([`Rule::OverPermits`]). At no
//!    instant do more permits' certain windows of one semaphore overlap
//!    than it has permits.
//!
//! Every rule only flags what a correct server cannot produce under the
//! stated assumptions (one wall clock within [`MARGIN_MS`], persistent
//! locks, all calls of the run recorded), so a legitimate history, with
//! timeouts, unknown outcomes, expiry hand-offs and restarts, is clean.

mod checker;
mod claim_rules;
mod lease_rules;
mod order_rules;
mod record;
mod verdict;

pub use checker::{check, check_report};

use lockd_core::Claim;

/// Whether a grant of `claim` holds its name alone: an exclusive lock or an
/// election's leadership.
fn alone(claim: Claim) -> bool {
    matches!(claim, Claim::Exclusive | Claim::Leader)
}
pub use record::{Clock, History, Kill, Op, OpKind, Outcome, Recorder, MARGIN_MS};
pub use verdict::{Coverage, Report, Rule, Violation};

#[cfg(test)]
mod tests;
