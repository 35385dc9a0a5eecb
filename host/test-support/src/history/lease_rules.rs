//! Leases (module docs, "Leases"): how long each acknowledged lease was
//! certainly live, rule 1 for lease calls and rule 6.

use std::collections::HashMap;

use super::checker::{Checker, GrantedLease, LeaseLockWindow};
use super::record::{OpKind, Outcome, MARGIN_MS};
use super::verdict::{Coverage, Report, Rule, Violation};

impl<'h> Checker<'h> {
    /// The acknowledged leases, and how long each was certainly live.
    pub(super) fn granted_leases(&self) -> HashMap<&'h str, GrantedLease> {
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
    pub(super) fn check_granted_leases(
        &self,
        lock_windows: &[LeaseLockWindow<'_>],
        report: &mut Report,
    ) {
        let mut ids: Vec<&str> = self.granted.keys().copied().collect();
        ids.sort();
        for id in ids {
            report.coverage.lease_grants += 1;
            self.judge_lease_calls(
                id,
                lock_windows,
                &mut report.coverage,
                &mut report.violations,
            );
            self.held_after_revoke(id, &mut report.coverage, &mut report.violations);
        }
    }

    /// Rule 1 for the lease `id`: every refresh, get and lock under it made
    /// inside its certain window finds it live, and a get lists every lock
    /// certainly held under it meanwhile (of `lock_windows`).
    fn judge_lease_calls(
        &self,
        id: &str,
        lock_windows: &[LeaseLockWindow<'_>],
        coverage: &mut Coverage,
        out: &mut Vec<Violation>,
    ) {
        let lease = &self.granted[id];
        let windows: Vec<&LeaseLockWindow<'_>> =
            lock_windows.iter().filter(|w| w.lease_id == id).collect();
        for op in self.ops.iter().filter(|op| op.owner == id) {
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
    }

    /// Rule 6 for the lease `id`, from its first acknowledged revoke: no
    /// later call shows it or one of its locks held.
    fn held_after_revoke(&self, id: &str, coverage: &mut Coverage, out: &mut Vec<Violation>) {
        let ops = self.ops;
        let Some(revoke) = ops
            .iter()
            .filter(|op| {
                op.owner == id
                    && op.kind == OpKind::LeaseRevoke
                    && matches!(op.outcome, Outcome::LeaseRevoked { .. })
            })
            .min_by_key(|op| op.complete_ms)
        else {
            return;
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
