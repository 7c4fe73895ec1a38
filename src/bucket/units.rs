//! The units a bucket's state is counted in when it is one word: the fast path's word
//! (`fast.rs`) and a compact key of `Keyed` (`compact.rs`) share this arithmetic, so
//! both grant at the nanosecond the ledger behind the lock would.
//!
//! Divide the rate's amount and period by their greatest common divisor: then one
//! nanosecond is worth `per_nanosecond` *units* and one token `per_token` units, both
//! whole numbers. A word holds `empty_at`, the instant, in units counted from a `base`
//! instant, at which the bucket would hold nothing. How far units may run from the base
//! is the word's [`Span`].

use std::time::Duration;

use crate::bucket::ledger::Ledger;
use crate::error::TryTakeError;
use crate::permits::{screen, Screened, TooLarge};
use crate::quota::Quota;
use crate::rate::{gcd, Rate};

/// Why a word refuses to take tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    TooLarge(TooLarge),
    /// The tokens are not there yet: `short` units are missing.
    TooEarly {
        short: u64,
    },
}

/// How far a word's units may run: a word with flag bits beside its field holds less
/// than one that is all field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    /// Units since the base stay below this, so that a grant's end (now plus at most a
    /// capacity's worth) stays below the field's top.
    horizon: u64,
    /// The most a full bucket may be worth, in units, for the word to hold it.
    max_full: u64,
    /// Units must take at least this many nanoseconds to run through half the horizon,
    /// or the word's owner would spend its time moving the base (or, for the fast path,
    /// the word would be spent almost at once: see `fast.rs`).
    min_base_lifetime: u64,
}

/// The fast path's word: 62 bits beside the lock and record bits. Its units never start again from a
/// lower value (see `fast.rs`), so its horizon is the word's whole life.
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

/// The units a bucket's word counts in, and the instant they count from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Units {
    pub(crate) per_nanosecond: u64,
    pub(crate) per_token: u64,
    pub(crate) capacity: u64,
    /// The nanosecond (on the bucket's clock) units are counted from.
    pub(crate) base: u64,
    /// Units at `base`: at least a full bucket's worth, so that `empty_at` of a full
    /// bucket is never negative. A compact key's are exactly that; the fast path's word
    /// raises them as it changes settings (see `fast.rs`).
    pub(crate) at_base: u64,
    pub(crate) span: Span,
}

impl Units {
    /// The units for `rate` and `capacity` that hold `fraction` (parts of a token in the
    /// rate's own period) exactly, or `None` when a word of `span` cannot hold them.
    ///
    /// The divisor divides the fraction too: a rate change can leave a fraction that
    /// the rate's own divisor does not divide, and every later change of it (whole tokens,
    /// and `amount` parts a nanosecond) keeps that remainder until the bucket is full.
    pub(crate) fn new(
        rate: Rate,
        capacity: u64,
        base: u64,
        fraction: u128,
        span: Span,
    ) -> Option<Units> {
        let period = u64::try_from(rate.period_nanos()).ok()?;
        let fraction = u64::try_from(fraction).ok()?;
        let divisor = gcd(gcd(rate.amount().into(), period.into()), fraction.into());
        let divisor = u64::try_from(divisor).expect("at most the amount");
        let per_token = period / divisor;
        let full = capacity.checked_mul(per_token)?;
        let units = Units {
            per_nanosecond: rate.amount() / divisor,
            per_token,
            capacity,
            base,
            at_base: full,
            span,
        };
        let lifetime = (span.horizon / 2) / units.per_nanosecond;
        (full <= span.max_full && lifetime >= span.min_base_lifetime).then_some(units)
    }

    /// Whether units from the base on stay inside the horizon for at least the span's
    /// `min_base_lifetime`.
    pub(crate) fn lasts(&self) -> bool {
        let left = self.span.horizon.saturating_sub(self.at_base);
        left / self.per_nanosecond >= self.span.min_base_lifetime
    }

    /// A full bucket, in units.
    #[inline]
    pub(crate) fn full(&self) -> u64 {
        self.capacity * self.per_token
    }

    /// `now` in units: since the base, plus [`at_base`](Units::at_base). `None` past
    /// the horizon: the base must move.
    #[inline]
    pub(crate) fn at(&self, now: u64) -> Option<u64> {
        now.saturating_sub(self.base)
            .checked_mul(self.per_nanosecond)?
            .checked_add(self.at_base)
            .filter(|&units| units < self.span.horizon)
    }

