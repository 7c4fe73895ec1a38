//! Scenario benchmarks (issue 4): this crate's [`TokenBucket`] side by side with
//! `governor` and `leaky-bucket`, configured to the same rate and burst, each scenario run
//! in a process of its own so that CPU and memory figures do not mix. A fourth column,
//! *governor on tokio's clock*, is a baseline rather than a peer (see the end of this
//! comment).
//!
//! # Running
//!
//! ```text
//! cargo bench --bench scenarios               # every scenario, about three minutes
//! cargo bench --bench scenarios -- fairness   # only scenarios whose name contains "fairness"
//! cargo bench --bench scenarios -- charts     # only the charts' two scenarios, about 15 s
//! cargo bench --bench scenarios -- crawler    # only the crawler's schedule (ours), about 13 s
//! cargo bench --bench scenarios -- waiters ours leaky-bucket
//!                                             # the memory and drain rows, two crates only
//! ```
//!
//! Without a scenario argument the binary re-executes itself once per (scenario, crate)
//! as `scenarios run <scenario> <crate>`, reads the one `RESULT key=value ...` line each
//! child prints on stdout, and prints a markdown table with the crates side by side
//! and the issue's target ("what we want") for reference; `crawler`, which only this crate
//! runs, has a small table of its own after that one. Progress goes to stderr.
//! An argument that is a crate's name (`ours`, `governor`, `governor-tokio-clock`,
//! `leaky-bucket`) keeps only that crate's runs; several may be given. Arguments starting
//! with `--` (cargo passes `--bench`) are ignored.
//!
//! # Charts
//!
//! Whenever `precision-1k` or `fairness` runs, the parent also draws its chart from the
//! grant instants the children report, as SVG (`scenarios/charts.rs`, with plotters):
//!
//! - `docs/charts/precision_1k.svg`: tokens granted so far against time in
//!   `precision-1k`, one line each for ours, governor and leaky-bucket, and the ideal
//!   `1,000/s × t` (the limiters start empty, so none can be above it).
//! - `docs/charts/fairness.svg`: one row per crate in `fairness`, a tick for each `take(1)`
//!   granted and a block where the `take(10)` was, beside a dashed line at 1 s, where first
//!   in, first out serves it.
//!
//! `-- charts` runs just those two scenarios and redraws both. Each task records the
//! instants of its own grants into room set aside before the run starts (one more store
//! per grant, into memory no other task writes), and the child prints them after the run,
//! as `TRACE <name> <µs,µs,...>` lines before its `RESULT` line.
//!
//! # Scenarios
//!
//! - **`precision-1k`, `precision-100k`, `precision-1m`**: 8 tasks loop `take(1)` for 2 s
//!   of real time on a multi-thread runtime with 2 workers, at 1,000/s with a burst of 1,
//!   and at 100,000/s and 1,000,000/s with a burst of rate / 1000 (1 ms worth). Every
//!   limiter starts empty. *Share* is tokens granted / (rate × elapsed), elapsed running
//!   from the limiter's creation to the moment the grant counters are read. *CPU per
//!   token* is the process's CPU time over the same span divided by the tokens granted.
//! - **`precision-100k-burst-2ms`, `precision-1m-burst-2ms`**: the same with a burst of
//!   2 ms of tokens. tokio's timer wakes up to about 1 ms late, so a burst of exactly 1 ms
//!   overflows whenever a wake-up is later than the slack; these rows show the share once
//!   the burst covers the timer's lateness.
//! - **`waiters`**: 100,000 tasks each doing one `take(1)` on an empty limiter at 1,000/s,
//!   burst 1, on a current-thread runtime with paused time. *Memory per waiter* is the
//!   growth of `VmRSS` (from `/proc/self/status`) from before the tasks are spawned to
//!   when every one of them has polled its request once (so is queued), over 100,000; the
//!   spawned task is included. *Drain CPU per waiter* is the CPU time from then until the
//!   last one is served, over 100,000. On paused time the drain takes no real time for a
//!   limiter on tokio's clock; governor keeps its own clock (quanta) and timer thread
//!   (futures-timer), so it runs in real time, 100 s at 1,000/s, and the 20 s limit stops
//!   it. The peak RSS (`VmHWM`) of the process is shown too.
//! - **`waiters-1m`**: the same with 1,000,000 waiters, for this crate and leaky-bucket
//!   (governor does not finish 100,000). Memory and drain CPU per waiter that stay at the
//!   100,000 figures show there is no O(n) step per grant.
//! - **`fairness`**: rate 10/s, burst 10, empty. One `take(10)` is queued first, then 20
//!   tasks loop `take(1)`. The figure is when the big request is served, from the
//!   limiter's creation (1 s for a first-in, first-out limiter), and how many small grants
//!   went before it; "starved" if not within 5 s. The run goes on to 5 s either way, so
//!   that the chart shows the small grants after the big one. Paused time for this crate
//!   and leaky-bucket (both on tokio's clock, so the figure is exact); real time for
//!   governor.
//! - **`cancellation`**: rate 1/s, burst 1, empty, real time, current-thread runtime.
//!   1,000 tasks each wrap `take(1)` in `tokio::time::timeout(500 ms, ..)` and are queued;
//!   then one more `take(1)`, without a timeout, queues behind them. The waiters give up
//!   at 500 ms; the figure is when the last take is served, from the limiter's creation
//!   (1 s if the abandoned waiters took no tokens and block nobody), and the process CPU
//!   time from before the 1,000 tasks are spawned until then. (`tokio::time::timeout` is
//!   used for all three crates alike; this crate's `take_timeout` would refuse these
//!   requests at once, as their tokens cannot accrue within 500 ms, and so never queue.)
//! - **`abandon-1m`**: the same with 1,000,000 waiters on paused time, for this crate and
//!   leaky-bucket: CPU per waiter for spawning, queueing and abandoning shows there is no
//!   O(n) step per abandonment.
//! - **`idle-buckets`**: 10,000 limiters (1,000/s, burst 1) each serve one waiter, so
//!   whatever background task a limiter starts has started; then the process CPU over 5 s
//!   of real idleness on a 2-worker runtime.
//! - **`crawler`** (issue 23; this crate only, as the peers have no composites): the
//!   polite crawler, in real time on a current-thread runtime. 20 URLs, 4 on each of 5
//!   hosts, one task per URL, each waiting for `all((&host, &global))` (the old composite,
//!   which joins both lines at once) or `all_in_turn((&host, &global))` (the new one,
//!   which joins the global line only once its host would admit it) and `acquire(1)`. A
//!   host's bucket gains 2 a second and the global one 20, both of capacity 1 and starting
//!   full; a fresh set for each crawl, as a limiter keeps the part (leading or following)
//!   it is first given. The tasks are spawned grouped (host 0's four URLs, then host 1's,
//!   ...) or interleaved (the first URL of each host, then the second, ...). The ideal
//!   schedule grants host `h`'s `u`-th URL at `h × 50 ms + u × 500 ms`, the last at 1.7 s;
//!   the figure is the *share of the ideal rate*, 1.7 s over the time from spawning the
//!   tasks to the last grant, beside that time. `all` grouped holds the global line for a
//!   host that is not ready and takes about 7.7 s (0.22); `all_in_turn` is to keep the
//!   ideal in either order: a share of at least 0.95, within 90 ms of 1.7 s, which leaves
//!   room for tokio's timer waking up to a millisecond late at each of the schedule's
//!   steps. The four crawls run one after another in one child.
//!
//! # How the numbers are taken
//!
//! The readings come from `benches/support/process.rs`, shared with the other programs
//! that measure themselves. CPU time is the sum, over the process's threads, of the first
//! field of `/proc/self/task/<tid>/schedstat` (nanoseconds on a CPU; no libc crate is
//! needed). All the threads a scenario uses live until it reports, so nothing is lost to
//! threads that exit. As a cross-check, `utime + stime` from `/proc/self/stat` is read too, in clock
//! ticks of `getconf CLK_TCK` (asked once by the parent; 100 is assumed if that fails): a
//! child warns on stderr if the two disagree by more than 20 ms plus 5 %, and falls back to
//! the tick count if `schedstat` cannot be read. Memory is `VmRSS` and `VmHWM` from
//! `/proc/self/status`. Every child has a real-time limit of 20 s: when it passes, the
//! child reports what it has (for example, how many waiters were served) and exits, and
//! the table says "does not finish".
//!
//! leaky-bucket adds `refill` tokens every `interval`, counted in whole milliseconds. A
//! rate of `r`/s is expressed exactly as `refill = r / g` every `1000 / g` ms, where
//! `g = gcd(r, 1000)`: 1 token every 1 ms for 1,000/s, 100 every 1 ms for 100,000/s, 1,000
//! every 1 ms for 1,000,000/s, 1 every 100 ms for 10/s, 1 every 1,000 ms for 1/s. Its
//! `max` is the burst (never below `refill` in these scenarios), `initial` is 0 and it is
//! fair. governor is `Quota::per_second(r).allow_burst(burst)`, and since it starts full
//! its whole burst is taken once with `check_n` so it starts empty like the others.
//!
//! *governor on tokio's clock* is the same governor limiter built on tokio's clock
//! (`benches/support/governor_on_tokio.rs`), so paused time drives it as it drives ours
//! and leaky-bucket, and it runs on paused time where they do. governor's `until_ready`
//! sleeps on `futures-timer`, in real time, which paused time would not move; so its take
//! here is `check_n` and, when refused, a sleep on tokio's timer until the instant governor
//! names, then again. It shows what governor's algorithm does on the clock this crate must
//! read; the table's last column still compares ours with governor and leaky-bucket only.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::future::Future;
use std::io::{Read as _, Write as _};
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use governor::clock::Clock;
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use plotters::style::RGBColor;
use process::{getconf_clk_tck, status_bytes, CpuMeter, CLK_TCK_ENV, MIB};
use token_bucket::{all, all_in_turn, AcquireAllError, Rate, TokenBucket};
use tokio::runtime::Runtime;
use tokio::sync::Notify;

