#![cfg(feature = "io")]
//! Byte I/O (feature `io`): one token per byte, in pieces no larger than the buffer, the
//! capacity or the queue limit, on tokio's paused clock. Reads read, then pay, then
//! deliver; writes pay, then write, then refund what did not move.

mod common;

// Pieces and the queue limit.
#[path = "io/queue_limit.rs"]
mod queue_limit;

// Watching a copy's progress.
#[path = "io/progress.rs"]
mod progress;

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use common::{assert_at, assert_now, bucket_with, empty_bucket, ms, secs, yield_until};
use token_bucket::io::{LimitRead, LimitWrite, Progress, MAX_READ_PIECE};
use token_bucket::{Rate, TakeError, TokenBucket};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_test::{assert_pending, assert_ready};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// 64 KiB a second, in bursts of 64 KiB, starting empty.
fn sixty_four_kib_per_second() -> TokenBucket {
    empty_bucket(Rate::per_second(64 * KIB as u64), 64 * KIB as u64)
}

/// A deterministic pseudo-random byte pattern (xorshift), so that a byte lost, duplicated
/// or moved shows up.
fn pattern(len: usize) -> Vec<u8> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 32) as u8
        })
        .collect()
}

/// Asserts that `error` is the io error the wrappers make of `expected`.
#[track_caller]
fn assert_take_error(error: &io::Error, expected: TakeError, mentions: &str) {
    assert_eq!(error.kind(), io::ErrorKind::Other);
    assert!(error.to_string().contains(mentions), "{error}");
    let source = error.get_ref().and_then(|e| e.downcast_ref::<TakeError>());
    assert_eq!(source, Some(&expected));
}

/// A writer that returns `Pending` on every other call (waking its task at once), then
/// accepts at most `accept` bytes: it makes the wrapper hold its reservation across
/// `Pending`, and write short.
struct Stubborn {
    written: Vec<u8>,
    accept: usize,
    refuse_next: bool,
    pendings: usize,
}

impl Stubborn {
    fn new(accept: usize) -> Stubborn {
        Stubborn {
            written: Vec::new(),
            accept,
            refuse_next: true,
            pendings: 0,
        }
    }
}

impl AsyncWrite for Stubborn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let refuse = self.refuse_next;
        self.refuse_next = !refuse;
        if refuse {
            self.pendings += 1;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let accepted = buf.len().min(self.accept);
        self.written.extend_from_slice(&buf[..accepted]);
        Poll::Ready(Ok(accepted))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A buggy writer that claims to have written one byte more than it was given.
struct Liar;

impl AsyncWrite for Liar {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(buf.len() + 1))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[test]
fn wrappers_are_send_static_and_unpin() {
    fn check<T: Send + Unpin + 'static>() {}
    check::<LimitRead<DuplexStream>>();
    check::<LimitWrite<DuplexStream>>();
    check::<LimitRead<&'static [u8]>>();
    check::<LimitWrite<Vec<u8>>>();
}

#[tokio::test(start_paused = true)]
async fn one_mib_is_written_at_64_kib_per_second_in_exactly_16_s() {
    let bucket = sixty_four_kib_per_second();
    let data = pattern(MIB);
    let start = Instant::now();
    let mut writer = bucket.limit_write(Vec::new());
    writer.write_all(&data).await.unwrap();
    assert_now(start, secs(16));
    assert!(writer.get_ref() == &data, "the bytes arrive intact");
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.refunded), (MIB as u64, 0));
}

#[tokio::test(start_paused = true)]
async fn one_mib_copied_into_a_limited_writer_takes_exactly_16_s() {
    let bucket = sixty_four_kib_per_second();
    let data = pattern(MIB);
    let start = Instant::now();
    let mut writer = bucket.limit_write(Vec::new());
    let copied = tokio::io::copy(&mut &data[..], &mut writer).await.unwrap();
    assert_now(start, secs(16));
    assert_eq!(copied, MIB as u64);
    assert_eq!(writer.bytes_written(), MIB as u64);
    assert!(writer.into_inner() == data);
    assert_eq!(bucket.stats().taken, MIB as u64);
}

#[tokio::test(start_paused = true)]
async fn one_mib_is_read_at_64_kib_per_second_in_exactly_16_s() {
    let bucket = sixty_four_kib_per_second();
    let data = pattern(MIB);
    let start = Instant::now();
    let mut reader = bucket.limit_read(&data[..]);
    let mut received = vec![0; MIB];
    reader.read_exact(&mut received).await.unwrap();
    assert_now(start, secs(16));
    assert!(received == data, "the bytes arrive intact");
    // The end of the stream costs nothing.
    assert_eq!(reader.read(&mut [0; 1]).await.unwrap(), 0);
    assert_now(start, secs(16));
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.refunded), (MIB as u64, 0));
}

