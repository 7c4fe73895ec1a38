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
use crate::error::{ConfigError, TryAcquireError};
use crate::sync::{Identity, Role};
use crate::window::{FixedWindow, SlidingLog, SlidingWindow, Window};

/// A limiter that can be a member of a composite made by [`all`](crate::all):
/// [`TokenBucket`], [`FixedWindow`], [`SlidingLog`], [`SlidingWindow`], a reference to
/// one, an `Arc` of one (what [`Keyed::get_or_insert`](crate::Keyed::get_or_insert)
/// returns for a key), or a key of a [`Keyed`](crate::Keyed) of one of them
/// ([`Keyed::member`](crate::Keyed::member), decided on the key's word while nobody waits
/// on it).
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
/// let user: Arc<TokenBucket> = per_user.get_or_insert(&7)?;
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
pub struct Hook<'a>(pub(crate) Piece<'a>);

/// A member: a limiter, or a key of a [`Keyed`](crate::Keyed) held as its word, which
/// is decided on the word while nothing waits and made whole to wait.
#[derive(Clone, Copy)]
pub(crate) enum Piece<'a> {
    Part(Part<'a>),
    Key(&'a dyn KeyHook),
}

#[cfg(all(test, not(loom)))]
impl Piece<'_> {
    /// What orders the member among a composite's members of its kind.
    pub(crate) fn identity(&self) -> usize {
        match self {
            Piece::Part(part) => part.identity(),
            Piece::Key(key) => key.identity(),
        }
    }
}

impl fmt::Debug for Hook<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Hook")
    }
}

/// The members in lock order, opaque outside the crate: the limiters, and apart from
/// them the keys of [`Keyed`](crate::Keyed)s, whose shards' locks come before any
/// limiter's.
#[doc(hidden)]
pub struct Hooks<'a> {
    pub(crate) parts: Vec<Indexed<'a>>,
    pub(crate) keys: Vec<IndexedKey<'a>>,
}

impl<'a> Hooks<'a> {
    /// `pieces`, given in this order, sorted into lock order.
    fn of(pieces: impl IntoIterator<Item = Piece<'a>>) -> Hooks<'a> {
        let (mut parts, mut keys) = (Vec::new(), Vec::new());
        for (member, piece) in pieces.into_iter().enumerate() {
            match piece {
                Piece::Part(part) => parts.push(Indexed { member, part }),
                Piece::Key(key) => keys.push(IndexedKey { member, key }),
            }
        }
        parts.sort_by_key(Indexed::lock_order);
        keys.sort_by_key(|indexed| indexed.key.identity());
        Hooks { parts, keys }
    }

    /// Checks the members as a composite is made: at least one, none twice, and each
    /// given its part for good (see [`claim_roles`]).
    pub(crate) fn check(&self, leader: Option<usize>) -> Result<(), ConfigError> {
        check_seen(self.seen(), leader)
    }

    /// The positions of a limiter given twice, if one is: checked by a try that never
    /// waits and so gives no member a part.
    pub(crate) fn repeated(&self) -> Option<(usize, usize)> {
        repeated(&self.seen())
    }

    /// Every member, keys first, each group in lock order.
    fn seen(&self) -> Vec<Seen<'a>> {
        let keys = self.keys.iter().map(|indexed| Seen {
            member: indexed.member,
            identity: indexed.key.identity_ref(),
            order: indexed.key.identity(),
        });
        keys.chain(self.parts.iter().map(Indexed::seen)).collect()
    }

    /// The limiters of the members at the positions `wanted` picks, each key's made whole
    /// for waiting: what a composite waits on. Refused for a new key when its `Keyed`
    /// holds as many keys as it may.
    pub(crate) fn whole(
        &self,
        wanted: impl Fn(usize) -> bool,
    ) -> Result<Vec<Indexed<'a>>, (usize, TryAcquireError)> {
        let picked = |indexed: &&Indexed<'a>| wanted(indexed.member);
        let mut parts: Vec<Indexed<'a>> = self.parts.iter().filter(picked).copied().collect();
        for indexed in self.keys.iter().filter(|indexed| wanted(indexed.member)) {
            let part = indexed
                .key
                .whole()
                .map_err(|error| (indexed.member, error))?;
            parts.push(Indexed {
                member: indexed.member,
                part,
            });
        }
        parts.sort_by_key(Indexed::lock_order);
        Ok(parts)
    }
}

