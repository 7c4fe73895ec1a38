#![cfg(feature = "io")]
//! Byte I/O (feature `io`): one token per byte, paid before and refunded after, in pieces
//! no larger than the capacity, on tokio's paused clock.

mod common;

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use common::{assert_at, assert_now, bucket_with, empty_bucket, ms, secs, yield_until};
use token_bucket::io::{LimitRead, LimitWrite};
use token_bucket::{Rate, TakeError, TokenBucket};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
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
    // The end of the stream costs one wait for a piece, here of 1 byte (15 µs), refunded.
    assert_eq!(reader.read(&mut [0; 1]).await.unwrap(), 0);
    assert_now(start, secs(16));
    let stats = bucket.stats();
    assert_eq!(stats.taken - stats.refunded, MIB as u64);
    assert_eq!(stats.refunded, 1);
}

/// `tokio::io::copy` reads in 8 KiB pieces, so the read that finds the end of the stream
/// first waits for 8 KiB of tokens (125 ms), then refunds them all.
#[tokio::test(start_paused = true)]
async fn copying_from_a_limited_reader_pays_one_piece_more_to_find_the_end() {
    let bucket = sixty_four_kib_per_second();
    let data = pattern(MIB);
    let start = Instant::now();
    let mut reader = bucket.limit_read(&data[..]);
    let mut received = Vec::new();
    let copied = tokio::io::copy(&mut reader, &mut received).await.unwrap();
    assert_now(start, ms(16_125));
    assert_eq!(copied, MIB as u64);
    assert!(received == data);
    let stats = bucket.stats();
    assert_eq!(
        (stats.taken, stats.refunded),
        ((MIB + 8 * KIB) as u64, 8 * KIB as u64)
    );
    assert_eq!(stats.available, 8 * KIB as u64);
}

/// A source that gives less than the buffer per read (a duplex holding 16 KiB, read with
/// a 64 KiB buffer): each read waits until a whole 64 KiB piece is paid for, reads 16 KiB
/// and refunds 48 KiB. The bytes still flow at the rate (16 KiB every 250 ms), but 48 KiB
/// of float stays in the bucket: they lag 750 ms behind the ideal schedule, and finding
/// the end costs the last 16 KiB of a piece.
/// `read_to_end` offers at least a piece of spare room on its last read, so finding the
/// end costs a whole 64 KiB piece: 1 s, refunded afterwards.
#[tokio::test(start_paused = true)]
async fn read_to_end_pays_a_whole_piece_to_find_the_end() {
    let bucket = sixty_four_kib_per_second();
    let data = pattern(MIB);
    let start = Instant::now();
    let mut reader = bucket.limit_read(&data[..]);
    let mut received = Vec::new();
    reader.read_to_end(&mut received).await.unwrap();
    assert_now(start, secs(17));
    assert!(received == data);
    let stats = bucket.stats();
    assert_eq!(stats.taken - stats.refunded, MIB as u64);
    assert_eq!(stats.available, 64 * KIB as u64);
}

