//! Model checking of the bucket's concurrency core with [loom](https://docs.rs/loom):
//! every interleaving of the operations below (within loom's bounds) is run, and the
//! books are checked at the end of each.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" cargo test --lib --release loom_`. Under `--cfg loom` the lock
//! and the atomics are loom's (see `sync/mod.rs`), the clock stands
//! still at what each test sets, and there is no tokio runtime: a modelled thread calling
//! the refill task's own `serve_and_plan` plays the refill task, and a composite's
//! `acquire` that would sleep stays pending until its test moves the clock and polls it
//! again.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::task::noop_waker_ref;
use loom::future::block_on;
use loom::thread;

use crate::bucket::queue::{Kind, Outcome, Request, WaiterId};
use crate::bucket::refill;
use crate::bucket::state::Leaving;
use crate::bucket::{Take, TokenBucket};
use crate::clock::{model_time, NEVER};
use crate::composite::{all, all_in_turn, All, Members};
use crate::error::{TakeError, TryAcquireAllError, TryAcquireError, TryTakeError};
use crate::keyed::Keyed;
use crate::rate::Rate;
use crate::window::{FixedWindow, SlidingLog};

const SECOND: u64 = 1_000_000_000;

/// Runs `test` under loom with the clock at 0 at the start of every interleaving, and
/// prints how many interleavings were explored.
fn model(test: impl Fn() + Sync + Send + 'static) {
    let explored = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&explored);
    loom::model(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        let _clock = ModelClock::install();
        test();
    });
    // The test harness names each test's thread after the test.
    let name = std::thread::current()
        .name()
        .unwrap_or("a loom test")
        .to_owned();
    println!("{name}: {} interleavings", explored.load(Ordering::Relaxed));
}

/// The model run's clock, removed when the run ends, even by a failed assertion: loom
/// must see everything of a run dropped inside it, or the failure is lost in an abort.
struct ModelClock;

impl ModelClock {
    fn install() -> ModelClock {
        model_time::install();
        ModelClock
    }
}

impl Drop for ModelClock {
    fn drop(&mut self) {
        model_time::uninstall();
    }
}

fn set_time(nanos: u64) {
    model_time::set(nanos);
}

/// One token a second, holding at most `capacity`, starting with `initial`.
fn bucket(capacity: u64, initial: u64) -> TokenBucket {
    TokenBucket::builder()
        .rate(Rate::per_second(1))
        .capacity(capacity)
        .initial(initial)
        .build()
        .unwrap()
}

/// Keys of one shard, each a bucket of one token a second holding at most `capacity`.
fn keyed_on_one_shard(capacity: u64) -> Keyed<u8, TokenBucket> {
    Keyed::builder(bucket(capacity, capacity))
        .shards(1)
        .build()
        .unwrap()
}

fn take(tokens: u64) -> Request {
    Request {
        kind: Kind::Take,
        tokens,
        deadline: NEVER,
    }
}

/// Runs `work` on a new modelled thread with a clone of the bucket.
fn on_thread<T: Send + 'static>(
    bucket: &TokenBucket,
    work: impl FnOnce(&TokenBucket) -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    let bucket = bucket.clone();
    thread::spawn(move || work(&bucket))
}

/// Queues `request` for a waiter that is not polling yet (its waker does nothing).
fn queue(bucket: &TokenBucket, request: Request) -> WaiterId {
    bucket
        .shared()
        .begin(request, noop_waker_ref())
        .unwrap()
        .expect("queued")
}

/// Waits for waiter `id`'s outcome, polling as its future does (a grant read here is not
/// acknowledged: the caller does that where it matters).
fn outcome_of(bucket: &TokenBucket, id: WaiterId) -> Outcome {
    let mut registered = None;
    block_on(poll_fn(|cx| {
        bucket.shared().poll_outcome(id, &mut registered, cx)
    }))
}

/// A `take(tokens)` future polled once, by a task whose waker does nothing: queued.
fn queued_take(bucket: &TokenBucket, tokens: u64) -> Take {
    let mut take = bucket.take(tokens);
    let polled = Pin::new(&mut take).poll(&mut Context::from_waker(noop_waker_ref()));
    assert!(polled.is_pending(), "{polled:?}");
    take
}

/// Polls `inner` once more as soon as its first poll is pending, by the same task: that
/// second poll finds its waker registered and reads the outcome without the lock.
struct PolledTwice<F> {
    inner: F,
    polls: usize,
}

impl<F: Future + Unpin> Future for PolledTwice<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let polled = Pin::new(&mut self.inner).poll(cx);
        self.polls += 1;
        if polled.is_pending() && self.polls == 1 {
            cx.waker().wake_by_ref();
        }
        polled
    }
}

