//! A bucket with several limits (issue 14, part 1): "10 a second and 1,000 an hour".
//!
//! Every test runs on tokio's paused clock. A waiter sees its grant at tokio's next 1 ms
//! tick; where a test checks an instant to the nanosecond it reads it from a `try_take`'s
//! `retry_after`, which the bucket computes from its exact state.

use std::time::Duration;

mod common;

use common::{assert_now, ms, ns, secs, yield_until};
use futures::{stream, StreamExt};
use token_bucket::{Keyed, Rate, TakeError, TokenBucket, TryAcquireError, TryTakeError};
use tokio::time::Instant;

/// "10/s burst 10 and 15 per 2 s": 10 a second in bursts of 10, and 15 every 2 s in
/// bursts of 15.
fn ten_a_second_and_fifteen_per_two_seconds() -> TokenBucket {
    TokenBucket::builder()
        .rate(Rate::per_second(10))
        .capacity(10)
        .limit(Rate::new(15, secs(2)), 15)
        .build()
        .unwrap()
}

fn retry_after(result: Result<(), TryTakeError>) -> Duration {
    match result {
        Err(TryTakeError::Insufficient { retry_after }) => retry_after,
        other => panic!("expected Insufficient, got {other:?}"),
    }
}

/// The instant, after the start, of the `index`-th grant of a loop of `take(1)` on
/// [`ten_a_second_and_fifteen_per_two_seconds`]:
/// - 10 at once, the first limit's burst (the second keeps 5);
/// - then one every 100 ms, the first limit's pace: the second gains 0.75 between two and
///   loses 1, so its 5 last 20 more, to 2 s, when both are empty (30 taken: the second's
///   15 and 15 accrued);
/// - then the second limit's pace, 7.5 a second: the `n`-th after 2 s at
///   `⌈n × 2 s / 15⌉`. The first, gaining 10 a second, fills meanwhile and is held at 10.
fn due(index: u64) -> Duration {
    match index {
        0..=9 => Duration::ZERO,
        10..=29 => ms(100 * (index - 9)),
        _ => secs(2) + ns(((index - 29) * 2_000_000_000).div_ceil(15)),
    }
}

#[tokio::test(start_paused = true)]
async fn a_loop_of_take_1_is_granted_at_the_instants_of_whichever_limit_binds() {
    let bucket = ten_a_second_and_fifteen_per_two_seconds();
    let start = Instant::now();
    for index in 0..80 {
        let now = start.elapsed();
        if due(index) > now {
            // Exact to the nanosecond, and the latest over the two limits.
            assert_eq!(
                retry_after(bucket.try_take(1)),
                due(index) - now,
                "grant {index}"
            );
        }
        bucket.take(1).await.unwrap();
        assert_now(start, due(index));
        match index {
            29 => {
                let limits = bucket.limit_stats();
                assert_eq!((limits[0].available, limits[1].available), (0, 0));
            }
            79 => {
                // The first limit filled at about 5.6 s and is held at its capacity, less
                // what this grant took.
                let limits = bucket.limit_stats();
                assert_eq!((limits[0].available, limits[0].capacity), (9, 10));
                assert_eq!((limits[1].available, limits[1].capacity), (0, 15));
            }
            _ => {}
        }
    }
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.available, stats.capacity), (80, 0, 10));
    assert_eq!(stats.rate, Rate::per_second(10));
}

/// While the head waits for the slow limit the fast one fills: it must stop at its
/// capacity, or once the slow one lets go it would pass far more than 10 at once.
#[tokio::test(start_paused = true)]
async fn a_limit_that_fills_while_another_holds_the_queue_back_stays_at_its_capacity() {
    // 10 a second in bursts of 10, beside 1 a second in bursts of 1.
    let bucket = TokenBucket::builder()
        .rate(Rate::per_second(10))
        .capacity(10)
        .limit(Rate::per_second(1), 1)
        .build()
        .unwrap();
    let start = Instant::now();
    bucket.take(1).await.unwrap();
    let waiter = tokio::spawn({
        let bucket = bucket.clone();
        async move {
            bucket.take(1).await.unwrap();
            Instant::now()
        }
    });
    yield_until(|| bucket.queued() == 1).await;
    tokio::time::sleep(ms(500)).await;
    let limits = bucket.limit_stats();
    assert_eq!((limits[0].available, limits[1].available), (10, 0));
    assert_eq!(bucket.available(), 0);

    // The second limit, half a token in, now gains 1,000 a second: the waiter due at 1 s
    // is rescheduled to half a millisecond from now.
    bucket.set_limit_rate(1, Rate::per_second(1_000)).unwrap();
    assert_eq!(
        bucket.limit_stats()[1].rate,
        Rate::per_second(1_000),
        "the rate changed"
    );
    let granted_at = waiter.await.unwrap();
    common::assert_at(start, granted_at, ms(500) + ns(500_000));

    // The first limit held 10, not the 14 it would have accrued uncapped: 9 more come one
    // a millisecond (the second limit's pace), then one every 100 ms (the first's).
    let mut granted = Vec::new();
    for _ in 0..11 {
        bucket.take(1).await.unwrap();
        granted.push(start.elapsed());
    }
    for (k, at) in granted.iter().take(9).enumerate() {
        let due = ms(500) + ns(500_000) + ms(k as u64 + 1);
        assert!(*at >= due && *at <= due + ms(1), "grant {k} at {at:?}");
    }
    // 0.09 of a token was left after the 9th: 0.91 more at 10 a second.
    let tenth = ms(509) + ns(500_000) + ms(91);
    assert!(
        granted[9] >= tenth && granted[9] <= tenth + ms(1),
        "{granted:?}"
    );
    assert!(granted[10] >= tenth + ms(100), "{granted:?}");
}

