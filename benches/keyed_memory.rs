//! Memory per key for a million keys: `Keyed<u64, TokenBucket>` beside governor's
//! `DefaultKeyedRateLimiter<u64>` (issue 5), as it ships and on tokio's clock, and memory
//! returning once keys go idle.
//!
//! # Running
//!
//! ```text
//! cargo bench --bench keyed_memory
//! ```
//!
//! Each case runs in a process of its own (this program starts itself again), so that
//! memory one case freed but the allocator kept does not count in the next. Two figures
//! per case:
//!
//! - *heap*: bytes asked of the allocator and not yet freed, counted by a global allocator
//!   that wraps the system's. Exact, but blind to the allocator's own overhead per block
//!   (with glibc, 8 bytes and rounding up to 16).
//! - *RSS*: the growth of the process's resident memory (`VmRSS` in `/proc/self/status`),
//!   which includes that overhead; it is what the machine pays, and it is noisier.
//!
//! # The cases
//!
//! - `token-bucket`, `fixed-window`, `sliding-log`, `governor`, `governor on tokio's
//!   clock`: each holds 1,000,000 keys, each used once. The last is governor's keyed
//!   limiter (the same `DashMap` of GCRA words) reading tokio's clock, as ours must (see
//!   `support/governor_on_tokio.rs`), the baseline of `benches/keyed.rs`. Our buckets (100,000 tokens, one more an hour) and fixed windows fit
//!   one word, so each key is held compact (see `Keyed`'s docs, "What a key costs"); a
//!   sliding log has no compact form. Buckets gain one token an hour and windows last an
//!   hour, so none is idle and every key is held.
//! - `token-bucket, through acquire`: the same, each key used once by `acquire`, which is
//!   served on the key's word when the permits are there: no whole bucket is made.
//! - `token-bucket, past one word`: the same with buckets of `u32::MAX` tokens at one an
//!   hour, worth more units than a word holds: each key is held as a whole bucket.
//! - `token-bucket, one bucket`: what one `TokenBucket` costs alone (the average of 10,000
//!   made with `KeyTemplate::fresh`), to see what a key's share is made of.
//! - `token-bucket, idle after 1 ms`, `governor, idle after 1 ms`: 1,000,000 keys, each used
//!   once, whose limiters are back at their idle state 1 ms later. Ours forgets them as new
//!   keys come (automatic sweeps); governor holds them all until told. Then, 2 ms after the
//!   last key, `retain_recent` (and governor's `shrink_to_fit`): what is left.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};
use std::time::Duration;

use governor::{DefaultKeyedRateLimiter, Quota};
use token_bucket::{FixedWindow, KeyTemplate, Keyed, Rate, SlidingLog, TokenBucket};

#[path = "support/governor_on_tokio.rs"]
mod governor_on_tokio;
#[path = "support/process.rs"]
mod process;

/// Counts the bytes allocated and not yet freed, and the allocations made.
struct CountingAllocator;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

fn signed(size: usize) -> isize {
    isize::try_from(size).unwrap_or(isize::MAX)
}

unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(signed(layout.size()), Ordering::Relaxed);
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwards the caller's layout unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(signed(layout.size()), Ordering::Relaxed);
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(signed(new_size) - signed(layout.size()), Ordering::Relaxed);
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the pointer came from this allocator (so from `System`) with `layout`.
        unsafe { System.realloc(pointer, layout, new_size) }
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(signed(layout.size()), Ordering::Relaxed);
        // SAFETY: the pointer came from this allocator (so from `System`) with `layout`.
        unsafe { System.dealloc(pointer, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

const KEYS: u64 = 1_000_000;
const CASE_VARIABLE: &str = "KEYED_MEMORY_CASE";
const CASES: [&str; 10] = [
    "token-bucket",
    "token-bucket, through acquire",
    "token-bucket, past one word",
    "fixed-window",
    "sliding-log",
    "governor",
    "governor on tokio's clock",
    "token-bucket, one bucket",
    "token-bucket, idle after 1 ms",
    "governor, idle after 1 ms",
];

/// What the process holds now.
#[derive(Clone, Copy)]
struct Usage {
    heap: isize,
    allocations: usize,
    rss: isize,
}

fn usage() -> Usage {
    Usage {
        heap: LIVE_BYTES.load(Ordering::Relaxed),
        allocations: ALLOCATIONS.load(Ordering::Relaxed),
        rss: isize::try_from(process::status_bytes("VmRSS")).unwrap_or(isize::MAX),
    }
}

/// Prints what was added since `before`, per item.
fn report(case: &str, what: &str, before: Usage, items: u64) {
    let now = usage();
    let items_signed = isize::try_from(items).unwrap_or(isize::MAX).max(1);
    let allocations = (now.allocations - before.allocations) as f64 / items as f64;
    println!(
        "{case:<32} {what:<34} heap {:>6} B/key  RSS {:>6} B/key  {allocations:>5.2} allocations/key  (heap {:>6.1} MiB total)",
        (now.heap - before.heap) / items_signed,
        (now.rss - before.rss) / items_signed,
        (now.heap - before.heap) as f64 / (1024.0 * 1024.0),
    );
}

/// Prints what is still held beyond `before`, in total.
fn report_left(case: &str, what: &str, before: Usage, keys: usize) {
    let now = usage();
    println!(
        "{case:<32} {what:<34} {keys:>7} keys held, heap {:>8.1} KiB more than before, RSS {:>8.1} MiB more",
        (now.heap - before.heap) as f64 / 1024.0,
        (now.rss - before.rss) as f64 / (1024.0 * 1024.0),
    );
}

/// 100,000 tokens, one more an hour: never idle within a run, and held compact.
fn busy_bucket() -> TokenBucket {
    TokenBucket::new(Rate::per_hour(1), 100_000).expect("a valid configuration")
}

/// `u32::MAX` tokens at one an hour: 1.5 × 10^22 units full, past what one word holds.
fn wide_bucket() -> TokenBucket {
    TokenBucket::new(Rate::per_hour(1), u64::from(u32::MAX)).expect("a valid configuration")
}

/// One token, refilled in 1 ms: idle 1 ms after it is used.
fn quick_bucket() -> TokenBucket {
    TokenBucket::new(Rate::every(Duration::from_millis(1)), 1).expect("a valid configuration")
}

/// 1,000,000 keys, each used once by `use_key` and none idle: what each costs while
/// held. `held` counts the keys held.
fn hold_a_million(case: &str, use_key: impl Fn(u64), held: impl Fn() -> usize) {
    let before = usage();
    for key in 0..KEYS {
        use_key(key);
    }
    assert_eq!(held(), KEYS as usize);
    report(case, "1M keys held", before, KEYS);
}

/// `hold_a_million` with ours.
fn hold_a_million_keys<L: KeyTemplate>(case: &str, template: L) {
    let keyed: Keyed<u64, L> = Keyed::new(template);
    hold_a_million(
        case,
        |key| keyed.try_acquire(&key, 1).expect("a new key is admitted"),
        || keyed.len(),
    );
}

fn run(case: &str) {
    match case {
        "token-bucket" => hold_a_million_keys(case, busy_bucket()),
        "token-bucket, through acquire" => {
            let keyed: Keyed<u64, TokenBucket> = Keyed::new(busy_bucket());
            hold_a_million(
                case,
                |key| {
                    let acquire = keyed.acquire(&key, 1);
                    // Served at its first poll, on the key's word: no runtime needed.
                    futures::executor::block_on(acquire).expect("a new key's bucket is full");
                },
                || keyed.len(),
            );
        }
        "token-bucket, past one word" => hold_a_million_keys(case, wide_bucket()),
        // Windows of an hour, so that no key is idle while they are counted.
        "fixed-window" => hold_a_million_keys(
            case,
            FixedWindow::new(100, Duration::from_secs(3_600)).expect("a valid configuration"),
        ),
        "sliding-log" => hold_a_million_keys(
            case,
            SlidingLog::new(100, Duration::from_secs(3_600)).expect("a valid configuration"),
        ),
        "governor" => {
            let limiter: DefaultKeyedRateLimiter<u64> =
                governor::RateLimiter::keyed(Quota::per_second(NonZeroU32::MAX));
            hold_a_million(
                case,
                |key| limiter.check_key(&key).expect("an ample quota admits"),
                || limiter.len(),
            );
        }
        "governor on tokio's clock" => {
            let limiter = governor_on_tokio::keyed::<u64>(Quota::per_second(NonZeroU32::MAX));
            hold_a_million(
                case,
                |key| limiter.check_key(&key).expect("an ample quota admits"),
                || limiter.len(),
            );
        }
        "token-bucket, one bucket" => {
            const BUCKETS: u64 = 10_000;
            let template = busy_bucket();
            let mut buckets = Vec::with_capacity(BUCKETS as usize);
            let before = usage();
            for _ in 0..BUCKETS {
                buckets.push(template.fresh());
            }
            report(case, "TokenBucket::fresh()", before, BUCKETS);
            black_box(buckets);
        }
        "token-bucket, idle after 1 ms" => {
            let keyed: Keyed<u64, TokenBucket> = Keyed::new(quick_bucket());
            let before = usage();
            let mut most_held = 0;
            for key in 0..KEYS {
                keyed
                    .try_acquire(&key, 1)
                    .expect("a new key's bucket is full");
                most_held = most_held.max(keyed.len());
            }
            println!("{case:<32} {:<34} {most_held:>7} keys", "most held at once");
            report_left(case, "after the 1M keys", before, keyed.len());
            std::thread::sleep(Duration::from_millis(2));
            keyed.retain_recent();
            report_left(case, "after retain_recent", before, keyed.len());
        }
        "governor, idle after 1 ms" => {
            let quota = Quota::with_period(Duration::from_millis(1)).expect("not zero");
            let limiter: DefaultKeyedRateLimiter<u64> = governor::RateLimiter::keyed(quota);
            let before = usage();
            for key in 0..KEYS {
                limiter.check_key(&key).expect("a new key is admitted");
            }
            report_left(case, "after the 1M keys", before, limiter.len());
            std::thread::sleep(Duration::from_millis(2));
            limiter.retain_recent();
            limiter.shrink_to_fit();
            report_left(
                case,
                "after retain_recent, shrink_to_fit",
                before,
                limiter.len(),
            );
        }
        other => panic!("no case {other:?}; the cases are {CASES:?}"),
    }
}

fn main() -> ExitCode {
    if let Ok(case) = std::env::var(CASE_VARIABLE) {
        run(&case);
        return ExitCode::SUCCESS;
    }
    let Ok(program) = std::env::current_exe() else {
        eprintln!("cannot find this program to run its cases");
        return ExitCode::FAILURE;
    };
    for case in CASES {
        let status = Command::new(&program).env(CASE_VARIABLE, case).status();
        if !matches!(status, Ok(status) if status.success()) {
            eprintln!("case {case:?} failed: {status:?}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
