//! Issue 3: throttling streams with `TokenBucket::throttle` and `throttle_by`.
//!
//! Every timing test runs on tokio's paused clock and asserts exact instants, allowing
//! tokio's 1 ms timer granularity.

mod common;

use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;

use common::{assert_at, assert_now, bucket_with, empty_bucket, ms, secs, yield_until};
use futures::channel::mpsc;
use futures::executor::block_on;
use futures::future::FusedFuture;
use futures::stream::{self, FusedStream};
use futures::{poll, Future, Stream, StreamExt};
use token_bucket::stream::{Throttle, ThrottleBy};
use token_bucket::{Closed, Rate, TakeError, TokenBucket};
use tokio::time::Instant;

/// Drains `stream`, noting when each item came out.
async fn timed<S: Stream + Unpin>(mut stream: S) -> Vec<(S::Item, Instant)> {
    let mut items = Vec::new();
    while let Some(item) = stream.next().await {
        items.push((item, Instant::now()));
    }
    items
}

// The cost function is given `&S::Item`, here `&Vec<u8>`, so a slice would not fit.
#[allow(clippy::ptr_arg)]
fn byte_len(chunk: &Vec<u8>) -> u64 {
    chunk.len() as u64
}

// ---------------------------------------------------------------------------------------
// Timing and order
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn ten_items_through_five_a_second_with_capacity_one_come_200_ms_apart() {
    let bucket = TokenBucket::new(Rate::per_second(5), 1).unwrap();
    let start = Instant::now();
    let items = timed(bucket.throttle(stream::iter(0..10u64))).await;
    assert_eq!(items.len(), 10);
    for (item, at) in items {
        // The first from the full bucket, then one every 200 ms.
        assert_at(start, at, ms(200 * item));
    }
    assert_eq!(bucket.stats().taken, 10);
}

#[tokio::test(start_paused = true)]
async fn items_come_out_in_order_whatever_they_cost() {
    let bucket = empty_bucket(Rate::per_second(10), 10);
    let start = Instant::now();
    let items = [("a", 3), ("b", 0), ("c", 12), ("d", 1)];
    let out = timed(bucket.throttle_by(stream::iter(items), |&(_, cost)| cost)).await;
    let names: Vec<&str> = out.iter().map(|((name, _), _)| *name).collect();
    assert_eq!(names, ["a", "b", "c", "d"]);
    // "b" costs nothing but still waits behind "a"; "c" is paid as 10 then 2.
    let due = [ms(300), ms(300), ms(1500), ms(1600)];
    for ((_, at), due) in out.iter().zip(due) {
        assert_at(start, *at, due);
    }
}

#[tokio::test(start_paused = true)]
async fn the_cost_function_charges_each_chunk_its_bytes() {
    let bucket = empty_bucket(Rate::per_second(10), 10);
    let start = Instant::now();
    let chunks = stream::iter(vec![vec![0u8; 3], vec![1; 5], vec![2; 2]]);
    let out = timed(bucket.throttle_by(chunks, byte_len)).await;
    let lens: Vec<usize> = out.iter().map(|(chunk, _)| chunk.len()).collect();
    assert_eq!(lens, [3, 5, 2]);
    for ((_, at), due) in out.iter().zip([ms(300), ms(800), ms(1000)]) {
        assert_at(start, *at, due);
    }
    assert_eq!(bucket.stats().taken, 10);
}

#[tokio::test(start_paused = true)]
async fn a_cost_of_zero_passes_at_once_and_takes_nothing() {
    let bucket = empty_bucket(Rate::per_second(1), 1);
    let start = Instant::now();
    let items: Vec<u32> = bucket
        .throttle_by(stream::iter(0..100), |_| 0)
        .collect()
        .await;
    assert_eq!(items, (0..100).collect::<Vec<_>>());
    assert_now(start, ms(0));
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.queued), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn an_idle_stream_holds_no_place_in_the_queue_and_a_burst_after_it_passes_at_once() {
    let bucket = empty_bucket(Rate::per_second(10), 3);
    let start = Instant::now();
    let (sender, receiver) = mpsc::unbounded::<u64>();
    let consumer = tokio::spawn(timed(bucket.throttle(receiver)));
    tokio::time::sleep(secs(1)).await;
    // The adapter waits on the channel, not on the bucket: tokens are pulled first.
    assert_eq!(bucket.queued(), 0);
    for item in 0..5 {
        sender.unbounded_send(item).unwrap();
    }
    drop(sender);
    let out = consumer.await.unwrap();
    // The bucket refilled to its capacity of 3 while the stream was idle.
    let due = [ms(1000), ms(1000), ms(1000), ms(1100), ms(1200)];
    assert_eq!(out.len(), 5);
    for ((_, at), due) in out.iter().zip(due) {
        assert_at(start, *at, due);
    }
}

