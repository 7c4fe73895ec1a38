//! A bucket as [`Keyed`](crate::Keyed) holds it for a key nobody waits on: one plain
//! `u64`, the fast path's `empty_at` (see `units.rs`), guarded by the key's shard lock,
//! with the settings kept once for every key here. No `Arc`, no queue, no refill task.
//!
//! The word counts units since a base that its shard keeps and moves for all of its
//! words at once (see [`CompactBucket::rebase`]). It is the same arithmetic as the fast
//! path's word, so a compact key grants at the nanosecond the bucket would; a key that
//! must wait is unfolded into a bucket holding the same ledger, and folded back once
//! nobody waits.

use crate::bucket::handle::TokenBucket;
use crate::bucket::state::Settings;
use crate::bucket::units::{Units, COMPACT};
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
        Some(CompactBucket {
            units: Units::new(rate, capacity, 0, 0, COMPACT)?,
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
        Units { base, ..self.units }.at(now)
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
        *word = units
            .decide(*word, tokens, now_units)
            .map_err(|refusal| units.error(refusal))?;
        Ok(())
    }

    #[inline]
    fn quota_of_word(&self, word: u64, now_units: u64) -> Quota {
        self.units.quota(word, now_units)
    }

    /// Up to a full bucket, as the bucket's `refund` would.
    fn refund_word(&self, word: &mut u64, tokens: u64, now_units: u64) {
        *word = self.units.refund(*word, tokens, now_units);
    }

    /// Whether `word` is a full bucket at `now_units`.
    #[inline]
    fn is_idle_word(&self, word: u64, now_units: u64) -> bool {
        // Nothing owed from a full bucket's worth ago on: what `tokens` would find equal
        // to the capacity, without its division.
        word <= now_units - self.units.full()
    }

    /// The template's settings on its clock, holding exactly what the word holds.
    fn unfold(&self, word: u64, now: u64, base: u64) -> TokenBucket {
        let ledger = Units { base, ..self.units }.ledger(word, now, self.rate);
        let settings = Settings::one_limit(self.rate, self.units.capacity, self.queue_limit);
        TokenBucket::resumed(&settings, self.clock.clone(), Some(ledger))
    }

    /// Also: it is open, its settings are still the template's (a rate or capacity
    /// changed through a handle from [`Keyed::get`](crate::Keyed::get) keeps it a
    /// bucket), and its ledger fits the word.
    fn fold(&self, bucket: &TokenBucket, now: u64, base: u64) -> Option<u64> {
        if bucket.clock() != &self.clock || bucket.limit_count() != 1 {
            return None;
        }
        bucket
            .read_idle_limit(now, |limit| {
                if limit.rate != self.rate || limit.capacity != self.units.capacity {
                    return None;
                }
                // A fraction left by a rate changed and changed back may need finer units
                // than the template's: then the word cannot hold it exactly.
                let units = Units::new(
                    limit.rate,
                    limit.capacity,
                    base,
                    limit.ledger.fraction(),
                    COMPACT,
                )?;
                (units == Units { base, ..self.units })
                    .then(|| units.empty_at(&limit.ledger, limit.rate))?
            })
            .flatten()
    }
}
