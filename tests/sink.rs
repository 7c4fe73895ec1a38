//! Issue 3: throttling sinks with `TokenBucket::throttle_sink`.
//!
//! Every timing test runs on tokio's paused clock and asserts exact instants, allowing
//! tokio's 1 ms timer granularity.

mod common;

use std::error::Error;
use std::pin::pin;

use common::{assert_at, assert_now, empty_bucket, ms, secs, yield_until};
use futures::channel::mpsc;
use futures::executor::block_on;
use futures::future::poll_fn;
use futures::{poll, sink, stream, Sink, SinkExt, StreamExt};
use token_bucket::sink::{ThrottleSink, ThrottleSinkError};
use token_bucket::{Rate, TakeError, TokenBucket};
use tokio::time::Instant;

/// Receives everything from `receiver` in a task, noting when each item arrived.
fn record<T: Send + 'static>(
    mut receiver: mpsc::UnboundedReceiver<T>,
) -> tokio::task::JoinHandle<Vec<(T, Instant)>> {
    tokio::spawn(async move {
        let mut items = Vec::new();
        while let Some(item) = receiver.next().await {
            items.push((item, Instant::now()));
        }
        items
    })
}

#[tokio::test(start_paused = true)]
async fn poll_ready_waits_for_its_token_at_the_right_instant() {
    let bucket = empty_bucket(Rate::per_second(5), 1);
    let start = Instant::now();
    let (sender, receiver) = mpsc::unbounded();
    let mut sink = bucket.throttle_sink(sender);
    for item in 1..=3u64 {
        poll_fn(|cx| sink.poll_ready_unpin(cx)).await.unwrap();
        assert_now(start, ms(200 * item));
        // The token is taken in poll_ready, before the item is even given.
        assert_eq!(bucket.stats().taken, item);
        sink.start_send_unpin(item).unwrap();
    }
    drop(sink);
    assert_eq!(receiver.collect::<Vec<_>>().await, [1, 2, 3]);
}

#[tokio::test(start_paused = true)]
async fn items_arrive_in_order_at_the_rate() {
    let bucket = TokenBucket::new(Rate::per_second(10), 2).unwrap();
    let start = Instant::now();
    let (sender, receiver) = mpsc::unbounded();
    let arrivals = record(receiver);
    let mut sink = bucket.throttle_sink(sender);
    sink.send_all(&mut stream::iter(0..6u64).map(Ok))
        .await
        .unwrap();
    sink.close().await.unwrap();
    let arrivals = arrivals.await.unwrap();
    let items: Vec<u64> = arrivals.iter().map(|(item, _)| *item).collect();
    assert_eq!(items, [0, 1, 2, 3, 4, 5]);
    // Two from the full bucket, then one every 100 ms.
    let due = [ms(0), ms(0), ms(100), ms(200), ms(300), ms(400)];
    for ((_, at), due) in arrivals.iter().zip(due) {
        assert_at(start, *at, due);
    }
}

#[tokio::test(start_paused = true)]
async fn poll_ready_again_takes_no_second_token() {
    let bucket = TokenBucket::new(Rate::per_second(1), 3).unwrap();
    let mut sink = bucket.throttle_sink(sink::drain::<u32>());
    for _ in 0..3 {
        poll_fn(|cx| sink.poll_ready_unpin(cx)).await.unwrap();
    }
    assert_eq!(bucket.available(), 2);
    sink.start_send_unpin(1).unwrap();
    assert_eq!(bucket.stats().taken, 1);
}

