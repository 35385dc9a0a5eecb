//! B10, leader failover: the time from a leader's death (kill -9 of its
//! process) to the next leader's grant, on a lockd server over redb and one
//! over etcd. Every process is a real one, started by the suite:
//! - the server: this binary again as `--b10-child serve STORE`, which is
//!   `lockd serve --store STORE` (the same server and compatibility
//!   routes, default configuration) on a free loopback port;
//! - the leader: this binary again as `--b10-child lead ...`, which
//!   campaigns through REST and keeps its leadership alive with
//!   `/v1/locks/extend` every third of the TTL, printing each renewal;
//! - the next leader: a REST campaign from this process, waiting in the
//!   election's queue.
//!
//! Each round kills the leader at a different point of its renewal period
//! (spread evenly over the rounds), so the dead leader's remaining TTL runs
//! from about two thirds of the TTL to all of it. The report splits the
//! observed failover into that remaining TTL (the leadership's expiry, as
//! the server reports it after the kill, minus the kill's time) and the
//! rest: how late after the expiry the store hands the election on.

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, ensure, Context as _};
use lockd_api::{
    CampaignRequest, ExtendRequest, FoundReply, GetRequest, GrantReply, LeaderReply, ResignRequest,
    Route, StatusReply,
};
use lockd_compat::Compat;
use lockd_server::config::LockdConfig;
use lockd_server::serve::ServeOptions;
use lockd_server::store::StoreSpec;

use crate::rest::Connection;
use crate::stats::Table;
use crate::Ctx;

/// How long a child may take to say it is up (a cold etcd connection
/// included), and the slack given to every wait beyond the TTL.
const STARTUP: Duration = Duration::from_secs(15);

/// A child process of this binary, with its stdout read line by line on a
/// thread of its own (so a wait for a line can time out). Killed on drop
/// unless it stopped.
struct ChildProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    what: String,
}

impl ChildProcess {
    fn start(what: &str, args: &[&str]) -> anyhow::Result<ChildProcess> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg("--b10-child")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting the {what}"))?;
        let stdout = child.stdout.take().context("child without stdout")?;
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(ChildProcess {
            stdin: child.stdin.take(),
            child,
            lines,
            what: what.into(),
        })
    }

    /// The next line the child prints, within `limit`.
    fn line(&self, limit: Duration) -> anyhow::Result<String> {
        match self.lines.recv_timeout(limit) {
            Ok(line) => Ok(line),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                bail!("the {} printed nothing for {limit:?}", self.what)
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                bail!("the {} exited early (its stderr is above)", self.what)
            }
        }
    }

    /// The next line starting with `word`, its other words parsed as u64.
    fn numbers(&self, word: &str, limit: Duration) -> anyhow::Result<Vec<u64>> {
        let line = self.line(limit)?;
        let mut words = line.split_whitespace();
        ensure!(
            words.next() == Some(word),
            "the {} printed {line:?}, not {word:?}",
            self.what
        );
        words
            .map(|w| w.parse().with_context(|| format!("{w:?} in {line:?}")))
            .collect()
    }

    /// Forgets the lines printed so far.
    fn skip_printed(&self) {
        while self.lines.try_recv().is_ok() {}
    }

    /// kill -9 (SIGKILL), and reaps the process.
    fn kill(&mut self) -> anyhow::Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        // A child stops when its stdin closes; give it a moment, then kill.
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One round's times, in milliseconds.
struct Round {
    /// From the kill to the next leader's `acquired` reply.
    observed: f64,
    /// The dead leader's expiry (its last renewal + TTL, as the server
    /// reports it) minus the kill's time.
    remaining_ttl: f64,
}

