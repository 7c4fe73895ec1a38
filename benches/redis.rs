//! Decisions per second of the Redis limiters (issue 6), with 1, 8 and 64 concurrent
//! tasks, beside the floor: a plain `INCR` + `PEXPIRE` pipeline, one round trip that
//! decides nothing atomically but costs what any one-round-trip limiter must. Then two
//! limits per request (issue 14): `RedisAll::new([bucket, window])`, one script call over
//! both keys, beside the same two limiters asked one after the other (two round trips,
//! and not all or nothing).
//!
//! # Running
//!
//! ```text
//! cargo bench --features redis --bench redis              # about 60 s
//! cargo bench --features redis --bench redis -- hot-key   # only the last table, about 10 s
//! ```
//!
//! It starts its own `redis-server` on a free loopback port (persisting nothing), then,
//! for each number of tasks and each contender in turn, runs the tasks on one shared
//! `ConnectionManager` (multiplexed, as a server would share it) for a 0.5 s warm-up and
//! 2 s of measurement, each task looping over one call on a key of its own. It prints two
//! markdown tables: decisions per second, with each limiter's share of the floor; and
//! Redis's own time per decision, from its `INFO commandstats` (reset before each run),
//! which shows what the scripts cost the server apart from the network.
//!
//! The two-limit runs print a third table: for each, decisions per second, the time each
//! task waits for one decision, and Redis's time per decision (both calls' for the pair).
//!
//! Every limiter is set so that every request is granted (a token bucket gaining a
//! thousand tokens a microsecond, windows of 2^40 and 65,536 a second): the granting path
//! writes, so it is the costlier one. Every answer is checked; a refusal or an error
//! stops the bench.
//!
//! Last, one hot key (issue 15): 4 processes × 16 tasks on one token bucket key, each task
//! looping one request for one token, through the plain limiter (`acquire`, which waits
//! out each refusal) and through a leased front per process (`take`). The processes are
//! real: the bench runs its own binary again as 4 children (`redis hot-key-process <mode>
//! <url> <start>`), each with its own runtime (2 workers), `ConnectionManager` and front.
//! The parent names a start 1.5 s ahead, in nanoseconds since the UNIX epoch, so that all
//! begin together once connected; each runs its warm-up and measurement from there, logs
//! its grants' instants on that clock (`SystemTime`, common to every process), and prints
//! them and its front's Redis calls on stdout. A child stops itself 10 s after the run's
//! end, and the parent kills one still running 5 s later. For each: decisions per second,
//! their share of the bucket's rate, Redis calls per decision (the fronts' own count when
//! leased; script runs from `INFO commandstats` when plain, as only Redis sees its retries)
//! and Redis's time per decision, and the bound: over the merged instants, the most any
//! interval of length t saw beyond `rate × t`, against the `capacity` (plain) or
//! `capacity + rate × L` (leased) allowed.
//!
//! The client, its runtime (2 workers) and redis-server share the machine's cores, so
//! the figures are of this machine and load; the ratios within one run are what to
//! compare.

// The tests' throwaway server; the bench only starts and stops it.
#[path = "../tests/common/redis_server.rs"]
#[allow(dead_code)]
mod redis_server;

use std::future::Future;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use token_bucket::redis::driver::aio::ConnectionManager;
use token_bucket::redis::driver::{self, Client};
use token_bucket::redis::{
    FailurePolicy, RedisAlgorithm, RedisAll, RedisFixedWindow, RedisLimiter, RedisOptions,
    RedisSlidingLog, RedisTokenBucket,
};
use token_bucket::Rate;

const TASKS: [usize; 3] = [1, 8, 64];
const WARM_UP: Duration = Duration::from_millis(500);
const MEASURE: Duration = Duration::from_secs(2);

/// One contender's figures at one number of tasks.
#[derive(Clone, Copy)]
struct Measured {
    /// Decisions per second, seen by the client.
    per_second: f64,
    /// Microseconds of Redis's own time per decision (its `INFO commandstats`): the
    /// commands alone, without reading and writing the network.
    redis_micros: f64,
}

/// The argument that runs only the last table, one hot key.
const HOT_KEY_ONLY: &str = "hot-key";

