//! A load client whose every call is recorded for the history checker
//! (`lockd_test_support::history`): random lock / lock-with-wait / relock /
//! extend / unlock-with-token / get calls over REST, on hot and cold names,
//! all persistent; and leases holding several locks ([`Client::run_leases`]:
//! grant, lock under the lease, refresh, lease get, unlock by the lease id,
//! revoke or expiry). Shared by `crash_under_load.rs` (one server, killed and
//! restarted) and `scale_out.rs` (several servers on one etcd).
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use lockd_core::Claim;
use lockd_test_support::history::{OpKind, Outcome, Recorder};
use serde_json::{json, Value};

/// SplitMix64: small, seedable, good enough to pick operations.
#[derive(Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator that replays for the same seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    /// The next raw value.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    /// True with probability `percent`%.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// Where the server is, and which incarnation it is.
#[derive(Debug, Default)]
pub struct Target {
    /// The server's port on 127.0.0.1.
    pub port: AtomicU16,
    /// Bumped on every restart, so clients drop pooled connections.
    pub incarnation: AtomicU64,
}

impl Target {
    /// A server that stays on `port`.
    pub fn fixed(port: u16) -> Arc<Self> {
        Arc::new(Target {
            port: AtomicU16::new(port),
            incarnation: AtomicU64::new(0),
        })
    }
}

/// One call a client makes.
#[derive(Clone, Copy, Debug)]
pub enum Call {
    /// `lock`, persistent.
    Lock { ttl_ms: u64, wait_ms: u64 },
    /// `lock` of one permit of a semaphore of `permits`, persistent.
    Permit {
        ttl_ms: u64,
        wait_ms: u64,
        permits: u32,
    },
    /// `campaign` for the election, persistent, with the owner as the
    /// candidate (docs/contract.md C24).
    Campaign { ttl_ms: u64, wait_ms: u64 },
    /// `extend`.
    Extend { ttl_ms: u64 },
    /// `unlock` with this token.
    Unlock { token: u64 },
    /// `get`.
    Get,
}

/// What [`Client::run_claims`] takes of a name.
#[derive(Clone, Copy, Debug)]
pub enum Take {
    /// One permit of a semaphore of this many.
    Permit(u32),
    /// The election's leadership.
    Leader,
}

impl Take {
    /// The call that takes it.
    pub fn call(self, ttl_ms: u64, wait_ms: u64) -> Call {
        match self {
            Take::Permit(permits) => Call::Permit {
                ttl_ms,
                wait_ms,
                permits,
            },
            Take::Leader => Call::Campaign { ttl_ms, wait_ms },
        }
    }
}

/// One call on a lease (`POST /v1/leases/...`), all persistent.
#[derive(Clone, Copy, Debug)]
pub enum LeaseCall {
    /// `grant` with this TTL.
    Grant { ttl_ms: u64 },
    /// `refresh`.
    Refresh,
    /// `revoke`.
    Revoke,
    /// `get`.
    Get,
}

/// One client: a thread's identity, its random choices and its counters.
pub struct Client {
    /// Its number in the history.
    pub id: u32,
    /// The owner it locks as.
    pub owner: String,
    pub rng: Rng,
    pub recorder: Arc<Recorder>,
    pub target: Arc<Target>,
    /// Calls refused at connect (never sent, not recorded).
    pub not_sent: Arc<AtomicU64>,
    /// Answers `503 unavailable` (recorded as unknown outcomes).
    pub unavailable: Arc<AtomicU64>,
    /// Answers the contract does not allow.
    pub unexpected: Arc<Mutex<Vec<String>>>,
    /// Keep-alive connections to the current incarnation.
    pub agent: Option<ureq::Agent>,
    pub incarnation: u64,
}

impl Client {
    /// Random calls on `names` (the first `hot` of them get 75% of the
    /// calls) until `stop`.
    pub fn run(mut self, names: &[String], hot: usize, stop: &AtomicBool) {
        // name -> token this client believes it holds.
        let mut held: HashMap<String, u64> = HashMap::new();
        while !stop.load(Ordering::Relaxed) {
            let name = if self.rng.chance(75) {
                &names[self.rng.range(0, hot as u64 - 1) as usize]
            } else {
                &names[self.rng.range(hot as u64, names.len() as u64 - 1) as usize]
            };
            let ttl_ms = self.rng.range(200, 2_000);
            let call = match held.get(name) {
                Some(&token) => match self.rng.next() % 100 {
                    0..=34 => Call::Unlock { token },
                    35..=64 => Call::Extend { ttl_ms },
                    65..=79 => Call::Lock { ttl_ms, wait_ms: 0 },
                    _ => Call::Get,
                },
                None => match self.rng.next() % 100 {
                    0..=29 => Call::Lock { ttl_ms, wait_ms: 0 },
                    30..=59 => Call::Lock {
                        ttl_ms,
                        wait_ms: self.rng.range(50, 400),
                    },
                    _ => Call::Get,
                },
            };
            match self.call(name, call) {
                Some(Outcome::Ok { token, .. }) => {
                    held.insert(name.clone(), token);
                }
                Some(
                    Outcome::Unlocked | Outcome::NotHeld | Outcome::NotOwner | Outcome::Busy { .. },
                ) => {
                    if !matches!(call, Call::Get) {
                        held.remove(name);
                    }
                }
                Some(Outcome::Unknown) | None => {
                    // Retry after a short back-off; the token, if any, is kept
                    // so a later unlock can clean up.
                    thread::sleep(Duration::from_millis(self.rng.range(10, 40)));
                }
                Some(_) => {}
            }
            thread::sleep(Duration::from_millis(self.rng.range(0, 4)));
        }
    }

