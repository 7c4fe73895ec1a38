//! [`FixedWindow`]: a limit per fixed window of time, counted lock-free in one atomic
//! word that holds the window and its count together.
//!
//! This file holds the handle, what its clones share and the decisions made on the word;
//! beside it, in `fixed_window/`:
//! - `word.rs`: the word's layout and arithmetic; it uses nothing of the others;
//! - `held.rs`: what a composite holds while it decides (see `window/hooks.rs`);
//! - `compact.rs`: a key's window as `Keyed` holds it, its word alone;
//! - `tests.rs`: the unit tests.
//!
//! `held.rs` and `compact.rs` use this file and `word.rs`, and only add impls, so
//! nothing uses them.

use std::fmt;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{duration_from_nanos, nanos, Clock, NEVER};
use crate::error::{AcquireError, ConfigError, TryAcquireError};
use crate::limiter::Limiter;
use crate::observe::{Kind, Observer};
use crate::permits::{screen, Screened};
use crate::quota::{Decision, Policy, Quota};
use crate::sync::{AtomicU64, Identity};
use crate::window::turnstile::{Line, Turnstile};

use word::{Current, Layout, Packing, SEIZED};

mod compact;
mod held;
#[cfg(all(test, not(loom)))]
mod tests;
mod word;

/// The largest limit: the count takes at most the low 32 bits of the state word, so the
/// window number keeps at least 32.
const MAX_LIMIT: u64 = u32::MAX as u64;

