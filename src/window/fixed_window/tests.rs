use std::collections::HashMap;
use std::thread;

use super::*;

#[test]
fn the_count_takes_just_the_bits_the_limit_needs() {
    assert_eq!(Layout::for_limit(1).count_bits, 1);
    assert_eq!(Layout::for_limit(10).count_bits, 4);
    assert_eq!(Layout::for_limit(1 << 31).count_bits, 32);
    assert_eq!(Layout::for_limit(MAX_LIMIT).count_bits, 32);
    let layout = Layout::for_limit(MAX_LIMIT);
    let word = layout.pack(u64::MAX, MAX_LIMIT);
    // Every bit but the top one, kept for a composite's seize.
    assert_eq!(word, u64::MAX >> 1);
    let current = layout.read(word, u64::from(u32::MAX >> 1));
    assert_eq!((current.ahead, current.count), (0, MAX_LIMIT));
    // Seized, it reads the same.
    let current = layout.read(word | SEIZED, u64::from(u32::MAX >> 1));
    assert_eq!((current.ahead, current.count), (0, MAX_LIMIT));
}

#[test]
fn a_stored_window_is_the_same_newer_or_older_by_the_wrapping_distance() {
    // 31-bit tags: windows are compared modulo 2^31, newer up to 2^30 - 1 ahead.
    let layout = Layout::for_limit(MAX_LIMIT);
    let stored = layout.pack(1 << 31, 7); // tag 0
    let read = |clock_window: u64| {
        let current = layout.read(stored, clock_window);
        (current.window(), current.count)
    };
    assert_eq!(read(1 << 31), (1 << 31, 7), "the same window");
    assert_eq!(
        read((1 << 31) - 1),
        (1 << 31, 7),
        "a caller one window behind"
    );
    assert_eq!(
        read((1 << 31) - ((1 << 30) - 1)),
        (1 << 31, 7),
        "a caller as far behind as a newer window is believed"
    );
    assert_eq!(read((1 << 31) + 1), ((1 << 31) + 1, 0), "one window later");
    assert_eq!(
        read((1 << 31) + (1 << 30)),
        ((1 << 31) + (1 << 30), 0),
        "2^30 windows later, the last gap seen exactly"
    );
}

#[test]
fn admit_counts_into_a_newer_window_that_its_clock_has_not_reached() {
    // Without a runtime the clock is real: with one-hour windows it reads window 0.
    let limiter = FixedWindow::new(3, Duration::from_secs(3_600)).unwrap();
    let shared = &limiter.shared;
    let layout = shared.layout;
    shared.state.store(layout.pack(5, 1), Ordering::Release);
    assert_eq!(shared.admit(2), Ok(5));
    assert_eq!(shared.state.load(Ordering::Acquire), layout.pack(5, 3));
    let Err(retry_after) = shared.admit(1) else {
        panic!("window 5 is full");
    };
    // Until window 6, from a clock still in window 0.
    assert!(retry_after > Duration::from_secs(5 * 3_600));
    assert!(retry_after <= Duration::from_secs(6 * 3_600));
    assert_eq!(shared.state.load(Ordering::Acquire), layout.pack(5, 3));
}

/// Two permits per 100 µs window: the head is due at each window's start, ten times
/// between two of the timer's 1 ms ticks. Each admission is counted into the window
/// it was due in, so the waiters are served two per window, at 100, 200, 300, ... µs
/// exactly, in bursts at each tick; counted into the window of the tick that woke
/// them, it would be two per millisecond.
#[tokio::test(start_paused = true)]
async fn waiters_woken_late_by_the_timer_are_counted_in_the_window_they_were_due_in() {
    const WAITERS: u64 = 40;
    let limiter = FixedWindow::new(2, Duration::from_micros(100)).unwrap();
    let start = tokio::time::Instant::now();
    limiter.try_acquire(2).unwrap();
    let tasks: Vec<_> = (0..WAITERS)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                limiter.acquire(1).await.unwrap();
                // Nothing else runs before this: the word holds this admission.
                let word = limiter.shared.state.load(Ordering::Acquire);
                let layout = limiter.shared.layout;
                let count = word & !(u64::MAX << layout.count_bits);
                (start.elapsed(), word >> layout.count_bits, count)
            })
        })
        .collect();
    let mut per_window = HashMap::<u64, u64>::new();
    for (index, task) in (0..WAITERS).zip(tasks) {
        let (went_on, window, count) = task.await.unwrap();
        let due_window = index / 2 + 1;
        assert_eq!(
            (window, count),
            (due_window, index % 2 + 1),
            "waiter {index}"
        );
        let due = Duration::from_micros(100 * due_window);
        assert!(
            went_on >= due && went_on <= due + Duration::from_millis(1),
            "waiter {index} due at {due:?} went on at {went_on:?}"
        );
        *per_window.entry(window).or_default() += 1;
    }
    assert!(per_window.values().all(|&admitted| admitted <= 2));
    assert_eq!(per_window.len() as u64, WAITERS / 2);
}

/// Real threads race over many window edges on the real clock. `admit` (what
/// `try_acquire` runs when nobody waits) reports the window each admission was
/// counted in, so the per-window totals are exact: a lost update, a second reset of
/// a window, or a late caller winding the word back to an older window would each
/// put more than the limit in some window.
#[test]
fn racing_threads_never_admit_more_than_the_limit_in_any_window() {
    const LIMIT: u64 = 200;
    const THREADS: u64 = 8;
    let limiter = FixedWindow::new(LIMIT, Duration::from_micros(200)).unwrap();
    let run = Duration::from_millis(500);
    let start_together = std::sync::Barrier::new(THREADS as usize);
    let refusals = AtomicU64::new(0);
    let admissions: Vec<(u64, u64)> = thread::scope(|scope| {
        let threads: Vec<_> = (0..THREADS)
            .map(|thread| {
                let (shared, refusals) = (&limiter.shared, &refusals);
                let start_together = &start_together;
                scope.spawn(move || {
                    start_together.wait();
                    let start = std::time::Instant::now();
                    let mut admitted = Vec::new();
                    let mut calls = thread;
                    while start.elapsed() < run {
                        let permits = 1 + calls % 2;
                        match shared.admit(permits) {
                            Ok(window) => admitted.push((window, permits)),
                            Err(_) => _ = refusals.fetch_add(1, Ordering::Relaxed),
                        }
                        calls += 1;
                    }
                    admitted
                })
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|thread| thread.join().unwrap())
            .collect()
    });
    let mut per_window = HashMap::<u64, u64>::new();
    for (window, permits) in admissions {
        *per_window.entry(window).or_default() += permits;
    }
    for (window, admitted) in &per_window {
        assert!(
            *admitted <= LIMIT,
            "window {window} admitted {admitted} permits, above the limit {LIMIT}"
        );
    }
    // Not vacuous: windows were crossed, and the limit refused requests.
    assert!(per_window.len() > 1, "only {} windows", per_window.len());
    assert!(refusals.into_inner() > 0, "the limit was never reached");
}
