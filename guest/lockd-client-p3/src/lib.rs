//! `lockd-client-p3`: the `lockd:lock@0.2.0` capability (WASI 0.3) for
//! hosts that do not run lockd but run WASI 0.3 components (wasmtime with
//! its p3 features, `wasmtime run -Wcomponent-model-async -Sp3,http`).
//!
//! This component **exports** every interface of `lockd:lock@0.2.0`
//! (`types`, `locks`, `guards`, `leases`, `rwlocks`, `semaphores`, `holds`
//! and `elections`) as `async func`s and implements them over
//! `wasi:http/client@0.3.0`'s `send` against a lockd server's REST API, as
//! `guest/lockd-client` does for `0.1.0` over WASI 0.2. Composed into a
//! guest that imports `lockd:lock@0.2.0` (`lockd plug APP.wasm -o
//! OUT.wasm` picks this client for that version), it gives that guest locks
//! on a stock WASI 0.3 host.
//!
//! It imports `wasi:http/{types,client}@0.3.0`, `wasi:cli/environment`,
//! `wasi:clocks/{monotonic-clock,system-clock}` and `wasi:random/random`
//! at `@0.3.0`, plus the WASI 0.2 interfaces Rust's standard library brings
//! on `wasm32-wasip2` (so the host links WASI 0.2 too, as wasmtime's CLI
//! does). Build: `bash guest/build-all.sh lockd-client-p3` writes
//! `target/guests/lockd-client-p3.wasm`.
//!
//! Configuration (`LOCKD_URL`, `LOCKD_NAMESPACE`, `LOCKD_AUTH_TOKEN`), the
//! REST calls, the mapping of replies to WIT errors, owners and candidates
//! are `guest/lockd-client`'s: its modules `config`, `reply` and `wire` are
//! this crate's too (`#[path]`), compiled against this crate's bindings.
//!
//! # Waiting without blocking
//!
//! Every call is an awaited HTTP request: a `lock` with `wait-ms` is a long
//! poll (`wait_ms` sent, the server answers when granted or when the wait
//! ends) during which the guest's other tasks run. A task that stops
//! awaiting drops the request, and with it the connection; the server then
//! takes the waiter out of the queue. A grant the server made just before
//! it saw the connection close is lost on the way and held until its TTL.
//!
//! # Lost futures and drops
//!
//! `lost` futures resolve by polling (see `lost.rs`): every 250 ms while a
//! future is awaited, one `get` (a lease's `get`) asks whether the grant
//! still holds, so a force-release, revoke, take-over or expiry is seen
//! within about 250 ms plus a request; `release` here resolves them at
//! once. The watcher runs on the task of the call that made the resource
//! (a component runs only inside a task, and `lost` and destructors may not
//! wait), so dropping a guard, hold, leadership or lease gives it back
//! within 250 ms, if the instance still runs then. `leader-watch.changed`
//! asks for the leader every 500 ms until it differs.
//!
//! # Differences from the native host
//!
//! Those of `guest/lockd-client` (docs/portable.md) but keep-alive: each
//! call is one HTTP round trip; the namespace comes from `LOCKD_NAMESPACE`;
//! `unavailable` covers the network. And the polling above where the native
//! host follows the store's events. Keep-alive works (the watcher renews at
//! a third of the TTL) for as long as the instance runs the task of the
//! call that made the resource.

mod call;
#[path = "../../lockd-client/src/config.rs"]
mod config;
mod elections;
mod grants;
mod http;
mod leases;
mod lost;
#[path = "../../lockd-client/src/reply.rs"]
mod reply;
#[path = "../../lockd-client/src/wire.rs"]
mod wire;

use lockd_api::{FoundReply, FreeReply, GrantReply, LockClaim, Route, Status, StatusReply};

use bindings::exports::lockd::lock::locks::{self, LockOptions};
use bindings::exports::lockd::lock::rwlocks::{self, NameState};
use bindings::exports::lockd::lock::semaphores;
use bindings::exports::lockd::lock::types::{Error, Grant, LockInfo};

