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
//!   `τ`). Why this is sound: had the lease expired at some `τ' <= τ`, the
//!   setter of the expiry in force at `τ'` (value `<= τ'`) would still be a
//!   candidate at `τ` (nothing can override it once the lease is dead: a
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
//! Every rule only flags what a correct server cannot produce under the
//! stated assumptions (one wall clock within [`MARGIN_MS`], persistent
//! locks, all calls of the run recorded), so a legitimate history, with
//! timeouts, unknown outcomes, expiry hand-offs and restarts, is clean.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Slack, in milliseconds, between a client time and a server expiry or
/// wait deadline.
pub const MARGIN_MS: u64 = 50;

/// Milliseconds since the Unix epoch, from a monotonic clock anchored to the
/// wall clock once, so that times recorded by different threads compare.
#[derive(Debug)]
pub struct Clock {
    start: Instant,
    start_wall_us: u64,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    /// A clock anchored now.
    pub fn new() -> Self {
        let start = Instant::now();
        let start_wall_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("the wall clock is after 1970")
            .as_micros() as u64;
        Clock {
            start,
            start_wall_us,
        }
    }

    /// Microseconds since the epoch.
    pub fn now_us(&self) -> u64 {
        self.start_wall_us + self.start.elapsed().as_micros() as u64
    }

    /// Milliseconds since the epoch, rounded down (for invocation times).
    pub fn floor_ms(&self) -> u64 {
        self.now_us() / 1000
    }

    /// Milliseconds since the epoch, rounded up (for completion times).
    pub fn ceil_ms(&self) -> u64 {
        self.now_us().div_ceil(1000)
    }
}

/// What a call asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// `lock(name, owner, ttl, wait)`, persistent.
    Lock {
        /// The requested TTL.
        ttl_ms: u64,
        /// How long it may wait in the queue (0: answer `busy` at once).
        wait_ms: u64,
    },
    /// `extend(name, owner, ttl)`.
    Extend {
        /// The requested TTL.
        ttl_ms: u64,
    },
    /// `unlock(name, owner, token?)`.
    Unlock {
        /// The fencing token given, if any.
        token: Option<u64>,
    },
    /// `get(name)`.
    Get,
    /// `POST /v1/leases/grant`, persistent. Names no lock.
    LeaseGrant {
        /// The lease's TTL.
        ttl_ms: u64,
    },
    /// `POST /v1/leases/refresh` of the lease `owner`.
    LeaseRefresh,
    /// `POST /v1/leases/revoke` of the lease `owner`.
    LeaseRevoke,
    /// `POST /v1/leases/get` of the lease `owner`.
    LeaseGet,
}

impl OpKind {
    /// A short word for reports.
    pub fn word(&self) -> &'static str {
        match self {
            OpKind::Lock { wait_ms: 0, .. } => "lock",
            OpKind::Lock { .. } => "lock+wait",
            OpKind::Extend { .. } => "extend",
            OpKind::Unlock { .. } => "unlock",
            OpKind::Get => "get",
            OpKind::LeaseGrant { .. } => "l.grant",
            OpKind::LeaseRefresh => "l.refresh",
            OpKind::LeaseRevoke => "l.revoke",
            OpKind::LeaseGet => "l.get",
        }
    }

    /// Whether it is a call on a lease rather than on a lock.
    pub fn is_lease_call(&self) -> bool {
        matches!(
            self,
            OpKind::LeaseGrant { .. }
                | OpKind::LeaseRefresh
                | OpKind::LeaseRevoke
                | OpKind::LeaseGet
        )
    }
}

/// What the caller saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A lock was acquired (or idempotently refreshed) or extended.
    Ok {
        /// The fencing token of the grant.
        token: u64,
        /// The server-granted expiry, Unix epoch milliseconds.
        expires_at_ms: u64,
    },
    /// An unlock succeeded.
    Unlocked,
    /// Held by `owner` (after any wait).
    Busy {
        /// The holder.
        owner: String,
        /// Its token.
        token: u64,
        /// Its expiry.
        expires_at_ms: u64,
    },
    /// Held by someone else, or under another token.
    NotOwner,
    /// Nobody holds it.
    NotHeld,
    /// `get` found it held.
    Found {
        /// The holder.
        owner: String,
        /// Its token.
        token: u64,
        /// Its expiry.
        expires_at_ms: u64,
    },
    /// `get` found it free.
    NotFound,
    /// A lease was granted.
    LeaseGranted {
        /// Its id.
        lease_id: String,
        /// Its expiry.
        expires_at_ms: u64,
    },
    /// A lease was refreshed.
    LeaseRefreshed {
        /// Its new expiry (and its locks').
        expires_at_ms: u64,
    },
    /// A lease was revoked.
    LeaseRevoked {
        /// How many locks it released.
        released: u64,
    },
    /// A lease `get` found it live.
    LeaseFound {
        /// Its expiry.
        expires_at_ms: u64,
        /// The names of its locks.
        locks: Vec<String>,
    },
    /// May or may not have taken effect: a connection error after the
    /// request may have been sent, a timeout, `unavailable`, or in flight at
    /// a kill.
    Unknown,
}

impl Outcome {
    /// A short word for reports.
    pub fn word(&self) -> &'static str {
        match self {
            Outcome::Ok { .. } => "ok",
            Outcome::Unlocked => "unlocked",
            Outcome::Busy { .. } => "busy",
            Outcome::NotOwner => "not_owner",
            Outcome::NotHeld => "not_held",
            Outcome::Found { .. } => "found",
            Outcome::NotFound => "not_found",
            Outcome::LeaseGranted { .. } => "granted",
            Outcome::LeaseRefreshed { .. } => "refreshed",
            Outcome::LeaseRevoked { .. } => "revoked",
            Outcome::LeaseFound { .. } => "found",
            Outcome::Unknown => "unknown",
        }
    }

    /// The `(owner, token)` this answer shows currently holding the lock,
    /// apart from the caller's own grants (see [`Op::alive`]).
    fn shown_holder(&self) -> Option<(&str, u64)> {
        match self {
            Outcome::Busy { owner, token, .. } | Outcome::Found { owner, token, .. } => {
                Some((owner, *token))
            }
            _ => None,
        }
    }
}

/// One recorded call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    /// The client (thread) that made it.
    pub client: u32,
    /// What it asked.
    pub kind: OpKind,
    /// The lock name.
    pub name: String,
    /// The owner it acted as (empty for `get`).
    pub owner: String,
    /// When the call started, ms since the epoch (rounded down).
    pub invoke_ms: u64,
    /// When the answer arrived or the call failed (rounded up).
    pub complete_ms: u64,
    /// What it saw.
    pub outcome: Outcome,
}

impl Op {
    /// `(owner, token)` of the lease this answer shows alive: a grant or
    /// extend (the caller's), a `busy` or a `found`.
    fn alive(&self) -> Option<(&str, u64)> {
        if self.kind.is_lease_call() {
            return None;
        }
        match &self.outcome {
            Outcome::Ok { token, .. } => Some((&self.owner, *token)),
            other => other.shown_holder(),
        }
    }

    /// Whether the answer shows the name free or held under a token other
    /// than `token` (at one instant of its window): `Some(None)` free,
    /// `Some(Some(t))` held under `t`, `None` shows nothing about it.
    fn shows(&self) -> Option<Option<u64>> {
        match &self.outcome {
            Outcome::NotFound | Outcome::NotHeld => Some(None),
            _ => self.alive().map(|(_, t)| Some(t)),
        }
    }

    fn is_setting(&self) -> bool {
        matches!(self.kind, OpKind::Lock { .. } | OpKind::Extend { .. })
            && matches!(self.outcome, Outcome::Ok { .. })
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}..{}] c{} ",
            self.invoke_ms, self.complete_ms, self.client
        )?;
        match &self.kind {
            OpKind::Lock { ttl_ms, wait_ms } => write!(
                f,
                "lock({}, {}, ttl {ttl_ms}, wait {wait_ms})",
                self.name, self.owner
            )?,
            OpKind::Extend { ttl_ms } => {
                write!(f, "extend({}, {}, ttl {ttl_ms})", self.name, self.owner)?
            }
            OpKind::Unlock { token: Some(t) } => {
                write!(f, "unlock({}, {}, token {t})", self.name, self.owner)?
            }
            OpKind::Unlock { token: None } => write!(f, "unlock({}, {})", self.name, self.owner)?,
            OpKind::Get => write!(f, "get({})", self.name)?,
            OpKind::LeaseGrant { ttl_ms } => write!(f, "lease grant(ttl {ttl_ms})")?,
            OpKind::LeaseRefresh => write!(f, "lease refresh({})", self.owner)?,
            OpKind::LeaseRevoke => write!(f, "lease revoke({})", self.owner)?,
            OpKind::LeaseGet => write!(f, "lease get({})", self.owner)?,
        }
        match &self.outcome {
            Outcome::Ok {
                token,
                expires_at_ms,
            } => write!(f, " -> ok token {token} expires {expires_at_ms}"),
            Outcome::Busy {
                owner,
                token,
                expires_at_ms,
            } => write!(
                f,
                " -> busy by {owner} token {token} expires {expires_at_ms}"
            ),
            Outcome::Found {
                owner,
                token,
                expires_at_ms,
            } => write!(f, " -> found {owner} token {token} expires {expires_at_ms}"),
            Outcome::LeaseGranted {
                lease_id,
                expires_at_ms,
            } => write!(f, " -> granted {lease_id} expires {expires_at_ms}"),
            Outcome::LeaseRefreshed { expires_at_ms } => {
                write!(f, " -> refreshed expires {expires_at_ms}")
            }
            Outcome::LeaseRevoked { released } => write!(f, " -> revoked, released {released}"),
            Outcome::LeaseFound {
                expires_at_ms,
                locks,
            } => write!(f, " -> found expires {expires_at_ms} locks {locks:?}"),
            other => write!(f, " -> {}", other.word()),
        }
    }
}

