//! Micro-benchmarks of `token_bucket` beside its two best-known peers, [`governor`] and
//! [`leaky_bucket`], measured in the same run so that every figure can be read as a
//! ratio taken on one machine at one time (issue 4).
//!
//! # Running
//!
//! ```text
//! cargo bench --bench micro                  # everything, about a minute
//! cargo bench --bench micro -- try_take      # one group (criterion's name filter)
//! ```
//!
//! Criterion prints one `time: [low estimate high]` line per benchmark, and keeps the
//! numbers in `target/criterion/<group>/<limiter>/new/estimates.json` (with the `/` in a
//! group's name written `_`, as in `try_take_1_thread`). At the end, a markdown table
//! gathers this run's estimates in nanoseconds per operation (per item for
//! `stream_throttle`), one row per group, with the ratios of ours to governor and to
//! governor on tokio's clock. Measurement is kept short
//! (0.5 s warm-up, 2 s measurement, 50 samples per benchmark); pass
//! `-- --measurement-time 10` for steadier figures.
//!
//! # The setup every group shares
//!
//! Each limiter is given a rate of 10^9 tokens a second (one a nanosecond, the fastest
//! governor refills) and a capacity of 10^9, and starts full, so it never runs dry while
//! it is measured: every group times the path where the tokens are there. Every
//! operation's result is checked, and a benchmark panics if a limiter ever refuses, so a
//! figure can never silently come from the refusal path.
//!
//! leaky-bucket runs in its default *fair* mode, the one whose promise matches ours (a
//! `try_acquire` never jumps waiters). Fair mode skips its lock-free fast path: each call
//! takes its lock and reads the clock, as ours does. No tokio clock is paused anywhere
//! (governor reads its own clock, `quanta`, and would ignore a paused one anyway).
//!
//! `governor-tokio-clock` is governor's same limiter built on tokio's clock
//! (`benches/support/governor_on_tokio.rs`): governor's algorithm, reading the clock ours
//! must read. Beside `governor` it shows what that clock costs; beside `token-bucket`, how
//! far ours is from governor's algorithm on equal terms.
//!
//! # The groups
//!
//! - `try_take/1_thread`: one thread calling the non-waiting acquire in a loop:
//!   `TokenBucket::try_take(1)`, governor's `check()` (on either clock), leaky-bucket's
//!   `try_acquire(1)`. No runtime involved. The figure is nanoseconds per call.
//!   `tokio-clock-read` is one `tokio::time::Instant::now()`, the floor for any limiter
//!   that honours paused time.
//! - `try_take/2_threads`: the same calls from two OS threads on one shared limiter at
//!   once. Each thread makes `iters` calls; the wall time from the first thread's start to
//!   the last one's end is divided by `2 × iters`, so the figure is *nanoseconds per
//!   operation overall* (the limiter's throughput under contention, inverted), not the
//!   latency one thread sees. Lower than the one-thread figure means the limiter scales;
//!   higher means the two threads fight over a lock or a cache line. On a machine with
//!   fewer than two idle cores the threads take turns and the figure means little; the
//!   tell-tale is a governor figure here equal to its one-thread figure (in parallel its
//!   atomic cache line bounces between cores and costs it several times more).
//! - `take_available`: the waiting acquire, awaited on a current-thread tokio runtime when
//!   the tokens are there: `take(1).await`, governor's `until_ready().await`,
//!   leaky-bucket's `acquire_one().await`. Nanoseconds per completed await, including
//!   creating and dropping the future.
//! - `stream_throttle`: a stream of [`STREAM_LEN`] integers drained through each
//!   limiter's stream adapter: `TokenBucket::throttle`, governor's
//!   `StreamRateLimitExt::ratelimit_stream` (enabled by governor's default `std`
//!   feature), and for leaky-bucket, which has no adapter, `then` with
//!   `acquire_one().await` per item. `unthrottled` drains the bare stream, the floor under
//!   all three. Reported per item (`Throughput::Elements`): criterion prints the time for
//!   the whole stream and items per second; divide the time by [`STREAM_LEN`] for
//!   nanoseconds per item. The per-stream set-up (ours clones a handle, governor arms a
//!   `futures-timer` delay) is included, spread over the items.
//!
//! - `several_limits`: ours alone, one limit beside two (issue 14): `try_take(1)` and
//!   `take(1).await` with the tokens there, on the bucket above (`*-1-limit`) and on the
//!   same with a second limit as ample beside it, 10^9 an hour holding 10^9
//!   (`*-2-limits`). A bucket of several limits keeps the fast path's word seized and
//!   takes its lock for every request, so this is the price of the lock and of a second
//!   ledger. `cargo bench --bench micro -- several_limits` runs it alone; the summary
//!   prints its own table, with the ratio.
//!
//! - `composite`: one decision over two buckets against two separate calls (issue 14,
//!   part 2), with the tokens there: `all((&a, &b)).try_acquire(1)` against
//!   `a.try_take(1)` then `b.try_take(1)`, the same with `acquire(1).await` against two
//!   `take(1).await`, and governor's two `check()`s as the peer's separate calls (it has
//!   no composite). The composite takes both buckets' locks in the global order and reads
//!   the clock once; the separate calls each take the lock-free fast path, and are not
//!   one decision. `in-turn-try_acquire` and `in-turn-acquire` are the same two calls on
//!   `all_in_turn((&leader, &follower))`, over two fresh buckets (a limiter keeps the part
//!   it is first given, and `a` and `b` already follow in `all`); with the tokens there it
//!   decides as `all` does, so the two should cost about the same. Every composite of
//!   these rows is made once, outside the timing.
//!
//!   Then a key beside a global bucket, `try` only, with the key's tokens there, on a
//!   `Keyed<u64, TokenBucket>` whose template is [`ours`] (so the key never runs dry, and
//!   is held as a word): `key-member-in-turn-try_acquire` is
//!   `all_in_turn((per_key.member(&KEY), &global))?.try_acquire(1)`, the member and the
//!   composite made inside the timed call, per request, as users write it (a hash of the
//!   key, a copy of it, a handle on the `Keyed`); `key-try_acquire-and-try_take` is the two
//!   separate calls `per_key.try_acquire(&KEY, 1)` and `global.try_take(1)`, not one
//!   decision; `governor-check_key-and-check` is governor's keyed limiter's
//!   `check_key(&KEY)` and a direct limiter's `check()`, the peer's separate calls; and
//!   `key-limiter-in-turn-try_acquire` is the way before `member`,
//!   `all_in_turn((per_key.get_or_insert(&KEY)?, &global))?.try_acquire(1)`, on a `Keyed`
//!   of its own (its keys lead too). `get_or_insert` makes the key whole the first time;
//!   the key stays whole after, since nothing here folds it back, so each call pays for
//!   the lookup, an `Arc` clone and the whole bucket's locked path. The summary prints
//!   both tables, with the ratios in turn ÷ all, member ÷ separate calls and member ÷
//!   governor.
//!
//! - `observe`: what naming a bucket costs (issue 24): `try_take(1)` and `take(1).await`
//!   with the tokens there on [`ours`] unnamed (`*-unnamed`) and, with the feature
//!   `metrics`, on the same named, its counters registered with
//!   `metrics-exporter-prometheus`'s recorder (`*-named`): each decision then increments
//!   one of that exporter's atomic counters. Run it once without features and once with
//!   `--features metrics` to see that the unnamed figures do not move, and the named
//!   one's cost beside one `fetch_add` (the `floors` group):
//!   `cargo bench --bench micro -- 'observe|floors'` and
//!   `cargo bench --features metrics --bench micro -- 'observe|floors'`.
//!
//! - `floors`: what the operations above are made of, on this machine, this run: one read
//!   of tokio's clock, one uncontended compare-and-swap, one uncontended `fetch_add`, and
//!   an `Arc` cloned and dropped. A `try_take` that takes on the fast path reads the clock
//!   once, swaps the word once and adds to `Stats::taken` once; a `take(1).await` also
//!   clones and drops its handle (its future is `'static`, so it owns one). governor's
//!   `check()` reads the clock and swaps once, and its `until_ready` borrows. How much
//!   an atomic read-modify-write costs differs several times between processors (2 to
//!   9 ns on the machines this crate was measured on), so the ratios to governor move
//!   with it; the summary prints these floors beside the main table.
//!
//! # Reading the ratios
//!
//! Divide our time by a peer's, within one group of one run: below 1 we are faster,
//! above 1 slower. Ratios from one run are comparable; absolute nanoseconds are not,
//! between machines or between runs on a busy machine. For `stream_throttle`, subtracting
//! `unthrottled` first gives the ratio of the limiters' own cost per item.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion, Throughput};
use futures::{stream, StreamExt};
use governor::prelude::StreamRateLimitExt;
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota};
use token_bucket::{all, all_in_turn, Keyed, Rate, TokenBucket};

