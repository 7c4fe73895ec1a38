//! What a [`Keyed`] tells of itself and of its keys, and the whole limiters it hands out
//! ([`get`](Keyed::get), [`get_or_insert`](Keyed::get_or_insert)).

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::error::{TooManyKeys, TryAcquireError};
use crate::keyed::handle::Keyed;
use crate::keyed::slots::lock;
use crate::limiter::{KeyTemplate, Limiter};
use crate::quota::{Policy, Quota};

impl<K, L> Keyed<K, L> {
    /// Keys held now: those seen and not yet forgotten. Exact while no call is adding or
    /// forgetting keys; a call in progress may already count a key it is adding.
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{Keyed, Rate, TokenBucket};
    ///
    /// let keyed = Keyed::new(TokenBucket::new(Rate::per_second(1), 1)?);
    /// keyed.try_acquire(&"a", 1)?;
    /// keyed.try_acquire(&"b", 1)?;
    /// keyed.try_acquire(&"a", 0)?;
    /// assert_eq!(keyed.len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn len(&self) -> usize {
        self.inner.keys.load(Ordering::Relaxed)
    }

    /// Whether no key is held.
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{Keyed, Rate, TokenBucket};
    ///
    /// let keyed = Keyed::new(TokenBucket::new(Rate::per_second(1), 1)?);
    /// assert!(keyed.is_empty());
    /// keyed.try_acquire(&1_u32, 1)?;
    /// assert!(!keyed.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most keys held at once, if the limiter was built with
    /// [`max_keys`](crate::KeyedBuilder::max_keys).
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{Keyed, Rate, TokenBucket};
    ///
    /// let template = TokenBucket::new(Rate::per_second(1), 1)?;
    /// let bounded: Keyed<u32, _> = Keyed::builder(template.clone()).max_keys(10).build()?;
    /// assert_eq!(bounded.max_keys(), Some(10));
    /// let unbounded: Keyed<u32, _> = Keyed::new(template);
    /// assert_eq!(unbounded.max_keys(), None);
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn max_keys(&self) -> Option<usize> {
        self.inner.max_keys
    }

    /// The number of shards the keys are spread over.
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{Keyed, Rate, TokenBucket};
    ///
    /// let keyed: Keyed<u32, _> = Keyed::new(TokenBucket::new(Rate::per_second(1), 1)?);
    /// assert!(keyed.shards().is_power_of_two());
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn shards(&self) -> usize {
        self.inner.shards.len()
    }

    /// The name it reports under, if [`KeyedBuilder::name`](crate::KeyedBuilder::name) gave it one (see
    /// [`observe`](crate::observe)).
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{Keyed, Rate, TokenBucket};
    ///
    /// let template = TokenBucket::new(Rate::per_second(1), 1)?;
    /// let named: Keyed<u32, _> = Keyed::builder(template.clone()).name("per-user").build()?;
    /// assert_eq!(named.clone().name(), Some("per-user"));
    /// assert_eq!(Keyed::<u32, _>::new(template).name(), None);
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn name(&self) -> Option<&str> {
        self.inner.observer.name()
    }
}

impl<K: Hash + Eq, L: KeyTemplate> Keyed<K, L> {
    /// The budget of every key: the template's [`Limiter::policy`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{Keyed, Policy, Rate, TokenBucket};
    ///
    /// let per_key: Keyed<u64, TokenBucket> = Keyed::new(TokenBucket::new(Rate::per_second(1), 60)?);
    /// assert_eq!(per_key.policy(), Some(Policy { limit: 60, window: Duration::from_secs(60) }));
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn policy(&self) -> Option<Policy> {
        self.inner.template.policy()
    }

