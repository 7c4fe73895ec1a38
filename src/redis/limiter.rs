//! [`RedisLimiter`]: the keyed limiter whose state lives in Redis. The algorithm (token
//! bucket, fixed window, sliding log) decides in the script; a decision on one key is
//! made as any decision is (`decision.rs`): bounded by the timeout, under the failure
//! policy, waiting for `acquire`.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use ::redis::aio::ConnectionManager;

use super::algorithm::RedisAlgorithm;
use super::connection::RedisConnection;
use super::decision::{Common, Member, Part, Plan, Shared};
use super::error::RedisLimitError;
use super::policy::RedisOptions;
use crate::error::ConfigError;
use crate::quota::{Decision, Policy};

/// A keyed rate limiter whose state lives in Redis, shared by every process that uses
/// the same Redis, prefix and settings. Made as a [`RedisTokenBucket`](super::RedisTokenBucket),
/// [`RedisFixedWindow`](super::RedisFixedWindow) or
/// [`RedisSlidingLog`](super::RedisSlidingLog); see the [module docs](super) for how
/// they decide and what they promise.
///
/// A cheap-to-clone handle: clones share the connection and the
/// [`fail_open_count`](Self::fail_open_count). Each decision is one round trip, bounded
/// by the [timeout](RedisOptions::with_timeout).
///
/// `C` is the connection it decides over: any [`RedisConnection`], a
/// [`ConnectionManager`] unless another is given to `new`, which infers it (see
/// [Connections](super#connections)).
///
/// ```no_run
/// use token_bucket::redis::{driver, FailurePolicy, RedisLimitError, RedisOptions, RedisTokenBucket};
/// use token_bucket::Rate;
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = driver::Client::open("redis://127.0.0.1/")?;
/// let connection = driver::aio::ConnectionManager::new(client).await?;
/// // Each user: 10 requests a second, bursts of 20, across every server.
/// let limiter = RedisTokenBucket::new(
///     connection,
///     Rate::per_second(10),
///     20,
///     RedisOptions::new(FailurePolicy::FailOpen),
/// )?;
/// match limiter.try_acquire("user-42", 1).await {
///     Ok(()) => { /* serve */ }
///     Err(RedisLimitError::Limited { retry_after }) => println!("429, retry after {retry_after:?}"),
///     Err(other) => return Err(other.into()),
/// }
/// # Ok(())
/// # }
/// ```
pub struct RedisLimiter<A, C = ConnectionManager> {
    shared: Arc<Shared<A, C>>,
}

impl<A: RedisAlgorithm, C: RedisConnection> RedisLimiter<A, C> {
    /// A limiter running `algorithm` over `connection`, once `options` are checked.
    pub(crate) fn with_algorithm(
        connection: C,
        algorithm: A,
        options: RedisOptions,
    ) -> Result<Self, ConfigError> {
        options.check()?;
        Ok(RedisLimiter {
            shared: Arc::new(Shared {
                common: Common::new(options, A::KIND),
                algorithm,
                connection,
            }),
        })
    }

    /// The algorithm's settings.
    pub(crate) fn algorithm(&self) -> &A {
        &self.shared.algorithm
    }

    /// The connection it decides over.
    pub(crate) fn connection(&self) -> &C {
        &self.shared.connection
    }

    /// Its options, count of decisions not made, and jitter.
    pub(crate) fn common(&self) -> &Common {
        &self.shared.common
    }

