//! The exact token arithmetic: how many tokens a bucket holds at any nanosecond.
//!
//! A token is split into `period_nanos` parts; every nanosecond adds `amount` parts. The
//! ledger keeps whole tokens and the parts of the next token (the *fraction*) apart, so
//! both stay integers: no rounding, no floating point, and a bucket observed every
//! nanosecond holds exactly what one observed once a year holds.
//!
//! The ledger never caps itself at the capacity unless asked: the caller decides when to
//! (see the cap in `limits.rs`), because capping at the nanosecond a waiter is granted
//! would throw away part of a token that waiter was scheduled to leave behind.

use crate::clock::NEVER;
use crate::rate::Rate;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ledger {
    /// Whole tokens held at `last`.
    tokens: u64,
    /// Parts of the next token, in units of `1 / rate.period_nanos()`; always below one token.
    fraction: u128,
    /// The nanosecond (since the clock's origin) the ledger is accurate at.
    last: u64,
}

impl Ledger {
    pub(crate) fn new(tokens: u64, now: u64) -> Ledger {
        Ledger {
            tokens,
            fraction: 0,
            last: now,
        }
    }

    /// A ledger of `tokens` and `fraction` parts of the next token at `last`.
    pub(crate) fn from_parts(tokens: u64, fraction: u128, last: u64) -> Ledger {
        Ledger {
            tokens,
            fraction,
            last,
        }
    }

    /// Parts of the next token, in units of `1 / rate.period_nanos()`.
    pub(crate) fn fraction(&self) -> u128 {
        self.fraction
    }

    /// Whole tokens held at [`last`](Ledger::last).
    pub(crate) fn tokens(&self) -> u64 {
        self.tokens
    }

    /// The instant the ledger is accurate at. It never moves backwards while the ledger
    /// is the authority; taken back from the fast path's word it is the seizer's instant,
    /// which a racing taker's may have passed (see `fast.rs`).
    pub(crate) fn last(&self) -> u64 {
        self.last
    }

    /// Adds what `rate` accrues from `last` to `now`. An earlier `now` changes nothing.
    pub(crate) fn advance(&mut self, now: u64, rate: Rate) {
        // Nothing accrues in no time: serving often ends at the instant the last grant
        // was made, and the division below is the costly part.
        let Some(elapsed) = now.checked_sub(self.last).filter(|&elapsed| elapsed > 0) else {
            return;
        };
        let period = rate.period_nanos();
        // Both factors are below 2^64, so the product fits in 128 bits.
        let parts = u128::from(elapsed) * u128::from(rate.amount());
        let (mut whole, remainder) = divide(parts, period);
        self.fraction += remainder;
        if self.fraction >= period {
            self.fraction -= period;
            whole += 1;
        }
        self.tokens = self
            .tokens
            .saturating_add(u64::try_from(whole).unwrap_or(u64::MAX));
        self.last = now;
    }

    /// [`advance`](Ledger::advance), capped as time passes: a ledger that held
    /// `capacity` tokens a nanosecond before `now` (or before, however long) holds exactly
    /// `capacity` at `now`, its fraction dropped, as if capped at every nanosecond. One that
    /// reaches `capacity` only at `now` keeps what that last nanosecond added beyond it, for
    /// the grants due at `now` (see the cap in `limits.rs`); the caller caps once they are
    /// made. An earlier `now` changes nothing.
    #[inline]
    pub(crate) fn advance_capped(&mut self, now: u64, rate: Rate, capacity: u64) {
        // Checked here, inlined: serving often ends at the instant of its last grant.
        if now > self.last {
            self.accrue_capped(now, rate, capacity);
        }
    }

    fn accrue_capped(&mut self, now: u64, rate: Rate, capacity: u64) {
        self.advance(now, rate);
        if self.tokens >= capacity {
            // Parts above a full bucket now; one nanosecond added `amount` of them.
            let over = u128::from(self.tokens - capacity)
                .saturating_mul(rate.period_nanos())
                .saturating_add(self.fraction);
            if over >= u128::from(rate.amount()) {
                self.tokens = capacity;
                self.fraction = 0;
            }
        }
    }

    /// The first nanosecond at which the ledger holds `need` whole tokens, or [`NEVER`].
    pub(crate) fn ready_at(&self, need: u64, rate: Rate) -> u64 {
        self.last
            .saturating_add(self.time_until(u128::from(need), rate))
    }

