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
    /// The bucket's refill task panicked while this request waited, so the bucket closed
    /// rather than start a task that might panic again for ever. Later requests get
    /// [`Closed`](TakeError::Closed). A panic there is a bug in this crate: please report
    /// it, with the panic message the task printed.
    RefillFailed,
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
            TakeError::RefillFailed => f.write_str(
                "the token bucket's refill task panicked, so the bucket closed (a bug in \
                 token-bucket: please report it)",
            ),
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
/// assert_eq!(
///     TokenBucket::builder().rate(Rate::per_second(5)).limit(Rate::per_hour(100), 0).build().unwrap_err(),
///     ConfigError::ZeroCapacityInLimit { limit: 1 },
/// );
/// let bucket = TokenBucket::new(Rate::per_second(5), 3)?;
/// assert_eq!(
///     bucket.set_limit_rate(1, Rate::per_hour(100)).unwrap_err(),
///     ConfigError::NoSuchLimit { limit: 1, limits: 1 },
/// );
/// # Ok::<(), ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The rate has a zero amount or a zero period, so no token would ever arrive.
    ZeroRate,
    /// The capacity is zero, so no request could ever be served.
    ZeroCapacity,
    /// A limit added with [`limit`](crate::Builder::limit) has a rate with a zero amount
    /// or a zero period, so it would never gain a token. Limits are numbered from 0, the
    /// one [`rate`](crate::Builder::rate) set (whose zero rate is
    /// [`ZeroRate`](ConfigError::ZeroRate)); the added ones from 1, in the order added.
    ZeroRateInLimit {
        /// The limit's number: 1 for the first added.
        limit: usize,
        /// The rate it was given.
        rate: crate::rate::Rate,
    },
    /// A limit added with [`limit`](crate::Builder::limit) has a capacity of zero, so no
    /// request could ever be served. Numbered as in
    /// [`ZeroRateInLimit`](ConfigError::ZeroRateInLimit).
    ZeroCapacityInLimit {
        /// The limit's number: 1 for the first added.
        limit: usize,
    },
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
    /// A window limiter's limit is zero, so no request could ever be served.
    ZeroLimit,
    /// A window limiter's window (or a wheel's slot) is zero long.
    ZeroWindow,
    /// The limit is above what the limiter can represent or should allocate for.
    LimitTooLarge {
        /// The limit asked for.
        limit: u64,
        /// The largest limit this limiter accepts.
        max: u64,
    },
    /// A time wheel was given zero slots, or more than it accepts.
    BadSlots {
        /// The slots asked for.
        slots: u64,
        /// The largest number of slots accepted.
        max: u64,
    },
    /// A [`Keyed`](crate::Keyed) limiter was given a `max_keys` of zero.
    ZeroMaxKeys,
    /// A time wheel's `slots * slot_duration` is longer than a `Duration` can hold.
    WindowTooLong {
        /// The slots asked for.
        slots: u64,
        /// The duration of each slot asked for.
        slot_duration: Duration,
    },
    /// A [`Keyed`](crate::Keyed) limiter was given a number of shards that is zero, not a
    /// power of two, or above the largest accepted.
    BadShards {
        /// The shards asked for.
        shards: usize,
        /// The largest number of shards accepted.
        max: usize,
    },
    /// A [`Keyed`](crate::Keyed) limiter's keys were sorted into no class, or into more
    /// than the most accepted (see [`KeyedBuilder::class`](crate::KeyedBuilder::class)).
    BadKeyClasses {
        /// The classes declared.
        classes: usize,
        /// The most classes accepted.
        max: usize,
    },
    /// A [`Keyed`](crate::Keyed) limiter's keys were sorted into classes that name one
    /// class twice (see [`KeyedBuilder::class`](crate::KeyedBuilder::class)).
    RepeatedKeyClass {
        /// The class declared twice.
        class: &'static str,
    },
    /// A Redis limiter was given a zero timeout, so every call to Redis would time out.
    ZeroTimeout,
    /// A Redis window limiter's window is not a whole number of microseconds (the
    /// resolution of Redis's clock), or is longer than the largest it counts exactly.
    UnsupportedWindow {
        /// The window asked for.
        window: Duration,
        /// The longest window accepted.
        max: Duration,
    },
    /// A Redis token bucket's capacity, counted at its rate in parts of a token that
    /// accrue a whole number per microsecond, would not stay below 2^53, the largest
    /// integer Redis's Lua counts exactly.
    UnsupportedRate {
        /// The rate asked for.
        rate: crate::rate::Rate,
        /// The capacity asked for.
        capacity: u64,
        /// The largest capacity accepted at this rate (zero when the rate itself is too
        /// fast to count).
        max_capacity: u64,
    },
    /// A leased Redis token bucket's lease lifetime is zero (no leased token could ever
    /// be used) or longer than the longest accepted.
    BadLeaseLifetime {
        /// The lifetime asked for.
        lifetime: Duration,
        /// The longest lifetime accepted.
        max: Duration,
    },
    /// A leased Redis token bucket's largest lease is zero, or larger than the bucket's
    /// capacity, which no lease could ever fill.
    BadMaxLease {
        /// The largest lease asked for.
        max_lease: u64,
        /// The bucket's capacity.
        capacity: u64,
    },
    /// [`set_limit_rate`](crate::TokenBucket::set_limit_rate) or
    /// [`set_limit_capacity`](crate::TokenBucket::set_limit_capacity) named a limit the
    /// bucket does not have. Limits are numbered from 0, the one
    /// [`rate`](crate::Builder::rate) and [`capacity`](crate::Builder::capacity) set;
    /// the others follow in the order [`limit`](crate::Builder::limit) added them.
    NoSuchLimit {
        /// The limit named.
        limit: usize,
        /// How many limits the bucket has.
        limits: usize,
    },
    /// A limit's capacity is so large for its rate that the bucket cannot count a full
    /// bucket exactly: `capacity × period / gcd(amount, period)` is above 2^128. Such a
    /// limit would take more than 2^64 nanoseconds (584 years) to fill from empty.
    /// Limits are numbered as in [`NoSuchLimit`](ConfigError::NoSuchLimit).
    TooSlowToFill {
        /// The limit's number: 0 for the one [`rate`](crate::Builder::rate) set.
        limit: usize,
        /// Its rate.
        rate: crate::rate::Rate,
        /// Its capacity.
        capacity: u64,
    },
    /// [`all`](crate::all) was given no limiter: a composite decides over at least one.
    NoMembers,
    /// [`all`](crate::all) was given the same limiter twice (two handles, or clones, of
    /// one limiter): its place in line could not be held twice, so it is refused rather
    /// than counted twice or merged silently. `first` and `second` are their positions,
    /// from 0.
    RepeatedMember {
        /// The position of its first appearance.
        first: usize,
        /// The position of the next one.
        second: usize,
    },
    /// [`all_in_turn`](crate::all_in_turn) was given, as its first member, a limiter
    /// that already follows in other composites: a later member of an `all_in_turn`
    /// composite, or a member of an [`all`](crate::all) composite. A limiter keeps the
    /// part it is first given, because one that did both could close a circle of
    /// composites each waiting for the next (see
    /// [waiting member by member](crate#waiting-member-by-member)).
    FollowerAsLeader {
        /// The member's position, from 0: always 0.
        member: usize,
    },
    /// A composite was given, as a later member of [`all_in_turn`](crate::all_in_turn)
    /// or as any member of [`all`](crate::all), a limiter that already leads
    /// `all_in_turn` composites (it was their first member). See
    /// [`FollowerAsLeader`](ConfigError::FollowerAsLeader) for why.
    LeaderAsFollower {
        /// The member's position, from 0.
        member: usize,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::ZeroRate => f.write_str(
                "the rate is zero: it needs at least one token per period, and a period longer than zero",
            ),
            ConfigError::ZeroCapacity => f.write_str("the capacity is zero: it must be at least 1"),
            ConfigError::ZeroRateInLimit { limit, rate } => write!(
                f,
                "limit {limit}'s rate, {rate}, is zero: it needs at least one token per period, \
                 and a period longer than zero"
            ),
            ConfigError::ZeroCapacityInLimit { limit } => write!(
                f,
                "limit {limit}'s capacity is zero: it must be at least 1"
            ),
            ConfigError::InitialExceedsCapacity { initial, capacity } => write!(
                f,
                "the initial tokens ({initial}) exceed the capacity ({capacity})"
            ),
            ConfigError::MissingRate => f.write_str("the builder was given no rate"),
            ConfigError::ZeroLimit => f.write_str("the limit is zero: it must be at least 1"),
            ConfigError::ZeroWindow => {
                f.write_str("the window is zero long: it must be at least 1 nanosecond")
            }
            ConfigError::LimitTooLarge { limit, max } => {
                write!(f, "the limit {limit} is above the largest accepted, {max}")
            }
            ConfigError::BadSlots { slots, max } => {
                write!(f, "{slots} slots: a time wheel needs between 1 and {max}")
            }
            ConfigError::ZeroMaxKeys => f.write_str("max_keys is zero: it must be at least 1"),
            ConfigError::WindowTooLong {
                slots,
                slot_duration,
            } => write!(
                f,
                "{slots} slots of {slot_duration:?} make a window longer than a Duration holds"
            ),
            ConfigError::BadShards { shards, max } => write!(
                f,
                "{shards} shards: a keyed limiter needs a power of two between 1 and {max}"
            ),
            ConfigError::BadKeyClasses { classes, max } => write!(
                f,
                "{classes} key classes: a keyed limiter's keys need between 1 and {max}"
            ),
            ConfigError::RepeatedKeyClass { class } => {
                write!(f, "the key class {class:?} is declared twice")
            }
            ConfigError::ZeroTimeout => {
                f.write_str("the Redis timeout is zero: it must be longer than zero")
            }
            ConfigError::UnsupportedWindow { window, max } => write!(
                f,
                "the window {window:?} is not supported by the Redis limiters: it must be a \
                 whole number of microseconds between 1 µs and {max:?}"
            ),
            ConfigError::UnsupportedRate {
                rate,
                capacity,
                max_capacity,
            } => write!(
                f,
                "a capacity of {capacity} at {rate} is beyond what the Redis token bucket counts \
                 exactly: at this rate the largest capacity is {max_capacity}"
            ),
            ConfigError::BadLeaseLifetime { lifetime, max } => write!(
                f,
                "a lease lifetime of {lifetime:?}: it must be longer than zero and at most {max:?}"
            ),
            ConfigError::BadMaxLease {
                max_lease,
                capacity,
            } => write!(
                f,
                "a largest lease of {max_lease} tokens: it must be between 1 and the \
                 bucket's capacity, {capacity}"
            ),
            ConfigError::TooSlowToFill {
                limit,
                rate,
                capacity,
            } => write!(
                f,
                "limit {limit}'s capacity of {capacity} at {rate} would take more than 584 \
                 years to fill, beyond what the bucket counts exactly"
            ),
            ConfigError::NoSuchLimit { limit, limits } => {
                let plural = if *limits == 1 { "" } else { "s" };
                write!(
                    f,
                    "there is no limit {limit}: the bucket has {limits} limit{plural}, \
                     numbered from 0"
                )
            }
            ConfigError::NoMembers => f.write_str("a composite was given no limiter"),
            ConfigError::RepeatedMember { first, second } => write!(
                f,
                "members {first} and {second} of a composite are the same limiter"
            ),
            ConfigError::FollowerAsLeader { member } => write!(
                f,
                "member {member} of an all_in_turn composite leads it, but the limiter already \
                 follows in other composites (a later member of all_in_turn, or a member of \
                 all); a limiter that did both could leave composites waiting for each other \
                 forever"
            ),
            ConfigError::LeaderAsFollower { member } => write!(
                f,
                "member {member} of a composite follows in it, but the limiter already leads \
                 all_in_turn composites (it was their first member); a limiter that did both \
                 could leave composites waiting for each other forever"
            ),
        }
    }
}

