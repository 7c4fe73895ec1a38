//! [`SlidingLog`]: the exact sliding-window limiter.
//!
//! It keeps the instants of the last `limit` grants (one per permit) in a ring, oldest
//! first. The instants never decrease, because each is recorded under the limiter's lock
//! from the latest one on (now, from a monotonic clock, or the earlier instant the head
//! of the line fitted at), so the ring is sorted, and:
//!
//! - `permits` fit now exactly when the grant `permits` places from the oldest of the
//!   last `limit` (a missing one counting as long gone) was made a whole window ago or
//!   earlier: one look, O(1), whatever the limit;
//! - admitting writes `permits` instants, overwriting the oldest: O(permits);
//! - how many grants count now is a binary search, O(log limit);
//! - a refund forgets the newest grants by shortening the ring: O(1).
//!
//! Grants that stopped counting are never swept out: they are overwritten in turn, and
//! they cannot hold anything up, so a call after a year of silence costs what any other
//! costs.

use std::time::Duration;

use crate::error::ConfigError;
use crate::window::ring;
use crate::window::sliding::{Settings, Sliding, Tally};
use crate::window::sliding_api::impl_limiter;

/// The exact sliding-window limiter: at most `limit` permits in **any** interval of
/// length `window`.
///
/// A permit admitted at instant `t` counts against the limit from `t` up to, not
/// including, `t + window`: it holds back a request until `t + window` exactly, not a
/// nanosecond less. Equivalently, every half-open interval `[a, a + window)` holds at
/// most `limit` admitted permits, wherever `a` falls. Time is whole nanoseconds on
/// tokio's clock, so `#[tokio::test(start_paused = true)]` drives it exactly, and a
/// refusal's `retry_after` is exact to the nanosecond. With others waiting in line it
/// places each of their requests, whole and in order, before the caller's: still exact.
///
/// A cheap-to-clone handle: clones share one limiter. Its own
/// [`try_acquire`](Self::try_acquire), [`acquire`](Self::acquire) (first in, first out),
/// [`refund`](Self::refund) (which forgets the newest permits admitted, whoever acquired
/// them, so call it soon after the acquire it undoes) and [`available`](Self::available)
/// need no import; it implements [`Limiter`] too, for code that takes any limiter.
///
/// A waiter is admitted as of the instant its request fitted, even when tokio's timer,
/// which ticks every millisecond, wakes it later (never before it reached the head of
/// the line, nor before a permit already admitted): a late wakeup does not push back the
/// waiters behind it, and the limiter keeps its rate at any window length. With windows
/// near a millisecond or shorter, waiters go on in bursts at each tick; the limit holds
/// for the instants they are admitted at.
///
/// # How it works, and what it costs
///
/// It remembers the instant of each of the last `limit` permits admitted, in a ring of
/// `u64` nanoseconds: 8 bytes a permit of the limit. A request for `permits` is admitted
/// when the permit `permits` places from the oldest of those was admitted a whole window
/// ago or earlier (so admitting them leaves at most `limit` in the window); that is a
/// single look, O(1) for any limit. Admitting writes `permits` instants, O(permits). A
/// long idle gap costs nothing: old instants are simply overwritten later.
///
/// The ring is allocated **lazily**: it grows (doubling, but never past `limit`
/// entries) as permits are admitted, so a limiter that only ever sees a few requests,
/// such as most per-key limiters in [`Keyed`](crate::Keyed), costs a few bytes however
/// high its limit, and a busy one settles at exactly `8 * limit` bytes and never
/// allocates again. `limit` is capped at [`SlidingLog::MAX_LIMIT`] so that one limiter
/// can never ask for more than 8 MiB.
///
/// # When to prefer which
///
/// - [`SlidingLog`] when the limit is a promise to someone else ("at most 100 calls in
///   any minute", an upstream API's terms) and must hold exactly, with `retry_after`
///   exact to the nanosecond. Its memory grows with the limit: fine for hundreds or
///   thousands per window, costly for millions, refused above `MAX_LIMIT`.
/// - [`SlidingWindow`](crate::SlidingWindow) (a time wheel) for large limits: memory
///   grows with its slots, not its limit. It is never more permissive than this log, but
///   may refuse up to one slot longer.
/// - [`FixedWindow`](crate::FixedWindow) for the cheapest counter, when a burst of twice
///   the limit across the edge of two windows is acceptable.
/// - [`TokenBucket`](crate::TokenBucket) for a steady rate with a bounded burst.
///
/// # Examples
///
/// The burst at the seam of two fixed windows, which a fixed-window counter would let
/// through, is refused:
///
/// ```
/// use std::time::Duration;
/// use token_bucket::{SlidingLog, TryAcquireError};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = SlidingLog::new(10, Duration::from_secs(1))?;
/// tokio::time::advance(Duration::from_millis(900)).await;
/// limiter.try_acquire(10)?; // at the end of the first second
/// tokio::time::advance(Duration::from_millis(200)).await;
/// // A new second has begun, but these 10 were admitted less than a second ago.
/// assert_eq!(
///     limiter.try_acquire(1),
///     Err(TryAcquireError::Limited { retry_after: Duration::from_millis(800) })
/// );
/// tokio::time::advance(Duration::from_millis(800)).await;
/// limiter.try_acquire(10)?;
/// # Ok(())
/// # }
/// ```
///
/// [`Limiter`]: crate::Limiter
#[derive(Clone)]
pub struct SlidingLog {
    sliding: Sliding<Log>,
}

