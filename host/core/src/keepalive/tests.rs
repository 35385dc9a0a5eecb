//! The keep-alive rule on a [`ManualClock`]: every time is exact, nothing
//! sleeps.

use std::sync::{Arc, Mutex};

use super::*;
use crate::clock::ManualClock;
use crate::error::LockError;

const START: u64 = 1_000_000;
const TTL: u64 = 3_000;
const HOUR: i64 = 3_600_000;

/// Answers a renewal at the clock time it is asked.
type Answer = Box<dyn FnMut(u64) -> Result<u64, LockError> + Send>;

/// A store that answers from a script and records when it was asked.
struct Store {
    clock: ManualClock,
    asked_at: Mutex<Vec<u64>>,
    answer: Mutex<Answer>,
}

impl Store {
    fn new(
        clock: &ManualClock,
        answer: impl FnMut(u64) -> Result<u64, LockError> + Send + 'static,
    ) -> Arc<Store> {
        Arc::new(Store {
            clock: clock.clone(),
            asked_at: Mutex::new(Vec::new()),
            answer: Mutex::new(Box::new(answer)),
        })
    }

    /// Asked at these times, relative to [`START`].
    fn asked(&self) -> Vec<u64> {
        self.asked_at
            .lock()
            .unwrap()
            .iter()
            .map(|t| t - START)
            .collect()
    }

    fn ask(&self) -> Result<u64, LockError> {
        let now = self.clock.now_ms();
        self.asked_at.lock().unwrap().push(now);
        (self.answer.lock().unwrap())(now)
    }
}

impl Renew for Store {
    type Error = LockError;

    fn renew(&self, _ttl_ms: u64) -> impl Future<Output = Result<u64, LockError>> + Send {
        std::future::ready(self.ask())
    }

    fn is_unavailable(error: &LockError) -> bool {
        matches!(error, LockError::Unavailable(_))
    }
}

impl CheckHeld for Store {
    type Error = LockError;

    /// `Ok(0)` from the script means "not held".
    fn held_until(&self) -> impl Future<Output = Result<Option<u64>, LockError>> + Send {
        std::future::ready(self.ask().map(|until| (until > 0).then_some(until)))
    }
}

fn unavailable(_: u64) -> Result<u64, LockError> {
    Err(LockError::Unavailable("etcd unreachable".to_string()))
}

/// A store that renews for the TTL, answering its expiry in wall time.
fn renews(clock: &ManualClock) -> impl FnMut(u64) -> Result<u64, LockError> + Send + 'static {
    let clock = clock.clone();
    move |now| Ok(clock.to_wall_ms(now + TTL))
}

fn granted_at(clock: &ManualClock, at: u64) -> Arc<Holding> {
    Arc::new(Holding::new(Terms {
        renewed_at_ms: at,
        ttl_ms: TTL,
        expires_at_ms: clock.to_wall_ms(at + TTL),
    }))
}

/// Lets every woken task run (the test runtime has one thread).
async fn settle() {
    for _ in 0..32 {
        tokio::task::yield_now().await;
    }
}

/// Moves the clock to `START + t`, one millisecond at a time, settling at
/// each, so that every deadline is met at its exact millisecond.
async fn run_to(clock: &ManualClock, t: u64) {
    settle().await;
    while clock.now_ms() < START + t {
        clock.advance(1);
        settle().await;
    }
}

type Driven = tokio::task::JoinHandle<Lost<LockError>>;

fn start_keep_alive(clock: &ManualClock, holding: &Arc<Holding>, store: &Arc<Store>) -> Driven {
    let (clock, holding, store) = (clock.clone(), holding.clone(), store.clone());
    tokio::spawn(async move { keep_alive(&clock, &holding, &*store).await })
}

fn start_watch(clock: &ManualClock, holding: &Arc<Holding>, store: &Arc<Store>) -> Driven {
    let (clock, holding, store) = (clock.clone(), holding.clone(), store.clone());
    tokio::spawn(async move { watch_expiry(&clock, &holding, &*store).await })
}

#[test]
fn the_policy_in_numbers() {
    let terms = Terms {
        renewed_at_ms: 100,
        ttl_ms: 3_000,
        expires_at_ms: 0,
    };
    assert_eq!(terms.renew_at_ms(), 1_100);
    assert_eq!(terms.margin_ms(), 300);
    assert_eq!(terms.lost_at_ms(), 2_800);
    assert_eq!(terms.expires_by_ms(), 3_100);
    assert_eq!(terms.retry_every_ms(), 300);
    let long = Terms {
        ttl_ms: 60_000,
        ..terms
    };
    assert_eq!(long.margin_ms(), 1_000, "the margin is at most 1 s");
    assert_eq!(long.retry_every_ms(), 1_000);
    let tiny = Terms { ttl_ms: 2, ..terms };
    assert_eq!(tiny.retry_every_ms(), 10, "retries never spin");
    assert_eq!(tiny.renew_at_ms(), 101);
    let zero = Terms { ttl_ms: 0, ..terms };
    assert_eq!(zero.lost_at_ms(), 101, "a zero TTL reads as 1 ms");
}

