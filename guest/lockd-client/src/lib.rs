//! `lockd-client`: the `lockd:lock@0.1.0` capability for hosts that do not
//! run lockd (Spin, `wasmtime serve`, jco, ...).
//!
//! This component **exports** every interface of `lockd:lock@0.1.0`
//! (`types`, `locks`, `guards`, `leases`, `rwlocks`, `semaphores`, `holds`
//! and `elections`: all of the `imports` world) and implements them over
//! `wasi:http` against a lockd server's REST API (`POST
//! /v1/locks/lock|unlock|extend|get`, `/v1/leases/*`, `/v1/elections/*`,
//! see `docs/reference.md`). Composed into a guest that imports `lockd:lock`
//! (`lockd plug APP.wasm -o OUT.wasm`), it gives that guest locks on any host
//! that offers WASI 0.2 with outgoing HTTP. It imports only WASI 0.2
//! releases and no `lockd:` interface: `wasi:http/outgoing-handler` and
//! `wasi:http/types` (`@0.2.4`, from the `wasip2` crate), and at `@0.2.6`
//! (merged with what Rust's standard library imports) `wasi:cli/environment`,
//! `wasi:random/random`, `wasi:io/*`, `wasi:clocks/{monotonic-clock,wall-clock}`, plus
//! `wasi:cli/{exit,stdin,stdout,stderr,terminal-*}` and
//! `wasi:random/insecure-seed`, which the standard library brings (panic
//! output, hash seeds). `tests/tests/lockd_client` checks this.
//!
//! Build: `bash guest/build-all.sh lockd-client` writes
//! `target/guests/lockd-client.wasm`.
//!
//! # Structure
//!
//! What this client does is `guest/lockd-client-core`'s (shared with
//! `guest/lockd-client-p3`): the configuration, the REST calls, the mapping
//! of replies to errors, owners and candidates, and the state of each
//! resource. Here are only the bindings and the exports (this file and
//! `resources.rs`), the conversions between the core's types and this
//! package's WIT types (`convert.rs`), and the I/O over WASI 0.2 (`io.rs`):
//! the environment, one blocking `POST` through `wasi:http`, random bytes
//! and the clocks. The core's calls are `async`; over this blocking I/O
//! each completes in one poll (`io::run`).
//!
//! # Configuration
//!
//! Read once per instance from `wasi:cli/environment` (an empty value counts
//! as unset):
//!
//! | variable | meaning |
//! |---|---|
//! | `LOCKD_URL` | required: the server, `http://HOST:PORT[/PATH]` or `https://...` (a bare `HOST:PORT` is `http://`), or several hosts of one cluster separated by commas, all `http://` or all `https://`. A path is a prefix for the routes, for a server behind a proxy. |
//! | `LOCKD_NAMESPACE` | the namespace of every lock (default `default`) |
//! | `LOCKD_AUTH_TOKEN` | sent as `Authorization: Bearer <token>` when set |
//!
//! Without `LOCKD_URL` (or with an entry that is not an HTTP URL, or
//! `http://` and `https://` mixed) every call answers `unavailable` with a
//! message that names the variable and the entry.
//!
//! With several hosts a call goes to the one that answered last, and on to
//! the next when the request was not sent (refused, DNS, TLS handshake) or
//! a draining host marked its 503 not applied; a request sent without a
//! reply goes on only if it is safe to repeat (a `lock` by the same owner,
//! an `unlock` with its token, `extend`, reads), else it answers
//! `unavailable` saying the outcome is unknown. Each host is tried at most
//! once per call (`lockd-client-core`'s `call` module has the rule). The
//! host
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
//! `lockd-api`'s types.
//! HTTP 401 `unauthorized` (a missing or wrong `LOCKD_AUTH_TOKEN`) is
//! `denied`. A server that cannot be reached, a timeout, a reply over 1 MiB,
//! and any reply that is not the documented JSON (wrong types, unknown
//! status words, a 404 from a path that is no route) are `unavailable` with
//! the reason. The server validates names, owners and limits; this component
//! passes them through, except that a request body over 1 MiB (which every
//! lockd server refuses with 413) answers `invalid-argument` without being
//! sent.
//!
//! Shared locks and permits (`rwlocks.lock-shared`, `semaphores.acquire`)
//! are `lock` with `"mode": "shared"` or `"permits": N`; `rwlocks.describe`
//! is `get`'s full answer (`holders` with their modes, `waiters`, `permits`,
//! `lock_delay_until_ms`, or what a 404 says of a free name). `elections`:
//! `leader` is `POST /v1/elections/leader` (404 `not_found` is none),
//! `campaign`, `proclaim` and `resign` are the routes of those names, and a
//! leadership is extended with `/v1/locks/extend` (its candidate is the
//! owner).
//!
//! Guards, holds and leaderships: `acquire`, `acquire-permit`
//! and `campaign` take the name for a fresh owner `guard-<32 hex digits>`
//! (a leadership: `candidate-<32 hex digits>`; 128 bits from
//! `wasi:random/random`, as the native host makes them); `is-held` and
//! `is-leader` are a `get` that finds that owner and token among the
//! holders (`false` when the server cannot answer); `extend` is `extend`,
//! `release` and `resign` are `unlock` (a leadership: `resign`) with the
//! owner and token; after that, `extend`, `release` and `proclaim` answer
//! `not-held`. Dropping one sends that `unlock` or `resign`, errors ignored.
//!
//! A `leader-watch` polls: `open` and `current` ask `leader`; `subscribe`
//! asks it once more and answers a pollable that is ready at once if the
//! leader (candidate, token or value) differs from the one last seen (or
//! the server cannot answer, which `current` then says), and otherwise a
//! timer of 500 ms. A guest waiting on it wakes within 500 ms of a change,
//! but may also wake with none: call `current` and compare, then subscribe
//! again (the loop the WIT describes). A component's pollables can only be
//! the host's; of those, a timer is the one that never traps when the guest
//! keeps it longer than the watch (a stream's would be a child of a
//! resource the watch drops).
//!
//! # Differences from the native host
//!
//! - A guard, hold or leadership is given back when the guest drops it. If
//!   the instance traps, or the host discards it without running resource
//!   destructors, nothing is sent and the name is freed only when its TTL
//!   runs out. The native host releases them at once.
//! - No keep-alive: `keep-alive: true` (guards, holds, leases, campaigns)
//!   answers `denied` and takes nothing; extend or refresh before the TTL
//!   runs out.
//! - `subscribe-lost` is a timer at the expiry this client last saw (from
//!   the grant, `extend` or `refresh`), or one already due once released
//!   here; it hears no release, force-unlock or revoke by anyone else.
//! - `leader-watch.subscribe` polls (above) where the native host follows
//!   the store's events.
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
//! conformance guest then passes its 12 steps against the server, and
//! `rust-claims steps P composed` its five (`tests/tests/portable.rs`).

