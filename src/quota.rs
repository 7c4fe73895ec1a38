//! What a limiter tells the outside world about its budget: its [`Policy`] (so many
//! permits per window) and, at a decision, its [`Quota`] (how many are left and when it
//! is full again). The HTTP layer turns them into the `RateLimit-Policy` and `RateLimit`
//! header fields; anyone may show them to their own clients.

use std::time::Duration;

use crate::error::TryAcquireError;

/// A limiter's budget, as one number of permits per window: what the IETF draft's
/// `RateLimit-Policy` field calls its quota (`q`) and window (`w`).
///
/// A window limiter's policy is its `limit` per `window`. A token bucket's is its
/// `capacity` per the time its rate takes to fill it from empty: a bucket of 10 at 100 a
/// second is "10 per 100 ms", and one of 60 at 1 a second is "60 per minute".
///
/// ```
/// use std::time::Duration;
/// use token_bucket::{FixedWindow, Limiter, Policy, Rate, TokenBucket};
///
/// let bucket = TokenBucket::new(Rate::per_second(1), 60)?;
/// assert_eq!(bucket.policy(), Some(Policy { limit: 60, window: Duration::from_secs(60) }));
/// let window = FixedWindow::new(100, Duration::from_secs(10))?;
/// assert_eq!(window.policy(), Some(Policy { limit: 100, window: Duration::from_secs(10) }));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Policy {
    /// The most permits the limiter admits within one `window`.
    pub limit: u64,
    /// The window of `limit`.
    pub window: Duration,
}

/// A limiter's state at a decision: what it has left, and when it is whole again.
///
/// ```
/// use std::time::Duration;
/// use token_bucket::{Limiter, Quota, Rate, TokenBucket};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
/// let decision = bucket.try_acquire_decision(4);
/// assert_eq!(decision.result, Ok(()));
/// // 6 tokens left; the 4 taken come back over 400 ms.
/// assert_eq!(
///     decision.quota,
///     Some(Quota { remaining: 6, full_after: Duration::from_millis(400) })
/// );
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    /// Permits that could be acquired at once, if nobody waited: a bucket's whole tokens,
    /// a window's limit less what it counts.
    pub remaining: u64,
    /// How long until the limiter holds its whole [`Policy::limit`] again, if nothing more
    /// is acquired: a bucket full, a window (or a log) empty. Zero when it is whole now.
    pub full_after: Duration,
}

/// One decision of [`Limiter::try_acquire_decision`](crate::Limiter::try_acquire_decision):
/// whether the permits were acquired, and the limiter's [`Quota`] right after, read in the
/// same step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// What [`Limiter::try_acquire`](crate::Limiter::try_acquire) would have answered.
    pub result: Result<(), TryAcquireError>,
    /// The limiter's state right after the decision (after taking the permits, when it
    /// did); `None` from a limiter that does not report one.
    pub quota: Option<Quota>,
}
