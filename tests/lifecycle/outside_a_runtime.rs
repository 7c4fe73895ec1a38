//! Outside a runtime: what must wait fails with `NoRuntime`, what need not works from a
//! plain thread, and a runtime without a timer panics at the first poll rather than hang.

use super::*;

#[test]
fn requests_that_must_wait_outside_a_runtime_fail_with_no_runtime() {
    use futures::executor::block_on;

    let bucket = bucket_with(Rate::per_second(1), 5, 0);
    assert_eq!(block_on(bucket.take(1)), Err(TakeError::NoRuntime));
    assert_eq!(block_on(bucket.wait(1)), Err(TakeError::NoRuntime));
    assert_eq!(
        block_on(bucket.take_timeout(1, secs(10))),
        Err(TakeError::NoRuntime)
    );
    assert_eq!(
        block_on(bucket.wait_timeout(1, secs(10))),
        Err(TakeError::NoRuntime)
    );
    let stats = bucket.stats();
    assert_eq!((stats.queued, stats.queued_tokens, stats.taken), (0, 0, 0));

    // Requests that need not wait work without a runtime.
    let full = bucket_with(Rate::per_second(1), 5, 5);
    assert_eq!(block_on(full.take(2)), Ok(()));
    assert_eq!(block_on(full.wait(3)), Ok(()));
    assert_eq!(block_on(full.take_timeout(3, secs(1))), Ok(()));
    assert_eq!(block_on(full.take(0)), Ok(()));
    assert_eq!(full.available(), 0);

    // The failed attempts left nothing behind: in a runtime the bucket serves waiters.
    paused_runtime().block_on(async {
        tokio::time::advance(secs(10)).await;
        assert_eq!(bucket.available(), 5);
        bucket.try_take(5).unwrap();
        let start = Instant::now();
        assert_eq!(bucket.take(2).await, Ok(()));
        assert_at(start, Instant::now(), secs(2));
    });
}

#[test]
fn try_take_and_the_other_sync_methods_work_from_a_plain_thread() {
    let made_here = bucket_with(Rate::per_hour(1), 3, 3);
    let runtime = paused_runtime();
    let made_in_runtime = runtime.block_on(async { bucket_with(Rate::per_hour(1), 3, 3) });
    let thread = std::thread::spawn(move || {
        assert!(tokio::runtime::Handle::try_current().is_err());
        let made_in_thread = bucket_with(Rate::per_hour(1), 3, 3);
        for bucket in [&made_here, &made_in_runtime, &made_in_thread] {
            assert_eq!(bucket.try_take(2), Ok(()));
            let Err(TryTakeError::Insufficient { retry_after }) = bucket.try_take(2) else {
                panic!("1 token left, 2 asked");
            };
            assert!(retry_after > Duration::ZERO && retry_after <= secs(3600));
            bucket.refund(1);
            assert_eq!(bucket.available(), 2);
            bucket.set_rate(Rate::per_hour(2)).unwrap();
            bucket.set_capacity(4).unwrap();
            let stats = bucket.stats();
            assert_eq!((stats.taken, stats.denied, stats.refunded), (2, 1, 1));
            bucket.close();
            assert_eq!(bucket.try_take(1), Err(TryTakeError::Closed));
        }
    });
    thread.join().unwrap();
}

/// A request that must wait in a runtime built without `enable_time` panics on its first
/// poll, naming the fix. It used to queue and start a refill task that panicked on its
/// first sleep, was restarted by the waiter and panicked again, for ever: a hang.
#[test]
fn a_request_that_must_wait_in_a_runtime_without_a_timer_panics_on_its_first_poll() {
    let untimed = runtime_without_a_timer();
    let bucket = bucket_with(Rate::per_second(1), 5, 2);
    // Served at once, it needs no timer.
    assert_eq!(untimed.block_on(bucket.take(1)), Ok(()));
    assert_eq!(untimed.block_on(bucket.wait(1)), Ok(()));
    for message in [
        panic_message_of(|| poll_once_in(&untimed, bucket.take(2))),
        panic_message_of(|| poll_once_in(&untimed, bucket.wait(2))),
        panic_message_of(|| poll_once_in(&untimed, bucket.take_timeout(2, secs(10)))),
        panic_message_of(|| poll_once_in(&untimed, bucket.wait_timeout(2, secs(10)))),
    ] {
        assert!(message.contains(NO_TIMER_PANIC), "{message}");
    }
    let stats = bucket.stats();
    assert_eq!(
        (stats.queued, stats.taken),
        (0, 1),
        "nothing queued or taken"
    );

    // Awaited to the end it panics too, rather than hang.
    let (done, finished) = std::sync::mpsc::channel();
    let waiting = bucket.clone();
    std::thread::spawn(move || {
        let untimed = runtime_without_a_timer();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            untimed.block_on(waiting.take(2))
        }));
        let _ = done.send(outcome.is_err());
    });
    // A generous bound, not a timing assertion: only a hang takes this long.
    let panicked = finished.recv_timeout(secs(60)).expect("take hung");
    assert!(panicked, "take completed without a timer");

    // The bucket is unharmed: in a runtime with a timer its waiters are served.
    paused_runtime().block_on(async {
        assert_eq!(bucket.take(5).await, Ok(()));
    });
    let stats = bucket.stats();
    assert_eq!((stats.queued, stats.taken), (0, 6));
}

/// A timeout form needs tokio's timer even when the bucket's refill task already runs in
/// another runtime: polled outside any runtime it must refuse with `NoRuntime` rather
/// than queue and then panic creating its timer (fixed in 07fe815; this guards it).
#[test]
fn take_timeout_outside_a_runtime_does_not_panic_while_another_runtime_serves_the_bucket() {
    let runtime = paused_runtime();
    let bucket = runtime.block_on(async {
        let bucket = bucket_with(Rate::per_second(1), 1, 0);
        bucket.take(1).await.unwrap(); // starts the refill task, which lives on
        bucket
    });
    let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        bucket.take_timeout(1, secs(10)).now_or_never()
    }));
    let polled = polled.expect("polling take_timeout outside a runtime panicked");
    assert!(
        matches!(polled, None | Some(Err(TakeError::NoRuntime))),
        "{polled:?}"
    );
}
