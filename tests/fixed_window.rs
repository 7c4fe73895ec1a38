//! FixedWindow on tokio's paused clock: exact window edges, the seam burst, long idle
//! gaps, retry_after behind a line, FIFO waiting, cancellation, refunds, bad input.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{assert_at, limiters, ms, secs, yield_until};
use token_bucket::{AcquireError, ConfigError, FixedWindow, KeyTemplate, Limiter, TryAcquireError};
use tokio::task::JoinHandle;
use tokio::time::{advance, Instant};

fn nanos(nanos: u64) -> Duration {
    Duration::from_nanos(nanos)
}

fn limited(retry_after: Duration) -> Result<(), TryAcquireError> {
    Err(TryAcquireError::Limited { retry_after })
}

/// When each waiter was admitted, in the order they were.
type Admissions = Arc<Mutex<Vec<(&'static str, Instant)>>>;

/// Spawns a task that acquires `permits` and records when, and returns once it stands
/// in line (its first poll, which joins the line, has run).
async fn join_line(
    limiter: &FixedWindow,
    name: &'static str,
    permits: u64,
    admissions: &Admissions,
) -> JoinHandle<Result<(), AcquireError>> {
    let (limiter, admissions) = (limiter.clone(), admissions.clone());
    let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let task = tokio::spawn({
        let started = started.clone();
        async move {
            started.store(true, std::sync::atomic::Ordering::SeqCst);
            limiter.acquire(permits).await?;
            admissions.lock().unwrap().push((name, Instant::now()));
            Ok(())
        }
    });
    yield_until(|| started.load(std::sync::atomic::Ordering::SeqCst)).await;
    task
}

#[test]
fn bad_settings_are_refused_with_errors_naming_the_values() {
    assert_eq!(
        FixedWindow::new(0, secs(1)).unwrap_err(),
        ConfigError::ZeroLimit
    );
    assert_eq!(
        FixedWindow::new(5, Duration::ZERO).unwrap_err(),
        ConfigError::ZeroWindow
    );
    let too_large = FixedWindow::new(u64::from(u32::MAX) + 1, secs(1)).unwrap_err();
    assert_eq!(
        too_large,
        ConfigError::LimitTooLarge {
            limit: 4_294_967_296,
            max: 4_294_967_295
        }
    );
    assert_eq!(
        too_large.to_string(),
        "the limit 4294967296 is above the largest accepted, 4294967295"
    );
    assert_eq!(
        FixedWindow::new(u64::MAX, secs(1)).unwrap_err(),
        ConfigError::LimitTooLarge {
            limit: u64::MAX,
            max: 4_294_967_295
        }
    );
    let largest = FixedWindow::new(u64::from(u32::MAX), nanos(1)).unwrap();
    assert_eq!(
        (largest.limit(), largest.window()),
        (4_294_967_295, nanos(1))
    );
    let longest = FixedWindow::new(1, Duration::MAX).unwrap();
    assert_eq!(longest.window(), Duration::MAX);
}

#[tokio::test(start_paused = true)]
async fn requests_above_the_limit_are_refused_by_both_and_take_nothing() {
    let limiter = FixedWindow::new(5, secs(1)).unwrap();
    limiter.try_acquire(2).unwrap();
    assert_eq!(
        limiter.try_acquire(6),
        Err(TryAcquireError::ExceedsLimit {
            requested: 6,
            limit: 5
        })
    );
    assert_eq!(
        limiter.acquire(6).await,
        Err(AcquireError::ExceedsLimit {
            requested: 6,
            limit: 5
        })
    );
    assert_eq!(
        limiter.try_acquire(u64::MAX),
        Err(TryAcquireError::ExceedsLimit {
            requested: u64::MAX,
            limit: 5
        })
    );
    assert_eq!(
        TryAcquireError::ExceedsLimit {
            requested: 6,
            limit: 5
        }
        .to_string(),
        "requested 6 permits but the limiter admits at most 5 at once"
    );
    // Nothing was counted and nobody was left in line.
    assert_eq!(limiter.available(), 3);
    assert!(!limiter.is_limited());
}

#[tokio::test(start_paused = true)]
async fn a_request_crossing_the_window_edge_is_refused_until_the_edge() {
    let limiter = FixedWindow::new(3, secs(1)).unwrap();
    limiter.try_acquire(2).unwrap();
    advance(secs(1) - nanos(1)).await;
    // 2 + 2 > 3 in window 0; window 1 starts in 1 ns.
    assert_eq!(limiter.try_acquire(2), limited(nanos(1)));
    assert_eq!(limiter.try_acquire(1), Ok(()));
    assert_eq!(limiter.try_acquire(1), limited(nanos(1)));
    advance(nanos(1)).await;
    assert_eq!(limiter.try_acquire(2), Ok(()));
    assert_eq!(limiter.available(), 1);
    assert_eq!(limiter.try_acquire(2), limited(secs(1)));
}

/// The documented weakness of fixed windows: the limit at the end of one window and the
/// limit again at the start of the next, twice the limit within a nanosecond.
#[tokio::test(start_paused = true)]
async fn the_seam_burst_admits_twice_the_limit_across_an_edge() {
    let limiter = FixedWindow::new(10, secs(1)).unwrap();
    advance(secs(1) - nanos(1)).await;
    for _ in 0..10 {
        limiter.try_acquire(1).unwrap();
    }
    assert_eq!(limiter.try_acquire(1), limited(nanos(1)));
    advance(nanos(1)).await;
    for _ in 0..10 {
        limiter.try_acquire(1).unwrap();
    }
    assert_eq!(limiter.try_acquire(1), limited(secs(1)));
}

#[tokio::test(start_paused = true)]
async fn a_simulated_year_of_idle_time_starts_an_empty_window_on_the_grid() {
    let limiter = FixedWindow::new(5, secs(7)).unwrap();
    limiter.try_acquire(5).unwrap();
    let year = secs(365 * 24 * 60 * 60);
    advance(year + nanos(3)).await;
    assert!(limiter.is_idle());
    assert_eq!(limiter.available(), 5);
    limiter.try_acquire(5).unwrap();
    // 31 536 000 s is 4 505 142 windows of 7 s and 6 s more: the next window starts at
    // 31 536 001 s.
    assert_eq!(limiter.try_acquire(1), limited(secs(1) - nanos(3)));
}

/// A 32-bit window tag would take the window 2^32 windows later for the same one; this
/// limit leaves the word 60 bits of window number.
#[tokio::test(start_paused = true)]
async fn more_than_2_to_the_32_windows_of_idle_time_are_seen_exactly() {
    let limiter = FixedWindow::new(10, Duration::from_micros(1)).unwrap();
    limiter.try_acquire(10).unwrap();
    advance(Duration::from_micros(1 << 32)).await;
    assert_eq!(limiter.available(), 10);
    limiter.try_acquire(10).unwrap();
    advance(Duration::from_micros((1 << 32) + 1)).await;
    assert_eq!(limiter.available(), 10);
    limiter.try_acquire(10).unwrap();
    assert_eq!(limiter.try_acquire(1), limited(Duration::from_micros(1)));
}

/// The documented horizon at its narrowest, a limit of `u32::MAX` per nanosecond: 31 bits
/// of window number (the word's top bit marks a composite deciding), so idle gaps up to
/// 2^30 windows are seen exactly, and a longer one
/// makes the limiter refuse until the window it believes current ends. It never admits
/// more than the limit.
#[tokio::test(start_paused = true)]
async fn past_the_horizon_an_untouched_limiter_over_refuses_but_never_over_admits() {
    let limit = u64::from(u32::MAX);
    let at_horizon = FixedWindow::new(limit, nanos(1)).unwrap();
    at_horizon.try_acquire(limit).unwrap();
    advance(nanos(1 << 30)).await;
    assert_eq!(
        at_horizon.available(),
        limit,
        "2^30 windows are seen exactly"
    );

    let past_horizon = FixedWindow::new(limit, nanos(1)).unwrap();
    past_horizon.try_acquire(limit).unwrap();
    advance(nanos((1 << 30) + 1)).await;
    // Taken for window 2^31, as full as window 0 was: refused until it ends.
    assert_eq!(past_horizon.try_acquire(1), limited(nanos(1 << 30)));
    assert_eq!(past_horizon.available(), 0);
    advance(nanos((1 << 30) - 1)).await;
    // Window 2^31 itself, whose tag is window 0's.
    assert_eq!(past_horizon.try_acquire(1), limited(nanos(1)));
    advance(nanos(1)).await;
    assert_eq!(past_horizon.available(), limit);
    past_horizon.try_acquire(limit).unwrap();
}

#[tokio::test(start_paused = true)]
async fn retry_after_places_each_waiter_ahead_whole_in_a_window() {
    let limiter = FixedWindow::new(5, secs(1)).unwrap();
    let admissions = Admissions::default();
    limiter.try_acquire(5).unwrap();
    // Window 1 takes a (3): b (4) does not fit beside it. Window 2 takes b and c (1).
    let a = join_line(&limiter, "a", 3, &admissions).await;
    assert_eq!(limiter.try_acquire(2), limited(secs(1)));
    assert_eq!(limiter.try_acquire(3), limited(secs(2)));
    let b = join_line(&limiter, "b", 4, &admissions).await;
    let c = join_line(&limiter, "c", 1, &admissions).await;
    assert_eq!(limiter.try_acquire(1), limited(secs(3)));
    // Counting only the permits in line (5 + 3 + 4 + 1 = 13) would say window 2.
    advance(ms(400)).await;
    assert_eq!(limiter.try_acquire(1), limited(ms(2_600)));
    assert!(limiter.is_limited());
    a.await.unwrap().unwrap();
    // At 1 s: b is the head now, a counted in window 1.
    advance(ms(100)).await;
    assert_eq!(limiter.try_acquire(1), limited(ms(1_900)));
    b.await.unwrap().unwrap();
    c.await.unwrap().unwrap();
    // At 2 s, window 2 is full (4 + 1) and the line empty: the next window.
    assert_eq!(limiter.try_acquire(1), limited(secs(1)));
}

#[tokio::test(start_paused = true)]
async fn waiters_are_admitted_first_in_first_out_each_whole_in_one_window() {
    let limiter = FixedWindow::new(5, secs(1)).unwrap();
    let admissions = Admissions::default();
    let start = Instant::now();
    limiter.try_acquire(5).unwrap();
    let waiters = [
        join_line(&limiter, "a", 3, &admissions).await,
        join_line(&limiter, "b", 4, &admissions).await,
        join_line(&limiter, "c", 1, &admissions).await,
        join_line(&limiter, "d", 5, &admissions).await,
    ];
    for waiter in waiters {
        waiter.await.unwrap().unwrap();
    }
    let admissions = admissions.lock().unwrap();
    let order: Vec<_> = admissions.iter().map(|(name, _)| *name).collect();
    // c would fit beside a in window 1 but does not pass b.
    assert_eq!(order, ["a", "b", "c", "d"]);
    for ((_, at), due) in admissions.iter().zip([secs(1), secs(2), secs(2), secs(3)]) {
        assert_at(start, *at, due);
    }
    assert_eq!(limiter.available(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_waiter_takes_nothing_and_the_next_moves_up() {
    let limiter = FixedWindow::new(4, secs(1)).unwrap();
    let admissions = Admissions::default();
    let start = Instant::now();
    limiter.try_acquire(4).unwrap();
    let head = join_line(&limiter, "head", 4, &admissions).await;
    let middle = join_line(&limiter, "middle", 3, &admissions).await;
    let last = join_line(&limiter, "last", 2, &admissions).await;
    // Windows 1, 2 and 3 in turn.
    assert_eq!(limiter.try_acquire(1), limited(secs(3)));
    advance(ms(300)).await;
    middle.abort();
    assert!(middle.await.unwrap_err().is_cancelled());
    // head in window 1, last in window 2 with room for 2 more beside it.
    assert_eq!(limiter.try_acquire(2), limited(ms(1_700)));
    advance(ms(200)).await;
    head.abort(); // while it sleeps at the head of the line
    assert!(head.await.unwrap_err().is_cancelled());
    assert_eq!(limiter.try_acquire(2), limited(ms(500)));
    last.await.unwrap().unwrap();
    assert_at(start, admissions.lock().unwrap()[0].1, secs(1));
    assert_eq!(admissions.lock().unwrap().len(), 1);
    // Only last's 2 permits are counted in window 1.
    assert_eq!(limiter.available(), 2);
}

#[tokio::test(start_paused = true)]
async fn refunds_give_back_to_the_current_window_only_and_never_below_zero() {
    let limiter = FixedWindow::new(10, secs(1)).unwrap();
    limiter.try_acquire(8).unwrap();
    limiter.refund(3);
    assert_eq!(limiter.available(), 5);
    limiter.refund(100);
    assert_eq!(limiter.available(), 10);
    assert!(limiter.is_idle());
    limiter.refund(1); // nothing counted: nothing changes
    assert_eq!(limiter.available(), 10);
    limiter.try_acquire(10).unwrap();
    // Permits taken in window 0 cannot lift window 1 above its limit.
    advance(secs(1)).await;
    limiter.try_acquire(4).unwrap();
    limiter.refund(10);
    assert_eq!(limiter.available(), 10);
    limiter.try_acquire(10).unwrap();
    assert_eq!(limiter.try_acquire(1), limited(secs(1)));
}

#[tokio::test(start_paused = true)]
async fn a_refund_lets_the_head_of_the_line_in_at_once() {
    let limiter = FixedWindow::new(2, secs(1)).unwrap();
    let admissions = Admissions::default();
    let start = Instant::now();
    limiter.try_acquire(2).unwrap();
    let waiter = join_line(&limiter, "waiter", 1, &admissions).await;
    advance(ms(300)).await;
    limiter.refund(1);
    waiter.await.unwrap().unwrap();
    assert_at(start, admissions.lock().unwrap()[0].1, ms(300));
    assert_eq!(limiter.available(), 0);
}

#[tokio::test(start_paused = true)]
async fn is_limited_counts_nothing_and_sees_the_line() {
    let limiter = FixedWindow::new(3, secs(1)).unwrap();
    for _ in 0..10 {
        assert!(!limiter.is_limited());
    }
    assert_eq!(limiter.available(), 3);
    limiter.try_acquire(3).unwrap();
    assert!(limiter.is_limited());
    limiter.refund(1);
    assert!(!limiter.is_limited());
    // A waiter for 2 cannot go before the next window: with room for 1, try_acquire(1)
    // would still be refused, as it does not jump the line.
    let admissions = Admissions::default();
    let waiter = join_line(&limiter, "waiter", 2, &admissions).await;
    assert_eq!(limiter.available(), 1);
    assert!(limiter.is_limited());
    assert_eq!(limiter.try_acquire(1), limited(secs(1)));
    waiter.await.unwrap().unwrap();
    assert!(!limiter.is_limited());
}

#[tokio::test(start_paused = true)]
async fn is_idle_means_an_empty_current_window_and_nobody_in_line() {
    let limiter = FixedWindow::new(2, secs(1)).unwrap();
    assert!(limiter.is_idle());
    limiter.try_acquire(2).unwrap();
    assert!(!limiter.is_idle());
    let admissions = Admissions::default();
    let waiter = join_line(&limiter, "waiter", 1, &admissions).await;
    limiter.refund(2);
    // Nothing counted, but the waiter the refund woke still stands in line.
    assert!(!limiter.is_idle());
    waiter.await.unwrap().unwrap();
    assert!(!limiter.is_idle());
    advance(secs(1)).await;
    assert!(limiter.is_idle());
}

#[tokio::test(start_paused = true)]
async fn fresh_starts_empty_on_the_same_window_grid() {
    let template = FixedWindow::new(3, secs(1)).unwrap();
    template.try_acquire(3).unwrap();
    advance(ms(1_400)).await;
    template.try_acquire(2).unwrap();
    let fresh = template.fresh();
    assert!(fresh.is_idle());
    assert_eq!((fresh.limit(), fresh.window()), (3, secs(1)));
    fresh.try_acquire(3).unwrap();
    assert_eq!(fresh.try_acquire(1), limited(ms(600)));
    // Independent counts.
    assert_eq!(template.available(), 1);
    assert_eq!(
        format!("{fresh:?}"),
        "FixedWindow { limit: 3, window: 1s, available: 0, queued_permits: 0 }"
    );
}

/// A thread outside the runtime reads the real clock, hours behind this paused one: it
/// must count into the newer window the paused clock opened, not wind the limiter back
/// to its own window (which would erase the newer window's count).
#[tokio::test(start_paused = true)]
async fn a_caller_whose_clock_is_behind_counts_into_the_newer_window() {
    let hour = secs(3_600);
    let limiter = FixedWindow::new(3, hour).unwrap();
    advance(hour * 10).await;
    limiter.try_acquire(2).unwrap();
    let from_real_clock = |permits| {
        let limiter = limiter.clone();
        std::thread::spawn(move || limiter.try_acquire(permits))
            .join()
            .unwrap()
    };
    assert_eq!(from_real_clock(1), Ok(()));
    assert_eq!(limiter.try_acquire(1), limited(hour));
    let Err(TryAcquireError::Limited { retry_after }) = from_real_clock(1) else {
        panic!("window 10 is full");
    };
    // Until window 11, from a clock in window 0.
    assert!(retry_after > hour * 10 && retry_after <= hour * 11);
    assert_eq!(limiter.available(), 0);
}

impl limiters::Waiting for FixedWindow {
    fn queued_permits(&self) -> u64 {
        FixedWindow::queued_permits(self)
    }
}

#[test]
fn a_waiter_in_a_runtime_without_a_timer_panics_on_its_first_poll() {
    limiters::a_waiter_in_a_runtime_without_a_timer_panics_on_its_first_poll(
        FixedWindow::new(1, secs(60)).unwrap(),
    );
}

#[test]
fn acquire_outside_a_runtime_fails_only_when_it_must_wait() {
    let limiter = FixedWindow::new(1, secs(3_600)).unwrap();
    assert_eq!(futures::executor::block_on(limiter.acquire(1)), Ok(()));
    assert_eq!(
        futures::executor::block_on(limiter.acquire(1)),
        Err(AcquireError::NoRuntime)
    );
    assert_eq!(futures::executor::block_on(limiter.acquire(0)), Ok(()));
    // It took nothing and left the line.
    limiter.refund(1);
    assert!(limiter.is_idle());
}

#[tokio::test(start_paused = true)]
async fn zero_permits_always_succeed_even_behind_a_line() {
    let limiter = FixedWindow::new(1, secs(1)).unwrap();
    limiter.try_acquire(1).unwrap();
    let admissions = Admissions::default();
    let waiter = join_line(&limiter, "waiter", 1, &admissions).await;
    assert_eq!(limiter.try_acquire(0), Ok(()));
    assert_eq!(limiter.acquire(0).await, Ok(()));
    assert!(admissions.lock().unwrap().is_empty());
    waiter.await.unwrap().unwrap();
}

/// Code written against the trait takes a FixedWindow like any other limiter.
#[tokio::test(start_paused = true)]
async fn works_through_the_limiter_trait() {
    async fn take_all<L: Limiter>(limiter: &L, batches: &[u64]) -> Result<(), AcquireError> {
        for &permits in batches {
            limiter.acquire(permits).await?;
        }
        Ok(())
    }
    let limiter = FixedWindow::new(4, ms(500)).unwrap();
    let start = Instant::now();
    take_all(&limiter, &[3, 3, 1, 4]).await.unwrap();
    // 3 | 3 1 | 4
    assert_eq!(start.elapsed(), ms(1_000));
}

/// Real threads race for one window's permits (an hour long, so the real clock stays in
/// it): together they get exactly the limit, none lost and none twice. The racing test
/// across many window edges is in `src/window/fixed_window/tests.rs`, where each
/// admission reports its window.
#[test]
fn racing_threads_share_exactly_one_window_of_permits() {
    const LIMIT: u64 = 1_000_000;
    const THREADS: usize = 8;
    let limiter = FixedWindow::new(LIMIT, secs(3_600)).unwrap();
    let start_together = std::sync::Barrier::new(THREADS);
    let admitted: u64 = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                scope.spawn(|| {
                    start_together.wait();
                    let mut admitted = 0;
                    while limiter.try_acquire(1).is_ok() {
                        admitted += 1;
                    }
                    admitted
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|thread| thread.join().unwrap())
            .sum()
    });
    assert_eq!(admitted, LIMIT);
    assert_eq!(limiter.available(), 0);
}

#[tokio::test(start_paused = true)]
async fn queued_permits_sums_the_line_and_debug_names_it_so() {
    let limiter = FixedWindow::new(5, secs(1)).unwrap();
    limiter.try_acquire(5).unwrap();
    let mut first = tokio_test::task::spawn(limiter.acquire(4));
    let mut second = tokio_test::task::spawn(limiter.acquire(3));
    tokio_test::assert_pending!(first.poll());
    tokio_test::assert_pending!(second.poll());
    assert_eq!(limiter.queued_permits(), 7);
    assert_eq!(
        format!("{limiter:?}"),
        "FixedWindow { limit: 5, window: 1s, available: 0, queued_permits: 7 }"
    );
    drop(first);
    assert_eq!(limiter.queued_permits(), 3);
    advance(secs(1)).await;
    assert_eq!(second.await, Ok(()));
    assert_eq!(limiter.queued_permits(), 0);
    assert_eq!(limiter.available(), 2);
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_zero_while_a_due_head_is_not_yet_woken() {
    limiters::retry_after_is_zero_while_a_due_head_is_not_yet_woken(
        FixedWindow::new(2, secs(1)).unwrap(),
        secs(1),
    )
    .await;
}
