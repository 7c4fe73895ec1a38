//! `SlidingLog`: at most `limit` permits in any interval of length `window`, exactly;
//! a permit admitted at `t` holds back requests until `t + window`, not a nanosecond
//! less.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

use common::admissions::{check_never_over, check_the_checker, Admission};
use common::{limiters, ms, ns, retry_after, secs};
use token_bucket::{ConfigError, KeyTemplate, SlidingLog};
use tokio::time::{advance, Instant};

fn log(limit: u64, window: Duration) -> SlidingLog {
    SlidingLog::new(limit, window).unwrap()
}

impl limiters::Waiting for SlidingLog {
    fn queued_permits(&self) -> u64 {
        SlidingLog::queued_permits(self)
    }
}

/// How long a permit admitted at the start (or any whole 100 ms after) counts.
const HOLD: Duration = Duration::from_secs(1);

#[tokio::test(start_paused = true)]
async fn is_limited_and_available_count_nothing() {
    limiters::is_limited_and_available_count_nothing(log(2, secs(1)), HOLD).await;
}

#[tokio::test(start_paused = true)]
async fn is_idle_when_nothing_counts_and_nobody_waits() {
    limiters::is_idle_when_nothing_counts_and_nobody_waits(log(2, secs(1)), HOLD).await;
}

#[tokio::test(start_paused = true)]
async fn zero_permits_are_admitted_at_once_even_when_full_or_with_waiters() {
    limiters::zero_permits_are_admitted_at_once_even_when_full_or_with_waiters(log(1, secs(1)))
        .await;
}

#[tokio::test(start_paused = true)]
async fn more_permits_than_the_limit_are_refused_by_try_acquire_and_acquire() {
    limiters::more_permits_than_the_limit_are_refused_at_once(log(3, secs(1))).await;
}

#[test]
fn a_waiter_in_a_runtime_without_a_timer_panics_on_its_first_poll() {
    limiters::a_waiter_in_a_runtime_without_a_timer_panics_on_its_first_poll(
        SlidingLog::new(1, secs(60)).unwrap(),
    );
}

#[test]
fn acquire_that_must_wait_outside_a_runtime_fails_with_no_runtime() {
    limiters::acquire_that_must_wait_outside_a_runtime_fails_with_no_runtime(log(1, secs(3_600)));
}

#[tokio::test(start_paused = true)]
async fn a_refund_lets_the_waiting_head_in_at_once() {
    limiters::a_refund_lets_the_waiting_head_in_at_once(log(1, secs(1)), HOLD).await;
}

#[tokio::test(start_paused = true)]
async fn retry_after_places_each_waiter_in_line_whole() {
    limiters::retry_after_places_each_waiter_in_line_whole(log(5, secs(1)), HOLD).await;
}

#[tokio::test(start_paused = true)]
async fn retry_after_counts_the_permits_of_the_waiters_in_line() {
    limiters::retry_after_counts_the_permits_of_the_waiters_in_line(log(3, secs(1)), HOLD).await;
}

#[tokio::test(start_paused = true)]
async fn acquire_is_first_in_first_out_among_waiters_of_different_sizes() {
    limiters::acquire_is_first_in_first_out_among_waiters_of_different_sizes(log(4, secs(1)), HOLD)
        .await;
}

#[tokio::test(start_paused = true)]
async fn try_acquire_never_jumps_the_line() {
    limiters::try_acquire_never_jumps_the_line(log(2, secs(1)), HOLD).await;
}

#[tokio::test(start_paused = true)]
async fn behind_a_head_that_gives_up_the_next_is_admitted_from_then_on() {
    limiters::behind_a_head_that_gives_up_the_next_is_admitted_from_then_on(log(2, secs(1)), HOLD)
        .await;
}

#[tokio::test(start_paused = true)]
async fn dropping_a_waiting_acquire_lets_the_next_go_and_takes_nothing() {
    limiters::dropping_a_waiting_acquire_lets_the_next_go_and_takes_nothing(log(2, secs(1)), HOLD)
        .await;
}

