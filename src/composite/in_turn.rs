//! [`all_in_turn`] and [`AllInTurn`]: a composite that waits member by member, so that
//! a member that is not ready (a key) never holds the others' lines (a global limit).

use std::future::Future;

use crate::composite::held::try_all;
use crate::composite::member::Members;
use crate::composite::waiting::{acquire_all, Order};
use crate::error::{AcquireAllError, ConfigError, TryAcquireAllError};

/// A composite of independent limiters that admits a request only when every one of them
/// does, at one instant, and counts it in every one, like [`All`](crate::All); but it *waits* member
/// by member: in its first member's line until that member would admit it, and only then
/// in the others' lines. Made by [`all_in_turn`].
///
/// This is the composite for a per-key limit beside a global one: with the key first, a
/// request whose key is not ready never stands at the head of the global line, holding
/// back requests of other keys that are (see
/// [waiting member by member](crate#waiting-member-by-member) for what it promises and
/// what it costs beside [`all`](crate::all)).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use token_bucket::{all_in_turn, Rate, TokenBucket};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let slow_host = TokenBucket::new(Rate::per_second(1), 1)?;
/// let fast_host = TokenBucket::new(Rate::per_second(100), 1)?;
/// let global = TokenBucket::new(Rate::per_second(10), 1)?;
/// slow_host.try_take(1)?; // the slow host's next permit is 1 s away
/// let start = tokio::time::Instant::now();
/// let slow = tokio::spawn({
///     let (slow_host, global) = (slow_host.clone(), global.clone());
///     async move { all_in_turn((&slow_host, &global))?.acquire(1).await }
/// });
/// tokio::task::yield_now().await; // the slow host's request waits first
/// all_in_turn((&fast_host, &global))?.acquire(1).await?;
/// // The fast host was not held back behind the slow one in the global line.
/// assert_eq!(start.elapsed(), Duration::ZERO);
/// slow.await??;
/// assert_eq!(start.elapsed(), Duration::from_secs(1));
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct AllInTurn<M> {
    members: M,
}

/// A composite of `members` that waits member by member: a tuple of two or three
/// [`Member`](crate::Member)s, or an array, slice or `Vec` of them (see [`Members`]), the
/// one to wait on first first. Put the per-key limit first and the global one last.
///
/// The first member *leads* this composite; the others *follow* in it, as every member of
/// an [`all`](crate::all) composite does. A limiter keeps the part it is first given: one
/// that led some composites and followed in others could leave two composites each
/// waiting for the other forever, so that is refused here, at once, rather than found
/// out as a hang.
///
/// # Errors
///
/// [`ConfigError::NoMembers`] for an empty slice; [`ConfigError::RepeatedMember`] when
/// two members are the same limiter (two handles or clones of one);
/// [`ConfigError::FollowerAsLeader`] when the first member already follows in other
/// composites, [`ConfigError::LeaderAsFollower`] when a later one already leads some.
///
/// # Examples
///
/// ```
/// use token_bucket::{all, all_in_turn, ConfigError, Rate, TokenBucket};
///
/// let user = TokenBucket::new(Rate::per_second(1), 1)?;
/// let global = TokenBucket::new(Rate::per_second(100), 100)?;
/// all_in_turn((&user, &global))?.try_acquire(1)?;
/// // The global bucket follows in composites, so it cannot lead one...
/// assert_eq!(
///     all_in_turn((&global, &user)).err(),
///     Some(ConfigError::FollowerAsLeader { member: 0 })
/// );
/// // ...and the user's bucket leads, so it cannot be a member of `all`.
/// assert_eq!(
///     all((&global, &user)).err(),
///     Some(ConfigError::LeaderAsFollower { member: 1 })
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn all_in_turn<M: Members>(members: M) -> Result<AllInTurn<M>, ConfigError> {
    members.parts().check(Some(0))?;
    Ok(AllInTurn { members })
}

impl<M: Members> AllInTurn<M> {
    /// Acquires `permits` from every member at one instant if every one admits them now
    /// and nobody waits in any member's line; else acquires nothing. Never waits. Needs no
    /// runtime. The same as [`All::try_acquire`](crate::All::try_acquire): only waiting differs.
    ///
    /// # Errors
    ///
    /// As [`All::try_acquire`](crate::All::try_acquire): [`TryAcquireAllError::Limited`] with the latest
    /// `retry_after` of the members that refused, or [`TryAcquireAllError::Member`]
    /// naming the first member that refuses for good. Either way no member counted
    /// anything.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{all_in_turn, Rate, TokenBucket, TryAcquireAllError};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let host = TokenBucket::new(Rate::per_second(2), 1)?;
    /// let global = TokenBucket::new(Rate::per_second(20), 20)?;
    /// let both = all_in_turn((&host, &global))?;
    /// both.try_acquire(1)?;
    /// assert_eq!(
    ///     both.try_acquire(1),
    ///     Err(TryAcquireAllError::Limited { retry_after: Duration::from_millis(500) })
    /// );
    /// assert_eq!(global.available(), 19);
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire(&self, permits: u64) -> Result<(), TryAcquireAllError> {
        try_all(&self.members.parts(), permits, true)
    }

    /// Acquires `permits` from every member at one instant, waiting first in, first out
    /// in its first member's line until that member would admit them, then in the other
    /// members' lines until all of them do.
    ///
    /// It keeps its place in the first member's line while it waits in the others': no
    /// request that comes to that line later passes it. It joins the other members'
    /// lines together, once the first member would admit it, and from then on waits
    /// there as [`All::acquire`](crate::All::acquire) does in every line. Nothing is counted anywhere before
    /// every member admits it; then every member counts it at one instant.
    ///
    /// # Errors
    ///
    /// As [`All::acquire`](crate::All::acquire): [`AcquireAllError::Member`] naming the first member that
    /// refuses it for good (a follower's full queue is found once the composite joins the
    /// followers' lines, after its leader's wait), [`AcquireAllError::NoRuntime`], or
    /// [`AcquireAllError::Config`] for a key member (see [`Keyed::member`]) whose whole
    /// limiter, made to wait, is another member too or plays the other part.
    ///
    /// [`Keyed::member`]: crate::Keyed::member
    ///
    /// # Panics
    ///
    /// On its first poll, when it must wait inside a tokio runtime built without time, as
    /// [`Limiter::acquire`](crate::Limiter::acquire) says.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future gives up its place in every line it is in and
    /// acquires nothing from any member; whoever was behind it moves up.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{all_in_turn, Rate, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let host = TokenBucket::new(Rate::per_second(2), 1)?;
    /// let global = TokenBucket::new(Rate::per_second(20), 1)?;
    /// let both = all_in_turn((&host, &global))?;
    /// let start = tokio::time::Instant::now();
    /// both.acquire(1).await?;
    /// both.acquire(1).await?; // the host allows one every 500 ms
    /// assert_eq!(start.elapsed(), Duration::from_millis(500));
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
        acquire_all(self.members.parts(), permits, Order::InTurn)
    }

    /// The members, as given to [`all_in_turn`].
    ///
    /// ```
    /// use token_bucket::{all_in_turn, Rate, TokenBucket};
    ///
    /// let key = TokenBucket::new(Rate::per_second(1), 1)?;
    /// let global = TokenBucket::new(Rate::per_second(10), 10)?;
    /// let both = all_in_turn((&key, &global))?;
    /// assert_eq!(both.members().1.available(), 10);
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn members(&self) -> &M {
        &self.members
    }
}