    /// Leases holding several locks, until `stop`: grant one (persistent,
    /// 600 ms to 2 s), take 2 to 4 names under it (hot ones a quarter of the
    /// time, so plain clients meet them), refresh it a few times with a read of
    /// one of its locks, the lease or a relock between, sometimes unlock one
    /// lock by the lease id; then revoke it (3 in 4, and read its locks
    /// back) or let it expire.
    pub fn run_leases(mut self, names: &[String], hot: usize, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            let ttl_ms = self.rng.range(600, 2_000);
            let Some(Outcome::LeaseGranted { lease_id, .. }) =
                self.lease_call("", LeaseCall::Grant { ttl_ms })
            else {
                thread::sleep(Duration::from_millis(self.rng.range(10, 40)));
                continue;
            };
            let mut held: Vec<(String, u64)> = Vec::new();
            let mut live = true;
            for _ in 0..self.rng.range(2, 4) {
                let name = if self.rng.chance(25) {
                    &names[self.rng.range(0, hot as u64 - 1) as usize]
                } else {
                    &names[self.rng.range(hot as u64, names.len() as u64 - 1) as usize]
                };
                match self.lock_in_lease(name, &lease_id, ttl_ms) {
                    Some(Outcome::Ok { token, .. }) if !held.iter().any(|(n, _)| n == name) => {
                        held.push((name.clone(), token));
                    }
                    Some(Outcome::NotHeld) => {
                        live = false;
                        break;
                    }
                    _ => {}
                }
            }
            for _ in 0..self.rng.range(1, 4) {
                if !live || stop.load(Ordering::Relaxed) {
                    break;
                }
                thread::sleep(Duration::from_millis(
                    self.rng.range(ttl_ms / 6, ttl_ms / 2),
                ));
                if let Some(Outcome::NotHeld) = self.lease_call(&lease_id, LeaseCall::Refresh) {
                    live = false;
                    break;
                }
                let pick = held
                    .get(self.rng.range(0, held.len().max(1) as u64 - 1) as usize)
                    .cloned();
                match (self.rng.next() % 3, pick) {
                    (0, Some((name, _))) => {
                        self.call(&name, Call::Get);
                    }
                    (1, Some((name, _))) => {
                        self.lock_in_lease(&name, &lease_id, ttl_ms);
                    }
                    _ => {
                        self.lease_call(&lease_id, LeaseCall::Get);
                    }
                }
            }
            if live && held.len() > 1 && self.rng.chance(25) {
                let (name, token) = held.remove(0);
                self.call_as(&name, Call::Unlock { token }, &lease_id.clone());
            }
            if live && self.rng.chance(75) {
                if let Some(Outcome::LeaseRevoked { .. }) =
                    self.lease_call(&lease_id, LeaseCall::Revoke)
                {
                    for (name, _) in &held {
                        self.call(name, Call::Get);
                    }
                }
            }
            thread::sleep(Duration::from_millis(self.rng.range(0, 20)));
        }
    }

    /// Grants of `names` (a permit of a semaphore, or an election's
    /// leadership), until `stop`: take one (wait 0, or 50 to 400 ms), then
    /// hold it through extends, relocks and reads for 100 to 1 200 ms and
    /// release it (3 in 4) or let it expire. Several such clients on a
    /// semaphore of 2 keep it full; on an election, they take turns to lead.
    pub fn run_claims(mut self, names: &[(String, Take)], stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            let (name, what) = names[self.rng.range(0, names.len() as u64 - 1) as usize].clone();
            let ttl_ms = self.rng.range(300, 1_500);
            let wait_ms = if self.rng.chance(50) {
                0
            } else {
                self.rng.range(50, 400)
            };
            let Some(Outcome::Ok { token, .. }) = self.call(&name, what.call(ttl_ms, wait_ms))
            else {
                thread::sleep(Duration::from_millis(self.rng.range(5, 40)));
                continue;
            };
            for _ in 0..self.rng.range(0, 3) {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                thread::sleep(Duration::from_millis(self.rng.range(50, 400)));
                let call = match self.rng.next() % 3 {
                    0 => Call::Extend { ttl_ms },
                    1 => what.call(ttl_ms, 0),
                    _ => Call::Get,
                };
                if let Some(Outcome::NotHeld | Outcome::NotOwner | Outcome::Busy { .. }) =
                    self.call(&name, call)
                {
                    break;
                }
            }
            if self.rng.chance(75) {
                self.call(&name, Call::Unlock { token });
            }
            thread::sleep(Duration::from_millis(self.rng.range(0, 20)));
        }
    }

    /// `lock` of `name` under the lease `lease_id` (wait 0), recorded as a
    /// lock by the lease id with the lease's TTL.
    pub fn lock_in_lease(&mut self, name: &str, lease_id: &str, ttl_ms: u64) -> Option<Outcome> {
        let body = json!({"name": name, "lease_id": lease_id, "wait_ms": 0});
        let kind = OpKind::Lock {
            ttl_ms,
            wait_ms: 0,
            claim: Claim::Exclusive,
        };
        self.send("locks/lock", body, kind, name, lease_id, 0)
    }

    /// A call on the lease `lease_id` (empty for a grant), recorded with no
    /// lock name and the lease id as owner.
    pub fn lease_call(&mut self, lease_id: &str, call: LeaseCall) -> Option<Outcome> {
        let (path, body, kind) = match call {
            LeaseCall::Grant { ttl_ms } => (
                "leases/grant",
                json!({"ttl_ms": ttl_ms, "durability": "persistent"}),
                OpKind::LeaseGrant { ttl_ms },
            ),
            LeaseCall::Refresh => (
                "leases/refresh",
                json!({ "lease_id": lease_id }),
                OpKind::LeaseRefresh,
            ),
            LeaseCall::Revoke => (
                "leases/revoke",
                json!({ "lease_id": lease_id }),
                OpKind::LeaseRevoke,
            ),
            LeaseCall::Get => (
                "leases/get",
                json!({ "lease_id": lease_id }),
                OpKind::LeaseGet,
            ),
        };
        self.send(path, body, kind, "", lease_id, 0)
    }

    /// Makes one call and records it. `None` when it certainly never
    /// reached a server (connection refused): nothing is recorded.
    pub fn call(&mut self, name: &str, call: Call) -> Option<Outcome> {
        let owner = self.owner.clone();
        self.call_as(name, call, &owner)
    }

    /// [`Client::call`] as `owner` (a lease id, to unlock one of its locks).
    pub fn call_as(&mut self, name: &str, call: Call, owner: &str) -> Option<Outcome> {
        let (path, body, kind, wait_ms) = match call {
            Call::Lock { ttl_ms, wait_ms } => (
                "locks/lock",
                json!({"name": name, "owner": owner, "ttl_ms": ttl_ms, "wait_ms": wait_ms,
                       "durability": "persistent"}),
                OpKind::Lock {
                    ttl_ms,
                    wait_ms,
                    claim: Claim::Exclusive,
                },
                wait_ms,
            ),
            Call::Permit {
                ttl_ms,
                wait_ms,
                permits,
            } => (
                "locks/lock",
                json!({"name": name, "owner": owner, "ttl_ms": ttl_ms, "wait_ms": wait_ms,
                       "durability": "persistent", "permits": permits}),
                OpKind::Lock {
                    ttl_ms,
                    wait_ms,
                    claim: Claim::Permit { permits },
                },
                wait_ms,
            ),
            Call::Campaign { ttl_ms, wait_ms } => (
                "elections/campaign",
                json!({"name": name, "candidate": owner, "value": owner, "ttl_ms": ttl_ms,
                       "wait_ms": wait_ms, "durability": "persistent"}),
                OpKind::Lock {
                    ttl_ms,
                    wait_ms,
                    claim: Claim::Leader,
                },
                wait_ms,
            ),
            Call::Extend { ttl_ms } => (
                "locks/extend",
                json!({"name": name, "owner": owner, "ttl_ms": ttl_ms}),
                OpKind::Extend { ttl_ms },
                0,
            ),
            Call::Unlock { token } => (
                "locks/unlock",
                json!({"name": name, "owner": owner, "fencing_token": token}),
                OpKind::Unlock { token: Some(token) },
                0,
            ),
            Call::Get => ("locks/get", json!({"name": name}), OpKind::Get, 0),
        };
        let owner = if matches!(call, Call::Get) { "" } else { owner };
        self.send(path, body, kind, name, owner, wait_ms)
    }

    /// Posts `body` to `/v1/{path}` and records the call.
    fn send(
        &mut self,
        path: &str,
        body: Value,
        kind: OpKind,
        name: &str,
        owner: &str,
        wait_ms: u64,
    ) -> Option<Outcome> {
        let incarnation = self.target.incarnation.load(Ordering::SeqCst);
        if self.agent.is_none() || incarnation != self.incarnation {
            self.agent = Some(
                ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .timeout_connect(Some(Duration::from_millis(500)))
                    .max_idle_connections_per_host(1)
                    .build()
                    .into(),
            );
            self.incarnation = incarnation;
        }
        let port = self.target.port.load(Ordering::SeqCst);
        let url = format!("http://127.0.0.1:{port}/v1/{path}");
        let agent = self.agent.as_ref().unwrap();
        let invoke = self.recorder.invoke();
        let result = agent
            .post(&url)
            .config()
            .timeout_global(Some(Duration::from_millis(wait_ms + 3_000)))
            .build()
            .send_json(&body)
            .and_then(|mut r| {
                let code = r.status().as_u16();
                let text = r.body_mut().read_to_string()?;
                Ok((code, text))
            });
        let outcome = match result {
            Ok((code, text)) => match parse_for(&kind, code, &text) {
                Ok(Outcome::Unknown) => {
                    self.unavailable.fetch_add(1, Ordering::Relaxed);
                    Outcome::Unknown
                }
                Ok(outcome) => outcome,
                Err(()) => {
                    self.unexpected
                        .lock()
                        .unwrap()
                        .push(format!("{path} {body} -> {code} {text}"));
                    Outcome::Unknown
                }
            },
            Err(ureq::Error::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                self.not_sent.fetch_add(1, Ordering::Relaxed);
                self.agent = None;
                thread::sleep(Duration::from_millis(self.rng.range(10, 30)));
                return None;
            }
            Err(_) => {
                // Reset, timeout, broken keep-alive: it may have been sent.
                self.agent = None;
                Outcome::Unknown
            }
        };
        self.recorder
            .complete(self.id, kind, name, owner, invoke, outcome.clone());
        Some(outcome)
    }
}

