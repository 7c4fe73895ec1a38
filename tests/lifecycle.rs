//! The bucket's life: closing it (point 8), changing its rate and capacity while waiters
//! queue (point 9), refunds, the refill task's start and end, requests outside a runtime,
//! the stats counters, and many threads sharing one bucket (point 11).
//!
//! Every test that involves time runs on tokio's paused clock and asserts exact instants,
//! allowing tokio's 1 ms timer granularity; only the many-threads test runs on real time,
//! and it asserts an upper bound on the tokens granted, never a timing bound.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures::FutureExt;
mod common;

// Outside a runtime.
#[path = "lifecycle/outside_a_runtime.rs"]
mod outside_a_runtime;

// The stats counters.
#[path = "lifecycle/stats.rs"]
mod stats;

use common::{
    assert_at, bucket_with, ms, panic_message_of, poll_once_in, runtime_without_a_timer, secs,
    NO_TIMER_PANIC,
};
use token_bucket::{ConfigError, Rate, TakeError, TokenBucket, TryTakeError};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_test::{assert_pending, assert_ready, assert_ready_eq, task};

/// Lets every task that is ready run (the current-thread runtime runs them in turn).
async fn settle() {
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
}

/// Spawns `request` and reports its result with the instant it completed.
fn spawn_timed<F>(request: F) -> JoinHandle<(Result<(), TakeError>, Instant)>
where
    F: Future<Output = Result<(), TakeError>> + Send + 'static,
{
    tokio::spawn(async move {
        let result = request.await;
        (result, Instant::now())
    })
}

/// Spawns `request`, lets it take its place in the queue, and checks it did.
async fn spawn_queued<F>(
    bucket: &TokenBucket,
    request: F,
) -> JoinHandle<(Result<(), TakeError>, Instant)>
where
    F: Future<Output = Result<(), TakeError>> + Send + 'static,
{
    let before = bucket.queued();
    let handle = spawn_timed(request);
    settle().await;
    assert_eq!(
        bucket.queued(),
        before + 1,
        "the request should have queued"
    );
    handle
}

/// Tasks alive on the current runtime.
fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------------------
// Point 8: close
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn close_resolves_every_pending_request_with_closed_at_once() {
    let bucket = bucket_with(Rate::per_second(1), 10, 0);
    let start = Instant::now();
    let mut take = task::spawn(bucket.take(3));
    let mut wait = task::spawn(bucket.wait(2));
    let mut take_timeout = task::spawn(bucket.take_timeout(1, secs(60)));
    let mut wait_timeout = task::spawn(bucket.wait_timeout(1, secs(60)));
    assert_pending!(take.poll());
    assert_pending!(wait.poll());
    assert_pending!(take_timeout.poll());
    assert_pending!(wait_timeout.poll());
    assert_eq!(bucket.queued(), 4);
    assert_eq!(bucket.stats().queued_tokens, 7);

    bucket.close();

    assert!(take.is_woken() && wait.is_woken());
    assert!(take_timeout.is_woken() && wait_timeout.is_woken());
    assert_ready_eq!(take.poll(), Err(TakeError::Closed));
    assert_ready_eq!(wait.poll(), Err(TakeError::Closed));
    assert_ready_eq!(take_timeout.poll(), Err(TakeError::Closed));
    assert_ready_eq!(wait_timeout.poll(), Err(TakeError::Closed));
    assert_eq!(Instant::now(), start, "nothing waited for a timer");
    let stats = bucket.stats();
    assert_eq!((stats.queued, stats.queued_tokens), (0, 0));
    assert_eq!((stats.taken, stats.timed_out), (0, 0));
    assert!(stats.closed);
}

#[tokio::test(start_paused = true)]
async fn close_resolves_spawned_waiters_when_they_run() {
    let bucket = bucket_with(Rate::per_second(1), 10, 0);
    let start = Instant::now();
    let waiters = vec![
        spawn_queued(&bucket, bucket.take(5)).await,
        spawn_queued(&bucket, bucket.take_timeout(2, secs(30))).await,
        spawn_queued(&bucket, bucket.wait(10)).await,
        spawn_queued(&bucket, bucket.wait_timeout(1, secs(30))).await,
    ];
    tokio::time::advance(ms(300)).await;
    bucket.close();
    for waiter in waiters {
        let (result, at) = waiter.await.unwrap();
        assert_eq!(result, Err(TakeError::Closed));
        assert_at(start, at, ms(300));
    }
}

