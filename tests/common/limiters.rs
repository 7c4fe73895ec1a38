//! Scenarios every window limiter must pass, generic over [`Limiter`], each run from a
//! limiter's own test file with its own timing.
//!
//! `hold` is how long a permit admitted at the limiter's start, or at any whole 100 ms
//! after it, counts against the limit: the window for a sliding log, the window plus a
//! slot for a time wheel with 100 ms slots. Every admission below happens at such an
//! instant. Each scenario needs a limiter made at the start of a paused-time test.

use std::time::Duration;

use token_bucket::{AcquireError, KeyTemplate, Limiter, TryAcquireError};
use tokio::task::JoinHandle;
use tokio::time::{advance, Instant};

use super::admissions::{check_never_over, hammer};
use super::{
    assert_at, ms, ns, panic_message_of, poll_once_in, retry_after, runtime_without_a_timer,
    spawn_acquire, yield_until, NO_TIMER_PANIC,
};

/// What the scenarios need beyond [`Limiter`]: the permits waiting in line.
pub trait Waiting {
    fn queued_permits(&self) -> u64;
}

type Waiter = JoinHandle<(Result<(), AcquireError>, Instant)>;

/// Spawns `limiter.acquire(permits)` and yields until it stands in line.
async fn join_line<L: Limiter + Waiting + Clone>(limiter: &L, permits: u64) -> Waiter {
    let before = limiter.queued_permits();
    let waiter = spawn_acquire(limiter, permits);
    yield_until(|| limiter.queued_permits() == before + permits).await;
    waiter
}

/// Admits one permit now and one 500 ms later; returns the first instant.
async fn one_now_and_one_half_a_second_later(limiter: &impl Limiter) -> Instant {
    let start = Instant::now();
    limiter.try_acquire(1).unwrap();
    advance(ms(500)).await;
    limiter.try_acquire(1).unwrap();
    start
}

/// Asserts that `waiter` was admitted `due` after `start`.
async fn assert_admitted_at(waiter: Waiter, start: Instant, due: Duration) {
    let (result, at) = waiter.await.unwrap();
    assert_eq!(result, Ok(()));
    assert_at(start, at, due);
}

/// Needs a limit of 2.
pub async fn is_limited_and_available_count_nothing<L: Limiter>(limiter: L, hold: Duration) {
    for _ in 0..100 {
        assert!(!limiter.is_limited());
        assert_eq!(limiter.available(), 2);
    }
    limiter.try_acquire(1).unwrap();
    assert!(!limiter.is_limited());
    limiter.try_acquire(1).unwrap();
    assert!(limiter.is_limited());
    advance(hold - ns(1)).await;
    assert!(limiter.is_limited());
    advance(ns(1)).await;
    assert!(!limiter.is_limited());
    assert_eq!(limiter.try_acquire(2), Ok(()));
}

/// Needs a limit of 2.
pub async fn is_idle_when_nothing_counts_and_nobody_waits<L: KeyTemplate>(
    limiter: L,
    hold: Duration,
) {
    assert!(limiter.is_idle());
    limiter.try_acquire(1).unwrap();
    assert!(!limiter.is_idle());
    advance(hold - ns(1)).await;
    assert!(!limiter.is_idle());
    advance(ns(1)).await;
    assert!(limiter.is_idle());

    limiter.try_acquire(2).unwrap();
    let mut waiter = tokio_test::task::spawn(limiter.acquire(1));
    tokio_test::assert_pending!(waiter.poll());
    advance(hold + hold / 2).await;
    // Nothing counts any more, but somebody is in line.
    assert!(!limiter.is_idle());
    // Admitted as of `hold`, when it fitted, not when it was polled: its permit counts
    // until `2 * hold`.
    assert_eq!(waiter.await, Ok(()));
    assert!(!limiter.is_idle());
    advance(hold / 2 - ns(1)).await;
    assert!(!limiter.is_idle());
    advance(ns(1)).await;
    assert!(limiter.is_idle());
}

/// Needs a limit of 1.
pub async fn zero_permits_are_admitted_at_once_even_when_full_or_with_waiters<L: Limiter>(
    limiter: L,
) {
    limiter.try_acquire(1).unwrap();
    assert_eq!(limiter.try_acquire(0), Ok(()));
    let mut waiter = tokio_test::task::spawn(limiter.acquire(1));
    tokio_test::assert_pending!(waiter.poll());
    assert_eq!(limiter.try_acquire(0), Ok(()));
    assert_eq!(limiter.acquire(0).await, Ok(()));
    drop(waiter);
    assert_eq!(limiter.available(), 0);
}