/// A fixed-window rate limiter: at most `limit` permits in each window of time, the
/// windows following each other from the instant the limiter was made.
///
/// A cheap-to-clone handle: clones share one limiter, across tasks and threads.
/// [`try_acquire`](FixedWindow::try_acquire) answers at once, without a lock, with a
/// `retry_after` hint when it refuses; [`acquire`](FixedWindow::acquire) waits its turn,
/// first in, first out. Time is read from tokio's clock, so paused-time tests are exact.
/// These, [`refund`](FixedWindow::refund) and [`available`](FixedWindow::available) are
/// its own and need no import; it implements [`Limiter`] too, for code that takes any
/// limiter.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use token_bucket::{FixedWindow, TryAcquireError};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // 100 requests per second.
/// let limiter = FixedWindow::new(100, Duration::from_secs(1))?;
/// limiter.try_acquire(100)?;
/// tokio::time::advance(Duration::from_millis(300)).await;
/// // The window is spent: the next one starts 700 ms from now.
/// assert_eq!(
///     limiter.try_acquire(1),
///     Err(TryAcquireError::Limited { retry_after: Duration::from_millis(700) })
/// );
/// limiter.acquire(1).await?; // waits for the next window
/// assert_eq!(limiter.available(), 99);
/// # Ok(())
/// # }
/// ```
///
/// # How it counts
///
/// A request falls in window `elapsed / window`, `elapsed` being the time since the
/// limiter was made. The limiter keeps one `AtomicU64` holding a window's number and the
/// permits admitted in it. A request reads the clock, then the word, and decides:
///
/// - the word is of its own window: it is admitted if `count + permits <= limit`;
/// - the word is of an older window: that window is over, so the request starts its own
///   window with a count of just its permits;
/// - the word is of a *newer* window: a caller that read the clock a moment later has
///   already started it, so the request counts into that newer window. Going back would
///   erase the newer window's count and let it admit its limit twice.
///
/// It writes its decision with one compare-exchange; if another caller changed the word
/// in between, it decides again on what that caller wrote. As the window and its count
/// change together, a window is started only once, and no request is admitted against a
/// count that another thread was about to reset.
///
/// # The seam burst
///
/// A fixed window limits each window, not every interval of the same length: `limit`
/// permits at the very end of one window and `limit` more at the start of the next are
/// all admitted, twice the limit within a moment. Where every interval of length
/// `window` must hold at most `limit`, use [`SlidingLog`](crate::SlidingLog), which is
/// exact; [`SlidingWindow`](crate::SlidingWindow) narrows the burst with slots.
///
/// ```
/// use std::time::Duration;
/// use token_bucket::FixedWindow;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = FixedWindow::new(10, Duration::from_secs(1))?;
/// tokio::time::advance(Duration::from_secs(1) - Duration::from_nanos(1)).await;
/// limiter.try_acquire(10)?; // the last nanosecond of window 0
/// tokio::time::advance(Duration::from_nanos(1)).await;
/// limiter.try_acquire(10)?; // the first nanosecond of window 1: 20 within 1 ns
/// # Ok(())
/// # }
/// ```
///
/// # Waiting
///
/// Waiters stand in one line per limiter. A request must fit whole in one window, so
/// the head of the line sleeps until the next window (or until a
/// [`refund`](FixedWindow::refund) makes room) and those behind it wait their turn, even
/// ones small enough to fit now: nobody is starved. `try_acquire` never jumps the line:
/// while anyone waits it refuses, with a `retry_after` that places every waiter ahead in
/// the first window where it fits whole, as the line will.
///
/// A waiter is counted in the window it was due in, even when tokio's timer, which
/// ticks every millisecond, wakes it in a later one: a late wakeup does not push back
/// the waiters behind it, and the limiter keeps its rate at any window length. With
/// windows shorter than a millisecond, waiters go on in bursts at each tick, up to
/// `limit` for each window since the last one, each window still counting at most
/// `limit`.
///
/// # After a long idle time
///
/// The count takes just enough bits for the limit (`b` bits, the bit length of `limit`,
/// at most 32); the top bit marks a [composite](crate::all) deciding, and the window's
/// number keeps its low `63 - b` bits. Callers compare window numbers modulo
/// 2<sup>63−b</sup>: a stored window up to 2<sup>62−b</sup> windows ahead is taken for a
/// newer one, any other for an older one. So a limiter untouched for more than
/// 2<sup>62−b</sup> windows may take its last window for a newer one, or (after an exact
/// multiple of 2<sup>63−b</sup> windows) for the current one. It then refuses more than
/// it should until that window would end; it never admits more than `limit`.
///
/// This needs a window shorter than 2<sup>b+2</sup> nanoseconds: with a longer one,
/// 2<sup>62−b</sup> windows outlast the clock's range (`u64` nanoseconds, 584 years). It
/// cannot happen with windows of 1 ms or more and a limit up to 131 071, nor with windows
/// of 17.2 s or more and any limit. At worst (a limit of `u32::MAX` per nanosecond) the
/// idle time that is still seen exactly is 2<sup>30</sup> ns, 1.07 s.
///
/// # Runtime
///
/// Everything but a waiting `acquire` works from any thread, with or without a runtime.
/// An `acquire` that must wait needs a tokio runtime with time enabled: outside any
/// runtime it fails with [`AcquireError::NoRuntime`], and in a runtime built without
/// time it panics on its first poll, naming `enable_time` (see
/// [`acquire`](FixedWindow::acquire)).
#[derive(Clone)]
pub struct FixedWindow {
    shared: Arc<Shared>,
    /// What this handle reports through (see `observe/`): on the handle, beside the
    /// shared state, so that naming never depends on who else holds that state.
    observer: Observer,
}

/// What every clone of a [`FixedWindow`] points to.
struct Shared {
    limit: u64,
    window: Duration,
    /// `window` in nanoseconds, saturating like the clock, which ends there too.
    window_nanos: u64,
    layout: Layout,
    /// A window's number (its low bits) and the permits admitted in it, packed by
    /// `layout`: one word, so that one compare-exchange both moves to a new window and
    /// counts in it.
    state: AtomicU64,
    clock: Clock,
    turnstile: Turnstile,
    /// Orders the limiter among a composite's members.
    identity: Identity,
}

impl FixedWindow {
    /// A limiter admitting at most `limit` permits per `window`, the first window
    /// starting now.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroLimit`] when `limit` is zero; [`ConfigError::ZeroWindow`] when
    /// `window` is zero; [`ConfigError::LimitTooLarge`] when `limit` is above
    /// `u32::MAX` (the count lives in 32 bits).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{ConfigError, FixedWindow};
    ///
    /// let limiter = FixedWindow::new(60, Duration::from_secs(60))?;
    /// assert_eq!(limiter.limit(), 60);
    ///
    /// assert_eq!(
    ///     FixedWindow::new(0, Duration::from_secs(1)).unwrap_err(),
    ///     ConfigError::ZeroLimit
    /// );
    /// assert_eq!(FixedWindow::new(5, Duration::ZERO).unwrap_err(), ConfigError::ZeroWindow);
    /// assert_eq!(
    ///     FixedWindow::new(1 << 32, Duration::from_secs(1)).unwrap_err(),
    ///     ConfigError::LimitTooLarge { limit: 1 << 32, max: u32::MAX as u64 }
    /// );
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn new(limit: u64, window: Duration) -> Result<FixedWindow, ConfigError> {
        if limit == 0 {
            return Err(ConfigError::ZeroLimit);
        }
        if window.is_zero() {
            return Err(ConfigError::ZeroWindow);
        }
        if limit > MAX_LIMIT {
            return Err(ConfigError::LimitTooLarge {
                limit,
                max: MAX_LIMIT,
            });
        }
        Ok(FixedWindow::with_clock(limit, window, Clock::start()))
    }

