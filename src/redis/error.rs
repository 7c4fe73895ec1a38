//! Why a Redis limiter did not admit a request.

use std::error::Error;
use std::fmt;
use std::time::Duration;

/// Why [`try_acquire`](super::RedisLimiter::try_acquire) or
/// [`acquire`](super::RedisLimiter::acquire) admitted nothing.
///
/// ```
/// use std::time::Duration;
/// use token_bucket::redis::RedisLimitError;
///
/// let error = RedisLimitError::Limited { retry_after: Duration::from_millis(250) };
/// assert_eq!(error.to_string(), "rate limited; retry after 250ms");
/// let error = RedisLimitError::Timeout { timeout: Duration::from_millis(100) };
/// assert_eq!(
///     error.to_string(),
///     "Redis did not answer within 100ms, and the failure policy is fail-closed"
/// );
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum RedisLimitError {
    /// The limit is reached for this key. The same request could succeed after
    /// `retry_after`, whole milliseconds rounded up from the server's microseconds, so it
    /// is never shorter than the true wait and can be sent as an HTTP `Retry-After`.
    Limited {
        /// How long until the same request could succeed, if nobody else takes first.
        retry_after: Duration,
    },
    /// More permits were asked for than the limiter ever admits at once (a bucket's
    /// capacity, a window's limit). Decided without asking Redis.
    ExceedsLimit {
        /// The permits asked for.
        requested: u64,
        /// The most the limiter admits at once.
        limit: u64,
    },
    /// Redis could not decide: it is unreachable, the connection dropped, or it answered
    /// with an error. Only under [`FailurePolicy::FailClosed`](super::FailurePolicy::FailClosed).
    Unavailable {
        /// What the Redis client reported.
        error: ::redis::RedisError,
    },
    /// Redis did not answer within the limiter's
    /// [timeout](super::RedisOptions::with_timeout). Only under
    /// [`FailurePolicy::FailClosed`](super::FailurePolicy::FailClosed).
    Timeout {
        /// The timeout that passed.
        timeout: Duration,
    },
    /// The call was polled outside a tokio runtime, which the Redis connection and the
    /// timeout need. Returned whatever the failure policy: it is a bug in the caller, not
    /// an outage.
    NoRuntime,
}

impl fmt::Display for RedisLimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RedisLimitError::Limited { retry_after } => {
                write!(f, "rate limited; retry after {retry_after:?}")
            }
            RedisLimitError::ExceedsLimit { requested, limit } => {
                crate::error::exceeds_limit(f, *requested, *limit)
            }
            RedisLimitError::Unavailable { error } => write!(
                f,
                "Redis could not decide, and the failure policy is fail-closed: {error}"
            ),
            RedisLimitError::Timeout { timeout } => write!(
                f,
                "Redis did not answer within {timeout:?}, and the failure policy is fail-closed"
            ),
            RedisLimitError::NoRuntime => f.write_str(
                "a Redis limiter was called outside a tokio runtime; it needs one, with its timer",
            ),
        }
    }
}

impl Error for RedisLimitError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            RedisLimitError::Unavailable { error } => Some(error),
            _ => None,
        }
    }
}
