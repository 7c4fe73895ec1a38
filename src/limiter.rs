//! The traits every limiter of the crate implements: [`Limiter`], so code can take any of
//! them, and [`KeyTemplate`], what [`Keyed`](crate::Keyed) needs of its template. Their
//! trait object, [`DynLimiter`](crate::DynLimiter), is in `dyn_limiter.rs`.

use std::future::Future;

use crate::error::{AcquireError, TryAcquireError};
use crate::quota::{Decision, Policy, Quota};

/// A rate limiter: [`TokenBucket`](crate::TokenBucket), [`FixedWindow`](crate::FixedWindow),
/// [`SlidingLog`](crate::SlidingLog) or [`SlidingWindow`](crate::SlidingWindow).
///
/// Each counts *permits* (a bucket's tokens, a window's requests), answers
/// [`try_acquire`](Limiter::try_acquire) at once with a `retry_after` hint, waits only
/// when asked to with [`acquire`](Limiter::acquire) (first in, first out among the
/// waiters of one limiter), reads tokio's clock so paused-time tests are exact, and is
/// safe to share across threads. [`Keyed`](crate::Keyed) keeps one per key.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use token_bucket::{FixedWindow, Limiter, Rate, TokenBucket};
///
/// /// Admits a batch of `size` jobs now, or says how long to wait.
/// fn admit(limiter: &impl Limiter, size: u64) -> Result<(), Duration> {
///     match limiter.try_acquire(size) {
///         Ok(()) => Ok(()),
///         Err(token_bucket::TryAcquireError::Limited { retry_after }) => Err(retry_after),
///         Err(other) => panic!("{other}"),
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
/// let window = FixedWindow::new(10, Duration::from_secs(1))?;
/// assert_eq!(admit(&bucket, 10), Ok(()));
/// assert_eq!(admit(&bucket, 1), Err(Duration::from_millis(100)));
/// assert_eq!(admit(&window, 10), Ok(()));
/// assert_eq!(admit(&window, 1), Err(Duration::from_secs(1)));
/// # Ok(())
/// # }
/// ```
///
/// # Trait objects
///
/// `dyn Limiter` is not possible (`Box<dyn Limiter>` fails with E0038), because
/// [`acquire`](Limiter::acquire) returns `impl Future`, which keeps every limiter's
/// `acquire` free of allocation. For a list of mixed limiters, or one picked at run time,
/// hold a `Box<dyn DynLimiter>` or an `Arc<dyn DynLimiter>`: every `Limiter` is a
/// [`DynLimiter`](crate::DynLimiter), and both pointers are `Limiter`s, whose `acquire`
/// boxes its future.
///
/// ```
/// use std::time::Duration;
/// use token_bucket::{DynLimiter, FixedWindow, Limiter, Rate, TokenBucket};
///
/// /// The limiter a line of configuration asks for.
/// fn from_config(line: &str) -> Result<Box<dyn DynLimiter>, token_bucket::ConfigError> {
///     Ok(match line {
///         "bucket" => Box::new(TokenBucket::new(Rate::per_second(10), 1)?),
///         _ => Box::new(FixedWindow::new(1, Duration::from_secs(1))?),
///     })
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiters: Vec<Box<dyn DynLimiter>> = vec![from_config("bucket")?, from_config("window")?];
/// let start = tokio::time::Instant::now();
/// for limiter in &limiters {
///     limiter.acquire(1).await?; // both admit at once
/// }
/// for limiter in &limiters {
///     limiter.acquire(1).await?; // the bucket's token at 100 ms, the window's next at 1 s
/// }
/// assert_eq!(start.elapsed(), Duration::from_secs(1));
/// # Ok(())
/// # }
/// ```
pub trait Limiter: Send + Sync + 'static {
    /// Acquires `permits` now if allowed and nobody waits first; never waits. Needs no
    /// runtime.
    ///
    /// # Errors
    ///
    /// [`TryAcquireError::Limited`] with how long until the same request could succeed
    /// (never shorter than the true wait); [`TryAcquireError::ExceedsLimit`] when
    /// `permits` could never be admitted at once; [`TryAcquireError::Closed`] for a closed
    /// bucket.
    fn try_acquire(&self, permits: u64) -> Result<(), TryAcquireError>;

    /// Acquires `permits`, waiting first in, first out behind the other waiters of this
    /// limiter until they are allowed.
    ///
    /// # Errors
    ///
    /// [`AcquireError::ExceedsLimit`] at once when `permits` could never be admitted;
    /// [`AcquireError::NoRuntime`] when it must wait outside a tokio runtime; a bucket's
    /// [`AcquireError::QueueFull`], [`AcquireError::Closed`] and
    /// [`AcquireError::RefillFailed`].
    ///
    /// # Panics
    ///
    /// On its first poll, when it must wait (the limiter refuses it now, or others wait
    /// first) inside a tokio runtime built without time (no `enable_time` on the
    /// runtime's builder), with tokio's message "A Tokio 1.x context was found, but
    /// timers are disabled. Call \`enable_time\` on the runtime builder to enable
    /// timers.": nothing could ever wake it, so it says so at once rather than hang.
    /// Requests admitted at once need no timer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future gives up its place in line and acquires nothing.
    fn acquire(&self, permits: u64) -> impl Future<Output = Result<(), AcquireError>> + Send + '_;

    /// Whether `try_acquire(1)` would be refused now. Counts nothing.
    fn is_limited(&self) -> bool;

    /// Gives `permits` back for work that did not happen. The limiter never admits more
    /// than its limit because of a refund.
    ///
    /// A refund does not know whose permits it gives back. A [`TokenBucket`](crate::TokenBucket) adds
    /// `permits` tokens, up to its capacity. The window limiters free the capacity of the
    /// newest permits that still count, whoever acquired them:
    /// [`FixedWindow`](crate::FixedWindow) takes `permits` off the current window's count
    /// (permits counted in a window that has ended, such as a waiter's counted in the
    /// window it was due in, are not given back);
    /// [`SlidingLog`](crate::SlidingLog) forgets the `permits` newest grants, and
    /// [`SlidingWindow`](crate::SlidingWindow) takes them off its newest slots (permits
    /// that stopped counting are not given back). So refund soon after the `acquire` it
    /// undoes: if others acquired since, a sliding limiter forgets their newer permits
    /// instead, and keeps counting the refunded ones until they leave.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{Limiter, SlidingLog, TryAcquireError};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = SlidingLog::new(2, Duration::from_secs(1))?;
    /// limiter.try_acquire(1)?; // ours, at 0 ms
    /// tokio::time::advance(Duration::from_millis(400)).await;
    /// limiter.try_acquire(1)?; // someone else's, at 400 ms
    /// limiter.refund(1); // ours did not happen; the newest permit, theirs, is forgotten
    /// assert_eq!(limiter.available(), 1);
    /// limiter.try_acquire(1)?;
    /// // Ours still counts, until 1 s.
    /// assert_eq!(
    ///     limiter.try_acquire(1),
    ///     Err(TryAcquireError::Limited { retry_after: Duration::from_millis(600) })
    /// );
    /// # Ok(())
    /// # }
    /// ```
    fn refund(&self, permits: u64);

    /// How many permits `try_acquire` could take now if nobody waited.
    fn available(&self) -> u64;

    /// The limiter's budget as permits per window, for the `RateLimit-Policy` header
    /// field (see [`Policy`]). `None` unless the limiter reports one: every limiter of
    /// this crate does; a limiter of your own may.
    fn policy(&self) -> Option<Policy> {
        None
    }

    /// The limiter's state now: permits left and when it is whole again (see [`Quota`]).
    /// Counts nothing. `None` unless the limiter reports one: every limiter of this crate
    /// does; a limiter of your own may.
    fn quota(&self) -> Option<Quota> {
        None
    }

    /// [`try_acquire`](Limiter::try_acquire), and the [`Quota`] it leaves, read in the same
    /// step: the numbers an HTTP response's `RateLimit` field needs, exact for the state
    /// the decision saw, with no other request slipping in between.
    ///
    /// The default asks `try_acquire` and then [`quota`](Limiter::quota), two steps; every
    /// limiter of this crate decides and reads in one.
    ///
    /// # Errors
    ///
    /// In [`Decision::result`], those of [`try_acquire`](Limiter::try_acquire).
    fn try_acquire_decision(&self, permits: u64) -> Decision {
        let result = self.try_acquire(permits);
        Decision {
            result,
            quota: self.quota(),
        }
    }
}