#[tokio::test(start_paused = true)]
async fn requests_after_close_fail_at_once_with_closed() {
    let bucket = bucket_with(Rate::per_second(1), 10, 10);
    assert!(!bucket.is_closed());
    bucket.close();
    assert!(bucket.is_closed());
    assert!(bucket.stats().closed);

    // Tokens are there, yet every request is refused on its first poll.
    assert_ready_eq!(task::spawn(bucket.take(1)).poll(), Err(TakeError::Closed));
    assert_ready_eq!(task::spawn(bucket.take(0)).poll(), Err(TakeError::Closed));
    assert_ready_eq!(task::spawn(bucket.wait(1)).poll(), Err(TakeError::Closed));
    assert_ready_eq!(
        task::spawn(bucket.take_timeout(1, secs(1))).poll(),
        Err(TakeError::Closed)
    );
    assert_ready_eq!(
        task::spawn(bucket.wait_timeout(1, secs(1))).poll(),
        Err(TakeError::Closed)
    );
    assert_eq!(bucket.try_take(1), Err(TryTakeError::Closed));
    assert_eq!(bucket.try_take(0), Err(TryTakeError::Closed));
    assert_eq!(bucket.available(), 10, "closing takes no tokens");
    assert_eq!(bucket.stats().taken, 0);
}

#[tokio::test(start_paused = true)]
async fn closing_twice_is_harmless() {
    let bucket = bucket_with(Rate::per_second(1), 10, 0);
    let mut waiter = task::spawn(bucket.take(1));
    assert_pending!(waiter.poll());
    bucket.close();
    bucket.close();
    assert!(bucket.is_closed());
    assert_ready_eq!(waiter.poll(), Err(TakeError::Closed));
    bucket.clone().close();
    assert!(bucket.is_closed());
    assert_eq!(bucket.try_take(1), Err(TryTakeError::Closed));
    assert_ready_eq!(task::spawn(bucket.take(1)).poll(), Err(TakeError::Closed));
}

#[tokio::test(start_paused = true)]
async fn refund_on_a_closed_bucket_is_a_no_op() {
    let bucket = bucket_with(Rate::per_hour(1), 10, 10);
    bucket.try_take(6).unwrap();
    bucket.close();
    bucket.refund(3);
    assert_eq!(bucket.available(), 4);
    assert_eq!(bucket.stats().refunded, 0);
}

#[tokio::test(start_paused = true)]
async fn close_ends_the_refill_task_while_handles_live() {
    let before = alive_tasks();
    let bucket = bucket_with(Rate::per_second(1), 1, 0);
    let mut waiter = task::spawn(bucket.take(1));
    assert_pending!(waiter.poll());
    settle().await;
    assert_eq!(
        alive_tasks(),
        before + 1,
        "the first waiter starts the refill task"
    );
    bucket.close();
    settle().await;
    assert_eq!(alive_tasks(), before);
    assert_ready_eq!(waiter.poll(), Err(TakeError::Closed));
}

/// Every other operation replays the schedule up to now before acting (the crate's docs:
/// "whenever the bucket is touched, it replays the schedule"), so a waiter whose tokens
/// accrued before `close()` is called was granted at that instant and should see `Ok`.
/// `close()` does not call `serve(now)`: if the refill task has not run yet (here it had
/// no chance to; in production it fires up to 1 ms late, or later under load), the waiter
/// is told `Closed` instead. Expected to FAIL until `close` serves first.
#[tokio::test(start_paused = true)]
async fn close_grants_waiters_whose_tokens_accrued_before_it() {
    let bucket = bucket_with(Rate::per_second(1), 1, 0);
    let mut waiter = task::spawn(bucket.take(1));
    assert_pending!(waiter.poll());
    // Move the clock 2 s on without letting the refill task run: the first poll of
    // `advance` moves the clock, then yields without returning to the scheduler.
    let mut advance = task::spawn(tokio::time::advance(secs(2)));
    let _ = advance.poll();
    // The waiter's token accrued at 1 s; close comes at 2 s.
    bucket.close();
    let result = assert_ready!(waiter.poll());
    assert_eq!(
        result,
        Ok(()),
        "the token accrued at 1 s, before close() at 2 s, yet the waiter was refused"
    );
}