/// Needs a limit of 3.
pub async fn more_permits_than_the_limit_are_refused_at_once<L: Limiter + Waiting>(limiter: L) {
    let exceeds = TryAcquireError::ExceedsLimit {
        requested: 4,
        limit: 3,
    };
    let acquire_exceeds = AcquireError::ExceedsLimit {
        requested: 4,
        limit: 3,
    };
    assert_eq!(limiter.try_acquire(4), Err(exceeds));
    assert_eq!(
        exceeds.to_string(),
        "requested 4 permits but the limiter admits at most 3 at once"
    );
    assert_eq!(limiter.acquire(4).await, Err(acquire_exceeds));
    assert_eq!(
        limiter.try_acquire(u64::MAX),
        Err(TryAcquireError::ExceedsLimit {
            requested: u64::MAX,
            limit: 3
        })
    );
    assert_eq!(
        limiter.acquire(u64::MAX).await,
        Err(AcquireError::ExceedsLimit {
            requested: u64::MAX,
            limit: 3
        })
    );
    // Refused at once even while full and with somebody in line, and nothing counted.
    limiter.try_acquire(3).unwrap();
    let mut waiter = tokio_test::task::spawn(limiter.acquire(1));
    tokio_test::assert_pending!(waiter.poll());
    assert_eq!(limiter.try_acquire(4), Err(exceeds));
    assert_eq!(limiter.acquire(4).await, Err(acquire_exceeds));
    assert_eq!(limiter.queued_permits(), 1);
}

/// Needs a limit of 1 and a window of a minute or more; runs outside any runtime.
pub fn acquire_that_must_wait_outside_a_runtime_fails_with_no_runtime<L: Limiter + Waiting>(
    limiter: L,
) {
    // Admitted at once, it needs no runtime.
    assert_eq!(futures::executor::block_on(limiter.acquire(1)), Ok(()));
    assert_eq!(
        futures::executor::block_on(limiter.acquire(1)),
        Err(AcquireError::NoRuntime)
    );
    assert_eq!(limiter.queued_permits(), 0);
    assert_eq!(limiter.available(), 0);
}

/// Needs a limit of 1 and a window of a minute or more; runs outside any runtime. A
/// waiter in a runtime without a timer could never be woken: it panics on its first poll,
/// at the head of the line or behind one waiting in another runtime, and leaves the line.
pub fn a_waiter_in_a_runtime_without_a_timer_panics_on_its_first_poll<L: Limiter + Waiting>(
    limiter: L,
) {
    let untimed = runtime_without_a_timer();
    // Admitted at once, it needs no timer.
    assert_eq!(untimed.block_on(limiter.acquire(1)), Ok(()));
    let message = panic_message_of(|| poll_once_in(&untimed, limiter.acquire(1)));
    assert!(message.contains(NO_TIMER_PANIC), "{message}");
    assert_eq!(limiter.queued_permits(), 0);

    let timed = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let mut head = tokio_test::task::spawn(limiter.acquire(1));
    timed.block_on(async { tokio_test::assert_pending!(head.poll()) });
    let message = panic_message_of(|| poll_once_in(&untimed, limiter.acquire(1)));
    assert!(message.contains(NO_TIMER_PANIC), "{message}");
    assert_eq!(limiter.queued_permits(), 1, "only the head is left in line");
    drop(head);
    assert_eq!(limiter.queued_permits(), 0);
    assert_eq!(limiter.available(), 0);
}

/// Needs a limit of 2. While the head of the line is due but not yet woken, a request
/// that would fit behind it is refused with a `retry_after` of zero.
pub async fn retry_after_is_zero_while_a_due_head_is_not_yet_woken<L: Limiter>(
    limiter: L,
    hold: Duration,
) {
    limiter.try_acquire(2).unwrap();
    let mut head = tokio_test::task::spawn(limiter.acquire(1));
    tokio_test::assert_pending!(head.poll());
    assert_eq!(retry_after(limiter.try_acquire(1)), hold);
    advance(hold).await;
    // The head and this request both fit now, but the head has not been polled yet.
    assert_eq!(retry_after(limiter.try_acquire(1)), Duration::ZERO);
    assert_eq!(head.await, Ok(()));
    assert_eq!(limiter.try_acquire(1), Ok(()));
    // With nobody in line, a refusal always has something to wait for.
    assert!(retry_after(limiter.try_acquire(1)) > Duration::ZERO);
}

