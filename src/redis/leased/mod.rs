//! [`LeasedBucket`]: a local front over one key of a [`RedisTokenBucket`], for hot keys.
//! It takes the bucket's tokens in batches (leases) and grants them in process, so most
//! requests need no call to Redis.
//!
//! - `budget.rs`: the leases held, each usable until its lifetime ends.
//! - `sizing.rs`: how many tokens to ask for.
//! - `front.rs`: the requests, served in order from the leases held; it starts the task.
//! - `task.rs`: the task that takes leases and gives them back, through what it asks of
//!   the front (`Leases`), not the front itself.
//! - `source.rs`: the calls to Redis (`lua/lease.lua`).
//!
//! It uses the Redis limiters' plumbing in `redis/` (the connection, `scripts.rs`, the
//! timeout of `decision.rs`, `observe.rs`, the token bucket it fronts) and `rate`,
//! `error`; nothing else in `redis/` uses it (`redis/mod.rs` only re-exports it).

mod budget;
mod front;
mod options;
mod sizing;
mod source;
mod task;
#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use ::redis::aio::ConnectionManager;

use self::front::Front;
pub use self::options::LeaseOptions;
use self::source::RedisSource;
use super::connection::RedisConnection;
use super::observe::LeaseObserver;
use super::{RedisLimitError, RedisTokenBucket};
use crate::error::ConfigError;

/// A local front over one key of a [`RedisTokenBucket`]: it takes tokens from the Redis
/// bucket in batches, leases, and grants them from its in-process budget, so that a hot
/// key costs Redis one call per batch rather than one per request. Made by
/// [`RedisTokenBucket::leased`].
///
/// **The bound.** Every token granted here was taken from the Redis bucket, and is granted
/// only within the lease lifetime `L` ([`LeaseOptions::with_lifetime`], 100 ms unless
/// told otherwise) of the moment the call that took it began, which is no later than
/// Redis granted it. What is left when the lifetime ends goes back to Redis. So across
/// every process on the key, any interval of length `t` sees at most
/// `capacity + rate × (t + L)` tokens granted, against `capacity + rate × t` without
/// leases.
///
/// **Lease size** follows demand: the tokens this front granted over the last lifetime,
/// or those queued if more, at most the largest lease ([`LeaseOptions::with_max_lease`],
/// a quarter of the capacity unless told otherwise, so that one process cannot drain the
/// bucket). A call asks for at least half of that (and at least what the first queued
/// request lacks): under contention each call then brings a batch, rather than the few
/// tokens gained since another process's call.
///
/// **Giving back.** Leases go back to Redis when their lifetime ends, when the front has
/// granted nothing for a quarter of the lifetime, when it is [closed](Self::close), and
/// when its last handle is dropped. Redis takes back the unused tokens less what the
/// bucket gained since it granted the lease (had the tokens never been taken, a full
/// bucket would have stopped gaining), and never fills the bucket past its capacity, which
/// keeps the bound above. Each give-back is applied once, however often a connection
/// sends it: Redis remembers it in a key beside the bucket's (`…:given:<lease>`, in its
/// hash slot) for as long as giving it back could return anything.
///
/// **Order.** [`take`](Self::take) requests are served first in, first out, in this
/// process; [`try_take`](Self::try_take) never passes them. Across processes there is no
/// order: each front takes its leases when it needs them.
///
/// **No quota.** Unlike [`RedisLimiter::try_acquire_decision`](super::RedisLimiter::try_acquire_decision),
/// a front reports no [`Quota`](crate::Quota) for the `RateLimit` header fields, because
/// it knows none it could vouch for. It decides in process, from its leases, without
/// reading the bucket: what it holds ([`LeaseStats::held`]) is neither what the key has
/// left (Redis holds the rest, other fronts hold theirs) nor a bound on it, since the
/// front may lease more; and the key is whole again only once every front's leases have
/// come back and the bucket has refilled, which no front sees. A lease call's reply is
/// stale by the next request, and reading Redis on each would cost the call per request
/// that leasing is there to save. Its [`policy`](super::RedisLimiter::policy) is its
/// limiter's; for exact quotas on a key, decide it with the limiter itself.
///
/// A cheap-to-clone handle: clones share the front. Leased and unleased limiters on one
/// key share its bucket.
///
/// ```no_run
/// use token_bucket::redis::{driver, FailurePolicy, LeaseOptions, RedisOptions, RedisTokenBucket};
/// use token_bucket::Rate;
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = driver::Client::open("redis://127.0.0.1/")?;
/// let connection = driver::aio::ConnectionManager::new(client).await?;
/// let options = RedisOptions::new(FailurePolicy::FailOpen);
/// // The search API as a whole: 20,000 requests a second across every server.
/// let limiter = RedisTokenBucket::new(connection, Rate::per_second(20_000), 2_000, options)?;
/// let search = limiter.leased("search-api", LeaseOptions::new())?;
/// search.take(1).await?;
/// # Ok(())
/// # }
/// ```
pub struct LeasedBucket<C: RedisConnection = ConnectionManager> {
    handle: Arc<Handle<C>>,
}