#[test]
fn threads_hammering_try_acquire_never_get_more_than_the_limit_in_any_window() {
    limiters::threads_never_get_more_than_the_limit_in_any_window(log(4, ms(30)), 4, ms(30));
}

#[tokio::test(start_paused = true)]
async fn the_burst_at_the_seam_of_two_fixed_windows_is_refused_until_a_window_later() {
    let limiter = log(10, secs(1));
    // The last millisecond of what a fixed window would call the first second...
    advance(ms(999)).await;
    limiter.try_acquire(10).unwrap();
    // ...and the first of the next: a fixed window would admit 10 more here.
    advance(ms(1)).await;
    assert_eq!(limiter.available(), 0);
    assert_eq!(retry_after(limiter.try_acquire(1)), ms(999));
    assert_eq!(retry_after(limiter.try_acquire(10)), ms(999));
    // Still refused one nanosecond before 999 ms + 1 s...
    advance(ms(999) - ns(1)).await;
    assert_eq!(retry_after(limiter.try_acquire(1)), ns(1));
    // ...and admitted at that instant exactly, all 10 at once.
    advance(ns(1)).await;
    assert_eq!(limiter.try_acquire(10), Ok(()));
    assert_eq!(retry_after(limiter.try_acquire(1)), secs(1));
}

#[tokio::test(start_paused = true)]
async fn each_permit_counts_for_exactly_one_window_from_its_own_instant() {
    let limiter = log(5, secs(1));
    limiter.try_acquire(2).unwrap(); // at 0
    advance(ms(300)).await;
    limiter.try_acquire(1).unwrap(); // at 300 ms
    advance(ms(300)).await;
    limiter.try_acquire(2).unwrap(); // at 600 ms

    // The permit `n` places from the oldest decides a request for `n`.
    assert_eq!(retry_after(limiter.try_acquire(1)), ms(400)); // the two at 0 leave at 1 s
    assert_eq!(retry_after(limiter.try_acquire(2)), ms(400));
    assert_eq!(retry_after(limiter.try_acquire(3)), ms(700)); // the one at 300 ms, at 1.3 s
    assert_eq!(retry_after(limiter.try_acquire(5)), ms(1_000)); // the two at 600 ms, at 1.6 s

    advance(ms(400) - ns(1)).await;
    assert_eq!(retry_after(limiter.try_acquire(1)), ns(1));
    assert_eq!(limiter.available(), 0);
    advance(ns(1)).await; // 1 s
    assert_eq!(limiter.available(), 2);
    assert_eq!(retry_after(limiter.try_acquire(3)), ms(300));
    assert_eq!(limiter.try_acquire(2), Ok(()));
    assert_eq!(retry_after(limiter.try_acquire(1)), ms(300));
    advance(ms(300)).await; // 1.3 s
    assert_eq!(limiter.available(), 1);
    assert_eq!(limiter.try_acquire(1), Ok(()));
    assert_eq!(retry_after(limiter.try_acquire(1)), ms(300));
}

#[tokio::test(start_paused = true)]
async fn a_year_of_silence_leaves_a_clean_slate() {
    let limiter = log(3, secs(1));
    limiter.try_acquire(2).unwrap();
    advance(ms(10)).await;
    limiter.try_acquire(1).unwrap();
    advance(secs(365 * 24 * 60 * 60)).await;
    assert_eq!(limiter.available(), 3);
    assert!(limiter.is_idle());
    assert_eq!(limiter.try_acquire(3), Ok(()));
    assert_eq!(retry_after(limiter.try_acquire(1)), secs(1));
    advance(secs(1) - ns(1)).await;
    assert_eq!(retry_after(limiter.try_acquire(3)), ns(1));
}

#[tokio::test(start_paused = true)]
async fn a_refund_forgets_the_newest_permits() {
    let limiter = log(5, secs(1));
    limiter.try_acquire(2).unwrap(); // at 0
    advance(ms(500)).await;
    limiter.try_acquire(3).unwrap(); // at 500 ms
    advance(ms(100)).await;
    limiter.refund(3);
    assert_eq!(limiter.available(), 3);
    // The 2 from 0 are what is left: at 1 s all 5 are free. (Had the oldest been
    // forgotten, 2 from 500 ms would still count.)
    advance(ms(400) - ns(1)).await;
    assert_eq!(limiter.available(), 3);
    advance(ns(1)).await;
    assert_eq!(limiter.available(), 5);
}