/// `tokio::io::copy` reads in 8 KiB pieces; the read that finds the end of the stream
/// pays nothing.
#[tokio::test(start_paused = true)]
async fn one_mib_copied_from_a_limited_reader_takes_exactly_16_s() {
    let bucket = sixty_four_kib_per_second();
    let data = pattern(MIB);
    let start = Instant::now();
    let mut reader = bucket.limit_read(&data[..]);
    let mut received = Vec::new();
    let copied = tokio::io::copy(&mut reader, &mut received).await.unwrap();
    assert_now(start, secs(16));
    assert_eq!(copied, MIB as u64);
    assert_eq!(reader.bytes_read(), MIB as u64);
    assert!(received == data);
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.refunded), (MIB as u64, 0));
    assert_eq!(stats.available, 0);
}

/// `read_to_end` offers spare room on its last read, which finds the end of the stream and
/// pays nothing.
#[tokio::test(start_paused = true)]
async fn one_mib_read_to_end_takes_exactly_16_s() {
    let bucket = sixty_four_kib_per_second();
    let data = pattern(MIB);
    let start = Instant::now();
    let mut reader = bucket.limit_read(&data[..]);
    let mut received = Vec::new();
    reader.read_to_end(&mut received).await.unwrap();
    assert_now(start, secs(16));
    assert!(received == data);
    assert_eq!(reader.bytes_read(), MIB as u64);
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.refunded), (MIB as u64, 0));
    assert_eq!(stats.available, 0);
}

/// A source that gives less than the buffer per read (a duplex holding 16 KiB, read with
/// a 64 KiB buffer): each read pays for the 16 KiB that came, no more, so the bytes keep to
/// the ideal schedule (16 KiB every 250 ms) and finding the end costs nothing.
#[tokio::test(start_paused = true)]
async fn a_source_that_gives_less_than_a_piece_keeps_to_the_schedule() {
    let bucket = sixty_four_kib_per_second();
    let data = pattern(MIB);
    let (mut source, sink) = tokio::io::duplex(16 * KIB);
    let sent = data.clone();
    let writer = tokio::spawn(async move { source.write_all(&sent).await });
    let start = Instant::now();
    let mut reader = bucket.limit_read(sink);
    let mut buf = vec![0; 64 * KIB];
    let mut received = Vec::new();
    let mut reads = 0;
    while received.len() < MIB {
        let read = reader.read(&mut buf).await.unwrap();
        assert_eq!(read, 16 * KIB);
        received.extend_from_slice(&buf[..read]);
        reads += 1;
        // One piece every 250 ms.
        assert_now(start, ms(250 * reads));
    }
    assert_now(start, secs(16));
    assert!(received == data, "the bytes arrive intact");
    writer.await.unwrap().unwrap();
    assert_eq!(reader.read(&mut buf).await.unwrap(), 0);
    assert_now(start, secs(16));
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.refunded), (MIB as u64, 0));
}

