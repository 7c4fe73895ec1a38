//! First in, first out waiting for the window limiters, which have no refill task: each
//! waiter in turn sleeps until its request fits, then acquires, recorded as of the
//! instant it fitted rather than the instant the timer woke it.

use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::atomic::Ordering;
use std::sync::PoisonError;
use std::task::{Context, Poll};

use futures::future::select;
use tokio::runtime::Handle;
use tokio::sync::{Mutex, MutexGuard, Notify};

use crate::clock::{self, duration_from_nanos, Clock};
use crate::error::AcquireError;
use crate::observe::Observer;
use crate::sync::AtomicUsize;

/// The line of waiters of one window limiter.
///
/// tokio's `Mutex` hands its lock over in the order it was asked for, so holding it is
/// "being at the head of the line". Only the head sleeps on the clock; the others wait on
/// the lock, in order.
///
/// Its line's place in the crate's lock order: see `sync/mod.rs`.
#[derive(Debug, Default)]
pub(crate) struct Turnstile {
    /// Holds the instant (on the limiter's clock) the last head left the line.
    head: Mutex<u64>,
    /// Waiters in line (the head included); `try_acquire` refuses while this is not zero,
    /// so it never jumps the line. A count of waiters, not a sum of their permits: one
    /// waiter adds one whatever it asks for, so the count can neither wrap to zero (two
    /// requests of 2^63 permits would wrap a `u64` sum) nor read zero for a request of
    /// zero permits.
    waiters: AtomicUsize,
    /// Each waiter's request, in the order of the line: a request must fit whole in a
    /// window, so a `retry_after` behind the line needs the sizes, not only their sum.
    /// Loom's lock under `--cfg loom`, as a composite takes it beside the buckets'.
    line: crate::sync::Mutex<Line>,
    /// Woken by refunds, which may let the head in before its computed instant.
    refunded: Notify,
}

impl Turnstile {
    /// Whether anybody waits in line. Lock-free: what the fast paths ask.
    pub(crate) fn is_waiting(&self) -> bool {
        self.waiters.load(Ordering::Acquire) > 0
    }

    /// How many waiters are in line: the queued-requests gauge of a named limiter.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn waiting(&self) -> usize {
        self.waiters.load(Ordering::Acquire)
    }

    /// Permits asked for by the waiters in line, `u64::MAX` if they add up to more.
    /// Walks the line: a sum kept beside it would need 128 bits (no line of `u64`
    /// requests overflows them) and, aligned, cost every limiter 48 bytes, which matters
    /// for a [`Keyed`](crate::Keyed) with a million keys more than this walk does.
    pub(crate) fn queued_permits(&self) -> u64 {
        let line = self.line();
        let permits: u128 = line
            .places
            .iter()
            .map(|place| u128::from(place.permits))
            .sum();
        u64::try_from(permits).unwrap_or(u64::MAX)
    }

    /// The record of the line, held: while it is, nobody joins. A composite holds it for
    /// every window it joins, so that it joins all of them at once (see `composite/`).
    pub(crate) fn line(&self) -> crate::sync::MutexGuard<'_, Line> {
        // Nothing panics while holding it, so a poisoned line is still consistent.
        self.line.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells the head that permits came back early.
    pub(crate) fn refunded(&self) {
        self.refunded.notify_waiters();
    }

    /// Waits in line, then calls `attempt` until it admits `permits`.
    ///
    /// `attempt(permits, as_of)` tries to acquire without looking at the line, as of the
    /// instant `as_of` on the limiter's `clock`, or now if that is earlier (see
    /// [`Head::as_of`]). It returns the instant it recorded the admission at, or, when the
    /// request does not fit by now, the instant from which it does ([`NEVER`] for never).
    /// The head then sleeps until that instant, or until a refund, and tries again as of
    /// it: a wakeup late by tokio's 1 ms timer does not push the schedule back.
    ///
    /// It reports to `observer` (see `observe/`): admitted, when admitted on its first
    /// poll; else waited, for as long as it waited, in the wait's span.
    ///
    /// Cancel safe: dropping the future leaves the line and acquires nothing.
    ///
    /// [`NEVER`]: crate::clock::NEVER
    pub(crate) async fn acquire(
        &self,
        clock: &Clock,
        permits: u64,
        observer: &Observer,
        mut attempt: impl FnMut(u64, u64) -> Result<u64, u64>,
    ) -> Result<(), AcquireError> {
        let joined_at = clock.now();
        let mut watch = Watch::new(observer, clock, joined_at);
        let mut head = pin!(Queuing::new(self, clock));
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
        let turn_began = match first_poll {
            Poll::Ready(turn_began) => turn_began,
            Poll::Pending => {
                // It must wait: without a timer it could never be woken once at the head,
                // so say so now, on its first poll.
                clock::require_timer();
                watch.waits(permits);
                watch.during(head).await
            }
        };
        let mut head = Head {
            // Not before it asked, nor before the waiter ahead left the head.
            as_of: joined_at.max(*turn_began),
            turn_began,
            clock,
            admitted_at: None,
        };
        loop {
            // Listen before looking, so a refund between the two is not missed.
            let refunded = self.refunded.notified();
            let due = match attempt(permits, head.as_of) {
                Ok(admitted_at) => {
                    head.admitted_at = Some(admitted_at);
                    watch.admitted(permits);
                    return Ok(());
                }
                Err(due) => due,
            };
            if Handle::try_current().is_err() {
                return Err(AcquireError::NoRuntime);
            }
            // Made in this poll: in a runtime without a timer, tokio panics right here
            // (see `clock::require_timer`).
            let sleep = pin!(clock.sleep_until(due));
            watch.waits(permits);
            let _ = watch.during(select(sleep, pin!(refunded))).await;
            head.as_of = due;
        }
    }
}

