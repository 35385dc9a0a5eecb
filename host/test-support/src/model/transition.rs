//! What each call may answer, and how it moves the model (module docs,
//! "The rules"; one arm per call).

use lockd_core::{
    Claim, Grant, Holding, Leader, LeaseInfo, ListedLock, LockError, NameState, MAX_PERMITS,
    MAX_VALUE_BYTES,
};

use super::ops::*;
use super::reference::*;

impl Model {
    /// Rules 2–15: what the store must answer to `call`, with the model's
    /// state changed accordingly — except a fresh grant, whose token only
    /// the reply can tell; [`Model::check`] installs it.
    pub(super) fn transition(&mut self, call: &Call) -> Expect {
        let now = self.now_ms;
        match call {
            Call::Lock {
                name,
                owner,
                ttl_ms,
                durability,
                claim,
            } => {
                let permits_ok = claim
                    .permits()
                    .is_none_or(|n| (1..=MAX_PERMITS).contains(&n));
                if !self.valid(name, Some(owner), Some(*ttl_ms)) || !permits_ok {
                    return Expect::Invalid;
                }
                // Rule 11: by a live lease's id, a lock under that lease,
                // which is exclusive (rule 12).
                if let Some(lease) = self.live_lease_by_id(owner) {
                    if *claim != Claim::Exclusive {
                        return Expect::Invalid;
                    }
                    return self.lock_in_lease(name, lease);
                }
                self.lock(name, owner, now + ttl_ms, *durability, *claim, None)
            }
            // Rule 16.
            Call::Campaign {
                name,
                candidate,
                value,
                ttl_ms,
                durability,
            } => {
                if !self.valid(name, Some(candidate), Some(*ttl_ms))
                    || value.len() > MAX_VALUE_BYTES
                {
                    return Expect::Invalid;
                }
                let value = Some(value.as_str());
                self.lock(
                    name,
                    candidate,
                    now + ttl_ms,
                    *durability,
                    Claim::Leader,
                    value,
                )
            }
            Call::Proclaim {
                name,
                candidate,
                token,
                value,
            } => {
                if !self.valid(name, Some(candidate), None) || value.len() > MAX_VALUE_BYTES {
                    return Expect::Invalid;
                }
                if self.kind(name).is_some_and(|k| k != Kind::Election) {
                    return Expect::Invalid;
                }
                let Some(leader) = self.live(name) else {
                    return Expect::Exactly(Err(LockError::NotHeld));
                };
                if leader.owner != *candidate || leader.token != *token {
                    return Expect::Exactly(Err(LockError::NotOwner));
                }
                if let Some(h) = self.live_of_mut(name, candidate) {
                    h.value = Some(value.clone());
                }
                Expect::Exactly(Ok(Reply::Proclaimed))
            }
            Call::Leader { name } => {
                if !self.valid(name, None, None) {
                    return Expect::Invalid;
                }
                if self.kind(name).is_some_and(|k| k != Kind::Election) {
                    return Expect::Invalid;
                }
                Expect::Exactly(Ok(Reply::Leader(self.live(name).map(|h| Leader {
                    info: h.info(),
                    value: h.value.clone().unwrap_or_default(),
                    since_ms: Some(h.acquired_at_ms),
                }))))
            }
            Call::Unlock { name, owner, token } => {
                if !self.valid(name, Some(owner), None) {
                    return Expect::Invalid;
                }
                // Rule 6, for the caller's own grant (rule 12).
                if self.live(name).is_none() {
                    return Expect::Exactly(Err(LockError::NotHeld));
                }
                let mine = self
                    .live_holders(name)
                    .into_iter()
                    .find(|h| h.owner == *owner && token.is_none_or(|t| t == h.token))
                    .map(|h| h.token);
                match mine {
                    None => Expect::Exactly(Err(LockError::NotOwner)),
                    Some(t) => {
                        self.remove_holder(name, owner, t);
                        Expect::Exactly(Ok(Reply::Unlocked))
                    }
                }
            }
            Call::Extend {
                name,
                owner,
                ttl_ms,
            } => {
                if !self.valid(name, Some(owner), Some(*ttl_ms)) {
                    return Expect::Invalid;
                }
                // Rule 7, for the caller's own grant (rule 12).
                if self.live(name).is_none() {
                    return Expect::Exactly(Err(LockError::NotHeld));
                }
                match self.live_of_mut(name, owner) {
                    None => Expect::Exactly(Err(LockError::NotOwner)),
                    // Rule 11: its expiry is the lease's.
                    Some(h) if h.lease.is_some() => Expect::Invalid,
                    Some(h) => {
                        h.expires_at_ms = now + ttl_ms;
                        Expect::Exactly(Ok(Reply::Granted(Grant {
                            fencing_token: h.token,
                            expires_at_ms: h.expires_at_ms,
                        })))
                    }
                }
            }
            // Rule 8.
            Call::Get { name } => {
                if !self.valid(name, None, None) {
                    return Expect::Invalid;
                }
                Expect::Exactly(Ok(Reply::Found(self.live(name).map(Holder::info))))
            }
            // Rule 12 (describe) and 15.
            Call::Describe { name } => {
                if !self.valid(name, None, None) {
                    return Expect::Invalid;
                }
                let delay = self.lock_delay_ms;
                let delay_until_ms = self
                    .holders
                    .get(name)
                    .into_iter()
                    .flatten()
                    .filter_map(|h| h.delayed_until(now, delay))
                    .max();
                Expect::Exactly(Ok(Reply::Described(NameState {
                    holders: self.live_holders(name).into_iter().map(holding).collect(),
                    // The model never queues (waits are the conformance
                    // suite's).
                    waiters: 0,
                    delay_until_ms,
                })))
            }
            Call::List => {
                let live = self
                    .holders
                    .keys()
                    .filter_map(|name| {
                        let live = self.live_holders(name);
                        let latest = live.last()?;
                        // An exclusive holder is the name's only one: the
                        // listing shows it as `info` alone.
                        let holders = match latest.claim {
                            Claim::Exclusive => Vec::new(),
                            _ => live.iter().map(|h| holding(h)).collect(),
                        };
                        Some(ListedLock {
                            name: name.clone(),
                            info: latest.info(),
                            acquired_at_ms: Some(latest.acquired_at_ms),
                            waiters: 0,
                            claim: latest.claim,
                            holders,
                        })
                    })
                    .collect();
                Expect::Exactly(Ok(Reply::Listed(live)))
            }
            // Rule 14.
            Call::ForceUnlock { name } => {
                if !self.valid(name, None, None) {
                    return Expect::Invalid;
                }
                let Some(latest) = self.live(name).map(Holder::info) else {
                    return Expect::Exactly(Err(LockError::NotHeld));
                };
                for h in self.holders.get_mut(name).into_iter().flatten() {
                    if h.is_live(now) {
                        h.forced_at_ms = Some(now);
                    }
                }
                Expect::Exactly(Ok(Reply::Forced(latest)))
            }
            // Rule 9 (drop).
            Call::ReleaseDetached { name, owner, token } => {
                if self
                    .live_holders(name)
                    .iter()
                    .any(|h| h.owner == *owner && h.token == *token)
                {
                    self.remove_holder(name, owner, *token);
                }
                Expect::Exactly(Ok(Reply::Sent))
            }
            // Rule 11.
            Call::GrantLease { ttl_ms, durability } => {
                if !self.valid("n", None, Some(*ttl_ms)) {
                    return Expect::Invalid;
                }
                Expect::FreshLease {
                    ttl_ms: *ttl_ms,
                    expires_at_ms: now + ttl_ms,
                    durability: *durability,
                }
            }
            Call::LockInLease { name, lease_id } => {
                if !self.valid(name, Some(lease_id), None) {
                    return Expect::Invalid;
                }
                match self.live_lease_by_id(lease_id) {
                    Some(lease) => self.lock_in_lease(name, lease),
                    None => Expect::Exactly(Err(LockError::NotHeld)),
                }
            }
            Call::RefreshLease { lease_id } => {
                if !self.valid("n", Some(lease_id), None) {
                    return Expect::Invalid;
                }
                let Some(lease) = self.live_lease_by_id(lease_id) else {
                    return Expect::Exactly(Err(LockError::NotHeld));
                };
                let expires_at_ms = now + self.leases[lease].ttl_ms;
                self.leases[lease].expires_at_ms = expires_at_ms;
                for h in self.holders.values_mut().flatten() {
                    if h.lease == Some(lease) && h.is_live(now) {
                        h.expires_at_ms = expires_at_ms;
                    }
                }
                Expect::Exactly(Ok(Reply::LeaseRefreshed(expires_at_ms)))
            }
            Call::RevokeLease { lease_id } => {
                if !self.valid("n", Some(lease_id), None) {
                    return Expect::Invalid;
                }
                let Some(lease) = self.live_lease_by_id(lease_id) else {
                    return Expect::Exactly(Err(LockError::NotHeld));
                };
                let locks = self.lease_locks(lease);
                for hs in self.holders.values_mut() {
                    hs.retain(|h| !(h.lease == Some(lease) && h.is_live(now)));
                }
                self.holders.retain(|_, hs| !hs.is_empty());
                self.leases[lease].ended = true;
                Expect::Exactly(Ok(Reply::LeaseRevoked(locks.len() as u64)))
            }
            Call::GetLease { lease_id } => {
                if !self.valid("n", Some(lease_id), None) {
                    return Expect::Invalid;
                }
                let info = self.live_lease_by_id(lease_id).map(|lease| {
                    let l = &self.leases[lease];
                    LeaseInfo {
                        ttl_ms: l.ttl_ms,
                        expires_at_ms: l.expires_at_ms,
                        durability: l.durability,
                        locks: self.lease_locks(lease),
                    }
                });
                Expect::Exactly(Ok(Reply::LeaseFound(info)))
            }
        }
    }

