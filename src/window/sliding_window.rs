//! [`SlidingWindow`]: the sliding window as a time wheel of per-slot totals.
//!
//! Time is cut into slots of `slot_duration`, aligned to the limiter's start. The wheel
//! keeps `slots + 1` counters: the slot now filling and the `slots` before it, which
//! together cover at least the last `slots * slot_duration`. It keeps them as running
//! totals (admissions since the start, through each slot) in a ring, plus the running
//! total before the oldest slot, so that:
//!
//! - what counts now is one subtraction, O(1);
//! - turning the wheel by `k` slots rewrites `min(k, slots + 1)` counters: after a gap
//!   longer than the wheel, all of them at once, never one per missed slot;
//! - finding when enough counted permits will have left, for `retry_after`, is a binary
//!   search over the slots, O(log slots);
//! - a refund trims the newest slots, O(slots it empties).
//!
//! Running totals wrap around `u64` harmlessly: only differences within the wheel are
//! read, and those never exceed the limit.

use std::fmt;
use std::time::Duration;

use crate::error::ConfigError;
use crate::window::ring;
use crate::window::sliding::{Settings, Sliding, Tally};
use crate::window::sliding_api::impl_limiter;

/// A sliding-window limiter with memory bounded by its slots, not its limit: a time
/// wheel of `slots` slots of `slot_duration`, admitting at most `limit` permits per
/// wheel (`window = slots * slot_duration`).
///
/// # How it approximates the sliding log
///
/// Time is cut into slots of `slot_duration`, aligned to the instant the limiter was
/// made. The wheel counts permits per slot, not per instant: a permit admitted anywhere
/// in slot `s` counts until the end of slot `s + slots`, that is for the `window`
/// after it plus what was left of its own slot. So compared with the exact
/// [`SlidingLog`](crate::SlidingLog) of the same `limit` and `window`:
///
/// - it is **never more permissive**: it admits at most `limit` permits in *any*
///   interval of length `window`, wherever it falls (in particular, in any `slots`
///   consecutive slots);
/// - it may refuse **up to one `slot_duration` longer**: a permit admitted at `t` holds
///   back requests until the end of the slot `window` later, between `t + window`
///   (exclusive) and `t + window + slot_duration` (inclusive). More, shorter slots track
///   the log more closely and cost 8 bytes each.
///
/// Time is whole nanoseconds on tokio's clock, so `#[tokio::test(start_paused = true)]`
/// drives it exactly, and `retry_after` is exact: the first nanosecond of the slot at
/// which enough permits stop counting. With others waiting in line it places each of their
/// requests, whole and in order, before the caller's: still exact.
///
/// A cheap-to-clone handle: clones share one limiter. Its own
/// [`try_acquire`](Self::try_acquire), [`acquire`](Self::acquire) (first in, first out),
/// [`refund`](Self::refund) (which takes permits off the newest slots, whoever acquired
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
/// # What it costs
///
/// `8 * (slots + 1)` bytes, allocated up front (at most 512 KiB, for
/// [`SlidingWindow::MAX_SLOTS`]): small and bounded, so there is nothing to gain by
/// growing it, whatever the limit; any `u64` limit is accepted. Every
/// call is O(1) amortized: turning the wheel clears each slot it passes once, and after
/// a gap longer than the wheel clears them all at once, so a call after a year of
/// silence costs at most one sweep of the wheel. A refused `try_acquire` also searches
/// the wheel for its `retry_after`, O(log slots).
///
/// # When to prefer which
///
/// - [`SlidingLog`](crate::SlidingLog) when the window must be exact to the nanosecond
///   and the limit is modest (its memory is 8 bytes a permit of the limit).
/// - [`SlidingWindow`] for large limits (bytes, thousands of requests a second) or
///   many keys, where a slot's worth of extra strictness is acceptable.
/// - [`FixedWindow`](crate::FixedWindow) for the cheapest counter, when a burst of twice
///   the limit across the edge of two windows is acceptable.
/// - [`TokenBucket`](crate::TokenBucket) for a steady rate with a bounded burst.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use token_bucket::{SlidingWindow, TryAcquireError};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // 100 permits a second, counted in 10 slots of 100 ms.
/// let limiter = SlidingWindow::new(100, 10, Duration::from_millis(100))?;
/// tokio::time::advance(Duration::from_millis(250)).await; // into slot 2
/// limiter.try_acquire(100)?;
/// // They count until the end of slot 2 + 10: 1.3 s after the start.
/// assert_eq!(
///     limiter.try_acquire(1),
///     Err(TryAcquireError::Limited { retry_after: Duration::from_millis(1050) })
/// );
/// tokio::time::advance(Duration::from_millis(1050)).await;
/// limiter.try_acquire(100)?;
/// # Ok(())
/// # }
/// ```
///
/// [`Limiter`]: crate::Limiter
#[derive(Clone)]
pub struct SlidingWindow {
    sliding: Sliding<Wheel>,
}

