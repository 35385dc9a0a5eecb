//! What clients saw: the calls ([`Op`]) and kills ([`Kill`]) of a run,
//! recorded by a [`Recorder`] with times from one [`Clock`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use lockd_core::Claim;

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
        /// Exclusive, shared, or one permit of a semaphore
        /// (docs/contract.md C21, C22).
        claim: Claim,
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
            OpKind::Lock { wait_ms, claim, .. } => match (claim, *wait_ms == 0) {
                (Claim::Exclusive, true) => "lock",
                (Claim::Exclusive, false) => "lock+wait",
                (Claim::Shared, true) => "shared",
                (Claim::Shared, false) => "shared+wait",
                (Claim::Permit { .. }, true) => "permit",
                (Claim::Permit { .. }, false) => "permit+wait",
                (Claim::Leader, true) => "campaign",
                (Claim::Leader, false) => "campaign+wait",
            },
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
    pub(super) fn shown_holder(&self) -> Option<(&str, u64)> {
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
    pub(super) fn alive(&self) -> Option<(&str, u64)> {
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
    pub(super) fn shows(&self) -> Option<Option<u64>> {
        match &self.outcome {
            Outcome::NotFound | Outcome::NotHeld => Some(None),
            _ => self.alive().map(|(_, t)| Some(t)),
        }
    }

    /// What a `lock` call asked for; `None` for any other call.
    pub(super) fn claim(&self) -> Option<Claim> {
        match self.kind {
            OpKind::Lock { claim, .. } => Some(claim),
            _ => None,
        }
    }

    pub(super) fn is_setting(&self) -> bool {
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
            OpKind::Lock {
                ttl_ms,
                wait_ms,
                claim,
            } => {
                let what = match claim {
                    Claim::Exclusive => String::new(),
                    Claim::Permit { permits } => format!("1 of {permits} permits, "),
                    other => format!("{}, ", other.as_str()),
                };
                write!(
                    f,
                    "lock({}, {}, {what}ttl {ttl_ms}, wait {wait_ms})",
                    self.name, self.owner
                )?
            }
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