// ---------------------------------------------------------------------------------------
// Point 9: set_rate and set_capacity
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn raising_the_rate_keeps_the_accrued_fraction_and_serves_the_rest_at_the_new_rate() {
    let bucket = bucket_with(Rate::per_second(1), 1, 0);
    let start = Instant::now();
    let waiter = spawn_queued(&bucket, bucket.take(1)).await;
    tokio::time::advance(ms(100)).await;
    bucket.set_rate(Rate::per_second(100)).unwrap();
    assert_eq!(bucket.rate(), Rate::per_second(100));
    // 0.1 token accrued at 1/s; the missing 0.9 comes at 100/s in 9 ms.
    let (result, at) = waiter.await.unwrap();
    assert_eq!(result, Ok(()));
    assert_at(start, at, ms(109));
}

/// The same change observed to the nanosecond: `queued()` replays the schedule, so the
/// grant is seen exactly at 109 ms, independent of the timer's granularity.
#[tokio::test(start_paused = true)]
async fn raising_the_rate_grants_the_waiter_at_the_exact_nanosecond() {
    let bucket = bucket_with(Rate::per_second(1), 1, 0);
    let mut waiter = task::spawn(bucket.take(1));
    assert_pending!(waiter.poll());
    tokio::time::advance(ms(100)).await;
    bucket.set_rate(Rate::per_second(100)).unwrap();
    tokio::time::advance(ms(9) - Duration::from_nanos(1)).await;
    assert_eq!(bucket.queued(), 1, "granted before 109 ms");
    assert_pending!(waiter.poll());
    tokio::time::advance(Duration::from_nanos(1)).await;
    assert_eq!(bucket.queued(), 0, "not granted at 109 ms");
    assert_ready_eq!(waiter.poll(), Ok(()));
}

/// Lowering observed to the nanosecond: 100 ms at 1/s, then 0.9 token at 1 per 2 s.
#[tokio::test(start_paused = true)]
async fn lowering_the_rate_grants_the_waiter_at_the_exact_nanosecond() {
    let bucket = bucket_with(Rate::per_second(1), 1, 0);
    let mut waiter = task::spawn(bucket.take(1));
    assert_pending!(waiter.poll());
    tokio::time::advance(ms(100)).await;
    bucket.set_rate(Rate::new(1, secs(2))).unwrap();
    tokio::time::advance(ms(1_800) - Duration::from_nanos(1)).await;
    assert_eq!(bucket.queued(), 1, "granted before 1.9 s");
    tokio::time::advance(Duration::from_nanos(1)).await;
    assert_eq!(bucket.queued(), 0, "not granted at 1.9 s");
    assert_ready_eq!(waiter.poll(), Ok(()));
}

#[tokio::test(start_paused = true)]
async fn lowering_the_rate_pushes_the_waiter_later() {
    let bucket = bucket_with(Rate::per_second(1), 1, 0);
    let start = Instant::now();
    let waiter = spawn_queued(&bucket, bucket.take(1)).await;
    tokio::time::advance(ms(100)).await;
    bucket.set_rate(Rate::new(1, secs(2))).unwrap();
    // 0.1 token accrued at 1/s; the missing 0.9 comes at 1 per 2 s in 1.8 s.
    let (result, at) = waiter.await.unwrap();
    assert_eq!(result, Ok(()));
    assert_at(start, at, ms(1_900));
}

#[tokio::test(start_paused = true)]
async fn rate_changes_reschedule_every_queued_waiter() {
    let bucket = bucket_with(Rate::per_second(10), 10, 0);
    let start = Instant::now();
    let first = spawn_queued(&bucket, bucket.take(2)).await;
    let second = spawn_queued(&bucket, bucket.take(3)).await;
    tokio::time::advance(ms(100)).await; // 1 token
    bucket.set_rate(Rate::per_second(100)).unwrap();
    // First: 1 more token at 100/s = 10 ms. Second: 3 more = 30 ms after that.
    let (result, at) = first.await.unwrap();
    assert_eq!(result, Ok(()));
    assert_at(start, at, ms(110));
    let (result, at) = second.await.unwrap();
    assert_eq!(result, Ok(()));
    assert_at(start, at, ms(140));
}

