//! [`RedisAll`]: one decision over several Redis limiters, each on its own key, in one script
//! call: every member takes, or none does.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::algorithm::RedisAlgorithm;
use super::connection::RedisConnection;
use super::decision::{Member, Part, Plan};
use super::error::RedisLimitError;
use super::policy::{FailurePolicy, RedisOptions};
use super::RedisLimiter;
use crate::error::TryAcquireError;
use crate::quota::{Decision, Policy};

/// A limiter paired with a key: one member of a decision over several limits, made by
/// [`RedisLimiter::member`] and put together with others by [`RedisAll::new`].
///
/// It holds a clone of the limiter (a reference count, as [`RedisLimiter`] is a handle),
/// not a borrow, so a [`RedisAll`] made of members can be kept, moved into a spawned
/// task, or made once for keys that never change.
///
/// ```
/// use std::time::Duration;
/// use token_bucket::redis::{driver, FailurePolicy, RedisFixedWindow, RedisOptions};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // A connection that connects on first use: nothing here talks to Redis.
/// let client = driver::Client::open("redis://127.0.0.1/")?;
/// let config = driver::aio::ConnectionManagerConfig::new();
/// let connection = driver::aio::ConnectionManager::new_lazy_with_config(client, config)?;
/// let options = RedisOptions::new(FailurePolicy::FailOpen).with_prefix("api:");
/// let limiter = RedisFixedWindow::new(connection, 100, Duration::from_secs(60), options)?;
/// let member = limiter.member("{user-42}");
/// assert_eq!(member.redis_key(), "api:fw:{user-42}");
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisMember {
    limiter: Arc<dyn Member>,
    key: String,
}

impl RedisMember {
    /// The Redis key that holds this member's state: its limiter's
    /// [`redis_key`](RedisLimiter::redis_key) for its key.
    ///
    /// ```
    /// use token_bucket::redis::{driver, FailurePolicy, RedisOptions, RedisTokenBucket};
    /// use token_bucket::Rate;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let config = driver::aio::ConnectionManagerConfig::new();
    /// let connection = driver::aio::ConnectionManager::new_lazy_with_config(client, config)?;
    /// let options = RedisOptions::new(FailurePolicy::FailOpen);
    /// let limiter = RedisTokenBucket::new(connection, Rate::per_second(10), 20, options)?;
    /// assert_eq!(limiter.member("user-42").redis_key(), limiter.redis_key("user-42"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn redis_key(&self) -> &str {
        &self.key
    }

    /// Its limiter's [`policy`](RedisLimiter::policy): the budget this member reports in
    /// a `RateLimit-Policy` header field.
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::redis::{driver, FailurePolicy, RedisFixedWindow, RedisOptions};
    /// use token_bucket::Policy;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let config = driver::aio::ConnectionManagerConfig::new();
    /// let connection = driver::aio::ConnectionManager::new_lazy_with_config(client, config)?;
    /// let options = RedisOptions::new(FailurePolicy::FailOpen);
    /// let minute = Duration::from_secs(60);
    /// let limiter = RedisFixedWindow::new(connection, 100, minute, options)?;
    /// assert_eq!(limiter.member("user-42").policy(), Policy { limit: 100, window: minute });
    /// # Ok(())
    /// # }
    /// ```
    pub fn policy(&self) -> Policy {
        self.limiter.policy()
    }
}

impl fmt::Debug for RedisMember {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisMember")
            .field("redis_key", &self.key)
            .field("algorithm", self.limiter.algorithm())
            .finish_non_exhaustive()
    }
}

impl<A: RedisAlgorithm, C: RedisConnection> RedisLimiter<A, C> {
    /// This limiter on `key`, as one member of a decision over several limits: see
    /// [`RedisAll::new`]. Its Redis key is [`redis_key(key)`](Self::redis_key); on Redis Cluster,
    /// give every member's key the same hash tag, such as `{user-42}`.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use token_bucket::redis::{
    ///     driver, FailurePolicy, RedisAll, RedisFixedWindow, RedisOptions, RedisTokenBucket,
    /// };
    /// use token_bucket::Rate;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let connection = driver::aio::ConnectionManager::new(client).await?;
    /// let options = RedisOptions::new(FailurePolicy::FailClosed);
    /// let per_second =
    ///     RedisTokenBucket::new(connection.clone(), Rate::per_second(5), 10, options.clone())?;
    /// let day = Duration::from_secs(86_400);
    /// let per_day = RedisFixedWindow::new(connection, 10_000, day, options)?;
    /// // 5 a second with bursts of 10, and 10,000 a day: both take, or neither does.
    /// RedisAll::new([per_second.member("{user-42}"), per_day.member("{user-42}")])
    ///     .try_acquire(1)
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn member(&self, key: &str) -> RedisMember {
        RedisMember {
            limiter: self.member_limiter(),
            key: self.redis_key(key),
        }
    }
}

