//! The checker: each name's leases and their certain windows (module docs,
//! "Leases and their certain windows"), and rule 1 and 2 for the calls made
//! inside them. The other rules are in `order_rules` and `lease_rules`.

use std::collections::{BTreeMap, HashMap};

use lockd_core::Claim;

use super::record::{History, Kill, Op, OpKind, Outcome, MARGIN_MS};
use super::verdict::{Coverage, Report, Rule, Violation};

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

pub(super) struct Checker<'h> {
    pub(super) ops: &'h [Op],
    /// Sorted by `done_ms`.
    pub(super) kills: Vec<Kill>,
    /// The acknowledged leases (docs/contract.md#c16-leases), by id.
    pub(super) granted: HashMap<&'h str, GrantedLease>,
}

/// What the history proves of one acknowledged lease (module docs,
/// "Leases").
pub(super) struct GrantedLease {
    /// The completion of its grant.
    pub(super) granted_ms: u64,
    /// Where its certain window ends: the first possible revoke, or the
    /// largest acknowledged expiry less [`MARGIN_MS`].
    pub(super) end_ms: u64,
}

/// A lock held under a lease, and its certain window.
pub(super) struct LeaseLockWindow<'h> {
    pub(super) lease_id: &'h str,
    pub(super) name: &'h str,
    pub(super) start: u64,
    pub(super) end: u64,
}

/// One acknowledged `(name, token, owner)`.
pub(super) struct Lease<'h> {
    pub(super) owner: &'h str,
    pub(super) token: u64,
    /// What it holds of the name: from its acknowledged `lock`s, else from
    /// the owner's unknown-outcome `lock`s that may have made it; `None`
    /// when they do not tell.
    pub(super) claim: Option<Claim>,
    /// Its acknowledged settings.
    pub(super) settings: Vec<usize>,
    /// The certain window `[start, end)`.
    pub(super) window: Option<(u64, u64)>,
}

/// Something that may have set a lease's expiry.
pub(super) struct Candidate {
    pub(super) invoke: u64,
    /// Took effect by then (completion, or deadline if unknown).
    pub(super) effect_by: u64,
    /// A lower bound on the expiry it set.
    pub(super) value: u64,
    /// Overridden from this time on.
    pub(super) overridden_at: u64,
}

impl<'h> Checker<'h> {
    /// The latest time an op can have taken effect.
    pub(super) fn effect_by(&self, op: &Op) -> u64 {
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
    pub(super) fn epoch(&self, op: &Op) -> (u64, u64) {
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

    pub(super) fn check_name(
        &self,
        name: &str,
        ids: &[usize],
        report: &mut Report,
        lock_windows: &mut Vec<LeaseLockWindow<'h>>,
    ) {
        let mut out = Vec::new();
        // A name taken shared or as a semaphore may have several holders
        // at once (docs/contract.md C21, C22): its rules are in
        // `claim_rules`.
        let several = ids
            .iter()
            .any(|&i| self.ops[i].claim().is_some_and(|c| !super::alone(c)));
        let leases = self.leases(name, ids, &mut out);
        report.coverage.leases += leases.len();
        report.coverage.leases_with_window += leases.iter().filter(|l| l.window.is_some()).count();
        report.coverage.leader_windows += leases
            .iter()
            .filter(|l| l.window.is_some() && l.claim == Some(Claim::Leader))
            .count();
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
        self.judge_calls(name, ids, &leases, several, &mut report.coverage, &mut out);
        if several {
            report.coverage.shared_names += 1;
            self.holder_overlaps(name, &leases, &mut report.coverage, &mut out);
        } else {
            self.window_overlaps(name, &leases, &mut out);
        }
        self.token_order(name, ids, several, &mut report.coverage, &mut out);
        self.lost_unlocks(name, ids, &leases, &mut out);
        self.fifo(name, ids, &mut report.coverage, &mut out);
        report.violations.extend(out);
    }

    /// Groups acknowledged settings into leases and computes their windows.
    pub(super) fn leases(
        &self,
        name: &str,
        ids: &[usize],
        out: &mut Vec<Violation>,
    ) -> Vec<Lease<'h>> {
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
                claim: None,
                settings,
                window: None,
            };
            lease.claim = self.lease_claim(ids, &lease);
            lease.window = self.certain_window(ids, &lease);
            leases.push(lease);
        }
        leases
    }

    /// The interval where `lease` was certainly held (module docs).
    pub(super) fn certain_window(&self, ids: &[usize], lease: &Lease<'_>) -> Option<(u64, u64)> {
        let start = self.ops[lease.settings[0]].complete_ms;
        let release = self.first_possible_release(ids, lease);
        // Under a lease: held until the lease's certain end (module docs).
        if let Some(granted) = self.granted.get(lease.owner) {
            let end = release.min(granted.end_ms);
            return (end > start).then_some((start, end));
        }
        let candidates = self.expiry_candidates(ids, lease);
        let end = certainly_held_until(start, release, &candidates);
        (end > start).then_some((start, end))
    }

    /// The first possible release of `lease`: the earliest invocation of
    /// an unlock by its owner, with its token or none, that may have
    /// succeeded after its last setting was invoked; `u64::MAX` if none.
    fn first_possible_release(&self, ids: &[usize], lease: &Lease<'_>) -> u64 {
        let ops = self.ops;
        let last_setting_invoke = lease
            .settings
            .iter()
            .map(|&i| ops[i].invoke_ms)
            .max()
            .unwrap_or(0);
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
        release
    }

    /// Everything that may have set the expiry of `lease`: its acknowledged
    /// settings, and its owner's `lock`s and `extend`s of unknown outcome
    /// that may have taken effect after its first setting was invoked, each
    /// with the time from which a later setting overrides it.
    fn expiry_candidates(&self, ids: &[usize], lease: &Lease<'_>) -> Vec<Candidate> {
        let ops = self.ops;
        let first = &ops[lease.settings[0]];
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
        candidates
    }

    /// Rules 1 and 2 for single calls: every call whose window lies inside
    /// a lease's certain window agrees that the lease holds (beside the
    /// other holders of a name that has `several`, unless it is exclusive).
    pub(super) fn judge_calls(
        &self,
        name: &str,
        ids: &[usize],
        leases: &[Lease<'_>],
        several: bool,
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
                let verdict = if several && !lease.claim.is_some_and(super::alone) {
                    lease.judge_beside_others(op)
                } else {
                    judge(op, lease)
                };
                if let Some((rule, why)) = verdict {
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
}

/// Judges one call made while `lease` was certainly held throughout it,
/// the name's only holder.
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

/// How far from `start`, and before `release`, a lease whose expiry was
/// set by one of `candidates` was certainly held.
fn certainly_held_until(start: u64, release: u64, candidates: &[Candidate]) -> u64 {
    let mut events: Vec<u64> = vec![start];
    for c in candidates {
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
    end
}