/// Needs a limit of 1.
pub async fn a_refund_lets_the_waiting_head_in_at_once<L: Limiter + Waiting + Clone>(
    limiter: L,
    hold: Duration,
) {
    let start = Instant::now();
    limiter.try_acquire(1).unwrap();
    let waiter = join_line(&limiter, 1).await;
    advance(ms(100)).await;
    limiter.refund(1);
    assert_admitted_at(waiter, start, ms(100)).await;
    // The waiter's permit counts from 100 ms.
    assert_eq!(retry_after(limiter.try_acquire(1)), hold);
}

/// Needs a limit of 3.
pub async fn retry_after_counts_the_permits_of_the_waiters_in_line<L: Limiter + Waiting + Clone>(
    limiter: L,
    hold: Duration,
) {
    let start = Instant::now();
    limiter.try_acquire(3).unwrap();
    let waiter = join_line(&limiter, 2).await;
    // The waiter's 2 and this 1 fit when the 3 from the start leave.
    assert_eq!(retry_after(limiter.try_acquire(1)), hold);
    // 2 + 2 > 3: the 4th permit must wait for the first of the waiter's, admitted at
    // `hold` at the earliest, to leave.
    assert_eq!(retry_after(limiter.try_acquire(2)), hold * 2);
    assert_eq!(retry_after(limiter.try_acquire(3)), hold * 2);

    let (result, admitted) = waiter.await.unwrap();
    assert_eq!(result, Ok(()));
    assert_eq!(admitted - start, hold);
    // Those answers were exact: one permit is left now, and 2 fit `hold` later.
    assert_eq!(retry_after(limiter.try_acquire(2)), hold);
    assert_eq!(limiter.try_acquire(1), Ok(()));
}

/// Needs a limit of 5.
pub async fn a_refund_of_nothing_changes_nothing_and_of_too_much_empties_it<L: KeyTemplate>(
    limiter: L,
    hold: Duration,
) {
    limiter.try_acquire(2).unwrap();
    limiter.refund(0);
    assert_eq!(limiter.available(), 3);
    limiter.try_acquire(2).unwrap();
    limiter.refund(u64::MAX);
    assert_eq!(limiter.available(), 5);
    assert!(limiter.is_idle());
    assert_eq!(limiter.try_acquire(5), Ok(()));
    assert_eq!(retry_after(limiter.try_acquire(1)), hold);
}

/// Needs a limit of 3. Returns the fresh limiter, for its settings to be checked.
pub async fn fresh_has_nothing_counted_while_clones_share<L: KeyTemplate + Clone>(
    limiter: L,
    hold: Duration,
) -> L {
    limiter.clone().try_acquire(3).unwrap();
    assert_eq!(limiter.available(), 0);
    let fresh = limiter.fresh();
    assert!(fresh.is_idle());
    assert_eq!(fresh.available(), 3);
    assert_eq!(fresh.try_acquire(3), Ok(()));
    advance(ms(400)).await;
    // The two are independent: each counts its own 3.
    assert_eq!(retry_after(limiter.try_acquire(1)), hold - ms(400));
    assert_eq!(retry_after(fresh.try_acquire(1)), hold - ms(400));
    limiter.refund(3);
    assert_eq!(fresh.available(), 0);
    fresh
}

/// Needs a limit of 4.
pub async fn acquire_is_first_in_first_out_among_waiters_of_different_sizes<
    L: Limiter + Waiting + Clone,
>(
    limiter: L,
    hold: Duration,
) {
    let start = Instant::now();
    limiter.try_acquire(4).unwrap();
    let three = join_line(&limiter, 3).await;
    let four = join_line(&limiter, 4).await;
    let one = join_line(&limiter, 1).await;

    assert_admitted_at(three, start, hold).await;
    // One permit is free once the 3 are in, but the 4 are ahead of the 1: they wait for
    // the 3 to leave, and the 1 waits behind them.
    assert_admitted_at(four, start, hold * 2).await;
    assert_admitted_at(one, start, hold * 3).await;
    assert_eq!(limiter.queued_permits(), 0);
}

/// Needs a limit of 2.
pub async fn try_acquire_never_jumps_the_line<L: Limiter>(limiter: L, hold: Duration) {
    let start = one_now_and_one_half_a_second_later(&limiter).await;
    let mut head = tokio_test::task::spawn(limiter.acquire(2));
    tokio_test::assert_pending!(head.poll());
    advance(hold - ms(500)).await;
    // One permit is free, but the head wants two.
    assert_eq!(limiter.available(), 1);
    assert!(limiter.is_limited());
    // The head's 2 go in together once the permit from 500 ms leaves, 500 ms from now,
    // and fill the limit: this one must wait for them to leave, `hold` after that.
    // (Counting the head as two requests of 1 would say `hold`: too short.)
    assert_eq!(retry_after(limiter.try_acquire(1)), hold + ms(500));
    advance(ms(500)).await;
    assert_eq!(head.await, Ok(()));
    assert_eq!(Instant::now() - start, hold + ms(500));
    // The head's 2 went in together, so 1 more goes when they leave.
    assert_eq!(retry_after(limiter.try_acquire(1)), hold);
}

