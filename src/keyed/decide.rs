//! Deciding for a key of a [`Keyed`]: [`try_acquire`](Keyed::try_acquire),
//! [`try_acquire_decision`](Keyed::try_acquire_decision), [`refund`](Keyed::refund) and
//! [`acquire`](Keyed::acquire), on the key's word while nobody waits on it, else on its
//! whole limiter with the shard's lock released.

use std::borrow::Borrow;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;

use crate::clock::Clock;
use crate::error::{for_good, AcquireError, TooManyKeys, TryAcquireError};
use crate::keyed::handle::Keyed;
use crate::keyed::slots::{on_word, step, Step};
use crate::limiter::KeyTemplate;
use crate::observe::{Class, KeyedObserver};
use crate::quota::Decision;

impl<K: Hash + Eq, L: KeyTemplate> Keyed<K, L> {
    /// Reports the new `key` wanting `permits` refused for want of room, and returns the
    /// refusal.
    #[cold]
    fn refused_key<Q>(&self, refusal: TooManyKeys, key: &Q, permits: u64) -> TryAcquireError
    where
        Q: ToOwned<Owned = K> + ?Sized,
    {
        let observer = &self.inner.observer;
        // Only a class function needs an owned key: the key is not held, so one is made.
        let class = match observer.has_classes() {
            true => observer.class_of(&key.to_owned()),
            false => Class::default(),
        };
        observer.too_many_keys(permits, class);
        refusal.into()
    }