#[path = "support/figures.rs"]
mod figures;
#[path = "support/governor_on_tokio.rs"]
mod governor_on_tokio;

use figures::{criterion_home, nanoseconds, ns, ratio};

/// The name of governor's column on tokio's clock.
const GOVERNOR_TOKIO: &str = "governor-tokio-clock";

/// Items per stream in `stream_throttle`.
const STREAM_LEN: u64 = 1_000;

/// Rate (per second) and capacity of every limiter: far more than any benchmark takes,
/// and a bucket whose state fits our fast path's word (see `src/bucket/fast.rs`).
const AMPLE: u32 = 1_000_000_000;

/// Our bucket: `AMPLE` tokens a second, holding `AMPLE`, starting full.
fn ours() -> TokenBucket {
    TokenBucket::new(Rate::per_second(u64::from(AMPLE)), u64::from(AMPLE))
        .expect("a valid configuration")
}

/// [`ours`] with a second limit beside the first, as ample: `AMPLE` an hour, holding
/// `AMPLE`, starting full. Every request takes the lock (see `src/bucket/limits.rs`).
fn ours_two_limits() -> TokenBucket {
    TokenBucket::builder()
        .rate(Rate::per_second(u64::from(AMPLE)))
        .capacity(u64::from(AMPLE))
        .limit(Rate::per_hour(u64::from(AMPLE)), u64::from(AMPLE))
        .build()
        .expect("a valid configuration")
}

