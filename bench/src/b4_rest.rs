//! B4, REST: keep-alive connections (64 in a full run) doing lock + unlock
//! pairs over lockd's REST API, durable and ephemeral, against Redis
//! (`appendfsync always` for durable, no persistence for ephemeral) and etcd
//! with the same number of clients. Server and clients share the machine's
//! two cores, as a Redis server and its clients do.

use std::fmt::Write as _;

use lockd_api::DurabilityWord;

use crate::peers::RedisMode;
use crate::rest::{RestPair, Server};
use crate::stats::{count, rate_row, ratio, Table};
use crate::{check_errors, Ctx, Peer};

pub fn run(ctx: &Ctx) -> anyhow::Result<String> {
    let clients = ctx.plan.b4_connections;
    eprintln!("B4: {clients} connections");
    let server = Server::start(ctx.scratch.path().join("b4.redb"), None)?;
    let measure = |durability: DurabilityWord| -> anyhow::Result<crate::stats::Measured> {
        let callers = ctx.rt.block_on(async {
            let mut callers = Vec::new();
            for c in 0..clients {
                callers.push(RestPair::connect(server.addr, c, durability).await?);
            }
            anyhow::Ok(callers)
        })?;
        let m = ctx.run(callers);
        check_errors(&format!("lockd REST {durability}"), &m)?;
        Ok(m)
    };
    let (commits_before, ops_before) = server.commits();
    let durable = measure(DurabilityWord::Persistent)?;
    let (commits_after, ops_after) = server.commits();
    let (commits, committed) = (commits_after - commits_before, ops_after - ops_before);
    let ephemeral = measure(DurabilityWord::Ephemeral)?;
    drop(server);

    let always = ctx.peer(Peer::Redis(RedisMode::Always), clients)?;
    let volatile = ctx.peer(Peer::Redis(RedisMode::NoPersistence), clients)?;
    let etcd = ctx.peer(Peer::Etcd, clients)?;

    let mut table = Table::new([
        "system",
        "pairs/s",
        "p50",
        "p99",
        "p99.9",
        "server CPU per pair",
        "client CPU per pair",
    ]);
    for (label, mut m) in [
        ("lockd REST, persistent (redb, fsync)", durable.clone()),
        ("lockd REST, ephemeral", ephemeral.clone()),
        (Peer::Redis(RedisMode::Always).label(), always.clone()),
        (
            Peer::Redis(RedisMode::NoPersistence).label(),
            volatile.clone(),
        ),
        (Peer::Etcd.label(), etcd.clone()),
    ] {
        table.row(rate_row(label.into(), &mut m));
    }
    let mut out = format!("## B4 REST ({clients} keep-alive connections)\n\n");
    out += &table.render();
    let _ = writeln!(
        out,
        "\n- durable: {} Redis always (goal ≥ 1.2×), {} etcd (goal ≥ 4×).\n- ephemeral: {} Redis with no persistence (goal ≥ 1.2×).",
        ratio(durable.rate(), always.rate()),
        ratio(durable.rate(), etcd.rate()),
        ratio(ephemeral.rate(), volatile.rate()),
    );
    let _ = writeln!(
        out,
        "- group commit, durable run (warm-up included): {} commits (fsyncs) for {} store operations, {:.1} per commit, with {clients} connections.",
        count(commits as f64),
        count(committed as f64),
        committed as f64 / commits.max(1) as f64,
    );
    let _ = writeln!(
        out,
        "- CPU per pair: the server's (lockd's threads; Redis's and etcd's processes) and the load \
         generator's, over the measured window (/proc; the two share the machine's cores)."
    );
    Ok(out)
}
