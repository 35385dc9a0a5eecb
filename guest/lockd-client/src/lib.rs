//! `lockd-client`: the `lockd:lock@0.1.0` capability for hosts that do not
//! run lockd (Spin, `wasmtime serve`, jco, ...).
//!
//! This component **exports** `lockd:lock/types`, `lockd:lock/locks` and
//! `lockd:lock/guards` at `@0.1.0` and implements them over `wasi:http`
//! against a lockd server's REST API (`POST /v1/locks/lock|unlock|extend|get`,
//! see `docs/http.md`). Composed into a guest that imports `lockd:lock`
//! (`lockd plug APP.wasm -o OUT.wasm`), it gives that guest locks on any host
//! that offers WASI 0.2 with outgoing HTTP. It imports only WASI 0.2
//! releases and no `lockd:` interface: `wasi:http/outgoing-handler` and
//! `wasi:http/types` (`@0.2.4`, from the `wasip2` crate), and at `@0.2.6`
//! (merged with what Rust's standard library imports) `wasi:cli/environment`,
//! `wasi:random/random`, `wasi:io/*`, `wasi:clocks/monotonic-clock`, plus
//! `wasi:cli/{exit,stdin,stdout,stderr,terminal-*}` and
//! `wasi:random/insecure-seed`, which the standard library brings (panic
//! output, hash seeds). `tests/tests/lockd_client` checks this.
//!
//! Build: `bash guest/build-all.sh lockd-client` writes
//! `target/guests/lockd-client.wasm`.
//!
//! # Configuration
//!
//! Read once per instance from `wasi:cli/environment` (an empty value counts
//! as unset):
//!
//! | variable | meaning |
//! |---|---|
//! | `LOCKD_URL` | required: the server, `http://HOST:PORT[/PATH]` or `https://...` (a bare `HOST:PORT` is `http://`). A path is a prefix for the routes, for a server behind a proxy. |
//! | `LOCKD_NAMESPACE` | the namespace of every lock (default `default`) |
//! | `LOCKD_AUTH_TOKEN` | sent as `Authorization: Bearer <token>` when set |
//!
//! Without `LOCKD_URL` (or with one that is not an HTTP URL) every call
//! answers `unavailable` with a message that names the variable. The host
//! must also let the component reach the server (in Spin,
//! `allowed_outbound_hosts = ["http://127.0.0.1:7450"]`; a refusal is
//! `unavailable` with a hint).
//!
//! # Semantics
//!
//! The server does the work, so the semantics are the server's: FIFO waiting
//! (`wait-ms` is sent as `wait_ms` and the server queues the request; the
//! reply's first-byte timeout is `wait-ms` + 30 s, the connect timeout 5 s),
//! `durability` passed through, fencing tokens as exact u64.
//!
//! Every WIT error maps one to one from the reply's `status` word: `busy`
//! (with the holder's `lock-info`), `not_owner`, `not_held`,
//! `invalid_argument`, `denied` and `unavailable` become the variant of the
//! same name, with the message's detail (`lockd_api::ErrorReply::detail`:
//! less its `"invalid argument: "`, `"denied: "` or `"unavailable: "`
//! label), as the native host gives it. Requests and replies are
//! `lockd-api`'s types (see `call.rs`).
//! HTTP 401 `unauthorized` (a missing or wrong `LOCKD_AUTH_TOKEN`) is
//! `denied`. A server that cannot be reached, a timeout, a reply over 1 MiB,
//! and any reply that is not the documented JSON (wrong types, unknown
//! status words, a 404 from a path that is no route) are `unavailable` with
//! the reason. The server validates names, owners and limits; this component
//! passes them through, except that a request body over 1 MiB (which every
//! lockd server refuses with 413) answers `invalid-argument` without being
//! sent.
//!
//! Guards: `acquire` takes the lock for a fresh owner
//! `guard-<32 hex digits>` (128 bits from `wasi:random/random`, as the native
//! host does); `is-held` is a `get` that compares owner and token (`false`
//! when the server cannot answer); `extend` and `release` are `extend` and
//! `unlock` with the guard's owner (and token); after `release`, or after
//! `extend` / `release` on a released guard, the guard answers `not-held`.
//! Dropping the guard sends an `unlock` with its token, errors ignored.
//!
//! # Differences from the native host
//!
//! - A guard is released when the guest drops it. If the instance traps, or
//!   the host discards it without running resource destructors, nothing is
//!   sent and the lock is freed only when its TTL runs out. The native host
//!   releases such guards at once.
//! - Each call is one HTTP round trip to the server, on a new connection
//!   (wasi-http 0.2 has no connection reuse a guest can rely on): expect a
//!   millisecond or more per call rather than microseconds.
//! - The namespace comes from `LOCKD_NAMESPACE`, not from the host's
//!   configuration; anyone who can set it, and has the token, can reach any
//!   namespace of that server.
//! - There is no per-instance cap on live guards (the native host's
//!   `max_guards`); the server's namespace quota still applies.
//! - `unavailable` also covers the network: the outcome of a call whose reply
//!   was lost is unknown (retry, or check with `get`).
//!
//! # Testing it
//!
//! The component has no `wasi:cli/run` of its own: compose it into a guest
//! (`lockd plug target/guests/rust-conformance.wasm -o plugged.wasm`) and run
//! that on a host with WASI 0.2 and `wasi:http` (wasmtime with
//! `wasmtime_wasi::p2::add_to_linker_async` and
//! `wasmtime_wasi_http::p2::add_only_http_to_linker_async`), with
//! `LOCKD_URL` in the guest's environment pointing at a `lockd serve`. The
//! conformance guest then passes its 12 steps against the server.

