//! `soak`: 10,000 tasks on a multi-thread runtime hammer one bucket for a minute, with
//! random cancellations, then the books are checked.
//!
//! ```text
//! cargo run --release --example soak                  # 10,000 tasks, 60 s
//! cargo run --release --example soak -- --seconds 10  # shorter
//! cargo run --example soak -- --help
//! ```
//!
//! Each task loops over a random mix of `take`, `take_timeout`, `take` dropped by
//! `tokio::time::timeout`, `wait_timeout` and `try_take`, for 1 to 4 tokens. A supervisor
//! aborts a random task every millisecond (whatever it was waiting for, or holding, at
//! that moment) and spawns a replacement, so grants are regularly on their way to a task
//! that is gone.
//!
//! It checks, and exits with status 1 if any check fails:
//! - **Nothing invented.** While every task still runs, `taken + available` is at most
//!   what accrued since the bucket was made (it starts empty).
//! - **Nothing lost.** If demand saturated the bucket (someone was queued at every
//!   millisecond's sample, so the capacity had no reason to drop a token), `taken +
//!   available` is also at least what accrued: equal, within the few tokens the
//!   nanoseconds between two clock readings allow. A machine too slow to saturate the
//!   bucket (a debug build, say) skips this check and says so.
//! - **Every grant counted was seen.** Once all tasks are stopped, the bucket's `taken`
//!   equals the tokens that callers saw granted: grants sent to aborted tasks went back.
//! - **Nobody left behind.** The queue is empty at the end.
//! - **No growth.** Resident memory at the end is within 10 % (plus 4 MiB) of what it was
//!   a fifth of the way in.
//!
//! It prints throughput (tokens granted and calls completed per second), resident memory
//! over time and its peak.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use token_bucket::{Rate, TokenBucket};
use tokio::task::JoinHandle;
use tokio::time::Instant;

// Memory readings shared with the benchmarks, which measure the same way.
#[path = "../benches/support/process.rs"]
mod process;

const USAGE: &str = "\
usage: soak [--seconds N] [--tasks N] [--rate PER_SECOND]

  --seconds N    how long to run (default 60)
  --tasks N      how many tasks hammer the bucket (default 10000)
  --rate N       tokens per second; the capacity is a thousandth of it (default 1000000)
";

