//! [`DynLimiter`]: any [`Limiter`] as a trait object, for a list of mixed limiters or one
//! picked at run time. `Limiter` itself cannot be one, as its `acquire` returns
//! `impl Future`; this companion boxes that future, and only for those who ask for it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::error::{AcquireError, TryAcquireError};
use crate::limiter::Limiter;
use crate::quota::{Decision, Policy, Quota};

/// A [`Limiter`] that can be a trait object: `Box<dyn DynLimiter>` and
/// `Arc<dyn DynLimiter>` hold any limiter, of this crate or your own, and are limiters
/// themselves, so they go wherever a `Limiter` goes.
///
/// Every `Limiter` implements it, for free. Its methods are those of `Limiter` under
/// names of their own (so that neither trait's methods hide the other's when both are in
/// scope), with [`dyn_acquire`](DynLimiter::dyn_acquire)'s future boxed: call the
/// `Limiter` methods of the `Box` or `Arc`, which forward to them. Only the boxed
/// limiter's `acquire` allocates; the limiters themselves, used directly, box nothing.
///
/// A boxed limiter is not a [`KeyTemplate`](crate::KeyTemplate), nor a composite's
/// [`Member`](crate::Member): [`Keyed`](crate::Keyed) and [`all`](crate::all) take the
/// limiters themselves.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use token_bucket::{DynLimiter, FixedWindow, Limiter, Rate, TokenBucket};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // One limiter shared by every task, whichever kind the configuration asked for.
/// let kind = "window";
/// let limiter: Arc<dyn DynLimiter> = match kind {
///     "bucket" => Arc::new(TokenBucket::new(Rate::per_second(2), 2)?),
///     _ => Arc::new(FixedWindow::new(2, Duration::from_secs(1))?),
/// };
/// let start = tokio::time::Instant::now();
/// let tasks: Vec<_> = (0..3)
///     .map(|_| {
///         let limiter = Arc::clone(&limiter);
///         tokio::spawn(async move { limiter.acquire(1).await })
///     })
///     .collect();
/// for task in tasks {
///     task.await??;
/// }
/// // Two in the first window, the third in the next.
/// assert_eq!(start.elapsed(), Duration::from_secs(1));
/// # Ok(())
/// # }
/// ```
pub trait DynLimiter: Send + Sync + 'static {
    /// [`Limiter::try_acquire`].
    ///
    /// # Errors
    ///
    /// Those of [`Limiter::try_acquire`].
    fn dyn_try_acquire(&self, permits: u64) -> Result<(), TryAcquireError>;

    /// [`Limiter::acquire`], its future boxed.
    ///
    /// # Errors
    ///
    /// Those of [`Limiter::acquire`].
    ///
    /// # Cancel safety
    ///
    /// As the limiter's own `acquire`: for every limiter of this crate, dropping the
    /// future gives up its place in line and acquires nothing.
    fn dyn_acquire(
        &self,
        permits: u64,
    ) -> Pin<Box<dyn Future<Output = Result<(), AcquireError>> + Send + '_>>;

    /// [`Limiter::is_limited`].
    fn dyn_is_limited(&self) -> bool;

    /// [`Limiter::refund`].
    fn dyn_refund(&self, permits: u64);

    /// [`Limiter::available`].
    fn dyn_available(&self) -> u64;

    /// [`Limiter::policy`].
    fn dyn_policy(&self) -> Option<Policy>;

    /// [`Limiter::quota`].
    fn dyn_quota(&self) -> Option<Quota>;

    /// [`Limiter::try_acquire_decision`]: one step for every limiter of this crate.
    ///
    /// # Errors
    ///
    /// In [`Decision::result`], those of [`Limiter::try_acquire`].
    fn dyn_try_acquire_decision(&self, permits: u64) -> Decision;
}

impl<L: Limiter> DynLimiter for L {
    fn dyn_try_acquire(&self, permits: u64) -> Result<(), TryAcquireError> {
        self.try_acquire(permits)
    }

    fn dyn_acquire(
        &self,
        permits: u64,
    ) -> Pin<Box<dyn Future<Output = Result<(), AcquireError>> + Send + '_>> {
        Box::pin(self.acquire(permits))
    }

    fn dyn_is_limited(&self) -> bool {
        self.is_limited()
    }

    fn dyn_refund(&self, permits: u64) {
        self.refund(permits);
    }

    fn dyn_available(&self) -> u64 {
        self.available()
    }

    fn dyn_policy(&self) -> Option<Policy> {
        self.policy()
    }

    fn dyn_quota(&self) -> Option<Quota> {
        self.quota()
    }

    fn dyn_try_acquire_decision(&self, permits: u64) -> Decision {
        self.try_acquire_decision(permits)
    }
}

/// `Limiter` for a pointer to a `dyn DynLimiter`, asking the limiter it points to. Each
/// call goes through `**self`, the trait object: `self.dyn_…` would find the pointer's
/// own `DynLimiter` (every `Limiter` has one) and call itself forever.
macro_rules! forward_to_dyn {
    ($pointer:ty) => {
        impl Limiter for $pointer {
            fn try_acquire(&self, permits: u64) -> Result<(), TryAcquireError> {
                (**self).dyn_try_acquire(permits)
            }

            fn acquire(
                &self,
                permits: u64,
            ) -> impl Future<Output = Result<(), AcquireError>> + Send + '_ {
                (**self).dyn_acquire(permits)
            }

            fn is_limited(&self) -> bool {
                (**self).dyn_is_limited()
            }

            fn refund(&self, permits: u64) {
                (**self).dyn_refund(permits);
            }

            fn available(&self) -> u64 {
                (**self).dyn_available()
            }

            fn policy(&self) -> Option<Policy> {
                (**self).dyn_policy()
            }

            fn quota(&self) -> Option<Quota> {
                (**self).dyn_quota()
            }

            fn try_acquire_decision(&self, permits: u64) -> Decision {
                (**self).dyn_try_acquire_decision(permits)
            }
        }
    };
}

forward_to_dyn!(Box<dyn DynLimiter>);
forward_to_dyn!(Arc<dyn DynLimiter>);