fn main() -> ExitCode {
    // cargo passes `--bench`.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with("--"))
        .collect();
    let hot_key_only = match args.as_slice() {
        [child, rest @ ..] if child == hot_key::CHILD => return hot_key::child(rest),
        [] => false,
        [only] if only == HOT_KEY_ONLY => true,
        other => {
            eprintln!("unknown arguments {other:?}: give none, or `{HOT_KEY_ONLY}`");
            return ExitCode::FAILURE;
        }
    };
    let server = redis_server::RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    if !hot_key_only {
        let (rows, pairs) = runtime.block_on(measure_all(&server.url()));
        print_tables(&rows, &pairs);
    }
    let hot = runtime.block_on(hot_key::measure(&server.url()));
    hot_key::print(&hot);
    ExitCode::SUCCESS
}

fn print_tables(rows: &[(usize, [Measured; 4])], pairs: &[(usize, [Measured; 2])]) {
    println!();
    println!("Decisions per second (and share of the floor):");
    println!();
    println!("| tasks | `INCR` + `PEXPIRE` pipeline (floor) | token bucket | fixed window | sliding log |");
    println!("| --- | --- | --- | --- | --- |");
    for (tasks, [floor, bucket, window, log]) in rows {
        let share = |measured: Measured| {
            format!(
                "{} ({:.2})",
                thousands(measured.per_second),
                measured.per_second / floor.per_second
            )
        };
        println!(
            "| {tasks} | {} | {} | {} | {} |",
            thousands(floor.per_second),
            share(*bucket),
            share(*window),
            share(*log)
        );
    }
    println!();
    println!("Redis's own time per decision, µs (commands only, without the network):");
    println!();
    println!("| tasks | floor | token bucket | fixed window | sliding log |");
    println!("| --- | --- | --- | --- | --- |");
    for (tasks, measured) in rows {
        let cells: Vec<String> = measured
            .iter()
            .map(|measured| format!("{:.2}", measured.redis_micros))
            .collect();
        println!("| {tasks} | {} |", cells.join(" | "));
    }
    println!();
    println!("Two limits per request, a token bucket and a fixed window, each on the task's key:");
    println!();
    println!("| tasks | two calls, one after the other: decisions/s; µs each; µs in Redis | `RedisAll::new([bucket, window])`: decisions/s; µs each; µs in Redis | `RedisAll` / two calls, decisions/s |");
    println!("| --- | --- | --- | --- |");
    for (tasks, [separate, together]) in pairs {
        let cell = |measured: Measured| {
            format!(
                "{}; {:.1}; {:.2}",
                thousands(measured.per_second),
                // Each task waits for its decisions one at a time.
                *tasks as f64 * 1e6 / measured.per_second,
                measured.redis_micros
            )
        };
        println!(
            "| {tasks} | {} | {} | {:.2} |",
            cell(*separate),
            cell(*together),
            together.per_second / separate.per_second
        );
    }
}

/// Each number of tasks with its figures: one limit per request (the floor and each
/// limiter), and two (asked one after the other, and together through `RedisAll`).
type Rows = (Vec<(usize, [Measured; 4])>, Vec<(usize, [Measured; 2])>);

async fn measure_all(url: &str) -> Rows {
    let client = Client::open(url).expect("a valid URL");
    let connection = ConnectionManager::new(client.clone())
        .await
        .expect("connect to the bench's redis-server");
    let admin = ConnectionManager::new(client)
        .await
        .expect("connect to the bench's redis-server");
    let options = RedisOptions::new(FailurePolicy::FailClosed).with_timeout(Duration::from_secs(5));
    let bucket = RedisTokenBucket::new(
        connection.clone(),
        Rate::per_second(1_000_000_000),
        1_000_000,
        options.clone(),
    )
    .expect("bucket settings");
    let second = Duration::from_secs(1);
    let window = RedisFixedWindow::new(connection.clone(), 1 << 40, second, options.clone())
        .expect("window settings");
    let log = RedisSlidingLog::new(
        connection.clone(),
        RedisSlidingLog::MAX_LIMIT,
        second,
        options,
    )
    .expect("log settings");

    let mut rows = Vec::new();
    for tasks in TASKS {
        let floor_connection = connection.clone();
        let floor = run("floor", tasks, &admin, &["incr", "pexpire"], move |task| {
            let mut connection = floor_connection.clone();
            async move {
                let key = format!("floor:{task}");
                let (_count,): (u64,) = driver::pipe()
                    .cmd("INCR")
                    .arg(&key)
                    .cmd("PEXPIRE")
                    .arg(&key)
                    .arg(1000)
                    .ignore()
                    .query_async(&mut connection)
                    .await
                    .expect("INCR + PEXPIRE");
            }
        })
        .await;
        let bucket = run_limiter("token bucket", tasks, &admin, &bucket).await;
        let window = run_limiter("fixed window", tasks, &admin, &window).await;
        let log = run_limiter("sliding log", tasks, &admin, &log).await;
        rows.push((tasks, [floor, bucket, window, log]));
    }
    let mut pairs = Vec::new();
    for tasks in TASKS {
        let (first, second) = (bucket.clone(), window.clone());
        let separate = run("two calls", tasks, &admin, &["evalsha"], move |task| {
            let (first, second) = (first.clone(), second.clone());
            async move {
                let key = format!("user-{task}");
                first.try_acquire(&key, 1).await.expect("granted");
                second.try_acquire(&key, 1).await.expect("granted");
            }
        })
        .await;
        let (first, second) = (bucket.clone(), window.clone());
        let together = run("all", tasks, &admin, &["evalsha"], move |task| {
            let key = format!("user-{task}");
            let limits = RedisAll::new([first.member(&key), second.member(&key)]);
            async move { limits.try_acquire(1).await.expect("granted") }
        })
        .await;
        pairs.push((tasks, [separate, together]));
    }
    (rows, pairs)
}

