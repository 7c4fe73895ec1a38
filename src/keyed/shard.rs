//! A shard of [`Keyed`](crate::Keyed): a table from keys to their entries, each a key's
//! state word alone (compact) or the place of its whole limiter, and the sweep that
//! forgets idle keys, folds whole limiters back into words, and moves the words' base.
//!
//! An entry is one `u64` beside its key, so that a key of 8 bytes takes 16 in the table,
//! as in governor's: a compact word never has its top bit set (a bucket's counts below
//! 2<sup>63</sup> units; a window's top bit marks a composite deciding, which no word
//! knows), and an entry with it set
//! is the index of a whole limiter in the shard's [`Wholes`].

use std::borrow::Borrow;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use hashbrown::HashTable;

use crate::keyed::compact::Compact;
use crate::limiter::{KeyTemplate, Limiter};
use crate::sync::AtomicUsize;

/// A shard is never swept automatically while it holds fewer keys than this: sweeping
/// a handful of keys would cost more in locking than it saves in memory.
pub(super) const SWEEP_FLOOR: usize = 64;

/// The top bit of an entry: the rest is the index of a whole limiter.
const WHOLE: u64 = 1 << 63;

pub(super) struct Shard<K, L> {
    /// Keys and their entries, found by the hash the key's shard was picked with.
    entries: HashTable<(K, u64)>,
    wholes: Wholes<L>,
    /// The size at which a new key first sweeps the shard.
    pub(super) sweep_at: usize,
    /// The instant (on the template's clock) the compact words of a bucket count from.
    base: u64,
}

/// The whole limiters of a shard's keys, at the indices their entries name. Freed places
/// are used again; the list is given back once no key of the shard is held whole.
struct Wholes<L> {
    limiters: Vec<Option<Arc<L>>>,
    free: Vec<usize>,
    /// Whole limiters kept so far: for tests to see when one is made.
    #[cfg(all(test, not(loom)))]
    made: usize,
}

impl<L> Wholes<L> {
    /// Keeps `limiter`, and returns the entry that names it.
    fn add(&mut self, limiter: Arc<L>) -> u64 {
        #[cfg(all(test, not(loom)))]
        {
            self.made += 1;
        }
        let index = self.free.pop().unwrap_or(self.limiters.len());
        if index == self.limiters.len() {
            self.limiters.push(None);
        }
        self.limiters[index] = Some(limiter);
        WHOLE | index as u64
    }

    /// The limiter `entry` names, if it names one.
    fn get(&self, entry: u64) -> Option<&Arc<L>> {
        if entry & WHOLE == 0 {
            return None;
        }
        self.limiters.get(index(entry))?.as_ref()
    }

    /// [`get`](Wholes::get), to check whether the table's handle is the only one.
    fn get_mut(&mut self, entry: u64) -> Option<&mut Arc<L>> {
        if entry & WHOLE == 0 {
            return None;
        }
        self.limiters.get_mut(index(entry))?.as_mut()
    }

    /// Drops the limiter `entry` names.
    fn remove(&mut self, entry: u64) {
        if let Some(Some(_)) = self.limiters.get_mut(index(entry)).map(Option::take) {
            self.free.push(index(entry));
        }
        if self.free.len() == self.limiters.len() {
            self.limiters = Vec::new();
            self.free = Vec::new();
        }
    }
}

/// Whether nothing but the table refers to `limiter`: no other `Arc` of it, no `Weak`
/// that could make one without the lock, and no clone of the limiter inside (or future
/// made from one) that shares its state ([`KeyTemplate::is_shared`]). It stays so while
/// the shard is locked: a new `Arc` is cloned only under the lock, and a clone of the
/// limiter only from an `Arc`. `Arc::get_mut` checks the first two at once (a strong
/// count of 1 read beside a weak count of 0 could miss a `Weak` upgraded and dropped in
/// between) and acquires what the other handles' holders did to the limiter, so the
/// fold or the sweep that reads it next sees it all.
#[inline]
fn held_by_table_alone<L: KeyTemplate>(limiter: &mut Arc<L>) -> bool {
    Arc::get_mut(limiter).is_some_and(|limiter| !limiter.is_shared())
}