#[path = "scenarios/charts.rs"]
mod charts;
#[path = "support/governor_on_tokio.rs"]
mod governor_on_tokio;
#[path = "support/process.rs"]
mod process;

/// The precision scenario drawn in `docs/charts/precision_1k.svg`, and its crates.
const CHART_PRECISION: &str = "precision-1k";
const CHART_PRECISION_CRATES: [Crate; 3] = [Crate::Ours, Crate::Governor, Crate::Leaky];
/// The argument that runs only the scenarios the charts are drawn from.
const CHARTS_ONLY: &str = "charts";

/// Real-time limit of every child process.
const LIMIT: Duration = Duration::from_secs(20);
/// How much longer than `LIMIT` the parent waits before it kills a child.
const KILL_GRACE: Duration = Duration::from_secs(15);

const PRECISION_RUN: Duration = Duration::from_secs(2);
const PRECISION_TASKS: usize = 8;
const PRECISION_WORKERS: usize = 2;

const WAITERS_RATE: u64 = 1_000;

const FAIRNESS_RATE: u64 = 10;
const FAIRNESS_BIG: u32 = 10;
const FAIRNESS_SMALL_TASKS: usize = 20;
const FAIRNESS_LIMIT: Duration = Duration::from_secs(5);

const CANCEL_TIMEOUT: Duration = Duration::from_millis(500);
const CANCEL_LIMIT: Duration = Duration::from_secs(5);

const IDLE_BUCKETS: usize = 10_000;
const IDLE_FOR: Duration = Duration::from_secs(5);

const CRAWLER: &str = "crawler";
const CRAWL_HOSTS: usize = 5;
const CRAWL_URLS_PER_HOST: usize = 4;
const CRAWL_HOST_RATE: u64 = 2;
const CRAWL_GLOBAL_RATE: u64 = 20;
/// The share of the ideal rate `all_in_turn` is to reach in either order.
const CRAWL_AT_LEAST: f64 = 0.95;

// ---------------------------------------------------------------------------------------
// The three limiters behind one interface.
// ---------------------------------------------------------------------------------------

/// A rate limiter under test. Each scenario is generic over it, so every spawned task holds
/// exactly its crate's future, and per-waiter memory is that crate's alone.
trait Limiter: Clone + Send + Sync + 'static {
    /// Whether it reads tokio's clock, so that paused time drives it.
    const TOKIO_CLOCK: bool;

    /// An empty limiter gaining `rate` tokens per second and holding at most `burst`.
    fn empty(rate: u64, burst: u64) -> Self;

    /// Waits for `tokens` and takes them.
    fn take(&self, tokens: u32) -> impl Future<Output = ()> + Send + '_;
}

#[derive(Clone)]
struct Ours(TokenBucket);

impl Limiter for Ours {
    const TOKIO_CLOCK: bool = true;

    fn empty(rate: u64, burst: u64) -> Self {
        let bucket = TokenBucket::builder()
            .rate(Rate::per_second(rate))
            .capacity(burst)
            .initial(0)
            .build()
            .expect("valid bucket settings");
        Ours(bucket)
    }

    async fn take(&self, tokens: u32) {
        self.0.take(u64::from(tokens)).await.expect("take failed");
    }
}

#[derive(Clone)]
struct Governor(Arc<DefaultDirectRateLimiter>);

impl Limiter for Governor {
    const TOKIO_CLOCK: bool = false;

    fn empty(rate: u64, burst: u64) -> Self {
        let limiter = governor::RateLimiter::direct(governor_quota(rate, burst));
        Governor(Arc::new(emptied(limiter, burst)))
    }

    async fn take(&self, tokens: u32) {
        match NonZeroU32::new(tokens) {
            None => {}
            Some(n) if n.get() == 1 => self.0.until_ready().await,
            Some(n) => self.0.until_n_ready(n).await.expect("within the burst"),
        }
    }
}

/// governor's limiter on tokio's clock (`support/governor_on_tokio.rs`): what governor's
/// algorithm does on the clock ours reads, paused time included.
#[derive(Clone)]
struct GovernorTokio(Arc<governor_on_tokio::TokioGovernor>);

impl Limiter for GovernorTokio {
    const TOKIO_CLOCK: bool = true;

    fn empty(rate: u64, burst: u64) -> Self {
        let limiter = governor_on_tokio::direct(governor_quota(rate, burst));
        GovernorTokio(Arc::new(emptied(limiter, burst)))
    }

    /// governor's `until_n_ready`, but asleep on tokio's timer: governor's own sleeps on
    /// `futures-timer`, in real time, during which paused time would not move.
    async fn take(&self, tokens: u32) {
        let Some(n) = NonZeroU32::new(tokens) else {
            return;
        };
        while let Err(not_until) = self.0.check_n(n).expect("within the burst") {
            tokio::time::sleep_until(not_until.earliest_possible().0).await;
        }
    }
}

/// governor's quota for `rate` per second, holding `burst`.
fn governor_quota(rate: u64, burst: u64) -> Quota {
    Quota::per_second(non_zero(rate)).allow_burst(non_zero(burst))
}

/// governor starts full: takes its whole `burst` so that it starts empty like the others.
fn emptied<C: Clock>(
    limiter: RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<C::Instant>>,
    burst: u64,
) -> RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<C::Instant>> {
    limiter
        .check_n(non_zero(burst))
        .expect("the burst fits the quota")
        .expect("a new governor limiter is full");
    limiter
}

#[derive(Clone)]
struct Leaky(Arc<leaky_bucket::RateLimiter>);

impl Limiter for Leaky {
    const TOKIO_CLOCK: bool = true;

