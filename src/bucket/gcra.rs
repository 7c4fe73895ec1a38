//! One limit's state, in the one form the bucket keeps it: a GCRA instant (the generic
//! cell rate algorithm's), the instant at which the limit would hold nothing.
//!
//! Divide the rate's amount and period by their greatest common divisor: then one
//! nanosecond is worth `per_nanosecond` *units* and one token `per_token` units, both
//! whole numbers. Instants are counted in units from a `base` nanosecond, which is worth
//! `at_base` units. A limit whose *empty-at* instant is `E` holds `now - E` units at `now`,
//! but never more than a full bucket: taking `tokens` moves `E` to `max(E, now - full)`,
//! then `tokens` tokens' worth later, and is allowed only if that is no later than `now`.
//! So time passing changes nothing stored, nothing is rounded, and a limit observed every
//! nanosecond holds exactly what one observed once a year holds.
//!
//! The lock's state holds `E` in 128 bits; the fast path's word (`fast.rs`) and a compact
//! key of `Keyed` (`compact.rs`) hold the very same value in one `u64`, with the settings
//! beside it, while it fits: how far it may run is the word's [`Span`].
//!
//! A change of rate re-counts what the limit holds in the new rate's units, rounded down:
//! it can lose less than one unit of the new rate (`1 / per_token` of a token) and never
//! gains one.

use std::time::Duration;

use crate::clock::{duration_from_nanos, NEVER};
use crate::error::TryTakeError;
use crate::permits::{screen, Screened, TooLarge};
use crate::quota::Quota;
use crate::rate::{gcd, Rate};

/// Why a limit refuses to take tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    TooLarge(TooLarge),
    /// The tokens are not there yet: `short` units are missing.
    TooEarly {
        short: u128,
    },
}

/// How far a word's units may run: a word with flag bits beside its field holds less
/// than one that is all field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    /// Units stay below this, so that a grant's end (now plus at most a capacity's
    /// worth) stays below the field's top.
    pub(crate) horizon: u64,
    /// The most a full bucket may be worth, in units, for the word to hold it.
    max_full: u64,
    /// Units must take at least this many nanoseconds to run through half the horizon,
    /// or the word's owner would spend its time moving the base (or, for the fast path,
    /// the word would be spent almost at once: see `fast.rs`).
    min_base_lifetime: u64,
}

/// The fast path's word: 62 bits beside the lock and record bits. Its units never start
/// again from a lower value (see `fast.rs`), so its horizon is the word's whole life.
pub(crate) const WORD: Span = Span {
    horizon: WORD_HORIZON,
    // A full bucket of up to 2^50 units: each change of settings spends up to one more
    // (see `fast.rs`), 1/4,094 of the word's life.
    max_full: 1 << 50,
    // A second: a bucket whose units run so fast that its word would last less than
    // two is left to the lock from the start, and an era that would last less than one
    // is not begun.
    min_base_lifetime: 1_000_000_000,
};

/// Below the lock and record bits, with room for a refused request's end (up to a full
/// bucket past the horizon) in 62 bits.
pub(crate) const WORD_HORIZON: u64 = (1 << 62) - (1 << 51);

/// A compact key of `Keyed`: a whole `u64`, no flags. Moving a base rewrites every word
/// of a shard, so a base must last at least a second.
pub(crate) const COMPACT: Span = Span {
    horizon: 1 << 63,
    max_full: 1 << 61,
    min_base_lifetime: 1_000_000_000,
};

/// The units a limit's instants count in, and the nanosecond they count from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Units {
    /// At most the rate's amount, so it fits in 64 bits; a token's worth may not (a rate
    /// of one per `Duration::MAX`).
    pub(crate) per_nanosecond: u64,
    pub(crate) per_token: u128,
    pub(crate) capacity: u64,
    /// The nanosecond (on the bucket's clock) units are counted from.
    pub(crate) base: u64,
    /// Units at `base`: at least a full bucket's worth, so that `E` of a full limit is
    /// never negative.
    pub(crate) at_base: u128,
    /// A full bucket, in units (saturated at `u128::MAX`): kept, as every take needs it.
    full: u128,
}

