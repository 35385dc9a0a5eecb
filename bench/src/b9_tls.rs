//! B9, TLS: REST lock + unlock pairs on keep-alive connections (64 in a full
//! run), persistent (redb, fsync) and ephemeral, over HTTPS against plain
//! HTTP on the same server build, and against Redis over TLS (`--tls-port`,
//! `appendfsync always` for persistent, no persistence for ephemeral) with
//! the plain Redis figures beside. Every certificate comes from a throwaway
//! CA made by the run; every client (lockd's lean HTTP/1.1 one, the redis
//! crate) is rustls with ring and trusts that CA alone.
//!
//! Each figure is the median of [`ROUNDS`] rounds, each round measuring all
//! eight in turn.
//!
//! Goals (issue 21): TLS costs lockd at most 15 % of its plain rate, and
//! lockd over TLS does at least as many pairs as Redis over TLS.

use std::fmt::Write as _;

use lockd_api::DurabilityWord;
use lockd_server::config::{LockdConfig, TlsConfig};
use lockd_test_support::certs::TestPki;

use crate::peers::{Redis, RedisMode, RedisPair, RedisTls};
use crate::rest::{tls_client, RestPair, Server};
use crate::stats::{count, cpu_per_op, latency, ratio, Measured, Table};
use crate::{check_errors, Ctx};

/// Rounds of a full run (a smoke run has one).
const ROUNDS: usize = 5;

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
    let redis_tls = RedisTls {
        server: pki.server("redis"),
        ca: pki.ca().to_path_buf(),
    };
    let redis_tls_always = Redis::start_tls(RedisMode::Always, &redis_tls)?;
    let redis_tls_none = Redis::start_tls(RedisMode::NoPersistence, &redis_tls)?;
    let redis = |client: &redis::Client, label: &str| -> anyhow::Result<Measured> {
        let callers = ctx.rt.block_on(async {
            let mut callers = Vec::new();
            for c in 0..clients {
                callers.push(RedisPair::connect(client, c).await?);
            }
            anyhow::Ok(callers)
        })?;
        let m = ctx.run(callers);
        check_errors(label, &m)?;
        Ok(m)
    };
    let redis_plain_always = ctx.redis_client(RedisMode::Always)?;
    let redis_plain_none = ctx.redis_client(RedisMode::NoPersistence)?;

    // Every round measures all eight figures in turn, lockd's plain and TLS
    // back to back: this disk's fsync latency varies several-fold from one
    // minute to the next, and a slow spell must fall on every system alike.
    let rounds = if ctx.plan.smoke { 1 } else { ROUNDS };
    let mut durable_rounds = Vec::with_capacity(rounds);
    let mut ephemeral_rounds = Vec::with_capacity(rounds);
    for round in 1..=rounds {
        eprintln!("B9: round {round} of {rounds}");
        durable_rounds.push(Figures {
            plain: lockd(DurabilityWord::Persistent, false)?,
            tls: lockd(DurabilityWord::Persistent, true)?,
            redis_tls: redis(&redis_tls_always.client, "Redis always over TLS")?,
            redis_plain: redis(&redis_plain_always, "Redis always")?,
        });
        ephemeral_rounds.push(Figures {
            plain: lockd(DurabilityWord::Ephemeral, false)?,
            tls: lockd(DurabilityWord::Ephemeral, true)?,
            redis_tls: redis(&redis_tls_none.client, "Redis no persistence over TLS")?,
            redis_plain: redis(&redis_plain_none, "Redis no persistence")?,
        });
    }
    drop((plain_server, tls_server, redis_tls_always, redis_tls_none));
    let durable = Figures::median(&durable_rounds);
    let ephemeral = Figures::median(&ephemeral_rounds);

    let mut table = Table::new([
        "system",
        "pairs/s",
        "p50",
        "p99",
        "server CPU per pair",
        "client CPU per pair",
    ]);
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
            let [server_cpu, client_cpu] = cpu_per_op(&m);
            table.row(vec![
                label,
                count(m.rate()),
                latency(m.latencies.quantile(0.50)),
                latency(m.latencies.quantile(0.99)),
                server_cpu,
                client_cpu,
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
    let _ = writeln!(
        out,
        "Each figure is the median of {rounds} rounds; a round measures all eight in turn.\n"
    );
    for (kind, f, all) in [
        ("persistent", &durable, &durable_rounds),
        ("ephemeral", &ephemeral, &ephemeral_rounds),
    ] {
        let (low, high) = spread(
            all.iter()
                .map(|r| r.tls.rate() / r.redis_tls.rate().max(1e-9)),
        );
        let _ = writeln!(
            out,
            "- {kind}: TLS costs lockd {:.1} % of its plain rate (goal ≤ 15 %); lockd TLS ÷ Redis \
             TLS {} (goal ≥ 1×; {low:.2}–{high:.2} in single rounds); Redis's own TLS cost {:.1} %.",
            cost(&f.tls, &f.plain),
            ratio(f.tls.rate(), f.redis_tls.rate()),
            cost(&f.redis_tls, &f.redis_plain),
        );
    }
    Ok(out)
}

impl Figures {
    /// Each figure's median round by rate.
    fn median(rounds: &[Figures]) -> Figures {
        let pick = |of: fn(&Figures) -> &Measured| {
            let mut all: Vec<&Measured> = rounds.iter().map(of).collect();
            all.sort_by(|a, b| a.rate().total_cmp(&b.rate()));
            all[all.len() / 2].clone()
        };
        Figures {
            plain: pick(|f| &f.plain),
            tls: pick(|f| &f.tls),
            redis_tls: pick(|f| &f.redis_tls),
            redis_plain: pick(|f| &f.redis_plain),
        }
    }
}

/// The lowest and highest of `values`.
fn spread(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(low, high), v| {
        (low.min(v), high.max(v))
    })
}

/// 1 - TLS / plain, in percent.
fn cost(tls: &Measured, plain: &Measured) -> f64 {
    (1.0 - tls.rate() / plain.rate().max(1e-9)) * 100.0
}