async fn run_limiter<A: RedisAlgorithm>(
    name: &str,
    tasks: usize,
    admin: &ConnectionManager,
    limiter: &RedisLimiter<A>,
) -> Measured {
    let limiter = limiter.clone();
    run(name, tasks, admin, &["evalsha"], move |task| {
        let limiter = limiter.clone();
        async move {
            limiter
                .try_acquire(&format!("user-{task}"), 1)
                .await
                .expect("every request is granted");
        }
    })
    .await
}

/// Runs `tasks` tasks, each looping `call(task)`, through the warm-up and the
/// measurement. Redis's time is that of `commands` (as `INFO commandstats` names them),
/// over every call made, warm-up included.
async fn run<F, C>(
    name: &str,
    tasks: usize,
    admin: &ConnectionManager,
    commands: &[&str],
    call: C,
) -> Measured
where
    C: Fn(usize) -> F + Send + Sync + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    let mut admin = admin.clone();
    driver::cmd("CONFIG")
        .arg("RESETSTAT")
        .exec_async(&mut admin)
        .await
        .expect("CONFIG RESETSTAT");
    let stop = Arc::new(AtomicBool::new(false));
    let counting = Arc::new(AtomicBool::new(false));
    let (counted, all) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let call = Arc::new(call);
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let (stop, counting, call) = (stop.clone(), counting.clone(), call.clone());
            let (counted, all) = (counted.clone(), all.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    call(task).await;
                    all.fetch_add(1, Ordering::Relaxed);
                    if counting.load(Ordering::Relaxed) {
                        counted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(WARM_UP).await;
    counting.store(true, Ordering::Relaxed);
    let start = Instant::now();
    tokio::time::sleep(MEASURE).await;
    let done = counted.load(Ordering::Relaxed);
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    for handle in handles {
        handle.await.expect("a bench task panicked");
    }
    let stats: String = driver::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut admin)
        .await
        .expect("INFO commandstats");
    let redis_micros = command_micros(&stats, commands) / all.load(Ordering::Relaxed) as f64;
    let per_second = done as f64 / elapsed.as_secs_f64();
    eprintln!(
        "{name:>12}, {tasks:>2} tasks: {per_second:>9.0} decisions/s, {redis_micros:.2} µs in Redis each"
    );
    Measured {
        per_second,
        redis_micros,
    }
}

/// The microseconds Redis spent in `commands`, from `INFO commandstats` lines such as
/// `cmdstat_incr:calls=10,usec=12,usec_per_call=1.20,...`.
fn command_micros(stats: &str, commands: &[&str]) -> f64 {
    commands
        .iter()
        .map(|command| {
            command_field(stats, command, "usec")
                .unwrap_or_else(|| panic!("no {command} in INFO commandstats"))
        })
        .sum()
}

/// `command`'s `field` (`calls`, `usec`) in `INFO commandstats`, if it ran.
fn command_field(stats: &str, command: &str, field: &str) -> Option<f64> {
    let line = stats
        .lines()
        .find(|line| line.starts_with(&format!("cmdstat_{command}:")))?;
    let value = line
        .split([',', ':'])
        .find_map(|part| part.strip_prefix(&format!("{field}=")))
        .unwrap_or_else(|| panic!("no {field} for {command}"));
    Some(value.parse::<f64>().expect("a number"))
}

