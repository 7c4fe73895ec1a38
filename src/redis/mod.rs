// What lives here (the documentation below is its users'):
// - `limiter.rs`: `RedisLimiter`, generic over an algorithm (`algorithm.rs`):
//   `token_bucket.rs`, `fixed_window.rs` and `sliding_log.rs`, the two windows sharing
//   `window.rs`; the scripts are in `lua/`.
// - `all.rs`: `RedisAll`, one decision over several keys.
// - `decision.rs`: what every decision shares (checks, timeout, failure policy, waiting
//   with `jitter.rs`); `scripts.rs`: running the scripts; `connection.rs`: what a
//   connection must offer.
// - `policy.rs`: the options and the failure policy; `error.rs`: `RedisLimitError`.
// - `observe.rs`: what a named limiter reports.
// - `leased/`: `LeasedBucket`, a local front over one key of a `RedisTokenBucket`.
//
// It uses only `error`, `rate`, `quota` (its decisions are the trait's `Decision`) and
// `observe/`: none of the in-process limiters. Only `http/` uses it.

//! Limiters whose state lives in Redis, so that many processes share one budget (feature
//! `redis`).
//!
//! When a service runs on many machines, each with its own in-process limiter, its limit
//! is multiplied by the number of machines. [`RedisTokenBucket`], [`RedisFixedWindow`]
//! and [`RedisSlidingLog`] keep their state in Redis instead: every process that uses
//! the same Redis, [prefix](RedisOptions::with_prefix) and settings shares one limit
//! per key (a user, an API key, an IP).
//!
//! ```no_run
//! use std::time::Duration;
//! use token_bucket::redis::{driver, FailurePolicy, RedisLimitError, RedisOptions, RedisSlidingLog};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = driver::Client::open("redis://127.0.0.1/")?;
//! // Reconnects by itself after Redis restarts or the network drops.
//! let connection = driver::aio::ConnectionManager::new(client).await?;
//! let options = RedisOptions::new(FailurePolicy::FailOpen).with_prefix("search:");
//! // At most 100 searches per user in any minute, across all servers.
//! let limiter = RedisSlidingLog::new(connection, 100, Duration::from_secs(60), options)?;
//! match limiter.try_acquire("user-42", 1).await {
//!     Ok(()) => println!("search"),
//!     Err(RedisLimitError::Limited { retry_after }) => println!("429, Retry-After {retry_after:?}"),
//!     Err(other) => return Err(other.into()),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # How they decide
//!
//! They need Redis 4.0 or newer (for `HSET` of several fields); the tests run against
//! Redis 7.0.
//!
//! - **One round trip, atomic.** Each decision is one Lua script run by Redis on one key
//!   (or on several, for [`RedisAll`]): read the state, decide, and only if it grants, write
//!   it back and set the key's expiry (a refusal writes nothing). Scripts are called by
//!   their SHA-1 hash (`EVALSHA`); when Redis answers `NOSCRIPT` (after a restart, a
//!   `SCRIPT FLUSH`, or on a cluster node that has not run it yet) the script's text is
//!   sent with `EVAL`, which runs it and keeps it on that node.
//! - **The server's clock.** Time is read inside the script with Redis's `TIME`, never
//!   sent by the client, so application servers whose clocks disagree, by milliseconds or
//!   by minutes, share one schedule and cannot over-issue. A server clock that steps back
//!   only makes the limiters stricter until it catches up.
//! - **Exact integers.** Times are whole microseconds; Lua counts with doubles, exact
//!   below 2^53, and the constructors refuse settings that could go past that
//!   ([`ConfigError::UnsupportedRate`](crate::ConfigError::UnsupportedRate),
//!   [`ConfigError::UnsupportedWindow`](crate::ConfigError::UnsupportedWindow),
//!   [`ConfigError::LimitTooLarge`](crate::ConfigError::LimitTooLarge)). Server time in
//!   microseconds stays below 2^53 until the year 2255.
//! - **`retry_after` in whole milliseconds, rounded up**, so it is never shorter than the
//!   true wait and can be sent as an HTTP `Retry-After`.
//! - **Keys expire by themselves** once idle: a bucket when it would be full again, a
//!   window when it ends, a log when its newest permit stops counting. A missing key
//!   means "nothing used", so Redis holds only keys in use. A Redis restart without
//!   persistence forgets every key: all limits start afresh.
//!
//! # Several limits, one decision
//!
//! [`RedisAll::new`] decides over several [members](RedisLimiter::member), each a
//! limiter and a key, in the same one script call: a request is admitted only if every member allows
//! it, and then every member takes it; if any refuses, nothing changes and `retry_after`
//! is the latest of the refusals'. Members may be of different algorithms: a token bucket
//! per user and a sliding log per tenant, say. On Redis Cluster their keys must share one
//! hash slot: give them one hash tag, such as `{user-42}`.
//!
//! ```no_run
//! use std::time::Duration;
//! use token_bucket::redis::{
//!     driver, FailurePolicy, RedisAll, RedisOptions, RedisSlidingLog, RedisTokenBucket,
//! };
//! use token_bucket::Rate;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = driver::Client::open("redis://127.0.0.1/")?;
//! let connection = driver::aio::ConnectionManager::new(client).await?;
//! let options = RedisOptions::new(FailurePolicy::FailOpen);
//! let rate = Rate::per_second(10);
//! let per_user = RedisTokenBucket::new(connection.clone(), rate, 20, options.clone())?;
//! let minute = Duration::from_secs(60);
//! let per_tenant = RedisSlidingLog::new(connection, 1_000, minute, options)?;
//! RedisAll::new([per_user.member("{tenant-7}:user-42"), per_tenant.member("{tenant-7}")])
//!     .try_acquire(1)
//!     .await?;
//! # Ok(())
//! # }
//! ```
//!
//! # When Redis cannot decide
//!
//! Every call to Redis has a [timeout](RedisOptions::with_timeout) (100 ms unless told
//! otherwise), so a hung Redis cannot hang the caller. Past it, or when Redis is
//! unreachable or answers with an error, the [`FailurePolicy`] chosen in
//! [`RedisOptions::new`] decides: [`FailOpen`](FailurePolicy::FailOpen) allows the
//! request and counts it ([`fail_open_count`](RedisLimiter::fail_open_count)),
//! [`FailClosed`](FailurePolicy::FailClosed) refuses it with
//! [`RedisLimitError::Unavailable`] or [`RedisLimitError::Timeout`]. The
//! [`ConnectionManager`](driver::aio::ConnectionManager) reconnects in the background, so
//! once Redis is back the limiter decides again, without being made anew; how soon is
//! set by the manager's [`ConnectionManagerConfig`](driver::aio::ConnectionManagerConfig)
//! (its retry delays).
//!
//! # Connections
//!
//! A limiter decides over the connection it is made with, of any type that is a
//! [`RedisConnection`]: its type is the limiter's second parameter,
//! `RedisLimiter<A, C = ConnectionManager>`, inferred from the connection passed to `new`.
//!
//! - [`ConnectionManager`](driver::aio::ConnectionManager), the default (so
//!   `RedisTokenBucket` means `RedisTokenBucket<ConnectionManager>`): one server,
//!   reconnecting by itself.
//! - [`MultiplexedConnection`](driver::aio::MultiplexedConnection): one server, one
//!   connection that is not remade once it drops.
//! - [`ClusterConnection`](driver::cluster_async::ClusterConnection): Redis Cluster,
//!   [below](#redis-cluster).
//!
//! ```no_run
//! use token_bucket::redis::{driver, FailurePolicy, RedisOptions, RedisTokenBucket};
//! use token_bucket::Rate;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = driver::Client::open("redis://127.0.0.1/")?;
//! let connection = client.get_multiplexed_async_connection().await?;
//! let options = RedisOptions::new(FailurePolicy::FailClosed);
//! // A RedisTokenBucket<MultiplexedConnection>.
//! let limiter = RedisTokenBucket::new(connection, Rate::per_second(10), 20, options)?;
//! limiter.try_acquire("user-42", 1).await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Hot keys
//!
//! A key every request shares sends every decision to one Redis core.
//! [`RedisTokenBucket::leased`] makes a [`LeasedBucket`]: a local front that takes the
//! bucket's tokens in batches and grants them in process, first in, first out, with at
//! most `capacity + rate × (t + L)` granted in any interval of length `t` across every
//! process, `L` being the [lease lifetime](LeaseOptions::with_lifetime).
//!
//! # Redis Cluster
//!
//! Over a [`ClusterConnection`](driver::cluster_async::ClusterConnection) each decision
//! goes to the master of its key's hash slot, so keys spread over the masters and so
//! does the load; a decision over several keys ([`RedisAll`]) needs them in one slot (one
//! hash tag, such as `{user-42}`). What a cluster's changes do to decisions:
//!
//! - **A slot migration.** The connection follows `ASK` (a key already moved, or new)
//!   and `MOVED` (once the slot has moved) by itself, and the key's state moves with the
//!   key (`MIGRATE` moves it whole, atomically). A call that still comes back `ASK`,
//!   `MOVED` or `TRYAGAIN` was not run, and the limiter makes it again (after `ASK` or
//!   `TRYAGAIN` until its timeout, after `MOVED` a few times, 15 ms at most): the
//!   connection can lose its `ASKING` to concurrent traffic, and a decision over several
//!   keys is told `TRYAGAIN` while they are split between two nodes. Nothing is decided
//!   twice, nothing over-admitted.
//! - **A master's failure.** Until a replica takes over (after the cluster's
//!   `cluster-node-timeout`, then an election: about 2.5 s in the tests, with a 1 s
//!   timeout), decisions on its slots fail and the [`FailurePolicy`] decides; then the
//!   connection finds the new master and the limiter decides again. The new master knows
//!   no scripts yet: `NOSCRIPT` sends each one once (above). What it knows of the keys
//!   is what reached it: Redis replicates asynchronously, so grants a crashed master
//!   made in its last moments may not have reached its replica, and those permits can
//!   be granted again (the tests, on loopback, kill a master under traffic and see none
//!   lost; across a network a few may be). A manual failover (`CLUSTER FAILOVER`, for
//!   maintenance) lets the replica catch up first, as Redis documents it.
//!
//! ```no_run
//! use token_bucket::redis::{driver, FailurePolicy, RedisOptions, RedisTokenBucket};
//! use token_bucket::Rate;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let nodes = ["redis://10.0.0.1:6379/", "redis://10.0.0.2:6379/", "redis://10.0.0.3:6379/"];
//! let client = driver::cluster::ClusterClient::new(nodes)?;
//! let connection = client.get_async_connection().await?;
//! let options = RedisOptions::new(FailurePolicy::FailOpen);
//! // A RedisTokenBucket<ClusterConnection>: each user's bucket on its slot's master.
//! let limiter = RedisTokenBucket::new(connection, Rate::per_second(10), 20, options)?;
//! limiter.try_acquire("user-42", 1).await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Quotas, for the `RateLimit` header fields
//!
//! [`RedisLimiter::try_acquire_decision`] decides as [`try_acquire`](RedisLimiter::try_acquire)
//! does, in the same script call, and returns the [`Decision`](crate::Decision) the
//! in-process limiters give: the verdict, and the key's [`Quota`](crate::Quota) right
//! after it (whole permits left, and how long until the key is whole again, in whole
//! microseconds of the server's clock, rounded up), read from the state the decision
//! used at the instant it decided. [`RedisAll::try_acquire_decision`] gives every
//! member's, from its one call; [`RedisLimiter::policy`] the budget as permits per
//! window. A [`LeasedBucket`] reports none (see there why).
//!
//! ```no_run
//! use token_bucket::redis::{driver, FailurePolicy, RedisOptions, RedisTokenBucket};
//! use token_bucket::Rate;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = driver::Client::open("redis://127.0.0.1/")?;
//! let connection = driver::aio::ConnectionManager::new(client).await?;
//! let options = RedisOptions::new(FailurePolicy::FailOpen);
//! let limiter = RedisTokenBucket::new(connection, Rate::per_second(10), 20, options)?;
//! let policy = limiter.policy(); // 20 per 2 s
//! let decision = limiter.try_acquire_decision("user-42", 1).await?;
//! if let Some(quota) = decision.quota {
//!     println!(
//!         "RateLimit-Policy: \"user\";q={};w={}",
//!         policy.limit,
//!         policy.window.as_secs()
//!     );
//!     println!(
//!         "RateLimit: \"user\";r={};t={}",
//!         quota.remaining,
//!         quota.full_after.as_secs_f64().ceil()
//!     );
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Not the in-process `Limiter`
//!
//! These limiters are asynchronous (every decision is a network call) and keyed, so they
//! do not implement [`Limiter`](crate::Limiter), whose `try_acquire` answers at once for
//! one limiter. Their [`acquire`](RedisLimiter::acquire) waits the `retry_after` Redis
//! gives, with jitter, and asks again: order across processes is not first in, first
//! out. Their decisions with quotas are the trait's [`Decision`](crate::Decision), so
//! one HTTP layer can read both.
//!
//! # The driver
//!
//! [`driver`] is the `redis` crate this module was built with, so that the
//! connection you pass is of the same version. It needs Rust 1.88 or newer, and so does
//! this feature; the rest of the crate keeps its older minimum.

