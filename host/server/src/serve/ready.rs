//! Readiness, as etcd and Kubernetes mean it: `GET /livez` answers 200
//! while the process serves at all (a failing one is restarted), `GET
//! /readyz` 200 only while requests should be sent here (a failing one is
//! taken out of the load balancer, not restarted). Both need no token.
//!
//! A server is not ready while it recovers its store, while it shuts down,
//! and while its store cannot serve: unhealthy ([`LockService::health`],
//! such as etcd refusing lockd's credentials), unreachable, or refusing
//! writes for lack of space (etcd's NOSPACE alarm;
//! [`LockService::check_space`]). `/metrics` says which
//! ([`Readiness::render`]): `lockd_ready` and `lockd_not_ready{reason}`.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use lockd_api::{ReadyReply, Status};
use lockd_core::{LockError, LockService, StoreSpace};

/// How long a readiness check waits for the store; past it the store
/// counts as unreachable.
pub const STORE_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a check of the store stands: probes and scrapes within it
/// share one, so that unauthenticated `/readyz` requests cannot multiply
/// requests to etcd.
pub const STORE_CHECK_FRESH: Duration = Duration::from_secs(1);

/// Why a server is not ready: the `reason` label of `lockd_not_ready`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotReady {
    /// It is reading its store (the embedded store's recovery, or
    /// connecting to etcd).
    Recovering,
    /// It shuts down: queued waiters were answered `unavailable`, and it
    /// takes no new connection.
    ShuttingDown,
    /// The store reports itself unable to serve until an operator acts
    /// (etcd refusing lockd's credentials or permissions).
    StoreUnhealthy,
    /// The store cannot be asked (etcd unreachable or not answering).
    StoreUnreachable,
    /// The store refuses every write for lack of space (etcd's NOSPACE
    /// alarm).
    StoreOutOfSpace,
}

impl NotReady {
    /// Every reason, in the order `/metrics` lists them.
    pub const ALL: [NotReady; 5] = [
        NotReady::Recovering,
        NotReady::ShuttingDown,
        NotReady::StoreUnhealthy,
        NotReady::StoreUnreachable,
        NotReady::StoreOutOfSpace,
    ];

    /// The label value.
    pub const fn label(self) -> &'static str {
        match self {
            NotReady::Recovering => "recovering",
            NotReady::ShuttingDown => "shutting_down",
            NotReady::StoreUnhealthy => "store_unhealthy",
            NotReady::StoreUnreachable => "store_unreachable",
            NotReady::StoreOutOfSpace => "store_out_of_space",
        }
    }
}

/// Reasons not to be ready, each with a phrase for people.
type Reasons = Vec<(NotReady, String)>;

/// A readiness verdict: every reason that holds, each with a phrase for
/// people. Ready when there is none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    /// The reasons, each once.
    pub reasons: Reasons,
}

impl Readiness {
    /// Not ready: the store is being read.
    pub fn recovering() -> Readiness {
        Readiness {
            reasons: vec![(
                NotReady::Recovering,
                "recovering: the store is being opened and read".to_string(),
            )],
        }
    }

    /// Whether no reason holds.
    pub fn is_ready(&self) -> bool {
        self.reasons.is_empty()
    }

    /// The body of `/readyz`: `ok`, or `unavailable` with every reason.
    pub fn reply(&self) -> ReadyReply {
        let reasons: Vec<String> = self.reasons.iter().map(|(_, why)| why.clone()).collect();
        if reasons.is_empty() {
            return ReadyReply {
                message: None,
                reasons,
                status: Status::Ok,
            };
        }
        ReadyReply {
            message: Some(format!("not ready: {}", reasons.join("; "))),
            reasons,
            status: Status::Unavailable,
        }
    }

    /// Appends `lockd_ready` and `lockd_not_ready{reason}` (every reason,
    /// 0 or 1) in Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP lockd_ready 1 while the server is ready (GET /readyz answers 200), else 0.\n\
             # TYPE lockd_ready gauge\nlockd_ready {}",
            u8::from(self.is_ready())
        );
        out.push_str(
            "# HELP lockd_not_ready 1 for each reason the server is not ready now.\n\
             # TYPE lockd_not_ready gauge\n",
        );
        for reason in NotReady::ALL {
            let holds = self.reasons.iter().any(|(r, _)| *r == reason);
            let _ = writeln!(
                out,
                "lockd_not_ready{{reason=\"{}\"}} {}",
                reason.label(),
                u8::from(holds)
            );
        }
    }
}

