//! B6, growth: 1, 2 and 3 lockd hosts sharing one 3-member etcd cluster,
//! with the same callers in total, split evenly across the hosts. Each host
//! is a `lockd serve --store etcd:…` of its own (its own runtime, its own
//! etcd connection and events watch), driven over REST; raw etcd-client
//! transaction pairs on the same cluster, with the same callers, are the
//! ceiling. Where the time goes comes from etcd's own counters
//! (`/metrics`), scraped before and after each run: client RPCs, Raft
//! proposals, WAL fsyncs, watch events and CPU seconds, per lock pair.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use lockd_api::DurabilityWord;
use lockd_etcd::EtcdOptions;
use lockd_server::config::LockdConfig;
use lockd_server::store::StoreSpec;
use lockd_test_support::etcd::EtcdCluster;

use crate::drive::Pair;
use crate::peers::EtcdRawPair;
use crate::rest::{RestPair, Server};
use crate::stats::{count, latency, ratio, Measured, Table};
use crate::{check_errors, Ctx};

/// Members of the etcd cluster.
const MEMBERS: usize = 3;
/// The lockd hosts tried, one after the other.
const HOSTS: [usize; 3] = [1, 2, 3];

/// A caller that counts every pair it does, warm-up and tail included, so
/// that etcd's counters (scraped around the whole run) divide by the pairs
/// that moved them.
pub struct Counting<P> {
    pub inner: P,
    pub pairs: Arc<AtomicU64>,
}

impl<P: Pair> Pair for Counting<P> {
    async fn pair(&mut self, i: u64) -> anyhow::Result<()> {
        let result = self.inner.pair(i).await;
        self.pairs.fetch_add(1, Ordering::Relaxed);
        result
    }
}

/// One run: its latencies and rate, and what it cost etcd per pair.
struct Row {
    callers: usize,
    system: String,
    measured: Measured,
    cost: Cost,
}

/// etcd's counters over a run, per lock pair.
struct Cost {
    /// Client RPCs by method (`Txn`, `Range`, `LeaseGrant`...), all members.
    rpcs: HashMap<String, f64>,
    /// Raft proposals committed (one member's count: all commit the same).
    proposals: f64,
    /// WAL fsyncs, all members, and their mean duration.
    fsyncs: f64,
    fsync_mean: Duration,
    /// Watch events sent to watchers, all members.
    watch_events: f64,
    /// CPU seconds of the members, and of this process (the lockd hosts and
    /// the callers).
    etcd_cpu: f64,
    lockd_cpu: f64,
}

