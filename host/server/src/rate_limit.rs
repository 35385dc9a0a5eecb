//! Rate limits per token (lockd.toml's `rate_per_sec` and `burst` on an
//! `[[auth.tokens]]` entry, as Consul limits RPCs): a token bucket for each
//! token that has a limit ([`TokenBucket`]), checked once per request after
//! the token is known and before any work is done for it. A request over
//! the limit is answered 429 `rate_limited` with a `Retry-After`
//! (`crate::api`), and counted by token name
//! (`lockd_rate_limited_total{token="…"}`).
//!
//! The buckets run on the monotonic clock ([`Instant`]), passed in so that
//! tests drive them without sleeping. There is one bucket per configured
//! token and no more, whoever calls: a request with an unknown token is
//! refused (401) before any bucket is looked at. SIGHUP carries each
//! token's bucket over to the new set of tokens when its limit is
//! unchanged, and gives it a fresh one when it changed
//! ([`TokenLimiter::carry_over`]); the count of refusals of a name is kept
//! either way.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The least time between two warnings in the log about one token's
/// refused requests (the refusals between are logged at debug level and
/// counted in the warning).
pub const WARN_EVERY: Duration = Duration::from_secs(10);

/// A token's limit: `per_sec` requests a second on average, at most
/// `burst` at once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimit {
    per_sec: f64,
    burst: u32,
}

impl RateLimit {
    /// `per_sec` requests a second (a positive, finite number; fractions
    /// allowed), `burst` at once ([`RateLimit::default_burst`] if `None`;
    /// at least 1). The error says what is wrong, for a config message.
    pub fn new(per_sec: f64, burst: Option<u32>) -> Result<RateLimit, String> {
        if !(per_sec.is_finite() && per_sec > 0.0) {
            return Err(format!(
                "rate_per_sec must be a positive number of requests a second \
                 (fractions allowed, such as 0.5), not {per_sec}"
            ));
        }
        let burst = burst.unwrap_or_else(|| RateLimit::default_burst(per_sec));
        if burst == 0 {
            return Err("burst must be a positive whole number of requests, not 0".to_string());
        }
        Ok(RateLimit { per_sec, burst })
    }

    /// The burst of a limit that names none: `per_sec` rounded up, at
    /// least 1 (a second's worth of requests at once).
    pub fn default_burst(per_sec: f64) -> u32 {
        // `as` saturates: a rate over u32::MAX a second gets u32::MAX.
        (per_sec.ceil() as u32).max(1)
    }

    /// Requests a second, on average.
    pub fn per_sec(self) -> f64 {
        self.per_sec
    }

    /// Requests at once.
    pub fn burst(self) -> u32 {
        self.burst
    }
}

/// `5 requests a second, burst 5`
impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = if self.per_sec == 1.0 {
            "request"
        } else {
            "requests"
        };
        write!(f, "{} {unit} a second, burst {}", self.per_sec, self.burst)
    }
}

/// How long a refused caller should wait: until its bucket holds a whole
/// token again.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryAfter {
    seconds: f64,
}

impl RetryAfter {
    /// The wait in whole seconds, rounded up and at least 1, as a
    /// `Retry-After` header says it.
    pub fn whole_seconds(self) -> u64 {
        // `as` saturates, so a tiny rate's very long wait stays a number.
        (self.seconds.ceil() as u64).max(1)
    }

    /// The wait itself (at most [`Duration::MAX`]).
    pub fn duration(self) -> Duration {
        Duration::try_from_secs_f64(self.seconds).unwrap_or(Duration::MAX)
    }
}

/// A token bucket: it holds up to `burst` tokens, starts full, and gains
/// `per_sec` tokens a second; each request takes one, and one that finds
/// less than a whole token is refused. Time is passed in: monotonic
/// instants, never the wall clock.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    limit: RateLimit,
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket for `limit`, as of `now`.
    pub fn full(limit: RateLimit, now: Instant) -> TokenBucket {
        TokenBucket {
            limit,
            tokens: f64::from(limit.burst),
            at: now,
        }
    }

    /// Takes a token at `now`, or says how long until there is one. An
    /// instant before the last one seen counts as that one (no time
    /// passed).
    pub fn take(&mut self, now: Instant) -> Result<(), RetryAfter> {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        let burst = f64::from(self.limit.burst);
        self.tokens = (self.tokens + elapsed * self.limit.per_sec).min(burst);
        self.at = self.at.max(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        Err(RetryAfter {
            seconds: (1.0 - self.tokens) / self.limit.per_sec,
        })
    }
}

