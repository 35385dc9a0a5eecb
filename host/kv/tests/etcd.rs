//! The key-value stores of Spin components on etcd ([`lockd_kv::etcd`]):
//! two clients (two "hosts") on one etcd see one store; the byte count
//! stays exact under concurrent writers of both, so the bound holds; a
//! write past it changes nothing; the data lives under `<prefix>-kv/`,
//! outside the lock store's prefix.

use std::sync::Arc;

use etcd_client::{Client, GetOptions};
use lockd_etcd::EtcdOptions;
use lockd_kv::etcd::EtcdKv;
use lockd_kv::KvError;
use lockd_test_support::etcd::EtcdCluster;

async fn host(etcd: &EtcdCluster) -> Arc<EtcdKv> {
    Arc::new(
        EtcdKv::connect(&EtcdOptions::new(etcd.endpoints()))
            .await
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_share_a_store_whose_bound_holds_under_concurrent_writers() {
    let etcd = EtcdCluster::start().expect("etcd did not start");
    let (a, b) = (host(&etcd).await, host(&etcd).await);
    const LIMIT: u64 = 1_000;

    a.set("default", "k/1", b"one", LIMIT).await.unwrap();
    assert_eq!(
        b.get("default", "k/1").await.unwrap(),
        Some(b"one".to_vec())
    );
    assert!(b.exists("default", "k/1").await.unwrap());
    assert!(!b.exists("default", "k/2").await.unwrap());
    assert!(
        !b.exists("other", "k/1").await.unwrap(),
        "labels are separate stores"
    );
    b.delete("default", "k/1").await.unwrap();
    b.delete("default", "k/1").await.unwrap();
    assert_eq!(a.get("default", "k/1").await.unwrap(), None);

    // 40 writers on both hosts, each an entry of 4 + 46 = 50 bytes: twenty
    // fit in 1,000 bytes, and exactly twenty are taken, whatever the races.
    let writers: Vec<_> = (0..40)
        .map(|i| {
            let kv = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move {
                kv.set("default", &format!("w/{i:02}"), &[7u8; 46], LIMIT)
                    .await
            })
        })
        .collect();
    let mut stored = 0;
    for writer in writers {
        match writer.await.unwrap() {
            Ok(()) => stored += 1,
            Err(KvError::StoreFull { would_hold, limit }) => {
                assert!(would_hold > limit, "{would_hold} {limit}");
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(stored, 20);
    let keys = a.keys("default").await.unwrap();
    assert_eq!(keys.len(), 20, "{keys:?}");
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "in order: {keys:?}");
    // Full: a new entry is refused and changes nothing; replacing one with
    // one as large fits; deleting frees room.
    let full = b.set("default", "new", b"x", LIMIT).await.unwrap_err();
    assert!(matches!(full, KvError::StoreFull { .. }), "{full}");
    assert_eq!(b.get("default", "new").await.unwrap(), None);
    a.set("default", &keys[0], &[8u8; 46], LIMIT).await.unwrap();
    a.delete("default", &keys[1]).await.unwrap();
    b.set("default", "new", b"x", LIMIT).await.unwrap();

    // Keys that need encoding come back as written.
    a.set("default", "a b/ü%", b"", LIMIT).await.unwrap();
    assert!(a
        .keys("default")
        .await
        .unwrap()
        .contains(&"a b/ü%".to_string()));

    // Nothing under the lock store's prefix.
    let client = Client::connect(etcd.endpoints(), None).await.unwrap();
    let count = |prefix: &'static str| {
        let mut client = client.clone();
        async move {
            let options = GetOptions::new().with_prefix().with_count_only();
            client.get(prefix, Some(options)).await.unwrap().count()
        }
    };
    assert_eq!(count("/lockd/").await, 0);
    assert!(count("/lockd-kv/").await > 20);
}
