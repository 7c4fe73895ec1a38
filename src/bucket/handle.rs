//! [`TokenBucket`], the public handle: what a user calls, each method over the mechanism
//! in `shared.rs`.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::bucket::counters::Tally;
use crate::bucket::future::{Closed, Take, TakeTimeout, Wait, WaitTimeout};
use crate::bucket::gcra::Units;
use crate::bucket::limits::{self, Limit};
use crate::bucket::queue::{Kind, Outcome, Request, WaiterId};
use crate::bucket::shared::{HeldBucket, Shared};
use crate::bucket::state::{Leaving, Settings, State};
use crate::bucket::stats::{LimitStats, Stats};
use crate::clock::{Clock, NEVER};
use crate::error::{ConfigError, TryTakeError};
use crate::observe::{Kind as ObservedKind, Observer};
use crate::quota::{Policy, Quota};
use crate::rate::Rate;
use crate::sync::Identity;

/// An async token bucket: a cheap-to-clone handle whose clones share one bucket.
///
/// The bucket holds up to `capacity` tokens and gains them continuously at its
/// [`Rate`]. [`try_take`](TokenBucket::try_take) takes tokens now or says when to come
/// back; [`take`](TokenBucket::take) waits its turn in a strict first-in, first-out queue;
/// [`wait`](TokenBucket::wait) waits until tokens are there without taking them. The
/// timeout forms give up at a deadline without blocking anybody queued behind them.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use token_bucket::{Rate, TokenBucket};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // 10 requests per second, in bursts of up to 5.
/// let bucket = TokenBucket::new(Rate::per_second(10), 5)?;
/// let start = tokio::time::Instant::now();
/// for _ in 0..15 {
///     bucket.take(1).await?;
/// }
/// // 5 from the full bucket at once, then one every 100 ms.
/// assert_eq!(start.elapsed(), Duration::from_secs(1));
/// # Ok(())
/// # }
/// ```
///
/// # Runtime
///
/// `try_take` and the other methods that do not return a future work from any thread,
/// with or without a runtime. Requests that have to wait are served by a background task,
/// started on the tokio runtime where a request first had to queue; that runtime needs
/// time enabled (as `#[tokio::main]` and `#[tokio::test]` give). A request with a timeout
/// also needs a runtime where it is polled. When neither is there, the request fails
/// with [`TakeError::NoRuntime`](crate::TakeError::NoRuntime) rather than panicking.
///
/// A request that must wait and is polled inside a runtime built without time (no
/// `enable_time` on its builder) **panics on that first poll**, with tokio's message
/// naming `enable_time`: tokio offers no way to ask a runtime whether it has a timer
/// short of making one, and without one the request could only hang. Requests served at
/// once need no timer.
///
/// If the runtime holding the task shuts down, the waiters still queued (from other
/// runtimes) keep their places and start a new task from their own runtime (a waiter
/// polled then in a runtime without time panics on that poll, for the same reason). A
/// runtime that stays alive but is no longer driven (a current-thread runtime outside
/// `block_on`) stalls its task until it is driven or dropped.
#[derive(Clone)]
pub struct TokenBucket {
    shared: Arc<Shared>,
}

impl TokenBucket {
    /// A bucket that gains tokens at `rate`, holds at most `capacity`, and starts full.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroRate`] when the rate's amount or period is zero;
    /// [`ConfigError::ZeroCapacity`] when `capacity` is zero; [`ConfigError::TooSlowToFill`] when a full
    /// bucket would take more than 584 years to fill, beyond what it counts exactly.
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// let bucket = TokenBucket::new(Rate::per_second(100), 10)?;
    /// assert_eq!(bucket.available(), 10);
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn new(rate: Rate, capacity: u64) -> Result<TokenBucket, ConfigError> {
        TokenBucket::from_settings(Settings::one_limit(rate, capacity, None))
    }

    /// The name it reports under, if [`Builder::name`](crate::Builder::name) gave it one
    /// (see [`observe`](crate::observe)).
    ///
    /// ```
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// let bucket = TokenBucket::builder().rate(Rate::per_second(1)).name("api").build()?;
    /// assert_eq!(bucket.clone().name(), Some("api"));
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn name(&self) -> Option<&str> {
        self.shared.observer.name()
    }

    pub(crate) fn from_settings(settings: Settings) -> Result<TokenBucket, ConfigError> {
        TokenBucket::named(settings, None)
    }

    /// A bucket of `settings` reporting under `name`, if given (see `observe/`).
    pub(crate) fn named(
        settings: Settings,
        name: Option<&str>,
    ) -> Result<TokenBucket, ConfigError> {
        // Checked before it is named, so that a refused bucket registers no metric.
        settings.validate()?;
        let observer = name.map_or_else(Observer::default, |name| {
            Observer::named(ObservedKind::TokenBucket, name)
        });
        let bucket = TokenBucket {
            shared: Arc::new(Shared::new(&settings, Clock::start(), None, observer)),
        };
        #[cfg(feature = "metrics")]
        {
            let watched = Arc::downgrade(&bucket.shared);
            bucket.shared.observer.gauge(move || {
                let bucket = TokenBucket {
                    shared: watched.upgrade()?,
                };
                let stats = bucket.stats();
                Some((stats.available, stats.queued))
            });
        }
        Ok(bucket)
    }