/// One decision over several limits: every member (a limiter and a key, from
/// [`RedisLimiter::member`]) must allow the request, and then every one takes it; if any
/// refuses, none takes anything. Made by [`RedisAll::new`], which documents how it decides.
///
/// Clones share the members' limiters, as clones of a limiter do.
///
/// ```no_run
/// use std::time::Duration;
/// use token_bucket::redis::{
///     driver, FailurePolicy, RedisAll, RedisOptions, RedisSlidingLog, RedisTokenBucket,
/// };
/// use token_bucket::Rate;
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = driver::Client::open("redis://127.0.0.1/")?;
/// let connection = driver::aio::ConnectionManager::new(client).await?;
/// let options = RedisOptions::new(FailurePolicy::FailOpen);
/// let minute = Duration::from_secs(60);
/// let per_user = RedisSlidingLog::new(connection.clone(), 3, minute, options.clone())?;
/// let per_tenant = RedisTokenBucket::new(connection, Rate::per_second(50), 100, options)?;
/// // Made once, used for every request of this user. One hash tag: one cluster slot.
/// let limits = RedisAll::new([
///     per_user.member("{tenant-7}:user-42"),
///     per_tenant.member("{tenant-7}"),
/// ]);
/// for _ in 0..3 {
///     limits.acquire(1).await?;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisAll {
    /// The members' keys, each once, in the order first named.
    parts: Vec<Part>,
    /// Each member's key, in the members' order: its index in `parts`.
    members: Vec<usize>,
    /// Every limiter among the members, each once.
    limiters: Vec<Arc<dyn Member>>,
    policy: FailurePolicy,
    timeout: Duration,
    /// A Redis key named by two limiters whose settings differ, if any.
    conflict: Option<String>,
}

/// [`RedisAll::new`] under its old name, which it shared with the in-process
/// [`all`](crate::all) over members of another kind.
///
/// ```no_run
/// # #![allow(deprecated)]
/// use token_bucket::redis::{all, driver, FailurePolicy, RedisOptions, RedisTokenBucket};
/// use token_bucket::Rate;
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = driver::Client::open("redis://127.0.0.1/")?;
/// let connection = driver::aio::ConnectionManager::new(client).await?;
/// let options = RedisOptions::new(FailurePolicy::FailOpen);
/// let bucket = RedisTokenBucket::new(connection, Rate::per_second(5), 10, options)?;
/// all([bucket.member("user-42")]).try_acquire(1).await?;
/// # Ok(())
/// # }
/// ```
#[deprecated(note = "use `RedisAll::new`: `all` is the in-process composite's name")]
pub fn all(members: impl IntoIterator<Item = RedisMember>) -> RedisAll {
    RedisAll::new(members)
}