impl SlidingWindow {
    /// The most slots a wheel may have: 2^16 (65,536), whose counters take 512 KiB.
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{ConfigError, SlidingWindow};
    ///
    /// let slot = Duration::from_millis(1);
    /// assert!(SlidingWindow::new(10, SlidingWindow::MAX_SLOTS, slot).is_ok());
    /// assert_eq!(
    ///     SlidingWindow::new(10, SlidingWindow::MAX_SLOTS + 1, slot).unwrap_err(),
    ///     ConfigError::BadSlots { slots: 65_537, max: 65_536 }
    /// );
    /// ```
    pub const MAX_SLOTS: usize = 1 << 16;

    /// A wheel of `slots` slots of `slot_duration` admitting at most `limit` permits
    /// per `slots * slot_duration`, starting with nothing admitted. Slots are aligned to
    /// this instant.
    ///
    /// # Errors
    ///
    /// - [`ConfigError::ZeroLimit`] when `limit` is zero;
    /// - [`ConfigError::ZeroWindow`] when `slot_duration` is zero;
    /// - [`ConfigError::BadSlots`] when `slots` is zero or above
    ///   [`SlidingWindow::MAX_SLOTS`];
    /// - [`ConfigError::WindowTooLong`] when `slots * slot_duration` is more than a
    ///   `Duration` holds.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{ConfigError, SlidingWindow};
    ///
    /// // 1,000 requests a minute, in slots of one second.
    /// let limiter = SlidingWindow::new(1_000, 60, Duration::from_secs(1))?;
    /// assert_eq!(limiter.available(), 1_000);
    /// assert_eq!(limiter.window(), Duration::from_secs(60));
    /// assert_eq!(
    ///     SlidingWindow::new(1_000, 0, Duration::from_secs(1)).unwrap_err(),
    ///     ConfigError::BadSlots { slots: 0, max: SlidingWindow::MAX_SLOTS as u64 }
    /// );
    /// assert_eq!(
    ///     SlidingWindow::new(1_000, 60, Duration::ZERO).unwrap_err(),
    ///     ConfigError::ZeroWindow
    /// );
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn new(
        limit: u64,
        slots: usize,
        slot_duration: Duration,
    ) -> Result<SlidingWindow, ConfigError> {
        if limit == 0 {
            return Err(ConfigError::ZeroLimit);
        }
        if slot_duration.is_zero() {
            return Err(ConfigError::ZeroWindow);
        }
        let slots_u64 = u64::try_from(slots).unwrap_or(u64::MAX);
        if slots == 0 || slots > SlidingWindow::MAX_SLOTS {
            return Err(ConfigError::BadSlots {
                slots: slots_u64,
                max: SlidingWindow::MAX_SLOTS as u64,
            });
        }
        // At most MAX_SLOTS, so it fits.
        let window = u32::try_from(slots)
            .ok()
            .and_then(|slots| slot_duration.checked_mul(slots))
            .ok_or(ConfigError::WindowTooLong {
                slots: slots_u64,
                slot_duration,
            })?;
        Ok(SlidingWindow {
            sliding: Sliding::new(Settings {
                limit,
                window,
                extra: Slots {
                    count: slots,
                    duration: slot_duration,
                },
            }),
        })
    }

    /// How many slots the wheel has.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use token_bucket::SlidingWindow;
    /// let limiter = SlidingWindow::new(1_000, 60, Duration::from_secs(1))?;
    /// assert_eq!(limiter.slots(), 60);
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn slots(&self) -> usize {
        self.sliding.settings().extra.count
    }

    /// How long each slot lasts.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use token_bucket::SlidingWindow;
    /// let limiter = SlidingWindow::new(1_000, 60, Duration::from_secs(1))?;
    /// assert_eq!(limiter.slot_duration(), Duration::from_secs(1));
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn slot_duration(&self) -> Duration {
        self.sliding.settings().extra.duration
    }
}

impl_limiter!(
    SlidingWindow,
    "SlidingWindow::new(2, 10, Duration::from_millis(100))",
    "a permit counts until the end of the slot `slots` after its own",
    "Duration::from_millis(850)",
    SlidingWindow,
    "sliding_window"
);

