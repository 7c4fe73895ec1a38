//! [`RedisFixedWindow`]: at most `limit` permits per key in each window, the window
//! starting at the key's first request.

use ::redis::aio::ConnectionManager;

use super::window::{WindowKind, WindowSettings};
use super::RedisLimiter;

/// A fixed-window limiter in Redis: at most `limit` permits per key in each window.
///
/// A key's window starts at its first request and lasts `window` on the Redis server's
/// clock; the first request after it ends starts the next, and the key expires when its
/// window ends. Like the in-process [`FixedWindow`](crate::FixedWindow) it admits up to
/// twice the limit around a window's end; [`RedisSlidingLog`](super::RedisSlidingLog) is
/// exact. State per key: a small hash of two integers. Made with
/// [`new`](RedisLimiter::new).
///
/// ```no_run
/// use std::time::Duration;
/// use token_bucket::redis::{driver, FailurePolicy, RedisFixedWindow, RedisOptions};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = driver::Client::open("redis://127.0.0.1/")?;
/// let connection = driver::aio::ConnectionManager::new(client).await?;
/// // 1,000 calls per API key per minute.
/// let options = RedisOptions::new(FailurePolicy::FailOpen);
/// let limiter = RedisFixedWindow::new(connection, 1_000, Duration::from_secs(60), options)?;
/// limiter.try_acquire("api-key-7", 1).await?;
/// # Ok(())
/// # }
/// ```
pub type RedisFixedWindow<C = ConnectionManager> = RedisLimiter<FixedWindowScript, C>;

/// The settings and script of a [`RedisFixedWindow`].
///
/// ```
/// use token_bucket::redis::{FixedWindowScript, RedisAlgorithm};
///
/// fn is_an_algorithm<A: RedisAlgorithm>() {}
/// is_an_algorithm::<FixedWindowScript>();
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedWindowScript {
    settings: WindowSettings,
}

impl WindowKind for FixedWindowScript {
    const TAG: &'static str = "fw";

    const KIND: &'static str = "fixed_window";

    // A count plus a request stays below 2^53.
    const MAX_LIMIT: u64 = 1 << 52;

    fn from_settings(settings: WindowSettings) -> Self {
        FixedWindowScript { settings }
    }

    fn settings(&self) -> &WindowSettings {
        &self.settings
    }
}