/// Every buffer size reads exact bytes, in pieces no larger than the buffer or the
/// capacity, and the last byte arrives exactly when its token accrues.
#[tokio::test(start_paused = true)]
async fn reads_of_every_buffer_size_deliver_exact_bytes() {
    const LEN: usize = 256 * KIB + 3;
    let data = pattern(LEN);
    for size in [1, 7, 4096, 64 * KIB, 64 * KIB + 1, 100_000, MIB, 2 * MIB] {
        let bucket = sixty_four_kib_per_second();
        let start = Instant::now();
        let mut reader = bucket.limit_read(&data[..]);
        let mut buf = vec![0; size];
        let mut received = Vec::with_capacity(LEN);
        while received.len() < LEN {
            // Ask for no more than is left, so that no piece is paid for in vain.
            let want = size.min(LEN - received.len());
            let read = reader.read(&mut buf[..want]).await.unwrap();
            assert!(
                read > 0 && read <= want.min(64 * KIB),
                "size {size}: read {read}"
            );
            received.extend_from_slice(&buf[..read]);
        }
        // LEN tokens at 64 KiB/s: 4 s and 3/65536 s (46 µs).
        assert_now(start, secs(4));
        assert!(received == data, "size {size}");
        let before_end = bucket.stats();
        assert_eq!(before_end.taken, LEN as u64, "size {size}");
        assert_eq!(before_end.refunded, 0, "size {size}");
        assert_eq!(reader.read(&mut buf).await.unwrap(), 0, "size {size}");
        assert_now(start, secs(4));
        assert_eq!(
            bucket.stats(),
            before_end,
            "size {size}: the end costs nothing"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn reads_into_a_partly_filled_uninitialised_buffer_advance_it_exactly() {
    let bucket = bucket_with(Rate::per_second(10), 10, 10);
    let mut reader = bucket.limit_read(&b"0123456789abcdefghij"[..]);
    // `read_buf` offers uninitialised spare capacity: 64 bytes, of which 10 are paid.
    let mut received = Vec::with_capacity(64);
    received.extend_from_slice(b">>");
    assert_eq!(reader.read_buf(&mut received).await.unwrap(), 10);
    assert_eq!(received, b">>0123456789");
    let start = Instant::now();
    assert_eq!(reader.read_buf(&mut received).await.unwrap(), 10);
    assert_now(start, secs(1));
    assert_eq!(received, b">>0123456789abcdefghij");
}

#[tokio::test(start_paused = true)]
async fn a_reader_and_a_writer_on_one_bucket_share_its_budget() {
    const HALF: usize = 512 * KIB;
    let bucket = sixty_four_kib_per_second();
    let data = pattern(2 * HALF);
    let start = Instant::now();
    let reading = tokio::spawn({
        let mut reader = bucket.limit_read(io::Cursor::new(data[..HALF].to_vec()));
        async move {
            let mut received = vec![0; HALF];
            reader.read_exact(&mut received).await.unwrap();
            (Instant::now(), received)
        }
    });
    let writing = tokio::spawn({
        let mut writer = bucket.limit_write(Vec::new());
        let sent = data[HALF..].to_vec();
        async move {
            writer.write_all(&sent).await.unwrap();
            (Instant::now(), writer.into_inner())
        }
    });
    let (read_at, received) = reading.await.unwrap();
    let (written_at, written) = writing.await.unwrap();
    assert!(received == data[..HALF] && written == data[HALF..]);
    // Alone, each would have taken 8 s. Sharing, their 64 KiB pieces alternate in the
    // queue: the reader's last is granted at 15 s, the writer's at 16 s.
    assert_at(start, read_at, secs(15));
    assert_at(start, written_at, secs(16));
    assert_eq!(bucket.stats().taken, 2 * HALF as u64);
}

#[tokio::test(start_paused = true)]
async fn a_closed_bucket_fails_reads_and_no_byte_is_lost() {
    let bucket = bucket_with(Rate::per_second(1), 10, 10);
    let data = pattern(100);
    let mut reader = bucket.limit_read(&data[..]);
    let mut buf = [0; 64];
    assert_eq!(reader.read(&mut buf).await.unwrap(), 10);
    assert_eq!(buf[..10], data[..10]);
    {
        // The next piece is read, then waits for its tokens.
        let mut read = tokio_test::task::spawn(reader.read(&mut buf));
        assert_pending!(read.poll());
        assert_eq!(bucket.queued(), 1);
        bucket.close();
        assert!(read.is_woken());
        let error = assert_ready!(read.poll()).unwrap_err();
        assert_take_error(&error, TakeError::Closed, "closed");
    }
    // The piece stays with the wrapper, unpaid, and the inner reader is not read again.
    assert_eq!(reader.buffered(), &data[10..20]);
    let error = reader.read(&mut buf).await.unwrap_err();
    assert_take_error(&error, TakeError::Closed, "closed");
    let (rest, unread) = reader.into_parts();
    assert_eq!((unread.as_slice(), rest), (&data[10..20], &data[20..]));
    assert_eq!(bucket.stats().taken, 10);
    // A reader wrapped after the close reads nothing from its inner reader.
    let mut reader = bucket.limit_read(&data[..]);
    let error = reader.read(&mut buf).await.unwrap_err();
    assert_take_error(&error, TakeError::Closed, "closed");
    assert_eq!(reader.into_inner(), &data[..]);
}

#[tokio::test(start_paused = true)]
async fn a_closed_bucket_fails_writes_and_nothing_more_is_written() {
    let bucket = bucket_with(Rate::per_second(1), 10, 10);
    let mut writer = bucket.limit_write(Vec::new());
    assert_eq!(writer.write(b"0123456789abc").await.unwrap(), 10);
    {
        let mut write = tokio_test::task::spawn(writer.write(b"abc"));
        assert_pending!(write.poll());
        bucket.close();
        let error = assert_ready!(write.poll()).unwrap_err();
        assert_take_error(&error, TakeError::Closed, "closed");
    }
    let error = writer.write_all(b"abc").await.unwrap_err();
    assert_take_error(&error, TakeError::Closed, "closed");
    // Flushing and shutting down pay nothing, so they still work.
    writer.flush().await.unwrap();
    writer.shutdown().await.unwrap();
    assert_eq!(writer.into_inner(), b"0123456789");
}

/// Outside any tokio runtime a `take` that must wait cannot be served: an io error rather
/// than a panic or a hang. The reader had read its piece before it failed to pay for it: the
/// bytes stay with the wrapper.
#[test]
fn outside_a_runtime_a_read_or_write_that_must_wait_is_an_io_error() {
    let bucket = empty_bucket(Rate::per_second(1), 10);
    let mut reader = bucket.limit_read(&b"abc"[..]);
    let error = futures::executor::block_on(reader.read(&mut [0; 3])).unwrap_err();
    assert_take_error(&error, TakeError::NoRuntime, "runtime");
    assert_eq!(reader.buffered(), b"abc");
    assert_eq!(reader.into_parts(), (&b""[..], b"abc".to_vec()));
    let mut writer = bucket.limit_write(Vec::new());
    let error = futures::executor::block_on(writer.write(b"abc")).unwrap_err();
    assert_take_error(&error, TakeError::NoRuntime, "runtime");
    assert!(writer.into_inner().is_empty());
    assert_eq!(bucket.queued(), 0);
}

#[tokio::test(start_paused = true)]
async fn dropping_a_wrapper_whose_reservation_is_queued_takes_nothing() {
    let bucket = empty_bucket(Rate::per_second(10), 100);
    let data = pattern(100);
    let mut reader = bucket.limit_read(&data[..]);
    let mut buf = [0; 50];
    assert_pending!(tokio_test::task::spawn(reader.read(&mut buf)).poll());
    assert_eq!(bucket.queued(), 1);
    tokio::time::sleep(secs(2)).await;
    drop(reader);
    assert_eq!(bucket.queued(), 0);
    let stats = bucket.stats();
    assert_eq!((stats.available, stats.taken, stats.refunded), (20, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn dropping_a_wrapper_whose_reservation_was_granted_unseen_gives_it_back() {
    let bucket = empty_bucket(Rate::per_second(10), 100);
    let mut writer = bucket.limit_write(Vec::new());
    assert_pending!(tokio_test::task::spawn(writer.write(&[1; 50])).poll());
    // Granted at 5 s, to a wrapper nobody polls any more.
    tokio::time::sleep(secs(6)).await;
    assert_eq!(bucket.available(), 10);
    drop(writer);
    let stats = bucket.stats();
    assert_eq!((stats.available, stats.taken, stats.queued), (60, 0, 0));
}

/// A wrapper waiting for its inner stream holds no tokens: a reader has not paid yet, and a
/// writer gives its piece back as soon as the inner writer says it is not ready.
#[tokio::test(start_paused = true)]
async fn wrappers_waiting_on_their_inner_stream_hold_no_tokens() {
    let bucket = bucket_with(Rate::per_second(10), 100, 100);
    // Nothing was written to the other end: the inner read is pending, and nothing is paid.
    let (_source, sink) = tokio::io::duplex(64);
    let mut reader = bucket.limit_read(sink);
    let mut buf = [0; 50];
    assert_pending!(tokio_test::task::spawn(reader.read(&mut buf)).poll());
    let stats = bucket.stats();
    assert_eq!((stats.available, stats.taken, stats.queued), (100, 0, 0));
    drop(reader);
    assert_eq!(bucket.stats(), stats);

    // A writer whose inner writer is full.
    let (other_end, source) = tokio::io::duplex(1);
    let mut writer = bucket.limit_write(source);
    assert_eq!(writer.write(b"ab").await.unwrap(), 1);
    assert_pending!(tokio_test::task::spawn(writer.write(b"b")).poll());
    // 2 tokens for "ab", 1 refunded (1 byte written); 1 for "b", refunded on `Pending`.
    let stats = bucket.stats();
    assert_eq!((stats.available, stats.taken, stats.refunded), (99, 3, 2));
    let _source: DuplexStream = writer.into_inner();
    assert_eq!(bucket.stats(), stats);
    drop(other_end);
}

#[tokio::test(start_paused = true)]
async fn a_read_cancelled_while_it_waits_keeps_its_place_and_is_not_charged_twice() {
    let bucket = empty_bucket(Rate::per_second(10), 100);
    let data = pattern(100);
    let start = Instant::now();
    let mut reader = bucket.limit_read(&data[..]);
    let mut buf = [0; 50];
    tokio::select! {
        _ = reader.read(&mut buf) => panic!("50 bytes at 10/s take 5 s"),
        _ = tokio::time::sleep(secs(2)) => {}
    }
    assert_eq!(bucket.queued(), 1, "the reservation stays queued");
    assert_eq!(reader.read(&mut buf).await.unwrap(), 50);
    assert_now(start, secs(5));
    assert_eq!(buf[..], data[..50]);
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.refunded), (50, 0));
}

#[tokio::test(start_paused = true)]
async fn the_end_of_a_stream_costs_nothing() {
    let bucket = empty_bucket(Rate::per_second(100), 100);
    let start = Instant::now();
    let mut reader = bucket.limit_read(&b""[..]);
    let mut buf = [0; 50];
    // Read first, pay after: nothing came, so nothing is paid and nothing waits.
    assert_eq!(reader.read(&mut buf).await.unwrap(), 0);
    assert_eq!(reader.read(&mut buf).await.unwrap(), 0);
    assert_now(start, ms(0));
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.refunded, stats.queued), (0, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_pending_reader_pays_only_once_data_comes() {
    let bucket = bucket_with(Rate::per_hour(1), 100, 100);
    let (mut source, sink) = tokio::io::duplex(64);
    let mut reader = bucket.limit_read(sink);
    let mut buf = [0; 50];
    {
        let mut read = tokio_test::task::spawn(reader.read(&mut buf));
        // Nothing to read yet: nothing is paid and nothing is queued.
        assert_pending!(read.poll());
        assert_eq!((bucket.available(), bucket.queued()), (100, 0));
        source.write_all(&[9; 30]).await.unwrap();
        assert!(read.is_woken());
        assert_eq!(assert_ready!(read.poll()).unwrap(), 30);
    }
    assert_eq!(buf[..30], [9; 30]);
    let stats = bucket.stats();
    assert_eq!((stats.available, stats.taken, stats.refunded), (70, 30, 0));
    assert_eq!(stats.queued, 0);
}

#[tokio::test(start_paused = true)]
async fn a_short_read_pays_only_for_what_it_read() {
    let bucket = bucket_with(Rate::per_second(10), 100, 100);
    let (mut source, sink) = tokio::io::duplex(64);
    source.write_all(b"abc").await.unwrap();
    let mut reader = bucket.limit_read(sink);
    let mut buf = [0; 80];
    assert_eq!(reader.read(&mut buf).await.unwrap(), 3);
    assert_eq!(&buf[..3], b"abc");
    let stats = bucket.stats();
    assert_eq!((stats.available, stats.taken, stats.refunded), (97, 3, 0));
}

/// A writer that is not ready gives its piece back at once and takes it again when woken:
/// each piece is taken twice and refunded once, so each byte is paid for once, and (the
/// tokens being back in the bucket) the second take costs no time.
#[tokio::test(start_paused = true)]
async fn a_pending_writer_refunds_its_piece_and_never_pays_twice() {
    let bucket = empty_bucket(Rate::per_second(1000), 100);
    let data = pattern(1000);
    let start = Instant::now();
    let mut writer = bucket.limit_write(Stubborn::new(usize::MAX));
    writer.write_all(&data).await.unwrap();
    // Ten pieces of 100, each refunded across one `Pending`.
    assert_now(start, secs(1));
    assert_eq!(writer.get_ref().pendings, 10);
    assert!(writer.get_ref().written == data);
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.refunded), (2000, 1000));
}

#[tokio::test(start_paused = true)]
async fn a_short_write_refunds_the_rest() {
    let bucket = empty_bucket(Rate::per_second(1000), 100);
    let data = pattern(1000);
    let mut writer = bucket.limit_write(Stubborn::new(30));
    // A `Pending` counts nothing; a short write counts what was written.
    assert_eq!(writer.write(&data).await.unwrap(), 30);
    assert_eq!(writer.get_ref().pendings, 1);
    assert_eq!(writer.bytes_written(), 30);
    writer.write_all(&data[30..]).await.unwrap();
    assert!(writer.get_ref().written == data);
    assert_eq!(writer.bytes_written(), 1000);
    let stats = bucket.stats();
    assert_eq!(stats.taken - stats.refunded, 1000);
}

/// A write dropped while its `take` waits leaves the `take` with the wrapper, and the next
/// `poll_write` finishes it whatever its buffer: a shorter one spends part of it and
/// refunds the rest, a longer one spends it all; neither queues again.
#[tokio::test(start_paused = true)]
async fn a_write_retried_with_another_buffer_spends_the_take_in_flight() {
    let bucket = empty_bucket(Rate::per_second(10), 1000);
    let start = Instant::now();
    let mut writer = bucket.limit_write(Vec::new());
    assert_pending!(tokio_test::task::spawn(writer.write(&[1; 100])).poll());
    assert_eq!(bucket.queued(), 1);
    assert_eq!(writer.write(&[2; 30]).await.unwrap(), 30);
    assert_now(start, secs(10));
    assert_eq!(bucket.available(), 70);

    // 100 tokens, of which 70 are there: 3 s more.
    assert_pending!(tokio_test::task::spawn(writer.write(&[3; 100])).poll());
    assert_eq!(writer.write(&[4; 500]).await.unwrap(), 100);
    assert_now(start, secs(13));
    assert_eq!(bucket.available(), 0);

    assert_eq!(bucket.queued(), 0);
    let mut expected = vec![2; 30];
    expected.extend_from_slice(&[4; 100]);
    assert_eq!(writer.get_ref(), &expected);
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.refunded), (200, 70));
}

#[tokio::test(start_paused = true)]
async fn shutting_down_gives_up_a_take_left_by_a_cancelled_write() {
    let bucket = empty_bucket(Rate::per_hour(1), 1000);
    let mut writer = bucket.limit_write(Vec::new());
    assert_pending!(tokio_test::task::spawn(writer.write(&[1; 100])).poll());
    assert_eq!(bucket.queued(), 1);
    writer.shutdown().await.unwrap();
    assert_eq!(bucket.queued(), 0);
    assert_eq!(bucket.stats().taken, 0);
    assert!(writer.get_ref().is_empty());
}

/// A real writer that is often full: a duplex of 64 bytes whose other end is read slowly.
/// A piece granted while the pipe is full goes back to the bucket at once and is taken
/// again when the pipe drains: the peer sets the pace, and every byte is paid exactly once.
#[tokio::test(start_paused = true)]
async fn a_slowly_drained_duplex_is_never_charged_twice() {
    const LEN: usize = 64 * 100;
    let bucket = empty_bucket(Rate::per_second(6400), 64);
    let data = pattern(LEN);
    let (source, mut sink) = tokio::io::duplex(64);
    let sent = data.clone();
    let mut writer = bucket.limit_write(source);
    let writing = tokio::spawn(async move {
        writer.write_all(&sent).await.unwrap();
        writer
    });
    let start = Instant::now();
    let mut received = Vec::new();
    let mut piece = [0; 64];
    for _ in 0..100 {
        // The bucket would allow a piece every 10 ms: the reader is the bottleneck.
        tokio::time::sleep(ms(20)).await;
        sink.read_exact(&mut piece).await.unwrap();
        received.extend_from_slice(&piece);
    }
    assert_now(start, secs(2));
    let writer = writing.await.unwrap();
    assert!(received == data);
    let stats = bucket.stats();
    assert_eq!(stats.taken - stats.refunded, LEN as u64);
    drop(writer);
    // The writer finished its last piece before it was dropped: nothing was held.
    assert_eq!(bucket.stats(), stats);
}

#[tokio::test(start_paused = true)]
async fn zero_length_operations_take_no_tokens() {
    let bucket = empty_bucket(Rate::per_hour(1), 10);
    let start = Instant::now();
    let mut reader = bucket.limit_read(&b"abc"[..]);
    assert_eq!(reader.read(&mut []).await.unwrap(), 0);
    let mut writer = bucket.limit_write(Vec::new());
    assert_eq!(writer.write(&[]).await.unwrap(), 0);
    writer.write_all(&[]).await.unwrap();
    writer.flush().await.unwrap();
    writer.shutdown().await.unwrap();
    assert_now(start, ms(0));
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.refunded, stats.queued), (0, 0, 0));
    assert_eq!(reader.into_inner(), b"abc");
}