mod call;
mod http;

use std::cell::Cell;

use lockd_api::{
    ExtendRequest, GetRequest, GrantReply, LeaseFoundReply, LeaseGrantRequest, LeaseGrantedReply,
    LeaseRefreshedReply, LeaseRequest, LeaseRevokedReply, LockRequest, Route, Status, StatusReply,
    UnlockRequest,
};

use bindings::exports::lockd::lock::guards::{self, GuardOptions, GuestGuard};
use bindings::exports::lockd::lock::leases::{self, GuestLease, LeaseOptions};
use bindings::exports::lockd::lock::locks::{self, LockOptions};
use bindings::exports::lockd::lock::types::{Error, Grant, LockInfo};
use wasip2::io::poll::Pollable;

/// The `wit-bindgen` bindings of the `lockd:client/client` world: the
/// `lockd:lock` interfaces of `wit/lock.wit` as exports.
mod bindings {
    wit_bindgen::generate!({
        inline: r#"
            package lockd:client@0.1.0;

            /// A component that provides the lock capability.
            world client {
                export lockd:lock/types@0.1.0;
                export lockd:lock/locks@0.1.0;
                export lockd:lock/guards@0.1.0;
                export lockd:lock/leases@0.1.0;
            }
        "#,
        path: "../../wit",
        world: "lockd:client/client",
        with: {
            "wasi:io/poll@0.2.0": wasip2::io::poll,
        },
    });
}

bindings::export!(Client with_types_in bindings);

/// Implements the exported interfaces.
#[derive(Debug)]
struct Client;

impl locks::Guest for Client {
    fn lock(
        name: String,
        owner: String,
        ttl_ms: u32,
        options: LockOptions,
    ) -> Result<Grant, Error> {
        lock(&name, &owner, ttl_ms, options)
    }

    fn unlock(name: String, owner: String, fencing_token: Option<u64>) -> Result<(), Error> {
        unlock(&name, &owner, fencing_token)
    }

    fn extend(name: String, owner: String, ttl_ms: u32) -> Result<Grant, Error> {
        extend(&name, &owner, ttl_ms)
    }

    fn get(name: String) -> Result<Option<LockInfo>, Error> {
        get(&name)
    }
}

impl guards::Guest for Client {
    type Guard = Guard;
}

impl leases::Guest for Client {
    type Lease = Lease;
}

/// What `keep-alive` answers here: a component on a foreign host has no
/// task that could renew in the background (docs/portable.md).
fn no_keep_alive() -> Error {
    Error::Denied(
        "keep-alive needs lockd's own host; composed with lockd-client, refresh or extend \
         yourself before the TTL runs out"
            .to_owned(),
    )
}

/// A pollable ready at `expires_at_ms` (Unix ms) by this host's clocks:
/// the loss a composed client can know of without asking the server.
fn ready_at(expires_at_ms: u64) -> Pollable {
    let now = wasip2::clocks::wall_clock::now();
    let now_ms = now.seconds * 1_000 + u64::from(now.nanoseconds / 1_000_000);
    let wait_ns = expires_at_ms
        .saturating_sub(now_ms)
        .saturating_mul(1_000_000);
    wasip2::clocks::monotonic_clock::subscribe_duration(wait_ns)
}