mod algorithm;
mod all;
mod connection;
mod decision;
mod error;
mod fixed_window;
mod jitter;
mod leased;
mod limiter;
mod observe;
mod policy;
mod scripts;
mod sliding_log;
mod token_bucket;
mod window;

pub use self::algorithm::RedisAlgorithm;
// The old name, deprecated at its definition.
#[allow(deprecated)]
pub use self::all::all;
pub use self::all::{AllDecision, RedisAll, RedisMember};
pub use self::connection::RedisConnection;
pub use self::error::RedisLimitError;
pub use self::fixed_window::{FixedWindowScript, RedisFixedWindow};
pub use self::leased::{LeaseOptions, LeaseStats, LeasedBucket};
pub use self::limiter::RedisLimiter;
pub use self::policy::{FailurePolicy, RedisOptions};
pub use self::sliding_log::{RedisSlidingLog, SlidingLogScript};
pub use self::token_bucket::{RedisTokenBucket, TokenBucketScript};

/// The [`redis`](https://docs.rs/redis) crate, re-exported: make the connection the
/// limiters take with it (a [`ConnectionManager`](driver::aio::ConnectionManager) unless
/// you choose another [`RedisConnection`]).
///
/// ```no_run
/// use token_bucket::redis::driver;
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), driver::RedisError> {
/// let client = driver::Client::open("redis://127.0.0.1/")?;
/// let connection = driver::aio::ConnectionManager::new(client).await?;
/// # drop(connection);
/// # Ok(())
/// # }
/// ```
pub use ::redis as driver;
