//! Operation counters and latency histograms, kept by the dispatch layer so
//! every surface (wasm, REST) is measured the same way, and rendered in the
//! Prometheus text format.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::error::{ErrorKind, LockError};

/// The operations measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `lock`
    Lock,
    /// `unlock`
    Unlock,
    /// `extend`
    Extend,
    /// `get`
    Get,
    /// `list`
    List,
    /// `lease grant`
    LeaseGrant,
    /// `lease refresh`
    LeaseRefresh,
    /// `lease revoke`
    LeaseRevoke,
    /// `lease get`
    LeaseGet,
    /// `force-unlock`
    ForceUnlock,
    /// `campaign` (an election)
    Campaign,
    /// `proclaim` (an election's leader sets its value)
    Proclaim,
    /// `leader` (who leads an election)
    Leader,
}

impl Op {
    /// The operation's name, as metrics and logs label it.
    pub fn as_str(self) -> &'static str {
        OPS[self as usize].1
    }
}

/// Every operation with its label, in declaration order (`as_str` indexes it).
const OPS: [(Op, &str); 13] = [
    (Op::Lock, "lock"),
    (Op::Unlock, "unlock"),
    (Op::Extend, "extend"),
    (Op::Get, "get"),
    (Op::List, "list"),
    (Op::LeaseGrant, "lease_grant"),
    (Op::LeaseRefresh, "lease_refresh"),
    (Op::LeaseRevoke, "lease_revoke"),
    (Op::LeaseGet, "lease_get"),
    (Op::ForceUnlock, "force_unlock"),
    (Op::Campaign, "campaign"),
    (Op::Proclaim, "proclaim"),
    (Op::Leader, "leader"),
];

/// Outcome labels: `ok`, then the word of every [`ErrorKind`] in its
/// declaration order, which is the order the counters are kept in.
pub const OUTCOMES: [&str; 1 + ErrorKind::ALL.len()] = {
    let mut labels = ["ok"; 1 + ErrorKind::ALL.len()];
    let mut i = 0;
    while i < ErrorKind::ALL.len() {
        labels[1 + i] = ErrorKind::ALL[i].as_str();
        i += 1;
    }
    labels
};

fn outcome_index<T>(result: &Result<T, LockError>) -> usize {
    match result {
        Ok(_) => 0,
        // `ErrorKind::ALL` is in declaration order, so the discriminant is
        // the kind's place in it.
        Err(e) => 1 + e.kind() as usize,
    }
}

/// Upper bounds of the latency buckets, in seconds. Lock waits can last
/// minutes, so the top buckets are wide.
const BUCKETS_S: [f64; 16] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
    5.0, 30.0, 300.0,
];

/// [`BUCKETS_S`] in nanoseconds: observing is on every operation, so it
/// compares integers.
const BUCKETS_NS: [u64; BUCKETS_S.len()] = {
    let mut ns = [0u64; BUCKETS_S.len()];
    let mut i = 0;
    while i < ns.len() {
        ns[i] = (BUCKETS_S[i] * 1e9) as u64;
        i += 1;
    }
    ns
};

/// A histogram on 16 fixed latency buckets (50 µs up to 300 s, wide at the
/// top because lock waits can last minutes), recorded with atomics:
/// observing takes no lock, so a store can record where it decides (the
/// memory engine records hold times under its shard mutex).
#[derive(Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS_S.len()],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.snapshot().fmt(f)
    }
}

impl Histogram {
    /// Counts one sample of `elapsed`.
    pub fn observe(&self, elapsed: Duration) {
        let ns = elapsed.as_nanos().min(u128::from(u64::MAX)) as u64;
        if let Some(i) = BUCKETS_NS.iter().position(|b| ns <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Its counts now.
    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            buckets: std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed)),
            count: self.count.load(Ordering::Relaxed),
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
        }
    }
}

/// The counts of a [`Histogram`] at one moment; snapshots of namespaces
/// that share a label add up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Samples per bucket of [`BUCKETS_S`] (not cumulative).
    buckets: [u64; BUCKETS_S.len()],
    count: u64,
    sum_ns: u64,
}

