//! [`RedisTokenBucket`]: a token bucket per key, its tokens counted exactly in parts of
//! a token that accrue a whole number per microsecond of the Redis server's clock.

use std::time::Duration;

use ::redis::aio::ConnectionManager;

use super::algorithm::sealed::Algorithm;
use super::connection::RedisConnection;
use super::{RedisLimiter, RedisOptions};
use crate::error::ConfigError;
use crate::quota::Policy;
use crate::rate::{gcd, Rate};

/// Lua's numbers are doubles: integers are exact below this.
const EXACT_BELOW: u128 = 1 << 53;

/// A token bucket per key in Redis: up to `capacity` tokens, gaining them at `rate`, a
/// request for `n` served when `n` are there. A key nobody used, or idle long enough to
/// be full again, is a full bucket: the key expires once its bucket is full, so Redis
/// holds only keys in use.
///
/// The script counts tokens exactly: in parts of a token such that a whole number of
/// parts accrues each microsecond (for 100/s, a part is 1/10,000 of a token and one
/// accrues per microsecond), and carries every remainder, like the in-process
/// [`TokenBucket`](crate::TokenBucket). Unlike it, waiters are not queued: see
/// [`acquire`](RedisLimiter::acquire). State per key: a small hash of two integers.
///
/// ```no_run
/// use token_bucket::redis::{driver, FailurePolicy, RedisOptions, RedisTokenBucket};
/// use token_bucket::Rate;
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = driver::Client::open("redis://127.0.0.1/")?;
/// let connection = driver::aio::ConnectionManager::new(client).await?;
/// // 5 uploads a minute per user, bursts of 10, shared by every server.
/// let options = RedisOptions::new(FailurePolicy::FailOpen).with_prefix("uploads:");
/// let limiter = RedisTokenBucket::new(connection, Rate::per_minute(5), 10, options)?;
/// limiter.acquire("user-42", 1).await?;
/// # Ok(())
/// # }
/// ```
pub type RedisTokenBucket<C = ConnectionManager> = RedisLimiter<TokenBucketScript, C>;

/// The settings and script of a [`RedisTokenBucket`].
///
/// ```
/// use token_bucket::redis::{RedisAlgorithm, TokenBucketScript};
///
/// fn is_an_algorithm<A: RedisAlgorithm>() {}
/// is_an_algorithm::<TokenBucketScript>();
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucketScript {
    rate: Rate,
    capacity: u64,
    /// Parts gained each microsecond: the rate in tokens per microsecond is
    /// `parts_per_micro / parts_per_token`, in lowest terms.
    parts_per_micro: u64,
    parts_per_token: u64,
}

impl TokenBucketScript {
    fn new(rate: Rate, capacity: u64) -> Result<TokenBucketScript, ConfigError> {
        let period_nanos = rate.period_nanos();
        if rate.amount() == 0 || period_nanos == 0 {
            return Err(ConfigError::ZeroRate);
        }
        if capacity == 0 {
            return Err(ConfigError::ZeroCapacity);
        }
        // amount tokens per period_nanos, so amount × 1,000 per period_nanos microseconds.
        let per_micro = u128::from(rate.amount()) * 1_000;
        let common = gcd(per_micro, period_nanos);
        let parts_per_micro = per_micro / common;
        let parts_per_token = period_nanos / common;
        // The script holds at most capacity × parts_per_token parts and adds up to
        // parts_per_micro to it before comparing: all must stay exact.
        let max_capacity = EXACT_BELOW.saturating_sub(1 + parts_per_micro) / parts_per_token;
        if u128::from(capacity) > max_capacity {
            return Err(ConfigError::UnsupportedRate {
                rate,
                capacity,
                // Below 2^53.
                max_capacity: max_capacity as u64,
            });
        }
        // Both below 2^53 when the capacity is accepted (it is at least 1).
        Ok(TokenBucketScript {
            rate,
            capacity,
            parts_per_micro: parts_per_micro as u64,
            parts_per_token: parts_per_token as u64,
        })
    }
}

