//! The rules on the order of things on one name: certain windows never
//! intersect (rule 2), tokens rise (rule 3), a released lock stays released
//! (rule 4), waiters are woken in FIFO order (rule 5).

use std::collections::HashMap;

use super::checker::{Checker, Lease};
use super::record::{Op, OpKind, Outcome, MARGIN_MS};
use super::verdict::{Coverage, Rule, Violation};

impl Checker<'_> {
    /// Rule 2 for leases: no two certain windows intersect.
    pub(super) fn window_overlaps(
        &self,
        name: &str,
        leases: &[Lease<'_>],
        out: &mut Vec<Violation>,
    ) {
        let mut windows: Vec<(u64, u64, usize)> = leases
            .iter()
            .enumerate()
            .filter_map(|(n, l)| l.window.map(|(s, e)| (s, e, n)))
            .collect();
        windows.sort_unstable();
        let mut reach: Option<(u64, usize)> = None; // (max end so far, its grant)
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

    /// Rule 3. On a name with `several` holders at once, only grants are
    /// compared: a `get` or a `busy` shows the most recent grant still
    /// held, which is older than one released since.
    pub(super) fn token_order(
        &self,
        name: &str,
        ids: &[usize],
        several: bool,
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
            .filter(|&i| !several || self.certainly_fresh(ids, i))
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

    /// Whether `b`, on a name with several holders, is an acknowledged
    /// `lock` that certainly made a fresh grant: no acknowledged setting of
    /// its owner and token completed before it was invoked (else it is a
    /// relock, whose token may be older than a grant made since), and no
    /// `lock` of its owner on the name of unknown outcome was invoked before
    /// it (which may have made the grant earlier).
    fn certainly_fresh(&self, ids: &[usize], b: usize) -> bool {
        let ops = self.ops;
        let op = &ops[b];
        let (OpKind::Lock { .. }, Outcome::Ok { token, .. }) = (&op.kind, &op.outcome) else {
            return false;
        };
        !ids.iter().map(|&i| &ops[i]).any(|o| {
            o.owner == op.owner
                && o.invoke_ms < op.invoke_ms
                && match &o.outcome {
                    Outcome::Ok { token: t, .. } => {
                        t == token && o.is_setting() && o.complete_ms <= op.invoke_ms
                    }
                    Outcome::Unknown => matches!(o.kind, OpKind::Lock { .. }),
                    _ => false,
                }
        })
    }

    /// Rule 4.
    pub(super) fn lost_unlocks(
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
    pub(super) fn fifo(
        &self,
        name: &str,
        ids: &[usize],
        coverage: &mut Coverage,
        out: &mut Vec<Violation>,
    ) {
        for &w in ids {
            let Some(queued) = Queued::of(&self.ops[w]) else {
                continue;
            };
            coverage.waits_judged += 1;
            self.free_while_queued(name, ids, &queued, out);
            self.granted_ahead_of_waiter(name, ids, &queued, out);
        }
    }

    /// Rule 5: the lock free while a listening waiter queued.
    fn free_while_queued(
        &self,
        name: &str,
        ids: &[usize],
        queued: &Queued<'_>,
        out: &mut Vec<Violation>,
    ) {
        let Queued {
            waiter,
            start: q_start,
            end: q_end,
        } = *queued;
        for &i in ids {
            let op = &self.ops[i];
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
    }

    /// Rule 5: a token of another owner created inside the queue interval,
    /// by a call certainly made after the waiter queued.
    fn granted_ahead_of_waiter(
        &self,
        name: &str,
        ids: &[usize],
        queued: &Queued<'_>,
        out: &mut Vec<Violation>,
    ) {
        let ops = self.ops;
        let Queued {
            waiter,
            start: q_start,
            end: q_end,
        } = *queued;
        let (lo, hi) = self.epoch(waiter);
        let in_epoch = |op: &Op| op.invoke_ms >= lo && op.complete_ms <= hi;
        for (&token, &(owner, first_complete, last_invoke)) in &self.tokens_seen(ids, &in_epoch) {
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

    /// Each token the calls `in_epoch` show alive: its owner, the first
    /// completion and the last invocation of a call showing it.
    fn tokens_seen(
        &self,
        ids: &[usize],
        in_epoch: &dyn Fn(&Op) -> bool,
    ) -> HashMap<u64, (&str, u64, u64)> {
        let mut seen: HashMap<u64, (&str, u64, u64)> = HashMap::new();
        for &i in ids {
            let op = &self.ops[i];
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
        seen
    }
}

/// A `lock` that waited and answered `busy`, and the interval `Q` where
/// it was certainly queued and listening: from `start` to `end`.
#[derive(Clone, Copy)]
struct Queued<'o> {
    waiter: &'o Op,
    start: u64,
    end: u64,
}

impl<'o> Queued<'o> {
    /// `waiter`'s queue interval, if it is a `lock` that waited, answered
    /// `busy`, and was certainly queued for some time.
    fn of(waiter: &'o Op) -> Option<Self> {
        let (OpKind::Lock { wait_ms, .. }, Outcome::Busy { .. }) = (&waiter.kind, &waiter.outcome)
        else {
            return None;
        };
        if *wait_ms == 0 {
            return None;
        }
        let start = (waiter.complete_ms + MARGIN_MS).saturating_sub(*wait_ms);
        let end = (waiter.invoke_ms + wait_ms).saturating_sub(MARGIN_MS);
        (start < end).then_some(Queued { waiter, start, end })
    }
}
