//! The WASI 0.3 guest (`guest/rust-p3`) on `lockd:lock@0.2.0`, hosted as
//! an embedder would: `lockd_wasm::p3::add_to_linker` beside WASI, its
//! `async func` exports called concurrently on one instance inside
//! `Store::run_concurrent`. Shown here: a task waiting for a lock does not
//! stall another task of the same instance (and, the measurement's negative
//! control, 0.1.0's synchronous `lock` does); a wait the guest gives up
//! (drops) leaves no waiter and no holder behind; a guard's `lost` future
//! resolves on expiry and on force-unlock, a lease's on revoke; shared
//! locks, semaphore permits and holds; elections (`elections.rs`); the
//! Rust SDK's async API (`sdk.rs`, and `claims.rs` for its leases,
//! read-write locks, semaphores and holds, run as a command).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use lockd_core::{Engine as LockEngine, Limits, LockOptions, LockService};
use lockd_wasm::{LockCtx, LockCtxView, LockView};
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

mod claims;
mod cli;
mod elections;
mod sdk;

pub(crate) use claims::rust_p3_claims;
pub(crate) use cli::{python_p3, rust_p3_cli};

mod bindings {
    wasmtime::component::bindgen!({
        path: [
            "../wit",
            "../wit/p3",
            "../guest/wit-p3-command/deps/wasi-clocks",
            "../guest/rust-p3/wit",
        ],
        world: "lockd:p3-probe/probe-guest",
        // Called with `call_concurrent`, several at once on one instance.
        exports: { default: async | store },
    });
}

use bindings::exports::lockd::p3_probe::probe::Waiter as Via;
use bindings::lockd::lock0_2_0::types::LostReason;
use bindings::ProbeGuest;

const NAMESPACE: &str = "p3";

struct Host {
    wasi: WasiCtx,
    table: ResourceTable,
    locks: LockCtx,
}

impl WasiView for Host {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl LockView for Host {
    fn lock_ctx(&mut self) -> LockCtxView<'_> {
        LockCtxView {
            ctx: &mut self.locks,
            table: &mut self.table,
        }
    }
}

fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut config = Config::new();
        config.wasm_component_model_async(true);
        Engine::new(&config).unwrap()
    })
}

/// Compiled once per test binary.
fn component() -> &'static Component {
    static COMPONENT: OnceLock<Component> = OnceLock::new();
    COMPONENT.get_or_init(|| Component::from_file(engine(), lockd_guest_tests::RUST_P3).unwrap())
}

fn service() -> LockService {
    LockService::new(LockEngine::memory(), Limits::default())
}

/// A fresh instance of the guest whose locks are `service`'s, in
/// [`NAMESPACE`].
async fn instance(service: &LockService) -> (Store<Host>, ProbeGuest) {
    let mut linker = Linker::<Host>::new(engine());
    // Rust's std imports wasi:cli 0.2; the guest's timer is wasi:clocks 0.3.
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
    wasmtime_wasi::p3::add_to_linker(&mut linker).unwrap();
    // Both versions of the capability on one linker and one service, as a
    // host serving 0.2 and 0.3 guests side by side links them.
    lockd_wasm::add_to_linker(&mut linker).unwrap();
    lockd_wasm::p3::add_to_linker(&mut linker).unwrap();
    let host = Host {
        wasi: WasiCtx::builder().build(),
        table: ResourceTable::new(),
        locks: LockCtx::new(service.clone(), NAMESPACE),
    };
    let mut store = Store::new(engine(), host);
    let guest = ProbeGuest::instantiate_async(&mut store, component(), &linker)
        .await
        .unwrap();
    (store, guest)
}