// ---------------------------------------------------------------------------------------
// Installments: costs above the capacity
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn an_item_costing_three_capacities_takes_three_capacity_periods() {
    let bucket = empty_bucket(Rate::per_second(10), 5);
    let start = Instant::now();
    let items = stream::iter([15u64, 1]);
    let consumer = tokio::spawn(timed(bucket.throttle_by(items, |&cost| cost)));
    // Paid in capacity-sized installments: the first 5 at 500 ms, the second queued.
    tokio::time::sleep(ms(700)).await;
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.queued_tokens), (5, 5));
    let out = consumer.await.unwrap();
    assert_at(start, out[0].1, ms(1500));
    assert_at(start, out[1].1, ms(1600));
    assert_eq!(bucket.stats().taken, 16);
}

#[tokio::test(start_paused = true)]
async fn a_cost_above_the_capacity_pays_its_first_installment_from_a_full_bucket() {
    let bucket = TokenBucket::new(Rate::per_second(2), 2).unwrap();
    let start = Instant::now();
    let mut throttled = bucket.throttle_by(stream::iter(["big"]), |_| 3);
    assert_eq!(throttled.next().await, Some("big"));
    // 2 at once, the third at 500 ms: never ExceedsCapacity, never a hang.
    assert_now(start, ms(500));
    assert_eq!(throttled.next().await, None);
    assert_eq!(throttled.end_reason(), None);
}

#[tokio::test(start_paused = true)]
async fn a_capacity_lowered_between_installments_sizes_the_rest_by_the_new_capacity() {
    let bucket = empty_bucket(Rate::per_second(4), 4);
    let start = Instant::now();
    let consumer = tokio::spawn(timed(bucket.throttle_by(stream::iter([8u64]), |&c| c)));
    yield_until(|| bucket.queued() == 1).await;
    tokio::time::sleep(ms(500)).await;
    // The queued installment of 4 is refused; the adapter retries with 2 (the 2 tokens
    // accrued by now at once), then 2, 2, 2 at 500 ms each.
    bucket.set_capacity(2).unwrap();
    let out = consumer.await.unwrap();
    assert_eq!(out.len(), 1);
    assert_at(start, out[0].1, ms(2000));
    assert_eq!(bucket.stats().taken, 8);
}

#[tokio::test(start_paused = true)]
async fn a_huge_cost_is_paid_in_installments_without_overflow() {
    let bucket = TokenBucket::new(Rate::per_second(10), 10).unwrap();
    let mut throttled = bucket.throttle_by(stream::iter([()]), |_| u64::MAX);
    let consumer = tokio::spawn(async move { throttled.next().await });
    tokio::time::sleep(ms(1500)).await;
    // 10 at once, 10 more at 1 s; the third installment waits.
    assert_eq!(bucket.stats().taken, 20);
    consumer.abort();
    assert!(consumer.await.unwrap_err().is_cancelled());
    let stats = bucket.stats();
    assert_eq!((stats.refunded, stats.available, stats.queued), (20, 10, 0));
}

// ---------------------------------------------------------------------------------------
// Closing and other ends
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn closing_mid_wait_yields_the_pulled_item_then_ends() {
    let bucket = empty_bucket(Rate::per_second(1), 1);
    let start = Instant::now();
    let mut throttled = bucket.throttle(stream::iter(1..=5));
    let closer = bucket.clone();
    tokio::spawn(async move {
        tokio::time::sleep(ms(500)).await;
        closer.close();
    });
    assert_eq!(throttled.next().await, Some(1));
    assert_now(start, ms(500));
    assert_eq!(throttled.end_reason(), Some(TakeError::Closed));
    assert_eq!(throttled.next().await, None);
    assert_eq!(throttled.next().await, None);
    assert!(throttled.is_terminated());
    assert_eq!(throttled.size_hint(), (0, Some(0)));
    let rest: Vec<i32> = throttled.into_inner().collect().await;
    assert_eq!(rest, [2, 3, 4, 5]);
}

