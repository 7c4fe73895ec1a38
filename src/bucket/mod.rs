//! The token bucket: [`TokenBucket`] and everything behind it.
//!
//! A request goes down through these files in order, and each file uses only files
//! listed after it:
//! - `builder.rs`: [`Builder`], every setting checked at once.
//! - `compact.rs`: a bucket nobody waits on as `Keyed` holds it, one plain word per key,
//!   and how it unfolds into a bucket and folds back.
//! - `limiter.rs`: the bucket as a [`Limiter`](crate::limiter::Limiter) and a
//!   [`KeyTemplate`](crate::limiter::KeyTemplate), in the handle's words.
//! - `handle.rs`: [`TokenBucket`], the cheap-to-clone handle: what a user calls.
//! - `future.rs`: [`Take`], [`TakeTimeout`], [`Wait`] and [`WaitTimeout`], the futures
//!   of requests that must queue, and [`Closed`], which waits for a close.
//! - `shared.rs`: what the handle's clones and futures share, and the mechanism behind
//!   them: the lock over the state, the fast path's word it seizes and hands back, and a
//!   queued request's way through (begin, poll for the outcome, leave).
//! - `refill.rs`: the refill task, which serves the queue when nobody else touches it,
//!   knowing the bucket only through a small trait, `Served`.
//! - `fast.rs`: the fast path, the whole state in one atomic word while nobody waits,
//!   taken by compare-and-swap without the lock (noting the room while a grant is
//!   unseen).
//! - `state.rs`: the state behind the lock and `serve`, which replays the schedule.
//! - `limits.rs`: the bucket's limits, each a rate, a capacity and an instant, and the cap
//!   that keeps each within its own.
//! - `unseen.rs`: grants not yet seen by their waiters, and the rule of a few numbers
//!   that says what one dropped unseen gives back.
//! - `queue.rs`: the FIFO queue of waiters and their wakers.
//! - `gcra.rs`: a limit's one form of state, the instant it would be empty at, and the
//!   exact arithmetic on it that the lock, the fast path and a compact key share.
//! - `counters.rs`: the counters behind [`Stats`], atomic, beside the fast path's word.
//! - `stats.rs`: [`Stats`], a snapshot of the counters, and [`LimitStats`], of a limit.
//!
//! It uses only the crate's foundations: `rate`, `clock`, `error`, `permits` (the rule
//! every request meets first) and the `sync` shim, the plain types of `quota` it
//! reports, `observe` to report them under a name, and the traits of `limiter` it
//! implements.
//! Nothing here knows of windows or adapters; `compact.rs` knows only that keys keep
//! their words under a lock.

mod builder;
pub(crate) mod compact;
mod counters;
mod fast;
mod future;
mod gcra;
mod handle;
mod limiter;
mod limits;
pub(crate) mod queue;
pub(crate) mod refill;
mod shared;
pub(crate) mod state;
mod stats;
mod unseen;

pub use builder::Builder;
pub use future::{Closed, Take, TakeTimeout, Wait, WaitTimeout};
pub use handle::TokenBucket;
pub(crate) use shared::HeldBucket;
pub use stats::{LimitStats, Stats};