#[tokio::test(start_paused = true)]
async fn set_rate_refuses_a_zero_rate_and_changes_nothing() {
    let bucket = bucket_with(Rate::per_second(1), 1, 0);
    let start = Instant::now();
    let waiter = spawn_queued(&bucket, bucket.take(1)).await;
    tokio::time::advance(ms(100)).await;
    assert_eq!(
        bucket.set_rate(Rate::per_second(0)),
        Err(ConfigError::ZeroRate)
    );
    assert_eq!(
        bucket.set_rate(Rate::new(100, Duration::ZERO)),
        Err(ConfigError::ZeroRate)
    );
    assert_eq!(bucket.rate(), Rate::per_second(1));
    assert_eq!(bucket.stats().rate, Rate::per_second(1));
    let (result, at) = waiter.await.unwrap();
    assert_eq!(result, Ok(()));
    assert_at(start, at, secs(1));
}

#[tokio::test(start_paused = true)]
async fn lowering_capacity_drops_tokens_above_it() {
    let bucket = bucket_with(Rate::per_second(1), 10, 10);
    bucket.set_capacity(4).unwrap();
    assert_eq!(bucket.capacity(), 4);
    assert_eq!(bucket.available(), 4);
    assert_eq!(bucket.stats().capacity, 4);
    tokio::time::advance(secs(10)).await;
    assert_eq!(
        bucket.available(),
        4,
        "it never refills above the new capacity"
    );
    assert_eq!(
        bucket.try_take(5),
        Err(TryTakeError::ExceedsCapacity {
            requested: 5,
            capacity: 4
        })
    );
    bucket.try_take(4).unwrap();
    tokio::time::advance(secs(2)).await;
    assert_eq!(bucket.available(), 2);
}

#[tokio::test(start_paused = true)]
async fn lowering_capacity_fails_waiters_that_exceed_it_and_serves_the_rest_in_order() {
    let bucket = bucket_with(Rate::per_second(1), 10, 0);
    let start = Instant::now();
    let big_take = spawn_queued(&bucket, bucket.take(6)).await;
    let small_take = spawn_queued(&bucket, bucket.take(2)).await;
    let big_wait = spawn_queued(&bucket, bucket.wait(8)).await;
    let last_take = spawn_queued(&bucket, bucket.take(3)).await;
    tokio::time::advance(secs(1)).await; // 1 token, held for the head (6)
    bucket.set_capacity(4).unwrap();
    assert_eq!(bucket.queued(), 2);
    assert_eq!(bucket.stats().queued_tokens, 5);
    assert_eq!(
        bucket.available(),
        1,
        "below the new capacity, nothing is dropped"
    );

    let (result, at) = big_take.await.unwrap();
    assert_eq!(
        result,
        Err(TakeError::ExceedsCapacity {
            requested: 6,
            capacity: 4
        })
    );
    assert_at(start, at, secs(1));
    let (result, at) = big_wait.await.unwrap();
    assert_eq!(
        result,
        Err(TakeError::ExceedsCapacity {
            requested: 8,
            capacity: 4
        })
    );
    assert_at(start, at, secs(1));
    // The 2 is now the head: 1 more token, at 2 s; then the 3 needs 3 more, at 5 s.
    let (result, at) = small_take.await.unwrap();
    assert_eq!(result, Ok(()));
    assert_at(start, at, secs(2));
    let (result, at) = last_take.await.unwrap();
    assert_eq!(result, Ok(()));
    assert_at(start, at, secs(5));
    assert_eq!(bucket.stats().taken, 5);
}

#[tokio::test(start_paused = true)]
async fn lowering_capacity_below_the_head_lets_a_satisfiable_waiter_behind_it_go_at_once() {
    let bucket = bucket_with(Rate::per_second(1), 10, 0);
    let start = Instant::now();
    let mut head = task::spawn(bucket.take(8));
    let mut behind = task::spawn(bucket.take(3));
    assert_pending!(head.poll());
    assert_pending!(behind.poll());
    tokio::time::advance(secs(5)).await; // 5 tokens, held for the head (8)
    assert_pending!(behind.poll());
    bucket.set_capacity(4).unwrap();
    assert_ready_eq!(
        head.poll(),
        Err(TakeError::ExceedsCapacity {
            requested: 8,
            capacity: 4
        })
    );
    // 5 tokens capped to 4; the 3 behind is served at once from them.
    assert!(behind.is_woken());
    assert_ready_eq!(behind.poll(), Ok(()));
    assert_eq!(bucket.available(), 1);
    assert_eq!(Instant::now() - start, secs(5));
}