#[tokio::test(start_paused = true)]
async fn closing_mid_installment_yields_the_item_then_ends() {
    let bucket = empty_bucket(Rate::per_second(10), 5);
    let start = Instant::now();
    let mut throttled = bucket.throttle_by(stream::iter(["big", "next"]), |_| 15);
    let closer = bucket.clone();
    tokio::spawn(async move {
        tokio::time::sleep(ms(700)).await;
        closer.close();
    });
    assert_eq!(throttled.next().await, Some("big"));
    assert_now(start, ms(700));
    assert_eq!(throttled.next().await, None);
    assert_eq!(throttled.end_reason(), Some(TakeError::Closed));
    assert_eq!(throttled.into_inner().collect::<Vec<_>>().await, ["next"]);
}

#[tokio::test(start_paused = true)]
async fn a_bucket_closed_before_the_first_item_ends_without_pulling_anything() {
    let bucket = TokenBucket::new(Rate::per_second(1), 10).unwrap();
    bucket.close();
    let mut throttled = bucket.throttle_by(stream::iter(1..=3), |_| 0);
    assert_eq!(throttled.next().await, None);
    assert_eq!(throttled.end_reason(), Some(TakeError::Closed));
    assert!(throttled.is_terminated());
    assert_eq!(throttled.into_inner().collect::<Vec<_>>().await, [1, 2, 3]);
}

#[tokio::test(start_paused = true)]
async fn a_close_while_the_inner_stream_is_idle_ends_before_the_next_item_is_pulled() {
    let bucket = TokenBucket::new(Rate::per_second(1), 10).unwrap();
    let (sender, receiver) = mpsc::unbounded::<u32>();
    let mut throttled = bucket.throttle(receiver);
    assert_eq!(poll!(throttled.next()), Poll::Pending);
    bucket.close();
    sender.unbounded_send(7).unwrap();
    drop(sender);
    assert_eq!(throttled.next().await, None);
    assert_eq!(throttled.end_reason(), Some(TakeError::Closed));
    // The item stayed in the channel.
    assert_eq!(throttled.into_inner().collect::<Vec<_>>().await, [7]);
}

#[tokio::test(start_paused = true)]
async fn a_close_while_the_inner_stream_stays_pending_ends_the_stream_at_that_instant() {
    // The review's case: a channel whose sender lives on stays pending for ever.
    let bucket = TokenBucket::new(Rate::per_second(1), 10).unwrap();
    let start = Instant::now();
    let (sender, receiver) = mpsc::unbounded::<u32>();
    let mut throttled = bucket.throttle(receiver);
    let closer = bucket.clone();
    tokio::spawn(async move {
        tokio::time::sleep(secs(1)).await;
        closer.close();
    });
    // Bounded, so that a close going unnoticed fails the test rather than hanging it.
    let next = tokio::time::timeout(secs(10), throttled.next()).await;
    assert_eq!(next, Ok(None), "the close went unnoticed");
    assert_now(start, secs(1));
    assert_eq!(throttled.end_reason(), Some(TakeError::Closed));
    assert!(throttled.is_terminated());
    // Nothing was pulled: what the sender sends later stays in the channel.
    sender.unbounded_send(7).unwrap();
    drop(sender);
    assert_eq!(throttled.into_inner().collect::<Vec<_>>().await, [7]);
}

#[tokio::test(start_paused = true)]
async fn a_close_after_some_items_while_the_channel_is_idle_ends_a_consumer_task_at_once() {
    let bucket = empty_bucket(Rate::per_second(10), 1);
    let start = Instant::now();
    let (sender, receiver) = mpsc::unbounded::<u64>();
    for item in 0..3 {
        sender.unbounded_send(item).unwrap();
    }
    let throttled = bucket.throttle(receiver);
    let consumer = tokio::spawn(async move {
        let mut throttled = throttled;
        let out = timed(&mut throttled).await;
        (out, Instant::now(), throttled.end_reason())
    });
    // The three items come out by 300 ms; then the consumer waits on the idle channel.
    tokio::time::sleep(ms(2500)).await;
    assert!(!consumer.is_finished());
    bucket.close();
    let ended = tokio::time::timeout(secs(10), consumer).await;
    let (out, ended_at, reason) = ended.expect("the close went unnoticed").unwrap();
    for ((_, at), due) in out.iter().zip([ms(100), ms(200), ms(300)]) {
        assert_at(start, *at, due);
    }
    assert_eq!(out.len(), 3);
    assert_at(start, ended_at, ms(2500));
    assert_eq!(reason, Some(TakeError::Closed));
    drop(sender);
}

