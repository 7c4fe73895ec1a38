//! Every limiter's [`Quota`] against a reference worked out apart, in plain integers
//! (issue 22, item 4): random sequences of time passing, decisions and refunds, run on a
//! limiter and on a key of a `Keyed` of it on paused time. After every step each
//! decision's result (`retry_after` included) and its quota, and each `quota()`, must be
//! the reference's, to the nanosecond. Nobody waits in these sequences: the quota is then
//! exact (`tests/quota.rs` checks the waiters' cases).
//!
//! The references:
//! - a bucket: what each limit holds in parts of a token (a token is `period` parts, a
//!   nanosecond adds `amount`), capped at its capacity; remaining the least whole
//!   tokens, full after the latest of `(full - held) / amount`, rounded up;
//! - a fixed window: the count of the window `now / window`;
//! - a sliding log: every grant's instant, counting for `window`;
//! - a time wheel: a count per slot, each counting through the `slots` slots after it.
//!
//! Besides, two years of simulated time, one of a bucket and one of a fixed window, are
//! checked the same way: no drift. `PROPTEST_CASES` sets the number of cases of each
//! property (256 by default).

mod common;

use std::time::Duration;

use common::lockstep::paused_runtime;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use token_bucket::{
    Decision, FixedWindow, KeyTemplate, Keyed, Limiter, Quota, Rate, SlidingLog, SlidingWindow,
    TokenBucket, TryAcquireError,
};
use tokio::time::advance;

const DEFAULT_CASES: u32 = 256;
const YEAR: u64 = 365 * 24 * 3_600 * 1_000_000_000;

fn config() -> Config {
    common::model_config(DEFAULT_CASES, file!())
}

fn ns(nanos: u64) -> Duration {
    Duration::from_nanos(nanos)
}

fn limited(retry_after: u128) -> TryAcquireError {
    let nanos = u64::try_from(retry_after).expect("within the test's range");
    TryAcquireError::Limited {
        retry_after: ns(nanos),
    }
}

fn quota(remaining: u64, full_after: u128) -> Quota {
    let nanos = u64::try_from(full_after).expect("within the test's range");
    Quota {
        remaining,
        full_after: ns(nanos),
    }
}

fn exceeds(requested: u64, limit: u64) -> Result<(), TryAcquireError> {
    Err(TryAcquireError::ExceedsLimit { requested, limit })
}

// ----- References ------------------------------------------------------------------------

/// A limiter worked out apart, as nobody waits.
trait Reference {
    /// `nanos` pass.
    fn advance(&mut self, nanos: u64);
    /// `try_acquire(permits)` as the limiter decides it.
    fn decide(&mut self, permits: u64) -> Result<(), TryAcquireError>;
    fn refund(&mut self, permits: u64);
    fn quota(&self) -> Quota;

    fn decision(&mut self, permits: u64) -> Decision {
        let result = self.decide(permits);
        Decision {
            result,
            quota: Some(self.quota()),
        }
    }
}

/// One limit of a bucket, in parts of a token.
#[derive(Debug)]
struct Part {
    amount: u128,
    period: u128,
    full: u128,
    held: u128,
}

/// A bucket's limits, each full at first.
struct BucketReference {
    limits: Vec<Part>,
}

impl BucketReference {
    fn new(limits: &[(Rate, u64)]) -> BucketReference {
        let limits = limits.iter().map(|&(rate, capacity)| {
            let period = rate.period().as_nanos();
            let full = u128::from(capacity) * period;
            Part {
                amount: u128::from(rate.amount()),
                period,
                full,
                held: full,
            }
        });
        BucketReference {
            limits: limits.collect(),
        }
    }

    fn tokens(&self) -> u128 {
        let tokens = self.limits.iter().map(|limit| limit.held / limit.period);
        tokens.min().expect("a limit")
    }
}

impl Reference for BucketReference {
    fn advance(&mut self, nanos: u64) {
        for limit in &mut self.limits {
            limit.held = (limit.held + u128::from(nanos) * limit.amount).min(limit.full);
        }
    }