    fn empty(rate: u64, burst: u64) -> Self {
        let (refill, interval) = leaky_refill(rate);
        assert!(
            refill <= burst,
            "leaky-bucket would lose tokens: refill {refill} > max {burst}"
        );
        let limiter = leaky_bucket::RateLimiter::builder()
            .max(to_usize(burst))
            .initial(0)
            .refill(to_usize(refill))
            .interval(interval)
            .fair(true)
            .build();
        Leaky(Arc::new(limiter))
    }

    async fn take(&self, tokens: u32) {
        self.0.acquire(to_usize(u64::from(tokens))).await;
    }
}

/// `rate` per second as leaky-bucket's `refill` tokens every `interval` of whole
/// milliseconds, exactly: `r / g` tokens every `1000 / g` ms with `g = gcd(r, 1000)`.
fn leaky_refill(rate: u64) -> (u64, Duration) {
    let g = gcd(rate, 1_000);
    (rate / g, Duration::from_millis(1_000 / g))
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

fn non_zero(n: u64) -> NonZeroU32 {
    u32::try_from(n)
        .ok()
        .and_then(NonZeroU32::new)
        .expect("a non-zero u32")
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).expect("fits in usize")
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Crate {
    Ours,
    Governor,
    GovernorTokio,
    Leaky,
}

impl Crate {
    const ALL: [Crate; 4] = [
        Crate::Ours,
        Crate::Governor,
        Crate::GovernorTokio,
        Crate::Leaky,
    ];

    fn name(self) -> &'static str {
        match self {
            Crate::Ours => "ours",
            Crate::Governor => "governor",
            Crate::GovernorTokio => "governor-tokio-clock",
            Crate::Leaky => "leaky-bucket",
        }
    }

    fn parse(name: &str) -> Option<Crate> {
        Crate::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The crate as the table's header and the charts name it.
    fn title(self) -> &'static str {
        match self {
            Crate::Ours => "ours (token-bucket)",
            Crate::Governor => "governor 0.10",
            Crate::GovernorTokio => "governor 0.10 on tokio's clock",
            Crate::Leaky => "leaky-bucket 1.1",
        }
    }

    /// Its colour in the charts.
    fn color(self) -> RGBColor {
        match self {
            Crate::Ours => RGBColor(31, 119, 180),
            Crate::Governor => RGBColor(230, 120, 20),
            Crate::GovernorTokio => RGBColor(148, 103, 189),
            Crate::Leaky => RGBColor(44, 160, 44),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Scenarios.
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
enum Kind {
    /// 8 tasks looping `take(1)`; the burst is `burst_ms` milliseconds of tokens. When
    /// `traced`, the instant of every grant is reported too, for the chart.
    Precision {
        rate: u64,
        burst_ms: u64,
        traced: bool,
    },
    Waiters {
        count: u64,
    },
    Fairness,
    /// `waiters` give up by timeout, then one more take; on paused time or real time.
    Cancellation {
        waiters: u64,
        paused: bool,
    },
    Idle,
    /// The crawler of issue 23 with both composites, this crate's alone: it runs for
    /// `ours` only, whichever limiter the child was asked for.
    Crawler,
}

/// Crates that can finish a scale scenario: governor wakes every waiter on every token,
/// so it does not finish 100,000 waiters in the time limit, let alone 1,000,000.
const FINISHERS: &[Crate] = &[Crate::Ours, Crate::Leaky];

const fn precision(rate: u64, burst_ms: u64) -> Kind {
    Kind::Precision {
        rate,
        burst_ms,
        traced: false,
    }
}

/// The peers have no composites.
const OURS_ONLY: &[Crate] = &[Crate::Ours];

const SCENARIOS: [(&str, Kind, &[Crate]); 12] = [
    (
        "precision-1k",
        Kind::Precision {
            rate: 1_000,
            burst_ms: 1,
            traced: true,
        },
        &Crate::ALL,
    ),
    ("precision-100k", precision(100_000, 1), &Crate::ALL),
    ("precision-1m", precision(1_000_000, 1), &Crate::ALL),
    // The same with a burst of 2 ms of tokens: what tokio's 1 ms timer costs a burst of 1 ms.
    (
        "precision-100k-burst-2ms",
        precision(100_000, 2),
        &Crate::ALL,
    ),
    (
        "precision-1m-burst-2ms",
        precision(1_000_000, 2),
        &Crate::ALL,
    ),
    ("waiters", Kind::Waiters { count: 100_000 }, &Crate::ALL),
    ("waiters-1m", Kind::Waiters { count: 1_000_000 }, FINISHERS),
    ("fairness", Kind::Fairness, &Crate::ALL),
    (
        "cancellation",
        Kind::Cancellation {
            waiters: 1_000,
            paused: false,
        },
        &Crate::ALL,
    ),
    (
        "abandon-1m",
        Kind::Cancellation {
            waiters: 1_000_000,
            paused: true,
        },
        FINISHERS,
    ),
    ("idle-buckets", Kind::Idle, &Crate::ALL),
    (CRAWLER, Kind::Crawler, OURS_ONLY),
];

fn scenario(name: &str) -> Option<Kind> {
    SCENARIOS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, k, _)| *k)
}

fn run_scenario<L: Limiter>(kind: Kind) {
    match kind {
        Kind::Precision {
            rate,
            burst_ms,
            traced,
        } => precision_run::<L>(rate, burst_ms, traced),
        Kind::Waiters { count } => waiters::<L>(count),
        Kind::Fairness => fairness::<L>(),
        Kind::Cancellation { waiters, paused } => cancellation::<L>(waiters, paused),
        Kind::Idle => idle::<L>(),
        Kind::Crawler => crawler(),
    }
}

/// One looping task's grants: how many, alone on a cache line so that the tasks do not
/// contend on one, and, if room was set aside, when each was granted (nanoseconds from
/// the limiter's creation). Only its task writes it, so counting a grant is a load and a
/// store, and recording its instant one more store into memory allocated beforehand.
#[repr(align(128))]
struct Slot {
    granted: AtomicU64,
    instants: Box<[AtomicU64]>,
}

impl Slot {
    /// A slot with room for the instants of `room` grants (none for 0).
    fn new(room: u64) -> Slot {
        Slot {
            granted: AtomicU64::new(0),
            instants: (0..room).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Counts one grant and records its instant, `now()`, while there is room. Only the
    /// slot's own task may call it.
    fn grant(&self, now: impl FnOnce() -> Duration) {
        let n = self.granted.load(Ordering::Relaxed);
        if let Some(instant) = usize::try_from(n).ok().and_then(|i| self.instants.get(i)) {
            instant.store(nanos(now()), Ordering::Relaxed);
        }
        self.granted.store(n + 1, Ordering::Release);
    }

    fn granted(&self) -> u64 {
        self.granted.load(Ordering::Acquire)
    }

    /// The recorded instants of the first `granted` grants, in microseconds.
    fn instants_us(&self, granted: u64) -> impl Iterator<Item = u64> + '_ {
        let recorded =
            usize::try_from(granted).map_or(self.instants.len(), |n| n.min(self.instants.len()));
        self.instants[..recorded]
            .iter()
            .map(|instant| instant.load(Ordering::Relaxed) / 1_000)
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

fn precision_run<L: Limiter>(rate: u64, burst_ms: u64, traced: bool) {
    let burst = (rate * burst_ms / 1_000).max(1);
    // Room for as many grants as one task could get in the run and a second more.
    let room = if traced {
        rate * (PRECISION_RUN.as_secs() + 1) + burst
    } else {
        0
    };
    let runtime = two_worker_runtime();
    runtime.block_on(async {
        let slots: Arc<[Slot]> = (0..PRECISION_TASKS).map(|_| Slot::new(room)).collect();
        let cpu = CpuMeter::start();
        let limiter = L::empty(rate, burst);
        let start = Instant::now();
        for task in 0..PRECISION_TASKS {
            let (limiter, slots) = (limiter.clone(), Arc::clone(&slots));
            tokio::spawn(async move {
                loop {
                    limiter.take(1).await;
                    slots[task].grant(|| start.elapsed());
                }
            });
        }
        tokio::time::sleep_until((start + PRECISION_RUN).into()).await;
        let counts: Vec<u64> = slots.iter().map(Slot::granted).collect();
        let granted: u64 = counts.iter().sum();
        let elapsed = start.elapsed();
        let cpu_ns = cpu.elapsed_ns();
        let ideal = rate as f64 * elapsed.as_secs_f64();
        record("rate", rate);
        record("burst", burst);
        record("tokens", granted);
        record("elapsed_s", elapsed.as_secs_f64());
        record("share", granted as f64 / ideal);
        record("cpu_ns", cpu_ns);
        record("cpu_per_token_ns", cpu_ns as f64 / granted.max(1) as f64);
        record(
            "cpu_cores",
            cpu_ns as f64 / elapsed.as_nanos().max(1) as f64,
        );
        if traced {
            let instants = slots
                .iter()
                .zip(&counts)
                .flat_map(|(slot, &count)| slot.instants_us(count));
            record_instants("grants", instants);
        }
    });
    runtime.shutdown_background();
}

/// Tasks that have polled their request once; used to know when all are queued.
static STARTED: AtomicU64 = AtomicU64::new(0);
/// Waiters served; the watchdog reports it if the drain does not finish.
static SERVED: AtomicU64 = AtomicU64::new(0);
static ALL_SERVED: Notify = Notify::const_new();

/// A multi-thread runtime on real time, with as many workers as the target machine has
/// cores.
fn two_worker_runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(PRECISION_WORKERS)
        .enable_all()
        .build()
        .expect("a runtime")
}

fn paused_runtime(paused: bool) -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(paused)
        .build()
        .expect("a runtime")
}

/// Yields until `count` tasks have polled their request once. On a current-thread runtime
/// a task's poll is over before this one runs again, so they are all queued then.
async fn until_started(count: u64) {
    while STARTED.load(Ordering::Acquire) < count {
        tokio::task::yield_now().await;
    }
}

fn waiters<L: Limiter>(count: u64) {
    let runtime = paused_runtime(true);
    runtime.block_on(async {
        let limiter = L::empty(WAITERS_RATE, 1);
        let start = tokio::time::Instant::now();
        let rss_before = status_bytes("VmRSS");
        let cpu = CpuMeter::start();
        for _ in 0..count {
            let limiter = limiter.clone();
            // The handle is dropped: nothing but the task itself is kept per waiter.
            drop(tokio::spawn(async move {
                STARTED.fetch_add(1, Ordering::Release);
                limiter.take(1).await;
                if SERVED.fetch_add(1, Ordering::AcqRel) + 1 == count {
                    ALL_SERVED.notify_one();
                }
            }));
        }
        until_started(count).await;
        let rss_after = status_bytes("VmRSS");
        let queue_cpu_ns = cpu.elapsed_ns();
        let per_waiter = rss_after.saturating_sub(rss_before) as f64 / count as f64;
        record("waiters", count);
        record("rss_before_b", rss_before);
        record("rss_after_b", rss_after);
        record("mem_per_waiter_b", per_waiter);
        record(
            "queue_cpu_per_waiter_ns",
            queue_cpu_ns as f64 / count as f64,
        );
        eprintln!(
            "    {count} waiters queued: VmRSS +{:.1} MiB ({per_waiter:.0} B each); draining",
            rss_after.saturating_sub(rss_before) as f64 / MIB
        );
        let drain = CpuMeter::start();
        ALL_SERVED.notified().await;
        let drain_ns = drain.elapsed_ns();
        record("drain_cpu_ns", drain_ns);
        record("drain_cpu_per_waiter_ns", drain_ns as f64 / count as f64);
        record("drain_clock_s", start.elapsed().as_secs_f64());
        record("vmhwm_b", status_bytes("VmHWM"));
    });
    runtime.shutdown_background();
}

fn fairness<L: Limiter>() {
    let paused = L::TOKIO_CLOCK;
    let runtime = paused_runtime(paused);
    runtime.block_on(async {
        // Room for every small grant the run could see, in each task's slot.
        let room = FAIRNESS_RATE * (FAIRNESS_LIMIT.as_secs() + 1) + u64::from(FAIRNESS_BIG);
        let slots: Arc<[Slot]> = (0..FAIRNESS_SMALL_TASKS).map(|_| Slot::new(room)).collect();
        let limiter = L::empty(FAIRNESS_RATE, u64::from(FAIRNESS_BIG));
        let start = tokio::time::Instant::now();
        let small = Arc::new(AtomicU64::new(0));
        let big = {
            let (limiter, small) = (limiter.clone(), Arc::clone(&small));
            tokio::spawn(async move {
                STARTED.fetch_add(1, Ordering::Release);
                limiter.take(FAIRNESS_BIG).await;
                (start.elapsed(), small.load(Ordering::Acquire))
            })
        };
        until_started(1).await;
        for task in 0..FAIRNESS_SMALL_TASKS {
            let (limiter, small, slots) = (limiter.clone(), Arc::clone(&small), Arc::clone(&slots));
            tokio::spawn(async move {
                loop {
                    limiter.take(1).await;
                    slots[task].grant(|| start.elapsed());
                    small.fetch_add(1, Ordering::AcqRel);
                }
            });
        }
        record("clock", if paused { "paused" } else { "real" });
        let big_served = match tokio::time::timeout(FAIRNESS_LIMIT, big).await {
            Ok(result) => {
                let (served, small_before) = result.expect("the big request's task");
                record("served_s", served.as_secs_f64());
                record("small_before", small_before);
                Some(served)
            }
            Err(_) => {
                record("starved_s", FAIRNESS_LIMIT.as_secs());
                record("small_before", small.load(Ordering::Acquire));
                None
            }
        };
        // The chart shows the whole window: the small grants go on being recorded until
        // it ends (no real time on paused time; governor, on real time, starves anyway).
        tokio::time::sleep_until(start + FAIRNESS_LIMIT).await;
        let small_instants = slots
            .iter()
            .flat_map(|slot| slot.instants_us(slot.granted()));
        record_instants("small", small_instants);
        record_instants("big", big_served.map(|served| nanos(served) / 1_000));
    });
    runtime.shutdown_background();
}

fn cancellation<L: Limiter>(waiters: u64, paused: bool) {
    let runtime = paused_runtime(paused);
    runtime.block_on(async {
        let cpu = CpuMeter::start();
        let limiter = L::empty(1, 1);
        let start = tokio::time::Instant::now();
        let gave_up = Arc::new(AtomicU64::new(0));
        let granted = Arc::new(AtomicU64::new(0));
        for _ in 0..waiters {
            let limiter = limiter.clone();
            let (gave_up, granted) = (Arc::clone(&gave_up), Arc::clone(&granted));
            tokio::spawn(async move {
                STARTED.fetch_add(1, Ordering::Release);
                match tokio::time::timeout(CANCEL_TIMEOUT, limiter.take(1)).await {
                    Ok(()) => granted.fetch_add(1, Ordering::AcqRel),
                    Err(_) => gave_up.fetch_add(1, Ordering::AcqRel),
                };
            });
        }
        until_started(waiters).await;
        record("queued_after_s", start.elapsed().as_secs_f64());
        match tokio::time::timeout(CANCEL_LIMIT, limiter.take(1)).await {
            Ok(()) => record("served_s", start.elapsed().as_secs_f64()),
            Err(_) => record("not_served_s", CANCEL_LIMIT.as_secs()),
        }
        let cpu_ns = cpu.elapsed_ns();
        record("waiters", waiters);
        record("clock", if paused { "paused" } else { "real" });
        record("cpu_ns", cpu_ns);
        record("cpu_per_waiter_ns", cpu_ns as f64 / waiters as f64);
        record("gave_up", gave_up.load(Ordering::Acquire));
        record("granted", granted.load(Ordering::Acquire));
    });
    runtime.shutdown_background();
}

/// Limiters that each served one waiter (so whatever background work they start has
/// started), then sit idle: the process CPU they cost over `IDLE_FOR` of real time.
fn idle<L: Limiter>() {
    let runtime = two_worker_runtime();
    runtime.block_on(async {
        let limiters: Vec<L> = (0..IDLE_BUCKETS).map(|_| L::empty(1_000, 1)).collect();
        let served: Vec<_> = limiters
            .iter()
            .map(|limiter| {
                let limiter = limiter.clone();
                tokio::spawn(async move { limiter.take(1).await })
            })
            .collect();
        for waiter in served {
            waiter.await.expect("a waiter's task");
        }
        // Let the last grants' wake-ups settle before measuring.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let cpu = CpuMeter::start();
        let start = Instant::now();
        tokio::time::sleep(IDLE_FOR).await;
        record("buckets", limiters.len());
        record("idle_s", start.elapsed().as_secs_f64());
        record("cpu_ns", cpu.elapsed_ns());
        drop(limiters);
    });
    runtime.shutdown_background();
}

/// How a crawl's tasks wait for their host and the global limit.
#[derive(Clone, Copy)]
enum Composite {
    /// `all`: joins both lines at once.
    All,
    /// `all_in_turn`: the host's line first, the global one once the host would admit it.
    InTurn,
}

impl Composite {
    const BOTH: [Composite; 2] = [Composite::All, Composite::InTurn];

    fn name(self) -> &'static str {
        match self {
            Composite::All => "all",
            Composite::InTurn => "all_in_turn",
        }
    }
}

/// The order in which a crawl's tasks are spawned.
#[derive(Clone, Copy)]
enum CrawlOrder {
    /// Host 0's URLs, then host 1's, ...
    Grouped,
    /// The first URL of each host, then the second of each, ...
    Interleaved,
}

impl CrawlOrder {
    const BOTH: [CrawlOrder; 2] = [CrawlOrder::Grouped, CrawlOrder::Interleaved];

    fn name(self) -> &'static str {
        match self {
            CrawlOrder::Grouped => "grouped",
            CrawlOrder::Interleaved => "interleaved",
        }
    }

    /// The host of each URL, in the order its task is spawned.
    fn hosts(self) -> Vec<usize> {
        match self {
            CrawlOrder::Grouped => (0..CRAWL_HOSTS)
                .flat_map(|host| (0..CRAWL_URLS_PER_HOST).map(move |_| host))
                .collect(),
            CrawlOrder::Interleaved => (0..CRAWL_URLS_PER_HOST)
                .flat_map(|_| 0..CRAWL_HOSTS)
                .collect(),
        }
    }
}

