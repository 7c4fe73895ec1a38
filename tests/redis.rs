//! The Redis limiters against a real `redis-server`, started by each test on a free
//! loopback port (see `common/redis_server.rs`). Without `redis-server` on PATH these
//! tests fail, saying so: they never pass without having run.
//!
//! Redis decides on its own clock, so these tests run on real time. They assert what
//! Redis's clock guarantees (a wait of `retry_after` is enough; nothing is granted early)
//! with margins, and never a tight upper bound on how long something took.
#![cfg(feature = "redis")]

#[path = "common/redis_server.rs"]
mod redis_server;

#[path = "common/leased.rs"]
mod leased;

// The same on a Redis Cluster.
#[path = "redis/cluster.rs"]
mod cluster;

// What a decision reports beside its verdict: each key's quota.
#[path = "redis/quota.rs"]
mod quota;

// Several limits, one decision: `RedisAll`.
#[path = "redis/all.rs"]
mod all;

// The harness that starts and stops the servers.
#[path = "redis/harness.rs"]
mod harness;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use futures::future::join_all;
use redis_server::RedisServer;
use token_bucket::redis::driver::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig,
};
use token_bucket::redis::driver::{self, Client};
use token_bucket::redis::{
    FailurePolicy, RedisAlgorithm, RedisAll, RedisConnection, RedisFixedWindow, RedisLimitError,
    RedisLimiter, RedisOptions, RedisSlidingLog, RedisTokenBucket,
};
use token_bucket::{ConfigError, Rate, TokenBucket};

const HOUR: Duration = Duration::from_secs(3600);

fn is_limited(result: Result<(), RedisLimitError>) -> bool {
    matches!(result, Err(RedisLimitError::Limited { .. }))
}

/// A connection manager that retries quickly, so a restarted server is found again soon.
fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_min_delay(Duration::from_millis(20))
        .set_max_delay(Duration::from_millis(200))
}

async fn connect(server: &RedisServer) -> ConnectionManager {
    let client = Client::open(server.url()).expect("a valid URL");
    ConnectionManager::new_with_config(client, manager_config())
        .await
        .expect("connect to the test's redis-server")
}

/// The URL of a port where a server ran and is gone.
fn gone_url() -> String {
    RedisServer::start().url()
}

/// A manager for `url` that connects on first use, for servers that are not there.
fn lazy_manager(url: &str, config: ConnectionManagerConfig) -> ConnectionManager {
    let client = Client::open(url).expect("a valid URL");
    ConnectionManager::new_lazy_with_config(client, config).expect("a lazy manager")
}

/// Fail-closed, with a timeout a loaded machine keeps: the default 100 ms was seen to
/// pass on a 2-core machine at load 8, failing tests that are not about timeouts.
fn fail_closed() -> RedisOptions {
    RedisOptions::new(FailurePolicy::FailClosed).with_timeout(PATIENT)
}

/// Fail-open, with the timeout of [`fail_closed`].
fn fail_open() -> RedisOptions {
    RedisOptions::new(FailurePolicy::FailOpen).with_timeout(PATIENT)
}

/// Long enough for any answer of a live server on a loaded machine.
const PATIENT: Duration = Duration::from_secs(5);

/// Makes one limiter kind over a connection, with a given limit.
type Maker<A, C = ConnectionManager> = fn(C, u64) -> RedisLimiter<A, C>;

/// `limit` per hour, as each kind counts it: nothing comes back within a test.
fn hourly_bucket<C: RedisConnection>(connection: C, limit: u64) -> RedisTokenBucket<C> {
    RedisTokenBucket::new(connection, Rate::per_hour(1), limit, fail_closed()).unwrap()
}

fn hourly_window<C: RedisConnection>(connection: C, limit: u64) -> RedisFixedWindow<C> {
    RedisFixedWindow::new(connection, limit, HOUR, fail_closed()).unwrap()
}

fn hourly_log<C: RedisConnection>(connection: C, limit: u64) -> RedisSlidingLog<C> {
    RedisSlidingLog::new(connection, limit, HOUR, fail_closed()).unwrap()
}

/// Counts the grants among `results`, and checks every refusal is `Limited`.
fn count_grants(results: &[Result<(), RedisLimitError>]) -> u64 {
    let mut granted = 0;
    for result in results {
        match result {
            Ok(()) => granted += 1,
            Err(RedisLimitError::Limited { retry_after }) => {
                assert!(*retry_after > Duration::ZERO, "a zero retry_after");
            }
            Err(other) => panic!("unexpected {other}"),
        }
    }
    granted
}

