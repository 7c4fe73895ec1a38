//! Per-key limiting beside governor's keyed limiter (issues 5 and 16): nanoseconds per
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
//! call. Measurement is kept short (1 s warm-up, 3 s measurement, 30 samples). At the end a
//! table gives this run's figures side by side, with their ratios.
//!
//! # The setup
//!
//! `token-bucket` is `Keyed<u64, TokenBucket>` with the default shards. For `1M_keys` and
//! `new_keys` each key's bucket holds 100,000 tokens and gains one an hour, so that no key
//! used is ever idle within a run: nothing is forgotten, and ours holds every key it saw,
//! as governor does (it forgets only when told to). For `hot_key` it gains a token a
//! nanosecond and holds 10^9, so that the one key is never refused however long criterion
//! runs it. Both templates fit one word, so every key is held compact (see `Keyed`'s
//! docs, "What a key costs").
//!
//! governor is `DefaultKeyedRateLimiter<u64>` (a `DashMap` with std's `RandomState`, like
//! ours) with `u32::MAX` cells a second (an hourly refill with that burst would overflow
//! its nanosecond arithmetic); its check costs the same whatever the rate. It runs twice:
//! as shipped (`governor`, reading the CPU's counter through `quanta`) and on tokio's
//! clock (`governor-tokio-clock`, see `support/governor_on_tokio.rs`), the clock ours must
//! read. Neither ever refuses here: every result is checked, and a benchmark panics if one
//! does.
//!
//! # The groups
//!
//! - `keyed_try_acquire/1M_keys`: each limiter first holds 1,000,000 keys; the timed calls
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
//! figures are noisy; compare the limiters within one run.

use std::hash::Hash;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use criterion::Criterion;
use governor::clock::Clock;
use governor::middleware::RateLimitingMiddleware;
use governor::state::keyed::KeyedStateStore;
use governor::{DefaultKeyedRateLimiter, Quota};
use token_bucket::{Keyed, Rate, TokenBucket};

#[path = "support/figures.rs"]
mod figures;
#[path = "support/governor_on_tokio.rs"]
mod governor_on_tokio;

use figures::{criterion_home, nanoseconds, ns, ratio};

/// Distinct keys in `1M_keys`, and the most any map holds in `new_keys`.
const KEYS: u64 = 1_000_000;

/// A prime not dividing `KEYS`: `i × STRIDE mod KEYS` visits every key once per `KEYS`
/// calls, in a scrambled order.
const STRIDE: u64 = 7_919;

/// The name of governor's column on tokio's clock.
const GOVERNOR_TOKIO: &str = "governor-tokio-clock";

const GROUP: &str = "keyed_try_acquire";
const ROWS: [&str; 3] = ["1M_keys", "new_keys", "hot_key"];
const COLUMNS: [&str; 3] = ["token-bucket", "governor", GOVERNOR_TOKIO];

/// Ours for many keys: 100,000 tokens, one more an hour, so no key used goes idle.
fn ours() -> Keyed<u64, TokenBucket> {
    let template = TokenBucket::new(Rate::per_hour(1), 100_000).expect("a valid configuration");
    Keyed::new(template)
}

/// Ours for one hot key: a token a nanosecond, holding 10^9, so it never runs dry.
fn ours_hot() -> Keyed<u64, TokenBucket> {
    let template = TokenBucket::new(Rate::per_second(1_000_000_000), 1_000_000_000)
        .expect("a valid configuration");
    Keyed::new(template)
}

fn quota() -> Quota {
    Quota::per_second(NonZeroU32::MAX)
}

fn governor() -> DefaultKeyedRateLimiter<u64> {
    governor::RateLimiter::keyed(quota())
}

fn governor_tokio() -> governor_on_tokio::TokioKeyedGovernor<u64> {
    governor_on_tokio::keyed(quota())
}

/// One call of each limiter for `key`: whether it was granted.
trait Check {
    fn check(&self, key: u64) -> bool;
}

