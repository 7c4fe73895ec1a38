//! Per-key limiting beside governor's keyed limiter (issue 5): nanoseconds per
//! `try_acquire` over a million distinct `u64` keys, for keys seen for the first time, and
//! for one hot key. Memory per key is measured by the `keyed_memory` bench.
//!
//! # Running
//!
//! ```text
//! cargo bench --bench keyed
//! ```
//!
//! Criterion prints one `time: [low estimate high]` line per benchmark: nanoseconds per
//! call. Measurement is kept short (1 s warm-up, 3 s measurement, 30 samples).
//!
//! # The setup
//!
//! `token-bucket` is `Keyed<u64, TokenBucket>` with the default shards, each key's bucket
//! holding `u32::MAX` tokens and gaining one an hour, so that no key used is ever idle
//! within a run: nothing is forgotten, and ours holds every key it saw, as governor does
//! (it forgets only when told to). governor is `DefaultKeyedRateLimiter<u64>` (a `DashMap`
//! with std's `RandomState`, like ours) with `u32::MAX` cells a second (an hourly refill
//! with that burst would overflow its nanosecond arithmetic); its check costs the same
//! whatever the rate. Neither ever refuses here: every result is checked, and a benchmark
//! panics if one does.
//!
//! # The groups
//!
//! - `keyed_try_acquire/1M_keys`: both limiters first hold 1,000,000 keys; the timed calls
//!   visit them in a scrambled order (key `i × 7,919 mod 1,000,000`), as a server's
//!   clients would, so most calls miss the CPU caches: the figure is the cost of finding a
//!   key in a large map and charging its limiter.
//! - `keyed_try_acquire/new_keys`: every call is for a key never seen: the cost of making
//!   and storing a limiter. A fresh limiter is started every 1,000,000 keys (outside the
//!   timing), so no map grows past that.
//! - `keyed_try_acquire/hot_key`: every call is for the same key: the cost of the shard
//!   lookup and the limiter when everything is in cache.
//!
//! # Reading the figures
//!
//! The machine these were written on has two cores shared with other work, so absolute
//! figures are noisy; compare the two limiters within one run.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use governor::{DefaultKeyedRateLimiter, Quota};
use token_bucket::{Keyed, Rate, TokenBucket};

/// Distinct keys in `1M_keys`, and the most any map holds in `new_keys`.
const KEYS: u64 = 1_000_000;

/// A prime not dividing `KEYS`: `i × STRIDE mod KEYS` visits every key once per `KEYS`
/// calls, in a scrambled order.
const STRIDE: u64 = 7_919;

fn ours() -> Keyed<u64, TokenBucket> {
    let template =
        TokenBucket::new(Rate::per_hour(1), u64::from(u32::MAX)).expect("a valid configuration");
    Keyed::new(template)
}

fn governor() -> DefaultKeyedRateLimiter<u64> {
    let quota = Quota::per_second(NonZeroU32::MAX);
    governor::RateLimiter::keyed(quota)
}

/// Panics unless the call was granted: a refusal would mean the benchmark measures the
/// wrong path.
#[inline(always)]
fn granted(ok: bool, who: &str) {
    if !ok {
        refused(who);
    }
}

#[cold]
#[inline(never)]
fn refused(who: &str) -> ! {
    panic!("{who} refused a request, so the figure would be wrong")
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30)
}

/// The `i`-th key of the scrambled tour of `KEYS` keys.
fn scrambled(i: u64) -> u64 {
    i.wrapping_mul(STRIDE) % KEYS
}

fn million_keys(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_try_acquire");

    let keyed = ours();
    for key in 0..KEYS {
        granted(keyed.try_acquire(&key, 1).is_ok(), "token-bucket");
    }
    assert_eq!(keyed.len(), KEYS as usize, "every key is still held");
    let mut i = 0u64;
    group.bench_function("1M_keys/token-bucket", |b| {
        b.iter(|| {
            i += 1;
            granted(
                black_box(&keyed).try_acquire(&scrambled(i), 1).is_ok(),
                "token-bucket",
            );
        });
    });
    assert_eq!(keyed.len(), KEYS as usize, "no key was forgotten");
    drop(keyed);

    let limiter = governor();
    for key in 0..KEYS {
        granted(limiter.check_key(&key).is_ok(), "governor");
    }
    let mut i = 0u64;
    group.bench_function("1M_keys/governor", |b| {
        b.iter(|| {
            i += 1;
            granted(
                black_box(&limiter).check_key(&scrambled(i)).is_ok(),
                "governor",
            );
        });
    });
    drop(limiter);

    group.finish();
}

/// Times `iters` calls of `call(limiter, key)`, each for a new key, starting a fresh
/// limiter from `make` every `KEYS` keys; making and dropping limiters is not timed.
fn time_new_keys<T>(iters: u64, make: impl Fn() -> T, call: impl Fn(&T, u64)) -> Duration {
    let mut timed = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let batch = (iters - done).min(KEYS);
        let limiter = make();
        let start = Instant::now();
        for key in 0..batch {
            call(black_box(&limiter), key);
        }
        timed += start.elapsed();
        done += batch;
    }
    timed
}

fn new_keys(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_try_acquire");
    group.bench_function("new_keys/token-bucket", |b| {
        b.iter_custom(|iters| {
            time_new_keys(iters, ours, |keyed, key| {
                granted(keyed.try_acquire(&key, 1).is_ok(), "token-bucket");
            })
        });
    });
    group.bench_function("new_keys/governor", |b| {
        b.iter_custom(|iters| {
            time_new_keys(iters, governor, |limiter, key| {
                granted(limiter.check_key(&key).is_ok(), "governor");
            })
        });
    });
    group.finish();
}

fn hot_key(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_try_acquire");
    let keyed = ours();
    group.bench_function("hot_key/token-bucket", |b| {
        b.iter(|| granted(black_box(&keyed).try_acquire(&7, 1).is_ok(), "token-bucket"));
    });
    let limiter = governor();
    group.bench_function("hot_key/governor", |b| {
        b.iter(|| granted(black_box(&limiter).check_key(&7).is_ok(), "governor"));
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = million_keys, new_keys, hot_key
}
criterion_main!(benches);
