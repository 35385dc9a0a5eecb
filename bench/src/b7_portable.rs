//! B7, portable: what the lock capability costs when it is composed into a
//! guest with `lockd plug` (docs/guests.md#other-hosts) rather than provided by lockd's
//! host.
//!
//! - Pairs. A lock + unlock pair, ephemeral and persistent, at 1 and 8
//!   concurrent callers, three ways against redb stores:
//!   - *native capability*: the lock API (`LockService`, what the wasm glue
//!     calls; B1 measures the host call on top, about a microsecond);
//!   - *composed client*: the `lockd-client` component (`guest/lockd-client`)
//!     instantiated on a stock wasmtime host (WASI 0.2 and wasi:http only,
//!     no lockd crate in the store), one instance per caller, its
//!     `lockd:lock/locks` exports `lock` and `unlock` called as a plugged
//!     guest's imports reach them; each call is one `POST` to a `lockd
//!     serve` in this process, over wasmtime-wasi-http's outgoing handler,
//!     which opens a new connection per request;
//!   - *REST*: the same two requests from a keep-alive client (B4's), and
//!     from a client that opens a new connection per request, as the
//!     composed client's outgoing handler does (the connection's share of
//!     the composed cost, without wasm).
//!
//!   A last check runs the real thing at 1 caller: the `bench-pairs` guest
//!   plugged and run on the stock host, against the same guest on lockd's
//!   capability (both timed by the guest).
//! - Edge. `edge-bench` composed and served by a stock wasi:http proxy
//!   server (hyper, one instance per request from the pooling allocator, as
//!   `wasmtime serve` does), its
//!   client talking to a `lockd serve` in this process, against the native
//!   `edge-bench` served by that same `lockd serve`; open loop as in B3: the
//!   highest rate held with every answer 200 and p99 ≤ 10 ms.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use lockd_api::{DurabilityWord, GrantReply, Route, StatusReply};
use lockd_core::{Durability, Limits, LockService};
use lockd_guest_tests::stock_host::{self, CommandEnd, Proxy, StockState};
use wasmtime::component::{Component, Func, InstancePre, Val};
use wasmtime::{Engine, Store};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder};

use crate::b2_durable::ServicePair;
use crate::drive::Pair;
use crate::rest::{Connection, PairRequests, RestPair, Server};
use crate::stats::{count, latency, percentiles, ratio, Measured, Table};
use crate::{check_errors, Ctx};

const NAMESPACE: &str = "bench";
const P99_BOUND: Duration = Duration::from_millis(10);
const LOCKS_INTERFACE: &str = "lockd:lock/locks@0.1.0";