impl HistogramSnapshot {
    /// How many samples it counts.
    pub fn count(&self) -> u64 {
        self.count
    }

    fn add(&mut self, other: &HistogramSnapshot) {
        for (mine, theirs) in self.buckets.iter_mut().zip(other.buckets) {
            *mine += theirs;
        }
        self.count += other.count;
        self.sum_ns += other.sum_ns;
    }
}

/// How long the grants of each namespace were held, as a store that
/// measures it reports: see [`LockBackend::hold_times`](crate::LockBackend::hold_times).
pub type HoldTimes = Vec<(String, HistogramSnapshot)>;

/// Counters of one [`LockService`](crate::LockService).
#[derive(Default)]
pub struct Metrics {
    ops: [[AtomicU64; OUTCOMES.len()]; OPS.len()],
    latency: [Histogram; OPS.len()],
    /// The namespaces with a label of their own.
    namespaces: NamespaceLabels,
    /// `lockd_wait_seconds`, by namespace label and outcome.
    wait: Mutex<BTreeMap<(String, &'static str), Histogram>>,
    /// `lockd_hold_seconds`, by namespace label.
    hold: Mutex<BTreeMap<String, Histogram>>,
}

/// At most this many namespaces get a label of their own in the
/// per-namespace metrics; the rest are counted under [`OTHER_NAMESPACES`].
/// However many namespaces a server sees, a scrape stays bounded.
pub const MAX_NAMESPACE_LABELS: usize = 32;

/// The `namespace` label of every namespace past the first
/// [`MAX_NAMESPACE_LABELS`].
pub const OTHER_NAMESPACES: &str = "_other";

/// First come, first labelled: the first [`MAX_NAMESPACE_LABELS`]
/// namespaces seen keep their names as labels.
#[derive(Default)]
struct NamespaceLabels(Mutex<Vec<String>>);

impl NamespaceLabels {
    fn label(&self, namespace: &str) -> String {
        let mut known = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if known.iter().any(|n| n == namespace) {
            return namespace.to_string();
        }
        if known.len() < MAX_NAMESPACE_LABELS {
            known.push(namespace.to_string());
            return namespace.to_string();
        }
        OTHER_NAMESPACES.to_string()
    }
}

/// A Prometheus label value: backslash, double quote and newline escaped.
fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn render_histogram(out: &mut String, name: &str, labels: &str, h: &HistogramSnapshot) {
    let mut cumulative = 0;
    for (b, bound) in BUCKETS_S.iter().enumerate() {
        cumulative += h.buckets[b];
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {cumulative}");
    }
    let count = h.count;
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {count}");
    let sum = h.sum_ns as f64 / 1e9;
    let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
    let _ = writeln!(out, "{name}_count{{{labels}}} {count}");
}

/// Locks held and waiters of one namespace and durability, for the
/// per-namespace gauges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceStats {
    /// The namespace.
    pub namespace: String,
    /// Held persistent locks.
    pub persistent: u64,
    /// Held ephemeral locks.
    pub ephemeral: u64,
    /// Callers waiting in its queues.
    pub waiters: u64,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    pub(crate) fn record<T>(&self, op: Op, elapsed: Duration, result: &Result<T, LockError>) {
        let i = op as usize;
        self.ops[i][outcome_index(result)].fetch_add(1, Ordering::Relaxed);
        self.latency[i].observe(elapsed);
    }