/// What the refill task does when it wakes: serve at the current instant, then deliver
/// the outcomes after releasing the lock.
fn refill_wakes(bucket: &TokenBucket) {
    let mut wakers = Vec::new();
    refill::serve_and_plan(&Arc::downgrade(bucket.shared()), &mut wakers);
}

/// A bucket of 1, empty at 0, with a `take(1)` queued; the clock at 1 s, when its token
/// accrues, and the refill task waking on another thread to grant it.
fn queued_as_the_refill_task_grants() -> (TokenBucket, Take, thread::JoinHandle<()>) {
    let bucket = bucket(1, 0);
    let waiter = queued_take(&bucket, 1);
    set_time(SECOND);
    let refill = on_thread(&bucket, refill_wakes);
    (bucket, waiter, refill)
}

/// Token accounting: two threads race `try_take` for the one token there. Exactly one
/// wins, and the books balance.
#[test]
fn loom_racing_try_takes_grant_each_token_once() {
    model(|| {
        let bucket = bucket(1, 1);
        let racers: Vec<_> = (0..2)
            .map(|_| on_thread(&bucket, |bucket| bucket.try_take(1).is_ok()))
            .collect();
        let winners = racers
            .into_iter()
            .map(|racer| racer.join().unwrap())
            .filter(|&won| won)
            .count();
        assert_eq!(winners, 1);
        let stats = bucket.stats();
        assert_eq!((stats.taken, stats.available, stats.denied), (1, 0, 1));
    });
}

/// The hand-off: a queued waiter is granted by the refill task while a `try_take` races
/// for the same token. FIFO holds (the `try_take` never jumps the waiter) and the waiter
/// reads its grant.
#[test]
fn loom_refill_task_hands_a_grant_to_a_waiter() {
    model(|| {
        let bucket = bucket(1, 0);
        let id = queue(&bucket, take(1));
        set_time(SECOND);
        let refill = on_thread(&bucket, refill_wakes);
        let jumper = on_thread(&bucket, |bucket| bucket.try_take(1));
        assert!(matches!(
            jumper.join().unwrap(),
            Err(TryTakeError::Insufficient { .. })
        ));
        refill.join().unwrap();
        assert_eq!(outcome_of(&bucket, id), Outcome::Granted);
        let stats = bucket.stats();
        assert_eq!((stats.taken, stats.available, stats.queued), (1, 0, 0));
    });
}

/// Time passing races a newcomer: while one waiter is queued, the clock reaches the
/// instant its token accrues as a `try_take` arrives. Whether the newcomer reads the clock
/// before or after, it never takes the token from the waiter ahead of it.
#[test]
fn loom_a_newcomer_at_the_instant_a_token_accrues_never_jumps_the_queue() {
    model(|| {
        let bucket = bucket(1, 0);
        let id = queue(&bucket, take(1));
        let clock = thread::spawn(|| set_time(SECOND));
        let newcomer = on_thread(&bucket, |bucket| bucket.try_take(1));
        clock.join().unwrap();
        assert!(newcomer.join().unwrap().is_err());
        refill_wakes(&bucket);
        assert_eq!(outcome_of(&bucket, id), Outcome::Granted);
        let stats = bucket.stats();
        assert_eq!((stats.taken, stats.available, stats.queued), (1, 0, 0));
    });
}

/// Cancellation racing a grant: the waiter's future is dropped while the refill task
/// grants it and wakes it after releasing the lock. Whichever comes first, the token ends
/// up back in the bucket, never taken and never lost, and the word is handed back.
#[test]
fn loom_a_waiter_dropped_while_granted_gives_the_token_back() {
    model(|| {
        let (bucket, waiter, refill) = queued_as_the_refill_task_grants();
        drop(waiter);
        refill.join().unwrap();
        assert_handed_back(&bucket, SECOND, 0, 1);
    });
}

/// The new wake path: a waiter polled pending (once under the lock, registering its
/// waker, then once more without it, finding that waker registered) races the refill
/// task's grant and wake-up. However they interleave, the waiter is woken and reads its
/// grant (a lost wake-up would leave it parked, which loom reports), and once it has the
/// word is handed back.
#[test]
fn loom_a_waiter_polled_pending_racing_its_grant_is_woken() {
    model(|| {
        let (bucket, waiter, refill) = queued_as_the_refill_task_grants();
        let result = block_on(PolledTwice {
            inner: waiter,
            polls: 0,
        });
        assert_eq!(result, Ok(()));
        refill.join().unwrap();
        assert_handed_back(&bucket, SECOND, 1, 0);
    });
}