mod convert;
mod io;
mod resources;

use lockd_client_core::LockClaim;

use bindings::exports::lockd::lock::locks::{self, LockOptions};
use bindings::exports::lockd::lock::rwlocks::{self, NameState};
use bindings::exports::lockd::lock::semaphores;
use bindings::exports::lockd::lock::types::{Error, Grant, LockInfo};
use convert::wit;
use io::{run, Http};

/// The `wit-bindgen` bindings of the `lockd:client/client` world: every
/// interface of `wit/lock.wit`'s `imports` world as an export.
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
                export lockd:lock/rwlocks@0.1.0;
                export lockd:lock/semaphores@0.1.0;
                export lockd:lock/holds@0.1.0;
                export lockd:lock/elections@0.1.0;
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
        lock(&name, &owner, ttl_ms, options, LockClaim::Exclusive)
    }

    fn unlock(name: String, owner: String, fencing_token: Option<u64>) -> Result<(), Error> {
        wit(run(lockd_client_core::unlock(
            &Http,
            &name,
            &owner,
            fencing_token,
        )))
    }

    fn extend(name: String, owner: String, ttl_ms: u32) -> Result<Grant, Error> {
        wit(run(lockd_client_core::extend(&Http, &name, &owner, ttl_ms)))
    }

    fn get(name: String) -> Result<Option<LockInfo>, Error> {
        let info = run(lockd_client_core::get(&Http, &name))?;
        Ok(info.map(LockInfo::from))
    }
}

impl rwlocks::Guest for Client {
    fn lock_shared(
        name: String,
        owner: String,
        ttl_ms: u32,
        options: LockOptions,
    ) -> Result<Grant, Error> {
        lock(&name, &owner, ttl_ms, options, LockClaim::Shared)
    }

    fn describe(name: String) -> Result<NameState, Error> {
        wit(run(lockd_client_core::describe(&Http, &name)))
    }
}

impl semaphores::Guest for Client {
    fn acquire(
        name: String,
        owner: String,
        permits: u32,
        ttl_ms: u32,
        options: LockOptions,
    ) -> Result<Grant, Error> {
        lock(
            &name,
            &owner,
            ttl_ms,
            options,
            LockClaim::Permit { permits },
        )
    }
}

/// `POST /v1/locks/lock` for `owner`: `claim` says what it takes of `name`.
fn lock(
    name: &str,
    owner: &str,
    ttl_ms: u32,
    options: LockOptions,
    claim: LockClaim,
) -> Result<Grant, Error> {
    let options = options.into();
    wit(run(lockd_client_core::lock(
        &Http, name, owner, ttl_ms, &options, claim,
    )))
}