#[tokio::test(flavor = "current_thread")]
async fn renews_at_a_third_of_the_ttl() {
    let clock = ManualClock::new(START);
    let holding = granted_at(&clock, START);
    let store = Store::new(&clock, renews(&clock));
    let driver = start_keep_alive(&clock, &holding, &store);
    run_to(&clock, 999).await;
    assert!(store.asked().is_empty());
    run_to(&clock, 1_000).await;
    assert_eq!(store.asked(), [1_000]);
    // Counted from the renewal's send time.
    run_to(&clock, 9_500).await;
    assert_eq!(
        store.asked(),
        [1_000, 2_000, 3_000, 4_000, 5_000, 6_000, 7_000, 8_000, 9_000]
    );
    assert!(!holding.is_lost());
    assert_eq!(holding.terms().renewed_at_ms, START + 9_000);
    assert_eq!(holding.expires_at_ms(), START + 12_000);
    driver.abort();
}

#[tokio::test(flavor = "current_thread")]
async fn unavailable_is_retried_until_the_deadline_then_lost() {
    let clock = ManualClock::new(START);
    let holding = granted_at(&clock, START);
    let store = Store::new(&clock, unavailable);
    let driver = start_keep_alive(&clock, &holding, &store);
    run_to(&clock, 2_699).await;
    assert!(!holding.is_lost());
    // Every TTL/10 from the first renewal, until the lost deadline:
    // TTL - min(TTL/10, 1 s).
    assert_eq!(store.asked(), [1_000, 1_300, 1_600, 1_900, 2_200, 2_500]);
    run_to(&clock, 2_700).await;
    assert!(holding.is_lost());
    assert_eq!(
        driver.await.unwrap(),
        Lost::Expired {
            last_error: Some(LockError::Unavailable("etcd unreachable".to_string()))
        }
    );
}

#[tokio::test(flavor = "current_thread")]
async fn unavailable_then_renewed_keeps_the_hold() {
    let clock = ManualClock::new(START);
    let holding = granted_at(&clock, START);
    let mut failures = 2;
    let renew = renews(&clock);
    let mut renew = renew;
    let store = Store::new(&clock, move |now| {
        if failures > 0 {
            failures -= 1;
            return unavailable(now);
        }
        renew(now)
    });
    let driver = start_keep_alive(&clock, &holding, &store);
    run_to(&clock, 5_000).await;
    assert!(!holding.is_lost());
    assert_eq!(store.asked(), [1_000, 1_300, 1_600, 2_600, 3_600, 4_600]);
    driver.abort();
}

#[tokio::test(flavor = "current_thread")]
async fn a_refused_renewal_is_lost_at_once() {
    let clock = ManualClock::new(START);
    let holding = granted_at(&clock, START);
    let store = Store::new(&clock, |_| Err(LockError::NotHeld));
    let driver = start_keep_alive(&clock, &holding, &store);
    let mut lost = holding.subscribe_lost();
    run_to(&clock, 999).await;
    assert!(!*lost.borrow_and_update());
    run_to(&clock, 1_000).await;
    assert!(lost.has_changed().unwrap() && *lost.borrow());
    assert_eq!(driver.await.unwrap(), Lost::Refused(LockError::NotHeld));
    assert_eq!(store.asked(), [1_000]);
}

#[tokio::test(flavor = "current_thread")]
async fn a_renewal_by_the_holder_reschedules() {
    let clock = ManualClock::new(START);
    let holding = granted_at(&clock, START);
    let store = Store::new(&clock, renews(&clock));
    let driver = start_keep_alive(&clock, &holding, &store);
    run_to(&clock, 500).await;
    // The guest extends by itself: keep-alive counts from there.
    assert!(holding.renewed(Terms {
        renewed_at_ms: START + 500,
        ttl_ms: TTL,
        expires_at_ms: clock.to_wall_ms(START + 3_500),
    }));
    run_to(&clock, 1_499).await;
    assert!(store.asked().is_empty());
    run_to(&clock, 1_500).await;
    assert_eq!(store.asked(), [1_500]);
    // A shorter TTL brings the next renewal forward.
    run_to(&clock, 1_600).await;
    holding.renewed(Terms {
        renewed_at_ms: START + 1_600,
        ttl_ms: 600,
        expires_at_ms: clock.to_wall_ms(START + 2_200),
    });
    run_to(&clock, 1_800).await;
    assert_eq!(store.asked(), [1_500, 1_800]);
    // An answer to an older request does not move the terms back.
    assert!(!holding.renewed(Terms {
        renewed_at_ms: START + 1_700,
        ttl_ms: TTL,
        expires_at_ms: 0,
    }));
    assert!(!holding.is_lost());
    driver.abort();
}