fn lock(name: &str, owner: &str, ttl_ms: u32, options: LockOptions) -> Result<Grant, Error> {
    let config = http::config()?;
    let request = LockRequest {
        namespace: Some(config.namespace.clone()),
        name: name.to_owned(),
        owner: Some(owner.to_owned()),
        ttl_ms: Some(ttl_ms.into()),
        wait_ms: Some(options.wait_ms.into()),
        durability: Some(call::wire_durability(options.durability)),
        lease_id: None,
        mode: None,
        permits: None,
    };
    let reply: GrantReply = call::post(
        config,
        Route::Lock,
        &request,
        Status::Acquired,
        options.wait_ms,
    )?;
    Ok(grant(&reply))
}

fn unlock(name: &str, owner: &str, fencing_token: Option<u64>) -> Result<(), Error> {
    let config = http::config()?;
    let request = UnlockRequest {
        namespace: Some(config.namespace.clone()),
        name: name.to_owned(),
        owner: owner.to_owned(),
        fencing_token,
    };
    let _: StatusReply = call::post(config, Route::Unlock, &request, Status::Unlocked, 0)?;
    Ok(())
}

fn extend(name: &str, owner: &str, ttl_ms: u32) -> Result<Grant, Error> {
    let config = http::config()?;
    let request = ExtendRequest {
        namespace: Some(config.namespace.clone()),
        name: name.to_owned(),
        owner: owner.to_owned(),
        ttl_ms: ttl_ms.into(),
    };
    let reply: GrantReply = call::post(config, Route::Extend, &request, Status::Extended, 0)?;
    Ok(grant(&reply))
}

fn get(name: &str) -> Result<Option<LockInfo>, Error> {
    let config = http::config()?;
    let request = GetRequest {
        namespace: Some(config.namespace.clone()),
        name: name.to_owned(),
    };
    let found = call::get(config, &request)?;
    Ok(found.map(|found| LockInfo {
        owner: found.owner,
        fencing_token: found.fencing_token,
        expires_at_ms: found.expires_at_ms,
        durability: call::wit_durability(found.durability),
    }))
}

fn grant(reply: &GrantReply) -> Grant {
    Grant {
        fencing_token: reply.fencing_token,
        expires_at_ms: reply.expires_at_ms,
    }
}

/// A fresh owner for a guard: 128 random bits, as the native host makes it.
fn fresh_owner() -> String {
    let mut bytes = [0u8; 16];
    for (slot, byte) in bytes
        .iter_mut()
        .zip(wasip2::random::random::get_random_bytes(16))
    {
        *slot = byte;
    }
    format!("guard-{:032x}", u128::from_be_bytes(bytes))
}

/// The state behind an exported `guard` resource.
#[derive(Debug)]
struct Guard {
    name: String,
    owner: String,
    token: u64,
    expires_at_ms: Cell<u64>,
    /// Released by `release`: dropping it sends nothing more.
    released: Cell<bool>,
}

impl GuestGuard for Guard {
    fn acquire(name: String, ttl_ms: u32, options: LockOptions) -> Result<guards::Guard, Error> {
        let owner = fresh_owner();
        let grant = lock(&name, &owner, ttl_ms, options)?;
        Ok(guards::Guard::new(Guard {
            name,
            owner,
            token: grant.fencing_token,
            expires_at_ms: Cell::new(grant.expires_at_ms),
            released: Cell::new(false),
        }))
    }

    fn acquire_with(
        name: String,
        ttl_ms: u32,
        options: GuardOptions,
    ) -> Result<guards::Guard, Error> {
        if options.keep_alive {
            return Err(no_keep_alive());
        }
        let options = LockOptions {
            wait_ms: options.wait_ms,
            durability: options.durability,
        };
        Self::acquire(name, ttl_ms, options)
    }

    fn subscribe_lost(&self) -> Pollable {
        if self.released.get() {
            return ready_at(0);
        }
        ready_at(self.expires_at_ms.get())
    }

    fn fencing_token(&self) -> u64 {
        self.token
    }

    fn expires_at_ms(&self) -> u64 {
        self.expires_at_ms.get()
    }

    fn owner(&self) -> String {
        self.owner.clone()
    }

    fn is_held(&self) -> bool {
        if self.released.get() {
            return false;
        }
        // Unknown is not "held": a caller acting on `true` must be right.
        matches!(
            get(&self.name),
            Ok(Some(info)) if info.owner == self.owner && info.fencing_token == self.token
        )
    }

    fn extend(&self, ttl_ms: u32) -> Result<Grant, Error> {
        if self.released.get() {
            return Err(Error::NotHeld);
        }
        let grant = extend(&self.name, &self.owner, ttl_ms)?;
        self.expires_at_ms.set(grant.expires_at_ms);
        Ok(grant)
    }