#[tokio::test(start_paused = true)]
async fn listening_for_the_close_does_not_end_a_stream_whose_items_come_later() {
    let bucket = TokenBucket::new(Rate::per_second(10), 2).unwrap();
    let start = Instant::now();
    let (sender, receiver) = mpsc::unbounded::<u32>();
    let mut throttled = bucket.throttle(receiver);
    for round in 1..=3u64 {
        // Idle (listening for the close) for a second, then an item.
        assert_eq!(poll!(throttled.next()), Poll::Pending);
        tokio::time::sleep(secs(1)).await;
        sender.unbounded_send(round as u32).unwrap();
        assert_eq!(throttled.next().await, Some(round as u32));
        assert_now(start, secs(round));
    }
    assert_eq!(throttled.end_reason(), None);
    drop(sender);
    assert_eq!(throttled.next().await, None);
    assert_eq!(throttled.end_reason(), None);
}

#[tokio::test(start_paused = true)]
async fn the_inner_stream_ending_ends_it_with_no_reason_and_it_stays_fused() {
    let bucket = TokenBucket::new(Rate::per_second(1), 10).unwrap();
    // An inner stream that must never be polled again once it has ended.
    let mut ended = false;
    let inner = stream::poll_fn(move |_| {
        assert!(!ended, "the inner stream was polled after it ended");
        ended = true;
        Poll::Ready(None::<u32>)
    });
    let mut throttled = bucket.throttle(inner);
    assert!(!throttled.is_terminated());
    assert_eq!(throttled.next().await, None);
    assert!(throttled.is_terminated());
    assert_eq!(throttled.next().await, None);
    assert_eq!(throttled.end_reason(), None);
    assert_eq!(bucket.stats().taken, 0);
}

#[test]
fn outside_a_runtime_the_unpaid_item_is_kept_and_the_stream_ends_with_no_runtime() {
    // Two tokens: two items need no waiting, the third would have to wait.
    let bucket = bucket_with(Rate::per_second(1), 2, 2);
    let mut throttled = bucket.throttle(stream::iter(1..=4));
    assert_eq!(block_on(throttled.next()), Some(1));
    assert_eq!(block_on(throttled.next()), Some(2));
    assert_eq!(throttled.end_reason(), None);
    // Item 3 cannot be paid for: it is not yielded, and the stream ends.
    assert_eq!(block_on(throttled.next()), None);
    assert_eq!(throttled.end_reason(), Some(TakeError::NoRuntime));
    assert!(throttled.is_terminated());
    assert_eq!(block_on(throttled.next()), None);
    let (rest, held) = throttled.into_parts();
    assert_eq!(held, Some(3));
    assert_eq!(block_on(rest.collect::<Vec<_>>()), [4]);
    assert_eq!(bucket.stats().taken, 2);
}

#[test]
fn an_error_mid_installment_refunds_what_the_item_paid_and_keeps_it() {
    // Outside a runtime: the first installment comes from the full bucket, the second
    // would have to wait.
    let bucket = bucket_with(Rate::per_hour(1), 2, 2);
    let mut throttled = bucket.throttle_by(stream::iter(["big", "next"]), |_| 5);
    assert_eq!(block_on(throttled.next()), None);
    assert_eq!(throttled.end_reason(), Some(TakeError::NoRuntime));
    // Refunded at once, not only when the adapter goes.
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.refunded, stats.available), (2, 2, 2));
    let (rest, held) = throttled.into_parts();
    assert_eq!(held, Some("big"));
    assert_eq!(block_on(rest.collect::<Vec<_>>()), ["next"]);
    // Nothing is refunded twice.
    assert_eq!(bucket.stats().refunded, 2);
}

/// A bucket of `capacity` at `rate`, empty, with a queue limit.
fn limited_bucket(rate: Rate, capacity: u64, limit: u64) -> TokenBucket {
    TokenBucket::builder()
        .rate(rate)
        .capacity(capacity)
        .initial(0)
        .queue_limit(limit)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn installments_are_sized_by_the_queue_limit_so_the_adapter_alone_never_fills_the_queue() {
    // The review's case: a queue limit of 5 and items costing 6 (capacity 10).
    let bucket = limited_bucket(Rate::per_second(1), 10, 5);
    let start = Instant::now();
    let consumer = tokio::spawn(timed(bucket.throttle_by(stream::iter(["a", "b"]), |_| 6)));
    // Installments of 5 then 1: "a" is paid at 6 s, "b" at 12 s. Never free, never ended.
    tokio::time::sleep(ms(5500)).await;
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.queued_tokens), (5, 1));
    let out = consumer.await.unwrap();
    assert_eq!(out.len(), 2);
    assert_at(start, out[0].1, secs(6));
    assert_at(start, out[1].1, secs(12));
    assert_eq!(bucket.stats().taken, 12);
}