/// Waits (bounded) until `check` holds.
pub(super) async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !check().await {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// How long the host holds the lock a guest task waits for.
const WAIT: Duration = Duration::from_millis(1_500);

/// Which `lock` a guest task waits with.
#[derive(Clone, Copy, Debug)]
enum Waiter {
    /// `lockd:lock@0.2.0`'s `async func`.
    Async,
    /// `lockd:lock@0.1.0`'s synchronous function.
    Sync,
}

/// One round: the host holds `W` and releases it after [`WAIT`]; one guest
/// task waits for it (as `waiter` says) while another task of the same
/// instance sends 20 pings (each one `locks.get` through the host), 50 ms
/// apart. Answers the waiter's token and when it was granted, and each
/// ping's latency and when it ended.
async fn wait_beside_pings(waiter: Waiter) -> (u64, Duration, Vec<(Duration, Duration)>) {
    let service = service();
    let held = service
        .lock(NAMESPACE, "W", "host", 60_000, LockOptions::default())
        .await
        .unwrap();
    let started = Instant::now();
    let releaser = {
        let service = service.clone();
        tokio::spawn(async move {
            tokio::time::sleep(WAIT).await;
            service.unlock(NAMESPACE, "W", "host", None).await.unwrap();
        })
    };
    let (mut store, guest) = instance(&service).await;
    let probe = guest.lockd_p3_probe_probe();
    let (token, waited, pings) = store
        .run_concurrent(async |accessor| {
            let waiting = async {
                let (name, owner) = ("W".to_string(), "guest".to_string());
                let token = match waiter {
                    Waiter::Async => probe
                        .call_wait_lock(accessor, name, owner, 10_000)
                        .await
                        .unwrap()
                        .map_err(|e| format!("{e:?}")),
                    Waiter::Sync => probe
                        .call_wait_lock_v1(accessor, name, owner, 10_000)
                        .await
                        .unwrap(),
                };
                (token.expect("the waiter got the lock"), started.elapsed())
            };
            let pinging = async {
                let mut pings = Vec::new();
                // Let the waiter reach the queue first.
                tokio::time::sleep(Duration::from_millis(100)).await;
                for _ in 0..20 {
                    let sent = Instant::now();
                    probe.call_ping(accessor, "W".into()).await.unwrap();
                    pings.push((sent.elapsed(), started.elapsed()));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                pings
            };
            let ((token, waited), pings) = tokio::join!(waiting, pinging);
            (token, waited, pings)
        })
        .await
        .unwrap();
    releaser.await.unwrap();
    assert!(token > held.fencing_token);
    assert!(
        waited >= WAIT,
        "granted after {waited:?}, before the release"
    );
    let holder = service.get(NAMESPACE, "W").await.unwrap().unwrap();
    assert_eq!(
        (holder.owner.as_str(), holder.fencing_token),
        ("guest", token)
    );
    let mut latencies: Vec<Duration> = pings.iter().map(|p| p.0).collect();
    latencies.sort();
    eprintln!(
        "{waiter:?} waiter: ping latency while it waits {WAIT:?}: median {:?}, max {:?}; granted after {waited:?}",
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1]
    );
    (token, waited, pings)
}

/// While one task of the instance waits ~1.5 s in a lock's queue through
/// the `async func`, another task's calls are answered at once, all of
/// them before the wait ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn rust_p3() {
    let (_, _, pings) = wait_beside_pings(Waiter::Async).await;
    for (latency, at) in &pings {
        // A stalled instance would answer after the wait, ~1.5 s.
        assert!(
            *at < WAIT,
            "a ping ended at {at:?}, after the wait: {pings:?}"
        );
        assert!(*latency < Duration::from_millis(250), "{pings:?}");
    }
}

/// The negative control of [`rust_p3`]'s measurement: the same wait through
/// `lockd:lock@0.1.0`'s synchronous `lock` holds the whole store, so no ping
/// ends before the lock is granted. (The store's event loop waits too, so a
/// ping's own latency looks short: when it ended is what tells.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_lock_of_0_1_0_stalls_the_instance() {
    let (_, waited, pings) = wait_beside_pings(Waiter::Sync).await;
    for (_, at) in &pings {
        assert!(*at >= waited, "{pings:?}, granted after {waited:?}");
    }
}

