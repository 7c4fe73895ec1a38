//! The bucket as a [`Limiter`], and as a [`KeyTemplate`]: every call answered by the
//! handle's own methods, its errors said in the trait's words.

use crate::bucket::TokenBucket;
use crate::error::{AcquireError, TryAcquireError};
use crate::limiter::{KeyTemplate, Limiter};
use crate::quota::{Decision, Policy, Quota};

impl Limiter for TokenBucket {
    fn try_acquire(&self, permits: u64) -> Result<(), TryAcquireError> {
        Ok(self.try_take(permits)?)
    }

    async fn acquire(&self, permits: u64) -> Result<(), AcquireError> {
        Ok(self.take(permits).await?)
    }

    fn is_limited(&self) -> bool {
        let stats = self.stats();
        stats.closed || stats.queued > 0 || stats.available == 0
    }

    fn refund(&self, permits: u64) {
        TokenBucket::refund(self, permits);
    }

    fn available(&self) -> u64 {
        TokenBucket::available(self)
    }

    /// The first limit's capacity per the time its rate takes to fill it from empty,
    /// rounded up to the nanosecond: 10 at 100 a second is 10 per 100 ms. With
    /// [several limits](crate::Builder::limit), limit 0's (the one
    /// [`Builder::rate`](crate::Builder::rate) and
    /// [`Builder::capacity`](crate::Builder::capacity) set);
    /// [`policies`](TokenBucket::policies) gives each. A rate or capacity changed later
    /// changes it.
    fn policy(&self) -> Option<Policy> {
        Some(self.first_policy())
    }

    /// Whole tokens held now (the fraction of the next dropped; with several limits the
    /// least any holds), and how long until the bucket is full again (every limit, with
    /// several), rounded up to the nanosecond so that it is never early. The same numbers
    /// as [`try_acquire_decision(0)`](Limiter::try_acquire_decision) shows; it counts
    /// nothing.
    ///
    /// While others wait in the queue, `remaining` is still what the bucket holds, which
    /// belongs to the head of the queue (`try_acquire` refuses meanwhile), and
    /// `full_after` counts the queue as served: the time until the tokens the waiters
    /// take, and a full bucket more, have accrued. A waiter that leaves early only makes
    /// it sooner; a composite's place waiting at the head (see [`all`](crate::all)) is
    /// counted as if it took its tokens as they are there. A closed bucket still reports
    /// its quota.
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{Limiter, Quota, Rate, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // A token every 333,333,333.3 ns.
    /// let bucket = TokenBucket::new(Rate::per_second(3), 3)?;
    /// bucket.try_take(2)?;
    /// tokio::time::advance(Duration::from_millis(100)).await;
    /// // 1.3 tokens held: 1.7 missing, 566,666,666.7 ns at 3 a second, rounded up.
    /// assert_eq!(
    ///     bucket.quota(),
    ///     Some(Quota { remaining: 1, full_after: Duration::from_nanos(566_666_667) })
    /// );
    /// # Ok(())
    /// # }
    /// ```
    fn quota(&self) -> Option<Quota> {
        Some(self.quota_now())
    }

    /// `try_acquire`, and the quota it leaves (see [`quota`](TokenBucket::quota)), in one
    /// step: with nobody waiting, from the word its one compare-and-swap wrote (or its
    /// refusal was decided on) at the same reading of the clock; else in the same lock
    /// section. A closed bucket refuses with [`TryAcquireError::Closed`] and still
    /// reports its quota.
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{Limiter, Quota, Rate, TokenBucket, TryAcquireError};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
    /// let decision = bucket.try_acquire_decision(10);
    /// assert_eq!(decision.result, Ok(()));
    /// assert_eq!(decision.quota, Some(Quota { remaining: 0, full_after: Duration::from_secs(1) }));
    /// let decision = bucket.try_acquire_decision(1);
    /// assert_eq!(
    ///     decision.result,
    ///     Err(TryAcquireError::Limited { retry_after: Duration::from_millis(100) })
    /// );
    /// assert_eq!(decision.quota, Some(Quota { remaining: 0, full_after: Duration::from_secs(1) }));
    /// # Ok(())
    /// # }
    /// ```
    fn try_acquire_decision(&self, permits: u64) -> Decision {
        let (result, quota) = self.try_take_quota(permits);
        Decision {
            result: result.map_err(TryAcquireError::from),
            quota: Some(quota),
        }
    }
}

impl KeyTemplate for TokenBucket {
    fn is_idle(&self) -> bool {
        let stats = self.stats();
        // With several limits `available` is the least and `capacity` the smallest: every
        // limit must be full, or forgetting the key would refill a larger one.
        let full = stats.available == stats.capacity
            && (self.limit_count() == 1
                || (self.limit_stats().iter()).all(|limit| limit.available == limit.capacity));
        // A closed bucket stays closed: forgetting it would reopen the key.
        !stats.closed && stats.queued == 0 && full
    }

    fn fresh(&self) -> TokenBucket {
        self.fresh_full()
    }

    /// Another handle, a future (a queued `take` holds the bucket, not the handle it was
    /// made from), an adapter, or a refill task serving it right now.
    fn is_shared(&self) -> bool {
        self.is_shared_elsewhere()
    }
}