/// What a front's handles share; its drop closes the front.
struct Handle<C: RedisConnection> {
    front: Arc<Front<RedisSource<C>>>,
    options: LeaseOptions,
}

impl<C: RedisConnection> Drop for Handle<C> {
    fn drop(&mut self) {
        self.front.shut();
    }
}

/// A snapshot of a [`LeasedBucket`]'s work, from [`LeasedBucket::stats`].
///
/// ```
/// use token_bucket::redis::{driver, FailurePolicy, LeaseOptions, RedisOptions, RedisTokenBucket};
/// use token_bucket::Rate;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = driver::Client::open("redis://127.0.0.1/")?;
/// let config = driver::aio::ConnectionManagerConfig::new();
/// let connection = driver::aio::ConnectionManager::new_lazy_with_config(client, config)?;
/// let options = RedisOptions::new(FailurePolicy::FailClosed);
/// let limiter = RedisTokenBucket::new(connection, Rate::per_second(100), 100, options)?;
/// let stats = limiter.leased("hot", LeaseOptions::new())?.stats();
/// assert_eq!((stats.granted, stats.redis_calls, stats.held), (0, 0, 0));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseStats {
    /// Tokens granted by this front (those allowed by a failing-open policy included).
    pub granted: u64,
    /// Tokens taken from Redis in leases.
    pub leased: u64,
    /// Tokens offered back to Redis (Redis takes back less: see [`LeasedBucket`]).
    pub given_back: u64,
    /// Calls to Redis: leases asked for, granted or not, and leases given back.
    pub redis_calls: u64,
    /// Tokens held now that can still be granted.
    pub held: u64,
    /// Requests queued now.
    pub queued: usize,
}

impl<C: RedisConnection> RedisTokenBucket<C> {
    /// A [`LeasedBucket`] over `key`'s bucket: a local front that takes its tokens in
    /// batches. Make one per process and hot key, and share it (it is cheap to clone):
    /// two fronts in one process on one key would each hold their own leases.
    ///
    /// # Errors
    ///
    /// [`ConfigError::BadLeaseLifetime`] when the lease lifetime is zero or longer than
    /// [`LeaseOptions::MAX_LIFETIME`], and [`ConfigError::BadMaxLease`] when the largest
    /// lease is zero or larger than the capacity.
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::redis::{driver, FailurePolicy, LeaseOptions, RedisOptions, RedisTokenBucket};
    /// use token_bucket::{ConfigError, Rate};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let config = driver::aio::ConnectionManagerConfig::new();
    /// let connection = driver::aio::ConnectionManager::new_lazy_with_config(client, config)?;
    /// let options = RedisOptions::new(FailurePolicy::FailClosed);
    /// let limiter = RedisTokenBucket::new(connection, Rate::per_second(100), 100, options)?;
    /// assert_eq!(
    ///     limiter.leased("hot", LeaseOptions::new().with_max_lease(101)).unwrap_err(),
    ///     ConfigError::BadMaxLease { max_lease: 101, capacity: 100 },
    /// );
    /// let leased = limiter.leased("hot", LeaseOptions::new().with_lifetime(Duration::from_millis(50)))?;
    /// assert_eq!(leased.redis_key(), "rate-limit:tb:hot");
    /// # Ok(())
    /// # }
    /// ```
    pub fn leased(&self, key: &str, options: LeaseOptions) -> Result<LeasedBucket<C>, ConfigError> {
        let settings = options.settings(self.capacity())?;
        let source = RedisSource::new(self.clone(), self.redis_key(key));
        // Named once its options are checked, so that a refused front registers nothing.
        let observer = match options.name() {
            Some(name) => LeaseObserver::named(name),
            None => LeaseObserver::default(),
        };
        let front = Arc::new(Front::new(source, settings, observer));
        #[cfg(feature = "metrics")]
        {
            let watched = Arc::downgrade(&front);
            front
                .observer
                .bucket()
                .gauge(move || Some(watched.upgrade()?.held_and_queued()));
        }
        Ok(LeasedBucket {
            handle: Arc::new(Handle { front, options }),
        })
    }
}

