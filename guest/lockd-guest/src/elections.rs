//! Leader election: the `elections` interface
//! (docs/contract.md#c24-elections).

use std::time::Duration;

use crate::raw::lockd::lock::elections as wit_elections;
use crate::{to_millis, Error, Grant, HoldOptions, Pollable};

pub use wit_elections::LeaderInfo;

/// The leader of the election `name`, or `None` when nobody leads.
///
/// # Errors
///
/// [`Error::InvalidArgument`] if `name` is a lock or a semaphore, or bad.
pub fn leader(name: &str) -> Result<Option<LeaderInfo>, Error> {
    Ok(wit_elections::leader(name)?)
}

/// This instance's leadership of an election, under a candidate name the
/// host generates.
///
/// Dropping it resigns, and so does the end of the instance that holds it,
/// even by a trap; the TTL remains the safety net. Keep it alive with
/// [`HoldOptions::kept_alive`] and watch [`Leadership::lost`].
///
/// ```no_run
/// use std::time::Duration;
/// use lockd_guest::{HoldOptions, Leadership};
///
/// # fn main() -> Result<(), lockd_guest::Error> {
/// let options = HoldOptions::default().with_wait(Duration::from_secs(60)).kept_alive();
/// let leading = Leadership::campaign("scheduler", "10.0.0.7:8080", Duration::from_secs(10), options)?;
/// println!("leading with token {}", leading.fencing_token());
/// leading.proclaim("10.0.0.7:9090")?;
/// leading.resign()?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Leadership {
    inner: wit_elections::Leadership,
}

impl Leadership {
    /// Campaigns for the election `name` with `value` (at most 4 096 bytes):
    /// leads at once when nobody leads and nobody waits, else waits up to
    /// [`HoldOptions::wait`] in the queue. Leads for `ttl` unless kept alive
    /// or extended.
    ///
    /// # Errors
    ///
    /// [`Error::Busy`] with the leader when the wait ran out;
    /// [`Error::InvalidArgument`] for a name used as a lock or a semaphore,
    /// a value over the limit, or bad arguments.
    pub fn campaign(
        name: &str,
        value: &str,
        ttl: Duration,
        options: HoldOptions,
    ) -> Result<Leadership, Error> {
        let inner = wit_elections::Leadership::campaign(
            name,
            value,
            to_millis(ttl),
            wit_elections::CampaignOptions {
                wait_ms: to_millis(options.wait),
                durability: options.durability,
                keep_alive: options.keep_alive,
            },
        )?;
        Ok(Leadership { inner })
    }

    /// The fencing token of this leadership.
    pub fn fencing_token(&self) -> u64 {
        self.inner.fencing_token()
    }

    /// The candidate name the host generated (what [`leader`] shows).
    pub fn candidate(&self) -> String {
        self.inner.candidate()
    }

    /// When the leadership ends unless extended: Unix epoch milliseconds.
    pub fn expires_at_ms(&self) -> u64 {
        self.inner.expires_at_ms()
    }

    /// Replaces the value this leader proclaims; token and expiry stay.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] or [`Error::NotOwner`] once it no longer leads;
    /// [`Error::InvalidArgument`] for a value over 4 096 bytes.
    pub fn proclaim(&self, value: &str) -> Result<(), Error> {
        Ok(self.inner.proclaim(value)?)
    }

    /// Moves the expiry to now + `ttl`; the token does not change.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] or [`Error::NotOwner`] once it no longer leads.
    pub fn extend(&self, ttl: Duration) -> Result<Grant, Error> {
        Ok(self.inner.extend(to_millis(ttl))?)
    }

    /// Stops leading now; the head of the queue leads next.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] or [`Error::NotOwner`] if it no longer led;
    /// [`Error::Unavailable`] if the store could not record it.
    pub fn resign(self) -> Result<(), Error> {
        Ok(self.inner.resign()?)
    }

    /// Whether this leadership still leads (asks the host).
    pub fn is_leader(&self) -> bool {
        self.inner.is_leader()
    }

    /// A pollable that becomes ready once this leadership no longer leads.
    pub fn lost(&self) -> Pollable {
        self.inner.subscribe_lost()
    }
}

/// Follows who leads an election, without campaigning.
///
/// ```no_run
/// use lockd_guest::LeaderWatch;
///
/// # fn main() -> Result<(), lockd_guest::Error> {
/// let watch = LeaderWatch::open("scheduler")?;
/// let mut leader = watch.current()?;
/// loop {
///     watch.changed().block();
///     leader = watch.current()?;
///     println!("now led by {:?}", leader.as_ref().map(|l| &l.value));
/// #   break;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct LeaderWatch {
    inner: wit_elections::LeaderWatch,
}

impl LeaderWatch {
    /// Starts following the election `name`.
    ///
    /// # Errors
    ///
    /// As [`leader`]; [`Error::Denied`] past the instance's resource cap.
    pub fn open(name: &str) -> Result<LeaderWatch, Error> {
        Ok(LeaderWatch {
            inner: wit_elections::LeaderWatch::open(name)?,
        })
    }

    /// A pollable that becomes ready once the leader (candidate or token) or
    /// its value differs from the one [`LeaderWatch::current`] last answered
    /// (or the one leading at [`LeaderWatch::open`]). The host follows the
    /// store's events: nothing polls.
    pub fn changed(&self) -> Pollable {
        self.inner.subscribe()
    }

    /// The leader now, or `None`; [`LeaderWatch::changed`] compares with it
    /// from now on.
    ///
    /// # Errors
    ///
    /// As [`leader`].
    pub fn current(&self) -> Result<Option<LeaderInfo>, Error> {
        Ok(self.inner.current()?)
    }
}
