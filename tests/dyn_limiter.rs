//! Limiters as trait objects (issue 25): `Box<dyn DynLimiter>` and `Arc<dyn DynLimiter>`
//! hold any limiter, chosen at run time, and answer as the limiter inside would, on
//! tokio's paused clock.

mod common;

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use common::{ms, secs, spawn_acquire, yield_until};
use token_bucket::{
    AcquireError, Decision, DynLimiter, FixedWindow, Limiter, Policy, Quota, Rate, SlidingLog,
    SlidingWindow, TokenBucket, TryAcquireError,
};
use tokio::time::{advance, Instant};

/// The limiter a line of configuration names: each admits 2 at once, and the next permit
/// at an instant of its own.
fn from_config(kind: &str) -> Box<dyn DynLimiter> {
    match kind {
        "bucket" => Box::new(TokenBucket::new(Rate::per_second(2), 2).unwrap()),
        "fixed" => Box::new(FixedWindow::new(2, secs(1)).unwrap()),
        "log" => Box::new(SlidingLog::new(2, secs(1)).unwrap()),
        "wheel" => Box::new(SlidingWindow::new(2, 10, ms(100)).unwrap()),
        other => panic!("no such limiter: {other}"),
    }
}

/// Takes any `Limiter`: a boxed one goes where a limiter goes.
async fn acquire_through_the_trait(limiter: &impl Limiter, permits: u64) {
    limiter.acquire(permits).await.unwrap();
}

/// A limiter of one's own, with `Limiter` alone (no `KeyTemplate`): it boxes too.
struct Unlimited;

impl Limiter for Unlimited {
    fn try_acquire(&self, _: u64) -> Result<(), TryAcquireError> {
        Ok(())
    }

    async fn acquire(&self, _: u64) -> Result<(), AcquireError> {
        Ok(())
    }

    fn is_limited(&self) -> bool {
        false
    }

    fn refund(&self, _: u64) {}

    fn available(&self) -> u64 {
        u64::MAX
    }
}

#[tokio::test(start_paused = true)]
async fn a_vec_of_mixed_limiters_chosen_at_run_time_waits_as_each_would() {
    let limiters: Vec<Box<dyn DynLimiter>> = ["bucket", "fixed", "log", "wheel"]
        .into_iter()
        .map(from_config)
        .collect();
    let start = Instant::now();
    for limiter in &limiters {
        acquire_through_the_trait(limiter, 2).await;
    }
    assert_eq!(start.elapsed(), Duration::ZERO);
    // Each its own wait, from the same start: the bucket's token at 500 ms, the windows'
    // room at 1 s (the wheel's at 1.1 s: a grant counts until its slot has left).
    let waits: Vec<_> = limiters
        .iter()
        .map(|limiter| async move {
            limiter.acquire(1).await.unwrap();
            Instant::now()
        })
        .collect();
    let admitted: Vec<Duration> = futures::future::join_all(waits)
        .await
        .into_iter()
        .map(|at| at.duration_since(start))
        .collect();
    assert_eq!(admitted, [ms(500), secs(1), secs(1), ms(1_100)]);
    // A limiter of one's own, boxed beside them.
    let mine: Box<dyn DynLimiter> = Box::new(Unlimited);
    mine.acquire(1_000).await.unwrap();
    assert_eq!(mine.available(), u64::MAX);
}