#[tokio::test(start_paused = true)]
async fn raising_capacity_fills_at_the_rate_not_at_once() {
    let bucket = bucket_with(Rate::per_second(1), 2, 2);
    // Nobody looks at the bucket for 10 s: it stays full at 2, it does not bank 10.
    tokio::time::advance(secs(10)).await;
    bucket.set_capacity(5).unwrap();
    assert_eq!(bucket.capacity(), 5);
    assert_eq!(bucket.available(), 2);
    tokio::time::advance(secs(1)).await;
    assert_eq!(bucket.available(), 3);
    tokio::time::advance(secs(2)).await;
    assert_eq!(bucket.available(), 5);
    tokio::time::advance(secs(10)).await;
    assert_eq!(bucket.available(), 5);
}

#[tokio::test(start_paused = true)]
async fn set_capacity_refuses_zero_and_changes_nothing() {
    let bucket = bucket_with(Rate::per_second(1), 10, 0);
    let start = Instant::now();
    let waiter = spawn_queued(&bucket, bucket.take(3)).await;
    tokio::time::advance(secs(1)).await;
    assert_eq!(bucket.set_capacity(0), Err(ConfigError::ZeroCapacity));
    assert_eq!(bucket.capacity(), 10);
    assert_eq!(bucket.queued(), 1, "no waiter was failed");
    assert_eq!(bucket.available(), 1);
    let (result, at) = waiter.await.unwrap();
    assert_eq!(result, Ok(()));
    assert_at(start, at, secs(3));
}

// ---------------------------------------------------------------------------------------
// refund
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn refund_gives_tokens_back_never_above_capacity() {
    let bucket = bucket_with(Rate::per_hour(1), 10, 10);
    bucket.try_take(8).unwrap();
    bucket.refund(5);
    assert_eq!(bucket.available(), 7);
    bucket.refund(100);
    assert_eq!(bucket.available(), 10);
    bucket.refund(u64::MAX);
    assert_eq!(bucket.available(), 10);
    bucket.try_take(10).unwrap();
    assert_eq!(bucket.available(), 0);
}

#[tokio::test(start_paused = true)]
async fn refund_larger_than_the_capacity_is_capped_before_it_serves_the_queue() {
    // The bucket can hold 10 at any instant: the waiter takes 4 of them, 6 stay.
    let bucket = bucket_with(Rate::per_hour(1), 10, 0);
    let mut waiter = task::spawn(bucket.take(4));
    assert_pending!(waiter.poll());
    bucket.refund(100);
    assert_ready_eq!(waiter.poll(), Ok(()));
    assert_eq!(bucket.available(), 6);
}

#[tokio::test(start_paused = true)]
async fn refund_that_completes_the_head_serves_it_at_once() {
    // At 1 per hour the refill timer is an hour away: only the refund can serve.
    let bucket = bucket_with(Rate::per_hour(1), 10, 0);
    let start = Instant::now();
    let mut first = task::spawn(bucket.take(3));
    let mut second = task::spawn(bucket.take(2));
    let mut third = task::spawn(bucket.take(5));
    assert_pending!(first.poll());
    assert_pending!(second.poll());
    assert_pending!(third.poll());

    bucket.refund(2);
    // Not enough for the head, and nobody behind it jumps the queue.
    assert!(!first.is_woken() && !second.is_woken() && !third.is_woken());
    assert_pending!(second.poll());
    assert_eq!(bucket.available(), 2);

    bucket.refund(3);
    assert!(first.is_woken() && second.is_woken());
    assert_ready_eq!(first.poll(), Ok(()));
    assert_ready_eq!(second.poll(), Ok(()));
    assert_pending!(third.poll());
    assert_eq!(bucket.available(), 0);
    assert_eq!(bucket.queued(), 1);
    assert_eq!(Instant::now(), start, "served at the refund's instant");
}