impl RedisAll {
    /// One decision over all of `members` (a list of [`RedisMember`]s): [`RedisAll::try_acquire`] takes the permits from
    /// every member if every one allows them now, or from none.
    ///
    /// # How it decides
    ///
    /// - **One script call, atomic.** Every member's key is decided in one Lua script run by
    ///   Redis (one `EVALSHA`; each algorithm's Lua is the single limiters' own): each key is
    ///   read and decided at the same instant of the server's clock, by its own limiter's
    ///   algorithm and settings, so members may be of different algorithms (a token bucket
    ///   per user and a fixed window per tenant, say). If all allow, all take; if any
    ///   refuses, the script writes nothing at all.
    /// - **`retry_after` is the latest of the refusing members' waits**, which is when they
    ///   would all allow the request, if nobody else takes meanwhile: never shorter than the
    ///   true wait. That the latest of the separate waits is exactly that instant rests on
    ///   two facts: a refusal changes no member's state (so each member's wait holds as
    ///   computed), and once a member allows a request it keeps allowing it as time passes
    ///   (tokens only accrue, windows only end, logged permits only stop counting), so the
    ///   members that allow now still allow then. Whole milliseconds, rounded up.
    /// - **A key named twice counts twice.** Members on the same Redis key (the same limiter
    ///   and key, or limiters of one kind, prefix and settings) are one key asked for the
    ///   permits of each (limiters of one kind and prefix but different settings cannot share
    ///   a key: see [`RedisLimitError::ConflictingMembers`]):
    ///   `RedisAll::new([a.member("k"), a.member("k")]).try_acquire(2)` takes 4 from `k`, or
    ///   nothing, and `try_acquire(n)` is refused with [`RedisLimitError::ExceedsLimit`] when
    ///   `2 × n` is above `a`'s limit, since it could never be granted.
    /// - **The first member's connection** makes the call: every key is read on the Redis
    ///   it reaches, whatever connection the other members' limiters were made with. Put
    ///   together only limiters whose state is in that one Redis.
    /// - **The strictest of the members' options.** The failure policy is
    ///   [`FailClosed`](FailurePolicy::FailClosed) if any member's limiter fails closed (it
    ///   said that exceeding its limit costs more than refusing), else
    ///   [`FailOpen`](FailurePolicy::FailOpen); the timeout is the shortest of theirs.
    ///   Failing open, each member's limiter (each once) counts the request in its
    ///   [`fail_open_count`](RedisLimiter::fail_open_count).
    ///
    /// # Redis Cluster: one hash slot
    ///
    /// Wherever keys are sharded by slot (Redis Cluster, or a proxy in front of one), Redis
    /// runs a script only when all its keys are in one hash slot; otherwise it answers
    /// `CROSSSLOT`, which comes back as [`RedisLimitError::CrossSlot`] whatever the failure
    /// policy. So on a cluster put the same hash tag in every member's key: Redis hashes only
    /// what is between the first `{` and the next `}` of a key, so `"{user-42}"` and
    /// `"{user-42}:search"` share a slot. That also means a key shared by everyone (a
    /// service-wide limit) can join a decision only with keys in its own slot.
    ///
    /// A member's Redis key is `<prefix><kind>:<key>` ([`RedisOptions::with_prefix`]), so the
    /// prefix comes first: keep `{` out of prefixes, or the tag starts there and your key's
    /// tag is ignored. (A prefix that holds a whole tag, such as `"{limits}:"`, puts every
    /// key of its limiters in one slot, and so on one node.) A single Redis server, with or
    /// without replicas, has no slots and none of these constraints.
    ///
    /// On a cluster of several masters, make the first member's limiter over a
    /// [`ClusterConnection`](super::driver::cluster_async::ClusterConnection), which sends
    /// the script to the master of the keys' slot (see
    /// [Redis Cluster](super#redis-cluster)); a
    /// [`ConnectionManager`](super::driver::aio::ConnectionManager) talks to one node only.
    /// While the keys' slot migrates, a decision whose keys are split between the two nodes
    /// is told `TRYAGAIN`, and made again until the timeout.
    ///
    /// An empty `members` makes a `RedisAll` that refuses every request with
    /// [`RedisLimitError::NoMembers`], whatever the policy.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use token_bucket::redis::{
    ///     driver, FailurePolicy, RedisAll, RedisLimitError, RedisOptions, RedisSlidingLog,
    ///     RedisTokenBucket,
    /// };
    /// use token_bucket::Rate;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let connection = driver::aio::ConnectionManager::new(client).await?;
    /// // Each user: at most 100 searches in any minute, exactly...
    /// let per_user = RedisSlidingLog::new(
    ///     connection.clone(),
    ///     100,
    ///     Duration::from_secs(60),
    ///     RedisOptions::new(FailurePolicy::FailOpen).with_prefix("search:"),
    /// )?;
    /// // ...and the whole service at most 2,000 a second, with bursts of 500, whoever asks.
    /// let service = RedisTokenBucket::new(
    ///     connection,
    ///     Rate::per_second(2_000),
    ///     500,
    ///     RedisOptions::new(FailurePolicy::FailOpen).with_prefix("search:"),
    /// )?;
    /// // One Redis server, not a cluster: the key "everyone" has a slot of its own.
    /// let limits = RedisAll::new([per_user.member("user-42"), service.member("everyone")]);
    /// match limits.try_acquire(1).await {
    ///     Ok(()) => { /* serve */ }
    ///     Err(RedisLimitError::Limited { retry_after }) => {
    ///         println!("429, Retry-After {retry_after:?}")
    ///     }
    ///     Err(other) => return Err(other.into()),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(members: impl IntoIterator<Item = RedisMember>) -> RedisAll {
        let mut parts: Vec<Part> = Vec::new();
        let mut member_parts = Vec::new();
        let mut limiters: Vec<Arc<dyn Member>> = Vec::new();
        let mut conflict = None;
        for RedisMember { limiter, key } in members {
            let known = |other: &Arc<dyn Member>| {
                std::ptr::addr_eq(Arc::as_ptr(other), Arc::as_ptr(&limiter))
            };
            if !limiters.iter().any(known) {
                limiters.push(Arc::clone(&limiter));
            }
            match parts.iter().position(|part| part.key == key) {
                Some(index) => {
                    member_parts.push(index);
                    let part = &mut parts[index];
                    // One key holds one limiter's state: two limiters that would read it by
                    // different settings (limits of one kind and prefix, say 10 a second and
                    // 1,000 a day) cannot both be decided on it.
                    if part.limiter.arguments(1) != limiter.arguments(1) && conflict.is_none() {
                        conflict = Some(key);
                    }
                    part.count += 1;
                }
                None => {
                    member_parts.push(parts.len());
                    parts.push(Part {
                        limiter,
                        key,
                        count: 1,
                    });
                }
            }
        }
        let options: Vec<&RedisOptions> = limiters
            .iter()
            .map(|limiter| &limiter.common().options)
            .collect();
        let policy = if options
            .iter()
            .any(|options| options.policy() == FailurePolicy::FailClosed)
        {
            FailurePolicy::FailClosed
        } else {
            FailurePolicy::FailOpen
        };
        let timeout = options
            .iter()
            .map(|options| options.timeout())
            .min()
            .unwrap_or(RedisOptions::DEFAULT_TIMEOUT);
        RedisAll {
            parts,
            members: member_parts,
            limiters,
            policy,
            timeout,
            conflict,
        }
    }

    /// Takes `permits` from every member if every one allows them now, else from none;
    /// never waits for permits. One round trip to Redis, on the first member's
    /// connection; taking zero permits is allowed at once, without asking Redis. See
    /// [`RedisAll::new`] for how it decides.
    ///
    /// # Errors
    ///
    /// - [`RedisLimitError::Limited`] when any member refuses, with the latest of the
    ///   refusing members' waits: never shorter than the true wait. Nothing was taken.
    /// - [`RedisLimitError::ExceedsLimit`] when `permits` (times the members on one key)
    ///   is above a member's limit, naming the first such, without asking Redis.
    /// - [`RedisLimitError::NoMembers`] when made of no members, without asking Redis.
    /// - [`RedisLimitError::ConflictingMembers`] when two members' limiters of different
    ///   settings name one Redis key, without asking Redis.
    /// - [`RedisLimitError::CrossSlot`] when Redis refuses the keys because they are in
    ///   different hash slots, whatever the policy.
    /// - Under the combined policy [`FailurePolicy::FailClosed`],
    ///   [`RedisLimitError::Unavailable`] when Redis cannot decide and
    ///   [`RedisLimitError::Timeout`] (naming the shortest timeout) when it does not answer
    ///   in time; under [`FailurePolicy::FailOpen`] those requests are allowed and
    ///   counted by every member's limiter.
    /// - [`RedisLimitError::NoRuntime`] when polled outside a tokio runtime.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes may or may not have taken the permits: the
    /// script may already be running on Redis. But never from some members and not
    /// others: the script takes from all or from none. So a cancelled call can only make
    /// the limits stricter, never let more through.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use token_bucket::redis::{
    ///     driver, FailurePolicy, RedisAll, RedisFixedWindow, RedisLimitError, RedisOptions,
    /// };
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let connection = driver::aio::ConnectionManager::new(client).await?;
    /// let options = RedisOptions::new(FailurePolicy::FailClosed);
    /// let minute = Duration::from_secs(60);
    /// // Two limiters of one kind: different prefixes, so that their keys differ.
    /// let small = options.clone().with_prefix("small:");
    /// let small = RedisFixedWindow::new(connection.clone(), 1, minute, small)?;
    /// let large = RedisFixedWindow::new(connection, 10, minute, options.with_prefix("large:"))?;
    /// let both = RedisAll::new([small.member("{k}"), large.member("{k}")]);
    /// both.try_acquire(1).await?;
    /// // `small` is spent, so `large` is not touched: 9 of its 10 are left.
    /// let refused = both.try_acquire(1).await;
    /// assert!(matches!(refused, Err(RedisLimitError::Limited { .. })));
    /// large.try_acquire("{k}", 9).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire(&self, permits: u64) -> Result<(), RedisLimitError> {
        self.check_members()?;
        self.plan().try_acquire(permits).await
    }

    /// [`try_acquire`](Self::try_acquire), and every member's own decision and
    /// [`Quota`](crate::Quota), from the same one script call: each key's state as the
    /// decision read it and left it, at one instant of the server's clock. What an HTTP
    /// response needs to report a per-client and a global limit in one round trip.
    ///
    /// The [`AllDecision`] holds:
    ///
    /// - **`result`**, the decision over all members, what `try_acquire` would answer in
    ///   the in-process error type: `Ok(())` when every member took the permits;
    ///   `Err(TryAcquireError::Limited { retry_after })` when any refused, nothing taken,
    ///   `retry_after` the latest of the refusing members' waits (as `try_acquire`'s);
    ///   `Err(TryAcquireError::ExceedsLimit { .. })` naming the first member that can
    ///   never admit `permits` (times the members on its key), without asking Redis.
    /// - **`members`**, one [`Decision`] per member, in the order given to [`RedisAll::new`]:
    ///   - its `result` is its own verdict: `Err(Limited { retry_after })` with its own
    ///     wait when it refused, `Err(ExceedsLimit { .. })` when it can never admit the
    ///     request, else `Ok(())`, which says only that this member did not refuse: the
    ///     permits were taken only if the whole `result` is `Ok`;
    ///   - its `quota` is its key's state after the decision: after the take when the
    ///     whole decision took, else unchanged (a refusal writes nothing anywhere).
    ///     Members on one key report that key's state. `None` when nothing was asked of
    ///     Redis (`ExceedsLimit`) or Redis could not decide under
    ///     [`FailurePolicy::FailOpen`] (every member's result is then `Ok(())`, the
    ///     request allowed and counted by every member's limiter, as `try_acquire` does).
    ///
    /// Zero permits asks Redis for every member's quota and takes nothing.
    ///
    /// # Errors
    ///
    /// Those [`try_acquire`](Self::try_acquire) returns whatever Redis says:
    /// [`RedisLimitError::NoMembers`], [`RedisLimitError::ConflictingMembers`],
    /// [`RedisLimitError::CrossSlot`], [`RedisLimitError::NoRuntime`], and under the
    /// combined policy [`FailurePolicy::FailClosed`], [`RedisLimitError::Unavailable`]
    /// and [`RedisLimitError::Timeout`].
    ///
    /// # Cancel safety
    ///
    /// As [`try_acquire`](Self::try_acquire): dropped before it completes it may or may
    /// not have taken the permits, from all members or from none.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use token_bucket::redis::{driver, FailurePolicy, RedisAll, RedisOptions, RedisTokenBucket};
    /// use token_bucket::{Rate, TryAcquireError};
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let connection = driver::aio::ConnectionManager::new(client).await?;
    /// let options = RedisOptions::new(FailurePolicy::FailClosed);
    /// let per_client = RedisTokenBucket::new(connection.clone(), Rate::per_second(5), 10, options.clone())?;
    /// let global = RedisTokenBucket::new(connection, Rate::per_second(500), 1_000, options.with_prefix("global:"))?;
    /// let limits = RedisAll::new([per_client.member("client-7"), global.member("everyone")]);
    /// let decision = limits.try_acquire_decision(1).await?;
    /// match decision.result {
    ///     Ok(()) => { /* serve */ }
    ///     Err(TryAcquireError::Limited { retry_after }) => println!("429, Retry-After {retry_after:?}"),
    ///     Err(other) => return Err(other.into()),
    /// }
    /// for (member, policy) in decision.members.iter().zip([per_client.policy(), global.policy()]) {
    ///     if let Some(quota) = member.quota {
    ///         println!("{} per {:?}: {} left", policy.limit, policy.window, quota.remaining);
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire_decision(&self, permits: u64) -> Result<AllDecision, RedisLimitError> {
        self.check_members()?;
        let decided = self.plan().decide(permits).await?;
        let members = self
            .members
            .iter()
            .map(|&index| decided.for_part(&self.parts[index], index, permits))
            .collect();
        Ok(AllDecision {
            result: decided.result(),
            members,
        })
    }

    /// Takes `permits` from every member, waiting as long as their limits require: after
    /// each refusal it sleeps the `retry_after` Redis gave (the latest of the refusing
    /// members'), plus a random extra of up to a quarter of it (at least up to 1 ms, at
    /// most up to 1 s), then asks again. Not first in, first out, as
    /// [`RedisLimiter::acquire`] is not.
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Self::try_acquire), except [`RedisLimitError::Limited`], on
    /// which it waits. Under [`FailurePolicy::FailClosed`] it returns the first
    /// [`Unavailable`](RedisLimitError::Unavailable) or
    /// [`Timeout`](RedisLimitError::Timeout) rather than waiting for Redis to come back.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe while it sleeps: dropping it then takes nothing. Dropped while a call
    /// to Redis is under way it may or may not have taken the permits, from all members
    /// or from none, as for [`try_acquire`](Self::try_acquire); it never takes more than
    /// asked.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use token_bucket::redis::{driver, FailurePolicy, RedisAll, RedisOptions, RedisSlidingLog};
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let connection = driver::aio::ConnectionManager::new(client).await?;
    /// let options = RedisOptions::new(FailurePolicy::FailClosed);
    /// let (minute, hour) = (Duration::from_secs(60), Duration::from_secs(3600));
    /// let per_minute = RedisSlidingLog::new(connection.clone(), 10, minute, options.clone())?;
    /// // Two limiters of one kind: different prefixes, so that their keys differ.
    /// let per_hour = RedisSlidingLog::new(connection, 100, hour, options.with_prefix("hour:"))?;
    /// let limits = RedisAll::new([per_minute.member("{user-42}"), per_hour.member("{user-42}")]);
    /// tokio::time::timeout(Duration::from_secs(10), limits.acquire(1)).await??;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(&self, permits: u64) -> Result<(), RedisLimitError> {
        self.check_members()?;
        self.plan().acquire(permits).await
    }

    /// Refuses a decision whose members name one Redis key with different settings.
    fn check_members(&self) -> Result<(), RedisLimitError> {
        match &self.conflict {
            Some(key) => Err(RedisLimitError::ConflictingMembers { key: key.clone() }),
            None => Ok(()),
        }
    }

    fn plan(&self) -> Plan<'_> {
        Plan {
            parts: &self.parts,
            limiters: &self.limiters,
            policy: self.policy,
            timeout: self.timeout,
        }
    }
}