    /// Acquires `permits` in the current window if they fit and nobody waits; never
    /// waits. Lock-free when nobody waits. Zero permits always succeed. Needs no runtime,
    /// and no import: the [`Limiter`] trait offers the same call for code that takes any
    /// limiter.
    ///
    /// # Errors
    ///
    /// [`TryAcquireError::Limited`] when the window has no room for `permits`, or others
    /// wait; its `retry_after` is exact to the nanosecond: the time until the window in
    /// which the request fits whole, after every waiter ahead of it.
    /// [`TryAcquireError::ExceedsLimit`] when `permits` is above the limit, naming both.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{FixedWindow, TryAcquireError};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = FixedWindow::new(5, Duration::from_secs(1))?;
    /// limiter.try_acquire(3)?;
    /// tokio::time::advance(Duration::from_millis(250)).await;
    /// // 3 + 3 > 5: it fits only in the next window, 750 ms from now.
    /// assert_eq!(
    ///     limiter.try_acquire(3),
    ///     Err(TryAcquireError::Limited { retry_after: Duration::from_millis(750) })
    /// );
    /// limiter.try_acquire(2)?; // 3 + 2 fits
    /// assert_eq!(
    ///     limiter.try_acquire(6),
    ///     Err(TryAcquireError::ExceedsLimit { requested: 6, limit: 5 })
    /// );
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire(&self, permits: u64) -> Result<(), TryAcquireError> {
        // Reading nothing more: the compiler drops the reading altogether.
        let result = self.shared.decide(permits, |_, _, _| ()).0;
        self.observer.decided(permits, &result);
        result
    }