    fn decide(&mut self, tokens: u64) -> Result<(), TryAcquireError> {
        let capacity = self.limits.iter().map(|limit| limit.full / limit.period);
        let capacity = u64::try_from(capacity.min().expect("a limit")).unwrap();
        if tokens > capacity {
            return exceeds(tokens, capacity);
        }
        if u128::from(tokens) <= self.tokens() {
            for limit in &mut self.limits {
                limit.held -= u128::from(tokens) * limit.period;
            }
            return Ok(());
        }
        let wait = self.limits.iter().map(|limit| {
            let needed = u128::from(tokens) * limit.period;
            needed.saturating_sub(limit.held).div_ceil(limit.amount)
        });
        Err(limited(wait.max().expect("a limit")))
    }

    fn refund(&mut self, tokens: u64) {
        for limit in &mut self.limits {
            limit.held = (limit.held + u128::from(tokens) * limit.period).min(limit.full);
        }
    }

    fn quota(&self) -> Quota {
        let until_full = self.limits.iter().map(|limit| {
            let missing = limit.full - limit.held;
            missing.div_ceil(limit.amount)
        });
        let remaining = u64::try_from(self.tokens()).unwrap();
        quota(remaining, until_full.max().expect("a limit"))
    }
}

/// A fixed window: the count of the window now falls in.
struct FixedReference {
    limit: u64,
    window: u64,
    now: u64,
    count: u64,
}

impl FixedReference {
    fn end(&self) -> u128 {
        u128::from((self.now / self.window + 1) * self.window - self.now)
    }
}

impl Reference for FixedReference {
    fn advance(&mut self, nanos: u64) {
        let before = self.now / self.window;
        self.now += nanos;
        if self.now / self.window != before {
            self.count = 0;
        }
    }

    fn decide(&mut self, permits: u64) -> Result<(), TryAcquireError> {
        if permits > self.limit {
            return exceeds(permits, self.limit);
        }
        if self.count + permits <= self.limit {
            self.count += permits;
            return Ok(());
        }
        Err(limited(self.end()))
    }

    fn refund(&mut self, permits: u64) {
        self.count -= permits.min(self.count);
    }

    fn quota(&self) -> Quota {
        let full_after = if self.count == 0 { 0 } else { self.end() };
        quota(self.limit - self.count, full_after)
    }
}

/// A sliding log: the instant of every grant not refunded, oldest first.
struct LogReference {
    limit: u64,
    window: u64,
    now: u64,
    grants: Vec<u64>,
}

impl LogReference {
    /// The grants that count now, oldest first.
    fn counting(&self) -> &[u64] {
        let gone = (self.grants).partition_point(|&grant| grant + self.window <= self.now);
        &self.grants[gone..]
    }
}

impl Reference for LogReference {
    fn advance(&mut self, nanos: u64) {
        self.now += nanos;
    }

    fn decide(&mut self, permits: u64) -> Result<(), TryAcquireError> {
        if permits > self.limit {
            return exceeds(permits, self.limit);
        }
        let counting = self.counting();
        let counted = counting.len() as u64;
        if counted + permits <= self.limit {
            let now = self.now;
            self.grants.extend((0..permits).map(|_| now));
            return Ok(());
        }
        // Once this many of the oldest stop counting, the permits fit.
        let leaving = counted + permits - self.limit;
        let last = counting[usize::try_from(leaving - 1).unwrap()];
        Err(limited(u128::from(last + self.window - self.now)))
    }

    fn refund(&mut self, permits: u64) {
        let kept = self.grants.len().saturating_sub(permits as usize);
        self.grants.truncate(kept);
    }

    fn quota(&self) -> Quota {
        let counting = self.counting();
        let full_after = counting
            .last()
            .map_or(0, |&newest| u128::from(newest + self.window - self.now));
        quota(self.limit - counting.len() as u64, full_after)
    }
}

/// A time wheel: the permits admitted in each slot, oldest slot first.
struct WheelReference {
    limit: u64,
    slots: u64,
    slot: u64,
    now: u64,
    /// (slot number, permits), slots in order.
    counts: Vec<(u64, u64)>,
}

impl WheelReference {
    /// The slots whose permits count now, oldest first.
    fn counting(&self) -> &[(u64, u64)] {
        let oldest = (self.now / self.slot).saturating_sub(self.slots);
        let gone = self.counts.partition_point(|&(slot, _)| slot < oldest);
        &self.counts[gone..]
    }

    fn counted(&self) -> u64 {
        self.counting().iter().map(|&(_, permits)| permits).sum()
    }

    /// When the permits of `slot` stop counting, from now.
    fn released(&self, slot: u64) -> u128 {
        u128::from((slot + self.slots + 1) * self.slot - self.now)
    }
}