/// governor's quota: burst `AMPLE`; it refills one cell a nanosecond at most.
fn ample_quota() -> Quota {
    Quota::per_second(NonZeroU32::new(AMPLE).expect("not zero"))
}

/// governor's direct limiter, on its own clock (quanta).
fn governor() -> DefaultDirectRateLimiter {
    governor::RateLimiter::direct(ample_quota())
}

/// governor's keyed limiter (a `DashMap` of its direct limiters), on its own clock, each
/// key given [`ample_quota`].
fn governor_keyed() -> DefaultKeyedRateLimiter<u64> {
    governor::RateLimiter::keyed(ample_quota())
}

/// governor's direct limiter on tokio's clock, the clock ours reads.
fn governor_tokio() -> governor_on_tokio::TokioGovernor {
    governor_on_tokio::direct(ample_quota())
}

/// leaky-bucket's limiter, fair (its default): `AMPLE` tokens a second, holding `AMPLE`,
/// starting full.
fn leaky() -> leaky_bucket::RateLimiter {
    let ample = usize::try_from(AMPLE).expect("usize holds a u32");
    leaky_bucket::RateLimiter::builder()
        .initial(ample)
        .max(ample)
        .refill(ample)
        .interval(Duration::from_secs(1))
        .build()
}

/// Panics unless the operation was granted: a refusal would mean the benchmark measures
/// the wrong path.
#[inline(always)]
fn granted(ok: bool, who: &str) {
    if !ok {
        ran_dry(who);
    }
}

#[cold]
#[inline(never)]
fn ran_dry(who: &str) -> ! {
    panic!("{who} refused a request: the limiter ran dry, so the figure would be wrong")
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50)
}

fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn try_take_1_thread(c: &mut Criterion) {
    let mut group = c.benchmark_group("try_take/1_thread");

    let bucket = ours();
    group.bench_function("token-bucket", |b| {
        b.iter(|| granted(black_box(&bucket).try_take(1).is_ok(), "token-bucket"));
    });

    let limiter = governor();
    group.bench_function("governor", |b| {
        b.iter(|| granted(black_box(&limiter).check().is_ok(), "governor"));
    });

    let limiter = governor_tokio();
    group.bench_function(GOVERNOR_TOKIO, |b| {
        b.iter(|| granted(black_box(&limiter).check().is_ok(), GOVERNOR_TOKIO));
    });

    let limiter = leaky();
    group.bench_function("leaky-bucket", |b| {
        b.iter(|| granted(black_box(&limiter).try_acquire(1), "leaky-bucket"));
    });

    // The floor for any limiter that honours paused time: one read of tokio's clock.
    group.bench_function("tokio-clock-read", |b| {
        b.iter(tokio::time::Instant::now);
    });

    group.finish();
}

/// Runs `op` `iters` times on each of two threads at once and returns the wall time per
/// operation overall, times `iters`: that is, wall time / 2, which criterion then divides
/// by `iters`.
fn on_two_threads(iters: u64, op: &(impl Fn() + Sync)) -> Duration {
    // Both threads start together; the clock runs from the first start to the last end,
    // so thread creation and joining are not timed.
    let barrier = Barrier::new(2);
    let spans: Vec<(Instant, Instant)> = thread::scope(|scope| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..iters {
                        op();
                    }
                    (start, Instant::now())
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().expect("a benchmark thread panicked"))
            .collect()
    });
    let first_start = spans.iter().map(|&(start, _)| start).min();
    let last_end = spans.iter().map(|&(_, end)| end).max();
    match (first_start, last_end) {
        (Some(start), Some(end)) => end.duration_since(start) / 2,
        _ => Duration::ZERO,
    }
}

