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
    model_bounded(None, test);
}

/// [`model`], exploring only the interleavings with at most `preemptions` forced
/// switches between threads, when given: for a model whose every interleaving takes
/// minutes, and whose failures show within the bound.
fn model_bounded(preemptions: Option<usize>, test: impl Fn() + Sync + Send + 'static) {
    let explored = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&explored);
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = preemptions.or(builder.preemption_bound);
    builder.check(move || {
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

/// Waits for waiter `id`'s outcome, polling as its future does, but as if it took no
/// tokens: a grant read here is not counted seen ([`read_grant`] does that).
fn outcome_of(bucket: &TokenBucket, id: WaiterId) -> Outcome {
    outcome_taking(bucket, id, 0)
}

/// Waits for the outcome of waiter `id`, a take of one token, as its future does: a
/// grant read here is seen.
fn read_grant(bucket: &TokenBucket, id: WaiterId) -> Outcome {
    outcome_taking(bucket, id, 1)
}

fn outcome_taking(bucket: &TokenBucket, id: WaiterId, consumes: u64) -> Outcome {
    block_on(poll_fn(|cx| bucket.shared().poll_outcome(id, consumes, cx)))
}

/// A `take(tokens)` future polled once, by a task whose waker does nothing: queued.
fn queued_take(bucket: &TokenBucket, tokens: u64) -> Take {
    let mut take = bucket.take(tokens);
    let polled = Pin::new(&mut take).poll(&mut Context::from_waker(noop_waker_ref()));
    assert!(polled.is_pending(), "{polled:?}");
    take
}

/// Polls `inner` once more as soon as its first poll is pending, by the same task: that
/// second poll finds its waker registered already.
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

/// The wake path: a waiter polled pending (once registering its waker, then once more,
/// finding that waker registered) races the refill
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

/// A waiter polled twice and then dropped, racing its grant:
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
    // Within five preemptions: 74 thousand interleavings of the 910 thousand there are
    // since a reader reads the word again whenever it moved (see `fast.rs`).
    model_bounded(Some(5), || {
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

/// A reader on the fast path racing a change of settings reads the word and the settings
/// of one era: the capacity with the tokens it goes with. (Mixing the word of the old era
/// with the units of the new one would read 2 tokens where 1 is held.)
#[test]
fn loom_a_reader_racing_a_capacity_change_reads_one_era() {
    // Every interleaving is 1.7 million; the mixed read shows with two preemptions.
    model_bounded(Some(2), || {
        let bucket = bucket(4, 1);
        // The word alone: the lock's answers are of one era by the lock.
        let reader = on_thread(&bucket, |bucket| {
            bucket.shared().fast.settings_and_tokens(0)
        });
        bucket.set_capacity(2).unwrap();
        if let Some((_, capacity, available)) = reader.join().unwrap() {
            let read = (capacity, available);
            assert!(read == (4, 1) || read == (2, 1), "{read:?}");
        }
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

/// A waiter reading its grant (under the lock) races a taker on the word, published with
/// its record bit while the grant is unseen: whichever comes first, the taker takes (on
/// the word, noting the room, or under the lock), and once the grant is read the word is
/// handed back without the bit.
#[test]
fn loom_a_grant_read_while_a_taker_races_hands_the_word_back() {
    model(|| {
        let (bucket, id) = granted_unseen_a_second_ago();
        let waiter = on_thread(&bucket, move |bucket| {
            assert_eq!(read_grant(bucket, id), Outcome::Granted);
        });
        assert_eq!(bucket.try_take(1), Ok(()));
        waiter.join().unwrap();
        assert_handed_back(&bucket, 2 * SECOND, 2, 0);
    });
}

/// A grant dropped unseen races a taker. Dropped first, the room since it never fell
/// below its token, which comes back; taken first, the room before the take was one
/// token, and one comes back just the same. Either way one token is left, not the two a
/// refund after the take would leave in a bucket whose history without the grant holds
/// one, and the word is handed back.
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

/// A taker on the word, published with its record bit, races a lock section that changes
/// nothing and notes no room (a `take(3)` refused as larger than the capacity): the lock's holder seizes and publishes the very value
/// the taker read, so the taker's swap may succeed across it. Its note of the room must
/// still reach the next seize: the grant of 2 (made at 2 s, empty after, so room 2) is
/// dropped at 3 s after a `try_take(1)` found room 1, and gives back 1, not 2, which
/// would leave 2 where the history without the grant holds 1. (Publishing once cleared
/// the note, which a taker that noted before it and swapped after it lost.)
#[test]
fn loom_a_taker_racing_a_lock_section_that_changes_nothing_keeps_its_note() {
    model(|| {
        let bucket = bucket(2, 0);
        let id = queue(&bucket, take(2));
        set_time(2 * SECOND);
        refill_wakes(&bucket);
        set_time(3 * SECOND);
        let taker = on_thread(&bucket, |bucket| bucket.try_take(1));
        let refused = bucket.shared().begin(take(3), noop_waker_ref());
        assert!(
            matches!(refused, Err(TakeError::ExceedsCapacity { .. })),
            "{refused:?}"
        );
        assert_eq!(taker.join().unwrap(), Ok(()));
        bucket.leave(id, take(2), Leaving::Dropped);
        assert_handed_back(&bucket, 3 * SECOND, 1, 1);
    });
}

/// A grant decided under the lock by a waiter behind it leaving (which serves first) is
/// read by its waiter on another thread: whichever comes first, the word is handed back
/// once nobody is unseen or queued, counted under the lock.
#[test]
fn loom_a_grant_read_while_the_waiter_behind_leaves_hands_the_word_back() {
    model(|| {
        let bucket = bucket(2, 0);
        let first = queue(&bucket, take(1));
        let second = queue(&bucket, take(1));
        set_time(SECOND);
        let waiter = on_thread(&bucket, move |bucket| {
            assert_eq!(read_grant(bucket, first), Outcome::Granted);
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
/// limit gets back what its least room since allows (none on the first, which was full
/// at 2 s, one on the second), and after the taker the limits hold 0 and 1.
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

mod members;