    /// Acquires `permits`, waiting first in, first out behind the other waiters until a
    /// window has room for all of them. Zero permits succeed at once.
    ///
    /// # Errors
    ///
    /// [`AcquireError::ExceedsLimit`] at once when `permits` is above the limit, naming
    /// both; [`AcquireError::NoRuntime`] when it must wait outside a tokio runtime.
    ///
    /// # Panics
    ///
    /// On its first poll, when it must wait inside a tokio runtime built without time (no
    /// `enable_time` on the runtime's builder): nothing could ever wake it, so it says so
    /// at once rather than hang.
    ///
    /// # Cancel safety
    ///
    /// This method uses a queue to admit requests in the order they were made.
    /// Cancelling a call to `acquire` makes you lose your place in the queue, and
    /// acquires nothing; the waiter behind it moves up.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::FixedWindow;
    /// use tokio::time::Instant;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = FixedWindow::new(2, Duration::from_secs(1))?;
    /// let start = Instant::now();
    /// for _ in 0..5 {
    ///     limiter.acquire(1).await?;
    /// }
    /// // Two in window 0, two in window 1, the fifth at the start of window 2.
    /// assert_eq!(start.elapsed(), Duration::from_secs(2));
    /// # Ok(())
    /// # }
    /// ```
    // Not an `async fn`: the signature promises `Send`, as the sliding limiters' does.
    #[allow(clippy::manual_async_fn)]
    pub fn acquire(
        &self,
        permits: u64,
    ) -> impl Future<Output = Result<(), AcquireError>> + Send + '_ {
        async move {
            let shared = &self.shared;
            match screen(permits, shared.limit) {
                Ok(Screened::Nothing) => return Ok(()),
                Ok(Screened::Decide) => {}
                Err(too_large) => {
                    self.observer.refused(permits, None);
                    return Err(too_large.into());
                }
            }
            let attempt = |permits, as_of| shared.admit_head(permits, as_of);
            shared
                .turnstile
                .acquire(&shared.clock, permits, &self.observer, attempt)
                .await
        }
    }

    /// Gives `permits` back to the current window, for work that did not happen, and
    /// lets the head of the line try again at once. It takes them off the current
    /// window's count, whoever acquired them. A window that has ended is not reopened:
    /// permits counted in it are not given back (a waiter woken late by the timer was
    /// counted in the window it was due in, which may have ended), and the current
    /// window's count never goes below zero, so the limiter never admits more than
    /// `limit` per window because of a refund.
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::FixedWindow;
    ///
    /// let limiter = FixedWindow::new(10, Duration::from_secs(1))?;
    /// limiter.try_acquire(8)?;
    /// limiter.refund(3);
    /// assert_eq!(limiter.available(), 5);
    /// limiter.refund(100); // only the 5 still counted come back
    /// assert_eq!(limiter.available(), 10);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refund(&self, permits: u64) {
        let shared = &self.shared;
        let clock_window = shared.clock.now() / shared.window_nanos;
        let mut word = shared.state.load(Ordering::Acquire);
        loop {
            let Some(next) = shared.refunded(word, clock_window, permits) else {
                // Nothing counted in the current window: nothing to give back.
                return;
            };
            match shared.state.compare_exchange_weak(
                word,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(actual) => word = actual,
            }
        }
        shared.turnstile.refunded();
    }

    /// Permits left in the current window: what `try_acquire` could take now if nobody
    /// waited.
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::FixedWindow;
    ///
    /// let limiter = FixedWindow::new(10, Duration::from_secs(1))?;
    /// limiter.try_acquire(4)?;
    /// assert_eq!(limiter.available(), 6);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn available(&self) -> u64 {
        let shared = &self.shared;
        shared.limit - shared.current().1.count
    }

    /// A limiter with checked settings and an empty current window on `clock`.
    fn with_clock(limit: u64, window: Duration, clock: Clock) -> FixedWindow {
        let window_nanos = nanos(window);
        let layout = Layout::for_limit(limit);
        // Tagged with the current window, not window 0: a clock that started long ago
        // (`fresh`) must not leave a tag that reads as a newer window.
        let current = clock.now() / window_nanos;
        FixedWindow {
            shared: Arc::new(Shared {
                limit,
                window,
                window_nanos,
                layout,
                state: AtomicU64::new(layout.pack(current, 0)),
                clock,
                turnstile: Turnstile::default(),
                identity: Identity::new(),
            }),
            observer: Observer::default(),
        }
    }

    /// This limiter, reporting under `name` (see [`observe`](crate::observe)): the
    /// `limiter` label of its metrics (feature `metrics`, with the label `kind` =
    /// `fixed_window`) and the `limiter` field of its events (feature `tracing`). A
    /// limiter without a name reports nothing. Any string is a name, the empty one
    /// included. Names are labels, so keep them few: one per limit in the program, never
    /// one per user or key (a [`Keyed`](crate::Keyed)'s keys are never named, and
    /// [`fresh`](crate::KeyTemplate::fresh) limiters are unnamed).
    ///
    /// It reports the permits `try_acquire` admits and the requests it refuses (a
    /// `debug` event with the `retry_after`), the permits `acquire` admits on its first
    /// poll, and the requests that waited, with the time they waited (a histogram) and a
    /// `debug` span around each wait. A [composite](crate::all) admitting a request over
    /// it counts the permits as admitted here. [`record_gauges`] sets its gauges: the
    /// permits left in the current window, and the requests waiting in line. A window
    /// has no close: nothing is reported for one.
    ///
    /// The name lives on this handle and on the clones made from it afterwards; clones
    /// made before are not named, nor are the composites built over them. So name it as
    /// it is made. Its metrics are registered now, with the recorder installed now.
    /// Naming it again gives the handle the new name; the gauges of the old one are set
    /// too, by [`record_gauges`], while the limiter lives.
    ///
    /// [`record_gauges`]: crate::observe::record_gauges
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{FixedWindow, KeyTemplate};
    ///
    /// let login = FixedWindow::new(10, Duration::from_secs(60))?.named("login");
    /// assert_eq!(login.name(), Some("login"));
    /// assert_eq!(login.clone().name(), Some("login"));
    /// assert_eq!(login.fresh().name(), None);
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn named(mut self, name: impl Into<String>) -> FixedWindow {
        let name: String = name.into();
        self.observer = Observer::named(Kind::FixedWindow, &name);
        #[cfg(feature = "metrics")]
        {
            let watched = Arc::downgrade(&self.shared);
            self.observer.gauge(move || {
                let shared = watched.upgrade()?;
                let available = shared.limit - shared.current().1.count;
                Some((available, shared.turnstile.waiting()))
            });
        }
        self
    }

    /// The name it reports under, if [`named`](FixedWindow::named) gave this handle one.
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::FixedWindow;
    ///
    /// let limiter = FixedWindow::new(10, Duration::from_secs(1))?;
    /// assert_eq!(limiter.name(), None);
    /// assert_eq!(limiter.named("search").name(), Some("search"));
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn name(&self) -> Option<&str> {
        self.observer.name()
    }

    /// The most permits admitted per window.
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::FixedWindow;
    ///
    /// let limiter = FixedWindow::new(100, Duration::from_secs(1))?;
    /// assert_eq!(limiter.limit(), 100);
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn limit(&self) -> u64 {
        self.shared.limit
    }

    /// The length of a window.
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::FixedWindow;
    ///
    /// let limiter = FixedWindow::new(100, Duration::from_secs(1))?;
    /// assert_eq!(limiter.window(), Duration::from_secs(1));
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn window(&self) -> Duration {
        self.shared.window
    }

    /// Permits asked for by the [`acquire`](Self::acquire) calls waiting in line now
    /// (`u64::MAX` if they add up to more).
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::FixedWindow;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = FixedWindow::new(4, Duration::from_secs(1))?;
    /// limiter.try_acquire(4)?;
    /// let waiter = tokio::spawn({
    ///     let limiter = limiter.clone();
    ///     async move { limiter.acquire(3).await }
    /// });
    /// tokio::task::yield_now().await;
    /// assert_eq!(limiter.queued_permits(), 3);
    /// waiter.await??; // admitted in the next window
    /// assert_eq!(limiter.queued_permits(), 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn queued_permits(&self) -> u64 {
        self.shared.turnstile.queued_permits()
    }
}

