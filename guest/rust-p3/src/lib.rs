//! A WASI 0.3 component on `lockd:lock@0.2.0`, for the host tests
//! (tests/tests/p3): its exports are `async func`s that the host calls
//! concurrently on one instance, so that one task waits for a lock while
//! another answers, a task gives up a wait by dropping it, and a guard's
//! `lost` future (and a lease's) is awaited. One export waits through `lockd:lock@0.1.0`'s
//! synchronous `lock` instead, the contrast the tests measure.
//! `claims` takes shared locks and semaphore permits, `shared-holds` holds,
//! `lead-until-lost` and `watch-until` use elections, `sdk-guard` and
//! `sdk-drop` the Rust SDK's async API (`lockd_guest::p3`).

mod bindings {
    wit_bindgen::generate!({
        path: [
            "../../wit",
            "../../wit/p3",
            "../wit-p3-command/deps/wasi-clocks",
            "wit",
        ],
        world: "lockd:p3-probe/probe-guest",
        generate_all,
    });
}

use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use lockd_guest::p3 as sdk;

use bindings::exports::lockd::p3_probe::probe::{Guest, Waiter};
use bindings::lockd::lock0_2_0::elections::{self, CampaignOptions, LeaderWatch, Leadership};
use bindings::lockd::lock0_2_0::guards::{Guard, GuardOptions};
use bindings::lockd::lock0_2_0::holds::{Hold, HoldMode};
use bindings::lockd::lock0_2_0::leases::{Lease, LeaseOptions};
use bindings::lockd::lock0_2_0::locks::{self, LockOptions};
use bindings::lockd::lock0_2_0::rwlocks::{self, Mode};
use bindings::lockd::lock0_2_0::semaphores;
use bindings::lockd::lock0_2_0::types::{Durability, Error, LostReason};
use bindings::wasi::clocks::monotonic_clock;

/// Every lock of this guest lives 60 s unless released.
const TTL_MS: u32 = 60_000;

struct Probe;

bindings::export!(Probe with_types_in bindings);

/// `a` or, if `b` finishes first, `None` (then `a` is dropped, which
/// cancels the import call it is awaiting).
async fn unless<A: Future, B: Future>(a: A, b: B) -> Option<A::Output> {
    let (mut a, mut b) = (pin!(a), pin!(b));
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = a.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        if b.as_mut().poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        Poll::Pending
    })
    .await
}

fn ephemeral(wait_ms: u32) -> LockOptions {
    LockOptions {
        wait_ms,
        durability: Durability::Ephemeral,
    }
}

impl Guest for Probe {
    async fn wait_lock(name: String, owner: String, wait_ms: u32) -> Result<u64, Error> {
        let grant = locks::lock(name, owner, TTL_MS, ephemeral(wait_ms)).await?;
        Ok(grant.fencing_token)
    }

    async fn wait_lock_v1(name: String, owner: String, wait_ms: u32) -> Result<u64, String> {
        use bindings::lockd::lock0_1_0::{locks as locks_v1, types as types_v1};
        let options = locks_v1::LockOptions {
            wait_ms,
            durability: types_v1::Durability::Ephemeral,
        };
        let grant = locks_v1::lock(&name, &owner, TTL_MS, options).map_err(|e| format!("{e:?}"))?;
        Ok(grant.fencing_token)
    }

    async fn ping(name: String) -> bool {
        matches!(locks::get(name).await, Ok(Some(_)))
    }

    async fn give_up(
        name: String,
        owner: String,
        via: Waiter,
        wait_ms: u32,
        give_up_ms: u32,
    ) -> Result<bool, Error> {
        let deadline = monotonic_clock::wait_for(u64::from(give_up_ms) * 1_000_000);
        let options = GuardOptions {
            wait_ms,
            durability: Durability::Ephemeral,
            keep_alive: false,
        };
        match via {
            Waiter::Lock => {
                let lock = locks::lock(name.clone(), owner.clone(), TTL_MS, ephemeral(wait_ms));
                match unless(lock, deadline).await {
                    Some(grant) => {
                        locks::unlock(name, owner, Some(grant?.fencing_token)).await?;
                        Ok(true)
                    }
                    None => Ok(false),
                }
            }
            Waiter::Guard => match unless(Guard::acquire(name, TTL_MS, options), deadline).await {
                Some(guard) => {
                    guard?.release().await?;
                    Ok(true)
                }
                None => Ok(false),
            },
            Waiter::SharedHold | Waiter::PermitHold => {
                let hold = async {
                    match via {
                        Waiter::PermitHold => Hold::acquire_permit(name, 1, TTL_MS, options).await,
                        _ => Hold::acquire(name, HoldMode::Shared, TTL_MS, options).await,
                    }
                };
                match unless(hold, deadline).await {
                    Some(hold) => {
                        hold?.release().await?;
                        Ok(true)
                    }
                    None => Ok(false),
                }
            }
        }
    }