impl Error for ConfigError {}

/// Why a [`Limiter`](crate::Limiter)'s `try_acquire` admitted nothing.
///
/// ```
/// use std::time::Duration;
/// use token_bucket::{FixedWindow, Limiter, TryAcquireError};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = FixedWindow::new(2, Duration::from_secs(1))?;
/// limiter.try_acquire(2)?;
/// assert_eq!(
///     limiter.try_acquire(1),
///     Err(TryAcquireError::Limited { retry_after: Duration::from_secs(1) })
/// );
/// assert_eq!(
///     limiter.try_acquire(3),
///     Err(TryAcquireError::ExceedsLimit { requested: 3, limit: 2 })
/// );
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TryAcquireError {
    /// Not allowed now, or others wait first. The same request could succeed after
    /// `retry_after` if nobody else acquires first; it is never shorter than the true
    /// wait, so it can be sent as an HTTP `Retry-After`.
    ///
    /// `retry_after` is zero when others wait in line and all of them, then this
    /// request, could be admitted now: the line has not been served yet (its head is due
    /// but not yet woken; tokio's timer ticks every millisecond). `try_acquire` still
    /// refuses, as it never jumps the line; once the line has moved (after a yield, say)
    /// the same request may succeed. It is never zero when nobody waits.
    Limited {
        /// How long until the same request could succeed.
        retry_after: Duration,
    },
    /// More permits were requested than the limiter can ever admit at once (a bucket's
    /// capacity, a window's limit).
    ExceedsLimit {
        /// The permits asked for.
        requested: u64,
        /// The most the limiter admits at once.
        limit: u64,
    },
    /// A [`Keyed`](crate::Keyed) limiter holds `max_keys` busy keys and this is a new one.
    TooManyKeys {
        /// The bound on keys.
        max_keys: usize,
    },
    /// The limiter was closed (only a [`TokenBucket`](crate::TokenBucket) can be).
    Closed,
}