    fn release(&self) -> Result<(), Error> {
        if self.released.get() {
            return Err(Error::NotHeld);
        }
        let outcome = unlock(&self.name, &self.owner, Some(self.token));
        // Unless the outcome is unknown, this guard holds nothing now.
        if !matches!(outcome, Err(Error::Unavailable(_))) {
            self.released.set(true);
        }
        outcome
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if !self.released.get() {
            // Not-held or not-owner means the lease already ended, and an
            // unreachable server leaves the lock to its TTL: nobody to tell.
            let _ = unlock(&self.name, &self.owner, Some(self.token));
        }
    }
}

/// The state behind an exported `lease` resource.
#[derive(Debug)]
struct Lease {
    id: String,
    expires_at_ms: Cell<u64>,
    /// Revoked by `revoke`: dropping it sends nothing more.
    revoked: Cell<bool>,
}

/// A call that names one lease: refresh, revoke or get.
fn lease_call<T: serde::de::DeserializeOwned>(
    route: Route,
    id: &str,
    success: Status,
) -> Result<T, Error> {
    let config = http::config()?;
    let request = LeaseRequest {
        namespace: Some(config.namespace.clone()),
        lease_id: id.to_owned(),
    };
    call::post(config, route, &request, success, 0)
}

impl GuestLease for Lease {
    fn grant(ttl_ms: u32, options: LeaseOptions) -> Result<leases::Lease, Error> {
        if options.keep_alive {
            return Err(no_keep_alive());
        }
        let config = http::config()?;
        let request = LeaseGrantRequest {
            namespace: Some(config.namespace.clone()),
            ttl_ms: ttl_ms.into(),
            durability: Some(call::wire_durability(options.durability)),
        };
        let granted: LeaseGrantedReply =
            call::post(config, Route::LeaseGrant, &request, Status::Granted, 0)?;
        let (id, expires_at_ms) = (granted.lease_id, granted.expires_at_ms);
        Ok(leases::Lease::new(Lease {
            id,
            expires_at_ms: Cell::new(expires_at_ms),
            revoked: Cell::new(false),
        }))
    }

    fn id(&self) -> String {
        self.id.clone()
    }

    fn expires_at_ms(&self) -> u64 {
        self.expires_at_ms.get()
    }

    fn lock(&self, name: String, wait_ms: u32) -> Result<Grant, Error> {
        let config = http::config()?;
        let request = LockRequest {
            namespace: Some(config.namespace.clone()),
            name,
            owner: None,
            ttl_ms: None,
            wait_ms: Some(wait_ms.into()),
            durability: None,
            lease_id: Some(self.id.clone()),
            mode: None,
            permits: None,
        };
        let reply: GrantReply =
            call::post(config, Route::Lock, &request, Status::Acquired, wait_ms)?;
        Ok(grant(&reply))
    }

    fn unlock(&self, name: String) -> Result<(), Error> {
        unlock(&name, &self.id, None)
    }

    fn refresh(&self) -> Result<u64, Error> {
        let reply: LeaseRefreshedReply =
            lease_call(Route::LeaseRefresh, &self.id, Status::Refreshed)?;
        self.expires_at_ms.set(reply.expires_at_ms);
        Ok(reply.expires_at_ms)
    }

    fn revoke(&self) -> Result<(), Error> {
        if self.revoked.get() {
            return Err(Error::NotHeld);
        }
        let outcome =
            lease_call::<LeaseRevokedReply>(Route::LeaseRevoke, &self.id, Status::Revoked)
                .map(drop);
        // Unless the outcome is unknown, this lease holds nothing now.
        if !matches!(outcome, Err(Error::Unavailable(_))) {
            self.revoked.set(true);
        }
        outcome
    }

    fn is_alive(&self) -> bool {
        // Unknown is not "alive": a caller acting on `true` must be right.
        !self.revoked.get()
            && lease_call::<LeaseFoundReply>(Route::LeaseGet, &self.id, Status::Found).is_ok()
    }

    fn subscribe_lost(&self) -> Pollable {
        if self.revoked.get() {
            return ready_at(0);
        }
        ready_at(self.expires_at_ms.get())
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.revoked.get() {
            // Dropping a lease revokes it; if the server cannot be reached,
            // the TTL ends it.
            let _ = lease_call::<LeaseRevokedReply>(Route::LeaseRevoke, &self.id, Status::Revoked);
        }
    }
}
