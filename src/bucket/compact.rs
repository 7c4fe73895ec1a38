//! A bucket as [`Keyed`](crate::Keyed) holds it for a key nobody waits on: one plain
//! `u64`, the limit's `empty_at` (see `gcra.rs`), guarded by the key's shard lock,
//! with the settings kept once for every key here. No `Arc`, no queue, no refill task.
//!
//! The word counts units since a base that its shard keeps and moves for all of its
//! words at once (see [`CompactBucket::rebase`]). It is the same arithmetic as the fast
//! path's word, so a compact key grants at the nanosecond the bucket would; a key that
//! must wait is unfolded into a bucket holding the same instant, and folded back once
//! nobody waits.

use crate::bucket::gcra::{Units, COMPACT};
use crate::bucket::handle::TokenBucket;
use crate::bucket::state::Settings;
use crate::clock::Clock;
use crate::error::TryAcquireError;
use crate::limiter::OneWord;
use crate::quota::Quota;
use crate::rate::Rate;

/// The settings every compact key of one template shares.
#[derive(Debug)]
pub(crate) struct CompactBucket {
    /// The template's units, with a base of 0: each call sets its shard's.
    units: Units,
    rate: Rate,
    queue_limit: Option<u64>,
    /// The template's clock: an unfolded bucket reads the same one, so instants carry
    /// over exactly.
    clock: Clock,
}

impl CompactBucket {
    /// The template's units counted from `base`.
    #[inline]
    fn from(&self, base: u64) -> Units {
        self.units.counted_from(base, self.units.at_base)
    }
}

impl OneWord for CompactBucket {
    type Limiter = TokenBucket;

    /// `None` when one word cannot hold `template`'s keys: several limits, or a full
    /// bucket worth more than 2<sup>61</sup> units (see
    /// [`Keyed`](crate::Keyed#how-a-key-is-held)).
    fn of(template: &TokenBucket) -> Option<CompactBucket> {
        if template.limit_count() != 1 {
            return None;
        }
        let (rate, capacity) = (template.rate(), template.capacity());
        let units = Units::new(rate, capacity, 0);
        (units.fits(COMPACT) && units.lasts(COMPACT)).then(|| CompactBucket {
            units,
            rate,
            queue_limit: template.queue_limit(),
            clock: template.clock().clone(),
        })
    }

    #[inline]
    fn now(&self) -> u64 {
        self.clock.now()
    }

    /// A full bucket's word, whatever the base: nothing owed.
    fn idle_word(&self, _now: u64) -> u64 {
        0
    }

    /// `now` in the units of words counted from `base`.
    #[inline]
    fn reading(&self, now: u64, base: u64) -> Option<u64> {
        self.from(base).in_word(now, COMPACT)
    }

    /// Units before the new base all mean "full", so they become 0; the rest shift exactly.
    fn rebase(&self, word: u64, from: u64, to: u64) -> u64 {
        let shift = u128::from(to.saturating_sub(from)) * u128::from(self.units.per_nanosecond);
        u64::try_from(u128::from(word).saturating_sub(shift)).expect("no larger than word")
    }

    #[inline]
    fn try_acquire_word(
        &self,
        word: &mut u64,
        tokens: u64,
        now_units: u64,
    ) -> Result<(), TryAcquireError> {
        // The base plays no part in taking: only in reading the clock.
        let units = &self.units;
        let empty_at = units
            .decide((*word).into(), tokens, now_units.into())
            .map_err(|refusal| units.error(refusal))?;
        *word = u64::try_from(empty_at).expect("at most now");
        Ok(())
    }

    #[inline]
    fn quota_of_word(&self, word: u64, now_units: u64) -> Quota {
        self.units.quota(word.into(), now_units.into())
    }

    /// Up to a full bucket, as the bucket's `refund` would.
    fn refund_word(&self, word: &mut u64, tokens: u64, now_units: u64) {
        let empty_at = (self.units).refund((*word).into(), tokens, now_units.into());
        *word = u64::try_from(empty_at).expect("at most the word");
    }

    /// Whether `word` is a full bucket at `now_units`.
    #[inline]
    fn is_idle_word(&self, word: u64, now_units: u64) -> bool {
        // Nothing owed from a full bucket's worth ago on: what `tokens` would find equal
        // to the capacity, without its division.
        u128::from(word) <= u128::from(now_units) - self.units.full()
    }

    /// The template's settings on its clock, holding exactly what the word holds.
    fn unfold(&self, word: u64, _now: u64, base: u64) -> TokenBucket {
        let settings = Settings::one_limit(self.rate, self.units.capacity, self.queue_limit);
        let resumed = (self.from(base), word.into());
        TokenBucket::resumed(&settings, self.clock.clone(), Some(resumed))
    }

    /// Also: it is open, and its settings are still the template's (a rate or capacity
    /// changed through a handle from [`Keyed::get`](crate::Keyed::get) keeps it a
    /// bucket). The limit's instant is re-counted from the shard's base, exactly: the
    /// units are the same.
    fn fold(&self, bucket: &TokenBucket, now: u64, base: u64) -> Option<u64> {
        if bucket.clock() != &self.clock || bucket.limit_count() != 1 {
            return None;
        }
        bucket
            .read_idle_limit(now, |limit, now| {
                let units = self.from(base);
                if limit.rate != self.rate || limit.units.capacity != units.capacity {
                    return None;
                }
                units.in_word(now, COMPACT)?;
                let empty_at = limit.units.convert(limit.empty_at, now, &units);
                u64::try_from(empty_at)
                    .ok()
                    .filter(|&word| word < COMPACT.horizon)
            })
            .flatten()
    }
}
