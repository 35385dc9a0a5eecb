//! What each call may answer, and how it moves the model (module docs,
//! "The rules"; one arm per call, each stated in its own function).

use lockd_core::{
    Claim, Durability, Grant, Holding, Leader, LeaseInfo, ListedLock, LockError, NameState,
    MAX_PERMITS, MAX_VALUE_BYTES,
};

use super::ops::*;
use super::reference::*;

impl Model {
    /// Rules 2–15: what the store must answer to `call`, with the model's
    /// state changed accordingly — except a fresh grant, whose token only
    /// the reply can tell; [`Model::check`] installs it.
    pub(super) fn transition(&mut self, call: &Call) -> Expect {
        match call {
            Call::Lock {
                name,
                owner,
                ttl_ms,
                durability,
                claim,
            } => self.expect_lock(name, owner, *ttl_ms, *durability, *claim),
            Call::Campaign {
                name,
                candidate,
                value,
                ttl_ms,
                durability,
            } => self.expect_campaign(name, candidate, value, *ttl_ms, *durability),
            Call::Proclaim {
                name,
                candidate,
                token,
                value,
            } => self.expect_proclaim(name, candidate, *token, value),
            Call::Leader { name } => self.expect_leader(name),
            Call::Unlock { name, owner, token } => self.expect_unlock(name, owner, *token),
            Call::Extend {
                name,
                owner,
                ttl_ms,
            } => self.expect_extend(name, owner, *ttl_ms),
            Call::Get { name } => self.expect_get(name),
            Call::Describe { name } => self.expect_describe(name),
            Call::List => self.expect_list(),
            Call::ForceUnlock { name } => self.expect_force_unlock(name),
            Call::ReleaseDetached { name, owner, token } => {
                self.expect_release_detached(name, owner, *token)
            }
            Call::GrantLease { ttl_ms, durability } => {
                self.expect_grant_lease(*ttl_ms, *durability)
            }
            Call::LockInLease { name, lease_id } => self.expect_lock_in_lease(name, lease_id),
            Call::RefreshLease { lease_id } => self.expect_refresh_lease(lease_id),
            Call::RevokeLease { lease_id } => self.expect_revoke_lease(lease_id),
            Call::GetLease { lease_id } => self.expect_get_lease(lease_id),
        }
    }

    /// Rules 2 and 11: `lock` of `name` by `owner`, wait 0: by a live
    /// lease's id a lock under that lease, otherwise [`Model::lock`]'s.
    fn expect_lock(
        &mut self,
        name: &str,
        owner: &str,
        ttl_ms: u64,
        durability: Durability,
        claim: Claim,
    ) -> Expect {
        let permits_ok = claim
            .permits()
            .is_none_or(|n| (1..=MAX_PERMITS).contains(&n));
        if !self.valid(name, Some(owner), Some(ttl_ms)) || !permits_ok {
            return Expect::Invalid;
        }
        // Rule 11: by a live lease's id, a lock under that lease,
        // which is exclusive (rule 12).
        if let Some(lease) = self.live_lease_by_id(owner) {
            if claim != Claim::Exclusive {
                return Expect::Invalid;
            }
            return self.lock_in_lease(name, lease);
        }
        let expires_at_ms = self.now_ms + ttl_ms;
        self.lock(name, owner, expires_at_ms, durability, claim, None)
    }

    /// Rule 16: `campaign` for `name` by `candidate` with `value`, wait 0.
    fn expect_campaign(
        &mut self,
        name: &str,
        candidate: &str,
        value: &str,
        ttl_ms: u64,
        durability: Durability,
    ) -> Expect {
        if !self.valid(name, Some(candidate), Some(ttl_ms)) || value.len() > MAX_VALUE_BYTES {
            return Expect::Invalid;
        }
        let expires_at_ms = self.now_ms + ttl_ms;
        self.lock(
            name,
            candidate,
            expires_at_ms,
            durability,
            Claim::Leader,
            Some(value),
        )
    }

    /// Rule 16: `proclaim` of a new `value` by the leader of `name`.
    fn expect_proclaim(&mut self, name: &str, candidate: &str, token: u64, value: &str) -> Expect {
        if !self.valid(name, Some(candidate), None) || value.len() > MAX_VALUE_BYTES {
            return Expect::Invalid;
        }
        if self.kind(name).is_some_and(|k| k != Kind::Election) {
            return Expect::Invalid;
        }
        let Some(leader) = self.live(name) else {
            return Expect::Exactly(Err(LockError::NotHeld));
        };
        if leader.owner != candidate || leader.token != token {
            return Expect::Exactly(Err(LockError::NotOwner));
        }
        if let Some(h) = self.live_of_mut(name, candidate) {
            h.value = Some(value.to_string());
        }
        Expect::Exactly(Ok(Reply::Proclaimed))
    }

