//! [`Builder`]: every setting of a [`TokenBucket`], checked at once by `build`, and
//! [`TokenBucket::builder`], which makes one.

use crate::bucket::handle::TokenBucket;
use crate::bucket::state::Settings;
use crate::error::ConfigError;
use crate::rate::Rate;

impl TokenBucket {
    /// A [`Builder`] for the settings `new` does not take: the initial tokens and a limit
    /// on the queue.
    ///
    /// ```
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// let bucket = TokenBucket::builder()
    ///     .rate(Rate::per_second(100))
    ///     .capacity(10)
    ///     .initial(0)
    ///     .queue_limit(1_000)
    ///     .build()?;
    /// assert_eq!(bucket.available(), 0);
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn builder() -> Builder {
        Builder::default()
    }
}

/// Settings for a [`TokenBucket`], from [`TokenBucket::builder`].
///
/// Only the rate is required. The capacity defaults to the rate's amount (a burst of one
/// period's worth), the bucket starts full, and the queue is unlimited. More limits can
/// be added beside the first with [`limit`](Builder::limit).
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
#[derive(Debug, Clone, Default)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct Builder {
    rate: Option<Rate>,
    capacity: Option<u64>,
    /// The limits beside the first, in the order added.
    more: Vec<(Rate, u64)>,
    initial: Option<u64>,
    queue_limit: Option<u64>,
    name: Option<String>,
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

    /// Adds a limit beside the first (the one [`rate`](Builder::rate) and
    /// [`capacity`](Builder::capacity) set): `capacity` tokens at most, gained at `rate`.
    /// May be called several times, for quotas in layers such as "10 a second and 1,000
    /// an hour".
    ///
    /// A request then takes from every limit at one instant, or from none: it is served
    /// at the first nanosecond every limit holds its tokens, in the same first-in,
    /// first-out queue. Each limit is capped at its own capacity as time passes, so none
    /// ever lets through more than its own `capacity + rate × t`.
    ///
    /// Limits are numbered: 0 is the first, then 1, 2... in the order they were added, for
    /// [`set_limit_rate`](crate::TokenBucket::set_limit_rate),
    /// [`set_limit_capacity`](crate::TokenBucket::set_limit_capacity) and
    /// [`limit_stats`](crate::TokenBucket::limit_stats). The largest request that can be
    /// served is the smallest capacity, which [`capacity`](crate::TokenBucket::capacity)
    /// returns. A bucket with several limits always takes its lock: the lock-free path
    /// holds one limit (see the crate's `docs/bucket.md`).
    ///
    /// A zero rate or capacity here is refused by [`build`](Builder::build), with
    /// [`ConfigError::ZeroRateInLimit`] or [`ConfigError::ZeroCapacityInLimit`], which
    /// name the limit by its number.
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{Rate, TokenBucket, TryTakeError};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // 10 a second in bursts of 10, and 15 every 3 seconds in bursts of 15.
    /// let bucket = TokenBucket::builder()
    ///     .rate(Rate::per_second(10))
    ///     .capacity(10)
    ///     .limit(Rate::new(15, Duration::from_secs(3)), 15)
    ///     .build()?;
    /// let start = tokio::time::Instant::now();
    /// for _ in 0..3 {
    ///     bucket.take(10).await?;
    /// }
    /// // The first limit alone would serve the third 10 at 2 s; the second gives 15 at
    /// // once and 5 a second, so 30 take until 3 s.
    /// assert_eq!(start.elapsed(), Duration::from_secs(3));
    /// // Both are empty: the first has a token again in 100 ms, the second in 200 ms.
    /// assert_eq!(
    ///     bucket.try_take(1),
    ///     Err(TryTakeError::Insufficient { retry_after: Duration::from_millis(200) })
    /// );
    /// # Ok(())
    /// # }
    /// ```
    pub fn limit(mut self, rate: Rate, capacity: u64) -> Builder {
        self.more.push((rate, capacity));
        self
    }

    /// The tokens the bucket starts with. Defaults to the capacity (full). With several
    /// limits, every limit starts with `initial` tokens (by default each starts full),
    /// and `initial` must be at most every capacity.
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
    /// [`ConfigError::MissingRate`] without a rate; [`ConfigError::ZeroRate`] and
    /// [`ConfigError::ZeroCapacity`] for the first limit's (from `rate` and `capacity`),
    /// [`ConfigError::ZeroRateInLimit`] and [`ConfigError::ZeroCapacityInLimit`] for an
    /// added limit's, naming it (the first limit's errors come first, then each added
    /// limit's in order, its rate before its capacity); and
    /// [`ConfigError::TooSlowToFill`] for a limit that would take more than 584 years to
    /// fill, naming it; then [`ConfigError::InitialExceedsCapacity`] when `initial` is
    /// above a capacity, naming the smallest.
    ///
    /// ```
    /// use token_bucket::{ConfigError, Rate, TokenBucket};
    ///
    /// let error = TokenBucket::builder().rate(Rate::per_second(1)).capacity(2).initial(3).build();
    /// assert_eq!(error.unwrap_err(), ConfigError::InitialExceedsCapacity { initial: 3, capacity: 2 });
    /// let error = TokenBucket::builder().rate(Rate::per_second(1)).limit(Rate::per_hour(0), 9).build();
    /// assert_eq!(
    ///     error.unwrap_err(),
    ///     ConfigError::ZeroRateInLimit { limit: 1, rate: Rate::per_hour(0) }
    /// );
    /// ```
    pub fn build(&self) -> Result<TokenBucket, ConfigError> {
        let rate = self.rate.ok_or(ConfigError::MissingRate)?;
        let settings = Settings {
            rate,
            capacity: self.capacity.unwrap_or(rate.amount()),
            more: self.more.clone(),
            initial: self.initial,
            queue_limit: self.queue_limit,
        };
        TokenBucket::named(settings, self.name.as_deref())
    }

    /// The name the bucket reports under (see [`observe`](crate::observe)): the
    /// `limiter` label of its metrics (feature `metrics`) and the `limiter` field of its
    /// events (feature `tracing`). A bucket without a name reports nothing. Names are
    /// labels, so keep them few: one per limit in the program, never one per user or
    /// key (a [`Keyed`](crate::Keyed)'s keys are never named).
    ///
    /// ```
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// let bucket = TokenBucket::builder().rate(Rate::per_second(10)).name("search-api").build()?;
    /// assert_eq!(bucket.name(), Some("search-api"));
    /// assert_eq!(TokenBucket::new(Rate::per_second(10), 10)?.name(), None);
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn name(mut self, name: impl Into<String>) -> Builder {
        self.name = Some(name.into());
        self
    }
}