impl fmt::Display for TryAcquireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryAcquireError::Limited { retry_after } => {
                write!(f, "rate limited; retry after {retry_after:?}")
            }
            TryAcquireError::ExceedsLimit { requested, limit } => {
                exceeds_limit(f, *requested, *limit)
            }
            TryAcquireError::TooManyKeys { max_keys } => too_many_keys(f, *max_keys),
            TryAcquireError::Closed => f.write_str("the limiter is closed"),
        }
    }
}

impl Error for TryAcquireError {}

/// Why a [`Limiter`](crate::Limiter)'s `acquire` did not succeed.
///
/// ```
/// use std::time::Duration;
/// use token_bucket::{AcquireError, Limiter, SlidingLog};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = SlidingLog::new(5, Duration::from_secs(1))?;
/// assert_eq!(
///     limiter.acquire(6).await,
///     Err(AcquireError::ExceedsLimit { requested: 6, limit: 5 })
/// );
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AcquireError {
    /// More permits were requested than the limiter can ever admit at once.
    ExceedsLimit {
        /// The permits asked for.
        requested: u64,
        /// The most the limiter admits at once.
        limit: u64,
    },
    /// A [`TokenBucket`](crate::TokenBucket)'s queue limit would have been passed.
    QueueFull {
        /// Permits already queued.
        queued: u64,
        /// The limit.
        limit: u64,
    },
    /// A [`Keyed`](crate::Keyed) limiter holds `max_keys` busy keys and this is a new one.
    TooManyKeys {
        /// The bound on keys.
        max_keys: usize,
    },
    /// The limiter was closed (only a [`TokenBucket`](crate::TokenBucket) can be).
    Closed,
    /// The request had to wait, but it was polled outside a tokio runtime.
    NoRuntime,
    /// A [`TokenBucket`](crate::TokenBucket)'s refill task panicked while the request
    /// waited, so the bucket closed: the bucket's [`TakeError::RefillFailed`], a bug in
    /// this crate (please report it). Later requests get [`Closed`](AcquireError::Closed).
    RefillFailed,
    /// A [`TokenBucket`](crate::TokenBucket)'s
    /// [`take_timeout`](crate::TokenBucket::take_timeout) or
    /// [`wait_timeout`](crate::TokenBucket::wait_timeout) timed out: the bucket's
    /// [`TakeError::Timeout`]. No [`Limiter::acquire`](crate::Limiter::acquire) has a
    /// timeout, so none returns it; it is here so that `?` turns every [`TakeError`] into
    /// an `AcquireError` and loses nothing.
    Timeout,
}