impl fmt::Debug for Hooks<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Hooks")
    }
}

impl Sealed for TokenBucket {
    fn part(&self) -> Hook<'_> {
        Hook(Piece::Part(Part::Bucket(self)))
    }
}

impl Member for TokenBucket {}

/// A window limiter holds a composite's place in its line, and is held through the hooks
/// of `window/hooks.rs`.
macro_rules! window_members {
    ($($limiter:ty),+) => {$(
        impl Sealed for $limiter {
            fn part(&self) -> Hook<'_> {
                Hook(Piece::Part(Part::Window(self.as_window())))
            }
        }

        impl Member for $limiter {}
    )+};
}

window_members!(FixedWindow, SlidingLog, SlidingWindow);

/// A reference to a member, or an `Arc` of one, is that member.
macro_rules! pointer_members {
    ($($pointer:ty),+) => {$(
        impl<M: Member + ?Sized> Sealed for $pointer {
            fn part(&self) -> Hook<'_> {
                (**self).part()
            }
        }

        impl<M: Member + ?Sized> Member for $pointer {}
    )+};
}

pointer_members!(&M, Arc<M>);

/// A member, as the composite sees it: a bucket holds a composite's place in its own
/// queue; a window limiter, in its line.
#[derive(Clone, Copy)]
pub(crate) enum Part<'a> {
    Bucket(&'a TokenBucket),
    Window(&'a dyn Window),
}

impl<'a> Part<'a> {
    /// What orders the members' locks: the same for every handle on one limiter, and
    /// distinct between limiters alive at once.
    pub(crate) fn identity(&self) -> usize {
        match self {
            Part::Bucket(bucket) => bucket.identity(),
            Part::Window(window) => window.identity(),
        }
    }

    /// What orders the limiter, with the part it plays in composites (see [`Role`]).
    pub(crate) fn identity_ref(self) -> &'a Identity {
        match self {
            Part::Bucket(bucket) => bucket.identity_ref(),
            Part::Window(window) => window.identity_ref(),
        }
    }
}

/// A member with its position among those given to `all`.
#[derive(Clone, Copy)]
pub(crate) struct Indexed<'a> {
    pub(crate) member: usize,
    pub(crate) part: Part<'a>,
}

/// What a key of a [`Keyed`](crate::Keyed) offers a composite (`keyed/member.rs`).
pub(crate) trait KeyHook: Sync {
    /// Its `Keyed`'s: orders the keys' shard locks, and tells two keys of one `Keyed`
    /// apart from keys of two (one composite takes at most one shard lock of each).
    fn identity(&self) -> usize;
    /// Its `Keyed`'s identity, with the part the `Keyed`'s keys play in composites.
    fn identity_ref(&self) -> &Identity;
    /// Decides `permits` on the key's word, under its shard's lock, and asks `rest` (the
    /// other members) under it: to count them too if the word admits them and `commit`,
    /// else to decide without counting. Writes the word only if `rest` admits them too,
    /// and `commit`.
    fn try_with(
        &self,
        permits: u64,
        commit: bool,
        rest: &mut dyn FnMut(bool) -> Refusals,
    ) -> KeyTry;
    /// The key's whole limiter, made from its word if need be and kept from then on;
    /// refused for a new key when the `Keyed` holds as many keys as it may.
    fn whole(&self) -> Result<Part<'_>, TryAcquireError>;
}

/// Whether every member admitted a composite's request.
pub(crate) type Refusals = Result<(), Refused>;

/// Why a composite's request was refused.
pub(crate) enum Refused {
    /// What the members that refused said, by position.
    Members(Vec<(usize, TryAcquireError)>),
    /// A key, held whole, turned out to be the limiter of another member too: deciding
    /// it twice would take its lock twice.
    Repeated { first: usize, second: usize },
}

/// What [`KeyHook::try_with`] did.
pub(crate) enum KeyTry {
    /// The key's word refused, and the other members, asked without counting, said this.
    Refused(TryAcquireError, Refusals),
    /// The word admitted it and the other members said this: counted everywhere, or
    /// nowhere.
    Asked(Refusals),
    /// The key is held whole (someone waits on it, or holds it): decide on its limiter.
    Whole,
}

/// A key member with its position among those given to the composite.
#[derive(Clone, Copy)]
pub(crate) struct IndexedKey<'a> {
    pub(crate) member: usize,
    pub(crate) key: &'a dyn KeyHook,
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

