//! [`Keyed`]: one limiter per key, made on first use from a template and forgotten again
//! once it is idle. Its documentation explains why forgetting costs nothing, and the
//! memory bound.

use std::borrow::Borrow;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};

use crate::clock::Clock;
use crate::error::{AcquireError, ConfigError, TryAcquireError};
use crate::limiter::Limiter;

/// A shard is never swept automatically while it holds fewer keys than this: sweeping
/// a handful of keys would cost more in locking than it saves in memory.
const SWEEP_FLOOR: usize = 64;

/// The most shards a [`Keyed`] accepts.
const MAX_SHARDS: usize = 1 << 16;

/// Shards per available thread by default: enough that two threads rarely want the
/// same shard at once.
const SHARDS_PER_THREAD: usize = 4;

/// After a sweep for room, the next one waits this many times as long as it took.
const QUIET_FACTOR: u64 = 9;

/// One limiter per key (a user id, a client IP, an API key), each made on first use from
/// a template and forgotten again once it is idle.
///
/// `Keyed` works with any [`Limiter`]. The template is a limiter built by the caller, so
/// its settings were checked once, when it was built; every key's limiter is
/// [`template.fresh()`](Limiter::fresh). `Keyed` is a cheap handle: its clones share the
/// same keys.
///
/// # Examples
///
/// ```
/// use std::net::IpAddr;
/// use std::time::Duration;
/// use token_bucket::{Keyed, Rate, TokenBucket, TryAcquireError};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // Each client may make 2 requests at once, and 1 more every second.
/// let per_client: Keyed<IpAddr, TokenBucket> =
///     Keyed::new(TokenBucket::new(Rate::per_second(1), 2)?);
/// let alice: IpAddr = "192.0.2.1".parse()?;
/// let bob: IpAddr = "192.0.2.2".parse()?;
///
/// per_client.try_acquire(&alice, 2)?;
/// assert_eq!(
///     per_client.try_acquire(&alice, 1),
///     Err(TryAcquireError::Limited { retry_after: Duration::from_secs(1) })
/// );
/// // Bob has a budget of his own.
/// per_client.try_acquire(&bob, 2)?;
/// // Alice may wait for hers.
/// per_client.acquire(&alice, 1).await?;
/// # Ok(())
/// # }
/// ```
///
/// # Why forgetting an idle key costs nothing
///
/// A limiter is [idle](Limiter::is_idle) when it is back in the state a
/// [fresh](Limiter::fresh) one starts in (a full bucket, with no fraction of a token
/// carried; windows with nothing counted) and nobody waits on it. From then on it answers
/// every request exactly as a fresh one would. So a key whose limiter is idle can be
/// dropped, and when the key comes back a fresh limiter made from the template takes its
/// place: nobody can tell the difference, and the key's memory is freed meanwhile.
///
/// A limiter that anybody else still holds is never forgotten, idle or not: a pending
/// [`acquire`](Keyed::acquire) holds its key's limiter, as does the `Arc` that
/// [`get`](Keyed::get) returns. Otherwise a waiter not yet counted by its limiter could be
/// admitted by the forgotten limiter while a fresh one admits others for the same key:
/// twice the limit.
///
/// # The memory bound
///
/// Keys are spread over shards, each a map behind its own lock. A shard forgets its idle
/// keys (it is *swept*) before a new key would take it past twice the keys it kept at its
/// previous sweep, and never while it holds fewer than 64 keys. So a shard holds at most
/// `max(64, 2 × busy)` keys, where `busy` is the number of its keys that were busy at its
/// last sweep: memory follows the keys in use, not every key ever seen. A sweep costs one
/// look at each key of the shard and is paid for by the keys added since the previous
/// one, so adding a key costs O(1) amortized. After a sweep the shard's map gives back
/// the room it no longer needs.
///
/// Sweeps happen only as new keys come. A `Keyed` with quiet periods can call
/// [`retain_recent`](Keyed::retain_recent) from a periodic task to forget idle keys then.
///
/// [`max_keys`](KeyedBuilder::max_keys) is a hard bound, against floods of unique keys
/// (one per forged address, say). A new key that finds `max_keys` keys held makes room by
/// sweeping every shard; if no key is idle it is refused with
/// [`TooManyKeys`](TryAcquireError::TooManyKeys), while the keys already held are served
/// as usual. Such a sweep looks at every key, so the next one waits until the clock has
/// moved on by nine times as long as it took, and new keys that find no room meanwhile
/// are refused without one: however fast they pour in, these sweeps take at most a tenth
/// of one thread's time, and a refused key costs O(1). The price is that a key going idle
/// during that wait is found only by the next sweep. Under tokio's paused clock a sweep
/// takes no time, so the next one waits only for the clock to move.
///
/// # What a key costs
///
/// Measured by `benches/keyed_memory.rs` and `benches/keyed.rs` (on a shared two-core
/// machine, so roughly): a `TokenBucket` key takes about 875 bytes of heap in three
/// allocations. The bucket itself is about 815 of them, in two: its shared state with
/// the fast path's word and its counters (on the word's cache line), the waiter queue, and a `Notify`
/// for its refill task (the signal behind
/// [`TokenBucket::closed`](crate::TokenBucket::closed) is made only if someone asks).
/// The `Arc` and the map's slot make up the rest. A [`FixedWindow`](crate::FixedWindow)
/// key takes about 270 bytes, a small [`SlidingLog`](crate::SlidingLog) about 340.
/// governor's keyed limiter, which keeps one
/// 8-byte word per key inline in its map, takes about 35. A `try_acquire` over a million
/// keys took about 410 ns (governor: 210 ns), dominated by cache misses along the
/// pointers from the map to the bucket's state; for one hot key about 95 ns (governor:
/// 45 ns).
///
/// # Concurrency
///
/// A shard's lock is held only to find or add a key's limiter, and during a sweep; the
/// limiter itself is called after the lock is released, and no lock is held across an
/// `.await`. The number of shards is a power of two, by default the next one at or above
/// four per available thread.
pub struct Keyed<K, L> {
    inner: Arc<Inner<K, L>>,
}

