//! [`Keyed`]: one limiter per key, made on first use from a template and forgotten again
//! once it is idle. Its documentation explains why forgetting costs nothing, how a key is
//! held (its state word alone while nobody waits on it), and the memory bound.
//!
//! - `shard.rs`: a shard's table of keys and their entries, and its sweep.
//! - `compact.rs`: which templates have a one-word form (a `OneWord`, see `limiter.rs`).
//! - `joint.rs`: a key's limit and a global one decided together, all or nothing.

mod compact;
mod member;
// The joint decision serves the HTTP layer; without its feature only the tests call it.
#[cfg_attr(not(any(test, feature = "http")), allow(dead_code))]
mod joint;
mod shard;

#[cfg(feature = "http")]
pub(crate) use joint::{Joint, JointRefusal};
pub use member::KeyMember;

use std::borrow::Borrow;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;
use std::num::NonZeroUsize;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, TryLockError};

use crate::clock::Clock;
use crate::error::{AcquireError, ConfigError, TooManyKeys, TryAcquireError};
use crate::keyed::compact::{compact_of, Compact};
use crate::keyed::shard::{At, Shard, Slot};
use crate::limiter::{KeyTemplate, Limiter};
use crate::observe::{Class, Classify, KeyClasses, KeyedObserver};
use crate::quota::{Decision, Policy, Quota};
use crate::sync::{AtomicUsize, Identity, Mutex, MutexGuard};

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
/// `Keyed` works with any [`KeyTemplate`]: every limiter of this crate is one. The
/// template is a limiter built by the caller, so its settings were checked once, when it
/// was built; every key's limiter is [`template.fresh()`](KeyTemplate::fresh). `Keyed`
/// keeps a fresh copy of the template, made when it is built: settings changed later
/// through a clone of the template (a bucket's `set_rate`) change no key. `Keyed` is a cheap handle: its clones share the
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
/// A limiter is [idle](KeyTemplate::is_idle) when it is back in the state a
/// [fresh](KeyTemplate::fresh) one starts in (a full bucket, with no fraction of a token
/// carried; windows with nothing counted) and nobody waits on it. From then on it answers
/// every request exactly as a fresh one would. So a key whose limiter is idle can be
/// dropped, and when the key comes back a fresh limiter made from the template takes its
/// place: nobody can tell the difference, and the key's memory is freed meanwhile.
///
/// A limiter that anybody else still holds is never forgotten, idle or not: an
/// [`acquire`](Keyed::acquire) waiting in its key's line holds its key's limiter, as does
/// the `Arc` that [`get`](Keyed::get) returns. Otherwise a waiter not yet counted by its
/// limiter could be admitted by the forgotten limiter while a fresh one admits others for
/// the same key: twice the limit. (An `acquire` not yet polled holds nothing: it has
/// asked for nothing yet.)
///
/// # How a key is held
///
/// A key nobody waits on and nobody holds is kept as its limiter's state alone, one
/// 8-byte word beside the key in the shard's table, the settings living once in the
/// template: for a [`TokenBucket`](crate::TokenBucket), the word its lock-free fast path
/// keeps (when the bucket would be empty, in exact units of its rate); for a
/// [`FixedWindow`](crate::FixedWindow), its window and count. `try_acquire` reads and
/// writes that word under the shard's lock, with the bucket's or the window's own
/// arithmetic, so it answers exactly as the limiter would, `retry_after` included, to the
/// nanosecond.
///
/// An [`acquire`](Keyed::acquire) whose permits are there, with nobody waiting, is
/// served on the word too. The whole limiter (a bucket's waiter queue and refill task, a
/// window's line) is made from the word only when a request must wait, or when
/// [`get`](Keyed::get) or [`get_or_insert`](Keyed::get_or_insert) hands it out, and holds exactly
/// what the word held. It folds back into the word, holding exactly what the limiter
/// held, once its line is empty, nobody else holds it, and its settings are still the
/// template's: at once when the last `acquire` that waited in its line ends (served or
/// dropped), and otherwise at the key's next `try_acquire` or `acquire`, or at the next
/// sweep (automatic, or [`retain_recent`](Keyed::retain_recent)). A handle from `get`
/// keeps the key whole while it lives, and a rate or capacity changed through it keeps the
/// key whole, with its own settings, until it is forgotten.
///
/// Which templates have the compact form: a `TokenBucket` of one limit whose full
/// bucket is worth at most 2<sup>61</sup> units of its rate (a unit is a token divided by
/// `period / gcd(amount, period)` of the rate: with one token an hour, up to 640,000
/// tokens; with any rate per second, up to 2.3 × 10<sup>9</sup>) and which gains at most
/// 4.6 × 10<sup>9</sup> units a nanosecond (so that the instant its words count from moves
/// at most once a second; moving it rewrites each word of a shard); and any
/// `FixedWindow`. Any other
/// limiter, a user's own included, is held whole: in an `Arc`, with its own allocations.
/// A [`SlidingLog`](crate::SlidingLog) must remember each grant still counted, so it has
/// no one-word form: its log grows only as grants come (8 bytes each, at most `8 × limit`),
/// so a key that was used once costs about 360 bytes, most of it the limiter's fixed
/// part. A [`SlidingWindow`](crate::SlidingWindow) holds its slots from the start (8 bytes
/// each).
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
/// Measured by `benches/keyed_memory.rs` and `benches/keyed.rs` with a million `u64` keys
/// (on a shared two-core machine, so roughly): a compact `TokenBucket` or `FixedWindow`
/// key takes about 35 bytes of heap and no allocation of its own (16 bytes in the table,
/// at the table's load), as governor's keyed limiter does, as it ships or reading tokio's
/// clock; so does a key used by `acquire` with its permits there. A key held whole costs
/// its limiter besides: about 950 bytes for a bucket, in three allocations. A
/// `try_acquire` costs about what governor's keyed limiter costs reading tokio's clock, as
/// ours must (see `docs/benchmarks.md`).
///
/// # Concurrency
///
/// A shard's lock is held to find or add a key, to read and write a compact key's word
/// (a few arithmetic steps, no call into the limiter), during a sweep, and when an
/// `acquire` that used a key's whole limiter ends and folds it back into its word; a
/// whole limiter is otherwise called after the lock is released, and no lock is held
/// across an `.await`. A key's word decided together with a global limiter, all or
/// nothing, is the one exception: the global limiter decides under the shard's lock, so
/// that the word is written back only if it admits too. Where both are held, the shard's
/// lock is taken before the limiter's.
/// A key is hashed once a call: the hash picks its shard and its place in the shard's
/// table. The number of shards is a power of two, by default the next one at or above
/// four per available thread.
pub struct Keyed<K, L> {
    inner: Arc<Inner<K, L>>,
}

