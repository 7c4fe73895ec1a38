//! Where every call of a [`Keyed`] begins: its key's slot, found under its shard's lock
//! (or added, within [`max_keys`](crate::KeyedBuilder::max_keys), after a sweep for room
//! if need be), with the reading of the clock its word is decided at; and the sweeps
//! that forget idle keys (see [the memory bound](Keyed#the-memory-bound)).

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, TryLockError};

use crate::error::{TooManyKeys, TryAcquireError};
use crate::keyed::compact::Compact;
use crate::keyed::handle::{Keyed, ShardLock};
use crate::keyed::shard::{At, Shard, Slot};
use crate::limiter::KeyTemplate;
use crate::observe::Class;
use crate::sync::{AtomicUsize, MutexGuard};

/// After a sweep for room, the next one waits this many times as long as it took.
const QUIET_FACTOR: u64 = 9;

/// Where a call stands once its key's slot was looked at under the shard's lock.
pub(super) enum Step<L, D = Result<(), TryAcquireError>> {
    /// Decided on the key's word.
    Decided(D),
    /// To be asked of the key's whole limiter, with the lock released.
    Call(Arc<L>),
}

impl<K: Hash + Eq, L: KeyTemplate> Keyed<K, L> {
    /// Forgets every key whose limiter is [idle](KeyTemplate::is_idle) and held by nobody
    /// else (no [`acquire`](Keyed::acquire) waiting in its line, no `Arc` from
    /// [`get`](Keyed::get) or [`get_or_insert`](Keyed::get_or_insert); an `acquire` not yet polled, or
    /// served on the key's word, holds nothing),
    /// and returns how many it forgot. Their memory is freed, and the maps give back their
    /// spare room. Whole limiters held by nobody else, that nobody waits on and whose
    /// settings are the template's, fold back into their words (see
    /// [how a key is held](Keyed#how-a-key-is-held)).
    ///
    /// Looks at every key, one shard at a time, so the other shards are served meanwhile.
    /// Keys are also forgotten automatically as new ones come (see
    /// [the memory bound](Keyed#the-memory-bound)); call this from a periodic task to free memory in
    /// quiet periods too.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{Keyed, Rate, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let per_key: Keyed<u32, TokenBucket> = Keyed::new(TokenBucket::new(Rate::per_second(1), 1)?);
    /// for key in 0..100 {
    ///     per_key.try_acquire(&key, 1)?;
    /// }
    /// assert_eq!(per_key.retain_recent(), 0); // every bucket is refilling
    /// tokio::time::advance(Duration::from_secs(1)).await;
    /// assert_eq!(per_key.retain_recent(), 100); // every bucket is full again
    /// assert!(per_key.is_empty());
    /// # Ok(())
    /// # }
    /// ```
    pub fn retain_recent(&self) -> usize {
        self.inner
            .shards
            .iter()
            .map(|shard| self.sweep(&mut lock(shard)))
            .sum()
    }

