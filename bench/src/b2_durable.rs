//! B2, durable capability: 1, 8 and 64 concurrent callers of the lock API
//! (`LockService`, what the wasm glue and the REST API call) doing persistent
//! acquire + release pairs on the embedded redb store, against Redis with
//! `appendfsync always` and a single-node etcd at the same concurrency.

use std::fmt::Write as _;

use lockd_core::{Durability, Limits, LockOptions, LockService};

use crate::drive::Pair;
use crate::peers::RedisMode;
use crate::stats::{count, percentiles, ratio, Measured, Table};
use crate::{check_errors, Ctx, Peer};

/// One caller of the lock API: a fresh name per pair, released by token.
pub struct ServicePair {
    pub service: LockService,
    pub durability: Durability,
    owner: String,
    prefix: String,
}

impl ServicePair {
    pub fn new(service: &LockService, durability: Durability, caller: usize) -> Self {
        ServicePair {
            service: service.clone(),
            durability,
            owner: format!("owner-{caller}"),
            prefix: format!("c{caller}/"),
        }
    }
}

impl Pair for ServicePair {
    async fn pair(&mut self, i: u64) -> anyhow::Result<()> {
        let name = format!("{}{i}", self.prefix);
        let options = LockOptions {
            durability: self.durability,
            ..LockOptions::default()
        };
        let grant = self
            .service
            .lock("bench", &name, &self.owner, 30_000, options)
            .await?;
        self.service
            .unlock("bench", &name, &self.owner, Some(grant.fencing_token))
            .await?;
        Ok(())
    }
}

/// A reader: `get` of one held lock, timed one call at a time.
struct Reader {
    service: LockService,
}

impl Pair for Reader {
    async fn pair(&mut self, _: u64) -> anyhow::Result<()> {
        let held = self.service.get("bench", "read-me").await?;
        anyhow::ensure!(held.is_some(), "the lock read is not held");
        // A read that needs no wait completes without yielding: let the
        // writers beside it run, as a server's other requests would.
        tokio::task::yield_now().await;
        Ok(())
    }
}

/// Readers' `get` latency on a redb store, alone and beside `writers`
/// callers doing persistent pairs: what a read pays for showing nothing
/// before it is durable (it waits for the group commit in flight).
fn reads_under_writes(ctx: &Ctx, writers: usize) -> anyhow::Result<[Measured; 3]> {
    const READERS: usize = 4;
    let path = ctx.scratch.path().join(format!("b2-reads-{writers}.redb"));
    let _rt = ctx.rt.enter();
    let service = LockService::new(lockd_redb::open(&path)?, Limits::default());
    ctx.rt.block_on(service.lock(
        "bench",
        "read-me",
        "holder",
        3_600_000,
        LockOptions::default(),
    ))?;
    let readers = || {
        (0..READERS)
            .map(|_| Reader {
                service: service.clone(),
            })
            .collect::<Vec<_>>()
    };
    let alone = ctx.run(readers());
    check_errors("lockd reads", &alone)?;
    let writing: Vec<_> = (0..writers)
        .map(|c| ServicePair::new(&service, Durability::Persistent, c))
        .collect();
    let (beside, written) = ctx.rt.block_on(async {
        tokio::join!(
            crate::drive::closed_loop(readers(), ctx.window()),
            crate::drive::closed_loop(writing, ctx.window())
        )
    });
    check_errors("lockd reads beside writes", &beside)?;
    check_errors("lockd writes beside reads", &written)?;
    Ok([alone, beside, written])
}

/// Persistent pairs of `callers` callers on a fresh redb store named `name`.
pub fn redb_pairs(ctx: &Ctx, name: &str, callers: usize) -> anyhow::Result<Measured> {
    let path = ctx.scratch.path().join(format!("{name}.redb"));
    let _rt = ctx.rt.enter();
    let service = LockService::new(lockd_redb::open(&path)?, Limits::default());
    let measured = ctx.run(
        (0..callers)
            .map(|c| ServicePair::new(&service, Durability::Persistent, c))
            .collect(),
    );
    check_errors("lockd redb", &measured)?;
    Ok(measured)
}

pub fn run(ctx: &Ctx) -> anyhow::Result<String> {
    let mut table = Table::new([
        "callers",
        "system",
        "pairs/s",
        "p50",
        "p99",
        "p99.9",
        "lockd ÷ this",
    ]);
    let mut summary = String::new();
    for &callers in &ctx.plan.levels {
        eprintln!("B2: {callers} callers");
        let mut lockd = redb_pairs(ctx, &format!("b2-{callers}"), callers)?;
        let mut rows = vec![(
            "lockd, redb store (fsync per commit)".to_string(),
            lockd.clone(),
        )];
        for peer in [Peer::Redis(RedisMode::Always), Peer::Etcd] {
            rows.push((peer.label().to_string(), ctx.peer(peer, callers)?));
        }
        for (label, mut m) in rows.clone() {
            let [p50, p99, p999] = percentiles(&mut m);
            table.row(vec![
                callers.to_string(),
                label,
                count(m.rate()),
                p50,
                p99,
                p999,
                ratio(lockd.rate(), m.rate()),
            ]);
        }
        let _ = writeln!(
            summary,
            "- {callers} callers: lockd {} pairs/s = {} Redis always, {} etcd.",
            count(lockd.rate()),
            ratio(lockd.rate(), rows[1].1.rate()),
            ratio(lockd.rate(), rows[2].1.rate()),
        );
        if callers == 1 {
            // fdatasync's speed drifts on this kind of machine: compare
            // with a probe taken right after the pairs, not at the start.
            let rounds = if ctx.plan.smoke { 50 } else { 1_000 };
            let now = crate::fsync::probe(ctx.scratch.path(), rounds)?;
            let p50 = lockd.latencies.quantile(0.5);
            let _ = writeln!(
                summary,
                "- 1 caller: pair p50 {} = {} one fdatasync p50 ({}, probed right after; goal ≤ 2×); a pair is two durable commits.",
                crate::stats::latency(p50),
                ratio(p50.as_secs_f64(), now.p50.as_secs_f64()),
                crate::stats::latency(now.p50),
            );
        }
    }
    let writers = *ctx.plan.levels.last().unwrap_or(&1);
    eprintln!("B2: reads beside {writers} writers");
    let [mut alone, mut beside, written] = reads_under_writes(ctx, writers)?;
    let mut reads = Table::new([
        "4 readers of one held lock (`get`)",
        "gets/s",
        "p50",
        "p99",
        "p99.9",
        "writers' pairs/s",
    ]);
    for (label, m, writes) in [
        ("store idle".to_string(), &mut alone, "-".to_string()),
        (
            format!("beside {writers} callers doing persistent pairs"),
            &mut beside,
            count(written.rate()),
        ),
    ] {
        let [p50, p99, p999] = percentiles(m);
        reads.row(vec![label, count(m.rate()), p50, p99, p999, writes]);
    }
    let mut out = String::from("## B2 durable capability\n\n");
    out += &table.render();
    out.push('\n');
    out += &summary;
    out += "\nReads under write load: a read shows nothing that is not durable, so beside writers it waits for the commit in flight.\n\n";
    out += &reads.render();
    Ok(out)
}