#[tokio::test(start_paused = true)]
async fn a_queue_limit_below_the_cost_and_the_capacity_delays_in_proportion() {
    // Limit 1, capacity 5, cost 2: installments of 1, 1 at one a second.
    let bucket = limited_bucket(Rate::per_second(1), 5, 1);
    let start = Instant::now();
    let mut throttled = bucket.throttle_by(stream::iter(["a", "b"]), |_| 2);
    assert_eq!(throttled.next().await, Some("a"));
    assert_now(start, secs(2));
    assert_eq!(throttled.next().await, Some("b"));
    assert_now(start, secs(4));
    assert_eq!(throttled.next().await, None);
    assert_eq!(throttled.end_reason(), None);
    assert_eq!(bucket.stats().taken, 4);
}

#[tokio::test(start_paused = true)]
async fn a_queue_limit_of_zero_serves_an_item_at_once_or_refuses_it_taking_nothing() {
    // A limit of 0 lets nothing wait: an item whose tokens are there is paid in one
    // installment, and one that cannot be paid at once is refused before it takes any
    // token, and kept.
    let bucket = TokenBucket::builder()
        .rate(Rate::per_hour(1))
        .capacity(10)
        .initial(3)
        .queue_limit(0)
        .build()
        .unwrap();
    let start = Instant::now();
    let mut throttled = bucket.throttle_by(stream::iter([2u64, 2, 1]), |&cost| cost);
    assert_eq!(throttled.next().await, Some(2));
    assert_eq!(throttled.next().await, None);
    assert_now(start, ms(0));
    assert_eq!(
        throttled.end_reason(),
        Some(TakeError::QueueFull {
            queued: 0,
            limit: 0
        })
    );
    let stats = bucket.stats();
    // The second item took nothing, so there was nothing to refund.
    assert_eq!((stats.taken, stats.refunded, stats.available), (2, 0, 1));
    let (rest, held) = throttled.into_parts();
    assert_eq!(held, Some(2));
    assert_eq!(rest.collect::<Vec<_>>().await, [1]);
}

#[tokio::test(start_paused = true)]
async fn a_temporarily_full_queue_sheds_the_held_item_and_into_parts_gives_it_back() {
    // The review's case: another task queued 10 tokens, the limit is 10.
    let bucket = limited_bucket(Rate::per_second(10), 10, 10);
    let start = Instant::now();
    let other = bucket.clone();
    let take = tokio::spawn(async move {
        other.take(10).await.unwrap();
        Instant::now()
    });
    yield_until(|| bucket.queued() == 1).await;
    let mut throttled = bucket.throttle(stream::iter(1..=100));
    // Item 1 is pulled, refused at once, not yielded: no free item.
    assert_eq!(throttled.next().await, None);
    assert_now(start, ms(0));
    assert_eq!(
        throttled.end_reason(),
        Some(TakeError::QueueFull {
            queued: 10,
            limit: 10
        })
    );
    assert!(throttled.is_terminated());
    assert_eq!(throttled.size_hint(), (0, Some(0)));
    assert_eq!(throttled.next().await, None);
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.refunded, stats.queued), (0, 0, 1));
    // The caller decides what becomes of the item: here, retry once the queue drains.
    let (rest, held) = throttled.into_parts();
    assert_eq!(held, Some(1));
    assert_at(start, take.await.unwrap(), secs(1));
    let retried = bucket.throttle(stream::iter(held).chain(rest.take(2)));
    let out = timed(retried).await;
    let items: Vec<i32> = out.iter().map(|(item, _)| *item).collect();
    assert_eq!(items, [1, 2, 3]);
    for ((_, at), due) in out.iter().zip([ms(1100), ms(1200), ms(1300)]) {
        assert_at(start, *at, due);
    }
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_mid_installment_refunds_what_the_item_paid() {
    let bucket = limited_bucket(Rate::per_second(10), 5, 5);
    let start = Instant::now();
    let mut throttled = bucket.throttle_by(stream::iter(["big", "next"]), |_| 15);
    let mut next = tokio_test::task::spawn(throttled.next());
    tokio_test::assert_pending!(next.poll());
    // The first installment of 5 is granted at 500 ms. Then someone fills the queue
    // before the adapter asks for its second.
    tokio::time::sleep(ms(600)).await;
    assert_eq!(bucket.stats().taken, 5);
    let mut other = bucket.take(5);
    assert!(poll!(&mut other).is_pending());
    assert!(next.is_woken());
    assert_eq!(next.poll(), Poll::Ready(None));
    drop(next);
    assert_now(start, ms(600));
    assert_eq!(
        throttled.end_reason(),
        Some(TakeError::QueueFull {
            queued: 5,
            limit: 5
        })
    );
    // The 5 paid went back, and complete the other take at once (1 had accrued).
    assert_eq!(bucket.stats().refunded, 5);
    assert_eq!(poll!(&mut other), Poll::Ready(Ok(())));
    let (rest, held) = throttled.into_parts();
    assert_eq!(held, Some("big"));
    assert_eq!(rest.collect::<Vec<_>>().await, ["next"]);
}

