//! Leader election: campaign, lead with a value, learn who leads and when
//! that changes (docs/contract.md#c24-elections).

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use lockd_api::{
    CampaignRequest, DurabilityWord, GrantReply, LeaderReply, LeaderRequest, ProclaimRequest,
    Route, Status, StatusReply,
};
use lockd_core::keepalive::Terms;

use crate::client::{millis, Client, Grant};
use crate::error::Error;
use crate::guard::{generated_id, DEFAULT_TTL};
use crate::holding::{now_ms, Hold, LostReason, Subject};
use crate::transport::{Request, Retry};

/// A campaign, made with [`Client::campaign`]; `.await` it for a
/// [`Leadership`].
#[derive(Debug)]
#[must_use = "a campaign does nothing until it is awaited"]
pub struct CampaignBuilder {
    client: Client,
    name: String,
    value: String,
    candidate: Option<String>,
    ttl: Duration,
    wait: Duration,
    durability: Option<DurabilityWord>,
    keep_alive: bool,
}

impl Client {
    /// Campaigns to lead the election `name` with `value` (at most 4 096
    /// bytes, say an address).
    ///
    /// ```no_run
    /// # async fn run(client: lockd_native_client::Client) -> Result<(), lockd_native_client::Error> {
    /// use std::time::Duration;
    ///
    /// let leadership = client
    ///     .campaign("scheduler", "10.0.0.5:8080")
    ///     .ttl(Duration::from_secs(10))
    ///     .wait(Duration::from_secs(60))
    ///     .keep_alive()
    ///     .await?;
    /// leadership.proclaim("10.0.0.5:8081").await?;
    /// let leader = client.leader("scheduler").await?.expect("someone leads");
    /// assert_eq!(leader.value, "10.0.0.5:8081");
    /// leadership.resign().await?;
    /// # Ok(()) }
    /// ```
    pub fn campaign(&self, name: impl Into<String>, value: impl Into<String>) -> CampaignBuilder {
        CampaignBuilder {
            client: self.clone(),
            name: name.into(),
            value: value.into(),
            candidate: None,
            ttl: DEFAULT_TTL,
            wait: Duration::ZERO,
            durability: None,
            keep_alive: false,
        }
    }

    /// The leader of the election `name`, or `None` when nobody leads.
    pub async fn leader(&self, name: &str) -> Result<Option<LeaderReply>, Error> {
        let body = LeaderRequest {
            namespace: self.ns(),
            name: name.to_string(),
        };
        let request = Request::route(Route::Leader)
            .json(&body)?
            .retry(Retry::Safe)
            .timeout(self.inner.request_timeout);
        let response = self.inner.transport.send(request).await?;
        if response.is_nothing_found(Route::Leader) {
            return Ok(None);
        }
        match response.reply(Route::Leader)?.status() {
            Status::Found => Ok(Some(response.decode(Route::Leader)?)),
            _ => Err(response.refusal(Route::Leader)),
        }
    }

    /// Follows who leads `name` by asking every `every` (without
    /// campaigning). The leader at this moment is the one
    /// [`LeaderWatch::changed`] compares with first.
    pub async fn watch_leader(&self, name: &str, every: Duration) -> Result<LeaderWatch, Error> {
        let current = self.leader(name).await?;
        Ok(LeaderWatch {
            client: self.clone(),
            name: name.to_string(),
            every,
            last: current,
        })
    }
}

impl CampaignBuilder {
    /// How long it leads unless renewed ([`DEFAULT_TTL`] unless set).
    pub fn ttl(mut self, ttl: Duration) -> CampaignBuilder {
        self.ttl = ttl;
        self
    }

    /// How long to wait in the election's queue while another leads (0:
    /// `busy` with the leader at once, the default).
    pub fn wait(mut self, wait: Duration) -> CampaignBuilder {
        self.wait = wait;
        self
    }

    /// Whether the leadership survives a server restart.
    pub fn durability(mut self, durability: DurabilityWord) -> CampaignBuilder {
        self.durability = Some(durability);
        self
    }

    /// The candidate name, instead of a generated one (`candidate-` and 32
    /// hex digits).
    pub fn candidate(mut self, candidate: impl Into<String>) -> CampaignBuilder {
        self.candidate = Some(candidate.into());
        self
    }

    /// Renews the leadership at a third of its TTL for as long as the
    /// [`Leadership`] lives.
    pub fn keep_alive(mut self) -> CampaignBuilder {
        self.keep_alive = true;
        self
    }