#[tokio::test(start_paused = true)]
async fn an_inner_sink_not_ready_keeps_the_token_reserved() {
    let bucket = TokenBucket::new(Rate::per_second(1), 5).unwrap();
    // A channel with no buffer: the sender's one slot is full until the receiver reads.
    let (sender, mut receiver) = mpsc::channel::<u32>(0);
    let mut sink = bucket.throttle_sink(sender);
    // Not `send`: its flush would wait for the receiver.
    poll_fn(|cx| sink.poll_ready_unpin(cx)).await.unwrap();
    sink.start_send_unpin(1).unwrap();
    assert_eq!(bucket.available(), 4);
    let mut ready = tokio_test::task::spawn(poll_fn(|cx| sink.poll_ready_unpin(cx)));
    tokio_test::assert_pending!(ready.poll());
    tokio_test::assert_pending!(ready.poll());
    // The token for item 2 is taken once, and held while the channel is full.
    assert_eq!(bucket.available(), 3);
    assert_eq!(receiver.next().await, Some(1));
    assert!(ready.is_woken());
    tokio_test::assert_ready_ok!(ready.poll());
    drop(ready);
    sink.start_send_unpin(2).unwrap();
    assert_eq!(bucket.stats().taken, 2);
    assert_eq!(receiver.next().await, Some(2));
}

#[tokio::test(start_paused = true)]
async fn a_throttled_sink_shares_the_fifo_queue_with_a_concurrent_take() {
    let bucket = empty_bucket(Rate::per_second(1), 5);
    let start = Instant::now();
    let (sender, receiver) = mpsc::unbounded();
    let arrivals = record(receiver);
    let mut sink = bucket.throttle_sink(sender);
    let producer = tokio::spawn(async move {
        for item in 0..3u32 {
            sink.send(item).await.unwrap();
        }
    });
    yield_until(|| bucket.queued() == 1).await;
    let other = bucket.clone();
    let take = tokio::spawn(async move {
        other.take(3).await.unwrap();
        Instant::now()
    });
    yield_until(|| bucket.queued() == 2).await;
    producer.await.unwrap();
    // Item 0 queued first (1 s); the take of 3 next (4 s); items 1 and 2 queue behind it.
    assert_at(start, take.await.unwrap(), secs(4));
    let arrivals = arrivals.await.unwrap();
    let due = [secs(1), secs(5), secs(6)];
    assert_eq!(arrivals.len(), 3);
    for ((_, at), due) in arrivals.iter().zip(due) {
        assert_at(start, *at, due);
    }
}

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_closed_bucket_is_a_bucket_error() {
    let bucket = TokenBucket::new(Rate::per_second(1), 5).unwrap();
    let (sender, receiver) = mpsc::unbounded::<u32>();
    let mut sink = bucket.throttle_sink(sender);
    sink.send(1).await.unwrap();
    bucket.close();
    assert_eq!(
        sink.send(2).await,
        Err(ThrottleSinkError::Bucket(TakeError::Closed))
    );
    drop(sink);
    assert_eq!(receiver.collect::<Vec<_>>().await, [1]);
}

#[tokio::test(start_paused = true)]
async fn closing_while_poll_ready_waits_is_a_bucket_error_at_that_instant() {
    let bucket = empty_bucket(Rate::per_second(1), 5);
    let start = Instant::now();
    let closer = bucket.clone();
    tokio::spawn(async move {
        tokio::time::sleep(ms(300)).await;
        closer.close();
    });
    let mut sink = bucket.throttle_sink(sink::drain::<u32>());
    assert_eq!(
        sink.send(1).await,
        Err(ThrottleSinkError::Bucket(TakeError::Closed))
    );
    assert_now(start, ms(300));
}

#[test]
fn outside_a_runtime_a_wait_is_a_no_runtime_error() {
    let bucket = common::bucket_with(Rate::per_second(1), 1, 1);
    let mut sink = bucket.throttle_sink(sink::drain::<u32>());
    assert_eq!(block_on(sink.send(1)), Ok(()));
    assert_eq!(
        block_on(sink.send(2)),
        Err(ThrottleSinkError::Bucket(TakeError::NoRuntime))
    );
}

#[tokio::test(start_paused = true)]
async fn the_inner_sinks_errors_pass_through_and_its_unused_token_goes_back() {
    let bucket = TokenBucket::new(Rate::per_hour(1), 5).unwrap();
    let (sender, receiver) = mpsc::unbounded::<u32>();
    drop(receiver);
    let mut sink = bucket.throttle_sink(sender);
    match sink.send(1).await {
        Err(ThrottleSinkError::Sink(error)) => assert!(error.is_disconnected()),
        other => panic!("expected the channel's error, got {other:?}"),
    }
    // poll_ready took the token before the channel refused; it was never spent.
    assert_eq!(bucket.available(), 4);
    drop(sink);
    assert_eq!(bucket.available(), 5);
}