fn index(entry: u64) -> usize {
    // Indices are those of a `Vec`: they fit.
    (entry & !WHOLE) as usize
}

/// Which form a shard's keys are in, for tests.
#[cfg(all(test, not(loom)))]
pub(super) struct Forms {
    /// Keys held whole now.
    pub(super) wholes: usize,
    /// Whole limiters made so far (from words, or for keys that have no word).
    pub(super) made: usize,
    /// The instant words count from.
    pub(super) base: u64,
}

/// A compact form, and the instant and base its words are read at under a shard's lock.
pub(super) struct At<'a, L> {
    pub(super) compact: &'a Compact<L>,
    pub(super) now: u64,
    pub(super) base: u64,
    /// What words are read against now (see [`OneWord::reading`](crate::limiter::OneWord::reading)).
    pub(super) reading: u64,
}

impl<'a, L: Limiter> At<'a, L> {
    /// Where words counted from `base` are read now; `None` when now is past what they
    /// hold, and the shard must move its base first.
    #[inline(always)]
    pub(super) fn now(compact: &'a Compact<L>, base: u64) -> Option<At<'a, L>> {
        let now = compact.now();
        let reading = compact.reading(now, base)?;
        Some(At {
            compact,
            now,
            base,
            reading,
        })
    }
}

/// A key's entry, with the whole limiters of its shard beside it.
pub(super) struct Slot<'s, L> {
    entry: &'s mut u64,
    wholes: &'s mut Wholes<L>,
    /// The shard's base, which its words count from.
    pub(super) base: u64,
}

impl<L: KeyTemplate> Slot<'_, L> {
    /// The key's word, first folding its whole limiter into one if it may be one again:
    /// the map holds the only handle on it, nobody waits on it, and its settings are the
    /// template's. `None` while it is held whole.
    #[inline]
    pub(super) fn word(&mut self, at: &At<'_, L>) -> Option<&mut u64> {
        if let Some(limiter) = self.wholes.get_mut(*self.entry) {
            if !held_by_table_alone(limiter) {
                return None;
            }
            let word = at.compact.fold(limiter, at.now, at.base)?;
            self.wholes.remove(*self.entry);
            *self.entry = word;
        }
        Some(self.entry)
    }

    /// The key's whole limiter, unfolding its word into one if it is a word.
    pub(super) fn whole(&mut self, at: Option<&At<'_, L>>) -> Arc<L> {
        if let Some(limiter) = self.wholes.get(*self.entry) {
            return Arc::clone(limiter);
        }
        let limiter = match at {
            Some(at) => Arc::new(at.compact.unfold(*self.entry, at.now, at.base)),
            // Without a compact form every entry is added naming a whole limiter, and
            // none is ever folded.
            None => unreachable!("a shard holds words only for a template with a compact form"),
        };
        *self.entry = self.wholes.add(Arc::clone(&limiter));
        limiter
    }
}

impl<K, L> Shard<K, L> {
    pub(super) fn new() -> Shard<K, L> {
        Shard {
            entries: HashTable::new(),
            wholes: Wholes {
                limiters: Vec::new(),
                free: Vec::new(),
                #[cfg(all(test, not(loom)))]
                made: 0,
            },
            sweep_at: SWEEP_FLOOR,
            base: 0,
        }
    }
}

impl<K: Hash + Eq, L: KeyTemplate> Shard<K, L> {
    /// Keys held.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Keys held whole.
    pub(super) fn wholes(&self) -> usize {
        self.wholes.limiters.len() - self.wholes.free.len()
    }

    /// Which form the shard's keys are in: for tests.
    #[cfg(all(test, not(loom)))]
    pub(super) fn forms(&self) -> Forms {
        Forms {
            wholes: self.wholes(),
            made: self.wholes.made,
            base: self.base,
        }
    }