impl Shared {
    /// Counts `permits` into the current window if they fit, ignoring the line. Returns
    /// the number (wrapping) of the window counted into, or how long until they fit.
    #[cfg(all(test, not(loom)))]
    fn admit(&self, permits: u64) -> Result<u64, Duration> {
        self.admit_reading(permits, |_, _| ()).0
    }

    /// Counts `permits` into the current window if they fit, ignoring the line: the
    /// number (wrapping) of the window counted into, or how long until they fit; and
    /// `read` of the word it decided on (the one its compare-and-swap wrote, when it
    /// counted) at the same reading of the clock, which `read` is given too.
    #[inline(always)]
    fn admit_reading<R>(
        &self,
        permits: u64,
        read: impl FnOnce(u64, u64) -> R,
    ) -> (Result<u64, Duration>, R) {
        let now = self.clock.now();
        let mut word = self.state.load(Ordering::Acquire);
        loop {
            let (next, window) = match self.count_into(word, now, permits) {
                Ok(counted) => counted,
                Err(retry_after) => return (Err(retry_after), read(word, now)),
            };
            match self
                .state
                .compare_exchange_weak(word, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return (Ok(window), read(next, now)),
                // Someone counted or moved on first: decide again on what they wrote.
                Err(actual) => word = actual,
            }
        }
    }

    /// `try_acquire(permits)`, and `read` of what it was decided on: the instant, the
    /// current window as the state word showed it (after counting, when it counted), and
    /// the line, held, when others wait. Zero permits and permits above the limit are
    /// decided without looking at the state: no reading then.
    #[inline(always)]
    fn decide<R>(
        &self,
        permits: u64,
        read: impl FnOnce(u64, Current, Option<&Line>) -> R,
    ) -> (Result<(), TryAcquireError>, Option<R>) {
        match screen(permits, self.limit) {
            Ok(Screened::Decide) => {}
            Ok(Screened::Nothing) => return (Ok(()), None),
            Err(too_large) => return (Err(too_large.into()), None),
        }
        if self.turnstile.is_waiting() {
            let line = self.turnstile.line();
            let (now, current) = self.current();
            let retry_after = self.retry_after(now, current, permits, Some(&line));
            let reading = read(now, current, Some(&line));
            return (Err(TryAcquireError::Limited { retry_after }), Some(reading));
        }
        let (admitted, reading) = self.admit_reading(permits, |word, now| {
            read(now, self.layout.read(word, now / self.window_nanos), None)
        });
        let result = admitted
            .map(drop)
            .map_err(|retry_after| TryAcquireError::Limited { retry_after });
        (result, Some(reading))
    }