pub fn run(ctx: &Ctx) -> anyhow::Result<String> {
    let dir = ctx.scratch.path().join("b7");
    std::fs::create_dir_all(&dir)?;
    let engine = stock_host::engine()?;
    let client = lockd_guest_tests::LOCKD_CLIENT;

    // --- pairs ----------------------------------------------------------
    let server = Server::start(dir.join("server.redb"), None)?;
    let url = format!("http://{}", server.addr);
    let native = {
        let _rt = ctx.rt.enter();
        LockService::new(
            lockd_redb::open(dir.join("native.redb"))?,
            Limits::default(),
        )
    };
    let client_pre = stock_host::linker(&engine)?
        .instantiate_pre(&stock_host::load(&engine, Path::new(client))?)?;

    let mut table = Table::new([
        "callers",
        "durability",
        "path",
        "pairs/s",
        "p50",
        "p99",
        "p99.9",
        "p50 ÷ native",
    ]);
    let mut summary = String::new();
    for durability in [Durability::Ephemeral, Durability::Persistent] {
        let word = DurabilityWord::from(durability);
        for &callers in &[1usize, 8] {
            eprintln!("B7: {word} pairs, {callers} callers");
            let native_m = ctx.run(
                (0..callers)
                    .map(|c| ServicePair::new(&native, durability, c))
                    .collect(),
            );
            check_errors("native", &native_m)?;
            let composed = ctx.rt.block_on(async {
                let mut callers_v = Vec::new();
                for c in 0..callers {
                    callers_v
                        .push(ClientPair::new(&engine, &client_pre, &url, c, word.as_str()).await?);
                }
                anyhow::Ok(callers_v)
            })?;
            let composed_m = ctx.run(composed);
            check_errors("composed client", &composed_m)?;
            let rest = ctx.rt.block_on(async {
                let mut callers_v = Vec::new();
                for c in 0..callers {
                    callers_v.push(RestPair::connect(server.addr, c, word).await?);
                }
                anyhow::Ok(callers_v)
            })?;
            let rest_m = ctx.run(rest);
            check_errors("REST keep-alive", &rest_m)?;
            let fresh_m = ctx.run(
                (0..callers)
                    .map(|c| FreshRestPair::new(server.addr, c, word))
                    .collect(),
            );
            check_errors("REST, new connections", &fresh_m)?;

            let native_p50 = native_m.clone().latencies.quantile(0.5);
            for (label, mut m) in [
                ("native capability (lock API)", native_m.clone()),
                (
                    "composed client (lockd-client over wasi:http)",
                    composed_m.clone(),
                ),
                ("REST, keep-alive client", rest_m.clone()),
                ("REST, a new connection per request", fresh_m.clone()),
            ] {
                let p50 = m.latencies.quantile(0.5);
                let [p50s, p99, p999] = percentiles(&mut m);
                table.row(vec![
                    callers.to_string(),
                    word.to_string(),
                    label.into(),
                    count(m.rate()),
                    p50s,
                    p99,
                    p999,
                    ratio(p50.as_secs_f64(), native_p50.as_secs_f64()),
                ]);
            }
            let _ = writeln!(
                summary,
                "- {word}, {callers} caller{}: composed {} pairs/s, p50 {}; native does {} its pairs/s, REST keep-alive {}.",
                if callers == 1 { "" } else { "s" },
                count(composed_m.rate()),
                latency(composed_m.clone().latencies.quantile(0.5)),
                ratio(native_m.rate(), composed_m.rate()),
                ratio(rest_m.rate(), composed_m.rate()),
            );
        }
    }

    // The whole guest, plugged, at 1 caller.
    let guest_pairs: u32 = if ctx.plan.smoke { 200 } else { 5_000 };
    eprintln!("B7: bench-pairs guest, plugged and native, {guest_pairs} pairs");
    let plugged_pairs = plug(lockd_guest_tests::BENCH_PAIRS, client)?;
    let plugged = Component::new(&engine, &plugged_pairs).map_err(|e| anyhow!("{e:?}"))?;
    let composed_guest = ctx.rt.block_on(run_plugged_command(
        &engine,
        &plugged,
        &[("LOCKD_URL", url.as_str()), ("LOCKD_NAMESPACE", NAMESPACE)],
        &[
            "bench-pairs".into(),
            guest_pairs.to_string(),
            "timed".into(),
        ],
    ))?;
    let native_guest = ctx.rt.block_on(run_native_command(
        &native,
        &[
            "bench-pairs".into(),
            guest_pairs.to_string(),
            "timed".into(),
        ],
    ))?;
    drop(server);
    let mut guests = Table::new(["bench-pairs guest, 1 caller", "pairs/s", "p50", "p99"]);
    for (label, fields) in [
        (
            "plugged, stock wasmtime host → lockd serve (redb)",
            &composed_guest,
        ),
        (
            "native, lockd's capability (redb, in process)",
            &native_guest,
        ),
    ] {
        let field = |k: &str| {
            fields
                .get(k)
                .copied()
                .with_context(|| format!("bench-pairs printed no {k}"))
        };
        guests.row(vec![
            label.into(),
            count(guest_pairs as f64 / (field("elapsed_ns")? as f64 / 1e9)),
            latency(Duration::from_nanos(field("p50_ns")?)),
            latency(Duration::from_nanos(field("p99_ns")?)),
        ]);
    }

    // --- edge -----------------------------------------------------------
    let manifest = dir.join("spin.toml");
    std::fs::write(
        &manifest,
        format!(
            "spin_manifest_version = 2\n[application]\nname = \"bench\"\n\
             [[trigger.http]]\nroute = \"/bench/...\"\ncomponent = \"edge-bench\"\n\
             [component.edge-bench]\nsource = \"{}\"\nallowed_outbound_hosts = []\n",
            lockd_guest_tests::EDGE_BENCH
        ),
    )?;
    let lockd_server = Server::start(dir.join("edge.redb"), Some(manifest))?;
    let plugged_edge = plug(lockd_guest_tests::EDGE_BENCH, client)?;
    let proxy = StockProxy::start(
        &stock_host::serve_engine()?,
        &plugged_edge,
        vec![
            ("LOCKD_URL".into(), format!("http://{}", lockd_server.addr)),
            ("LOCKD_NAMESPACE".into(), NAMESPACE.into()),
        ],
    )?;
    let rates: Vec<u32> = if ctx.plan.smoke {
        ctx.plan.b3_rates.clone()
    } else {
        vec![
            100, 250, 500, 750, 1_000, 1_500, 2_000, 3_000, 4_000, 6_000, 8_000, 10_000, 12_000,
            14_000, 16_000, 18_000, 20_000, 22_000, 25_000, 28_000,
        ]
    };
    let mut edge = Table::new([
        "function",
        "highest rate held (req/s)",
        "p50",
        "p99",
        "first rate missed",
    ]);
    let mut ladder = Table::new([
        "function",
        "offered req/s",
        "achieved req/s",
        "p50",
        "p99",
        "non-200",
    ]);
    let mut held = Vec::new();
    for (label, addr) in [
        ("edge-bench native, lockd serve", lockd_server.addr),
        ("edge-bench composed, stock host → lockd serve", proxy.addr),
    ] {
        for mode in ["nolock", "ephemeral"] {
            eprintln!("B7: {label}, {mode}");
            crate::b3_edge::open_loop(addr, mode, rates[0], Duration::from_millis(500))?;
            let mut best: Option<(u32, Measured)> = None;
            let mut missed = None;
            for &rate in &rates {
                let mut m = crate::b3_edge::open_loop(addr, mode, rate, ctx.plan.b3_step)?;
                let p99 = m.latencies.quantile(0.99);
                ladder.row(vec![
                    format!("{label}, {mode}"),
                    count(rate as f64),
                    count(m.rate()),
                    latency(m.latencies.quantile(0.5)),
                    latency(p99),
                    m.errors.to_string(),
                ]);
                if m.errors == 0 && p99 <= P99_BOUND {
                    best = Some((rate, m));
                } else {
                    missed = Some(rate);
                    break;
                }
            }
            let missed = missed.map_or("none tried".into(), |r| count(r as f64));
            match best {
                Some((rate, mut m)) => {
                    edge.row(vec![
                        format!("{label}, {mode}"),
                        count(rate as f64),
                        latency(m.latencies.quantile(0.5)),
                        latency(m.latencies.quantile(0.99)),
                        missed,
                    ]);
                    held.push((label, mode, rate));
                }
                None => {
                    edge.row(vec![
                        format!("{label}, {mode}"),
                        format!("< {}", count(rates[0] as f64)),
                        "-".into(),
                        "-".into(),
                        missed,
                    ]);
                    held.push((label, mode, 0));
                }
            }
        }
    }
    drop(proxy);
    drop(lockd_server);

    let mut out = String::from("## B7 portable (lockd plug)\n\n");
    out += "Lock + unlock pairs, closed loop:\n\n";
    out += &table.render();
    out.push('\n');
    out += &summary;
    out += "\nThe whole guest, plugged and native (timed by the guest):\n\n";
    out += &guests.render();
    let _ = write!(
        out,
        "\nEdge, open loop ({} s per rate, p99 ≤ {} ms, 64 connections):\n\n",
        ctx.plan.b3_step.as_secs_f64(),
        P99_BOUND.as_millis()
    );
    out += &edge.render();
    let rate_of = |label_start: &str, mode: &str| {
        held.iter()
            .find(|(l, m, _)| l.starts_with(label_start) && *m == mode)
            .map_or(0, |(_, _, r)| *r)
    };
    out.push('\n');
    for mode in ["nolock", "ephemeral"] {
        let composed = rate_of("edge-bench composed", mode) as f64;
        let native = rate_of("edge-bench native", mode) as f64;
        let _ = writeln!(
            out,
            "- {mode}: composed holds {} req/s, native {} req/s ({} the composed rate).",
            count(composed),
            count(native),
            ratio(native, composed),
        );
    }
    out += "\nEvery rate tried:\n\n";
    out += &ladder.render();
    Ok(out)
}

