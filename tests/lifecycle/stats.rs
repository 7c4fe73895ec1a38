//! The stats counters: grants, denials, queued waiters and their tokens, timeouts,
//! refunds, and a grant handed back by a dropped future.

use super::*;

#[tokio::test(start_paused = true)]
async fn stats_count_try_take_grants_and_denials() {
    let bucket = bucket_with(Rate::per_second(1), 5, 5);
    let stats = bucket.stats();
    assert_eq!(
        (stats.available, stats.capacity, stats.rate),
        (5, 5, Rate::per_second(1))
    );
    assert_eq!(
        (stats.taken, stats.denied, stats.refunded, stats.timed_out),
        (0, 0, 0, 0)
    );
    bucket.try_take(2).unwrap();
    bucket.try_take(3).unwrap();
    bucket.try_take(0).unwrap();
    assert!(bucket.try_take(1).is_err()); // insufficient
    assert!(bucket.try_take(6).is_err()); // exceeds capacity
    let stats = bucket.stats();
    assert_eq!((stats.available, stats.taken, stats.denied), (0, 5, 2));
    bucket.close();
    assert!(bucket.try_take(1).is_err()); // closed
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.denied, stats.closed), (5, 3, true));
}

#[tokio::test(start_paused = true)]
async fn stats_count_queued_waiters_and_their_tokens() {
    let bucket = bucket_with(Rate::per_second(1), 10, 0);
    let mut take = task::spawn(bucket.take(3));
    let mut wait = task::spawn(bucket.wait(4));
    let mut timed = task::spawn(bucket.take_timeout(2, secs(60)));
    assert_pending!(take.poll());
    assert_pending!(wait.poll());
    assert_pending!(timed.poll());
    let stats = bucket.stats();
    assert_eq!((stats.queued, stats.queued_tokens, stats.taken), (3, 9, 0));
    assert_eq!(bucket.queued(), 3);

    drop(wait); // a cancelled waiter no longer counts
    let stats = bucket.stats();
    assert_eq!((stats.queued, stats.queued_tokens), (2, 5));

    // `stats` replays the schedule, whether or not the refill task ran yet.
    tokio::time::advance(secs(3)).await;
    let stats = bucket.stats();
    assert_eq!((stats.queued, stats.queued_tokens, stats.taken), (1, 2, 3));
    assert_ready_eq!(take.poll(), Ok(()));

    tokio::time::advance(secs(2)).await;
    let stats = bucket.stats();
    assert_eq!((stats.queued, stats.queued_tokens, stats.taken), (0, 0, 5));
    assert_ready_eq!(timed.poll(), Ok(()));

    // A wait takes nothing.
    let mut wait = task::spawn(bucket.wait(2));
    assert_pending!(wait.poll());
    tokio::time::advance(secs(2)).await;
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.available, stats.timed_out), (5, 2, 0));
    assert_ready_eq!(wait.poll(), Ok(()));
}

#[tokio::test(start_paused = true)]
async fn stats_count_timeouts_at_admission_and_in_the_queue() {
    let bucket = bucket_with(Rate::per_second(1), 10, 0);
    let start = Instant::now();
    // 5 tokens cannot accrue within 2 s: refused at once.
    assert_ready_eq!(
        task::spawn(bucket.take_timeout(5, secs(2))).poll(),
        Err(TakeError::Timeout)
    );
    assert_eq!(bucket.stats().timed_out, 1);

    let head = spawn_queued(&bucket, bucket.take(3)).await;
    // Behind the head, 1 token would take until 4 s: it gives up at 2 s.
    let behind = spawn_queued(&bucket, bucket.take_timeout(1, secs(2))).await;
    let behind_wait = spawn_queued(&bucket, bucket.wait_timeout(1, ms(2_500))).await;
    assert_eq!(bucket.stats().timed_out, 1);

    let (result, at) = behind.await.unwrap();
    assert_eq!(result, Err(TakeError::Timeout));
    assert_at(start, at, secs(2));
    let (result, at) = behind_wait.await.unwrap();
    assert_eq!(result, Err(TakeError::Timeout));
    assert_at(start, at, ms(2_500));
    let stats = bucket.stats();
    assert_eq!(
        (stats.timed_out, stats.queued, stats.queued_tokens),
        (3, 1, 3)
    );

    let (result, at) = head.await.unwrap();
    assert_eq!(result, Ok(()));
    assert_at(start, at, secs(3));
    let stats = bucket.stats();
    assert_eq!((stats.timed_out, stats.taken, stats.denied), (3, 3, 0));
}

#[tokio::test(start_paused = true)]
async fn stats_taken_excludes_a_grant_handed_back_by_a_dropped_future() {
    let bucket = bucket_with(Rate::per_second(1), 5, 0);
    let mut waiter = task::spawn(bucket.take(2));
    assert_pending!(waiter.poll());
    tokio::time::advance(secs(2)).await;
    // The tokens were granted on schedule, but the future never saw them.
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.available, stats.queued), (2, 0, 0));
    drop(waiter);
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.available, stats.refunded), (0, 2, 0));
}

#[tokio::test(start_paused = true)]
async fn stats_count_refunds_and_queue_full_is_not_a_denial() {
    let bucket = TokenBucket::builder()
        .rate(Rate::per_hour(1))
        .capacity(10)
        .queue_limit(0)
        .build()
        .unwrap();
    bucket.try_take(10).unwrap();
    bucket.refund(2);
    bucket.refund(1);
    let stats = bucket.stats();
    assert_eq!((stats.refunded, stats.available, stats.taken), (3, 3, 10));
    assert!(matches!(
        task::spawn(bucket.take(5)).poll(),
        std::task::Poll::Ready(Err(TakeError::QueueFull { .. }))
    ));
    let stats = bucket.stats();
    assert_eq!((stats.denied, stats.timed_out), (0, 0));
}
