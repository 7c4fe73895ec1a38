//! Point 6: dropping any of the futures at any point loses no tokens and does not block
//! the queue.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::lockstep::{self, Op};
use common::model::{Kind, ModelRate, Setup};
use common::{assert_now, bucket_with, empty_bucket, ms, ns, secs, yield_until};
use token_bucket::{Rate, Take, TokenBucket, TryTakeError};
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn dropping_a_queued_head_unblocks_those_behind_at_once() {
    let bucket = empty_bucket(Rate::per_second(1), 10);
    let start = Instant::now();
    let mut head = tokio_test::task::spawn(bucket.take(5));
    tokio_test::assert_pending!(head.poll());
    let behind = tokio::spawn(bucket.take(1));
    yield_until(|| bucket.queued() == 2).await;
    tokio::time::advance(secs(2)).await;
    drop(head);
    assert_eq!(behind.await.unwrap(), Ok(()));
    assert_now(start, secs(2));
    // The dropped head took nothing: of the 2 tokens accrued, 1 is left.
    assert_eq!(bucket.available(), 1);
    assert_eq!(bucket.queued(), 0);
}

#[tokio::test(start_paused = true)]
async fn dropping_a_wait_head_unblocks_those_behind() {
    let bucket = empty_bucket(Rate::per_second(1), 10);
    let start = Instant::now();
    let mut head = tokio_test::task::spawn(bucket.wait(9));
    tokio_test::assert_pending!(head.poll());
    let behind = tokio::spawn(bucket.take(3));
    yield_until(|| bucket.queued() == 2).await;
    tokio::time::sleep(secs(1)).await;
    drop(head);
    behind.await.unwrap().unwrap();
    assert_now(start, secs(3));
}

#[tokio::test(start_paused = true)]
async fn a_grant_never_read_goes_back_to_the_bucket() {
    let bucket = empty_bucket(Rate::per_second(1), 3);
    let mut take = tokio_test::task::spawn(bucket.take(2));
    tokio_test::assert_pending!(take.poll());
    // The grant is due at 2 s; whoever observes the bucket then serves it, and the
    // future is woken but never polled again.
    tokio::time::sleep(secs(2)).await;
    assert_eq!(bucket.available(), 0);
    assert!(take.is_woken());
    assert_eq!(bucket.stats().taken, 2);
    drop(take);
    assert_eq!(bucket.available(), 2);
    assert_eq!(bucket.stats().taken, 0);
}

#[tokio::test(start_paused = true)]
async fn a_future_dropped_before_its_first_poll_changes_nothing() {
    let bucket = TokenBucket::new(Rate::per_second(1), 3).unwrap();
    drop(bucket.take(3));
    drop(bucket.take_timeout(3, secs(1)));
    drop(bucket.wait_timeout(3, secs(1)));
    assert_eq!(bucket.available(), 3);
    assert_eq!(bucket.queued(), 0);
}

#[tokio::test(start_paused = true)]
async fn cancelling_inside_select_loses_nothing() {
    let bucket = empty_bucket(Rate::per_second(10), 10);
    let start = Instant::now();
    tokio::select! {
        _ = bucket.take(10) => panic!("10 tokens take 1 s"),
        _ = tokio::time::sleep(ms(300)) => {}
    }
    assert_eq!(bucket.available(), 3);
    bucket.take(10).await.unwrap();
    assert_now(start, secs(1));
}