/// What [`RedisAll::try_acquire_decision`] decided: the decision over all members, and
/// each member's own, with its quota. See there for every case.
///
/// ```
/// use std::time::Duration;
/// use token_bucket::redis::AllDecision;
/// use token_bucket::{Decision, Quota, TryAcquireError};
///
/// // Refused by the second member only: nothing taken, both quotas as they were.
/// let limited = TryAcquireError::Limited { retry_after: Duration::from_millis(200) };
/// let decision = AllDecision {
///     result: Err(limited),
///     members: vec![
///         Decision {
///             result: Ok(()),
///             quota: Some(Quota { remaining: 4, full_after: Duration::from_millis(600) }),
///         },
///         Decision {
///             result: Err(limited),
///             quota: Some(Quota { remaining: 0, full_after: Duration::from_secs(1) }),
///         },
///     ],
/// };
/// assert_eq!(decision.refused_by().collect::<Vec<_>>(), [1]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllDecision {
    /// The decision over all members: `Ok(())` when every member took the permits, else
    /// why none did.
    pub result: Result<(), TryAcquireError>,
    /// Each member's own decision and quota, in the order the members were given to
    /// [`RedisAll::new`]. A member's `Ok(())` says only that it did not refuse.
    pub members: Vec<Decision>,
}

impl AllDecision {
    /// The positions, among the members, of those that refused the request.
    ///
    /// ```
    /// use token_bucket::redis::AllDecision;
    /// use token_bucket::Decision;
    ///
    /// let granted = AllDecision {
    ///     result: Ok(()),
    ///     members: vec![Decision { result: Ok(()), quota: None }],
    /// };
    /// assert_eq!(granted.refused_by().count(), 0);
    /// ```
    pub fn refused_by(&self) -> impl Iterator<Item = usize> + '_ {
        self.members
            .iter()
            .enumerate()
            .filter(|(_, member)| member.result.is_err())
            .map(|(position, _)| position)
    }
}

impl fmt::Debug for RedisAll {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<(&str, u64)> = self
            .parts
            .iter()
            .map(|part| (part.key.as_str(), part.count))
            .collect();
        f.debug_struct("RedisAll")
            .field("keys", &keys)
            .field("policy", &self.policy)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}