    /// The [`Quota`] at `now` of the `current` window, behind the waiters in `line`,
    /// held by the caller, if given: the permits left in the window, and the time until
    /// the last window anything is counted in ends, the waiters placed in the windows the
    /// line will admit them in (zero when nothing is counted and nobody waits).
    fn quota_at(&self, now: u64, current: Current, line: Option<&Line>) -> Quota {
        let windows = self.packed(current, line, None);
        let full_after = if windows.count == 0 {
            Duration::ZERO
        } else {
            let end = self.window_start(current, windows.later + 1);
            duration_from_nanos(end.saturating_sub(u128::from(now)))
        };
        Quota {
            remaining: self.limit - current.count,
            full_after,
        }
    }

    /// The [`Quota`] now, behind the line if anybody waits.
    fn quota(&self) -> Quota {
        if self.turnstile.is_waiting() {
            let line = self.turnstile.line();
            let (now, current) = self.current();
            return self.quota_at(now, current, Some(&line));
        }
        let (now, current) = self.current();
        self.quota_at(now, current, None)
    }

    /// `word` with `permits` taken off the count of the window of `clock_window` (never
    /// below zero); `None` when there is nothing to give back.
    fn refunded(&self, word: u64, clock_window: u64, permits: u64) -> Option<u64> {
        let current = self.layout.read(word, clock_window);
        if current.count == 0 || permits == 0 {
            return None;
        }
        let count = current.count - permits.min(current.count);
        // A composite deciding meanwhile keeps the word seized; it only gains room.
        Some(self.layout.pack(current.window(), count) | (word & SEIZED))
    }

    /// What counting `permits` at `now` makes of the state `word`, ignoring the line:
    /// the next word and the number (wrapping) of the window counted into, or how long
    /// until they fit.
    #[inline]
    fn count_into(&self, word: u64, now: u64, permits: u64) -> Result<(u64, u64), Duration> {
        let current = self.layout.read(word, now / self.window_nanos);
        let count = current.count + permits;
        if count > self.limit {
            return Err(self.retry_after(now, current, permits, None));
        }
        if word & SEIZED != 0 {
            // A composite is deciding over this window (for nanoseconds): it is ahead, as
            // a waiter in line would be.
            return Err(Duration::ZERO);
        }
        Ok((self.layout.pack(current.window(), count), current.window()))
    }

    /// What the head of the line tries: counts `permits` into the first window where
    /// they fit, from the one holding `as_of` (or now, if earlier) on, if that window has
    /// begun, and returns the instant admitted at: `as_of`, or the window's start if
    /// later. Else returns the window's start, as when to try again.
    ///
    /// Counting into the window the head was due in, not the one the timer woke it in,
    /// keeps a late wakeup (tokio's timer has 1 ms granularity) from pushing back every
    /// admission after it: a limiter with windows shorter than the timer's tick still
    /// admits `limit` per window, in bursts at each tick. A window already started by a
    /// later caller is counted into, as `admit` does, so a head never winds the word back.
    fn admit_head(&self, permits: u64, as_of: u64) -> Result<u64, u64> {
        let now = self.clock.now();
        let from = as_of.min(now);
        let from_window = from / self.window_nanos;
        let mut word = self.state.load(Ordering::Acquire);
        loop {
            let current = self.layout.read(word, from_window);
            let fits = current.count + permits <= self.limit;
            let (window, count) = if fits {
                (current.window(), current.count + permits)
            } else {
                (current.window().wrapping_add(1), permits)
            };
            // Its number in full, and its start with the exact window length.
            let number = u128::from(from_window) + u128::from(current.ahead) + u128::from(!fits);
            let start = number.saturating_mul(self.window.as_nanos());
            if !fits && start > u128::from(now) {
                return Err(u64::try_from(start).unwrap_or(NEVER));
            }
            // A composite's try may have seized the word under the line's record: it
            // refuses while this head is in line, so the head counts, and leaves the bit
            // for the composite to clear as it lets go.
            let next = self.layout.pack(window, count) | (word & SEIZED);
            match self
                .state
                .compare_exchange_weak(word, next, Ordering::AcqRel, Ordering::Acquire)
            {
                // A window that began after `from` is entered at its start; one that a
                // caller with a later clock reading began, at the latest now.
                Ok(_) => {
                    return Ok(u64::try_from(start).map_or(now, |start| start.clamp(from, now)))
                }
                Err(actual) => word = actual,
            }
        }
    }