    /// Records the time a `lock` call that was allowed to wait spent before
    /// its answer (a grant or a timeout), in `lockd_wait_seconds`.
    pub(crate) fn record_wait<T>(
        &self,
        namespace: &str,
        elapsed: Duration,
        result: &Result<T, LockError>,
    ) {
        let key = (
            self.namespaces.label(namespace),
            OUTCOMES[outcome_index(result)],
        );
        self.wait
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key)
            .or_default()
            .observe(elapsed);
    }

    /// Records how long a grant was held, in `lockd_hold_seconds`.
    pub fn record_hold(&self, namespace: &str, held: Duration) {
        let label = self.namespaces.label(namespace);
        self.hold
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(label)
            .or_default()
            .observe(held);
    }

    /// Appends the per-namespace gauges of `stats`, folding namespaces past
    /// the first [`MAX_NAMESPACE_LABELS`] into [`OTHER_NAMESPACES`].
    pub fn render_namespaces(&self, stats: &[NamespaceStats], out: &mut String) {
        let mut folded: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
        for ns in stats {
            let row = folded
                .entry(self.namespaces.label(&ns.namespace))
                .or_default();
            row.0 += ns.persistent;
            row.1 += ns.ephemeral;
            row.2 += ns.waiters;
        }
        out.push_str("# HELP lockd_locks_held Locks held, by namespace and durability.\n");
        out.push_str("# TYPE lockd_locks_held gauge\n");
        for (ns, (persistent, ephemeral, _)) in &folded {
            let ns = escape_label(ns);
            let _ = writeln!(
                out,
                "lockd_locks_held{{namespace=\"{ns}\",durability=\"persistent\"}} {persistent}"
            );
            let _ = writeln!(
                out,
                "lockd_locks_held{{namespace=\"{ns}\",durability=\"ephemeral\"}} {ephemeral}"
            );
        }
        out.push_str("# HELP lockd_queue_depth Callers waiting in lock queues, by namespace.\n");
        out.push_str("# TYPE lockd_queue_depth gauge\n");
        for (ns, (_, _, waiters)) in &folded {
            let ns = escape_label(ns);
            let _ = writeln!(out, "lockd_queue_depth{{namespace=\"{ns}\"}} {waiters}");
        }
    }

    /// How many `op` calls ended with `outcome` (a label of [`OUTCOMES`]).
    pub fn count(&self, op: Op, outcome: &str) -> u64 {
        OUTCOMES
            .iter()
            .position(|o| *o == outcome)
            .map_or(0, |j| self.ops[op as usize][j].load(Ordering::Relaxed))
    }

    /// Appends the counters and histograms in Prometheus text format.
    pub fn render(&self, out: &mut String) {
        self.render_with_holds(None, out);
    }

    /// [`Metrics::render`], with the hold times of a store that measures
    /// them (`Some`) in place of those this service measured from events.
    pub fn render_with_holds(&self, store_holds: Option<&HoldTimes>, out: &mut String) {
        out.push_str("# HELP lockd_operations_total Lock operations by operation and outcome.\n");
        out.push_str("# TYPE lockd_operations_total counter\n");
        for (i, (_, op)) in OPS.iter().enumerate() {
            for (j, outcome) in OUTCOMES.iter().enumerate() {
                let n = self.ops[i][j].load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "lockd_operations_total{{op=\"{op}\",outcome=\"{outcome}\"}} {n}"
                );
            }
        }
        out.push_str(
            "# HELP lockd_operation_duration_seconds Time from call to answer, waits included.\n",
        );
        out.push_str("# TYPE lockd_operation_duration_seconds histogram\n");
        for (i, (_, op)) in OPS.iter().enumerate() {
            let h = &self.latency[i];
            let mut cumulative = 0;
            for (b, bound) in BUCKETS_S.iter().enumerate() {
                cumulative += h.buckets[b].load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "lockd_operation_duration_seconds_bucket{{op=\"{op}\",le=\"{bound}\"}} {cumulative}"
                );
            }
            let count = h.count.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "lockd_operation_duration_seconds_bucket{{op=\"{op}\",le=\"+Inf\"}} {count}"
            );
            let sum = h.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
            let _ = writeln!(
                out,
                "lockd_operation_duration_seconds_sum{{op=\"{op}\"}} {sum}"
            );
            let _ = writeln!(
                out,
                "lockd_operation_duration_seconds_count{{op=\"{op}\"}} {count}"
            );
        }
        out.push_str(
            "# HELP lockd_wait_seconds Time a lock call allowed to wait spent before its grant or timeout, by namespace and outcome.\n",
        );
        out.push_str("# TYPE lockd_wait_seconds histogram\n");
        for ((ns, outcome), h) in self
            .wait
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            let labels = format!("namespace=\"{}\",outcome=\"{outcome}\"", escape_label(ns));
            render_histogram(out, "lockd_wait_seconds", &labels, &h.snapshot());
        }
        out.push_str(
            "# HELP lockd_hold_seconds Time from a grant to its release or expiry, by namespace.\n",
        );
        out.push_str("# TYPE lockd_hold_seconds histogram\n");
        let holds: BTreeMap<String, HistogramSnapshot> = match store_holds {
            Some(store_holds) => {
                let mut folded = BTreeMap::<String, HistogramSnapshot>::new();
                for (ns, h) in store_holds {
                    folded.entry(self.namespaces.label(ns)).or_default().add(h);
                }
                folded
            }
            None => self
                .hold
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .map(|(ns, h)| (ns.clone(), h.snapshot()))
                .collect(),
        };
        for (ns, h) in &holds {
            let labels = format!("namespace=\"{}\"", escape_label(ns));
            render_histogram(out, "lockd_hold_seconds", &labels, h);
        }
    }
}

