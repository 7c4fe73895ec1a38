//! Point 5: `wait(n)` completes when n tokens are there, in FIFO order, taking none.

mod common;

use common::{assert_now, empty_bucket, ms, secs};
use token_bucket::{Rate, TokenBucket};
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn wait_completes_when_the_tokens_are_there_and_takes_none() {
    let bucket = empty_bucket(Rate::per_second(1), 5);
    let start = Instant::now();
    bucket.wait(3).await.unwrap();
    assert_now(start, secs(3));
    assert_eq!(bucket.available(), 3);
    assert_eq!(bucket.stats().taken, 0);
}

#[tokio::test(start_paused = true)]
async fn wait_is_served_in_order_behind_a_take() {
    let bucket = empty_bucket(Rate::per_second(1), 5);
    let start = Instant::now();
    let take = tokio::spawn(bucket.take(2));
    tokio::task::yield_now().await;
    bucket.wait(2).await.unwrap();
    // The take got the first 2 tokens at 2 s; 2 more were there at 4 s.
    assert_now(start, secs(4));
    assert_eq!(take.await.unwrap(), Ok(()));
    assert_eq!(bucket.available(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_take_behind_a_wait_is_served_the_same_instant() {
    let bucket = empty_bucket(Rate::new(1, ms(100)), 5);
    let start = Instant::now();
    let wait = tokio::spawn(bucket.wait(3));
    tokio::task::yield_now().await;
    bucket.take(1).await.unwrap();
    assert_now(start, ms(300));
    wait.await.unwrap().unwrap();
    assert_eq!(bucket.available(), 2);
}

#[tokio::test(start_paused = true)]
async fn wait_with_tokens_there_and_nobody_queued_is_immediate() {
    let bucket = TokenBucket::new(Rate::per_second(1), 5).unwrap();
    let mut wait = tokio_test::task::spawn(bucket.wait(5));
    tokio_test::assert_ready_ok!(wait.poll());
    assert_eq!(bucket.available(), 5);
}