/// [`parse`], and the answers of lease calls.
pub fn parse_for(kind: &OpKind, code: u16, text: &str) -> Result<Outcome, ()> {
    if !kind.is_lease_call() {
        return parse(code, text);
    }
    let v: Value = serde_json::from_str(text).map_err(|_| ())?;
    let status = v["status"].as_str().ok_or(())?;
    let expires = || v["expires_at_ms"].as_u64().ok_or(());
    Ok(match (kind, code, status) {
        (OpKind::LeaseGrant { .. }, 200, "granted") => Outcome::LeaseGranted {
            lease_id: v["lease_id"].as_str().ok_or(())?.to_string(),
            expires_at_ms: expires()?,
        },
        (OpKind::LeaseRefresh, 200, "refreshed") => Outcome::LeaseRefreshed {
            expires_at_ms: expires()?,
        },
        (OpKind::LeaseRevoke, 200, "revoked") => Outcome::LeaseRevoked {
            released: v["released"].as_u64().ok_or(())?,
        },
        (OpKind::LeaseGet, 200, "found") => Outcome::LeaseFound {
            expires_at_ms: expires()?,
            locks: v["locks"]
                .as_array()
                .ok_or(())?
                .iter()
                .map(|n| n.as_str().map(str::to_string).ok_or(()))
                .collect::<Result<_, _>>()?,
        },
        (_, 409, "not_held") => Outcome::NotHeld,
        (_, 503, "unavailable") => Outcome::Unknown,
        _ => return Err(()),
    })
}