/// What a backend reports about itself for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendStats {
    /// Locks currently held (unexpired).
    pub locks_held: u64,
    /// Callers waiting in queues.
    pub waiters: u64,
    /// Durable commits (each one fsync) so far; 0 for stores that keep nothing.
    pub commits: u64,
    /// Journal ops in those commits: `committed_ops / commits` is the batch size.
    pub committed_ops: u64,
    /// Commits that failed.
    pub failed_commits: u64,
}

impl BackendStats {
    /// Appends the gauges and counters in Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let rows = [
            (
                "lockd_waiters",
                "gauge",
                "Callers waiting in lock queues.",
                self.waiters,
            ),
            (
                "lockd_store_commits_total",
                "counter",
                "Durable commits (fsync batches) of the store.",
                self.commits,
            ),
            (
                "lockd_store_committed_ops_total",
                "counter",
                "Operations in those commits; divided by commits, the batch size.",
                self.committed_ops,
            ),
            (
                "lockd_store_failed_commits_total",
                "counter",
                "Commits that failed.",
                self.failed_commits,
            ),
        ];
        for (name, kind, help, value) in rows {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        }
    }
}

/// How full a store's database is, for a store whose database has a size
/// limit and a history to compact (etcd: its `--quota-backend-bytes` and
/// its revisions). Stores without one report nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreSpace {
    /// Bytes the database takes, as the limit counts them (etcd: the
    /// `db_size` of the member asked, its file's high-water mark).
    pub db_size_bytes: u64,
    /// Bytes of it in use; the rest is free pages that later writes reuse
    /// (only defragmenting hands them back to the file system). 0 if the
    /// store does not tell (etcd before 3.4).
    pub db_size_in_use_bytes: u64,
    /// The size at which the store refuses writes (etcd: its quota).
    pub quota_bytes: u64,
    /// Whether the store refuses writes for lack of space now (etcd: a
    /// NOSPACE alarm is raised), until an operator acts.
    pub out_of_space: bool,
    /// Compactions of the store's history this host made.
    pub compactions: u64,
    /// Compactions this host tried that failed (refusals that another
    /// compaction already covered are not failures).
    pub failed_compactions: u64,
    /// The revision this host last compacted the history to, or found it
    /// already compacted to by another (0: none yet).
    pub compacted_revision: u64,
}

