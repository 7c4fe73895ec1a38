//! What an algorithm gives the generic [`RedisLimiter`](super::RedisLimiter): its
//! script, the arguments of a request, and its limit.

use ::redis::Script;

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
    use super::Script;

    pub trait Algorithm: std::fmt::Debug + Send + Sync + 'static {
        /// Written into each Redis key after the prefix, so that limiters of different
        /// kinds never read each other's state.
        const TAG: &'static str;

        /// The Lua script that decides, loaded once per process.
        fn script(&self) -> &'static Script;

        /// The most permits one request may ask for: the capacity or the limit.
        fn limit(&self) -> u64;

        /// The script's `ARGV` for a request of `permits` (at most [`limit`](Self::limit)).
        fn arguments(&self, permits: u64) -> [u64; 3];
    }
}
