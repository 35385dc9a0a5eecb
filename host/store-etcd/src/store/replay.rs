//! The backend's shared history of events ([`EventHistory`]): what lets a
//! client's event stream resume on another host without losing events
//! (docs/reference.md#events).
//!
//! An event's position is the etcd revision of its change and its index
//! among that revision's events. Every host turns the same revision into
//! the same events in the same order, so a position means the same on each.
//! A replay is one more etcd watch, from the revision after the client's
//! position, read until it goes past the revision the new subscriber starts
//! after; etcd keeps that history until a compaction removes it, and then
//! the replay says so.

use etcd_client::WatchOptions;
use lockd_core::{BoxFuture, EventHistory, EventPosition, PositionedEvent};
use tokio::sync::{broadcast, mpsc};

use super::observe::{revisions, Observer};

impl EventHistory for Observer {
    fn subscribe(&self) -> (broadcast::Receiver<PositionedEvent>, EventPosition) {
        let published = self.published.lock().unwrap_or_else(|e| e.into_inner());
        (
            self.positioned.subscribe(),
            EventPosition::whole(*published),
        )
    }

    fn replay(
        &self,
        after: EventPosition,
        through: EventPosition,
        into: mpsc::Sender<PositionedEvent>,
    ) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            if after >= through {
                return Ok(());
            }
            self.read_history(after, through, into).await
        })
    }
}

