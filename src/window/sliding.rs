//! What [`SlidingLog`](crate::SlidingLog) and [`SlidingWindow`](crate::SlidingWindow)
//! share: the handle their clones point to, the [`Limiter`](crate::Limiter) plumbing
//! (the line of waiters, refusing requests above the limit, zero permits), and the
//! arithmetic of `retry_after`. Their public methods, the same for both, are written
//! once in `sliding_api.rs`.
//!
//! Both count *grants*, one per admitted permit, each of which counts against the limit
//! for a while after it is made, and admit `permits` when `limit - permits` grants or
//! fewer count now. The log keeps each grant's instant; the wheel keeps totals per slot.
//! They differ only in how long a grant counts and how they find the grants that stop
//! counting first: that is the [`Tally`] trait.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use crate::clock::{duration_from_nanos, Clock, Moment, NEVER};
use crate::error::{AcquireError, TryAcquireError};
use crate::observe::{Kind, Observer};
use crate::permits::{screen, Screened, TooLarge};
use crate::quota::{Decision, Policy, Quota};
use crate::sync::{Identity, Mutex, MutexGuard};
use crate::window::turnstile::{Line, Turnstile};
use crate::window::{Window, WindowHeld};

/// The grants of one sliding limiter, behind its lock.
///
/// Every instant is in nanoseconds on the limiter's [`Clock`]. Those that may lie past
/// what a `u64` holds (when a grant stops counting, for windows up to `Duration::MAX`,
/// laps ahead) are `u128`, saturating: never earlier than true.
///
/// Grants are recorded at instants that never go backwards, from the
/// [`floor`](Tally::floor) on, but possibly before now: the head of the line is recorded
/// as of the instant its request fitted, when the timer woke it later. So the questions
/// (`fits`, `counted`) take any instant from the floor on, and change nothing: a tally
/// moves on only when it records or forgets.
pub(crate) trait Tally: Send + 'static {
    /// The settings this kind of limiter has beyond its limit and window.
    type Extra: Copy + Send + Sync + 'static;

    /// An empty tally.
    fn new(settings: &Settings<Self::Extra>) -> Self;

    /// Adds the extra settings to a `Debug` output.
    fn describe(_extra: &Self::Extra, _output: &mut fmt::DebugStruct<'_, '_>) {}

    /// The earliest instant a grant may be recorded at: the latest instant anything was
    /// recorded at (or, for the wheel, the start of the slot it turned to), and never
    /// lower after a refund. Before it, the tally no longer knows every grant that
    /// counted (the log kept only the last `limit`, the wheel cleared the slots it
    /// passed), and the log's instants must stay in order.
    fn floor(&self) -> u64;

    /// Whether `permits` (from 1 to the limit) more grants fit at `at`, from the floor on.
    fn fits(&self, permits: u64, at: u64) -> bool;

    /// How many grants count at `at`, from the floor on.
    fn counted(&self, at: u64) -> u64;

    /// Counts `permits` grants at `at`, from the floor on; [`fits`](Tally::fits) said
    /// they fit.
    fn record(&mut self, permits: u64, at: u64);

    /// Forgets the newest `permits` grants, or all of them if fewer count at `now`
    /// (from the floor on).
    fn forget_newest(&mut self, permits: u64, now: u64);

    /// When the `rank`-th oldest (0 = the oldest) of the last `limit` grants stops
    /// counting, the missing ones (fewer grants were ever made) counting as long gone,
    /// at instant 0.
    fn released_at(&self, rank: u64) -> u128;

    /// When a grant made at `admitted_at` stops counting, then the grant made at that
    /// instant stops counting, and so on, `laps` times; `admitted_at` for zero laps.
    fn released_after_laps(&self, admitted_at: u128, laps: u64) -> u128;
}

