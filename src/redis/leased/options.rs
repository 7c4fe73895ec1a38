//! [`LeaseOptions`]: a leased bucket's lease lifetime, largest lease and name.

use std::time::Duration;

use super::front::Settings;
use crate::error::ConfigError;

/// How a [`LeasedBucket`](super::LeasedBucket) leases tokens: for how long a leased
/// token may be granted (the lease lifetime `L`), and the most tokens one call to Redis
/// takes; and the [name](Self::with_name) it reports under.
///
/// Across every process on one key, any interval of length `t` sees at most
/// `capacity + rate × (t + L)` tokens granted: a longer lifetime lets leases be larger
/// (fewer calls to Redis) at the cost of that bound.
///
/// ```
/// use std::time::Duration;
/// use token_bucket::redis::LeaseOptions;
///
/// let options = LeaseOptions::new()
///     .with_lifetime(Duration::from_millis(50))
///     .with_max_lease(200);
/// assert_eq!(options.lifetime(), Duration::from_millis(50));
/// assert_eq!(options.max_lease(), Some(200));
/// assert_eq!(LeaseOptions::default().lifetime(), LeaseOptions::DEFAULT_LIFETIME);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseOptions {
    lifetime: Duration,
    max_lease: Option<u64>,
    name: Option<String>,
}

impl Default for LeaseOptions {
    fn default() -> LeaseOptions {
        LeaseOptions::new()
    }
}

impl LeaseOptions {
    /// The lease lifetime unless told otherwise: long enough for a batch to serve many
    /// requests, short enough that the bound's extra `rate × L` stays small.
    pub const DEFAULT_LIFETIME: Duration = Duration::from_millis(100);

    /// The longest lease lifetime accepted.
    pub const MAX_LIFETIME: Duration = Duration::from_secs(3600);

    /// The [default lifetime](Self::DEFAULT_LIFETIME), and the default largest lease: a
    /// quarter of the bucket's capacity (at least 1), so one process cannot drain the
    /// bucket in one call.
    ///
    /// ```
    /// use token_bucket::redis::LeaseOptions;
    ///
    /// assert_eq!(LeaseOptions::new().max_lease(), None);
    /// ```
    pub const fn new() -> LeaseOptions {
        LeaseOptions {
            lifetime: Self::DEFAULT_LIFETIME,
            max_lease: None,
            name: None,
        }
    }

    /// Leased tokens may be granted for at most `lifetime` after the call that took them
    /// began (so no later than `lifetime` after Redis granted them); the unused are then
    /// given back. Longer than zero and at most [`MAX_LIFETIME`](Self::MAX_LIFETIME).
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::redis::LeaseOptions;
    ///
    /// let options = LeaseOptions::new().with_lifetime(Duration::from_millis(20));
    /// assert_eq!(options.lifetime(), Duration::from_millis(20));
    /// ```
    pub const fn with_lifetime(mut self, lifetime: Duration) -> LeaseOptions {
        self.lifetime = lifetime;
        self
    }

    /// One call to Redis takes at most `max_lease` tokens (unless one request needs
    /// more). Between 1 and the bucket's capacity.
    ///
    /// ```
    /// use token_bucket::redis::LeaseOptions;
    ///
    /// assert_eq!(LeaseOptions::new().with_max_lease(64).max_lease(), Some(64));
    /// ```
    pub const fn with_max_lease(mut self, max_lease: u64) -> LeaseOptions {
        self.max_lease = Some(max_lease);
        self
    }