async fn two_instances_share_one_limit<A: RedisAlgorithm, C: RedisConnection>(
    kind: &str,
    make: Maker<A, C>,
    connections: [C; 2],
    key: &str,
) {
    // Two connections and two limiters: two application servers.
    let [first, second] = connections.map(|connection| make(connection, 50));
    let asks = (0..60).flat_map(|_| [first.try_acquire(key, 1), second.try_acquire(key, 1)]);
    let results = join_all(asks).await;
    assert_eq!(count_grants(&results), 50, "{kind} on {key}");
    // Both instances see the limit spent.
    for limiter in [&first, &second] {
        assert!(is_limited(limiter.try_acquire(key, 1).await), "{kind}");
    }
}

#[tokio::test]
async fn two_instances_on_one_key_never_grant_more_than_the_limit_together() {
    let server = RedisServer::start();
    let connections = || async { [connect(&server).await, connect(&server).await] };
    two_instances_share_one_limit(
        "token bucket",
        hourly_bucket,
        connections().await,
        "user-42",
    )
    .await;
    two_instances_share_one_limit(
        "fixed window",
        hourly_window,
        connections().await,
        "user-42",
    )
    .await;
    two_instances_share_one_limit("sliding log", hourly_log, connections().await, "user-42").await;
}

#[tokio::test]
async fn the_limiters_decide_over_a_multiplexed_connection_too() {
    let server = RedisServer::start();
    let client = Client::open(server.url()).unwrap();
    let connection = || async { client.get_multiplexed_async_connection().await.unwrap() };
    let connections = || async { [connection().await, connection().await] };
    two_instances_share_one_limit("token bucket", hourly_bucket, connections().await, "u").await;
    two_instances_share_one_limit("fixed window", hourly_window, connections().await, "u").await;
    two_instances_share_one_limit("sliding log", hourly_log, connections().await, "u").await;

    // Limiters over different kinds of connection in one decision: the first member's
    // makes the call.
    let managed = hourly_bucket(connect(&server).await, 3);
    let multiplexed = hourly_log(connection().await, 2);
    let both = RedisAll::new([multiplexed.member("k"), managed.member("k")]);
    both.try_acquire(2).await.unwrap();
    assert!(is_limited(both.try_acquire(1).await));
    managed.try_acquire("k", 1).await.unwrap();
    assert!(is_limited(managed.try_acquire("k", 1).await));
}

/// 32 tasks at once, each calling `try_once` 5 times: the 160 results.
async fn thirty_two_tasks_try_five_times<F, T>(try_once: F) -> Vec<Result<(), RedisLimitError>>
where
    F: Fn() -> T + Clone + Send + 'static,
    T: Future<Output = Result<(), RedisLimitError>> + Send,
{
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let try_once = try_once.clone();
            tokio::spawn(async move {
                let mut results = Vec::new();
                for _ in 0..5 {
                    results.push(try_once().await);
                }
                results
            })
        })
        .collect();
    let mut results = Vec::new();
    for task in tasks {
        results.extend(task.await.unwrap());
    }
    assert_eq!(results.len(), 160);
    results
}

