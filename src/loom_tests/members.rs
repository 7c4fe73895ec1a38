//! Model checking of the limiters built over the bucket: `Keyed`'s fold between a key's
//! word and its whole bucket, and composites over buckets and windows (see `mod.rs` for
//! how the models run).

use super::*;

/// `Keyed`'s fold between a key's word and its whole bucket: one thread takes a token
/// through the whole bucket `get` unfolded the key into (on the bucket's fast path), while
/// another's `try_acquire` may fold the key back into its word as soon as that handle is
/// gone, and then sweeps. Each of the two tokens is granted once, whichever form each
/// request met, and the busy key is never forgotten.
#[test]
fn loom_a_fold_racing_a_fast_taker_grants_each_token_once() {
    model(|| {
        let keyed = keyed_on_one_shard(2);
        keyed.try_acquire(&0, 0).unwrap();
        let taker = {
            let keyed = keyed.clone();
            thread::spawn(move || {
                let whole = keyed.get(&0).expect("the key is held");
                let taken = whole.try_take(1).is_ok();
                drop(whole);
                taken
            })
        };
        let folder_took = keyed.try_acquire(&0, 1).is_ok();
        keyed.retain_recent();
        let taker_took = taker.join().unwrap();
        assert!(
            folder_took && taker_took,
            "two tokens were there for the two"
        );
        assert_eq!(
            keyed.try_acquire(&0, 1),
            Err(TryAcquireError::Limited {
                retry_after: Duration::from_secs(1)
            })
        );
        assert_eq!(keyed.len(), 1);
    });
}

/// `Keyed`'s fold as a key's line empties: a waiter granted its token at 1 s reads it on
/// one thread and, the last in its key's line, folds the key back into its word as it
/// ends, while a new `acquire` for the same key is first polled on another, finding the
/// whole bucket still held or the word it folded into. Either way the one token is the
/// waiter's, the newcomer waits for the next (never served twice, never jumping the
/// line), and once it is served in turn at 2 s the key is a word again, empty as of then.
#[test]
fn loom_a_fold_as_a_line_empties_racing_a_new_acquire_grants_each_token_once() {
    model(|| {
        let keyed = keyed_on_one_shard(1);
        keyed.try_acquire(&0, 1).unwrap();
        let mut waiter = Box::pin(keyed.acquire(&0, 1));
        let mut context = Context::from_waker(noop_waker_ref());
        assert!(waiter.as_mut().poll(&mut context).is_pending());
        set_time(SECOND);
        refill_wakes(&keyed.get(&0).expect("held whole for its waiter"));
        let served = thread::spawn(move || block_on(waiter));
        let mut newcomer = Box::pin(keyed.acquire(&0, 1));
        let polled = newcomer.as_mut().poll(&mut context);
        assert_eq!(served.join().unwrap(), Ok(()));
        assert!(
            polled.is_pending(),
            "{polled:?}: the one token was the waiter's"
        );
        set_time(2 * SECOND);
        refill_wakes(&keyed.get(&0).expect("held whole for the newcomer"));
        assert_eq!(block_on(newcomer), Ok(()));
        assert_eq!(
            (keyed.len(), keyed.keys_held_whole()),
            (1, 0),
            "key 0 held, folded as its line emptied"
        );
        assert_eq!(
            keyed.try_acquire(&0, 1),
            Err(TryAcquireError::Limited {
                retry_after: Duration::from_secs(1)
            })
        );
    });
}

// ----- Composites: the lock order ------------------------------------------------------

/// Two composites over the same two buckets in opposite orders (A+B beside B+A) race a
/// plain `try_take` on A. The locks are taken in one global order, so no interleaving
/// deadlocks (loom reports one as a failure); each composite takes from both or from
/// neither, and the books balance: A counts both composites' grants and the plain one's,
/// B the composites' alone.
#[test]
fn loom_composites_in_opposite_orders_never_deadlock_and_take_from_both_or_neither() {
    model(|| {
        let a = bucket(2, 2);
        let b = bucket(1, 1);
        let forward = {
            let (a, b) = (a.clone(), b.clone());
            thread::spawn(move || all((&a, &b)).unwrap().try_acquire(1).is_ok())
        };
        let backward = {
            let (a, b) = (a.clone(), b.clone());
            thread::spawn(move || all((&b, &a)).unwrap().try_acquire(1).is_ok())
        };
        let plain = on_thread(&a, |a| a.try_take(1).is_ok());
        let composites = [forward, backward]
            .into_iter()
            .map(|racer| racer.join().unwrap())
            .filter(|&won| won)
            .count() as u64;
        let plain = u64::from(plain.join().unwrap());
        // B holds one token: exactly one composite wins it.
        assert_eq!(composites, 1);
        assert_eq!(a.stats().taken, composites + plain);
        assert_eq!(b.stats().taken, composites);
        assert_eq!(a.available(), 2 - composites - plain);
    });
}