impl Units {
    /// The units of a checked (nonzero) `rate` and `capacity`, counted from `base`, at
    /// which a full bucket's worth of units have passed.
    pub(crate) fn new(rate: Rate, capacity: u64, base: u64) -> Units {
        let (per_nanosecond, per_token) = reduced(rate);
        let full = times(capacity.into(), per_token);
        Units::from_parts(per_nanosecond, per_token, capacity, base, full)
    }

    /// Whether a full bucket of `capacity` at a checked `rate` is worth at most
    /// `u128::MAX` units, so that the limit counts exactly. One that is not would take
    /// more than 2^64 nanoseconds (584 years) to fill.
    pub(crate) fn count_exactly(rate: Rate, capacity: u64) -> bool {
        u128::from(capacity).checked_mul(reduced(rate).1).is_some()
    }

    /// Units of these parts, as the fast path's word keeps them beside it.
    #[inline]
    pub(crate) fn from_parts(
        per_nanosecond: u64,
        per_token: u128,
        capacity: u64,
        base: u64,
        at_base: u128,
    ) -> Units {
        Units {
            per_nanosecond,
            per_token,
            capacity,
            base,
            at_base,
            full: times(capacity.into(), per_token),
        }
    }

    /// The same units counted from `base`, which is worth `at_base` units.
    #[inline]
    pub(crate) fn counted_from(&self, base: u64, at_base: u128) -> Units {
        Units {
            base,
            at_base,
            ..*self
        }
    }

    /// A full bucket, in units.
    #[inline]
    pub(crate) fn full(&self) -> u128 {
        self.full
    }

    /// `tokens` in units, saturated.
    #[inline]
    pub(crate) fn worth(&self, tokens: u128) -> u128 {
        times(tokens, self.per_token)
    }

    /// `now` in units. An instant before the base counts as the base.
    #[inline]
    pub(crate) fn at(&self, now: u64) -> u128 {
        let elapsed = u128::from(now.saturating_sub(self.base));
        // Both factors are below 2^64: the product fits.
        (elapsed * u128::from(self.per_nanosecond)).saturating_add(self.at_base)
    }

    /// `now` in units as a word of `span` holds it: `None` past the horizon.
    #[inline]
    pub(crate) fn in_word(&self, now: u64, span: Span) -> Option<u64> {
        u64::try_from(self.at(now))
            .ok()
            .filter(|&units| units < span.horizon)
    }

    /// Whether words of `span` can hold instants in these units: a token's worth and a
    /// full bucket fit, and units do not run so fast that a base would last less than
    /// the span's base lifetime.
    pub(crate) fn fits(&self, span: Span) -> bool {
        u64::try_from(self.per_token).is_ok()
            && self.full() <= u128::from(span.max_full)
            && (span.horizon / 2) / self.per_nanosecond >= span.min_base_lifetime
    }

    /// Whether units from the base on stay inside the horizon for at least the span's
    /// base lifetime.
    pub(crate) fn lasts(&self, span: Span) -> bool {
        let left = u128::from(span.horizon).saturating_sub(self.at_base);
        left / u128::from(self.per_nanosecond) >= u128::from(span.min_base_lifetime)
    }

    /// `try_take` on a limit empty at `empty_at`, at `now_units`, with nobody waiting:
    /// `Ok` with its new `empty_at` (the same for zero tokens), or why not.
    #[inline(always)]
    pub(crate) fn decide(
        &self,
        empty_at: u128,
        tokens: u64,
        now_units: u128,
    ) -> Result<u128, Refusal> {
        if screen(tokens, self.capacity).map_err(Refusal::TooLarge)? == Screened::Nothing {
            return Ok(empty_at);
        }
        let end = self
            .capped(empty_at, now_units)
            .saturating_add(self.worth(tokens.into()));
        if end <= now_units {
            Ok(end)
        } else {
            Err(Refusal::TooEarly {
                short: end - now_units,
            })
        }
    }

