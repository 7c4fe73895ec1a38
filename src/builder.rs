//! [`Builder`]: every setting of a [`TokenBucket`], checked at once by `build`.

use crate::bucket::TokenBucket;
use crate::error::ConfigError;
use crate::rate::Rate;
use crate::state::Settings;

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
    pub fn rate(mut self, rate: Rate) -> Builder {
        self.rate = Some(rate);
        self
    }

    /// The most tokens the bucket holds: the largest burst. Defaults to the rate's amount.
    pub fn capacity(mut self, capacity: u64) -> Builder {
        self.capacity = Some(capacity);
        self
    }

    /// The tokens the bucket starts with. Defaults to the capacity (full).
    pub fn initial(mut self, initial: u64) -> Builder {
        self.initial = Some(initial);
        self
    }

    /// The most tokens that may be queued (by takes and waits together). A request that
    /// would pass it fails at once with [`TakeError::QueueFull`](crate::TakeError::QueueFull),
    /// so memory stays bounded under overload. Zero means nothing may queue. Unlimited by
    /// default.
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
            queue_limit: self.queue_limit.unwrap_or(u64::MAX),
        })
    }
}
