//! A shard of [`Keyed`](crate::Keyed): a map from keys to their limiters, each held
//! either as its state word alone (compact) or whole, and the sweep that forgets idle
//! keys, folds whole limiters back into words, and moves the words' base.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::keyed::compact::Compact;
use crate::limiter::Limiter;
use crate::sync::AtomicUsize;

/// A shard is never swept automatically while it holds fewer keys than this: sweeping
/// a handful of keys would cost more in locking than it saves in memory.
pub(super) const SWEEP_FLOOR: usize = 64;

/// How a key's limiter is held.
pub(super) enum Slot<L> {
    /// Its state word, while nobody waits on it and nobody holds it: 8 bytes in the map.
    Compact(u64),
    /// The limiter itself: someone waits on it or holds a handle to it, its settings are
    /// no longer the template's, or its type has no compact form.
    Full(Arc<L>),
}

pub(super) struct Shard<K, L> {
    pub(super) limiters: HashMap<K, Slot<L>>,
    /// The size at which a new key first sweeps the shard.
    pub(super) sweep_at: usize,
    /// The instant (on the template's clock) the compact words of a bucket count from.
    pub(super) base: u64,
}

impl<K, L> Shard<K, L> {
    pub(super) fn new() -> Shard<K, L> {
        Shard {
            limiters: HashMap::new(),
            sweep_at: SWEEP_FLOOR,
            base: 0,
        }
    }
}

impl<K: Hash + Eq, L: Limiter> Shard<K, L> {
    /// The instant to read compact words at: now, after moving the base if now is past
    /// what words counted from it hold.
    #[inline]
    pub(super) fn now(&mut self, compact: &Compact<L>) -> u64 {
        let now = compact.now();
        if compact.must_rebase(now, self.base) {
            self.rebase(compact, now);
        }
        now
    }

    /// Counts every compact word from `now` instead of the old base. Costs a look at each
    /// key, once in a base's lifetime (a second at the very least, see `units.rs`; years
    /// at common rates).
    #[cold]
    fn rebase(&mut self, compact: &Compact<L>, now: u64) {
        let from = std::mem::replace(&mut self.base, now);
        for slot in self.limiters.values_mut() {
            if let Slot::Compact(word) = slot {
                *word = compact.rebase(*word, from, now);
            }
        }
    }

    /// Forgets the idle keys nobody else holds, folds whole limiters that may be words
    /// again, sets when the shard is next swept, gives back spare room, and returns how
    /// many keys it forgot (each uncounted from `keys` as it goes, so that the count stays
    /// exact should a limiter's `is_idle` panic).
    pub(super) fn sweep(&mut self, compact: Option<&Compact<L>>, keys: &AtomicUsize) -> usize {
        let before = self.limiters.len();
        let compact = compact.map(|compact| (compact, self.now(compact)));
        let base = self.base;
        let forget = |slot: &mut Slot<L>| match slot {
            Slot::Compact(word) => {
                compact.is_some_and(|(compact, now)| compact.is_idle(*word, now, base))
            }
            Slot::Full(limiter) => {
                // Nobody else holds it (checked first: it is cheaper, and it cannot change
                // while the shard is locked, since a new holder needs the lock).
                if Arc::strong_count(limiter) != 1 {
                    return false;
                }
                // A fresh limiter would behave the same.
                if limiter.is_idle() {
                    return true;
                }
                let folded = compact.and_then(|(compact, now)| compact.fold(limiter, now, base));
                if let Some(word) = folded {
                    *slot = Slot::Compact(word);
                }
                false
            }
        };
        self.limiters.retain(|_, slot| {
            let forgotten = forget(slot);
            if forgotten {
                keys.fetch_sub(1, Ordering::Relaxed);
            }
            !forgotten
        });
        let kept = self.limiters.len();
        self.sweep_at = kept.saturating_mul(2).max(SWEEP_FLOOR);
        // Shrinking costs O(kept) and halves the room at least, so it is paid for by the
        // growth before it.
        if self.limiters.capacity() > self.sweep_at.saturating_mul(2) {
            self.limiters.shrink_to(self.sweep_at);
        }
        before - kept
    }
}