#[tokio::test(flavor = "current_thread")]
async fn a_holder_renewal_during_retries_ends_them() {
    let clock = ManualClock::new(START);
    let holding = granted_at(&clock, START);
    let store = Store::new(&clock, unavailable);
    let driver = start_keep_alive(&clock, &holding, &store);
    run_to(&clock, 2_650).await;
    holding.renewed(Terms {
        renewed_at_ms: START + 2_650,
        ttl_ms: TTL,
        expires_at_ms: clock.to_wall_ms(START + 5_650),
    });
    // Not lost at the old deadline; back on schedule from the new terms.
    run_to(&clock, 3_649).await;
    assert!(!holding.is_lost());
    assert_eq!(store.asked(), [1_000, 1_300, 1_600, 1_900, 2_200, 2_500]);
    run_to(&clock, 5_349).await;
    assert!(!holding.is_lost());
    run_to(&clock, 5_350).await;
    assert!(holding.is_lost(), "lost at 2 650 + 3 000 - 300");
    assert!(matches!(driver.await.unwrap(), Lost::Expired { .. }));
}

#[tokio::test(flavor = "current_thread")]
async fn a_stale_start_gets_one_renewal() {
    // Granted after a long wait in the queue: sent 5 s ago.
    let clock = ManualClock::new(START);
    let holding = granted_at(&clock, START);
    clock.advance(5_000);
    let store = Store::new(&clock, renews(&clock));
    let driver = start_keep_alive(&clock, &holding, &store);
    run_to(&clock, 5_000).await;
    assert_eq!(store.asked(), [5_000]);
    assert!(!holding.is_lost());
    driver.abort();

    let holding = granted_at(&clock, START);
    let store = Store::new(&clock, unavailable);
    let driver = start_keep_alive(&clock, &holding, &store);
    settle().await;
    assert_eq!(store.asked(), [5_000]);
    assert!(holding.is_lost());
    assert!(matches!(
        driver.await.unwrap(),
        Lost::Expired {
            last_error: Some(_)
        }
    ));
}