#[derive(Debug, Clone, Copy)]
struct Slots {
    count: usize,
    duration: Duration,
}

/// The wheel's running totals.
struct Wheel {
    limit: u64,
    /// At least 1 (a zero slot is refused); exact, even past the clock's 584-year
    /// horizon.
    slot_nanos: u128,
    /// `slots + 1` running totals: the admissions since the start through each slot
    /// counted, in a ring.
    totals: Box<[u64]>,
    /// Where the slot now filling is; the oldest counted is the next one.
    newest: usize,
    /// The number of the slot now filling (slot `n` starts at `n * slot_nanos`).
    slot: u64,
    /// The running total before the oldest slot counted.
    base: u64,
}

impl Wheel {
    /// How many slots a permit counts in: its own and `slots` more.
    fn span(&self) -> u64 {
        self.totals.len() as u64
    }

    fn oldest(&self) -> usize {
        (self.newest + 1) % self.totals.len()
    }

    /// The number of the slot holding the instant `at`.
    fn slot_of(&self, at: u64) -> u64 {
        // At most `at`, so it fits.
        (u128::from(at) / self.slot_nanos) as u64
    }

    /// Turns the wheel to the slot holding `at` (from the floor on).
    fn advance(&mut self, at: u64) {
        let slot = self.slot_of(at);
        let passed = slot.saturating_sub(self.slot);
        if passed == 0 {
            return;
        }
        let total = self.totals[self.newest];
        if passed >= self.span() {
            // Everything counted has left: clear the whole wheel at once.
            self.totals.fill(total);
            self.base = total;
        } else {
            // Each slot passed becomes a new, empty one; the oldest leaves the count.
            for _ in 0..passed {
                self.newest = self.oldest();
                self.base = self.totals[self.newest];
                self.totals[self.newest] = total;
            }
        }
        self.slot = slot;
    }

    /// How many grants count in the slots the wheel holds now.
    fn counted_in_wheel(&self) -> u64 {
        self.totals[self.newest].wrapping_sub(self.base)
    }
}

impl Tally for Wheel {
    type Extra = Slots;

    fn new(settings: &Settings<Slots>) -> Wheel {
        Wheel {
            limit: settings.limit,
            slot_nanos: settings.extra.duration.as_nanos(),
            totals: vec![0; settings.extra.count + 1].into_boxed_slice(),
            newest: 0,
            slot: 0,
            base: 0,
        }
    }

    fn describe(slots: &Slots, output: &mut fmt::DebugStruct<'_, '_>) {
        output
            .field("slots", &slots.count)
            .field("slot_duration", &slots.duration);
    }

    fn floor(&self) -> u64 {
        // At most the instant the wheel was turned to, so it fits.
        (u128::from(self.slot) * self.slot_nanos) as u64
    }

    fn fits(&self, permits: u64, at: u64) -> bool {
        permits <= self.limit - self.counted(at)
    }

    fn counted(&self, at: u64) -> u64 {
        // As if turned to `at`, without turning: the slots it would pass leave the count.
        let passed = self.slot_of(at).saturating_sub(self.slot);
        if passed == 0 {
            self.counted_in_wheel()
        } else if passed >= self.span() {
            0
        } else {
            // The running total through the last slot that would leave. `passed` is
            // below the span, so it fits.
            let left = (self.oldest() + passed as usize - 1) % self.totals.len();
            self.totals[self.newest].wrapping_sub(self.totals[left])
        }
    }

    fn record(&mut self, permits: u64, at: u64) {
        self.advance(at);
        self.totals[self.newest] = self.totals[self.newest].wrapping_add(permits);
    }

    fn forget_newest(&mut self, permits: u64, now: u64) {
        // Not turned to `now`: a head due earlier, not yet woken, is still recorded as of
        // the instant it fitted. Only permits still counted at `now` come back: a refund
        // of permits that left already changes nothing.
        let forgotten = permits.min(self.counted(now));
        let kept = self.counted_in_wheel() - forgotten;
        let total = self.base.wrapping_add(kept);
        // Trim every slot whose running total passes the new one, newest first.
        let mut at = self.newest;
        while self.totals[at].wrapping_sub(self.base) > kept {
            self.totals[at] = total;
            at = (at + self.totals.len() - 1) % self.totals.len();
        }
    }