/// A waiter polled (under the lock, then without it) and then dropped, racing its grant:
/// it either read the grant and keeps the token, or its drop undoes the grant; the books
/// balance and the word is handed back either way.
#[test]
fn loom_a_waiter_polled_then_dropped_racing_its_grant_keeps_the_books() {
    model(|| {
        let (bucket, mut waiter, refill) = queued_as_the_refill_task_grants();
        let mut cx = Context::from_waker(noop_waker_ref());
        let first = Pin::new(&mut waiter).poll(&mut cx);
        let second = Pin::new(&mut waiter).poll(&mut cx);
        let granted = [first, second].contains(&Poll::Ready(Ok(())));
        drop(waiter);
        refill.join().unwrap();
        let taken = u64::from(granted);
        assert_handed_back(&bucket, SECOND, taken, 1 - taken);
    });
}

/// A deadline racing a grant: the waiter either hears the grant and keeps the token, or
/// times out and the token stays in the bucket; `taken + available` is always the one
/// token that accrued.
#[test]
fn loom_a_deadline_racing_a_grant_keeps_the_books() {
    model(|| {
        let bucket = bucket(1, 0);
        let id = queue(&bucket, take(1));
        set_time(SECOND);
        let refill = on_thread(&bucket, refill_wakes);
        let outcome = bucket.leave(id, take(1), Leaving::DeadlinePassed);
        refill.join().unwrap();
        let stats = bucket.stats();
        match outcome {
            Some(Outcome::Granted) => assert_eq!((stats.taken, stats.available), (1, 0)),
            None => assert_eq!((stats.taken, stats.available), (0, 1)),
            other => panic!("unexpected outcome {other:?}"),
        }
        assert_eq!(stats.queued, 0);
    });
}

/// Two waiters and a refund that covers only the first: whatever the interleaving of
/// the refund, the refill task and the second waiter giving up, the first is granted
/// (FIFO) and the second never is.
#[test]
fn loom_grants_follow_the_queue_order() {
    model(|| {
        let bucket = bucket(2, 0);
        let first = queue(&bucket, take(2));
        let second = queue(&bucket, take(1));
        let refunder = on_thread(&bucket, |bucket| bucket.refund(2));
        let refill = on_thread(&bucket, refill_wakes);
        let second_outcome = bucket.leave(second, take(1), Leaving::DeadlinePassed);
        refunder.join().unwrap();
        refill.join().unwrap();
        assert_eq!(outcome_of(&bucket, first), Outcome::Granted);
        assert!(second_outcome.is_none(), "{second_outcome:?}");
        let stats = bucket.stats();
        assert_eq!((stats.taken, stats.available, stats.queued), (2, 0, 0));
    });
}

/// The fixed window's classic race: a full window, the clock reaching the next window's
/// edge, and two requests racing to be the one that starts it. Whichever reads the clock
/// before the edge is refused; of those after it, exactly one starts the new window, so
/// the new window never admits more than its limit (no double reset, no request slipping
/// through a reset).
#[test]
fn loom_racing_requests_at_a_window_edge_never_pass_the_limit() {
    model(|| {
        let window = FixedWindow::new(1, Duration::from_secs(1)).unwrap();
        set_time(SECOND / 2);
        assert!(window.try_acquire(1).is_ok());
        let window = Arc::new(window);
        let clock = thread::spawn(|| set_time(SECOND));
        let racers: Vec<_> = (0..2)
            .map(|_| {
                let window = Arc::clone(&window);
                thread::spawn(move || window.try_acquire(1).is_ok())
            })
            .collect();
        clock.join().unwrap();
        let admitted = racers
            .into_iter()
            .map(|racer| racer.join().unwrap())
            .filter(|&admitted| admitted)
            .count();
        assert!(admitted <= 1, "{admitted} admitted into a window of 1");
        // Once both are done, the new window is full whoever filled it.
        assert_eq!(window.available(), 1 - admitted as u64);
    });
}

/// Close racing a take: the take is served, refused as closed, or queued and then told
/// the bucket closed; it never hangs, and nobody is left queued.
#[test]
fn loom_close_racing_a_take_never_strands_it() {
    model(|| {
        let bucket = bucket(1, 0);
        let closer = on_thread(&bucket, |bucket| bucket.close());
        let result = match bucket.shared().begin(take(1), noop_waker_ref()) {
            Ok(None) => Ok(()),
            Ok(Some(id)) => match outcome_of(&bucket, id) {
                Outcome::Closed => Err(TakeError::Closed),
                other => panic!("a queued take read {other:?}"),
            },
            Err(error) => Err(error),
        };
        closer.join().unwrap();
        assert!(matches!(result, Err(TakeError::Closed)), "{result:?}");
        let stats = bucket.stats();
        assert_eq!((stats.queued, stats.taken), (0, 0));
    });
}

