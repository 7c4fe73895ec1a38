//! The `progress` handle: a copy through a wrapper watched at exact instants, and only
//! the bytes that moved the wrapper's way counted.

use super::*;

/// Watches an 80 KiB `tokio::io::copy` through a wrapper on a full 64 KiB/s bucket of
/// capacity 64 KiB, from the `progress` handle alone. `start_copy` wraps, hands out the
/// handle and spawns the copy, which checks its bytes and returns when it finished. The
/// copy moves 8 KiB a call, each paid in one `take`: 64 KiB pass at once, 72 KiB at
/// 125 ms, all 80 KiB at 250 ms. The handle shows each count from the instant it is
/// reached, and nothing early.
async fn watch_an_80_kib_copy(
    start_copy: impl FnOnce(TokenBucket, Vec<u8>) -> (Progress, JoinHandle<Instant>),
) {
    const AT_ONCE: u64 = 64 * KIB as u64;
    const PIECE: u64 = 8 * KIB as u64;
    let bucket = bucket_with(Rate::per_second(AT_ONCE), AT_ONCE, AT_ONCE);
    let start = Instant::now();
    let (progress, copy) = start_copy(bucket, pattern(80 * KIB));
    yield_until(|| progress.bytes() == AT_ONCE).await;
    assert_now(start, ms(0));
    for (instant, expected) in [
        (ms(124), AT_ONCE),
        (ms(126), AT_ONCE + PIECE),
        (ms(249), AT_ONCE + PIECE),
    ] {
        tokio::time::sleep_until(start + instant).await;
        assert_eq!(progress.bytes(), expected, "at {instant:?}");
    }
    let finished = copy.await.unwrap();
    assert_at(start, finished, ms(250));
    assert_eq!(progress.bytes(), AT_ONCE + 2 * PIECE);
}

#[tokio::test(start_paused = true)]
async fn a_progress_handle_follows_a_copy_from_a_limited_reader_at_exact_instants() {
    watch_an_80_kib_copy(|bucket, data| {
        let mut reader = bucket.limit_read(io::Cursor::new(data.clone()));
        let progress = reader.progress();
        let copy = tokio::spawn(async move {
            let mut received = Vec::new();
            let copied = tokio::io::copy(&mut reader, &mut received).await.unwrap();
            assert_eq!(copied, reader.bytes_read());
            assert!(received == data);
            Instant::now()
        });
        (progress, copy)
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_progress_handle_follows_a_copy_into_a_limited_writer_at_exact_instants() {
    watch_an_80_kib_copy(|bucket, data| {
        let mut writer = bucket.limit_write(Vec::new());
        let progress = writer.progress();
        let copy = tokio::spawn(async move {
            let copied = tokio::io::copy(&mut &data[..], &mut writer).await.unwrap();
            assert_eq!(copied, writer.bytes_written());
            assert!(writer.get_ref() == &data);
            Instant::now()
        });
        (progress, copy)
    })
    .await;
}

/// A write the inner writer fails counts nothing, and its tokens go back.
#[tokio::test(start_paused = true)]
async fn failed_writes_are_not_counted() {
    let bucket = bucket_with(Rate::per_hour(1), 100, 100);
    let (source, mut sink) = tokio::io::duplex(64);
    let mut writer = bucket.limit_write(source);
    let progress = writer.progress();
    writer.write_all(&[1; 10]).await.unwrap();
    assert_eq!(writer.bytes_written(), 10);
    sink.read_exact(&mut [0; 10]).await.unwrap();
    drop(sink);
    let error = writer.write(&[2; 40]).await.unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::BrokenPipe);
    assert_eq!((writer.bytes_written(), progress.bytes()), (10, 10));
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.refunded), (50, 40));
}

/// Each wrapper counts only its throttled direction: bytes through the other pass
/// uncounted, as they pass unthrottled.
#[tokio::test(start_paused = true)]
async fn the_other_direction_is_not_counted() {
    let bucket = bucket_with(Rate::per_hour(1), 100, 100);
    let (near, mut far) = tokio::io::duplex(64);
    let mut reader = bucket.limit_read(near);
    reader.write_all(b"out").await.unwrap();
    far.write_all(b"in").await.unwrap();
    let mut buf = [0; 3];
    far.read_exact(&mut buf).await.unwrap();
    reader.read_exact(&mut buf[..2]).await.unwrap();
    assert_eq!(reader.bytes_read(), 2);

    let (near, mut far) = tokio::io::duplex(64);
    let mut writer = bucket.limit_write(near);
    far.write_all(b"in").await.unwrap();
    writer.read_exact(&mut buf[..2]).await.unwrap();
    writer.write_all(b"out").await.unwrap();
    assert_eq!(writer.bytes_written(), 3);
}