/// The key under which a crawl's figures are reported, `<composite>_<order>`.
fn crawl_key(composite: Composite, order: CrawlOrder) -> String {
    format!("{}_{}", composite.name(), order.name())
}

/// From the first grant to the last on the ideal schedule: host `h`'s `u`-th URL at
/// `h / global rate + u / host rate`. (The hosts' first grants, one global interval
/// apart, all come before any host's second.)
fn crawl_ideal() -> Duration {
    let last_host = u32::try_from(CRAWL_HOSTS - 1).expect("a few hosts");
    let last_url = u32::try_from(CRAWL_URLS_PER_HOST - 1).expect("a few URLs");
    let interval = |rate: u64| Duration::from_secs(1) / u32::try_from(rate).expect("a small rate");
    interval(CRAWL_GLOBAL_RATE) * last_host + interval(CRAWL_HOST_RATE) * last_url
}

/// One crawl on fresh limiters (a limiter keeps the part it is first given, so `all`
/// and `all_in_turn` cannot share them): the time from spawning the tasks to the last
/// grant.
async fn crawl(composite: Composite, order: CrawlOrder) -> Duration {
    let bucket = |rate| TokenBucket::new(Rate::per_second(rate), 1).expect("valid bucket settings");
    let hosts: Vec<TokenBucket> = (0..CRAWL_HOSTS).map(|_| bucket(CRAWL_HOST_RATE)).collect();
    let global = bucket(CRAWL_GLOBAL_RATE);
    let start = Instant::now();
    let tasks: Vec<_> = order
        .hosts()
        .into_iter()
        .map(|host| {
            let (host, global) = (hosts[host].clone(), global.clone());
            tokio::spawn(async move {
                match composite {
                    Composite::All => all((&host, &global))?.acquire(1).await,
                    Composite::InTurn => all_in_turn((&host, &global))?.acquire(1).await,
                }?;
                Ok::<Duration, AcquireAllError>(start.elapsed())
            })
        })
        .collect();
    let mut last_grant = Duration::ZERO;
    for task in tasks {
        let granted = task.await.expect("a URL's task").expect("acquire failed");
        last_grant = last_grant.max(granted);
    }
    last_grant
}

