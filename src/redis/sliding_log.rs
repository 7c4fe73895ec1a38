//! [`RedisSlidingLog`]: at most `limit` permits per key in any interval of `window`,
//! exactly, with one sorted-set member per permit.

use ::redis::aio::ConnectionManager;

use super::window::{WindowKind, WindowSettings};
use super::RedisLimiter;

/// The exact sliding-window limiter in Redis: at most `limit` permits per key in **any**
/// interval of length `window`.
///
/// A permit admitted at microsecond `t` of the Redis server's clock counts until
/// `t + window`, not included, as for the in-process [`SlidingLog`](crate::SlidingLog).
/// The key is a sorted set holding one member per permit still counting (about 60 bytes
/// each in Redis: at most `limit` per key), and expires when its newest permit stops
/// counting. A decision costs O(log n) in Redis, plus O(permits) to admit and the
/// removal of permits that stopped counting; so `limit` is capped at
/// [`MAX_LIMIT`](RedisLimiter::MAX_LIMIT). For large limits where a seam burst is
/// acceptable, [`RedisFixedWindow`](super::RedisFixedWindow) or
/// [`RedisTokenBucket`](super::RedisTokenBucket) keep two integers per key. Made with
/// [`new`](RedisLimiter::new).
///
/// ```no_run
/// use std::time::Duration;
/// use token_bucket::redis::{driver, FailurePolicy, RedisOptions, RedisSlidingLog};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = driver::Client::open("redis://127.0.0.1/")?;
/// let connection = driver::aio::ConnectionManager::new(client).await?;
/// // At most 3 password attempts per account in any 15 minutes.
/// let options = RedisOptions::new(FailurePolicy::FailClosed);
/// let limiter = RedisSlidingLog::new(connection, 3, Duration::from_secs(900), options)?;
/// limiter.try_acquire("account-1234", 1).await?;
/// # Ok(())
/// # }
/// ```
pub type RedisSlidingLog<C = ConnectionManager> = RedisLimiter<SlidingLogScript, C>;

/// The settings and script of a [`RedisSlidingLog`].
///
/// ```
/// use token_bucket::redis::{RedisAlgorithm, SlidingLogScript};
///
/// fn is_an_algorithm<A: RedisAlgorithm>() {}
/// is_an_algorithm::<SlidingLogScript>();
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingLogScript {
    settings: WindowSettings,
}

impl WindowKind for SlidingLogScript {
    const TAG: &'static str = "sl";

    const KIND: &'static str = "sliding_log";

    // One key then holds at most about 4 MB, and one decision adds at most that many
    // members.
    const MAX_LIMIT: u64 = 1 << 16;

    fn from_settings(settings: WindowSettings) -> Self {
        SlidingLogScript { settings }
    }

    fn settings(&self) -> &WindowSettings {
        &self.settings
    }
}