    /// Whether `key`, whose hash is `hash`, is held whole (`Some(true)`) or as a word
    /// (`Some(false)`); `None` when it is not held.
    #[cfg(all(test, not(loom)))]
    pub(super) fn is_whole<Q>(&self, hash: u64, key: &Q) -> Option<bool>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let (_, entry) = self.entries.find(hash, |(held, _)| held.borrow() == key)?;
        Some(entry & WHOLE != 0)
    }

    /// Where compact words are read now, after moving the base if now is past what words
    /// counted from it hold; `None` without a compact form.
    #[inline(always)]
    pub(super) fn at<'a>(&mut self, compact: Option<&'a Compact<L>>) -> Option<At<'a, L>> {
        let compact = compact?;
        if let Some(at) = At::now(compact, self.base) {
            return Some(at);
        }
        self.rebase(compact, compact.now());
        // A base that moved to a moment ago holds now: it lasts a second at least.
        At::now(compact, self.base)
    }

    /// Counts every compact word from `now` instead of the old base. Costs a look at each
    /// key, once in a base's lifetime (a second at the very least, see `gcra.rs`; years
    /// at common rates).
    #[cold]
    fn rebase(&mut self, compact: &Compact<L>, now: u64) {
        let from = std::mem::replace(&mut self.base, now);
        for (_, entry) in self.entries.iter_mut() {
            if *entry & WHOLE == 0 {
                *entry = compact.rebase(*entry, from, now);
            }
        }
    }

    /// The slot of `key`, whose hash is `hash`, and the key as it is held.
    #[inline]
    pub(super) fn get_mut<Q>(&mut self, hash: u64, key: &Q) -> Option<(&K, Slot<'_, L>)>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let (held, entry) = self
            .entries
            .find_mut(hash, |(held, _)| held.borrow() == key)?;
        let slot = Slot {
            entry,
            wholes: &mut self.wholes,
            base: self.base,
        };
        Some((&*held, slot))
    }

    /// Adds `key`, new, whose hash by `hasher` is `hash`: as the word `idle` of a fresh
    /// limiter, or else as `fresh`, a whole one.
    pub(super) fn insert(
        &mut self,
        hash: u64,
        key: K,
        fresh: Result<u64, Arc<L>>,
        hasher: &RandomState,
    ) {
        let entry = match fresh {
            Ok(word) => word,
            Err(limiter) => self.wholes.add(limiter),
        };
        (self.entries).insert_unique(hash, (key, entry), |(key, _)| hasher.hash_one(key));
    }

    /// Forgets the idle keys nobody else holds, folds whole limiters that may be words
    /// again, sets when the shard is next swept, gives back spare room, and returns how
    /// many keys it forgot (each uncounted from `keys` as it goes, so that the count stays
    /// exact should a limiter's `is_idle` panic).
    pub(super) fn sweep(
        &mut self,
        compact: Option<&Compact<L>>,
        keys: &AtomicUsize,
        hasher: &RandomState,
    ) -> usize {
        let before = self.entries.len();
        let at = self.at(compact);
        let Shard {
            entries, wholes, ..
        } = self;
        let mut forget = |entry: &mut u64| match wholes.get_mut(*entry) {
            None => at
                .as_ref()
                .is_some_and(|at| at.compact.is_idle_word(*entry, at.reading)),
            Some(limiter) => {
                // Nobody else holds it (checked first: it is cheaper).
                if !held_by_table_alone(limiter) {
                    return false;
                }
                // A fresh limiter would behave the same.
                if limiter.is_idle() {
                    wholes.remove(*entry);
                    return true;
                }
                let folded = at
                    .as_ref()
                    .and_then(|at| at.compact.fold(limiter, at.now, at.base));
                if let Some(word) = folded {
                    wholes.remove(*entry);
                    *entry = word;
                }
                false
            }
        };
        entries.retain(|(_, entry)| {
            let forgotten = forget(entry);
            if forgotten {
                keys.fetch_sub(1, Ordering::Relaxed);
            }
            !forgotten
        });
        let kept = entries.len();
        self.sweep_at = kept.saturating_mul(2).max(SWEEP_FLOOR);
        // Shrinking costs O(kept) and halves the room at least, so it is paid for by the
        // growth before it.
        if self.entries.capacity() > self.sweep_at.saturating_mul(2) {
            (self.entries).shrink_to(self.sweep_at, |(key, _)| hasher.hash_one(key));
        }
        before - kept
    }
}