/// A request its token's limit refused: how long to wait, and whether to
/// warn in the log about it now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Throttled {
    /// The limit that refused it.
    pub limit: RateLimit,
    /// Until the bucket holds a whole token again.
    pub retry_after: RetryAfter,
    /// `Some(n)` when this refusal should be logged as a warning: `n`
    /// requests of the token were refused since the last warning, this one
    /// included (at most one warning per [`WARN_EVERY`]). `None`: log it
    /// at debug level only.
    pub warn: Option<u64>,
}

/// The bucket and the log's state of one limited token.
#[derive(Debug)]
struct Bucket {
    bucket: TokenBucket,
    warned_at: Option<Instant>,
    refused_since_warning: u64,
}

/// One token's limiter: its limit (none: unlimited), its bucket, and the
/// count of its refused requests. Clones share the bucket and the count, so
/// a set of tokens in force and a copy of it count as one.
#[derive(Clone, Debug, Default)]
pub struct TokenLimiter {
    limit: Option<RateLimit>,
    bucket: Option<Arc<Mutex<Bucket>>>,
    refused: Arc<AtomicU64>,
}

impl TokenLimiter {
    /// A limiter for `limit` with a full bucket; `None`: no limit.
    pub fn new(limit: Option<RateLimit>) -> TokenLimiter {
        TokenLimiter::starting(limit, Instant::now())
    }

    /// [`TokenLimiter::new`] with a bucket full as of `now`.
    pub fn starting(limit: Option<RateLimit>, now: Instant) -> TokenLimiter {
        let bucket = limit.map(|limit| {
            Arc::new(Mutex::new(Bucket {
                bucket: TokenBucket::full(limit, now),
                warned_at: None,
                refused_since_warning: 0,
            }))
        });
        TokenLimiter {
            limit,
            bucket,
            refused: Arc::default(),
        }
    }

    /// The limit, if there is one.
    pub fn limit(&self) -> Option<RateLimit> {
        self.limit
    }

    /// Requests refused so far (across reloads that kept the token's name).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Admits one request now, or refuses it (counted).
    pub fn admit(&self) -> Result<(), Throttled> {
        self.admit_at(Instant::now())
    }

    /// Admits one request at `now`, or refuses it (counted).
    pub fn admit_at(&self, now: Instant) -> Result<(), Throttled> {
        let (Some(limit), Some(bucket)) = (self.limit, &self.bucket) else {
            return Ok(());
        };
        // A panic while the lock was held leaves a bucket that is still a
        // bucket: its fields are numbers, each written whole.
        let mut state = bucket.lock().unwrap_or_else(PoisonError::into_inner);
        let retry_after = match state.bucket.take(now) {
            Ok(()) => return Ok(()),
            Err(retry_after) => retry_after,
        };
        self.refused.fetch_add(1, Ordering::Relaxed);
        state.refused_since_warning += 1;
        let due = state
            .warned_at
            .is_none_or(|at| now.saturating_duration_since(at) >= WARN_EVERY);
        let warn = due.then(|| {
            state.warned_at = Some(now);
            std::mem::take(&mut state.refused_since_warning)
        });
        Err(Throttled {
            limit,
            retry_after,
            warn,
        })
    }

    /// This (new) limiter of a token, given the one `previous` of the same
    /// name in force until now: the count of refusals goes on from
    /// `previous`'s, and if the limit is the same, so does the bucket (a
    /// reload does not refill it). Returns whether the limit changed.
    pub fn carry_over(&mut self, previous: &TokenLimiter) -> bool {
        self.refused = Arc::clone(&previous.refused);
        if self.limit == previous.limit {
            self.bucket.clone_from(&previous.bucket);
            return false;
        }
        true
    }
}

