//! First in, first out waiting for the window limiters, which have no refill task: each
//! waiter in turn sleeps until its request fits, then acquires.

use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{MutexGuard, PoisonError};
use std::task::Poll;
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
    /// Each waiter's request, in the order of the line: a request must fit whole in a
    /// window, so a `retry_after` behind the line needs the sizes, not only their sum.
    line: std::sync::Mutex<Line>,
    /// Woken by refunds, which may let the head in before its computed instant.
    refunded: Notify,
}

impl Turnstile {
    /// Permits asked for by the waiters in line.
    pub(crate) fn queued(&self) -> u64 {
        self.queued.load(Ordering::Acquire)
    }

    /// Calls `visit` with the permits of each waiter in line, the head first. Takes a lock
    /// and walks the whole line: for refusals while waiters are in line, not for the fast
    /// path.
    pub(crate) fn for_each_in_line(&self, mut visit: impl FnMut(u64)) {
        for place in &self.line().places {
            visit(place.permits);
        }
    }

    fn line(&self) -> MutexGuard<'_, Line> {
        // Nothing panics while holding it, so a poisoned line is still consistent.
        self.line.lock().unwrap_or_else(PoisonError::into_inner)
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
        let mut head = pin!(self.head.lock());
        // Join the record and the lock's queue in one step (the lock future queues on its
        // first poll), so that both hold the waiters in the same order.
        let (_in_line, first_poll) = poll_fn(|context| {
            let mut line = self.line();
            let in_line = InLine::join(self, &mut line, permits);
            let first_poll = head.as_mut().poll(context);
            drop(line);
            Poll::Ready((in_line, first_poll))
        })
        .await;
        let _head = match first_poll {
            Poll::Ready(head) => head,
            Poll::Pending => head.await,
        };
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

/// The waiters' requests in line order, each with a ticket to find it when it leaves.
#[derive(Debug, Default)]
struct Line {
    places: VecDeque<Place>,
    next_ticket: u64,
}

#[derive(Debug)]
struct Place {
    ticket: u64,
    permits: u64,
}

/// A waiter's place: its permits counted in [`Turnstile::queued`] and recorded in the
/// line until it leaves, by success, error or drop.
struct InLine<'a> {
    turnstile: &'a Turnstile,
    ticket: u64,
    /// What it adds to `queued`.
    counted: u64,
}

impl<'a> InLine<'a> {
    /// Joins the line; the caller queues on the lock before letting go of `line`.
    fn join(turnstile: &'a Turnstile, line: &mut Line, permits: u64) -> InLine<'a> {
        let ticket = line.next_ticket;
        line.next_ticket = ticket.wrapping_add(1);
        line.places.push_back(Place { ticket, permits });
        // A waiter counts even for zero permits, so the line is never seen empty while
        // someone stands in it.
        let counted = permits.max(1);
        turnstile.queued.fetch_add(counted, Ordering::AcqRel);
        InLine {
            turnstile,
            ticket,
            counted,
        }
    }
}

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        let mut line = self.turnstile.line();
        // Usually the head leaves, so the search ends at once.
        if let Some(index) = line
            .places
            .iter()
            .position(|place| place.ticket == self.ticket)
        {
            line.places.remove(index);
        }
        self.turnstile
            .queued
            .fetch_sub(self.counted, Ordering::AcqRel);
    }
}