    async fn run(self) -> Result<Leadership, Error> {
        let candidate = match self.candidate {
            Some(candidate) => candidate,
            None => generated_id("candidate")?,
        };
        let request = CampaignRequest {
            namespace: self.client.ns(),
            name: self.name.clone(),
            candidate: candidate.clone(),
            value: self.value,
            ttl_ms: millis(self.ttl),
            wait_ms: (!self.wait.is_zero()).then(|| millis(self.wait)),
            durability: self.durability,
        };
        let sent_at_ms = now_ms();
        // A campaign by the leader is a re-lock (it answers the same
        // grant): safe to send again.
        let grant: GrantReply = self
            .client
            .call(
                Route::Campaign,
                &request,
                Status::Acquired,
                Retry::Safe,
                self.wait,
            )
            .await?;
        let terms = Terms {
            renewed_at_ms: sent_at_ms,
            ttl_ms: millis(self.ttl),
            expires_at_ms: grant.expires_at_ms,
        };
        let subject = Subject::Leader {
            name: self.name.clone(),
            candidate: candidate.clone(),
            token: grant.fencing_token,
        };
        Ok(Leadership {
            hold: Hold::start(self.client.clone(), subject, terms, self.keep_alive),
            client: self.client,
            name: self.name,
            candidate,
            fencing_token: grant.fencing_token,
        })
    }
}

impl IntoFuture for CampaignBuilder {
    type Output = Result<Leadership, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Leadership, Error>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}

/// This process's leadership of an election. Dropping it resigns (spawned
/// on the current tokio runtime; outside one its TTL ends it).
#[derive(Debug)]
pub struct Leadership {
    hold: Hold,
    client: Client,
    name: String,
    candidate: String,
    fencing_token: u64,
}

impl Leadership {
    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The candidate name it leads under.
    pub fn candidate(&self) -> &str {
        &self.candidate
    }

    /// The fencing token of this leadership.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// When it ends unless renewed, as the store last answered: Unix epoch
    /// milliseconds.
    pub fn expires_at_ms(&self) -> u64 {
        self.hold.terms().expires_at_ms
    }

    /// Replaces the value it proclaims; token and expiry stay. `not_held`
    /// or `not_owner` once it no longer leads (and it is then lost).
    pub async fn proclaim(&self, value: impl Into<String>) -> Result<(), Error> {
        let body = ProclaimRequest {
            namespace: self.client.ns(),
            name: self.name.clone(),
            candidate: self.candidate.clone(),
            fencing_token: self.fencing_token,
            value: value.into(),
        };
        // Setting the same value twice is setting it once.
        let result: Result<StatusReply, Error> = self
            .client
            .call(
                Route::Proclaim,
                &body,
                Status::Proclaimed,
                Retry::Safe,
                Duration::ZERO,
            )
            .await;
        self.hold.note(result).map(drop)
    }

    /// Moves the expiry to now + `ttl`; the token stays.
    pub async fn extend(&self, ttl: Duration) -> Result<Grant, Error> {
        let sent_at_ms = now_ms();
        let grant = self
            .hold
            .note(self.client.extend(&self.name, &self.candidate, ttl).await)?;
        self.hold.renewed(sent_at_ms, ttl, grant.expires_at_ms);
        Ok(grant)
    }

    /// Stops leading now; the head of the queue leads next.
    pub async fn resign(self) -> Result<(), Error> {
        self.hold.release().await.map(drop)
    }

    /// Whether the store still shows this leadership (false when it cannot
    /// answer).
    pub async fn is_leader(&self) -> bool {
        self.hold.is_held().await
    }

    /// Whether it is lost, as far as this process knows (no call).
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// Completes with why once it no longer leads.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.hold.lost()
    }
}

/// Follows who leads an election by polling [`Client::leader`].
#[derive(Debug)]
pub struct LeaderWatch {
    client: Client,
    name: String,
    every: Duration,
    last: Option<LeaderReply>,
}

impl LeaderWatch {
    /// The leader last answered (or seen when the watch opened).
    pub fn current(&self) -> Option<&LeaderReply> {
        self.last.as_ref()
    }

    /// Completes with the leader (or `None`) once the candidate, the token
    /// or the value differs from the last one answered. A failed poll is
    /// returned as it is; the watch can be asked again.
    pub async fn changed(&mut self) -> Result<Option<LeaderReply>, Error> {
        loop {
            tokio::time::sleep(self.every).await;
            let now = self.client.leader(&self.name).await?;
            if differs(self.last.as_ref(), now.as_ref()) {
                self.last = now.clone();
                return Ok(now);
            }
        }
    }
}

/// Whether the leader changed: another candidate, token or value.
fn differs(before: Option<&LeaderReply>, now: Option<&LeaderReply>) -> bool {
    match (before, now) {
        (None, None) => false,
        (Some(a), Some(b)) => {
            (&a.candidate, a.fencing_token, &a.value) != (&b.candidate, b.fencing_token, &b.value)
        }
        _ => true,
    }
}