    /// Rules 3–5, 12, 13, 15 and 16: `lock` of `name` by `owner` (no live
    /// lease's id) taking `claim`, or a campaign with `value`, wait 0.
    fn lock(
        &mut self,
        name: &str,
        owner: &str,
        expires_at_ms: u64,
        durability: lockd_core::Durability,
        claim: Claim,
        value: Option<&str>,
    ) -> Expect {
        // Rule 13: a lock's modes on a lock, this many permits on a
        // semaphore.
        if self.kind(name).is_some_and(|k| k != Kind::of(claim)) {
            return Expect::Invalid;
        }
        if let Some(h) = self.live_of_mut(name, owner) {
            // Rule 12: no upgrade, no downgrade.
            if h.claim != claim {
                return Expect::Invalid;
            }
            // Rule 4: same token, new expiry, durability unchanged; a
            // leader's campaign sets its value (rule 16).
            h.expires_at_ms = expires_at_ms;
            if let Some(value) = value {
                h.value = Some(value.to_string());
            }
            return Expect::Exactly(Ok(Reply::Granted(Grant {
                fencing_token: h.token,
                expires_at_ms,
            })));
        }
        let members = self.members(name);
        let admits = match claim {
            Claim::Shared => members.iter().all(|(h, _)| h.claim == Claim::Shared),
            Claim::Permit { permits } => members.len() < permits as usize,
            _ => members.is_empty(),
        };
        if !admits {
            // Rule 5: `busy` with the most recent grant in the way.
            let (_, info) = members.last().expect("a refusal has a member");
            return Expect::Exactly(Err(LockError::Busy(info.clone())));
        }
        // Rule 3.
        Expect::Fresh {
            name: name.to_string(),
            owner: owner.to_string(),
            expires_at_ms,
            durability,
            lease: None,
            claim,
            value: value.map(str::to_string),
        }
    }

