//! An async token bucket for tokio: exact to the token, fair (first in, first out),
//! cancel safe, and deterministic under tokio's paused clock.
//!
//! ```
//! use token_bucket::{Rate, TokenBucket};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let bucket = TokenBucket::new("100/s".parse::<Rate>()?, 10)?;
//! bucket.take(1).await?; // waits its turn if it must
//! bucket.try_take(1)?; // never waits
//! # Ok(())
//! # }
//! ```
//!
//! # The algorithm
//!
//! A bucket holds up to `capacity` tokens and gains them continuously at its [`Rate`].
//! A request for `n` tokens is served when `n` are there, and takes them.
//!
//! **Exact accounting.** Nothing ticks. The bucket computes what it holds from the time
//! elapsed on tokio's clock, in integers: whole tokens plus a fraction of the next one,
//! counted in parts of `1 / period` nanoseconds, so remainders are carried and never
//! rounded away. A bucket observed every nanosecond holds exactly what one observed once
//! a year holds.
//!
//! **A strict FIFO queue.** Requests that cannot be served at once queue in order; each
//! queued request holds only its task's waker, and learns its outcome by reading what the
//! bucket decided, without the lock when it was a grant. A large request at the
//! head is served before any smaller one behind it, so it is never starved, and
//! [`try_take`](TokenBucket::try_take) never jumps the queue.
//!
//! **Grants follow the schedule, not the timer.** Whenever the bucket is touched, it
//! replays the schedule since it was last touched: the head is granted at the exact
//! nanosecond its tokens accrued, then the next, and so on. A waiter woken late by the
//! timer (tokio's has 1 ms granularity) does not push back the ones after it, so a bucket
//! delivers its rate at any speed, and under `#[tokio::test(start_paused = true)]` every
//! grant happens at its computed instant.
//!
//! **No lock while nobody waits.** With nobody queued, the bucket's whole state is one
//! atomic word: the instant, counted exactly in units of the rate, at which the bucket
//! would be empty (GCRA, the generic cell rate algorithm). `try_take`, requests served at
//! once, `available` and `stats` read or update it by compare-and-swap. The first request
//! that must wait seizes the word for the lock and the queue, and the word takes the
//! state back when the queue drains, so a taker on the fast path never passes a waiter.
//!
//! **One refill task per bucket.** When nobody else touches the bucket, a tokio task,
//! spawned when the first request queues, sleeps until the head's tokens accrue and
//! serves it. It sleeps without waking while nobody waits, and ends when the bucket is
//! closed or its last handle dropped.
//!
//! **Cancel safety.** Dropping a waiting future, or letting its timeout pass, makes its
//! queue entry a tombstone in O(1): it takes no tokens and blocks nobody behind it.
//! Tokens granted to a future dropped before it saw them go back to the bucket.
//!
//! # The rest of the family
//!
//! Beside the bucket, three window limiters count requests per window:
//! [`FixedWindow`] (lock-free, one atomic word; up to twice the limit across a window
//! edge), [`SlidingLog`] (exact: at most `limit` in any interval of `window`) and
//! [`SlidingWindow`] (a time wheel: the log's promise in memory bounded by its slots). All
//! four implement [`Limiter`], so code can take any of them, and [`Keyed`] keeps one per
//! key (user, IP, API key), forgetting keys whose limiter is idle again. Like the bucket,
//! the window limiters follow the schedule, not the timer: a waiter woken late is
//! admitted as of the instant its request fitted, so windows shorter than the timer's
//! 1 ms tick still admit their limit per window.
//!
//! # Several limiters, one decision
//!
//! A composite of independent limiters (a per-key and a global limit, say) admits a
//! request only when every member does, at one instant, and then counts it in every one;
//! or counts nothing anywhere. Composites that share members never deadlock, and dropping
//! one gives back every place it holds. There are two, which differ only in how they wait:
//!
//! - [`all_in_turn`], for a per-key limit and a global one: see
//!   [waiting member by member](#waiting-member-by-member) below.
//! - [`all`] joins every member's line at once and keeps its place in each, so arrival
//!   order holds in every line. The cost: a composite at the head of one member's line
//!   holds that line while it waits for the others, so a key that is not ready, at the
//!   head of the global line, holds back every other key.
//!
//! `docs/composites.md` says it all, with the figures.
//!
//! ```
//! use token_bucket::{all, Rate, TokenBucket};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let minute = TokenBucket::new(Rate::per_minute(100), 100)?;
//! let day = TokenBucket::new(Rate::per_hour(1_000), 10_000)?;
//! all((&minute, &day))?.acquire(1).await?;
//! assert_eq!((minute.available(), day.available()), (99, 9_999));
//! # Ok(())
//! # }
//! ```
//!
//! # Waiting member by member
//!
//! [`all_in_turn`] waits in its first member's line until that member would admit the
//! request, keeping its place there, and only then joins the other members' lines and
//! decides all at once, as [`all`] does. With the per-key limit first and the global one
//! last, a key that is not ready waits in its own line and never holds the global line:
//! a crawler's 20 URLs on 5 hosts, grouped by host, take 1.7 s instead of `all`'s 7.7 s
//! (`examples/crawler.rs`). A key of a [`Keyed`] is a member as
//! [`per_key.member(&key)`](Keyed::member), decided on its one-word state while nobody
//! waits on it.
//!
//! Its first member *leads*; its other members, and every member of an [`all`], *follow*.
//! A limiter keeps the part it is first given, because one that led some composites and
//! followed in others could leave two composites each holding a line the other waits in;
//! a composite that would mix them is refused when it is made
//! ([`ConfigError::FollowerAsLeader`], [`ConfigError::LeaderAsFollower`]).
//!
//! ```
//! use std::time::Duration;
//! use token_bucket::{all_in_turn, Keyed, Rate, TokenBucket};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let per_user: Keyed<u64, TokenBucket> = Keyed::new(TokenBucket::new(Rate::per_second(5), 5)?);
//! let global = TokenBucket::new(Rate::per_second(500), 500)?;
//! all_in_turn((per_user.member(&42), &global))?.acquire(1).await?;
//! assert_eq!(global.available(), 499);
//! # Ok(())
//! # }
//! ```
//!
//! # The HTTP front door
//!
//! With the feature `http` (and `axum` to read axum's peer address),
//! `http::RateLimitLayer` is a tower layer that limits each client and the
//! whole service, answers `429 Too Many Requests` with `Retry-After`, and sends the IETF
//! `RateLimit-Policy` and `RateLimit` header fields, exact for each decision; across
//! instances, over Redis. `docs/http.md` says it all.
//!
//! # Errors, not panics
//!
//! Bad input gets an error naming the values: [`ConfigError`] for a zero rate, capacity
//! or limit, [`TryTakeError`], [`TakeError`], [`TryAcquireError`] and [`AcquireError`]
//! for requests larger than the capacity or limit,
//! [`ParseRateError`] for rate text that does not parse.
//!
//! # Where things live
//!
//! Each folder or file below uses (imports) only those listed before it, so the imports
//! have no circles. The first four lines are the foundations; each later line names what
//! it uses beside them. Each folder's `mod.rs` opens with what lives in it and what it
//! may use (a public module's, in a comment above its documentation).
//!
//! - `rate.rs`: [`Rate`] and its text form; `clock.rs`: time as the limiters count it,
//!   nanoseconds on tokio's clock; `sync/`: the locks and atomics (loom's under
//!   `--cfg loom`, for `loom_tests/`) and the one statement of the lock order. They use
//!   nothing of the crate.
//! - `error.rs`: every error, naming the values; it uses `rate.rs`.
//! - `permits.rs`: the rule every request meets first; `quota.rs`: [`Policy`], [`Quota`]
//!   and [`Decision`]; `observe/`: names, metrics and events. Each uses `error.rs`.
//! - `limiter.rs`: the traits [`Limiter`] and [`KeyTemplate`], and a key's one-word form;
//!   `dyn_limiter.rs`: [`DynLimiter`]. They use `error.rs` and `quota.rs`.
//! - `bucket/`: [`TokenBucket`]; `window/`: [`FixedWindow`], [`SlidingLog`] and
//!   [`SlidingWindow`]. Each uses only the foundations, not the other.
//! - `composite/`: [`all`] and [`all_in_turn`]; it uses `bucket/` and `window/`.
//! - `keyed/`: [`Keyed`]; it uses `composite/`, `bucket/` and `window/`.
//! - `throttle/`: the adapters ([`stream`], [`sink`], `io`, `service`); they use
//!   `bucket/`, through its public API alone.
//! - `redis/` (feature `redis`): limiters whose state lives in Redis; of the in-process
//!   limiters, it uses none.
//! - `http/` (feature `http`): the tower layer; it uses `keyed/`, `composite/`, `bucket/`
//!   and `redis/`.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]

