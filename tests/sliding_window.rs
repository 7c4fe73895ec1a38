//! `SlidingWindow`, the time wheel: at most `limit` permits in any interval of length
//! `slots * slot_duration`; a permit admitted in slot `s` counts until slot
//! `s + slots` ends, so it is never more permissive than the exact log and at most one
//! slot stricter.

mod common;

use std::time::Duration;

use common::admissions::{check_never_over, Admission};
use common::{limiters, ms, ns, retry_after, secs};
use token_bucket::{ConfigError, KeyTemplate, Limiter, SlidingWindow, TryAcquireError};
use tokio::time::{advance, Instant};

/// `limit` permits a second, in 10 slots of 100 ms.
fn wheel(limit: u64) -> SlidingWindow {
    SlidingWindow::new(limit, 10, ms(100)).unwrap()
}

/// Advances paused time to `at` after `start`.
async fn advance_to(start: Instant, at: Duration) {
    advance(start + at - Instant::now()).await;
}

impl limiters::Waiting for SlidingWindow {
    fn queued_permits(&self) -> u64 {
        SlidingWindow::queued_permits(self)
    }
}

/// How long a permit admitted at the start (or any whole 100 ms after) counts.
const HOLD: Duration = Duration::from_millis(1_100);

#[tokio::test(start_paused = true)]
async fn is_limited_and_available_count_nothing() {
    limiters::is_limited_and_available_count_nothing(wheel(2), HOLD).await;
}

#[tokio::test(start_paused = true)]
async fn is_idle_when_nothing_counts_and_nobody_waits() {
    limiters::is_idle_when_nothing_counts_and_nobody_waits(wheel(2), HOLD).await;
}

#[tokio::test(start_paused = true)]
async fn zero_permits_are_admitted_at_once_even_when_full_or_with_waiters() {
    limiters::zero_permits_are_admitted_at_once_even_when_full_or_with_waiters(wheel(1)).await;
}

#[tokio::test(start_paused = true)]
async fn more_permits_than_the_limit_are_refused_by_try_acquire_and_acquire() {
    limiters::more_permits_than_the_limit_are_refused_at_once(wheel(3)).await;
}

#[test]
fn a_waiter_in_a_runtime_without_a_timer_panics_on_its_first_poll() {
    limiters::a_waiter_in_a_runtime_without_a_timer_panics_on_its_first_poll(
        SlidingWindow::new(1, 60, secs(60)).unwrap(),
    );
}

#[test]
fn acquire_that_must_wait_outside_a_runtime_fails_with_no_runtime() {
    limiters::acquire_that_must_wait_outside_a_runtime_fails_with_no_runtime(
        SlidingWindow::new(1, 60, secs(60)).unwrap(),
    );
}

#[tokio::test(start_paused = true)]
async fn a_refund_lets_the_waiting_head_in_at_once() {
    limiters::a_refund_lets_the_waiting_head_in_at_once(wheel(1), HOLD).await;
}

#[tokio::test(start_paused = true)]
async fn retry_after_places_each_waiter_in_line_whole() {
    limiters::retry_after_places_each_waiter_in_line_whole(wheel(5), HOLD).await;
}

#[tokio::test(start_paused = true)]
async fn retry_after_counts_the_permits_of_the_waiters_in_line() {
    limiters::retry_after_counts_the_permits_of_the_waiters_in_line(wheel(3), HOLD).await;
}

#[tokio::test(start_paused = true)]
async fn acquire_is_first_in_first_out_among_waiters_of_different_sizes() {
    limiters::acquire_is_first_in_first_out_among_waiters_of_different_sizes(wheel(4), HOLD).await;
}

#[tokio::test(start_paused = true)]
async fn try_acquire_never_jumps_the_line() {
    limiters::try_acquire_never_jumps_the_line(wheel(2), HOLD).await;
}

#[tokio::test(start_paused = true)]
async fn behind_a_head_that_gives_up_the_next_is_admitted_from_then_on() {
    limiters::behind_a_head_that_gives_up_the_next_is_admitted_from_then_on(wheel(2), HOLD).await;
}

#[tokio::test(start_paused = true)]
async fn dropping_a_waiting_acquire_lets_the_next_go_and_takes_nothing() {
    limiters::dropping_a_waiting_acquire_lets_the_next_go_and_takes_nothing(wheel(2), HOLD).await;
}

#[test]
fn threads_hammering_try_acquire_never_get_more_than_the_limit_in_any_window() {
    limiters::threads_never_get_more_than_the_limit_in_any_window(
        SlidingWindow::new(4, 5, ms(6)).unwrap(),
        4,
        ms(30),
    );
}

