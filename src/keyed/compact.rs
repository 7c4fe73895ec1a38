//! How [`Keyed`](crate::Keyed) holds a key nobody waits on: as its limiter's state word
//! alone, the settings living once in the template. A [`TokenBucket`] of one limit whose
//! full bucket fits the word (see `bucket/compact.rs`) and a [`FixedWindow`] have such a
//! word; every other limiter, a user's own included, is always held whole.
//!
//! The limiter type is known only as `L: Limiter`, so the template is asked, once, whether
//! it is one of the two (`Any` downcasts): the `Limiter` trait, which users implement,
//! gains nothing.

use std::any::Any;
use std::marker::PhantomData;

use crate::bucket::compact::CompactBucket;
use crate::bucket::TokenBucket;
use crate::error::TryAcquireError;
use crate::limiter::{try_acquire_error, KeyTemplate, Limiter};
use crate::quota::{Decision, Quota};
use crate::window::FixedWindow;

/// The compact form of one template's keys.
pub(crate) struct Compact<L> {
    form: Form,
    limiter: PhantomData<fn() -> L>,
}

enum Form {
    Bucket(CompactBucket),
    /// The template itself: its settings and clock are every key's.
    Window(FixedWindow),
}

impl<L: Limiter> Compact<L> {
    /// The compact form of `template`'s keys, if its type and settings have one.
    pub(crate) fn of(template: &L) -> Option<Compact<L>> {
        let template: &dyn Any = template;
        let form = if let Some(bucket) = template.downcast_ref::<TokenBucket>() {
            Form::Bucket(CompactBucket::of(bucket)?)
        } else if let Some(window) = template.downcast_ref::<FixedWindow>() {
            Form::Window(window.fresh())
        } else {
            return None;
        };
        Some(Compact {
            form,
            limiter: PhantomData,
        })
    }

    /// The instant, on the template's clock, every word is read at.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        match &self.form {
            Form::Bucket(bucket) => bucket.now(),
            Form::Window(window) => window.now(),
        }
    }

    /// The word of a fresh limiter at `now`.
    pub(crate) fn idle_word(&self, now: u64) -> u64 {
        match &self.form {
            Form::Bucket(_) => CompactBucket::FULL,
            Form::Window(window) => window.idle_word(now),
        }
    }

    /// What words counted from `base` are read against at `now`: for a bucket, `now` in
    /// their units; for a window, `now`. `None` when `now` is past what words counted from
    /// `base` can hold: the shard must [`rebase`](Compact::rebase) every word first.
    #[inline]
    pub(crate) fn reading(&self, now: u64, base: u64) -> Option<u64> {
        match &self.form {
            Form::Bucket(bucket) => bucket.at(now, base),
            Form::Window(_) => Some(now),
        }
    }

    /// `word`, counted from the later base `to` instead of `from`.
    pub(crate) fn rebase(&self, word: u64, from: u64, to: u64) -> u64 {
        match &self.form {
            Form::Bucket(bucket) => bucket.rebase(word, from, to),
            Form::Window(_) => word,
        }
    }

    /// `try_acquire` on a key's `word`, as its limiter would decide it with nobody waiting,
    /// at the [`reading`](Compact::reading) of now.
    #[inline]
    pub(crate) fn try_acquire(
        &self,
        word: &mut u64,
        permits: u64,
        reading: u64,
    ) -> Result<(), TryAcquireError> {
        match &self.form {
            Form::Bucket(bucket) => bucket
                .try_take(word, permits, reading)
                .map_err(try_acquire_error),
            Form::Window(window) => window.try_acquire_word(word, permits, reading),
        }
    }

    /// The [`Quota`] of the limiter `word` stands for, at the [`reading`](Compact::reading)
    /// of now, as its limiter would report it with nobody waiting.
    #[inline]
    pub(crate) fn quota(&self, word: u64, reading: u64) -> Quota {
        match &self.form {
            Form::Bucket(bucket) => bucket.quota(word, reading),
            Form::Window(window) => window.quota_of_word(word, reading),
        }
    }

    /// [`try_acquire`](Compact::try_acquire) on a key's `word`, and the quota it leaves,
    /// read from the word it decided on at the same reading.
    #[inline]
    pub(crate) fn try_acquire_decision(
        &self,
        word: &mut u64,
        permits: u64,
        reading: u64,
    ) -> Decision {
        let result = self.try_acquire(word, permits, reading);
        Decision {
            result,
            quota: Some(self.quota(*word, reading)),
        }
    }

    /// `refund` on a key's `word`, as its limiter would with nobody waiting, at the
    /// [`reading`](Compact::reading) of now.
    pub(crate) fn refund(&self, word: &mut u64, permits: u64, reading: u64) {
        match &self.form {
            Form::Bucket(bucket) => bucket.refund(word, permits, reading),
            Form::Window(window) => window.refund_word(word, permits, reading),
        }
    }

    /// Whether the limiter `word` stands for is idle at the [`reading`](Compact::reading)
    /// of now.
    #[inline]
    pub(crate) fn is_idle(&self, word: u64, reading: u64) -> bool {
        match &self.form {
            Form::Bucket(bucket) => bucket.is_full(word, reading),
            Form::Window(window) => window.is_idle_word(word, reading),
        }
    }

    /// The limiter `word` stands for at `now`: the template's settings, holding exactly
    /// what the word holds.
    pub(crate) fn unfold(&self, word: u64, now: u64, base: u64) -> L {
        let unfolded = match &self.form {
            Form::Bucket(bucket) => as_limiter(bucket.unfold(word, now, base)),
            Form::Window(window) => as_limiter(window.with_word(word)),
        };
        unfolded.expect("a form is made only for its own limiter type")
    }

    /// The word `limiter` folds into at `now`, if it does: nobody waits on it and its
    /// settings are the template's. Its holder must be the only one.
    pub(crate) fn fold(&self, limiter: &L, now: u64, base: u64) -> Option<u64> {
        let limiter: &dyn Any = limiter;
        match &self.form {
            Form::Bucket(bucket) => bucket.fold(limiter.downcast_ref()?, now, base),
            Form::Window(window) => window.word_of(limiter.downcast_ref()?),
        }
    }
}

/// `limiter` as an `L`, when it is one.
fn as_limiter<L: 'static, T: 'static>(limiter: T) -> Option<L> {
    let mut slot = Some(limiter);
    let slot: &mut dyn Any = &mut slot;
    slot.downcast_mut::<Option<L>>()?.take()
}