/// What a waiter reports as it goes (see `observe/`): admitted at once, or admitted
/// after waiting since it joined the line, the wait in a span of its own. Nothing for an
/// unnamed limiter's waiters but the test of its observer.
struct Watch<'a> {
    observer: &'a Observer,
    clock: &'a Clock,
    joined_at: u64,
    /// Whether it had to wait: it reached the head only on a later poll, or slept there.
    waited: bool,
    #[cfg(feature = "tracing")]
    span: Option<tracing::Span>,
}

impl<'a> Watch<'a> {
    fn new(observer: &'a Observer, clock: &'a Clock, joined_at: u64) -> Watch<'a> {
        Watch {
            observer,
            clock,
            joined_at,
            waited: false,
            #[cfg(feature = "tracing")]
            span: None,
        }
    }

    /// It must wait for `permits`: the wait's span opens, once.
    fn waits(&mut self, permits: u64) {
        if !self.waited {
            self.waited = true;
            #[cfg(feature = "tracing")]
            {
                self.span = self.observer.wait_span(permits);
            }
        }
        let _ = permits;
    }

    /// Awaits `future` inside the wait's span, if there is one.
    async fn during<F: Future>(&self, future: F) -> F::Output {
        #[cfg(feature = "tracing")]
        if let Some(span) = &self.span {
            return tracing::Instrument::instrument(future, span.clone()).await;
        }
        future.await
    }

    /// `permits` were admitted now.
    fn admitted(&self, permits: u64) {
        if !self.waited {
            self.observer.admitted(permits);
            return;
        }
        #[cfg(feature = "tracing")]
        let _entered = self.span.as_ref().map(tracing::Span::enter);
        let waited = self.clock.now().saturating_sub(self.joined_at);
        let waited = duration_from_nanos(u128::from(waited));
        self.observer.waited(permits, waited);
    }
}

/// A composite's place in this line (see `composite/`): joined like any waiter's, and at
/// the head once its lock is handed over. It acquires nothing itself; the composite
/// records its admission in every member at one instant and says when with
/// [`admitted`](Queued::admitted). Dropped otherwise, it leaves the line, and the next
/// head's turn begins now.
pub(crate) struct Queued<'a> {
    _in_line: InLine<'a>,
    clock: &'a Clock,
    lock: Queuing<'a>,
    head: Option<MutexGuard<'a, u64>>,
    admitted_at: Option<u64>,
}

impl<'a> Queued<'a> {
    /// Joins `turnstile`'s line, whose record the caller holds as `line`, and queues on
    /// its lock with `context`'s waker.
    pub(crate) fn join(
        turnstile: &'a Turnstile,
        line: &mut Line,
        clock: &'a Clock,
        permits: u64,
        context: &mut Context<'_>,
    ) -> Queued<'a> {
        let in_line = InLine::join(turnstile, line, permits);
        let mut queued = Queued {
            _in_line: in_line,
            clock,
            lock: Queuing::new(turnstile, clock),
            head: None,
            admitted_at: None,
        };
        queued.poll_head(context);
        queued
    }

    /// Whether it is at the head; if not, `context`'s task is woken once it is.
    pub(crate) fn poll_head(&mut self, context: &mut Context<'_>) -> bool {
        if self.head.is_none() {
            if let Poll::Ready(guard) = Pin::new(&mut self.lock).poll(context) {
                self.head = Some(guard);
            }
        }
        self.head.is_some()
    }

    /// The composite was admitted at `at`: the next head's turn begins then.
    pub(crate) fn admitted(&mut self, at: u64) {
        self.admitted_at = Some(at);
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if let Some(turn_began) = &mut self.head {
            **turn_began = self.admitted_at.unwrap_or_else(|| self.clock.now());
        }
    }
}