/// What every clone of a [`Keyed`] shares.
struct Inner<K, L> {
    template: L,
    shards: Box<[ShardLock<K, L>]>,
    /// Picks a key's shard. Each shard's map hashes with keys of its own: were they the
    /// same, the keys of one shard, which share these bits, would crowd its map.
    shard_hasher: RandomState,
    /// Keys held, over all shards, counting those being added.
    keys: AtomicUsize,
    max_keys: Option<usize>,
    clock: Clock,
    /// The earliest instant (on `clock`) the next sweep for room may start. Only one such
    /// sweep runs at a time: whoever finds this lock taken does not sweep.
    next_room_sweep: Mutex<u64>,
}

/// A shard on cache lines of its own, so that threads locking neighbouring shards do not
/// slow each other down.
#[repr(align(128))]
struct ShardLock<K, L>(Mutex<Shard<K, L>>);

struct Shard<K, L> {
    limiters: HashMap<K, Arc<L>>,
    /// The size at which a new key first sweeps the shard.
    sweep_at: usize,
}

impl<K, L: Limiter> Keyed<K, L> {
    /// One limiter per key, each a [`fresh`](Limiter::fresh) copy of `template`, with no
    /// bound on the keys (beyond automatic eviction of idle ones) and the default number of
    /// shards. Use [`builder`](Keyed::builder) to set those.
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{Keyed, Rate, TokenBucket};
    ///
    /// let per_user: Keyed<String, TokenBucket> =
    ///     Keyed::new(TokenBucket::new(Rate::per_minute(60), 10)?);
    /// assert!(per_user.is_empty());
    /// assert_eq!(per_user.max_keys(), None);
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn new(template: L) -> Keyed<K, L> {
        Keyed::with_settings(template, None, default_shards())
    }

