//! Composites whose test must choose the members' lock order, which only the crate sees
//! (the order of their identities).

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::task::Context;
use std::thread;
use std::time::Duration;

use futures::task::noop_waker_ref;
use tokio::runtime::Runtime;

use crate::composite::{all, Part, Piece, Sealed};
use crate::error::{TryAcquireAllError, TryAcquireError};
use crate::window::{FixedWindow, SlidingLog};

/// A current-thread runtime on a paused clock, which stands still unless it runs.
fn paused_runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

/// A sliding log of 20 per 5 ms and an hour-long fixed window of `limit`, the log first
/// in the composites' lock order. Made alternately and kept, so that however the
/// allocator places them, some log lies below some window.
fn a_log_locked_before_a_window(limit: u64) -> (SlidingLog, FixedWindow) {
    let identity = |member: &dyn Sealed| member.part().0.identity();
    let mut logs = Vec::new();
    let mut windows = Vec::new();
    for _ in 0..8 {
        logs.push(SlidingLog::new(20, Duration::from_millis(5)).unwrap());
        windows.push(FixedWindow::new(limit, Duration::from_secs(3_600)).unwrap());
        for log in &logs {
            if let Some(window) = windows.iter().find(|w| identity(log) < identity(*w)) {
                return (log.clone(), window.clone());
            }
        }
    }
    panic!("every log was placed above every window");
}

/// Runs `attempt` on a thread of its own while this thread holds the line of a full
/// sliding log of 20 per 5 ms, with a waiter in it, as a composite over the log and a
/// window does while it joins or decides. Given 100 ms to get as far as it can (to the
/// log's line, where it waits), `attempt` must hold none of the locks after that line in
/// the lock order: another thread takes them (the log's tally, then the window's line),
/// as the composite would next, or the two would wait for each other for ever. Returns
/// what `attempt` answers once the line is let go, on the paused clock, still at 0.
fn behind_a_held_line<T: Send + 'static>(
    attempt: impl FnOnce(&SlidingLog, &FixedWindow) -> T + Send + 'static,
) -> T {
    let runtime = paused_runtime();
    let _inside = runtime.enter();
    let (log, window) = a_log_locked_before_a_window(10);
    log.try_acquire(20).unwrap();
    let mut waiter = Box::pin(log.acquire(1));
    let polled = waiter
        .as_mut()
        .poll(&mut Context::from_waker(noop_waker_ref()));
    assert!(polled.is_pending(), "the log is full: it waits in line");
    let Piece::Part(Part::Window(held)) = log.part().0 else {
        unreachable!("a sliding log is a window limiter")
    };
    let line = held.turnstile().line();
    let trying = {
        let (log, window, handle) = (log.clone(), window.clone(), runtime.handle().clone());
        thread::spawn(move || {
            let _inside = handle.enter();
            attempt(&log, &window)
        })
    };
    thread::sleep(Duration::from_millis(100));
    let (taken, took) = mpsc::channel();
    {
        let (log, window, handle) = (log.clone(), window.clone(), runtime.handle().clone());
        thread::spawn(move || {
            let _inside = handle.enter();
            taken.send((log.available(), window.queued_permits()))
        });
    }
    // Failing lets go of the line on the way out, which frees both threads.
    let after = took
        .recv_timeout(Duration::from_secs(10))
        .expect("a try waiting for the log's line holds a lock after it: deadlock");
    assert_eq!(after, (0, 0));
    drop(line);
    trying.join().unwrap()
}

/// A composite's try over a sliding log and a fixed window, the log locked first and a
/// waiter in its line, once took the log's tally and the window's line and then waited
/// for the log's line, held by a composite joining both lines, which waited for the
/// window's: a deadlock. It waits for the log's line first now, and is refused behind
/// the waiter: both fit when the 20 permits at 0 leave, at 5 ms.
#[test]
fn a_composite_try_waits_for_a_sliding_logs_line_before_its_later_locks() {
    let refused = behind_a_held_line(|log, window| all((log, window)).unwrap().try_acquire(1));
    assert_eq!(
        refused,
        Err(TryAcquireAllError::Limited {
            retry_after: Duration::from_millis(5)
        })
    );
}

/// A plain try on the sliding log, behind a waiter, walks the line too: it lets go of
/// the tally before waiting for the line, which a composite holds while it takes the
/// tally.
#[test]
fn a_plain_try_behind_waiters_waits_for_a_sliding_logs_line_holding_nothing() {
    let refused = behind_a_held_line(|log, _| log.try_acquire(1));
    assert_eq!(
        refused,
        Err(TryAcquireError::Limited {
            retry_after: Duration::from_millis(5)
        })
    );
}

/// The reviewer's workload: 48 tasks wait in composites over a sliding log of 20 per
/// 5 ms and a fixed window, while 4 threads try the same composite, and the log alone.
/// Before the line was locked ahead of the tally, this deadlocked in most runs (the tests
/// above, every run); it fails after 30 s instead of hanging, and passes in under a
/// second. The window counts every composite's permit, and nothing else.
#[test]
fn waiting_and_trying_composites_over_a_sliding_log_and_a_fixed_window_never_deadlock() {
    const LIMIT: u64 = 1_000_000;
    const TASKS: u64 = 48;
    const ACQUIRES: u64 = 100;
    let (log, window) = a_log_locked_before_a_window(LIMIT);
    let (done, finished) = mpsc::channel();
    let workload = {
        let (log, window) = (log.clone(), window.clone());
        move || {
            let runtime = paused_runtime();
            let stop = AtomicBool::new(false);
            let tried = AtomicU64::new(0);
            thread::scope(|scope| {
                for _ in 0..4 {
                    let (log, window, stop, tried) = (&log, &window, &stop, &tried);
                    let handle = runtime.handle().clone();
                    scope.spawn(move || {
                        // On the runtime's paused clock, as the tasks are.
                        let _inside = handle.enter();
                        let both = all((log, window)).unwrap();
                        while !stop.load(Ordering::Relaxed) {
                            if both.try_acquire(1).is_ok() {
                                tried.fetch_add(1, Ordering::Relaxed);
                            }
                            // The plain try locks the log too, in the same order.
                            let _ = log.try_acquire(1);
                        }
                    });
                }
                runtime.block_on(async {
                    let tasks: Vec<_> = (0..TASKS)
                        .map(|_| {
                            let (log, window) = (log.clone(), window.clone());
                            tokio::spawn(async move {
                                for _ in 0..ACQUIRES {
                                    all((&log, &window)).unwrap().acquire(1).await.unwrap();
                                }
                            })
                        })
                        .collect();
                    for task in tasks {
                        task.await.unwrap();
                    }
                });
                stop.store(true, Ordering::Relaxed);
            });
            let _ = done.send(tried.into_inner());
        }
    };
    thread::spawn(workload);
    // A deadlocked workload keeps its threads and limiters: nothing here waits on them.
    let tried = finished
        .recv_timeout(Duration::from_secs(30))
        .expect("no progress in 30 s: deadlocked");
    assert_eq!(window.available(), LIMIT - TASKS * ACQUIRES - tried);
    assert_eq!((log.queued_permits(), window.queued_permits()), (0, 0));
}
