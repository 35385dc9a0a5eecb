//! B6, etcd mode: lockd's etcd store (`lockd-etcd`, what `--store etcd:`
//! serves) doing persistent lock + unlock pairs through the lock API,
//! against raw etcd-client transaction pairs on the same single-node etcd,
//! and against lockd's embedded store: the latency cost of scaling out.
//! Then 1 to 3 lockd hosts on a 3-member cluster (`b6_growth.rs`).

use std::fmt::Write as _;
use std::sync::Arc;

use lockd_core::{Durability, Limits, LockService, SystemClock};
use lockd_etcd::{EtcdBackend, EtcdOptions};

use crate::b2_durable::ServicePair;
use crate::stats::{count, percentiles, ratio, Table};
use crate::{check_errors, Ctx, Peer};

pub fn run(ctx: &Ctx) -> anyhow::Result<String> {
    let endpoints = ctx.etcd_endpoints()?;
    let mut table = Table::new([
        "callers",
        "system",
        "pairs/s",
        "p50",
        "p99",
        "p99.9",
        "p50 ÷ raw etcd p50",
    ]);
    let mut summary = String::new();
    for callers in [1usize, 8] {
        eprintln!("B6: {callers} callers");
        let mut etcd_store = {
            let _rt = ctx.rt.enter();
            let backend = ctx.rt.block_on(EtcdBackend::connect(
                EtcdOptions {
                    prefix: format!("/lockd-bench-{callers}"),
                    ..EtcdOptions::new(endpoints.clone())
                },
                Arc::new(SystemClock),
            ))?;
            let service = LockService::new(Arc::new(backend), Limits::default());
            ctx.run(
                (0..callers)
                    .map(|c| ServicePair::new(&service, Durability::Persistent, c))
                    .collect(),
            )
        };
        check_errors("lockd on etcd", &etcd_store)?;
        let mut raw = ctx.peer(Peer::Etcd, callers)?;
        let mut embedded = crate::b2_durable::redb_pairs(ctx, &format!("b6-{callers}"), callers)?;
        let raw_p50 = raw.latencies.quantile(0.5).as_secs_f64();
        for (label, m) in [
            ("lockd, etcd store", &mut etcd_store),
            ("raw etcd-client txn pairs", &mut raw),
            ("lockd, embedded redb store", &mut embedded),
        ] {
            let p50 = m.latencies.quantile(0.5).as_secs_f64();
            let [a, b, c] = percentiles(m);
            table.row(vec![
                callers.to_string(),
                label.into(),
                count(m.rate()),
                a,
                b,
                c,
                ratio(p50, raw_p50),
            ]);
        }
        let _ = writeln!(
            summary,
            "- {callers} callers: lockd on etcd p50 is {} raw etcd's (goal ≤ 1.3×); {} the embedded store's.",
            ratio(etcd_store.latencies.quantile(0.5).as_secs_f64(), raw_p50),
            ratio(
                etcd_store.latencies.quantile(0.5).as_secs_f64(),
                embedded.latencies.quantile(0.5).as_secs_f64()
            ),
        );
    }
    let mut out = String::from("## B6 etcd mode\n\n### One lockd host on a single-node etcd\n\n");
    out += &table.render();
    out.push('\n');
    out += &summary;
    out.push('\n');
    out += &crate::b6_growth::run(ctx)?;
    Ok(out)
}
