//! What a Redis limiter does when Redis cannot decide, and its other options: the key
//! prefix and the timeout on every call.

use std::time::Duration;

use crate::error::ConfigError;

/// What a Redis limiter answers when Redis cannot decide: it is unreachable, it returned
/// an error, or it did not answer within the [timeout](RedisOptions::with_timeout).
///
/// There is no safe default: failing open keeps the service up but lets traffic through
/// unlimited while Redis is away; failing closed protects what is behind the limiter but
/// turns a Redis outage into an outage of everything that asks it. So it is always
/// chosen explicitly, in [`RedisOptions::new`].
///
/// ```
/// use token_bucket::redis::{FailurePolicy, RedisOptions};
///
/// let options = RedisOptions::new(FailurePolicy::FailOpen);
/// assert_eq!(options.policy(), FailurePolicy::FailOpen);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailurePolicy {
    /// Allow the request, and count it in
    /// [`fail_open_count`](super::RedisLimiter::fail_open_count), so that monitoring can
    /// see how many decisions were not made.
    FailOpen,
    /// Refuse the request with [`RedisLimitError::Unavailable`](super::RedisLimitError::Unavailable)
    /// or [`RedisLimitError::Timeout`](super::RedisLimitError::Timeout).
    FailClosed,
}

/// A Redis limiter's options: its [`FailurePolicy`], the prefix of its keys, the timeout
/// on every call to Redis, and the [name](Self::with_name) it reports under.
///
/// Settings are checked when the limiter is made: a zero timeout is refused there with
/// [`ConfigError::ZeroTimeout`].
///
/// ```
/// use std::time::Duration;
/// use token_bucket::redis::{FailurePolicy, RedisOptions};
///
/// let options = RedisOptions::new(FailurePolicy::FailClosed)
///     .with_prefix("billing:")
///     .with_timeout(Duration::from_millis(50));
/// assert_eq!(options.prefix(), "billing:");
/// assert_eq!(options.timeout(), Duration::from_millis(50));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RedisOptions {
    policy: FailurePolicy,
    prefix: String,
    timeout: Duration,
    name: Option<String>,
}

impl RedisOptions {
    /// The timeout unless told otherwise: a healthy Redis on the same network answers in
    /// well under a millisecond, so 100 ms means it is in trouble.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(100);

    /// The key prefix unless told otherwise.
    pub const DEFAULT_PREFIX: &'static str = "rate-limit:";

    /// Options with `policy`, the [default prefix](Self::DEFAULT_PREFIX) and the
    /// [default timeout](Self::DEFAULT_TIMEOUT).
    ///
    /// ```
    /// use token_bucket::redis::{FailurePolicy, RedisOptions};
    ///
    /// let options = RedisOptions::new(FailurePolicy::FailClosed);
    /// assert_eq!(options.prefix(), RedisOptions::DEFAULT_PREFIX);
    /// assert_eq!(options.timeout(), RedisOptions::DEFAULT_TIMEOUT);
    /// ```
    pub fn new(policy: FailurePolicy) -> RedisOptions {
        RedisOptions {
            policy,
            prefix: Self::DEFAULT_PREFIX.to_owned(),
            timeout: Self::DEFAULT_TIMEOUT,
            name: None,
        }
    }

    /// Starts every key with `prefix`, so that several services, or several limits of
    /// one service, can share one Redis. A limiter's key for `key` is
    /// `<prefix><kind>:<key>`, `<kind>` being `tb`, `fw` or `sl` for the token bucket,
    /// fixed window and sliding log: limiters of different kinds never meet, but two
    /// limiters of one kind with different settings need different prefixes, or they
    /// would read each other's state. Keep `{` out of the prefix where keys are sharded
    /// by hash slot (Redis Cluster): it would start the hash tag that
    /// [`RedisAll::new`](super::RedisAll::new) needs in the keys.
    ///
    /// ```
    /// use token_bucket::redis::{FailurePolicy, RedisOptions};
    ///
    /// let options = RedisOptions::new(FailurePolicy::FailOpen).with_prefix("search-api:");
    /// assert_eq!(options.prefix(), "search-api:");
    /// ```
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> RedisOptions {
        self.prefix = prefix.into();
        self
    }

