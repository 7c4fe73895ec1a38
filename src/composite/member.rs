//! What a composite can be made of: [`Member`], the limiters that can hold a place in
//! their line for a composite, and [`Members`], the collections of them `all` takes.
//!
//! The hook a composite needs (lock the limiter, ask whether a request fits at a given
//! instant, record it, hold a place in its line) lives in the sealed [`Sealed`] trait,
//! which only the crate's own limiters implement: a user's [`Limiter`](crate::Limiter)
//! has no such hook, so `all(..)` over it is refused at compile time rather than
//! decided without atomicity.

use std::fmt;
use std::sync::Arc;

use crate::bucket::TokenBucket;
use crate::clock::{Clock, Moment};
use crate::composite::few::Few;
use crate::error::{ConfigError, TryAcquireError};
use crate::sync::{Identity, Role};
use crate::window::turnstile::Turnstile;

/// A limiter that can be a member of a composite made by [`all`](crate::all):
/// [`TokenBucket`], [`FixedWindow`](crate::FixedWindow),
/// [`SlidingLog`](crate::SlidingLog), [`SlidingWindow`](crate::SlidingWindow), a
/// reference to one, or an `Arc` of one (what [`Keyed::limiter`](crate::Keyed::limiter)
/// returns for a key).
///
/// It is sealed: a composite decides by holding every member's lock at once and holding
/// a place in every member's line, which only the crate's own limiters offer. A limiter
/// of your own (implementing [`Limiter`](crate::Limiter)) cannot be a member: `all(..)`
/// over it does not compile, rather than deciding without atomicity.
///
/// ```compile_fail,E0277
/// use token_bucket::{all, AcquireError, Limiter, TryAcquireError};
///
/// struct Mine;
/// impl Limiter for Mine {
///     fn try_acquire(&self, _: u64) -> Result<(), TryAcquireError> { Ok(()) }
///     async fn acquire(&self, _: u64) -> Result<(), AcquireError> { Ok(()) }
///     fn is_limited(&self) -> bool { false }
///     fn refund(&self, _: u64) {}
///     fn available(&self) -> u64 { 1 }
///     fn is_idle(&self) -> bool { true }
///     fn fresh(&self) -> Mine { Mine }
/// }
/// let both = all((&Mine, &Mine)); // Mine is not a Member
/// ```
///
/// ```
/// use std::sync::Arc;
/// use token_bucket::{all, Keyed, Rate, TokenBucket};
///
/// let per_user: Keyed<u32, TokenBucket> = Keyed::new(TokenBucket::new(Rate::per_second(5), 5)?);
/// let global = TokenBucket::new(Rate::per_second(500), 500)?;
/// let user: Arc<TokenBucket> = per_user.limiter(&7)?;
/// all((user, &global))?.try_acquire(1)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Member: Sealed {}

/// The hook behind [`Member`]; crate-private.
pub trait Sealed {
    /// The limiter, as the composite sees it.
    #[doc(hidden)]
    fn part(&self) -> Hook<'_>;
}

/// A member as the composite sees it, opaque outside the crate.
#[doc(hidden)]
#[derive(Clone, Copy)]
pub struct Hook<'a>(pub(crate) Part<'a>);

impl fmt::Debug for Hook<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Hook")
    }
}

/// The members in lock order, opaque outside the crate.
#[doc(hidden)]
pub struct Hooks<'a>(pub(crate) Few<Indexed<'a>>);

impl fmt::Debug for Hooks<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Hooks")
    }
}

impl Sealed for TokenBucket {
    fn part(&self) -> Hook<'_> {
        Hook(Part::Bucket(self))
    }
}

impl Member for TokenBucket {}

impl<M: Member + ?Sized> Sealed for &M {
    fn part(&self) -> Hook<'_> {
        (**self).part()
    }
}

impl<M: Member + ?Sized> Member for &M {}

impl<M: Member + ?Sized> Sealed for Arc<M> {
    fn part(&self) -> Hook<'_> {
        (**self).part()
    }
}

impl<M: Member + ?Sized> Member for Arc<M> {}

