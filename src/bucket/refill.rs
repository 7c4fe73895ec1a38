//! The refill task: one tokio task per bucket that serves the queue when nobody else
//! touches the bucket.
//!
//! It sleeps until the next instant something is due (the head's tokens accrue or its
//! deadline passes), serves, and plans again. A change that makes something due sooner
//! (a new head, a higher rate, a refund, a waiter that gave up) nudges it through a
//! [`Nudge`]. With nobody queued it sleeps on the nudge alone: an idle bucket costs no
//! CPU. It holds the bucket only weakly, so it ends when the last handle is dropped,
//! and it ends when the bucket is closed.

use std::cell::Cell;
use std::future::{poll_fn, Future};
use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};

use futures::future::FutureExt;
use futures::task::AtomicWaker;
use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::bucket::handle::Shared;
use crate::bucket::state::State;
use crate::error::TakeError;

/// Makes sure a refill task runs for `shared` before a waiter queues on it, starting one
/// on the current runtime if there is none (or its runtime shut down).
pub(crate) fn ensure_running(shared: &Arc<Shared>, state: &mut State) -> Result<(), TakeError> {
    // Under loom there is no tokio runtime: the model's own threads serve the queue.
    if cfg!(loom) || shared.refill_running.load(Ordering::Acquire) {
        return Ok(());
    }
    let runtime = Handle::try_current().map_err(|_| TakeError::NoRuntime)?;
    // Set before spawning: a runtime that is shutting down drops the task inside
    // `spawn`, and its guard must be able to clear the flag again.
    shared.refill_running.store(true, Ordering::Release);
    state.refill_started();
    let guard = RunningGuard(Arc::downgrade(shared));
    SPAWNING.with(|spawning| spawning.set(true));
    runtime.spawn(supervise(guard, Arc::clone(&shared.refill_signal)));
    SPAWNING.with(|spawning| spawning.set(false));
    if !shared.refill_running.load(Ordering::Acquire) {
        // The runtime is shutting down and dropped the task at once.
        return Err(TakeError::NoRuntime);
    }
    Ok(())
}

thread_local! {
    /// True while this thread is inside `spawn` in [`ensure_running`], holding the
    /// bucket's lock: a task dropped right there must not take the lock again.
    static SPAWNING: Cell<bool> = const { Cell::new(false) };
}

/// Clears the bucket's "refill task running" flag when the task ends or is dropped by a
/// runtime shutting down, so the next waiter starts a new one, and wakes the waiters
/// already queued (from other runtimes) so they start one themselves.
struct RunningGuard(Weak<Shared>);

impl Drop for RunningGuard {
    fn drop(&mut self) {
        let Some(shared) = self.0.upgrade() else {
            return;
        };
        shared.refill_running.store(false, Ordering::Release);
        // Inside `spawn` the spawner holds the lock, and its waiter is not queued yet.
        if !SPAWNING.with(Cell::get) {
            let mut state = shared.lock(shared.clock.now());
            state.refill_lost();
            shared.unlock_and_wake(state, Vec::new());
        }
    }
}

/// Runs the task. If it panics (a bug), the bucket closes and its waiters are told
/// [`TakeError::RefillFailed`]: started again by the next waiter, the task could panic
/// again for ever. The guard outlives the task, so that nobody starts another before the
/// waiters are told.
async fn supervise(guard: RunningGuard, signal: Arc<Nudge>) {
    let task = AssertUnwindSafe(run(&guard.0, signal));
    if task.catch_unwind().await.is_err() {
        if let Some(shared) = guard.0.upgrade() {
            shared.fail_refill();
        }
    }
}

async fn run(bucket: &Weak<Shared>, signal: Arc<Nudge>) {
    let mut sleep = pin!(tokio::time::sleep_until(Instant::now()));
    let mut wakers = Vec::new();
    loop {
        let Some(wake_at) = serve_and_plan(bucket, &mut wakers) else {
            return;
        };
        if let Some(instant) = wake_at {
            sleep.as_mut().reset(instant);
        }
        // Either the due instant came or the plan changed: serve again.
        poll_fn(|cx| {
            // Once polled after a reset, the sleep keeps its waker until it fires: asking
            // whether it fired costs a tenth of polling it again.
            if wake_at.is_some() && (sleep.is_elapsed() || sleep.as_mut().poll(cx).is_ready()) {
                return Poll::Ready(());
            }
            signal.poll_nudged(cx)
        })
        .await;
    }
}

/// What nudges the refill task to plan again: a flag and the task's waker. A nudge given
/// while the task is busy stays set until its next wait, so none is lost (as a permit of
/// tokio's `Notify` would). Cheaper than a `Notify`, whose waiter must register under its
/// lock and deregister again on every round the sleep ends.
///
/// Plain atomics even under loom: there the refill task never runs (see
/// [`ensure_running`]), so nobody waits on a nudge.
#[derive(Debug, Default)]
pub(crate) struct Nudge {
    nudged: AtomicBool,
    waker: AtomicWaker,
}

impl Nudge {
    /// Nudges the task: wakes it if it waits, or makes its next wait end at once.
    pub(crate) fn notify_one(&self) {
        self.nudged.store(true, Ordering::Release);
        self.waker.wake();
    }

    /// Ready once nudged since the last time it was ready. Registers before it looks, so
    /// a nudge given in between is seen here or wakes the waker just registered.
    fn poll_nudged(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.waker.register(cx.waker());
        if self.nudged.swap(false, Ordering::AcqRel) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// Serves the queue now and returns when to wake next (`Some(None)`: only when nudged),
/// or `None` when the task should end.
/// `wakers` is the task's own empty vector, lent to the state so that serving reuses one
/// allocation.
pub(crate) fn serve_and_plan(
    bucket: &Weak<Shared>,
    wakers: &mut Vec<Waker>,
) -> Option<Option<Instant>> {
    let shared = bucket.upgrade()?;
    let now = shared.clock.now();
    let mut state = shared.lock(now);
    #[cfg(all(test, not(loom)))]
    if shared.panic_in_refill.load(Ordering::Relaxed) {
        panic!("a panic in the refill task, made by a test");
    }
    if state.is_closed() {
        return None;
    }
    let due = state.serve_and_plan_refill(now);
    *wakers = shared.unlock_and_wake(state, std::mem::take(wakers));
    Some(shared.clock.instant(due))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::time::Duration;

    use crate::{Rate, TakeError, TokenBucket, TryTakeError};

    /// On a real clock, so that a task restarted for ever (which never lets paused time
    /// move) fails the timeout instead of hanging the test.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refill_task_that_panics_closes_the_bucket_and_tells_its_waiters() {
        let bucket = TokenBucket::builder()
            .rate(Rate::per_second(1))
            .capacity(1)
            .initial(0)
            .build()
            .unwrap();
        bucket
            .shared()
            .panic_in_refill
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let waiter = tokio::spawn({
            let bucket = bucket.clone();
            async move { bucket.take(1).await }
        });
        let told = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiter is told, not left hanging")
            .unwrap();
        assert_eq!(told, Err(TakeError::RefillFailed));
        assert!(bucket.is_closed());
        // Nobody starts the task again: later requests are refused at once.
        assert_eq!(bucket.take(1).await, Err(TakeError::Closed));
        assert_eq!(bucket.try_take(1), Err(TryTakeError::Closed));
        tokio::task::yield_now().await;
        assert!(!bucket
            .shared()
            .refill_running
            .load(std::sync::atomic::Ordering::Acquire));
        assert_eq!(bucket.stats().queued, 0);
    }
}