/// Lowering the capacity below a queued `take` does not fail the read: it is made again at
/// the new capacity, and the rest of the piece already read is paid for in smaller parts.
#[tokio::test(start_paused = true)]
async fn a_take_above_a_lowered_capacity_is_made_again_smaller() {
    let bucket = empty_bucket(Rate::per_second(10), 100);
    let data = pattern(100);
    let start = Instant::now();
    let mut reader = bucket.limit_read(&data[..]);
    let lower = async {
        tokio::time::sleep(ms(500)).await;
        bucket.set_capacity(10).unwrap();
    };
    let mut buf = [0; 100];
    let (read, ()) = tokio::join!(reader.read(&mut buf), lower);
    // 5 tokens had accrued at 500 ms; 5 more take another 500 ms.
    assert_eq!(read.unwrap(), 10);
    assert_now(start, secs(1));
    assert_eq!(buf[..10], data[..10]);
    assert_eq!(reader.buffered(), &data[10..]);
    reader.read_exact(&mut buf[10..]).await.unwrap();
    assert_now(start, secs(10));
    assert_eq!(buf, data[..]);
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.refunded), (100, 0));
}

#[tokio::test(start_paused = true)]
async fn the_other_direction_passes_through_unthrottled() {
    let bucket = empty_bucket(Rate::per_hour(1), 10);
    let (mut near, far) = tokio::io::duplex(64);
    let mut reader = bucket.limit_read(far);
    reader.write_all(b"unthrottled").await.unwrap();
    let mut buf = [0; 11];
    near.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"unthrottled");

    let (mut near, far) = tokio::io::duplex(64);
    let mut writer = bucket.limit_write(far);
    near.write_all(b"free").await.unwrap();
    let mut buf = [0; 4];
    writer.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"free");
    assert_eq!(bucket.stats().taken, 0);
}

