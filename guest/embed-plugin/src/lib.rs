//! The `example:jobs/plugin` component loaded by `examples/embed`: runs a job
//! while holding the lock `job/{id}`.
//!
//! The bindings are generated from two WIT directories: `wit/` (the
//! `lockd:lock` package, listed first because the plugin depends on it) and
//! `examples/embed/wit/` (the plugin world), so `lock.wit` is not copied.

use lockd::lock::locks::{self, LockOptions};
use lockd::lock::types::{Durability, Error};

wit_bindgen::generate!({
    path: ["../../wit", "../../examples/embed/wit"],
    world: "example:jobs/plugin",
    // `lockd:lock` is another package than the world's, so its bindings must
    // be requested explicitly.
    generate_all,
});

/// How long a job may run before its lock lapses.
const JOB_TTL_MS: u32 = 30_000;

struct Plugin;

impl Guest for Plugin {
    fn run_job(id: String, worker: String) -> Result<u64, String> {
        let name = format!("job/{id}");
        let options = LockOptions {
            wait_ms: 0,
            durability: Durability::Persistent,
        };
        let grant = locks::lock(&name, &worker, JOB_TTL_MS, options).map_err(describe)?;
        let token = grant.fencing_token;

        // The "work": a real job would pass `token` to the store it writes.
        let _checksum = id
            .bytes()
            .fold(token, |acc, b| acc.rotate_left(5) ^ u64::from(b));

        locks::unlock(&name, &worker, Some(token)).map_err(describe)?;
        Ok(token)
    }
}

/// The error string returned by `run-job` for a lock error.
fn describe(e: Error) -> String {
    match e {
        Error::Busy(holder) => format!("busy: held by {}", holder.owner),
        Error::NotOwner => "not-owner".to_string(),
        Error::NotHeld => "not-held".to_string(),
        Error::InvalidArgument(msg) => format!("invalid-argument: {msg}"),
        Error::Denied(msg) => format!("denied: {msg}"),
        Error::Unavailable(msg) => format!("unavailable: {msg}"),
    }
}

export!(Plugin);