    /// A [`KeyedBuilder`] for a bound on the keys and the number of shards.
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{Keyed, Rate, TokenBucket};
    ///
    /// let per_user: Keyed<u64, TokenBucket> =
    ///     Keyed::builder(TokenBucket::new(Rate::per_second(5), 5)?)
    ///         .max_keys(100_000)
    ///         .shards(16)
    ///         .build()?;
    /// assert_eq!((per_user.max_keys(), per_user.shards()), (Some(100_000), 16));
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn builder(template: L) -> KeyedBuilder<K, L> {
        KeyedBuilder {
            template,
            max_keys: None,
            shards: None,
            keys: PhantomData,
        }
    }

    fn with_settings(template: L, max_keys: Option<usize>, shards: usize) -> Keyed<K, L> {
        let shards = (0..shards)
            .map(|_| {
                ShardLock(Mutex::new(Shard {
                    limiters: HashMap::new(),
                    sweep_at: SWEEP_FLOOR,
                }))
            })
            .collect();
        Keyed {
            inner: Arc::new(Inner {
                template,
                shards,
                shard_hasher: RandomState::new(),
                keys: AtomicUsize::new(0),
                max_keys,
                clock: Clock::start(),
                next_room_sweep: Mutex::new(0),
            }),
        }
    }
}

impl<K, L> Keyed<K, L> {
    /// Keys held now: those seen and not yet forgotten. Exact while no call is adding or
    /// forgetting keys; a call in progress may already count a key it is adding.
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{Keyed, Rate, TokenBucket};
    ///
    /// let keyed = Keyed::new(TokenBucket::new(Rate::per_second(1), 1)?);
    /// keyed.try_acquire(&"a", 1)?;
    /// keyed.try_acquire(&"b", 1)?;
    /// keyed.try_acquire(&"a", 0)?;
    /// assert_eq!(keyed.len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn len(&self) -> usize {
        self.inner.keys.load(Ordering::Relaxed)
    }

    /// Whether no key is held.
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{Keyed, Rate, TokenBucket};
    ///
    /// let keyed = Keyed::new(TokenBucket::new(Rate::per_second(1), 1)?);
    /// assert!(keyed.is_empty());
    /// keyed.try_acquire(&1_u32, 1)?;
    /// assert!(!keyed.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most keys held at once, if the limiter was built with
    /// [`max_keys`](KeyedBuilder::max_keys).
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{Keyed, Rate, TokenBucket};
    ///
    /// let template = TokenBucket::new(Rate::per_second(1), 1)?;
    /// let bounded: Keyed<u32, _> = Keyed::builder(template.clone()).max_keys(10).build()?;
    /// assert_eq!(bounded.max_keys(), Some(10));
    /// let unbounded: Keyed<u32, _> = Keyed::new(template);
    /// assert_eq!(unbounded.max_keys(), None);
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn max_keys(&self) -> Option<usize> {
        self.inner.max_keys
    }

    /// The number of shards the keys are spread over.
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{Keyed, Rate, TokenBucket};
    ///
    /// let keyed: Keyed<u32, _> = Keyed::new(TokenBucket::new(Rate::per_second(1), 1)?);
    /// assert!(keyed.shards().is_power_of_two());
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn shards(&self) -> usize {
        self.inner.shards.len()
    }
}

