//! [`Stats`]: a snapshot of a bucket's state and counters.

use crate::rate::Rate;

/// A snapshot of a bucket, from [`TokenBucket::stats`](crate::TokenBucket::stats).
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
    /// Whole tokens in the bucket now.
    pub available: u64,
    /// The bucket's capacity.
    pub capacity: u64,
    /// The bucket's rate.
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