fn try_take_2_threads(c: &mut Criterion) {
    let mut group = c.benchmark_group("try_take/2_threads");

    let bucket = ours();
    group.bench_function("token-bucket", |b| {
        b.iter_custom(|iters| {
            on_two_threads(iters, &|| {
                granted(black_box(&bucket).try_take(1).is_ok(), "token-bucket");
            })
        });
    });

    let limiter = governor();
    group.bench_function("governor", |b| {
        b.iter_custom(|iters| {
            on_two_threads(iters, &|| {
                granted(black_box(&limiter).check().is_ok(), "governor");
            })
        });
    });

    let limiter = governor_tokio();
    group.bench_function(GOVERNOR_TOKIO, |b| {
        b.iter_custom(|iters| {
            on_two_threads(iters, &|| {
                granted(black_box(&limiter).check().is_ok(), GOVERNOR_TOKIO);
            })
        });
    });

    let limiter = leaky();
    group.bench_function("leaky-bucket", |b| {
        b.iter_custom(|iters| {
            on_two_threads(iters, &|| {
                granted(black_box(&limiter).try_acquire(1), "leaky-bucket");
            })
        });
    });

    group.finish();
}

fn take_available(c: &mut Criterion) {
    let runtime = current_thread_runtime();
    let mut group = c.benchmark_group("take_available");

    let bucket = ours();
    group.bench_function("token-bucket", |b| {
        b.to_async(&runtime).iter(|| async {
            granted(black_box(&bucket).take(1).await.is_ok(), "token-bucket");
        });
    });

    // `until_ready` cannot fail: it waits instead. With ample cells it never does.
    let limiter = governor();
    group.bench_function("governor", |b| {
        b.to_async(&runtime)
            .iter(|| async { black_box(&limiter).until_ready().await });
    });

    let limiter = governor_tokio();
    group.bench_function(GOVERNOR_TOKIO, |b| {
        b.to_async(&runtime)
            .iter(|| async { black_box(&limiter).until_ready().await });
    });

    // Likewise `acquire_one`.
    let limiter = leaky();
    group.bench_function("leaky-bucket", |b| {
        b.to_async(&runtime)
            .iter(|| async { black_box(&limiter).acquire_one().await });
    });

    group.finish();
}

/// Drains `items` and returns the sum of what came out, checking that all of them did.
async fn drain(items: impl futures::Stream<Item = u64>, who: &str) -> u64 {
    let mut items = pin!(items);
    let mut count = 0;
    let mut sum = 0;
    while let Some(item) = items.next().await {
        count += 1;
        sum += item;
    }
    granted(count == STREAM_LEN, who);
    sum
}

fn stream_throttle(c: &mut Criterion) {
    let runtime = current_thread_runtime();
    let mut group = c.benchmark_group("stream_throttle");
    group.throughput(Throughput::Elements(STREAM_LEN));

    group.bench_function("unthrottled", |b| {
        b.to_async(&runtime)
            .iter(|| drain(stream::iter(0..black_box(STREAM_LEN)), "unthrottled"));
    });

    let bucket = ours();
    group.bench_function("token-bucket", |b| {
        b.to_async(&runtime).iter(|| {
            let items = bucket.throttle(stream::iter(0..black_box(STREAM_LEN)));
            drain(items, "token-bucket")
        });
    });

    let limiter = governor();
    group.bench_function("governor", |b| {
        b.to_async(&runtime).iter(|| {
            let items = stream::iter(0..black_box(STREAM_LEN)).ratelimit_stream(&limiter);
            drain(items, "governor")
        });
    });

    let limiter = governor_tokio();
    group.bench_function(GOVERNOR_TOKIO, |b| {
        b.to_async(&runtime).iter(|| {
            let items = stream::iter(0..black_box(STREAM_LEN)).ratelimit_stream(&limiter);
            drain(items, GOVERNOR_TOKIO)
        });
    });

    let limiter = leaky();
    let limiter = &limiter;
    group.bench_function("leaky-bucket", |b| {
        b.to_async(&runtime).iter(|| {
            let items = stream::iter(0..black_box(STREAM_LEN)).then(|item| async move {
                limiter.acquire_one().await;
                item
            });
            drain(items, "leaky-bucket")
        });
    });

    group.finish();
}

