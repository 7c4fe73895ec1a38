//! [`KeyMember`]: one key of a [`Keyed`] as a member of a composite
//! ([`all`](crate::all), [`all_in_turn`](crate::all_in_turn)), decided on the key's word
//! while nothing waits, and made whole only to wait.

use std::any::Any;
use std::borrow::Borrow;
use std::fmt;
use std::hash::Hash;
use std::sync::{Arc, OnceLock};

use crate::bucket::TokenBucket;
use crate::composite::{KeyHook, KeyTry, Member, Part, Piece, Refusals, Sealed};
use crate::error::TryAcquireError;
use crate::keyed::handle::Keyed;
use crate::keyed::slots::{step, Step};
use crate::limiter::KeyTemplate;
use crate::sync::Identity;
use crate::window::{FixedWindow, SlidingLog, SlidingWindow};

/// One key of a [`Keyed`] as a member of a composite, made by [`Keyed::member`]: the
/// key's limit beside others (a global one, say) in one decision.
///
/// While nobody waits on the key, the composite decides on the key's word under its
/// shard's lock, with the other members under theirs, all or nothing: no limiter is made
/// for the key, and nothing is allocated but the decision's short lists of members (see
/// [how a key is held](Keyed#how-a-key-is-held)). Only a composite that must wait makes
/// the key whole (its whole limiter, holding exactly what the word held) and holds its
/// place in the key's line there; every waiter of one key shares that one limiter, so the
/// memory a waiting key costs is one whole limiter (about 950 bytes for a bucket), however
/// many requests wait on it, and at most as many keys as the `Keyed` holds
/// ([`max_keys`](crate::KeyedBuilder::max_keys), when it is set). A key that follows in an
/// [`all_in_turn`](crate::all_in_turn) is made whole only once the composite joins its
/// line. The member keeps the key's whole limiter from then on, so make one per
/// request (it costs a hash of the key and a copy of it); once the member is dropped
/// and nobody else waits on the key, the key folds back into its word.
///
/// Every key of one `Keyed` plays the part the first composite gave its keys: leading
/// [`all_in_turn`](crate::all_in_turn) composites, or following (see
/// [`ConfigError::FollowerAsLeader`](crate::ConfigError::FollowerAsLeader)).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use token_bucket::{all_in_turn, Keyed, Rate, TokenBucket};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let per_host: Keyed<String, TokenBucket> = Keyed::new(TokenBucket::new(Rate::per_second(2), 1)?);
/// let global = TokenBucket::new(Rate::per_second(20), 20)?;
/// let start = tokio::time::Instant::now();
/// for _ in 0..3 {
///     all_in_turn((per_host.member("example.com"), &global))?.acquire(1).await?;
/// }
/// // The host allows one request every 500 ms.
/// assert_eq!(start.elapsed(), Duration::from_secs(1));
/// assert_eq!(global.stats().taken, 3);
/// # Ok(())
/// # }
/// ```
pub struct KeyMember<'a, K: Hash + Eq, L: KeyTemplate> {
    keyed: &'a Keyed<K, L>,
    hash: u64,
    key: K,
    /// The key's whole limiter, once a composite had to wait on it (or found it whole).
    whole: OnceLock<Arc<L>>,
}

impl<K: Hash + Eq, L: KeyTemplate> Keyed<K, L> {
    /// `key`'s limit as a member of a composite, beside other limiters, decided on the
    /// key's word while nobody waits (see [`KeyMember`]). Nothing is looked up or added
    /// until the composite decides; a new key refused then for want of room is a
    /// [`TooManyKeys`](TryAcquireError::TooManyKeys) refusal of that member.
    ///
    /// # Examples
    ///
    /// ```
    /// use token_bucket::{all_in_turn, Keyed, Rate, TokenBucket, TryAcquireAllError};
    ///
    /// let per_user: Keyed<u64, TokenBucket> = Keyed::new(TokenBucket::new(Rate::per_second(1), 1)?);
    /// let global = TokenBucket::new(Rate::per_second(100), 100)?;
    /// all_in_turn((per_user.member(&7), &global))?.try_acquire(1)?;
    /// // User 7 is out; the global bucket counted nothing for the refused request.
    /// let refused = all_in_turn((per_user.member(&7), &global))?.try_acquire(1);
    /// assert!(matches!(refused, Err(TryAcquireAllError::Limited { .. })));
    /// assert_eq!(global.available(), 99);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn member<Q>(&self, key: &Q) -> KeyMember<'_, K, L>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        KeyMember {
            keyed: self,
            hash: self.hash(key),
            key: key.to_owned(),
            whole: OnceLock::new(),
        }
    }

    /// `limiter`, a key's whole limiter about to be handed out, given the part this
    /// `Keyed`'s keys play in composites, if they play one: so that a composite that would
    /// have it play the other part is refused when it is made. A limiter that already
    /// plays the other part keeps it; a composite whose key member must then wait on it is
    /// refused ([`AcquireAllError::Config`](crate::AcquireAllError::Config)).
    pub(super) fn with_keys_part(&self, limiter: Arc<L>) -> Arc<L> {
        let role = self.inner.identity.role();
        if let (Some(role), Some(member)) = (role, as_member(&*limiter)) {
            if let Piece::Part(part) = member.part().0 {
                // Refused when it plays the other part already: see above.
                let _ = part.identity_ref().claim(role);
            }
        }
        limiter
    }
}