impl SlidingLog {
    /// The largest `limit` accepted: 2^20 (1,048,576) permits a window, whose ring takes
    /// 8 MiB. A larger limit is refused rather than allocating without bound; use a
    /// [`SlidingWindow`](crate::SlidingWindow) for limits like that.
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{ConfigError, SlidingLog};
    ///
    /// assert!(SlidingLog::new(SlidingLog::MAX_LIMIT, Duration::from_secs(1)).is_ok());
    /// assert_eq!(
    ///     SlidingLog::new(SlidingLog::MAX_LIMIT + 1, Duration::from_secs(1)).unwrap_err(),
    ///     ConfigError::LimitTooLarge { limit: 1_048_577, max: 1_048_576 }
    /// );
    /// ```
    pub const MAX_LIMIT: u64 = 1 << 20;

    /// A limiter admitting at most `limit` permits in any interval of length `window`,
    /// starting with nothing admitted.
    ///
    /// Allocates no ring yet (see [the type's documentation](SlidingLog)).
    ///
    /// # Errors
    ///
    /// - [`ConfigError::ZeroLimit`] when `limit` is zero;
    /// - [`ConfigError::ZeroWindow`] when `window` is zero;
    /// - [`ConfigError::LimitTooLarge`] when `limit` is above [`SlidingLog::MAX_LIMIT`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{ConfigError, SlidingLog};
    ///
    /// let limiter = SlidingLog::new(100, Duration::from_secs(60))?;
    /// assert_eq!(limiter.available(), 100);
    /// let minute = Duration::from_secs(60);
    /// assert_eq!(SlidingLog::new(0, minute).unwrap_err(), ConfigError::ZeroLimit);
    /// assert_eq!(SlidingLog::new(100, Duration::ZERO).unwrap_err(), ConfigError::ZeroWindow);
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn new(limit: u64, window: Duration) -> Result<SlidingLog, ConfigError> {
        if limit == 0 {
            return Err(ConfigError::ZeroLimit);
        }
        if window.is_zero() {
            return Err(ConfigError::ZeroWindow);
        }
        if limit > SlidingLog::MAX_LIMIT {
            return Err(ConfigError::LimitTooLarge {
                limit,
                max: SlidingLog::MAX_LIMIT,
            });
        }
        Ok(SlidingLog {
            sliding: Sliding::new(Settings {
                limit,
                window,
                extra: (),
            }),
        })
    }
}

impl_limiter!(
    SlidingLog,
    "SlidingLog::new(2, Duration::from_secs(1))",
    "a permit counts for one `window` from the instant it was admitted",
    "Duration::from_millis(750)",
    SlidingLog,
    "sliding_log"
);

/// The ring of grant instants.
struct Log {
    limit: u64,
    /// Exact, even for windows past the clock's 584-year horizon.
    window_nanos: u128,
    /// Grows lazily up to `limit` entries; while shorter, `oldest` is 0 (the ring only
    /// wraps once it is full), so growing never reorders it.
    instants: Vec<u64>,
    /// Where the oldest grant kept is.
    oldest: usize,
    /// How many grants are kept: the last ones made (some may have stopped counting).
    kept: usize,
    /// The latest instant a grant was recorded at, kept through refunds: grants before
    /// the ring's oldest, overwritten by later ones, are known to have stopped counting
    /// by then, not before.
    latest: u64,
}

impl Log {
    /// The limit as an index; it is at most `MAX_LIMIT`, so it fits.
    fn capacity(&self) -> usize {
        usize::try_from(self.limit).unwrap_or(usize::MAX)
    }

    /// When a grant made at `admitted_at` stops counting.
    fn released(&self, admitted_at: u64) -> u128 {
        u128::from(admitted_at).saturating_add(self.window_nanos)
    }

    /// Makes room for `more` grants without reallocating: exactly enough, or double
    /// the room, whichever is more, never past the limit.
    fn reserve(&mut self, more: usize) {
        let wanted = (self.kept + more).min(self.capacity());
        if wanted > self.instants.capacity() {
            let doubled = (2 * self.instants.capacity()).min(self.capacity());
            let room = wanted.max(doubled);
            self.instants.reserve_exact(room - self.instants.len());
        }
    }