    /// Acquires `permits` for `key` now if its limiter allows; never waits. A key seen for
    /// the first time gets a fresh limiter. Needs no runtime. A key held as a word is
    /// answered on its word; a whole limiter that may be a word again is folded first
    /// (see [how a key is held](Keyed#how-a-key-is-held)).
    ///
    /// The key may be given in any borrowed form of `K`, as with a `HashMap`: a `&str` for
    /// `String` keys.
    ///
    /// # Errors
    ///
    /// [`TryAcquireError::TooManyKeys`] when `key` is new,
    /// [`max_keys`](crate::KeyedBuilder::max_keys) keys are held, and no room could be made
    /// (see [the memory bound](Keyed#the-memory-bound)); the keys already held are still
    /// served. Otherwise the errors of the key's limiter's
    /// [`try_acquire`](crate::Limiter::try_acquire): [`TryAcquireError::Limited`] with the
    /// `retry_after` of this key alone, [`TryAcquireError::ExceedsLimit`], and a bucket's
    /// [`TryAcquireError::Closed`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{Keyed, Rate, TokenBucket, TryAcquireError};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let per_key: Keyed<String, TokenBucket> =
    ///     Keyed::builder(TokenBucket::new(Rate::per_second(2), 2)?).max_keys(1).build()?;
    /// per_key.try_acquire("alice", 2)?;
    /// assert_eq!(
    ///     per_key.try_acquire("alice", 1),
    ///     Err(TryAcquireError::Limited { retry_after: Duration::from_millis(500) })
    /// );
    /// // A second key does not fit while alice's bucket is still refilling...
    /// assert_eq!(per_key.try_acquire("bob", 1), Err(TryAcquireError::TooManyKeys { max_keys: 1 }));
    /// // ...and does once it is full again: alice is forgotten to make room.
    /// tokio::time::advance(Duration::from_secs(1)).await;
    /// per_key.try_acquire("bob", 1)?;
    /// assert_eq!(per_key.len(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire<Q>(&self, key: &Q, permits: u64) -> Result<(), TryAcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let (step, class) = self
            .with_slot(self.hash(key), key, |slot, at| {
                step(slot, at, |compact, word, reading| {
                    compact.try_acquire_word(word, permits, reading)
                })
            })
            .map_err(|refusal| self.refused_key(refusal, key, permits))?;
        // The key's own limiter is never named: the `Keyed` reports for it.
        let result = match step {
            Step::Decided(result) => result,
            Step::Call(limiter) => limiter.try_acquire(permits),
        };
        let observer = self.inner.observer.decisions(class);
        observer.decided(permits, &result);
        result
    }

    /// [`try_acquire`](Keyed::try_acquire) for `key`, and the [`Quota`](crate::Quota) it leaves the
    /// key, read in the same step (see [`Limiter::try_acquire_decision`](crate::Limiter::try_acquire_decision)): what the
    /// `RateLimit` header field of a response to this key needs. The key rules are those
    /// of `try_acquire`: a new key gets a fresh limiter, and a key held as a word is
    /// decided on its word, the quota read from the word it decided on at the same
    /// reading of the clock; a key held whole is asked its limiter's own
    /// `try_acquire_decision`.
    ///
    /// # Errors
    ///
    /// In [`Decision::result`], those of [`try_acquire`](Keyed::try_acquire). A new key
    /// refused with [`TryAcquireError::TooManyKeys`] has no limiter, so no quota: the
    /// decision's `quota` is `None` then, and always `Some` otherwise for the crate's own
    /// limiters.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{Keyed, Quota, Rate, TokenBucket, TryAcquireError};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let per_key: Keyed<String, TokenBucket> =
    ///     Keyed::builder(TokenBucket::new(Rate::per_second(10), 10)?).max_keys(1).build()?;
    /// let decision = per_key.try_acquire_decision("alice", 4);
    /// assert_eq!(decision.result, Ok(()));
    /// assert_eq!(
    ///     decision.quota,
    ///     Some(Quota { remaining: 6, full_after: Duration::from_millis(400) })
    /// );
    /// let decision = per_key.try_acquire_decision("bob", 1);
    /// assert_eq!(decision.result, Err(TryAcquireError::TooManyKeys { max_keys: 1 }));
    /// assert_eq!(decision.quota, None);
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire_decision<Q>(&self, key: &Q, permits: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let decided = self.with_slot(self.hash(key), key, |slot, at| {
            step(slot, at, |compact, word, reading| {
                compact.decide_word(word, permits, reading)
            })
        });
        let (decision, class) = match decided {
            Ok((Step::Decided(decision), class)) => (decision, class),
            Ok((Step::Call(limiter), class)) => (limiter.try_acquire_decision(permits), class),
            Err(refusal) => {
                return Decision {
                    result: Err(self.refused_key(refusal, key, permits)),
                    quota: None,
                }
            }
        };
        let observer = self.inner.observer.decisions(class);
        observer.decided(permits, &decision.result);
        decision
    }

    /// Gives `permits` back to `key`, for work that did not happen or cost less than
    /// charged: on its word when it is held as one, as its limiter's own
    /// [`refund`](crate::Limiter::refund) would, else through its whole limiter's `refund`. A key
    /// not held has a fresh limiter's full budget: nothing to give back, and no key is
    /// added. The limiter never admits more than its limit because of a refund; see
    /// [`Limiter::refund`](crate::Limiter::refund) for whose permits each kind gives back.
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{Keyed, Rate, TokenBucket};
    ///
    /// let per_key: Keyed<String, TokenBucket> =
    ///     Keyed::new(TokenBucket::new(Rate::per_hour(1), 10)?);
    /// // Charge an estimate up front...
    /// per_key.try_acquire("alice", 8)?;
    /// // ...and settle once the work cost 3: the other 5 go back.
    /// per_key.refund("alice", 5);
    /// assert_eq!(per_key.quota("alice").map(|quota| quota.remaining), Some(7));
    /// per_key.refund("bob", 5); // not held: nothing to do
    /// assert_eq!(per_key.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refund<Q>(&self, key: &Q, permits: u64)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.with_held(
            key,
            |compact, word, reading| compact.refund_word(word, permits, reading),
            |limiter| limiter.refund(permits),
        );
    }

    /// Acquires `permits` for `key`, waiting first in, first out behind the other waiters
    /// of that key until its limiter allows. Other keys are not held up.
    ///
    /// The request is decided when the future is first polled, not when this method is
    /// called: a key held as a word whose permits are there, with nobody waiting, is
    /// served on its word at once, and no limiter is made. Only a request that must wait
    /// makes the key's whole limiter (from its word, holding exactly what the word held)
    /// and joins its line. The future owns a copy of the key and a handle to the
    /// `Keyed`, so it borrows neither `self` nor `key`. While it waits it holds the
    /// key's limiter, so the key is neither forgotten nor folded back into its word; when
    /// it ends (served, refused or dropped) and was the last to use the whole limiter,
    /// with its line empty, the key goes back to its word at once (see
    /// [how a key is held](Keyed#how-a-key-is-held)). No lock of the `Keyed` is held
    /// while it waits.
    ///
    /// # Errors
    ///
    /// [`AcquireError::TooManyKeys`] when `key` is new,
    /// [`max_keys`](crate::KeyedBuilder::max_keys) keys are held, and no room could be made
    /// (see [the memory bound](Keyed#the-memory-bound)). Otherwise the
    /// errors of the key's limiter's [`acquire`](crate::Limiter::acquire):
    /// [`AcquireError::ExceedsLimit`], [`AcquireError::NoRuntime`], and a bucket's
    /// [`AcquireError::QueueFull`], [`AcquireError::Closed`] and
    /// [`AcquireError::RefillFailed`].
    ///
    /// # Panics
    ///
    /// On its first poll, when it must wait inside a tokio runtime built without time, as
    /// [`Limiter::acquire`](crate::Limiter::acquire) says.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a future dropped before its first poll took nothing and added no
    /// key; one dropped while waiting gives up its place in the key's line and acquires
    /// nothing, as the limiter's own `acquire` does, and no longer keeps the key from
    /// being forgotten.
    ///
    /// The future owns a copy of the key (so that nothing is looked up before its first
    /// poll), which is why the key type must be `Send + 'static`: keys borrowed from a
    /// shorter-lived value, or held in an `Rc`, suit [`try_acquire`](Keyed::try_acquire)
    /// and [`get`](Keyed::get) but not this.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{Keyed, Rate, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let per_key: Keyed<u64, TokenBucket> = Keyed::new(TokenBucket::new(Rate::per_second(4), 1)?);
    /// let start = tokio::time::Instant::now();
    /// per_key.acquire(&7, 1).await?;
    /// per_key.acquire(&7, 1).await?; // key 7 waits 250 ms for its next permit
    /// assert_eq!(start.elapsed(), Duration::from_millis(250));
    /// per_key.acquire(&8, 1).await?; // key 8 has its own budget
    /// assert_eq!(start.elapsed(), Duration::from_millis(250));
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire<Q>(
        &self,
        key: &Q,
        permits: u64,
    ) -> impl Future<Output = Result<(), AcquireError>> + Send + 'static
    where
        K: Borrow<Q> + Send + 'static,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let hash = self.hash(key);
        let mut held = Held {
            keyed: self.clone(),
            hash,
            key: key.to_owned(),
            limiter: None,
        };
        // Nothing is looked at before the first poll, so that a future dropped unpolled
        // takes nothing.
        async move {
            let inner = &held.keyed.inner;
            // Served on the key's word when its permits are there, or refused there when
            // they never could be; else it waits in the whole limiter's line, made from
            // the word if need be.
            let step = held
                .keyed
                .with_slot(hash, held.key.borrow(), |mut slot, at| {
                    let decided = on_word(&mut slot, at, |compact, word, reading| {
                        compact.try_acquire_word(word, permits, reading)
                    });
                    match decided {
                        Some(Ok(())) => Step::Decided(Ok(())),
                        Some(Err(error @ TryAcquireError::ExceedsLimit { .. })) => {
                            Step::Decided(Err(for_good(error)))
                        }
                        // Limited (a word refuses nothing else): the whole limiter's line
                        // decides when.
                        Some(Err(_)) | None => Step::Call(slot.whole(at)),
                    }
                });
            let observer = &inner.observer;
            let (result, class) = match step {
                Ok((Step::Decided(result), class)) => (result, class),
                Err(refused) => (Err(refused.into()), observer.class_of(&held.key)),
                Ok((Step::Call(limiter), class)) => {
                    let acquire = held.limiter.insert(limiter).acquire(permits);
                    if observer.name().is_none() {
                        return acquire.await;
                    }
                    return watched(&inner.clock, observer, class, permits, acquire).await;
                }
            };
            observer.acquired(permits, class, &result, None);
            result
        }
    }
}

