//! Jitter for [`acquire`](super::RedisLimiter::acquire)'s waits, so that callers refused
//! together (in one process or many) do not all come back in the same millisecond.
//!
//! It needs no cryptographic quality, only draws that differ between limiters, processes
//! and calls: a counter per limiter, seeded from the time, the process id and a count of
//! limiters made, mixed by SplitMix64.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The added wait is at most a quarter of `retry_after`, but never capped below this:
/// waits of a millisecond or two would otherwise all land in the same millisecond.
const MIN_SPREAD: Duration = Duration::from_millis(1);

/// Nor above this: an hour's wait needs no fifteen minutes of spread.
const MAX_SPREAD: Duration = Duration::from_secs(1);

/// Distinguishes limiters made in the same nanosecond of one process.
static LIMITERS_MADE: AtomicU64 = AtomicU64::new(0);

/// A per-limiter source of extra waits.
#[derive(Debug)]
pub(crate) struct Jitter {
    seed: u64,
    draws: AtomicU64,
}

impl Jitter {
    pub(crate) fn new() -> Jitter {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let made = LIMITERS_MADE.fetch_add(1, Ordering::Relaxed);
        let seed =
            (since_epoch.as_nanos() as u64) ^ (u64::from(std::process::id()) << 32) ^ mix(made);
        Jitter {
            seed: mix(seed),
            draws: AtomicU64::new(0),
        }
    }

    /// An extra wait between zero and the spread for `retry_after`, in whole microseconds.
    pub(crate) fn extra_wait(&self, retry_after: Duration) -> Duration {
        let spread = (retry_after / 4).clamp(MIN_SPREAD, MAX_SPREAD);
        // At most a second: the microseconds fit a u64 easily.
        let spread_micros = spread.as_micros() as u64;
        let draw = self.draws.fetch_add(1, Ordering::Relaxed);
        let random = mix(self.seed.wrapping_add(draw.wrapping_mul(GOLDEN_GAMMA)));
        Duration::from_micros(random % (spread_micros + 1))
    }
}

/// SplitMix64's increment: successive seeds far apart.
const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's finaliser: every input bit flips about half the output bits.
fn mix(value: u64) -> u64 {
    let mut z = value.wrapping_add(GOLDEN_GAMMA);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_waits_stay_within_the_spread_and_vary() {
        let jitter = Jitter::new();
        for (retry_after, spread) in [
            (Duration::from_millis(1), MIN_SPREAD),
            (Duration::from_millis(400), Duration::from_millis(100)),
            (Duration::from_secs(3600), MAX_SPREAD),
        ] {
            let waits: Vec<Duration> = (0..1000).map(|_| jitter.extra_wait(retry_after)).collect();
            assert!(waits.iter().all(|&wait| wait <= spread), "{retry_after:?}");
            let distinct: std::collections::HashSet<_> = waits.iter().collect();
            // A thousand draws over at least a thousand and one values: a stuck or
            // narrow source would give a handful.
            assert!(distinct.len() > 500, "{retry_after:?}: {}", distinct.len());
            let mean = waits.iter().sum::<Duration>() / 1000;
            assert!(
                mean > spread / 4 && mean < spread * 3 / 4,
                "{retry_after:?}: {mean:?}"
            );
        }
    }

    #[test]
    fn two_limiters_draw_differently() {
        let first = Jitter::new();
        let second = Jitter::new();
        let retry_after = Duration::from_secs(1);
        let draws = |jitter: &Jitter| -> Vec<Duration> {
            (0..16).map(|_| jitter.extra_wait(retry_after)).collect()
        };
        assert_ne!(draws(&first), draws(&second));
    }
}