/// `lockd plug APP` with the repository's client, in memory.
fn plug(app: &str, client: &str) -> anyhow::Result<Vec<u8>> {
    let plugged = lockd_components::compose::plug(
        app,
        &std::fs::read(app)?,
        client,
        &std::fs::read(client)?,
    )?;
    Ok(plugged.bytes)
}

/// A WASI context on the stock host: `env`, `args`, stderr inherited and
/// stdout into `stdout` (discarded without one).
fn wasi(env: &[(&str, &str)], args: &[String], stdout: Option<MemoryOutputPipe>) -> WasiCtx {
    let mut wasi = WasiCtxBuilder::new();
    wasi.inherit_stderr().args(args);
    if let Some(stdout) = stdout {
        wasi.stdout(stdout);
    }
    for (k, v) in env {
        wasi.env(k, v);
    }
    wasi.build()
}

/// One caller through the client component: an instance of its own, whose
/// `lock` and `unlock` exports it calls.
struct ClientPair {
    store: Store<StockState>,
    lock: Func,
    unlock: Func,
    owner: String,
    prefix: String,
    durability: &'static str,
}

impl ClientPair {
    async fn new(
        engine: &Engine,
        pre: &InstancePre<StockState>,
        url: &str,
        caller: usize,
        durability: &'static str,
    ) -> anyhow::Result<ClientPair> {
        let mut store = Store::new(
            engine,
            StockState::new(wasi(
                &[("LOCKD_URL", url), ("LOCKD_NAMESPACE", NAMESPACE)],
                &[],
                None,
            )),
        );
        let instance = pre
            .instantiate_async(&mut store)
            .await
            .map_err(|e| anyhow!("{e:?}"))?;
        let locks = instance
            .get_export_index(&mut store, None, LOCKS_INTERFACE)
            .with_context(|| format!("the client exports no {LOCKS_INTERFACE}"))?;
        let mut func = |name: &str| {
            let index = instance
                .get_export_index(&mut store, Some(&locks), name)
                .with_context(|| format!("{LOCKS_INTERFACE} has no {name}"))?;
            instance
                .get_func(&mut store, index)
                .with_context(|| format!("{LOCKS_INTERFACE}#{name} is not a function"))
        };
        let (lock, unlock) = (func("lock")?, func("unlock")?);
        Ok(ClientPair {
            store,
            lock,
            unlock,
            owner: format!("owner-{caller}"),
            prefix: format!("composed/c{caller}/"),
            durability,
        })
    }
}