/// Milliseconds since the Unix epoch, with the microseconds.
fn epoch_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// One failover on `server`: a leader process leads `name`, a candidate
/// waits, the leader is killed `kill_after` after one of its renewals.
fn round(
    ctx: &Ctx,
    server: SocketAddr,
    name: &str,
    ttl_ms: u64,
    kill_after: Duration,
) -> anyhow::Result<Round> {
    let leader_name = format!("{name}-leader");
    let next_name = format!("{name}-next");
    let mut leader = ChildProcess::start(
        "leader process",
        &[
            "lead",
            &server.to_string(),
            name,
            &leader_name,
            &ttl_ms.to_string(),
        ],
    )?;
    let leading = leader.numbers("leading", STARTUP)?;
    let old_token = *leading.first().context("no token after \"leading\"")?;

    let campaign = CampaignRequest {
        namespace: None,
        name: name.into(),
        candidate: next_name.clone(),
        value: "the next leader".into(),
        ttl_ms,
        wait_ms: Some(ttl_ms + STARTUP.as_millis() as u64),
        durability: None,
    };
    let next = ctx.rt.spawn(async move {
        let mut conn = Connection::open(server).await?;
        let grant: GrantReply = conn.post(Route::Campaign, &campaign).await?;
        anyhow::Ok((Instant::now(), grant))
    });
    let mut control = ctx.rt.block_on(Connection::open(server))?;
    // The candidate is in the queue before the leader dies.
    let queued_by = Instant::now() + STARTUP;
    loop {
        let found: FoundReply = ctx.rt.block_on(control.post(
            Route::Get,
            &GetRequest {
                namespace: None,
                name: name.into(),
            },
        ))?;
        if found.waiters > 0 {
            break;
        }
        ensure!(
            Instant::now() < queued_by,
            "the next candidate did not join {name}'s queue within {STARTUP:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    leader.skip_printed();
    leader.numbers("renewed", Duration::from_millis(ttl_ms) + STARTUP)?;
    std::thread::sleep(kill_after);
    let (killed_at, killed_at_ms) = (Instant::now(), epoch_ms());
    leader.kill()?;

    let dead: LeaderReply = ctx.rt.block_on(control.post(
        Route::Leader,
        &lockd_api::LeaderRequest {
            namespace: None,
            name: name.into(),
        },
    ))?;
    ensure!(
        dead.candidate == leader_name,
        "{} led {name} right after the kill, not the killed {leader_name}",
        dead.candidate
    );
    let (granted_at, grant) = ctx
        .rt
        .block_on(async {
            tokio::time::timeout(Duration::from_millis(ttl_ms) + STARTUP, next).await
        })
        .with_context(|| format!("no new leader of {name} within the TTL and {STARTUP:?}"))???;
    ensure!(
        grant.fencing_token > old_token,
        "the new leader's token {} is not above the dead one's {old_token}",
        grant.fencing_token
    );
    let _: StatusReply = ctx.rt.block_on(control.post(
        Route::Resign,
        &ResignRequest {
            namespace: None,
            name: name.into(),
            candidate: next_name,
            fencing_token: Some(grant.fencing_token),
        },
    ))?;
    Ok(Round {
        observed: (granted_at - killed_at).as_secs_f64() * 1e3,
        remaining_ttl: dead.expires_at_ms as f64 - killed_at_ms,
    })
}

/// The rounds on a server over `store` (a `lockd serve --store` spec).
fn rounds(ctx: &Ctx, label: &str, store: &str) -> anyhow::Result<Vec<Round>> {
    let server = ChildProcess::start("lockd server", &["serve", store])?;
    let addr: SocketAddr = {
        let line = server.line(STARTUP)?;
        line.strip_prefix("listening ")
            .with_context(|| format!("the lockd server printed {line:?}"))?
            .parse()?
    };
    let (ttl_ms, n) = (ctx.plan.b10_ttl_ms, ctx.plan.b10_rounds);
    let period = ttl_ms as f64 / 3.0;
    (0..n)
        .map(|i| {
            // Spread over [5 %, 85 %] of the renewal period: clear of the
            // next renewal, so the kill never races one.
            let kill_after = period * (0.05 + 0.8 * (i as f64 + 0.5) / n as f64);
            eprintln!("B10 failover on {label}: round {} of {n}", i + 1);
            round(
                ctx,
                addr,
                &format!("failover-{i}"),
                ttl_ms,
                Duration::from_secs_f64(kill_after / 1e3),
            )
        })
        .collect()
}

/// min, p50 (the lower median) and max of `values`, in ms.
fn spread(mut values: Vec<f64>) -> [String; 3] {
    values.sort_by(f64::total_cmp);
    let at = |i: usize| format!("{:.1} ms", values[i]);
    [at(0), at((values.len() - 1) / 2), at(values.len() - 1)]
}

pub fn run(ctx: &Ctx) -> anyhow::Result<String> {
    let etcd = format!("etcd:{}", ctx.etcd_endpoints()?.join(","));
    let redb_path = ctx.scratch.path().join("b10-failover.redb");
    let redb = format!("redb:{}", redb_path.display());
    let (ttl_ms, n) = (ctx.plan.b10_ttl_ms, ctx.plan.b10_rounds);
    let mut table = Table::new(["store", "", "min", "p50", "max"]);
    for (label, store) in [("redb", redb.as_str()), ("etcd", etcd.as_str())] {
        let rounds = rounds(ctx, label, store)?;
        let observed: Vec<f64> = rounds.iter().map(|r| r.observed).collect();
        let remaining: Vec<f64> = rounds.iter().map(|r| r.remaining_ttl).collect();
        let late: Vec<f64> = rounds
            .iter()
            .map(|r| r.observed - r.remaining_ttl)
            .collect();
        for (what, values) in [
            ("kill -9 → next leader's grant", observed),
            (
                "of which the dead leader's remaining TTL (last renewal + TTL − kill)",
                remaining,
            ),
            ("of which the hand-over after expiry (the rest)", late),
        ] {
            let [min, p50, max] = spread(values);
            table.row(vec![label.into(), what.into(), min, p50, max]);
        }
    }
    let mut out = format!(
        "### Leader failover\n\nA leader process (REST campaign, keep-alive every {} ms) killed with SIGKILL at a different point of its renewal period in each of {n} round(s) per store; TTL {ttl_ms} ms; the next candidate waits in the queue through REST. Separate processes: the lockd server, the leader, the suite.\n\n",
        ttl_ms / 3
    );
    out += &table.render();
    Ok(out)
}

/// The child processes: `serve STORE` (a lockd server on a free loopback
/// port, printing `listening ADDR`) and `lead ADDR NAME CANDIDATE TTL_MS`
/// (campaigns, prints `leading TOKEN`, then renews every third of the TTL,
/// printing `renewed EXPIRES_AT_MS`), each until killed or its stdin closes.
pub fn child_main(args: &[String]) -> anyhow::Result<()> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["serve", store] => serve(store),
        ["lead", addr, name, candidate, ttl_ms] => lead(
            addr.parse().context("ADDR")?,
            name,
            candidate,
            ttl_ms.parse().context("TTL_MS")?,
        ),
        _ => bail!("usage: --b10-child serve STORE | lead ADDR NAME CANDIDATE TTL_MS"),
    }
}