#[tokio::test(start_paused = true)]
async fn fresh_has_the_same_settings_and_nothing_counted_while_clones_share() {
    let fresh = limiters::fresh_has_nothing_counted_while_clones_share(log(3, secs(1)), HOLD).await;
    assert_eq!((fresh.limit(), fresh.window()), (3, secs(1)));
    assert_eq!(
        format!("{fresh:?}"),
        "SlidingLog { limit: 3, window: 1s, counted: 3, queued_permits: 0 }"
    );
}

#[tokio::test(start_paused = true)]
async fn a_refund_of_nothing_changes_nothing_and_of_too_much_empties_it() {
    limiters::a_refund_of_nothing_changes_nothing_and_of_too_much_empties_it(log(5, secs(1)), HOLD)
        .await;
}

#[test]
fn bad_settings_are_refused_with_errors_naming_the_values() {
    assert_eq!(
        SlidingLog::new(0, secs(1)).unwrap_err(),
        ConfigError::ZeroLimit
    );
    assert_eq!(
        SlidingLog::new(5, Duration::ZERO).unwrap_err(),
        ConfigError::ZeroWindow
    );
    let too_large = SlidingLog::new(SlidingLog::MAX_LIMIT + 1, secs(1)).unwrap_err();
    assert_eq!(
        too_large,
        ConfigError::LimitTooLarge {
            limit: 1_048_577,
            max: 1_048_576
        }
    );
    assert_eq!(
        too_large.to_string(),
        "the limit 1048577 is above the largest accepted, 1048576"
    );
    assert_eq!(
        SlidingLog::new(u64::MAX, secs(1)).unwrap_err(),
        ConfigError::LimitTooLarge {
            limit: u64::MAX,
            max: SlidingLog::MAX_LIMIT
        }
    );
    // The bounds themselves are fine, and so is a window past the clock's horizon.
    assert!(SlidingLog::new(SlidingLog::MAX_LIMIT, secs(1)).is_ok());
    assert!(SlidingLog::new(1, ns(1)).is_ok());
    let forever = SlidingLog::new(1, Duration::MAX).unwrap();
    forever.try_acquire(1).unwrap();
    assert!(retry_after(forever.try_acquire(1)) > Duration::MAX - secs(60));
}

#[tokio::test(start_paused = true)]
async fn a_random_schedule_never_puts_more_than_the_limit_in_any_window() {
    // Paused time: every admission's instant is known to the nanosecond.
    let limiter = log(7, ms(100));
    let mut admissions = Vec::new();
    let mut random = 0x2545_f491_4f6c_dd1d_u64;
    for _ in 0..5_000 {
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        let permits = random % 4 + 1;
        if limiter.try_acquire(permits).is_ok() {
            admissions.push(Admission::at(Instant::now(), permits));
        }
        advance(ns(random % 9_000_000)).await;
    }
    assert!(
        admissions.len() > 100,
        "the schedule admitted too little to say much"
    );
    check_never_over(&admissions, 7, ms(100)).unwrap();
}

#[test]
fn the_admission_checker_catches_an_excess() {
    check_the_checker();
}

/// Counts the bytes the current thread holds allocated.
struct CountingAllocator;