impl Observer {
    /// Sends the events in (`after`, `through`], read from one etcd watch,
    /// until the watch goes past `through`. etcd answers a progress request
    /// at once (3.4 even before the past changes it is still to send), so
    /// the end is the first change after `through`, not a progress answer:
    /// while nothing changes, the replay waits, as a live stream would.
    async fn read_history(
        &self,
        after: EventPosition,
        through: EventPosition,
        into: mpsc::Sender<PositionedEvent>,
    ) -> Result<(), String> {
        let ks = self.keyspace();
        // A position inside a revision resumes within it.
        let from = match after.index {
            EventPosition::WHOLE => after.revision + 1,
            _ => after.revision,
        };
        let from = i64::try_from(from).map_err(|_| format!("no revision {from}"))?;
        // This host's compactor keeps what the replay reads.
        let _floor = ks.floors.hold(from);
        let options = WatchOptions::new()
            .with_prefix()
            .with_prev_key()
            .with_start_revision(from);
        let all = ks.layout.all();
        let mut stream = ks
            .etcd
            .rpc("events replay", || {
                let mut wc = ks.etcd.client().watch_client();
                let (key, options) = (all.clone(), options.clone());
                async move { wc.watch(key, Some(options)).await }
            })
            .await
            .map_err(|e| e.to_string())?;
        let marker = ks.layout.marker_key();
        loop {
            let resp = tokio::select! {
                message = stream.message() => match message {
                    Ok(Some(resp)) => resp,
                    Ok(None) => return Err("etcd closed the replay's watch".to_string()),
                    Err(e) => return Err(e.to_string()),
                },
                () = into.closed() => return Ok(()),
            };
            if resp.compact_revision() > 0 {
                return Err(format!(
                    "etcd compacted its history up to revision {}",
                    resp.compact_revision()
                ));
            }
            if resp.canceled() {
                return Err(format!(
                    "etcd cancelled the watch: {}",
                    resp.cancel_reason()
                ));
            }
            let now = ks.clock.now_ms();
            for (at, why, group) in revisions(resp.events(), &marker) {
                let revision = at.unsigned_abs();
                if revision > through.revision {
                    return Ok(());
                }
                let events = group.iter().flat_map(|e| self.events_of(e, why, now));
                for (index, event) in (0..).zip(events) {
                    let position = EventPosition::at(revision, index);
                    if position > after
                        && position <= through
                        && into
                            .send(PositionedEvent { position, event })
                            .await
                            .is_err()
                    {
                        return Ok(());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Two hosts on one etcd: what one host's subscriber saw live, the
    //! other host replays at the same positions, from any of them; and a
    //! replay from a compacted revision says so.

    use std::sync::Arc;
    use std::time::Duration;

    use etcd_client::Client;
    use lockd_core::{
        Claim, EventKind, Limits, LockBackend, LockOptions, LockService, ManualClock,
    };
    use lockd_test_support::etcd::EtcdCluster;

    use super::*;
    use crate::{EtcdBackend, EtcdOptions};

    const NS: &str = "replay";

    async fn host(etcd: &EtcdCluster, clock: &ManualClock) -> (LockService, Arc<dyn EventHistory>) {
        let mut o = EtcdOptions::new(etcd.endpoints());
        o.lease_slack = Duration::from_secs(600);
        o.compaction = None;
        let backend = EtcdBackend::connect(o, Arc::new(clock.clone()))
            .await
            .unwrap();
        let history = backend.event_history().expect("etcd has a shared history");
        (
            LockService::new(Arc::new(backend), Limits::default()),
            history,
        )
    }

    fn summary(p: &PositionedEvent) -> (EventPosition, EventKind, String, u64) {
        let e = &p.event;
        (p.position, e.kind, e.name.to_string(), e.fencing_token)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn another_host_replays_what_one_host_saw_at_the_same_positions() {
        let etcd = EtcdCluster::start().unwrap();
        let clock = ManualClock::new(1_700_000_000_000);
        let (a, on_a) = host(&etcd, &clock).await;
        let (b, on_b) = host(&etcd, &clock).await;
        let (mut live, _) = on_a.subscribe();
        let shared = LockOptions {
            claim: Claim::Shared,
            ..LockOptions::default()
        };
        b.lock(NS, "x", "w1", 60_000, LockOptions::default())
            .await
            .unwrap();
        b.unlock(NS, "x", "w1", None).await.unwrap();
        a.lock(NS, "r", "w1", 60_000, shared).await.unwrap();
        b.lock(NS, "r", "w2", 60_000, shared).await.unwrap();
        // Both shared holders end in one revision: two events in it.
        b.force_unlock(NS, "r").await.unwrap();
        let mut seen = Vec::new();
        while seen.len() < 6 {
            let p = tokio::time::timeout(Duration::from_secs(10), live.recv())
                .await
                .expect("an event within 10 s")
                .unwrap();
            if &*p.event.namespace == NS {
                seen.push(p);
            }
        }
        let kinds: Vec<_> = seen.iter().map(|p| p.event.kind).collect();
        assert_eq!(
            kinds,
            [
                EventKind::Acquired,
                EventKind::Released,
                EventKind::Acquired,
                EventKind::Acquired,
                EventKind::ForceReleased,
                EventKind::ForceReleased
            ]
        );
        assert_eq!(seen[4].position.revision, seen[5].position.revision);
        assert!(seen.windows(2).all(|w| w[0].position < w[1].position));
        // B's own stream has come as far: it replays from history.
        let last = seen[5].position;
        let through = loop {
            let (_, through) = on_b.subscribe();
            if through >= last {
                break through;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        // A replay ends once the history goes past `through`: one more
        // change, not in the namespace.
        b.lock("elsewhere", "z", "w1", 60_000, LockOptions::default())
            .await
            .unwrap();
        let expected: Vec<_> = seen.iter().map(summary).collect();
        for (i, after) in seen.iter().enumerate() {
            let replayed = replay(&*on_b, after.position, through).await.unwrap();
            let got: Vec<_> = replayed.iter().map(summary).collect();
            assert_eq!(got, expected[i + 1..], "after {}", after.position);
        }
        // From before everything: the whole history, the same events.
        let from_start = replay(&*on_b, EventPosition::whole(0), through)
            .await
            .unwrap();
        let got: Vec<_> = from_start
            .iter()
            .filter(|p| &*p.event.namespace == NS)
            .map(summary)
            .collect();
        assert_eq!(got, expected);

        // A compaction past the position: the replay says it cannot.
        let mut raw = Client::connect(etcd.endpoints(), None).await.unwrap();
        let put = raw.put("/elsewhere", "v", None).await.unwrap();
        raw.compact(put.header().unwrap().revision(), None)
            .await
            .unwrap();
        let err = replay(&*on_b, seen[0].position, through).await.unwrap_err();
        assert!(err.contains("compacted"), "{err}");
    }

    /// The events `history` replays in (`after`, `through`], within 10 s.
    async fn replay(
        history: &dyn EventHistory,
        after: EventPosition,
        through: EventPosition,
    ) -> Result<Vec<PositionedEvent>, String> {
        let (tx, mut rx) = mpsc::channel(4);
        let collect = async {
            let mut all = Vec::new();
            while let Some(p) = rx.recv().await {
                all.push(p);
            }
            all
        };
        let (ended, all) = tokio::time::timeout(Duration::from_secs(10), async {
            tokio::join!(history.replay(after, through, tx), collect)
        })
        .await
        .expect("the replay ended within 10 s");
        ended.map(|()| all)
    }
}