/// Under saturating demand, with waiters cancelled at random instants, every token that
/// accrued is either taken or still in the bucket: none is lost to a race or an abandoned
/// place, and none is invented.
#[tokio::test(start_paused = true)]
async fn random_cancellations_conserve_every_token() {
    const RATE: u64 = 1_000;
    const SECONDS: u64 = 10;
    let bucket = empty_bucket(Rate::per_second(RATE), 10);
    let taken_by_tasks = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for seed in 1..=50u64 {
        let bucket = bucket.clone();
        let taken_by_tasks = Arc::clone(&taken_by_tasks);
        tasks.push(tokio::spawn(async move {
            let mut random = seed * 0x9E37_79B9_7F4A_7C15;
            loop {
                random ^= random << 13;
                random ^= random >> 7;
                random ^= random << 17;
                let tokens = 1 + random % 4;
                let patience = Duration::from_micros(random % 40_000);
                let attempt = async {
                    match random % 3 {
                        0 => bucket.take(tokens).await,
                        1 => bucket.take_timeout(tokens, patience).await,
                        _ => bucket
                            .wait(tokens)
                            .await
                            .map(|()| bucket.try_take(0).unwrap()),
                    }
                };
                if let Ok(Ok(())) = tokio::time::timeout(patience, attempt).await {
                    if random % 3 != 2 {
                        taken_by_tasks.fetch_add(tokens, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    tokio::time::sleep(secs(SECONDS)).await;
    let stats = bucket.stats();
    assert_eq!(stats.taken + stats.available, RATE * SECONDS);
    assert!(stats.timed_out > 0);
    for task in &tasks {
        task.abort();
    }
    for task in tasks {
        let _ = task.await;
    }
    // Grants sent to futures that were aborted before reading them went back.
    assert_eq!(bucket.stats().taken, taken_by_tasks.load(Ordering::Relaxed));
    assert_eq!(bucket.queued(), 0);
}

/// On a multi-thread runtime, with waiters timing out and dropped while others are
/// granted (outcomes are sent after the bucket's lock is released, so some grants are on
/// their way when their waiter leaves), every token the bucket counts as taken was seen by
/// a caller. Real time, but nothing here depends on how fast the machine is. (The exact
/// interleaving of a grant in flight is pinned down by a unit test in `src/bucket/state.rs`.)
#[test]
fn tokens_counted_taken_are_exactly_those_callers_saw_under_races() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let bucket = empty_bucket(Rate::per_second(20_000), 4);
        let seen = Arc::new(AtomicU64::new(0));
        let tasks: Vec<_> = (0..16u64)
            .map(|task| {
                let (bucket, seen) = (bucket.clone(), Arc::clone(&seen));
                tokio::spawn(async move {
                    for round in 0..400u64 {
                        let patience = Duration::from_micros((task * 7 + round * 13) % 400);
                        let granted = if round % 3 == 0 {
                            // Dropped by `timeout` rather than timing out inside the bucket.
                            tokio::time::timeout(patience, bucket.take(1))
                                .await
                                .is_ok_and(|result| result.is_ok())
                        } else {
                            bucket.take_timeout(1, patience).await.is_ok()
                        };
                        if granted {
                            seen.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let stats = bucket.stats();
        assert_eq!(stats.taken, seen.load(Ordering::Relaxed));
        assert_eq!(stats.queued, 0);
    });
}

#[tokio::test(start_paused = true)]
async fn a_grant_dropped_unseen_while_others_wait_is_undone_as_if_never_made() {
    // Capacity 2 at 1 per second. `first` is granted its 2 tokens at 2 s but never polled
    // again; `second` waits behind it for 2. At 3.5 s, `first` is dropped. Had its grant
    // never been made the bucket would have been full from 2 s on, holding 2 at 3.5 s:
    // `second` is served at once and nothing is left. (Giving the 2 back on top of the
    // 1.5 accrued since would leave 1.5 after `second`: 3 taken at 3.5 s from a bucket of
    // 2.)
    let bucket = empty_bucket(Rate::per_second(1), 2);
    let start = Instant::now();
    let mut first = tokio_test::task::spawn(bucket.take(2));
    tokio_test::assert_pending!(first.poll());
    let second = tokio::spawn(bucket.take(2));
    yield_until(|| bucket.queued() == 2).await;
    tokio::time::sleep(ms(3_500)).await;
    assert!(first.is_woken(), "the grant was delivered at 2 s");
    assert_eq!(bucket.queued(), 1);
    drop(first);
    assert_eq!(second.await.unwrap(), Ok(()));
    assert_now(start, ms(3_500));
    assert_eq!(bucket.available(), 0);
    assert_eq!(
        bucket.try_take(1),
        Err(TryTakeError::Insufficient {
            retry_after: ms(1_000)
        })
    );
    assert_eq!(bucket.stats().taken, 2);
}

/// A `take(tokens)` polled once, queued, and granted at `grant_at` after `start`, which
/// nobody polls again: the grant is delivered but unseen.
async fn granted_unseen(
    bucket: &TokenBucket,
    tokens: u64,
    start: Instant,
    grant_at: Duration,
) -> tokio_test::task::Spawn<Take> {
    let mut waiter = tokio_test::task::spawn(bucket.take(tokens));
    tokio_test::assert_pending!(waiter.poll());
    tokio::time::sleep_until(start + grant_at).await;
    yield_until(|| waiter.is_woken()).await;
    assert_eq!(bucket.queued(), 0, "granted at {grant_at:?}");
    waiter
}

/// `bucket` holds `tokens` whole tokens, and one more after `next_in` exactly.
#[track_caller]
fn assert_holds(bucket: &TokenBucket, tokens: u64, next_in: Duration) {
    assert_eq!(bucket.available(), tokens);
    let refusal = TryTakeError::Insufficient {
        retry_after: next_in,
    };
    assert_eq!(bucket.try_take(tokens + 1), Err(refusal));
}

/// Issue 13's counterexample: no interval may take more than `capacity + rate × t`, even
/// when a grant is dropped unseen after others took from the bucket.
#[tokio::test(start_paused = true)]
async fn a_grant_dropped_unseen_lets_no_interval_take_more_than_capacity_and_accrual() {
    // Capacity 2 at 1 per second, full, emptied at once; a take of 2 is granted at 2 s,
    // when the bucket has refilled, and never seen.
    let bucket = bucket_with(Rate::per_second(1), 2, 2);
    let start = Instant::now();
    bucket.try_take(2).unwrap();
    let waiter = granted_unseen(&bucket, 2, start, secs(2)).await;
    tokio::time::sleep_until(start + secs(3)).await;
    assert_eq!(bucket.try_take(1), Ok(()));
    tokio::time::sleep_until(start + ms(3_500)).await;
    drop(waiter);
    // Had the grant never been made: full at 2 s, 1 left at 3 s, 1.5 now. Giving the 2
    // back (capped at 2) would let 3 be taken in [3 s, 3.5 s].
    assert_holds(&bucket, 1, ms(500));
    tokio::time::advance(ms(500) - ns(1)).await;
    assert!(bucket.try_take(2).is_err(), "a nanosecond early");
    tokio::time::advance(ns(1)).await;
    assert_eq!(bucket.try_take(2), Ok(()));
    assert_now(start, secs(4));
    assert_eq!(bucket.stats().taken, 2 + 1 + 2);
}

#[tokio::test(start_paused = true)]
async fn a_grant_dropped_unseen_before_the_bucket_could_fill_comes_back_whole() {
    // Capacity 5 at 1 per second, empty: 2 granted at 2 s, unseen, dropped at 3.5 s. The
    // bucket never held more than 1.5 since, never within 2 of full: all 2 come back, and
    // the half token stays.
    let bucket = empty_bucket(Rate::per_second(1), 5);
    let start = Instant::now();
    let waiter = granted_unseen(&bucket, 2, start, secs(2)).await;
    tokio::time::sleep_until(start + ms(3_500)).await;
    drop(waiter);
    assert_holds(&bucket, 3, ms(500));
    assert_eq!(bucket.stats().taken, 0);
}

#[tokio::test(start_paused = true)]
async fn a_grant_dropped_unseen_gives_back_only_what_the_bucket_had_room_for() {
    // Capacity 4 at 1 per second, empty: 3 granted at 3 s, unseen. At 4.5 s a try_take(1)
    // finds 1.5: just before it, the bucket had room for 2.5 more, the least since the
    // grant. Dropped at 5 s, the grant gives back 2.5 of its 3: had it never been made the
    // bucket would have been full from 4 s, held 3 after the try_take, and 3.5 now.
    let bucket = empty_bucket(Rate::per_second(1), 4);
    let start = Instant::now();
    let waiter = granted_unseen(&bucket, 3, start, secs(3)).await;
    tokio::time::sleep_until(start + ms(4_500)).await;
    assert_eq!(bucket.try_take(1), Ok(()));
    tokio::time::sleep_until(start + secs(5)).await;
    drop(waiter);
    assert_holds(&bucket, 3, ms(500));
    assert_eq!(bucket.stats().taken, 1);
}

/// Two grants dropped unseen give back, between them, no more than the room allowed, in
/// either order of the drops: each alone measured on what the bucket really held would
/// count twice the room the other's tokens have filled since.
#[tokio::test(start_paused = true)]
async fn two_grants_dropped_unseen_give_back_no_more_than_the_room_allowed_in_either_order() {
    for first_dropped in [0, 1] {
        // Capacity 10 at 1 per second, empty: `a` takes 5 at 5 s and `b` 5 at 10 s, both
        // unseen; a try_take(3) at 13 s takes what accrued since. Without either grant the
        // bucket would be full from 10 s and hold 8 at 14 s, the drops. The rule keeps
        // one least room for the stretch since the oldest grant unseen, 5 (just before
        // `b` took), and one since the newest, 7 (just before the try_take): whichever
        // drops first gives back its 5 from those, which spends both, and the other
        // nothing. So 6 are held, not 8, and never more.
        let bucket = empty_bucket(Rate::per_second(1), 10);
        let start = Instant::now();
        let mut a = tokio_test::task::spawn(bucket.take(5));
        tokio_test::assert_pending!(a.poll());
        let b = granted_unseen(&bucket, 5, start, secs(10)).await;
        assert!(a.is_woken(), "a was granted at 5 s");
        tokio::time::sleep_until(start + secs(13)).await;
        assert_eq!(bucket.try_take(3), Ok(()));
        tokio::time::sleep_until(start + secs(14)).await;
        let mut waiters = [Some(a), Some(b)];
        drop(waiters[first_dropped].take());
        drop(waiters[1 - first_dropped].take());
        assert_holds(&bucket, 6, secs(1));
        assert_eq!(bucket.stats().taken, 3, "dropped {first_dropped} first");
    }
}

/// A grant dropped unseen no longer counts as taken, however many grants were made after
/// it: `stats().taken` is what callers saw. (The soak found it counting grants a record
/// of each had forgotten.)
#[tokio::test(start_paused = true)]
async fn a_grant_dropped_unseen_after_many_others_is_not_counted_as_taken() {
    let bucket = empty_bucket(Rate::per_second(1_000), 1);
    let start = Instant::now();
    let waiter = granted_unseen(&bucket, 1, start, ms(1)).await;
    let later = 1_100;
    let takers: Vec<_> = (0..later).map(|_| tokio::spawn(bucket.take(1))).collect();
    for taker in takers {
        assert_eq!(taker.await.unwrap(), Ok(()));
    }
    assert_eq!(bucket.stats().taken, later + 1);
    drop(waiter);
    assert_eq!(bucket.stats().taken, later);
}

/// No record of each grant, so no horizon: a grant dropped unseen gives its token back
/// after any number of later grants, while the room since it allows.
#[tokio::test(start_paused = true)]
async fn a_grant_dropped_unseen_comes_back_after_any_number_of_later_grants() {
    for later in [1, 1_024, 1_025, 3_000] {
        // 1,000 a second from empty, with room for every grant: the first take is granted
        // at 1 ms and never seen, each later one a millisecond after the one before, seen.
        // The room never fell below 4,999 since: its token comes back.
        let bucket = empty_bucket(Rate::per_second(1_000), 5_000);
        let mut first = tokio_test::task::spawn(bucket.take(1));
        tokio_test::assert_pending!(first.poll());
        let mut takers: Vec<_> = (0..later)
            .map(|_| tokio_test::task::spawn(bucket.take(1)))
            .collect();
        for taker in &mut takers {
            tokio_test::assert_pending!(taker.poll());
        }
        tokio::time::advance(ms(later + 1)).await;
        assert_eq!(bucket.queued(), 0, "every take is granted");
        for taker in &mut takers {
            tokio_test::assert_ready_eq!(taker.poll(), Ok(()));
        }
        assert_eq!(bucket.available(), 0);
        drop(first);
        assert_eq!(bucket.available(), 1, "after {later} later grants");
        assert_eq!(bucket.stats().taken, later);
    }
}

/// A refund between a grant and its unseen drop: the history without the grant was full
/// after the refund, so only what fills the bucket comes back.
#[tokio::test(start_paused = true)]
async fn a_grant_dropped_unseen_after_a_refund_gives_back_only_up_to_full() {
    // Capacity 4 at 1 per second, empty: 3 granted at 3 s, unseen; 2 refunded at 3.5 s
    // (2.5 held); dropped at 4 s, when 3 are held. Without the grant: 3 at 3 s, 5.5 capped
    // to 4 by the refund, 4 at 4 s. One comes back, not three.
    let bucket = empty_bucket(Rate::per_second(1), 4);
    let start = Instant::now();
    let waiter = granted_unseen(&bucket, 3, start, secs(3)).await;
    tokio::time::sleep_until(start + ms(3_500)).await;
    bucket.refund(2);
    tokio::time::sleep_until(start + secs(4)).await;
    drop(waiter);
    assert_eq!(bucket.available(), 4);
    assert_eq!(bucket.try_take(4), Ok(()));
    assert_holds(&bucket, 0, secs(1));
}

/// The same in lockstep with the reference model: a grant made at 1.5 ms and dropped
/// unseen at the 2 ms tick, while a second take of 2 waits behind it, gives back only
/// what the bucket had room for; the second is served at once and nothing more can be
/// taken before the bucket refills. (Given back whole, it left 2/3 of a token after the
/// second was served, and at 3 ms two `try_take(1)` succeeded: 4 tokens in a millisecond
/// from a bucket of 2 filling at 4/3 a millisecond.)
#[test]
fn a_grant_dropped_unseen_while_another_waits_agrees_with_the_model() {
    let setup = Setup {
        rate: ModelRate {
            amount: 4,
            period: 3_000_000,
        },
        capacity: 2,
        more: Vec::new(),
        initial: Some(0),
        queue_limit: None,
    };
    let take = |tokens| Op::Request {
        kind: Kind::Take,
        tokens,
        timeout: None,
        cancel_unpolled: false,
    };
    let ops = [
        take(2),
        take(2),
        Op::SleepUntilDue,
        Op::Drop {
            pick: 0,
            racing: true,
        },
        Op::TryTake(1),
        Op::Sleep(1),
        Op::TryTake(1),
        Op::TryTake(1),
    ];
    let summary = lockstep::run(&setup, &ops).unwrap();
    assert_eq!(summary.unseen_grants_dropped, 1);
}
