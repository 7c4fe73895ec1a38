//! Point 2: `try_take` never waits, never jumps the queue, and its `retry_after` is never
//! shorter than the true wait.

mod common;

use std::time::Duration;

use common::{bucket_with, ms, secs};
use token_bucket::{Rate, TokenBucket, TryTakeError};

fn retry_after(result: Result<(), TryTakeError>) -> Duration {
    match result {
        Err(TryTakeError::Insufficient { retry_after }) => retry_after,
        other => panic!("expected Insufficient, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_exact_for_an_empty_queue() {
    let bucket = TokenBucket::new(Rate::new(3, secs(1)), 3).unwrap();
    bucket.try_take(3).unwrap();
    let wait = retry_after(bucket.try_take(2));
    assert_eq!(wait, Duration::from_nanos(666_666_667));
    tokio::time::advance(wait - Duration::from_nanos(1)).await;
    assert!(
        bucket.try_take(2).is_err(),
        "one nanosecond early must fail"
    );
    tokio::time::advance(Duration::from_nanos(1)).await;
    assert_eq!(bucket.try_take(2), Ok(()));
}

#[tokio::test(start_paused = true)]
async fn retry_after_counts_the_queue_ahead_and_is_never_short() {
    let bucket = bucket_with(Rate::per_second(10), 10, 0);
    let mut queued = tokio_test::task::spawn(bucket.take(4));
    tokio_test::assert_pending!(queued.poll());
    // 4 tokens for the waiter ahead, then 3: 700 ms.
    let wait = retry_after(bucket.try_take(3));
    assert_eq!(wait, ms(700));
    tokio::time::advance(wait - Duration::from_nanos(1)).await;
    assert!(bucket.try_take(3).is_err());
    tokio::time::advance(Duration::from_nanos(1)).await;
    assert_eq!(bucket.try_take(3), Ok(()));
    tokio_test::assert_ready_ok!(queued.poll());
}

#[tokio::test(start_paused = true)]
async fn try_take_never_jumps_the_queue() {
    let bucket = bucket_with(Rate::per_second(10), 10, 2);
    // The head wants 5: the 2 tokens there are promised to it.
    let mut head = tokio_test::task::spawn(bucket.take(5));
    tokio_test::assert_pending!(head.poll());
    assert_eq!(bucket.available(), 2);
    assert_eq!(retry_after(bucket.try_take(1)), ms(400));
    assert_eq!(bucket.stats().denied, 1);
}

#[test]
fn try_take_works_without_a_runtime() {
    let bucket = TokenBucket::new(Rate::per_second(1), 2).unwrap();
    let handle = std::thread::spawn(move || (bucket.try_take(2), bucket.try_take(1).is_err()));
    assert_eq!(handle.join().unwrap(), (Ok(()), true));
}

#[test]
fn taking_zero_tokens_succeeds_even_from_an_empty_bucket() {
    let bucket = bucket_with(Rate::per_hour(1), 1, 0);
    assert_eq!(bucket.try_take(0), Ok(()));
}