/// Many readers and writers on one bucket: every byte arrives, each is paid exactly once,
/// and together they get the bucket's rate.
#[tokio::test(start_paused = true)]
async fn many_wrappers_share_the_rate_exactly() {
    let bucket = empty_bucket(Rate::per_second(1000), 100);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..8usize {
        let len = 500 + 125 * i;
        let data = pattern(len);
        let bucket = bucket.clone();
        tasks.push(tokio::spawn(async move {
            if i % 2 == 0 {
                let mut reader = bucket.limit_read(&data[..]);
                let mut received = vec![0; len];
                reader.read_exact(&mut received).await.unwrap();
                assert!(received == data);
            } else {
                let mut writer = bucket.limit_write(Vec::new());
                writer.write_all(&data).await.unwrap();
                assert!(writer.into_inner() == data);
            }
            len as u64
        }));
    }
    yield_until(|| bucket.queued() == 8).await;
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    // 8 * 500 + 125 * 28 = 7500 bytes at 1000/s.
    assert_eq!(total, 7500);
    assert_now(start, ms(7500));
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.refunded), (7500, 0));
}

/// Idle connections hold nothing: five readers waiting for data that does not come take no
/// tokens and no place in the queue, so a writer on the same bucket goes at once. (When a
/// read paid before reading, the first idle reader held the whole bucket and the other
/// four queued 4000 tokens ahead of the writer, which took 5 s instead.)
#[tokio::test(start_paused = true)]
async fn idle_readers_hold_no_tokens_and_delay_nobody() {
    let bucket = bucket_with(Rate::per_second(1000), 1000, 1000);
    let start = Instant::now();
    let mut peers = Vec::new();
    let mut readers = Vec::new();
    for _ in 0..5 {
        let (peer, ours) = tokio::io::duplex(4096);
        let mut reader = bucket.limit_read(ours);
        assert_pending!(tokio_test::task::spawn(reader.read(&mut [0; 1000])).poll());
        peers.push(peer);
        readers.push(reader);
    }
    let mut writer = bucket.limit_write(Vec::new());
    writer.write_all(&[7; 1000]).await.unwrap();
    assert_now(start, ms(0));
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.refunded, stats.queued), (1000, 0, 0));

    // When data comes, an idle reader pays for it then, like anybody else.
    peers[0].write_all(&[1; 100]).await.unwrap();
    let mut buf = [0; 1000];
    assert_eq!(readers[0].read(&mut buf).await.unwrap(), 100);
    assert_now(start, ms(100));
    assert_eq!(buf[..100], [1; 100]);
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.refunded, stats.queued), (1100, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_writer_claiming_more_than_it_was_given_is_an_error_not_a_panic() {
    let bucket = bucket_with(Rate::per_hour(1), 1000, 1000);
    let mut writer = bucket.limit_write(Liar);
    let error = writer.write(&[1; 10]).await.unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::InvalidData);
    assert!(
        error
            .to_string()
            .contains("claimed to write 11 bytes of a 10-byte buffer"),
        "{error}"
    );
    // Passed up, the impossible count would make `write_all` panic slicing its buffer.
    let error = writer.write_all(&[1; 500]).await.unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::InvalidData);
    // The caller was told of no byte written, so none is counted.
    assert_eq!(writer.bytes_written(), 0);
    // Each write was charged for the piece it handed over, which may have been sent.
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.refunded), (510, 0));
}