    /// A bucket of checked `settings` on `clock`, whose one limit is empty at the instant
    /// given in the units given (as a compact key of `Keyed` hands its state over), else
    /// starts as `settings` say.
    pub(crate) fn resumed(
        settings: &Settings,
        clock: Clock,
        resumed: Option<(Units, u128)>,
    ) -> TokenBucket {
        TokenBucket {
            shared: Arc::new(Shared::new(settings, clock, resumed, Observer::default())),
        }
    }

    /// Runs `read` on the one limit and the instant it is capped at, at `now` or later
    /// (a racing caller's), if the bucket is idle enough for the fast path to hold its
    /// state (one limit, open, nobody waiting): what a compact key of `Keyed` folds back
    /// from.
    pub(crate) fn read_idle_limit<R>(
        &self,
        now: u64,
        read: impl FnOnce(&Limit, u64) -> R,
    ) -> Option<R> {
        self.shared.update(now, |state, now| {
            let now = state.serve(now);
            state.idle_limit().map(|limit| read(limit, now))
        })
    }

    /// Takes `tokens` now if nobody is queued and they are there; never waits.
    ///
    /// It never jumps the queue: while others wait, it fails even if tokens are there.
    /// Taking zero tokens always succeeds on an open bucket. Needs no runtime.
    ///
    /// # Errors
    ///
    /// - [`TryTakeError::Insufficient`] with `retry_after`, how long until the same request
    ///   could succeed counting every waiter queued ahead; never shorter than the true wait.
    /// - [`TryTakeError::ExceedsCapacity`] when `tokens` is more than the capacity.
    /// - [`TryTakeError::Closed`] when the bucket is closed.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{Rate, TokenBucket, TryTakeError};
    ///
    /// let bucket = TokenBucket::new(Rate::per_second(1), 1)?;
    /// assert_eq!(bucket.try_take(1), Ok(()));
    /// let Err(TryTakeError::Insufficient { retry_after }) = bucket.try_take(1) else {
    ///     panic!("the bucket is empty");
    /// };
    /// assert!(retry_after <= Duration::from_secs(1));
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    #[inline]
    pub fn try_take(&self, tokens: u64) -> Result<(), TryTakeError> {
        self.try_take_reading(tokens, |_, _, _| (), |_, _| ()).0
    }

    /// [`try_take`](TokenBucket::try_take), and the [`Quota`] it leaves, read in the same
    /// step: on the fast path from the word its compare-and-swap wrote (or its refusal
    /// was decided on) at the same instant, else in the same lock section.
    #[inline]
    pub(crate) fn try_take_quota(&self, tokens: u64) -> (Result<(), TryTakeError>, Quota) {
        self.try_take_reading(tokens, Units::quota, State::quota)
    }

    /// `try_take`, and what it was decided on, read in the same step: by `fast` on the
    /// fast path (see [`FastPath::try_take`](crate::bucket::fast::FastPath::try_take)),
    /// else by `locked` in the same lock section.
    #[inline(always)]
    fn try_take_reading<R>(
        &self,
        tokens: u64,
        fast: impl FnOnce(&Units, u128, u128) -> R,
        locked: impl FnOnce(&mut State, u64) -> R,
    ) -> (Result<(), TryTakeError>, R) {
        let now = self.shared.clock.now();
        let decided = match self.shared.fast.try_take(tokens, now, fast) {
            Some(decided) => decided,
            None => self.try_take_locked(tokens, now, locked),
        };
        self.report(tokens, decided.0);
        decided
    }

    /// Reports a `try_take` of `tokens` decided `result` (see `observe/`): nothing at all
    /// for an unnamed bucket but the test of its observer.
    #[inline]
    fn report(&self, tokens: u64, result: Result<(), TryTakeError>) {
        if self.shared.observer.is_named() {
            self.report_named(tokens, result);
        }
    }

    /// [`report`](TokenBucket::report) for a named bucket: out of line, so that the
    /// inlined fast path carries only the test of the observer.
    #[inline(never)]
    fn report_named(&self, tokens: u64, result: Result<(), TryTakeError>) {
        let observer = &self.shared.observer;
        match result {
            Ok(()) => observer.admitted(tokens),
            Err(TryTakeError::Insufficient { retry_after }) => {
                observer.refused(tokens, Some(retry_after));
            }
            Err(_) => observer.refused(tokens, None),
        }
    }

    /// `try_take` when the word sends it to the lock, and `read` in the same section. Kept
    /// out of line, so that the fast path inlined into callers stays small.
    #[inline(never)]
    fn try_take_locked<R>(
        &self,
        tokens: u64,
        now: u64,
        read: impl FnOnce(&mut State, u64) -> R,
    ) -> (Result<(), TryTakeError>, R) {
        self.shared.update(now, |state, now| {
            let result = state.try_take(tokens, now);
            (result, read(state, now))
        })
    }

