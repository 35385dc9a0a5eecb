//! B10, beyond the mutex (docs/contract.md C21, C22): persistent grants on
//! the embedded redb store through the lock API (`LockService`, what the
//! wasm glue and the REST API call), in one run:
//! - 64 callers doing shared acquire + release pairs on one name, against
//!   64 callers doing exclusive pairs each on names of its own (the same
//!   work, uncontended: what a shared grant costs over an exclusive one) and
//!   64 callers doing exclusive pairs on one name (what a read-write lock
//!   saves readers);
//! - a semaphore of 8 permits under 64 contenders that wait their turn:
//!   grants per second, and the pair's latency, which is mostly the wait.

use std::fmt::Write as _;

use lockd_core::{Claim, Durability, Limits, LockOptions, LockService};

use crate::drive::Pair;
use crate::stats::{count, percentiles, ratio, Measured, Table};
use crate::{check_errors, Ctx};

/// The semaphore's size in the contended row.
const PERMITS: u32 = 8;

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

fn one_name(ctx: &Ctx, store: &str, name: &'static str, claim: Claim) -> anyhow::Result<Measured> {
    let path = ctx.scratch.path().join(format!("b10-{store}.redb"));
    let _rt = ctx.rt.enter();
    let service = LockService::new(lockd_redb::open(&path)?, Limits::default());
    let callers = (0..64)
        .map(|c| OneName {
            service: service.clone(),
            owner: format!("owner-{c}"),
            name,
            claim,
        })
        .collect();
    let measured = ctx.run(callers);
    check_errors(store, &measured)?;
    Ok(measured)
}

pub fn run(ctx: &Ctx) -> anyhow::Result<String> {
    eprintln!("B10: exclusive pairs, 64 callers, a name each");
    let mut exclusive_own = crate::b2_durable::redb_pairs(ctx, "b10-exclusive", 64)?;
    eprintln!("B10: shared pairs, 64 callers, one name");
    let mut shared = one_name(ctx, "shared", "read-mostly", Claim::Shared)?;
    eprintln!("B10: exclusive pairs, 64 callers, one name");
    let mut exclusive_one = one_name(ctx, "exclusive-one", "contended", Claim::Exclusive)?;
    eprintln!("B10: a semaphore of {PERMITS} permits, 64 contenders");
    let mut permits = one_name(ctx, "semaphore", "pool", Claim::Permit { permits: PERMITS })?;

    let mut table = Table::new([
        "64 callers, persistent pairs on redb",
        "pairs/s",
        "p50",
        "p99",
        "p99.9",
        "÷ exclusive, a name each",
    ]);
    let base = exclusive_own.rate();
    let rows: [(&str, &mut Measured); 4] = [
        ("exclusive, a name each", &mut exclusive_own),
        ("shared, one name", &mut shared),
        ("exclusive, one name (waiting in turn)", &mut exclusive_one),
        (
            "a permit of a semaphore of 8, one name (waiting in turn)",
            &mut permits,
        ),
    ];
    for (label, m) in rows {
        let rate = m.rate();
        let [p50, p99, p999] = percentiles(m);
        table.row(vec![
            label.to_string(),
            count(rate),
            p50,
            p99,
            p999,
            ratio(rate, base),
        ]);
    }
    let mut out = String::from("## B10 shared locks and semaphores\n\n");
    out += &table.render();
    out.push('\n');
    let _ = writeln!(
        out,
        "- Shared pairs on one name run at {} of exclusive pairs on names of their own, and {} of exclusive pairs on that one name.",
        ratio(shared.rate(), base),
        ratio(shared.rate(), exclusive_one.rate()),
    );
    let _ = writeln!(
        out,
        "- The semaphore grants {} permits/s to 64 contenders, never more than {PERMITS} at once; a pair's latency is mostly its wait in the queue.",
        count(permits.rate()),
    );
    Ok(out)
}