// What each holds and may use: "Where things live", above.
mod bucket;
mod clock;
mod composite;
mod dyn_limiter;
mod error;
mod keyed;
mod limiter;
pub mod observe;
mod permits;
mod quota;
mod rate;
mod sync;
mod throttle;
mod window;

// The feature needs Rust 1.88 (as the `redis` crate does): clippy checks it against that.
#[cfg(feature = "redis")]
#[clippy::msrv = "1.88"]
pub mod redis;

#[cfg(feature = "http")]
pub mod http;

#[cfg(feature = "io")]
pub use throttle::io;
#[cfg(feature = "tower")]
pub use throttle::service;
pub use throttle::{sink, stream};

#[cfg(all(test, loom))]
mod loom_tests;

pub use bucket::{
    Builder, Closed, LimitStats, Stats, Take, TakeTimeout, TokenBucket, Wait, WaitTimeout,
};
pub use composite::{all, all_in_turn, All, AllInTurn, Member, Members};
pub use dyn_limiter::DynLimiter;
pub use error::{
    AcquireAllError, AcquireError, ConfigError, TakeError, TooManyKeys, TryAcquireAllError,
    TryAcquireError, TryTakeError,
};
pub use keyed::{KeyMember, Keyed, KeyedBuilder};
pub use limiter::{KeyTemplate, Limiter};
pub use quota::{Decision, Policy, Quota};
pub use rate::{ParseRateError, Rate};
pub use window::{FixedWindow, SlidingLog, SlidingWindow};

/// The examples of the README and of the pages in `docs/`, compiled and run as doc tests so
/// they stay true. Some use the optional features, so they run with all of them on (as the
/// README's test command does). A page added to `docs/` gets a line here, which
/// `tests/docs_links.rs` checks.
#[cfg(all(
    doctest,
    feature = "io",
    feature = "tower",
    feature = "redis",
    feature = "axum"
))]
mod doc_pages {
    #[doc = include_str!("../README.md")]
    struct Readme;

    #[doc = include_str!("../docs/benchmarks.md")]
    struct Benchmarks;

    #[doc = include_str!("../docs/bucket.md")]
    struct Bucket;

    #[doc = include_str!("../docs/composites.md")]
    struct Composites;

    #[doc = include_str!("../docs/errors.md")]
    struct Errors;

    #[doc = include_str!("../docs/http.md")]
    struct Http;

    #[doc = include_str!("../docs/metrics.md")]
    struct Metrics;

    #[doc = include_str!("../docs/per-key.md")]
    struct PerKey;

    #[doc = include_str!("../docs/redis.md")]
    struct Redis;

    #[doc = include_str!("../docs/testing.md")]
    struct Testing;

    #[doc = include_str!("../docs/throttling.md")]
    struct Throttling;
}