/// A sliding limiter's fixed settings, checked by its constructor.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings<Extra> {
    /// The most grants that count at once.
    pub(crate) limit: u64,
    /// The intervals in which at most `limit` are admitted.
    pub(crate) window: Duration,
    pub(crate) extra: Extra,
}

/// A cheap-to-clone handle on a sliding limiter; what the public types wrap.
pub(crate) struct Sliding<T: Tally> {
    shared: Arc<Shared<T>>,
    /// What this handle reports through (see `observe/`): on the handle, beside the
    /// shared state, so that naming never depends on who else holds that state.
    observer: Observer,
}

struct Shared<T: Tally> {
    settings: Settings<T::Extra>,
    clock: Clock,
    /// Locked after the line, never before it (the lock order, in `sync/mod.rs`).
    /// Loom's lock under `--cfg loom`, as a composite takes it beside the others.
    tally: Mutex<T>,
    turnstile: Turnstile,
    /// Orders the limiter among a composite's members.
    identity: Identity,
}

impl<T: Tally> Clone for Sliding<T> {
    fn clone(&self) -> Self {
        Sliding {
            shared: Arc::clone(&self.shared),
            observer: self.observer.clone(),
        }
    }
}

impl<T: Tally> Sliding<T> {
    /// A limiter with empty windows, its clock starting now. The caller has checked the
    /// settings.
    pub(crate) fn new(settings: Settings<T::Extra>) -> Sliding<T> {
        Sliding::with_clock(settings, Clock::start())
    }

    /// A limiter with empty windows on `clock`.
    fn with_clock(settings: Settings<T::Extra>, clock: Clock) -> Sliding<T> {
        Sliding {
            shared: Arc::new(Shared {
                settings,
                clock,
                tally: Mutex::new(T::new(&settings)),
                turnstile: Turnstile::default(),
                identity: Identity::new(),
            }),
            observer: Observer::default(),
        }
    }

    /// This handle, reporting as a limiter of `kind` named `name`, its gauges read at
    /// each `record_gauges` while the limiter lives (see `observe/`).
    pub(crate) fn named(mut self, kind: Kind, name: &str) -> Sliding<T> {
        self.observer = Observer::named(kind, name);
        #[cfg(feature = "metrics")]
        {
            let watched = Arc::downgrade(&self.shared);
            self.observer.gauge(move || {
                let sliding = Sliding {
                    shared: watched.upgrade()?,
                    observer: Observer::default(),
                };
                Some((sliding.available(), sliding.shared.turnstile.waiting()))
            });
        }
        self
    }

    /// The name it reports under, if it has one.
    pub(crate) fn name(&self) -> Option<&str> {
        self.observer.name()
    }

    pub(crate) fn settings(&self) -> &Settings<T::Extra> {
        &self.shared.settings
    }

    /// Permits asked for by the waiters in line, `u64::MAX` if more.
    pub(crate) fn queued_permits(&self) -> u64 {
        self.shared.turnstile.queued_permits()
    }

    /// The tally, and now. Now is read under the lock so that the instants the tally
    /// sees never go backwards, whatever the threads do, and is never below the floor:
    /// a thread outside the runtime reads the real clock, which may lag a paused one.
    /// Nothing panics while holding the lock, so a poisoned one still holds a consistent
    /// tally.
    fn lock(&self) -> (MutexGuard<'_, T>, u64) {
        let tally = self
            .shared
            .tally
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = self.shared.clock.now().max(tally.floor());
        (tally, now)
    }

    /// What to do with a request before looking at the tally (see `permits`).
    fn screen(&self, permits: u64) -> Result<Screened, TooLarge> {
        screen(permits, self.shared.settings.limit)
    }