    /// The bucket's [`Quota`] now, counting nothing.
    pub(crate) fn quota_now(&self) -> Quota {
        let now = self.shared.clock.now();
        if let Some(quota) = self.shared.fast.read(now, Units::quota) {
            return quota;
        }
        self.shared.update(now, State::quota)
    }

    /// The first limit's [`Policy`] (limit 0, the one
    /// [`Builder::rate`](crate::Builder::rate) and
    /// [`Builder::capacity`](crate::Builder::capacity) set).
    pub(crate) fn first_policy(&self) -> Policy {
        let now = self.shared.clock.now();
        if let Some((rate, capacity, _)) = self.shared.fast.settings_and_tokens(now) {
            return limits::policy(rate, capacity);
        }
        let state = self.shared.lock();
        let first = state.policies().next();
        first.expect("a bucket has a limit")
    }

    /// Each limit's budget as a [`Policy`], in order: limit 0 first (the one
    /// [`Builder::rate`](crate::Builder::rate) and
    /// [`Builder::capacity`](crate::Builder::capacity) set, whose policy is
    /// [`Limiter::policy`](crate::Limiter::policy)), then those
    /// [`Builder::limit`](crate::Builder::limit) added. A limit's policy is its capacity
    /// per the time its rate takes to fill it from empty, rounded up to the nanosecond.
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{Policy, Rate, TokenBucket};
    ///
    /// let bucket = TokenBucket::builder()
    ///     .rate(Rate::per_second(10))
    ///     .capacity(20)
    ///     .limit(Rate::per_hour(1_000), 1_000)
    ///     .build()?;
    /// assert_eq!(
    ///     bucket.policies(),
    ///     [
    ///         Policy { limit: 20, window: Duration::from_secs(2) },
    ///         Policy { limit: 1_000, window: Duration::from_secs(3_600) },
    ///     ]
    /// );
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn policies(&self) -> Vec<Policy> {
        if self.limit_count() == 1 {
            return vec![self.first_policy()];
        }
        self.shared.lock().policies().collect()
    }

    /// Takes `tokens`, waiting in first-in, first-out order until they are there.
    ///
    /// The place in the queue is taken on the first poll. With nobody queued and the tokens
    /// there, the future completes on that poll without allocating. A large request at
    /// the head is served before any smaller one behind it, so it is never starved.
    ///
    /// # Errors
    ///
    /// [`TakeError::ExceedsCapacity`](crate::TakeError::ExceedsCapacity) at once when
    /// `tokens` is more than the capacity (or later, if
    /// [`set_capacity`](TokenBucket::set_capacity) lowers it below `tokens`);
    /// [`TakeError::QueueFull`](crate::TakeError::QueueFull) at once when queueing would
    /// pass the [queue limit](crate::Builder::queue_limit);
    /// [`TakeError::Closed`](crate::TakeError::Closed) when the bucket is or gets closed;
    /// [`TakeError::NoRuntime`](crate::TakeError::NoRuntime) when it must wait outside a
    /// tokio runtime.
    ///
    /// # Panics
    ///
    /// On its first poll, when it must wait inside a tokio runtime built without time
    /// (no `enable_time` on the runtime's builder), with tokio's message "A Tokio 1.x
    /// context was found, but timers are disabled. Call \`enable_time\` on the runtime
    /// builder to enable timers.": nothing could ever wake it, so it says so rather than
    /// hang. Requests served at once need no timer. See [Runtime](TokenBucket#runtime).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. Dropping the future gives up its place in the queue without blocking
    /// those behind it, and takes no tokens. If its tokens were granted but it had not
    /// seen them yet, the grant is given back as far as that keeps the promise that no
    /// interval ever takes more than `capacity + rate × t` (fractions of a token count):
    ///
    /// - **Exactly**, as if it had never been made, when it was the last grant made and
    ///   no grant dropped since gave anything back: what comes back is the least room the
    ///   bucket had below its capacity at any moment since the grant, at most `tokens`.
    ///   So all of it comes back when nothing was taken since, or when the room never
    ///   fell below it; nothing if the bucket filled up meanwhile.
    /// - **Conservatively** otherwise: the least room since the oldest grant still
    ///   unseen, at most `tokens`, which is never more than an exact undo would give.
    ///
    /// What comes back is spent from both, so grants dropped together never give back
    /// more between them than the room allowed. The rule keeps a few numbers, not a
    /// record of each grant: a grant dropped after any number of later ones still comes
    /// back as far as the room allows.
    ///
    /// A granted future left unpolled, even for good (`mem::forget`, or stored and never
    /// polled again), keeps no take off the lock-free path: once nobody waits, takes are
    /// served there again, and while a grant is unseen each notes the room it found (one
    /// more atomic operation a take) so that the rule above still holds.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::builder().rate(Rate::per_second(4)).capacity(4).initial(0).build()?;
    /// let start = tokio::time::Instant::now();
    /// bucket.take(2).await?;
    /// assert_eq!(start.elapsed(), Duration::from_millis(500));
    /// # Ok(())
    /// # }
    /// ```
    #[inline]
    pub fn take(&self, tokens: u64) -> Take {
        Take::new(self.request(Kind::Take, tokens, NEVER))
    }