/// The `several_limits` group's benchmarks: (operation, one limit, two limits).
const SEVERAL_LIMITS: [(&str, &str, &str); 2] = [
    ("try_take(1)", "try_take-1-limit", "try_take-2-limits"),
    ("take(1).await", "take-1-limit", "take-2-limits"),
];

fn several_limits(c: &mut Criterion) {
    let runtime = current_thread_runtime();
    let mut group = c.benchmark_group("several_limits");
    let [(_, try_one, try_two), (_, take_one, take_two)] = SEVERAL_LIMITS;
    for (bench, bucket) in [(try_one, ours()), (try_two, ours_two_limits())] {
        group.bench_function(bench, |b| {
            b.iter(|| granted(black_box(&bucket).try_take(1).is_ok(), bench));
        });
    }
    for (bench, bucket) in [(take_one, ours()), (take_two, ours_two_limits())] {
        group.bench_function(bench, |b| {
            b.to_async(&runtime).iter(|| async {
                granted(black_box(&bucket).take(1).await.is_ok(), bench);
            });
        });
    }
    group.finish();
}

/// The `observe` group's benchmarks: (operation, unnamed bucket, named bucket). The named
/// ones exist only with the feature `metrics`.
const OBSERVE: [(&str, &str, &str); 2] = [
    ("try_take(1)", "try_take-unnamed", "try_take-named"),
    ("take(1).await", "take-unnamed", "take-named"),
];

/// [`ours`], named, its metrics registered with a Prometheus recorder (as
/// `metrics-exporter-prometheus` installs it, without its HTTP listener): the counters a
/// decision increments are that exporter's atomics.
#[cfg(feature = "metrics")]
fn ours_named(recorder: &metrics_exporter_prometheus::PrometheusRecorder) -> TokenBucket {
    metrics::with_local_recorder(recorder, || {
        TokenBucket::builder()
            .rate(Rate::per_second(u64::from(AMPLE)))
            .capacity(u64::from(AMPLE))
            .name("bench")
            .build()
            .expect("a valid configuration")
    })
}

fn observe(c: &mut Criterion) {
    let runtime = current_thread_runtime();
    let mut group = c.benchmark_group("observe");
    let [(_, try_unnamed, _try_named), (_, take_unnamed, _take_named)] = OBSERVE;
    #[cfg(feature = "metrics")]
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    #[cfg_attr(not(feature = "metrics"), allow(unused_mut))]
    let mut buckets = vec![(try_unnamed, take_unnamed, ours())];
    #[cfg(feature = "metrics")]
    buckets.push((_try_named, _take_named, ours_named(&recorder)));
    for (try_bench, take_bench, bucket) in buckets {
        group.bench_function(try_bench, |b| {
            b.iter(|| granted(black_box(&bucket).try_take(1).is_ok(), try_bench));
        });
        group.bench_function(take_bench, |b| {
            b.to_async(&runtime).iter(|| async {
                granted(black_box(&bucket).take(1).await.is_ok(), take_bench);
            });
        });
    }
    group.finish();
}

/// The `composite` group's benchmarks over two buckets: (operation, two separate calls,
/// one `all` composite, one `all_in_turn` composite).
const COMPOSITE: [(&str, &str, &str, &str); 2] = [
    (
        "try (2 buckets)",
        "try_take-twice",
        "all-try_acquire",
        "in-turn-try_acquire",
    ),
    (
        "wait (2 buckets)",
        "take-twice",
        "all-acquire",
        "in-turn-acquire",
    ),
];

/// The peer's two separate checks, beside ours in the `composite` group.
const GOVERNOR_TWICE: &str = "governor-check-twice";

/// The `composite` group's benchmarks of a key beside a global bucket, all `try`: the key
/// as `Keyed::member` in `all_in_turn`, as `Keyed::get_or_insert` in `all_in_turn`, the two
/// separate calls, and governor's keyed check with a direct one.
const KEY_MEMBER: &str = "key-member-in-turn-try_acquire";
const KEY_LIMITER: &str = "key-limiter-in-turn-try_acquire";
const KEY_TWICE: &str = "key-try_acquire-and-try_take";
const GOVERNOR_KEY_TWICE: &str = "governor-check_key-and-check";

/// The one key the `composite` group's key rows take from.
const KEY: u64 = 7;