/// A composite of a key (decided on its word under its shard's lock) and a global
/// bucket races a plain `try_acquire` on the same key and a plain `try_take` on the
/// global bucket, each of which holds one token. The composite takes from both or from
/// neither: its word is written only once the global bucket admitted it too, under the
/// shard's lock, so the books balance in every interleaving.
#[test]
fn loom_a_key_member_takes_from_its_word_and_the_global_bucket_or_from_neither() {
    model(|| {
        let keys = Arc::new(keyed_on_one_shard(1));
        let global = bucket(1, 1);
        let composite = {
            let (keys, global) = (Arc::clone(&keys), global.clone());
            thread::spawn(move || {
                all_in_turn((keys.member(&0), &global))
                    .unwrap()
                    .try_acquire(1)
                    .is_ok()
            })
        };
        let plain_key = {
            let keys = Arc::clone(&keys);
            thread::spawn(move || keys.try_acquire(&0, 1).is_ok())
        };
        let plain_global = on_thread(&global, |global| global.try_take(1).is_ok());
        let composite = composite.join().unwrap();
        let plain_key = plain_key.join().unwrap();
        let plain_global = plain_global.join().unwrap();
        assert!(
            !(composite && (plain_key || plain_global)),
            "a token taken twice"
        );
        let key_taken = u64::from(composite || plain_key);
        assert_eq!(
            keys.quota(&0).map(|quota| quota.remaining),
            Some(1 - key_taken)
        );
        assert_eq!(global.stats().taken, u64::from(composite || plain_global));
    });
}

/// A composite over two fixed windows races a lock-free `try_acquire` on the first for
/// its last permit. The composite seizes each window's word while it decides, so the
/// plain try either comes first (and the composite is refused by that window, counting
/// nothing in the second) or is refused: never both admitted, never one window counting
/// the composite without the other.
#[test]
fn loom_a_composite_over_fixed_windows_and_a_lock_free_try_never_both_win() {
    model(|| {
        let first = Arc::new(FixedWindow::new(1, Duration::from_secs(1)).unwrap());
        let second = Arc::new(FixedWindow::new(1, Duration::from_secs(1)).unwrap());
        let composite = {
            let (first, second) = (Arc::clone(&first), Arc::clone(&second));
            thread::spawn(move || all((&*first, &*second)).unwrap().try_acquire(1).is_ok())
        };
        let plain = {
            let first = Arc::clone(&first);
            thread::spawn(move || first.try_acquire(1).is_ok())
        };
        let composite = composite.join().unwrap();
        let plain = plain.join().unwrap();
        assert!(!(composite && plain), "both admitted into a window of 1");
        assert_eq!(first.available(), 1 - u64::from(composite || plain));
        assert_eq!(second.available(), 1 - u64::from(composite));
    });
}

// ----- Composites: the waiting path ----------------------------------------------------

/// A fixed window of `limit` permits that does not turn over while a model runs.
fn long_window(limit: u64) -> FixedWindow {
    FixedWindow::new(limit, Duration::from_secs(10)).unwrap()
}

/// Runs `work` on a new modelled thread with clones of the bucket and the window.
fn on_thread_with<T: Send + 'static>(
    bucket: &TokenBucket,
    window: &FixedWindow,
    work: impl FnOnce(&TokenBucket, &FixedWindow) -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    let (bucket, window) = (bucket.clone(), window.clone());
    thread::spawn(move || work(&bucket, &window))
}

/// With nobody left in either line: `bucket` took `taken` and holds `holds`, and
/// `window` admits `admits` more.
#[track_caller]
fn assert_settled(bucket: &TokenBucket, taken: u64, holds: u64, window: &FixedWindow, admits: u64) {
    let stats = bucket.stats();
    assert_eq!(
        (stats.taken, stats.available, stats.queued),
        (taken, holds, 0)
    );
    assert_eq!((window.available(), window.queued_permits()), (admits, 0));
}

/// `composite.acquire(1)` on this thread: polled once at whatever instant the model is
/// at, which joins every line when it must wait; then, with the clock at `at`, polled
/// to the end, woken by whoever stands ahead of it in a line when that one leaves.
fn acquire_one_by(composite: &All<impl Members + Sync>, at: u64) {
    let mut acquire = Box::pin(composite.acquire(1));
    let first = acquire
        .as_mut()
        .poll(&mut Context::from_waker(noop_waker_ref()));
    set_time(at);
    let result = match first {
        Poll::Ready(result) => result,
        Poll::Pending => block_on_untracked_waker(acquire),
    };
    assert_eq!(result, Ok(()));
}

