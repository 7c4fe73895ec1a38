//! Points 1, 3 and 7: refill is continuous and exact, grants happen at their computed
//! instants on paused time, and the queue is strictly first in, first out.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{assert_at, assert_now, empty_bucket, ms, secs};
use token_bucket::{Rate, TokenBucket};
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn an_hour_of_take_one_at_three_per_second_ends_on_time() {
    // The refill task wakes up to 1 ms late for every token (333.33 ms rounds up to
    // 334 ms); a schedule restarted from each wake-up would end 7 s late.
    let bucket = TokenBucket::new(Rate::per_second(3), 1).unwrap();
    let start = Instant::now();
    for _ in 0..(1 + 3 * 3600) {
        bucket.take(1).await.unwrap();
    }
    assert_now(start, secs(3600));
    assert_eq!(bucket.stats().taken, 1 + 3 * 3600);
}

#[tokio::test(start_paused = true)]
async fn every_grant_happens_at_its_computed_instant() {
    // 5 tokens per 250 ms is one every 50 ms; sizes vary to exercise the arithmetic.
    let bucket = empty_bucket(Rate::new(5, ms(250)), 7);
    let start = Instant::now();
    let mut due = Duration::ZERO;
    for tokens in [1, 3, 7, 2, 5, 1, 1, 6] {
        bucket.take(tokens).await.unwrap();
        due += ms(50) * tokens as u32;
        assert_now(start, due);
    }
}

#[tokio::test(start_paused = true)]
async fn fractional_rates_carry_their_remainders() {
    // 7 tokens per 3 s: token k is due at ceil(3e9 * k / 7) ns.
    let bucket = empty_bucket(Rate::new(7, secs(3)), 1);
    let start = Instant::now();
    for k in 1..=70u64 {
        bucket.take(1).await.unwrap();
        let due = Duration::from_nanos((3_000_000_000 * k).div_ceil(7));
        assert_now(start, due);
    }
}

#[tokio::test(start_paused = true)]
async fn refill_is_capped_at_capacity() {
    let bucket = empty_bucket(Rate::per_second(10), 5);
    tokio::time::sleep(secs(60)).await;
    assert_eq!(bucket.available(), 5);
    bucket.take(5).await.unwrap();
    let start = Instant::now();
    bucket.take(5).await.unwrap();
    assert_now(start, ms(500));
}

#[tokio::test(start_paused = true)]
async fn concurrent_takers_are_served_in_order_at_their_instants() {
    let bucket = empty_bucket(Rate::per_second(10), 10);
    let start = Instant::now();
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (index, tokens) in [3u64, 1, 4, 1, 5].into_iter().enumerate() {
        let bucket = bucket.clone();
        let served = Arc::clone(&served);
        tasks.push(tokio::spawn(async move {
            bucket.take(tokens).await.unwrap();
            served.lock().unwrap().push((index, Instant::now()));
        }));
        // Queue them in this order.
        tokio::task::yield_now().await;
    }
    for task in tasks {
        task.await.unwrap();
    }
    let served = served.lock().unwrap();
    let order: Vec<usize> = served.iter().map(|&(index, _)| index).collect();
    assert_eq!(order, [0, 1, 2, 3, 4]);
    // Cumulative tokens 3, 4, 8, 9, 14 at 100 ms each.
    for (&(_, at), due_tokens) in served.iter().zip([3u64, 4, 8, 9, 14]) {
        assert_at(start, at, ms(100 * due_tokens));
    }
}

#[tokio::test(start_paused = true)]
async fn a_large_request_is_never_starved_by_small_ones() {
    // One 10-token request queued before 20 tasks looping take(1) (10/s, burst 10):
    // it is served first, at 1 s.
    let bucket = TokenBucket::new(Rate::per_second(10), 10).unwrap();
    bucket.take(10).await.unwrap();
    let start = Instant::now();
    let log = Arc::new(Mutex::new(Vec::new()));
    let big = {
        let bucket = bucket.clone();
        let log = Arc::clone(&log);
        tokio::spawn(async move {
            bucket.take(10).await.unwrap();
            log.lock().unwrap().push(("big", Instant::now()));
        })
    };
    tokio::task::yield_now().await;
    let mut small = Vec::new();
    for _ in 0..20 {
        let bucket = bucket.clone();
        let log = Arc::clone(&log);
        small.push(tokio::spawn(async move {
            loop {
                bucket.take(1).await.unwrap();
                log.lock().unwrap().push(("small", Instant::now()));
            }
        }));
    }
    big.await.unwrap();
    tokio::time::sleep(ms(450)).await;
    for task in small {
        task.abort();
    }
    let log = log.lock().unwrap();
    assert_eq!(log[0].0, "big");
    assert_at(start, log[0].1, secs(1));
    // Then the small ones, one per 100 ms from 1.1 s.
    assert_eq!(log.len(), 1 + 4, "{log:?}");
    for (k, &(who, at)) in log.iter().enumerate().skip(1) {
        assert_eq!(who, "small");
        assert_at(start, at, secs(1) + ms(100 * k as u64));
    }
}

#[tokio::test(start_paused = true)]
async fn a_late_observer_still_sees_grants_on_the_schedule() {
    // Nobody polls for 10 s: the grants due at 1 s and 2 s still happened then, so the
    // tokens after them have been accruing since 2 s (capped at the capacity).
    let bucket = empty_bucket(Rate::per_second(1), 3);
    let mut first = tokio_test::task::spawn(bucket.take(1));
    let mut second = tokio_test::task::spawn(bucket.take(1));
    tokio_test::assert_pending!(first.poll());
    tokio_test::assert_pending!(second.poll());
    tokio::time::advance(secs(10)).await;
    assert_eq!(bucket.available(), 3);
    tokio_test::assert_ready_ok!(first.poll());
    tokio_test::assert_ready_ok!(second.poll());
}

/// A bucket left running for a simulated year, observed at irregular instants down to
/// the odd nanosecond, through the lock (a waiter queued now and then) and the word
/// alike, has neither gained nor lost a token: what it granted over the year is exactly
/// what its rate accrued, whatever the awkward rate.
#[tokio::test(start_paused = true)]
async fn a_simulated_year_neither_gains_nor_loses_a_token() {
    const YEAR: u128 = 365 * 24 * 3600 * 1_000_000_000;
    for rate in [
        Rate::per_second(3),
        Rate::new(7, Duration::from_nanos(999_999_937)),
        Rate::new(1_000_003, ms(17)),
    ] {
        // Room for three hours' worth, so the cap never drops what accrues between looks.
        let three_hours =
            u128::from(rate.amount()) * 3 * 3_600_000_000_000 / rate.period().as_nanos();
        let bucket = empty_bucket(rate, u64::try_from(three_hours).unwrap());
        let start = Instant::now();
        let (mut step, mut taken) = (1u64, 0u128);
        while (Instant::now() - start).as_nanos() < YEAR {
            tokio::time::advance(Duration::from_nanos(step)).await;
            step = (step * 7_919 + 12_345_678_901) % 7_200_000_000_007;
            let available = bucket.available();
            if step % 5 == 0 {
                // Now and then through the queue: one more than is held, granted at the
                // instant it accrues.
                bucket.take(available + 1).await.unwrap();
                taken += u128::from(available + 1);
            } else {
                bucket.try_take(available).unwrap();
                taken += u128::from(available);
            }
        }
        let elapsed = (Instant::now() - start).as_nanos();
        let accrued = elapsed * u128::from(rate.amount()) / rate.period().as_nanos();
        assert_eq!(taken + u128::from(bucket.available()), accrued, "{rate}");
    }
}