/// A member, as the composite sees it: a bucket holds a composite's place in its own
/// queue; a window limiter, in its line.
#[derive(Clone, Copy)]
pub(crate) enum Part<'a> {
    Bucket(&'a TokenBucket),
    Window(&'a dyn Window),
}

impl Part<'_> {
    /// What orders the members' locks: the same for every handle on one limiter, and
    /// distinct between limiters alive at once.
    pub(crate) fn identity(&self) -> usize {
        match self {
            Part::Bucket(bucket) => bucket.identity(),
            Part::Window(window) => window.identity(),
        }
    }

    /// Gives the limiter `role` for good (see [`Role`]), unless it plays the other part,
    /// which is returned.
    pub(crate) fn claim_role(&self, role: Role) -> Result<(), Role> {
        self.identity_ref().claim(role)
    }

    /// The part the limiter plays, if it was given one.
    pub(crate) fn role(&self) -> Option<Role> {
        self.identity_ref().role()
    }

    fn identity_ref(&self) -> &Identity {
        match self {
            Part::Bucket(bucket) => bucket.identity_ref(),
            Part::Window(window) => window.identity_ref(),
        }
    }
}

/// What a window limiter offers a composite.
pub(crate) trait Window: Sync {
    fn identity(&self) -> usize;
    /// What orders it among a composite's members, with its part in composites.
    fn identity_ref(&self) -> &Identity;
    /// The most permits admitted at once.
    fn limit(&self) -> u64;
    fn turnstile(&self) -> &Turnstile;
    fn clock(&self) -> &Clock;
    /// The limiter's state, held until the result is dropped, as of `moment` (or its
    /// floor, if later).
    fn hold(&self, moment: Moment) -> Box<dyn WindowHeld + '_>;
}

/// A window limiter's state, held by a composite, at the composite's instant.
pub(crate) trait WindowHeld {
    /// What `try_acquire(permits)` would say, counting nothing.
    fn check(&mut self, permits: u64) -> Result<(), TryAcquireError>;
    /// `None` when `permits` fit now, ignoring the line (the composite is at its head);
    /// else the instant from which they do, on the limiter's clock ([`NEVER`] for never).
    ///
    /// [`NEVER`]: crate::clock::NEVER
    fn ready_at(&mut self, permits: u64) -> Option<u64>;
    /// Counts `permits`, which fit now; returns the instant counted at.
    fn record(&mut self, permits: u64) -> u64;
}

/// A member with its position among those given to `all`.
#[derive(Clone, Copy)]
pub(crate) struct Indexed<'a> {
    pub(crate) member: usize,
    pub(crate) part: Part<'a>,
}

/// What [`all`](crate::all) takes: a tuple of two or three [`Member`]s (of any mix of
/// kinds), or an array, slice or `Vec` of members of one type.
///
/// ```
/// use std::time::Duration;
/// use token_bucket::{all, FixedWindow, Rate, SlidingLog, TokenBucket};
///
/// let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
/// let minute = FixedWindow::new(100, Duration::from_secs(60))?;
/// let hour = SlidingLog::new(1_000, Duration::from_secs(3_600))?;
/// all((&bucket, &minute, &hour))?.try_acquire(1)?;
///
/// let shards = vec![TokenBucket::new(Rate::per_second(1), 1)?, TokenBucket::new(Rate::per_second(1), 1)?];
/// all(shards.as_slice())?.try_acquire(1)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Members: SealedMembers {}

/// The hook behind [`Members`]; crate-private.
pub trait SealedMembers {
    /// Every member with its position, in the order their locks are taken.
    #[doc(hidden)]
    fn parts(&self) -> Hooks<'_>;
}

impl Indexed<'_> {
    /// The global lock order: buckets first, then window limiters, each by identity
    /// (the whole order, with each window limiter's own locks, is in
    /// `window/turnstile.rs`). Any total order of members would do.
    fn lock_order(&self) -> (bool, usize) {
        (matches!(self.part, Part::Window(_)), self.part.identity())
    }
}

/// Orders `parts` in the global lock order.
fn in_lock_order<'a>(parts: impl Iterator<Item = Part<'a>>) -> Few<Indexed<'a>> {
    let mut indexed: Vec<Indexed<'a>> = parts
        .enumerate()
        .map(|(member, part)| Indexed { member, part })
        .collect();
    indexed.sort_unstable_by_key(Indexed::lock_order);
    indexed.into_iter().collect()
}