impl fmt::Display for AcquireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcquireError::ExceedsLimit { requested, limit } => exceeds_limit(f, *requested, *limit),
            AcquireError::QueueFull { queued, limit } => write!(
                f,
                "the queue is full: {queued} permits are queued and the limit is {limit}"
            ),
            AcquireError::TooManyKeys { max_keys } => too_many_keys(f, *max_keys),
            AcquireError::Closed => f.write_str("the limiter is closed"),
            AcquireError::NoRuntime => {
                f.write_str("the request must wait, but it was polled outside a tokio runtime")
            }
            AcquireError::RefillFailed => TakeError::RefillFailed.fmt(f),
            AcquireError::Timeout => TakeError::Timeout.fmt(f),
        }
    }
}

impl Error for AcquireError {}

/// A `try_acquire` refusal for good (`ExceedsLimit`, `TooManyKeys`, `Closed`), as
/// `acquire` says it: what a composite or a `Keyed` reports when a member or a key's word
/// refuses a request that would wait. Not a public `From`: `Limited` has no `acquire`
/// word, and never comes here, as every caller passes on only refusals for good (a
/// `Limited` is a reason to wait).
pub(crate) fn for_good(error: TryAcquireError) -> AcquireError {
    match error {
        TryAcquireError::ExceedsLimit { requested, limit } => {
            AcquireError::ExceedsLimit { requested, limit }
        }
        TryAcquireError::TooManyKeys { max_keys } => AcquireError::TooManyKeys { max_keys },
        TryAcquireError::Limited { .. } | TryAcquireError::Closed => AcquireError::Closed,
    }
}