    /// Like [`take`](TokenBucket::take), but gives up after `timeout`.
    ///
    /// The deadline is fixed when this method is called. A request whose tokens could not
    /// accrue by the deadline even if every waiter ahead gave up fails at once.
    /// `Duration::MAX` means no timeout.
    ///
    /// # Errors
    ///
    /// Those of `take`, and [`TakeError::Timeout`](crate::TakeError::Timeout).
    ///
    /// # Panics
    ///
    /// As [`take`](TokenBucket::take): on its first poll, when it must wait in a
    /// tokio runtime without time enabled.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as `take`. A timed-out request leaves the queue at its deadline: it
    /// never delays those behind it past that instant, and takes no tokens.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{Rate, TakeError, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::new(Rate::per_second(1), 5)?;
    /// bucket.take(5).await?;
    /// assert_eq!(bucket.take_timeout(1, Duration::from_secs(2)).await, Ok(()));
    /// assert_eq!(bucket.take_timeout(5, Duration::from_secs(2)).await, Err(TakeError::Timeout));
    /// # Ok(())
    /// # }
    /// ```
    pub fn take_timeout(&self, tokens: u64, timeout: Duration) -> TakeTimeout {
        let deadline = self.shared.clock.deadline(timeout);
        TakeTimeout::new(self.request(Kind::Take, tokens, deadline))
    }

    /// Waits, in first-in, first-out order, until `tokens` are in the bucket, and takes
    /// none of them: for work that should start only when it could be paid for.
    ///
    /// # Errors
    ///
    /// As [`take`](TokenBucket::take).
    ///
    /// # Panics
    ///
    /// As [`take`](TokenBucket::take): on its first poll, when it must wait in a
    /// tokio runtime without time enabled.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. Dropping the future gives up its place without blocking anybody.
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
    /// bucket.take(10).await?;
    /// bucket.wait(3).await?;
    /// assert_eq!(bucket.available(), 3);
    /// # Ok(())
    /// # }
    /// ```
    pub fn wait(&self, tokens: u64) -> Wait {
        Wait::new(self.request(Kind::Wait, tokens, NEVER))
    }

    /// Like [`wait`](TokenBucket::wait), but gives up after `timeout`, as
    /// [`take_timeout`](TokenBucket::take_timeout) does.
    ///
    /// # Errors
    ///
    /// Those of `wait`, and [`TakeError::Timeout`](crate::TakeError::Timeout).
    ///
    /// # Panics
    ///
    /// As [`take`](TokenBucket::take): on its first poll, when it must wait in a
    /// tokio runtime without time enabled.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as `wait`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{Rate, TakeError, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::new(Rate::per_second(1), 10)?;
    /// bucket.take(10).await?;
    /// assert_eq!(bucket.wait_timeout(3, Duration::from_secs(1)).await, Err(TakeError::Timeout));
    /// assert_eq!(bucket.wait_timeout(3, Duration::from_secs(3)).await, Ok(()));
    /// # Ok(())
    /// # }
    /// ```
    pub fn wait_timeout(&self, tokens: u64, timeout: Duration) -> WaitTimeout {
        let deadline = self.shared.clock.deadline(timeout);
        WaitTimeout::new(self.request(Kind::Wait, tokens, deadline))
    }