    /// The clock now and the current window as the state word shows it.
    fn current(&self) -> (u64, Current) {
        let now = self.clock.now();
        let word = self.state.load(Ordering::Acquire);
        (now, self.layout.read(word, now / self.window_nanos))
    }

    /// How long from `now` until the start of the window in which `permits` fit, after
    /// the `current` count and after every waiter in `line`, if given (held by the
    /// caller). Each request goes whole into the first window where it fits, in line
    /// order, as the line admits them.
    fn retry_after(
        &self,
        now: u64,
        current: Current,
        permits: u64,
        line: Option<&Line>,
    ) -> Duration {
        let windows = self.packed(current, line, Some(permits));
        let start = self.window_start(current, windows.later);
        duration_from_nanos(start.saturating_sub(u128::from(now)))
    }

    /// The `current` count with every waiter in `line`, if given, and then `permits`, if
    /// given, placed whole in the first window where each fits, in order.
    fn packed(&self, current: Current, line: Option<&Line>, permits: Option<u64>) -> Packing {
        let mut windows = Packing {
            limit: self.limit,
            count: current.count,
            later: 0,
        };
        let waiting = line.into_iter().flat_map(Line::permits);
        waiting
            .chain(permits)
            .for_each(|permits| windows.place(permits));
        windows
    }

    /// The instant, in nanoseconds, the window `later` windows after the `current` one
    /// starts: with the exact length, not the saturated one, so it is never short.
    fn window_start(&self, current: Current, later: u128) -> u128 {
        let window = u128::from(current.clock_window) + u128::from(current.ahead) + later;
        window.saturating_mul(self.window.as_nanos())
    }
}

impl Limiter for FixedWindow {
    fn try_acquire(&self, permits: u64) -> Result<(), TryAcquireError> {
        FixedWindow::try_acquire(self, permits)
    }