impl<K, L> KeyHook for KeyMember<'_, K, L>
where
    K: Hash + Eq + Clone + Send + Sync,
    L: KeyTemplate + Member + Send + Sync,
{
    fn identity(&self) -> usize {
        self.keyed.inner.identity.of(&self.keyed.inner)
    }

    fn identity_ref(&self) -> &Identity {
        &self.keyed.inner.identity
    }

    fn try_with(
        &self,
        permits: u64,
        commit: bool,
        rest: &mut dyn FnMut(bool) -> Refusals,
    ) -> KeyTry {
        if self.whole.get().is_some() {
            return KeyTry::Whole;
        }
        let tried = self
            .keyed
            .with_slot(self.hash, self.key.borrow(), |slot, at| {
                step(slot, at, |compact, word, reading| {
                    // Decided on a copy, written back only once the rest admit it too.
                    let mut decided = *word;
                    if let Err(refusal) = compact.try_acquire_word(&mut decided, permits, reading) {
                        // The rest are asked all the same, counting nothing, for their own
                        // refusals: a later `retry_after`, or a refusal for good.
                        return KeyTry::Refused(refusal, rest(false));
                    }
                    let refusals = rest(commit);
                    if refusals.is_ok() && commit {
                        *word = decided;
                    }
                    KeyTry::Asked(refusals)
                })
            });
        match tried {
            Ok((Step::Decided(tried), _)) => tried,
            Ok((Step::Call(limiter), _)) => {
                self.keep(limiter);
                KeyTry::Whole
            }
            Err(refused) => KeyTry::Refused(refused.into(), rest(false)),
        }
    }

    fn whole(&self) -> Result<Part<'_>, TryAcquireError> {
        if self.whole.get().is_none() {
            let (limiter, _) =
                self.keyed
                    .with_slot(self.hash, self.key.borrow(), |mut slot, at| slot.whole(at))?;
            self.keep(limiter);
        }
        let limiter = self.whole.get().map(|limiter| limiter.part().0);
        match limiter {
            Some(Piece::Part(part)) => Ok(part),
            // `L` is one of the crate's limiters, each of which is a part; and the whole
            // limiter was just kept.
            _ => unreachable!("a key's whole limiter is a limiter"),
        }
    }
}

impl<K: Hash + Eq, L: KeyTemplate> KeyMember<'_, K, L> {
    /// Keeps `limiter`, the key's whole limiter, unless another thread deciding on this
    /// member kept it first (then that one, the same key's, is kept).
    fn keep(&self, limiter: Arc<L>) {
        if let Err(limiter) = self.whole.set(limiter) {
            self.keyed.release(self.hash, &self.key, limiter);
        }
    }
}

impl<K, L> Sealed for KeyMember<'_, K, L>
where
    K: Hash + Eq + Clone + Send + Sync,
    L: KeyTemplate + Member + Send + Sync,
{
    fn part(&self) -> crate::composite::Hook<'_> {
        crate::composite::Hook(Piece::Key(self))
    }
}

impl<K, L> Member for KeyMember<'_, K, L>
where
    K: Hash + Eq + Clone + Send + Sync,
    L: KeyTemplate + Member + Send + Sync,
{
}

impl<K: Hash + Eq, L: KeyTemplate> Drop for KeyMember<'_, K, L> {
    fn drop(&mut self) {
        // The key folds back into its word at once if nobody else holds it.
        if let Some(limiter) = self.whole.take() {
            self.keyed.release(self.hash, &self.key, limiter);
        }
    }
}

impl<K: Hash + Eq + fmt::Debug, L: KeyTemplate> fmt::Debug for KeyMember<'_, K, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyMember")
            .field("key", &self.key)
            .field("whole", &self.whole.get().is_some())
            .finish_non_exhaustive()
    }
}

/// `limiter` as a member of a composite, when it is one of the crate's limiters.
pub(super) fn as_member(limiter: &dyn Any) -> Option<&dyn Member> {
    fn cast<M: Member + 'static>(limiter: &dyn Any) -> Option<&dyn Member> {
        Some(limiter.downcast_ref::<M>()?)
    }
    (cast::<TokenBucket>(limiter))
        .or_else(|| cast::<FixedWindow>(limiter))
        .or_else(|| cast::<SlidingLog>(limiter))
        .or_else(|| cast::<SlidingWindow>(limiter))
}