    /// Runs `section` on the tally at now, given the line, held, when anybody waits:
    /// the tally alone while nobody does; else the line, then the tally.
    fn locked<R>(&self, section: impl FnOnce(&mut T, Option<&Line>, u64) -> R) -> R {
        let mut line = None;
        let (mut tally, mut now) = self.lock();
        if self.shared.turnstile.is_waiting() {
            // A refusal walks the line, which is locked before the tally (the lock
            // order, in `sync/mod.rs`): let go, then take both in that order.
            drop(tally);
            line = Some(self.shared.turnstile.line());
            (tally, now) = self.lock();
        }
        section(&mut tally, line.as_deref(), now)
    }

    /// `try_acquire(permits)`, and `read` of the tally, the line (when anybody waits) and
    /// the instant it was decided at, in the same lock section, after recording the
    /// permits when it admitted them. Zero permits and permits above the limit are
    /// decided without looking at the tally: no reading then.
    #[inline(always)]
    fn decide<R>(
        &self,
        permits: u64,
        read: impl FnOnce(&T, Option<&Line>, u64) -> R,
    ) -> (Result<(), TryAcquireError>, Option<R>) {
        match self.screen(permits) {
            Err(too_large) => (Err(too_large.into()), None),
            Ok(Screened::Nothing) => (Ok(()), None),
            Ok(Screened::Decide) => self.locked(|tally, line, now| {
                let result = self.check(tally, line, permits, now);
                if result.is_ok() {
                    tally.record(permits, now);
                }
                (result, Some(read(tally, line, now)))
            }),
        }
    }

    /// The [`Quota`] of `tally` at `now` behind the waiters in `line`, held by the caller,
    /// if given: the permits left, and the time until the newest permit counted stops
    /// counting, the waiters' permits counted as admitted at the instants the line will
    /// admit them.
    fn quota_in(&self, tally: &T, line: Option<&Line>, now: u64) -> Quota {
        let limit = self.shared.settings.limit;
        let requests: Vec<u64> = line.map_or_else(Vec::new, |line| {
            line.permits().filter(|&permits| permits > 0).collect()
        });
        let last_released = if requests.is_empty() {
            // The newest of the last `limit` grants; long gone if none was made.
            tally.released_at(limit - 1)
        } else {
            // The line's last admission is its newest grant.
            tally.released_after_laps(ready_at(tally, limit, &requests, now), 1)
        };
        Quota {
            remaining: limit - tally.counted(now),
            full_after: duration_from_nanos(last_released.saturating_sub(u128::from(now))),
        }
    }

    /// The [`Quota`] now, behind the line if anybody waits.
    pub(crate) fn quota(&self) -> Quota {
        self.locked(|tally, line, now| self.quota_in(tally, line, now))
    }

    /// The limiter's budget: its limit per its window.
    pub(crate) fn policy(&self) -> Policy {
        let settings = &self.shared.settings;
        Policy {
            limit: settings.limit,
            window: settings.window,
        }
    }

    /// Whether `permits` (from 1 to the limit) fit `tally` at `now` behind the waiters in
    /// `line`, held by the caller (none given: nobody waits); else how long until they
    /// would, after those waiters.
    fn check(
        &self,
        tally: &T,
        line: Option<&Line>,
        permits: u64,
        now: u64,
    ) -> Result<(), TryAcquireError> {
        let mut requests: Vec<u64> = line.map_or_else(Vec::new, |line| line.permits().collect());
        if requests.is_empty() && tally.fits(permits, now) {
            return Ok(());
        }
        requests.push(permits);
        let ready_at = ready_at(tally, self.shared.settings.limit, &requests, now);
        Err(TryAcquireError::Limited {
            retry_after: duration_from_nanos(ready_at - u128::from(now)),
        })
    }