impl TokenBucketScript {
    /// What `lease.lua` needs of the bucket, after the action: its capacity in parts, the
    /// parts gained each microsecond, and the parts in a token. All below 2^53.
    pub(crate) fn lease_arguments(&self) -> [u64; 3] {
        [
            self.capacity * self.parts_per_token,
            self.parts_per_micro,
            self.parts_per_token,
        ]
    }
}

impl Algorithm for TokenBucketScript {
    const TAG: &'static str = "tb";

    const KIND: &'static str = "token_bucket";

    fn limit(&self) -> u64 {
        self.capacity
    }

    fn arguments(&self, permits: u64) -> [u64; 3] {
        // Below 2^53: permits ≤ capacity, checked against parts_per_token when made.
        [
            self.capacity * self.parts_per_token,
            self.parts_per_micro,
            permits * self.parts_per_token,
        ]
    }

    fn whole_permits(&self, units: u64) -> u64 {
        units / self.parts_per_token
    }

    fn policy(&self) -> Policy {
        // The rate fills an empty bucket in capacity × period / amount, rounded up to the
        // nanosecond: below 2^53 µs (the capacity is bounded so), so in a Duration.
        let fill_nanos = (u128::from(self.capacity) * self.rate.period_nanos())
            .div_ceil(u128::from(self.rate.amount()));
        let seconds = fill_nanos / 1_000_000_000;
        let nanos = fill_nanos % 1_000_000_000;
        Policy {
            limit: self.capacity,
            // Fits: seconds below 2^34, nanos below a billion.
            window: Duration::new(seconds as u64, nanos as u32),
        }
    }
}

impl<C: RedisConnection> RedisLimiter<TokenBucketScript, C> {
    /// Buckets of `capacity` tokens gaining them at `rate`, one per key, kept in Redis
    /// over `connection`. Every bucket starts full.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroRate`], [`ConfigError::ZeroCapacity`],
    /// [`ConfigError::UnsupportedRate`] when the capacity in parts of a token (see the
    /// [type docs](RedisTokenBucket)) would reach 2^53 (at 100/s a capacity of up to
    /// about 900 billion is accepted, at one token an hour about 2.5 million), and
    /// [`ConfigError::ZeroTimeout`].
    ///
    /// ```
    /// use token_bucket::redis::{driver, FailurePolicy, RedisOptions, RedisTokenBucket};
    /// use token_bucket::{ConfigError, Rate};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let config = driver::aio::ConnectionManagerConfig::new();
    /// let connection = driver::aio::ConnectionManager::new_lazy_with_config(client, config)?;
    /// let options = RedisOptions::new(FailurePolicy::FailClosed);
    /// assert_eq!(
    ///     RedisTokenBucket::new(connection.clone(), Rate::per_second(10), 0, options.clone())
    ///         .unwrap_err(),
    ///     ConfigError::ZeroCapacity,
    /// );
    /// let options = options.with_timeout(std::time::Duration::ZERO);
    /// assert_eq!(
    ///     RedisTokenBucket::new(connection, Rate::per_second(10), 10, options).unwrap_err(),
    ///     ConfigError::ZeroTimeout,
    /// );
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(
        connection: C,
        rate: Rate,
        capacity: u64,
        options: RedisOptions,
    ) -> Result<RedisTokenBucket<C>, ConfigError> {
        let algorithm = TokenBucketScript::new(rate, capacity)?;
        RedisLimiter::with_algorithm(connection, algorithm, options)
    }

    /// The rate tokens accrue at.
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
    /// let limiter = RedisTokenBucket::new(connection, Rate::per_second(10), 20, options)?;
    /// assert_eq!(limiter.rate(), Rate::per_second(10));
    /// assert_eq!(limiter.capacity(), 20);
    /// # Ok(())
    /// # }
    /// ```
    pub fn rate(&self) -> Rate {
        self.algorithm().rate
    }