/// One SIGKILL of the server: the process was alive at `started_ms` and
/// dead by `done_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kill {
    /// Just before the signal was sent (rounded down).
    pub started_ms: u64,
    /// After the process was reaped (rounded up).
    pub done_ms: u64,
}

/// Everything clients did, and when the server was killed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    /// Every call, in any order.
    pub ops: Vec<Op>,
    /// Every kill, in any order. A restart follows each but maybe the last.
    pub kills: Vec<Kill>,
}

impl History {
    /// Counts of calls by kind and outcome, one `kind outcome count` line
    /// each, plus the kill count.
    pub fn summary(&self) -> String {
        let mut counts: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        for op in &self.ops {
            *counts
                .entry((op.kind.word(), op.outcome.word()))
                .or_default() += 1;
        }
        let mut out = format!("operations: {}\n", self.ops.len());
        for ((kind, outcome), n) in counts {
            out.push_str(&format!("  {kind:<10} {outcome:<10} {n}\n"));
        }
        out.push_str(&format!("kills: {}\n", self.kills.len()));
        out
    }
}

/// Records calls from many threads into one [`History`].
#[derive(Debug, Default)]
pub struct Recorder {
    clock: Clock,
    history: Mutex<History>,
}

impl Recorder {
    /// An empty history, with a clock anchored now.
    pub fn new() -> Self {
        Self::default()
    }

    /// The common clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The invocation time of a call about to start.
    pub fn invoke(&self) -> u64 {
        self.clock.floor_ms()
    }

    /// Records a finished call that started at `invoke_ms`.
    pub fn complete(
        &self,
        client: u32,
        kind: OpKind,
        name: &str,
        owner: &str,
        invoke_ms: u64,
        outcome: Outcome,
    ) {
        let complete_ms = self.clock.ceil_ms();
        self.history.lock().unwrap().ops.push(Op {
            client,
            kind,
            name: name.to_string(),
            owner: owner.to_string(),
            invoke_ms,
            complete_ms,
            outcome,
        });
    }

    /// Call just before sending SIGKILL; pass the result to
    /// [`Recorder::kill_done`] once the process is reaped.
    pub fn kill_started(&self) -> u64 {
        self.clock.floor_ms()
    }

    /// Records a kill that started at `started_ms`; the process is dead.
    pub fn kill_done(&self, started_ms: u64) {
        let done_ms = self.clock.ceil_ms();
        self.history.lock().unwrap().kills.push(Kill {
            started_ms,
            done_ms,
        });
    }

    /// A copy of everything recorded so far.
    pub fn history(&self) -> History {
        self.history.lock().unwrap().clone()
    }
}

/// Which rule a violation breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// An acknowledged, unexpired, unreleased lock was reported free or held
    /// by someone else.
    LostGrant,
    /// Two owners (or tokens) held one name at once.
    Overlap,
    /// A token went backwards or was reused.
    TokenOrder,
    /// An acknowledged unlock was undone.
    LostUnlock,
    /// A waiter was passed over or not woken.
    FifoOrder,
    /// A lock was seen held by a lease, or the lease live, after the lease's
    /// revoke was acknowledged.
    HeldAfterRevoke,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Rule::LostGrant => "lost grant",
            Rule::Overlap => "overlap",
            Rule::TokenOrder => "token order",
            Rule::LostUnlock => "lost unlock",
            Rule::FifoOrder => "FIFO order",
            Rule::HeldAfterRevoke => "held after revoke",
        })
    }
}

/// One broken rule, with the calls that show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The rule.
    pub rule: Rule,
    /// The lock name.
    pub name: String,
    /// What happened, with the calls involved.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on {}: {}", self.rule, self.name, self.message)
    }
}

/// How much the checker could verify: a clean result over a history that
/// proves nothing would be worthless, so the harness asserts these too.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Acknowledged leases (distinct name and token).
    pub leases: usize,
    /// Leases with a non-empty certain window.
    pub leases_with_window: usize,
    /// Calls judged against a lease certainly held throughout them
    /// (rules 1 and 2).
    pub calls_judged: usize,
    /// Of those, calls judged across a kill (invoked after a kill that came
    /// after the lease was acknowledged).
    pub calls_judged_after_kill: usize,
    /// Token-carrying answers compared with an earlier acknowledged token.
    pub token_comparisons: usize,
    /// Waiters that timed out `busy` with a non-empty queue interval.
    pub waits_judged: usize,
    /// Leases granted (acknowledged).
    pub lease_grants: usize,
    /// Of the acknowledged locks, those held under a lease.
    pub lease_locks: usize,
    /// Of those, with a non-empty certain window.
    pub lease_locks_with_window: usize,
    /// Calls by a lease (refresh, `get`, a lock under it) judged against
    /// the lease certainly live.
    pub lease_calls_judged: usize,
    /// Acknowledged revokes.
    pub revokes: usize,
    /// Calls on a revoked lease's locks, or on the lease, invoked after its
    /// acknowledged revoke (each judged by rule 6).
    pub calls_after_revoke: usize,
}

impl fmt::Display for Coverage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "leases acknowledged {}, with a certain window {}; calls judged against a held lease {} \
             ({} across a kill); token comparisons {}; timed-out waiters judged {}; \
             leases granted {}, locks under them {} ({} with a certain window), \
             lease calls judged {}, revokes {} with {} calls judged after them",
            self.leases,
            self.leases_with_window,
            self.calls_judged,
            self.calls_judged_after_kill,
            self.token_comparisons,
            self.waits_judged,
            self.lease_grants,
            self.lease_locks,
            self.lease_locks_with_window,
            self.lease_calls_judged,
            self.revokes,
            self.calls_after_revoke
        )
    }
}

/// The checker's result.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Every violation found.
    pub violations: Vec<Violation>,
    /// What was checked.
    pub coverage: Coverage,
}

/// Checks `history` against every rule of the module docs.
pub fn check(history: &History) -> Vec<Violation> {
    check_report(history).violations
}

/// [`check`], with coverage figures.
pub fn check_report(history: &History) -> Report {
    let mut kills = history.kills.clone();
    kills.sort_by_key(|k| (k.done_ms, k.started_ms));
    let mut checker = Checker {
        ops: &history.ops,
        kills,
        granted: HashMap::new(),
    };
    checker.granted = checker.granted_leases();
    let mut by_name: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, op) in history.ops.iter().enumerate() {
        if !op.kind.is_lease_call() {
            by_name.entry(&op.name).or_default().push(i);
        }
    }
    let mut report = Report::default();
    let mut lock_windows = Vec::new();
    for (name, ids) in by_name {
        checker.check_name(name, &ids, &mut report, &mut lock_windows);
    }
    checker.check_granted_leases(&lock_windows, &mut report);
    report
}

struct Checker<'h> {
    ops: &'h [Op],
    /// Sorted by `done_ms`.
    kills: Vec<Kill>,
    /// The acknowledged leases (docs/contract.md#c16-leases), by id.
    granted: HashMap<&'h str, GrantedLease>,
}

/// What the history proves of one acknowledged lease (module docs,
/// "Leases").
struct GrantedLease {
    /// The completion of its grant.
    granted_ms: u64,
    /// Where its certain window ends: the first possible revoke, or the
    /// largest acknowledged expiry less [`MARGIN_MS`].
    end_ms: u64,
}

/// A lock held under a lease, and its certain window.
struct LeaseLockWindow<'h> {
    lease_id: &'h str,
    name: &'h str,
    start: u64,
    end: u64,
}