/// What every clone of a [`Keyed`] shares.
struct Inner<K, L> {
    template: L,
    /// How keys nobody waits on are held as words; `None` when the template's type or
    /// settings have no compact form, and every key holds a whole limiter.
    compact: Option<Box<Compact<L>>>,
    shards: Box<[ShardLock<K, L>]>,
    /// Hashes a key once a call: the hash picks its shard and its place in the shard.
    hasher: RandomState,
    /// Keys held, over all shards, counting those being added. Shared with the keys
    /// gauge of a named `Keyed`, which holds it weakly, so as to read it without holding
    /// the keys (whose type may be neither `Send` nor `'static`).
    keys: Arc<AtomicUsize>,
    max_keys: Option<usize>,
    clock: Clock,
    /// The earliest instant (on `clock`) the next sweep for room may start. Only one such
    /// sweep runs at a time: whoever finds this lock taken does not sweep.
    next_room_sweep: Mutex<u64>,
    /// Orders its keys' shard locks among a composite's members, with the part its keys
    /// play in composites (see `keyed/member.rs`).
    identity: Identity,
    /// What it reports through, if it was named (see `observe/`).
    observer: KeyedObserver<K>,
}

/// A shard on cache lines of its own, so that threads locking neighbouring shards do not
/// slow each other down.
#[repr(align(128))]
struct ShardLock<K, L>(Mutex<Shard<K, L>>);

/// Where a call stands once its key's slot was looked at under the shard's lock.
enum Step<L, D = Result<(), TryAcquireError>> {
    /// Decided on the key's word.
    Decided(D),
    /// To be asked of the key's whole limiter, with the lock released.
    Call(Arc<L>),
}