/// One hot key: the plain limiter beside leased fronts, each in `PROCESSES` real
/// processes (this binary, run again as children).
mod hot_key {
    use super::*;
    use std::process::Stdio;
    use std::time::{SystemTime, UNIX_EPOCH};
    use token_bucket::redis::LeaseOptions;

    /// The first argument that makes this binary a child: `hot-key-process <mode> <url>
    /// <start>`, `start` in nanoseconds since the UNIX epoch.
    pub const CHILD: &str = "hot-key-process";
    const PROCESSES: usize = 4;
    const TASKS: usize = 16;
    const RATE: u64 = 20_000;
    const CAPACITY: u64 = 2_000;
    const KEY: &str = "hot";
    /// How far ahead the parent sets the agreed start: time for every child to start,
    /// connect and build its limiter first, on a loaded machine too.
    const LEAD: Duration = Duration::from_millis(1500);
    /// How long past the run's end a child may take to close its front and report; then
    /// it exits by itself, and the parent kills what is left a little later.
    const GRACE: Duration = Duration::from_secs(10);

    #[derive(Clone, Copy, PartialEq)]
    enum Mode {
        Plain,
        Leased,
    }

    impl Mode {
        fn arg(self) -> &'static str {
            match self {
                Mode::Plain => "plain",
                Mode::Leased => "leased",
            }
        }