    /// `try_take` on a word holding `empty_at`, at `now_units`, with nobody waiting: `Ok`
    /// with the word's new `empty_at` (the same for zero tokens), or why not. The fast
    /// path's word and a compact key decide with this one piece of arithmetic.
    #[inline(always)]
    pub(crate) fn decide(
        &self,
        empty_at: u64,
        tokens: u64,
        now_units: u64,
    ) -> Result<u64, Refusal> {
        if screen(tokens, self.capacity).map_err(Refusal::TooLarge)? == Screened::Nothing {
            return Ok(empty_at);
        }
        let from = empty_at.max(now_units - self.full());
        // `tokens` is at most the capacity, so this stays below the field's top.
        let end = from + tokens * self.per_token;
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

    /// The room at `now_units`, in units: a full bucket less what a word holding
    /// `empty_at` holds.
    #[inline]
    pub(crate) fn room(&self, empty_at: u64, now_units: u64) -> u64 {
        (empty_at + self.full()).saturating_sub(now_units)
    }

    /// Whole tokens held at `now_units`.
    pub(crate) fn tokens(&self, empty_at: u64, now_units: u64) -> u64 {
        let from = empty_at.max(now_units - self.full());
        now_units.saturating_sub(from) / self.per_token
    }

    /// The [`Quota`] of a word holding `empty_at`, at `now_units`: its whole tokens (the
    /// fraction of the next dropped), and how long until it is full, rounded up to the
    /// nanosecond so that it is never early.
    #[inline]
    pub(crate) fn quota(&self, empty_at: u64, now_units: u64) -> Quota {
        let from = empty_at.max(now_units - self.full());
        // What is missing from a full bucket: the units from a full bucket's worth ago
        // up to `from`.
        let missing = from - (now_units - self.full());
        Quota {
            remaining: now_units.saturating_sub(from) / self.per_token,
            full_after: self.wait(missing),
        }
    }

    /// The `empty_at` of a word holding `empty_at` once `tokens` are given back at
    /// `now_units`: never more than a full bucket, as the ledger's refund caps.
    pub(crate) fn refund(&self, empty_at: u64, tokens: u64, now_units: u64) -> u64 {
        let full_since = now_units - self.full();
        let from = empty_at.max(full_since);
        from.saturating_sub(tokens.saturating_mul(self.per_token))
            .max(full_since)
    }

    /// Nanoseconds until `short` more units have accrued, rounded up: never early.
    pub(crate) fn wait(&self, short: u64) -> Duration {
        Duration::from_nanos(short.div_ceil(self.per_nanosecond))
    }

    /// The ledger the word's `empty_at` is worth at `now` (or, if a racing taker already
    /// took tokens accrued after `now`, at the first nanosecond that leaves none owed).
    pub(crate) fn ledger(&self, empty_at: u64, now: u64, rate: Rate) -> Ledger {
        let now = now.max(self.base);
        let per_nanosecond = u128::from(self.per_nanosecond);
        let now_units = u128::from(now - self.base) * per_nanosecond + u128::from(self.at_base);
        let from = u128::from(empty_at).max(now_units - u128::from(self.full()));
        let (last, held) = match now_units.checked_sub(from) {
            Some(held) => (now, held),
            None => {
                let owed = from - now_units;
                let wait = owed.div_ceil(per_nanosecond);
                // `owed` is below 2^63 (the field's top), and so is `wait`: it fits. At
                // that instant less than a nanosecond's worth is held, which at a fast
                // rate can pass a small capacity: capped, as observing it would.
                let held = (wait * per_nanosecond - owed).min(u128::from(self.full()));
                (now + wait as u64, held)
            }
        };
        let per_token = u128::from(self.per_token);
        // The ledger counts a token's parts in the rate's own period, not reduced.
        let scale = rate.period_nanos() / per_token;
        let tokens = u64::try_from(held / per_token).expect("at most the capacity");
        Ledger::from_parts(tokens, (held % per_token) * scale, last)
    }

    /// `empty_at` for `ledger`, whose tokens are at most the capacity, or `None` when its
    /// instant is past this base's horizon (or before the base).
    pub(crate) fn empty_at(&self, ledger: &Ledger, rate: Rate) -> Option<u64> {
        if ledger.last() < self.base {
            return None;
        }
        let now_units = self.at(ledger.last())?;
        let scale = rate.period_nanos() / u128::from(self.per_token);
        // `Units::new` made the unit divide the fraction: this is exact.
        let fraction = u64::try_from(ledger.fraction() / scale).expect("below one token");
        let held =
            (ledger.tokens().min(self.capacity) * self.per_token + fraction).min(self.full());
        Some(now_units - held)
    }
}