    /// The most tokens a bucket holds (and so the most one request may take).
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
    /// let limiter = RedisTokenBucket::new(connection, Rate::per_second(10), 20, options)?;
    /// assert_eq!(limiter.capacity(), 20);
    /// # Ok(())
    /// # }
    /// ```
    pub fn capacity(&self) -> u64 {
        self.algorithm().capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_accrue_a_whole_number_per_microsecond() {
        let cases = [
            // (rate, parts per microsecond, parts per token)
            (Rate::per_second(100), 1, 10_000),
            (Rate::per_second(2), 1, 500_000),
            (Rate::new(3, Duration::from_millis(7)), 3, 7_000),
            (Rate::new(5, Duration::from_nanos(250)), 20, 1),
            (Rate::per_hour(1), 1, 3_600_000_000),
            (Rate::new(7, Duration::from_nanos(1_500)), 14, 3),
        ];
        for (rate, parts_per_micro, parts_per_token) in cases {
            let script = TokenBucketScript::new(rate, 10).unwrap();
            assert_eq!(
                (script.parts_per_micro, script.parts_per_token),
                (parts_per_micro, parts_per_token),
                "{rate}"
            );
        }
        let script = TokenBucketScript::new(Rate::per_second(100), 20).unwrap();
        assert_eq!(script.arguments(3), [200_000, 1, 30_000]);
    }

    #[test]
    fn its_policy_is_the_capacity_per_the_time_the_rate_fills_it() {
        let cases = [
            (Rate::per_second(1), 60, Duration::from_secs(60)),
            (Rate::per_second(100), 10, Duration::from_millis(100)),
            // 10 × 7 ms / 3: 23,333,333.3 ns, rounded up.
            (
                Rate::new(3, Duration::from_millis(7)),
                10,
                Duration::from_nanos(23_333_334),
            ),
            (
                Rate::new(5, Duration::from_nanos(250)),
                4,
                Duration::from_nanos(200),
            ),
        ];
        for (rate, capacity, window) in cases {
            let script = TokenBucketScript::new(rate, capacity).unwrap();
            assert_eq!(
                script.policy(),
                Policy {
                    limit: capacity,
                    window
                },
                "{rate}"
            );
        }
        // The largest bucket at one token an hour fills in about 285 years.
        let largest = ((1u64 << 53) - 2) / 3_600_000_000;
        let script = TokenBucketScript::new(Rate::per_hour(1), largest).unwrap();
        assert_eq!(
            script.policy().window,
            Duration::from_secs(3_600) * largest as u32
        );
        assert_eq!(script.whole_permits(7_199_999_999), 1);
    }

    #[test]
    fn refuses_capacities_past_exact_counting_naming_the_largest() {
        let rate = Rate::per_hour(1);
        // 3.6e9 parts a token: the largest capacity keeps capacity × 3.6e9 + 1 < 2^53.
        let max_capacity = ((1u64 << 53) - 2) / 3_600_000_000;
        assert!(TokenBucketScript::new(rate, max_capacity).is_ok());
        let error = TokenBucketScript::new(rate, max_capacity + 1).unwrap_err();
        assert_eq!(
            error,
            ConfigError::UnsupportedRate {
                rate,
                capacity: max_capacity + 1,
                max_capacity
            }
        );
        let text = error.to_string();
        assert!(
            text.contains("1/h") && text.contains(&max_capacity.to_string()),
            "{text}"
        );

        // So fast that even one token cannot be counted.
        let rate = Rate::new(u64::MAX, Duration::from_nanos(1));
        assert_eq!(
            TokenBucketScript::new(rate, 1),
            Err(ConfigError::UnsupportedRate {
                rate,
                capacity: 1,
                max_capacity: 0
            })
        );
    }

    #[test]
    fn refuses_a_zero_rate_or_capacity() {
        assert_eq!(
            TokenBucketScript::new(Rate::per_second(0), 1),
            Err(ConfigError::ZeroRate)
        );
        assert_eq!(
            TokenBucketScript::new(Rate::new(1, Duration::ZERO), 1),
            Err(ConfigError::ZeroRate)
        );
        assert_eq!(
            TokenBucketScript::new(Rate::per_second(1), 0),
            Err(ConfigError::ZeroCapacity)
        );
    }
}
