//! How many tokens a leased front asks for: what it granted over the last lease lifetime,
//! or what is queued if more, at most the largest lease; and at least half of that, so
//! that under contention each call brings a batch rather than the few tokens accrued
//! since the last.

use std::time::Duration;

use tokio::time::Instant;

use crate::rate::Rate;

/// Tokens granted locally over the last lease lifetime, counted in two periods of one
/// lifetime each: the one under way and the one before.
#[derive(Debug)]
pub(crate) struct Demand {
    period: Duration,
    started: Instant,
    this_period: u64,
    last_period: u64,
}

impl Demand {
    pub(crate) fn new(period: Duration, now: Instant) -> Demand {
        Demand {
            period,
            started: now,
            this_period: 0,
            last_period: 0,
        }
    }

    /// Moves the periods on to `now`.
    fn roll(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.started);
        if elapsed >= self.period * 2 {
            (self.last_period, self.this_period, self.started) = (0, 0, now);
        } else if elapsed >= self.period {
            self.last_period = self.this_period;
            self.this_period = 0;
            self.started += self.period;
        }
    }

    /// Counts `tokens` granted at `now`.
    pub(crate) fn record(&mut self, now: Instant, tokens: u64) {
        self.roll(now);
        self.this_period = self.this_period.saturating_add(tokens);
    }

    /// The tokens one lifetime's demand needs: the larger of the two periods' grants.
    pub(crate) fn recent(&mut self, now: Instant) -> u64 {
        self.roll(now);
        self.this_period.max(self.last_period)
    }
}

/// The fewest and the most tokens to ask for, when the head of the queue lacks
/// `shortfall` (at least 1) tokens, `queued` are queued, `recent` were granted over the
/// last lifetime, and a lease holds at most `max_lease`: the most is the demand (the
/// larger of `recent` and `queued`) up to `max_lease`, and never below `shortfall`; the
/// fewest is half the most, and never below `shortfall`.
pub(crate) fn lease_bounds(shortfall: u64, queued: u64, recent: u64, max_lease: u64) -> (u64, u64) {
    let most = recent.max(queued).min(max_lease).max(shortfall);
    (shortfall.max(most / 2), most)
}

/// Whole tokens `rate` gains in `elapsed`, rounded down.
pub(crate) fn tokens_in(rate: Rate, elapsed: Duration) -> u64 {
    let tokens = elapsed.as_nanos() * u128::from(rate.amount()) / rate.period_nanos().max(1);
    u64::try_from(tokens).unwrap_or(u64::MAX)
}

/// How long `rate` takes to gain `tokens`, in whole milliseconds rounded up.
pub(crate) fn millis_for(rate: Rate, tokens: u64) -> Duration {
    let nanos =
        (u128::from(tokens) * rate.period_nanos()).div_ceil(u128::from(rate.amount().max(1)));
    let millis = nanos.div_ceil(1_000_000);
    Duration::from_millis(u64::try_from(millis).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_the_demand_up_to_the_largest_and_at_least_what_the_head_lacks() {
        // (shortfall, queued, recent, max_lease) → (fewest, most)
        let cases = [
            ((1, 1, 0, 250), (1, 1)),
            ((1, 16, 0, 250), (8, 16)),
            ((1, 16, 400, 250), (125, 250)),
            ((3, 0, 100, 250), (50, 100)),
            // A request above the largest lease still gets what it lacks.
            ((600, 600, 0, 250), (600, 600)),
            ((200, 0, 10, 250), (200, 200)),
        ];
        for ((shortfall, queued, recent, max_lease), expected) in cases {
            assert_eq!(
                lease_bounds(shortfall, queued, recent, max_lease),
                expected,
                "{shortfall} {queued} {recent} {max_lease}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn demand_is_the_larger_of_the_last_two_lifetimes() {
        let start = Instant::now();
        let ms = Duration::from_millis;
        let mut demand = Demand::new(ms(100), start);
        demand.record(start, 30);
        demand.record(start + ms(99), 20);
        assert_eq!(demand.recent(start + ms(99)), 50);
        demand.record(start + ms(100), 10);
        assert_eq!(demand.recent(start + ms(150)), 50);
        assert_eq!(demand.recent(start + ms(200)), 10);
        // A lifetime with nothing forgets it all.
        assert_eq!(demand.recent(start + ms(400)), 0);
    }

    #[test]
    fn rate_arithmetic_is_exact() {
        let rate = Rate::new(3, Duration::from_millis(7));
        assert_eq!(tokens_in(rate, Duration::from_millis(7)), 3);
        assert_eq!(tokens_in(rate, Duration::from_nanos(6_999_999)), 2);
        assert_eq!(millis_for(rate, 3), Duration::from_millis(7));
        assert_eq!(millis_for(rate, 4), Duration::from_millis(10));
        assert_eq!(
            millis_for(Rate::per_second(1_000_000), 1),
            Duration::from_millis(1)
        );
    }
}