#[tokio::test(start_paused = true)]
async fn refund_serves_a_spawned_waiter_without_waiting_for_its_timer() {
    let bucket = bucket_with(Rate::per_hour(1), 10, 0);
    let start = Instant::now();
    let waiter = spawn_queued(&bucket, bucket.take(3)).await;
    tokio::time::advance(ms(250)).await;
    bucket.refund(3);
    let (result, at) = waiter.await.unwrap();
    assert_eq!(result, Ok(()));
    assert_eq!(at - start, ms(250));
}

// ---------------------------------------------------------------------------------------
// The refill task's lifecycle
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn refill_task_starts_with_the_first_waiter_and_ends_when_the_last_handle_is_dropped() {
    let before = alive_tasks();
    let bucket = bucket_with(Rate::per_second(1), 1, 0);
    let clone = bucket.clone();
    bucket.try_take(0).unwrap();
    settle().await;
    assert_eq!(alive_tasks(), before, "no refill task until someone waits");
    bucket.take(1).await.unwrap();
    assert_eq!(
        alive_tasks(),
        before + 1,
        "it outlives the waiter it served"
    );
    drop(bucket);
    settle().await;
    assert_eq!(alive_tasks(), before + 1, "a clone still holds the bucket");
    drop(clone);
    settle().await;
    assert_eq!(alive_tasks(), before);
}

#[tokio::test(start_paused = true)]
async fn refill_task_ends_when_queued_waiters_and_then_the_last_handle_are_dropped() {
    let before = alive_tasks();
    let bucket = bucket_with(Rate::per_second(1), 10, 0);
    let mut first = task::spawn(bucket.take(5));
    let mut second = task::spawn(bucket.wait(7));
    assert_pending!(first.poll());
    assert_pending!(second.poll());
    settle().await;
    assert_eq!(alive_tasks(), before + 1);
    drop(first);
    drop(second);
    assert_eq!(bucket.queued(), 0);
    tokio::time::advance(secs(1)).await;
    settle().await;
    assert_eq!(alive_tasks(), before + 1, "the handle still lives");
    drop(bucket);
    settle().await;
    assert_eq!(alive_tasks(), before);
}

#[tokio::test(start_paused = true)]
async fn refill_task_ends_when_the_handle_is_dropped_before_its_queued_waiter() {
    let before = alive_tasks();
    let bucket = bucket_with(Rate::per_second(1), 10, 0);
    let mut waiter = task::spawn(bucket.take_timeout(5, secs(60)));
    assert_pending!(waiter.poll());
    drop(bucket);
    settle().await;
    assert_eq!(alive_tasks(), before + 1, "the waiter holds the bucket");
    drop(waiter);
    settle().await;
    assert_eq!(alive_tasks(), before);
}

#[test]
fn bucket_still_serves_waiters_after_its_refill_runtime_shut_down() {
    let runtime_a = paused_runtime();
    let bucket = runtime_a.block_on(async {
        let bucket = bucket_with(Rate::per_second(1), 1, 0);
        let start = Instant::now();
        let waiter = tokio::spawn({
            let bucket = bucket.clone();
            async move { bucket.take(1).await }
        });
        assert_eq!(waiter.await.unwrap(), Ok(()));
        assert_at(start, Instant::now(), secs(1));
        assert_eq!(alive_tasks(), 1, "the refill task lives on in runtime A");
        bucket
    });
    drop(runtime_a);

    let runtime_b = paused_runtime();
    runtime_b.block_on(async {
        // B's clock starts where real time is, behind A's 1 s of paused time; move it
        // past that so the bucket is full again, then empty it.
        tokio::time::advance(secs(2)).await;
        assert_eq!(bucket.available(), 1);
        bucket.try_take(1).unwrap();
        let start = Instant::now();
        // This take must wait: the dead task from A cannot serve it, a new one must.
        assert_eq!(bucket.take(1).await, Ok(()));
        assert_at(start, Instant::now(), secs(1));
        assert_eq!(alive_tasks(), 1, "a new refill task runs in runtime B");
        assert_eq!(bucket.stats().taken, 3);
    });
}