// ---------------------------------------------------------------------------------------
// The bucket's close notification, `TokenBucket::closed`, which the adapter listens to
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn closed_resolves_at_the_instant_of_the_close() {
    let bucket = TokenBucket::new(Rate::per_second(1), 10).unwrap();
    let start = Instant::now();
    let closer = bucket.clone();
    tokio::spawn(async move {
        tokio::time::sleep(secs(1)).await;
        closer.close();
    });
    // Several waiters at once, in other tasks too: the close wakes them all.
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let closed = bucket.closed();
            tokio::spawn(async move {
                closed.await;
                Instant::now()
            })
        })
        .collect();
    bucket.closed().await;
    assert_now(start, secs(1));
    assert!(bucket.is_closed());
    for waiter in waiters {
        assert_at(start, waiter.await.unwrap(), secs(1));
    }
}

#[tokio::test(start_paused = true)]
async fn closed_resolves_at_once_on_a_bucket_already_closed_and_stays_resolved() {
    let bucket = TokenBucket::new(Rate::per_second(1), 10).unwrap();
    let mut before = bucket.closed();
    assert_eq!(poll!(&mut before), Poll::Pending);
    assert!(!before.is_terminated());
    bucket.close();
    bucket.close();
    assert_eq!(poll!(&mut before), Poll::Ready(()));
    assert!(before.is_terminated());
    // Fused: polled again, it resolves again.
    assert_eq!(poll!(&mut before), Poll::Ready(()));
    let mut after = bucket.closed();
    assert_eq!(poll!(&mut after), Poll::Ready(()));
    assert!(format!("{after:?}").starts_with("Closed"));
}

#[tokio::test(start_paused = true)]
async fn dropping_closed_mid_wait_is_harmless() {
    let bucket = empty_bucket(Rate::per_second(1), 10);
    let start = Instant::now();
    for _ in 0..3 {
        let mut closed = bucket.closed();
        assert_eq!(poll!(&mut closed), Poll::Pending);
        drop(closed);
    }
    // The bucket is untouched: nothing queued, nothing taken, it serves as before.
    let stats = bucket.stats();
    assert_eq!((stats.queued, stats.taken, stats.closed), (0, 0, false));
    bucket.take(2).await.unwrap();
    assert_now(start, secs(2));
    // A waiter made later still sees the close.
    let mut closed = bucket.closed();
    assert_eq!(poll!(&mut closed), Poll::Pending);
    bucket.close();
    assert_eq!(poll!(&mut closed), Poll::Ready(()));
}

#[tokio::test(start_paused = true)]
async fn closed_resolves_when_every_handle_to_the_bucket_is_dropped() {
    let bucket = TokenBucket::new(Rate::per_second(1), 10).unwrap();
    let mut closed = bucket.closed();
    assert_eq!(poll!(&mut closed), Poll::Pending);
    let clone = bucket.clone();
    drop(bucket);
    assert_eq!(poll!(&mut closed), Poll::Pending);
    // It holds no handle itself: the last one going ends it.
    drop(clone);
    assert_eq!(poll!(&mut closed), Poll::Ready(()));
}

#[test]
fn closed_needs_no_runtime() {
    let bucket = TokenBucket::new(Rate::per_second(1), 10).unwrap();
    let closer = bucket.clone();
    let thread = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(10));
        closer.close();
    });
    block_on(bucket.closed());
    assert!(bucket.is_closed());
    thread.join().unwrap();
}