/// A bucket's [`try_take`](crate::TokenBucket::try_take) refusal in the words of
/// [`Limiter::try_acquire`](crate::Limiter::try_acquire), as a bucket's `try_acquire`
/// says it. Nothing is lost: `Insufficient` is `Limited` with the same `retry_after`,
/// `ExceedsCapacity` is `ExceedsLimit` with the capacity as the limit, and `Closed` is
/// `Closed`.
///
/// ```
/// use std::time::Duration;
/// use token_bucket::{TryAcquireError, TryTakeError};
///
/// let retry_after = Duration::from_millis(100);
/// assert_eq!(
///     TryAcquireError::from(TryTakeError::Insufficient { retry_after }),
///     TryAcquireError::Limited { retry_after }
/// );
/// assert_eq!(
///     TryAcquireError::from(TryTakeError::ExceedsCapacity { requested: 6, capacity: 5 }),
///     TryAcquireError::ExceedsLimit { requested: 6, limit: 5 }
/// );
/// assert_eq!(TryAcquireError::from(TryTakeError::Closed), TryAcquireError::Closed);
/// ```
impl From<TryTakeError> for TryAcquireError {
    fn from(error: TryTakeError) -> TryAcquireError {
        match error {
            TryTakeError::Insufficient { retry_after } => TryAcquireError::Limited { retry_after },
            TryTakeError::ExceedsCapacity {
                requested,
                capacity,
            } => TryAcquireError::ExceedsLimit {
                requested,
                limit: capacity,
            },
            TryTakeError::Closed => TryAcquireError::Closed,
        }
    }
}

