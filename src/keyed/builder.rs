//! [`Keyed::new`] and [`KeyedBuilder`]: a `Keyed`'s settings, checked once, and the
//! `Keyed` made of them.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::marker::PhantomData;
use std::num::NonZeroUsize;
use std::sync::Arc;

use crate::clock::Clock;
use crate::error::ConfigError;
use crate::keyed::compact::compact_of;
use crate::keyed::handle::{Inner, Keyed, ShardLock};
use crate::keyed::shard::Shard;
use crate::limiter::KeyTemplate;
use crate::observe::{Classify, KeyClasses, KeyedObserver};
use crate::sync::{AtomicUsize, Identity, Mutex};

/// The most shards a [`Keyed`] accepts.
const MAX_SHARDS: usize = 1 << 16;

/// Shards per available thread by default: enough that two threads rarely want the
/// same shard at once.
const SHARDS_PER_THREAD: usize = 4;

impl<K, L: KeyTemplate> Keyed<K, L> {
    /// One limiter per key, each a [`fresh`](crate::KeyTemplate::fresh) copy of `template`, with no
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

fn default_shards() -> usize {
    let threads = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
    threads
        .saturating_mul(SHARDS_PER_THREAD)
        .min(MAX_SHARDS)
        .next_power_of_two()
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
    /// [`TooManyKeys`](crate::TryAcquireError::TooManyKeys) if none is idle (see
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
            observer
                .gauge(move || Some(keys.upgrade()?.load(std::sync::atomic::Ordering::Relaxed)));
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
    /// new keys refused with [`TooManyKeys`](crate::TryAcquireError::TooManyKeys)
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
    /// [`name`](crate::KeyedBuilder::name) reports nothing, and never calls it.
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