    async fn hold_until_lost(
        name: String,
        ttl_ms: u32,
        keep_alive: bool,
    ) -> Result<(u64, LostReason), Error> {
        let options = GuardOptions {
            wait_ms: 0,
            durability: Durability::Ephemeral,
            keep_alive,
        };
        let guard = Guard::acquire(name, ttl_ms, options).await?;
        let token = guard.fencing_token();
        let reason = guard.lost().await;
        Ok((token, reason))
    }

    async fn lease_until_lost(name: String, ttl_ms: u32) -> Result<(String, LostReason), Error> {
        let options = LeaseOptions {
            durability: Durability::Ephemeral,
            keep_alive: false,
        };
        let lease = Lease::grant(ttl_ms, options).await?;
        lease.lock(name, 0).await?;
        let reason = lease.lost().await;
        Ok((lease.id(), reason))
    }

    async fn claims(name: String, sem: String) -> Result<(u32, u32, Option<u32>, bool), Error> {
        for owner in ["a", "b"] {
            rwlocks::lock_shared(name.clone(), owner.into(), TTL_MS, ephemeral(0)).await?;
        }
        for owner in ["x", "y"] {
            semaphores::acquire(sem.clone(), owner.into(), 2, TTL_MS, ephemeral(0)).await?;
        }
        let third = semaphores::acquire(sem.clone(), "z".into(), 2, TTL_MS, ephemeral(0)).await;
        let count = |state: &rwlocks::NameState, mode: Mode| {
            state.holders.iter().filter(|h| h.mode == mode).count() as u32
        };
        let shared = count(&rwlocks::describe(name).await?, Mode::Shared);
        let sem_state = rwlocks::describe(sem).await?;
        let permits = count(&sem_state, Mode::Permit);
        Ok((
            shared,
            permits,
            sem_state.permits,
            matches!(third, Err(Error::Busy(_))),
        ))
    }

    async fn shared_holds(name: String, ttl_ms: u32) -> Result<(u32, bool, LostReason), Error> {
        let options = || GuardOptions {
            wait_ms: 0,
            durability: Durability::Ephemeral,
            keep_alive: false,
        };
        let first = Hold::acquire(name.clone(), HoldMode::Shared, ttl_ms, options()).await?;
        let second = Hold::acquire(name.clone(), HoldMode::Shared, ttl_ms, options()).await?;
        let state = rwlocks::describe(name).await?;
        let shared = state
            .holders
            .iter()
            .filter(|h| h.mode == Mode::Shared)
            .count() as u32;
        first.release().await?;
        let first_held = first.is_held().await;
        let reason = second.lost().await;
        Ok((shared, first_held, reason))
    }

    async fn lead_until_lost(
        name: String,
        value: String,
        ttl_ms: u32,
        wait_ms: u32,
        keep_alive: bool,
    ) -> Result<(u64, String, LostReason), Error> {
        let options = CampaignOptions {
            wait_ms,
            durability: Durability::Ephemeral,
            keep_alive,
        };
        let leadership = Leadership::campaign(name.clone(), value.clone(), ttl_ms, options).await?;
        let candidate = leadership.candidate();
        let leads = |leader: &Option<elections::LeaderInfo>, value: &str| {
            leader
                .as_ref()
                .is_some_and(|l| l.candidate == candidate && l.value == value)
        };
        if !leads(&elections::leader(name.clone()).await?, &value) {
            return Err(Error::InvalidArgument(
                "leader does not show the campaign".into(),
            ));
        }
        let proclaimed = format!("{value}!");
        leadership.proclaim(proclaimed.clone()).await?;
        if !leads(&elections::leader(name).await?, &proclaimed) {
            return Err(Error::InvalidArgument(
                "leader does not show the proclaimed value".into(),
            ));
        }
        let reason = leadership.lost().await;
        Ok((leadership.fencing_token(), candidate, reason))
    }