thread_local! {
    static LIVE_BYTES: Cell<i64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.with(|live| live.set(live.get() + layout.size() as i64));
        // SAFETY: forwards the caller's layout unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        LIVE_BYTES.with(|live| live.set(live.get() - layout.size() as i64));
        // SAFETY: the pointer came from `System.alloc` with this layout.
        unsafe { System.dealloc(pointer, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn live_bytes() -> i64 {
    LIVE_BYTES.with(Cell::get)
}

/// The bytes `work` left allocated on this thread.
fn allocated_by<T>(work: impl FnOnce() -> T) -> (T, i64) {
    let before = live_bytes();
    let output = work();
    (output, live_bytes() - before)
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_ring_is_allocated_lazily_and_never_holds_more_than_the_limit() {
    let (limiter, handle) = allocated_by(|| log(100_000, secs(1)));
    assert!(handle < 1_024, "a new log allocated {handle} bytes");

    // Filled one permit at a time, the ring grows to exactly 8 bytes a permit.
    let ((), ring) = allocated_by(|| {
        for _ in 0..100_000 {
            limiter.try_acquire(1).unwrap();
        }
    });
    assert_eq!(ring, 8 * 100_000);
    assert_eq!(retry_after(limiter.try_acquire(1)), secs(1));
    // Turning the whole ring over, again and again, allocates nothing more.
    for _ in 0..10 {
        advance(secs(1)).await;
        let ((), more) = allocated_by(|| {
            limiter.try_acquire(60_000).unwrap();
            limiter.try_acquire(40_000).unwrap();
            limiter.try_acquire(1).unwrap_err();
        });
        assert_eq!(more, 0);
    }
    let ((), dropped) = allocated_by(|| drop(limiter));
    assert_eq!(dropped, -(handle + ring));

    // The largest accepted limit costs nothing until used, then 8 MiB at most.
    let (limiter, handle) = allocated_by(|| log(SlidingLog::MAX_LIMIT, secs(1)));
    assert!(handle < 1_024);
    let ((), few) = allocated_by(|| limiter.try_acquire(3).unwrap());
    assert_eq!(few, 8 * 3);
    let ((), full) = allocated_by(|| limiter.try_acquire(SlidingLog::MAX_LIMIT - 3).unwrap());
    assert_eq!(few + full, 8 << 20);
    advance(secs(1)).await;
    let ((), more) = allocated_by(|| limiter.try_acquire(SlidingLog::MAX_LIMIT).unwrap());
    assert_eq!(more, 0);
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_zero_while_a_due_head_is_not_yet_woken() {
    limiters::retry_after_is_zero_while_a_due_head_is_not_yet_woken(log(2, secs(1)), HOLD).await;
}

/// A waiter handed the head of the line but dropped before its task ran gives its turn up
/// then: the waiter behind it begins its turn at the drop, as behind a head that gave up,
/// not back at the instant the head before it was admitted. The first waiter is admitted
/// at 1 s, and the lock passes to the second, which is dropped unpolled at 4 s; the third
/// is admitted as of 4 s, so at 4 s a request waits a whole second. The same when the
/// task that drops it has spent its cooperative budget (tokio gives a task 128 operations
/// a poll; a busy task that read a channel, say, then drops a waiter whose `timeout`
/// fired). (Once, the third was admitted as of 2 s, over the turn the dropped one held;
/// then again only out of budget, where tokio's lock answers `Pending` though handed
/// over.)
#[tokio::test(start_paused = true)]
async fn a_waiter_dropped_once_handed_the_head_gives_its_turn_up_then() {
    for out_of_budget in [false, true] {
        let limiter = SlidingLog::new(1, ms(1_000)).unwrap();
        limiter.try_acquire(1).unwrap();
        let mut first = tokio_test::task::spawn(limiter.acquire(1));
        let mut second = tokio_test::task::spawn(limiter.acquire(1));
        let mut third = tokio_test::task::spawn(limiter.acquire(1));
        for waiter in [&mut first, &mut second, &mut third] {
            assert!(waiter.poll().is_pending());
        }
        advance(ms(1_000)).await;
        assert!(matches!(first.poll(), std::task::Poll::Ready(Ok(()))));
        drop(first);
        assert!(second.is_woken(), "handed the head");
        advance(ms(3_000)).await;
        while out_of_budget && tokio::task::coop::has_budget_remaining() {
            tokio::task::coop::consume_budget().await;
        }
        drop(second);
        // A fresh poll of this task, with a fresh budget.
        tokio::task::yield_now().await;
        assert!(matches!(third.poll(), std::task::Poll::Ready(Ok(()))));
        drop(third);
        let waits = retry_after(limiter.try_acquire(1));
        assert_eq!(waits, ms(1_000), "out of budget: {out_of_budget}");
    }
}
