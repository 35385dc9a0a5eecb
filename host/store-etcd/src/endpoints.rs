//! Keeps dead etcd members out of the client's rotation.
//!
//! etcd-client balances requests over every endpoint (tonic's p2c
//! balancer), and tonic keeps an endpoint whose connections are refused in
//! rotation: each request sent there fails at once and is sent again
//! ([`crate::store::call_etcd`]), possibly to the same dead member, with a
//! growing pause. After one member of three died, calls stalled for up to
//! hundreds of milliseconds.
//!
//! So a refused request wakes [`Inner::keep_endpoints`], which probes every
//! endpoint with a TCP connect and takes those that refuse out of rotation
//! (never the last one in it). While any is out, it probes again every
//! [`REPROBE`] and puts back those that accept.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;

use crate::store::Inner;

/// How often endpoints taken out of rotation are probed again.
const REPROBE: Duration = Duration::from_secs(1);

/// The least time between two probe rounds: a burst of refused requests
/// (those already sent to the dead member) makes one round, not many.
const SETTLE: Duration = Duration::from_millis(50);

/// Longest wait for one probe's connection.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// Which of the configured endpoints (`EtcdOptions::endpoints`, by index)
/// are out of the client's rotation.
#[derive(Debug)]
pub(crate) struct Rotation {
    out: std::sync::Mutex<Vec<bool>>,
}

impl Rotation {
    pub(crate) fn new(endpoints: usize) -> Rotation {
        Rotation {
            out: std::sync::Mutex::new(vec![false; endpoints]),
        }
    }

    /// Those of `endpoints` that requests may go to now.
    pub(crate) fn in_use(&self, endpoints: &[String]) -> Vec<String> {
        let out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        endpoints
            .iter()
            .zip(out.iter())
            .filter(|(_, out)| !**out)
            .map(|(e, _)| e.clone())
            .collect()
    }
}

/// Whether `endpoint` (`http://HOST:PORT`, as validated by the options)
/// accepts a TCP connection.
async fn accepts(endpoint: &str) -> bool {
    let authority = endpoint.strip_prefix("http://").unwrap_or(endpoint);
    let authority = authority.trim_end_matches('/');
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, TcpStream::connect(authority)).await,
        Ok(Ok(_))
    )
}

impl Inner {
    /// Runs for the backend's life (aborted when it is dropped).
    pub(crate) async fn keep_endpoints(self: Arc<Self>) {
        let endpoints = &self.options.endpoints;
        if endpoints.len() < 2 {
            return;
        }
        loop {
            let any_out = self.rotation.in_use(endpoints).len() < endpoints.len();
            if any_out {
                tokio::select! {
                    () = self.refused.notified() => {}
                    () = tokio::time::sleep(REPROBE) => {}
                }
            } else {
                self.refused.notified().await;
            }
            let mut alive = Vec::with_capacity(endpoints.len());
            for e in endpoints {
                alive.push(accepts(e).await);
            }
            self.apply_probe(&alive).await;
            tokio::time::sleep(SETTLE).await;
        }
    }

    /// Puts back the endpoints that accept and takes out those that do not,
    /// keeping at least one in rotation.
    async fn apply_probe(&self, alive: &[bool]) {
        let mut changes = Vec::new();
        {
            let mut out = self.rotation.out.lock().unwrap_or_else(|e| e.into_inner());
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
            let endpoint = &self.options.endpoints[i];
            // A failure means the client is gone (the backend is closing).
            let _ = if put_back {
                self.client.add_endpoint(endpoint).await
            } else {
                self.client.remove_endpoint(endpoint).await
            };
        }
    }
}