/// The four crawls, one after another. On a current-thread runtime the tasks first poll
/// in the order they were spawned, so each joins its lines in the crawl's order.
fn crawler() {
    let runtime = paused_runtime(false);
    runtime.block_on(async {
        let ideal = crawl_ideal();
        record("ideal_s", ideal.as_secs_f64());
        for composite in Composite::BOTH {
            for order in CrawlOrder::BOTH {
                let elapsed = crawl(composite, order).await;
                let key = crawl_key(composite, order);
                record(&format!("{key}_s"), elapsed.as_secs_f64());
                record(
                    &format!("{key}_share"),
                    ideal.as_secs_f64() / elapsed.as_secs_f64(),
                );
            }
        }
    });
    runtime.shutdown_background();
}

// ---------------------------------------------------------------------------------------
// The child: one scenario for one crate, reporting one line.
// ---------------------------------------------------------------------------------------

static REPORT: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());
static REPORTED: AtomicBool = AtomicBool::new(false);

fn record(key: &str, value: impl Display) {
    let value = value.to_string();
    debug_assert!(!value.contains(char::is_whitespace));
    REPORT
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((key.to_owned(), value));
}

/// Instants reported beside the figures, for the charts: each a `TRACE <name> <µs,µs,...>`
/// line, sorted.
static TRACES: Mutex<Vec<(String, Vec<u64>)>> = Mutex::new(Vec::new());

fn record_instants(name: &str, instants_us: impl IntoIterator<Item = u64>) {
    let mut instants: Vec<u64> = instants_us.into_iter().collect();
    instants.sort_unstable();
    TRACES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((name.to_owned(), instants));
}

/// Prints the `RESULT` line once (the main thread and the watchdog may race) and exits
/// without running destructors, so a stuck runtime cannot hold the process up.
fn report_and_exit() -> ! {
    if REPORTED.swap(true, Ordering::AcqRel) {
        loop {
            std::thread::park();
        }
    }
    let report = REPORT.lock().unwrap_or_else(PoisonError::into_inner);
    let mut line = String::from("RESULT");
    for (key, value) in report.iter() {
        line.push_str(&format!(" {key}={value}"));
    }
    let mut stdout = std::io::stdout().lock();
    for (name, instants) in TRACES.lock().unwrap_or_else(PoisonError::into_inner).iter() {
        let list: Vec<String> = instants.iter().map(u64::to_string).collect();
        let _ = writeln!(stdout, "TRACE {name} {}", list.join(","));
    }
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
    std::process::exit(0);
}

