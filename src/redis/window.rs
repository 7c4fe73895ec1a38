//! What the two window limiters share: a limit of permits per window, checked (the
//! window a whole number of microseconds, Redis's resolution, and short enough that every
//! time the scripts compute stays exact), passed to their scripts the same way, and the
//! constructor and accessors of [`RedisFixedWindow`](super::RedisFixedWindow) and
//! [`RedisSlidingLog`](super::RedisSlidingLog).

use std::time::Duration;

use super::algorithm::sealed::Algorithm;
use super::connection::RedisConnection;
use super::{RedisLimiter, RedisOptions};
use crate::error::ConfigError;
use crate::quota::Policy;

/// The longest window: 2^50 µs, about 35 years. Server time in microseconds plus a
/// window then stays below 2^53, where Lua's doubles stop counting exactly, until the
/// year 2200.
const MAX_WINDOW: Duration = Duration::from_micros(1 << 50);

/// A limit per window, ready to be passed to a window script. (Public only in name, as
/// [`WindowKind`] is: the module is private.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSettings {
    limit: u64,
    window: Duration,
    window_micros: u64,
}

impl WindowSettings {
    /// Checks `limit` (at most `max_limit`) and `window`.
    fn new(limit: u64, window: Duration, max_limit: u64) -> Result<WindowSettings, ConfigError> {
        if limit == 0 {
            return Err(ConfigError::ZeroLimit);
        }
        if limit > max_limit {
            return Err(ConfigError::LimitTooLarge {
                limit,
                max: max_limit,
            });
        }
        if window.is_zero() {
            return Err(ConfigError::ZeroWindow);
        }
        if !window.subsec_nanos().is_multiple_of(1_000) || window > MAX_WINDOW {
            return Err(ConfigError::UnsupportedWindow {
                window,
                max: MAX_WINDOW,
            });
        }
        Ok(WindowSettings {
            limit,
            window,
            // At most 2^50 by the check above.
            window_micros: window.as_micros() as u64,
        })
    }
}

/// A window limiter's kind: its tag and its bounds. Each kind's settings are a
/// [`WindowSettings`]; the rest of [`Algorithm`] follows. Sealed, like [`Algorithm`]:
/// public in a private module, so that the limiters' public impls may name it.
pub trait WindowKind: std::fmt::Debug + Send + Sync + 'static {
    /// As [`Algorithm::TAG`]. Its script takes the limit, the window in microseconds and
    /// the permits asked for.
    const TAG: &'static str;

    /// As [`Algorithm::KIND`].
    const KIND: &'static str;

    /// The largest limit the kind accepts.
    const MAX_LIMIT: u64;

    fn from_settings(settings: WindowSettings) -> Self;

    fn settings(&self) -> &WindowSettings;
}

impl<K: WindowKind> Algorithm for K {
    const TAG: &'static str = K::TAG;

    const KIND: &'static str = K::KIND;

    fn limit(&self) -> u64 {
        self.settings().limit
    }

    fn arguments(&self, permits: u64) -> [u64; 3] {
        let settings = self.settings();
        [settings.limit, settings.window_micros, permits]
    }

    fn whole_permits(&self, units: u64) -> u64 {
        units
    }

    fn policy(&self) -> Policy {
        let settings = self.settings();
        Policy {
            limit: settings.limit,
            window: settings.window,
        }
    }
}

/// The bounds of [`RedisFixedWindow`](super::RedisFixedWindow) and
/// [`RedisSlidingLog`](super::RedisSlidingLog), the same whatever the connection (named
/// here for the default one, so that `RedisSlidingLog::MAX_LIMIT` needs no connection
/// type).
impl<K: WindowKind> RedisLimiter<K> {
    /// The largest limit: for [`RedisFixedWindow`](super::RedisFixedWindow) 2^52, so that
    /// a count plus a request stays below 2^53, which Lua counts exactly; for
    /// [`RedisSlidingLog`](super::RedisSlidingLog) 65,536, so that one key holds at most
    /// about 4 MB in Redis and one decision adds at most that many members.
    pub const MAX_LIMIT: u64 = K::MAX_LIMIT;

    /// The longest window: 2^50 µs, about 35 years.
    pub const MAX_WINDOW: Duration = MAX_WINDOW;
}

