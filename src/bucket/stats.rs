//! [`Stats`]: a snapshot of a bucket's state and counters; [`LimitStats`]: one of each of
//! its limits.

use crate::rate::Rate;

/// A snapshot of a bucket, from [`TokenBucket::stats`](crate::TokenBucket::stats).
///
/// On a bucket with [several limits](crate::Builder::limit), `available` and `capacity`
/// are the least over the limits and `rate` the first limit's;
/// [`limit_stats`](crate::TokenBucket::limit_stats) reports each limit.
///
/// The counters run from the bucket's creation and saturate rather than wrap. They are
/// counted without the lock, so a snapshot taken while another thread is being served
/// may not count that grant yet; a snapshot taken after it returned does.
///
/// ```
/// use token_bucket::{Rate, TokenBucket};
///
/// let bucket = TokenBucket::new(Rate::per_second(1), 3)?;
/// bucket.try_take(2)?;
/// assert!(bucket.try_take(2).is_err());
/// let stats = bucket.stats();
/// assert_eq!((stats.available, stats.taken, stats.denied), (1, 2, 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Whole tokens in the bucket now: with several limits, the least any of them holds.
    pub available: u64,
    /// The bucket's capacity: with several limits, the smallest, which is the largest
    /// request that can ever be served.
    pub capacity: u64,
    /// The bucket's rate: with several limits, the first one's (limit 0).
    pub rate: Rate,
    /// Waiters in the queue (those that gave up are not counted).
    pub queued: usize,
    /// Tokens requested by the waiters in the queue.
    pub queued_tokens: u64,
    /// Tokens granted in total, by `try_take` and `take` (grants handed back by a dropped
    /// future that never read them are not counted).
    pub taken: u64,
    /// Tokens passed to [`refund`](crate::TokenBucket::refund), including any the capacity
    /// then dropped.
    pub refunded: u64,
    /// Failed [`try_take`](crate::TokenBucket::try_take) calls.
    pub denied: u64,
    /// Requests whose deadline passed while they waited, or that could not be served
    /// by their deadline (those that ended in
    /// [`TakeError::Timeout`](crate::TakeError::Timeout), and those dropped after their
    /// deadline had passed but before they saw it).
    pub timed_out: u64,
    /// Whether the bucket is closed.
    pub closed: bool,
}

/// A snapshot of one of a bucket's limits, from
/// [`TokenBucket::limit_stats`](crate::TokenBucket::limit_stats): limit 0 is the one
/// [`rate`](crate::Builder::rate) and [`capacity`](crate::Builder::capacity) set, the
/// others follow in the order [`limit`](crate::Builder::limit) added them.
///
/// ```
/// use std::time::Duration;
/// use token_bucket::{LimitStats, Rate, TokenBucket};
///
/// // 10 a second in bursts of 10, and 15 every 2 seconds.
/// let bucket = TokenBucket::builder()
///     .rate(Rate::per_second(10))
///     .capacity(10)
///     .limit(Rate::new(15, Duration::from_secs(2)), 15)
///     .build()?;
/// bucket.try_take(4)?;
/// let limits: Vec<LimitStats> = bucket.limit_stats();
/// assert_eq!((limits[0].capacity, limits[0].available), (10, 6));
/// assert_eq!((limits[1].capacity, limits[1].available), (15, 11));
/// assert_eq!(limits[1].rate, Rate::new(15, Duration::from_secs(2)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimitStats {
    /// The rate this limit gains tokens at.
    pub rate: Rate,
    /// The most this limit holds.
    pub capacity: u64,
    /// Whole tokens this limit holds now. While others are queued these are already
    /// promised to the head of the queue.
    pub available: u64,
}
