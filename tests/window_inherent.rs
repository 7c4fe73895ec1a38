//! The window limiters' own `try_acquire`, `acquire`, `refund` and `available`, called
//! with the `Limiter` trait NOT imported: this file never brings it into scope, so each
//! call here compiles only because the limiter has the method itself. Each limiter admits
//! 3 permits per second; the tests run on tokio's paused clock and assert exact instants.

use std::time::Duration;

use futures::FutureExt;
use token_bucket::{AcquireError, FixedWindow, SlidingLog, SlidingWindow, TryAcquireError};
use tokio::time::{advance, Instant};

/// The same tests for each window limiter, made by `$make` (3 permits per second), with
/// what it answers in this story: 2 permits at 0 ms, then 1 at 400 ms, which spends it.
///
/// - `$retry_after`: the `retry_after` of 1 more permit at 400 ms;
/// - `$admitted_at`: when `acquire(2)`, called at 400 ms, goes on, since the start;
/// - `$left`: `available()` right after it;
/// - `$after_refund`: `available()` once 2 of them are refunded.
macro_rules! inherent_tests {
    (
        $name:ident,
        $make:expr,
        retry_after: $retry_after:expr,
        admitted_at: $admitted_at:expr,
        left: $left:expr,
        after_refund: $after_refund:expr $(,)?
    ) => {
        mod $name {
            use super::*;

            #[tokio::test(start_paused = true)]
            async fn try_acquire_acquire_refund_and_available_work_at_exact_instants() {
                let start = Instant::now();
                let limiter = $make;
                assert_eq!(limiter.available(), 3);
                limiter.try_acquire(2).unwrap();
                assert_eq!(limiter.available(), 1);
                advance(Duration::from_millis(400)).await;
                limiter.try_acquire(1).unwrap();
                assert_eq!(limiter.available(), 0);
                assert_eq!(
                    limiter.try_acquire(1),
                    Err(TryAcquireError::Limited {
                        retry_after: $retry_after
                    })
                );
                limiter.acquire(2).await.unwrap();
                assert_eq!(start.elapsed(), $admitted_at);
                assert_eq!(limiter.available(), $left);
                limiter.refund(2);
                assert_eq!(limiter.available(), $after_refund);
            }

            #[tokio::test(start_paused = true)]
            async fn more_than_the_limit_is_refused_at_once_naming_both_and_counts_nothing() {
                let start = Instant::now();
                let limiter = $make;
                for requested in [4, u64::MAX] {
                    let limit = 3;
                    let refused = TryAcquireError::ExceedsLimit { requested, limit };
                    assert_eq!(limiter.try_acquire(requested), Err(refused));
                    let refused = AcquireError::ExceedsLimit { requested, limit };
                    assert_eq!(limiter.acquire(requested).await, Err(refused));
                }
                assert_eq!(start.elapsed(), Duration::ZERO);
                // The trait, named in full rather than imported, says the same: its
                // methods are these.
                assert_eq!(
                    token_bucket::Limiter::try_acquire(&limiter, 4),
                    limiter.try_acquire(4)
                );
                assert_eq!(limiter.available(), 3);
                limiter.refund(5); // nothing counted: nothing to give back
                assert_eq!(limiter.available(), 3);
            }

            #[tokio::test(start_paused = true)]
            async fn zero_permits_are_admitted_at_once_past_a_full_window_and_its_line() {
                let start = Instant::now();
                let limiter = $make;
                limiter.try_acquire(2).unwrap();
                advance(Duration::from_millis(400)).await;
                limiter.try_acquire(1).unwrap();
                let waiter = tokio::spawn({
                    let limiter = limiter.clone();
                    async move { limiter.acquire(2).await.map(|()| start.elapsed()) }
                });
                tokio::task::yield_now().await;
                assert_eq!(limiter.queued_permits(), 2);
                assert_eq!(limiter.try_acquire(0), Ok(()));
                assert_eq!(limiter.acquire(0).now_or_never(), Some(Ok(())));
                assert_eq!(limiter.available(), 0);
                assert_eq!(waiter.await.unwrap(), Ok($admitted_at));
            }
        }
    };
}

// The window counted into at 400 ms ends at 1 s; the next one takes the 2 whole and
// keeps 1 free.
inherent_tests!(
    fixed_window,
    FixedWindow::new(3, Duration::from_secs(1)).unwrap(),
    retry_after: Duration::from_millis(600),
    admitted_at: Duration::from_secs(1),
    left: 1,
    after_refund: 3,
);

// The 2 permits of 0 ms count until 1 s exactly; then 400 ms's and the 2 new ones fill it.
inherent_tests!(
    sliding_log,
    SlidingLog::new(3, Duration::from_secs(1)).unwrap(),
    retry_after: Duration::from_millis(600),
    admitted_at: Duration::from_secs(1),
    left: 0,
    after_refund: 2,
);

// Ten slots of 100 ms: the 2 permits of slot 0 count until the end of slot 10, 1.1 s.
inherent_tests!(
    sliding_window,
    SlidingWindow::new(3, 10, Duration::from_millis(100)).unwrap(),
    retry_after: Duration::from_millis(700),
    admitted_at: Duration::from_millis(1_100),
    left: 0,
    after_refund: 2,
);