    /// Runs `visit` on `key`'s slot, added if the key is new, under its shard's lock, and
    /// tells the key's class (see `observe/keyed.rs`); refuses a new key for which no room
    /// could be made. `hash` is the key's.
    pub(super) fn with_slot<Q, R>(
        &self,
        hash: u64,
        key: &Q,
        mut visit: impl FnOnce(Slot<'_, L>, Option<&At<'_, L>>) -> R,
    ) -> Result<(R, Class), TooManyKeys>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // Twice at most: at the bound, make room, then try once more (another thread may
        // have made room meanwhile, or added this very key). One call of `visit` in the
        // code, so that it is inlined.
        for attempt in 0..2 {
            let mut shard = self.shard(hash);
            visit = match self.visit_or_add(&mut shard, hash, key, visit) {
                Ok(visited) => return Ok(visited),
                Err(visit) => visit,
            };
            drop(shard);
            if attempt == 0 {
                self.sweep_for_room();
            }
        }
        Err(TooManyKeys {
            max_keys: self.inner.max_keys.unwrap_or(usize::MAX),
        })
    }

    /// Runs `visit` on `key`'s slot in `shard`, added if new, with the key's class; hands
    /// `visit` back when the key is new and there is no room for it. `hash` is the key's.
    #[inline(always)]
    fn visit_or_add<Q, R, V>(
        &self,
        shard: &mut Shard<K, L>,
        hash: u64,
        key: &Q,
        visit: V,
    ) -> Result<(R, Class), V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        V: FnOnce(Slot<'_, L>, Option<&At<'_, L>>) -> R,
    {
        let compact = self.inner.compact.as_deref();
        // Where words are read, when already known: the clock is read once a call.
        let mut known: Option<Option<At<'_, L>>> = None;
        // At most twice: a key found past its base's horizon, or added, is found again.
        loop {
            // The key first, then the clock: the clock is read while the key's place in
            // the table (a cache miss among many keys) is still being fetched.
            if let Some((held, slot)) = shard.get_mut(hash, key) {
                let at = match known.take() {
                    Some(at) => at.map(Some),
                    None => compact.map(|compact| At::now(compact, slot.base)),
                };
                // `Some(None)`: now is past what words counted from the base hold.
                if at.as_ref().map_or(true, Option::is_some) {
                    let class = self.inner.observer.class_of(held);
                    return Ok((visit(slot, at.flatten().as_ref()), class));
                }
                known = Some(shard.at(compact));
                continue;
            }
            match self.add(shard, hash, key) {
                Some(at) => known = Some(at),
                None => return Err(visit),
            }
        }
    }

    /// `on_word` of `key`'s word, under its shard's lock, when the key is held as one (or
    /// folds into one now); else `whole` of its whole limiter, with the lock released.
    /// `None` when the key is not held: no key is added.
    pub(super) fn with_held<Q, R>(
        &self,
        key: &Q,
        on_word: impl FnOnce(&Compact<L>, &mut u64, u64) -> R,
        whole: impl FnOnce(&L) -> R,
    ) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // The shard's lock is released as `visit_held` returns.
        match self.visit_held(key, |slot, at| step(slot, at, on_word))? {
            Step::Decided(decided) => Some(decided),
            Step::Call(limiter) => Some(whole(&limiter)),
        }
    }

    /// Runs `visit` on `key`'s slot under its shard's lock, if the key is held; `None`,
    /// adding no key, if not.
    pub(super) fn visit_held<Q, R>(
        &self,
        key: &Q,
        visit: impl FnOnce(Slot<'_, L>, Option<&At<'_, L>>) -> R,
    ) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        let mut shard = self.shard(hash);
        let at = shard.at(self.inner.compact.as_deref());
        let (_, slot) = shard.get_mut(hash, key)?;
        Some(visit(slot, at.as_ref()))
    }

    /// Adds `key`, new, to `shard` (sweeping it first if it is due), counting one more key
    /// unless that would pass `max_keys`, and returns where its words are read now; `None`
    /// when there is no room for it.
    #[cold]
    fn add<Q>(&self, shard: &mut Shard<K, L>, hash: u64, key: &Q) -> Option<Option<At<'_, L>>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if shard.len() >= shard.sweep_at {
            self.sweep(shard);
        }
        let bound = self.inner.max_keys.unwrap_or(usize::MAX);
        // A compare-and-swap, so that racing threads can never pass the bound together.
        let keys = &self.inner.keys;
        let counted = keys.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |keys| {
            (keys < bound).then_some(keys + 1)
        });
        let reservation = counted.ok().map(|_| Reservation(keys))?;
        let at = shard.at(self.inner.compact.as_deref());
        let fresh = match &at {
            Some(at) => Ok(at.compact.idle_word(at.now)),
            None => Err(Arc::new(self.inner.template.fresh())),
        };
        shard.insert(hash, key.to_owned(), fresh, &self.inner.hasher);
        // Added: the key stays counted.
        std::mem::forget(reservation);
        Some(at)
    }

    /// Forgets the idle keys of every shard, unless a sweep for room already runs or the
    /// last one ended too recently (see [the memory bound](Keyed#the-memory-bound)).
    fn sweep_for_room(&self) {
        let mut next_sweep = match self.inner.next_room_sweep.try_lock() {
            Ok(next_sweep) => next_sweep,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return,
        };
        let started = self.inner.clock.now();
        if started < *next_sweep {
            return;
        }
        self.retain_recent();
        let ended = self.inner.clock.now();
        let took = ended.saturating_sub(started);
        // The `+ 1`: under a paused clock a sweep takes no time, and sweeping again before
        // the clock moves would find nothing new.
        *next_sweep = ended
            .saturating_add(took.saturating_mul(QUIET_FACTOR))
            .saturating_add(1);
    }

    /// The hash of `key`: it picks the key's shard and its place in the shard's table.
    #[inline]
    pub(super) fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.inner.hasher.hash_one(key)
    }

    /// The locked shard of the key whose hash is `hash`.
    #[inline]
    pub(super) fn shard(&self, hash: u64) -> MutexGuard<'_, Shard<K, L>> {
        // The number of shards is a power of two, at most 2^16: the mask keeps bits 32 to
        // 47 of the hash, which the shard's table uses neither for a key's place (its low
        // bits) nor for its tag (the top 7). Picked from those, the keys of one shard
        // would share them and crowd its table.
        let index = (hash >> 32) as usize & (self.inner.shards.len() - 1);
        lock(&self.inner.shards[index])
    }

    /// Which form each shard's keys are in.
    #[cfg(all(test, not(loom)))]
    pub(super) fn forms(&self) -> Vec<crate::keyed::shard::Forms> {
        let shards = self.inner.shards.iter();
        shards.map(|shard| lock(shard).forms()).collect()
    }

    /// Sweeps `shard` (see [`Shard::sweep`]).
    pub(super) fn sweep(&self, shard: &mut Shard<K, L>) -> usize {
        let inner = &self.inner;
        let forgotten = shard.sweep(inner.compact.as_deref(), &inner.keys, &inner.hasher);
        inner.observer.forgot(forgotten);
        forgotten
    }

    /// Lets go of `limiter`, a handle on the whole limiter of `key` (whose hash is
    /// `hash`), and folds the key back into its word if that was the last handle besides
    /// the table's and its line is empty.
    pub(super) fn release(&self, hash: u64, key: &K, limiter: Arc<L>) {
        let Some(compact) = self.inner.compact.as_deref() else {
            // Without a compact form nothing folds.
            return;
        };
        let mut shard = self.shard(hash);
        // Let go under the lock: of handles let go at once, the last to take the lock
        // finds itself the last and folds. The table holds another handle, so the
        // limiter is not dropped here.
        drop(limiter);
        let at = shard.at(Some(compact));
        if let (Some(at), Some((_, mut slot))) = (at, shard.get_mut(hash, key)) {
            slot.word(&at);
        }
    }
}

