//! Every namespace that has a held lock or a waiter (`GET /v1/namespaces`):
//! one transaction reads the lock keys and the waiter keys at one revision.
//!
//! Lock keys are `<prefix>/<ns>/<name>` and a namespace never starts with
//! `.` (it is encoded: see `keys.rs`), so the lock keys are the two ranges
//! either side of lockd's own `<prefix>/.…` trees: below `<prefix>/.` and
//! from `<prefix>//` (`/` follows `.`, and an encoded namespace holds no
//! `/`) to the end of the prefix. Waiters are read keys only.

use std::collections::BTreeMap;

use etcd_client::{GetOptions, Txn, TxnOp};
use lockd_core::{Durability, LockError, NamespaceStats};

use super::keyspace::Keyspace;
use crate::keys::{decode, Target};
use crate::name::Name;
use crate::rpc::gets;

/// The namespaces with a live holder or a waiter, sorted by name.
pub(super) async fn namespaces(ks: &Keyspace) -> Result<Vec<NamespaceStats>, LockError> {
    let all = ks.layout.all();
    let below_dot = [all.as_slice(), b"."].concat();
    let after_dot = [all.as_slice(), b"/"].concat();
    // `all` ends in `/`; the byte after it ends the prefix's range.
    let mut end = all.clone();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    let waiters = ks.layout.all_waiters();
    let txn = Txn::new().and_then(vec![
        TxnOp::get(all.clone(), Some(GetOptions::new().with_range(below_dot))),
        TxnOp::get(after_dot, Some(GetOptions::new().with_range(end))),
        TxnOp::get(
            waiters.clone(),
            Some(GetOptions::new().with_prefix().with_keys_only()),
        ),
    ]);
    // Judged at the asking, as `list` does.
    let now = ks.clock.now_ms();
    let resp = ks.etcd.txn("namespaces", txn).await?;
    let mut rows: BTreeMap<String, NamespaceStats> = BTreeMap::new();
    let answers = gets(&resp);
    let [below, after, queued] = answers.as_slice() else {
        return Err(LockError::Unavailable(
            "etcd answered the namespaces read with the wrong number of ranges".into(),
        ));
    };
    for kv in below.kvs().iter().chain(after.kvs()) {
        let Target::Lock(key) = ks.layout.classify(kv.key()) else {
            continue;
        };
        let name = Name::from_kv(kv)?;
        for held in name.live(now) {
            let row = row(&mut rows, &key.namespace);
            match held.info().durability {
                Durability::Persistent => row.persistent += 1,
                Durability::Ephemeral => row.ephemeral += 1,
            }
        }
    }
    for kv in queued.kvs() {
        // `<ns>/<name>/<id>` under the queue tree.
        let namespace = kv
            .key()
            .strip_prefix(waiters.as_slice())
            .and_then(|rest| std::str::from_utf8(rest).ok())
            .and_then(|rest| rest.split_once('/'))
            .and_then(|(ns, _)| decode(ns));
        if let Some(namespace) = namespace {
            row(&mut rows, &namespace).waiters += 1;
        }
    }
    Ok(rows.into_values().collect())
}

fn row<'a>(
    rows: &'a mut BTreeMap<String, NamespaceStats>,
    namespace: &str,
) -> &'a mut NamespaceStats {
    rows.entry(namespace.to_string())
        .or_insert_with(|| NamespaceStats {
            namespace: namespace.to_string(),
            ..NamespaceStats::default()
        })
}
