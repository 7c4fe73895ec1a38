//! [`Builder`]: every setting of a [`TokenBucket`], checked at once by `build`.

use crate::bucket::state::Settings;
use crate::bucket::TokenBucket;
use crate::error::ConfigError;
use crate::rate::Rate;

/// Settings for a [`TokenBucket`], from [`TokenBucket::builder`].
///
/// Only the rate is required. The capacity defaults to the rate's amount (a burst of one
/// period's worth), the bucket starts full, and the queue is unlimited.
///
/// ```
/// use token_bucket::{Rate, TokenBucket};
///
/// let template = TokenBucket::builder().rate(Rate::per_minute(60));
/// let bucket = template.build()?;
/// assert_eq!((bucket.capacity(), bucket.available()), (60, 60));
/// let empty = template.initial(0).build()?;
/// assert_eq!(empty.available(), 0);
/// # Ok::<(), token_bucket::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct Builder {
    rate: Option<Rate>,
    capacity: Option<u64>,
    initial: Option<u64>,
    queue_limit: Option<u64>,
}

impl Builder {
    /// The rate tokens are gained at. Required.
    ///
    /// ```
    /// # use token_bucket::{Rate, TokenBucket};
    /// let bucket = TokenBucket::builder().rate("20/s".parse::<Rate>()?).build()?;
    /// assert_eq!(bucket.rate(), Rate::per_second(20));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn rate(mut self, rate: Rate) -> Builder {
        self.rate = Some(rate);
        self
    }

    /// The most tokens the bucket holds: the largest burst. Defaults to the rate's amount.
    ///
    /// ```
    /// # use token_bucket::{Rate, TokenBucket};
    /// let bucket = TokenBucket::builder().rate(Rate::per_second(20)).capacity(1).build()?;
    /// assert_eq!(bucket.capacity(), 1);
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn capacity(mut self, capacity: u64) -> Builder {
        self.capacity = Some(capacity);
        self
    }

    /// The tokens the bucket starts with. Defaults to the capacity (full).
    ///
    /// ```
    /// # use token_bucket::{Rate, TokenBucket};
    /// let bucket = TokenBucket::builder().rate(Rate::per_second(20)).initial(3).build()?;
    /// assert_eq!(bucket.available(), 3);
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn initial(mut self, initial: u64) -> Builder {
        self.initial = Some(initial);
        self
    }

    /// The most tokens that may be queued (by takes and waits together). A request that
    /// would pass it fails at once with [`TakeError::QueueFull`](crate::TakeError::QueueFull),
    /// so memory stays bounded under overload. Zero means nothing may queue. Unlimited by
    /// default.
    ///
    /// ```
    /// # use token_bucket::{Rate, TakeError, TokenBucket};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::builder().rate(Rate::per_second(1)).initial(0).queue_limit(0).build()?;
    /// assert_eq!(bucket.take(1).await, Err(TakeError::QueueFull { queued: 0, limit: 0 }));
    /// # Ok(())
    /// # }
    /// ```
    pub fn queue_limit(mut self, tokens: u64) -> Builder {
        self.queue_limit = Some(tokens);
        self
    }

    /// Makes the bucket.
    ///
    /// # Errors
    ///
    /// [`ConfigError::MissingRate`] without a rate, [`ConfigError::ZeroRate`],
    /// [`ConfigError::ZeroCapacity`], and [`ConfigError::InitialExceedsCapacity`].
    ///
    /// ```
    /// use token_bucket::{ConfigError, Rate, TokenBucket};
    ///
    /// let error = TokenBucket::builder().rate(Rate::per_second(1)).capacity(2).initial(3).build();
    /// assert_eq!(error.unwrap_err(), ConfigError::InitialExceedsCapacity { initial: 3, capacity: 2 });
    /// ```
    pub fn build(&self) -> Result<TokenBucket, ConfigError> {
        let rate = self.rate.ok_or(ConfigError::MissingRate)?;
        let capacity = self.capacity.unwrap_or(rate.amount());
        TokenBucket::from_settings(Settings {
            rate,
            capacity,
            initial: self.initial.unwrap_or(capacity),
            queue_limit: self.queue_limit,
        })
    }
}