/// Drives `future` to its end on this thread, parked between polls until woken, as
/// `loom::future::block_on` does, with a waker whose clone and drop are not loom steps:
/// tokio's lock, which heads a window's line, clones its waiter's waker under a lock of
/// its own, a std one, and a loom step there would let another modelled thread block on
/// it, and with it the one OS thread every modelled thread runs on.
fn block_on_untracked_waker<F: Future>(future: F) -> F::Output {
    struct Unpark(loom::sync::Notify);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.notify();
        }
    }
    let unpark = Arc::new(Unpark(loom::sync::Notify::new()));
    let waker = std::task::Waker::from(Arc::clone(&unpark));
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut Context::from_waker(&waker)) {
            return output;
        }
        unpark.0.wait();
    }
}

/// Two composites over a bucket and a fixed window, given in opposite orders, both wait
/// (the bucket is empty at 0) and race to join their lines. Each joins both lines at
/// once, under the members' locks taken in one global order (the bucket's lock, then
/// the window's line), so they stand in the same order in both lines: the one ahead
/// decides once the clock has moved, the other is woken when it leaves. Joining one line
/// and then the other would let each head one line and wait for the other for ever,
/// which loom reports as a deadlock.
#[test]
fn loom_waiting_composites_in_opposite_orders_join_both_lines_in_one_order() {
    model(|| {
        let bucket = bucket(2, 0);
        let window = long_window(2);
        let backward = on_thread_with(&bucket, &window, |bucket, window| {
            acquire_one_by(&all((window, bucket)).unwrap(), 2 * SECOND);
        });
        acquire_one_by(&all((&bucket, &window)).unwrap(), 2 * SECOND);
        backward.join().unwrap();
        assert_settled(&bucket, 2, 0, &window, 0);
    });
}

/// `composite.acquire(1)` polled once at 0, where it must wait (so it joins every
/// line), then once more with the clock at `at`, then dropped: whether it was admitted.
fn acquire_one_polled_at_0_and_at(composite: &All<impl Members + Sync>, at: u64) -> bool {
    let mut acquire = Box::pin(composite.acquire(1));
    let mut cx = Context::from_waker(noop_waker_ref());
    assert!(
        acquire.as_mut().poll(&mut cx).is_pending(),
        "it must wait at 0"
    );
    set_time(at);
    match acquire.as_mut().poll(&mut cx) {
        Poll::Ready(result) => {
            assert_eq!(result, Ok(()));
            true
        }
        Poll::Pending => false,
    }
}

/// A composite over an empty bucket and a window of one permit joins both lines at 0,
/// and at 1 s, when the bucket has its token, decides, then gives up if it was not
/// admitted. A plain `try_acquire` on the window races it for the window's permit: the
/// plain try wins only before the composite stands in the window's line and before it
/// seizes the window's word to decide, and then the composite is not admitted, counts
/// nothing and gives its place in the bucket back. Never both, never neither.
#[test]
fn loom_a_plain_try_on_a_window_racing_a_waiting_composite_never_shares_its_permit() {
    model(|| {
        let bucket = bucket(1, 0);
        let window = long_window(1);
        let plain = on_thread_with(&bucket, &window, |_, window| window.try_acquire(1).is_ok());
        let composite = all((&bucket, &window)).unwrap();
        let admitted = acquire_one_polled_at_0_and_at(&composite, SECOND);
        let plain = plain.join().unwrap();
        assert!(admitted != plain, "the window's one permit, once");
        let taken = u64::from(admitted);
        assert_settled(&bucket, taken, 1 - taken, &window, 0);
    });
}

/// A composite over an empty bucket and a window with room joins both lines at 0, and
/// at 1 s, when the bucket has its token, is admitted. A plain `try_take` on the bucket
/// races it: at 0 the bucket is empty, and at 1 s the composite's place stands ahead of
/// it, or the composite has the token, so the plain try never gets it.
#[test]
fn loom_a_plain_try_on_a_bucket_never_passes_a_waiting_composite() {
    model(|| {
        let bucket = bucket(1, 0);
        let window = long_window(1);
        let plain = on_thread(&bucket, |bucket| bucket.try_take(1).is_ok());
        let composite = all((&bucket, &window)).unwrap();
        assert!(acquire_one_polled_at_0_and_at(&composite, SECOND));
        assert!(!plain.join().unwrap(), "the plain try passed the composite");
        assert_settled(&bucket, 1, 0, &window, 0);
    });
}