/// A shard's map. No code of this module panics while holding the lock, and a sweep
/// interrupted by a panicking `is_idle` leaves the map and the count consistent, so
/// poisoning is ignored.
pub(super) fn lock<K, L>(shard: &ShardLock<K, L>) -> MutexGuard<'_, Shard<K, L>> {
    shard.0.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A call on a key's slot: `decide` on its word when it is one (or folds into one now),
/// else its whole limiter, to be asked with the lock released.
#[inline(always)]
pub(super) fn step<L: KeyTemplate, D>(
    mut slot: Slot<'_, L>,
    at: Option<&At<'_, L>>,
    decide: impl FnOnce(&Compact<L>, &mut u64, u64) -> D,
) -> Step<L, D> {
    match on_word(&mut slot, at, decide) {
        Some(decided) => Step::Decided(decided),
        None => Step::Call(slot.whole(at)),
    }
}

/// `decide` on a key's word, with the compact form and the reading of now, if the key is
/// one (or folds into one now).
#[inline(always)]
pub(super) fn on_word<L: KeyTemplate, D>(
    slot: &mut Slot<'_, L>,
    at: Option<&At<'_, L>>,
    decide: impl FnOnce(&Compact<L>, &mut u64, u64) -> D,
) -> Option<D> {
    let at = at?;
    let word = slot.word(at)?;
    Some(decide(at.compact, word, at.reading))
}

/// A key counted before its limiter is made; uncounted again if making it panics.
struct Reservation<'a>(&'a AtomicUsize);

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
