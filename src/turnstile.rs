//! First in, first out waiting for the window limiters, which have no refill task: each
//! waiter in turn sleeps until its request fits, then acquires.

use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::select;
use tokio::runtime::Handle;
use tokio::sync::futures::Notified;
use tokio::sync::{Mutex, Notify};

use crate::error::{AcquireError, TryAcquireError};

/// The line of waiters of one window limiter.
///
/// tokio's `Mutex` hands its lock over in the order it was asked for, so holding it is
/// "being at the head of the line". Only the head sleeps on the clock; the others wait on
/// the lock, in order.
#[derive(Debug, Default)]
pub(crate) struct Turnstile {
    head: Mutex<()>,
    /// Permits asked for by everyone in line (the head included); `try_acquire` refuses
    /// while this is not zero, so it never jumps the line.
    queued: AtomicU64,
    /// Woken by refunds, which may let the head in before its computed instant.
    refunded: Notify,
}

impl Turnstile {
    /// Permits asked for by the waiters in line.
    pub(crate) fn queued(&self) -> u64 {
        self.queued.load(Ordering::Acquire)
    }

    /// Tells the head that permits came back early.
    pub(crate) fn refunded(&self) {
        self.refunded.notify_waiters();
    }

    /// Waits in line, then calls `attempt` until it admits `permits`.
    ///
    /// `attempt` tries to acquire without looking at the line; when refused it returns
    /// how long until the request fits. The caller has already refused `permits` above
    /// its limit, so the sum in line cannot overflow. Cancel safe: dropping the future leaves the line
    /// and acquires nothing.
    pub(crate) async fn acquire(
        &self,
        permits: u64,
        mut attempt: impl FnMut(u64) -> Result<(), TryAcquireError>,
    ) -> Result<(), AcquireError> {
        let _in_line = InLine::join(&self.queued, permits);
        let _head = self.head.lock().await;
        loop {
            // Listen before looking, so a refund between the two is not missed.
            let refunded = self.refunded.notified();
            let retry_after = match attempt(permits) {
                Ok(()) => return Ok(()),
                Err(TryAcquireError::Limited { retry_after }) => retry_after,
                Err(TryAcquireError::ExceedsLimit { requested, limit }) => {
                    return Err(AcquireError::ExceedsLimit { requested, limit })
                }
                Err(TryAcquireError::TooManyKeys { max_keys }) => {
                    return Err(AcquireError::TooManyKeys { max_keys })
                }
                Err(TryAcquireError::Closed) => return Err(AcquireError::Closed),
            };
            if Handle::try_current().is_err() {
                return Err(AcquireError::NoRuntime);
            }
            sleep_or_refund(retry_after, refunded).await;
        }
    }
}

async fn sleep_or_refund(retry_after: Duration, refunded: Notified<'_>) {
    let sleep = pin!(tokio::time::sleep(retry_after));
    let _ = select(sleep, pin!(refunded)).await;
}

/// A waiter's permits, counted in [`Turnstile::queued`] until it leaves the line, by
/// success, error or drop.
struct InLine<'a> {
    queued: &'a AtomicU64,
    permits: u64,
}

impl<'a> InLine<'a> {
    fn join(queued: &'a AtomicU64, permits: u64) -> InLine<'a> {
        // A waiter counts even for zero permits, so the line is never seen empty while
        // someone stands in it.
        let permits = permits.max(1);
        queued.fetch_add(permits, Ordering::AcqRel);
        InLine { queued, permits }
    }
}

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        self.queued.fetch_sub(self.permits, Ordering::AcqRel);
    }
}