    /// Takes `permits` for `key` if its limit allows now; never waits for permits. One
    /// round trip to Redis, which decides on its own clock; taking zero permits is
    /// allowed at once, without asking Redis.
    ///
    /// # Errors
    ///
    /// - [`RedisLimitError::Limited`] with how long until the same request could
    ///   succeed: never shorter than the true wait.
    /// - [`RedisLimitError::ExceedsLimit`] when `permits` is above the
    ///   [limit](Self::limit), without asking Redis.
    /// - Under [`FailurePolicy::FailClosed`](super::FailurePolicy::FailClosed),
    ///   [`RedisLimitError::Unavailable`] when Redis cannot decide and
    ///   [`RedisLimitError::Timeout`] when it does not answer in time; under
    ///   [`FailurePolicy::FailOpen`](super::FailurePolicy::FailOpen) those requests are
    ///   allowed and [counted](Self::fail_open_count).
    /// - [`RedisLimitError::NoRuntime`] when polled outside a tokio runtime.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes may or may not have taken the permits: the
    /// script may already be running on Redis. So a cancelled call can only make the
    /// limiter stricter, never let more through.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use token_bucket::redis::{driver, FailurePolicy, RedisFixedWindow, RedisLimitError, RedisOptions};
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let connection = driver::aio::ConnectionManager::new(client).await?;
    /// let limiter = RedisFixedWindow::new(
    ///     connection,
    ///     2,
    ///     Duration::from_secs(60),
    ///     RedisOptions::new(FailurePolicy::FailClosed),
    /// )?;
    /// limiter.try_acquire("api-key-7", 2).await?;
    /// assert!(matches!(
    ///     limiter.try_acquire("api-key-7", 1).await,
    ///     Err(RedisLimitError::Limited { .. })
    /// ));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire(&self, key: &str, permits: u64) -> Result<(), RedisLimitError> {
        let part = self.part(key);
        self.plan(&part).try_acquire(permits).await
    }

    /// [`try_acquire`](Self::try_acquire), and `key`'s [`Quota`](crate::Quota) right
    /// after, from the same script call: the state the decision read and wrote, at the
    /// instant of the server's clock it decided at, with no other request in between.
    /// What an HTTP response's `RateLimit` field needs; the same [`Decision`] as
    /// [`Limiter::try_acquire_decision`](crate::Limiter::try_acquire_decision) gives.
    ///
    /// - **Granted**: `Ok(Decision { result: Ok(()), quota: Some(..) })`, the quota after
    ///   the take.
    /// - **Refused**: `Ok(Decision { result: Err(TryAcquireError::Limited { retry_after }),
    ///   quota: Some(..) })`: `retry_after` as [`try_acquire`](Self::try_acquire)'s, the
    ///   quota of the key as it is (a refusal writes nothing).
    /// - **More than the [limit](Self::limit)**: `Ok(Decision { result:
    ///   Err(TryAcquireError::ExceedsLimit { .. }), quota: None })`, decided without
    ///   asking Redis, so nothing is known of the key.
    /// - **Zero permits** asks Redis for the key's quota and takes nothing:
    ///   `Ok(Decision { result: Ok(()), quota: Some(..) })`. (Unlike
    ///   [`try_acquire`](Self::try_acquire), which allows them without a call.)
    /// - **Redis cannot decide, under
    ///   [`FailurePolicy::FailOpen`](super::FailurePolicy::FailOpen)**: `Ok(Decision {
    ///   result: Ok(()), quota: None })`, allowed and [counted](Self::fail_open_count),
    ///   as `try_acquire` does; nothing is known of the key.
    ///
    /// The quota, read on the server's clock: [`remaining`](crate::Quota::remaining) is
    /// the whole permits the key could take at once (a bucket's whole tokens, none while
    /// tokens are reserved ahead by a [`LeasedBucket`](super::LeasedBucket); a window's
    /// limit less what it counts), and [`full_after`](crate::Quota::full_after) how long
    /// until it is whole again if nothing more is taken (a bucket full, a window ended, a
    /// log's newest permit no longer counting), in whole microseconds rounded up, so
    /// never short; zero when it is whole. A client on another machine measures from when
    /// it gets the answer, later than the decision: it is never told too early.
    ///
    /// # Errors
    ///
    /// Those `try_acquire` returns whatever Redis says:
    ///
    /// - Under [`FailurePolicy::FailClosed`](super::FailurePolicy::FailClosed),
    ///   [`RedisLimitError::Unavailable`] when Redis cannot decide and
    ///   [`RedisLimitError::Timeout`] when it does not answer in time.
    /// - [`RedisLimitError::NoRuntime`] when polled outside a tokio runtime.
    ///
    /// # Cancel safety
    ///
    /// As [`try_acquire`](Self::try_acquire): dropped before it completes, it may or may
    /// not have taken the permits.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use token_bucket::redis::{driver, FailurePolicy, RedisOptions, RedisTokenBucket};
    /// use token_bucket::{Rate, TryAcquireError};
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let connection = driver::aio::ConnectionManager::new(client).await?;
    /// let options = RedisOptions::new(FailurePolicy::FailClosed);
    /// let limiter = RedisTokenBucket::new(connection, Rate::per_second(10), 10, options)?;
    /// let decision = limiter.try_acquire_decision("user-42", 4).await?;
    /// assert_eq!(decision.result, Ok(()));
    /// if let Some(quota) = decision.quota {
    ///     // 6 left, unless another process took meanwhile; full again within 400 ms.
    ///     assert!(quota.remaining <= 6);
    ///     assert!(quota.full_after <= Duration::from_millis(1000));
    /// }
    /// let refused = limiter.try_acquire_decision("user-42", 10).await?;
    /// assert!(matches!(refused.result, Err(TryAcquireError::Limited { .. })));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire_decision(
        &self,
        key: &str,
        permits: u64,
    ) -> Result<Decision, RedisLimitError> {
        let part = self.part(key);
        let decided = self.plan(&part).decide(permits).await?;
        Ok(Decision {
            result: decided.result(),
            quota: decided.quota(&part[0], 0),
        })
    }

    /// Takes `permits` for `key`, waiting as long as its limit requires: after each
    /// refusal it sleeps the `retry_after` Redis gave, plus a random extra of up to a
    /// quarter of it (at least up to 1 ms, at most up to 1 s), then asks again.
    ///
    /// **Not first in, first out.** Waiters in different processes cannot see each
    /// other: whoever asks first once permits are back takes them, so a large request
    /// can be overtaken by small ones for as long as they keep coming. The jitter keeps
    /// callers refused together from all coming back in the same millisecond. Where
    /// strict order matters within one process, put an in-process limiter in front.
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Self::try_acquire), except [`RedisLimitError::Limited`], on
    /// which it waits. Under
    /// [`FailurePolicy::FailClosed`](super::FailurePolicy::FailClosed) it returns the first
    /// [`Unavailable`](RedisLimitError::Unavailable) or
    /// [`Timeout`](RedisLimitError::Timeout) rather than waiting for Redis to come back.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe while it sleeps: dropping it then takes nothing. Dropped while a call
    /// to Redis is under way it may or may not have taken the permits, as for
    /// [`try_acquire`](Self::try_acquire); it never takes more than asked.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use token_bucket::redis::{driver, FailurePolicy, RedisOptions, RedisSlidingLog};
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let connection = driver::aio::ConnectionManager::new(client).await?;
    /// // At most 5 exports per user in any hour.
    /// let limiter = RedisSlidingLog::new(
    ///     connection,
    ///     5,
    ///     Duration::from_secs(3600),
    ///     RedisOptions::new(FailurePolicy::FailClosed),
    /// )?;
    /// tokio::time::timeout(Duration::from_secs(10), limiter.acquire("user-42", 1)).await??;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(&self, key: &str, permits: u64) -> Result<(), RedisLimitError> {
        let part = self.part(key);
        self.plan(&part).acquire(permits).await
    }

    /// How many requests were allowed without a decision from Redis, under
    /// [`FailurePolicy::FailOpen`](super::FailurePolicy::FailOpen), since the limiter was
    /// made (clones share the count); a [`RedisAll`](super::RedisAll) that fails open
    /// counts here too, once a decision, for each of its members' limiters, and so does a
    /// [`LeasedBucket`](super::LeasedBucket) over it. Worth exporting as a metric: while it
    /// grows, nothing is limited. A [named](RedisOptions::with_name) limiter exports its
    /// own decisions so ([`REDIS_FAIL_OPEN`](crate::observe::REDIS_FAIL_OPEN)); a leased
    /// front reports its under its own name.
    ///
    /// ```no_run
    /// use token_bucket::redis::{driver, FailurePolicy, RedisOptions, RedisTokenBucket};
    /// use token_bucket::Rate;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let connection = driver::aio::ConnectionManager::new(client).await?;
    /// let options = RedisOptions::new(FailurePolicy::FailOpen);
    /// let limiter = RedisTokenBucket::new(connection, Rate::per_second(100), 100, options)?;
    /// limiter.try_acquire("tenant-3", 1).await?;
    /// println!("allowed while Redis was away: {}", limiter.fail_open_count());
    /// # Ok(())
    /// # }
    /// ```
    pub fn fail_open_count(&self) -> u64 {
        self.shared
            .common
            .fail_open_decisions
            .load(Ordering::Relaxed)
    }

    /// The most permits one request may ask for: a bucket's capacity, a window's limit.
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::redis::{driver, FailurePolicy, RedisOptions, RedisSlidingLog};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // A connection that connects on first use: nothing here talks to Redis.
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let config = driver::aio::ConnectionManagerConfig::new();
    /// let connection = driver::aio::ConnectionManager::new_lazy_with_config(client, config)?;
    /// let options = RedisOptions::new(FailurePolicy::FailClosed);
    /// let limiter = RedisSlidingLog::new(connection, 30, Duration::from_secs(60), options)?;
    /// assert_eq!(limiter.limit(), 30);
    /// # Ok(())
    /// # }
    /// ```
    pub fn limit(&self) -> u64 {
        self.shared.algorithm.limit()
    }

    /// The limiter's budget as permits per window, for the `RateLimit-Policy` header
    /// field: a window's limit per window; a bucket's capacity per the time its rate
    /// takes to fill it from empty (exact, rounded up to the nanosecond), so a bucket of
    /// 60 gaining 1 a second is 60 per minute.
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::redis::{driver, FailurePolicy, RedisOptions, RedisSlidingLog, RedisTokenBucket};
    /// use token_bucket::{Policy, Rate};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let config = driver::aio::ConnectionManagerConfig::new();
    /// let connection = driver::aio::ConnectionManager::new_lazy_with_config(client, config)?;
    /// let options = RedisOptions::new(FailurePolicy::FailClosed);
    /// let bucket = RedisTokenBucket::new(connection.clone(), Rate::per_second(1), 60, options.clone())?;
    /// assert_eq!(bucket.policy(), Policy { limit: 60, window: Duration::from_secs(60) });
    /// let log = RedisSlidingLog::new(connection, 30, Duration::from_secs(10), options)?;
    /// assert_eq!(log.policy(), Policy { limit: 30, window: Duration::from_secs(10) });
    /// # Ok(())
    /// # }
    /// ```
    pub fn policy(&self) -> Policy {
        self.shared.algorithm.policy()
    }

    /// The limiter's options.
    ///
    /// ```
    /// use token_bucket::redis::{driver, FailurePolicy, RedisOptions, RedisTokenBucket};
    /// use token_bucket::Rate;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let config = driver::aio::ConnectionManagerConfig::new();
    /// let connection = driver::aio::ConnectionManager::new_lazy_with_config(client, config)?;
    /// let options = RedisOptions::new(FailurePolicy::FailOpen).with_prefix("uploads:");
    /// let limiter = RedisTokenBucket::new(connection, Rate::per_second(5), 5, options)?;
    /// assert_eq!(limiter.options().prefix(), "uploads:");
    /// # Ok(())
    /// # }
    /// ```
    pub fn options(&self) -> &RedisOptions {
        &self.shared.common.options
    }

    /// The name it reports under, if [`RedisOptions::with_name`] gave one (see there
    /// what it reports).
    ///
    /// ```
    /// use token_bucket::redis::{driver, FailurePolicy, RedisOptions, RedisTokenBucket};
    /// use token_bucket::Rate;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let config = driver::aio::ConnectionManagerConfig::new();
    /// let connection = driver::aio::ConnectionManager::new_lazy_with_config(client, config)?;
    /// let options = RedisOptions::new(FailurePolicy::FailOpen);
    /// let rate = Rate::per_second(10);
    /// let named = RedisTokenBucket::new(connection.clone(), rate, 20, options.clone().with_name("uploads"))?;
    /// assert_eq!(named.name(), Some("uploads"));
    /// assert_eq!(RedisTokenBucket::new(connection, rate, 20, options)?.name(), None);
    /// # Ok(())
    /// # }
    /// ```
    pub fn name(&self) -> Option<&str> {
        self.shared.common.observer.name()
    }

    /// The Redis key that holds `key`'s state: `<prefix><kind>:<key>` (see
    /// [`RedisOptions::with_prefix`]). For inspecting or clearing it by hand.
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::redis::{driver, FailurePolicy, RedisFixedWindow, RedisOptions};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let config = driver::aio::ConnectionManagerConfig::new();
    /// let connection = driver::aio::ConnectionManager::new_lazy_with_config(client, config)?;
    /// let options = RedisOptions::new(FailurePolicy::FailOpen).with_prefix("billing:");
    /// let limiter = RedisFixedWindow::new(connection, 10, Duration::from_secs(1), options)?;
    /// assert_eq!(limiter.redis_key("user-42"), "billing:fw:user-42");
    /// # Ok(())
    /// # }
    /// ```
    pub fn redis_key(&self, key: &str) -> String {
        format!("{}{}:{key}", self.options().prefix(), A::TAG)
    }

    /// This limiter, erased, as one member of a decision.
    pub(crate) fn member_limiter(&self) -> Arc<dyn Member> {
        self.shared.clone()
    }

    /// `key` as the one key of a decision.
    fn part(&self, key: &str) -> [Part; 1] {
        [Part {
            limiter: self.member_limiter(),
            key: self.redis_key(key),
            count: 1,
        }]
    }

    /// A decision on the one key of `part`, under this limiter's options.
    fn plan<'a>(&self, part: &'a [Part; 1]) -> Plan<'a> {
        let options = self.options();
        Plan {
            parts: part,
            limiters: std::slice::from_ref(&part[0].limiter),
            policy: options.policy(),
            timeout: options.timeout(),
        }
    }
}

impl<A, C> Clone for RedisLimiter<A, C> {
    fn clone(&self) -> Self {
        RedisLimiter {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<A: fmt::Debug, C> fmt::Debug for RedisLimiter<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("algorithm", &self.shared.algorithm)
            .field("options", &self.shared.common.options)
            .field(
                "fail_open_count",
                &self
                    .shared
                    .common
                    .fail_open_decisions
                    .load(Ordering::Relaxed),
            )
            .finish_non_exhaustive()
    }
}