/// The last check of the store, shared by the probes and scrapes within
/// [`STORE_CHECK_FRESH`] of it; one check runs at a time.
#[derive(Debug, Default)]
pub struct ReadyCheck {
    last: tokio::sync::Mutex<Option<(Instant, Reasons)>>,
}

impl ReadyCheck {
    /// Whether `service` is ready now: shutting down is known at once; the
    /// store's verdict is at most [`STORE_CHECK_FRESH`] old.
    pub async fn check(&self, service: &LockService) -> Readiness {
        let mut reasons = Vec::new();
        if let Some(why) = service.shutting_down() {
            reasons.push((NotReady::ShuttingDown, format!("shutting down ({why})")));
        }
        let mut last = self.last.lock().await;
        let fresh = last
            .as_ref()
            .filter(|(at, _)| at.elapsed() < STORE_CHECK_FRESH);
        let store = match fresh {
            Some((_, store)) => store.clone(),
            None => {
                let store = check_store(service).await;
                *last = Some((Instant::now(), store.clone()));
                store
            }
        };
        reasons.extend(store);
        Readiness { reasons }
    }
}

/// What keeps the store from serving, if anything: its health, then
/// whether it can be asked and has space; all within
/// [`STORE_CHECK_TIMEOUT`].
async fn check_store(service: &LockService) -> Reasons {
    let asked = async {
        if let Err(e) = service.health().await {
            let why = format!("store unhealthy: {}", detail(&e));
            return vec![(NotReady::StoreUnhealthy, why)];
        }
        match service.check_space().await {
            Err(e) => {
                let why = format!("store unreachable: {}", detail(&e));
                vec![(NotReady::StoreUnreachable, why)]
            }
            Ok(Some(space)) if space.out_of_space => {
                vec![(NotReady::StoreOutOfSpace, out_of_space(&space))]
            }
            Ok(_) => Vec::new(),
        }
    };
    match tokio::time::timeout(STORE_CHECK_TIMEOUT, asked).await {
        Ok(reasons) => reasons,
        Err(_) => {
            let secs = STORE_CHECK_TIMEOUT.as_secs();
            let why = format!("store unreachable: no answer within {secs} s");
            vec![(NotReady::StoreUnreachable, why)]
        }
    }
}

/// A lock error's message without its `unavailable: ` label.
fn detail(e: &LockError) -> String {
    match e {
        LockError::Unavailable(why) => why.clone(),
        other => other.to_string(),
    }
}

fn out_of_space(space: &StoreSpace) -> String {
    format!(
        "store out of space: its database takes {} bytes of its {}-byte quota and it refuses \
         every write until an operator frees space (etcd: compact, defragment every member, \
         disarm the NOSPACE alarm)",
        space.db_size_bytes, space.quota_bytes
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockd_core::{Engine, Limits};

    #[test]
    fn metrics_name_every_reason() {
        let mut out = String::new();
        Readiness::default().render(&mut out);
        assert!(out.contains("\nlockd_ready 1\n"), "{out}");
        assert!(
            out.contains("lockd_not_ready{reason=\"store_unreachable\"} 0"),
            "{out}"
        );
        let not = Readiness {
            reasons: vec![(NotReady::ShuttingDown, "shutting down".into())],
        };
        let mut out = String::new();
        not.render(&mut out);
        assert!(out.contains("\nlockd_ready 0\n"), "{out}");
        assert!(
            out.contains("lockd_not_ready{reason=\"shutting_down\"} 1"),
            "{out}"
        );
        assert_eq!(out.matches("lockd_not_ready{").count(), NotReady::ALL.len());
        let reply = not.reply();
        assert_eq!(reply.status, Status::Unavailable);
        assert_eq!(reply.message.as_deref(), Some("not ready: shutting down"));
        let ok = serde_json::to_string(&Readiness::default().reply()).unwrap();
        assert_eq!(ok, r#"{"reasons":[],"status":"ok"}"#);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_service_is_ready_until_it_shuts_down() {
        let service = LockService::new(Engine::memory(), Limits::default());
        let check = ReadyCheck::default();
        assert!(check.check(&service).await.is_ready());
        service.shutdown("stopping");
        let verdict = check.check(&service).await;
        assert_eq!(
            verdict.reasons,
            [(
                NotReady::ShuttingDown,
                "shutting down (stopping)".to_string()
            )]
        );
        let space = StoreSpace {
            db_size_bytes: 9,
            quota_bytes: 8,
            out_of_space: true,
            ..StoreSpace::default()
        };
        assert!(out_of_space(&space).contains("takes 9 bytes of its 8-byte quota"));
    }
}