        fn parse(arg: &str) -> Option<Mode> {
            [Mode::Plain, Mode::Leased]
                .into_iter()
                .find(|mode| mode.arg() == arg)
        }
    }

    /// One way of limiting the key, measured.
    pub struct HotKey {
        name: &'static str,
        per_second: f64,
        calls_per_decision: f64,
        redis_micros: f64,
        /// The most grants any interval of length t saw, less `RATE × t`.
        excess: f64,
        allowed: f64,
    }

    /// Now, in nanoseconds since the UNIX epoch: the clock every process reads alike.
    fn unix_ns() -> u64 {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("a clock after 1970");
        u64::try_from(since.as_nanos()).expect("nanoseconds fit in u64")
    }

    fn nanos(duration: Duration) -> u64 {
        u64::try_from(duration.as_nanos()).expect("nanoseconds fit in u64")
    }

    pub async fn measure(url: &str) -> [HotKey; 2] {
        let client = Client::open(url).expect("a valid URL");
        let admin = ConnectionManager::new(client)
            .await
            .expect("connect to the bench's redis-server");
        let plain = run("plain `acquire`", Mode::Plain, url, &admin).await;
        let leased = run("leased `take`", Mode::Leased, url, &admin).await;
        [plain, leased]
    }

    /// What one child reported.
    struct Report {
        /// Its grants' instants, in nanoseconds since the UNIX epoch.
        grants: Vec<u64>,
        /// Its front's calls to Redis (leased only).
        redis_calls: Option<u64>,
        /// How long after the agreed start it was ready, if it was late.
        late_ns: u64,
    }

    /// Runs `PROCESSES` children, each with `TASKS` tasks looping on the key, from one
    /// agreed start through the warm-up and the measurement, and reads their reports.
    async fn run(name: &'static str, mode: Mode, url: &str, admin: &ConnectionManager) -> HotKey {
        let mut admin = admin.clone();
        driver::cmd("DEL")
            .arg(format!("hot:tb:{KEY}"))
            .exec_async(&mut admin)
            .await
            .expect("DEL");
        driver::cmd("CONFIG")
            .arg("RESETSTAT")
            .exec_async(&mut admin)
            .await
            .expect("CONFIG RESETSTAT");
        let exe = std::env::current_exe().expect("this bench's executable");
        let start = unix_ns() + nanos(LEAD);
        let children = (0..PROCESSES).map(|_| {
            let child = tokio::process::Command::new(&exe)
                .args([CHILD, mode.arg(), url, &start.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                // A child outliving the parent's patience is killed as it is dropped.
                .kill_on_drop(true)
                .spawn()
                .expect("start a child process");
            child.wait_with_output()
        });
        let patience = LEAD + WARM_UP + MEASURE + GRACE + Duration::from_secs(5);
        let outputs = tokio::time::timeout(patience, futures::future::join_all(children))
            .await
            .unwrap_or_else(|_| panic!("a child was still running after {patience:?}"));
        let mut reports = Vec::new();
        for output in outputs {
            let output = output.expect("a child's output");
            assert!(output.status.success(), "a child failed: {}", output.status);
            reports.push(parse(&String::from_utf8_lossy(&output.stdout)));
        }
        let latest = reports
            .iter()
            .map(|report| report.late_ns)
            .max()
            .unwrap_or(0);
        // Within the warm-up, a late child still runs through the whole measurement.
        assert!(
            latest < nanos(WARM_UP),
            "a child was ready {} ms after the agreed start: raise LEAD",
            latest / 1_000_000
        );
        if latest > 0 {
            eprintln!(
                "    a child was ready {:.1} ms after the agreed start",
                latest as f64 / 1e6
            );
        }
        let stats: String = driver::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut admin)
            .await
            .expect("INFO commandstats");
        let mut grants: Vec<u64> = reports
            .iter()
            .flat_map(|report| report.grants.iter().copied())
            .collect();
        grants.sort_unstable();
        let scripts = script_field(&stats, "calls");
        // The fronts count their own calls; the plain limiter's (its retries included)
        // only Redis sees.
        let calls = match mode {
            Mode::Plain => scripts,
            Mode::Leased => {
                let fronts: u64 = reports.iter().filter_map(|r| r.redis_calls).sum();
                eprintln!("    leased: the fronts counted {fronts} calls, Redis {scripts}");
                fronts as f64
            }
        };
        let from = start + nanos(WARM_UP);
        let to = from + nanos(MEASURE);
        let measured = grants.iter().filter(|at| (from..to).contains(at)).count();
        let per_second = measured as f64 / MEASURE.as_secs_f64();
        let excess = most_beyond_rate(&grants);
        let allowance = match mode {
            Mode::Plain => 0.0,
            Mode::Leased => RATE as f64 * LeaseOptions::DEFAULT_LIFETIME.as_secs_f64(),
        };
        let hot = HotKey {
            name,
            per_second,
            calls_per_decision: calls / grants.len() as f64,
            redis_micros: script_field(&stats, "usec") / grants.len() as f64,
            excess,
            allowed: CAPACITY as f64 + allowance,
        };
        eprintln!(
            "{name:>16}: {per_second:>7.0} decisions/s, {:.4} Redis calls each, most beyond rate × t {excess:.0} (allowed {:.0})",
            hot.calls_per_decision, hot.allowed
        );
        hot
    }

    /// A child's stdout: a `GRANTS <ns,ns,...>` line and a `RESULT key=value ...` line.
    fn parse(stdout: &str) -> Report {
        let grants = stdout
            .lines()
            .find_map(|line| line.strip_prefix("GRANTS "))
            .expect("a GRANTS line")
            .split(',')
            .filter(|ns| !ns.is_empty())
            .map(|ns| ns.parse().expect("nanoseconds"))
            .collect();
        let result = stdout
            .lines()
            .find_map(|line| line.strip_prefix("RESULT "))
            .expect("a RESULT line");
        let field = |key: &str| -> Option<u64> {
            result
                .split_whitespace()
                .find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
                .map(|value| value.parse().expect("a number"))
        };
        Report {
            grants,
            redis_calls: field("redis_calls"),
            late_ns: field("late_ns").expect("late_ns"),
        }
    }

    /// The child: `args` after [`CHILD`]. It runs its tasks from the agreed start to
    /// the end of the measurement, then prints its report on stdout.
    pub fn child(args: &[String]) -> ExitCode {
        let [mode, url, start] = args else {
            eprintln!("{CHILD} wants <mode> <url> <start>, got {args:?}");
            return ExitCode::FAILURE;
        };
        let (Some(mode), Ok(start)) = (Mode::parse(mode), start.parse::<u64>()) else {
            eprintln!("{CHILD}: bad mode or start in {args:?}");
            return ExitCode::FAILURE;
        };
        // Stops the child even if Redis or the parent leaves it hanging.
        let limit = Duration::from_nanos(start.saturating_sub(unix_ns())) + WARM_UP + MEASURE;
        std::thread::spawn(move || {
            std::thread::sleep(limit + GRACE);
            eprintln!("{CHILD}: still running {GRACE:?} after the run's end; exiting");
            std::process::exit(2);
        });
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let report = runtime.block_on(process(mode, url, start));
        let grants: Vec<String> = report.grants.iter().map(u64::to_string).collect();
        println!("GRANTS {}", grants.join(","));
        let mut result = format!("RESULT grants={} late_ns={}", grants.len(), report.late_ns);
        if let Some(calls) = report.redis_calls {
            result.push_str(&format!(" redis_calls={calls}"));
        }
        println!("{result}");
        ExitCode::SUCCESS
    }

    /// One process's run: its own connection and limiter (and front), `TASKS` tasks.
    async fn process(mode: Mode, url: &str, start: u64) -> Report {
        let client = Client::open(url).expect("a valid URL");
        let connection = ConnectionManager::new(client)
            .await
            .expect("connect to the bench's redis-server");
        let options = RedisOptions::new(FailurePolicy::FailClosed)
            .with_prefix("hot:")
            .with_timeout(Duration::from_secs(5));
        let limiter = RedisTokenBucket::new(connection, Rate::per_second(RATE), CAPACITY, options)
            .expect("bucket settings");
        let front = (mode == Mode::Leased).then(|| {
            limiter
                .leased(KEY, LeaseOptions::new())
                .expect("lease settings")
        });
        let ready = unix_ns();
        tokio::time::sleep(Duration::from_nanos(start.saturating_sub(ready))).await;
        let end = start + nanos(WARM_UP + MEASURE);
        let stop = Arc::new(AtomicBool::new(false));
        let handles: Vec<_> = (0..TASKS)
            .map(|_| {
                let (stop, limiter, front) = (stop.clone(), limiter.clone(), front.clone());
                tokio::spawn(async move {
                    let mut grants = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        match &front {
                            Some(front) => front.take(1).await.expect("granted"),
                            None => limiter.acquire(KEY, 1).await.expect("granted"),
                        }
                        grants.push(unix_ns());
                    }
                    grants
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_nanos(end.saturating_sub(unix_ns()))).await;
        stop.store(true, Ordering::Relaxed);
        let mut grants = Vec::new();
        for handle in handles {
            grants.extend(handle.await.expect("a bench task panicked"));
        }
        // Closed before the stats are read, so the give-backs are counted.
        let redis_calls = match front {
            Some(front) => {
                front.close().await;
                Some(front.stats().redis_calls)
            }
            None => None,
        };
        Report {
            grants,
            redis_calls,
            late_ns: ready.saturating_sub(start),
        }
    }

    /// Over every interval between two grants of the sorted `grants` (nanoseconds), the
    /// most grants beyond `RATE × t`: with g(k) = k - RATE × t_k, the interval from i to
    /// j holds j - i + 1 grants, so it is the largest g(j) - g(i) + 1 for i ≤ j.
    fn most_beyond_rate(grants: &[u64]) -> f64 {
        let Some(&first) = grants.first() else {
            return 0.0;
        };
        let mut lowest = f64::INFINITY;
        let mut most = 0.0f64;
        for (index, &at) in grants.iter().enumerate() {
            let g = index as f64 - RATE as f64 * (at - first) as f64 / 1e9;
            lowest = lowest.min(g);
            most = most.max(g - lowest + 1.0);
        }
        most
    }

    /// `field` (`calls` or `usec`) summed over the script commands (`EVAL` runs a script
    /// once for each node that did not hold it yet).
    fn script_field(stats: &str, field: &str) -> f64 {
        ["evalsha", "eval"]
            .iter()
            .filter_map(|command| command_field(stats, command, field))
            .sum()
    }

    pub fn print(hot: &[HotKey; 2]) {
        println!();
        println!(
            "One hot key: {PROCESSES} processes × {TASKS} tasks, a bucket of {} a second, capacity {}:",
            thousands(RATE as f64),
            thousands(CAPACITY as f64)
        );
        println!();
        println!("| limiter | decisions/s | share of the rate | Redis calls per decision | Redis µs per decision | most beyond rate × t (allowed) |");
        println!("| --- | --- | --- | --- | --- | --- |");
        for row in hot {
            println!(
                "| {} | {} | {:.3} | {:.4} | {:.3} | {:.0} ({:.0}) |",
                row.name,
                thousands(row.per_second),
                row.per_second / RATE as f64,
                row.calls_per_decision,
                row.redis_micros,
                row.excess,
                row.allowed
            );
        }
        let [plain, leased] = hot;
        println!(
            "| leased / plain | {:.2} | | {:.1}× the decisions per call | {:.1}× less | |",
            leased.per_second / plain.per_second,
            plain.calls_per_decision / leased.calls_per_decision,
            plain.redis_micros / leased.redis_micros
        );
    }
}

/// 12345.6 as "12,346".
fn thousands(value: f64) -> String {
    let digits = format!("{value:.0}");
    let mut grouped = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    grouped
}