/// A bucket's [`take`](crate::TokenBucket::take) error (or that of `wait` or a timeout
/// form) in the words of [`Limiter::acquire`](crate::Limiter::acquire), as a bucket's
/// `acquire` says it. Nothing is lost: `ExceedsCapacity` is `ExceedsLimit` with the
/// capacity as the limit, and every other variant keeps its name and values.
///
/// ```
/// use token_bucket::{AcquireError, TakeError};
///
/// assert_eq!(
///     AcquireError::from(TakeError::ExceedsCapacity { requested: 6, capacity: 5 }),
///     AcquireError::ExceedsLimit { requested: 6, limit: 5 }
/// );
/// assert_eq!(
///     AcquireError::from(TakeError::QueueFull { queued: 10, limit: 12 }),
///     AcquireError::QueueFull { queued: 10, limit: 12 }
/// );
/// assert_eq!(AcquireError::from(TakeError::Timeout), AcquireError::Timeout);
/// assert_eq!(AcquireError::from(TakeError::Closed), AcquireError::Closed);
/// assert_eq!(AcquireError::from(TakeError::NoRuntime), AcquireError::NoRuntime);
/// assert_eq!(AcquireError::from(TakeError::RefillFailed), AcquireError::RefillFailed);
/// ```
impl From<TakeError> for AcquireError {
    fn from(error: TakeError) -> AcquireError {
        match error {
            TakeError::ExceedsCapacity {
                requested,
                capacity,
            } => AcquireError::ExceedsLimit {
                requested,
                limit: capacity,
            },
            TakeError::QueueFull { queued, limit } => AcquireError::QueueFull { queued, limit },
            TakeError::Timeout => AcquireError::Timeout,
            TakeError::Closed => AcquireError::Closed,
            TakeError::NoRuntime => AcquireError::NoRuntime,
            TakeError::RefillFailed => AcquireError::RefillFailed,
        }
    }
}

/// Why [`Keyed::get_or_insert`](crate::Keyed::get_or_insert) added no key: the
/// [`Keyed`](crate::Keyed) holds `max_keys` busy keys and this is a new one.
///
/// ```
/// use token_bucket::{Keyed, Rate, TokenBucket, TooManyKeys};
///
/// let per_key: Keyed<u8, TokenBucket> =
///     Keyed::builder(TokenBucket::new(Rate::per_second(1), 1)?).max_keys(1).build()?;
/// per_key.try_acquire(&1, 1)?; // key 1 is busy until its bucket refills
/// assert_eq!(per_key.get_or_insert(&2).err(), Some(TooManyKeys { max_keys: 1 }));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooManyKeys {
    /// The bound on keys.
    pub max_keys: usize,
}

impl fmt::Display for TooManyKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        too_many_keys(f, self.max_keys)
    }
}

impl Error for TooManyKeys {}

impl From<TooManyKeys> for TryAcquireError {
    fn from(TooManyKeys { max_keys }: TooManyKeys) -> TryAcquireError {
        TryAcquireError::TooManyKeys { max_keys }
    }
}

impl From<TooManyKeys> for AcquireError {
    fn from(TooManyKeys { max_keys }: TooManyKeys) -> AcquireError {
        AcquireError::TooManyKeys { max_keys }
    }
}

pub(crate) fn exceeds_limit(f: &mut fmt::Formatter<'_>, requested: u64, limit: u64) -> fmt::Result {
    write!(
        f,
        "requested {requested} permits but the limiter admits at most {limit} at once"
    )
}

fn too_many_keys(f: &mut fmt::Formatter<'_>, max_keys: usize) -> fmt::Result {
    write!(
        f,
        "a new key was refused: {max_keys} keys are busy, the most this limiter tracks"
    )
}