    fn push(&mut self, at: u64) {
        if self.kept < self.instants.len() {
            let slot = (self.oldest + self.kept) % self.instants.len();
            self.instants[slot] = at;
            self.kept += 1;
        } else if self.instants.len() < self.capacity() {
            self.instants.push(at);
            self.kept += 1;
        } else {
            // Full: the oldest grant is `limit` grants old; the newest replaces it.
            self.instants[self.oldest] = at;
            self.oldest = (self.oldest + 1) % self.instants.len();
        }
    }
}

impl Tally for Log {
    type Extra = ();

    fn new(settings: &Settings<()>) -> Log {
        Log {
            limit: settings.limit,
            window_nanos: settings.window.as_nanos(),
            instants: Vec::new(),
            oldest: 0,
            kept: 0,
            latest: 0,
        }
    }

    fn floor(&self) -> u64 {
        self.latest
    }

    fn fits(&self, permits: u64, at: u64) -> bool {
        self.released_at(permits - 1) <= u128::from(at)
    }

    fn counted(&self, at: u64) -> u64 {
        let released = ring::partition_point(&self.instants, self.oldest, self.kept, |grant| {
            self.released(grant) <= u128::from(at)
        });
        (self.kept - released) as u64
    }

    fn record(&mut self, permits: u64, at: u64) {
        // At most the limit, so it fits.
        let permits = usize::try_from(permits).unwrap_or(usize::MAX);
        self.reserve(permits);
        for _ in 0..permits {
            self.push(at);
        }
        self.latest = at;
    }

    fn forget_newest(&mut self, permits: u64, _now: u64) {
        let forgotten =
            usize::try_from(permits).map_or(self.kept, |permits| permits.min(self.kept));
        self.kept -= forgotten;
        if self.kept == 0 {
            self.oldest = 0;
        }
    }

    fn released_at(&self, rank: u64) -> u128 {
        // Missing grants, before the oldest kept, count as long gone.
        let missing = self.limit - self.kept as u64;
        match rank.checked_sub(missing) {
            None => 0,
            Some(rank) => {
                // Below `kept`, so it fits.
                let rank = rank as usize;
                self.released(ring::nth(&self.instants, self.oldest, rank))
            }
        }
    }

    fn released_after_laps(&self, admitted_at: u128, laps: u64) -> u128 {
        admitted_at.saturating_add(u128::from(laps).saturating_mul(self.window_nanos))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::window::sliding::testing::{
        assert_never_over, assert_served_on_time, grants, line_of, line_of_ones, mixed_sizes,
    };
    use crate::window::SlidingLog;

    /// Two permits per 1.5 ms: the head is due every 1.5 ms, between the timer's 1 ms
    /// ticks. Each admission is recorded at the instant it fitted, so the waiters are
    /// served at 1.5, 3, 4.5, ... ms exactly, two at a time, never more than two in any
    /// 1.5 ms; recorded at the ticks that woke them (2, 4, 6, ... ms), the rate would be
    /// two per 2 ms.
    #[tokio::test(start_paused = true)]
    async fn waiters_woken_late_by_the_timer_are_admitted_as_of_when_they_fitted() {
        let window = Duration::from_micros(1_500);
        let limiter = SlidingLog::new(2, window).unwrap();
        let admissions = line_of_ones(&limiter.sliding, 12).await;
        let recorded: Vec<u64> = admissions.iter().map(|&(_, at)| at).collect();
        let due: Vec<u64> = (0..12).map(|index| (index / 2 + 1) * 1_500_000).collect();
        assert_eq!(recorded, due);
        assert_served_on_time(&admissions);
        let grants: Vec<u64> = [0, 0].into_iter().chain(recorded).collect();
        assert_never_over(&grants, 2, 1_500_000);
    }

    /// Requests of mixed sizes behind a 1.5 ms window: each is recorded at the first
    /// instant from its turn on when the permits of the last `limit` grants, counted back
    /// from its own, leave the window, found here by a plain count over every grant.
    #[tokio::test(start_paused = true)]
    async fn a_line_of_mixed_sizes_is_admitted_at_the_exact_instants() {
        const LIMIT: u64 = 5;
        const WINDOW: u64 = 1_500_000;
        let limiter = SlidingLog::new(LIMIT, Duration::from_nanos(WINDOW)).unwrap();
        let requests = mixed_sizes(60, LIMIT);
        let admissions = line_of(&limiter.sliding, &requests).await;
        let recorded: Vec<u64> = admissions.iter().map(|&(_, at)| at).collect();

        let mut expected = Vec::new();
        let mut model = vec![0; LIMIT as usize];
        let mut turn = 0;
        for &permits in &requests {
            // It fits once at most `LIMIT - permits` grants count: once the newest of
            // those that must leave has left.
            let must_leave = model.len() - (LIMIT - permits) as usize - 1;
            let at = turn.max(model[must_leave] + WINDOW);
            model.extend(std::iter::repeat(at).take(permits as usize));
            expected.push(at);
            turn = at;
        }
        assert_eq!(recorded, expected);
        assert_served_on_time(&admissions);
        assert_never_over(&grants(LIMIT, &requests, &recorded), LIMIT as usize, WINDOW);
    }
}
