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
//! Configuration (`LOCKD_URL`, one host or several, `LOCKD_NAMESPACE`,
//! `LOCKD_AUTH_TOKEN`), failover between the hosts (keep-alive renewals
//! included), the REST calls, the mapping of replies to errors, owners and candidates, the
//! state of each resource and its watcher are `guest/lockd-client-core`'s,
//! shared with `guest/lockd-client`. Here are only the bindings and the
//! exports (this file and `resources.rs`), the conversions between the
//! core's types and this package's WIT types (`convert.rs`), and the I/O
//! over WASI 0.3 (`io.rs`): the environment, one awaited `POST` through
//! `wasi:http/client`, random bytes, the clocks, and the tasks.
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
//! `lost` futures resolve by polling (see `lockd_client_core::Watch`):
//! every 250 ms while a future is awaited, one `get` (a lease's `get`) asks
//! whether the grant still holds, so a force-release, revoke, take-over or
//! expiry is seen within about 250 ms plus a request; `release` here
//! resolves them at once. The watcher runs on the task of the call that made the resource
//! (a component runs only inside a task, and `lost` and destructors may not
//! wait), so dropping a guard, hold, leadership or lease gives it back
//! within 250 ms, if the instance still runs then. `leader-watch.changed`
//! asks for the leader every 500 ms until it differs.
//!
//! # Differences from the native host
//!
//! Those of `guest/lockd-client` (docs/guests.md#other-hosts) but keep-alive: each
//! call is one HTTP round trip; the namespace comes from `LOCKD_NAMESPACE`;
//! `unavailable` covers the network. And the polling above where the native
//! host follows the store's events. Keep-alive works (the watcher renews at
//! a third of the TTL) for as long as the instance runs the task of the
//! call that made the resource.

mod convert;
mod io;
mod resources;

use lockd_client_core::LockClaim;

use bindings::exports::lockd::lock::locks::{self, LockOptions};
use bindings::exports::lockd::lock::rwlocks::{self, NameState};
use bindings::exports::lockd::lock::semaphores;
use bindings::exports::lockd::lock::types::{Error, Grant, LockInfo};
use convert::wit;
use io::Http;

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
        wit(lockd_client_core::unlock(&Http, &name, &owner, fencing_token).await)
    }

    async fn extend(name: String, owner: String, ttl_ms: u32) -> Result<Grant, Error> {
        wit(lockd_client_core::extend(&Http, &name, &owner, ttl_ms).await)
    }

    async fn get(name: String) -> Result<Option<LockInfo>, Error> {
        let info = lockd_client_core::get(&Http, &name).await?;
        Ok(info.map(LockInfo::from))
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
        wit(lockd_client_core::describe(&Http, &name).await)
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
    let options = options.into();
    wit(lockd_client_core::lock(&Http, name, owner, ttl_ms, &options, claim).await)
}