    /// What the head of the line tries: admits `permits` at the first instant they fit
    /// from `as_of` (or now, if earlier; never before the floor), if that instant is not
    /// in the future, and returns it; else returns it as when to try again.
    ///
    /// Recording the admission when it fitted, not when the timer woke the head, keeps a
    /// late wakeup (tokio's timer has 1 ms granularity) from pushing back every admission
    /// after it: a limiter with a window shorter than the timer's tick still admits
    /// `limit` per window, in bursts at each tick.
    fn admit_head(&self, permits: u64, as_of: u64) -> Result<u64, u64> {
        let (mut tally, now) = self.lock();
        let from = as_of.min(now).max(tally.floor());
        let ready_at = ready_at(&*tally, self.shared.settings.limit, &[permits], from);
        match u64::try_from(ready_at) {
            Ok(at) if at <= now => {
                debug_assert!(
                    tally.fits(permits, at),
                    "ready at {at}, yet it does not fit"
                );
                tally.record(permits, at);
                Ok(at)
            }
            // Past a `u64` of nanoseconds (584 years): never.
            _ => Err(u64::try_from(ready_at).unwrap_or(NEVER)),
        }
    }

    pub(crate) fn try_acquire(&self, permits: u64) -> Result<(), TryAcquireError> {
        let result = self.decide(permits, |_, _, _| ()).0;
        self.observer.decided(permits, &result);
        result
    }

    pub(crate) fn try_acquire_decision(&self, permits: u64) -> Decision {
        let (result, quota) =
            self.decide(permits, |tally, line, now| self.quota_in(tally, line, now));
        self.observer.decided(permits, &result);
        Decision {
            result,
            quota: Some(quota.unwrap_or_else(|| self.quota())),
        }
    }

    pub(crate) async fn acquire(&self, permits: u64) -> Result<(), AcquireError> {
        match self.screen(permits) {
            Err(too_large) => {
                self.observer.refused(permits, None);
                Err(too_large.into())
            }
            Ok(Screened::Nothing) => Ok(()),
            Ok(Screened::Decide) => {
                let attempt = |permits, as_of| self.admit_head(permits, as_of);
                let (clock, turnstile) = (&self.shared.clock, &self.shared.turnstile);
                turnstile
                    .acquire(clock, permits, &self.observer, attempt)
                    .await
            }
        }
    }

    pub(crate) fn is_limited(&self) -> bool {
        let (tally, now) = self.lock();
        self.shared.turnstile.is_waiting() || !tally.fits(1, now)
    }

    pub(crate) fn refund(&self, permits: u64) {
        {
            let (mut tally, now) = self.lock();
            tally.forget_newest(permits, now);
        }
        self.shared.turnstile.refunded();
    }

    pub(crate) fn available(&self) -> u64 {
        let (tally, now) = self.lock();
        self.shared.settings.limit - tally.counted(now)
    }

    pub(crate) fn is_idle(&self) -> bool {
        let (tally, now) = self.lock();
        // A whole limit fits exactly when no grant counts.
        !self.shared.turnstile.is_waiting() && tally.fits(self.shared.settings.limit, now)
    }

    /// Whether another handle (a clone, or one inside a future) holds the shared state.
    pub(crate) fn is_shared(&self) -> bool {
        Arc::strong_count(&self.shared) > 1
    }

    /// A new, empty limiter on this one's clock: a time wheel's slots stay aligned to the
    /// template's, so a fresh copy behaves exactly as the template would when empty.
    /// Unnamed, as every fresh limiter is.
    pub(crate) fn fresh(&self) -> Sliding<T> {
        Sliding::with_clock(self.shared.settings, self.shared.clock.clone())
    }

    /// `name { limit, window, <extra settings>, counted, queued_permits }`.
    pub(crate) fn debug(&self, name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let counted = {
            let (tally, now) = self.lock();
            tally.counted(now)
        };
        let mut output = f.debug_struct(name);
        let settings = &self.shared.settings;
        output
            .field("limit", &settings.limit)
            .field("window", &settings.window);
        T::describe(&settings.extra, &mut output);
        output
            .field("counted", &counted)
            .field("queued_permits", &self.queued_permits())
            .finish()
    }
}