    /// Rule 16: `leader` of `name`, without campaigning.
    fn expect_leader(&self, name: &str) -> Expect {
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

    /// Rule 6, for the caller's own grant (rule 12).
    fn expect_unlock(&mut self, name: &str, owner: &str, token: Option<u64>) -> Expect {
        if !self.valid(name, Some(owner), None) {
            return Expect::Invalid;
        }
        if self.live(name).is_none() {
            return Expect::Exactly(Err(LockError::NotHeld));
        }
        let mine = self
            .live_holders(name)
            .into_iter()
            .find(|h| h.owner == owner && token.is_none_or(|t| t == h.token))
            .map(|h| h.token);
        match mine {
            None => Expect::Exactly(Err(LockError::NotOwner)),
            Some(t) => {
                self.remove_holder(name, owner, t);
                Expect::Exactly(Ok(Reply::Unlocked))
            }
        }
    }

    /// Rule 7, for the caller's own grant (rule 12).
    fn expect_extend(&mut self, name: &str, owner: &str, ttl_ms: u64) -> Expect {
        if !self.valid(name, Some(owner), Some(ttl_ms)) {
            return Expect::Invalid;
        }
        if self.live(name).is_none() {
            return Expect::Exactly(Err(LockError::NotHeld));
        }
        let now = self.now_ms;
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

    /// Rule 8: `get` of `name`.
    fn expect_get(&self, name: &str) -> Expect {
        if !self.valid(name, None, None) {
            return Expect::Invalid;
        }
        Expect::Exactly(Ok(Reply::Found(self.live(name).map(Holder::info))))
    }

    /// Rule 12 (describe) and 15: `describe` of `name`.
    fn expect_describe(&self, name: &str) -> Expect {
        if !self.valid(name, None, None) {
            return Expect::Invalid;
        }
        let (now, delay) = (self.now_ms, self.lock_delay_ms);
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

    /// Rules 8 and 12: `list` of the whole namespace.
    fn expect_list(&self) -> Expect {
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

    /// Rule 14: an operator's `force_unlock` of `name`.
    fn expect_force_unlock(&mut self, name: &str) -> Expect {
        if !self.valid(name, None, None) {
            return Expect::Invalid;
        }
        let Some(latest) = self.live(name).map(Holder::info) else {
            return Expect::Exactly(Err(LockError::NotHeld));
        };
        let now = self.now_ms;
        for h in self.holders.get_mut(name).into_iter().flatten() {
            if h.is_live(now) {
                h.forced_at_ms = Some(now);
            }
        }
        Expect::Exactly(Ok(Reply::Forced(latest)))
    }

    /// Rule 9 (drop): `release_detached` frees the name only if this
    /// grant still holds it.
    fn expect_release_detached(&mut self, name: &str, owner: &str, token: u64) -> Expect {
        if self
            .live_holders(name)
            .iter()
            .any(|h| h.owner == owner && h.token == token)
        {
            self.remove_holder(name, owner, token);
        }
        Expect::Exactly(Ok(Reply::Sent))
    }

    /// Rule 11: `grant_lease`.
    fn expect_grant_lease(&self, ttl_ms: u64, durability: Durability) -> Expect {
        // Any valid name: only the ttl is checked.
        if !self.valid("n", None, Some(ttl_ms)) {
            return Expect::Invalid;
        }
        Expect::FreshLease {
            ttl_ms,
            expires_at_ms: self.now_ms + ttl_ms,
            durability,
        }
    }

    /// Rule 11: `lock_in_lease` of `name` under the lease `lease_id`.
    fn expect_lock_in_lease(&mut self, name: &str, lease_id: &str) -> Expect {
        if !self.valid(name, Some(lease_id), None) {
            return Expect::Invalid;
        }
        match self.live_lease_by_id(lease_id) {
            Some(lease) => self.lock_in_lease(name, lease),
            None => Expect::Exactly(Err(LockError::NotHeld)),
        }
    }

    /// Rule 11: `refresh_lease` moves the lease and every lock under it.
    fn expect_refresh_lease(&mut self, lease_id: &str) -> Expect {
        if !self.valid("n", Some(lease_id), None) {
            return Expect::Invalid;
        }
        let Some(lease) = self.live_lease_by_id(lease_id) else {
            return Expect::Exactly(Err(LockError::NotHeld));
        };
        let now = self.now_ms;
        let expires_at_ms = now + self.leases[lease].ttl_ms;
        self.leases[lease].expires_at_ms = expires_at_ms;
        for h in self.holders.values_mut().flatten() {
            if h.lease == Some(lease) && h.is_live(now) {
                h.expires_at_ms = expires_at_ms;
            }
        }
        Expect::Exactly(Ok(Reply::LeaseRefreshed(expires_at_ms)))
    }

    /// Rule 11: `revoke_lease` frees every lock under the lease.
    fn expect_revoke_lease(&mut self, lease_id: &str) -> Expect {
        if !self.valid("n", Some(lease_id), None) {
            return Expect::Invalid;
        }
        let Some(lease) = self.live_lease_by_id(lease_id) else {
            return Expect::Exactly(Err(LockError::NotHeld));
        };
        let now = self.now_ms;
        let locks = self.lease_locks(lease);
        for hs in self.holders.values_mut() {
            hs.retain(|h| !(h.lease == Some(lease) && h.is_live(now)));
        }
        self.holders.retain(|_, hs| !hs.is_empty());
        self.leases[lease].ended = true;
        Expect::Exactly(Ok(Reply::LeaseRevoked(locks.len() as u64)))
    }

    /// Rule 11: `get_lease`.
    fn expect_get_lease(&self, lease_id: &str) -> Expect {
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

    /// Rules 3–5, 12, 13, 15 and 16: `lock` of `name` by `owner` (no live
    /// lease's id) taking `claim`, or a campaign with `value`, wait 0.
    fn lock(
        &mut self,
        name: &str,
        owner: &str,
        expires_at_ms: u64,
        durability: Durability,
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
