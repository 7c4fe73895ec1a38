//! Point 4: `take_timeout` and `wait_timeout` give up at their deadline (or at once when
//! the tokens could not come in time), and their abandoned place neither blocks those
//! behind nor swallows tokens.

mod common;

use std::time::Duration;

use common::{assert_now, empty_bucket, ms, secs, yield_until};
use token_bucket::{Rate, TakeError, TokenBucket, TryTakeError};
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn a_request_that_cannot_come_in_time_fails_at_once() {
    // 5 tokens at 1 per second cannot accrue within 2 s even if nobody were ahead.
    let bucket = empty_bucket(Rate::per_second(1), 5);
    let start = Instant::now();
    assert_eq!(
        bucket.take_timeout(5, secs(2)).await,
        Err(TakeError::Timeout)
    );
    assert_eq!(
        bucket.wait_timeout(5, secs(2)).await,
        Err(TakeError::Timeout)
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(bucket.stats().timed_out, 2);
    assert_eq!(bucket.queued(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_waiter_leaves_at_its_deadline_and_those_behind_move_up() {
    // A: take(3), due at 3 s. B: take_timeout(2, 4 s) would be due at 5 s, so it leaves at
    // 4 s. C: take(1) behind B is served the instant B leaves (a token accrued since 3 s).
    let bucket = empty_bucket(Rate::per_second(1), 5);
    let start = Instant::now();
    let a = tokio::spawn(bucket.take(3));
    tokio::task::yield_now().await;
    let b = tokio::spawn(bucket.take_timeout(2, secs(4)));
    tokio::task::yield_now().await;
    let c = tokio::spawn(bucket.take(1));
    tokio::task::yield_now().await;
    assert_eq!(bucket.queued(), 3);

    assert_eq!(a.await.unwrap(), Ok(()));
    assert_now(start, secs(3));
    assert_eq!(b.await.unwrap(), Err(TakeError::Timeout));
    assert_now(start, secs(4));
    assert_eq!(c.await.unwrap(), Ok(()));
    assert_now(start, secs(4));
    // Nothing was swallowed: the next token is due at 5 s.
    bucket.take(1).await.unwrap();
    assert_now(start, secs(5));
    assert_eq!(bucket.stats().timed_out, 1);
}

#[tokio::test(start_paused = true)]
async fn a_request_served_before_its_deadline_succeeds() {
    let bucket = empty_bucket(Rate::per_second(1), 5);
    let start = Instant::now();
    assert_eq!(bucket.take_timeout(2, secs(2)).await, Ok(()));
    assert_now(start, secs(2));
    assert_eq!(bucket.wait_timeout(1, ms(1500)).await, Ok(()));
    assert_now(start, secs(3));
    assert_eq!(bucket.available(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_timeout_behind_a_long_queue_returns_at_its_deadline() {
    let bucket = empty_bucket(Rate::per_second(1), 10);
    let start = Instant::now();
    let head = tokio::spawn(bucket.take(10));
    tokio::task::yield_now().await;
    assert_eq!(
        bucket.wait_timeout(1, ms(2500)).await,
        Err(TakeError::Timeout)
    );
    assert_now(start, ms(2500));
    head.await.unwrap().unwrap();
    assert_now(start, secs(10));
}

#[tokio::test(start_paused = true)]
async fn duration_max_means_no_timeout() {
    let bucket = empty_bucket(Rate::per_second(1), 1);
    let start = Instant::now();
    assert_eq!(bucket.take_timeout(1, Duration::MAX).await, Ok(()));
    assert_eq!(bucket.wait_timeout(1, Duration::MAX).await, Ok(()));
    assert_now(start, secs(2));
}

#[tokio::test(start_paused = true)]
async fn a_zero_timeout_succeeds_only_when_the_tokens_are_there() {
    let bucket = TokenBucket::new(Rate::per_second(1), 1).unwrap();
    assert_eq!(bucket.take_timeout(1, Duration::ZERO).await, Ok(()));
    assert_eq!(
        bucket.take_timeout(1, Duration::ZERO).await,
        Err(TakeError::Timeout)
    );
}

#[tokio::test(start_paused = true)]
async fn ten_thousand_abandoned_waiters_neither_block_nor_swallow() {
    let bucket = empty_bucket(Rate::per_second(1), 10);
    let start = Instant::now();
    let head = tokio::spawn(bucket.take(2));
    tokio::task::yield_now().await;
    let mut abandoned = Vec::new();
    for _ in 0..10_000 {
        abandoned.push(tokio::spawn(bucket.take_timeout(1, ms(1500))));
    }
    yield_until(|| bucket.queued() == 10_001).await;
    for waiter in abandoned {
        assert_eq!(waiter.await.unwrap(), Err(TakeError::Timeout));
    }
    assert_now(start, ms(1500));
    assert_eq!(bucket.queued(), 1);
    head.await.unwrap().unwrap();
    assert_now(start, secs(2));
    bucket.take(1).await.unwrap();
    assert_now(start, secs(3));
    assert_eq!(bucket.stats().timed_out, 10_000);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_behind_the_head_stops_counting_at_its_deadline_not_a_tick_later() {
    // One token a millisecond. The head waits 10 ms for its 10 tokens. Behind it, a
    // take_timeout(1) with a deadline at 1.5 ms (its token alone could come by then, so
    // it queues): its own timer runs at the next 1 ms tick (2 ms), but from 1.5 ms on the
    // bucket no longer counts it, in `queued()` or in a `try_take`'s `retry_after`.
    let bucket = empty_bucket(Rate::per_second(1_000), 10);
    let start = Instant::now();
    let head = tokio::spawn(bucket.take(10));
    tokio::task::yield_now().await;
    let behind = tokio::spawn(bucket.take_timeout(1, Duration::from_micros(1_500)));
    tokio::task::yield_now().await;
    assert_eq!(bucket.queued(), 2);

    let just_before = Duration::from_nanos(1_499_999);
    tokio::time::advance(just_before).await;
    assert_eq!(bucket.queued(), 2, "a nanosecond before its deadline");
    let Err(TryTakeError::Insufficient { retry_after }) = bucket.try_take(1) else {
        panic!("the head waits");
    };
    // 10 for the head, 1 for the one behind, then 1: 12 tokens, all there at 12 ms.
    assert_eq!(retry_after, ms(12) - just_before);

    tokio::time::advance(Duration::from_nanos(1)).await;
    assert_eq!(start.elapsed(), Duration::from_micros(1_500));
    assert_eq!(bucket.queued(), 1, "at its deadline");
    let Err(TryTakeError::Insufficient { retry_after }) = bucket.try_take(1) else {
        panic!("the head waits");
    };
    assert_eq!(retry_after, ms(11) - Duration::from_micros(1_500));
    assert_eq!(bucket.stats().timed_out, 1);

    assert_eq!(behind.await.unwrap(), Err(TakeError::Timeout));
    assert_eq!(head.await.unwrap(), Ok(()));
    assert_now(start, ms(10));
    assert_eq!(bucket.stats().timed_out, 1, "counted once");
}