#[tokio::test(start_paused = true)]
async fn a_failed_start_send_refunds_the_token_it_would_have_spent() {
    let bucket = TokenBucket::new(Rate::per_hour(1), 5).unwrap();
    let (sender, receiver) = mpsc::unbounded::<u32>();
    let mut sink = bucket.throttle_sink(sender);
    poll_fn(|cx| sink.poll_ready_unpin(cx)).await.unwrap();
    assert_eq!(bucket.available(), 4);
    // The receiver goes between poll_ready and start_send: the item is refused.
    drop(receiver);
    match sink.start_send_unpin(1) {
        Err(ThrottleSinkError::Sink(error)) => assert!(error.is_disconnected()),
        other => panic!("expected the channel's error, got {other:?}"),
    }
    let stats = bucket.stats();
    assert_eq!((stats.available, stats.refunded), (5, 1));
    // The token was spent on the attempt: it is not reserved any more, nor refunded twice.
    assert_eq!(sink.start_send_unpin(2), Err(ThrottleSinkError::NotReady));
    drop(sink);
    assert_eq!(bucket.stats().refunded, 1);
}

#[tokio::test(start_paused = true)]
async fn a_failed_start_send_refunds_in_time_for_the_next_waiter() {
    let bucket = empty_bucket(Rate::per_second(1), 1);
    let start = Instant::now();
    let (sender, receiver) = mpsc::unbounded::<u32>();
    let mut sink = bucket.throttle_sink(sender);
    poll_fn(|cx| sink.poll_ready_unpin(cx)).await.unwrap();
    assert_now(start, secs(1));
    let other = bucket.clone();
    let take = tokio::spawn(async move {
        other.take(1).await.unwrap();
        Instant::now()
    });
    yield_until(|| bucket.queued() == 1).await;
    tokio::time::sleep(ms(300)).await;
    drop(receiver);
    assert!(sink.start_send_unpin(1).is_err());
    // The refunded token serves the queued take at once, not at 2 s.
    assert_at(start, take.await.unwrap(), ms(1300));
}

#[tokio::test(start_paused = true)]
async fn start_send_without_poll_ready_is_refused() {
    let bucket = TokenBucket::new(Rate::per_second(1), 5).unwrap();
    let (sender, receiver) = mpsc::unbounded::<u32>();
    let mut sink = bucket.throttle_sink(sender);
    assert_eq!(sink.start_send_unpin(1), Err(ThrottleSinkError::NotReady));
    // A token is spent once only.
    poll_fn(|cx| sink.poll_ready_unpin(cx)).await.unwrap();
    sink.start_send_unpin(2).unwrap();
    assert_eq!(sink.start_send_unpin(3), Err(ThrottleSinkError::NotReady));
    drop(sink);
    assert_eq!(receiver.collect::<Vec<_>>().await, [2]);
    assert_eq!(bucket.stats().taken, 1);
}

#[test]
fn the_errors_say_what_happened() {
    let closed: ThrottleSinkError<std::io::Error> = ThrottleSinkError::Bucket(TakeError::Closed);
    assert_eq!(
        closed.to_string(),
        "the token bucket refused to throttle the sink: the token bucket is closed"
    );
    let failed = ThrottleSinkError::Sink(std::io::Error::other("disk full"));
    assert_eq!(failed.to_string(), "the throttled sink failed: disk full");
    let not_ready: ThrottleSinkError<std::io::Error> = ThrottleSinkError::NotReady;
    assert!(not_ready
        .to_string()
        .contains("without a token reserved by poll_ready"));
    let boxed: Box<dyn Error + Send + Sync> = Box::new(failed);
    assert!(boxed.to_string().contains("disk full"));
}

