//! The errors: each says what happened and names the values involved.

use std::error::Error;
use std::fmt;
use std::time::Duration;

/// Why [`TokenBucket::try_take`](crate::TokenBucket::try_take) took nothing.
///
/// ```
/// use std::time::Duration;
/// use token_bucket::{Rate, TokenBucket, TryTakeError};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let bucket = TokenBucket::new(Rate::per_second(2), 2)?;
/// bucket.try_take(2)?;
/// match bucket.try_take(1) {
///     Err(TryTakeError::Insufficient { retry_after }) => {
///         assert_eq!(retry_after, Duration::from_millis(500));
///     }
///     other => panic!("unexpected {other:?}"),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TryTakeError {
    /// Not enough tokens now, or others are queued first. A request of the same size
    /// could succeed after `retry_after` (counting every waiter queued ahead); it is never
    /// shorter than the true wait, so it can be sent as an HTTP `Retry-After`.
    Insufficient {
        /// How long until the same request could succeed, if nobody else takes first.
        retry_after: Duration,
    },
    /// More tokens were requested than the bucket can ever hold.
    ExceedsCapacity {
        /// The tokens asked for.
        requested: u64,
        /// The bucket's capacity.
        capacity: u64,
    },
    /// The bucket was [closed](crate::TokenBucket::close).
    Closed,
}

impl fmt::Display for TryTakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryTakeError::Insufficient { retry_after } => {
                write!(f, "not enough tokens now; retry after {retry_after:?}")
            }
            TryTakeError::ExceedsCapacity {
                requested,
                capacity,
            } => exceeds_capacity(f, *requested, *capacity),
            TryTakeError::Closed => f.write_str("the token bucket is closed"),
        }
    }
}

impl Error for TryTakeError {}

/// Why [`take`](crate::TokenBucket::take), [`wait`](crate::TokenBucket::wait) or their
/// timeout forms did not succeed.
///
/// ```
/// use std::time::Duration;
/// use token_bucket::{Rate, TakeError, TokenBucket};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let bucket = TokenBucket::new(Rate::per_second(1), 5)?;
/// assert_eq!(
///     bucket.take(6).await,
///     Err(TakeError::ExceedsCapacity { requested: 6, capacity: 5 })
/// );
/// bucket.take(5).await?;
/// // Five tokens at one per second cannot come within two seconds: refused at once.
/// assert_eq!(bucket.take_timeout(5, Duration::from_secs(2)).await, Err(TakeError::Timeout));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TakeError {
    /// More tokens were requested than the bucket can ever hold (also returned to waiters
    /// queued when [`set_capacity`](crate::TokenBucket::set_capacity) lowers the capacity
    /// below their request).
    ExceedsCapacity {
        /// The tokens asked for.
        requested: u64,
        /// The bucket's capacity.
        capacity: u64,
    },
    /// Queueing the request would have pushed the tokens queued past the bucket's
    /// [`queue_limit`](crate::Builder::queue_limit).
    QueueFull {
        /// Tokens already queued.
        queued: u64,
        /// The limit.
        limit: u64,
    },
    /// The timeout passed first, or the tokens could not have accrued in time even if
    /// every waiter ahead gave up.
    Timeout,
    /// The bucket was [closed](crate::TokenBucket::close).
    Closed,
    /// The request had to wait, but it was polled outside a tokio runtime, and either no
    /// refill task was running to serve it or it has a timeout (which needs the runtime's
    /// timer).
    NoRuntime,
}

impl fmt::Display for TakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TakeError::ExceedsCapacity {
                requested,
                capacity,
            } => exceeds_capacity(f, *requested, *capacity),
            TakeError::QueueFull { queued, limit } => write!(
                f,
                "the queue is full: {queued} tokens are queued and the limit is {limit}"
            ),
            TakeError::Timeout => f.write_str("timed out before the tokens were available"),
            TakeError::Closed => f.write_str("the token bucket is closed"),
            TakeError::NoRuntime => {
                f.write_str("the request must wait, but it was polled outside a tokio runtime")
            }
        }
    }
}

impl Error for TakeError {}

fn exceeds_capacity(f: &mut fmt::Formatter<'_>, requested: u64, capacity: u64) -> fmt::Result {
    write!(
        f,
        "requested {requested} tokens but the bucket's capacity is {capacity}"
    )
}

/// Why a bucket could not be made or reconfigured.
///
/// ```
/// use token_bucket::{ConfigError, Rate, TokenBucket};
///
/// assert_eq!(TokenBucket::new(Rate::per_second(0), 10).unwrap_err(), ConfigError::ZeroRate);
/// assert_eq!(TokenBucket::new(Rate::per_second(5), 0).unwrap_err(), ConfigError::ZeroCapacity);
/// assert_eq!(
///     TokenBucket::builder().rate(Rate::per_second(5)).capacity(3).initial(4).build().unwrap_err(),
///     ConfigError::InitialExceedsCapacity { initial: 4, capacity: 3 },
/// );
/// assert_eq!(TokenBucket::builder().capacity(3).build().unwrap_err(), ConfigError::MissingRate);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The rate has a zero amount or a zero period, so no token would ever arrive.
    ZeroRate,
    /// The capacity is zero, so no request could ever be served.
    ZeroCapacity,
    /// The bucket would start with more tokens than it can hold.
    InitialExceedsCapacity {
        /// The initial tokens asked for.
        initial: u64,
        /// The capacity.
        capacity: u64,
    },
    /// [`Builder::build`](crate::Builder::build) was called without a
    /// [`rate`](crate::Builder::rate).
    MissingRate,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::ZeroRate => f.write_str(
                "the rate is zero: it needs at least one token per period, and a period longer than zero",
            ),
            ConfigError::ZeroCapacity => f.write_str("the capacity is zero: it must be at least 1"),
            ConfigError::InitialExceedsCapacity { initial, capacity } => write!(
                f,
                "the initial tokens ({initial}) exceed the capacity ({capacity})"
            ),
            ConfigError::MissingRate => f.write_str("the builder was given no rate"),
        }
    }
}

impl Error for ConfigError {}