/// The latest accrual over the limits would say 3 s: the first limit, full while the head
/// waited for the second, dropped what it gained, and has to make it up.
#[tokio::test(start_paused = true)]
async fn retry_after_counts_what_a_full_limit_drops_while_the_head_waits() {
    let bucket = TokenBucket::builder()
        .rate(Rate::per_second(1))
        .capacity(1)
        // So slow that it stays empty while the first fills.
        .limit(Rate::new(1, Duration::from_nanos(u64::MAX)), 10)
        .initial(0)
        .build()
        .unwrap();
    tokio::time::sleep(secs(1)).await;
    bucket.set_limit_rate(1, Rate::per_second(2)).unwrap();
    let limits = bucket.limit_stats();
    assert_eq!((limits[0].available, limits[1].available), (1, 0));
    let start = Instant::now();
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let bucket = bucket.clone();
            tokio::spawn(async move {
                bucket.take(1).await.unwrap();
                start.elapsed()
            })
        })
        .collect();
    yield_until(|| bucket.queued() == 3).await;
    assert_eq!(retry_after(bucket.try_take(1)), ms(3_500));
    // The second limit's half second, then the first limit's pace.
    for (waiter, due) in waiters.into_iter().zip([ms(500), ms(1_500), ms(2_500)]) {
        let granted = waiter.await.unwrap();
        assert!(
            granted >= due && granted <= due + ms(1),
            "{granted:?}, due {due:?}"
        );
    }
    assert_eq!(retry_after(bucket.try_take(1)), ms(3_500) - start.elapsed());
}

#[tokio::test(start_paused = true)]
async fn a_request_above_the_smallest_capacity_is_refused_naming_it() {
    // The second limit's capacity, 3, is the smaller.
    let bucket = TokenBucket::builder()
        .rate(Rate::per_second(10))
        .capacity(10)
        .limit(Rate::per_minute(60), 3)
        .build()
        .unwrap();
    assert_eq!(bucket.capacity(), 3);
    assert_eq!(bucket.stats().capacity, 3);
    assert_eq!(
        bucket.try_take(4),
        Err(TryTakeError::ExceedsCapacity {
            requested: 4,
            capacity: 3
        })
    );
    assert_eq!(
        bucket.take(4).await,
        Err(TakeError::ExceedsCapacity {
            requested: 4,
            capacity: 3
        })
    );
    // A waiter for 3 is refused once the second limit's capacity drops below it, naming
    // the new smallest; the one for 2 behind it is served.
    bucket.take(3).await.unwrap();
    let three = tokio::spawn({
        let bucket = bucket.clone();
        async move { bucket.take(3).await }
    });
    yield_until(|| bucket.queued() == 1).await;
    let two = tokio::spawn({
        let bucket = bucket.clone();
        async move { bucket.take(2).await }
    });
    yield_until(|| bucket.queued() == 2).await;
    bucket.set_limit_capacity(1, 2).unwrap();
    assert_eq!(bucket.capacity(), 2);
    assert_eq!(
        three.await.unwrap(),
        Err(TakeError::ExceedsCapacity {
            requested: 3,
            capacity: 2
        })
    );
    let start = Instant::now();
    assert_eq!(two.await.unwrap(), Ok(()));
    assert_now(start, secs(2));
    // Raising the first limit's capacity leaves the smallest at 2.
    bucket.set_capacity(50).unwrap();
    assert_eq!(bucket.capacity(), 2);
    assert_eq!(bucket.limit_stats()[0].capacity, 50);
}