    /// Whole tokens in the bucket now. While others are queued these are already promised
    /// to the head of the queue.
    ///
    /// ```
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// let bucket = TokenBucket::new(Rate::per_second(1), 3)?;
    /// bucket.try_take(1)?;
    /// assert_eq!(bucket.available(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn available(&self) -> u64 {
        let now = self.shared.clock.now();
        if let Some(tokens) = self.shared.fast.available(now) {
            return tokens;
        }
        self.shared.update(now, State::available)
    }

    /// The most tokens the bucket holds: the largest request that can ever be served. With
    /// [several limits](crate::Builder::limit), the smallest of their capacities (each is
    /// in [`limit_stats`](TokenBucket::limit_stats)).
    ///
    /// ```
    /// # use token_bucket::{Rate, TokenBucket};
    /// let bucket = TokenBucket::new(Rate::per_second(1), 3)?;
    /// assert_eq!(bucket.capacity(), 3);
    /// let layered = TokenBucket::builder()
    ///     .rate(Rate::per_second(10))
    ///     .capacity(20)
    ///     .limit(Rate::per_hour(1_000), 5)
    ///     .build()?;
    /// assert_eq!(layered.capacity(), 5);
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn capacity(&self) -> u64 {
        self.shared.capacity.load(Ordering::Acquire)
    }

    /// The most tokens that may be queued, if the bucket was built with a
    /// [`queue_limit`](crate::Builder::queue_limit); `None` when the queue is unlimited.
    ///
    /// ```
    /// # use token_bucket::{Rate, TokenBucket};
    /// let bucket = TokenBucket::builder().rate(Rate::per_second(1)).queue_limit(50).build()?;
    /// assert_eq!(bucket.queue_limit(), Some(50));
    /// assert_eq!(TokenBucket::new(Rate::per_second(1), 1)?.queue_limit(), None);
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn queue_limit(&self) -> Option<u64> {
        self.shared.queue_limit
    }

    /// The rate tokens are gained at. With [several limits](crate::Builder::limit), the
    /// first one's (limit 0, the one [`Builder::rate`](crate::Builder::rate) set).
    ///
    /// ```
    /// # use token_bucket::{Rate, TokenBucket};
    /// let bucket = TokenBucket::new(Rate::per_second(7), 3)?;
    /// assert_eq!(bucket.rate(), Rate::per_second(7));
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn rate(&self) -> Rate {
        let now = self.shared.clock.now();
        if let Some((rate, _, _)) = self.shared.fast.settings_and_tokens(now) {
            return rate;
        }
        self.shared.lock().rate()
    }

    /// Waiters in the queue now (those that gave up are not counted).
    ///
    /// ```
    /// # use token_bucket::{Rate, TokenBucket};
    /// let bucket = TokenBucket::new(Rate::per_second(7), 3)?;
    /// assert_eq!(bucket.queued(), 0);
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn queued(&self) -> usize {
        let now = self.shared.clock.now();
        if self.shared.fast.available(now).is_some() {
            // The word is open: nobody waits.
            return 0;
        }
        self.shared.update(now, |state, now| {
            state.serve(now);
            state.queued()
        })
    }

    /// Changes the rate from now on; tokens accrued so far stay. Waiters are rescheduled at
    /// once. With [several limits](crate::Builder::limit), it changes the first one's
    /// (limit 0), as [`set_limit_rate`](TokenBucket::set_limit_rate)`(0, rate)` does.
    ///
    /// What the bucket holds is re-counted in the new rate's units, rounded down: it can
    /// lose less than one unit of the new rate, `d / period` of a token, where `d` is the
    /// greatest common divisor of the new amount and period in nanoseconds (a millionth
    /// of a token for `Rate::per_second(1_000)`). It never gains.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroRate`] for a zero amount or period, and [`ConfigError::TooSlowToFill`] when the
    /// capacity would take more than 584 years to fill at `rate`; the rate is then
    /// unchanged.
    ///
    /// ```
    /// # use token_bucket::{Rate, TokenBucket};
    /// let bucket = TokenBucket::new(Rate::per_second(1), 3)?;
    /// bucket.set_rate(Rate::per_second(100))?;
    /// assert_eq!(bucket.rate(), Rate::per_second(100));
    /// assert!(bucket.set_rate(Rate::per_second(0)).is_err());
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn set_rate(&self, rate: Rate) -> Result<(), ConfigError> {
        self.set_limit_rate(0, rate)
    }

    /// Changes limit `limit`'s rate from now on (limits are numbered as
    /// [`Builder::limit`](crate::Builder::limit) says: 0 is the first). Tokens it accrued
    /// so far stay, rounded down to a unit of the new rate as
    /// [`set_rate`](TokenBucket::set_rate) says; waiters are rescheduled at once.
    ///
    /// # Errors
    ///
    /// [`ConfigError::NoSuchLimit`] when the bucket has no limit `limit`, then
    /// [`ConfigError::ZeroRate`] for a zero amount or period, then [`ConfigError::TooSlowToFill`] when
    /// the limit's capacity would take more than 584 years to fill at `rate`; nothing
    /// changes then.
    ///
    /// ```
    /// # use token_bucket::{ConfigError, Rate, TokenBucket};
    /// let bucket = TokenBucket::builder()
    ///     .rate(Rate::per_second(10))
    ///     .limit(Rate::per_hour(1_000), 1_000)
    ///     .build()?;
    /// bucket.set_limit_rate(1, Rate::per_hour(500))?;
    /// assert_eq!(bucket.limit_stats()[1].rate, Rate::per_hour(500));
    /// assert_eq!(bucket.rate(), Rate::per_second(10));
    /// assert_eq!(
    ///     bucket.set_limit_rate(2, Rate::per_hour(500)),
    ///     Err(ConfigError::NoSuchLimit { limit: 2, limits: 2 })
    /// );
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn set_limit_rate(&self, limit: usize, rate: Rate) -> Result<(), ConfigError> {
        self.set_limit(limit, Some(rate), None)
    }

    /// Changes the capacity. Tokens above a lowered capacity are dropped, and waiters
    /// asking for more than it fail with
    /// [`TakeError::ExceedsCapacity`](crate::TakeError::ExceedsCapacity). A raised capacity
    /// fills at the rate, not at once. With [several limits](crate::Builder::limit), it
    /// changes the first one's (limit 0), as
    /// [`set_limit_capacity`](TokenBucket::set_limit_capacity)`(0, capacity)` does.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroCapacity`] for zero, and [`ConfigError::TooSlowToFill`] when `capacity` would
    /// take more than 584 years to fill at the rate; the capacity is then unchanged.
    ///
    /// ```
    /// # use token_bucket::{Rate, TokenBucket};
    /// let bucket = TokenBucket::new(Rate::per_second(1), 10)?;
    /// bucket.set_capacity(4)?;
    /// assert_eq!(bucket.available(), 4);
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn set_capacity(&self, capacity: u64) -> Result<(), ConfigError> {
        self.set_limit_capacity(0, capacity)
    }

    /// Changes limit `limit`'s capacity (limits are numbered as
    /// [`Builder::limit`](crate::Builder::limit) says: 0 is the first). Tokens above a
    /// lowered capacity are dropped; a raised one fills at the limit's rate, not at once.
    /// Waiters asking for more than the smallest capacity then fail with
    /// [`TakeError::ExceedsCapacity`](crate::TakeError::ExceedsCapacity), naming it.
    ///
    /// # Errors
    ///
    /// [`ConfigError::NoSuchLimit`] when the bucket has no limit `limit`, then
    /// [`ConfigError::ZeroCapacity`] for zero, then [`ConfigError::TooSlowToFill`] when `capacity`
    /// would take more than 584 years to fill at the limit's rate; nothing changes then.
    ///
    /// ```
    /// # use token_bucket::{ConfigError, Rate, TokenBucket};
    /// let bucket = TokenBucket::builder()
    ///     .rate(Rate::per_second(10))
    ///     .limit(Rate::per_hour(1_000), 1_000)
    ///     .build()?;
    /// bucket.set_limit_capacity(1, 4)?;
    /// assert_eq!((bucket.capacity(), bucket.available()), (4, 4));
    /// assert_eq!(bucket.set_limit_capacity(1, 0), Err(ConfigError::ZeroCapacity));
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn set_limit_capacity(&self, limit: usize, capacity: u64) -> Result<(), ConfigError> {
        self.set_limit(limit, None, Some(capacity))
    }

    /// Limit `limit` takes `rate` and `capacity`, each `None` for as it is.
    fn set_limit(
        &self,
        limit: usize,
        rate: Option<Rate>,
        capacity: Option<u64>,
    ) -> Result<(), ConfigError> {
        self.update(|state, now| {
            let smallest = state.set_limit(limit, rate, capacity, now)?;
            // Stored under the lock, before the waiters it refused are woken, so that one
            // woken on another thread sizes its next request by the new capacity.
            self.shared.capacity.store(smallest, Ordering::Release);
            Ok(())
        })
    }

    /// Gives `tokens` back, for work that was paid for but did not happen. The bucket never
    /// holds more than its capacity; waiters the tokens complete are served at once. Does
    /// nothing on a closed bucket. [`Stats::refunded`] counts the tokens passed in, including
    /// any the capacity then drops.
    ///
    /// ```
    /// # use token_bucket::{Rate, TokenBucket};
    /// let bucket = TokenBucket::new(Rate::per_hour(1), 10)?;
    /// bucket.try_take(8)?;
    /// bucket.refund(5);
    /// assert_eq!(bucket.available(), 7);
    /// bucket.refund(100);
    /// assert_eq!(bucket.available(), 10);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refund(&self, tokens: u64) {
        self.update(|state, now| state.refund(tokens, now));
    }

    /// Closes the bucket for good: every queued and later `take` and `wait` returns
    /// [`TakeError::Closed`](crate::TakeError::Closed), and `try_take` returns
    /// [`TryTakeError::Closed`]. Waiters whose tokens had accrued before the close are
    /// granted, as they would have been had anyone looked. Closing twice does nothing more.
    ///
    /// ```
    /// # use token_bucket::{Rate, TokenBucket, TryTakeError};
    /// let bucket = TokenBucket::new(Rate::per_second(1), 10)?;
    /// bucket.close();
    /// assert!(bucket.is_closed());
    /// assert_eq!(bucket.try_take(1), Err(TryTakeError::Closed));
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn close(&self) {
        if !self.is_closed() {
            self.shared.observer.closed();
        }
        self.shared.close(|state, now| state.close(now));
    }

    /// A future that resolves once the bucket is [closed](TokenBucket::close), at once if
    /// it already is.
    ///
    /// For a task that must stop waiting on something else when the bucket closes: a
    /// throttled stream uses it to end while its inner stream has nothing to say. When it
    /// resolves, [`is_closed`](TokenBucket::is_closed) is true. It also resolves when every
    /// handle to the bucket is dropped, since nobody can then be served by it; it holds no
    /// handle itself, so it does not keep the bucket alive.
    ///
    /// The future is `Send`, `'static` and `Unpin`; making one is as cheap as cloning a
    /// handle, and waiting on it needs no runtime. Any number may wait at once; a close
    /// wakes them all.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. It takes nothing and holds no place in the bucket's queue: dropping it
    /// only stops listening, and a new one made later resolves as this one would have.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
    /// let closer = bucket.clone();
    /// tokio::spawn(async move {
    ///     tokio::time::sleep(Duration::from_secs(1)).await;
    ///     closer.close();
    /// });
    /// let start = tokio::time::Instant::now();
    /// bucket.closed().await;
    /// assert_eq!(start.elapsed(), Duration::from_secs(1));
    /// assert!(bucket.is_closed());
    /// // Already closed: it resolves at once.
    /// bucket.closed().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn closed(&self) -> Closed {
        Closed {
            signal: self.shared.close_signal(),
        }
    }

    /// Whether [`close`](TokenBucket::close) was called.
    ///
    /// ```
    /// # use token_bucket::{Rate, TokenBucket};
    /// let bucket = TokenBucket::new(Rate::per_second(1), 10)?;
    /// assert!(!bucket.is_closed());
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// A snapshot of the bucket's state and counters. With [several
    /// limits](crate::Builder::limit), `available` is the least any limit holds, `capacity`
    /// the smallest capacity (the largest request that can ever be served) and `rate` the
    /// first limit's; [`limit_stats`](TokenBucket::limit_stats) reports each limit.
    ///
    /// ```
    /// # use token_bucket::{Rate, TokenBucket};
    /// let bucket = TokenBucket::new(Rate::per_second(1), 10)?;
    /// bucket.try_take(4)?;
    /// let stats = bucket.stats();
    /// assert_eq!((stats.available, stats.taken, stats.queued), (6, 4, 0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> Stats {
        let now = self.shared.clock.now();
        if let Some((rate, capacity, available)) = self.shared.fast.settings_and_tokens(now) {
            let counted = self.shared.fast.counters.read(&Tally::default());
            return Stats {
                available,
                capacity,
                rate,
                queued: 0,
                queued_tokens: 0,
                taken: counted.taken,
                refunded: counted.refunded,
                denied: counted.denied,
                timed_out: counted.timed_out,
                closed: false,
            };
        }
        // Read under the lock, with the word seized: no grant made later is counted (a
        // fast-path grant made just before the seize may be counted an instant later).
        self.shared.update(now, |state, now| {
            state.stats(now, &self.shared.fast.counters)
        })
    }

    /// A snapshot of each limit, in order: limit 0 first (the one
    /// [`Builder::rate`](crate::Builder::rate) and
    /// [`Builder::capacity`](crate::Builder::capacity) set), then those
    /// [`Builder::limit`](crate::Builder::limit) added. One element for a bucket with one
    /// limit.
    ///
    /// ```
    /// # use token_bucket::{Rate, TokenBucket};
    /// let bucket = TokenBucket::builder()
    ///     .rate(Rate::per_second(10))
    ///     .capacity(10)
    ///     .limit(Rate::per_hour(1_000), 1_000)
    ///     .build()?;
    /// bucket.try_take(3)?;
    /// let limits = bucket.limit_stats();
    /// assert_eq!(limits.len(), 2);
    /// assert_eq!((limits[0].available, limits[1].available), (7, 997));
    /// assert_eq!(limits[1].rate, Rate::per_hour(1_000));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn limit_stats(&self) -> Vec<LimitStats> {
        let now = self.shared.clock.now();
        if let Some((rate, capacity, available)) = self.shared.fast.settings_and_tokens(now) {
            return vec![LimitStats {
                rate,
                capacity,
                available,
            }];
        }
        self.shared.update(now, State::limit_stats)
    }

    #[inline]
    fn request(&self, kind: Kind, tokens: u64, deadline: u64) -> (Arc<Shared>, Request) {
        let request = Request {
            kind,
            tokens,
            deadline,
        };
        (Arc::clone(&self.shared), request)
    }

    /// Runs `change` on the state at the current instant (see [`Shared::update`]).
    fn update<R>(&self, change: impl FnOnce(&mut State, u64) -> R) -> R {
        self.shared.update(self.shared.clock.now(), change)
    }

    /// A queued request leaves early; see [`State::leave`].
    pub(crate) fn leave(&self, id: WaiterId, request: Request, why: Leaving) -> Option<Outcome> {
        self.shared.leave(id, request, why)
    }

    /// Whether anything but this handle holds the bucket: another handle, a future (which
    /// holds the bucket, not the handle), an adapter, or the refill task as it serves.
    /// The refill task's own reference is weak, and the gauge of a named bucket's too.
    pub(crate) fn is_shared_elsewhere(&self) -> bool {
        Arc::strong_count(&self.shared) > 1
    }

    /// A new, full bucket with this one's limits and queue limit.
    pub(crate) fn fresh_full(&self) -> TokenBucket {
        let queue_limit = self.shared.queue_limit;
        let settings = if self.limit_count() == 1 {
            // Without the lock, which an idle bucket's word spares.
            Settings::one_limit(self.rate(), self.capacity(), queue_limit)
        } else {
            self.shared.lock().settings_when_full(queue_limit)
        };
        TokenBucket::from_settings(settings)
            .expect("a live bucket's settings passed validation when it was made")
    }

    /// The state, held for a composite until the guard is dropped.
    pub(crate) fn hold_lock(&self) -> HeldBucket<'_> {
        self.shared.hold()
    }

    /// What orders this bucket among a composite's members, the same for every clone.
    pub(crate) fn identity(&self) -> usize {
        self.shared.identity.of(&self.shared)
    }

    /// What orders this bucket among a composite's members, with its part in composites.
    pub(crate) fn identity_ref(&self) -> &Identity {
        &self.shared.identity
    }

    /// How many limits the bucket has.
    pub(crate) fn limit_count(&self) -> usize {
        self.shared.limits
    }

    /// The shared state, for the loom tests to drive the mechanism and the refill task's
    /// own code.
    #[cfg(all(test, loom))]
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    pub(crate) fn clock(&self) -> &Clock {
        &self.shared.clock
    }
}