    /// Gives each call to Redis at most `timeout`; past it the [policy](FailurePolicy)
    /// decides. Must be longer than zero.
    ///
    /// A call that timed out may still have run on Redis and taken its permits: the
    /// limiter never admits more than its limit because of that, it may only admit less.
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::redis::{FailurePolicy, RedisOptions};
    ///
    /// let options = RedisOptions::new(FailurePolicy::FailOpen).with_timeout(Duration::from_millis(20));
    /// assert_eq!(options.timeout(), Duration::from_millis(20));
    /// ```
    pub fn with_timeout(mut self, timeout: Duration) -> RedisOptions {
        self.timeout = timeout;
        self
    }

    /// Names the limiter: it reports its decisions under `name`, the label `limiter` of its
    /// metrics (feature `metrics`) and the field `limiter` of its events (feature
    /// `tracing`). A limiter without a name reports nothing, and pays one test of an empty
    /// field on each decision. Name a limit, never a key: the keys a limiter decides on
    /// are never labels.
    ///
    /// What a named limiter reports (see [`observe`](crate::observe)):
    ///
    /// - [`REDIS_DECISIONS`](crate::observe::REDIS_DECISIONS)`{outcome="admitted"|"refused"}`:
    ///   its verdicts;
    /// - [`REDIS_ERRORS`](crate::observe::REDIS_ERRORS)`{error=...}`: its calls to Redis
    ///   that failed, by a bounded kind (`timeout`, `connection`, `script`...);
    /// - [`REDIS_FAIL_OPEN`](crate::observe::REDIS_FAIL_OPEN) and
    ///   [`REDIS_FAIL_CLOSED`](crate::observe::REDIS_FAIL_CLOSED): the requests its
    ///   [policy](FailurePolicy) answered because Redis could not decide.
    ///
    /// Each with the labels `limiter` and `kind` (`token_bucket`, `fixed_window`,
    /// `sliding_log`). Its metrics are registered when the limiter is made: install the
    /// exporter's recorder first. Its events, with the target `token_bucket`: a `warn` for
    /// each request allowed because Redis could not decide, with the error; a `debug` for
    /// each refusal (by the limit, by the fail-closed policy, or by Redis for the keys'
    /// hash slots); a `debug` span `wait` around the waiting of an
    /// [`acquire`](super::RedisLimiter::acquire) refused at first (of a
    /// [`RedisAll`](super::RedisAll), the span of its first named member's limiter), with
    /// a `trace` event before each sleep and when it is granted. Nothing else at `info` or
    /// above.
    ///
    /// A [`LeasedBucket`](super::LeasedBucket) is named on its own, by
    /// [`LeaseOptions::with_name`](super::LeaseOptions::with_name).
    ///
    /// ```
    /// use token_bucket::redis::{FailurePolicy, RedisOptions};
    ///
    /// let options = RedisOptions::new(FailurePolicy::FailOpen).with_name("search-api");
    /// assert_eq!(options.name(), Some("search-api"));
    /// assert_eq!(RedisOptions::new(FailurePolicy::FailOpen).name(), None);
    /// ```
    pub fn with_name(mut self, name: impl Into<String>) -> RedisOptions {
        self.name = Some(name.into());
        self
    }

    /// The name the limiter reports under, if [`with_name`](Self::with_name) gave one.
    ///
    /// ```
    /// use token_bucket::redis::{FailurePolicy, RedisOptions};
    ///
    /// let options = RedisOptions::new(FailurePolicy::FailClosed).with_name("billing");
    /// assert_eq!(options.name(), Some("billing"));
    /// ```
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// What the limiter answers when Redis cannot decide.
    ///
    /// ```
    /// use token_bucket::redis::{FailurePolicy, RedisOptions};
    ///
    /// assert_eq!(RedisOptions::new(FailurePolicy::FailClosed).policy(), FailurePolicy::FailClosed);
    /// ```
    pub fn policy(&self) -> FailurePolicy {
        self.policy
    }

    /// The prefix of every key.
    ///
    /// ```
    /// use token_bucket::redis::{FailurePolicy, RedisOptions};
    ///
    /// assert_eq!(RedisOptions::new(FailurePolicy::FailOpen).with_prefix("a:").prefix(), "a:");
    /// ```
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The most each call to Redis may take.
    ///
    /// ```
    /// use token_bucket::redis::{FailurePolicy, RedisOptions};
    ///
    /// let options = RedisOptions::new(FailurePolicy::FailOpen);
    /// assert_eq!(options.timeout(), RedisOptions::DEFAULT_TIMEOUT);
    /// ```
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Refuses the options a limiter could not work with.
    pub(crate) fn check(&self) -> Result<(), ConfigError> {
        if self.timeout.is_zero() {
            return Err(ConfigError::ZeroTimeout);
        }
        Ok(())
    }
}