    fn acquire(&self, permits: u64) -> impl Future<Output = Result<(), AcquireError>> + Send + '_ {
        FixedWindow::acquire(self, permits)
    }

    /// Whether `try_acquire(1)` would be refused now: the window is full or others wait.
    /// Counts nothing.
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{FixedWindow, Limiter};
    ///
    /// let limiter = FixedWindow::new(1, Duration::from_secs(1))?;
    /// assert!(!limiter.is_limited());
    /// limiter.try_acquire(1)?;
    /// assert!(limiter.is_limited());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn is_limited(&self) -> bool {
        let shared = &self.shared;
        shared.turnstile.is_waiting() || shared.current().1.count >= shared.limit
    }

    fn refund(&self, permits: u64) {
        FixedWindow::refund(self, permits);
    }

    fn available(&self) -> u64 {
        FixedWindow::available(self)
    }

    /// `limit` per `window`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{FixedWindow, Limiter, Policy};
    ///
    /// let limiter = FixedWindow::new(100, Duration::from_secs(60))?;
    /// assert_eq!(limiter.policy(), Some(Policy { limit: 100, window: Duration::from_secs(60) }));
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    fn policy(&self) -> Option<Policy> {
        let shared = &self.shared;
        Some(Policy {
            limit: shared.limit,
            window: shared.window,
        })
    }

    /// The permits left in the current window, and the time until it ends if anything is
    /// counted in it (zero if nothing is). The same numbers as
    /// [`try_acquire_decision(0)`](Limiter::try_acquire_decision) shows; it counts
    /// nothing.
    ///
    /// While others wait in line, `remaining` is still what the window has left (which
    /// `try_acquire` does not take meanwhile), and `full_after` counts the line as
    /// served: it is the time until the end of the last window the waiters will be
    /// counted in, each placed whole in the first window where it fits, as the line
    /// admits them. A waiter that leaves early only makes it sooner.
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{FixedWindow, Limiter, Quota};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = FixedWindow::new(10, Duration::from_secs(1))?;
    /// assert_eq!(limiter.quota(), Some(Quota { remaining: 10, full_after: Duration::ZERO }));
    /// tokio::time::advance(Duration::from_millis(250)).await;
    /// limiter.try_acquire(3)?;
    /// // The window ends 750 ms from now, and the 3 with it.
    /// assert_eq!(
    ///     limiter.quota(),
    ///     Some(Quota { remaining: 7, full_after: Duration::from_millis(750) })
    /// );
    /// # Ok(())
    /// # }
    /// ```
    fn quota(&self) -> Option<Quota> {
        Some(self.shared.quota())
    }

    /// `try_acquire`, and the quota it leaves (see [`quota`](FixedWindow::quota)) in one
    /// step: with nobody waiting, from the word its one compare-and-swap wrote (or its
    /// refusal was decided on) at the same reading of the clock; behind waiters, under
    /// the line's lock its refusal is decided under.
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{FixedWindow, Limiter, Quota, TryAcquireError};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = FixedWindow::new(5, Duration::from_secs(1))?;
    /// tokio::time::advance(Duration::from_millis(400)).await;
    /// let decision = limiter.try_acquire_decision(5);
    /// assert_eq!(decision.result, Ok(()));
    /// let spent = Quota { remaining: 0, full_after: Duration::from_millis(600) };
    /// assert_eq!(decision.quota, Some(spent));
    /// let decision = limiter.try_acquire_decision(1);
    /// assert_eq!(
    ///     decision.result,
    ///     Err(TryAcquireError::Limited { retry_after: Duration::from_millis(600) })
    /// );
    /// assert_eq!(decision.quota, Some(spent));
    /// # Ok(())
    /// # }
    /// ```
    fn try_acquire_decision(&self, permits: u64) -> Decision {
        let shared = &self.shared;
        let (result, quota) = shared.decide(permits, |now, current, line| {
            shared.quota_at(now, current, line)
        });
        self.observer.decided(permits, &result);
        Decision {
            result,
            quota: Some(quota.unwrap_or_else(|| shared.quota())),
        }
    }
}

impl crate::limiter::KeyTemplate for FixedWindow {
    /// Whether nothing is counted in the current window and nobody waits: a
    /// [`fresh`](crate::KeyTemplate::fresh) limiter (which keeps the window boundaries)
    /// would behave the same from now on.
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{FixedWindow, KeyTemplate};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = FixedWindow::new(10, Duration::from_secs(1))?;
    /// assert!(limiter.is_idle());
    /// limiter.try_acquire(1)?;
    /// assert!(!limiter.is_idle());
    /// tokio::time::advance(Duration::from_secs(1)).await;
    /// assert!(limiter.is_idle()); // a new window, nothing counted in it
    /// # Ok(())
    /// # }
    /// ```
    fn is_idle(&self) -> bool {
        let shared = &self.shared;
        !shared.turnstile.is_waiting() && shared.current().1.count == 0
    }

    /// A new limiter with the same limit and window and the same window boundaries
    /// (windows still counted from this limiter's creation), with nothing counted.
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{FixedWindow, KeyTemplate, TryAcquireError};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let template = FixedWindow::new(3, Duration::from_secs(1))?;
    /// tokio::time::advance(Duration::from_millis(1_400)).await;
    /// let limiter = template.fresh();
    /// limiter.try_acquire(3)?;
    /// // Its windows start on the template's boundaries: the next one in 600 ms.
    /// assert_eq!(
    ///     limiter.try_acquire(1),
    ///     Err(TryAcquireError::Limited { retry_after: Duration::from_millis(600) })
    /// );
    /// assert_eq!(template.available(), 3);
    /// # Ok(())
    /// # }
    /// ```
    fn fresh(&self) -> FixedWindow {
        let shared = &self.shared;
        FixedWindow::with_clock(shared.limit, shared.window, shared.clock.clone())
    }

    /// Another handle: a clone, or one inside a future or adapter.
    fn is_shared(&self) -> bool {
        Arc::strong_count(&self.shared) > 1
    }
}

impl fmt::Debug for FixedWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FixedWindow")
            .field("limit", &self.shared.limit)
            .field("window", &self.shared.window)
            .field("available", &self.available())
            .field("queued_permits", &self.queued_permits())
            .finish()
    }
}