#[tokio::test(start_paused = true)]
async fn the_burst_at_the_seam_of_two_fixed_windows_is_refused() {
    let limiter = wheel(10);
    let start = Instant::now();
    advance(ms(950)).await; // slot 9
    limiter.try_acquire(10).unwrap();
    advance(ms(50)).await; // a new second, slot 10: the 10 still count
    assert_eq!(limiter.available(), 0);
    // They leave when slot 9 + 10 ends, at 2 s: 50 ms later than the exact log would
    // let them, less than one slot.
    assert_eq!(retry_after(limiter.try_acquire(1)), secs(1));
    assert_eq!(retry_after(limiter.try_acquire(10)), secs(1));
    advance_to(start, secs(2) - ns(1)).await;
    assert_eq!(retry_after(limiter.try_acquire(1)), ns(1));
    advance(ns(1)).await;
    assert_eq!(limiter.try_acquire(10), Ok(()));
    // Admitted at the very start of slot 20, they count until slot 30 ends.
    assert_eq!(retry_after(limiter.try_acquire(1)), ms(1_100));
}

#[tokio::test(start_paused = true)]
async fn a_permit_counts_until_its_slot_ends_a_window_later() {
    // Admitted at the first nanosecond of slot 0: one slot longer than a window.
    let early = wheel(1);
    early.try_acquire(1).unwrap();
    assert_eq!(retry_after(early.try_acquire(1)), ms(1_100));
    // Admitted at the last nanosecond of slot 0: one nanosecond longer than a window.
    let late = wheel(1);
    advance(ms(100) - ns(1)).await;
    late.try_acquire(1).unwrap();
    assert_eq!(retry_after(late.try_acquire(1)), secs(1) + ns(1));
    // Both leave at 1.1 s, exactly.
    advance(secs(1)).await;
    assert_eq!(retry_after(early.try_acquire(1)), ns(1));
    assert_eq!(retry_after(late.try_acquire(1)), ns(1));
    advance(ns(1)).await;
    assert_eq!(early.try_acquire(1), Ok(()));
    assert_eq!(late.try_acquire(1), Ok(()));
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_exact_across_gaps_shorter_and_longer_than_the_wheel() {
    let limiter = wheel(10);
    let start = Instant::now();
    limiter.try_acquire(3).unwrap(); // slot 0
    advance_to(start, ms(250)).await;
    limiter.try_acquire(4).unwrap(); // slot 2
    advance_to(start, ms(580)).await;
    limiter.try_acquire(3).unwrap(); // slot 5

    // A request for `n` waits for the slot holding the `n`-th oldest permit to leave.
    assert_eq!(retry_after(limiter.try_acquire(1)), ms(520)); // slot 0 leaves at 1.1 s
    assert_eq!(retry_after(limiter.try_acquire(3)), ms(520));
    assert_eq!(retry_after(limiter.try_acquire(4)), ms(720)); // slot 2, at 1.3 s
    assert_eq!(retry_after(limiter.try_acquire(8)), ms(1_020)); // slot 5, at 1.6 s
    assert_eq!(retry_after(limiter.try_acquire(10)), ms(1_020));

    // A gap of 6 slots, fewer than the wheel's: slot 0 is cleared, slots 2 and 5 stay.
    advance_to(start, ms(1_150)).await;
    assert_eq!(limiter.available(), 3);
    assert_eq!(retry_after(limiter.try_acquire(4)), ms(150));
    advance_to(start, ms(1_300)).await;
    assert_eq!(limiter.available(), 7);
    limiter.try_acquire(7).unwrap(); // slot 13
    assert_eq!(retry_after(limiter.try_acquire(1)), ms(300)); // slot 5, at 1.6 s
    assert_eq!(retry_after(limiter.try_acquire(4)), ms(1_100)); // slot 13, at 2.4 s

    // A gap of 17 slots, longer than the wheel: everything is cleared at once.
    advance_to(start, secs(3)).await;
    assert_eq!(limiter.available(), 10);
    assert!(limiter.is_idle());
    limiter.try_acquire(10).unwrap(); // slot 30
    assert_eq!(retry_after(limiter.try_acquire(1)), ms(1_100));
}

#[tokio::test(start_paused = true)]
async fn a_gap_of_slots_slots_keeps_the_oldest_and_one_more_clears_it() {
    // A permit counts in its own slot and the 10 after it.
    let kept = wheel(10);
    kept.try_acquire(1).unwrap(); // slot 0
    let cleared = wheel(10);
    cleared.try_acquire(1).unwrap(); // slot 0
    let stepped = wheel(10);
    stepped.try_acquire(1).unwrap(); // slot 0
    advance(ms(100)).await;
    stepped.try_acquire(1).unwrap(); // slot 1

    // Straight from slot 0 to slot 10: still counted.
    advance(ms(900)).await;
    assert_eq!(kept.available(), 9);
    // Straight from slot 0 to slot 11 (the whole wheel): cleared.
    advance(ms(100)).await;
    assert_eq!(cleared.available(), 10);
    // From slot 1 to slot 11, ten slots on: slot 0 leaves, slot 1 stays.
    assert_eq!(stepped.available(), 9);
    assert_eq!(kept.available(), 10);
    advance(ms(100)).await;
    assert_eq!(stepped.available(), 10);
}

#[tokio::test(start_paused = true)]
async fn a_year_of_silence_costs_one_sweep_of_the_wheel() {
    // 65,536 slots of 1 ns: a year is 3 * 10^16 slots, which a slot-by-slot turn would
    // never finish.
    let fine = SlidingWindow::new(5, SlidingWindow::MAX_SLOTS, ns(1)).unwrap();
    fine.try_acquire(5).unwrap();
    assert_eq!(retry_after(fine.try_acquire(1)), ns(65_537));
    let coarse = wheel(3);
    coarse.try_acquire(3).unwrap();
    advance(secs(365 * 24 * 60 * 60)).await;
    for limiter in [&fine, &coarse] {
        assert!(limiter.is_idle());
        assert_eq!(limiter.available(), limiter.limit());
        assert_eq!(limiter.try_acquire(limiter.limit()), Ok(()));
    }
    assert_eq!(retry_after(fine.try_acquire(1)), ns(65_537));
    // A year is a whole number of 100 ms slots: admitted at a slot's start.
    assert_eq!(retry_after(coarse.try_acquire(1)), ms(1_100));
}

#[tokio::test(start_paused = true)]
async fn a_refund_takes_from_the_newest_slots() {
    let limiter = wheel(10);
    let start = Instant::now();
    limiter.try_acquire(4).unwrap(); // slot 0
    advance_to(start, ms(350)).await;
    limiter.try_acquire(3).unwrap(); // slot 3
    advance_to(start, ms(620)).await;
    limiter.try_acquire(2).unwrap(); // slot 6
    advance_to(start, ms(650)).await;
    // Slot 6 gives its 2, slot 3 two of its 3: 4 in slot 0 and 1 in slot 3 are left.
    limiter.refund(4);
    assert_eq!(limiter.available(), 5);
    advance_to(start, ms(1_100)).await;
    assert_eq!(limiter.available(), 9);
    advance_to(start, ms(1_400)).await;
    assert_eq!(limiter.available(), 10);
}

#[tokio::test(start_paused = true)]
async fn fresh_has_the_same_settings_and_nothing_counted_while_clones_share() {
    let fresh = limiters::fresh_has_nothing_counted_while_clones_share(wheel(3), HOLD).await;
    assert_eq!(fresh.slots(), 10);
    assert_eq!(fresh.slot_duration(), ms(100));
    assert_eq!((fresh.limit(), fresh.window()), (3, secs(1)));
    assert_eq!(
        format!("{fresh:?}"),
        "SlidingWindow { limit: 3, window: 1s, slots: 10, slot_duration: 100ms, counted: 3, \
         queued_permits: 0 }"
    );
}

/// `Keyed` forgets an idle key's wheel and makes a fresh one when the key comes back: the
/// fresh one must turn on the template's slot boundaries, or the key's permits would
/// count for a different time than before it was forgotten.
#[tokio::test(start_paused = true)]
async fn fresh_turns_on_the_templates_slot_boundaries() {
    let template = wheel(1);
    advance(ms(250)).await; // into slot 2 of the template
    let fresh = template.fresh();
    fresh.try_acquire(1).unwrap();
    // Admitted in slot 2, it counts until slot 12 ends, 1.3 s after the template's start.
    assert_eq!(retry_after(fresh.try_acquire(1)), ms(1_050));
    template.try_acquire(1).unwrap();
    assert_eq!(retry_after(template.try_acquire(1)), ms(1_050));
}

#[tokio::test(start_paused = true)]
async fn a_refund_of_nothing_changes_nothing_and_of_too_much_empties_it() {
    limiters::a_refund_of_nothing_changes_nothing_and_of_too_much_empties_it(wheel(5), HOLD).await;
}

#[test]
fn bad_settings_are_refused_with_errors_naming_the_values() {
    assert_eq!(
        SlidingWindow::new(0, 10, ms(100)).unwrap_err(),
        ConfigError::ZeroLimit
    );
    assert_eq!(
        SlidingWindow::new(10, 10, Duration::ZERO).unwrap_err(),
        ConfigError::ZeroWindow
    );
    let none = SlidingWindow::new(10, 0, ms(100)).unwrap_err();
    assert_eq!(
        none,
        ConfigError::BadSlots {
            slots: 0,
            max: 65_536
        }
    );
    assert_eq!(
        none.to_string(),
        "0 slots: a time wheel needs between 1 and 65536"
    );
    assert_eq!(
        SlidingWindow::new(10, SlidingWindow::MAX_SLOTS + 1, ms(100)).unwrap_err(),
        ConfigError::BadSlots {
            slots: 65_537,
            max: 65_536
        }
    );
    assert_eq!(
        SlidingWindow::new(10, usize::MAX, ms(100)).unwrap_err(),
        ConfigError::BadSlots {
            slots: usize::MAX as u64,
            max: 65_536
        }
    );
    let too_long = SlidingWindow::new(10, 2, Duration::MAX).unwrap_err();
    assert_eq!(
        too_long,
        ConfigError::WindowTooLong {
            slots: 2,
            slot_duration: Duration::MAX
        }
    );
    assert_eq!(
        too_long.to_string(),
        format!(
            "2 slots of {:?} make a window longer than a Duration holds",
            Duration::MAX
        )
    );
    // The bounds themselves are fine.
    assert!(SlidingWindow::new(1, SlidingWindow::MAX_SLOTS, ns(1)).is_ok());
    let forever = SlidingWindow::new(1, 1, Duration::MAX).unwrap();
    assert_eq!(forever.window(), Duration::MAX);
    forever.try_acquire(1).unwrap();
    assert_eq!(retry_after(forever.try_acquire(1)), Duration::MAX);
}

#[tokio::test(start_paused = true)]
async fn any_u64_limit_works_and_its_totals_wrap_harmlessly() {
    let limiter = wheel(u64::MAX);
    limiter.try_acquire(u64::MAX).unwrap();
    assert_eq!(retry_after(limiter.try_acquire(1)), ms(1_100));
    for _ in 0..3 {
        advance(ms(1_100)).await;
        assert_eq!(limiter.available(), u64::MAX);
        limiter.try_acquire(u64::MAX - 1).unwrap();
        assert_eq!(limiter.available(), 1);
        limiter.try_acquire(1).unwrap();
        assert!(limiter.is_limited());
        limiter.refund(2);
        assert_eq!(limiter.available(), 2);
        limiter.try_acquire(2).unwrap();
    }
}

/// Two waiters of 2^63 permits each ask for 2^64 in all: a line counted as a `u64` sum of
/// permits would read as empty, letting `try_acquire` jump it and `is_idle` forget it.
#[tokio::test(start_paused = true)]
async fn a_line_asking_for_more_than_a_u64_still_holds_back_try_acquire() {
    let limiter = wheel(u64::MAX);
    limiter.try_acquire(u64::MAX).unwrap();
    let mut first = tokio_test::task::spawn(limiter.acquire(1 << 63));
    let mut second = tokio_test::task::spawn(limiter.acquire(1 << 63));
    tokio_test::assert_pending!(first.poll());
    tokio_test::assert_pending!(second.poll());
    // Room for everyone now, but two waiters stand in line.
    limiter.refund(u64::MAX);
    assert_eq!(limiter.available(), u64::MAX);
    assert!(limiter.is_limited());
    assert!(!limiter.is_idle());
    assert_eq!(retry_after(limiter.try_acquire(1)), ms(1_100));
    assert_eq!(limiter.queued_permits(), u64::MAX, "2^64, saturated");
    assert!(format!("{limiter:?}").contains(&format!("queued_permits: {}", u64::MAX)));

    // The line moves on in order, and empties.
    assert_eq!(first.await, Ok(()));
    assert_eq!(limiter.queued_permits(), 1 << 63);
    drop(second);
    assert_eq!(limiter.queued_permits(), 0);
    assert!(!limiter.is_limited());
}

/// Requests of `u64::MAX` permits wait each for the one before to stop counting: the
/// positions of their permits in the order of grants pass what a `u64` holds.
#[tokio::test(start_paused = true)]
async fn retry_after_behind_a_line_of_u64_max_requests_is_exact() {
    let limiter = wheel(u64::MAX);
    limiter.try_acquire(u64::MAX).unwrap();
    let mut first = tokio_test::task::spawn(limiter.acquire(u64::MAX));
    let mut second = tokio_test::task::spawn(limiter.acquire(u64::MAX));
    tokio_test::assert_pending!(first.poll());
    tokio_test::assert_pending!(second.poll());
    // The first is admitted at 1.1 s, the second at 2.2 s, a third request at 3.3 s.
    assert_eq!(retry_after(limiter.try_acquire(u64::MAX)), ms(3_300));
    assert_eq!(retry_after(limiter.try_acquire(1)), ms(3_300));

    advance(ms(1_100)).await;
    assert_eq!(first.await, Ok(()));
    tokio_test::assert_pending!(second.poll());
    assert_eq!(retry_after(limiter.try_acquire(1)), ms(2_200));
    advance(ms(1_100)).await;
    assert_eq!(second.await, Ok(()));
    assert_eq!(retry_after(limiter.try_acquire(1)), ms(1_100));
}

/// Nanoseconds from `start` to now.
fn since(start: Instant) -> u64 {
    u64::try_from((Instant::now() - start).as_nanos()).unwrap()
}

/// What the exact sliding log would answer after the same admissions: how long until
/// `permits` more fit, each `(instant, permits)` counting during `[instant, instant +
/// window)`.
fn log_retry_after(history: &[(u64, u64)], limit: u64, window: u64, now: u64, permits: u64) -> u64 {
    let counted_at = |at: u64| -> u64 {
        history
            .iter()
            .filter(|&&(t, _)| t + window > at)
            .map(|&(_, n)| n)
            .sum()
    };
    std::iter::once(now)
        .chain(
            history
                .iter()
                .map(|&(t, _)| t + window)
                .filter(|&at| at > now),
        )
        .filter(|&at| counted_at(at) + permits <= limit)
        .min()
        .unwrap()
        - now
}

#[tokio::test(start_paused = true)]
async fn never_more_permissive_than_the_exact_log_and_at_most_one_slot_stricter() {
    let (limit, slot) = (7, ms(20));
    let limiter = SlidingWindow::new(limit, 5, slot).unwrap();
    let window = 5 * 20_000_000;
    let start = Instant::now();
    let mut history = Vec::new();
    let mut admissions = Vec::new();
    let mut refusals = 0;
    let mut random = 0x9e37_79b9_7f4a_7c15_u64;
    for _ in 0..5_000 {
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        let permits = random % 4 + 1;
        let now = since(start);
        // Only what is still in the log's window matters.
        history.retain(|&(t, _)| t + window > now);
        let log_wait = log_retry_after(&history, limit, window, now, permits);
        match limiter.try_acquire(permits) {
            Ok(()) => {
                // The log, given the same past, admits too.
                assert_eq!(log_wait, 0, "the wheel admitted what the log refuses");
                history.push((now, permits));
                admissions.push(Admission::at(Instant::now(), permits));
            }
            Err(TryAcquireError::Limited { retry_after }) => {
                refusals += 1;
                let wait = u64::try_from(retry_after.as_nanos()).unwrap();
                assert!(
                    wait > log_wait && wait <= log_wait + 20_000_000,
                    "the wheel waits {wait} ns where the log waits {log_wait} ns"
                );
            }
            Err(other) => panic!("{other}"),
        }
        advance(ns(random % 6_000_000)).await;
    }
    assert!(admissions.len() > 100 && refusals > 100);
    check_never_over(&admissions, limit, Duration::from_nanos(window)).unwrap();
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_zero_while_a_due_head_is_not_yet_woken() {
    limiters::retry_after_is_zero_while_a_due_head_is_not_yet_woken(wheel(2), HOLD).await;
}

/// A refund that gives nothing back (the permit it would forget stopped counting) changes
/// nothing, not even for a head due earlier whose task has not run yet: the wheel is not
/// turned to the refund's instant, so the head is still recorded as of the instant its
/// request fitted. A permit admitted at 0 counts through slot 10; the head behind it
/// fits at 110 ms, and its task runs at 150 ms, after the refund. Recorded at 110 ms
/// (slot 11), its permit counts through slot 21: at 150 ms a request waits 70 ms. (Once,
/// the refund turned the wheel to 150 ms, and the head was recorded there: 110 ms.)
#[tokio::test(start_paused = true)]
async fn a_refund_of_nothing_does_not_push_back_a_due_head() {
    let limiter = SlidingWindow::new(1, 10, ms(10)).unwrap();
    limiter.try_acquire(1).unwrap();
    let mut head = tokio_test::task::spawn(Limiter::acquire(&limiter, 1));
    assert!(head.poll().is_pending());
    advance(ms(150)).await;
    limiter.refund(1);
    assert!(matches!(head.poll(), std::task::Poll::Ready(Ok(()))));
    drop(head);
    assert_eq!(retry_after(limiter.try_acquire(1)), ms(70));
}