/// `Members` for tuples of members of any kinds.
macro_rules! tuple_members {
    ($(($($member:ident . $field:tt),+)),+) => {$(
        impl<$($member: Member),+> SealedMembers for ($($member,)+) {
            fn parts(&self) -> Hooks<'_> {
                Hooks::of([$(self.$field.part().0),+])
            }
        }
        impl<$($member: Member),+> Members for ($($member,)+) {}
    )+};
}

tuple_members!((A.0, B.1), (A.0, B.1, C.2));

/// `Members` for lists of members of one kind.
macro_rules! list_members {
    ($([$($generics:tt)*] $list:ty),+) => {$(
        impl<M: Member $($generics)*> SealedMembers for $list {
            fn parts(&self) -> Hooks<'_> {
                Hooks::of(self.iter().map(|member| member.part().0))
            }
        }
        impl<M: Member $($generics)*> Members for $list {}
    )+};
}

list_members!([] [M], [, const N: usize] [M; N], [] Vec<M>);

impl<S: SealedMembers + ?Sized> SealedMembers for &S {
    fn parts(&self) -> Hooks<'_> {
        (**self).parts()
    }
}

impl<S: Members + ?Sized> Members for &S {}

/// A member's position and what identifies it, for the checks made as a composite is
/// made.
#[derive(Clone, Copy)]
pub(crate) struct Seen<'a> {
    member: usize,
    identity: &'a Identity,
    order: usize,
}

impl<'a> Indexed<'a> {
    /// The global lock order: buckets first, then window limiters, each by identity
    /// (the whole order, with each window limiter's own locks and the shards of keys
    /// before them all, is in `sync/mod.rs`). Any total order of members would do.
    pub(crate) fn lock_order(&self) -> (bool, usize) {
        (matches!(self.part, Part::Window(_)), self.part.identity())
    }

    pub(crate) fn seen(&self) -> Seen<'a> {
        Seen {
            member: self.member,
            identity: self.part.identity_ref(),
            order: self.part.identity(),
        }
    }
}

/// The checks made as a composite is made over `seen` (each group in lock order, so that
/// one limiter given twice comes twice in a row): at least one member, no limiter (or
/// `Keyed`) twice, and each given its part for good (see [`claim_roles`]).
pub(crate) fn check_seen(seen: Vec<Seen<'_>>, leader: Option<usize>) -> Result<(), ConfigError> {
    if let Some((first, second)) = repeated(&seen) {
        return Err(ConfigError::RepeatedMember { first, second });
    }
    if seen.is_empty() {
        return Err(ConfigError::NoMembers);
    }
    claim_roles(&seen, leader)
}

/// The positions, first the lower, of a limiter (or `Keyed`) that `seen` holds twice in a
/// row, as it does one given twice.
fn repeated(seen: &[Seen<'_>]) -> Option<(usize, usize)> {
    let mut pairs = seen.iter().zip(seen.iter().skip(1));
    let (one, other) = pairs.find(|(one, other)| one.order == other.order)?;
    Some((one.member.min(other.member), one.member.max(other.member)))
}

/// Gives each of `members` its part in composites for good: the member at position
/// `leader` leads, every other follows (see [`Role`]). Refused, naming the first member
/// (by position) that already plays the other part, and then no member is given a part;
/// unless another thread gave a member the other part between the look and the claim,
/// when the members claimed before it keep the part this composite gave them.
fn claim_roles(members: &[Seen<'_>], leader: Option<usize>) -> Result<(), ConfigError> {
    let role = |seen: &Seen<'_>| match Some(seen.member) == leader {
        true => Role::Leads,
        false => Role::Follows,
    };
    // Looked at first, so that a refused composite gives no member a part; claimed then,
    // refused still if another thread gave a member the other part in between.
    let mut refused: Option<Seen<'_>> = None;
    for claiming in [false, true] {
        for seen in members.iter().copied() {
            let held = match claiming {
                false => seen.identity.role(),
                true => seen.identity.claim(role(&seen)).err(),
            };
            let conflict = held.is_some_and(|held| held != role(&seen));
            if conflict && refused.map_or(true, |first| seen.member < first.member) {
                refused = Some(seen);
            }
        }
        if let Some(seen) = refused {
            let member = seen.member;
            return Err(match role(&seen) {
                Role::Leads => ConfigError::FollowerAsLeader { member },
                Role::Follows => ConfigError::LeaderAsFollower { member },
            });
        }
    }
    Ok(())
}