#[tokio::test(flavor = "current_thread")]
async fn marked_lost_from_outside_ends_the_driver() {
    let clock = ManualClock::new(START);
    let holding = granted_at(&clock, START);
    let store = Store::new(&clock, renews(&clock));
    let driver = start_keep_alive(&clock, &holding, &store);
    run_to(&clock, 100).await;
    assert!(holding.mark_lost());
    assert!(!holding.mark_lost(), "marked once");
    assert_eq!(driver.await.unwrap(), Lost::Marked);
    assert!(store.asked().is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn watching_without_keep_alive() {
    let clock = ManualClock::new(START);
    let holding = granted_at(&clock, START);
    // Renewed elsewhere once, up to 4 500; then gone.
    let wall = clock.clone();
    let mut answers = vec![0, wall.to_wall_ms(START + 4_500)];
    let store = Store::new(&clock, move |_| Ok(answers.pop().unwrap_or(0)));
    let driver = start_watch(&clock, &holding, &store);
    run_to(&clock, 2_999).await;
    assert!(store.asked().is_empty());
    run_to(&clock, 3_000).await;
    assert_eq!(store.asked(), [3_000]);
    assert!(!holding.is_lost());
    assert_eq!(holding.expires_at_ms(), START + 4_500);
    run_to(&clock, 4_499).await;
    assert!(!holding.is_lost());
    run_to(&clock, 4_500).await;
    assert_eq!(store.asked(), [3_000, 4_500]);
    assert!(holding.is_lost());
    assert_eq!(driver.await.unwrap(), Lost::Expired { last_error: None });
}

#[tokio::test(flavor = "current_thread")]
async fn watching_follows_the_holder_renewals() {
    let clock = ManualClock::new(START);
    let holding = granted_at(&clock, START);
    let store = Store::new(&clock, |_| Ok(0));
    let driver = start_watch(&clock, &holding, &store);
    run_to(&clock, 2_000).await;
    holding.renewed(Terms {
        renewed_at_ms: START + 2_000,
        ttl_ms: TTL,
        expires_at_ms: clock.to_wall_ms(START + 5_000),
    });
    run_to(&clock, 4_999).await;
    assert!(!holding.is_lost());
    run_to(&clock, 5_000).await;
    assert!(holding.is_lost());
    assert_eq!(store.asked(), [5_000]);
    assert_eq!(driver.await.unwrap(), Lost::Expired { last_error: None });
}

/// How a keep-alive driver is started, for [`wall_steps`].
type Start = fn(&ManualClock, &Arc<Holding>, &Arc<Store>) -> tokio::task::JoinHandle<()>;

fn start_keep_alive_unit(
    clock: &ManualClock,
    holding: &Arc<Holding>,
    store: &Arc<Store>,
) -> tokio::task::JoinHandle<()> {
    let driver = start_keep_alive(clock, holding, store);
    tokio::spawn(async move {
        let _ = driver.await;
    })
}

/// A driver that judges the loss by comparing the store's wall-clock expiry
/// with the wall clock, the flaw this module's rule avoids. Here only to
/// show that [`wall_steps`] catches it.
fn start_wall_clock_judge(
    clock: &ManualClock,
    holding: &Arc<Holding>,
    store: &Arc<Store>,
) -> tokio::task::JoinHandle<()> {
    let (clock, holding, store) = (clock.clone(), holding.clone(), store.clone());
    tokio::spawn(async move {
        let wall_now = |clock: &ManualClock| clock.to_wall_ms(clock.now_ms());
        loop {
            let terms = holding.terms();
            let renew_at_wall = terms.expires_at_ms - (TTL - TTL / 3);
            let wait = renew_at_wall.saturating_sub(wall_now(&clock));
            clock.sleep_until(clock.now_ms() + wait).await;
            loop {
                match store.renew(TTL).await {
                    Ok(until) => {
                        holding.renewed(Terms {
                            renewed_at_ms: clock.now_ms(),
                            ttl_ms: TTL,
                            expires_at_ms: until,
                        });
                        break;
                    }
                    Err(LockError::Unavailable(_)) => {
                        // The same margin as the rule, so that only the
                        // clock it reads differs.
                        let lost_at_wall = terms.expires_at_ms - terms.margin_ms();
                        let now = wall_now(&clock);
                        if now >= lost_at_wall {
                            holding.mark_lost();
                            return;
                        }
                        let wait = terms.retry_every_ms().min(lost_at_wall - now);
                        clock.sleep_until(clock.now_ms() + wait).await;
                    }
                    Err(_) => {
                        holding.mark_lost();
                        return;
                    }
                }
            }
        }
    })
}

/// A store unavailable from the start, and the wall clock stepped by
/// `steps` (at 500 ms, 1 500 ms, ...): the loss must come exactly at the
/// lost deadline of the monotonic clock, 2 700 ms. Answers what went wrong.
async fn wall_steps(start: Start, steps: &[i64]) -> Vec<String> {
    let clock = ManualClock::new(START);
    let holding = granted_at(&clock, START);
    let store = Store::new(&clock, unavailable);
    let driver = start(&clock, &holding, &store);
    let mut wrong = Vec::new();
    for t in 0..=3_500 {
        run_to(&clock, t).await;
        if t % 1_000 == 500 {
            if let Some(step) = steps.get(t as usize / 1_000) {
                clock.step_wall(*step);
                settle().await;
            }
        }
        let expected = t >= 2_700;
        if holding.is_lost() != expected {
            wrong.push(format!(
                "at {t} ms: lost is {}, expected {expected}",
                holding.is_lost()
            ));
            break;
        }
    }
    driver.abort();
    wrong
}

#[tokio::test(flavor = "current_thread")]
async fn wall_clock_steps_neither_fire_nor_hide_the_loss() {
    for steps in [&[HOUR, -2 * HOUR][..], &[-HOUR], &[HOUR]] {
        assert_eq!(
            wall_steps(start_keep_alive_unit, steps).await,
            Vec::<String>::new(),
            "steps {steps:?}"
        );
    }
}

/// The negative control: the same test fails a driver that judges the loss
/// by the wall clock, in both directions.
#[tokio::test(flavor = "current_thread")]
async fn the_wall_step_test_catches_a_wall_clock_judge() {
    // Without a step the judge keeps the same deadline: it passes...
    assert_eq!(
        wall_steps(start_wall_clock_judge, &[]).await,
        Vec::<String>::new()
    );
    // ...a forward step fires the loss early...
    let fired = wall_steps(start_wall_clock_judge, &[HOUR, -2 * HOUR]).await;
    assert_eq!(fired, ["at 1000 ms: lost is true, expected false"]);
    // ...and a backward step hides it.
    let hidden = wall_steps(start_wall_clock_judge, &[-HOUR]).await;
    assert_eq!(hidden, ["at 2700 ms: lost is false, expected true"]);
}
