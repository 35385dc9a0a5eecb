//! Leader election through `lockd:lock@0.2.0`
//! (docs/contract.md#c24-elections): [`crate::Leadership`] and
//! [`crate::LeaderWatch`] with their calls awaited, a leadership's loss as a
//! future and a watch's change as an `async fn`.

use std::future::Future;
use std::time::Duration;

use super::raw::lockd::lock::elections as wit_elections;
use super::{durability_from_wit, durability_to_wit, grant_from_wit, lost_future, LostReason};
use crate::{to_millis, Error, Grant, HoldOptions, LeaderInfo};

fn leader_from_wit(leader: wit_elections::LeaderInfo) -> LeaderInfo {
    LeaderInfo {
        candidate: leader.candidate,
        value: leader.value,
        fencing_token: leader.fencing_token,
        since_ms: leader.since_ms,
        expires_at_ms: leader.expires_at_ms,
        durability: durability_from_wit(leader.durability),
    }
}

/// The leader of the election `name`, or `None`: [`crate::leader`],
/// awaited.
///
/// # Errors
///
/// The same as [`crate::leader`].
pub async fn leader(name: &str) -> Result<Option<LeaderInfo>, Error> {
    Ok(wit_elections::leader(name.to_string())
        .await?
        .map(leader_from_wit))
}

/// This instance's leadership of an election, under a candidate name the
/// host generates; resigned when dropped (or when the instance ends), the
/// TTL remaining the safety net.
#[derive(Debug)]
pub struct Leadership {
    inner: wit_elections::Leadership,
}

impl Leadership {
    /// Campaigns for `name` with `value`, waiting up to
    /// [`HoldOptions::wait`] in the queue: [`crate::Leadership::campaign`],
    /// awaited. Dropping the returned future before it ends leaves the
    /// queue.
    ///
    /// # Errors
    ///
    /// The same as [`crate::Leadership::campaign`].
    pub async fn campaign(
        name: &str,
        value: &str,
        ttl: Duration,
        options: HoldOptions,
    ) -> Result<Leadership, Error> {
        let options = wit_elections::CampaignOptions {
            wait_ms: to_millis(options.wait),
            durability: durability_to_wit(options.durability),
            keep_alive: options.keep_alive,
        };
        let inner = wit_elections::Leadership::campaign(
            name.to_string(),
            value.to_string(),
            to_millis(ttl),
            options,
        )
        .await?;
        Ok(Leadership { inner })
    }

    /// The fencing token of this leadership.
    pub fn fencing_token(&self) -> u64 {
        self.inner.fencing_token()
    }

    /// The candidate name the host generated.
    pub fn candidate(&self) -> String {
        self.inner.candidate()
    }

    /// When the leadership ends unless extended: Unix epoch milliseconds.
    pub fn expires_at_ms(&self) -> u64 {
        self.inner.expires_at_ms()
    }

    /// Replaces the value this leader proclaims.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] or [`Error::NotOwner`] once it no longer leads.
    pub async fn proclaim(&self, value: &str) -> Result<(), Error> {
        Ok(self.inner.proclaim(value.to_string()).await?)
    }

    /// Moves the expiry to now + `ttl`; the token does not change.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] or [`Error::NotOwner`] once it no longer leads.
    pub async fn extend(&self, ttl: Duration) -> Result<Grant, Error> {
        Ok(grant_from_wit(self.inner.extend(to_millis(ttl)).await?))
    }

    /// Stops leading now; the head of the queue leads next.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] or [`Error::NotOwner`] if it had stopped leading.
    pub async fn resign(self) -> Result<(), Error> {
        Ok(self.inner.resign().await?)
    }

    /// Whether this leadership still leads (asks the store).
    pub async fn is_leader(&self) -> bool {
        self.inner.is_leader().await
    }

    /// A future that resolves once this leadership no longer leads, with the
    /// reason (as [`super::Guard::lost`]). It does not borrow the
    /// leadership.
    pub fn lost(&self) -> impl Future<Output = LostReason> + 'static {
        lost_future(self.inner.lost())
    }
}

/// Follows who leads an election, without campaigning.
#[derive(Debug)]
pub struct LeaderWatch {
    inner: wit_elections::LeaderWatch,
}

impl LeaderWatch {
    /// Starts following `name`.
    ///
    /// # Errors
    ///
    /// [`Error::Denied`] on a store that publishes no events; the errors of
    /// [`leader`].
    pub async fn open(name: &str) -> Result<LeaderWatch, Error> {
        let inner = wit_elections::LeaderWatch::open(name.to_string()).await?;
        Ok(LeaderWatch { inner })
    }

    /// Returns once the leader or its value differs from the one last
    /// answered by [`LeaderWatch::current`] (or seen by `open`); changes in
    /// between coalesce. Nothing polls.
    pub async fn changed(&self) {
        self.inner.changed().await;
    }

    /// The leader now, which [`LeaderWatch::changed`] compares with from
    /// now on.
    ///
    /// # Errors
    ///
    /// The errors of [`leader`].
    pub async fn current(&self) -> Result<Option<LeaderInfo>, Error> {
        Ok(self.inner.current().await?.map(leader_from_wit))
    }
}