    /// What `try_take` answers for `refusal`.
    pub(crate) fn error(&self, refusal: Refusal) -> TryTakeError {
        match refusal {
            Refusal::TooLarge(too_large) => too_large.into(),
            Refusal::TooEarly { short } => TryTakeError::Insufficient {
                retry_after: self.wait(short),
            },
        }
    }

    /// `empty_at` capped at `now_units`: a limit never holds more than a full bucket.
    #[inline]
    pub(crate) fn capped(&self, empty_at: u128, now_units: u128) -> u128 {
        empty_at.max(now_units.saturating_sub(self.full()))
    }

    /// `empty_at` capped as time passes up to `now_units`: capped if the limit was full a
    /// nanosecond before, else as it is, keeping what the last nanosecond added beyond a
    /// full bucket for the grants due at that nanosecond (see the cap in `limits.rs`).
    #[inline]
    pub(crate) fn capped_by_time(&self, empty_at: u128, now_units: u128) -> u128 {
        let full_since = empty_at
            .saturating_add(self.full())
            .saturating_add(self.per_nanosecond.into());
        if full_since <= now_units {
            now_units - self.full()
        } else {
            empty_at
        }
    }

    /// The room at `now_units`, in units: a full bucket less what the limit holds.
    #[inline]
    pub(crate) fn room(&self, empty_at: u128, now_units: u128) -> u128 {
        empty_at
            .saturating_add(self.full())
            .saturating_sub(now_units)
    }

    /// Whole tokens held at `now_units`.
    #[inline]
    pub(crate) fn tokens(&self, empty_at: u128, now_units: u128) -> u64 {
        let held = self.held(empty_at, now_units);
        u64::try_from(divide(held, self.per_token)).expect("at most the capacity")
    }

    /// The [`Quota`] at `now_units`: whole tokens held (the fraction of the next
    /// dropped), and how long until the limit is full, rounded up to the nanosecond so
    /// that it is never early.
    #[inline]
    pub(crate) fn quota(&self, empty_at: u128, now_units: u128) -> Quota {
        Quota {
            remaining: self.tokens(empty_at, now_units),
            full_after: self.wait(self.full() - self.held(empty_at, now_units)),
        }
    }

    /// What the limit holds at `now_units`, in units: at most a full bucket.
    #[inline]
    fn held(&self, empty_at: u128, now_units: u128) -> u128 {
        now_units.saturating_sub(self.capped(empty_at, now_units))
    }

    /// `empty_at` once `tokens` are given back at `now_units`: never more than a full
    /// bucket.
    pub(crate) fn refund(&self, empty_at: u128, tokens: u64, now_units: u128) -> u128 {
        let returned = self
            .capped(empty_at, now_units)
            .saturating_sub(self.worth(tokens.into()));
        self.capped(returned, now_units)
    }

    /// Nanoseconds until `short` more units have accrued, rounded up: never early.
    pub(crate) fn wait(&self, short: u128) -> Duration {
        duration_from_nanos(divide_up(short, self.per_nanosecond.into()))
    }

    /// The first nanosecond at which a limit empty at `empty_at` holds `need` tokens,
    /// if nothing is taken before (at the base, if it holds them there already), or
    /// [`NEVER`].
    #[inline]
    pub(crate) fn ready_at(&self, empty_at: u128, need: u128) -> u64 {
        let Some(end) = need
            .checked_mul(self.per_token)
            .and_then(|worth| worth.checked_add(empty_at))
        else {
            return NEVER;
        };
        let elapsed = divide_up(end.saturating_sub(self.at_base), self.per_nanosecond.into());
        u64::try_from(elapsed)
            .ok()
            .and_then(|elapsed| self.base.checked_add(elapsed))
            .unwrap_or(NEVER)
    }

