//! governor's rate limiter reading tokio's clock: the baseline for "governor on tokio's
//! clock" in `benches/micro.rs` and `benches/scenarios.rs`.
//!
//! governor as it ships reads the CPU's counter through `quanta`, which knows nothing of
//! tokio's paused time. This crate must read tokio's clock, which costs more than a
//! counter read (it looks up the runtime's clock, in case time is paused). To tell how
//! much of the gap to governor is that clock and how much is the rest, the benchmarks run
//! governor's own algorithm (GCRA, one atomic word) on the same clock as ours: governor's
//! `clock::Clock` and `clock::Reference` traits implemented for a newtype around
//! `tokio::time::Instant`, handed to `RateLimiter::direct_with_clock`.
//!
//! It also implements governor's `ReasonablyRealtime`, so that `until_ready` and
//! `ratelimit_stream` accept the limiter. Those wait on `futures-timer`, a timer of real
//! time: on paused time tokio's clock would not move while they sleep. Where a benchmark
//! must wait on paused time, it waits on tokio's timer instead, until the instant governor
//! names (see `benches/scenarios.rs`).
//!
//! Included by path (`#[path = "support/governor_on_tokio.rs"] mod governor_on_tokio;`),
//! once for each benchmark that uses it.

use std::ops::Add;
use std::time::Duration;

use governor::clock::{Clock, ReasonablyRealtime, Reference};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::{InMemoryState, NotKeyed};
use governor::Quota;

/// A reading of tokio's clock, as governor wants its instants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TokioInstant(pub tokio::time::Instant);

impl Add<Nanos> for TokioInstant {
    type Output = TokioInstant;

    fn add(self, later: Nanos) -> TokioInstant {
        TokioInstant(self.0 + Duration::from(later))
    }
}

impl Reference for TokioInstant {
    fn duration_since(&self, earlier: TokioInstant) -> Nanos {
        self.0.saturating_duration_since(earlier.0).into()
    }

    fn saturating_sub(&self, duration: Nanos) -> TokioInstant {
        self.0
            .checked_sub(duration.into())
            .map_or(*self, TokioInstant)
    }
}

/// tokio's clock: `tokio::time::Instant::now()`, paused when the runtime's time is.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioClock;

impl Clock for TokioClock {
    type Instant = TokioInstant;

    fn now(&self) -> TokioInstant {
        TokioInstant(tokio::time::Instant::now())
    }
}

impl ReasonablyRealtime for TokioClock {}

/// governor's direct (unkeyed) limiter on tokio's clock. Not every benchmark that
/// includes this file uses it.
#[allow(dead_code)]
pub type TokioGovernor =
    governor::RateLimiter<NotKeyed, InMemoryState, TokioClock, NoOpMiddleware<TokioInstant>>;

/// A limiter for `quota` on tokio's clock; like governor's `RateLimiter::direct`, it starts
/// full.
#[allow(dead_code)]
pub fn direct(quota: Quota) -> TokioGovernor {
    governor::RateLimiter::direct_with_clock(quota, TokioClock)
}

/// governor's keyed limiter (a `DashMap` of GCRA words, as `DefaultKeyedRateLimiter`) on
/// tokio's clock. Not every benchmark that includes this file uses it.
#[allow(dead_code)]
pub type TokioKeyedGovernor<K> = governor::RateLimiter<
    K,
    governor::state::keyed::DashMapStateStore<K>,
    TokioClock,
    NoOpMiddleware<TokioInstant>,
>;

/// A keyed limiter for `quota` on tokio's clock; like governor's `RateLimiter::keyed`,
/// every key starts full.
#[allow(dead_code)]
pub fn keyed<K: std::hash::Hash + Eq + Clone>(quota: Quota) -> TokioKeyedGovernor<K> {
    governor::RateLimiter::dashmap_with_clock(quota, TokioClock)
}