fn child(scenario_name: &str, crate_name: &str) -> ExitCode {
    let (Some(kind), Some(krate)) = (scenario(scenario_name), Crate::parse(crate_name)) else {
        eprintln!("unknown scenario or crate: {scenario_name} {crate_name}");
        return ExitCode::FAILURE;
    };
    std::thread::spawn(|| {
        std::thread::sleep(LIMIT);
        record("timed_out_s", LIMIT.as_secs());
        record("served_before_limit", SERVED.load(Ordering::Acquire));
        report_and_exit();
    });
    match krate {
        Crate::Ours => run_scenario::<Ours>(kind),
        Crate::Governor => run_scenario::<Governor>(kind),
        Crate::GovernorTokio => run_scenario::<GovernorTokio>(kind),
        Crate::Leaky => run_scenario::<Leaky>(kind),
    }
    report_and_exit();
}

// ---------------------------------------------------------------------------------------
// The parent: one child per (scenario, crate), then the table.
// ---------------------------------------------------------------------------------------

type Fields = BTreeMap<String, String>;

/// Named lists of instants, in microseconds, from a child's `TRACE` lines.
type Traces = BTreeMap<String, Vec<u64>>;

/// What came back from one child.
enum Outcome {
    Done(Fields, Traces),
    Failed(String),
}

impl Outcome {
    fn fields(&self) -> Option<&Fields> {
        match self {
            Outcome::Done(fields, _) => Some(fields),
            Outcome::Failed(_) => None,
        }
    }

    /// The instants reported under `name`, if any were.
    fn instants(&self, name: &str) -> Option<&[u64]> {
        match self {
            Outcome::Done(_, traces) => traces.get(name).map(Vec::as_slice),
            Outcome::Failed(_) => None,
        }
    }

    fn number(&self, key: &str) -> Option<f64> {
        self.fields()?.get(key)?.parse().ok()
    }

    fn timed_out(&self) -> bool {
        self.fields().is_some_and(|f| f.contains_key("timed_out_s"))
    }
}

fn run_child(exe: &std::path::Path, scenario: &str, krate: Crate, clk_tck: u64) -> Outcome {
    let spawned = Command::new(exe)
        .args(["run", scenario, krate.name()])
        .env(CLK_TCK_ENV, clk_tck.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => return Outcome::Failed(format!("could not start: {error}")),
    };
    let deadline = Instant::now() + LIMIT + KILL_GRACE;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                let waited = (LIMIT + KILL_GRACE).as_secs();
                return Outcome::Failed(format!("killed after {waited} s"));
            }
            Err(error) => return Outcome::Failed(format!("wait failed: {error}")),
        }
    };
    let mut output = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        let _ = stdout.read_to_string(&mut output);
    }
    let Some(line) = output.lines().find_map(|l| l.strip_prefix("RESULT")) else {
        return Outcome::Failed(format!("no result ({status})"));
    };
    let fields = line
        .split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let traces = output
        .lines()
        .filter_map(|l| l.strip_prefix("TRACE "))
        .filter_map(|trace| {
            let mut parts = trace.split_whitespace();
            let name = parts.next()?.to_owned();
            let instants = parts
                .next()
                .unwrap_or("")
                .split(',')
                .filter_map(|us| us.parse().ok())
                .collect();
            Some((name, instants))
        })
        .collect();
    Outcome::Done(fields, traces)
}