/// A sliding limiter's line and tally, held by a composite while it decides (see
/// `composite/`): nobody joins the line meanwhile, and its refusal walks the line held.
pub(crate) struct HeldSliding<'a, T: Tally> {
    sliding: &'a Sliding<T>,
    line: MutexGuard<'a, Line>,
    tally: MutexGuard<'a, T>,
    /// The decision's instant on this limiter's clock, never below the floor.
    now: u64,
}

impl<T: Tally> WindowHeld for HeldSliding<'_, T> {
    fn check(&mut self, permits: u64) -> Result<(), TryAcquireError> {
        if self.sliding.screen(permits)? == Screened::Nothing {
            return Ok(());
        }
        self.sliding
            .check(&self.tally, Some(&self.line), permits, self.now)
    }

    fn ready_at(&mut self, permits: u64) -> Option<u64> {
        if self.tally.fits(permits, self.now) {
            return None;
        }
        let limit = self.sliding.shared.settings.limit;
        let at = ready_at(&*self.tally, limit, &[permits], self.now);
        Some(u64::try_from(at).unwrap_or(NEVER))
    }

    fn record(&mut self, permits: u64) -> u64 {
        self.tally.record(permits, self.now);
        // The handle's: a composite's admission counts as admitted here.
        self.sliding.observer.admitted(permits);
        self.now
    }
}

impl<T: Tally> Window for Sliding<T> {
    fn identity(&self) -> usize {
        self.shared.identity.of(&self.shared)
    }

    fn identity_ref(&self) -> &Identity {
        &self.shared.identity
    }

    fn limit(&self) -> u64 {
        self.shared.settings.limit
    }

    fn turnstile(&self) -> &Turnstile {
        &self.shared.turnstile
    }

    fn clock(&self) -> &Clock {
        &self.shared.clock
    }

    fn hold(&self, moment: Moment) -> Box<dyn WindowHeld + '_> {
        // The line, then the tally: the lock order (see `sync/mod.rs`).
        let line = self.shared.turnstile.line();
        let tally = self
            .shared
            .tally
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = self.shared.clock.at(moment).max(tally.floor());
        Box::new(HeldSliding {
            sliding: self,
            line,
            tally,
            now,
        })
    }
}

/// The first instant from `from` (the floor or later) at which the last of `requests`
/// (the line ahead, head first, then the caller's) could be admitted, each admitted whole
/// and in order as the line admits them: exact, so never earlier than true.
///
/// Think of the grants in order, the tally's last `limit` first (positions `0..limit`,
/// the oldest first, missing ones long gone), then those the line would make. A request
/// for `p` permits fits once the `p`-th oldest of the last `limit` grants before it stops
/// counting; that is position `made + p - 1`, where `made` counts the grants the line
/// made before it. Positions from `limit` on are the line's own grants, which stop
/// counting one lap after they are made. Positions only grow, so one pass over the
/// line's admissions finds them all: O(line).
fn ready_at(tally: &impl Tally, limit: u64, requests: &[u64], from: u64) -> u128 {
    // Positions count every permit of the line, which may add up past a `u64` (any
    // `u64` limit is accepted, and a line may hold many requests that large): exact in
    // 128 bits, as no line of `u64` requests reaches 2^128.
    let limit = u128::from(limit);
    // The line's admissions: (grants made up to and including this one, instant).
    let mut admissions: VecDeque<(u128, u128)> = VecDeque::with_capacity(requests.len());
    let mut made: u128 = 0;
    let mut ready_at = u128::from(from);
    // A request for nothing is admitted at once and takes nothing.
    for &permits in requests.iter().filter(|&&permits| permits > 0) {
        let deciding = made + u128::from(permits - 1);
        let released = match deciding.checked_sub(limit) {
            // Below the limit, so it fits in a u64.
            None => tally.released_at(deciding as u64),
            Some(own) => {
                // `permits <= limit`, so `own < made`: the last admission, through
                // `made`, is never popped.
                while admissions
                    .front()
                    .is_some_and(|&(through, _)| through <= own)
                {
                    admissions.pop_front();
                }
                let (_, admitted_at) = admissions[0];
                tally.released_after_laps(admitted_at, 1)
            }
        };
        ready_at = ready_at.max(released);
        made += u128::from(permits);
        admissions.push_back((made, ready_at));
    }
    ready_at
}