/// The fast path never passes a waiter: a `try_take` racing a `take` that must queue
/// either wins the token before the waiter queued, or fails. Once the waiter is queued
/// (it says so through `queued`), a taker that starts later never succeeds, however its
/// compare-and-swap interleaves with the waiter's seizing of the word.
#[test]
fn loom_a_fast_taker_never_passes_a_waiter() {
    model(|| {
        // Empty at 0; the token accrues at 1 s.
        let bucket = bucket(1, 0);
        let queued = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&queued);
        let waiter = on_thread(&bucket, move |bucket| {
            let begun = bucket.shared().begin(take(1), noop_waker_ref()).unwrap();
            flag.store(true, loom::sync::atomic::Ordering::SeqCst);
            begun
        });
        set_time(SECOND);
        let waiter_was_queued = queued.load(loom::sync::atomic::Ordering::SeqCst);
        let taken = bucket.try_take(1).is_ok();
        let begun = waiter.join().unwrap();
        if waiter_was_queued {
            assert!(!taken, "a fast-path taker passed a queued waiter");
        }
        // One token accrued: whoever got it, nobody else did.
        let stats = bucket.stats();
        assert_eq!(stats.taken + stats.available, 1, "{stats:?}");
        if taken {
            assert!(
                begun.is_some(),
                "both the taker and the waiter were served at once"
            );
        }
    });
}

/// Settings changing under fast-path takers: the takers' compare-and-swaps and the
/// seizing, re-basing and publishing of the word interleave in every order, and no
/// taker is granted a token the bucket did not hold under the settings in force.
#[test]
fn loom_set_capacity_racing_fast_takers_keeps_the_books() {
    model(|| {
        let bucket = bucket(2, 2);
        let taker = on_thread(&bucket, |bucket| u64::from(bucket.try_take(1).is_ok()));
        bucket.set_capacity(1).unwrap();
        let after = u64::from(bucket.try_take(1).is_ok());
        let taken = taker.join().unwrap() + after;
        let stats = bucket.stats();
        // The clock stands still: only the two initial tokens exist, and lowering the
        // capacity to 1 may drop one of them.
        assert!(taken <= 2, "{taken} taken");
        assert_eq!(stats.taken, taken);
        assert!(stats.available + taken <= 2, "{stats:?}");
        assert!(stats.available <= 1, "{stats:?}");
    });
}

/// A rate change re-expresses the word in new units, racing a fast-path taker. The
/// taker's view (units read with the word) must never mix the old word with the new
/// units: the books balance exactly.
#[test]
fn loom_set_rate_racing_a_fast_taker_keeps_the_books() {
    model(|| {
        // Made half a second in, holding 1 token, at one a second.
        set_time(SECOND / 2);
        let bucket = bucket(3, 1);
        set_time(SECOND);
        let taker = on_thread(&bucket, |bucket| bucket.try_take(1).is_ok());
        bucket
            .set_rate(Rate::new(3, Duration::from_secs(2)))
            .unwrap();
        let taken = u64::from(taker.join().unwrap());
        // Made at 0.5 s with 1 token, at 1 s it holds 1.5 whatever the order: a rate
        // change counts what accrued before it at the old rate.
        let stats = bucket.stats();
        assert_eq!(stats.taken, taken);
        assert_eq!(stats.available + taken, 1, "{stats:?}");
    });
}

/// A refund racing fast-path takers: the refund goes through the lock, the takers
/// through the word, and every token refunded is taken or held.
#[test]
fn loom_refund_racing_fast_takers_keeps_the_books() {
    model(|| {
        let bucket = bucket(2, 1);
        let taker = on_thread(&bucket, |bucket| {
            u64::from(bucket.try_take(1).is_ok()) + u64::from(bucket.try_take(1).is_ok())
        });
        bucket.refund(1);
        let taken = taker.join().unwrap();
        let stats = bucket.stats();
        assert!(taken >= 1, "the initial token was there for the first try");
        assert_eq!(stats.taken, taken);
        assert_eq!(stats.available + taken, 2, "{stats:?}");
    });
}

/// The fast path's word is open again, at the model's clock `now`, holding `available`
/// tokens; `taken` were taken, and nobody is queued.
#[track_caller]
fn assert_handed_back(bucket: &TokenBucket, now: u64, taken: u64, available: u64) {
    let word = bucket.shared().fast.available(now);
    assert_eq!(word, Some(available), "the word stayed seized");
    let stats = bucket.stats();
    let books = (stats.taken, stats.available, stats.queued);
    assert_eq!(books, (taken, available, 0), "{stats:?}");
}