async fn thirty_two_tasks_share_one_limit<A: RedisAlgorithm, C: RedisConnection>(
    kind: &str,
    make: Maker<A, C>,
    connection: C,
    key: &'static str,
) {
    let limiter = make(connection, 100);
    let results = thirty_two_tasks_try_five_times(move || {
        let limiter = limiter.clone();
        async move { limiter.try_acquire(key, 1).await }
    })
    .await;
    assert_eq!(count_grants(&results), 100, "{kind} on {key}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_tasks_never_grant_more_than_the_limit() {
    let server = RedisServer::start();
    thirty_two_tasks_share_one_limit(
        "token bucket",
        hourly_bucket,
        connect(&server).await,
        "shared",
    )
    .await;
    thirty_two_tasks_share_one_limit(
        "fixed window",
        hourly_window,
        connect(&server).await,
        "shared",
    )
    .await;
    thirty_two_tasks_share_one_limit("sliding log", hourly_log, connect(&server).await, "shared")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_tasks_acquire_at_the_rate_and_no_faster() {
    let server = RedisServer::start();
    // 200 tokens a second, 8 at once: 64 tokens take at least (64 - 8) / 200 s = 280 ms.
    let limiter = RedisTokenBucket::new(
        connect(&server).await,
        Rate::per_second(200),
        8,
        fail_closed(),
    )
    .unwrap();
    let granted = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let limiter = limiter.clone();
            let granted = Arc::clone(&granted);
            tokio::spawn(async move {
                for _ in 0..2 {
                    limiter.acquire("shared", 1).await.unwrap();
                    granted.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = start.elapsed();
    assert_eq!(granted.load(Ordering::Relaxed), 64);
    // Redis's clock and ours may drift apart by a little: a margin of 30 ms.
    assert!(elapsed >= Duration::from_millis(250), "{elapsed:?}");
}

/// `limit` permits, then a refusal whose `retry_after` is at most `longest`, and enough:
/// after waiting it, the same request is granted.
async fn retry_after_is_enough<A: RedisAlgorithm>(
    kind: &str,
    limiter: RedisLimiter<A>,
    limit: u64,
    longest: Duration,
) {
    for _ in 0..limit {
        limiter.try_acquire("user-7", 1).await.unwrap();
    }
    let retry_after = match limiter.try_acquire("user-7", 1).await {
        Err(RedisLimitError::Limited { retry_after }) => retry_after,
        other => panic!("{kind}: expected Limited, got {other:?}"),
    };
    assert!(
        retry_after > Duration::ZERO && retry_after <= longest,
        "{kind}: {retry_after:?}"
    );
    tokio::time::sleep(retry_after).await;
    limiter
        .try_acquire("user-7", 1)
        .await
        .unwrap_or_else(|error| panic!("{kind}: after waiting {retry_after:?}: {error}"));
}

#[tokio::test]
async fn a_refusal_says_how_long_to_wait_and_that_is_enough() {
    let server = RedisServer::start();
    let window = Duration::from_millis(300);
    // 3 tokens per 300 ms: one comes back every 100 ms.
    let bucket = RedisTokenBucket::new(
        connect(&server).await,
        Rate::new(3, window),
        3,
        fail_closed(),
    )
    .unwrap();
    retry_after_is_enough("token bucket", bucket, 3, Duration::from_millis(100)).await;
    let fixed = RedisFixedWindow::new(connect(&server).await, 3, window, fail_closed()).unwrap();
    retry_after_is_enough("fixed window", fixed, 3, window).await;
    let log = RedisSlidingLog::new(connect(&server).await, 3, window, fail_closed()).unwrap();
    retry_after_is_enough("sliding log", log, 3, window).await;
}

/// How long `limiter` tells `permits` on `key` to wait.
async fn wait_for<A: RedisAlgorithm>(
    limiter: &RedisLimiter<A>,
    key: &str,
    permits: u64,
) -> Duration {
    match limiter.try_acquire(key, permits).await {
        Err(RedisLimitError::Limited { retry_after }) => retry_after,
        other => panic!("expected Limited, got {other:?}"),
    }
}

#[tokio::test]
async fn retry_after_is_exact_to_the_millisecond_over_hours() {
    let server = RedisServer::start();
    let hours = |hours: u32| HOUR * hours;
    // Between the two calls a few milliseconds pass (allow seconds, on a loaded machine):
    // the answer is the exact wait from the first call, rounded up to the millisecond,
    // less that time; never above.
    let close_to = |wait: Duration, exact: Duration| {
        assert!(
            wait <= exact && wait > exact - Duration::from_secs(5),
            "{wait:?} for {exact:?}"
        );
    };

    let bucket = hourly_bucket(connect(&server).await, 3);
    bucket.try_acquire("bucket", 3).await.unwrap();
    close_to(wait_for(&bucket, "bucket", 1).await, hours(1));
    close_to(wait_for(&bucket, "bucket", 3).await, hours(3));

    // Near 2^53 parts: the largest capacity at one token an hour.
    let largest = ((1u64 << 53) - 2) / 3_600_000_000;
    let bucket = hourly_bucket(connect(&server).await, largest);
    bucket.try_acquire("largest", largest - 1).await.unwrap();
    bucket.try_acquire("largest", 1).await.unwrap();
    close_to(wait_for(&bucket, "largest", 2).await, hours(2));
    close_to(
        wait_for(&bucket, "largest", largest).await,
        hours(largest as u32),
    );
    assert_eq!(
        bucket
            .try_acquire("largest", largest + 1)
            .await
            .unwrap_err()
            .to_string(),
        format!(
            "requested {} permits but the limiter admits at most {largest} at once",
            largest + 1
        )
    );

    let window = hourly_window(connect(&server).await, 2);
    window.try_acquire("window", 2).await.unwrap();
    close_to(wait_for(&window, "window", 1).await, HOUR);

    let log = hourly_log(connect(&server).await, 2);
    log.try_acquire("log", 1).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    log.try_acquire("log", 1).await.unwrap();
    // One permit is back when the first stops counting, both when the second does.
    let first = wait_for(&log, "log", 1).await;
    assert!(
        first <= HOUR - Duration::from_millis(1500) && first > HOUR - Duration::from_secs(7),
        "{first:?}"
    );
    close_to(wait_for(&log, "log", 2).await, HOUR);
}

#[tokio::test]
async fn the_sliding_log_has_no_seam_burst_where_the_fixed_window_has_one() {
    let server = RedisServer::start();
    let window = Duration::from_secs(1);
    let fixed = RedisFixedWindow::new(connect(&server).await, 2, window, fail_closed()).unwrap();
    let log = RedisSlidingLog::new(connect(&server).await, 2, window, fail_closed()).unwrap();
    let start = Instant::now();
    fixed.try_acquire("seam", 1).await.unwrap();
    log.try_acquire("seam", 1).await.unwrap();
    tokio::time::sleep_until((start + Duration::from_millis(500)).into()).await;
    fixed.try_acquire("seam", 1).await.unwrap();
    log.try_acquire("seam", 1).await.unwrap();
    // Past the first window's end, before the second permit's window ends (at 1.5 s).
    tokio::time::sleep_until((start + Duration::from_millis(1100)).into()).await;
    fixed.try_acquire("seam", 2).await.unwrap();
    log.try_acquire("seam", 1).await.unwrap();
    assert!(matches!(
        log.try_acquire("seam", 1).await,
        Err(RedisLimitError::Limited { .. })
    ));
}

async fn pttl(connection: &mut impl ConnectionLike, key: &str) -> i64 {
    driver::cmd("PTTL")
        .arg(key)
        .query_async(connection)
        .await
        .unwrap()
}

async fn exists(connection: &mut impl ConnectionLike, key: &str) -> bool {
    driver::cmd("EXISTS")
        .arg(key)
        .query_async::<i64>(connection)
        .await
        .unwrap()
        == 1
}

/// Takes one of two permits on `key`; its Redis key's time to live is then at most
/// `ttl`, and it is gone soon after that passes (as seen over `connection`).
async fn key_expires<A: RedisAlgorithm, C: RedisConnection>(
    kind: &str,
    limiter: RedisLimiter<A, C>,
    connection: &mut impl ConnectionLike,
    key: &str,
    ttl: Duration,
) {
    let redis_key = limiter.redis_key(key);
    assert!(!exists(connection, &redis_key).await, "{kind}");
    limiter.try_acquire(key, 1).await.unwrap();
    assert!(exists(connection, &redis_key).await, "{kind}");
    let left = pttl(connection, &redis_key).await;
    assert!(
        left > 0 && left as u128 <= ttl.as_millis(),
        "{kind}: PTTL {left} ms, expected at most {ttl:?}"
    );
    let deadline = Instant::now() + ttl + Duration::from_secs(5);
    while exists(connection, &redis_key).await {
        assert!(
            Instant::now() < deadline,
            "{kind}: {redis_key} did not expire"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn keys_expire_once_idle() {
    let server = RedisServer::start();
    let connection = connect(&server).await;
    let mut admin = connection.clone();
    let window = Duration::from_millis(400);
    // Two tokens per 400 ms: one taken is back, and the bucket full, after 200 ms.
    let bucket =
        RedisTokenBucket::new(connection.clone(), Rate::new(2, window), 2, fail_closed()).unwrap();
    let ttl = Duration::from_millis(200);
    key_expires("token bucket", bucket, &mut admin, "idle", ttl).await;
    let fixed = RedisFixedWindow::new(connection.clone(), 2, window, fail_closed()).unwrap();
    key_expires("fixed window", fixed, &mut admin, "idle", window).await;
    let log = RedisSlidingLog::new(connection, 2, window, fail_closed()).unwrap();
    key_expires("sliding log", log, &mut admin, "idle", window).await;
}

#[tokio::test]
async fn a_redis_restart_is_survived_under_either_policy_without_a_new_limiter() {
    let mut server = RedisServer::start();
    let connection = connect(&server).await;
    let open = RedisTokenBucket::new(
        connection.clone(),
        Rate::per_hour(1),
        2,
        fail_open()
            .with_prefix("open:")
            .with_timeout(Duration::from_millis(100)),
    )
    .unwrap();
    let closed = RedisTokenBucket::new(
        connection,
        Rate::per_hour(1),
        2,
        fail_closed()
            .with_prefix("closed:")
            .with_timeout(Duration::from_millis(100)),
    )
    .unwrap();
    for limiter in [&open, &closed] {
        limiter.try_acquire("user", 2).await.unwrap();
        assert!(matches!(
            limiter.try_acquire("user", 1).await,
            Err(RedisLimitError::Limited { .. })
        ));
    }
    assert_eq!(open.fail_open_count(), 0);

    server.stop();
    // Redis is gone: fail-open allows and counts, fail-closed refuses saying why.
    for attempt in 1..=3 {
        assert_eq!(open.try_acquire("user", 1).await.ok(), Some(()));
        assert_eq!(open.fail_open_count(), attempt);
        match closed.try_acquire("user", 1).await {
            Err(error @ RedisLimitError::Unavailable { .. }) => {
                assert!(error.to_string().contains("fail-closed"), "{error}");
                assert!(std::error::Error::source(&error).is_some());
            }
            Err(error @ RedisLimitError::Timeout { .. }) => {
                assert_eq!(
                    error.to_string(),
                    "Redis did not answer within 100ms, and the failure policy is fail-closed"
                );
            }
            other => panic!("expected Unavailable or Timeout, got {other:?}"),
        }
        // acquire does not wait for Redis to come back: it reports the outage.
        assert!(closed.acquire("user", 1).await.is_err());
    }

    server.restart();
    // The connection manager reconnects by itself; the same limiters decide again. The
    // restarted Redis kept nothing, so the buckets are full.
    let deadline = Instant::now() + Duration::from_secs(30);
    while closed.try_acquire("user", 1).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "no decision from the restarted Redis"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    closed.try_acquire("user", 1).await.unwrap();
    assert!(matches!(
        closed.try_acquire("user", 1).await,
        Err(RedisLimitError::Limited { .. })
    ));
    // Fail-open decides for real again: its refusals are refusals, and nothing more is
    // counted.
    let counted = open.fail_open_count();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !matches!(
        open.try_acquire("user", 2).await,
        Err(RedisLimitError::Limited { .. })
    ) {
        assert!(Instant::now() < deadline, "fail-open never decided again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let counted_after = open.fail_open_count();
    assert!(matches!(
        open.try_acquire("user", 1).await,
        Err(RedisLimitError::Limited { .. })
    ));
    assert_eq!(open.fail_open_count(), counted_after);
    assert!(counted_after >= counted);
}

#[tokio::test]
async fn a_hung_redis_cannot_hang_the_caller() {
    let server = RedisServer::start();
    let connection = connect(&server).await;
    let timeout = Duration::from_millis(100);
    let open = RedisFixedWindow::new(
        connection.clone(),
        5,
        HOUR,
        fail_open().with_timeout(timeout).with_prefix("open:"),
    )
    .unwrap();
    let closed = RedisFixedWindow::new(
        connection,
        5,
        HOUR,
        fail_closed().with_timeout(timeout).with_prefix("closed:"),
    )
    .unwrap();
    // Load the script while Redis answers.
    open.try_acquire("user", 1).await.unwrap();
    closed.try_acquire("user", 1).await.unwrap();

    // Redis stops answering every client for 3 s.
    let mut admin = connect(&server).await;
    driver::cmd("CLIENT")
        .arg("PAUSE")
        .arg(3000)
        .arg("ALL")
        .exec_async(&mut admin)
        .await
        .unwrap();
    let start = Instant::now();
    assert!(matches!(
        closed.try_acquire("user", 1).await,
        Err(RedisLimitError::Timeout { timeout: t }) if t == timeout
    ));
    assert_eq!(open.try_acquire("user", 1).await.ok(), Some(()));
    assert_eq!(open.fail_open_count(), 1);
    // Both answered while Redis was still paused.
    assert!(
        start.elapsed() < Duration::from_millis(2500),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn a_client_clock_skewed_by_minutes_changes_nothing() {
    let server = RedisServer::start();
    // Each thread, with its own runtime, stands for an application server; one's clock
    // jumps 10 minutes ahead between the two phases.
    let phase = Arc::new(Barrier::new(2));
    let servers: Vec<_> = [Duration::from_secs(600), Duration::ZERO]
        .into_iter()
        .map(|skew| {
            let (url, phase) = (server.url(), Arc::clone(&phase));
            std::thread::spawn(move || run_one_server(&url, skew, &phase))
        })
        .collect();
    let outcomes: Vec<Outcome> = servers.into_iter().map(|s| s.join().unwrap()).collect();
    let (skewed, on_time) = (&outcomes[0], &outcomes[1]);
    // An in-process bucket on the skewed server refilled when its clock jumped: a limiter
    // reading the client's clock would have over-issued.
    assert!(skewed.in_process_refilled);
    assert!(!on_time.in_process_refilled);
    // The Redis bucket did not: each server got the 5 it took before, nothing after, and
    // both are told the same wait, a whole hour less the moments the test took.
    for outcome in [skewed, on_time] {
        assert_eq!(outcome.granted_after, 0);
        assert!(
            outcome.retry_after > HOUR - Duration::from_secs(60) && outcome.retry_after <= HOUR,
            "{:?}",
            outcome.retry_after
        );
    }
}

struct Outcome {
    granted_after: u64,
    retry_after: Duration,
    in_process_refilled: bool,
}

/// One application server: takes 5 tokens from a shared 10-token bucket refilling one an
/// hour; once the other has too, moves its clock `skew` ahead and asks 20 more times.
fn run_one_server(url: &str, skew: Duration, phase: &Barrier) -> Outcome {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let connection = ConnectionManager::new(Client::open(url).unwrap())
            .await
            .unwrap();
        let limiter =
            RedisTokenBucket::new(connection, Rate::per_hour(1), 10, fail_closed()).unwrap();
        // One token each 10 minutes, none left.
        let in_process = TokenBucket::new(Rate::per_hour(6), 1).unwrap();
        in_process.try_take(1).unwrap();
        limiter.try_acquire("skew", 5).await.unwrap();
        phase.wait();
        if !skew.is_zero() {
            // Jump tokio's clock ahead, then let it run on from there.
            tokio::time::pause();
            tokio::time::advance(skew).await;
            tokio::time::resume();
        }
        let mut granted_after = 0;
        for _ in 0..20 {
            if limiter.try_acquire("skew", 1).await.is_ok() {
                granted_after += 1;
            }
        }
        Outcome {
            granted_after,
            retry_after: wait_for(&limiter, "skew", 1).await,
            in_process_refilled: in_process.try_take(1).is_ok(),
        }
    })
}

#[tokio::test]
async fn an_unreachable_redis_gives_clear_errors() {
    let url = gone_url();
    // No retries: the refusal of the connection comes back at once.
    let config = ConnectionManagerConfig::new().set_number_of_retries(0);
    let closed =
        RedisSlidingLog::new(lazy_manager(&url, config.clone()), 5, HOUR, fail_closed()).unwrap();
    let error = closed.try_acquire("user", 1).await.unwrap_err();
    assert!(
        matches!(error, RedisLimitError::Unavailable { .. }),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.starts_with("Redis could not decide, and the failure policy is fail-closed: ")
            && text.to_lowercase().contains("refused"),
        "{text}"
    );
    let open = RedisSlidingLog::new(lazy_manager(&url, config), 5, HOUR, fail_open()).unwrap();
    open.try_acquire("user", 1).await.unwrap();
    open.acquire("user", 1).await.unwrap();
    assert_eq!(open.fail_open_count(), 2);

    // With the manager's default retries, connecting outlasts the limiter's timeout.
    let closed = RedisSlidingLog::new(
        lazy_manager(&url, ConnectionManagerConfig::new()),
        5,
        HOUR,
        fail_closed().with_timeout(Duration::from_millis(30)),
    )
    .unwrap();
    assert!(matches!(
        closed.try_acquire("user", 1).await,
        Err(RedisLimitError::Timeout { timeout }) if timeout == Duration::from_millis(30)
    ));
    // Requests that could never be granted are refused without asking Redis, whatever
    // the policy.
    assert_eq!(
        open.try_acquire("user", 6).await.unwrap_err().to_string(),
        "requested 6 permits but the limiter admits at most 5 at once"
    );
    assert!(matches!(
        open.acquire("user", 6).await,
        Err(RedisLimitError::ExceedsLimit {
            requested: 6,
            limit: 5
        })
    ));
    // Nothing at all needs no decision.
    closed.try_acquire("user", 0).await.unwrap();
    assert_eq!(open.fail_open_count(), 2);
}

#[tokio::test]
async fn bad_configuration_is_refused_naming_the_values() {
    let connection = lazy_manager("redis://127.0.0.1:1/", ConnectionManagerConfig::new());
    let bucket = |rate, capacity, options| {
        RedisTokenBucket::new(connection.clone(), rate, capacity, options).unwrap_err()
    };
    assert_eq!(
        bucket(Rate::per_second(0), 5, fail_open()),
        ConfigError::ZeroRate
    );
    assert_eq!(
        bucket(Rate::per_second(5), 0, fail_open()),
        ConfigError::ZeroCapacity
    );
    assert_eq!(
        bucket(
            Rate::per_second(5),
            5,
            fail_open().with_timeout(Duration::ZERO)
        ),
        ConfigError::ZeroTimeout
    );
    let error = bucket(Rate::per_hour(1), 1 << 40, fail_open());
    assert_eq!(
        error,
        ConfigError::UnsupportedRate {
            rate: Rate::per_hour(1),
            capacity: 1 << 40,
            max_capacity: 2_501_999
        }
    );
    assert_eq!(
        error.to_string(),
        "a capacity of 1099511627776 at 1/h is beyond what the Redis token bucket counts \
         exactly: at this rate the largest capacity is 2501999"
    );

    let second = Duration::from_secs(1);
    let fixed = |limit, window| {
        RedisFixedWindow::new(connection.clone(), limit, window, fail_closed()).unwrap_err()
    };
    assert_eq!(fixed(0, second), ConfigError::ZeroLimit);
    assert_eq!(fixed(5, Duration::ZERO), ConfigError::ZeroWindow);
    assert_eq!(
        fixed(RedisFixedWindow::MAX_LIMIT + 1, second),
        ConfigError::LimitTooLarge {
            limit: RedisFixedWindow::MAX_LIMIT + 1,
            max: RedisFixedWindow::MAX_LIMIT
        }
    );
    let error = fixed(5, Duration::from_nanos(2_500));
    assert_eq!(
        error.to_string(),
        "the window 2.5µs is not supported by the Redis limiters: it must be a whole number \
         of microseconds between 1 µs and 1125899906.842624s"
    );

    let log = |limit, window| {
        RedisSlidingLog::new(connection.clone(), limit, window, fail_closed()).unwrap_err()
    };
    assert_eq!(log(0, second), ConfigError::ZeroLimit);
    assert_eq!(
        log(RedisSlidingLog::MAX_LIMIT + 1, second),
        ConfigError::LimitTooLarge {
            limit: RedisSlidingLog::MAX_LIMIT + 1,
            max: RedisSlidingLog::MAX_LIMIT
        }
    );
    let too_long = RedisSlidingLog::MAX_WINDOW + Duration::from_micros(1);
    assert_eq!(
        log(5, too_long),
        ConfigError::UnsupportedWindow {
            window: too_long,
            max: RedisSlidingLog::MAX_WINDOW
        }
    );
    assert_eq!(
        ConfigError::ZeroTimeout.to_string(),
        "the Redis timeout is zero: it must be longer than zero"
    );
}

async fn info_field(connection: &mut ConnectionManager, section: &str, field: &str) -> String {
    let info: String = driver::cmd("INFO")
        .arg(section)
        .query_async(connection)
        .await
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in INFO {section}"))
        .trim()
        .to_owned()
}

/// How many scripts Redis holds, and how many times one was sent whole (with `EVAL`,
/// which runs it and keeps it, after an `EVALSHA` met `NOSCRIPT`).
async fn scripts_held_and_loads(admin: &mut ConnectionManager) -> (String, String) {
    let held = info_field(admin, "memory", "number_of_cached_scripts").await;
    let loads = info_field(admin, "commandstats", "cmdstat_eval").await;
    let loads = loads
        .strip_prefix("calls=")
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("no calls in {loads}"))
        .to_owned();
    (held, loads)
}

async fn flush_scripts(admin: &mut ConnectionManager) {
    driver::cmd("SCRIPT")
        .arg("FLUSH")
        .exec_async(admin)
        .await
        .unwrap();
}

#[tokio::test]
async fn scripts_are_loaded_once_called_by_hash_and_reloaded_after_a_flush() {
    let server = RedisServer::start();
    let mut admin = connect(&server).await;
    let limiter = hourly_bucket(connect(&server).await, 100);
    for _ in 0..5 {
        limiter.try_acquire("user", 1).await.unwrap();
    }
    // Sent whole once (after the first EVALSHA met NOSCRIPT), then only called by hash.
    assert_eq!(
        scripts_held_and_loads(&mut admin).await,
        ("1".into(), "1".into())
    );
    // The first call by hash met NOSCRIPT; the next four found the script.
    let calls = info_field(&mut admin, "commandstats", "cmdstat_evalsha").await;
    assert!(
        calls.starts_with("calls=5,") && calls.ends_with("failed_calls=1"),
        "{calls}"
    );

    flush_scripts(&mut admin).await;
    limiter.try_acquire("user", 1).await.unwrap();
    assert_eq!(
        scripts_held_and_loads(&mut admin).await,
        ("1".into(), "2".into())
    );
    // The flush lost no state: 6 of 100 tokens are gone.
    limiter.try_acquire("user", 94).await.unwrap();
    assert!(matches!(
        limiter.try_acquire("user", 1).await,
        Err(RedisLimitError::Limited { .. })
    ));
}

#[tokio::test]
async fn prefixes_and_kinds_keep_limits_apart() {
    let server = RedisServer::start();
    let connection = connect(&server).await;
    let mut admin = connect(&server).await;
    let billing = RedisTokenBucket::new(
        connection.clone(),
        Rate::per_hour(1),
        1,
        fail_closed().with_prefix("billing:"),
    )
    .unwrap();
    let search = RedisTokenBucket::new(
        connection.clone(),
        Rate::per_hour(1),
        1,
        fail_closed().with_prefix("search:"),
    )
    .unwrap();
    let window =
        RedisFixedWindow::new(connection, 1, HOUR, fail_closed().with_prefix("billing:")).unwrap();
    for limiter in [&billing, &search] {
        limiter.try_acquire("user-42", 1).await.unwrap();
        assert!(limiter.try_acquire("user-42", 1).await.is_err());
    }
    window.try_acquire("user-42", 1).await.unwrap();
    for key in [
        "billing:tb:user-42",
        "search:tb:user-42",
        "billing:fw:user-42",
    ] {
        assert!(exists(&mut admin, key).await, "{key}");
    }
    assert_eq!(billing.redis_key("user-42"), "billing:tb:user-42");
}

#[test]
fn a_call_outside_a_runtime_is_refused() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let limiter = runtime.block_on(async {
        let connection = lazy_manager("redis://127.0.0.1:1/", ConnectionManagerConfig::new());
        RedisFixedWindow::new(connection, 5, HOUR, fail_open()).unwrap()
    });
    let error = futures::executor::block_on(limiter.try_acquire("user", 1)).unwrap_err();
    assert!(matches!(error, RedisLimitError::NoRuntime), "{error:?}");
    assert_eq!(
        error.to_string(),
        "a Redis limiter was called outside a tokio runtime; it needs one, with its timer"
    );
    // Not an outage: fail-open does not count it.
    assert_eq!(limiter.fail_open_count(), 0);
}

#[test]
fn the_futures_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let connection = lazy_manager("redis://127.0.0.1:1/", ConnectionManagerConfig::new());
        let limiter = RedisFixedWindow::new(connection, 5, HOUR, fail_open()).unwrap();
        assert_send(&limiter.try_acquire("user", 1));
        assert_send(&limiter.acquire("user", 1));
        let limits = RedisAll::new([limiter.member("user")]);
        assert_send(&limits.try_acquire(1));
        assert_send(&limits.acquire(1));
        // Members own their limiters: a decision can be moved into a task of its own.
        let task = tokio::spawn(async move { limits.try_acquire(0).await });
        task.await.unwrap().unwrap();
    });
}