impl Pair for ClientPair {
    async fn pair(&mut self, i: u64) -> anyhow::Result<()> {
        let name = format!("{}{i}", self.prefix);
        let options = Val::Record(vec![
            ("wait-ms".into(), Val::U32(0)),
            ("durability".into(), Val::Enum(self.durability.into())),
        ]);
        let params = [
            Val::String(name.clone()),
            Val::String(self.owner.clone()),
            Val::U32(30_000),
            options,
        ];
        let mut results = [Val::Bool(false)];
        self.lock
            .call_async(&mut self.store, &params, &mut results)
            .await
            .map_err(|e| anyhow!("{e:?}"))?;
        let token = match &results[0] {
            Val::Result(Ok(Some(grant))) => match grant.as_ref() {
                Val::Record(fields) => fields.iter().find_map(|(k, v)| match (k.as_str(), v) {
                    ("fencing-token", Val::U64(t)) => Some(*t),
                    _ => None,
                }),
                _ => None,
            },
            other => bail!("lock answered {other:?}"),
        }
        .context("a grant without fencing-token")?;
        let params = [
            Val::String(name),
            Val::String(self.owner.clone()),
            Val::Option(Some(Box::new(Val::U64(token)))),
        ];
        self.unlock
            .call_async(&mut self.store, &params, &mut results)
            .await
            .map_err(|e| anyhow!("{e:?}"))?;
        match &results[0] {
            Val::Result(Ok(None)) => Ok(()),
            other => bail!("unlock answered {other:?}"),
        }
    }
}

