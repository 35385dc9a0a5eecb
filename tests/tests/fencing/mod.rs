//! The guest's fencing pattern (guest/rust-fenced, docs/fencing.md) through
//! the Redis recipe (contrib/fencing/redis.lua), with this test as the host
//! that applies the guest's writes: a guest stalled past its guard's TTL
//! asks for a write with its old token after another holder wrote with a
//! newer one; the fence refuses it and the newer value stays. The negative
//! control applies the same write without the fence: it overwrites the
//! newer value. About two seconds (two runs of an 800 ms stall, and Redis).

use std::path::Path;
use std::time::{Duration, Instant};

use lockd_core::{Engine, Limits, LockOptions, LockService};
use lockd_test_support::redis::RedisServer;

use crate::common::{run_guest, text};

const NS: &str = "fenced";

/// Waits up to `within` for `ready` on the store.
async fn wait_for(what: &str, within: Duration, mut ready: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ready().await {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn rust_fenced() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    redis
        .load_function(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../contrib/fencing/redis.lua"));
    let service = LockService::new(Engine::memory(), Limits::default());
    let fenced_set = |token: &str, value: &str| {
        redis.call(&[
            "FCALL",
            "lockd_fenced_set",
            "2",
            "fence:acct",
            "acct",
            token,
            value,
        ])
    };

    for fenced in [true, false] {
        redis.call(&["DEL", "fence:acct"]);
        assert_eq!(redis.call(&["SET", "acct", "100"]), "OK");
        // The guest: a guard of 300 ms, then 800 ms of work.
        let guest = {
            let service = service.clone();
            tokio::spawn(async move {
                run_guest(
                    lockd_guest_tests::RUST_FENCED,
                    &service,
                    NS,
                    &["acct", "300", "800", "70"],
                )
                .await
            })
        };
        let mut guard_token = 0;
        // The first run compiles the component: minutes in a debug build on
        // a busy machine.
        wait_for(
            "the guest's guard",
            Duration::from_secs(600),
            async || match service.get(NS, "acct").await.unwrap() {
                Some(info) if info.owner.starts_with("guard-") => {
                    guard_token = info.fencing_token;
                    true
                }
                _ => false,
            },
        )
        .await;
        wait_for("the guard's expiry", Duration::from_secs(5), async || {
            service.get(NS, "acct").await.unwrap().is_none()
        })
        .await;

        // Another holder takes the lock and writes through the fence.
        let newer = service
            .lock(NS, "acct", "worker-b", 10_000, LockOptions::default())
            .await
            .unwrap();
        assert!(newer.fencing_token > guard_token);
        assert_eq!(fenced_set(&newer.fencing_token.to_string(), "150"), "OK");

        // The guest's write, with its token, as it asked for it.
        let out = guest.await.unwrap();
        let stdout = text(&out.stdout);
        assert_eq!(out.exit_code, 0, "{stdout}{}", text(&out.stderr));
        let printed: Vec<&str> = stdout
            .lines()
            .find_map(|l| l.strip_prefix("write "))
            .unwrap_or_else(|| panic!("no write line: {stdout}"))
            .split(' ')
            .collect();
        let [name, token, value] = printed[..] else {
            panic!("{stdout}")
        };
        assert_eq!(
            (name, token),
            ("acct", guard_token.to_string().as_str()),
            "the guest's token is the store's"
        );
        assert!(stdout.contains("release: NotOwner"), "{stdout}");
        let answer = if fenced {
            fenced_set(token, value)
        } else {
            redis.call(&["SET", name, value])
        };
        if fenced {
            assert!(answer.starts_with("-STALE"), "{answer}");
            assert_eq!(redis.call(&["GET", "acct"]), "150", "the newer write stays");
        } else {
            assert_eq!(answer, "OK");
            assert_eq!(
                redis.call(&["GET", "acct"]),
                "70",
                "without the fence, the stale write overwrites the newer one"
            );
        }
        service
            .unlock(NS, "acct", "worker-b", Some(newer.fencing_token))
            .await
            .unwrap();
    }
}