impl StoreSpace {
    /// Appends the gauges and counters in Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let rows = [
            (
                "lockd_store_db_size_bytes",
                "gauge",
                "Bytes the store's database takes, as its quota counts them.",
                self.db_size_bytes,
            ),
            (
                "lockd_store_db_size_in_use_bytes",
                "gauge",
                "Bytes of the store's database in use; the rest is free pages writes reuse.",
                self.db_size_in_use_bytes,
            ),
            (
                "lockd_store_quota_bytes",
                "gauge",
                "The database size at which the store refuses writes.",
                self.quota_bytes,
            ),
            (
                "lockd_store_out_of_space",
                "gauge",
                "1 while the store refuses writes for lack of space (etcd's NOSPACE alarm).",
                u64::from(self.out_of_space),
            ),
            (
                "lockd_store_compactions_total",
                "counter",
                "Compactions of the store's history this host made.",
                self.compactions,
            ),
            (
                "lockd_store_failed_compactions_total",
                "counter",
                "Compactions of the store's history this host tried that failed.",
                self.failed_compactions,
            ),
            (
                "lockd_store_compacted_revision",
                "gauge",
                "The revision this host last compacted (or found compacted) the store's history to.",
                self.compacted_revision,
            ),
        ];
        for (name, kind, help, value) in rows {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_labels_are_the_error_words() {
        assert_eq!(
            OUTCOMES,
            [
                "ok",
                "busy",
                "not_owner",
                "not_held",
                "invalid_argument",
                "denied",
                "unavailable"
            ]
        );
        assert_eq!(OUTCOMES[outcome_index(&Ok::<(), LockError>(()))], "ok");
        for (error, kind) in [
            (LockError::NotOwner, ErrorKind::NotOwner),
            (LockError::NotHeld, ErrorKind::NotHeld),
            (LockError::Denied("q".into()), ErrorKind::Denied),
            (LockError::Unavailable("d".into()), ErrorKind::Unavailable),
        ] {
            assert_eq!(OUTCOMES[outcome_index(&Err::<(), _>(error))], kind.as_str());
        }
        let metrics = Metrics::default();
        metrics.record::<()>(Op::Get, Duration::ZERO, &Err(LockError::NotHeld));
        assert_eq!(metrics.count(Op::Get, "not_held"), 1);
        assert_eq!(metrics.count(Op::Get, "ok"), 0);
    }

    #[test]
    fn store_space_renders_every_figure() {
        let space = StoreSpace {
            db_size_bytes: 7_000_000,
            db_size_in_use_bytes: 5_500_000,
            quota_bytes: 2 << 30,
            out_of_space: true,
            compactions: 3,
            failed_compactions: 1,
            compacted_revision: 42,
        };
        let mut out = String::new();
        space.render(&mut out);
        for line in [
            "lockd_store_db_size_bytes 7000000",
            "lockd_store_db_size_in_use_bytes 5500000",
            "lockd_store_quota_bytes 2147483648",
            "lockd_store_out_of_space 1",
            "lockd_store_compactions_total 3",
            "lockd_store_failed_compactions_total 1",
            "lockd_store_compacted_revision 42",
            "# TYPE lockd_store_compactions_total counter",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} missing from {out}");
        }
    }

    #[test]
    fn namespace_labels_stay_bounded() {
        let metrics = Metrics::default();
        for i in 0..100 {
            metrics.record_hold(&format!("ns-{i}"), Duration::from_millis(i));
            metrics.record_wait::<()>("ns-1", Duration::from_millis(3), &Err(LockError::NotHeld));
        }
        let stats: Vec<NamespaceStats> = (0..100)
            .map(|i| NamespaceStats {
                namespace: format!("ns-{i}"),
                persistent: 1,
                ephemeral: 2,
                waiters: 3,
            })
            .collect();
        let mut out = String::new();
        metrics.render(&mut out);
        metrics.render_namespaces(&stats, &mut out);
        let holds = out
            .lines()
            .filter(|l| l.starts_with("lockd_hold_seconds_count"))
            .count();
        assert_eq!(holds, MAX_NAMESPACE_LABELS + 1, "{out}");
        // The 68 namespaces past the first 32 are folded into one label.
        assert!(
            out.contains("lockd_hold_seconds_count{namespace=\"_other\"} 68"),
            "{out}"
        );
        assert!(
            out.contains("lockd_queue_depth{namespace=\"_other\"} 204"),
            "{out}"
        );
        assert!(out.contains("lockd_locks_held{namespace=\"ns-0\",durability=\"ephemeral\"} 2"));
        assert!(
            out.contains("lockd_wait_seconds_count{namespace=\"ns-1\",outcome=\"not_held\"} 100")
        );
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