/// One acknowledged `(name, token, owner)`.
struct Lease<'h> {
    owner: &'h str,
    token: u64,
    /// Its acknowledged settings.
    settings: Vec<usize>,
    /// The certain window `[start, end)`.
    window: Option<(u64, u64)>,
}

/// Something that may have set a lease's expiry.
struct Candidate {
    invoke: u64,
    /// Took effect by then (completion, or deadline if unknown).
    effect_by: u64,
    /// A lower bound on the expiry it set.
    value: u64,
    /// Overridden from this time on.
    overridden_at: u64,
}

impl<'h> Checker<'h> {
    /// The latest time an op can have taken effect.
    fn effect_by(&self, op: &Op) -> u64 {
        if op.outcome != Outcome::Unknown {
            return op.complete_ms;
        }
        self.kills
            .iter()
            .find(|k| k.done_ms >= op.complete_ms)
            .map_or(u64::MAX, |k| k.done_ms)
    }

    /// Bounds of the server process that answered `op` (a call with a
    /// definite outcome): calls with `invoke >= lo` and `complete <= hi` were
    /// answered by the same process.
    fn epoch(&self, op: &Op) -> (u64, u64) {
        let lo = self
            .kills
            .iter()
            .filter(|k| k.done_ms <= op.invoke_ms)
            .map(|k| k.done_ms)
            .max()
            .unwrap_or(0);
        let hi = self
            .kills
            .iter()
            .find(|k| k.done_ms >= op.complete_ms)
            .map_or(u64::MAX, |k| k.started_ms);
        (lo, hi)
    }

