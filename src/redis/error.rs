//! Why a Redis limiter did not admit a request.

use std::error::Error;
use std::fmt;
use std::time::Duration;

/// Why [`try_acquire`](super::RedisLimiter::try_acquire) or
/// [`acquire`](super::RedisLimiter::acquire), of a limiter or of a
/// [`RedisAll`](super::RedisAll), admitted nothing.
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
/// assert_eq!(
///     RedisLimitError::NoMembers.to_string(),
///     "a decision over all of no limiters: `RedisAll::new` was given no members"
/// );
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum RedisLimitError {
    /// The limit is reached for this key (for a [`RedisAll`](super::RedisAll), for at
    /// least one of its keys). The same request could succeed after `retry_after`, whole
    /// milliseconds rounded up from the server's microseconds, so it is never shorter
    /// than the true wait and can be sent as an HTTP `Retry-After`.
    Limited {
        /// How long until the same request could succeed, if nobody else takes first.
        retry_after: Duration,
    },
    /// More permits were asked for than the limiter ever admits at once (a bucket's
    /// capacity, a window's limit). Decided without asking Redis. For a
    /// [`RedisAll`](super::RedisAll), the first member's limiter, in order, that can never
    /// admit the request; members on one key ask for their permits added up, so
    /// `requested` is then the permits times the number of those members.
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
    /// A [`RedisAll`](super::RedisAll) made of no members was asked to decide. Decided
    /// without asking Redis, whatever the failure policy: all of no limits would allow
    /// everything, which is much more likely a bug (a list of limits left empty) than
    /// what was meant.
    NoMembers,
    /// Two members of a [`RedisAll`](super::RedisAll) name the same Redis key through
    /// limiters of different settings: limiters of one kind and
    /// [prefix](super::RedisOptions::with_prefix), such as 10 a second and 1,000 a day,
    /// build the same key for the same name, and one key can hold only one limiter's
    /// state. Give them different prefixes. Decided without asking Redis, whatever the
    /// failure policy.
    ConflictingMembers {
        /// The Redis key both name.
        key: String,
    },
    /// The [`LeasedBucket`](super::LeasedBucket) was
    /// [closed](super::LeasedBucket::close): its leases are given back and it takes no
    /// more. Decided without asking Redis, whatever the failure policy.
    Closed,
    /// A [`LeasedBucket`](super::LeasedBucket)'s call for a lease came back after the
    /// lease's lifetime had passed, so none of its tokens could be granted (they are
    /// given back). Only under
    /// [`FailurePolicy::FailClosed`](super::FailurePolicy::FailClosed): without it a
    /// round trip always longer than the lifetime would ask for leases for ever. Choose a
    /// [lifetime](super::LeaseOptions::with_lifetime) well above Redis's round trip.
    LeaseExpiredOnArrival {
        /// How long the call took.
        round_trip: Duration,
        /// The lease lifetime.
        lifetime: Duration,
    },
    /// Redis refused a [`RedisAll`](super::RedisAll)'s keys because they are in
    /// different hash slots (`CROSSSLOT`): on Redis Cluster, or behind a proxy that
    /// shards by slot, the keys of one script must share one slot. Give every key the
    /// same hash tag, such as `{user-42}` (see [`RedisAll::new`](super::RedisAll::new)).
    /// Returned whatever the failure policy: the keys are at fault, not Redis, and failing
    /// open would leave them unlimited for good.
    CrossSlot {
        /// What the Redis client reported.
        error: ::redis::RedisError,
    },
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
            RedisLimitError::NoMembers => f.write_str(
                "a decision over all of no limiters: `RedisAll::new` was given no members",
            ),
            RedisLimitError::ConflictingMembers { key } => write!(
                f,
                "two limiters of different settings name the Redis key {key:?} in one \
                 decision; one key holds one limiter's state: give them different prefixes"
            ),
            RedisLimitError::Closed => f.write_str("the leased bucket is closed"),
            RedisLimitError::LeaseExpiredOnArrival {
                round_trip,
                lifetime,
            } => write!(
                f,
                "a lease's call to Redis took {round_trip:?}, at least the lease lifetime of \
                 {lifetime:?}: its tokens had expired, and the failure policy is fail-closed"
            ),
            RedisLimitError::CrossSlot { error } => write!(
                f,
                "the keys of one decision are in different Redis Cluster hash slots; give \
                 every key the same hash tag, such as {{user-42}}: {error}"
            ),
        }
    }
}

impl RedisLimitError {
    /// Whether it is returned whatever the failure policy: the keys, not Redis, are at
    /// fault, and no policy would make them work.
    pub(crate) fn is_policy_proof(&self) -> bool {
        matches!(self, RedisLimitError::CrossSlot { .. })
    }
}

impl Error for RedisLimitError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            RedisLimitError::Unavailable { error } | RedisLimitError::CrossSlot { error } => {
                Some(error)
            }
            _ => None,
        }
    }
}