/// A [`Limiter`] that [`Keyed`](crate::Keyed) can keep one of per key: it makes fresh
/// copies of its template, and forgets a key whose limiter is idle again.
///
/// Every limiter of this crate implements it. A limiter of your own needs it only to be
/// a `Keyed`'s template; [`Limiter`] alone serves everywhere else.
///
/// # Examples
///
/// ```
/// use token_bucket::{
///     AcquireError, KeyTemplate, Keyed, Limiter, Rate, TokenBucket, TryAcquireError,
/// };
///
/// /// A bucket that logs every refusal.
/// struct Logged(TokenBucket);
///
/// impl Limiter for Logged {
///     fn try_acquire(&self, permits: u64) -> Result<(), TryAcquireError> {
///         let result = self.0.try_acquire(permits);
///         if let Err(refusal) = &result {
///             eprintln!("refused {permits}: {refusal}");
///         }
///         result
///     }
///     async fn acquire(&self, permits: u64) -> Result<(), AcquireError> {
///         self.0.acquire(permits).await
///     }
///     fn is_limited(&self) -> bool { self.0.is_limited() }
///     fn refund(&self, permits: u64) { self.0.refund(permits) }
///     fn available(&self) -> u64 { self.0.available() }
/// }
///
/// impl KeyTemplate for Logged {
///     fn is_idle(&self) -> bool { self.0.is_idle() }
///     fn fresh(&self) -> Logged { Logged(self.0.fresh()) }
///     fn is_shared(&self) -> bool { self.0.is_shared() }
/// }
///
/// let per_user: Keyed<u32, Logged> =
///     Keyed::new(Logged(TokenBucket::new(Rate::per_second(1), 2)?));
/// per_user.try_acquire(&7, 2)?;
/// assert!(per_user.try_acquire(&7, 1).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait KeyTemplate: Limiter {
    /// Whether the limiter is back at its idle state, with nobody waiting: a
    /// [`fresh`](KeyTemplate::fresh) one would behave exactly the same from now on, so
    /// [`Keyed`](crate::Keyed) may forget it.
    fn is_idle(&self) -> bool;

    /// A new limiter with the same settings, in the idle state (a full bucket, empty
    /// windows). A window limiter's copy keeps the template's window (or slot)
    /// boundaries, so every copy of one template behaves the same once idle.
    fn fresh(&self) -> Self;

    /// Whether anything besides this handle refers to the limiter's state: a clone of
    /// it, or a future or adapter made from one. [`Keyed`](crate::Keyed) forgets a key,
    /// or folds it back into its word, only while nothing but its table refers to the
    /// key's limiter: a clone that went on taking from the old limiter once the key came
    /// back fresh would let the key grant twice.
    ///
    /// Every limiter of the crate answers it. The default, `false`, is right for a
    /// limiter whose clones share nothing; one that wraps a limiter of the crate (or
    /// shares its state in any other way) must forward it, as the example above does.
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{KeyTemplate, Rate, TokenBucket};
    ///
    /// let bucket = TokenBucket::new(Rate::per_second(1), 1)?;
    /// assert!(!bucket.is_shared());
    /// let clone = bucket.clone();
    /// assert!(bucket.is_shared());
    /// drop(clone);
    /// assert!(!bucket.is_shared());
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    fn is_shared(&self) -> bool {
        false
    }
}