/// Awaits `acquire`, a named `Keyed`'s request for `permits` on its key's whole
/// limiter, and reports how it ended to `observer`: decided on its first poll, or after
/// waiting from then (on `clock`), the wait in a span of its own.
async fn watched<K, F: Future<Output = Result<(), AcquireError>>>(
    clock: &Clock,
    observer: &KeyedObserver<K>,
    class: Class,
    permits: u64,
    acquire: F,
) -> Result<(), AcquireError> {
    let since = clock.now();
    let mut acquire = std::pin::pin!(acquire);
    let first_poll =
        std::future::poll_fn(|context| std::task::Poll::Ready(acquire.as_mut().poll(context)))
            .await;
    if let std::task::Poll::Ready(result) = first_poll {
        observer.acquired(permits, class, &result, None);
        return result;
    }
    #[cfg(feature = "tracing")]
    let span = observer.decisions(class).wait_span(permits);
    #[cfg(feature = "tracing")]
    let result = match &span {
        Some(span) => tracing::Instrument::instrument(acquire, span.clone()).await,
        None => acquire.await,
    };
    #[cfg(not(feature = "tracing"))]
    let result = acquire.await;
    let waited = std::time::Duration::from_nanos(clock.now().saturating_sub(since));
    // Reported in the wait's span, as the grant ends the wait.
    #[cfg(feature = "tracing")]
    let _entered = span.as_ref().map(tracing::Span::enter);
    observer.acquired(permits, class, &result, Some(waited));
    result
}

/// What a `Keyed::acquire` future owns: its key, and the key's whole limiter once it
/// waits in its line. Dropped as the future ends or is dropped, it lets go of the
/// limiter and folds the key back into its word if it was the last to use it.
struct Held<K: Hash + Eq, L: KeyTemplate> {
    keyed: Keyed<K, L>,
    hash: u64,
    key: K,
    limiter: Option<Arc<L>>,
}

impl<K: Hash + Eq, L: KeyTemplate> Drop for Held<K, L> {
    fn drop(&mut self) {
        if let Some(limiter) = self.limiter.take() {
            self.keyed.release(self.hash, &self.key, limiter);
        }
    }
}
