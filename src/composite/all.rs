//! [`all`] and [`All`], the public face of a composite.

use std::future::Future;

use crate::composite::held::try_all;
use crate::composite::member::Members;
use crate::composite::waiting::{acquire_all, Order};
use crate::error::{AcquireAllError, ConfigError, TryAcquireAllError};

/// A composite of independent limiters that admits a request only when every one of them
/// does, at one instant, and then counts it in every one: a per-user and a global
/// limit, say, taken as one decision. Made by [`all`].
///
/// It borrows (or owns) its members and keeps nothing else: make one per request, or
/// keep one. See [the module's docs](crate#several-limiters-one-decision) for what it
/// promises and what it costs.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use token_bucket::{all, Rate, TokenBucket, TryAcquireAllError};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let alice = TokenBucket::new(Rate::per_second(1), 2)?;
/// let global = TokenBucket::new(Rate::per_second(10), 3)?;
/// let both = all((&alice, &global))?;
/// both.try_acquire(2)?;
/// // Alice has nothing left; the global bucket's 1 is not touched.
/// assert_eq!(
///     both.try_acquire(1),
///     Err(TryAcquireAllError::Limited { retry_after: Duration::from_secs(1) })
/// );
/// assert_eq!(global.available(), 1);
/// let start = tokio::time::Instant::now();
/// both.acquire(1).await?;
/// assert_eq!(start.elapsed(), Duration::from_secs(1));
/// // The global bucket had 1 left and gained 10 in that second, held at its capacity, 3.
/// assert_eq!((alice.available(), global.available()), (0, 2));
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct All<M> {
    members: M,
}

/// A composite of `members`: a tuple of two or three [`Member`](crate::Member)s, or an
/// array, slice or `Vec` of them (see [`Members`]).
///
/// # Errors
///
/// [`ConfigError::NoMembers`] for an empty slice; [`ConfigError::RepeatedMember`] when
/// two members are the same limiter (two handles or clones of one).
///
/// # Examples
///
/// ```
/// use token_bucket::{all, ConfigError, Rate, TokenBucket};
///
/// let bucket = TokenBucket::new(Rate::per_second(1), 1)?;
/// let clone = bucket.clone();
/// assert_eq!(
///     all((&bucket, &clone)).err(),
///     Some(ConfigError::RepeatedMember { first: 0, second: 1 })
/// );
/// let none: &[TokenBucket] = &[];
/// assert_eq!(all(none).err(), Some(ConfigError::NoMembers));
/// # Ok::<(), ConfigError>(())
/// ```
pub fn all<M: Members>(members: M) -> Result<All<M>, ConfigError> {
    members.parts().check(None)?;
    Ok(All { members })
}

impl<M: Members> All<M> {
    /// Acquires `permits` from every member at one instant if every one admits them now
    /// and nobody waits in any member's line; else acquires nothing. Never waits. Needs no
    /// runtime. Zero permits succeed on open members at once.
    ///
    /// # Errors
    ///
    /// [`TryAcquireAllError::Limited`] with the latest `retry_after` of the members that
    /// refused (the time until every member would admit it, if nobody else acquires
    /// first); [`TryAcquireAllError::Member`] naming the first member that refuses for
    /// good ([`ExceedsLimit`](crate::TryAcquireError::ExceedsLimit) with its limit,
    /// or [`Closed`](crate::TryAcquireError::Closed)). Either way no member counted
    /// anything.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{all, FixedWindow, Rate, TokenBucket, TryAcquireAllError};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::new(Rate::per_second(2), 2)?;
    /// let window = FixedWindow::new(3, Duration::from_secs(10))?;
    /// let both = all((&bucket, &window))?;
    /// both.try_acquire(2)?;
    /// // The bucket has one again in 500 ms, the window in 10 s: the latest is the answer.
    /// assert_eq!(
    ///     both.try_acquire(2),
    ///     Err(TryAcquireAllError::Limited { retry_after: Duration::from_secs(10) })
    /// );
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire(&self, permits: u64) -> Result<(), TryAcquireAllError> {
        try_all(&self.members.parts(), permits, true)
    }

    /// Acquires `permits` from every member at one instant, waiting first in, first out
    /// in every member's line until all of them admit it.
    ///
    /// It joins every member's line at once, and keeps its place in each: no request
    /// that comes later, alone or in another composite, passes it in any of them. At the
    /// head of a member's line it holds that line until every member admits it (see [the
    /// cost](crate#several-limiters-one-decision)); nothing is counted anywhere before
    /// then.
    ///
    /// # Errors
    ///
    /// [`AcquireAllError::Member`] naming the first member that refuses it for good:
    /// [`ExceedsLimit`](crate::AcquireError::ExceedsLimit) with that member's limit, a
    /// bucket's [`QueueFull`](crate::AcquireError::QueueFull) (at once), or
    /// [`Closed`](crate::AcquireError::Closed) (at once, or when a bucket closes while it
    /// waits) or [`RefillFailed`](crate::AcquireError::RefillFailed) (a bucket's refill
    /// task panicked while it waited); [`AcquireAllError::NoRuntime`] when it must wait outside a tokio runtime;
    /// [`AcquireAllError::Config`] for a key member (see
    /// [`Keyed::member`](crate::Keyed::member)) whose whole limiter, made to wait, is
    /// another member too or plays the other part.
    ///
    /// # Panics
    ///
    /// On its first poll, when it must wait inside a tokio runtime built without time, as
    /// [`Limiter::acquire`](crate::Limiter::acquire) says.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future gives up its place in every member's line and
    /// acquires nothing from any member; whoever was behind it moves up.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{all, Rate, SlidingLog, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::new(Rate::per_second(4), 1)?;
    /// let log = SlidingLog::new(2, Duration::from_secs(1))?;
    /// let both = all((&bucket, &log))?;
    /// let start = tokio::time::Instant::now();
    /// for _ in 0..3 {
    ///     both.acquire(1).await?;
    /// }
    /// // The bucket allows one every 250 ms; the log two a second: the third waits 1 s.
    /// assert_eq!(start.elapsed(), Duration::from_secs(1));
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire(
        &self,
        permits: u64,
    ) -> impl Future<Output = Result<(), AcquireAllError>> + Send + '_
    where
        M: Sync,
    {
        acquire_all(self.members.parts(), permits, Order::AtOnce)
    }

    /// The members, as given to [`all`].
    ///
    /// ```
    /// use token_bucket::{all, Rate, TokenBucket};
    ///
    /// let a = TokenBucket::new(Rate::per_second(1), 1)?;
    /// let b = TokenBucket::new(Rate::per_second(1), 1)?;
    /// let both = all((&a, &b))?;
    /// assert_eq!(both.members().0.available(), 1);
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn members(&self) -> &M {
        &self.members
    }
}