fn composite(c: &mut Criterion) {
    let runtime = current_thread_runtime();
    let mut group = c.benchmark_group("composite");
    let [(_, try_twice, try_all, try_in_turn), (_, take_twice, take_all, take_in_turn)] = COMPOSITE;
    let (a, b) = (ours(), ours());
    group.bench_function(try_twice, |bench| {
        bench.iter(|| {
            granted(black_box(&a).try_take(1).is_ok(), try_twice);
            granted(black_box(&b).try_take(1).is_ok(), try_twice);
        });
    });
    group.bench_function(take_twice, |bench| {
        bench.to_async(&runtime).iter(|| async {
            granted(black_box(&a).take(1).await.is_ok(), take_twice);
            granted(black_box(&b).take(1).await.is_ok(), take_twice);
        });
    });
    // `try_acquire(1)` and `acquire(1).await` on a composite made once: `All` and
    // `AllInTurn` share no trait, so a macro serves both.
    macro_rules! try_and_acquire {
        ($composite:expr, $try_bench:expr, $acquire_bench:expr) => {
            let composite = $composite;
            group.bench_function($try_bench, |bench| {
                bench.iter(|| granted(black_box(&composite).try_acquire(1).is_ok(), $try_bench));
            });
            group.bench_function($acquire_bench, |bench| {
                bench.to_async(&runtime).iter(|| async {
                    granted(
                        black_box(&composite).acquire(1).await.is_ok(),
                        $acquire_bench,
                    );
                });
            });
        };
    }
    try_and_acquire!(all((&a, &b)).expect("two buckets"), try_all, take_all);
    let (first, second) = (governor(), governor());
    group.bench_function(GOVERNOR_TWICE, |bench| {
        bench.iter(|| {
            granted(black_box(&first).check().is_ok(), GOVERNOR_TWICE);
            granted(black_box(&second).check().is_ok(), GOVERNOR_TWICE);
        });
    });

    // Fresh buckets: `a` and `b` follow in `all` above, and a limiter keeps the part it
    // is first given, so neither could lead here.
    let (leader, follower) = (ours(), ours());
    try_and_acquire!(
        all_in_turn((&leader, &follower)).expect("two fresh buckets"),
        try_in_turn,
        take_in_turn
    );

    // A key beside a global bucket. The member and its composite are made per request,
    // as users write it, so their making is timed.
    let per_key: Keyed<u64, TokenBucket> = Keyed::new(ours());
    let global = ours();
    group.bench_function(KEY_MEMBER, |bench| {
        bench.iter(|| {
            let member = per_key.member(black_box(&KEY));
            let composite = all_in_turn((member, &global)).expect("a key and a bucket");
            granted(composite.try_acquire(1).is_ok(), KEY_MEMBER);
        });
    });
    group.bench_function(KEY_TWICE, |bench| {
        bench.iter(|| {
            granted(per_key.try_acquire(black_box(&KEY), 1).is_ok(), KEY_TWICE);
            granted(black_box(&global).try_take(1).is_ok(), KEY_TWICE);
        });
    });
    // A Keyed of its own: the keys of `per_key` lead, and so would these whole ones.
    let per_key_whole: Keyed<u64, TokenBucket> = Keyed::new(ours());
    group.bench_function(KEY_LIMITER, |bench| {
        bench.iter(|| {
            let limiter = per_key_whole
                .get_or_insert(black_box(&KEY))
                .expect("no bound on keys");
            let composite = all_in_turn((limiter, &global)).expect("a key and a bucket");
            granted(composite.try_acquire(1).is_ok(), KEY_LIMITER);
        });
    });
    let (governor_keyed, governor_global) = (governor_keyed(), governor());
    group.bench_function(GOVERNOR_KEY_TWICE, |bench| {
        bench.iter(|| {
            let key_checked = black_box(&governor_keyed).check_key(black_box(&KEY));
            granted(key_checked.is_ok(), GOVERNOR_KEY_TWICE);
            granted(
                black_box(&governor_global).check().is_ok(),
                GOVERNOR_KEY_TWICE,
            );
        });
    });
    group.finish();
}

/// The `floors` group's benchmarks, as the summary names them.
const FLOORS_MEASURED: [(&str, &str); 4] = [
    ("tokio-clock-read", "one read of tokio's clock"),
    ("compare-and-swap", "one compare-and-swap, uncontended"),
    ("fetch-add", "one `fetch_add`, uncontended"),
    ("arc-clone-drop", "an `Arc` cloned and dropped"),
];