impl Reference for WheelReference {
    fn advance(&mut self, nanos: u64) {
        self.now += nanos;
    }

    fn decide(&mut self, permits: u64) -> Result<(), TryAcquireError> {
        if permits > self.limit {
            return exceeds(permits, self.limit);
        }
        let mut counted = self.counted();
        if counted + permits <= self.limit {
            let current = self.now / self.slot;
            match self.counts.last_mut() {
                Some((slot, count)) if *slot == current => *count += permits,
                _ => self.counts.push((current, permits)),
            }
            return Ok(());
        }
        for &(slot, count) in self.counting() {
            counted -= count;
            if counted + permits <= self.limit {
                return Err(limited(self.released(slot)));
            }
        }
        unreachable!("the permits fit once every slot left")
    }

    fn refund(&mut self, mut permits: u64) {
        let oldest = (self.now / self.slot).saturating_sub(self.slots);
        for (slot, count) in self.counts.iter_mut().rev() {
            if *slot < oldest || permits == 0 {
                break;
            }
            let given = permits.min(*count);
            *count -= given;
            permits -= given;
        }
    }

    fn quota(&self) -> Quota {
        let newest = self.counting().iter().rev().find(|&&(_, count)| count > 0);
        let full_after = newest.map_or(0, |&(slot, _)| self.released(slot));
        quota(self.limit - self.counted(), full_after)
    }
}

// ----- The runs ------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Decide(u64),
    Refund(u64),
    /// `quota()` and a decision of zero permits.
    Look,
}

/// Runs `ops` on `limiter`, on key 0 of a `Keyed` of it, and on `reference`: they must
/// agree after every step. Returns how many decisions admitted and how many were limited.
async fn run<L: KeyTemplate>(
    limiter: L,
    mut reference: impl Reference,
    ops: &[Op],
) -> Result<[usize; 2], String> {
    let keyed: Keyed<u8, L> = Keyed::new(limiter.fresh());
    let mut outcomes = [0; 2];
    for (step, op) in ops.iter().enumerate() {
        let agree = |what: &str, got: &dyn std::fmt::Debug, expected: &dyn std::fmt::Debug| {
            let (got, expected) = (format!("{got:?}"), format!("{expected:?}"));
            if got == expected {
                Ok(())
            } else {
                Err(format!(
                    "step {step} ({op:?}), {what}: {got}, expected {expected}"
                ))
            }
        };
        match *op {
            Op::Advance(nanos) => {
                advance(ns(nanos)).await;
                reference.advance(nanos);
            }
            Op::Decide(permits) => {
                let expected = reference.decision(permits);
                agree(
                    "the limiter",
                    &limiter.try_acquire_decision(permits),
                    &expected,
                )?;
                let key = keyed.try_acquire_decision(&0, permits);
                agree("the key", &key, &expected)?;
                match expected.result {
                    Ok(()) if permits > 0 => outcomes[0] += 1,
                    Err(TryAcquireError::Limited { .. }) => outcomes[1] += 1,
                    _ => {}
                }
            }
            Op::Refund(permits) => {
                limiter.refund(permits);
                keyed.refund(&0, permits);
                reference.refund(permits);
            }
            Op::Look => {
                let expected = Some(reference.quota());
                agree("the limiter's quota", &limiter.quota(), &expected)?;
                agree("the key's quota", &keyed.quota(&0), &expected)?;
                let zero = limiter.try_acquire_decision(0);
                agree("a decision of 0", &zero, &reference.decision(0))?;
            }
        }
    }
    Ok(outcomes)
}

/// Time passing: a few nanoseconds, up to a few windows of `unit` nanoseconds, or up to
/// hours.
fn advance_op(unit: u64) -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => 0..=2_000u64,
        4 => 0..=3 * unit,
        1 => 0..=10_000_000_000_000u64,
    ]
    .prop_map(Op::Advance)
}

fn ops(limit: u64, unit: u64) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        4 => advance_op(unit),
        5 => (0..=limit + 1).prop_map(Op::Decide),
        1 => (0..=limit).prop_map(Op::Refund),
        2 => Just(Op::Look),
    ];
    prop::collection::vec(op, 1..80)
}