#[tokio::test(start_paused = true)]
async fn a_source_that_gives_less_than_a_piece_lags_by_the_refunded_float() {
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
        // The first piece at 1 s, then one every 250 ms.
        assert_now(start, ms(1000 + 250 * (reads - 1)));
    }
    assert_now(start, ms(16_750));
    assert!(received == data, "the bytes arrive intact");
    writer.await.unwrap().unwrap();
    assert_eq!(reader.read(&mut buf).await.unwrap(), 0);
    assert_now(start, secs(17));
    let stats = bucket.stats();
    assert_eq!(stats.taken - stats.refunded, MIB as u64);
    assert_eq!(stats.available, 64 * KIB as u64);
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
        let stats = bucket.stats();
        assert_eq!(stats.taken - stats.refunded, LEN as u64, "size {size}");
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
async fn a_closed_bucket_fails_reads_and_the_inner_reader_keeps_every_unread_byte() {
    let bucket = bucket_with(Rate::per_second(1), 10, 10);
    let data = pattern(100);
    let mut reader = bucket.limit_read(&data[..]);
    let mut buf = [0; 64];
    assert_eq!(reader.read(&mut buf).await.unwrap(), 10);
    assert_eq!(buf[..10], data[..10]);
    {
        let mut read = tokio_test::task::spawn(reader.read(&mut buf));
        assert_pending!(read.poll());
        assert_eq!(bucket.queued(), 1);
        bucket.close();
        assert!(read.is_woken());
        let error = assert_ready!(read.poll()).unwrap_err();
        assert_take_error(&error, TakeError::Closed, "closed");
    }
    let error = reader.read(&mut buf).await.unwrap_err();
    assert_take_error(&error, TakeError::Closed, "closed");
    // The inner reader gave up only the 10 bytes that were returned.
    assert_eq!(reader.into_inner(), &data[10..]);
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

/// Outside any tokio runtime a reservation that must wait cannot be served: an io error
/// rather than a panic or a hang.
#[test]
fn outside_a_runtime_a_read_or_write_that_must_wait_is_an_io_error() {
    let bucket = empty_bucket(Rate::per_second(1), 10);
    let mut reader = bucket.limit_read(&b"abc"[..]);
    let error = futures::executor::block_on(reader.read(&mut [0; 3])).unwrap_err();
    assert_take_error(&error, TakeError::NoRuntime, "runtime");
    assert_eq!(reader.into_inner(), b"abc");
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

#[tokio::test(start_paused = true)]
async fn dropping_a_wrapper_holding_tokens_across_pending_refunds_them() {
    let bucket = bucket_with(Rate::per_second(10), 100, 100);
    // Nothing was written to the other end: the inner read is pending, with 50 tokens paid.
    let (_source, sink) = tokio::io::duplex(64);
    let mut reader = bucket.limit_read(sink);
    let mut buf = [0; 50];
    assert_pending!(tokio_test::task::spawn(reader.read(&mut buf)).poll());
    assert_eq!(bucket.available(), 50);
    drop(reader);
    let stats = bucket.stats();
    assert_eq!(
        (stats.available, stats.taken, stats.refunded),
        (100, 50, 50)
    );

    // The same for a writer whose inner writer is full, unwrapped with `into_inner`.
    let (other_end, source) = tokio::io::duplex(1);
    let mut writer = bucket.limit_write(source);
    assert_eq!(writer.write(b"ab").await.unwrap(), 1);
    assert_pending!(tokio_test::task::spawn(writer.write(b"b")).poll());
    assert_eq!(bucket.available(), 98);
    let _source: DuplexStream = writer.into_inner();
    assert_eq!(bucket.available(), 99);
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
async fn the_end_of_a_stream_refunds_the_reservation() {
    let bucket = empty_bucket(Rate::per_second(100), 100);
    let start = Instant::now();
    let mut reader = bucket.limit_read(&b""[..]);
    let mut buf = [0; 50];
    // The read cannot know the stream has ended before it is paid for: 50 tokens, 500 ms.
    assert_eq!(reader.read(&mut buf).await.unwrap(), 0);
    assert_now(start, ms(500));
    let stats = bucket.stats();
    assert_eq!((stats.available, stats.taken, stats.refunded), (50, 50, 50));
    // With the tokens there, the next end costs nothing.
    assert_eq!(reader.read(&mut buf).await.unwrap(), 0);
    assert_now(start, ms(500));
    assert_eq!(bucket.available(), 50);
}

#[tokio::test(start_paused = true)]
async fn a_pending_reader_keeps_its_reservation_and_never_pays_twice() {
    let bucket = bucket_with(Rate::per_hour(1), 100, 100);
    let (mut source, sink) = tokio::io::duplex(64);
    let mut reader = bucket.limit_read(sink);
    let mut buf = [0; 50];
    {
        let mut read = tokio_test::task::spawn(reader.read(&mut buf));
        // Paid for, but nothing to read yet.
        assert_pending!(read.poll());
        assert_eq!(bucket.available(), 50);
        source.write_all(&[9; 50]).await.unwrap();
        assert!(read.is_woken());
        assert_eq!(assert_ready!(read.poll()).unwrap(), 50);
    }
    assert_eq!(buf, [9; 50]);
    let stats = bucket.stats();
    assert_eq!((stats.available, stats.taken, stats.refunded), (50, 50, 0));
    assert_eq!(stats.queued, 0);
}

#[tokio::test(start_paused = true)]
async fn a_short_read_refunds_the_rest() {
    let bucket = bucket_with(Rate::per_second(10), 100, 100);
    let (mut source, sink) = tokio::io::duplex(64);
    source.write_all(b"abc").await.unwrap();
    let mut reader = bucket.limit_read(sink);
    let mut buf = [0; 80];
    assert_eq!(reader.read(&mut buf).await.unwrap(), 3);
    assert_eq!(&buf[..3], b"abc");
    let stats = bucket.stats();
    assert_eq!((stats.available, stats.taken, stats.refunded), (97, 80, 77));
}

#[tokio::test(start_paused = true)]
async fn a_pending_writer_keeps_its_reservation_and_never_pays_twice() {
    let bucket = empty_bucket(Rate::per_second(1000), 100);
    let data = pattern(1000);
    let start = Instant::now();
    let mut writer = bucket.limit_write(Stubborn::new(usize::MAX));
    writer.write_all(&data).await.unwrap();
    // Ten pieces of 100, each held across one `Pending`.
    assert_now(start, secs(1));
    assert_eq!(writer.get_ref().pendings, 10);
    assert!(writer.get_ref().written == data);
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.refunded), (1000, 0));
}

#[tokio::test(start_paused = true)]
async fn a_short_write_refunds_the_rest() {
    let bucket = empty_bucket(Rate::per_second(1000), 100);
    let data = pattern(1000);
    let mut writer = bucket.limit_write(Stubborn::new(30));
    writer.write_all(&data).await.unwrap();
    assert!(writer.get_ref().written == data);
    let stats = bucket.stats();
    assert_eq!(stats.taken - stats.refunded, 1000);
}

/// After a `Pending`, the next `poll_write` may come with another buffer: a shorter one
/// spends part of the reservation and refunds the rest, a longer one spends it all, and
/// neither queues again.
#[tokio::test(start_paused = true)]
async fn a_write_retried_with_another_buffer_spends_the_reservation_it_holds() {
    let bucket = bucket_with(Rate::per_hour(1), 1000, 1000);
    let mut writer = bucket.limit_write(Stubborn::new(usize::MAX));
    assert_pending!(tokio_test::task::spawn(writer.write(&[1; 100])).poll());
    assert_eq!(bucket.available(), 900);
    assert_eq!(writer.write(&[2; 30]).await.unwrap(), 30);
    assert_eq!(bucket.available(), 970);

    assert_pending!(tokio_test::task::spawn(writer.write(&[3; 10])).poll());
    assert_eq!(bucket.available(), 960);
    assert_eq!(writer.write(&[4; 500]).await.unwrap(), 10);
    assert_eq!(bucket.available(), 960);

    assert_eq!(bucket.queued(), 0);
    let mut expected = vec![2; 30];
    expected.extend_from_slice(&[4; 10]);
    assert_eq!(writer.get_ref().written, expected);
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.refunded), (110, 70));
}

#[tokio::test(start_paused = true)]
async fn shutting_down_gives_back_a_reservation_left_by_a_pending_write() {
    let bucket = bucket_with(Rate::per_hour(1), 1000, 1000);
    let mut writer = bucket.limit_write(Stubborn::new(usize::MAX));
    assert_pending!(tokio_test::task::spawn(writer.write(&[1; 100])).poll());
    assert_eq!(bucket.available(), 900);
    writer.shutdown().await.unwrap();
    assert_eq!(bucket.available(), 1000);
    assert!(writer.get_ref().written.is_empty());
}

/// A real writer that is often full: a duplex of 64 bytes whose other end is read slowly.
/// Pieces of exactly 64 bytes always fit an empty pipe, so every byte is paid exactly once
/// and nothing is refunded.
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
    assert_eq!((stats.taken, stats.refunded), (LEN as u64, 0));
    drop(writer);
    // The writer finished its last piece before it was dropped: nothing was held.
    assert_eq!(bucket.stats().refunded, 0);
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

/// Lowering the capacity below a queued reservation does not fail the read: it is made
/// again at the new capacity.
#[tokio::test(start_paused = true)]
async fn a_reservation_above_a_lowered_capacity_is_made_again_smaller() {
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
