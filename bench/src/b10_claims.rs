//! B10, beyond the mutex (docs/contract.md C21, C22): persistent grants
//! through the lock API (`LockService`, what the wasm glue and the REST API
//! call), on the embedded redb store and on lockd's etcd store (over the
//! suite's single-node etcd), each in one run:
//! - 64 callers (4 in a smoke run) doing shared acquire + release pairs on
//!   one name, against as many doing exclusive pairs each on names of its
//!   own (the same work, uncontended: what a shared grant costs over an
//!   exclusive one) and as many doing exclusive pairs on one name (what a
//!   read-write lock saves readers);
//! - a semaphore of 8 permits under as many contenders, waiting their turn:
//!   grants per second, and the pair's latency, which is mostly the wait.
//!
//! Then the leader failover rows (`b10_failover.rs`).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use lockd_core::{Claim, Durability, Limits, LockOptions, LockService, SystemClock};
use lockd_etcd::{EtcdBackend, EtcdOptions};

use crate::b2_durable::ServicePair;
use crate::b6_growth::{Counters, Counting};
use crate::drive::Pair;
use crate::stats::{count, percentiles, ratio, Measured, Table};
use crate::{check_errors, Ctx};

/// The semaphore's size in the contended row.
const PERMITS: u32 = 8;

/// The stores the rows run on.
#[derive(Clone, Copy, Debug)]
enum Store {
    Redb,
    Etcd,
}

impl Store {
    fn label(self) -> &'static str {
        match self {
            Store::Redb => "redb",
            Store::Etcd => "etcd",
        }
    }

    /// A lock service on a fresh store of this kind for the row `row`: a
    /// new redb file, or a prefix of its own on the suite's etcd.
    fn service(self, ctx: &Ctx, row: &str) -> anyhow::Result<LockService> {
        let _rt = ctx.rt.enter();
        let backend: Arc<dyn lockd_core::LockBackend> = match self {
            Store::Redb => lockd_redb::open(ctx.scratch.path().join(format!("b10-{row}.redb")))?,
            Store::Etcd => Arc::new(ctx.rt.block_on(EtcdBackend::connect(
                EtcdOptions {
                    prefix: format!("/lockd-b10-{row}"),
                    ..EtcdOptions::new(ctx.etcd_endpoints()?)
                },
                Arc::new(SystemClock),
            ))?),
        };
        Ok(LockService::new(backend, Limits::default()))
    }
}

/// One caller taking `claim` of one name shared by all callers, waiting
/// its turn, and releasing by token.
struct OneName {
    service: LockService,
    owner: String,
    name: &'static str,
    claim: Claim,
}

impl Pair for OneName {
    async fn pair(&mut self, _: u64) -> anyhow::Result<()> {
        let options = LockOptions {
            claim: self.claim,
            wait_ms: 60_000,
            durability: Durability::Persistent,
            ..LockOptions::default()
        };
        let grant = self
            .service
            .lock("bench", self.name, &self.owner, 30_000, options)
            .await?;
        self.service
            .unlock("bench", self.name, &self.owner, Some(grant.fencing_token))
            .await?;
        Ok(())
    }
}

/// A row's figures: the pairs, and on etcd the transactions each pair
/// cost etcd (its `/metrics` around the run, warm-up included; lockd's etcd
/// store reads inside transactions too).
struct Row {
    measured: Measured,
    etcd_txns_per_pair: Option<f64>,
}

/// Runs `callers` closed-loop on `store`, with etcd's counters scraped
/// around the run on etcd.
fn measure<P: Pair>(ctx: &Ctx, store: Store, what: &str, callers: Vec<P>) -> anyhow::Result<Row> {
    let done = Arc::new(AtomicU64::new(0));
    let callers = callers
        .into_iter()
        .map(|inner| Counting {
            inner,
            pairs: done.clone(),
        })
        .collect();
    let endpoints = match store {
        Store::Redb => None,
        Store::Etcd => Some(ctx.etcd_endpoints()?),
    };
    let before = endpoints.as_deref().map(Counters::scrape).transpose()?;
    let measured = ctx.run(callers);
    let after = endpoints.as_deref().map(Counters::scrape).transpose()?;
    check_errors(&format!("B10 {what} on {}", store.label()), &measured)?;
    let pairs = done.load(Ordering::Relaxed).max(1) as f64;
    let etcd_txns_per_pair = before
        .zip(after)
        .map(|(before, after)| (after.sum("rpc:Txn") - before.sum("rpc:Txn")) / pairs);
    Ok(Row {
        measured,
        etcd_txns_per_pair,
    })
}

