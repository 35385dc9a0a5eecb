//! B9, TLS: REST lock + unlock pairs on keep-alive connections (64 in a full
//! run), persistent (redb, fsync) and ephemeral, over HTTPS against plain
//! HTTP on the same server build, and against Redis over TLS (`--tls-port`,
//! `appendfsync always` for persistent, no persistence for ephemeral) with
//! the plain Redis figures beside. Every certificate comes from a throwaway
//! CA made by the run; every client (lockd's lean HTTP/1.1 one, the redis
//! crate) is rustls with ring and trusts that CA alone.
//!
//! Goals (issue 21): TLS costs lockd at most 15 % of its plain rate, and
//! lockd over TLS does at least as many pairs as Redis over TLS.

use std::fmt::Write as _;

use lockd::config::{LockdConfig, TlsConfig};
use lockd_api::DurabilityWord;
use lockd_testing::certs::TestPki;

use crate::peers::{Redis, RedisMode, RedisPair, RedisTls};
use crate::rest::{tls_client, RestPair, Server};
use crate::stats::{count, latency, ratio, Measured, Table};
use crate::{check_errors, Ctx, Peer};

/// One durability's four figures.
struct Figures {
    plain: Measured,
    tls: Measured,
    redis_tls: Measured,
    redis_plain: Measured,
}

pub fn run(ctx: &Ctx) -> anyhow::Result<String> {
    let clients = ctx.plan.b4_connections;
    eprintln!("B9: {clients} connections, plain HTTP and TLS");
    let pki = TestPki::new(&ctx.scratch.path().join("b9-pki"));
    let lockd_cert = pki.server("lockd");
    let connector = tls_client(pki.ca())?;

    let plain_server = Server::start(ctx.scratch.path().join("b9-plain.redb"), None)?;
    let tls_server = Server::start_with(
        ctx.scratch.path().join("b9-tls.redb"),
        None,
        LockdConfig {
            tls: TlsConfig {
                cert: Some(lockd_cert.cert),
                key: Some(lockd_cert.key),
                client_ca: None,
            },
            ..LockdConfig::default()
        },
    )?;
    let mut negotiated = String::new();
    let mut lockd = |durability: DurabilityWord, over_tls: bool| -> anyhow::Result<Measured> {
        let label = format!(
            "lockd REST {durability} over {}",
            if over_tls { "TLS" } else { "plain HTTP" }
        );
        let m = if over_tls {
            let callers = ctx.rt.block_on(async {
                let mut callers = Vec::new();
                for c in 0..clients {
                    callers.push(
                        RestPair::connect_tls(tls_server.addr, &connector, c, durability).await?,
                    );
                }
                anyhow::Ok(callers)
            })?;
            negotiated = callers[0].negotiated();
            ctx.run(callers)
        } else {
            let callers = ctx.rt.block_on(async {
                let mut callers = Vec::new();
                for c in 0..clients {
                    callers.push(RestPair::connect(plain_server.addr, c, durability).await?);
                }
                anyhow::Ok(callers)
            })?;
            ctx.run(callers)
        };
        check_errors(&label, &m)?;
        Ok(m)
    };
    // Plain and TLS back to back, so that both see the same machine.
    let durable_plain = lockd(DurabilityWord::Persistent, false)?;
    let durable_tls = lockd(DurabilityWord::Persistent, true)?;
    let ephemeral_plain = lockd(DurabilityWord::Ephemeral, false)?;
    let ephemeral_tls = lockd(DurabilityWord::Ephemeral, true)?;
    drop((plain_server, tls_server));

    let redis_tls = RedisTls {
        server: pki.server("redis"),
        ca: pki.ca().to_path_buf(),
    };
    let redis_over_tls = |mode: RedisMode| -> anyhow::Result<Measured> {
        let redis = Redis::start_tls(mode, &redis_tls)?;
        let callers = ctx.rt.block_on(async {
            let mut callers = Vec::new();
            for c in 0..clients {
                callers.push(RedisPair::connect(&redis.client, c).await?);
            }
            anyhow::Ok(callers)
        })?;
        let m = ctx.run(callers);
        check_errors(&format!("{} over TLS", mode.label()), &m)?;
        Ok(m)
    };
    let durable = Figures {
        plain: durable_plain,
        tls: durable_tls,
        redis_tls: redis_over_tls(RedisMode::Always)?,
        redis_plain: ctx.peer(Peer::Redis(RedisMode::Always), clients)?,
    };
    let ephemeral = Figures {
        plain: ephemeral_plain,
        tls: ephemeral_tls,
        redis_tls: redis_over_tls(RedisMode::NoPersistence)?,
        redis_plain: ctx.peer(Peer::Redis(RedisMode::NoPersistence), clients)?,
    };

    let mut table = Table::new(["system", "pairs/s", "p50", "p99"]);
    for (kind, redis_mode, figures) in [
        ("persistent (redb, fsync)", RedisMode::Always, &durable),
        ("ephemeral", RedisMode::NoPersistence, &ephemeral),
    ] {
        for (label, m) in [
            (format!("lockd REST {kind}, plain HTTP"), &figures.plain),
            (format!("lockd REST {kind}, TLS"), &figures.tls),
            (format!("{}, TLS", redis_mode.label()), &figures.redis_tls),
            (
                format!("{}, plain", redis_mode.label()),
                &figures.redis_plain,
            ),
        ] {
            let mut m = m.clone();
            table.row(vec![
                label,
                count(m.rate()),
                latency(m.latencies.quantile(0.50)),
                latency(m.latencies.quantile(0.99)),
            ]);
        }
    }
    let mut out = format!("## B9 TLS ({clients} keep-alive connections)\n\n");
    let _ = writeln!(
        out,
        "lockd's HTTPS listener ({negotiated}, HTTP/1.1) and plain listener, same build, one \
         redb store each; Redis with `--tls-port` on the same CA.\n"
    );
    out += &table.render();
    out.push('\n');
    for (kind, f) in [("persistent", &durable), ("ephemeral", &ephemeral)] {
        let _ = writeln!(
            out,
            "- {kind}: TLS costs lockd {:.1} % of its plain rate (goal ≤ 15 %); lockd TLS ÷ Redis \
             TLS {} (goal ≥ 1×); Redis's own TLS cost {:.1} %.",
            cost(&f.tls, &f.plain),
            ratio(f.tls.rate(), f.redis_tls.rate()),
            cost(&f.redis_tls, &f.redis_plain),
        );
    }
    Ok(out)
}

/// 1 - TLS / plain, in percent.
fn cost(tls: &Measured, plain: &Measured) -> f64 {
    (1.0 - tls.rate() / plain.rate().max(1e-9)) * 100.0
}