fn floors(c: &mut Criterion) {
    let mut group = c.benchmark_group("floors");
    group.bench_function(FLOORS_MEASURED[0].0, |b| {
        b.iter(tokio::time::Instant::now);
    });
    let word = AtomicU64::new(0);
    group.bench_function(FLOORS_MEASURED[1].0, |b| {
        b.iter(|| {
            let seen = black_box(&word).load(Ordering::Acquire);
            let swapped =
                word.compare_exchange(seen, seen + 1, Ordering::AcqRel, Ordering::Acquire);
            granted(swapped.is_ok(), "compare-and-swap");
        });
    });
    let counter = AtomicU64::new(0);
    group.bench_function(FLOORS_MEASURED[2].0, |b| {
        b.iter(|| black_box(&counter).fetch_add(1, Ordering::Relaxed));
    });
    let handle = Arc::new(0u64);
    group.bench_function(FLOORS_MEASURED[3].0, |b| {
        b.iter(|| drop(black_box(Arc::clone(black_box(&handle)))));
    });
    group.finish();
}

criterion_group! {
    name = micro;
    config = config();
    targets = floors, try_take_1_thread, try_take_2_threads, take_available, stream_throttle,
        several_limits, composite, observe
}

// ---------------------------------------------------------------------------------------
// The summary: every figure of this run in one table, with the ratios.
// ---------------------------------------------------------------------------------------

/// The groups, each with how many operations one of its iterations makes.
const GROUPS: [(&str, u64); 4] = [
    ("try_take/1_thread", 1),
    ("try_take/2_threads", 1),
    ("take_available", 1),
    ("stream_throttle", STREAM_LEN),
];

/// The limiters' columns, then the floor: a read of tokio's clock, or the bare stream.
const COLUMNS: [&str; 4] = ["token-bucket", "governor", GOVERNOR_TOKIO, "leaky-bucket"];
const FLOORS: [&str; 2] = ["tokio-clock-read", "unthrottled"];

/// A table's title and its markdown header.
fn print_heading(title: &str, columns: &[&str]) {
    println!();
    println!("{title}");
    println!();
    println!("| {} |", columns.join(" | "));
    println!("|{}", "---|".repeat(columns.len()));
}

/// The `several_limits` table: one limit beside two, if this run measured them.
fn print_several_limits(home: &std::path::Path, since: std::time::SystemTime) {
    let figure = |bench: &str| nanoseconds(home, "several_limits", bench, 1, since);
    let rows: Vec<_> = SEVERAL_LIMITS
        .iter()
        .filter_map(|&(operation, one, two)| Some((operation, figure(one)?, figure(two)?)))
        .collect();
    if rows.is_empty() {
        return;
    }
    print_heading(
        "Several limits, nanoseconds per operation with the tokens there, this run:",
        &["operation", "one limit", "two limits", "two ÷ one"],
    );
    for (operation, one, two) in rows {
        println!("| {operation} | {one:.1} | {two:.1} | {:.2} |", two / one);
    }
}