    /// `empty_at` re-counted in units `to` as of `now`: what the limit holds (or owes)
    /// then, in the new units, rounded so that it never gains.
    pub(crate) fn convert(&self, empty_at: u128, now: u64, to: &Units) -> u128 {
        let (now_units, to_units) = (self.at(now), to.at(now));
        match now_units.checked_sub(empty_at) {
            Some(held) => to_units.saturating_sub(self.rescale(held, to, false)),
            None => to_units.saturating_add(self.rescale(empty_at - now_units, to, true)),
        }
    }

    /// `amount` of these units in units `to`, rounded down, or up with `up`.
    pub(crate) fn rescale(&self, amount: u128, to: &Units, up: bool) -> u128 {
        if self.per_token == to.per_token {
            return amount;
        }
        let whole = to.worth(amount / self.per_token);
        let part = amount % self.per_token;
        let part = match part.checked_mul(to.per_token) {
            Some(scaled) if up => divide_up(scaled, self.per_token),
            Some(scaled) => scaled / self.per_token,
            // Past 128 bits: less than a token either way.
            None if up => to.per_token,
            None => 0,
        };
        whole.saturating_add(part)
    }
}

/// A checked rate's units: one nanosecond's worth and one token's, its amount and period
/// divided by their greatest common divisor.
fn reduced(rate: Rate) -> (u64, u128) {
    let period = rate.period_nanos();
    let divisor = gcd(rate.amount().into(), period).max(1);
    let per_nanosecond = u128::from(rate.amount()) / divisor;
    let per_nanosecond = u64::try_from(per_nanosecond).expect("at most the amount");
    (per_nanosecond, period / divisor)
}

/// `tokens * per_token`, saturated: one 64-bit multiplication when both fit in 64 bits,
/// as they do for every word, where a saturating 128-bit one costs several.
#[inline]
fn times(tokens: u128, per_token: u128) -> u128 {
    match (u64::try_from(tokens), u64::try_from(per_token)) {
        (Ok(tokens), Ok(per_token)) => u128::from(tokens) * u128::from(per_token),
        _ => tokens.saturating_mul(per_token),
    }
}

/// `dividend / divisor`, in 64-bit arithmetic when both fit: the common case on every
/// reading of a limit, where a 128-bit division costs several times more.
#[inline]
fn divide(dividend: u128, divisor: u128) -> u128 {
    match (u64::try_from(dividend), u64::try_from(divisor)) {
        (Ok(dividend), Ok(divisor)) => u128::from(dividend / divisor),
        _ => dividend / divisor,
    }
}

/// `dividend / divisor`, rounded up.
#[inline]
fn divide_up(dividend: u128, divisor: u128) -> u128 {
    let whole = divide(dividend, divisor);
    whole + u128::from(whole * divisor != dividend)
}