/// The plan's callers doing exclusive pairs, each on names of its own.
fn names_of_their_own(ctx: &Ctx, store: Store) -> anyhow::Result<Row> {
    let service = store.service(ctx, &format!("{}-exclusive-own", store.label()))?;
    let callers = (0..ctx.plan.b10_callers)
        .map(|c| ServicePair::new(&service, Durability::Persistent, c))
        .collect();
    measure(ctx, store, "exclusive pairs", callers)
}

/// The plan's callers doing `claim` pairs on the one name `name`.
fn one_name(ctx: &Ctx, store: Store, name: &'static str, claim: Claim) -> anyhow::Result<Row> {
    let service = store.service(ctx, &format!("{}-{name}", store.label()))?;
    let callers = (0..ctx.plan.b10_callers)
        .map(|c| OneName {
            service: service.clone(),
            owner: format!("owner-{c}"),
            name,
            claim,
        })
        .collect();
    measure(ctx, store, name, callers)
}

/// The four rows of one store, in the table's order.
fn rows(ctx: &Ctx, store: Store) -> anyhow::Result<[(&'static str, Row); 4]> {
    let on = store.label();
    let callers = ctx.plan.b10_callers;
    eprintln!("B10 {on}: exclusive pairs, {callers} callers, a name each");
    let exclusive_own = names_of_their_own(ctx, store)?;
    eprintln!("B10 {on}: shared pairs, {callers} callers, one name");
    let shared = one_name(ctx, store, "read-mostly", Claim::Shared)?;
    eprintln!("B10 {on}: exclusive pairs, {callers} callers, one name");
    let exclusive_one = one_name(ctx, store, "contended", Claim::Exclusive)?;
    eprintln!("B10 {on}: a semaphore of {PERMITS} permits, {callers} contenders");
    let permits = one_name(ctx, store, "pool", Claim::Permit { permits: PERMITS })?;
    Ok([
        ("exclusive, a name each", exclusive_own),
        ("shared, one name", shared),
        ("exclusive, one name (waiting in turn)", exclusive_one),
        (
            "a permit of a semaphore of 8, one name (waiting in turn)",
            permits,
        ),
    ])
}

pub fn run(ctx: &Ctx) -> anyhow::Result<String> {
    let callers = ctx.plan.b10_callers;
    let mut table = Table::new([
        "persistent pairs",
        "store",
        "pairs/s",
        "p50",
        "p99",
        "p99.9",
        "÷ exclusive, a name each (same store)",
        "etcd txns per pair",
    ]);
    let mut summary = String::new();
    for store in [Store::Redb, Store::Etcd] {
        let mut rows = rows(ctx, store)?;
        let base = rows[0].1.measured.rate();
        for (label, row) in &mut rows {
            let rate = row.measured.rate();
            let [p50, p99, p999] = percentiles(&mut row.measured);
            table.row(vec![
                label.to_string(),
                store.label().into(),
                count(rate),
                p50,
                p99,
                p999,
                ratio(rate, base),
                row.etcd_txns_per_pair
                    .map_or("-".into(), |txns| format!("{txns:.1}")),
            ]);
        }
        let [_, shared, exclusive_one, permits] = rows.each_mut().map(|(_, row)| &mut row.measured);
        let _ = writeln!(
            summary,
            "- {}: shared pairs on one name run at {} of exclusive pairs on names of their own, and {} of exclusive pairs on that one name. The semaphore grants {} permits/s to {callers} contenders (wait p99 {}), never more than {PERMITS} at once; a pair's latency is mostly its wait in the queue.",
            store.label(),
            ratio(shared.rate(), base),
            ratio(shared.rate(), exclusive_one.rate()),
            count(permits.rate()),
            crate::stats::latency(permits.latencies.quantile(0.99)),
        );
    }
    let mut out =
        format!("## B10 shared locks and semaphores ({callers} callers in every row)\n\n");
    out += &table.render();
    out.push('\n');
    out += &summary;
    out.push('\n');
    out += &crate::b10_failover::run(ctx)?;
    Ok(out)
}