    /// Names the front: it reports under `name`, the label `limiter` of its metrics
    /// (feature `metrics`) and the field `limiter` of its events (feature `tracing`). A
    /// front without a name reports nothing, whatever its limiter's name: it reports under
    /// its own. Name a limit, never a key.
    ///
    /// What a named front reports (see [`observe`](crate::observe)), each with the labels
    /// `limiter` and `kind` (`token_bucket`):
    ///
    /// - its requests, as a named [`TokenBucket`](crate::TokenBucket) reports its own:
    ///   [`ADMITTED_PERMITS`](crate::observe::ADMITTED_PERMITS),
    ///   [`REFUSED_REQUESTS`](crate::observe::REFUSED_REQUESTS) (a `try_take` refused, or
    ///   more than the capacity asked for), [`WAITED_REQUESTS`](crate::observe::WAITED_REQUESTS)
    ///   and [`WAIT_SECONDS`](crate::observe::WAIT_SECONDS) (a request granted after it
    ///   queued), and, at each [`record_gauges`](crate::observe::record_gauges),
    ///   [`AVAILABLE_PERMITS`](crate::observe::AVAILABLE_PERMITS) (the tokens it holds)
    ///   and [`QUEUED_REQUESTS`](crate::observe::QUEUED_REQUESTS);
    /// - its calls to Redis: [`REDIS_LEASE_CALLS`](crate::observe::REDIS_LEASE_CALLS)`{call="take"|"give_back"}`,
    ///   [`REDIS_LEASED_TOKENS`](crate::observe::REDIS_LEASED_TOKENS),
    ///   [`REDIS_RETURNED_TOKENS`](crate::observe::REDIS_RETURNED_TOKENS) and
    ///   [`REDIS_ERRORS`](crate::observe::REDIS_ERRORS)`{error=...}`;
    /// - its requests answered because Redis could not decide, counted there only:
    ///   [`REDIS_FAIL_OPEN`](crate::observe::REDIS_FAIL_OPEN) and
    ///   [`REDIS_FAIL_CLOSED`](crate::observe::REDIS_FAIL_CLOSED).
    ///
    /// Its events, with the target `token_bucket`: a `warn` for each request allowed
    /// because Redis could not decide, with the error; a `debug` for each refusal (and each
    /// request refused because Redis could not decide, under fail-closed); a `debug` span
    /// `wait` around each request that queues, with a `trace` event when it is granted;
    /// `trace` events for each lease taken and given back, and a `debug` one for a
    /// give-back that failed. Nothing else at `info` or above.
    ///
    /// ```
    /// use token_bucket::redis::LeaseOptions;
    ///
    /// let options = LeaseOptions::new().with_name("search-front");
    /// assert_eq!(options.name(), Some("search-front"));
    /// assert_eq!(LeaseOptions::new().name(), None);
    /// ```
    pub fn with_name(mut self, name: impl Into<String>) -> LeaseOptions {
        self.name = Some(name.into());
        self
    }

    /// The name the front reports under, if [`with_name`](Self::with_name) gave one.
    ///
    /// ```
    /// use token_bucket::redis::LeaseOptions;
    ///
    /// assert_eq!(LeaseOptions::new().with_name("hot").name(), Some("hot"));
    /// ```
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The lease lifetime.
    ///
    /// ```
    /// use token_bucket::redis::LeaseOptions;
    ///
    /// assert_eq!(LeaseOptions::new().lifetime(), LeaseOptions::DEFAULT_LIFETIME);
    /// ```
    pub const fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// The largest lease, if set; else a quarter of the capacity is used.
    ///
    /// ```
    /// use token_bucket::redis::LeaseOptions;
    ///
    /// assert_eq!(LeaseOptions::new().with_max_lease(8).max_lease(), Some(8));
    /// ```
    pub const fn max_lease(&self) -> Option<u64> {
        self.max_lease
    }

    /// The settings for a bucket of `capacity`, or why there are none.
    pub(crate) fn settings(&self, capacity: u64) -> Result<Settings, ConfigError> {
        if self.lifetime.is_zero() || self.lifetime > Self::MAX_LIFETIME {
            return Err(ConfigError::BadLeaseLifetime {
                lifetime: self.lifetime,
                max: Self::MAX_LIFETIME,
            });
        }
        let max_lease = self.max_lease.unwrap_or((capacity / 4).max(1));
        if max_lease == 0 || max_lease > capacity {
            return Err(ConfigError::BadMaxLease {
                max_lease,
                capacity,
            });
        }
        Ok(Settings {
            lifetime: self.lifetime,
            // Soon enough that a front whose demand stopped gives back most of its
            // lease: what goes back shrinks by the rate for every moment it is held.
            idle: self.lifetime / 4,
            max_lease,
        })
    }
}