    async fn give_up_campaign(name: String, wait_ms: u32, give_up_ms: u32) -> Result<bool, Error> {
        let deadline = monotonic_clock::wait_for(u64::from(give_up_ms) * 1_000_000);
        let options = CampaignOptions {
            wait_ms,
            durability: Durability::Ephemeral,
            keep_alive: false,
        };
        let campaign = Leadership::campaign(name, "v".into(), TTL_MS, options);
        match unless(campaign, deadline).await {
            Some(leadership) => {
                leadership?.resign().await?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    async fn watch_until(name: String, value: String) -> Result<u32, Error> {
        let watch = LeaderWatch::open(name).await?;
        let mut changes = 0;
        loop {
            let leader = watch.current().await?;
            if leader.is_some_and(|l| l.value == value) {
                return Ok(changes);
            }
            watch.changed().await;
            changes += 1;
        }
    }

    async fn sdk_guard(
        name: String,
        ttl_ms: u32,
        wait_ms: u32,
    ) -> Result<(u64, String, LostReason), String> {
        let options = lockd_guest::LockOptions::ephemeral()
            .with_wait(Duration::from_millis(u64::from(wait_ms)));
        let ttl = Duration::from_millis(u64::from(ttl_ms));
        let guard = sdk::Guard::acquire(&name, ttl, options)
            .await
            .map_err(|e| e.to_string())?;
        let holder = sdk::get(&name).await.map_err(|e| e.to_string())?;
        if holder.map(|h| h.owner) != Some(guard.owner()) {
            return Err(format!(
                "get does not show the guard's owner {}",
                guard.owner()
            ));
        }
        let reason = match guard.lost().await {
            sdk::LostReason::Released => LostReason::Released,
            sdk::LostReason::Expired => LostReason::Expired,
            sdk::LostReason::EndedElsewhere => LostReason::EndedElsewhere,
        };
        Ok((guard.fencing_token(), guard.owner(), reason))
    }

    async fn sdk_lead(
        name: String,
        value: String,
        wait_ms: u32,
    ) -> Result<(u64, LostReason), String> {
        let options = lockd_guest::HoldOptions::default()
            .with_wait(Duration::from_millis(u64::from(wait_ms)));
        let leading = sdk::Leadership::campaign(&name, &value, Duration::from_secs(60), options)
            .await
            .map_err(|e| e.to_string())?;
        let watch = sdk::LeaderWatch::open(&name)
            .await
            .map_err(|e| e.to_string())?;
        let shown = |leader: Option<lockd_guest::LeaderInfo>, value: &str| {
            leader.is_some_and(|l| l.candidate == leading.candidate() && l.value == value)
        };
        let now = sdk::leader(&name).await.map_err(|e| e.to_string())?;
        if !shown(now, &value) {
            return Err("leader does not show the campaign".into());
        }
        let proclaimed = format!("{value}!");
        leading
            .proclaim(&proclaimed)
            .await
            .map_err(|e| e.to_string())?;
        watch.changed().await;
        let now = watch.current().await.map_err(|e| e.to_string())?;
        if !shown(now, &proclaimed) {
            return Err("the watch does not show the proclaimed value".into());
        }
        let reason = match leading.lost().await {
            sdk::LostReason::Released => LostReason::Released,
            sdk::LostReason::Expired => LostReason::Expired,
            sdk::LostReason::EndedElsewhere => LostReason::EndedElsewhere,
        };
        Ok((leading.fencing_token(), reason))
    }

    async fn sdk_drop(name: String) -> Result<u64, String> {
        let guard = sdk::Guard::acquire(
            &name,
            Duration::from_secs(60),
            lockd_guest::LockOptions::ephemeral(),
        )
        .await
        .map_err(|e| e.to_string())?;
        Ok(guard.fencing_token())
    }
}