/// The `wit-bindgen` bindings of `lockd:client-p3/client`
/// (`wit/client.wit`): every interface of `wit/p3/lock.wit` as an export.
mod bindings {
    wit_bindgen::generate!({
        path: ["../../wit/p3", "wit"],
        world: "lockd:client-p3/client",
        generate_all,
    });
}

bindings::export!(Client with_types_in bindings);

/// Implements the exported interfaces.
#[derive(Debug)]
struct Client;

impl locks::Guest for Client {
    async fn lock(
        name: String,
        owner: String,
        ttl_ms: u32,
        options: LockOptions,
    ) -> Result<Grant, Error> {
        lock(&name, &owner, ttl_ms, options, LockClaim::Exclusive).await
    }

    async fn unlock(name: String, owner: String, fencing_token: Option<u64>) -> Result<(), Error> {
        unlock(&name, &owner, fencing_token).await
    }

    async fn extend(name: String, owner: String, ttl_ms: u32) -> Result<Grant, Error> {
        extend(&name, &owner, ttl_ms).await
    }

    async fn get(name: String) -> Result<Option<LockInfo>, Error> {
        Ok(get(&name).await?.ok().map(wire::found_info))
    }
}

impl rwlocks::Guest for Client {
    async fn lock_shared(
        name: String,
        owner: String,
        ttl_ms: u32,
        options: LockOptions,
    ) -> Result<Grant, Error> {
        lock(&name, &owner, ttl_ms, options, LockClaim::Shared).await
    }

    async fn describe(name: String) -> Result<NameState, Error> {
        Ok(wire::name_state(get(&name).await?))
    }
}

impl semaphores::Guest for Client {
    async fn acquire(
        name: String,
        owner: String,
        permits: u32,
        ttl_ms: u32,
        options: LockOptions,
    ) -> Result<Grant, Error> {
        let claim = LockClaim::Permit { permits };
        lock(&name, &owner, ttl_ms, options, claim).await
    }
}

/// `POST /v1/locks/lock` for `owner`: `claim` says what it takes of `name`.
async fn lock(
    name: &str,
    owner: &str,
    ttl_ms: u32,
    options: LockOptions,
    claim: LockClaim,
) -> Result<Grant, Error> {
    let config = http::config()?;
    let request = wire::lock_request(config, name, owner, ttl_ms, &options, claim);
    let reply: GrantReply = call::post(
        config,
        Route::Lock,
        &request,
        Status::Acquired,
        options.wait_ms,
    )
    .await?;
    Ok(wire::grant(&reply))
}

async fn unlock(name: &str, owner: &str, fencing_token: Option<u64>) -> Result<(), Error> {
    let config = http::config()?;
    let request = wire::unlock_request(config, name, owner, fencing_token);
    let _: StatusReply = call::post(config, Route::Unlock, &request, Status::Unlocked, 0).await?;
    Ok(())
}

async fn extend(name: &str, owner: &str, ttl_ms: u32) -> Result<Grant, Error> {
    let config = http::config()?;
    let request = wire::extend_request(config, name, owner, ttl_ms);
    let reply: GrantReply =
        call::post(config, Route::Extend, &request, Status::Extended, 0).await?;
    Ok(wire::grant(&reply))
}

/// `POST /v1/locks/get`: the holders of `name`, or what the server says of
/// a free one.
async fn get(name: &str) -> Result<Result<FoundReply, FreeReply>, Error> {
    let config = http::config()?;
    call::find(config, Route::Get, &wire::get_request(config, name)).await
}

/// Whether the server shows `owner` holding `name` under `token`, in any
/// mode. Unknown is not "held": a caller acting on `true` must be right.
async fn holds(name: &str, owner: &str, token: u64) -> bool {
    matches!(get(name).await, Ok(Ok(found)) if wire::holds(&found, owner, token))
}

/// A fresh owner `PREFIX-<32 hex digits>`: 128 random bits, as the native
/// host makes guard owners and candidates.
fn fresh_id(prefix: &str) -> String {
    wire::fresh_id(
        prefix,
        &bindings::wasi::random::random::get_random_bytes(16),
    )
}