/// Appends the rate-limit metrics of `tokens` (each token's name and
/// limiter) to `out`: `lockd_rate_limited_total{token}` for every token,
/// and `lockd_rate_limit_per_second{token}` and `lockd_rate_limit_burst{token}`
/// for those with a limit.
pub fn render_metrics<'a>(
    tokens: impl Iterator<Item = (&'a str, &'a TokenLimiter)> + Clone,
    out: &mut String,
) {
    use fmt::Write as _;
    out.push_str(
        "# HELP lockd_rate_limited_total Requests refused with 429 rate_limited: \
         their token was over its rate_per_sec and burst.\n\
         # TYPE lockd_rate_limited_total counter\n",
    );
    for (name, limiter) in tokens.clone() {
        let name = escape_label(name);
        let _ = writeln!(
            out,
            "lockd_rate_limited_total{{token=\"{name}\"}} {}",
            limiter.refused()
        );
    }
    out.push_str(
        "# HELP lockd_rate_limit_per_second The rate_per_sec of each token that has one.\n\
         # TYPE lockd_rate_limit_per_second gauge\n",
    );
    let limited = tokens.filter_map(|(name, l)| Some((escape_label(name), l.limit()?)));
    let mut bursts = String::new();
    for (name, limit) in limited {
        let _ = writeln!(
            out,
            "lockd_rate_limit_per_second{{token=\"{name}\"}} {}",
            limit.per_sec()
        );
        let _ = writeln!(
            bursts,
            "lockd_rate_limit_burst{{token=\"{name}\"}} {}",
            limit.burst()
        );
    }
    out.push_str(
        "# HELP lockd_rate_limit_burst The burst of each token that has a rate_per_sec.\n\
         # TYPE lockd_rate_limit_burst gauge\n",
    );
    out.push_str(&bursts);
}