/// A composite waits in a bucket's line between two plain waiters, and heads a window's
/// line. At 2 s the bucket holds both waiters' tokens: the refill task grants the one
/// ahead and hands the head to the composite's place, racing the composite's drop, and
/// then a plain `try_acquire` on the window races that drop too. Whichever comes first,
/// the composite counts nothing anywhere, the waiter behind it moves up and is granted,
/// and the window's line is left empty: the plain try is admitted unless the
/// composite's place still stood in it.
#[test]
fn loom_a_waiting_composite_dropped_as_the_bucket_hands_it_the_head_gives_its_places_back() {
    model(|| {
        let bucket = bucket(2, 0);
        let window = long_window(1);
        let ahead = queue(&bucket, take(1));
        let composite = all((&bucket, &window)).unwrap();
        let mut acquire = Box::pin(composite.acquire(1));
        let polled = acquire
            .as_mut()
            .poll(&mut Context::from_waker(noop_waker_ref()));
        assert!(polled.is_pending(), "a waiter is ahead of it");
        let behind = queue(&bucket, take(1));
        set_time(2 * SECOND);
        let refill = on_thread_with(&bucket, &window, |bucket, window| {
            refill_wakes(bucket);
            window.try_acquire(1).is_ok()
        });
        drop(acquire);
        let plain_window = refill.join().unwrap();
        assert_eq!(outcome_of(&bucket, ahead), Outcome::Granted);
        assert_eq!(outcome_of(&bucket, behind), Outcome::Granted);
        assert_settled(&bucket, 2, 0, &window, 1 - u64::from(plain_window));
        // Its place is gone: a try now finds the line empty.
        assert_eq!(window.try_acquire(1).is_ok(), !plain_window);
    });
}

/// A sliding log admitting one permit a second, full at 0 (its permit leaves at 1 s).
/// Made before the limiters it is tested with, so it comes first in their lock order.
fn full_log() -> SlidingLog {
    let log = SlidingLog::new(1, Duration::from_secs(1)).unwrap();
    log.try_acquire(1).unwrap();
    log
}

/// A composite over a full sliding log and a fixed window, the log first in the lock
/// order and a waiter already in its line, joins both lines (holding the log's line
/// while it takes the window's), polled once and then dropped; a composite try on the
/// same pair races it, then a plain try on the log. Each try, behind the log's waiters,
/// walks the log's line, and now waits for it before it takes the log's tally or the
/// window's line: the composite try once took those first and then waited for the log's
/// line, held by the joining composite waiting for the window's, and loom reported the
/// deadlock. Each try is refused behind whoever stands in the log's line (the waiter
/// ahead admitted at 1 s, the joining composite at 2 s if it stands there yet, the try
/// after them); nothing is counted, and both lines are left as they were.
#[test]
fn loom_a_composite_joining_a_sliding_log_and_a_window_racing_a_composite_try_never_deadlocks() {
    model(|| {
        let log = full_log();
        let window = long_window(2);
        let alone = all([&log]).unwrap();
        let mut ahead = Box::pin(alone.acquire(1));
        let mut cx = Context::from_waker(noop_waker_ref());
        assert!(ahead.as_mut().poll(&mut cx).is_pending(), "the log is full");
        let joining = {
            let (log, window) = (log.clone(), window.clone());
            thread::spawn(move || {
                let both = all((&log, &window)).unwrap();
                let mut acquire = Box::pin(both.acquire(1));
                let polled = acquire
                    .as_mut()
                    .poll(&mut Context::from_waker(noop_waker_ref()));
                polled.is_pending()
            })
        };
        let trying = {
            let (log, window) = (log.clone(), window.clone());
            thread::spawn(move || {
                let composite = all((&log, &window)).unwrap().try_acquire(1);
                (composite, log.try_acquire(1))
            })
        };
        assert!(joining.join().unwrap(), "the log is full: it waits");
        let (composite, plain) = trying.join().unwrap();
        let composite = match composite {
            Err(TryAcquireAllError::Limited { retry_after }) => retry_after,
            other => panic!("expected Limited, got {other:?}"),
        };
        let Err(TryAcquireError::Limited { retry_after: plain }) = plain else {
            panic!("expected Limited, got {plain:?}");
        };
        for retry_after in [composite, plain] {
            assert!(
                [2, 3].map(Duration::from_secs).contains(&retry_after),
                "{retry_after:?}"
            );
        }
        assert_eq!((log.available(), log.queued_permits()), (0, 1));
        assert_eq!((window.available(), window.queued_permits()), (2, 0));
    });
}