impl<K: Hash + Eq, L: Limiter> Keyed<K, L> {
    /// Acquires `permits` for `key` now if its limiter allows; never waits. A key seen for
    /// the first time gets a fresh limiter. Needs no runtime.
    ///
    /// The key may be given in any borrowed form of `K`, as with a `HashMap`: a `&str` for
    /// `String` keys.
    ///
    /// # Errors
    ///
    /// [`TryAcquireError::TooManyKeys`] when `key` is new,
    /// [`max_keys`](KeyedBuilder::max_keys) keys are held, and no room could be made
    /// (see [the memory bound](Keyed#the-memory-bound)); the keys already held are still
    /// served. Otherwise the errors of the key's limiter's
    /// [`try_acquire`](Limiter::try_acquire): [`TryAcquireError::Limited`] with the
    /// `retry_after` of this key alone, [`TryAcquireError::ExceedsLimit`], and a bucket's
    /// [`TryAcquireError::Closed`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{Keyed, Rate, TokenBucket, TryAcquireError};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let per_key: Keyed<String, TokenBucket> =
    ///     Keyed::builder(TokenBucket::new(Rate::per_second(2), 2)?).max_keys(1).build()?;
    /// per_key.try_acquire("alice", 2)?;
    /// assert_eq!(
    ///     per_key.try_acquire("alice", 1),
    ///     Err(TryAcquireError::Limited { retry_after: Duration::from_millis(500) })
    /// );
    /// // A second key does not fit while alice's bucket is still refilling...
    /// assert_eq!(per_key.try_acquire("bob", 1), Err(TryAcquireError::TooManyKeys { max_keys: 1 }));
    /// // ...and does once it is full again: alice is forgotten to make room.
    /// tokio::time::advance(Duration::from_secs(1)).await;
    /// per_key.try_acquire("bob", 1)?;
    /// assert_eq!(per_key.len(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire<Q>(&self, key: &Q, permits: u64) -> Result<(), TryAcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let limiter = self
            .limiter_of(key)
            .map_err(|TooManyKeys { max_keys }| TryAcquireError::TooManyKeys { max_keys })?;
        limiter.try_acquire(permits)
    }

    /// Acquires `permits` for `key`, waiting first in, first out behind the other waiters
    /// of that key until its limiter allows. Other keys are not held up.
    ///
    /// The key's limiter is found (or made) when this method is called, not when the
    /// future is first polled; the future holds it from then on, so the key is not
    /// forgotten while the future lives, and it borrows neither `self` nor `key`. No lock
    /// of the `Keyed` is held while it waits.
    ///
    /// # Errors
    ///
    /// [`AcquireError::TooManyKeys`] when `key` is new,
    /// [`max_keys`](KeyedBuilder::max_keys) keys are held, and no room could be made
    /// (see [the memory bound](Keyed#the-memory-bound)). Otherwise the
    /// errors of the key's limiter's [`acquire`](Limiter::acquire):
    /// [`AcquireError::ExceedsLimit`], [`AcquireError::NoRuntime`], and a bucket's
    /// [`AcquireError::QueueFull`] and [`AcquireError::Closed`].
    ///
    /// # Panics
    ///
    /// On its first poll, when it must wait inside a tokio runtime built without time, as
    /// [`Limiter::acquire`](Limiter::acquire) says.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future gives up its place in the key's line and acquires
    /// nothing, as the limiter's own `acquire` does. Once dropped, it no longer keeps the
    /// key from being forgotten.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{Keyed, Rate, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let per_key: Keyed<u64, TokenBucket> = Keyed::new(TokenBucket::new(Rate::per_second(4), 1)?);
    /// let start = tokio::time::Instant::now();
    /// per_key.acquire(&7, 1).await?;
    /// per_key.acquire(&7, 1).await?; // key 7 waits 250 ms for its next permit
    /// assert_eq!(start.elapsed(), Duration::from_millis(250));
    /// per_key.acquire(&8, 1).await?; // key 8 has its own budget
    /// assert_eq!(start.elapsed(), Duration::from_millis(250));
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire<Q>(
        &self,
        key: &Q,
        permits: u64,
    ) -> impl Future<Output = Result<(), AcquireError>> + Send + 'static
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let limiter = self.limiter_of(key);
        async move {
            let limiter = limiter
                .map_err(|TooManyKeys { max_keys }| AcquireError::TooManyKeys { max_keys })?;
            limiter.acquire(permits).await
        }
    }

    /// The limiter of `key`, made from the template if the key is new, as
    /// [`acquire`](Keyed::acquire) finds it: for a request that takes from this key and
    /// from other limiters in one decision (see [`all`](crate::all)). The key is not
    /// forgotten while the returned `Arc` lives, nor while a composite waits in its
    /// limiter's line.
    ///
    /// # Errors
    ///
    /// [`TryAcquireError::TooManyKeys`] when `key` is new,
    /// [`max_keys`](KeyedBuilder::max_keys) keys are held, and no room could be made (see
    /// [the memory bound](Keyed#the-memory-bound)).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use token_bucket::{all, Keyed, Rate, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let per_ip: Keyed<IpAddr, TokenBucket> =
    ///     Keyed::new(TokenBucket::new(Rate::per_second(5), 5)?);
    /// let global = TokenBucket::new(Rate::per_second(500), 500)?;
    /// let client: IpAddr = "192.0.2.1".parse()?;
    /// all((per_ip.limiter(&client)?, &global))?.acquire(1).await?;
    /// assert_eq!(per_ip.get(&client).map(|bucket| bucket.available()), Some(4));
    /// assert_eq!(global.available(), 499);
    /// # Ok(())
    /// # }
    /// ```
    pub fn limiter<Q>(&self, key: &Q) -> Result<Arc<L>, TryAcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.limiter_of(key)
            .map_err(|TooManyKeys { max_keys }| TryAcquireError::TooManyKeys { max_keys })
    }

    /// The limiter of `key`, if the key is held; `None` if it was never seen or was
    /// forgotten (its limiter would then be fresh). Makes no limiter.
    ///
    /// The key is not forgotten while the returned `Arc` lives. Keep the `Arc`, not a
    /// clone of the limiter inside it: a `TokenBucket` cloned out of it stays tied to the
    /// key's bucket but does not keep the key. Settings changed through it (a bucket's
    /// [`set_rate`](crate::TokenBucket::set_rate) or
    /// [`set_capacity`](crate::TokenBucket::set_capacity)) last only while the key is
    /// held: once its limiter is idle it may be forgotten, and the key comes back with a
    /// fresh copy of the template.
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{Keyed, Limiter, Rate, TokenBucket};
    ///
    /// let per_key: Keyed<&str, TokenBucket> = Keyed::new(TokenBucket::new(Rate::per_hour(1), 10)?);
    /// assert!(per_key.get(&"a").is_none());
    /// per_key.try_acquire(&"a", 4)?;
    /// let limiter = per_key.get(&"a").expect("a was just used");
    /// assert_eq!(limiter.available(), 6);
    /// // Work that did not happen: give the permits back.
    /// limiter.refund(4);
    /// assert!(limiter.is_idle());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn get<Q>(&self, key: &Q) -> Option<Arc<L>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.shard_of(key).limiters.get(key).map(Arc::clone)
    }

    /// Forgets every key whose limiter is [idle](Limiter::is_idle) and held by nobody
    /// else (no pending [`acquire`](Keyed::acquire), no `Arc` from [`get`](Keyed::get)),
    /// and returns how many it forgot. Their memory is freed, and the maps give back their
    /// spare room.
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

    /// The limiter of `key`, made if the key is new, with the shard's lock released.
    fn limiter_of<Q>(&self, key: &Q) -> Result<Arc<L>, TooManyKeys>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if let Some(limiter) = self.find_or_add(&mut self.shard_of(key), key) {
            return Ok(limiter);
        }
        // At the bound: make room, then try once more (another thread may have made room
        // meanwhile, or added this very key).
        self.sweep_for_room();
        self.find_or_add(&mut self.shard_of(key), key)
            .ok_or(TooManyKeys {
                max_keys: self.inner.max_keys.unwrap_or(usize::MAX),
            })
    }

    /// The limiter of `key` in `shard`, added if new; `None` when the key is new and there
    /// is no room for it.
    fn find_or_add<Q>(&self, shard: &mut Shard<K, L>, key: &Q) -> Option<Arc<L>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if let Some(limiter) = shard.limiters.get(key) {
            return Some(Arc::clone(limiter));
        }
        if shard.limiters.len() >= shard.sweep_at {
            self.sweep(shard);
        }
        let reservation = self.reserve_key()?;
        let limiter = Arc::new(self.inner.template.fresh());
        shard.limiters.insert(key.to_owned(), Arc::clone(&limiter));
        reservation.keep();
        Some(limiter)
    }

    /// Counts one more key, unless that would pass `max_keys`.
    fn reserve_key(&self) -> Option<Reservation<'_>> {
        let bound = self.inner.max_keys.unwrap_or(usize::MAX);
        // A compare-and-swap, so that racing threads can never pass the bound together.
        self.inner
            .keys
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |keys| {
                (keys < bound).then_some(keys + 1)
            })
            .ok()
            .map(|_| Reservation {
                keys: &self.inner.keys,
                kept: false,
            })
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

    /// Forgets the shard's idle keys, sets when it is next swept, gives back spare room,
    /// and returns how many keys it forgot.
    fn sweep(&self, shard: &mut Shard<K, L>) -> usize {
        let before = shard.limiters.len();
        shard.limiters.retain(|_, limiter| {
            // Nobody else holds it (checked first: it is cheaper, and it cannot change
            // while the shard is locked, since a new holder needs the lock), and a fresh
            // limiter would behave the same.
            let forget = Arc::strong_count(limiter) == 1 && limiter.is_idle();
            if forget {
                // One at a time, so that the count stays exact should `is_idle` panic.
                self.inner.keys.fetch_sub(1, Ordering::Relaxed);
            }
            !forget
        });
        let kept = shard.limiters.len();
        shard.sweep_at = kept.saturating_mul(2).max(SWEEP_FLOOR);
        // Shrinking costs O(kept) and halves the room at least, so it is paid for by the
        // growth before it.
        if shard.limiters.capacity() > shard.sweep_at.saturating_mul(2) {
            shard.limiters.shrink_to(shard.sweep_at);
        }
        before - kept
    }

    /// The locked shard `key` belongs to.
    fn shard_of<Q: Hash + ?Sized>(&self, key: &Q) -> MutexGuard<'_, Shard<K, L>> {
        let hash = self.inner.shard_hasher.hash_one(key);
        // The number of shards is a power of two: the mask keeps the hash's low bits. The
        // cast may drop high bits on 32-bit targets, which the mask drops anyway.
        let index = hash as usize & (self.inner.shards.len() - 1);
        lock(&self.inner.shards[index])
    }
}