/// The `observe` table: a bucket unnamed beside one named (with the feature `metrics`),
/// with the difference beside one uncontended `fetch_add`, if this run measured them.
fn print_observe(home: &std::path::Path, since: std::time::SystemTime) {
    let figure = |bench: &str| nanoseconds(home, "observe", bench, 1, since);
    let fetch_add = nanoseconds(home, "floors", FLOORS_MEASURED[2].0, 1, since);
    let rows: Vec<_> = OBSERVE
        .iter()
        .filter_map(|&(operation, unnamed, named)| {
            Some((operation, figure(unnamed)?, figure(named)))
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    print_heading(
        "Observing, nanoseconds per operation with the tokens there, this run:",
        &[
            "operation",
            "unnamed",
            "named, Prometheus recorder",
            "named − unnamed",
            "one fetch_add",
        ],
    );
    let cell =
        |figure: Option<f64>| figure.map_or("—".to_owned(), |figure| format!("{figure:.1}"));
    for (operation, unnamed, named) in rows {
        println!(
            "| {operation} | {unnamed:.1} | {} | {} | {} |",
            cell(named),
            cell(named.map(|named| named - unnamed)),
            cell(fetch_add),
        );
    }
}

/// The `composite` table: two separate calls beside one composite, `all` and
/// `all_in_turn`, if this run measured them, with governor's two checks beside the try
/// row.
fn print_composite(home: &std::path::Path, since: std::time::SystemTime) {
    let figure = |bench: &str| nanoseconds(home, "composite", bench, 1, since);
    let rows: Vec<_> = COMPOSITE
        .iter()
        .filter_map(|&(operation, twice, all, in_turn)| {
            Some((operation, figure(twice)?, figure(all)?, figure(in_turn)))
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    let governor = figure(GOVERNOR_TWICE);
    print_heading(
        "A composite of two buckets, nanoseconds per decision with the tokens there, this run:",
        &[
            "operation",
            "two separate calls",
            "all",
            "all ÷ separate",
            "all_in_turn",
            "in turn ÷ all",
            "governor, two checks",
            "all ÷ governor",
        ],
    );
    for (index, (operation, twice, all, in_turn)) in rows.into_iter().enumerate() {
        let peer = governor.filter(|_| index == 0);
        println!(
            "| {operation} | {twice:.1} | {all:.1} | {:.2} | {} | {} | {} | {} |",
            all / twice,
            ns(in_turn),
            ratio(in_turn, Some(all)),
            ns(peer),
            ratio(Some(all), peer),
        );
    }
}

/// The key rows of `composite`: a key beside a global bucket, as a member of
/// `all_in_turn` (by `Keyed::member` and by `Keyed::get_or_insert`), as two separate calls,
/// and governor's keyed check with a direct one, if this run measured them.
fn print_key_composite(home: &std::path::Path, since: std::time::SystemTime) {
    let figure = |bench: &str| nanoseconds(home, "composite", bench, 1, since);
    let [member, limiter, twice, governor] =
        [KEY_MEMBER, KEY_LIMITER, KEY_TWICE, GOVERNOR_KEY_TWICE].map(figure);
    if member.is_none() {
        return;
    }
    print_heading(
        "A key beside a global bucket, try, nanoseconds per decision with the tokens there, \
         this run:",
        &[
            "key as member",
            "key as limiter",
            "two separate calls",
            "governor, check_key + check",
            "member ÷ separate",
            "member ÷ governor",
            "limiter ÷ member",
        ],
    );
    println!(
        "| {} | {} | {} | {} | {} | {} | {} |",
        ns(member),
        ns(limiter),
        ns(twice),
        ns(governor),
        ratio(member, twice),
        ratio(member, governor),
        ratio(limiter, member),
    );
}

/// The `floors` table, if this run measured them.
fn print_floors(home: &std::path::Path, since: std::time::SystemTime) {
    let rows: Vec<_> = FLOORS_MEASURED
        .iter()
        .filter_map(|&(bench, what)| Some((what, nanoseconds(home, "floors", bench, 1, since)?)))
        .collect();
    if rows.is_empty() {
        return;
    }
    print_heading(
        "What the operations are made of on this machine, nanoseconds, this run:",
        &["floor", "ns"],
    );
    for (what, figure) in rows {
        println!("| {what} | {figure:.1} |");
    }
}

fn print_summary(since: std::time::SystemTime) {
    let Some(home) = criterion_home() else {
        eprintln!("summary: cannot tell where criterion keeps its figures");
        return;
    };
    print_floors(&home, since);
    print_several_limits(&home, since);
    print_composite(&home, since);
    print_key_composite(&home, since);
    print_observe(&home, since);
    let mut rows = Vec::new();
    for (group, per_iteration) in GROUPS {
        let figure = |bench: &str| nanoseconds(&home, group, bench, per_iteration, since);
        let cells: Vec<Option<f64>> = COLUMNS.iter().map(|&bench| figure(bench)).collect();
        let floor = FLOORS.iter().find_map(|&bench| figure(bench));
        if cells.iter().all(Option::is_none) {
            continue;
        }
        rows.push((group, cells, floor));
    }
    if rows.is_empty() {
        return;
    }
    print_heading(
        "Nanoseconds per operation (per item for stream_throttle), this run:",
        &[
            "group",
            "token-bucket",
            "governor",
            "governor on tokio's clock",
            "leaky-bucket",
            "floor",
            "ours ÷ governor",
            "ours ÷ governor on tokio's clock",
            "governor on tokio's clock ÷ governor",
        ],
    );
    for (group, cells, floor) in rows {
        println!(
            "| {group} | {} | {} | {} | {} | {} | {} | {} | {} |",
            ns(cells[0]),
            ns(cells[1]),
            ns(cells[2]),
            ns(cells[3]),
            ns(floor),
            ratio(cells[0], cells[1]),
            ratio(cells[0], cells[2]),
            ratio(cells[2], cells[1]),
        );
    }
    println!();
    println!(
        "floor: one read of tokio's clock (try_take/1_thread), the bare stream \
         (stream_throttle)."
    );
}

fn main() {
    let since = std::time::SystemTime::now();
    micro();
    Criterion::default().configure_from_args().final_summary();
    print_summary(since);
}