/// The constructor and accessors of [`RedisFixedWindow`](super::RedisFixedWindow) and
/// [`RedisSlidingLog`](super::RedisSlidingLog).
impl<K: WindowKind, C: RedisConnection> RedisLimiter<K, C> {
    /// At most `limit` permits per key in each `window` (for a
    /// [`RedisFixedWindow`](super::RedisFixedWindow)) or in any interval of `window` (for
    /// a [`RedisSlidingLog`](super::RedisSlidingLog)), decided by Redis over
    /// `connection`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroLimit`], [`ConfigError::LimitTooLarge`] above
    /// [`MAX_LIMIT`](Self::MAX_LIMIT), [`ConfigError::ZeroWindow`],
    /// [`ConfigError::UnsupportedWindow`] for a window that is not a whole number of
    /// microseconds or is longer than [`MAX_WINDOW`](Self::MAX_WINDOW), and
    /// [`ConfigError::ZeroTimeout`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::redis::{driver, FailurePolicy, RedisFixedWindow, RedisOptions, RedisSlidingLog};
    /// use token_bucket::ConfigError;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // A connection that connects on first use: nothing here talks to Redis.
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let config = driver::aio::ConnectionManagerConfig::new();
    /// let connection = driver::aio::ConnectionManager::new_lazy_with_config(client, config)?;
    /// let options = RedisOptions::new(FailurePolicy::FailClosed);
    ///
    /// let window = Duration::from_nanos(1_500);
    /// assert_eq!(
    ///     RedisFixedWindow::new(connection.clone(), 10, window, options.clone()).unwrap_err(),
    ///     ConfigError::UnsupportedWindow { window, max: RedisFixedWindow::MAX_WINDOW },
    /// );
    /// let limit = RedisSlidingLog::MAX_LIMIT + 1;
    /// assert_eq!(
    ///     RedisSlidingLog::new(connection, limit, Duration::from_secs(1), options).unwrap_err(),
    ///     ConfigError::LimitTooLarge { limit, max: RedisSlidingLog::MAX_LIMIT },
    /// );
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(
        connection: C,
        limit: u64,
        window: Duration,
        options: RedisOptions,
    ) -> Result<RedisLimiter<K, C>, ConfigError> {
        let settings = WindowSettings::new(limit, window, K::MAX_LIMIT)?;
        RedisLimiter::with_algorithm(connection, K::from_settings(settings), options)
    }

    /// The length of the window.
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
    /// let options = RedisOptions::new(FailurePolicy::FailOpen);
    /// let limiter = RedisFixedWindow::new(connection, 10, Duration::from_secs(1), options)?;
    /// assert_eq!(limiter.window(), Duration::from_secs(1));
    /// # Ok(())
    /// # }
    /// ```
    pub fn window(&self) -> Duration {
        self.algorithm().settings().window
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_whole_microseconds_up_to_the_longest() {
        let settings = WindowSettings::new(5, Duration::from_micros(1500), 10).unwrap();
        assert_eq!((settings.limit, settings.window_micros), (5, 1500));
        assert!(WindowSettings::new(10, MAX_WINDOW, 10).is_ok());
    }

    #[test]
    fn refuses_bad_settings_naming_them() {
        let second = Duration::from_secs(1);
        assert_eq!(
            WindowSettings::new(0, second, 10),
            Err(ConfigError::ZeroLimit)
        );
        assert_eq!(
            WindowSettings::new(11, second, 10),
            Err(ConfigError::LimitTooLarge { limit: 11, max: 10 })
        );
        assert_eq!(
            WindowSettings::new(1, Duration::ZERO, 10),
            Err(ConfigError::ZeroWindow)
        );
        for window in [
            Duration::from_nanos(1_500),
            Duration::from_nanos(999),
            MAX_WINDOW + Duration::from_micros(1),
        ] {
            let error = WindowSettings::new(1, window, 10).unwrap_err();
            assert_eq!(
                error,
                ConfigError::UnsupportedWindow {
                    window,
                    max: MAX_WINDOW
                }
            );
            assert!(
                error.to_string().contains(&format!("{window:?}")),
                "{error}"
            );
        }
    }
}