    /// Rule 11: `lock` of `name` under the live lease `lease`, wait 0.
    pub(super) fn lock_in_lease(&mut self, name: &str, lease: usize) -> Expect {
        // Rule 13: a lease's locks are locks.
        if self.kind(name).is_some_and(|k| k != Kind::Lock) {
            return Expect::Invalid;
        }
        let l = &self.leases[lease];
        if let Some(h) = self
            .live_holders(name)
            .into_iter()
            .find(|h| h.owner == l.id)
        {
            // Held under it already: its grant, unchanged.
            return Expect::Exactly(Ok(Reply::Granted(Grant {
                fencing_token: h.token,
                expires_at_ms: h.expires_at_ms,
            })));
        }
        match self.members(name).last() {
            Some((_, info)) => Expect::Exactly(Err(LockError::Busy(info.clone()))),
            None => Expect::Fresh {
                name: name.to_string(),
                owner: l.id.clone(),
                expires_at_ms: l.expires_at_ms,
                durability: l.durability,
                lease: Some(lease),
                claim: Claim::Exclusive,
                value: None,
            },
        }
    }
}

/// A live holder as `describe` and a listing show it.
fn holding(h: &Holder) -> Holding {
    Holding {
        info: h.info(),
        claim: h.claim,
        acquired_at_ms: Some(h.acquired_at_ms),
    }
}