    fn released_at(&self, rank: u64) -> u128 {
        // Those counted in the wheel as it stands: any of them that stopped counting
        // since it last turned is found released at its true instant, in the past.
        let counted = self.counted_in_wheel();
        // Grants before those counted are long gone.
        let Some(rank) = rank.checked_sub(self.limit - counted) else {
            return 0;
        };
        // The slot holding the `rank`-th counted grant: the first whose running total
        // passes it. `rank < counted`, so the newest does.
        let from_oldest =
            ring::partition_point(&self.totals, self.oldest(), self.totals.len(), |total| {
                total.wrapping_sub(self.base) <= rank
            }) as u64;
        // The oldest counted slot is number `slot - slots`: its grants count through
        // slot `slot`, and stop at the start of the next.
        let slot = u128::from(self.slot) + 1 + u128::from(from_oldest);
        slot.saturating_mul(self.slot_nanos)
    }

    fn released_after_laps(&self, admitted_at: u128, laps: u64) -> u128 {
        if laps == 0 {
            return admitted_at;
        }
        // A grant counts until the end of its slot's last lap, then the next one made
        // at that slot boundary counts a whole span, and so on.
        let slot = admitted_at / self.slot_nanos;
        let laps = u128::from(laps) * u128::from(self.span());
        slot.saturating_add(laps).saturating_mul(self.slot_nanos)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::window::sliding::testing::{
        assert_never_over, assert_served_on_time, grants, line_of, line_of_ones, mixed_sizes,
    };
    use crate::window::SlidingWindow;

    /// One permit per 100 µs, in 10 slots of 10 µs: a permit counts 110 µs (its slot and
    /// ten more), so the head is due every 110 µs, ten times between two of the timer's
    /// 1 ms ticks. Each admission is recorded in the slot it fitted in, so the waiters are
    /// served at 110, 220, 330, ... µs exactly, in bursts at each tick; recorded in the
    /// slot of the tick that woke them, it would be one per millisecond.
    #[tokio::test(start_paused = true)]
    async fn waiters_woken_late_by_the_timer_are_admitted_as_of_when_they_fitted() {
        let limiter = SlidingWindow::new(1, 10, Duration::from_micros(10)).unwrap();
        let admissions = line_of_ones(&limiter.sliding, 30).await;
        let recorded: Vec<u64> = admissions.iter().map(|&(_, at)| at).collect();
        let due: Vec<u64> = (1..=30).map(|waiter| waiter * 110_000).collect();
        assert_eq!(recorded, due);
        assert_served_on_time(&admissions);
        let grants: Vec<u64> = [0].into_iter().chain(recorded).collect();
        // Never more permissive than the log over its window, nor over its hold.
        assert_never_over(&grants, 1, 100_000);
        assert_never_over(&grants, 1, 110_000);
    }

    /// Requests of mixed sizes on a wheel of 8 slots of 30 µs: each is recorded in the
    /// first slot from its turn on where the slots it would count with (its own and the
    /// 8 before) hold few enough, found here by a plain count per slot.
    #[tokio::test(start_paused = true)]
    async fn a_line_of_mixed_sizes_is_admitted_in_the_exact_slots() {
        const LIMIT: u64 = 7;
        const SLOTS: u64 = 8;
        const SLOT: u64 = 30_000;
        let limiter = SlidingWindow::new(LIMIT, SLOTS as usize, Duration::from_nanos(SLOT));
        let limiter = limiter.unwrap();
        let requests = mixed_sizes(80, LIMIT);
        let admissions = line_of(&limiter.sliding, &requests).await;
        let recorded: Vec<u64> = admissions.iter().map(|&(_, at)| at).collect();

        let mut per_slot = vec![LIMIT];
        let mut expected = Vec::new();
        let mut slot = 0;
        for &permits in &requests {
            let counted = |slot: u64| -> u64 {
                let first = slot.saturating_sub(SLOTS) as usize;
                per_slot
                    .iter()
                    .skip(first)
                    .take(slot as usize + 1 - first)
                    .sum()
            };
            while counted(slot) + permits > LIMIT {
                slot += 1;
            }
            if per_slot.len() <= slot as usize {
                per_slot.resize(slot as usize + 1, 0);
            }
            per_slot[slot as usize] += permits;
            expected.push(slot * SLOT);
        }
        assert_eq!(recorded, expected);
        assert_served_on_time(&admissions);
        let grants = grants(LIMIT, &requests, &recorded);
        // Never more permissive than the log over its window, nor over its hold.
        assert_never_over(&grants, LIMIT as usize, SLOTS * SLOT);
        assert_never_over(&grants, LIMIT as usize, (SLOTS + 1) * SLOT);
    }
}