type Results = BTreeMap<(&'static str, Crate), Outcome>;

/// One line of the table.
#[derive(Clone, Copy)]
enum Metric {
    Share {
        scenario: &'static str,
        at_least: f64,
    },
    CpuPerToken {
        scenario: &'static str,
    },
    MemoryPerWaiter {
        scenario: &'static str,
    },
    PeakRss {
        scenario: &'static str,
    },
    DrainCpu {
        scenario: &'static str,
    },
    FairnessServed,
    CancelServed {
        scenario: &'static str,
    },
    CancelCpu,
    AbandonCpu,
    IdleCpu,
}

const METRICS: [(Metric, &str, &str); 20] = [
    (
        Metric::Share {
            scenario: "precision-1k",
            at_least: 0.99,
        },
        "Precision 1,000/s, burst 1: share of rate",
        "≥ 0.99",
    ),
    (
        Metric::CpuPerToken {
            scenario: "precision-1k",
        },
        "Precision 1,000/s: CPU per token",
        "(not set)",
    ),
    (
        Metric::Share {
            scenario: "precision-100k",
            at_least: 0.999,
        },
        "Precision 100,000/s, burst 100: share of rate",
        "≥ 0.999",
    ),
    (
        Metric::CpuPerToken {
            scenario: "precision-100k",
        },
        "Precision 100,000/s: CPU per token",
        "≤ leaky-bucket's",
    ),
    (
        Metric::Share {
            scenario: "precision-1m",
            at_least: 0.999,
        },
        "Precision 1,000,000/s, burst 1,000: share of rate",
        "≥ 0.999",
    ),
    (
        Metric::CpuPerToken {
            scenario: "precision-1m",
        },
        "Precision 1,000,000/s: CPU per token",
        "≤ leaky-bucket's",
    ),
    (
        Metric::Share {
            scenario: "precision-100k-burst-2ms",
            at_least: 0.999,
        },
        "Precision 100,000/s, burst 200 (2 ms): share of rate",
        "≥ 0.999",
    ),
    (
        Metric::Share {
            scenario: "precision-1m-burst-2ms",
            at_least: 0.999,
        },
        "Precision 1,000,000/s, burst 2,000 (2 ms): share of rate",
        "≥ 0.999",
    ),
    (
        Metric::MemoryPerWaiter {
            scenario: "waiters",
        },
        "100,000 waiters: memory per waiter (task included)",
        "< 584 B",
    ),
    (
        Metric::PeakRss {
            scenario: "waiters",
        },
        "100,000 waiters: peak RSS of the process (VmHWM)",
        "(not set)",
    ),
    (
        Metric::DrainCpu {
            scenario: "waiters",
        },
        "100,000 waiters: CPU to drain, per waiter",
        "< 2.2 µs",
    ),
    (
        Metric::MemoryPerWaiter {
            scenario: "waiters-1m",
        },
        "1,000,000 waiters: memory per waiter",
        "linear: ≤ 1.25 × ours at 100,000",
    ),
    (
        Metric::PeakRss {
            scenario: "waiters-1m",
        },
        "1,000,000 waiters: peak RSS of the process (VmHWM)",
        "(not set)",
    ),
    (
        Metric::DrainCpu {
            scenario: "waiters-1m",
        },
        "1,000,000 waiters: CPU to drain, per waiter",
        "no O(n) step: ≤ 1.25 × ours at 100,000",
    ),
    (
        Metric::FairnessServed,
        "Fairness: take(10) queued before 20 × take(1) loops, 10/s",
        "served first, at 1 s",
    ),
    (
        Metric::CancelServed {
            scenario: "cancellation",
        },
        "Cancellation: 1,000 waiters time out, next take served at",
        "1 s",
    ),
    (
        Metric::CancelCpu,
        "Cancellation: process CPU",
        "no higher than the peers'",
    ),
    (
        Metric::CancelServed {
            scenario: "abandon-1m",
        },
        "1,000,000 waiters time out (paused time), next take served at",
        "1 s",
    ),
    (
        Metric::AbandonCpu,
        "1,000,000 waiters time out: CPU per waiter (spawn, queue, abandon)",
        "no O(n) step: ≤ leaky-bucket's",
    ),
    (
        Metric::IdleCpu,
        "10,000 idle buckets (each served once): process CPU over 5 s",
        "none: < 5 ms",
    ),
];

impl Metric {
    fn scenario(self) -> &'static str {
        match self {
            Metric::Share { scenario, .. } | Metric::CpuPerToken { scenario } => scenario,
            Metric::MemoryPerWaiter { scenario }
            | Metric::PeakRss { scenario }
            | Metric::DrainCpu { scenario }
            | Metric::CancelServed { scenario } => scenario,
            Metric::FairnessServed => "fairness",
            Metric::CancelCpu => "cancellation",
            Metric::AbandonCpu => "abandon-1m",
            Metric::IdleCpu => "idle-buckets",
        }
    }

    /// The figure compared against the target, when there is one.
    fn value(self, outcome: &Outcome) -> Option<f64> {
        match self {
            Metric::Share { .. } => outcome.number("share"),
            Metric::CpuPerToken { .. } => outcome.number("cpu_per_token_ns"),
            Metric::MemoryPerWaiter { .. } => outcome.number("mem_per_waiter_b"),
            Metric::PeakRss { .. } => outcome.number("vmhwm_b"),
            Metric::DrainCpu { .. } => outcome.number("drain_cpu_per_waiter_ns"),
            Metric::FairnessServed | Metric::CancelServed { .. } => outcome.number("served_s"),
            Metric::CancelCpu | Metric::IdleCpu => outcome.number("cpu_ns"),
            Metric::AbandonCpu => outcome.number("cpu_per_waiter_ns"),
        }
    }

    fn cell(self, outcome: Option<&Outcome>) -> String {
        let Some(outcome) = outcome else {
            return "(not run)".to_owned();
        };
        if let Outcome::Failed(why) = outcome {
            return format!("error: {why}");
        }
        let value = self.value(outcome);
        let n = |key: &str| outcome.number(key).unwrap_or(f64::NAN);
        match (self, value) {
            (Metric::Share { .. }, Some(share)) => {
                format!("{share:.4} ({:.0} tokens)", n("tokens"))
            }
            (Metric::CpuPerToken { .. }, Some(ns)) => {
                format!("{ns:.0} ns ({:.2} cores)", n("cpu_cores"))
            }
            (Metric::MemoryPerWaiter { .. }, Some(bytes)) => format!("{bytes:.0} B"),
            (Metric::PeakRss { .. }, Some(bytes)) => format!("{:.1} MiB", bytes / MIB),
            (Metric::DrainCpu { .. } | Metric::AbandonCpu, Some(ns)) => {
                format!("{:.2} µs", ns / 1_000.0)
            }
            (Metric::DrainCpu { .. }, None) if outcome.timed_out() => format!(
                "does not finish ({:.0} of {:.0} served in {} s)",
                n("served_before_limit"),
                n("waiters"),
                LIMIT.as_secs()
            ),
            (Metric::FairnessServed, Some(secs)) => format!(
                "{secs:.3} s, {:.0} small first ({} time)",
                n("small_before"),
                outcome
                    .fields()
                    .and_then(|f| f.get("clock"))
                    .map_or("?", |c| c)
            ),
            (Metric::FairnessServed, None) if outcome.number("starved_s").is_some() => format!(
                "starved (not in {:.0} s; {:.0} small served; {} time)",
                n("starved_s"),
                n("small_before"),
                outcome
                    .fields()
                    .and_then(|f| f.get("clock"))
                    .map_or("?", |c| c)
            ),
            (Metric::CancelServed { .. }, Some(secs)) => format!(
                "{secs:.3} s ({:.0} gave up, {:.0} served)",
                n("gave_up"),
                n("granted")
            ),
            (Metric::CancelServed { .. }, None) if outcome.number("not_served_s").is_some() => {
                format!("not served in {:.0} s", n("not_served_s"))
            }
            (Metric::CancelCpu | Metric::IdleCpu, Some(ns)) => format!("{:.2} ms", ns / 1e6),
            (_, None) if outcome.timed_out() => {
                format!("does not finish (timed out after {} s)", LIMIT.as_secs())
            }
            (_, _) => "(missing)".to_owned(),
        }
    }

    /// Whether our figure meets the target: "yes", "no" or "—" (no target or no figure).
    fn verdict(self, results: &Results) -> &'static str {
        let value = |krate| {
            results
                .get(&(self.scenario(), krate))
                .and_then(|outcome| self.value(outcome))
        };
        let Some(ours) = value(Crate::Ours) else {
            return "—";
        };
        let peers = [value(Crate::Governor), value(Crate::Leaky)];
        let meets = match self {
            Metric::Share { at_least, .. } => ours >= at_least,
            Metric::CpuPerToken { scenario } if scenario != "precision-1k" => {
                match value(Crate::Leaky) {
                    Some(leaky) => ours <= leaky,
                    None => return "—",
                }
            }
            Metric::MemoryPerWaiter { scenario } | Metric::DrainCpu { scenario }
                if scenario != "waiters" =>
            {
                let at_100k = results
                    .get(&("waiters", Crate::Ours))
                    .and_then(|outcome| self.value(outcome));
                match at_100k {
                    Some(at_100k) => ours <= 1.25 * at_100k,
                    None => return "—",
                }
            }
            Metric::MemoryPerWaiter { .. } => ours < 584.0,
            Metric::DrainCpu { .. } => ours < 2_200.0,
            Metric::FairnessServed => {
                let small_first = results
                    .get(&(self.scenario(), Crate::Ours))
                    .and_then(|o| o.number("small_before"));
                small_first == Some(0.0) && (ours - 1.0).abs() < 0.01
            }
            Metric::CancelServed { .. } => (ours - 1.0).abs() < 0.01,
            Metric::CancelCpu | Metric::AbandonCpu => {
                peers.iter().flatten().all(|&peer| ours <= peer)
            }
            Metric::IdleCpu => ours < 5e6,
            Metric::CpuPerToken { .. } | Metric::PeakRss { .. } => return "—",
        };
        if meets {
            "yes"
        } else {
            "no"
        }
    }
}

/// The main table, after a blank line; nothing when none of its scenarios ran.
fn print_table(results: &Results) {
    let ran = |scenario| {
        Crate::ALL
            .iter()
            .any(|&krate| results.contains_key(&(scenario, krate)))
    };
    if !METRICS.iter().any(|(metric, _, _)| ran(metric.scenario())) {
        return;
    }
    let titles: Vec<&str> = Crate::ALL.iter().map(|krate| krate.title()).collect();
    println!();
    println!(
        "| Scenario | {} | what we want | ours meets it |",
        titles.join(" | ")
    );
    println!("|---|{}---|---|", "---|".repeat(titles.len()));
    for (metric, label, want) in METRICS {
        let scenario = metric.scenario();
        if !ran(scenario) {
            continue;
        }
        let cells: Vec<String> = Crate::ALL
            .iter()
            .map(|&krate| metric.cell(results.get(&(scenario, krate))))
            .collect();
        println!(
            "| {label} | {} | {} | {} | {} | {want} | {} |",
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            metric.verdict(results)
        );
    }
}

/// The crawler's table, after a blank line, if it ran: the share of the ideal rate and
/// the time taken, for each composite and order.
fn print_crawler_table(results: &Results) {
    let Some(outcome) = results.get(&(CRAWLER, Crate::Ours)) else {
        return;
    };
    let cell = |composite, order| {
        if let Outcome::Failed(why) = outcome {
            return format!("error: {why}");
        }
        let key = crawl_key(composite, order);
        match (
            outcome.number(&format!("{key}_share")),
            outcome.number(&format!("{key}_s")),
        ) {
            (Some(share), Some(secs)) => format!("{share:.3} ({secs:.3} s)"),
            _ if outcome.timed_out() => {
                format!("does not finish (timed out after {} s)", LIMIT.as_secs())
            }
            _ => "(missing)".to_owned(),
        }
    };
    let ideal_s = crawl_ideal().as_secs_f64();
    println!();
    println!(
        "| Crawler: {} URLs on {CRAWL_HOSTS} hosts, {CRAWL_HOST_RATE}/s per host, \
         {CRAWL_GLOBAL_RATE}/s overall: share of the ideal rate ({ideal_s:.1} s) | \
         `all` (old) | `all_in_turn` (new) | what we want | `all_in_turn` meets it |",
        CRAWL_HOSTS * CRAWL_URLS_PER_HOST
    );
    println!("|---|---|---|---|---|");
    for order in CrawlOrder::BOTH {
        let in_turn = outcome.number(&format!("{}_share", crawl_key(Composite::InTurn, order)));
        let verdict = match in_turn {
            Some(share) if share >= CRAWL_AT_LEAST => "yes",
            Some(_) => "no",
            None => "—",
        };
        println!(
            "| URLs {} | {} | {} | `all_in_turn` ≥ {CRAWL_AT_LEAST} | {verdict} |",
            order.name(),
            cell(Composite::All, order),
            cell(Composite::InTurn, order),
        );
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".to_owned())
}

/// Where the charts are written: `docs/charts/` in the crate.
fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs")
        .join("charts")
}