struct Options {
    seconds: u64,
    tasks: u64,
    rate: u64,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Option<Options>, String> {
    let mut options = Options {
        seconds: 60,
        tasks: 10_000,
        rate: 1_000_000,
    };
    while let Some(flag) = args.next() {
        let target = match flag.as_str() {
            "--seconds" => &mut options.seconds,
            "--tasks" => &mut options.tasks,
            "--rate" => &mut options.rate,
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument {other:?}")),
        };
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        *target = match value.parse() {
            Ok(number) if number > 0 => number,
            _ => {
                return Err(format!(
                    "{flag} needs a whole number above 0, not {value:?}"
                ))
            }
        };
    }
    if options.rate < 1_000 {
        return Err(format!(
            "--rate must be at least 1000 (the capacity is a thousandth of it), not {}",
            options.rate
        ));
    }
    Ok(Some(options))
}

/// What the tasks saw, shared with `main`.
#[derive(Default)]
struct Tally {
    /// Tokens callers saw granted by `take`, `take_timeout` and `try_take`.
    granted: AtomicU64,
    /// Calls that completed, whatever their result.
    calls: AtomicU64,
}

/// A xorshift generator: the soak needs variety, not statistical quality.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

async fn hammer(bucket: TokenBucket, tally: Arc<Tally>, seed: u64) {
    let mut random = Random(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    loop {
        let roll = random.next();
        let tokens = 1 + roll % 4;
        let patience = Duration::from_micros(roll % 20_000);
        let granted = match (roll >> 8) % 5 {
            0 => bucket.take(tokens).await.is_ok(),
            1 => bucket.take_timeout(tokens, patience).await.is_ok(),
            // Dropped from outside while queued, or with its grant on the way.
            2 => matches!(
                tokio::time::timeout(patience, bucket.take(tokens)).await,
                Ok(Ok(()))
            ),
            3 => {
                // Waits without taking: counts as a call, never as a grant.
                let _ = bucket.wait_timeout(tokens, patience).await;
                false
            }
            _ => {
                let granted = bucket.try_take(tokens).is_ok();
                if !granted {
                    // Refused: give the others the thread rather than spin.
                    tokio::task::yield_now().await;
                }
                granted
            }
        };
        // No await between the result and the count, so an abort cannot fall between.
        if granted {
            tally.granted.fetch_add(tokens, Ordering::Relaxed);
        }
        tally.calls.fetch_add(1, Ordering::Relaxed);
    }
}

/// `taken + available`, read between two clock readings, so that what accrued by the
/// bucket's own reading is bounded on both sides.
struct Books {
    before: Instant,
    after: Instant,
    balance: u64,
    taken: u64,
}

impl Books {
    fn read(bucket: &TokenBucket) -> Books {
        let before = Instant::now();
        let stats = bucket.stats();
        Books {
            before,
            after: Instant::now(),
            balance: stats.taken + stats.available,
            taken: stats.taken,
        }
    }
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// Tokens accrued at `rate` per second over `elapsed`, rounded down.
fn accrued(rate: u64, elapsed: Duration) -> u64 {
    u64::try_from(u128::from(rate) * elapsed.as_nanos() / 1_000_000_000).unwrap_or(u64::MAX)
}

fn main() -> ExitCode {
    let options = match parse_args(std::env::args().skip(1)) {
        Ok(Some(options)) => options,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            eprintln!("soak: {error}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a multi-thread runtime");
    let failures = runtime.block_on(soak(options));
    if failures.is_empty() {
        println!("soak: all checks passed");
        ExitCode::SUCCESS
    } else {
        for failure in failures {
            eprintln!("soak: FAILED: {failure}");
        }
        ExitCode::from(1)
    }
}

async fn soak(options: Options) -> Vec<String> {
    let Options {
        seconds,
        tasks,
        rate,
    } = options;
    let capacity = rate / 1_000;
    let mut failures = Vec::new();
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "soak: {tasks} tasks on {workers} worker threads, one bucket at {rate}/s \
         (capacity {capacity}, starting empty), for {seconds} s"
    );

    let before_creation = Instant::now();
    let bucket = TokenBucket::builder()
        .rate(Rate::per_second(rate))
        .capacity(capacity)
        .initial(0)
        .build()
        .expect("a valid bucket");
    let created = Instant::now();
    let tally = Arc::new(Tally::default());
    let spawn = |seed: u64| tokio::spawn(hammer(bucket.clone(), Arc::clone(&tally), seed));
    let mut handles: Vec<JoinHandle<()>> = (0..tasks).map(spawn).collect();
    // Until every task has queued, demand does not saturate the bucket and its capacity
    // rightly drops what accrues: the books that must balance open once it is saturated.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let opening = Books::read(&bucket);

    let deadline = created + Duration::from_secs(seconds);
    let mut abort_tick = tokio::time::interval(Duration::from_millis(1));
    let mut report_at = created + Duration::from_secs(1);
    let mut random = Random(0x2545_F491_4F6C_DD1D);
    let mut aborted = 0u64;
    let mut next_seed = tasks;
    let mut baseline_rss = None;
    let mut always_queued = true;
    let (mut last_granted, mut last_calls, mut last_report) = (0, 0, opening.after);
    while Instant::now() < deadline {
        abort_tick.tick().await;
        let victim = usize::try_from(random.next() % tasks).expect("a task index");
        handles[victim].abort();
        handles[victim] = spawn(next_seed);
        next_seed += 1;
        aborted += 1;
        always_queued &= bucket.queued() > 0;
        let now = Instant::now();
        if now >= report_at {
            let (granted, calls) = (
                tally.granted.load(Ordering::Relaxed),
                tally.calls.load(Ordering::Relaxed),
            );
            let span = (now - last_report).as_secs_f64();
            let rss = process::status_kib("VmRSS");
            println!(
                "{:>4} s  {:>9.0} tokens/s  {:>9.0} calls/s  queued {:>5}  RSS {}",
                (now - created).as_secs(),
                (granted - last_granted) as f64 / span,
                (calls - last_calls) as f64 / span,
                bucket.queued(),
                mib(rss),
            );
            (last_granted, last_calls, last_report) = (granted, calls, now);
            if baseline_rss.is_none() && now - created >= Duration::from_secs(seconds) / 5 {
                baseline_rss = Some(rss);
            }
            report_at += Duration::from_secs(1);
        }
    }

    let final_rss = process::status_kib("VmRSS");
    // The books while every task still runs.
    let closing = Books::read(&bucket);
    let elapsed = closing.before - opening.after;
    println!(
        "books: taken + available was {} at {:.3} s and {} at {:.3} s",
        opening.balance,
        (opening.before - created).as_secs_f64(),
        closing.balance,
        (closing.before - created).as_secs_f64(),
    );
    // Since the bucket was made (empty): never more than accrued.
    let most = accrued(rate, closing.after - before_creation) + 1;
    if closing.balance > most {
        failures.push(format!(
            "tokens invented: taken + available = {}, but at most {most} accrued since the \
             bucket was made",
            closing.balance
        ));
    }
    // While saturated: exactly what accrued in between, within the clock readings' slack.
    let gained = closing.balance.saturating_sub(opening.balance);
    let (fewest, most) = (
        accrued(rate, closing.before - opening.after),
        accrued(rate, closing.after - opening.before) + 1,
    );
    println!("       gained {gained} while saturated; accrued between {fewest} and {most}");
    if gained > most {
        failures.push(format!(
            "tokens invented: {gained} gained while saturated, at most {most} accrued"
        ));
    }
    if !always_queued {
        println!(
            "the queue was empty at some sample (demand did not saturate the bucket, so its \
             capacity may rightly have dropped tokens): the lower bound is not checked"
        );
    } else if gained < fewest {
        failures.push(format!(
            "tokens lost: {gained} gained while saturated, at least {fewest} accrued"
        ));
    }
    let taken_while_running = closing.taken - opening.taken;

    for handle in &handles {
        handle.abort();
    }
    for handle in handles {
        let _ = handle.await;
    }
    let stats = bucket.stats();
    let granted = tally.granted.load(Ordering::Relaxed);
    let calls = tally.calls.load(Ordering::Relaxed);
    let elapsed_secs = elapsed.as_secs_f64();
    println!(
        "throughput: {:.0} tokens/s granted ({:.4} of the rate), {:.0} calls/s; \
         {aborted} tasks aborted, {} timeouts",
        taken_while_running as f64 / elapsed_secs,
        taken_while_running as f64 / (rate as f64 * elapsed_secs),
        calls as f64 / (closing.before - created).as_secs_f64(),
        stats.timed_out,
    );
    if stats.taken != granted {
        failures.push(format!(
            "the bucket counts {} tokens taken, callers saw {granted}",
            stats.taken
        ));
    }
    if stats.queued != 0 {
        failures.push(format!("{} waiters still queued at the end", stats.queued));
    }

    let peak = process::status_kib("VmHWM");
    let baseline = baseline_rss.unwrap_or(final_rss);
    println!(
        "memory: RSS {} at a fifth of the run, {} at the end of the run, peak {}",
        mib(baseline),
        mib(final_rss),
        mib(peak)
    );
    if final_rss > baseline + baseline / 10 + 4 * 1024 {
        failures.push(format!(
            "memory grew from {} to {}",
            mib(baseline),
            mib(final_rss)
        ));
    }
    failures
}