    /// Nanoseconds from `last` until `need` whole tokens are held (rounded up, so never
    /// early), or [`NEVER`].
    /// `need` is 128 bits wide because it may sum a whole queue of `u64` requests.
    pub(crate) fn time_until(&self, need: u128, rate: Rate) -> u64 {
        let Some(missing) = need.checked_sub(u128::from(self.tokens)).filter(|&n| n > 0) else {
            return 0;
        };
        let Some(parts) = missing.checked_mul(rate.period_nanos()) else {
            return NEVER;
        };
        let parts = parts - self.fraction;
        let (whole, remainder) = divide(parts, u128::from(rate.amount()));
        let nanos = whole + u128::from(remainder != 0);
        u64::try_from(nanos).unwrap_or(NEVER)
    }

    /// Removes `tokens`; the caller has checked they are held.
    pub(crate) fn take(&mut self, tokens: u64) {
        debug_assert!(tokens <= self.tokens);
        self.tokens -= tokens;
    }

    /// Adds `tokens` given back; the caller caps afterwards if it must.
    pub(crate) fn give_back(&mut self, tokens: u64) {
        self.tokens = self.tokens.saturating_add(tokens);
    }

    /// What is held, in parts of a token (`period` parts each).
    pub(crate) fn parts(&self, period: u128) -> u128 {
        u128::from(self.tokens)
            .saturating_mul(period)
            .saturating_add(self.fraction)
    }

    /// Adds `parts` of a token (`period` parts each); the caller caps afterwards if it must.
    pub(crate) fn give_back_parts(&mut self, parts: u128, period: u128) {
        let fraction = self.fraction + parts % period;
        let whole = parts / period + fraction / period;
        self.fraction = fraction % period;
        self.tokens = self
            .tokens
            .saturating_add(u64::try_from(whole).unwrap_or(u64::MAX));
    }

    /// Drops whatever is above `capacity`, the fraction included once the bucket is full.
    pub(crate) fn cap(&mut self, capacity: u64) {
        if self.tokens >= capacity {
            self.tokens = capacity;
            self.fraction = 0;
        }
    }

    /// Re-expresses the fraction of a token in the units of a new rate. The fraction is
    /// rounded down to the new unit, so a rate change can lose less than one
    /// `1/period_nanos` of a token and never invents one.
    pub(crate) fn change_rate(&mut self, old: Rate, new: Rate) {
        self.fraction = self
            .fraction
            .checked_mul(new.period_nanos())
            .map_or(0, |scaled| scaled / old.period_nanos());
    }
}

