//! Where lockd keeps things in etcd, and how names become keys.
//!
//! ```text
//! <prefix>/<ns>/<name>                 the lock: a JSON `LockRecord`
//! <prefix>/.queue/<ns>/<name>/<id>     one waiter: a JSON `WaiterRecord`
//! <prefix>/.leases/<ns>/<id>           one lease: a JSON `LeaseRecord`
//! <prefix>/.sessions/<lease hex>       one live host session (empty value,
//!                                      on that session's etcd lease)
//! <prefix>/.why                        why the last marked transaction
//!                                      removed a holder (events.rs)
//! ```
//!
//! Namespaces and names are percent-encoded: every byte outside
//! `[A-Za-z0-9_-]` becomes `%XX`. So neither can contain `/` (a key has
//! exactly two segments after the prefix, and two locks never collide), no
//! namespace can start with `.` (the queue and lease trees never overlap a
//! namespace),
//! and the encoding keeps prefixes: `enc(a)` is a prefix of `enc(b)` exactly
//! when `a` is a prefix of `b`, so a name-prefix listing is one etcd range.

use lockd_core::Key;

/// What a key under the prefix is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// A lock key.
    Lock(Key),
    /// A lease key: the lease's namespace and id.
    Lease(Key),
    /// The marker key (see [`Layout::marker_key`]).
    Marker,
    /// A waiter key, or anything else.
    Other,
}

/// The key layout under one prefix.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    /// The prefix without a trailing `/`.
    prefix: String,
}

fn keep(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// Percent-encodes `s` (see the module docs).
pub(crate) fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if keep(b) {
            out.push(b as char);
        } else {
            out.push('%');
            out.push_str(&format!("{b:02X}"));
        }
    }
    out
}

/// Reverses [`encode`]; `None` for anything `encode` cannot produce.
pub(crate) fn decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            let v = u8::from_str_radix(hex, 16).ok()?;
            if keep(v) {
                return None;
            }
            out.push(v);
            i += 3;
        } else if keep(b) {
            out.push(b);
            i += 1;
        } else {
            return None;
        }
    }
    String::from_utf8(out).ok()
}

impl Layout {
    /// The layout under `prefix` (a trailing `/` is ignored).
    pub(crate) fn new(prefix: &str) -> Self {
        Layout {
            prefix: prefix.trim_end_matches('/').to_string(),
        }
    }

    /// `<prefix>/`: every key lockd writes.
    pub(crate) fn all(&self) -> Vec<u8> {
        format!("{}/", self.prefix).into_bytes()
    }

    /// `<prefix>/.queue/`: every waiter of every lock.
    pub(crate) fn all_waiters(&self) -> Vec<u8> {
        format!("{}/.queue/", self.prefix).into_bytes()
    }

    /// `<prefix>/.leases/`: every lease of every namespace.
    pub(crate) fn all_leases(&self) -> Vec<u8> {
        format!("{}/.leases/", self.prefix).into_bytes()
    }

    /// `<prefix>/.sessions/`: one key per live session of a host, on its
    /// session lease (see `etcd_lease.rs`).
    pub(crate) fn all_sessions(&self) -> Vec<u8> {
        format!("{}/.sessions/", self.prefix).into_bytes()
    }

    /// The session whose key (under [`Layout::all_sessions`]) is `key`.
    pub(crate) fn session_of(&self, key: &[u8]) -> Option<i64> {
        let hex = key.strip_prefix(self.all_sessions().as_slice())?;
        i64::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
    }

    /// The key of the lease `id` of `namespace`.
    pub(crate) fn lease_key(&self, namespace: &str, id: &str) -> Vec<u8> {
        format!(
            "{}/.leases/{}/{}",
            self.prefix,
            encode(namespace),
            encode(id)
        )
        .into_bytes()
    }

    /// `<prefix>/.why`: the marker a transaction that removes a holder
    /// writes, so that watchers learn why (see `events.rs`).
    pub(crate) fn marker_key(&self) -> Vec<u8> {
        format!("{}/.why", self.prefix).into_bytes()
    }

    /// `<prefix>/.format`: the format version of everything under the
    /// prefix (see `store::check_format`).
    pub(crate) fn format_key(&self) -> Vec<u8> {
        format!("{}/.format", self.prefix).into_bytes()
    }

    /// What `key` is: a lock, a lease, the marker, or something else.
    pub(crate) fn classify(&self, key: &[u8]) -> Target {
        if key == self.marker_key().as_slice() {
            return Target::Marker;
        }
        if let Some(rest) = key.strip_prefix(self.all_leases().as_slice()) {
            let lease = std::str::from_utf8(rest)
                .ok()
                .and_then(|r| r.split_once('/'))
                .and_then(|(ns, id)| Some(Key::new(decode(ns)?, decode(id)?)));
            return lease.map_or(Target::Other, Target::Lease);
        }
        self.key_of(key).map_or(Target::Other, Target::Lock)
    }

    /// The lock stored at `lock_key`, a key this layout made with
    /// [`Layout::lock_key`].
    pub(crate) fn key_of(&self, lock_key: &[u8]) -> Option<Key> {
        let rest = std::str::from_utf8(lock_key)
            .ok()?
            .strip_prefix(&self.prefix)?
            .strip_prefix('/')?;
        let (namespace, name) = rest.split_once('/')?;
        Some(Key::new(decode(namespace)?, decode(name)?))
    }