/// A read cancelled while it waits for its tokens leaves its bytes with the wrapper. The
/// next read, with a smaller buffer, gets what fits once they are paid for, and the read
/// after it gets the rest at once, without paying again.
#[tokio::test(start_paused = true)]
async fn paid_bytes_that_do_not_fit_wait_for_the_next_read() {
    let bucket = empty_bucket(Rate::per_second(10), 100);
    let data = pattern(100);
    let start = Instant::now();
    let mut reader = bucket.limit_read(&data[..]);
    let mut buf = [0; 50];
    tokio::select! {
        _ = reader.read(&mut buf) => panic!("50 bytes at 10/s take 5 s"),
        _ = tokio::time::sleep(secs(2)) => {}
    }
    assert_eq!(reader.buffered(), &data[..50]);
    // Bytes held count only once the caller has them.
    assert_eq!(reader.bytes_read(), 0);
    let mut small = [0; 20];
    assert_eq!(reader.read(&mut small).await.unwrap(), 20);
    assert_now(start, secs(5));
    assert_eq!(small, data[..20]);
    assert_eq!(reader.buffered(), &data[20..50]);
    assert_eq!(reader.bytes_read(), 20);
    let mut buf = [0; 100];
    assert_eq!(reader.read(&mut buf).await.unwrap(), 30);
    assert_now(start, secs(5));
    assert_eq!(buf[..30], data[20..50]);
    assert_eq!(reader.bytes_read(), 50);
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.refunded, stats.queued), (50, 0, 0));
}