/// Needs a limit of 2.
pub async fn dropping_a_waiting_acquire_lets_the_next_go_and_takes_nothing<
    L: Limiter + Waiting + Clone,
>(
    limiter: L,
    hold: Duration,
) {
    let start = one_now_and_one_half_a_second_later(&limiter).await;
    // The head needs both permits; behind it, one would do when the first leaves.
    let mut head = tokio_test::task::spawn(limiter.acquire(2));
    tokio_test::assert_pending!(head.poll());
    let behind = join_line(&limiter, 1).await;
    advance(ms(200)).await;
    drop(head);
    assert_eq!(limiter.queued_permits(), 1);
    assert_admitted_at(behind, start, hold).await;
    // The dropped head took nothing: what counts is the permit from 500 ms and the one
    // just admitted, so one is free again when the first leaves.
    assert_eq!(limiter.available(), 0);
    advance(start + ms(500) + hold - Instant::now()).await;
    assert_eq!(limiter.available(), 1);

    // Dropped before its first poll, an acquire never joins the line.
    drop(limiter.acquire(1));
    assert_eq!(limiter.queued_permits(), 0);
    assert_eq!(limiter.available(), 1);
}

/// Needs a limit of 2. A head is admitted as of the instant it fitted, which may be
/// past; but the waiter behind a head that gives up fits only from then on, however long
/// ago it joined: it was not at the head before.
pub async fn behind_a_head_that_gives_up_the_next_is_admitted_from_then_on<
    L: Limiter + Waiting + Clone,
>(
    limiter: L,
    hold: Duration,
) {
    let start = Instant::now();
    limiter.try_acquire(1).unwrap();
    let mut head = tokio_test::task::spawn(limiter.acquire(2));
    tokio_test::assert_pending!(head.poll());
    // One permit would have fitted all along, but the head stood first.
    let behind = join_line(&limiter, 1).await;
    advance(ms(500)).await;
    drop(head);
    assert_admitted_at(behind, start, ms(500)).await;
    // Counted from 500 ms, not from when it joined: both permits are free again only
    // when it stops counting.
    assert_eq!(retry_after(limiter.try_acquire(2)), hold);
}

/// Four std threads call `try_acquire` for 300 ms of real time; the admissions, timed
/// around each call, never hold more than `limit` permits in any `window`.
pub fn threads_never_get_more_than_the_limit_in_any_window<L: Limiter>(
    limiter: L,
    limit: u64,
    window: Duration,
) {
    let seen = hammer(4, ms(300), &[1, 2, 1, 3], |permits| {
        limiter.try_acquire(permits).is_ok()
    });
    let admitted: u64 = seen
        .admissions
        .iter()
        .map(|admission| admission.permits)
        .sum();
    assert!(
        admitted >= limit,
        "the first window's permits were admitted"
    );
    assert!(seen.refusals > 0, "the threads were limited");
    check_never_over(&seen.admissions, limit, window).unwrap();
}

/// Needs a limit of 5. Requests of mixed sizes in line: each is admitted whole, so the
/// line can take longer than the sum of its permits suggests (the sum says `3 * hold`).
pub async fn retry_after_places_each_waiter_in_line_whole<L: Limiter + Waiting + Clone>(
    limiter: L,
    hold: Duration,
) {
    let start = Instant::now();
    limiter.try_acquire(5).unwrap();
    // 3 at `hold`; 4 cannot join them until they leave, at 2 × hold, with the 1; the 5
    // must wait for those to leave, at 3 × hold; and one more permit for the 5 to leave.
    let waiters = [
        join_line(&limiter, 3).await,
        join_line(&limiter, 4).await,
        join_line(&limiter, 1).await,
        join_line(&limiter, 5).await,
    ];
    assert_eq!(retry_after(limiter.try_acquire(1)), hold * 4);
    let mut admitted = Vec::new();
    for waiter in waiters {
        let (result, at) = waiter.await.unwrap();
        assert_eq!(result, Ok(()));
        admitted.push(at - start);
    }
    assert_eq!(admitted, [hold, hold * 2, hold * 2, hold * 3]);
    assert_eq!(retry_after(limiter.try_acquire(1)), hold);
}