// ---------------------------------------------------------------------------------------
// Cancellation: dropping the adapter loses no tokens
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn dropping_mid_wait_loses_no_tokens() {
    let bucket = empty_bucket(Rate::per_second(1), 10);
    let mut throttled = bucket.throttle_by(stream::iter([1, 2]), |_| 5);
    assert_eq!(poll!(throttled.next()), Poll::Pending);
    assert_eq!(bucket.queued(), 1);
    tokio::time::sleep(secs(2)).await;
    drop(throttled);
    let stats = bucket.stats();
    assert_eq!((stats.available, stats.taken, stats.queued), (2, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn dropping_after_a_grant_it_never_saw_gives_the_tokens_back() {
    let bucket = empty_bucket(Rate::per_second(1), 10);
    let mut throttled = bucket.throttle_by(stream::iter([1]), |_| 5);
    assert_eq!(poll!(throttled.next()), Poll::Pending);
    // Granted at 5 s by the refill task; the adapter is woken but never polled again.
    tokio::time::sleep(secs(6)).await;
    assert_eq!(bucket.stats().taken, 5);
    drop(throttled);
    let stats = bucket.stats();
    assert_eq!((stats.available, stats.taken), (6, 0));
}

#[tokio::test(start_paused = true)]
async fn dropping_mid_installment_refunds_the_paid_installments() {
    let bucket = empty_bucket(Rate::per_second(10), 5);
    let start = Instant::now();
    let mut throttled = bucket.throttle_by(stream::iter([()]), |_| 15);
    let consumer = tokio::spawn(async move { throttled.next().await });
    tokio::time::sleep(ms(700)).await;
    // The first installment of 5 was paid at 500 ms; the second has 2 of its 5.
    assert_eq!(bucket.stats().taken, 5);
    consumer.abort();
    assert!(consumer.await.unwrap_err().is_cancelled());
    let stats = bucket.stats();
    assert_eq!((stats.refunded, stats.queued), (5, 0));
    // 2 accrued plus 5 refunded, capped at the capacity of 5.
    assert_eq!(stats.available, 5);
    bucket.take(5).await.unwrap();
    assert_now(start, ms(700));
}

#[tokio::test(start_paused = true)]
async fn into_parts_mid_installment_gives_back_the_held_item_and_refunds() {
    let bucket = empty_bucket(Rate::per_second(10), 5);
    let (sender, receiver) = mpsc::unbounded();
    for chunk in [vec![0u8; 12], vec![1; 1]] {
        sender.unbounded_send(chunk).unwrap();
    }
    drop(sender);
    let mut throttled = bucket.throttle_by(receiver, byte_len);
    let mut next = tokio_test::task::spawn(throttled.next());
    tokio_test::assert_pending!(next.poll());
    // The refill task grants the first installment at 500 ms; the next poll sees it and
    // queues the second.
    tokio::time::sleep(ms(600)).await;
    assert!(next.is_woken());
    tokio_test::assert_pending!(next.poll());
    assert_eq!(bucket.stats().queued_tokens, 5);
    drop(next);
    assert_eq!(bucket.stats().taken, 5);
    let (rest, held) = throttled.into_parts();
    assert_eq!(held, Some(vec![0; 12]));
    assert_eq!(rest.collect::<Vec<_>>().await, [vec![1]]);
    let stats = bucket.stats();
    assert_eq!((stats.refunded, stats.available, stats.queued), (5, 5, 0));
}

// ---------------------------------------------------------------------------------------
// Sharing the bucket's FIFO queue
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_throttled_stream_shares_the_fifo_queue_with_a_concurrent_take() {
    let bucket = empty_bucket(Rate::per_second(1), 5);
    let start = Instant::now();
    let consumer = tokio::spawn(timed(bucket.throttle(stream::iter(0..3u64))));
    yield_until(|| bucket.queued() == 1).await;
    let other = bucket.clone();
    let take = tokio::spawn(async move {
        other.take(3).await.unwrap();
        Instant::now()
    });
    yield_until(|| bucket.queued() == 2).await;
    let out = consumer.await.unwrap();
    // Item 0 was queued first (1 s); the take of 3 next (4 s); items 1 and 2 queue behind it.
    assert_at(start, take.await.unwrap(), secs(4));
    let due = [secs(1), secs(5), secs(6)];
    for ((_, at), due) in out.iter().zip(due) {
        assert_at(start, *at, due);
    }
}

#[tokio::test(start_paused = true)]
async fn two_throttled_streams_on_one_bucket_take_turns() {
    let bucket = empty_bucket(Rate::per_second(10), 1);
    let start = Instant::now();
    let first = tokio::spawn(timed(bucket.throttle(stream::iter(0..5u64))));
    yield_until(|| bucket.queued() == 1).await;
    let second = tokio::spawn(timed(bucket.throttle(stream::iter(0..5u64))));
    let (first, second) = (first.await.unwrap(), second.await.unwrap());
    // Together they get the bucket's 10 a second, alternating in FIFO order.
    for (item, at) in first {
        assert_at(start, at, ms(100 + 200 * item));
    }
    for (item, at) in second {
        assert_at(start, at, ms(200 + 200 * item));
    }
}

// ---------------------------------------------------------------------------------------
// size_hint, accessors, types
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn size_hint_forwards_the_upper_bound_counting_the_held_item_and_has_a_lower_bound_of_0() {
    let bucket = empty_bucket(Rate::per_second(10), 1);
    let mut throttled = bucket.throttle(stream::iter(0..5));
    // The bucket may end it at any time, so no item is certain: the lower bound is 0.
    assert_eq!(throttled.size_hint(), (0, Some(5)));
    assert_eq!(poll!(throttled.next()), Poll::Pending);
    // One item held, four still in the inner stream.
    assert_eq!(throttled.get_ref().size_hint(), (4, Some(4)));
    assert_eq!(throttled.size_hint(), (0, Some(5)));
    assert_eq!(throttled.next().await, Some(0));
    assert_eq!(throttled.size_hint(), (0, Some(4)));
    while throttled.next().await.is_some() {}
    assert_eq!(throttled.size_hint(), (0, Some(0)));

    let (_sender, receiver) = mpsc::unbounded::<u32>();
    let throttled = bucket.throttle_by(receiver, |_| 1);
    assert_eq!(throttled.size_hint(), (0, None));
}

#[tokio::test(start_paused = true)]
async fn the_accessors_reach_the_inner_stream() {
    let bucket = empty_bucket(Rate::per_second(10), 1);
    let mut throttled = bucket.throttle(stream::iter(0..5));
    assert_eq!(throttled.get_ref().size_hint(), (5, Some(5)));
    // Taking from the inner stream directly bypasses the throttle.
    assert_eq!(throttled.get_mut().next().await, Some(0));
    let mut pinned = pin!(throttled);
    assert_eq!(pinned.as_mut().get_pin_mut().next().await, Some(1));
    assert_eq!(pinned.next().await, Some(2));
    assert_eq!(bucket.stats().taken, 1);
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_is_not_unpin_is_throttled_once_pinned() {
    let bucket = empty_bucket(Rate::per_second(10), 1);
    let start = Instant::now();
    let inner = stream::unfold(0u64, |n| async move {
        tokio::task::yield_now().await;
        (n < 3).then_some((n, n + 1))
    });
    let mut throttled = pin!(bucket.throttle(inner));
    while let Some(n) = throttled.next().await {
        assert_now(start, ms(100 * (n + 1)));
    }
}

/// Compile-time assertions: these only compile if the bounds hold.
fn assert_unpin_send_static<T: Unpin + Send + 'static>() {}
fn assert_closed_future<T: Future<Output = ()> + FusedFuture + Unpin + Send + Sync + 'static>() {}

const _: fn() = assert_closed_future::<Closed>;

const _: fn() = assert_unpin_send_static::<Throttle<stream::Iter<std::vec::IntoIter<u32>>>>;
const _: fn() = assert_unpin_send_static::<Throttle<mpsc::UnboundedReceiver<String>>>;
const _: fn() = assert_unpin_send_static::<
    ThrottleBy<stream::Iter<std::vec::IntoIter<Vec<u8>>>, fn(&Vec<u8>) -> u64>,
>;

#[test]
fn a_stateful_cost_closure_is_called_once_per_item_and_keeps_the_adapter_unpin_and_send() {
    fn check<T: Unpin + Send + 'static>(_: &T) {}
    let bucket = TokenBucket::new(Rate::per_second(1), 10).unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&calls);
    let chunks = stream::iter(vec![vec![0u8; 2], vec![1; 3], vec![2; 4]]);
    let throttled = bucket.throttle_by(chunks, move |chunk| {
        counter.fetch_add(1, Ordering::Relaxed);
        chunk.len() as u64
    });
    check(&throttled);
    // Nine tokens from the full bucket: no waiting, so no runtime is needed.
    assert_eq!(block_on(throttled.collect::<Vec<_>>()).len(), 3);
    assert_eq!(calls.load(Ordering::Relaxed), 3);
    assert_eq!(bucket.stats().taken, 9);
    assert!(format!("{:?}", bucket.throttle(stream::iter([1]))).starts_with("Throttle"));
}