/// A bucket at 1/s, and a `take(1)` that queued on it in a runtime since dropped (with
/// the refill task it started).
fn waiter_queued_in_a_dropped_runtime() -> (TokenBucket, std::pin::Pin<Box<token_bucket::Take>>) {
    let runtime_a = paused_runtime();
    let bucket = runtime_a.block_on(async { bucket_with(Rate::per_second(1), 1, 0) });
    let mut waiter = Box::pin(bucket.take(1));
    runtime_a.block_on(async {
        assert!((&mut waiter).now_or_never().is_none(), "it must queue");
    });
    drop(runtime_a);
    (bucket, waiter)
}

/// A waiter that queued in runtime A, whose refill task died with A, is served in
/// runtime B once another request touches the bucket (its tokens are on the schedule).
#[test]
fn waiter_carried_into_a_new_runtime_is_served_once_the_bucket_is_touched() {
    let (bucket, waiter) = waiter_queued_in_a_dropped_runtime();
    let runtime_b = paused_runtime();
    runtime_b.block_on(async {
        tokio::time::advance(secs(5)).await;
        // Any request that touches the bucket replays the schedule: the token accrued,
        // so the carried waiter is granted.
        assert_eq!(bucket.queued(), 0);
        assert_eq!(waiter.await, Ok(()));
    });
}

/// The same, with nobody else touching the bucket: when runtime A shuts down, the dying
/// refill task wakes the waiter, and its first poll in runtime B starts a refill task
/// there.
#[test]
fn waiter_carried_into_a_new_runtime_is_served_on_its_own() {
    let (bucket, waiter) = waiter_queued_in_a_dropped_runtime();
    let runtime_b = paused_runtime();
    runtime_b.block_on(async {
        assert_eq!(waiter.await, Ok(()));
        assert_eq!(alive_tasks(), 1, "a new refill task runs in runtime B");
        assert_eq!(bucket.queued(), 0);
    });
}

/// The same, carried into a runtime without a timer: the refill task it would start there
/// could never sleep, so its next poll panics, naming the fix, instead of restarting a
/// task that panics, for ever.
#[test]
fn waiter_carried_into_a_runtime_without_a_timer_panics_rather_than_hang() {
    let (bucket, mut waiter) = waiter_queued_in_a_dropped_runtime();
    let untimed = runtime_without_a_timer();
    let message = panic_message_of(|| poll_once_in(&untimed, &mut waiter));
    assert!(message.contains(NO_TIMER_PANIC), "{message}");
    // Still in line, and served where there is a timer.
    assert_eq!(bucket.queued(), 1);
    paused_runtime().block_on(async { assert_eq!(waiter.await, Ok(())) });
    assert_eq!(bucket.queued(), 0);
}

/// A waiter queued from a live runtime B while the refill task sits in runtime A, which
/// nobody drives any more: once A is dropped, B's waiter is served without any other call.
#[test]
fn waiter_in_another_runtime_survives_the_refill_runtime_being_dropped() {
    let bucket = bucket_with(Rate::per_second(50), 1, 0);
    let runtime_a = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // A waiter there starts the refill task in A, then gives up.
    runtime_a.block_on(async {
        let attempt = tokio::time::timeout(Duration::from_millis(1), bucket.take(1)).await;
        assert!(attempt.is_err(), "the bucket starts empty");
    });
    let runtime_b = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let waiter = runtime_b.spawn({
        let bucket = bucket.clone();
        async move { bucket.take(1).await }
    });
    for _ in 0..10_000 {
        if bucket.queued() == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        bucket.queued(),
        1,
        "B's waiter queued behind A's refill task"
    );
    drop(runtime_a);
    // Real time here only bounds a hang; the assertion is that it completes at all.
    let result =
        runtime_b.block_on(async { tokio::time::timeout(Duration::from_secs(30), waiter).await });
    assert_eq!(result.expect("the waiter hung").unwrap(), Ok(()));
}