impl<C: RedisConnection> LeasedBucket<C> {
    fn front(&self) -> &Arc<Front<RedisSource<C>>> {
        &self.handle.front
    }

    /// Takes `tokens`, waiting as long as it must: at once from the tokens held when
    /// nobody is queued, else in line, first in, first out, while the front takes leases
    /// from Redis. Taking zero tokens succeeds at once.
    ///
    /// # Errors
    ///
    /// - [`RedisLimitError::ExceedsLimit`] when `tokens` is above the capacity.
    /// - [`RedisLimitError::Closed`] once the front is [closed](Self::close).
    /// - Under [`FailurePolicy::FailClosed`](super::FailurePolicy::FailClosed),
    ///   [`RedisLimitError::Unavailable`] or [`RedisLimitError::Timeout`] when a call for
    ///   a lease fails while it waits (every request then waiting gets it); under
    ///   [`FailurePolicy::FailOpen`](super::FailurePolicy::FailOpen) those are allowed
    ///   and [counted](super::RedisLimiter::fail_open_count) on the limiter. A lease
    ///   that comes back after its lifetime passed is such a failed call:
    ///   [`RedisLimitError::LeaseExpiredOnArrival`] naming the round trip and the
    ///   lifetime.
    /// - [`RedisLimitError::NoRuntime`] when it must wait outside a tokio runtime.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped while it waits, it leaves the line and takes nothing; tokens
    /// granted to it before it saw them go back to the front.
    ///
    /// ```no_run
    /// use token_bucket::redis::{driver, FailurePolicy, LeaseOptions, RedisOptions, RedisTokenBucket};
    /// use token_bucket::Rate;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let connection = driver::aio::ConnectionManager::new(client).await?;
    /// let options = RedisOptions::new(FailurePolicy::FailClosed);
    /// let limiter = RedisTokenBucket::new(connection, Rate::per_second(5_000), 500, options)?;
    /// let leased = limiter.leased("checkout", LeaseOptions::new())?;
    /// leased.take(1).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn take(&self, tokens: u64) -> Result<(), RedisLimitError> {
        self.front().take(tokens).await
    }

    /// Takes `tokens` if they can be had now: from the tokens held when nobody is queued,
    /// else by one call for a lease (or the one under way), never waiting for tokens to
    /// accrue. Refused at once, without calling Redis, while a [`take`](Self::take) is
    /// queued (it never passes one) or while Redis's last refusal holds.
    ///
    /// # Errors
    ///
    /// - [`RedisLimitError::Limited`] with an estimate of the wait: the time the
    ///   bucket's rate takes to gain what is queued here ahead of the request and the
    ///   request itself, less what is held, and no less than the wait Redis gave. Other
    ///   processes may take first.
    /// - The others as [`take`](Self::take).
    ///
    /// # Cancel safety
    ///
    /// As [`take`](Self::take).
    ///
    /// ```no_run
    /// use token_bucket::redis::{driver, FailurePolicy, LeaseOptions, RedisLimitError, RedisOptions, RedisTokenBucket};
    /// use token_bucket::Rate;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let connection = driver::aio::ConnectionManager::new(client).await?;
    /// let options = RedisOptions::new(FailurePolicy::FailOpen);
    /// let limiter = RedisTokenBucket::new(connection, Rate::per_second(5_000), 500, options)?;
    /// let leased = limiter.leased("search", LeaseOptions::new())?;
    /// match leased.try_take(1).await {
    ///     Ok(()) => { /* serve */ }
    ///     Err(RedisLimitError::Limited { retry_after }) => println!("429, retry after {retry_after:?}"),
    ///     Err(other) => return Err(other.into()),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_take(&self, tokens: u64) -> Result<(), RedisLimitError> {
        self.front().try_take(tokens).await
    }

    /// Closes the front, for every handle: requests queued and later get
    /// [`RedisLimitError::Closed`], and the leases held go back to Redis; returns once
    /// they have (or their calls failed). Dropping the last handle does the same without
    /// waiting.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the front is closed on the first poll, and its leases go back
    /// whether or not this is awaited to the end.
    ///
    /// ```no_run
    /// use token_bucket::redis::{driver, FailurePolicy, LeaseOptions, RedisLimitError, RedisOptions, RedisTokenBucket};
    /// use token_bucket::Rate;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let connection = driver::aio::ConnectionManager::new(client).await?;
    /// let options = RedisOptions::new(FailurePolicy::FailClosed);
    /// let limiter = RedisTokenBucket::new(connection, Rate::per_second(5_000), 500, options)?;
    /// let leased = limiter.leased("search", LeaseOptions::new())?;
    /// leased.take(1).await?;
    /// leased.close().await; // on shutdown: the unused tokens go back
    /// assert!(matches!(leased.take(1).await, Err(RedisLimitError::Closed)));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn close(&self) {
        self.front().close().await;
    }

    /// Whether the front is closed.
    ///
    /// ```
    /// use token_bucket::redis::{driver, FailurePolicy, LeaseOptions, RedisOptions, RedisTokenBucket};
    /// use token_bucket::Rate;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let config = driver::aio::ConnectionManagerConfig::new();
    /// let connection = driver::aio::ConnectionManager::new_lazy_with_config(client, config)?;
    /// let options = RedisOptions::new(FailurePolicy::FailClosed);
    /// let limiter = RedisTokenBucket::new(connection, Rate::per_second(100), 100, options)?;
    /// let leased = limiter.leased("hot", LeaseOptions::new())?;
    /// assert!(!leased.is_closed());
    /// leased.close().await; // nothing held: no call to Redis
    /// assert!(leased.is_closed());
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_closed(&self) -> bool {
        self.front().is_closed()
    }

    /// What the front has done so far, and holds now.
    ///
    /// ```
    /// use token_bucket::redis::{driver, FailurePolicy, LeaseOptions, RedisOptions, RedisTokenBucket};
    /// use token_bucket::Rate;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let config = driver::aio::ConnectionManagerConfig::new();
    /// let connection = driver::aio::ConnectionManager::new_lazy_with_config(client, config)?;
    /// let options = RedisOptions::new(FailurePolicy::FailClosed);
    /// let limiter = RedisTokenBucket::new(connection, Rate::per_second(100), 100, options)?;
    /// let leased = limiter.leased("hot", LeaseOptions::new())?;
    /// assert_eq!(leased.stats().queued, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn stats(&self) -> LeaseStats {
        let front = self.front();
        let (held, queued) = front.held_and_queued();
        let counters = &front.counters;
        LeaseStats {
            granted: counters.granted.load(Ordering::Relaxed),
            leased: counters.leased.load(Ordering::Relaxed),
            given_back: counters.given_back.load(Ordering::Relaxed),
            redis_calls: counters.calls.load(Ordering::Relaxed),
            held,
            queued,
        }
    }

    /// The Redis key of the bucket it leases from (see
    /// [`RedisLimiter::redis_key`](super::RedisLimiter::redis_key)).
    ///
    /// ```
    /// use token_bucket::redis::{driver, FailurePolicy, LeaseOptions, RedisOptions, RedisTokenBucket};
    /// use token_bucket::Rate;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let config = driver::aio::ConnectionManagerConfig::new();
    /// let connection = driver::aio::ConnectionManager::new_lazy_with_config(client, config)?;
    /// let options = RedisOptions::new(FailurePolicy::FailClosed).with_prefix("api:");
    /// let limiter = RedisTokenBucket::new(connection, Rate::per_second(100), 100, options)?;
    /// assert_eq!(limiter.leased("hot", LeaseOptions::new())?.redis_key(), "api:tb:hot");
    /// # Ok(())
    /// # }
    /// ```
    pub fn redis_key(&self) -> &str {
        &self.front().source.key
    }

    /// The lease options it was made with.
    ///
    /// ```
    /// use token_bucket::redis::{driver, FailurePolicy, LeaseOptions, RedisOptions, RedisTokenBucket};
    /// use token_bucket::Rate;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let config = driver::aio::ConnectionManagerConfig::new();
    /// let connection = driver::aio::ConnectionManager::new_lazy_with_config(client, config)?;
    /// let options = RedisOptions::new(FailurePolicy::FailClosed);
    /// let limiter = RedisTokenBucket::new(connection, Rate::per_second(100), 100, options)?;
    /// let leased = limiter.leased("hot", LeaseOptions::new().with_max_lease(10))?;
    /// assert_eq!(leased.lease_options().max_lease(), Some(10));
    /// # Ok(())
    /// # }
    /// ```
    pub fn lease_options(&self) -> LeaseOptions {
        self.handle.options.clone()
    }

    /// The name it reports under, if [`LeaseOptions::with_name`] gave one.
    ///
    /// ```
    /// use token_bucket::redis::{driver, FailurePolicy, LeaseOptions, RedisOptions, RedisTokenBucket};
    /// use token_bucket::Rate;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let config = driver::aio::ConnectionManagerConfig::new();
    /// let connection = driver::aio::ConnectionManager::new_lazy_with_config(client, config)?;
    /// let options = RedisOptions::new(FailurePolicy::FailClosed).with_name("api");
    /// let limiter = RedisTokenBucket::new(connection, Rate::per_second(100), 100, options)?;
    /// let front = limiter.leased("hot", LeaseOptions::new().with_name("api-front"))?;
    /// assert_eq!(front.name(), Some("api-front"));
    /// // Its own name, not its limiter's.
    /// assert_eq!(limiter.leased("hot", LeaseOptions::new())?.name(), None);
    /// # Ok(())
    /// # }
    /// ```
    pub fn name(&self) -> Option<&str> {
        self.front().observer.name()
    }

    /// The largest lease in use: the one set, or a quarter of the capacity.
    ///
    /// ```
    /// use token_bucket::redis::{driver, FailurePolicy, LeaseOptions, RedisOptions, RedisTokenBucket};
    /// use token_bucket::Rate;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let config = driver::aio::ConnectionManagerConfig::new();
    /// let connection = driver::aio::ConnectionManager::new_lazy_with_config(client, config)?;
    /// let options = RedisOptions::new(FailurePolicy::FailClosed);
    /// let limiter = RedisTokenBucket::new(connection, Rate::per_second(100), 100, options)?;
    /// assert_eq!(limiter.leased("hot", LeaseOptions::new())?.max_lease(), 25);
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_lease(&self) -> u64 {
        self.front().settings.max_lease
    }
}

impl<C: RedisConnection> Clone for LeasedBucket<C> {
    fn clone(&self) -> Self {
        LeasedBucket {
            handle: Arc::clone(&self.handle),
        }
    }
}

impl<C: RedisConnection> fmt::Debug for LeasedBucket<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeasedBucket")
            .field("key", &self.redis_key())
            .field("bucket", self.front().source.bucket.algorithm())
            .field("options", &self.handle.options)
            .field("stats", &self.stats())
            .finish()
    }
}
