//! The refill task: one tokio task per bucket that serves the queue when nobody else
//! touches the bucket.
//!
//! It sleeps until the next instant something is due (the head's tokens accrue or its
//! deadline passes), serves, and plans again. A change that makes something due sooner
//! (a new head, a higher rate, a refund, a waiter that gave up) nudges it through a
//! [`Nudge`]. With nobody queued it sleeps on the nudge alone: an idle bucket costs no
//! CPU. It holds the bucket only weakly, so it ends when the last handle is dropped,
//! and it ends when the bucket is closed.
//!
//! It knows the bucket only as [`Served`]: serve what is due and say when to come back,
//! and hear that the task was lost or failed.

use std::cell::Cell;
use std::future::{poll_fn, Future};
use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};

use futures::future::FutureExt;
use futures::task::AtomicWaker;
use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::error::TakeError;
use crate::sync::AtomicBool;

/// What the refill task asks of the bucket it serves, and all it knows of it.
pub(crate) trait Served: Send + Sync + 'static {
    /// The bucket's side of its refill task.
    fn refill(&self) -> &Refill;

    /// Serves what is due now and returns when something is next due (`Some(None)`: only
    /// when nudged), or `None` once the bucket is closed and the task should end.
    /// `wakers` is the task's own empty vector, lent so that serving reuses one
    /// allocation.
    fn serve_due(&self, wakers: &mut Vec<Waker>) -> Option<Option<Instant>>;

    /// The task is gone (it ended, or a runtime shutting down dropped it): the waiters
    /// already queued (from other runtimes) are woken, to start one themselves.
    fn refill_lost(&self);

    /// The task panicked: see [`TakeError::RefillFailed`].
    fn refill_failed(&self);
}

/// The bucket's side of its refill task: whether one runs, and what nudges it.
#[derive(Debug, Default)]
pub(crate) struct Refill {
    /// Whether a task is alive; an atomic so that its guard can clear it without the
    /// bucket's lock.
    running: AtomicBool,
    nudge: Arc<Nudge>,
}

impl Refill {
    pub(crate) fn is_running(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }

    /// Nudges the task to plan again.
    pub(crate) fn nudge(&self) {
        self.nudge.notify_one();
    }
}

impl Drop for Refill {
    fn drop(&mut self) {
        // The task holds the bucket weakly: wake it so that it sees it is gone.
        self.nudge.notify_one();
    }
}

/// Makes sure a refill task serves `bucket` before a waiter queues on it, starting one
/// on the current runtime if there is none (or its runtime shut down). The caller holds
/// the bucket's lock; `started` runs under it when a task is started.
pub(crate) fn ensure_running<B: Served>(
    bucket: &Arc<B>,
    started: impl FnOnce(),
) -> Result<(), TakeError> {
    let refill = bucket.refill();
    // Under loom there is no tokio runtime: the model's own threads serve the queue.
    if cfg!(loom) || refill.is_running() {
        return Ok(());
    }
    let runtime = Handle::try_current().map_err(|_| TakeError::NoRuntime)?;
    // Set before spawning: a runtime that is shutting down drops the task inside
    // `spawn`, and its guard must be able to clear the flag again.
    refill.running.store(true, Ordering::Release);
    started();
    let guard = RunningGuard(Arc::downgrade(bucket));
    SPAWNING.with(|spawning| spawning.set(true));
    runtime.spawn(supervise(guard, Arc::clone(&refill.nudge)));
    SPAWNING.with(|spawning| spawning.set(false));
    if !refill.is_running() {
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
/// runtime shutting down, so the next waiter starts a new one, and tells the bucket.
struct RunningGuard<B: Served>(Weak<B>);

impl<B: Served> Drop for RunningGuard<B> {
    fn drop(&mut self) {
        let Some(bucket) = self.0.upgrade() else {
            return;
        };
        bucket.refill().running.store(false, Ordering::Release);
        // Inside `spawn` the spawner holds the lock, and its waiter is not queued yet.
        if !SPAWNING.with(Cell::get) {
            bucket.refill_lost();
        }
    }
}

/// Runs the task. If it panics (a bug), the bucket closes and its waiters are told
/// [`TakeError::RefillFailed`]: started again by the next waiter, the task could panic
/// again for ever. The guard outlives the task, so that nobody starts another before the
/// waiters are told.
async fn supervise<B: Served>(guard: RunningGuard<B>, signal: Arc<Nudge>) {
    let task = AssertUnwindSafe(run(&guard.0, signal));
    if task.catch_unwind().await.is_err() {
        if let Some(bucket) = guard.0.upgrade() {
            bucket.refill_failed();
        }
    }
}

async fn run<B: Served>(bucket: &Weak<B>, signal: Arc<Nudge>) {
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
struct Nudge {
    nudged: std::sync::atomic::AtomicBool,
    waker: AtomicWaker,
}

impl Nudge {
    /// Nudges the task: wakes it if it waits, or makes its next wait end at once.
    fn notify_one(&self) {
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

/// Serves `bucket` now, if it is still there, and returns when to wake next
/// (`Some(None)`: only when nudged), or `None` when the task should end.
pub(crate) fn serve_and_plan<B: Served>(
    bucket: &Weak<B>,
    wakers: &mut Vec<Waker>,
) -> Option<Option<Instant>> {
    bucket.upgrade()?.serve_due(wakers)
}