#[cfg(all(test, not(loom)))]
pub(crate) mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    /// Rates whose units are awkward: a prime amount, a period not a whole number of
    /// microseconds, many units a nanosecond, a slow rate, the fastest.
    pub(crate) fn rates() -> [Rate; 6] {
        [
            Rate::per_second(3),
            Rate::new(7, Duration::from_nanos(999_999_937)),
            Rate::new(1_000_003, Duration::from_millis(17)),
            Rate::per_hour(5),
            Rate::per_second(1_000_000),
            Rate::new(u64::MAX, Duration::from_nanos(1)),
        ]
    }

    #[test]
    fn a_simulated_year_neither_gains_nor_loses_a_token() {
        let year = 365 * 24 * 3600 * SECOND;
        for rate in rates() {
            let units = Units::new(rate, u64::MAX, 0);
            let empty = units.at(0);
            let exact = u128::from(year) * u128::from(rate.amount()) / rate.period_nanos();
            let held = units.tokens(empty, units.at(year));
            assert_eq!(u128::from(held), exact.min(u128::from(u64::MAX)), "{rate}");
        }
    }

    #[test]
    fn ready_at_is_the_first_nanosecond_with_enough_tokens() {
        for rate in rates() {
            for need in [1, 2, 5, 1000] {
                let units = Units::new(rate, 1000, 12_345);
                let empty_at = units.at(12_345 + 999);
                let at = units.ready_at(empty_at, need);
                assert!(
                    units.tokens(empty_at, units.at(at)) >= need as u64,
                    "{rate}"
                );
                assert!(
                    units.tokens(empty_at, units.at(at - 1)) < need as u64,
                    "{rate}"
                );
            }
        }
    }

    #[test]
    fn extreme_rates_do_not_overflow() {
        let slowest = Units::new(Rate::new(1, Duration::MAX), u64::MAX, 0);
        let empty_at = slowest.at(0);
        assert_eq!(slowest.tokens(empty_at, slowest.at(u64::MAX)), 0);
        assert_eq!(slowest.ready_at(empty_at, u128::from(u64::MAX)), NEVER);
        let fastest = Units::new(Rate::new(u64::MAX, Duration::from_nanos(1)), 10, 0);
        let empty_at = fastest.at(0);
        assert_eq!(fastest.tokens(empty_at, fastest.at(u64::MAX)), 10);
    }

    #[test]
    fn the_cap_as_time_passes_keeps_only_the_last_nanoseconds_excess() {
        // 3 a second: 3 units a nanosecond, 1e9 a token.
        let units = Units::new(Rate::per_second(3), 1, 0);
        assert_eq!((units.per_nanosecond, units.per_token), (3, 1_000_000_000));
        let empty_at = units.at(0) - units.full();
        // Empty at 0 less a token: full at 0, so capped at any later nanosecond.
        assert_eq!(
            units.capped_by_time(empty_at, units.at(1)),
            units.at(1) - units.full()
        );
        // Empty at 0: a token at 333,333,334 ns with 2 units over, kept that nanosecond.
        let empty_at = units.at(0);
        let at = units.ready_at(empty_at, 1);
        assert_eq!(at, 333_333_334);
        assert_eq!(units.capped_by_time(empty_at, units.at(at)), empty_at);
        assert_eq!(units.room(empty_at, units.at(at)), 0);
        assert_eq!(
            units.capped_by_time(empty_at, units.at(at + 1)),
            units.at(at + 1) - units.full()
        );
    }

    #[test]
    fn a_rate_change_rounds_what_is_held_down_to_a_unit_of_the_new_rate() {
        let one = Units::new(Rate::per_second(1), 10, 0);
        let half = Units::new(Rate::new(1, Duration::from_secs(2)), 10, SECOND / 2);
        // Half a token at 1/s, re-counted at 1 per 2 s: 1e9 units of 2e9.
        let empty_at = one.at(0);
        let converted = one.convert(empty_at, SECOND / 2, &half);
        assert_eq!(half.at(SECOND / 2) - converted, SECOND.into());
        assert_eq!(half.ready_at(converted, 1), SECOND / 2 + SECOND);
        // A third of a token (1 per 3 ns) is two thirds of a unit of 1 per 2 ns: none,
        // rounded down, or one, rounded up for what is owed.
        let thirds = Units::new(Rate::new(1, Duration::from_nanos(3)), 10, 0);
        let halves = Units::new(Rate::new(1, Duration::from_nanos(2)), 10, 0);
        assert_eq!((thirds.per_token, halves.per_token), (3, 2));
        assert_eq!(thirds.rescale(1, &halves, false), 0);
        assert_eq!(thirds.rescale(1, &halves, true), 1);
        assert_eq!(thirds.rescale(4, &halves, false), 2);
    }
}