/// Maps an answer to an outcome; `Err` for anything the contract does not
/// allow here.
pub fn parse(code: u16, text: &str) -> Result<Outcome, ()> {
    let v: Value = serde_json::from_str(text).map_err(|_| ())?;
    let status = v["status"].as_str().ok_or(())?;
    let token = || v["fencing_token"].as_u64().ok_or(());
    let expires = || v["expires_at_ms"].as_u64().ok_or(());
    let owner = || v["owner"].as_str().map(str::to_string).ok_or(());
    Ok(match (code, status) {
        (200, "acquired" | "extended") => Outcome::Ok {
            token: token()?,
            expires_at_ms: expires()?,
        },
        (200, "unlocked") => Outcome::Unlocked,
        (200, "found") => Outcome::Found {
            owner: owner()?,
            token: token()?,
            expires_at_ms: expires()?,
        },
        (404, "not_found") => Outcome::NotFound,
        (409, "busy") => Outcome::Busy {
            owner: owner()?,
            token: token()?,
            expires_at_ms: expires()?,
        },
        (409, "not_owner") => Outcome::NotOwner,
        (409, "not_held") => Outcome::NotHeld,
        // The store could not complete it: unknown outcome, retry.
        (503, "unavailable") => Outcome::Unknown,
        _ => return Err(()),
    })
}