impl fmt::Debug for TokenBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stats = self.stats();
        f.debug_struct("TokenBucket")
            .field("rate", &stats.rate)
            .field("capacity", &stats.capacity)
            .field("available", &stats.available)
            .field("queued", &stats.queued)
            .field("closed", &stats.closed)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::time::Duration;

    use super::TokenBucket;
    use crate::bucket::refill::Served;
    use crate::error::{TakeError, TryTakeError};
    use crate::rate::Rate;

    /// Whether `try_take` is decided on the fast path's word now, not under the lock.
    fn on_the_word(bucket: &TokenBucket) -> bool {
        let shared = &bucket.shared;
        shared.fast.available(shared.clock.now()).is_some()
    }

    fn empty_bucket(per_second: u64, capacity: u64) -> TokenBucket {
        let rate = Rate::per_second(per_second);
        TokenBucket::builder()
            .rate(rate)
            .capacity(capacity)
            .initial(0)
            .build()
            .unwrap()
    }

    /// The fast path comes back as soon as nobody waits: a grant left unread, even for
    /// good, keeps no take off the word, and the room its takers find still bounds what
    /// the grant gives back if it is dropped.
    #[tokio::test(start_paused = true)]
    async fn a_granted_take_left_unpolled_keeps_no_take_off_the_word() {
        for forget in [false, true] {
            let bucket = empty_bucket(1, 5);
            let mut take = tokio_test::task::spawn(bucket.take(1));
            tokio_test::assert_pending!(take.poll());
            assert!(!on_the_word(&bucket), "someone waits");
            // Granted at 1 s by the refill task; never polled again.
            tokio::time::sleep(Duration::from_secs(2)).await;
            assert_eq!(bucket.queued(), 0);
            assert!(on_the_word(&bucket), "nobody waits");
            assert_eq!(bucket.try_take(1), Ok(()));
            assert!(on_the_word(&bucket));
            if forget {
                std::mem::forget(take);
                assert_eq!(bucket.available(), 0);
            } else {
                // Dropped unseen: the last grant, and the room never fell below its token
                // (4 before the try_take): it comes back whole, as if never made.
                drop(take);
                assert_eq!(bucket.available(), 1);
            }
            assert!(on_the_word(&bucket), "after the drop too");
        }
    }

    /// A waiter whose deadline passed, or whose request the capacity no longer admits,
    /// told but never polled again: nobody waits, and the word serves.
    #[tokio::test(start_paused = true)]
    async fn an_outcome_decided_and_never_read_keeps_no_take_off_the_word() {
        // A timeout: a take of 1 behind one of 2, due at 3 s, with a deadline of 2.5 s.
        let bucket = empty_bucket(1, 5);
        let ahead = tokio::spawn(bucket.take(2));
        let mut late =
            tokio_test::task::spawn(bucket.take_timeout(1, Duration::from_millis(2_500)));
        tokio::task::yield_now().await;
        tokio_test::assert_pending!(late.poll());
        assert_eq!(bucket.queued(), 2);
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(ahead.await.unwrap(), Ok(()));
        assert_eq!((bucket.queued(), bucket.stats().timed_out), (0, 1));
        assert!(
            on_the_word(&bucket),
            "the timed-out waiter was never polled"
        );
        assert_eq!(bucket.try_take(1), Ok(()));
        drop(late);

        // A refusal: a take of 5 queued, then the capacity lowered to 2.
        let bucket = empty_bucket(1, 5);
        let mut large = tokio_test::task::spawn(bucket.take(5));
        tokio_test::assert_pending!(large.poll());
        bucket.set_capacity(2).unwrap();
        assert_eq!(bucket.queued(), 0);
        assert!(on_the_word(&bucket), "the refused waiter was never polled");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(bucket.try_take(1), Ok(()));
        assert!(on_the_word(&bucket));
        drop(large);
    }

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
        // A waiter, and one behind it through the `Limiter` trait, both queued before the
        // task is made to panic (at its next serve, when the first token is due).
        let waiter = tokio::spawn({
            let bucket = bucket.clone();
            async move { bucket.take(1).await }
        });
        let mut acquirer = Box::pin(crate::Limiter::acquire(&bucket, 1));
        assert!(futures::poll!(acquirer.as_mut()).is_pending());
        while bucket.queued() < 2 {
            tokio::task::yield_now().await;
        }
        bucket
            .shared
            .panic_in_refill
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let told = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiter is told, not left hanging")
            .unwrap();
        assert_eq!(told, Err(TakeError::RefillFailed));
        let told = tokio::time::timeout(Duration::from_secs(5), acquirer).await;
        assert_eq!(told, Ok(Err(crate::AcquireError::RefillFailed)));
        assert!(bucket.is_closed());
        // Nobody starts the task again: later requests are refused at once.
        assert_eq!(bucket.take(1).await, Err(TakeError::Closed));
        assert_eq!(bucket.try_take(1), Err(TryTakeError::Closed));
        tokio::task::yield_now().await;
        assert!(!bucket.shared.refill().is_running());
        assert_eq!(bucket.stats().queued, 0);
    }
}