/// A refund never lifts the bucket above its capacity, even with waiters queued: ten
/// queued take(10) and a refund of 100 serve one of them, not all ten at one instant.
#[tokio::test(start_paused = true)]
async fn refund_with_waiters_queued_never_grants_beyond_capacity() {
    let bucket = bucket_with(Rate::per_hour(1), 10, 0);
    let mut waiters: Vec<_> = (0..10)
        .map(|_| tokio_test::task::spawn(bucket.take(10)))
        .collect();
    for waiter in &mut waiters {
        tokio_test::assert_pending!(waiter.poll());
    }
    bucket.refund(100);
    let served = waiters
        .iter_mut()
        .map(|waiter| waiter.poll())
        .filter(Poll::is_ready)
        .count();
    assert_eq!(served, 1);
    assert_eq!(bucket.available(), 0);
    assert_eq!(bucket.queued(), 9);
}

/// A waiter told `Closed` on another thread finds `is_closed()` already true, and one
/// refused for a lowered capacity finds `capacity()` already lowered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_woken_by_a_change_see_it_in_the_bucket() {
    let bucket = bucket_with(Rate::per_hour(1), 10, 0);
    let mut waiters = Vec::new();
    for _ in 0..2_000 {
        let bucket = bucket.clone();
        waiters.push(tokio::spawn(async move {
            let result = bucket.take(1).await;
            (result, bucket.is_closed())
        }));
    }
    let mut big = Vec::new();
    for _ in 0..2_000 {
        let bucket = bucket.clone();
        big.push(tokio::spawn(async move {
            let result = bucket.take(8).await;
            (result, bucket.capacity())
        }));
    }
    while bucket.queued() < 4_000 {
        tokio::task::yield_now().await;
    }
    bucket.set_capacity(5).unwrap();
    for waiter in big {
        let (result, capacity) = waiter.await.unwrap();
        assert_eq!(
            result,
            Err(TakeError::ExceedsCapacity {
                requested: 8,
                capacity: 5
            })
        );
        assert_eq!(
            capacity, 5,
            "refused, yet the capacity still read as before"
        );
    }
    bucket.close();
    for waiter in waiters {
        let (result, closed) = waiter.await.unwrap();
        assert_eq!(result, Err(TakeError::Closed));
        assert!(closed, "told Closed, yet is_closed() was false");
    }
}

// ---------------------------------------------------------------------------------------
// Point 11: many threads
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_tasks_and_threads_never_get_more_than_capacity_plus_rate_times_elapsed() {
    const RATE_PER_SECOND: u64 = 2_000;
    const CAPACITY: u64 = 20;
    const RUN_FOR: Duration = Duration::from_millis(300);

    let start = std::time::Instant::now();
    let bucket = TokenBucket::new(Rate::per_second(RATE_PER_SECOND), CAPACITY).unwrap();
    let granted = Arc::new(AtomicU64::new(0));

    let mut tasks = Vec::new();
    for worker in 0..8u64 {
        let bucket = bucket.clone();
        let granted = Arc::clone(&granted);
        tasks.push(tokio::spawn(async move {
            let tokens = 1 + worker % 3;
            while start.elapsed() < RUN_FOR {
                if worker % 2 == 0 {
                    bucket.take(tokens).await.unwrap();
                    granted.fetch_add(tokens, Ordering::Relaxed);
                } else {
                    if bucket.try_take(tokens).is_ok() {
                        granted.fetch_add(tokens, Ordering::Relaxed);
                    }
                    tokio::task::yield_now().await;
                }
            }
        }));
    }
    let mut threads = Vec::new();
    for worker in 0..4u64 {
        let bucket = bucket.clone();
        let granted = Arc::clone(&granted);
        threads.push(std::thread::spawn(move || {
            let tokens = 1 + worker % 2;
            while start.elapsed() < RUN_FOR {
                if bucket.try_take(tokens).is_ok() {
                    granted.fetch_add(tokens, Ordering::Relaxed);
                }
                std::thread::yield_now();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    for thread in threads {
        thread.join().unwrap();
    }
    let elapsed = start.elapsed();

    let granted = granted.load(Ordering::Relaxed);
    let accrued = (u128::from(RATE_PER_SECOND) * elapsed.as_nanos()).div_ceil(1_000_000_000);
    let bound = u128::from(CAPACITY) + accrued;
    assert_eq!(
        bucket.stats().taken,
        granted,
        "the bucket and the workers agree"
    );
    assert!(granted > 0);
    assert!(
        u128::from(granted) <= bound,
        "granted {granted} tokens in {elapsed:?}, at most {bound} allowed"
    );
}