/// Orders a few parts in the global lock order without allocating.
fn few_in_lock_order<'a, const N: usize>(parts: [Part<'a>; N]) -> Few<Indexed<'a>> {
    let mut indexed = [0; N].map(|_| None);
    for (member, part) in parts.into_iter().enumerate() {
        indexed[member] = Some(Indexed { member, part });
    }
    indexed.sort_unstable_by_key(|indexed| indexed.as_ref().map(Indexed::lock_order));
    indexed.into_iter().flatten().collect()
}

impl<A: Member, B: Member> SealedMembers for (A, B) {
    fn parts(&self) -> Hooks<'_> {
        Hooks(few_in_lock_order([self.0.part().0, self.1.part().0]))
    }
}

impl<A: Member, B: Member> Members for (A, B) {}

impl<A: Member, B: Member, C: Member> SealedMembers for (A, B, C) {
    fn parts(&self) -> Hooks<'_> {
        Hooks(few_in_lock_order([
            self.0.part().0,
            self.1.part().0,
            self.2.part().0,
        ]))
    }
}

impl<A: Member, B: Member, C: Member> Members for (A, B, C) {}

impl<M: Member> SealedMembers for [M] {
    fn parts(&self) -> Hooks<'_> {
        Hooks(in_lock_order(self.iter().map(|member| member.part().0)))
    }
}

impl<M: Member> Members for [M] {}

impl<M: Member, const N: usize> SealedMembers for [M; N] {
    fn parts(&self) -> Hooks<'_> {
        Hooks(in_lock_order(self.iter().map(|member| member.part().0)))
    }
}

impl<M: Member, const N: usize> Members for [M; N] {}

impl<M: Member> SealedMembers for Vec<M> {
    fn parts(&self) -> Hooks<'_> {
        Hooks(in_lock_order(self.iter().map(|member| member.part().0)))
    }
}

impl<M: Member> Members for Vec<M> {}

impl<S: SealedMembers + ?Sized> SealedMembers for &S {
    fn parts(&self) -> Hooks<'_> {
        (**self).parts()
    }
}

impl<S: Members + ?Sized> Members for &S {}

/// `Ok` when `parts` (in lock order) holds at least one limiter, and none twice.
pub(crate) fn check_distinct(parts: &Few<Indexed<'_>>) -> Result<(), ConfigError> {
    let mut previous: Option<&Indexed<'_>> = None;
    for indexed in parts.iter() {
        if let Some(previous) = previous {
            if previous.part.identity() == indexed.part.identity() {
                let (first, second) = if previous.member < indexed.member {
                    (previous.member, indexed.member)
                } else {
                    (indexed.member, previous.member)
                };
                return Err(ConfigError::RepeatedMember { first, second });
            }
        }
        previous = Some(indexed);
    }
    match previous {
        Some(_) => Ok(()),
        None => Err(ConfigError::NoMembers),
    }
}

/// Gives each member of `parts` its part in composites for good: the member at position
/// `leader` leads, every other follows (see [`Role`]). Refused, naming the first member
/// (by position) that already plays the other part, and then no member is given a part.
pub(crate) fn claim_roles(
    parts: &Few<Indexed<'_>>,
    leader: Option<usize>,
) -> Result<(), ConfigError> {
    let role = |indexed: &Indexed<'_>| match Some(indexed.member) == leader {
        true => Role::Leads,
        false => Role::Follows,
    };
    // Looked at first, so that a refused composite gives no member a part; claimed then,
    // refused still if another thread gave a member the other part in between.
    let mut refused: Option<Indexed<'_>> = None;
    for claiming in [false, true] {
        for indexed in parts.iter() {
            let held = match claiming {
                false => indexed.part.role(),
                true => indexed.part.claim_role(role(indexed)).err(),
            };
            let conflict = held.is_some_and(|held| held != role(indexed));
            if conflict && refused.map_or(true, |first| indexed.member < first.member) {
                refused = Some(*indexed);
            }
        }
        if let Some(indexed) = refused {
            let member = indexed.member;
            return Err(match role(&indexed) {
                Role::Leads => ConfigError::FollowerAsLeader { member },
                Role::Follows => ConfigError::LeaderAsFollower { member },
            });
        }
    }
    Ok(())
}