#[test]
fn limit_stats_report_each_limit_in_order_and_stats_the_least() {
    let bucket = TokenBucket::builder()
        .rate(Rate::per_second(10))
        .capacity(20)
        .limit(Rate::per_minute(100), 8)
        .limit(Rate::per_hour(1_000), 50)
        .build()
        .unwrap();
    bucket.try_take(5).unwrap();
    let limits = bucket.limit_stats();
    let seen: Vec<_> = limits
        .iter()
        .map(|limit| (limit.rate, limit.capacity, limit.available))
        .collect();
    assert_eq!(
        seen,
        [
            (Rate::per_second(10), 20, 15),
            (Rate::per_minute(100), 8, 3),
            (Rate::per_hour(1_000), 50, 45),
        ]
    );
    let stats = bucket.stats();
    assert_eq!(
        (stats.available, stats.capacity, stats.rate, stats.taken),
        (3, 8, Rate::per_second(10), 5)
    );
    assert_eq!(bucket.available(), 3);
    assert_eq!(bucket.rate(), Rate::per_second(10));
    // One limit: one element, from the lock-free path.
    let single = TokenBucket::new(Rate::per_second(3), 7).unwrap();
    let limits = single.limit_stats();
    assert_eq!(limits.len(), 1);
    assert_eq!(
        (limits[0].rate, limits[0].capacity, limits[0].available),
        (Rate::per_second(3), 7, 7)
    );
}

#[test]
fn initial_applies_to_every_limit_and_by_default_each_starts_full() {
    let full = TokenBucket::builder()
        .rate(Rate::per_second(1))
        .capacity(4)
        .limit(Rate::per_hour(1), 9)
        .build()
        .unwrap();
    let limits = full.limit_stats();
    assert_eq!((limits[0].available, limits[1].available), (4, 9));
    let three = TokenBucket::builder()
        .rate(Rate::per_second(1))
        .capacity(4)
        .limit(Rate::per_hour(1), 9)
        .initial(3)
        .build()
        .unwrap();
    let limits = three.limit_stats();
    assert_eq!((limits[0].available, limits[1].available), (3, 3));
}

/// Per key, each key's bucket has every limit of the template; a key is forgotten only
/// once every limit is full again, not when the least is at the smallest capacity.
#[tokio::test(start_paused = true)]
async fn keyed_buckets_keep_every_limit_and_are_forgotten_only_when_all_are_full() {
    // 10 a second in bursts of 10, and 30 a minute in bursts of 20.
    let template = TokenBucket::builder()
        .rate(Rate::per_second(10))
        .capacity(10)
        .limit(Rate::per_minute(30), 20)
        .build()
        .unwrap();
    let per_key: Keyed<String, TokenBucket> = Keyed::new(template);
    per_key.try_acquire("alice", 10).unwrap();
    tokio::time::advance(secs(1)).await;
    per_key.try_acquire("alice", 10).unwrap();
    // The first limit has a token again in 100 ms; the second, half a token in, in 1 s.
    assert_eq!(
        per_key.try_acquire("alice", 1),
        Err(TryAcquireError::Limited {
            retry_after: secs(1)
        })
    );
    assert_eq!(
        per_key.try_acquire("bob", 11),
        Err(TryAcquireError::ExceedsLimit {
            requested: 11,
            limit: 10
        })
    );
    per_key.try_acquire("bob", 10).unwrap();
    assert_eq!(per_key.get("bob").unwrap().limit_stats().len(), 2);

    // A second on, bob's first limit is full, and holds the smallest capacity: but his
    // second holds 10.5 of 20, and a fresh bucket would hold 20.
    tokio::time::advance(secs(1)).await;
    let bob = per_key.get("bob").unwrap();
    assert_eq!((bob.available(), bob.capacity()), (10, 10));
    drop(bob);
    assert_eq!(per_key.retain_recent(), 0);
    // 9.5 more at half a token a second: bob's is full; alice's holds 10.5.
    tokio::time::advance(secs(19)).await;
    assert_eq!(per_key.retain_recent(), 1);
    assert!(per_key.get("bob").is_none());
    tokio::time::advance(secs(19)).await;
    assert_eq!(per_key.retain_recent(), 1);
    assert!(per_key.is_empty());
}

/// A throttled stream whose items cost more than the smallest capacity pays for each in
/// installments of it.
#[tokio::test(start_paused = true)]
async fn a_throttled_stream_pays_in_installments_of_the_smallest_capacity() {
    // 10 a second in bursts of 10, and 5 a second in bursts of 3.
    let bucket = TokenBucket::builder()
        .rate(Rate::per_second(10))
        .capacity(10)
        .limit(Rate::per_second(5), 3)
        .build()
        .unwrap();
    let start = Instant::now();
    let items: Vec<u64> = bucket
        .throttle_by(stream::iter([5u64, 5, 5, 5]), |&cost| cost)
        .collect()
        .await;
    assert_eq!(items, [5, 5, 5, 5]);
    // 20 tokens from the second limit: its 3 at once, 17 at 5 a second.
    assert_now(start, ms(3_400));
    assert_eq!(bucket.stats().taken, 20);
}