    /// The [`Quota`] of `key` now, counting nothing (see [`Limiter::quota`]). A key not
    /// held is a fresh limiter's, whole: its quota is the full one, and it is not added.
    /// A key held as a word is read from its word; one held whole, from its limiter.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{Keyed, Quota, Rate, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let per_key: Keyed<u64, TokenBucket> = Keyed::new(TokenBucket::new(Rate::per_second(2), 4)?);
    /// assert_eq!(per_key.quota(&7), Some(Quota { remaining: 4, full_after: Duration::ZERO }));
    /// assert!(per_key.is_empty(), "asking adds no key");
    /// per_key.try_acquire(&7, 3)?;
    /// assert_eq!(
    ///     per_key.quota(&7),
    ///     Some(Quota { remaining: 1, full_after: Duration::from_millis(1_500) })
    /// );
    /// # Ok(())
    /// # }
    /// ```
    pub fn quota<Q>(&self, key: &Q) -> Option<Quota>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let held = self.with_held(
            key,
            |compact, word, reading| Some(compact.quota_of_word(*word, reading)),
            Limiter::quota,
        );
        held.unwrap_or_else(|| self.inner.template.quota())
    }

    /// The whole limiter of `key`, inserted from the template if the key is new (a key
    /// held as a word is unfolded into it); acquires nothing. The key is not forgotten
    /// while the returned `Arc` or a `Weak` of it lives, nor while a composite waits in
    /// its limiter's line.
    /// [`get`](Keyed::get) is the same for a key already held, and inserts none.
    ///
    /// For a request that takes from this key and from other limiters in one decision,
    /// [`member`](Keyed::member) is the better member: it decides on the key's word while
    /// nobody waits on it, where this makes the key whole (about 950 bytes for a bucket,
    /// in three allocations) and keeps it whole while the `Arc` lives.
    ///
    /// # Errors
    ///
    /// [`TooManyKeys`] when `key` is new, [`max_keys`](crate::KeyedBuilder::max_keys) keys are
    /// held, and no room could be made (see [the memory bound](Keyed#the-memory-bound)).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use token_bucket::{all, Keyed, Rate, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let per_ip: Keyed<IpAddr, TokenBucket> =
    ///     Keyed::new(TokenBucket::new(Rate::per_second(5), 5)?);
    /// let global = TokenBucket::new(Rate::per_second(500), 500)?;
    /// let client: IpAddr = "192.0.2.1".parse()?;
    /// all((per_ip.get_or_insert(&client)?, &global))?.acquire(1).await?;
    /// assert_eq!(per_ip.get(&client).map(|bucket| bucket.available()), Some(4));
    /// assert_eq!(global.available(), 499);
    /// # Ok(())
    /// # }
    /// ```
    pub fn get_or_insert<Q>(&self, key: &Q) -> Result<Arc<L>, TooManyKeys>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let (limiter, _) = self.with_slot(self.hash(key), key, |mut slot, at| slot.whole(at))?;
        Ok(self.with_keys_part(limiter))
    }

    /// [`get_or_insert`](Keyed::get_or_insert) under its old name, with its refusal as a
    /// [`TryAcquireError::TooManyKeys`].
    ///
    /// # Errors
    ///
    /// [`TryAcquireError::TooManyKeys`] when `get_or_insert` refuses the key.
    ///
    /// # Examples
    ///
    /// ```
    /// # #![allow(deprecated)]
    /// use token_bucket::{Keyed, Limiter, Rate, TokenBucket};
    ///
    /// let per_key: Keyed<u8, TokenBucket> = Keyed::new(TokenBucket::new(Rate::per_second(1), 2)?);
    /// assert_eq!(per_key.limiter(&7)?.available(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[deprecated(
        note = "use `get_or_insert`: it inserts the key, acquires nothing, and refuses only with `TooManyKeys`"
    )]
    pub fn limiter<Q>(&self, key: &Q) -> Result<Arc<L>, TryAcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        Ok(self.get_or_insert(key)?)
    }

    /// The limiter of `key`, if the key is held; `None` if it was never seen or was
    /// forgotten (its limiter would then be fresh), and then no key is added.
    ///
    /// A key held as a word is made whole for the handle: a whole limiter holding exactly
    /// what the word held. The key is neither forgotten nor folded back into its word
    /// while anything but its table refers to that limiter: the returned `Arc`, a `Weak`
    /// of it (one could be upgraded into a handle on a bucket the key no longer reads), a
    /// clone of the limiter inside it, or a future made from either (a `take` holds the
    /// bucket, not the handle it came from). So the key never grants more than one
    /// limiter of the template would, whatever a caller keeps. Once they are all gone,
    /// the key folds back at its next `try_acquire` or `acquire`, as a wait in its line
    /// ends, or at a sweep (see [how a key is held](Keyed#how-a-key-is-held)). Settings changed through it (a bucket's
    /// [`set_rate`](crate::TokenBucket::set_rate) or
    /// [`set_capacity`](crate::TokenBucket::set_capacity)) keep the key whole, with its
    /// own settings, but last only while the key is held: once its limiter is idle it may
    /// be forgotten, and the key comes back with a fresh copy of the template. A bucket's
    /// [`stats`](crate::TokenBucket::stats) count from when it was made whole.
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{KeyTemplate, Keyed, Limiter, Rate, TokenBucket};
    ///
    /// let per_key: Keyed<&str, TokenBucket> = Keyed::new(TokenBucket::new(Rate::per_hour(1), 10)?);
    /// assert!(per_key.get(&"a").is_none());
    /// per_key.try_acquire(&"a", 4)?;
    /// let limiter = per_key.get(&"a").expect("a was just used");
    /// assert_eq!(limiter.available(), 6);
    /// // Work that did not happen: give the permits back.
    /// limiter.refund(4);
    /// assert!(limiter.is_idle());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn get<Q>(&self, key: &Q) -> Option<Arc<L>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let limiter = self.visit_held(key, |mut slot, at| slot.whole(at))?;
        Some(self.with_keys_part(limiter))
    }

    /// Keys held whole now: each as its whole limiter (a bucket's waiter queue and refill
    /// task, a window's line), about 950 bytes for a bucket, rather than as its state word
    /// alone (see [how a key is held](Keyed#how-a-key-is-held)). With [`len`](Keyed::len),
    /// what the keys cost in memory. A key is whole while requests wait on it or a handle
    /// from [`get`](Keyed::get) or [`get_or_insert`](Keyed::get_or_insert) holds it, and
    /// folds back into its word after; every key of a limiter with no one-word form (a
    /// [`SlidingLog`](crate::SlidingLog), a [`SlidingWindow`](crate::SlidingWindow), a
    /// limiter of your own) is whole. Locks each shard in turn.
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{Keyed, Rate, TokenBucket};
    ///
    /// let per_key: Keyed<u8, TokenBucket> = Keyed::new(TokenBucket::new(Rate::per_second(1), 1)?);
    /// per_key.try_acquire(&0, 1)?;
    /// per_key.try_acquire(&1, 1)?;
    /// assert_eq!((per_key.len(), per_key.keys_held_whole()), (2, 0));
    /// let handle = per_key.get(&0);
    /// assert_eq!(per_key.keys_held_whole(), 1);
    /// drop(handle);
    /// per_key.try_acquire(&0, 0)?; // the key's next call folds it back
    /// assert_eq!(per_key.keys_held_whole(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn keys_held_whole(&self) -> usize {
        let shards = self.inner.shards.iter();
        shards.map(|shard| lock(shard).wholes()).sum()
    }
}