/// Bytes read but not delivered are discarded with the wrapper, and the tokens paid for
/// them refunded; `into_parts` hands them over instead, also refunded; a `take` still
/// queued leaves the queue. So the bucket is charged only for bytes delivered.
#[tokio::test(start_paused = true)]
async fn bytes_paid_for_but_not_delivered_are_refunded() {
    let bucket = empty_bucket(Rate::per_second(10), 100);
    let data = pattern(100);
    let start = Instant::now();

    // 40 bytes read and paid for, 10 delivered, then the wrapper is dropped.
    let mut reader = bucket.limit_read(&data[..]);
    assert_pending!(tokio_test::task::spawn(reader.read(&mut [0; 40])).poll());
    assert_eq!(reader.read(&mut [0; 10]).await.unwrap(), 10);
    assert_now(start, secs(4));
    assert_eq!(reader.buffered(), &data[10..40]);
    drop(reader);
    let stats = bucket.stats();
    assert_eq!((stats.available, stats.taken, stats.refunded), (30, 40, 30));

    // The same, then `into_parts`: 10 more tokens to wait for.
    let mut reader = bucket.limit_read(&data[..]);
    assert_pending!(tokio_test::task::spawn(reader.read(&mut [0; 40])).poll());
    assert_eq!(reader.read(&mut [0; 10]).await.unwrap(), 10);
    assert_now(start, secs(5));
    let progress = reader.progress();
    let (rest, unread) = reader.into_parts();
    assert_eq!((unread.as_slice(), rest), (&data[10..40], &data[40..]));
    // The bytes handed over were never delivered, so they are not counted.
    assert_eq!(progress.bytes(), 10);
    let stats = bucket.stats();
    assert_eq!((stats.available, stats.taken, stats.refunded), (30, 80, 60));

    // A piece read and still waiting for its tokens: nothing was paid, nothing is refunded.
    let mut reader = bucket.limit_read(&data[..]);
    assert_pending!(tokio_test::task::spawn(reader.read(&mut [0; 40])).poll());
    assert_eq!(bucket.queued(), 1);
    assert_eq!(reader.into_inner(), &data[40..]);
    assert_eq!(bucket.stats(), stats);
}