/// A waiter queued on the head's lock. Dropped once the lock was handed to it but before
/// its task took it, it takes it then, so that the next head's turn begins now, as when a
/// head gives up: else the next head would be admitted as of an instant before the turn
/// this one held.
struct Queuing<'a> {
    /// `None` once it resolved.
    lock: Option<Pin<Box<dyn Future<Output = MutexGuard<'a, u64>> + Send + 'a>>>,
    clock: &'a Clock,
}

impl<'a> Queuing<'a> {
    fn new(turnstile: &'a Turnstile, clock: &'a Clock) -> Queuing<'a> {
        Queuing {
            lock: Some(Box::pin(turnstile.head.lock())),
            clock,
        }
    }
}

impl<'a> Future for Queuing<'a> {
    type Output = MutexGuard<'a, u64>;

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(lock) = &mut self.lock else {
            return Poll::Pending;
        };
        let guard = std::task::ready!(lock.as_mut().poll(context));
        self.lock = None;
        Poll::Ready(guard)
    }
}

impl Drop for Queuing<'_> {
    fn drop(&mut self) {
        let Some(lock) = &mut self.lock else {
            return;
        };
        let mut context = Context::from_waker(futures::task::noop_waker_ref());
        // Outside the task's cooperative budget: spent, tokio's lock answers `Pending`
        // though it was handed over, and the turn would pass on unbegun.
        let mut lock = tokio::task::unconstrained(lock.as_mut());
        if let Poll::Ready(mut turn_began) = Pin::new(&mut lock).poll(&mut context) {
            *turn_began = self.clock.now();
        }
    }
}

/// The waiter at the head of the line, holding the lock. The lock keeps the instant the
/// last head left, admitted or not: that is when the next head's turn began.
struct Head<'a> {
    /// The earliest instant it may be admitted at, when that is already past: it was
    /// due then, and only the timer's granularity (or a busy runtime) kept it from
    /// trying. Later than now after a refund woke it early; the limiter then uses now.
    as_of: u64,
    turn_began: MutexGuard<'a, u64>,
    clock: &'a Clock,
    admitted_at: Option<u64>,
}

impl Drop for Head<'_> {
    fn drop(&mut self) {
        // Admitted, the next head's turn begins at the admission's instant, however far
        // back it was recorded; given up, it begins now.
        *self.turn_began = self.admitted_at.unwrap_or_else(|| self.clock.now());
    }
}

/// The waiters' requests in line order, each with a ticket to find it when it leaves.
#[derive(Debug, Default)]
pub(crate) struct Line {
    places: VecDeque<Place>,
    next_ticket: u64,
}

impl Line {
    /// The permits of each waiter in line, the head first: for refusals behind waiters,
    /// by a caller holding the line.
    pub(crate) fn permits(&self) -> impl Iterator<Item = u64> + '_ {
        self.places.iter().map(|place| place.permits)
    }
}

#[derive(Debug)]
struct Place {
    ticket: u64,
    permits: u64,
}

/// A waiter's place: counted in [`Turnstile::is_waiting`] and recorded in the line until
/// it leaves, by success, error or drop.
struct InLine<'a> {
    turnstile: &'a Turnstile,
    ticket: u64,
}

impl<'a> InLine<'a> {
    /// Joins the line; the caller queues on the lock before letting go of `line`.
    fn join(turnstile: &'a Turnstile, line: &mut Line, permits: u64) -> InLine<'a> {
        let ticket = line.next_ticket;
        line.next_ticket = ticket.wrapping_add(1);
        line.places.push_back(Place { ticket, permits });
        turnstile.waiters.fetch_add(1, Ordering::AcqRel);
        InLine { turnstile, ticket }
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
        self.turnstile.waiters.fetch_sub(1, Ordering::AcqRel);
    }
}