fn serve(store: &str) -> anyhow::Result<()> {
    let store: StoreSpec = store.parse().map_err(anyhow::Error::msg)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let served = rt.block_on(async {
        let server = lockd_server::bind(ServeOptions {
            listen: "127.0.0.1:0".parse()?,
            store,
            config: LockdConfig::default(),
            auth_token: None,
            events_heartbeat: lockd_server::api::HEARTBEAT,
            extensions: vec![Box::new(Compat::new(None))],
        })
        .await?;
        println!("listening {}", server.addr());
        server.run(stdin_closed()).await
    });
    // Not waiting for the blocking read of stdin, which may still be on.
    rt.shutdown_background();
    served
}

/// Completes when this process's stdin ends: the suite closed it, or
/// exited (killed included).
async fn stdin_closed() {
    use tokio::io::AsyncReadExt as _;
    let mut rest = Vec::new();
    let _ = tokio::io::stdin().read_to_end(&mut rest).await;
}

fn lead(addr: SocketAddr, name: &str, candidate: &str, ttl_ms: u64) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let led = rt.block_on(async {
        let mut conn = Connection::open(addr).await?;
        let grant: GrantReply = conn
            .post(
                Route::Campaign,
                &CampaignRequest {
                    namespace: None,
                    name: name.into(),
                    candidate: candidate.into(),
                    value: format!("pid {}", std::process::id()),
                    ttl_ms,
                    wait_ms: Some(STARTUP.as_millis() as u64),
                    durability: None,
                },
            )
            .await?;
        println!("leading {}", grant.fencing_token);
        let period = Duration::from_millis(ttl_ms / 3);
        let keep_alive = async {
            loop {
                tokio::time::sleep(period).await;
                let renewed: GrantReply = conn
                    .post(
                        Route::Extend,
                        &ExtendRequest {
                            namespace: None,
                            name: name.into(),
                            owner: candidate.into(),
                            ttl_ms,
                        },
                    )
                    .await?;
                println!("renewed {}", renewed.expires_at_ms);
            }
        };
        tokio::select! {
            failed = keep_alive => failed,
            // The suite went away without killing this leader: stop.
            () = stdin_closed() => Ok(()),
        }
    });
    rt.shutdown_background();
    led
}