    /// The key holding the lock `key`.
    pub(crate) fn lock_key(&self, key: &Key) -> Vec<u8> {
        format!(
            "{}/{}/{}",
            self.prefix,
            encode(&key.namespace),
            encode(&key.name)
        )
        .into_bytes()
    }

    /// The range prefix of the locks of `namespace` whose names start with
    /// `name_prefix`.
    pub(crate) fn list_prefix(&self, namespace: &str, name_prefix: &str) -> Vec<u8> {
        format!(
            "{}/{}/{}",
            self.prefix,
            encode(namespace),
            encode(name_prefix)
        )
        .into_bytes()
    }

    /// The name of the lock stored at `lock_key`, a key of `namespace`.
    pub(crate) fn name_of(&self, namespace: &str, lock_key: &[u8]) -> Option<String> {
        let head = format!("{}/{}/", self.prefix, encode(namespace));
        let rest = std::str::from_utf8(lock_key).ok()?.strip_prefix(&head)?;
        decode(rest)
    }

    /// The prefix of the wait queue of `key`.
    pub(crate) fn queue_prefix(&self, key: &Key) -> Vec<u8> {
        format!(
            "{}/.queue/{}/{}/",
            self.prefix,
            encode(&key.namespace),
            encode(&key.name)
        )
        .into_bytes()
    }

    /// The range prefix of the wait queues of the locks of `namespace`
    /// whose names start with `name_prefix`.
    pub(crate) fn queues_prefix(&self, namespace: &str, name_prefix: &str) -> Vec<u8> {
        format!(
            "{}/.queue/{}/{}",
            self.prefix,
            encode(namespace),
            encode(name_prefix)
        )
        .into_bytes()
    }

    /// The lock name whose queue holds `waiter_key`, a waiter key of
    /// `namespace`.
    pub(crate) fn queued_name_of(&self, namespace: &str, waiter_key: &[u8]) -> Option<String> {
        let head = format!("{}/.queue/{}/", self.prefix, encode(namespace));
        let rest = std::str::from_utf8(waiter_key).ok()?.strip_prefix(&head)?;
        // `encode` escapes `/`, so the name is everything before the last one.
        let (name, _id) = rest.rsplit_once('/')?;
        decode(name)
    }

    /// The key of waiter `id` in the queue of `key`.
    pub(crate) fn waiter_key(&self, key: &Key, id: &str) -> Vec<u8> {
        let mut k = self.queue_prefix(key);
        k.extend_from_slice(id.as_bytes());
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_round_trips_and_keeps_prefixes() {
        for s in [
            "a", "job/1", "%2F", "é ü/x", ".queue", "a-b_c", "~!*", "\u{0}",
        ] {
            assert_eq!(decode(&encode(s)).as_deref(), Some(s), "{s:?}");
            assert!(!encode(s).contains('/'));
            assert!(!encode(s).starts_with('.'));
        }
        assert!(encode("job/12").starts_with(&encode("job/1")));
        assert!(!encode("jobs").starts_with(&encode("job/")));
        // Only what `encode` produces decodes.
        for bad in ["%2", "%zz", "%61", "a/b", "a.b", "%C3"] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn keys_of_different_locks_never_collide() {
        let l = Layout::new("/lockd/");
        let a = l.lock_key(&Key::new("a/b", "c"));
        let b = l.lock_key(&Key::new("a", "b/c"));
        assert_ne!(a, b);
        assert_eq!(a, b"/lockd/a%2Fb/c");
        assert_eq!(l.name_of("a", &b).as_deref(), Some("b/c"));
        assert_eq!(l.name_of("a/b", &b), None);
        assert_eq!(l.key_of(&a), Some(Key::new("a/b", "c")));
        assert_eq!(l.key_of(&b), Some(Key::new("a", "b/c")));
        assert_eq!(l.key_of(b"/lockd/a"), None);
        let lease = l.lease_key("a/b", "lease-1");
        assert_eq!(lease, b"/lockd/.leases/a%2Fb/lease-1");
        assert!(lease.starts_with(&l.all_leases()));
        assert!(!lease.starts_with(&l.list_prefix(".leases", "")));
        let q = l.waiter_key(&Key::new("ns", "n"), "7-1");
        assert_eq!(q, b"/lockd/.queue/ns/n/7-1");
        assert!(!q.starts_with(&l.list_prefix(".queue", "")));
        assert_eq!(l.classify(&a), Target::Lock(Key::new("a/b", "c")));
        assert_eq!(
            l.classify(&lease),
            Target::Lease(Key::new("a/b", "lease-1"))
        );
        assert_eq!(l.classify(&q), Target::Other);
        assert_eq!(l.classify(b"/lockd/.why"), Target::Marker);
        assert_eq!(l.classify(b"/lockd/.whyx"), Target::Other);
        assert_eq!(l.classify(&l.format_key()), Target::Other);
        assert_eq!(l.classify(b"/lockd/.leases/ns"), Target::Other);
        assert!(l.marker_key().starts_with(&l.all()));
        assert_eq!(l.session_of(b"/lockd/.sessions/7f3a"), Some(0x7f3a));
        assert_eq!(l.session_of(b"/lockd/.sessions/x"), None);
        assert_eq!(l.classify(b"/lockd/.sessions/7f3a"), Target::Other);
    }
}