#[tokio::test(start_paused = true)]
async fn an_arc_shared_across_tasks_serves_them_first_in_first_out() {
    let limiter: Arc<dyn DynLimiter> = Arc::new(TokenBucket::new(Rate::per_second(1), 1).unwrap());
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..3 {
        tasks.push(spawn_acquire(&limiter, 1));
        // Each stands in line before the next is spawned.
        tokio::task::yield_now().await;
    }
    for (index, task) in tasks.into_iter().enumerate() {
        let (result, at) = task.await.unwrap();
        result.unwrap();
        assert_eq!(at.duration_since(start), secs(index as u64));
    }
    assert_eq!(limiter.available(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_boxed_acquire_gives_up_its_place() {
    let limiter = from_config("bucket");
    let start = Instant::now();
    limiter.try_acquire(2).unwrap();
    {
        let mut dropped = pin!(limiter.acquire(2));
        assert!(futures::poll!(dropped.as_mut()).is_pending());
    }
    // The one behind it is first now: its token is there at 500 ms, not after the
    // dropped one's second.
    limiter.acquire(1).await.unwrap();
    assert_eq!(start.elapsed(), ms(500));
}

#[tokio::test(start_paused = true)]
async fn try_acquire_refuses_with_the_limiters_own_retry_after() {
    for (kind, retry_after) in [
        ("bucket", ms(500)),
        ("fixed", ms(700)),
        // Counted for 1 s after they were granted; on the wheel, until their slot leaves.
        ("log", secs(1)),
        ("wheel", ms(1_100)),
    ] {
        let limiter = from_config(kind);
        advance(ms(300)).await;
        assert!(!limiter.is_limited());
        assert_eq!(limiter.try_acquire(2), Ok(()));
        assert!(limiter.is_limited(), "{kind}");
        assert_eq!(
            limiter.try_acquire(1),
            Err(TryAcquireError::Limited { retry_after }),
            "{kind}"
        );
        // A refund reaches the limiter inside.
        limiter.refund(1);
        assert_eq!(limiter.available(), 1, "{kind}");
        assert_eq!(limiter.try_acquire(1), Ok(()), "{kind}");
    }
}

#[tokio::test(start_paused = true)]
async fn bad_input_is_refused_with_exceeds_limit_naming_the_values() {
    let exceeds = |requested| TryAcquireError::ExceedsLimit {
        requested,
        limit: 2,
    };
    for kind in ["bucket", "fixed", "log", "wheel"] {
        let limiter = from_config(kind);
        let start = Instant::now();
        assert_eq!(limiter.try_acquire(3), Err(exceeds(3)), "{kind}");
        assert_eq!(
            limiter.acquire(5).await,
            Err(AcquireError::ExceedsLimit {
                requested: 5,
                limit: 2
            }),
            "{kind}"
        );
        // At once, counting nothing.
        assert_eq!(start.elapsed(), Duration::ZERO);
        assert_eq!(limiter.available(), 2, "{kind}");
    }
    let shared: Arc<dyn DynLimiter> = Arc::from(from_config("bucket"));
    assert_eq!(shared.try_acquire(3), Err(exceeds(3)));
}

#[tokio::test(start_paused = true)]
async fn policy_quota_and_decision_are_the_limiters_own() {
    let bucket = TokenBucket::new(Rate::per_second(10), 10).unwrap();
    let boxed: Box<dyn DynLimiter> = Box::new(bucket.clone());
    let window = Policy {
        limit: 10,
        window: secs(1),
    };
    assert_eq!(boxed.policy(), Some(window));
    assert_eq!(
        boxed.try_acquire_decision(4),
        Decision {
            result: Ok(()),
            quota: Some(Quota {
                remaining: 6,
                full_after: ms(400)
            }),
        }
    );
    assert_eq!(bucket.available(), 6, "taken from the bucket inside");
    advance(ms(100)).await;
    let quota = Some(Quota {
        remaining: 7,
        full_after: ms(300),
    });
    assert_eq!(boxed.quota(), quota);
    assert_eq!(boxed.quota(), bucket.quota());
    // An `Arc` answers the same, and a limiter of one's own reports what it reports.
    let shared: Arc<dyn DynLimiter> = Arc::new(bucket);
    assert_eq!(shared.quota(), quota);
    assert_eq!(shared.policy(), Some(window));
    let mine: Arc<dyn DynLimiter> = Arc::new(Unlimited);
    assert_eq!((mine.policy(), mine.quota()), (None, None));
    assert_eq!(mine.try_acquire_decision(1).result, Ok(()));
}

#[tokio::test(start_paused = true)]
async fn the_arc_waits_behind_the_limiters_other_handles() {
    let bucket = TokenBucket::new(Rate::per_second(10), 1).unwrap();
    let shared: Arc<dyn DynLimiter> = Arc::new(bucket.clone());
    bucket.try_take(1).unwrap();
    let start = Instant::now();
    let first = spawn_acquire(&bucket, 1);
    yield_until(|| bucket.stats().queued == 1).await;
    let second = spawn_acquire(&shared, 1);
    let (result, at) = first.await.unwrap();
    result.unwrap();
    assert_eq!(at.duration_since(start), ms(100));
    let (result, at) = second.await.unwrap();
    result.unwrap();
    assert_eq!(at.duration_since(start), ms(200));
}