pub fn run(ctx: &Ctx) -> anyhow::Result<String> {
    let cluster = EtcdCluster::start_members(MEMBERS).context("starting a 3-member etcd")?;
    let endpoints = cluster.endpoints();
    let totals: &[usize] = if ctx.plan.smoke { &[3] } else { &[3, 24] };
    let client = ctx
        .rt
        .block_on(etcd_client::Client::connect(endpoints.clone(), None))?;
    let mut rows = Vec::new();
    for &total in totals {
        eprintln!("B6 growth: {total} callers, raw etcd");
        let raw = (0..total)
            .map(|c| EtcdRawPair::new(client.clone(), c))
            .collect();
        rows.push(measure(
            ctx,
            &endpoints,
            total,
            "raw etcd-client txn pairs (one client)".into(),
            raw,
        )?);
        for hosts in HOSTS {
            eprintln!("B6 growth: {total} callers on {hosts} lockd hosts");
            let servers = (0..hosts)
                .map(|_| {
                    let options = EtcdOptions {
                        prefix: format!("/lockd-growth-{total}-{hosts}"),
                        ..EtcdOptions::new(endpoints.clone())
                    };
                    Server::start_on(
                        StoreSpec::Etcd(Box::new(options)),
                        None,
                        LockdConfig::default(),
                    )
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            let callers = ctx.rt.block_on(async {
                let mut callers = Vec::new();
                for c in 0..total {
                    let addr = servers[c % hosts].addr;
                    callers.push(RestPair::connect(addr, c, DurabilityWord::Persistent).await?);
                }
                anyhow::Ok(callers)
            })?;
            let label = format!(
                "lockd on etcd, {hosts} host{} (REST)",
                if hosts == 1 { "" } else { "s" }
            );
            rows.push(measure(ctx, &endpoints, total, label, callers)?);
            drop(servers);
        }
    }
    Ok(render(&rows))
}

/// Runs `callers` closed-loop with etcd's counters scraped around the run.
fn measure<P: Pair>(
    ctx: &Ctx,
    endpoints: &[String],
    callers: usize,
    system: String,
    pairs: Vec<P>,
) -> anyhow::Result<Row> {
    let done = Arc::new(AtomicU64::new(0));
    let pairs = pairs
        .into_iter()
        .map(|inner| Counting {
            inner,
            pairs: done.clone(),
        })
        .collect();
    let before = Counters::scrape(endpoints)?;
    let cpu_before = own_cpu_seconds();
    let measured = ctx.run(pairs);
    let cpu_after = own_cpu_seconds();
    let after = Counters::scrape(endpoints)?;
    check_errors(&system, &measured)?;
    let n = done.load(Ordering::Relaxed).max(1) as f64;
    let delta = |key: &str| after.sum(key) - before.sum(key);
    let mut rpcs = HashMap::new();
    for method in ["Txn", "Range", "Put", "DeleteRange", "LeaseGrant"] {
        let key = format!("rpc:{method}");
        rpcs.insert(method.to_string(), delta(&key) / n);
    }
    let fsync_count = delta("etcd_disk_wal_fsync_duration_seconds_count");
    let fsync_seconds = delta("etcd_disk_wal_fsync_duration_seconds_sum");
    let cost = Cost {
        rpcs,
        proposals: (after.first("etcd_server_proposals_committed_total")
            - before.first("etcd_server_proposals_committed_total"))
            / n,
        fsyncs: fsync_count / n,
        fsync_mean: Duration::from_secs_f64(fsync_seconds / fsync_count.max(1.0)),
        watch_events: delta("etcd_debugging_mvcc_events_total") / n,
        etcd_cpu: delta("process_cpu_seconds_total") / n,
        lockd_cpu: (cpu_after - cpu_before) / n,
    };
    Ok(Row {
        callers,
        system,
        measured,
        cost,
    })
}

fn render(rows: &[Row]) -> String {
    let mut speed = Table::new([
        "callers (total)",
        "system",
        "pairs/s",
        "p50",
        "p99",
        "pairs/s ÷ 1 host",
        "pairs/s ÷ raw etcd",
    ]);
    let mut cost = Table::new([
        "callers",
        "system",
        "Txn",
        "Range",
        "LeaseGrant",
        "Raft proposals",
        "WAL fsyncs (3 members)",
        "mean fsync",
        "watch events sent",
        "etcd CPU",
        "lockd + callers CPU",
    ]);
    let mut one_host = HashMap::new();
    let mut raw = HashMap::new();
    for row in rows {
        let rate = row.measured.rate();
        if row.system.starts_with("raw") {
            raw.insert(row.callers, rate);
        } else if row.system.contains(", 1 host ") {
            one_host.insert(row.callers, rate);
        }
        let mut m = row.measured.clone();
        speed.row(vec![
            row.callers.to_string(),
            row.system.clone(),
            count(rate),
            latency(m.latencies.quantile(0.5)),
            latency(m.latencies.quantile(0.99)),
            one_host
                .get(&row.callers)
                .filter(|_| !row.system.starts_with("raw"))
                .map_or("".into(), |&base| ratio(rate, base)),
            raw.get(&row.callers)
                .map_or("".into(), |&base| ratio(rate, base)),
        ]);
        let c = &row.cost;
        let rpc = |m: &str| format!("{:.2}", c.rpcs.get(m).copied().unwrap_or(0.0));
        let us = |s: f64| format!("{:.0} µs", s * 1e6);
        cost.row(vec![
            row.callers.to_string(),
            row.system.clone(),
            rpc("Txn"),
            rpc("Range"),
            rpc("LeaseGrant"),
            format!("{:.2}", c.proposals),
            format!("{:.3}", c.fsyncs),
            latency(c.fsync_mean),
            format!("{:.2}", c.watch_events),
            us(c.etcd_cpu),
            us(c.lockd_cpu),
        ]);
    }
    let mut out = format!(
        "### Growing from 1 to 3 lockd hosts on a {MEMBERS}-member etcd cluster\n\n\
         Persistent lock + unlock pairs over REST, the callers split evenly across the hosts; \
         every host and every member on this machine's cores.\n\n"
    );
    out += &speed.render();
    out += "\nPer lock pair, from etcd's `/metrics` around each run (warm-up included; \
            client RPCs and watch events summed over the members):\n\n";
    out += &cost.render();
    let _ = writeln!(out);
    out
}

/// Counters of every member's `/metrics`, by name (and client RPCs by
/// method, as `rpc:METHOD`).
pub struct Counters(Vec<HashMap<String, f64>>);

impl Counters {
    pub fn scrape(endpoints: &[String]) -> anyhow::Result<Counters> {
        endpoints
            .iter()
            .map(|e| member_metrics(e))
            .collect::<anyhow::Result<_>>()
            .map(Counters)
    }

    pub fn sum(&self, key: &str) -> f64 {
        self.0.iter().filter_map(|m| m.get(key)).sum()
    }

    fn first(&self, key: &str) -> f64 {
        self.0
            .first()
            .and_then(|m| m.get(key))
            .copied()
            .unwrap_or(0.0)
    }
}

/// One member's counters: `GET /metrics` on its plain-HTTP client URL.
fn member_metrics(endpoint: &str) -> anyhow::Result<HashMap<String, f64>> {
    let host = endpoint
        .strip_prefix("http://")
        .with_context(|| format!("{endpoint} is not a plain-HTTP etcd URL"))?;
    let mut stream = TcpStream::connect(host)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET /metrics HTTP/1.0\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        bail!("etcd {endpoint}/metrics: no answer");
    };
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        bail!("etcd {endpoint}/metrics: {head}");
    }
    Ok(parse_metrics(body))
}