/// However large the buffer and the bucket, a read pulls at most `MAX_READ_PIECE` bytes
/// from the inner reader, so a wrapper never buffers more.
#[tokio::test(start_paused = true)]
async fn a_read_pulls_at_most_max_read_piece_bytes() {
    assert_eq!(MAX_READ_PIECE, 64 * KIB);
    let bucket = bucket_with(Rate::per_second(MIB as u64), MIB as u64, MIB as u64);
    let data = pattern(MIB);
    let mut reader = bucket.limit_read(&data[..]);
    let mut buf = vec![0; MIB];
    assert_eq!(reader.read(&mut buf).await.unwrap(), MAX_READ_PIECE);
    assert_eq!(reader.get_ref().len(), MIB - MAX_READ_PIECE);
    assert_eq!(bucket.stats().taken, MAX_READ_PIECE as u64);
}

/// A writer whose peer is slow holds no tokens while it waits for the peer: the piece it
/// was granted goes back at once, for others to use, and is taken again, from the back of
/// the queue, when the peer drains.
#[tokio::test(start_paused = true)]
async fn a_writer_blocked_by_a_slow_peer_holds_no_tokens() {
    let bucket = bucket_with(Rate::per_second(100), 100, 100);
    let start = Instant::now();
    let (mut peer, ours) = tokio::io::duplex(10);
    let mut writer = bucket.limit_write(ours);
    // Fill the pipe.
    writer.write_all(&[1; 10]).await.unwrap();
    {
        let mut write = tokio_test::task::spawn(writer.write(&[2; 50]));
        assert_pending!(write.poll());
        assert_eq!((bucket.available(), bucket.queued()), (90, 0));
        // Another user of the bucket gets every token at once.
        bucket.take(90).await.unwrap();
        assert_now(start, ms(0));
        // The peer drains the pipe: the write asks for its piece again, and now waits.
        peer.read_exact(&mut [0; 10]).await.unwrap();
        assert!(write.is_woken());
        assert_pending!(write.poll());
        assert_eq!(bucket.queued(), 1);
    }
    // 50 tokens at 100/s; the pipe takes 10 bytes, and 40 tokens go back.
    assert_eq!(writer.write(&[2; 50]).await.unwrap(), 10);
    assert_now(start, ms(500));
    let stats = bucket.stats();
    assert_eq!(stats.taken - stats.refunded, 10 + 90 + 10);
    assert_eq!((stats.available, stats.queued), (40, 0));
}