/// A REST caller that opens a new connection for every request, as
/// wasmtime-wasi-http's outgoing handler does for the client component: what
/// the composed path pays for connections, without wasm.
struct FreshRestPair {
    addr: SocketAddr,
    requests: PairRequests,
    prefix: String,
}

impl FreshRestPair {
    fn new(addr: SocketAddr, caller: usize, durability: DurabilityWord) -> FreshRestPair {
        FreshRestPair {
            addr,
            requests: PairRequests {
                namespace: Some(NAMESPACE.to_string()),
                owner: format!("owner-{caller}"),
                durability,
            },
            prefix: format!("fresh/c{caller}/"),
        }
    }

    /// Posts `request` to `route` on a new connection.
    async fn post<T: serde::de::DeserializeOwned>(
        &self,
        route: Route,
        request: &impl serde::Serialize,
    ) -> anyhow::Result<T> {
        Connection::open(self.addr)
            .await?
            .post(route, request)
            .await
    }
}

impl Pair for FreshRestPair {
    async fn pair(&mut self, i: u64) -> anyhow::Result<()> {
        let name = format!("{}{i}", self.prefix);
        let grant: GrantReply = self.post(Route::Lock, &self.requests.lock(&name)).await?;
        let unlock = self.requests.unlock(name, &grant);
        let _: StatusReply = self.post(Route::Unlock, &unlock).await?;
        Ok(())
    }
}

/// The `key=value` fields bench-pairs printed.
fn fields(stdout: &str) -> std::collections::HashMap<String, u64> {
    stdout
        .split_whitespace()
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// Runs a plugged command on the stock host; its printed fields.
async fn run_plugged_command(
    engine: &Engine,
    component: &Component,
    env: &[(&str, &str)],
    args: &[String],
) -> anyhow::Result<std::collections::HashMap<String, u64>> {
    let stdout = MemoryOutputPipe::new(1 << 16);
    let state = StockState::new(wasi(env, args, Some(stdout.clone())));
    let end = stock_host::run_command(engine, component, state).await?;
    let text = String::from_utf8_lossy(&stdout.contents()).into_owned();
    if !matches!(end, CommandEnd::Ok) || text.contains("FAIL") {
        bail!("plugged bench-pairs failed ({end:?}): {text}");
    }
    Ok(fields(&text))
}

/// Runs bench-pairs on lockd's own capability over `service`.
async fn run_native_command(
    service: &LockService,
    args: &[String],
) -> anyhow::Result<std::collections::HashMap<String, u64>> {
    use lockd_components::run::{self, Output, RunConfig, RunLimits};
    let engine = run::engine()?;
    let component = run::load(&engine, lockd_guest_tests::BENCH_PAIRS.as_ref())?;
    let config = RunConfig {
        namespace: NAMESPACE.into(),
        args: args.to_vec(),
        output: Output::Capture,
        limits: RunLimits::default(),
    };
    let outcome = run::run_component(&engine, &component, service.clone(), config).await?;
    let text = String::from_utf8_lossy(&outcome.stdout).into_owned();
    if outcome.exit_code != 0 {
        bail!("bench-pairs exited {}: {text}", outcome.exit_code);
    }
    Ok(fields(&text))
}

/// A wasi:http/proxy server as a stock host runs one (`wasmtime serve`,
/// [`stock_host::serve`]), on a runtime of its own with two worker threads.
struct StockProxy {
    addr: SocketAddr,
    rt: Option<tokio::runtime::Runtime>,
}

impl StockProxy {
    fn start(
        engine: &Engine,
        component: &[u8],
        env: Vec<(String, String)>,
    ) -> anyhow::Result<StockProxy> {
        let component = Component::new(engine, component).map_err(|e| anyhow!("{e:?}"))?;
        let proxy = Proxy::new(engine, &component, move || {
            let env: Vec<(&str, &str)> =
                env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            wasi(&env, &[], None)
        })?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("stock-proxy")
            .enable_all()
            .build()?;
        let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
        let addr = listener.local_addr()?;
        rt.spawn(stock_host::serve(listener, Arc::new(proxy)));
        Ok(StockProxy { addr, rt: Some(rt) })
    }
}

impl Drop for StockProxy {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(5));
        }
    }
}
