//! What an algorithm gives the generic [`RedisLimiter`](super::RedisLimiter): its tag in
//! keys and in the script's arguments, the arguments of a request, and its limit.

/// An algorithm a [`RedisLimiter`](super::RedisLimiter) runs in Redis:
/// [`TokenBucketScript`](super::TokenBucketScript),
/// [`FixedWindowScript`](super::FixedWindowScript) or
/// [`SlidingLogScript`](super::SlidingLogScript). Sealed: the crate's scripts are the
/// only ones, since the limiter trusts their replies.
///
/// ```
/// use token_bucket::redis::{RedisAlgorithm, RedisLimiter};
///
/// /// Works with any of the Redis limiters.
/// fn most_at_once<A: RedisAlgorithm>(limiter: &RedisLimiter<A>) -> u64 {
///     limiter.limit()
/// }
/// ```
pub trait RedisAlgorithm: sealed::Algorithm {}

impl<A: sealed::Algorithm> RedisAlgorithm for A {}

pub(crate) mod sealed {
    pub trait Algorithm: std::fmt::Debug + Send + Sync + 'static {
        /// Written into each Redis key after the prefix, so that limiters of different
        /// kinds never read each other's state; and sent to the script, which runs the
        /// algorithm of that tag (`lua/*.lua`) on the key.
        const TAG: &'static str;

        /// The label `kind` of a named limiter's metrics and events.
        const KIND: &'static str;

        /// The most permits one request may ask for: the capacity or the limit.
        fn limit(&self) -> u64;

        /// The algorithm's three arguments in the script for a request of `permits` (at
        /// most [`limit`](Self::limit)). The last grows in proportion to `permits`, so
        /// requests on one key can be added up.
        fn arguments(&self, permits: u64) -> [u64; 3];

        /// The whole permits in `units` of what the script counts (the unit of the last
        /// of [`arguments`](Self::arguments)): a bucket's parts of a token, a window's
        /// permits.
        fn whole_permits(&self, units: u64) -> u64;

        /// Its budget as permits per window.
        fn policy(&self) -> crate::quota::Policy;
    }
}
