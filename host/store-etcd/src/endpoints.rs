//! Keeps dead etcd members out of the client's rotation.
//!
//! etcd-client balances requests over every endpoint (tonic's p2c
//! balancer), and tonic keeps an endpoint whose connections are refused in
//! rotation: each request sent there fails at once and is sent again (see
//! `call_etcd` in `rpc.rs`), possibly to the same dead member, with a
//! growing pause. After one member of three died, calls stalled for up to
//! hundreds of milliseconds.
//!
//! A member cut off by a partition refuses nothing: requests sent there
//! hang until their deadline, again and again (one member of three cut off
//! made every host's calls about 15 times slower, in
//! host/lockd/tests/partitions.rs).
//!
//! So a refused request, or one that got no answer within its deadline
//! ([`Rotation::refused`]), wakes [`Rotation::keep`], which probes every
//! endpoint's `/health` (etcd answers `{"health":"true"}` on its client
//! port while the member is part of a quorum with a leader; over TLS with
//! lockd's client certificate for `https://` endpoints, see `probe.rs`)
//! and takes those
//! that fail or do not answer in time out of rotation (never the last one
//! in it). While any is out, it probes again every [`REPROBE`] and puts back
//! those that are healthy again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use std::sync::Arc;

use crate::probe::{health, Health, ProbeTls};
use etcd_client::Client;
use tokio::sync::Notify;

/// How often endpoints taken out of rotation are probed again.
const REPROBE: Duration = Duration::from_secs(1);

/// The least time between two probe rounds: a burst of refused requests
/// (those already sent to the dead member) makes one round, not many.
const SETTLE: Duration = Duration::from_millis(50);

/// Longest wait for one probe's connection.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// The configured endpoints (`EtcdOptions::endpoints`) and which of them,
/// by index, are out of the client's rotation.
pub(crate) struct Rotation {
    endpoints: Vec<String>,
    /// The probes' TLS, for `https://` endpoints.
    tls: Option<Arc<ProbeTls>>,
    out: Mutex<Vec<bool>>,
    /// Woken when a request was refused by the endpoint it was sent to.
    refused: Notify,
    /// How many requests were refused so far (diagnostics).
    refused_total: AtomicU64,
}

impl std::fmt::Debug for Rotation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rotation")
            .field("endpoints", &self.endpoints)
            .field("tls", &self.tls.is_some())
            .field("out", &self.out)
            .finish_non_exhaustive()
    }
}

impl Rotation {
    pub(crate) fn new(endpoints: Vec<String>, tls: Option<Arc<ProbeTls>>) -> Rotation {
        Rotation {
            tls,
            out: Mutex::new(vec![false; endpoints.len()]),
            endpoints,
            refused: Notify::new(),
            refused_total: AtomicU64::new(0),
        }
    }

    /// Every configured endpoint, in or out of rotation.
    pub(crate) fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The endpoints that requests may go to now.
    pub(crate) fn in_use(&self) -> Vec<String> {
        let out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        self.endpoints
            .iter()
            .zip(out.iter())
            .filter(|(_, out)| !**out)
            .map(|(e, _)| e.clone())
            .collect()
    }

    /// Records a request that the endpoint it was sent to refused, and
    /// wakes the probe loop.
    pub(crate) fn refused(&self) {
        self.refused_total.fetch_add(1, Ordering::Relaxed);
        self.refused.notify_one();
    }

    /// How many requests were refused so far.
    pub(crate) fn refused_total(&self) -> u64 {
        self.refused_total.load(Ordering::Relaxed)
    }

    /// Runs for the backend's life (aborted when it is dropped), taking
    /// endpoints out of `client`'s rotation and putting them back.
    pub(crate) async fn keep(&self, client: &Client) {
        let endpoints = &self.endpoints;
        if endpoints.len() < 2 {
            return;
        }
        loop {
            let any_out = self.in_use().len() < endpoints.len();
            if any_out {
                tokio::select! {
                    () = self.refused.notified() => {}
                    () = tokio::time::sleep(REPROBE) => {}
                }
            } else {
                self.refused.notified().await;
            }
            let alive = probe_all(endpoints.iter().map(|e| self.healthy(e))).await;
            self.apply_probe(client, &alive).await;
            tokio::time::sleep(SETTLE).await;
        }
    }

    /// Puts back the endpoints that accept and takes out those that do not,
    /// keeping at least one in rotation.
    async fn apply_probe(&self, client: &Client, alive: &[bool]) {
        let mut changes = Vec::new();
        {
            let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
            for (i, &ok) in alive.iter().enumerate() {
                if ok && out[i] {
                    out[i] = false;
                    changes.push((i, true));
                }
            }
            for (i, &ok) in alive.iter().enumerate() {
                let others_in = out
                    .iter()
                    .enumerate()
                    .filter(|&(j, o)| j != i && !*o)
                    .count();
                if !ok && !out[i] && others_in > 0 {
                    out[i] = true;
                    changes.push((i, false));
                }
            }
        }
        for (i, put_back) in changes {
            let endpoint = &self.endpoints[i];
            let changed = if put_back {
                tracing::info!(
                    endpoint = %endpoint,
                    "etcd endpoint rejoined the rotation: accepts connections again"
                );
                client.add_endpoint(endpoint).await
            } else {
                tracing::warn!(
                    endpoint = %endpoint,
                    "etcd endpoint left the rotation: refused connections"
                );
                client.remove_endpoint(endpoint).await
            };
            if let Err(e) = changed {
                // A failure means the client is gone (the backend is closing).
                tracing::debug!(endpoint = %endpoint, error = %e, "etcd client did not take the rotation change");
            }
        }
    }
}

impl Rotation {
    /// Whether the member at `endpoint` answers `GET /health` (over TLS
    /// for `https://`) with `"health":"true"` within [`PROBE_TIMEOUT`]:
    /// reachable, and part of a quorum with a leader.
    async fn healthy(&self, endpoint: &str) -> bool {
        health(endpoint, self.tls.as_ref(), PROBE_TIMEOUT).await == Ok(Health::Healthy)
    }
}

/// Runs the probes at once: a member that does not answer costs the round
/// one probe timeout, not one per member. The answers, in order.
async fn probe_all<T, F: std::future::Future<Output = T>>(
    probes: impl Iterator<Item = F>,
) -> Vec<T> {
    // Few endpoints (3 or 5): polling them together through a join of boxed
    // futures keeps this free of another dependency.
    let mut boxed: Vec<std::pin::Pin<Box<F>>> = probes.map(Box::pin).collect();
    let mut done: Vec<Option<T>> = boxed.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in boxed.iter_mut().enumerate() {
            if done[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => done[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    done.into_iter().flatten().collect()
}