/// `dividend / divisor` and its remainder, in 64-bit arithmetic when both fit: the
/// common case on every touch of the bucket, where a 128-bit division costs several
/// times more.
fn divide(dividend: u128, divisor: u128) -> (u128, u128) {
    match (u64::try_from(dividend), u64::try_from(divisor)) {
        (Ok(dividend), Ok(divisor)) => (
            u128::from(dividend / divisor),
            u128::from(dividend % divisor),
        ),
        _ => (dividend / divisor, dividend % divisor),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn carries_fractions_exactly() {
        let rate = Rate::per_second(3);
        let mut ledger = Ledger::new(0, 0);
        ledger.advance(SECOND / 3, rate);
        assert_eq!(ledger.tokens(), 0, "1e9/3 ns is a hair short of one token");
        ledger.advance(SECOND / 3 + 1, rate);
        assert_eq!(ledger.tokens(), 1);
        ledger.advance(SECOND, rate);
        assert_eq!(ledger.tokens(), 3);
        assert_eq!(ledger.fraction, 0);
    }

    #[test]
    fn a_simulated_year_neither_gains_nor_loses_a_token() {
        let year = 365 * 24 * 3600 * SECOND;
        for rate in [
            Rate::per_second(3),
            Rate::new(7, Duration::from_nanos(999_999_937)),
            Rate::new(1_000_003, Duration::from_millis(17)),
        ] {
            let mut stepped = Ledger::new(0, 0);
            // Irregular steps of up to two hours, to the odd nanosecond, as a bucket is
            // observed at arbitrary instants.
            let mut now = 0u64;
            let mut step = 1u64;
            while now < year {
                now = (now + step).min(year);
                stepped.advance(now, rate);
                step = (step * 7_919 + 12_345_678_901) % 7_200_000_000_007;
            }
            let mut once = Ledger::new(0, 0);
            once.advance(year, rate);
            assert_eq!(stepped, once, "{rate}");
            let exact = u128::from(year) * u128::from(rate.amount()) / rate.period_nanos();
            assert_eq!(u128::from(once.tokens()), exact, "{rate}");
        }
    }

    #[test]
    fn ready_at_is_the_first_nanosecond_with_enough_tokens() {
        for rate in [
            Rate::per_second(3),
            Rate::new(5, Duration::from_millis(250)),
            Rate::new(u64::MAX, Duration::from_nanos(1)),
            Rate::new(13, Duration::from_nanos(7)),
        ] {
            for need in [1, 2, 5, 1000] {
                let mut ledger = Ledger::new(0, 12_345);
                ledger.advance(12_345 + 999, rate);
                let at = ledger.ready_at(need, rate);
                let mut before = ledger.clone();
                before.advance(at - 1, rate);
                let mut after = ledger.clone();
                after.advance(at, rate);
                assert!(
                    before.tokens() < need || at == ledger.last(),
                    "{rate} {need}"
                );
                assert!(after.tokens() >= need, "{rate} {need}");
            }
        }
    }

    #[test]
    fn extreme_rates_do_not_overflow() {
        let slowest = Rate::new(1, Duration::MAX);
        let mut ledger = Ledger::new(0, 0);
        ledger.advance(u64::MAX, slowest);
        assert_eq!(ledger.tokens(), 0);
        assert_eq!(ledger.time_until(u128::from(u64::MAX), slowest), NEVER);

        let fastest = Rate::new(u64::MAX, Duration::from_nanos(1));
        let mut ledger = Ledger::new(0, 0);
        ledger.advance(u64::MAX, fastest);
        assert_eq!(ledger.tokens(), u64::MAX);
        ledger.cap(10);
        assert_eq!(ledger.tokens(), 10);
    }

    #[test]
    fn a_capped_advance_drops_the_fraction_only_when_full_before_the_last_nanosecond() {
        let rate = Rate::per_second(3);
        // A third of a token a little over every 333 ms: 3 tokens at exactly 1 s.
        let mut filling = Ledger::new(0, 0);
        filling.advance_capped(SECOND, rate, 3);
        assert_eq!((filling.tokens(), filling.fraction), (3, 0));
        // At 2 capacity it was full at 666,666,667 ns: capped to the part.
        let mut full_before = Ledger::new(0, 0);
        full_before.advance_capped(SECOND, rate, 2);
        assert_eq!((full_before.tokens(), full_before.fraction), (2, 0));
        // 1 token at 333,333,334 ns, with 2 parts of 1e9 over: full only at that
        // nanosecond, so what it added stays.
        let mut at_the_instant = Ledger::new(0, 0);
        at_the_instant.advance_capped(333_333_334, rate, 1);
        assert_eq!((at_the_instant.tokens(), at_the_instant.fraction), (1, 2));
        // Already above the capacity: capped as soon as time passes, not before.
        at_the_instant.advance_capped(333_333_334, rate, 1);
        assert_eq!(at_the_instant.fraction, 2);
        at_the_instant.advance_capped(333_333_335, rate, 1);
        assert_eq!((at_the_instant.tokens(), at_the_instant.fraction), (1, 0));
        // Below the capacity, it is the plain advance.
        let mut plain = Ledger::new(0, 0);
        plain.advance(SECOND / 2, rate);
        let mut capped = Ledger::new(0, 0);
        capped.advance_capped(SECOND / 2, rate, 2);
        assert_eq!(plain, capped);
    }

    #[test]
    fn a_rate_change_keeps_the_fraction_rounded_down() {
        let mut ledger = Ledger::new(0, 0);
        ledger.advance(SECOND / 2, Rate::per_second(1));
        ledger.change_rate(Rate::per_second(1), Rate::new(1, Duration::from_secs(2)));
        // Half a token is 1e9 parts of 2e9 in the new unit: one more second finishes it.
        ledger.advance(SECOND / 2 + SECOND, Rate::new(1, Duration::from_secs(2)));
        assert_eq!(ledger.tokens(), 1);
        assert_eq!(ledger.fraction, 0);
    }
}
