//! Pieces and the queue limit: a wrapper alone never trips it, a piece that finds the
//! queue full fails, and streams and byte I/O pay by one installment rule.

use super::*;

/// Pieces are never larger than the queue limit, so a wrapper alone never trips it. (Sized
/// by the capacity alone, any read or write of more than 100 bytes that had to wait failed
/// with "the queue is full: 0 tokens are queued and the limit is 100".)
#[tokio::test(start_paused = true)]
async fn pieces_fit_the_queue_limit() {
    let bucket = TokenBucket::builder()
        .rate(Rate::per_second(1000))
        .capacity(1000)
        .initial(0)
        .queue_limit(100)
        .build()
        .unwrap();
    let data = pattern(1000);
    let start = Instant::now();
    let mut writer = bucket.limit_write(Vec::new());
    assert_eq!(writer.write(&data).await.unwrap(), 100);
    assert_now(start, ms(100));
    writer.write_all(&data[100..]).await.unwrap();
    assert_now(start, secs(1));
    assert!(writer.into_inner() == data);

    let mut reader = bucket.limit_read(&data[..]);
    let mut received = vec![0; 1000];
    assert_eq!(reader.read(&mut received).await.unwrap(), 100);
    assert_now(start, ms(1100));
    reader.read_exact(&mut received[100..]).await.unwrap();
    assert_now(start, secs(2));
    assert!(received == data);
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.refunded), (2000, 0));
}

/// The queue limit counts every waiter: a piece that would pass it because others are
/// queued fails with `QueueFull`, and a read keeps the piece it pulled.
#[tokio::test(start_paused = true)]
async fn a_piece_that_finds_the_queue_full_fails() {
    let bucket = TokenBucket::builder()
        .rate(Rate::per_second(1000))
        .capacity(1000)
        .initial(0)
        .queue_limit(100)
        .build()
        .unwrap();
    let mut other = tokio_test::task::spawn(bucket.take(60));
    assert_pending!(other.poll());
    let mut writer = bucket.limit_write(Vec::new());
    let error = writer.write(&[1; 50]).await.unwrap_err();
    let full = TakeError::QueueFull {
        queued: 60,
        limit: 100,
    };
    assert_take_error(
        &error,
        full,
        "the queue is full: 60 tokens are queued and the limit is 100",
    );
    let data = pattern(50);
    let mut reader = bucket.limit_read(&data[..]);
    let mut buf = [0; 50];
    let error = reader.read(&mut buf).await.unwrap_err();
    assert_take_error(&error, full, "the queue is full");
    assert_eq!(reader.buffered(), &data[..]);
    // Once the queue has room, the piece is paid for and delivered.
    drop(other);
    let start = Instant::now();
    assert_eq!(reader.read(&mut buf).await.unwrap(), 50);
    assert_now(start, ms(50));
    assert_eq!(buf, data[..]);
    assert_eq!(bucket.stats().taken, 50);
}

/// With a queue limit of zero nothing may queue: a piece of `min(buffer, capacity)` bytes
/// is served if its tokens are there at once, and otherwise fails with `QueueFull`. A read
/// keeps the bytes it pulled for the next read, which pays for them once.
#[tokio::test(start_paused = true)]
async fn with_a_queue_limit_of_zero_a_piece_that_must_wait_fails() {
    let bucket = TokenBucket::builder()
        .rate(Rate::per_second(1000))
        .capacity(1000)
        .queue_limit(0)
        .build()
        .unwrap();
    let full = TakeError::QueueFull {
        queued: 0,
        limit: 0,
    };
    let start = Instant::now();
    let mut writer = bucket.limit_write(Vec::new());
    assert_eq!(writer.write(&[1; 1000]).await.unwrap(), 1000);
    let error = writer.write(&[2; 10]).await.unwrap_err();
    assert_take_error(
        &error,
        full,
        "the queue is full: 0 tokens are queued and the limit is 0",
    );
    assert_eq!(writer.get_ref().len(), 1000);

    let data = pattern(10);
    let mut reader = bucket.limit_read(&data[..]);
    let mut buf = [0; 10];
    let error = reader.read(&mut buf).await.unwrap_err();
    assert_take_error(&error, full, "the queue is full");
    assert_eq!(reader.buffered(), &data[..]);
    assert_now(start, ms(0));
    tokio::time::sleep(ms(10)).await;
    assert_eq!(reader.read(&mut buf).await.unwrap(), 10);
    assert_eq!(buf, data[..]);
    assert!(reader.buffered().is_empty());
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.refunded), (1010, 0));
}

/// Streams and byte I/O pay by one installment rule (`min(cost, capacity, queue limit)`,
/// a limit of 0 bounding nothing): with the same bucket, an item and a write of the same
/// cost get the same answer. At a queue limit of 0 a cost the bucket holds is served at
/// once in one `take`, and one it does not hold is refused before it takes a token.
#[tokio::test(start_paused = true)]
async fn streams_and_byte_io_pay_by_one_installment_rule_at_queue_limit_zero() {
    use futures::StreamExt;

    let full = TakeError::QueueFull {
        queued: 0,
        limit: 0,
    };
    for cost in [3u64, 4] {
        let fresh = || {
            TokenBucket::builder()
                .rate(Rate::per_hour(1))
                .capacity(10)
                .initial(3)
                .queue_limit(0)
                .build()
                .unwrap()
        };
        let bucket = fresh();
        let mut items = bucket.throttle_by(futures::stream::iter([cost]), |&cost| cost);
        let item = items.next().await;
        let stream_stats = bucket.stats();

        let bucket = fresh();
        let mut writer = bucket.limit_write(Vec::new());
        let cost_bytes = usize::try_from(cost).unwrap();
        let written = writer.write(&vec![7; cost_bytes]).await;
        let write_stats = bucket.stats();

        if cost <= 3 {
            assert_eq!(item, Some(cost));
            assert_eq!(written.unwrap(), cost_bytes);
        } else {
            assert_eq!(item, None);
            assert_eq!(items.end_reason(), Some(full));
            assert_take_error(&written.unwrap_err(), full, "the queue is full");
        }
        for stats in [stream_stats, write_stats] {
            let taken = if cost <= 3 { cost } else { 0 };
            assert_eq!((stats.taken, stats.refunded), (taken, 0), "cost {cost}");
        }
    }
}