/// Why a composite's [`try_acquire`](crate::All::try_acquire) admitted nothing. Nothing
/// was counted by any member.
///
/// ```
/// use std::time::Duration;
/// use token_bucket::{all, Rate, TokenBucket, TryAcquireAllError, TryAcquireError};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let user = TokenBucket::new(Rate::per_second(1), 1)?;
/// let global = TokenBucket::new(Rate::per_second(10), 5)?;
/// let both = all((&user, &global))?;
/// both.try_acquire(1)?;
/// assert_eq!(
///     both.try_acquire(1),
///     Err(TryAcquireAllError::Limited { retry_after: Duration::from_secs(1) })
/// );
/// assert_eq!(
///     both.try_acquire(2),
///     Err(TryAcquireAllError::Member {
///         member: 0,
///         error: TryAcquireError::ExceedsLimit { requested: 2, limit: 1 },
///     })
/// );
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TryAcquireAllError {
    /// Some member refused it now, or others wait in some member's line. `retry_after`
    /// is the latest of the refusing members' own: the time until every member would
    /// admit it, if nobody else acquires first.
    Limited {
        /// How long until every member could admit the same request.
        retry_after: Duration,
    },
    /// Member `member` (its position given to [`all`](crate::all), from 0) refused it
    /// for good: [`TryAcquireError::ExceedsLimit`] or [`TryAcquireError::Closed`].
    Member {
        /// The member's position, from 0.
        member: usize,
        /// What the member said.
        error: TryAcquireError,
    },
    /// The composite could not be made: what [`all`](crate::all) or
    /// [`all_in_turn`](crate::all_in_turn) refused. Here so that one error type covers
    /// making a composite and deciding on it: `?` turns a [`ConfigError`] into this.
    Config(ConfigError),
}

impl From<ConfigError> for TryAcquireAllError {
    fn from(error: ConfigError) -> TryAcquireAllError {
        TryAcquireAllError::Config(error)
    }
}

impl fmt::Display for TryAcquireAllError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryAcquireAllError::Config(error) => {
                write!(f, "the composite could not be made: {error}")
            }
            TryAcquireAllError::Limited { retry_after } => {
                write!(
                    f,
                    "rate limited by the composite; retry after {retry_after:?}"
                )
            }
            TryAcquireAllError::Member { member, error } => {
                write!(f, "member {member} of the composite: {error}")
            }
        }
    }
}

impl Error for TryAcquireAllError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            TryAcquireAllError::Config(error) => Some(error),
            _ => None,
        }
    }
}

/// Why a composite's [`acquire`](crate::All::acquire) did not succeed. Nothing was
/// counted by any member, and its place in every line was given back.
///
/// ```
/// use std::time::Duration;
/// use token_bucket::{all, AcquireAllError, AcquireError, Rate, SlidingLog, TokenBucket};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
/// let log = SlidingLog::new(3, Duration::from_secs(1))?;
/// assert_eq!(
///     all((&bucket, &log))?.acquire(4).await,
///     Err(AcquireAllError::Member {
///         member: 1,
///         error: AcquireError::ExceedsLimit { requested: 4, limit: 3 },
///     })
/// );
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AcquireAllError {
    /// Member `member` (its position given to [`all`](crate::all), from 0) refused it:
    /// [`AcquireError::ExceedsLimit`] (at once, or later when a bucket's capacity is
    /// lowered below it), a bucket's [`AcquireError::QueueFull`] (at once),
    /// [`AcquireError::Closed`] (at once, or when it closes) or
    /// [`AcquireError::RefillFailed`] (its refill task panicked).
    Member {
        /// The member's position, from 0.
        member: usize,
        /// What the member said.
        error: AcquireError,
    },
    /// It had to wait, but it was polled outside a tokio runtime.
    NoRuntime,
    /// The composite could not be made: what [`all`](crate::all) or
    /// [`all_in_turn`](crate::all_in_turn) refused, or a key of a
    /// [`Keyed`](crate::Keyed) member that plays the other part (see
    /// [`ConfigError::FollowerAsLeader`]). Here so that one error type covers making a
    /// composite and waiting on it: `?` turns a [`ConfigError`] into this.
    Config(ConfigError),
}

impl From<ConfigError> for AcquireAllError {
    fn from(error: ConfigError) -> AcquireAllError {
        AcquireAllError::Config(error)
    }
}

impl fmt::Display for AcquireAllError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcquireAllError::Config(error) => write!(f, "the composite could not be made: {error}"),
            AcquireAllError::Member { member, error } => {
                write!(f, "member {member} of the composite: {error}")
            }
            AcquireAllError::NoRuntime => {
                f.write_str("the request must wait, but it was polled outside a tokio runtime")
            }
        }
    }
}

impl Error for AcquireAllError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            AcquireAllError::Config(error) => Some(error),
            _ => None,
        }
    }
}