/// A limiter's state as one plain `u64`, as [`Keyed`](crate::Keyed) holds a key nobody
/// waits on (see `keyed/compact.rs`): `self` holds the settings and clock every key of
/// one template shares, and each word is guarded by its shard's lock. A word is read at a
/// *reading* of the clock ([`reading`](OneWord::reading)), and decides as its limiter
/// would with nobody waiting, at the same instants. Here, below the limiters and `Keyed`,
/// so that both may name it.
pub(crate) trait OneWord: Send + Sync + 'static {
    /// The limiter a word stands for.
    type Limiter;

    /// The form of `template`'s keys, if its settings fit one word.
    fn of(template: &Self::Limiter) -> Option<Self>
    where
        Self: Sized;

    /// The instant, on the template's clock, words are read at.
    fn now(&self) -> u64;

    /// The word of a fresh limiter at `now`.
    fn idle_word(&self, now: u64) -> u64;

    /// What words counted from `base` are read against at `now`; `None` when `now` is past
    /// what they can hold, and every word must be [`rebase`](OneWord::rebase)d first.
    #[inline]
    fn reading(&self, now: u64, _base: u64) -> Option<u64> {
        Some(now)
    }

    /// `word`, counted from the later base `to` instead of `from`.
    fn rebase(&self, word: u64, _from: u64, _to: u64) -> u64 {
        word
    }

    /// `try_acquire` on `word` at `reading`.
    fn try_acquire_word(
        &self,
        word: &mut u64,
        permits: u64,
        reading: u64,
    ) -> Result<(), TryAcquireError>;

    /// The [`Quota`] of `word` at `reading`.
    fn quota_of_word(&self, word: u64, reading: u64) -> Quota;

    /// `try_acquire_decision` on `word` at `reading`: the quota is read from the word it
    /// decided on.
    #[inline]
    fn decide_word(&self, word: &mut u64, permits: u64, reading: u64) -> Decision {
        let result = self.try_acquire_word(word, permits, reading);
        Decision {
            result,
            quota: Some(self.quota_of_word(*word, reading)),
        }
    }

    /// `refund` on `word` at `reading`.
    fn refund_word(&self, word: &mut u64, permits: u64, reading: u64);

    /// Whether `word` is a fresh limiter's at `reading`.
    fn is_idle_word(&self, word: u64, reading: u64) -> bool;

    /// The limiter `word` (counted from `base`) stands for at `now`.
    fn unfold(&self, word: u64, now: u64, base: u64) -> Self::Limiter;

    /// The word `limiter` folds into at `now`, counted from `base`, if it does: nobody
    /// waits on it and its settings and clock are the template's. Its holder must be the
    /// only one.
    fn fold(&self, limiter: &Self::Limiter, now: u64, base: u64) -> Option<u64>;
}