/// A guest that gives up a wait (drops the `lock`, guard or hold `acquire`
/// call after 300 ms) leaves the queue: while it waits the host sees its
/// waiter (so the check below can see one), after it gives up no waiter is
/// left, the host keeps its lock, and when the host releases it nobody
/// phantom holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_up_waits_leave_no_waiter_and_no_holder() {
    let service = service();
    let (mut store, guest) = instance(&service).await;
    let probe = guest.lockd_p3_probe_probe();
    let exclusive = LockOptions::default();
    let permit = LockOptions {
        claim: lockd_core::Claim::Permit { permits: 1 },
        ..LockOptions::default()
    };
    for (name, via, host_claim) in [
        ("C-lock", Via::Lock, &exclusive),
        ("C-guard", Via::Guard, &exclusive),
        ("C-shared-hold", Via::SharedHold, &exclusive),
        ("C-permit-hold", Via::PermitHold, &permit),
    ] {
        let held = service
            .lock(NAMESPACE, name, "host", 60_000, *host_claim)
            .await
            .unwrap();
        let started = Instant::now();
        let (got, seen_waiting) = store
            .run_concurrent(async |accessor| {
                let give_up =
                    probe.call_give_up(accessor, name.into(), "guest".into(), via, 30_000, 300);
                let watch = async {
                    let deadline = Instant::now() + Duration::from_millis(250);
                    while Instant::now() < deadline {
                        if service.describe(NAMESPACE, name).await.unwrap().waiters == 1 {
                            return true;
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    false
                };
                let (got, seen) = tokio::join!(give_up, watch);
                (got, seen)
            })
            .await
            .unwrap();
        let got = got.unwrap();
        let took = started.elapsed();
        assert!(matches!(got, Ok(false)), "{name}: {got:?}");
        assert!(
            seen_waiting,
            "{name}: the guest's wait never showed as a waiter"
        );
        assert!(
            took < Duration::from_secs(5),
            "{name}: gave up after {took:?}"
        );

        let state = service.describe(NAMESPACE, name).await.unwrap();
        assert_eq!(state.waiters, 0, "{name}: a waiter is stuck: {state:?}");
        assert_eq!(state.holders.len(), 1, "{name}: {state:?}");
        assert_eq!(state.holders[0].info.fencing_token, held.fencing_token);

        // Released by the host, the lock passes to nobody.
        service.unlock(NAMESPACE, name, "host", None).await.unwrap();
        assert_eq!(service.get(NAMESPACE, name).await.unwrap(), None, "{name}");
        assert!(service.describe(NAMESPACE, name).await.unwrap().is_idle());
    }
    assert_eq!(store.data().locks.live_guards(), 0);
}

/// A guard's `lost` future, awaited by the guest while it holds the guard,
/// resolves with `expired` when its TTL runs out without renewal, and with
/// `ended-elsewhere` when an operator force-unlocks it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_future_resolves_on_expiry_and_force_unlock() {
    let service = service();
    let (mut store, guest) = instance(&service).await;
    let probe = guest.lockd_p3_probe_probe();
    let forcer = service.clone();
    let (expired, forced) = store
        .run_concurrent(async |accessor| {
            let expiring = async {
                let started = Instant::now();
                let out = probe
                    .call_hold_until_lost(accessor, "E".into(), 300, false)
                    .await
                    .unwrap();
                (out, started.elapsed())
            };
            let forced = async {
                let holding = probe.call_hold_until_lost(accessor, "F".into(), 60_000, true);
                let force = async {
                    // Once the guest holds F, force it out.
                    let deadline = Instant::now() + Duration::from_secs(5);
                    while forcer.get(NAMESPACE, "F").await.unwrap().is_none() {
                        assert!(Instant::now() < deadline, "the guest never took F");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    forcer.force_unlock(NAMESPACE, "F").await.unwrap()
                };
                let (out, released) = tokio::join!(holding, force);
                (out.unwrap(), released)
            };
            tokio::join!(expiring, forced)
        })
        .await
        .unwrap();

    let ((expired, took), (forced, released)) = (expired, forced);
    let (_, reason) = expired.unwrap();
    assert_eq!(reason, LostReason::Expired);
    assert!(
        (Duration::from_millis(250)..Duration::from_secs(3)).contains(&took),
        "lost after {took:?}"
    );
    let (token, reason) = forced.unwrap();
    assert_eq!(reason, LostReason::EndedElsewhere);
    assert_eq!(released.fencing_token, token);
    assert_eq!(service.get(NAMESPACE, "E").await.unwrap(), None);
    assert_eq!(service.get(NAMESPACE, "F").await.unwrap(), None);
}

/// A lease's `lost` future, awaited by the guest while the lease holds a
/// lock, resolves with `ended-elsewhere` when the host revokes the lease;
/// the lease's lock is free afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_lost_future_resolves_on_revoke() {
    let service = service();
    let (mut store, guest) = instance(&service).await;
    let probe = guest.lockd_p3_probe_probe();
    let revoker = service.clone();
    let (out, revoked_id) = store
        .run_concurrent(async |accessor| {
            let holding = probe.call_lease_until_lost(accessor, "L/a".into(), 60_000);
            let revoke = async {
                // Once the guest's lease holds L/a, revoke the lease.
                let deadline = Instant::now() + Duration::from_secs(5);
                let id = loop {
                    if let Some(info) = revoker.get(NAMESPACE, "L/a").await.unwrap() {
                        break info.owner;
                    }
                    assert!(Instant::now() < deadline, "the guest never took L/a");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                };
                tokio::time::sleep(Duration::from_millis(100)).await;
                revoker.revoke_lease(NAMESPACE, &id).await.unwrap();
                id
            };
            let (out, id) = tokio::join!(holding, revoke);
            (out.unwrap(), id)
        })
        .await
        .unwrap();
    let (id, reason) = out.unwrap();
    assert_eq!(reason, LostReason::EndedElsewhere);
    assert_eq!(id, revoked_id);
    assert_eq!(service.get(NAMESPACE, "L/a").await.unwrap(), None);
    assert_eq!(service.get_lease(NAMESPACE, &id).await.unwrap(), None);
}