/// A shard's map. No code of this module panics while holding the lock, and a sweep
/// interrupted by a panicking `is_idle` leaves the map and the count consistent, so
/// poisoning is ignored.
fn lock<K, L>(shard: &ShardLock<K, L>) -> MutexGuard<'_, Shard<K, L>> {
    shard.0.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Refusal of a new key: the bound that was reached.
struct TooManyKeys {
    max_keys: usize,
}

/// A key counted before its limiter is made; uncounted again if making it panics.
struct Reservation<'a> {
    keys: &'a AtomicUsize,
    kept: bool,
}

impl Reservation<'_> {
    fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if !self.kept {
            self.keys.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

fn default_shards() -> usize {
    let threads = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
    threads
        .saturating_mul(SHARDS_PER_THREAD)
        .min(MAX_SHARDS)
        .next_power_of_two()
}

impl<K, L> Clone for Keyed<K, L> {
    /// Another handle to the same keys and limiters.
    ///
    /// ```
    /// use token_bucket::{Keyed, Rate, TokenBucket};
    ///
    /// let keyed = Keyed::new(TokenBucket::new(Rate::per_second(1), 1)?);
    /// let handle = keyed.clone();
    /// handle.try_acquire(&"a", 1)?;
    /// assert!(keyed.try_acquire(&"a", 1).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn clone(&self) -> Keyed<K, L> {
        Keyed {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K, L> fmt::Debug for Keyed<K, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyed")
            .field("keys", &self.len())
            .field("max_keys", &self.inner.max_keys)
            .field("shards", &self.shards())
            .finish_non_exhaustive()
    }
}

/// Settings for a [`Keyed`], from [`Keyed::builder`], checked at once by
/// [`build`](KeyedBuilder::build).
///
/// # Examples
///
/// ```
/// use token_bucket::{ConfigError, Keyed, Rate, TokenBucket};
///
/// let template = TokenBucket::new(Rate::per_second(10), 10)?;
/// let keyed: Keyed<u64, _> = Keyed::builder(template.clone()).max_keys(50_000).build()?;
/// assert_eq!(keyed.max_keys(), Some(50_000));
/// let refused = Keyed::<u64, _>::builder(template).shards(12).build();
/// assert_eq!(refused.unwrap_err(), ConfigError::BadShards { shards: 12, max: 65_536 });
/// # Ok::<(), ConfigError>(())
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct KeyedBuilder<K, L> {
    template: L,
    max_keys: Option<usize>,
    shards: Option<usize>,
    keys: PhantomData<fn() -> K>,
}

impl<K, L: Limiter> KeyedBuilder<K, L> {
    /// The most keys held at once. A new key that would pass it first makes room by
    /// forgetting idle keys, and is refused with
    /// [`TooManyKeys`](TryAcquireError::TooManyKeys) if none is idle (see
    /// [the memory bound](Keyed#the-memory-bound) for how often it looks). Unbounded by
    /// default (idle keys are still forgotten automatically).
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{ConfigError, Keyed, Rate, TokenBucket, TryAcquireError};
    ///
    /// let template = TokenBucket::new(Rate::per_hour(1), 1)?;
    /// let keyed: Keyed<u8, _> = Keyed::builder(template.clone()).max_keys(2).build()?;
    /// keyed.try_acquire(&1, 1)?;
    /// keyed.try_acquire(&2, 1)?;
    /// assert_eq!(keyed.try_acquire(&3, 1), Err(TryAcquireError::TooManyKeys { max_keys: 2 }));
    ///
    /// let zero = Keyed::<u8, _>::builder(template).max_keys(0).build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroMaxKeys);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn max_keys(mut self, max_keys: usize) -> KeyedBuilder<K, L> {
        self.max_keys = Some(max_keys);
        self
    }

    /// The number of shards: a power of two, at most 65,536. More shards let more
    /// threads add and find keys at once; each costs a lock and an empty map. Defaults to
    /// the next power of two at or above four per available thread.
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{ConfigError, Keyed, Rate, TokenBucket};
    ///
    /// let template = TokenBucket::new(Rate::per_second(1), 1)?;
    /// let keyed: Keyed<u8, _> = Keyed::builder(template.clone()).shards(1).build()?;
    /// assert_eq!(keyed.shards(), 1);
    /// let zero = Keyed::<u8, _>::builder(template).shards(0).build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::BadShards { shards: 0, max: 65_536 });
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn shards(mut self, shards: usize) -> KeyedBuilder<K, L> {
        self.shards = Some(shards);
        self
    }

    /// The [`Keyed`] limiter.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroMaxKeys`] for a `max_keys` of zero;
    /// [`ConfigError::BadShards`] for a number of shards that is zero, not a power of two,
    /// or above 65,536.
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{Keyed, Rate, TokenBucket};
    ///
    /// let keyed: Keyed<String, TokenBucket> =
    ///     Keyed::builder(TokenBucket::new(Rate::per_second(1), 1)?).build()?;
    /// assert!(keyed.is_empty());
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn build(self) -> Result<Keyed<K, L>, ConfigError> {
        if self.max_keys == Some(0) {
            return Err(ConfigError::ZeroMaxKeys);
        }
        let shards = match self.shards {
            None => default_shards(),
            Some(shards) if shards.is_power_of_two() && shards <= MAX_SHARDS => shards,
            Some(shards) => {
                return Err(ConfigError::BadShards {
                    shards,
                    max: MAX_SHARDS,
                })
            }
        };
        Ok(Keyed::with_settings(self.template, self.max_keys, shards))
    }
}

impl<K, L> fmt::Debug for KeyedBuilder<K, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedBuilder")
            .field("max_keys", &self.max_keys)
            .field("shards", &self.shards)
            .finish_non_exhaustive()
    }
}