// ---------------------------------------------------------------------------------------
// Cancellation: dropping the sink loses no tokens
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn dropping_after_poll_ready_refunds_the_token() {
    let bucket = TokenBucket::new(Rate::per_hour(1), 1).unwrap();
    let mut sink = bucket.throttle_sink(sink::drain::<u32>());
    poll_fn(|cx| sink.poll_ready_unpin(cx)).await.unwrap();
    assert_eq!(bucket.available(), 0);
    drop(sink);
    let stats = bucket.stats();
    assert_eq!((stats.available, stats.refunded), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn dropping_while_poll_ready_waits_loses_no_tokens() {
    let bucket = empty_bucket(Rate::per_second(1), 5);
    let mut sink = bucket.throttle_sink(sink::drain::<u32>());
    assert!(poll!(poll_fn(|cx| sink.poll_ready_unpin(cx))).is_pending());
    // Its token is granted at 1 s, but the sink is never polled again.
    tokio::time::sleep(secs(3)).await;
    drop(sink);
    let stats = bucket.stats();
    assert_eq!((stats.available, stats.taken, stats.queued), (3, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn closing_refunds_a_reserved_token_and_closes_the_inner_sink() {
    let bucket = TokenBucket::new(Rate::per_hour(1), 2).unwrap();
    let (sender, receiver) = mpsc::unbounded::<u32>();
    let mut sink = bucket.throttle_sink(sender);
    poll_fn(|cx| sink.poll_ready_unpin(cx)).await.unwrap();
    assert_eq!(bucket.available(), 1);
    sink.close().await.unwrap();
    assert_eq!(bucket.available(), 2);
    assert!(sink.get_ref().is_closed());
    assert_eq!(receiver.collect::<Vec<u32>>().await, Vec::<u32>::new());
}

#[tokio::test(start_paused = true)]
async fn into_inner_refunds_a_reserved_token_and_returns_the_sink() {
    let bucket = TokenBucket::new(Rate::per_hour(1), 2).unwrap();
    let (sender, receiver) = mpsc::unbounded::<u32>();
    let mut sink = bucket.throttle_sink(sender);
    sink.send(1).await.unwrap();
    poll_fn(|cx| sink.poll_ready_unpin(cx)).await.unwrap();
    assert_eq!(bucket.available(), 0);
    let mut sender = sink.into_inner();
    assert_eq!(bucket.available(), 1);
    sender.send(2).await.unwrap();
    drop(sender);
    assert_eq!(receiver.collect::<Vec<_>>().await, [1, 2]);
}

// ---------------------------------------------------------------------------------------
// Accessors and types
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn the_accessors_reach_the_inner_sink() {
    let bucket = TokenBucket::new(Rate::per_hour(1), 2).unwrap();
    let (sender, receiver) = mpsc::unbounded::<u32>();
    let mut sink = bucket.throttle_sink(sender);
    assert!(!sink.get_ref().is_closed());
    // Sending through the inner sink directly bypasses the throttle.
    sink.get_mut().unbounded_send(1).unwrap();
    let mut pinned = pin!(sink);
    pinned.as_mut().get_pin_mut().send(2).await.unwrap();
    pinned.send(3).await.unwrap();
    assert_eq!(bucket.stats().taken, 1);
    pinned.as_mut().get_pin_mut().close_channel();
    assert_eq!(receiver.collect::<Vec<_>>().await, [1, 2, 3]);
}

/// Compile-time assertions: these only compile if the bounds hold.
fn assert_unpin_send_static<T: Unpin + Send + 'static>() {}
fn assert_sink<T: Sink<u32, Error = ThrottleSinkError<mpsc::SendError>>>() {}

const _: fn() = assert_unpin_send_static::<ThrottleSink<mpsc::UnboundedSender<u32>>>;
const _: fn() = assert_unpin_send_static::<ThrottleSink<sink::Drain<String>>>;
const _: fn() = assert_sink::<ThrottleSink<mpsc::Sender<u32>>>;
const _: fn() = assert_unpin_send_static::<ThrottleSinkError<mpsc::SendError>>;

#[test]
fn the_sink_has_a_debug_form() {
    let bucket = TokenBucket::new(Rate::per_second(1), 1).unwrap();
    let sink = bucket.throttle_sink(sink::drain::<u32>());
    assert!(format!("{sink:?}").starts_with("ThrottleSink"));
}