/// Prometheus text: plain counters by name; `grpc_server_handled_total`
/// summed by `grpc_method`, as `rpc:METHOD`.
fn parse_metrics(body: &str) -> HashMap<String, f64> {
    let mut out = HashMap::new();
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let (name, labels) = series.split_once('{').unwrap_or((series, ""));
        let key = if name == "grpc_server_handled_total" {
            let Some(method) = labels
                .split(',')
                .find_map(|l| l.strip_prefix("grpc_method=\""))
            else {
                continue;
            };
            format!("rpc:{}", method.trim_end_matches(['"', '}']))
        } else if labels.is_empty() {
            name.to_string()
        } else {
            continue;
        };
        *out.entry(key).or_insert(0.0) += value;
    }
    out
}

/// CPU seconds this process has used (user + system): the lockd hosts run
/// in it, on runtimes of their own, beside the callers.
fn own_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which is in parentheses.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    // utime and stime are fields 14 and 15 of proc(5); here, after the
    // state (field 3), at 11 and 12.
    let (Some(user), Some(system)) = (ticks(11), ticks(12)) else {
        return 0.0;
    };
    // Clock ticks of 1/100 s: Linux's USER_HZ on every architecture lockd
    // builds for.
    (user + system) / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_parsed_by_name_and_rpc_method() {
        let body = "# HELP x\n\
            etcd_server_proposals_committed_total 42\n\
            grpc_server_handled_total{grpc_code=\"OK\",grpc_method=\"Txn\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 10\n\
            grpc_server_handled_total{grpc_code=\"Aborted\",grpc_method=\"Txn\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 2\n\
            grpc_server_handled_total{grpc_code=\"OK\",grpc_method=\"Range\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 3\n\
            etcd_disk_wal_fsync_duration_seconds_bucket{le=\"0.001\"} 7\n\
            etcd_disk_wal_fsync_duration_seconds_count 9\n\
            process_cpu_seconds_total 1.5e+00\n";
        let m = parse_metrics(body);
        assert_eq!(m["etcd_server_proposals_committed_total"], 42.0);
        assert_eq!(m["rpc:Txn"], 12.0);
        assert_eq!(m["rpc:Range"], 3.0);
        assert_eq!(m["etcd_disk_wal_fsync_duration_seconds_count"], 9.0);
        assert_eq!(m["process_cpu_seconds_total"], 1.5);
        assert!(!m.contains_key("etcd_disk_wal_fsync_duration_seconds_bucket"));
    }
}