    /// The acknowledged leases, and how long each was certainly live.
    fn granted_leases(&self) -> HashMap<&'h str, GrantedLease> {
        let ops = self.ops;
        let mut granted: HashMap<&'h str, GrantedLease> = HashMap::new();
        for op in ops {
            if let Outcome::LeaseGranted { lease_id, .. } = &op.outcome {
                granted.insert(
                    lease_id,
                    GrantedLease {
                        granted_ms: op.complete_ms,
                        end_ms: u64::MAX,
                    },
                );
            }
        }
        // The largest acknowledged expiry, and the last invocation of a call
        // that found the lease live.
        let mut top: HashMap<&str, (u64, u64)> = HashMap::new();
        for op in ops {
            let (id, expires) = match (&op.kind, &op.outcome) {
                (
                    _,
                    Outcome::LeaseGranted {
                        lease_id,
                        expires_at_ms,
                    },
                ) => (lease_id.as_str(), *expires_at_ms),
                (_, Outcome::LeaseRefreshed { expires_at_ms })
                | (_, Outcome::LeaseFound { expires_at_ms, .. })
                | (OpKind::Lock { .. }, Outcome::Ok { expires_at_ms, .. }) => {
                    (op.owner.as_str(), *expires_at_ms)
                }
                _ => continue,
            };
            if !granted.contains_key(id) {
                continue;
            }
            let e = top.entry(id).or_insert((0, 0));
            e.0 = e.0.max(expires);
            e.1 = e.1.max(op.invoke_ms);
        }
        for (id, lease) in &mut granted {
            let (expires, last_live_invoke) = top.get(id).copied().unwrap_or((0, 0));
            let mut end = expires.saturating_sub(MARGIN_MS);
            for op in ops {
                if op.kind != OpKind::LeaseRevoke || op.owner != *id {
                    continue;
                }
                let possible = match op.outcome {
                    Outcome::LeaseRevoked { .. } => true,
                    // Certainly done before a call that found the lease
                    // live was made: it did not revoke it.
                    Outcome::Unknown => self.effect_by(op) > last_live_invoke,
                    _ => false,
                };
                if possible {
                    end = end.min(op.invoke_ms);
                }
            }
            lease.end_ms = end;
        }
        granted
    }

    /// Lease calls judged against the lease's certain window (rule 1), and
    /// rule 6.
    fn check_granted_leases(&self, lock_windows: &[LeaseLockWindow<'_>], report: &mut Report) {
        let ops = self.ops;
        let coverage = &mut report.coverage;
        let out = &mut report.violations;
        let mut ids: Vec<&str> = self.granted.keys().copied().collect();
        ids.sort();
        for id in ids {
            let lease = &self.granted[id];
            coverage.lease_grants += 1;
            let windows: Vec<&LeaseLockWindow<'_>> =
                lock_windows.iter().filter(|w| w.lease_id == id).collect();
            for op in ops.iter().filter(|op| op.owner == id) {
                if !matches!(
                    op.kind,
                    OpKind::LeaseRefresh | OpKind::LeaseGet | OpKind::Lock { .. }
                ) || op.outcome == Outcome::Unknown
                    || op.invoke_ms < lease.granted_ms
                    || op.complete_ms >= lease.end_ms
                {
                    continue;
                }
                coverage.lease_calls_judged += 1;
                let why = match &op.outcome {
                    Outcome::NotHeld => Some("answered not_held".to_string()),
                    Outcome::LeaseFound { locks, .. } => windows
                        .iter()
                        .find(|w| {
                            w.start <= op.invoke_ms
                                && op.complete_ms < w.end
                                && !locks.iter().any(|n| n == w.name)
                        })
                        .map(|w| {
                            format!(
                                "left out {}, certainly held under it from {} to {}",
                                w.name, w.start, w.end
                            )
                        }),
                    _ => None,
                };
                if let Some(why) = why {
                    out.push(Violation {
                        rule: Rule::LostGrant,
                        name: id.to_string(),
                        message: format!(
                            "{why}: {op}, while the lease was certainly live from {} to {}",
                            lease.granted_ms, lease.end_ms
                        ),
                    });
                }
            }

            // Rule 6, from the first acknowledged revoke.
            let Some(revoke) = ops
                .iter()
                .filter(|op| {
                    op.owner == id
                        && op.kind == OpKind::LeaseRevoke
                        && matches!(op.outcome, Outcome::LeaseRevoked { .. })
                })
                .min_by_key(|op| op.complete_ms)
            else {
                continue;
            };
            coverage.revokes += 1;
            let names: std::collections::BTreeSet<&str> = ops
                .iter()
                .filter(|op| op.owner == id && op.is_setting())
                .map(|op| op.name.as_str())
                .collect();
            for op in ops.iter().filter(|op| op.invoke_ms > revoke.complete_ms) {
                let lease_call = op.kind.is_lease_call() && op.owner == id;
                let on_its_lock = !op.kind.is_lease_call()
                    && names.contains(op.name.as_str())
                    && op.shows().is_some();
                if lease_call && op.outcome != Outcome::Unknown || on_its_lock {
                    coverage.calls_after_revoke += 1;
                }
                let held = op.alive().is_some_and(|(owner, _)| owner == id)
                    || lease_call
                        && matches!(
                            op.outcome,
                            Outcome::LeaseRefreshed { .. } | Outcome::LeaseFound { .. }
                        );
                if held {
                    out.push(Violation {
                        rule: Rule::HeldAfterRevoke,
                        name: if lease_call {
                            id.to_string()
                        } else {
                            op.name.clone()
                        },
                        message: format!("{op}, after {revoke}"),
                    });
                }
            }
        }
    }

    fn check_name(
        &self,
        name: &str,
        ids: &[usize],
        report: &mut Report,
        lock_windows: &mut Vec<LeaseLockWindow<'h>>,
    ) {
        let mut out = Vec::new();
        let leases = self.leases(name, ids, &mut out);
        report.coverage.leases += leases.len();
        report.coverage.leases_with_window += leases.iter().filter(|l| l.window.is_some()).count();
        for lease in leases.iter().filter(|l| self.granted.contains_key(l.owner)) {
            report.coverage.lease_locks += 1;
            if let Some((start, end)) = lease.window {
                report.coverage.lease_locks_with_window += 1;
                lock_windows.push(LeaseLockWindow {
                    lease_id: lease.owner,
                    name: &self.ops[lease.settings[0]].name,
                    start,
                    end,
                });
            }
        }
        self.judge_calls(name, ids, &leases, &mut report.coverage, &mut out);
        self.window_overlaps(name, &leases, &mut out);
        self.token_order(name, ids, &mut report.coverage, &mut out);
        self.lost_unlocks(name, ids, &leases, &mut out);
        self.fifo(name, ids, &mut report.coverage, &mut out);
        report.violations.extend(out);
    }

    /// Groups acknowledged settings into leases and computes their windows.
    fn leases(&self, name: &str, ids: &[usize], out: &mut Vec<Violation>) -> Vec<Lease<'h>> {
        let ops = self.ops;
        let mut by_token: BTreeMap<(u64, &str), Vec<usize>> = BTreeMap::new();
        for &i in ids {
            if let (true, Outcome::Ok { token, .. }) = (ops[i].is_setting(), &ops[i].outcome) {
                by_token
                    .entry((*token, ops[i].owner.as_str()))
                    .or_default()
                    .push(i);
            }
        }
        let mut leases = Vec::new();
        let mut previous: Option<(u64, usize)> = None;
        for ((token, owner), mut settings) in by_token {
            settings.sort_by_key(|&i| (ops[i].complete_ms, ops[i].invoke_ms));
            if let Some((t, other)) = previous {
                if t == token {
                    out.push(Violation {
                        rule: Rule::TokenOrder,
                        name: name.to_string(),
                        message: format!(
                            "token {token} acknowledged to two owners: {} and {}",
                            ops[other], ops[settings[0]]
                        ),
                    });
                }
            }
            previous = Some((token, settings[0]));
            let mut lease = Lease {
                owner,
                token,
                settings,
                window: None,
            };
            lease.window = self.certain_window(ids, &lease);
            leases.push(lease);
        }
        leases
    }

    /// The interval where `lease` was certainly held (module docs).
    fn certain_window(&self, ids: &[usize], lease: &Lease<'_>) -> Option<(u64, u64)> {
        let ops = self.ops;
        let first = &ops[lease.settings[0]];
        let start = first.complete_ms;
        let last_setting_invoke = lease
            .settings
            .iter()
            .map(|&i| ops[i].invoke_ms)
            .max()
            .unwrap_or(0);

        // The first possible release.
        let mut release = u64::MAX;
        for &i in ids {
            let op = &ops[i];
            let OpKind::Unlock { token } = op.kind else {
                continue;
            };
            if op.owner != lease.owner || token.is_some_and(|t| t != lease.token) {
                continue;
            }
            if !matches!(op.outcome, Outcome::Unlocked | Outcome::Unknown) {
                continue;
            }
            if self.effect_by(op) <= last_setting_invoke {
                continue; // it came before a later setting: it did not release this lease
            }
            release = release.min(op.invoke_ms);
        }

        // Under a lease: held until the lease's certain end (module docs).
        if let Some(granted) = self.granted.get(lease.owner) {
            let end = release.min(granted.end_ms);
            return (end > start).then_some((start, end));
        }

        // Everything that may have set the expiry.
        let mut candidates: Vec<Candidate> = Vec::new();
        for &i in &lease.settings {
            let Outcome::Ok { expires_at_ms, .. } = ops[i].outcome else {
                continue;
            };
            candidates.push(Candidate {
                invoke: ops[i].invoke_ms,
                effect_by: ops[i].complete_ms,
                value: expires_at_ms,
                overridden_at: u64::MAX,
            });
        }
        for &i in ids {
            let op = &ops[i];
            if op.owner != lease.owner || op.outcome != Outcome::Unknown {
                continue;
            }
            let ttl = match op.kind {
                OpKind::Lock { ttl_ms, .. } | OpKind::Extend { ttl_ms } => ttl_ms,
                _ => continue,
            };
            let effect_by = self.effect_by(op);
            if effect_by <= first.invoke_ms {
                continue; // overridden by the first setting before the window opens
            }
            candidates.push(Candidate {
                invoke: op.invoke_ms,
                effect_by,
                value: op.invoke_ms.saturating_add(ttl),
                overridden_at: u64::MAX,
            });
        }
        // A candidate is overridden once a setting invoked after it took
        // effect has completed.
        for candidate in &mut candidates {
            let by = candidate.effect_by;
            candidate.overridden_at = lease
                .settings
                .iter()
                .map(|&k| &ops[k])
                .filter(|k| k.invoke_ms >= by)
                .map(|k| k.complete_ms)
                .min()
                .unwrap_or(u64::MAX);
        }
        let mut events: Vec<u64> = vec![start];
        for c in &candidates {
            for t in [c.invoke, c.overridden_at] {
                if t > start && t != u64::MAX {
                    events.push(t);
                }
            }
        }
        events.sort_unstable();
        events.dedup();
        // `lower` is constant between events; on `[a, b)` the lease is
        // provably held where `τ < lower - MARGIN_MS`. Held at τ means held on
        // all of `[start, τ]`, so the window reaches the last such τ.
        let mut end = start;
        for (n, &a) in events.iter().enumerate() {
            if a >= release {
                break;
            }
            let b = events.get(n + 1).copied().unwrap_or(u64::MAX).min(release);
            let lower = candidates
                .iter()
                .filter(|c| c.invoke <= a && a < c.overridden_at)
                .map(|c| c.value)
                .min()
                .unwrap_or(0);
            let reach = b.min(lower.saturating_sub(MARGIN_MS));
            if reach > a {
                end = end.max(reach);
            }
        }
        (end > start).then_some((start, end))
    }

    /// Rules 1 and 2 for single calls: every call whose window lies inside
    /// a lease's certain window agrees that the lease holds.
    fn judge_calls(
        &self,
        name: &str,
        ids: &[usize],
        leases: &[Lease<'_>],
        coverage: &mut Coverage,
        out: &mut Vec<Violation>,
    ) {
        let ops = self.ops;
        let mut windows: Vec<(u64, u64, usize)> = leases
            .iter()
            .enumerate()
            .filter_map(|(n, l)| l.window.map(|(s, e)| (s, e, n)))
            .collect();
        windows.sort_unstable();
        let mut calls: Vec<usize> = ids
            .iter()
            .copied()
            .filter(|&i| ops[i].outcome != Outcome::Unknown)
            .collect();
        calls.sort_by_key(|&i| ops[i].invoke_ms);
        let mut next = 0;
        let mut active: Vec<(u64, u64, usize)> = Vec::new();
        for i in calls {
            let op = &ops[i];
            while next < windows.len() && windows[next].0 <= op.invoke_ms {
                active.push(windows[next]);
                next += 1;
            }
            active.retain(|&(_, end, _)| end > op.invoke_ms);
            // A lock under a lease that is not live answers not_held whoever
            // holds the lock: judged against the lease instead.
            let lease_refusal = matches!(op.kind, OpKind::Lock { .. })
                && op.outcome == Outcome::NotHeld
                && self.granted.contains_key(op.owner.as_str());
            for &(start, end, n) in &active {
                if op.complete_ms >= end || lease_refusal {
                    continue;
                }
                let lease = &leases[n];
                coverage.calls_judged += 1;
                if self
                    .kills
                    .iter()
                    .any(|k| k.started_ms >= start && k.done_ms <= op.invoke_ms)
                {
                    coverage.calls_judged_after_kill += 1;
                }
                if let Some((rule, why)) = judge(op, lease) {
                    let first = &ops[lease.settings[0]];
                    out.push(Violation {
                        rule,
                        name: name.to_string(),
                        message: format!(
                            "{why}: {op}, while {} certainly held token {} from {start} to {end} \
                             (acknowledged by {first})",
                            lease.owner, lease.token
                        ),
                    });
                }
            }
        }
    }

    /// Rule 2 for leases: no two certain windows intersect.
    fn window_overlaps(&self, name: &str, leases: &[Lease<'_>], out: &mut Vec<Violation>) {
        let mut windows: Vec<(u64, u64, usize)> = leases
            .iter()
            .enumerate()
            .filter_map(|(n, l)| l.window.map(|(s, e)| (s, e, n)))
            .collect();
        windows.sort_unstable();
        let mut reach: Option<(u64, usize)> = None; // (max end so far, its lease)
        for (start, end, n) in windows {
            if let Some((far, m)) = reach {
                if start < far {
                    let (a, b) = (&leases[m], &leases[n]);
                    out.push(Violation {
                        rule: Rule::Overlap,
                        name: name.to_string(),
                        message: format!(
                            "{} with token {} and {} with token {} both certainly held it \
                             from {start} to {}: {} / {}",
                            a.owner,
                            a.token,
                            b.owner,
                            b.token,
                            far.min(end),
                            self.ops[a.settings[0]],
                            self.ops[b.settings[0]]
                        ),
                    });
                }
            }
            if reach.is_none_or(|(far, _)| end > far) {
                reach = Some((end, n));
            }
        }
    }

    /// Rule 3.
    fn token_order(
        &self,
        name: &str,
        ids: &[usize],
        coverage: &mut Coverage,
        out: &mut Vec<Violation>,
    ) {
        let ops = self.ops;
        let mut acked: Vec<usize> = ids
            .iter()
            .copied()
            .filter(|&i| ops[i].is_setting())
            .collect();
        acked.sort_by_key(|&i| ops[i].complete_ms);
        let mut answers: Vec<usize> = ids
            .iter()
            .copied()
            .filter(|&i| ops[i].alive().is_some())
            .collect();
        answers.sort_by_key(|&i| ops[i].invoke_ms);
        let mut next = 0;
        let mut highest: Option<(u64, usize)> = None;
        for b in answers {
            let op = &ops[b];
            while next < acked.len() && ops[acked[next]].complete_ms < op.invoke_ms {
                let a = acked[next];
                let token = ops[a].alive().map_or(0, |(_, t)| t);
                if highest.is_none_or(|(t, _)| token > t) {
                    highest = Some((token, a));
                }
                next += 1;
            }
            let Some((top, a)) = highest else { continue };
            let Some((owner, token)) = op.alive() else {
                continue;
            };
            coverage.token_comparisons += 1;
            let why = if token < top {
                "token went backwards"
            } else if token == top && owner != ops[a].owner {
                "token reused by another owner"
            } else {
                continue;
            };
            out.push(Violation {
                rule: Rule::TokenOrder,
                name: name.to_string(),
                message: format!("{why}: {op}, after {}", ops[a]),
            });
        }
    }

    /// Rule 4.
    fn lost_unlocks(
        &self,
        name: &str,
        ids: &[usize],
        leases: &[Lease<'_>],
        out: &mut Vec<Violation>,
    ) {
        let ops = self.ops;
        // The latest call showing each token alive.
        let mut last_alive: HashMap<u64, usize> = HashMap::new();
        for &i in ids {
            if let Some((_, t)) = ops[i].alive() {
                let e = last_alive.entry(t).or_insert(i);
                if ops[i].invoke_ms > ops[*e].invoke_ms {
                    *e = i;
                }
            }
        }
        for &i in ids {
            let op = &ops[i];
            let (OpKind::Unlock { token: Some(t) }, Outcome::Unlocked) = (&op.kind, &op.outcome)
            else {
                continue;
            };
            if !leases.iter().any(|l| l.token == *t && l.owner == op.owner) {
                continue;
            }
            if let Some(&j) = last_alive.get(t) {
                if ops[j].invoke_ms > op.complete_ms {
                    out.push(Violation {
                        rule: Rule::LostUnlock,
                        name: name.to_string(),
                        message: format!("{} after {op}", ops[j]),
                    });
                }
            }
        }
    }

    /// Rule 5.
    fn fifo(&self, name: &str, ids: &[usize], coverage: &mut Coverage, out: &mut Vec<Violation>) {
        let ops = self.ops;
        for &w in ids {
            let waiter = &ops[w];
            let (OpKind::Lock { wait_ms, .. }, Outcome::Busy { .. }) =
                (&waiter.kind, &waiter.outcome)
            else {
                continue;
            };
            if *wait_ms == 0 {
                continue;
            }
            let q_start = (waiter.complete_ms + MARGIN_MS).saturating_sub(*wait_ms);
            let q_end = (waiter.invoke_ms + wait_ms).saturating_sub(MARGIN_MS);
            if q_start >= q_end {
                continue;
            }
            coverage.waits_judged += 1;
            let (lo, hi) = self.epoch(waiter);
            let in_epoch = |op: &Op| op.invoke_ms >= lo && op.complete_ms <= hi;

            // The lock free while a listening waiter queued.
            for &i in ids {
                let op = &ops[i];
                if op.invoke_ms >= q_start
                    && op.complete_ms <= q_end
                    && matches!(op.outcome, Outcome::NotFound | Outcome::NotHeld)
                {
                    out.push(Violation {
                        rule: Rule::FifoOrder,
                        name: name.to_string(),
                        message: format!(
                            "the lock was free ({op}) while {} waited in line from before \
                             {q_start} to after {q_end}: {waiter}",
                            waiter.owner
                        ),
                    });
                }
            }

            // A token of another owner created inside Q, by a call certainly
            // made after the waiter queued.
            let mut seen: HashMap<u64, (&str, u64, u64)> = HashMap::new(); // token -> (owner, first complete, last invoke)
            for &i in ids {
                let op = &ops[i];
                if !in_epoch(op) {
                    continue;
                }
                if let Some((owner, t)) = op.alive() {
                    let e = seen
                        .entry(t)
                        .or_insert((owner, op.complete_ms, op.invoke_ms));
                    e.1 = e.1.min(op.complete_ms);
                    e.2 = e.2.max(op.invoke_ms);
                }
            }
            for (&token, &(owner, first_complete, last_invoke)) in &seen {
                if owner == waiter.owner || first_complete > q_end {
                    continue;
                }
                // A call invoked inside Q saw the name without this token,
                // and completed before the token was last seen invoked.
                let Some(before) = ids.iter().map(|&i| &ops[i]).find(|o| {
                    in_epoch(o)
                        && o.invoke_ms >= q_start
                        && o.complete_ms < last_invoke
                        && o.shows().is_some_and(|s| s != Some(token))
                }) else {
                    continue;
                };
                // Every lock call that could have created it came after the
                // waiter queued.
                let creators: Vec<&Op> = ids
                    .iter()
                    .map(|&i| &ops[i])
                    .filter(|o| {
                        o.owner == owner
                            && matches!(o.kind, OpKind::Lock { .. })
                            && o.invoke_ms <= first_complete
                            && match o.outcome {
                                Outcome::Ok { token: t, .. } => t == token,
                                Outcome::Unknown => self.effect_by(o) >= before.invoke_ms,
                                _ => false,
                            }
                    })
                    .collect();
                if creators.is_empty() || creators.iter().any(|o| o.invoke_ms < q_start) {
                    continue;
                }
                out.push(Violation {
                    rule: Rule::FifoOrder,
                    name: name.to_string(),
                    message: format!(
                        "{owner} was granted token {token} by {} while {} waited ahead of it \
                         (queued before {q_start}, still waiting after {q_end}: {waiter}; \
                         {before} shows the token did not exist yet)",
                        creators[0], waiter.owner
                    ),
                });
            }
        }
    }
}

/// Judges one call made while `lease` was certainly held throughout it.
fn judge(op: &Op, lease: &Lease<'_>) -> Option<(Rule, &'static str)> {
    let own = op.owner == lease.owner;
    let holder_ok = |owner: &str, token: u64| owner == lease.owner && token == lease.token;
    match (&op.kind, &op.outcome) {
        (_, Outcome::NotFound) => Some((Rule::LostGrant, "reported free")),
        (_, Outcome::NotHeld) => Some((Rule::LostGrant, "answered not_held")),
        (OpKind::Get, Outcome::Found { owner, token, .. }) => {
            (!holder_ok(owner, *token)).then_some((Rule::LostGrant, "reported another holder"))
        }
        (OpKind::Lock { .. }, Outcome::Busy { owner, token, .. }) => {
            if own {
                Some((Rule::LostGrant, "the holder's own relock answered busy"))
            } else {
                (!holder_ok(owner, *token))
                    .then_some((Rule::LostGrant, "busy named another holder"))
            }
        }
        (OpKind::Lock { .. }, Outcome::Ok { token, .. }) => {
            if !own {
                Some((Rule::Overlap, "granted to another owner"))
            } else {
                (*token != lease.token).then_some((Rule::Overlap, "relock returned a new token"))
            }
        }
        (OpKind::Extend { .. }, Outcome::Ok { token, .. }) => {
            if !own {
                Some((Rule::Overlap, "extended by another owner"))
            } else {
                (*token != lease.token)
                    .then_some((Rule::LostGrant, "extend returned another token"))
            }
        }
        (OpKind::Extend { .. }, Outcome::NotOwner) => {
            own.then_some((Rule::LostGrant, "the holder's extend answered not_owner"))
        }
        (OpKind::Unlock { token }, Outcome::NotOwner) => (own
            && token.is_none_or(|t| t == lease.token))
        .then_some((Rule::LostGrant, "the holder's unlock answered not_owner")),
        (OpKind::Unlock { .. }, Outcome::Unlocked) => {
            // Its own unlock with this token (or none) ends the window before
            // it starts, so this is someone else or a stale token.
            Some((Rule::Overlap, "unlocked by another owner or a stale token"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-written history: ops are added with explicit times.
    #[derive(Default)]
    struct H(History);

    impl H {
        #[allow(clippy::too_many_arguments)]
        fn op(&mut self, inv: u64, comp: u64, owner: &str, kind: OpKind, outcome: Outcome) {
            self.op_on("n", inv, comp, owner, kind, outcome);
        }

        fn op_on(
            &mut self,
            name: &str,
            inv: u64,
            comp: u64,
            owner: &str,
            kind: OpKind,
            outcome: Outcome,
        ) {
            let client = owner.bytes().map(u32::from).sum();
            self.0.ops.push(Op {
                client,
                kind,
                name: name.to_string(),
                owner: owner.to_string(),
                invoke_ms: inv,
                complete_ms: comp,
                outcome,
            });
        }

        fn kill(&mut self, started_ms: u64, done_ms: u64) {
            self.0.kills.push(Kill {
                started_ms,
                done_ms,
            });
        }

        fn rules(&self) -> Vec<Rule> {
            let mut rules: Vec<Rule> = check(&self.0).into_iter().map(|v| v.rule).collect();
            rules.sort();
            rules.dedup();
            rules
        }

        fn assert_clean(&self) {
            let v = check(&self.0);
            assert!(
                v.is_empty(),
                "{}",
                v.iter().map(|v| format!("{v}\n")).collect::<String>()
            );
        }
    }

    fn lock(ttl_ms: u64) -> OpKind {
        OpKind::Lock { ttl_ms, wait_ms: 0 }
    }
    fn lock_wait(ttl_ms: u64, wait_ms: u64) -> OpKind {
        OpKind::Lock { ttl_ms, wait_ms }
    }
    fn unlock(token: u64) -> OpKind {
        OpKind::Unlock { token: Some(token) }
    }
    fn ok(token: u64, expires_at_ms: u64) -> Outcome {
        Outcome::Ok {
            token,
            expires_at_ms,
        }
    }
    fn busy(owner: &str, token: u64, expires_at_ms: u64) -> Outcome {
        Outcome::Busy {
            owner: owner.to_string(),
            token,
            expires_at_ms,
        }
    }
    fn found(owner: &str, token: u64, expires_at_ms: u64) -> Outcome {
        Outcome::Found {
            owner: owner.to_string(),
            token,
            expires_at_ms,
        }
    }

    // ---- negative controls -------------------------------------------

    /// A persistent grant vanishes across a kill (what `--store memory`
    /// does): `get` says free, and another owner is granted it.
    #[test]
    fn lost_grant_is_caught() {
        let mut h = H::default();
        h.op(1_000, 1_010, "a", lock(10_000), ok(10, 11_005));
        h.op(1_100, 1_105, "", OpKind::Get, found("a", 10, 11_005));
        h.kill(2_000, 2_010);
        h.op(3_000, 3_004, "", OpKind::Get, Outcome::NotFound);
        assert_eq!(h.rules(), vec![Rule::LostGrant]);

        // The same, seen through busy naming someone else.
        let mut h = H::default();
        h.op(1_000, 1_010, "a", lock(10_000), ok(10, 11_005));
        h.op(3_000, 3_004, "c", lock(1_000), busy("b", 12, 9_000));
        assert_eq!(h.rules(), vec![Rule::LostGrant]);

        // And through the holder's own extend.
        let mut h = H::default();
        h.op(1_000, 1_010, "a", lock(10_000), ok(10, 11_005));
        h.op(
            3_000,
            3_004,
            "a",
            OpKind::Extend { ttl_ms: 5_000 },
            Outcome::NotHeld,
        );
        assert_eq!(h.rules(), vec![Rule::LostGrant]);

        // An acknowledged extend that is lost: the lock expires at the old
        // deadline while the client was promised the new one.
        let mut h = H::default();
        h.op(1_000, 1_010, "a", lock(1_000), ok(10, 2_005));
        h.op(
            1_500,
            1_510,
            "a",
            OpKind::Extend { ttl_ms: 10_000 },
            ok(10, 11_505),
        );
        h.kill(1_600, 1_610);
        h.op(3_000, 3_004, "", OpKind::Get, Outcome::NotFound);
        assert_eq!(h.rules(), vec![Rule::LostGrant]);
    }

    #[test]
    fn regressed_token_is_caught() {
        let mut h = H::default();
        h.op(1_000, 1_010, "a", lock(500), ok(10, 1_505));
        h.op(1_100, 1_110, "a", unlock(10), Outcome::Unlocked);
        h.kill(1_200, 1_210);
        h.op(1_300, 1_310, "b", lock(500), ok(7, 1_805));
        assert_eq!(h.rules(), vec![Rule::TokenOrder]);

        // Reused by another owner.
        let mut h = H::default();
        h.op(1_000, 1_010, "a", lock(500), ok(10, 1_505));
        h.op(2_000, 2_010, "b", lock(500), ok(10, 2_505));
        assert_eq!(h.rules(), vec![Rule::TokenOrder]);

        // Seen going backwards by a get.
        let mut h = H::default();
        h.op(1_000, 1_010, "a", lock(500), ok(10, 1_505));
        h.op(2_000, 2_010, "", OpKind::Get, found("b", 9, 2_505));
        assert_eq!(h.rules(), vec![Rule::TokenOrder]);
    }

    #[test]
    fn overlap_is_caught() {
        // b is granted while a certainly holds it.
        let mut h = H::default();
        h.op(1_000, 1_010, "a", lock(5_000), ok(10, 6_005));
        h.op(2_000, 2_010, "b", lock(5_000), ok(11, 7_005));
        assert_eq!(h.rules(), vec![Rule::Overlap]);

        // Two certain windows intersect, though neither call lies inside the
        // other's window (b's grant was slow to answer).
        let mut h = H::default();
        h.op(1_000, 1_010, "a", lock(5_000), ok(10, 6_005));
        h.op(900, 2_000, "b", lock(5_000), ok(11, 6_990));
        assert_eq!(h.rules(), vec![Rule::Overlap]);

        // A stale token unlocks a newer grant (etcd#22082).
        let mut h = H::default();
        h.op(1_000, 1_010, "a", lock(5_000), ok(10, 6_005));
        h.op(2_000, 2_010, "a", unlock(9), Outcome::Unlocked);
        assert_eq!(h.rules(), vec![Rule::Overlap]);
    }

    #[test]
    fn lost_unlock_is_caught() {
        let mut h = H::default();
        h.op(1_000, 1_010, "a", lock(5_000), ok(10, 6_005));
        h.op(1_100, 1_110, "a", unlock(10), Outcome::Unlocked);
        h.kill(1_200, 1_210);
        h.op(1_300, 1_310, "", OpKind::Get, found("a", 10, 6_005));
        assert_eq!(h.rules(), vec![Rule::LostUnlock]);
    }

    /// w1 queues behind h; w2 queues after w1, yet is handed the lock when
    /// h unlocks, and w1 times out.
    #[test]
    fn out_of_order_wake_is_caught() {
        let mut h = H::default();
        h.op(0, 10, "h", lock(5_000), ok(1, 5_005));
        h.op(100, 612, "w1", lock_wait(1_000, 500), busy("w2", 2, 1_400));
        // Queue interval of w1: [612 - 500 + 50, 100 + 500 - 50] = [162, 550].
        h.op(200, 205, "", OpKind::Get, found("h", 1, 5_005));
        h.op(250, 402, "w2", lock_wait(1_000, 400), ok(2, 1_400));
        h.op(300, 310, "h", unlock(1), Outcome::Unlocked);
        assert_eq!(h.rules(), vec![Rule::FifoOrder]);

        // w2 came with wait 0 when the lock was free: still a barge.
        let mut h = H::default();
        h.op(0, 10, "h", lock(5_000), ok(1, 5_005));
        h.op(100, 612, "w1", lock_wait(1_000, 500), busy("w2", 2, 1_400));
        h.op(200, 205, "", OpKind::Get, found("h", 1, 5_005));
        h.op(300, 310, "h", unlock(1), Outcome::Unlocked);
        h.op(320, 330, "w2", lock(1_000), ok(2, 1_325));
        assert_eq!(h.rules(), vec![Rule::FifoOrder]);

        // Not woken at all: the lock sat free while w1 waited.
        let mut h = H::default();
        h.op(0, 10, "h", lock(5_000), ok(1, 5_005));
        h.op(100, 612, "w1", lock_wait(1_000, 500), busy("x", 3, 1_400));
        h.op(300, 310, "h", unlock(1), Outcome::Unlocked);
        h.op(320, 325, "", OpKind::Get, Outcome::NotFound);
        assert_eq!(h.rules(), vec![Rule::FifoOrder]);
    }

    fn grant(lease_id: &str, expires_at_ms: u64) -> Outcome {
        Outcome::LeaseGranted {
            lease_id: lease_id.to_string(),
            expires_at_ms,
        }
    }
    fn refreshed(expires_at_ms: u64) -> Outcome {
        Outcome::LeaseRefreshed { expires_at_ms }
    }
    fn lease_found(expires_at_ms: u64, locks: &[&str]) -> Outcome {
        Outcome::LeaseFound {
            expires_at_ms,
            locks: locks.iter().map(|n| n.to_string()).collect(),
        }
    }

    impl H {
        /// A lease call: it names no lock; `owner` is the lease id.
        fn lease(&mut self, inv: u64, comp: u64, id: &str, kind: OpKind, outcome: Outcome) {
            self.op_on("", inv, comp, id, kind, outcome);
        }
    }

    /// `lease-1`, granted at 1_000..1_010 until 2_005, holding `x` (token 10)
    /// and `y` (token 11), acknowledged by 1_130.
    fn leased() -> H {
        let mut h = H::default();
        h.lease(
            1_000,
            1_010,
            "",
            OpKind::LeaseGrant { ttl_ms: 1_000 },
            grant("lease-1", 2_005),
        );
        h.op_on("x", 1_100, 1_110, "lease-1", lock(1_000), ok(10, 2_005));
        h.op_on("y", 1_120, 1_130, "lease-1", lock(1_000), ok(11, 2_005));
        h
    }

    /// Rule 6: after an acknowledged revoke, one of the lease's locks is
    /// still seen held by it (a revoke that is not one atomic step), or the
    /// lease is found live.
    #[test]
    fn held_after_revoke_is_caught() {
        let revoked = Outcome::LeaseRevoked { released: 2 };
        let mut h = leased();
        h.lease(
            1_500,
            1_510,
            "lease-1",
            OpKind::LeaseRevoke,
            revoked.clone(),
        );
        h.op_on("x", 1_600, 1_605, "", OpKind::Get, Outcome::NotFound);
        h.op_on(
            "y",
            1_600,
            1_605,
            "",
            OpKind::Get,
            found("lease-1", 11, 2_005),
        );
        assert_eq!(h.rules(), vec![Rule::HeldAfterRevoke]);

        // Seen through a busy.
        let mut h = leased();
        h.lease(
            1_500,
            1_510,
            "lease-1",
            OpKind::LeaseRevoke,
            revoked.clone(),
        );
        h.op_on(
            "y",
            1_600,
            1_605,
            "b",
            lock(1_000),
            busy("lease-1", 11, 2_005),
        );
        assert_eq!(h.rules(), vec![Rule::HeldAfterRevoke]);

        // The lease itself refreshed after its revoke.
        let mut h = leased();
        h.lease(1_500, 1_510, "lease-1", OpKind::LeaseRevoke, revoked);
        h.lease(
            1_600,
            1_605,
            "lease-1",
            OpKind::LeaseRefresh,
            refreshed(2_600),
        );
        assert_eq!(h.rules(), vec![Rule::HeldAfterRevoke]);
    }

    /// Rule 1 under a lease: a lock lost before the lease's expiry, which a
    /// refresh moved.
    #[test]
    fn lease_lock_lost_before_its_expiry_is_caught() {
        // Seen free after the first expiry, before the refreshed one.
        let mut h = leased();
        h.lease(
            1_500,
            1_510,
            "lease-1",
            OpKind::LeaseRefresh,
            refreshed(2_505),
        );
        h.op_on("x", 2_200, 2_205, "", OpKind::Get, Outcome::NotFound);
        assert_eq!(h.rules(), vec![Rule::LostGrant]);

        // Held by another while the lease is live, across a kill.
        let mut h = leased();
        h.kill(1_300, 1_310);
        h.op_on("y", 1_400, 1_410, "b", lock(1_000), ok(12, 2_405));
        assert_eq!(h.rules(), vec![Rule::Overlap]);

        // A refresh of the certainly live lease answers not_held.
        let mut h = leased();
        h.lease(
            1_500,
            1_510,
            "lease-1",
            OpKind::LeaseRefresh,
            Outcome::NotHeld,
        );
        assert_eq!(h.rules(), vec![Rule::LostGrant]);

        // So does a lock under it.
        let mut h = leased();
        h.op_on("z", 1_500, 1_510, "lease-1", lock(1_000), Outcome::NotHeld);
        assert_eq!(h.rules(), vec![Rule::LostGrant]);

        // The lease's get leaves out a lock it certainly holds.
        let mut h = leased();
        h.lease(
            1_500,
            1_510,
            "lease-1",
            OpKind::LeaseGet,
            lease_found(2_005, &["x"]),
        );
        assert_eq!(h.rules(), vec![Rule::LostGrant]);
    }

    /// Rule 3 with leases: a plain grant after a revoke carries a token
    /// below the lease lock's.
    #[test]
    fn lease_token_going_back_is_caught() {
        let mut h = leased();
        h.lease(
            1_500,
            1_510,
            "lease-1",
            OpKind::LeaseRevoke,
            Outcome::LeaseRevoked { released: 2 },
        );
        h.kill(1_520, 1_530);
        h.op_on("x", 1_600, 1_610, "b", lock(1_000), ok(9, 2_605));
        assert_eq!(h.rules(), vec![Rule::TokenOrder]);
    }

    /// Legitimate lease histories: refreshes, a kill, expiry take-over,
    /// revoke then hand-over, an unknown revoke, an unlock by the lease id.
    #[test]
    fn legitimate_lease_histories_are_clean() {
        let mut h = leased();
        h.lease(
            1_500,
            1_510,
            "lease-1",
            OpKind::LeaseRefresh,
            refreshed(2_505),
        );
        h.op_on(
            "x",
            1_600,
            1_605,
            "",
            OpKind::Get,
            found("lease-1", 10, 2_505),
        );
        h.op_on(
            "y",
            1_700,
            1_705,
            "b",
            lock(1_000),
            busy("lease-1", 11, 2_505),
        );
        // Its own relock: the grant unchanged.
        h.op_on("y", 1_750, 1_755, "lease-1", lock(1_000), ok(11, 2_505));
        h.kill(1_800, 1_810);
        h.op_on(
            "y",
            1_850,
            1_855,
            "",
            OpKind::Get,
            found("lease-1", 11, 2_505),
        );
        h.lease(
            1_900,
            1_905,
            "lease-1",
            OpKind::LeaseGet,
            lease_found(2_505, &["x", "y"]),
        );
        // Not refreshed again: it expires at 2_505 and x passes on.
        h.op_on("x", 2_600, 2_610, "b", lock(1_000), ok(12, 3_605));
        h.lease(
            2_700,
            2_705,
            "lease-1",
            OpKind::LeaseRefresh,
            Outcome::NotHeld,
        );

        // Revoked: its lock is free at once and passes on.
        h.lease(
            3_000,
            3_010,
            "",
            OpKind::LeaseGrant { ttl_ms: 5_000 },
            grant("lease-2", 8_005),
        );
        h.op_on("z", 3_100, 3_110, "lease-2", lock(5_000), ok(13, 8_005));
        h.lease(
            3_200,
            3_210,
            "lease-2",
            OpKind::LeaseRevoke,
            Outcome::LeaseRevoked { released: 1 },
        );
        h.op_on("z", 3_300, 3_305, "", OpKind::Get, Outcome::NotFound);
        h.op_on("z", 3_400, 3_410, "b", lock(1_000), ok(14, 4_405));
        h.op_on("z", 3_450, 3_460, "lease-2", lock(5_000), Outcome::NotHeld);

        // A revoke of unknown outcome may have freed its lock.
        h.lease(
            4_000,
            4_010,
            "",
            OpKind::LeaseGrant { ttl_ms: 5_000 },
            grant("lease-3", 9_005),
        );
        h.op_on("w", 4_100, 4_110, "lease-3", lock(5_000), ok(15, 9_005));
        h.lease(
            4_200,
            4_300,
            "lease-3",
            OpKind::LeaseRevoke,
            Outcome::Unknown,
        );
        h.op_on("w", 4_400, 4_405, "", OpKind::Get, Outcome::NotFound);

        // One lock unlocked by the lease id; the lease lives on.
        h.lease(
            5_000,
            5_010,
            "",
            OpKind::LeaseGrant { ttl_ms: 5_000 },
            grant("lease-4", 10_005),
        );
        h.op_on("u", 5_100, 5_110, "lease-4", lock(5_000), ok(16, 10_005));
        h.op_on("v", 5_120, 5_130, "lease-4", lock(5_000), ok(17, 10_005));
        h.op_on("v", 5_200, 5_210, "lease-4", unlock(17), Outcome::Unlocked);
        h.op_on("v", 5_300, 5_305, "", OpKind::Get, Outcome::NotFound);
        h.lease(
            5_400,
            5_405,
            "lease-4",
            OpKind::LeaseGet,
            lease_found(10_005, &["u"]),
        );
        h.assert_clean();
        let coverage = check_report(&h.0).coverage;
        assert_eq!(coverage.lease_grants, 4, "{coverage}");
        assert_eq!(coverage.lease_locks, 6, "{coverage}");
        assert_eq!(coverage.revokes, 1, "{coverage}");
        assert!(coverage.calls_after_revoke >= 3, "{coverage}");
        assert_eq!(coverage.lease_calls_judged, 10, "{coverage}");
    }

    // ---- legitimate histories ------------------------------------------

    #[test]
    fn valid_history_is_clean() {
        let mut h = H::default();
        // Idempotent relocks: same token, refreshed expiry.
        h.op(1_000, 1_010, "a", lock(1_000), ok(10, 2_005));
        h.op(1_100, 1_110, "a", lock(2_000), ok(10, 3_105));
        h.op(1_200, 1_205, "", OpKind::Get, found("a", 10, 3_105));
        h.op(1_300, 1_305, "b", lock(1_000), busy("a", 10, 3_105));
        h.op(
            1_400,
            1_410,
            "a",
            OpKind::Extend { ttl_ms: 3_000 },
            ok(10, 4_405),
        );
        // A kill; the persistent lock survives with its token.
        h.kill(1_500, 1_520);
        h.op(1_600, 1_605, "", OpKind::Get, found("a", 10, 4_405));
        // A relock cut off by a kill (unknown) may have shortened it to
        // 2_000 + 300: after that, b may hold it.
        h.op(2_000, 2_100, "a", lock(300), Outcome::Unknown);
        h.kill(2_050, 2_110);
        h.op(2_400, 2_410, "b", lock(1_000), ok(11, 3_405));
        h.op(2_500, 2_505, "", OpKind::Get, found("b", 11, 3_405));
        // An unlock of unknown outcome: free or still held, either is fine.
        h.op(2_600, 2_650, "b", unlock(11), Outcome::Unknown);
        h.op(2_700, 2_705, "", OpKind::Get, Outcome::NotFound);
        h.op(2_710, 2_715, "", OpKind::Get, Outcome::NotFound);
        // Expiry take-over: c's lease runs out, d takes it.
        h.op(3_000, 3_010, "c", lock(200), ok(12, 3_205));
        h.op(3_300, 3_310, "d", lock(1_000), ok(13, 4_305));
        // A grant nobody acknowledged is seen, then lost in a kill; its token
        // is issued again (allowed: it was never acknowledged).
        h.op(3_400, 3_410, "d", unlock(13), Outcome::Unlocked);
        h.op(3_500, 3_600, "e", lock(1_000), Outcome::Unknown);
        h.op(3_520, 3_525, "", OpKind::Get, found("e", 14, 4_505));
        h.kill(3_550, 3_560);
        h.op(3_700, 3_710, "f", lock(500), ok(14, 4_205));
        h.op(3_800, 3_805, "f", lock(500), ok(14, 4_302));
        h.op(3_900, 3_910, "f", unlock(14), Outcome::Unlocked);
        h.op(3_920, 3_925, "f", unlock(14), Outcome::NotHeld);
        // A stale unlock of an old token is refused.
        h.op(3_950, 3_960, "g", lock(1_000), ok(15, 4_955));
        h.op(3_970, 3_980, "a", unlock(10), Outcome::NotOwner);
        h.op(3_990, 3_995, "g", unlock(15), Outcome::Unlocked);
        h.assert_clean();
    }

    #[test]
    fn legitimate_waits_are_clean() {
        let mut h = H::default();
        // w0 queued before w1; h unlocks; w0 (ahead) is woken; w1 times out.
        h.op(0, 10, "h", lock(5_000), ok(1, 5_005));
        h.op(50, 330, "w0", lock_wait(1_000, 800), ok(2, 1_310));
        h.op(100, 612, "w1", lock_wait(1_000, 500), busy("w0", 2, 1_310));
        h.op(200, 205, "", OpKind::Get, found("h", 1, 5_005));
        h.op(300, 310, "h", unlock(1), Outcome::Unlocked);
        h.op(400, 405, "", OpKind::Get, found("w0", 2, 1_310));
        // The holder's relock while w1 waits is no wake-up.
        h.op(450, 460, "w0", lock(1_000), ok(2, 1_455));
        // An earlier waiter whose outcome is unknown may still sit in the
        // queue ahead of w3 and be granted.
        h.op(2_000, 2_010, "p", lock(1_000), ok(3, 3_005));
        h.op(2_050, 2_100, "q", lock_wait(1_000, 2_000), Outcome::Unknown);
        h.op(
            2_100,
            2_620,
            "w3",
            lock_wait(1_000, 500),
            busy("q", 4, 3_700),
        );
        h.op(2_200, 2_205, "", OpKind::Get, found("p", 3, 3_005));
        h.op(2_300, 2_310, "p", unlock(3), Outcome::Unlocked);
        h.op(2_400, 2_405, "", OpKind::Get, found("q", 4, 3_700));
        // Expiry hand-off to a waiter that was ahead.
        h.op(5_000, 5_010, "r", lock(300), ok(5, 5_305));
        h.op(5_050, 5_310, "s", lock_wait(1_000, 1_000), ok(6, 6_306));
        h.op(
            5_100,
            5_620,
            "t",
            lock_wait(1_000, 500),
            busy("s", 6, 6_306),
        );
        h.op(5_200, 5_205, "", OpKind::Get, found("r", 5, 5_305));
        h.assert_clean();
    }

    #[test]
    fn unknown_outcomes_only_weaken_the_checks() {
        // An extend of unknown outcome, cut off by a kill, may have shortened
        // the lease to 2_000 + 100: from then on, free is a fine answer.
        let mut h = H::default();
        h.op(1_000, 1_010, "a", lock(10_000), ok(10, 11_005));
        h.op(
            2_000,
            2_500,
            "a",
            OpKind::Extend { ttl_ms: 100 },
            Outcome::Unknown,
        );
        h.kill(2_450, 2_510);
        h.op(3_000, 3_004, "", OpKind::Get, Outcome::NotFound);
        h.op(3_100, 3_110, "b", lock(1_000), ok(11, 4_105));
        h.assert_clean();

        // But if the owner's relock, made after that kill, still returns the
        // token, the lease was never lost: held throughout, free is wrong.
        let mut h = H::default();
        h.op(1_000, 1_010, "a", lock(10_000), ok(10, 11_005));
        h.op(
            2_000,
            2_500,
            "a",
            OpKind::Extend { ttl_ms: 100 },
            Outcome::Unknown,
        );
        h.kill(2_450, 2_510);
        h.op(3_000, 3_004, "", OpKind::Get, Outcome::NotFound);
        h.op(3_200, 3_210, "a", lock(5_000), ok(10, 8_205));
        assert_eq!(h.rules(), vec![Rule::LostGrant]);

        // Without a kill the unknown extend might still be in flight at the
        // server at any later time, so it is never overridden.
        let mut h = H::default();
        h.op(1_000, 1_010, "a", lock(10_000), ok(10, 11_005));
        h.op(
            2_000,
            2_500,
            "a",
            OpKind::Extend { ttl_ms: 100 },
            Outcome::Unknown,
        );
        h.op(3_000, 3_004, "", OpKind::Get, Outcome::NotFound);
        h.op(3_200, 3_210, "a", lock(5_000), ok(10, 8_205));
        h.op(3_300, 3_304, "", OpKind::Get, found("a", 10, 8_205));
        h.assert_clean();

        // An unlock of unknown outcome ends the certain window, unless a
        // later setting shows it did not release the lease.
        let mut h = H::default();
        h.op(1_000, 1_010, "a", lock(10_000), ok(10, 11_005));
        h.op(2_000, 2_500, "a", unlock(10), Outcome::Unknown);
        h.op(3_000, 3_004, "", OpKind::Get, Outcome::NotFound);
        h.assert_clean();
        h.kill(2_450, 2_510);
        h.op(3_200, 3_210, "a", lock(5_000), ok(10, 8_205));
        assert_eq!(h.rules(), vec![Rule::LostGrant]);
    }

    #[test]
    fn names_are_independent_and_summary_counts() {
        let mut h = H::default();
        h.op_on("x", 1_000, 1_010, "a", lock(5_000), ok(10, 6_005));
        h.op_on("y", 1_100, 1_110, "b", lock(5_000), ok(11, 6_105));
        h.op_on("y", 1_200, 1_210, "", OpKind::Get, found("b", 11, 6_105));
        h.assert_clean();
        let report = check_report(&h.0);
        assert_eq!(report.coverage.leases, 2);
        assert_eq!(report.coverage.calls_judged, 1);
        let summary = h.0.summary();
        assert!(summary.contains("lock       ok         2"), "{summary}");
        assert!(summary.contains("kills: 0"), "{summary}");
    }

    #[test]
    fn recorder_times_bracket_the_call() {
        let rec = Recorder::new();
        let inv = rec.invoke();
        rec.complete(1, OpKind::Get, "n", "", inv, Outcome::NotFound);
        let started = rec.kill_started();
        rec.kill_done(started);
        let h = rec.history();
        assert_eq!(h.ops.len(), 1);
        assert!(h.ops[0].complete_ms >= h.ops[0].invoke_ms);
        assert!(h.kills[0].done_ms >= h.kills[0].started_ms);
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        assert!(wall.abs_diff(rec.clock().floor_ms()) < 1_000);
    }
}