/// A bucket of 2, empty at 0, whose one waiter the refill task granted 1 token at 1 s;
/// the clock stands at 2 s, another token accrued, and the grant is not read yet.
fn granted_unseen_a_second_ago() -> (TokenBucket, WaiterId) {
    let bucket = bucket(2, 0);
    let id = queue(&bucket, take(1));
    set_time(SECOND);
    refill_wakes(&bucket);
    set_time(2 * SECOND);
    (bucket, id)
}

/// A waiter reading its grant races a taker: while the grant is unseen every take goes
/// through the lock, and whichever comes first, once it is read the word is handed back
/// to the fast path (by the waiter, or by the taker if the waiter read it first).
#[test]
fn loom_a_grant_read_while_a_taker_races_hands_the_word_back() {
    model(|| {
        let (bucket, id) = granted_unseen_a_second_ago();
        let waiter = on_thread(&bucket, move |bucket| {
            assert_eq!(outcome_of(bucket, id), Outcome::Granted);
            bucket.shared().acknowledge_grant();
        });
        assert_eq!(bucket.try_take(1), Ok(()));
        waiter.join().unwrap();
        assert_handed_back(&bucket, 2 * SECOND, 2, 0);
    });
}

/// A grant dropped unseen races a taker. Dropped first, it has room for its token and
/// gives it back; taken first, the taker leaves room for it just the same. Either way one
/// token is left, not the two a refund after the take would leave in a bucket whose
/// history without the grant holds one, and the word is handed back.
#[test]
fn loom_a_grant_dropped_unseen_while_a_taker_races_gives_back_what_fits() {
    model(|| {
        let (bucket, id) = granted_unseen_a_second_ago();
        let taker = on_thread(&bucket, |bucket| bucket.try_take(1));
        bucket.leave(id, take(1), Leaving::Dropped);
        assert_eq!(taker.join().unwrap(), Ok(()));
        assert_handed_back(&bucket, 2 * SECOND, 1, 1);
    });
}

/// A grant decided under the lock (by a waiter behind it leaving, which serves first) can be
/// read and acknowledged before the leaving waiter's release adds it to the count: the
/// count dips below zero for a moment, and the word is still handed back exactly once
/// nobody is unseen or queued.
#[test]
fn loom_a_grant_acknowledged_before_it_is_counted_still_hands_the_word_back() {
    model(|| {
        let bucket = bucket(2, 0);
        let first = queue(&bucket, take(1));
        let second = queue(&bucket, take(1));
        set_time(SECOND);
        let waiter = on_thread(&bucket, move |bucket| {
            assert_eq!(outcome_of(bucket, first), Outcome::Granted);
            bucket.shared().acknowledge_grant();
        });
        let left = bucket.leave(second, take(1), Leaving::Dropped);
        assert!(left.is_none(), "{left:?}");
        waiter.join().unwrap();
        assert_handed_back(&bucket, SECOND, 1, 0);
    });
}

/// On a bucket of two limits (1 a second each, holding at most 1 and 3, empty at 0), a
/// waiter granted its token at 1 s drops the grant unseen at 2 s while a taker races it.
/// Had the grant never been made, the first limit would have been full from 1 s, its
/// token dropped by the cap, and the second would hold one more: in either order each
/// limit gets back what it had room for, and after the taker the limits hold 0 and 1.
/// The word stays seized: a bucket of several limits is served under the lock.
#[test]
fn loom_a_grant_dropped_unseen_on_two_limits_gives_each_back_what_it_had_room_for() {
    model(|| {
        let bucket = TokenBucket::builder()
            .rate(Rate::per_second(1))
            .capacity(1)
            .limit(Rate::per_second(1), 3)
            .initial(0)
            .build()
            .unwrap();
        let id = queue(&bucket, take(1));
        set_time(SECOND);
        refill_wakes(&bucket);
        set_time(2 * SECOND);
        let taker = on_thread(&bucket, |bucket| bucket.try_take(1));
        bucket.leave(id, take(1), Leaving::Dropped);
        assert_eq!(taker.join().unwrap(), Ok(()));
        let held: Vec<u64> = (bucket.limit_stats().iter())
            .map(|limit| limit.available)
            .collect();
        assert_eq!(held, [0, 1]);
        let stats = bucket.stats();
        assert_eq!((stats.taken, stats.available, stats.queued), (1, 0, 0));
        assert_eq!(bucket.shared().fast.available(2 * SECOND), None);
    });
}

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