impl<K, L: KeyTemplate> Keyed<K, L> {
    /// One limiter per key, each a [`fresh`](KeyTemplate::fresh) copy of `template`, with no
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
        Keyed::observed(template, None, default_shards(), KeyedObserver::default())
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
            name: None,
            classes: None,
            keys: PhantomData,
        }
    }

    /// A `Keyed` of checked settings reporting through `observer` (see `observe/`).
    fn observed(
        template: L,
        max_keys: Option<usize>,
        shards: usize,
        observer: KeyedObserver<K>,
    ) -> Keyed<K, L> {
        // A copy nobody else holds: the compact form reads its settings once, here, and
        // keys made whole later must be made with the same ones.
        let template = template.fresh();
        let shards = (0..shards)
            .map(|_| ShardLock(Mutex::new(Shard::new())))
            .collect();
        Keyed {
            inner: Arc::new(Inner {
                compact: compact_of(&template),
                template,
                shards,
                hasher: RandomState::new(),
                keys: Arc::new(AtomicUsize::new(0)),
                max_keys,
                clock: Clock::start(),
                next_room_sweep: Mutex::new(0),
                identity: Identity::new(),
                observer,
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

    /// The name it reports under, if [`KeyedBuilder::name`] gave it one (see
    /// [`observe`](crate::observe)).
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{Keyed, Rate, TokenBucket};
    ///
    /// let template = TokenBucket::new(Rate::per_second(1), 1)?;
    /// let named: Keyed<u32, _> = Keyed::builder(template.clone()).name("per-user").build()?;
    /// assert_eq!(named.clone().name(), Some("per-user"));
    /// assert_eq!(Keyed::<u32, _>::new(template).name(), None);
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn name(&self) -> Option<&str> {
        self.inner.observer.name()
    }

    /// Reports the new `key` wanting `permits` refused for want of room, and returns the
    /// refusal.
    #[cold]
    fn refused_key<Q>(&self, refusal: TooManyKeys, key: &Q, permits: u64) -> TryAcquireError
    where
        Q: ToOwned<Owned = K> + ?Sized,
    {
        let observer = &self.inner.observer;
        // Only a class function needs an owned key: the key is not held, so one is made.
        let class = match observer.has_classes() {
            true => observer.class_of(&key.to_owned()),
            false => Class::default(),
        };
        observer.too_many_keys(permits, class);
        refusal.into()
    }
}

impl<K: Hash + Eq, L: KeyTemplate> Keyed<K, L> {
    /// Acquires `permits` for `key` now if its limiter allows; never waits. A key seen for
    /// the first time gets a fresh limiter. Needs no runtime. A key held as a word is
    /// answered on its word; a whole limiter that may be a word again is folded first
    /// (see [how a key is held](Keyed#how-a-key-is-held)).
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
        let (step, class) = self
            .with_slot(self.hash(key), key, |slot, at| {
                step(slot, at, |compact, word, reading| {
                    compact.try_acquire_word(word, permits, reading)
                })
            })
            .map_err(|refusal| self.refused_key(refusal, key, permits))?;
        // The key's own limiter is never named: the `Keyed` reports for it.
        let result = match step {
            Step::Decided(result) => result,
            Step::Call(limiter) => limiter.try_acquire(permits),
        };
        self.inner
            .observer
            .decisions(class)
            .decided(permits, &result);
        result
    }

    /// [`try_acquire`](Keyed::try_acquire) for `key`, and the [`Quota`] it leaves the
    /// key, read in the same step (see [`Limiter::try_acquire_decision`]): what the
    /// `RateLimit` header field of a response to this key needs. The key rules are those
    /// of `try_acquire`: a new key gets a fresh limiter, and a key held as a word is
    /// decided on its word, the quota read from the word it decided on at the same
    /// reading of the clock; a key held whole is asked its limiter's own
    /// `try_acquire_decision`.
    ///
    /// # Errors
    ///
    /// In [`Decision::result`], those of [`try_acquire`](Keyed::try_acquire). A new key
    /// refused with [`TryAcquireError::TooManyKeys`] has no limiter, so no quota: the
    /// decision's `quota` is `None` then, and always `Some` otherwise for the crate's own
    /// limiters.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{Keyed, Quota, Rate, TokenBucket, TryAcquireError};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let per_key: Keyed<String, TokenBucket> =
    ///     Keyed::builder(TokenBucket::new(Rate::per_second(10), 10)?).max_keys(1).build()?;
    /// let decision = per_key.try_acquire_decision("alice", 4);
    /// assert_eq!(decision.result, Ok(()));
    /// assert_eq!(
    ///     decision.quota,
    ///     Some(Quota { remaining: 6, full_after: Duration::from_millis(400) })
    /// );
    /// let decision = per_key.try_acquire_decision("bob", 1);
    /// assert_eq!(decision.result, Err(TryAcquireError::TooManyKeys { max_keys: 1 }));
    /// assert_eq!(decision.quota, None);
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire_decision<Q>(&self, key: &Q, permits: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let decided = self.with_slot(self.hash(key), key, |slot, at| {
            step(slot, at, |compact, word, reading| {
                compact.decide_word(word, permits, reading)
            })
        });
        let (decision, class) = match decided {
            Ok((Step::Decided(decision), class)) => (decision, class),
            Ok((Step::Call(limiter), class)) => (limiter.try_acquire_decision(permits), class),
            Err(refusal) => {
                return Decision {
                    result: Err(self.refused_key(refusal, key, permits)),
                    quota: None,
                }
            }
        };
        let observer = self.inner.observer.decisions(class);
        observer.decided(permits, &decision.result);
        decision
    }

    /// The budget of every key: the template's [`Limiter::policy`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{Keyed, Policy, Rate, TokenBucket};
    ///
    /// let per_key: Keyed<u64, TokenBucket> = Keyed::new(TokenBucket::new(Rate::per_second(1), 60)?);
    /// assert_eq!(per_key.policy(), Some(Policy { limit: 60, window: Duration::from_secs(60) }));
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn policy(&self) -> Option<Policy> {
        self.inner.template.policy()
    }

    /// The [`Quota`] of `key` now, counting nothing (see [`Limiter::quota`]). A key not
    /// held is a fresh limiter's, whole: its quota is the full one, and it is not added.
    /// A key held as a word is read from its word; one held whole, from its limiter.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{Keyed, Quota, Rate, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let per_key: Keyed<u64, TokenBucket> = Keyed::new(TokenBucket::new(Rate::per_second(2), 4)?);
    /// assert_eq!(per_key.quota(&7), Some(Quota { remaining: 4, full_after: Duration::ZERO }));
    /// assert!(per_key.is_empty(), "asking adds no key");
    /// per_key.try_acquire(&7, 3)?;
    /// assert_eq!(
    ///     per_key.quota(&7),
    ///     Some(Quota { remaining: 1, full_after: Duration::from_millis(1_500) })
    /// );
    /// # Ok(())
    /// # }
    /// ```
    pub fn quota<Q>(&self, key: &Q) -> Option<Quota>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let held = self.with_held(
            key,
            |compact, word, reading| Some(compact.quota_of_word(*word, reading)),
            Limiter::quota,
        );
        held.unwrap_or_else(|| self.inner.template.quota())
    }

    /// Gives `permits` back to `key`, for work that did not happen or cost less than
    /// charged: on its word when it is held as one, as its limiter's own
    /// [`refund`](Limiter::refund) would, else through its whole limiter's `refund`. A key
    /// not held has a fresh limiter's full budget: nothing to give back, and no key is
    /// added. The limiter never admits more than its limit because of a refund; see
    /// [`Limiter::refund`] for whose permits each kind gives back.
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{Keyed, Rate, TokenBucket};
    ///
    /// let per_key: Keyed<String, TokenBucket> =
    ///     Keyed::new(TokenBucket::new(Rate::per_hour(1), 10)?);
    /// // Charge an estimate up front...
    /// per_key.try_acquire("alice", 8)?;
    /// // ...and settle once the work cost 3: the other 5 go back.
    /// per_key.refund("alice", 5);
    /// assert_eq!(per_key.quota("alice").map(|quota| quota.remaining), Some(7));
    /// per_key.refund("bob", 5); // not held: nothing to do
    /// assert_eq!(per_key.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refund<Q>(&self, key: &Q, permits: u64)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.with_held(
            key,
            |compact, word, reading| compact.refund_word(word, permits, reading),
            |limiter| limiter.refund(permits),
        );
    }

    /// Acquires `permits` for `key`, waiting first in, first out behind the other waiters
    /// of that key until its limiter allows. Other keys are not held up.
    ///
    /// The request is decided when the future is first polled, not when this method is
    /// called: a key held as a word whose permits are there, with nobody waiting, is
    /// served on its word at once, and no limiter is made. Only a request that must wait
    /// makes the key's whole limiter (from its word, holding exactly what the word held)
    /// and joins its line. The future owns a copy of the key and a handle to the
    /// `Keyed`, so it borrows neither `self` nor `key`. While it waits it holds the
    /// key's limiter, so the key is neither forgotten nor folded back into its word; when
    /// it ends (served, refused or dropped) and was the last to use the whole limiter,
    /// with its line empty, the key goes back to its word at once (see
    /// [how a key is held](Keyed#how-a-key-is-held)). No lock of the `Keyed` is held
    /// while it waits.
    ///
    /// # Errors
    ///
    /// [`AcquireError::TooManyKeys`] when `key` is new,
    /// [`max_keys`](KeyedBuilder::max_keys) keys are held, and no room could be made
    /// (see [the memory bound](Keyed#the-memory-bound)). Otherwise the
    /// errors of the key's limiter's [`acquire`](Limiter::acquire):
    /// [`AcquireError::ExceedsLimit`], [`AcquireError::NoRuntime`], and a bucket's
    /// [`AcquireError::QueueFull`], [`AcquireError::Closed`] and
    /// [`AcquireError::RefillFailed`].
    ///
    /// # Panics
    ///
    /// On its first poll, when it must wait inside a tokio runtime built without time, as
    /// [`Limiter::acquire`](Limiter::acquire) says.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a future dropped before its first poll took nothing and added no
    /// key; one dropped while waiting gives up its place in the key's line and acquires
    /// nothing, as the limiter's own `acquire` does, and no longer keeps the key from
    /// being forgotten.
    ///
    /// The future owns a copy of the key (so that nothing is looked up before its first
    /// poll), which is why the key type must be `Send + 'static`: keys borrowed from a
    /// shorter-lived value, or held in an `Rc`, suit [`try_acquire`](Keyed::try_acquire)
    /// and [`get`](Keyed::get) but not this.
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
        K: Borrow<Q> + Send + 'static,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let hash = self.hash(key);
        let mut held = Held {
            keyed: self.clone(),
            hash,
            key: key.to_owned(),
            limiter: None,
        };
        // Nothing is looked at before the first poll, so that a future dropped unpolled
        // takes nothing.
        async move {
            let step = held
                .keyed
                .with_slot(hash, held.key.borrow(), |slot, at| {
                    acquire_step(slot, at, permits)
                })
                .map_err(AcquireError::from);
            let observer = &held.keyed.inner.observer;
            let (result, class) = match step {
                Ok((Step::Decided(result), class)) => (result, class),
                Err(refused) => (Err(refused), observer.class_of(&held.key)),
                Ok((Step::Call(limiter), class)) => {
                    let acquire = held.limiter.insert(limiter).acquire(permits);
                    let inner = &held.keyed.inner;
                    if inner.observer.name().is_none() {
                        return acquire.await;
                    }
                    let observer = &inner.observer;
                    return watched(&inner.clock, observer, class, permits, acquire).await;
                }
            };
            observer.acquired(permits, class, &result, None);
            result
        }
    }

    /// The whole limiter of `key`, inserted from the template if the key is new (a key
    /// held as a word is unfolded into it); acquires nothing. The key is not forgotten
    /// while the returned `Arc` lives, nor while a composite waits in its limiter's line.
    /// [`get`](Keyed::get) is the same for a key already held, and inserts none.
    ///
    /// For a request that takes from this key and from other limiters in one decision,
    /// [`member`](Keyed::member) is the better member: it decides on the key's word while
    /// nobody waits on it, where this makes the key whole (about 950 bytes for a bucket,
    /// in three allocations) and keeps it whole while the `Arc` lives.
    ///
    /// # Errors
    ///
    /// [`TooManyKeys`] when `key` is new, [`max_keys`](KeyedBuilder::max_keys) keys are
    /// held, and no room could be made (see [the memory bound](Keyed#the-memory-bound)).
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
    /// all((per_ip.get_or_insert(&client)?, &global))?.acquire(1).await?;
    /// assert_eq!(per_ip.get(&client).map(|bucket| bucket.available()), Some(4));
    /// assert_eq!(global.available(), 499);
    /// # Ok(())
    /// # }
    /// ```
    pub fn get_or_insert<Q>(&self, key: &Q) -> Result<Arc<L>, TooManyKeys>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let (limiter, _) = self.with_slot(self.hash(key), key, |mut slot, at| slot.whole(at))?;
        Ok(self.with_keys_part(limiter))
    }

    /// [`get_or_insert`](Keyed::get_or_insert) under its old name, with its refusal as a
    /// [`TryAcquireError::TooManyKeys`].
    ///
    /// # Errors
    ///
    /// [`TryAcquireError::TooManyKeys`] when `get_or_insert` refuses the key.
    ///
    /// # Examples
    ///
    /// ```
    /// # #![allow(deprecated)]
    /// use token_bucket::{Keyed, Limiter, Rate, TokenBucket};
    ///
    /// let per_key: Keyed<u8, TokenBucket> = Keyed::new(TokenBucket::new(Rate::per_second(1), 2)?);
    /// assert_eq!(per_key.limiter(&7)?.available(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[deprecated(
        note = "use `get_or_insert`: it inserts the key, acquires nothing, and refuses only with `TooManyKeys`"
    )]
    pub fn limiter<Q>(&self, key: &Q) -> Result<Arc<L>, TryAcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        Ok(self.get_or_insert(key)?)
    }

    /// The limiter of `key`, if the key is held; `None` if it was never seen or was
    /// forgotten (its limiter would then be fresh), and then no key is added.
    ///
    /// A key held as a word is made whole for the handle: a whole limiter holding exactly
    /// what the word held. The key is neither forgotten nor folded back into its word
    /// while the returned `Arc` lives; once it is dropped, the key folds back at its next
    /// `try_acquire` or `acquire`, as a wait in its line ends, or at a sweep (see
    /// [how a key is held](Keyed#how-a-key-is-held)). Keep the `Arc`, not a clone of the
    /// limiter inside it: a `TokenBucket`
    /// cloned out of it stays tied to that bucket but does not keep the key, which may
    /// then fold back into its word or be forgotten, leaving the clone on a bucket of
    /// its own. Settings changed through it (a bucket's
    /// [`set_rate`](crate::TokenBucket::set_rate) or
    /// [`set_capacity`](crate::TokenBucket::set_capacity)) keep the key whole, with its
    /// own settings, but last only while the key is held: once its limiter is idle it may
    /// be forgotten, and the key comes back with a fresh copy of the template. A bucket's
    /// [`stats`](crate::TokenBucket::stats) count from when it was made whole.
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{KeyTemplate, Keyed, Limiter, Rate, TokenBucket};
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
        let limiter = self.visit_held(key, |mut slot, at| slot.whole(at))?;
        Some(self.with_keys_part(limiter))
    }

    /// Keys held whole now: each as its whole limiter (a bucket's waiter queue and refill
    /// task, a window's line), about 950 bytes for a bucket, rather than as its state word
    /// alone (see [how a key is held](Keyed#how-a-key-is-held)). With [`len`](Keyed::len),
    /// what the keys cost in memory. A key is whole while requests wait on it or a handle
    /// from [`get`](Keyed::get) or [`get_or_insert`](Keyed::get_or_insert) holds it, and
    /// folds back into its word after; every key of a limiter with no one-word form (a
    /// [`SlidingLog`](crate::SlidingLog), a [`SlidingWindow`](crate::SlidingWindow), a
    /// limiter of your own) is whole. Locks each shard in turn.
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{Keyed, Rate, TokenBucket};
    ///
    /// let per_key: Keyed<u8, TokenBucket> = Keyed::new(TokenBucket::new(Rate::per_second(1), 1)?);
    /// per_key.try_acquire(&0, 1)?;
    /// per_key.try_acquire(&1, 1)?;
    /// assert_eq!((per_key.len(), per_key.keys_held_whole()), (2, 0));
    /// let handle = per_key.get(&0);
    /// assert_eq!(per_key.keys_held_whole(), 1);
    /// drop(handle);
    /// per_key.try_acquire(&0, 0)?; // the key's next call folds it back
    /// assert_eq!(per_key.keys_held_whole(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn keys_held_whole(&self) -> usize {
        let shards = self.inner.shards.iter();
        shards.map(|shard| lock(shard).wholes()).sum()
    }

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
    fn with_slot<Q, R>(
        &self,
        hash: u64,
        key: &Q,
        visit: impl FnOnce(Slot<'_, L>, Option<&At<'_, L>>) -> R,
    ) -> Result<(R, Class), TooManyKeys>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut visit = visit;
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
    fn with_held<Q, R>(
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
    fn visit_held<Q, R>(
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

    /// Adds `key`, new, to `shard` (sweeping it first if it is due), and returns where its
    /// words are read now; `None` when there is no room for it.
    #[cold]
    fn add<Q>(&self, shard: &mut Shard<K, L>, hash: u64, key: &Q) -> Option<Option<At<'_, L>>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if shard.len() >= shard.sweep_at {
            self.sweep(shard);
        }
        let reservation = self.reserve_key()?;
        let at = shard.at(self.inner.compact.as_deref());
        let fresh = match &at {
            Some(at) => Ok(at.compact.idle_word(at.now)),
            None => Err(Arc::new(self.inner.template.fresh())),
        };
        shard.insert(hash, key.to_owned(), fresh, &self.inner.hasher);
        reservation.keep();
        Some(at)
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

    /// The hash of `key`: it picks the key's shard and its place in the shard's table.
    #[inline]
    fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.inner.hasher.hash_one(key)
    }

    /// The locked shard of the key whose hash is `hash`.
    #[inline]
    fn shard(&self, hash: u64) -> MutexGuard<'_, Shard<K, L>> {
        // The number of shards is a power of two, at most 2^16: the mask keeps bits 32 to
        // 47 of the hash, which the shard's table uses neither for a key's place (its low
        // bits) nor for its tag (the top 7). Picked from those, the keys of one shard
        // would share them and crowd its table.
        let index = (hash >> 32) as usize & (self.inner.shards.len() - 1);
        lock(&self.inner.shards[index])
    }

    /// Which form each shard's keys are in.
    #[cfg(all(test, not(loom)))]
    fn forms(&self) -> Vec<shard::Forms> {
        let shards = self.inner.shards.iter();
        shards.map(|shard| lock(shard).forms()).collect()
    }

    /// Sweeps `shard` (see [`Shard::sweep`]).
    fn sweep(&self, shard: &mut Shard<K, L>) -> usize {
        let inner = &self.inner;
        let forgotten = shard.sweep(inner.compact.as_deref(), &inner.keys, &inner.hasher);
        inner.observer.forgot(forgotten);
        forgotten
    }

    /// Lets go of `limiter`, a handle on the whole limiter of `key` (whose hash is
    /// `hash`), and folds the key back into its word if that was the last handle besides
    /// the table's and its line is empty.
    fn release(&self, hash: u64, key: &K, limiter: Arc<L>) {
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
fn lock<K, L>(shard: &ShardLock<K, L>) -> MutexGuard<'_, Shard<K, L>> {
    shard.0.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A call on a key's slot: `decide` on its word when it is one (or folds into one now),
/// else its whole limiter, to be asked with the lock released.
#[inline(always)]
fn step<L: KeyTemplate, D>(
    mut slot: Slot<'_, L>,
    at: Option<&At<'_, L>>,
    decide: impl FnOnce(&Compact<L>, &mut u64, u64) -> D,
) -> Step<L, D> {
    match on_word(&mut slot, at, decide) {
        Some(decided) => Step::Decided(decided),
        None => Step::Call(slot.whole(at)),
    }
}

/// `acquire`'s first poll on a key's slot: served on its word when it is one (or folds
/// into one now) and the permits are there, or refused there when they never could be;
/// else to wait in its whole limiter's line, made from the word if need be.
fn acquire_step<L: KeyTemplate>(
    mut slot: Slot<'_, L>,
    at: Option<&At<'_, L>>,
    permits: u64,
) -> Step<L, Result<(), AcquireError>> {
    let decided = on_word(&mut slot, at, |compact, word, reading| {
        compact.try_acquire_word(word, permits, reading)
    });
    match decided {
        Some(Ok(())) => Step::Decided(Ok(())),
        Some(Err(TryAcquireError::ExceedsLimit { requested, limit })) => {
            Step::Decided(Err(AcquireError::ExceedsLimit { requested, limit }))
        }
        // Limited (a word refuses nothing else): the whole limiter's line decides when.
        Some(Err(_)) | None => Step::Call(slot.whole(at)),
    }
}

/// `decide` on a key's word, with the compact form and the reading of now, if the key is
/// one (or folds into one now).
#[inline(always)]
fn on_word<L: KeyTemplate, D>(
    slot: &mut Slot<'_, L>,
    at: Option<&At<'_, L>>,
    decide: impl FnOnce(&Compact<L>, &mut u64, u64) -> D,
) -> Option<D> {
    let at = at?;
    let word = slot.word(at)?;
    Some(decide(at.compact, word, at.reading))
}

/// Awaits `acquire`, a named `Keyed`'s request for `permits` on its key's whole
/// limiter, and reports how it ended to `observer`: decided on its first poll, or after
/// waiting from then (on `clock`), the wait in a span of its own.
async fn watched<K, F: Future<Output = Result<(), AcquireError>>>(
    clock: &Clock,
    observer: &KeyedObserver<K>,
    class: Class,
    permits: u64,
    acquire: F,
) -> Result<(), AcquireError> {
    let since = clock.now();
    let mut acquire = std::pin::pin!(acquire);
    let first_poll =
        std::future::poll_fn(|context| std::task::Poll::Ready(acquire.as_mut().poll(context)))
            .await;
    if let std::task::Poll::Ready(result) = first_poll {
        observer.acquired(permits, class, &result, None);
        return result;
    }
    #[cfg(feature = "tracing")]
    let span = observer.decisions(class).wait_span(permits);
    #[cfg(feature = "tracing")]
    let result = match &span {
        Some(span) => tracing::Instrument::instrument(acquire, span.clone()).await,
        None => acquire.await,
    };
    #[cfg(not(feature = "tracing"))]
    let result = acquire.await;
    let waited = std::time::Duration::from_nanos(clock.now().saturating_sub(since));
    // Reported in the wait's span, as the grant ends the wait.
    #[cfg(feature = "tracing")]
    let _entered = span.as_ref().map(tracing::Span::enter);
    observer.acquired(permits, class, &result, Some(waited));
    result
}

/// What a `Keyed::acquire` future owns: its key, and the key's whole limiter once it
/// waits in its line. Dropped as the future ends or is dropped, it lets go of the
/// limiter and folds the key back into its word if it was the last to use it.
struct Held<K: Hash + Eq, L: KeyTemplate> {
    keyed: Keyed<K, L>,
    hash: u64,
    key: K,
    limiter: Option<Arc<L>>,
}

impl<K: Hash + Eq, L: KeyTemplate> Drop for Held<K, L> {
    fn drop(&mut self) {
        if let Some(limiter) = self.limiter.take() {
            self.keyed.release(self.hash, &self.key, limiter);
        }
    }
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
    name: Option<String>,
    /// The classes its keys are sorted into for its metrics, and how.
    classes: Option<(Vec<&'static str>, Classify<K>)>,
    keys: PhantomData<fn() -> K>,
}

impl<K, L: KeyTemplate> KeyedBuilder<K, L> {
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
    /// or above 65,536; [`ConfigError::BadKeyClasses`] and
    /// [`ConfigError::RepeatedKeyClass`] for key [`class`](KeyedBuilder::class)es that are
    /// none, too many, or name one class twice.
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
        let classes = self
            .classes
            .map(|(names, classify)| KeyClasses::new(names, classify));
        let classes = classes.transpose()?;
        // Checked before it is named, so that a refused `Keyed` registers no metric.
        let observer = match &self.name {
            Some(name) => KeyedObserver::named(name, classes),
            None => KeyedObserver::default(),
        };
        let keyed = Keyed::observed(self.template, self.max_keys, shards, observer);
        #[cfg(feature = "metrics")]
        {
            let keys = Arc::downgrade(&keyed.inner.keys);
            let observer = &keyed.inner.observer;
            observer.gauge(move || Some(keys.upgrade()?.load(Ordering::Relaxed)));
        }
        Ok(keyed)
    }

    /// The name the `Keyed` reports under (see [`observe`](crate::observe)): the
    /// `limiter` label of its metrics (feature `metrics`, with the label `kind` =
    /// `keyed`) and the `limiter` field of its events (feature `tracing`). A `Keyed`
    /// without a name reports nothing. Any string is a name, the empty one included.
    /// Names are labels, so keep them few: one per limit in the program.
    ///
    /// Keys are never labels, and its keys' limiters are never named: the `Keyed` reports
    /// their decisions under its own name. From [`try_acquire`](Keyed::try_acquire),
    /// [`try_acquire_decision`](Keyed::try_acquire_decision) and
    /// [`acquire`](Keyed::acquire): the permits admitted
    /// (`token_bucket_admitted_permits_total`), the requests refused
    /// (`token_bucket_refused_requests_total`, with a `debug` event), and the requests
    /// that waited (`token_bucket_waited_requests_total`, the seconds they waited in
    /// `token_bucket_wait_seconds`, and a `debug` span around each wait). Of its keys:
    /// new keys refused with [`TooManyKeys`](TryAcquireError::TooManyKeys)
    /// ([`TOO_MANY_KEYS`](crate::observe::TOO_MANY_KEYS), each also counted as refused),
    /// idle keys forgotten by its sweeps ([`FORGOTTEN_KEYS`](crate::observe::FORGOTTEN_KEYS)),
    /// and the keys held, a gauge ([`KEYS`](crate::observe::KEYS)) set by
    /// [`record_gauges`](crate::observe::record_gauges). Its metrics are registered when
    /// it is built, with the recorder installed then.
    ///
    /// What it leaves out: the calls on a key's limiter handed out by
    /// [`get`](Keyed::get) or [`get_or_insert`](Keyed::get_or_insert) (and a new key
    /// `get_or_insert` refuses for want of room: no request was made), and its keys' part
    /// in composites ([`member`](Keyed::member)).
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{Keyed, Rate, TokenBucket};
    ///
    /// let per_user: Keyed<u64, TokenBucket> =
    ///     Keyed::builder(TokenBucket::new(Rate::per_second(5), 5)?).name("per-user").build()?;
    /// assert_eq!(per_user.name(), Some("per-user"));
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn name(mut self, name: impl Into<String>) -> KeyedBuilder<K, L> {
        self.name = Some(name.into());
        self
    }

    /// Sorts its keys into a few `classes` (a tenant's tier, say) for a named `Keyed`'s
    /// metrics: each of its decision metrics (permits admitted, requests refused, requests
    /// that waited, seconds waited) gets the label `class`, the class `classify` names for
    /// the key. A key whose class is not one of `classes` is counted under
    /// [`OTHER_CLASS`](crate::observe::OTHER_CLASS) (`"other"`), so that the label stays
    /// bounded. Keys are still never labels; its key metrics (keys held, forgotten,
    /// refused for want of room) are not by class.
    ///
    /// `classify` is called under the key's shard's lock, on each decision of a named
    /// `Keyed` (on an owned copy of the key for a new key refused for want of room): make
    /// it quick, and let it not call this `Keyed`. A `Keyed` without a
    /// [`name`](KeyedBuilder::name) reports nothing, and never calls it.
    ///
    /// # Errors
    ///
    /// From [`build`](KeyedBuilder::build): [`ConfigError::BadKeyClasses`] for no class,
    /// or more than [`MAX_KEY_CLASSES`](crate::observe::MAX_KEY_CLASSES);
    /// [`ConfigError::RepeatedKeyClass`] for a class named twice.
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{ConfigError, Keyed, Rate, TokenBucket};
    ///
    /// #[derive(Clone, Hash, PartialEq, Eq)]
    /// struct Tenant {
    ///     id: u64,
    ///     paying: bool,
    /// }
    ///
    /// let template = TokenBucket::new(Rate::per_second(10), 10)?;
    /// let per_tenant: Keyed<Tenant, _> = Keyed::builder(template.clone())
    ///     .name("per-tenant")
    ///     .class(["free", "paying"], |tenant: &Tenant| match tenant.paying {
    ///         true => "paying",
    ///         false => "free",
    ///     })
    ///     .build()?;
    /// per_tenant.try_acquire(&Tenant { id: 7, paying: true }, 1)?;
    ///
    /// let twice = Keyed::<Tenant, _>::builder(template).class(["free", "free"], |_| "free");
    /// assert_eq!(twice.build().unwrap_err(), ConfigError::RepeatedKeyClass { class: "free" });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn class(
        mut self,
        classes: impl IntoIterator<Item = &'static str>,
        classify: impl Fn(&K) -> &'static str + Send + Sync + 'static,
    ) -> KeyedBuilder<K, L> {
        self.classes = Some((classes.into_iter().collect(), Box::new(classify)));
        self
    }
}

impl<K, L> fmt::Debug for KeyedBuilder<K, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedBuilder")
            .field("max_keys", &self.max_keys)
            .field("shards", &self.shards)
            .field("name", &self.name)
            .field("classes", &self.classes.as_ref().map(|(names, _)| names))
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