/// Draws the charts whose scenarios ran, from the grant instants their children reported.
fn draw_charts(results: &Results) {
    let dir = chart_dir();
    let wrote = |path: &Path, drawn: Result<(), String>| match drawn {
        Ok(()) => eprintln!("chart: wrote {}", path.display()),
        Err(error) => eprintln!("chart: could not draw {}: {error}", path.display()),
    };
    let precision: Vec<(Crate, &Outcome, &[u64])> = CHART_PRECISION_CRATES
        .iter()
        .filter_map(|&krate| {
            let outcome = results.get(&(CHART_PRECISION, krate))?;
            Some((krate, outcome, outcome.instants("grants")?))
        })
        .collect();
    let fairness: Vec<(Crate, &Outcome)> = Crate::ALL
        .iter()
        .filter_map(|&krate| Some((krate, results.get(&("fairness", krate))?)))
        .filter(|(_, outcome)| outcome.instants("small").is_some())
        .collect();
    if (precision.is_empty() && fairness.is_empty()) || std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    if !precision.is_empty() {
        let lines: Vec<charts::Grants> = precision
            .iter()
            .map(|&(krate, outcome, instants_us)| charts::Grants {
                label: format!(
                    "{}: {} tokens, {:.3} of the rate",
                    krate.title(),
                    instants_us.len(),
                    outcome.number("share").unwrap_or(f64::NAN)
                ),
                color: krate.color(),
                instants_us,
            })
            .collect();
        let path = dir.join("precision_1k.svg");
        let title = format!(
            "{PRECISION_TASKS} tasks loop take(1) at 1,000/s, burst 1, starting empty: \
             tokens granted over time"
        );
        let drawn = charts::precision(
            &path,
            &title,
            1_000,
            "ideal: 1,000 tokens/s × t",
            PRECISION_RUN.as_secs_f64(),
            &lines,
        );
        wrote(&path, drawn);
    }
    if !fairness.is_empty() {
        let rows: Vec<charts::FairnessRow> = fairness
            .iter()
            .map(|&(krate, outcome)| {
                let big_us = outcome.instants("big").and_then(|big| big.first().copied());
                let clock = outcome
                    .fields()
                    .and_then(|f| f.get("clock"))
                    .map_or("?", |c| c);
                let small_before = outcome.number("small_before").unwrap_or(f64::NAN);
                let note = match outcome.number("served_s") {
                    Some(served) => format!(
                        "take(10) at {served:.3} s, after {small_before:.0} take(1) ({clock} time)"
                    ),
                    None => format!(
                        "take(10) not served in {} s: starved ({clock} time)",
                        FAIRNESS_LIMIT.as_secs()
                    ),
                };
                charts::FairnessRow {
                    label: krate.title(),
                    color: krate.color(),
                    small_us: outcome.instants("small").unwrap_or_default(),
                    big_us,
                    note,
                }
            })
            .collect();
        let path = dir.join("fairness.svg");
        let title = format!(
            "One take(10) queued first, then {FAIRNESS_SMALL_TASKS} tasks loop take(1): \
             {FAIRNESS_RATE}/s, burst {FAIRNESS_BIG}, starting empty"
        );
        let fifo_s = f64::from(FAIRNESS_BIG) / FAIRNESS_RATE as f64;
        let drawn = charts::fairness(&path, &title, FAIRNESS_LIMIT.as_secs_f64(), fifo_s, &rows);
        wrote(&path, drawn);
    }
}

fn parent(filters: &[String]) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(error) => {
            eprintln!("cannot find this executable: {error}");
            return ExitCode::FAILURE;
        }
    };
    let (clk_tck, asked) = getconf_clk_tck();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load_before = load_average();
    // A filter that names a crate keeps that crate's runs; the others pick scenarios.
    let (crate_filters, filters): (Vec<&String>, Vec<&String>) = filters
        .iter()
        .partition(|f| Crate::parse(f.as_str()).is_some());
    let runs: Vec<(&'static str, Crate)> = SCENARIOS
        .iter()
        .filter(|(name, _, _)| {
            let charted = [CHART_PRECISION, "fairness"].contains(name);
            filters.is_empty()
                || filters
                    .iter()
                    .any(|f| name.contains(f.as_str()) || (*f == CHARTS_ONLY && charted))
        })
        .flat_map(|&(name, _, crates)| crates.iter().map(move |&krate| (name, krate)))
        .filter(|&(_, krate)| {
            crate_filters.is_empty() || crate_filters.iter().any(|f| *f == krate.name())
        })
        .collect();
    if runs.is_empty() {
        eprintln!("no scenario matches {filters:?}");
        return ExitCode::FAILURE;
    }
    eprintln!(
        "scenarios: {} runs, one process each; {cores} CPUs, load average {load_before}",
        runs.len()
    );
    let total = Instant::now();
    let mut results = Results::new();
    for (i, &(scenario, krate)) in runs.iter().enumerate() {
        eprintln!("[{}/{}] {scenario} / {}", i + 1, runs.len(), krate.name());
        let started = Instant::now();
        let outcome = run_child(&exe, scenario, krate, clk_tck);
        let note = match &outcome {
            Outcome::Done(..) if outcome.timed_out() => {
                format!("timed out after {} s", LIMIT.as_secs())
            }
            Outcome::Done(..) => "ok".to_owned(),
            Outcome::Failed(why) => why.clone(),
        };
        eprintln!("    {note} in {:.1} s", started.elapsed().as_secs_f64());
        results.insert((scenario, krate), outcome);
    }
    let elapsed = total.elapsed();

    print_table(&results);
    print_crawler_table(&results);
    draw_charts(&results);
    println!();
    println!(
        "{} runs in {:.1} s on {cores} CPUs (load average {load_before} before, {} after). \
         CPU: schedstat summed over threads (CLK_TCK {clk_tck}{} for the cross-check). \
         Precision runs: 8 tasks, multi-thread runtime with 2 workers, real time. \
         Waiters: paused time (governor runs in real time regardless). \
         Fairness: paused time for ours, leaky-bucket and governor on tokio's clock, real time \
         for governor. \
         Cancellation: real time for all; abandon-1m: paused time. \
         Idle buckets: real time, multi-thread runtime. Crawler: ours only, real time, \
         current-thread runtime, fresh limiters for each crawl. leaky-bucket: refill r/gcd(r,1000) every \
         1000/gcd(r,1000) ms, max = burst, fair. governor on tokio's clock: governor's \
         limiter reading tokio's clock, waiting on tokio's timer until the instant it names; \
         a baseline, not counted among the peers in the last column.",
        runs.len(),
        elapsed.as_secs_f64(),
        load_average(),
        if asked { " from getconf" } else { ", assumed" },
    );
    eprintln!("total: {:.1} s", elapsed.as_secs_f64());
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with("--"))
        .collect();
    match args.as_slice() {
        [run, scenario, krate] if run == "run" => child(scenario, krate),
        filters => parent(filters),
    }
}