/// Periods on and off whole milliseconds, and one whose units need a large multiplier.
fn rate() -> impl Strategy<Value = Rate> {
    let period = prop_oneof![
        Just(1_000_000u64),
        Just(333_333_333),
        Just(1_000_000_000),
        100_000..=2_000_000_000u64,
    ];
    prop_oneof![
        4 => (1..=5u64, period).prop_map(|(amount, period)| Rate::new(amount, ns(period))),
        1 => Just(Rate::new(1_000_003, Duration::from_millis(17))),
    ]
}

/// Window lengths on and off whole milliseconds.
fn window() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(1_000_000u64),
        Just(1_000_000_000),
        1_000..=2_000_000_000u64
    ]
}

/// Runs every case of `cases` in a paused runtime of its own; fails unless decisions were
/// both admitted and limited.
fn check_all<T: std::fmt::Debug>(
    what: &str,
    cases: impl Strategy<Value = T>,
    run_case: impl Fn(&T) -> Result<[usize; 2], String>,
) {
    let mut runner = TestRunner::new(config());
    let totals = std::cell::Cell::new([0usize; 2]);
    let result = runner.run(&cases, |case| {
        let outcomes = run_case(&case).map_err(TestCaseError::fail)?;
        let [admitted, limited] = totals.get();
        totals.set([admitted + outcomes[0], limited + outcomes[1]]);
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{what}: {failure}");
    }
    let [admitted, limited] = totals.get();
    println!("{what}: {admitted} decisions admitted, {limited} limited");
    assert!(
        admitted > 0 && limited > 0,
        "{what}: not both outcomes seen"
    );
}

fn in_paused_runtime<F: std::future::Future<Output = Result<[usize; 2], String>>>(
    run: impl FnOnce() -> F,
) -> Result<[usize; 2], String> {
    paused_runtime()?.block_on(run())
}

#[test]
fn a_bucket_of_one_limit_or_several_shows_the_reference_quota() {
    let limits = prop::collection::vec((rate(), 1..=8u64), 1..=3);
    let cases = limits.prop_flat_map(|limits| {
        let smallest = limits.iter().map(|&(_, capacity)| capacity).min().unwrap();
        let (rate, capacity) = limits[0];
        // The time its first limit takes to fill.
        let unit = (rate.period().as_nanos() * u128::from(capacity) / u128::from(rate.amount()))
            .clamp(1, 10_000_000_000) as u64;
        (Just(limits), ops(smallest, unit))
    });
    check_all("buckets", cases, |(limits, ops)| {
        in_paused_runtime(|| async {
            let (rate, capacity) = limits[0];
            let mut builder = TokenBucket::builder().rate(rate).capacity(capacity);
            for &(rate, capacity) in &limits[1..] {
                builder = builder.limit(rate, capacity);
            }
            let bucket = builder.build().map_err(|error| error.to_string())?;
            run(bucket, BucketReference::new(limits), ops).await
        })
    });
}

/// [`check_all`] for a window limiter of a limit and a window, made by `make`, and its
/// reference, made by `reference` from the same.
fn check_windows<L: KeyTemplate, R: Reference>(
    what: &str,
    make: fn(u64, Duration) -> Result<L, token_bucket::ConfigError>,
    reference: fn(u64, u64) -> R,
) {
    let cases = (1..=6u64, window())
        .prop_flat_map(|(limit, window)| (Just((limit, window)), ops(limit, window)));
    check_all(what, cases, |&((limit, window), ref ops)| {
        in_paused_runtime(|| async {
            let limiter = make(limit, ns(window)).map_err(|error| error.to_string())?;
            run(limiter, reference(limit, window), ops).await
        })
    });
}

#[test]
fn a_fixed_window_shows_the_reference_quota() {
    check_windows("fixed windows", FixedWindow::new, |limit, window| {
        FixedReference {
            limit,
            window,
            now: 0,
            count: 0,
        }
    });
}

#[test]
fn a_sliding_log_shows_the_reference_quota() {
    check_windows("sliding logs", SlidingLog::new, |limit, window| {
        LogReference {
            limit,
            window,
            now: 0,
            grants: Vec::new(),
        }
    });
}

#[test]
fn a_sliding_window_shows_the_reference_quota() {
    let slot = prop_oneof![Just(100_000_000u64), 1_000..=300_000_000u64];
    let cases = (1..=6u64, 1..=8u64, slot).prop_flat_map(|(limit, slots, slot)| {
        (Just((limit, slots, slot)), ops(limit, slots * slot))
    });
    check_all(
        "sliding windows",
        cases,
        |&((limit, slots, slot), ref ops)| {
            in_paused_runtime(|| async {
                let limiter = SlidingWindow::new(limit, slots as usize, ns(slot))
                    .map_err(|error| error.to_string())?;
                let reference = WheelReference {
                    limit,
                    slots,
                    slot,
                    now: 0,
                    counts: Vec::new(),
                };
                run(limiter, reference, ops).await
            })
        },
    );
}

// ----- A year --------------------------------------------------------------------------

/// Irregular steps through time, to the odd nanosecond: nine of ten under 400 ms, the
/// tenth up to 10 hours, so that a year takes some 17,000 of them.
struct Steps {
    state: u64,
    round: u64,
}

impl Steps {
    fn new() -> Steps {
        Steps { state: 1, round: 0 }
    }

    fn next(&mut self) -> u64 {
        self.state = (self.state * 7_919 + 12_345_678_901) % 36_000_000_000_007;
        self.round += 1;
        if self.round % 10 == 0 {
            self.state
        } else {
            self.state % 400_000_007
        }
    }
}

/// A year on paused time, at irregular steps, asked for tokens and given some back: every
/// decision and its quota match the reference, to the nanosecond. The fast path's word
/// moves its base many times meanwhile (every 9 s at the fastest rate here), and a bucket
/// of two limits decides under its lock.
#[tokio::test(start_paused = true)]
async fn a_year_of_a_bucket_drifts_by_nothing() {
    let rates = [
        Rate::per_second(3),
        Rate::new(7, ns(999_999_937)),
        Rate::new(1_000_003, Duration::from_millis(17)),
    ];
    for rate in rates {
        let capacity = 5;
        let second = (Rate::per_hour(1), 40);
        let one = TokenBucket::new(rate, capacity).unwrap();
        let two = TokenBucket::builder()
            .rate(rate)
            .capacity(capacity)
            .limit(second.0, second.1)
            .build()
            .unwrap();
        let mut alone = BucketReference::new(&[(rate, capacity)]);
        let mut layered = BucketReference::new(&[(rate, capacity), second]);
        let mut now = 0u64;
        let mut steps = Steps::new();
        let mut round = 0u64;
        let mut outcomes = [0u64; 2];
        while now < YEAR {
            let step = steps.next();
            now += step;
            advance(ns(step)).await;
            alone.advance(step);
            layered.advance(step);
            let tokens = round % (capacity + 2);
            for (bucket, reference) in [(&one, &mut alone), (&two, &mut layered)] {
                if round % 5 == 4 {
                    bucket.refund(tokens);
                    reference.refund(tokens);
                    assert_eq!(bucket.quota(), Some(reference.quota()), "{rate} at {now}");
                } else {
                    let expected = reference.decision(tokens);
                    assert_eq!(
                        bucket.try_acquire_decision(tokens),
                        expected,
                        "{rate} at {now}"
                    );
                    let limited = matches!(expected.result, Err(TryAcquireError::Limited { .. }));
                    outcomes[usize::from(limited)] += 1;
                }
            }
            round += 1;
        }
        assert!(round > 10_000, "{round} rounds");
        assert!(outcomes.iter().all(|&count| count > 1_000), "{outcomes:?}");
    }
}

/// A year of windows: the quota follows the window boundaries to the nanosecond.
#[tokio::test(start_paused = true)]
async fn a_year_of_a_fixed_window_drifts_by_nothing() {
    let window = 999_999_937u64;
    let limiter = FixedWindow::new(4, ns(window)).unwrap();
    let mut reference = FixedReference {
        limit: 4,
        window,
        now: 0,
        count: 0,
    };
    let mut steps = Steps::new();
    let mut outcomes = [0u64; 2];
    while reference.now < YEAR {
        let step = steps.next() / 5;
        advance(ns(step)).await;
        reference.advance(step);
        let permits = step % 3;
        let expected = reference.decision(permits);
        let at = reference.now;
        assert_eq!(limiter.try_acquire_decision(permits), expected, "at {at}");
        let limited = matches!(expected.result, Err(TryAcquireError::Limited { .. }));
        outcomes[usize::from(limited)] += 1;
    }
    assert!(outcomes.iter().all(|&count| count > 1_000), "{outcomes:?}");
}