/// Shared locks and semaphore permits through 0.2.0's `rwlocks` and
/// `semaphores`: two shared holders of one name, two permits of a
/// 2-permit semaphore and a third refused `busy`, as `describe` and the
/// store show them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_locks_and_permits() {
    let service = service();
    let (mut store, guest) = instance(&service).await;
    let probe = guest.lockd_p3_probe_probe();
    let out = store
        .run_concurrent(async |accessor| {
            probe
                .call_claims(accessor, "S".into(), "P".into())
                .await
                .unwrap()
        })
        .await
        .unwrap();
    assert!(matches!(out, Ok((2, 2, Some(2), true))), "{out:?}");
    let shared = service.describe(NAMESPACE, "S").await.unwrap();
    let owners: Vec<&str> = shared
        .holders
        .iter()
        .map(|h| h.info.owner.as_str())
        .collect();
    assert_eq!(owners, ["a", "b"]);
    assert!(shared
        .holders
        .iter()
        .all(|h| h.claim == lockd_core::Claim::Shared));
    let permits = service.describe(NAMESPACE, "P").await.unwrap();
    assert_eq!(permits.holders.len(), 2);
    assert!(permits
        .holders
        .iter()
        .all(|h| h.claim == lockd_core::Claim::Permit { permits: 2 }));
}

/// Holds through 0.2.0's `holds`: two shared holds of one name, one
/// released (it no longer holds), the other's `lost` future resolving with
/// `expired` at its TTL; the name is free afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_holds_release_and_expire() {
    let service = service();
    let (mut store, guest) = instance(&service).await;
    let probe = guest.lockd_p3_probe_probe();
    let started = Instant::now();
    let out = store
        .run_concurrent(async |accessor| {
            probe
                .call_shared_holds(accessor, "H".into(), 300)
                .await
                .unwrap()
        })
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(
        matches!(out, Ok((2, false, LostReason::Expired))),
        "{out:?}"
    );
    assert!(took >= Duration::from_millis(250), "lost after {took:?}");
    assert!(service
        .describe(NAMESPACE, "H")
        .await
        .unwrap()
        .holders
        .is_empty());
    // The guest dropped both holds when its call returned.
    assert_eq!(store.data().locks.live_guards(), 0);
}