/// A Prometheus label value: backslash, double quote and newline escaped.
fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(per_sec: f64, burst: Option<u32>) -> RateLimit {
        RateLimit::new(per_sec, burst).unwrap()
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_bucket_allows_its_burst_then_its_rate() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::full(limit(5.0, Some(5)), t0);
        for i in 0..5 {
            assert!(bucket.take(t0).is_ok(), "call {i}");
        }
        let refused = bucket.take(t0).unwrap_err();
        assert_eq!(refused.duration(), ms(200));
        assert_eq!(refused.whole_seconds(), 1);
        // A token comes back every 200 ms; no more than that.
        assert!(bucket.take(t0 + ms(199)).is_err());
        assert!(bucket.take(t0 + ms(200)).is_ok());
        assert!(bucket.take(t0 + ms(200)).is_err());
        // Idle for a long time: full again, never more than the burst.
        let later = t0 + Duration::from_secs(3600);
        for _ in 0..5 {
            assert!(bucket.take(later).is_ok());
        }
        assert!(bucket.take(later).is_err());
    }

    #[test]
    fn a_fractional_rate_waits_whole_seconds_rounded_up() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::full(limit(0.25, None), t0);
        assert!(bucket.take(t0).is_ok());
        let refused = bucket.take(t0 + ms(500)).unwrap_err();
        // 0.125 of a token back after 500 ms: 3.5 s more at 0.25 a second.
        assert_eq!(refused.duration(), ms(3500));
        assert_eq!(refused.whole_seconds(), 4);
        assert!(bucket.take(t0 + ms(3999)).is_err());
        assert!(bucket.take(t0 + ms(4000)).is_ok());
        // A tiny rate's wait is a (huge) number, not a panic.
        let mut slow = TokenBucket::full(limit(1e-300, None), t0);
        assert!(slow.take(t0).is_ok());
        let wait = slow.take(t0).unwrap_err();
        assert_eq!(wait.whole_seconds(), u64::MAX);
        assert_eq!(wait.duration(), Duration::MAX);
    }

    #[test]
    fn time_going_backwards_adds_nothing() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        let mut bucket = TokenBucket::full(limit(1.0, Some(1)), t0);
        assert!(bucket.take(t1).is_ok());
        assert!(bucket.take(t0).is_err());
        assert!(bucket.take(t1 + ms(999)).is_err());
        assert!(bucket.take(t1 + ms(1000)).is_ok());
    }

    #[test]
    fn limits_check_their_numbers_and_default_the_burst() {
        assert_eq!(limit(5.0, None).burst(), 5);
        assert_eq!(limit(2.5, None).burst(), 3);
        assert_eq!(limit(0.1, None).burst(), 1);
        assert_eq!(limit(1e12, None).burst(), u32::MAX);
        assert_eq!(limit(0.5, Some(7)).burst(), 7);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let e = RateLimit::new(bad, None).unwrap_err();
            assert!(
                e.starts_with("rate_per_sec must be a positive number"),
                "{e}"
            );
        }
        let e = RateLimit::new(1.0, Some(0)).unwrap_err();
        assert!(e.starts_with("burst must be a positive"), "{e}");
        assert_eq!(
            limit(0.5, Some(2)).to_string(),
            "0.5 requests a second, burst 2"
        );
        assert_eq!(limit(1.0, None).to_string(), "1 request a second, burst 1");
    }

    #[test]
    fn refusals_are_counted_and_warned_about_now_and_then() {
        let t0 = Instant::now();
        let limiter = TokenLimiter::starting(Some(limit(1.0, Some(1))), t0);
        assert!(limiter.admit_at(t0).is_ok());
        let first = limiter.admit_at(t0).unwrap_err();
        assert_eq!(first.warn, Some(1));
        assert_eq!(first.retry_after.whole_seconds(), 1);
        for i in 0..3 {
            assert_eq!(limiter.admit_at(t0 + ms(i)).unwrap_err().warn, None);
        }
        assert_eq!(limiter.refused(), 4);
        // Admitted calls in between are not refusals.
        assert!(limiter.admit_at(t0 + ms(5000)).is_ok());
        assert!(limiter.admit_at(t0 + WARN_EVERY).is_ok());
        let again = limiter.admit_at(t0 + WARN_EVERY).unwrap_err();
        assert_eq!(again.warn, Some(4));
        assert_eq!(limiter.refused(), 5);
        // No limit: everything is admitted and nothing counted.
        let open = TokenLimiter::starting(None, t0);
        for _ in 0..1000 {
            assert!(open.admit_at(t0).is_ok());
        }
        assert_eq!(open.refused(), 0);
    }

    #[test]
    fn a_reload_keeps_an_unchanged_bucket_and_refills_a_changed_one() {
        let t0 = Instant::now();
        let old = TokenLimiter::starting(Some(limit(1.0, Some(2))), t0);
        for _ in 0..2 {
            assert!(old.admit_at(t0).is_ok());
        }
        assert!(old.admit_at(t0).is_err());
        // The same limit: the same (empty) bucket, the same count.
        let mut same = TokenLimiter::starting(Some(limit(1.0, Some(2))), t0);
        assert!(!same.carry_over(&old));
        assert!(same.admit_at(t0).is_err());
        assert_eq!((old.refused(), same.refused()), (2, 2));
        // A new limit: a fresh, full bucket; the count goes on.
        let mut changed = TokenLimiter::starting(Some(limit(1.0, Some(3))), t0);
        assert!(changed.carry_over(&same));
        for _ in 0..3 {
            assert!(changed.admit_at(t0).is_ok());
        }
        assert!(changed.admit_at(t0).is_err());
        assert_eq!(changed.refused(), 3);
        // No limit any more: never refused; the count is still the name's.
        let mut lifted = TokenLimiter::starting(None, t0);
        assert!(lifted.carry_over(&changed));
        assert!(lifted.admit_at(t0).is_ok());
        assert_eq!(lifted.refused(), 3);
    }

    #[test]
    fn metrics_name_each_token() {
        let t0 = Instant::now();
        let limited = TokenLimiter::starting(Some(limit(0.5, Some(1))), t0);
        assert!(limited.admit_at(t0).is_ok());
        assert!(limited.admit_at(t0).is_err());
        let open = TokenLimiter::starting(None, t0);
        let tokens = [("ci \"x\"", &limited), ("ops", &open)];
        let mut out = String::new();
        render_metrics(tokens.iter().copied(), &mut out);
        for line in [
            "# TYPE lockd_rate_limited_total counter",
            "lockd_rate_limited_total{token=\"ci \\\"x\\\"\"} 1",
            "lockd_rate_limited_total{token=\"ops\"} 0",
            "# TYPE lockd_rate_limit_per_second gauge",
            "lockd_rate_limit_per_second{token=\"ci \\\"x\\\"\"} 0.5",
            "# TYPE lockd_rate_limit_burst gauge",
            "lockd_rate_limit_burst{token=\"ci \\\"x\\\"\"} 1",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} not in\n{out}");
        }
        assert!(!out.contains("per_second{token=\"ops\"}"), "{out}");
        assert_eq!(escape_label("a\\b\nc"), "a\\\\b\\nc");
    }
}