/// Helpers for the tests of both sliding limiters, which see their admissions' recorded
/// instants through the tally's floor.
#[cfg(test)]
pub(crate) mod testing {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::{Sliding, Tally};

    /// Fills `sliding` at the start (at instant 0 of its clock, made with the test's
    /// paused clock), lines up a request for each of `requests` permits, and returns for
    /// each, in line order, when its task went on after the start and the floor right
    /// after its admission: the instant it was recorded at (for a wheel, the start of its
    /// slot).
    pub(crate) async fn line_of<T: Tally>(
        sliding: &Sliding<T>,
        requests: &[u64],
    ) -> Vec<(Duration, u64)> {
        let start = Instant::now();
        assert_eq!(sliding.shared.clock.now(), 0, "made at the start");
        sliding.try_acquire(sliding.settings().limit).unwrap();
        let tasks: Vec<_> = requests
            .iter()
            .map(|&permits| {
                let sliding = sliding.clone();
                tokio::spawn(async move {
                    sliding.acquire(permits).await.unwrap();
                    // Nothing else runs before this: the floor is this admission's.
                    let recorded = sliding.lock().0.floor();
                    (start.elapsed(), recorded)
                })
            })
            .collect();
        let mut admissions = Vec::with_capacity(requests.len());
        for task in tasks {
            admissions.push(task.await.unwrap());
        }
        admissions
    }

    /// [`line_of`] requests of one permit each.
    pub(crate) async fn line_of_ones<T: Tally>(
        sliding: &Sliding<T>,
        waiters: usize,
    ) -> Vec<(Duration, u64)> {
        line_of(sliding, &vec![1; waiters]).await
    }

    /// `count` request sizes from 1 to `limit`, the same on every run.
    pub(crate) fn mixed_sizes(count: usize, limit: u64) -> Vec<u64> {
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        (0..count)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                1 + (state >> 33) % limit
            })
            .collect()
    }

    /// Every permit of `requests`, after the `limit` admitted at instant 0, at the
    /// instant its request was recorded at.
    pub(crate) fn grants(limit: u64, requests: &[u64], recorded: &[u64]) -> Vec<u64> {
        let mut grants = vec![0; limit as usize];
        for (&permits, &at) in requests.iter().zip(recorded) {
            grants.extend(std::iter::repeat(at).take(permits as usize));
        }
        grants
    }

    /// Asserts that each admission went on within tokio's 1 ms timer tick of the instant
    /// it was recorded at, never before.
    pub(crate) fn assert_served_on_time(admissions: &[(Duration, u64)]) {
        for (index, &(went_on, recorded)) in admissions.iter().enumerate() {
            let recorded = Duration::from_nanos(recorded);
            assert!(
                went_on >= recorded && went_on <= recorded + Duration::from_millis(1),
                "waiter {index} recorded at {recorded:?} went on at {went_on:?}"
            );
        }
    }

    /// Asserts that no half-open interval `[t, t + window)` holds more than `limit` of
    /// the `grants` (instants, one permit each): checking the intervals that start at a
    /// grant suffices, as sliding one to the next grant only drops grants.
    pub(crate) fn assert_never_over(grants: &[u64], limit: usize, window: u64) {
        let mut sorted = grants.to_vec();
        sorted.sort_unstable();
        for (index, &from) in sorted.iter().enumerate() {
            let within = sorted[index..]
                .iter()
                .take_while(|&&grant| grant < from + window)
                .count();
            assert!(
                within <= limit,
                "{within} grants in the {window} ns from {from} ns, limit {limit}"
            );
        }
    }
}