impl Check for Keyed<u64, TokenBucket> {
    #[inline(always)]
    fn check(&self, key: u64) -> bool {
        self.try_acquire(&key, 1).is_ok()
    }
}

impl<S, C, M> Check for governor::RateLimiter<u64, S, C, M>
where
    S: KeyedStateStore<u64>,
    C: Clock,
    M: RateLimitingMiddleware<C::Instant>,
    u64: Hash,
{
    #[inline(always)]
    fn check(&self, key: u64) -> bool {
        self.check_key(&key).is_ok()
    }
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

/// `1M_keys` for one limiter: it first holds every key, then is timed on the tour.
fn million_keys<T: Check>(c: &mut Criterion, who: &str, limiter: T) {
    for key in 0..KEYS {
        granted(limiter.check(key), who);
    }
    let mut group = c.benchmark_group(GROUP);
    let mut i = 0u64;
    group.bench_function(format!("1M_keys/{who}"), |b| {
        b.iter(|| {
            i += 1;
            granted(black_box(&limiter).check(scrambled(i)), who);
        });
    });
    group.finish();
}

/// Times `iters` calls, each for a new key, starting a fresh limiter from `make` every
/// `KEYS` keys; making and dropping limiters is not timed.
fn time_new_keys<T: Check>(iters: u64, who: &str, make: impl Fn() -> T) -> Duration {
    let mut timed = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let batch = (iters - done).min(KEYS);
        let limiter = make();
        let start = Instant::now();
        for key in 0..batch {
            granted(black_box(&limiter).check(key), who);
        }
        timed += start.elapsed();
        done += batch;
        drop(limiter);
    }
    timed
}

fn new_keys<T: Check>(c: &mut Criterion, who: &str, make: impl Fn() -> T + Copy) {
    let mut group = c.benchmark_group(GROUP);
    group.bench_function(format!("new_keys/{who}"), |b| {
        b.iter_custom(|iters| time_new_keys(iters, who, make));
    });
    group.finish();
}

fn hot_key<T: Check>(c: &mut Criterion, who: &str, limiter: T) {
    let mut group = c.benchmark_group(GROUP);
    group.bench_function(format!("hot_key/{who}"), |b| {
        b.iter(|| granted(black_box(&limiter).check(7), who));
    });
    group.finish();
}

fn keyed(c: &mut Criterion) {
    million_keys(c, "token-bucket", ours());
    million_keys(c, "governor", governor());
    million_keys(c, GOVERNOR_TOKIO, governor_tokio());
    new_keys(c, "token-bucket", ours);
    new_keys(c, "governor", governor);
    new_keys(c, GOVERNOR_TOKIO, governor_tokio);
    hot_key(c, "token-bucket", ours_hot());
    hot_key(c, "governor", governor());
    hot_key(c, GOVERNOR_TOKIO, governor_tokio());
}

/// This run's figures side by side, with the ratios of ours to governor's.
fn print_summary(since: std::time::SystemTime) {
    let Some(home) = criterion_home() else {
        eprintln!("summary: cannot tell where criterion keeps its figures");
        return;
    };
    println!();
    println!("Nanoseconds per try_acquire, this run:");
    println!();
    println!(
        "| per call | token-bucket | governor | governor on tokio's clock \
         | ours ÷ governor | ours ÷ governor on tokio's clock |"
    );
    println!("|---|---|---|---|---|---|");
    for row in ROWS {
        let cells: Vec<Option<f64>> = COLUMNS
            .iter()
            .map(|column| nanoseconds(&home, GROUP, &format!("{row}_{column}"), 1, since))
            .collect();
        println!(
            "| {row} | {} | {} | {} | {} | {} |",
            ns(cells[0]),
            ns(cells[1]),
            ns(cells[2]),
            ratio(cells[0], cells[1]),
            ratio(cells[0], cells[2]),
        );
    }
}

fn main() {
    let since = std::time::SystemTime::now();
    let mut criterion = config().configure_from_args();
    keyed(&mut criterion);
    criterion.final_summary();
    print_summary(since);
}
