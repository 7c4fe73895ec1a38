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

// Several limits, one decision: `RedisAll` (issue 14, part 3).

/// How long `limits` tells `permits` to wait.
async fn all_wait_for(limits: &RedisAll, permits: u64) -> Duration {
    match limits.try_acquire(permits).await {
        Err(RedisLimitError::Limited { retry_after }) => retry_after,
        other => panic!("expected Limited, got {other:?}"),
    }
}

fn is_limited(result: Result<(), RedisLimitError>) -> bool {
    matches!(result, Err(RedisLimitError::Limited { .. }))
}

#[tokio::test]
async fn all_takes_from_every_member_or_from_none() {
    let server = RedisServer::start();
    let connection = connect(&server).await;
    let mut admin = connect(&server).await;
    // Three algorithms in one decision.
    let bucket = hourly_bucket(connection.clone(), 5);
    let window = hourly_window(connection.clone(), 1);
    let log = hourly_log(connection, 3);
    let members = |key: &str| [bucket.member(key), window.member(key), log.member(key)];
    RedisAll::new(members("user")).try_acquire(1).await.unwrap();
    // The window is spent: every later decision refuses, and takes nothing anywhere.
    for _ in 0..5 {
        assert!(is_limited(
            RedisAll::new(members("user")).try_acquire(1).await
        ));
    }
    bucket.try_acquire("user", 4).await.unwrap();
    assert!(is_limited(bucket.try_acquire("user", 1).await));
    log.try_acquire("user", 2).await.unwrap();
    assert!(is_limited(log.try_acquire("user", 1).await));

    // A member that allows, beside one that refuses, is not even written: afterwards it
    // still admits its whole burst.
    let fresh = bucket.member("fresh");
    assert!(is_limited(
        RedisAll::new([fresh.clone(), window.member("user")])
            .try_acquire(1)
            .await
    ));
    assert!(is_limited(
        RedisAll::new([window.member("user"), fresh.clone()])
            .try_acquire(1)
            .await
    ));
    assert!(!exists(&mut admin, fresh.redis_key()).await);
    bucket.try_acquire("fresh", 5).await.unwrap();
}

#[tokio::test]
async fn all_waits_for_the_latest_refusal_and_that_is_enough() {
    let server = RedisServer::start();
    let connection = connect(&server).await;
    // Once spent: the bucket gives one back after 1 s, the log after 2 s, the window after
    // 3 s (long enough that none comes back while the test asks, even on a loaded machine).
    let bucket = RedisTokenBucket::new(
        connection.clone(),
        Rate::new(3, Duration::from_secs(3)),
        3,
        fail_closed(),
    )
    .unwrap();
    let window =
        RedisFixedWindow::new(connection.clone(), 2, Duration::from_secs(3), fail_closed())
            .unwrap();
    let log = RedisSlidingLog::new(connection, 2, Duration::from_secs(2), fail_closed()).unwrap();
    bucket.try_acquire("k", 3).await.unwrap();
    window.try_acquire("k", 2).await.unwrap();
    log.try_acquire("k", 2).await.unwrap();

    for limits in [
        RedisAll::new([bucket.member("k"), window.member("k"), log.member("k")]),
        RedisAll::new([log.member("k"), window.member("k"), bucket.member("k")]),
    ] {
        let start = Instant::now();
        let latest = all_wait_for(&limits, 1).await;
        // Each member's own wait, asked later, is no longer; the longest is the window's,
        // shorter only by the time that passed since.
        let own = [
            wait_for(&bucket, "k", 1).await,
            wait_for(&window, "k", 1).await,
            wait_for(&log, "k", 1).await,
        ];
        let passed = start.elapsed();
        assert!(own.iter().all(|&wait| wait <= latest), "{own:?} {latest:?}");
        assert!(
            latest <= own[1] + passed + Duration::from_millis(1),
            "{own:?} {latest:?}"
        );
        assert!(
            latest > Duration::from_secs(2) && latest <= Duration::from_secs(3),
            "{latest:?}"
        );
    }
    // Waiting that long is enough for all of them at once.
    let limits = RedisAll::new([bucket.member("k"), window.member("k"), log.member("k")]);
    let wait = all_wait_for(&limits, 1).await;
    tokio::time::sleep(wait).await;
    limits
        .try_acquire(1)
        .await
        .unwrap_or_else(|error| panic!("after waiting {wait:?}: {error}"));

    // Over hours, exact to the millisecond: an hour for the bucket beats a second's window.
    let bucket = hourly_bucket(connect(&server).await, 1);
    let window = RedisFixedWindow::new(
        connect(&server).await,
        1,
        Duration::from_secs(1),
        fail_closed(),
    )
    .unwrap();
    bucket.try_acquire("h", 1).await.unwrap();
    window.try_acquire("h", 1).await.unwrap();
    let wait = all_wait_for(&RedisAll::new([window.member("h"), bucket.member("h")]), 1).await;
    assert!(
        wait <= HOUR && wait > HOUR - Duration::from_secs(5),
        "{wait:?}"
    );
}

#[tokio::test]
async fn a_key_named_twice_counts_twice() {
    let server = RedisServer::start();
    let bucket = hourly_bucket(connect(&server).await, 10);
    let twice = RedisAll::new([bucket.member("k"), bucket.member("k")]);
    twice.try_acquire(3).await.unwrap();
    // 6 taken: 4 left.
    bucket.try_acquire("k", 4).await.unwrap();
    assert!(is_limited(bucket.try_acquire("k", 1).await));
    // Nothing left: one permit named twice waits for two tokens, two hours.
    let wait = all_wait_for(&twice, 1).await;
    assert!(
        wait <= HOUR * 2 && wait > HOUR * 2 - Duration::from_secs(5),
        "{wait:?}"
    );
    // Twice 6 can never fit in 10: refused at once, naming the sum.
    let error = RedisAll::new([bucket.member("j"), bucket.clone().member("j")])
        .try_acquire(6)
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            RedisLimitError::ExceedsLimit {
                requested: 12,
                limit: 10
            }
        ),
        "{error:?}"
    );
    // Through a clone it is the same key: 5 + 5 take all of j's 10.
    RedisAll::new([bucket.member("j"), bucket.clone().member("j")])
        .try_acquire(5)
        .await
        .unwrap();
    assert!(is_limited(bucket.try_acquire("j", 1).await));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_through_all_never_exceed_any_member() {
    let server = RedisServer::start();
    let connection = connect(&server).await;
    let bucket = hourly_bucket(connection.clone(), 40);
    let window = hourly_window(connection.clone(), 30);
    let log = hourly_log(connection, 25);
    let (each_bucket, each_window, each_log) = (bucket.clone(), window.clone(), log.clone());
    let results = thirty_two_tasks_try_five_times(move || {
        // Made per request, as a server would.
        let limits = RedisAll::new([
            each_bucket.member("shared"),
            each_window.member("shared"),
            each_log.member("shared"),
        ]);
        async move { limits.try_acquire(1).await }
    })
    .await;
    // The smallest limit bounds them all, and each member gave exactly that many.
    assert_eq!(count_grants(&results), 25);
    bucket.try_acquire("shared", 15).await.unwrap();
    assert!(is_limited(bucket.try_acquire("shared", 1).await));
    window.try_acquire("shared", 5).await.unwrap();
    assert!(is_limited(window.try_acquire("shared", 1).await));
    assert!(is_limited(log.try_acquire("shared", 1).await));
}

#[tokio::test]
async fn all_refuses_what_it_could_never_grant_without_asking_redis() {
    // Nothing listens there, and the limiters fail open: a call to Redis would be
    // counted. None is.
    let connection = lazy_manager(
        "redis://127.0.0.1:1/",
        ConnectionManagerConfig::new().set_number_of_retries(0),
    );
    let five =
        RedisTokenBucket::new(connection.clone(), Rate::per_hour(1), 5, fail_open()).unwrap();
    let three = RedisFixedWindow::new(connection.clone(), 3, HOUR, fail_open()).unwrap();

    let none = RedisAll::new(std::iter::empty());
    for permits in [0, 1] {
        let error = none.try_acquire(permits).await.unwrap_err();
        assert!(matches!(error, RedisLimitError::NoMembers), "{error:?}");
    }
    assert_eq!(
        none.acquire(1).await.unwrap_err().to_string(),
        "a decision over all of no limiters: `RedisAll::new` was given no members"
    );
    // Under its old name, for one more release.
    #[allow(deprecated)]
    let old_name = token_bucket::redis::all([five.member("k")]);
    assert!(matches!(
        old_name.try_acquire(6).await,
        Err(RedisLimitError::ExceedsLimit {
            requested: 6,
            limit: 5
        })
    ));

    let both = RedisAll::new([five.member("k"), three.member("k")]);
    let error = both.try_acquire(4).await.unwrap_err();
    assert!(
        matches!(
            error,
            RedisLimitError::ExceedsLimit {
                requested: 4,
                limit: 3
            }
        ),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "requested 4 permits but the limiter admits at most 3 at once"
    );
    assert!(matches!(
        both.acquire(6).await,
        Err(RedisLimitError::ExceedsLimit {
            requested: 6,
            limit: 5
        })
    ));
    both.try_acquire(0).await.unwrap();

    // Limiters of one kind and prefix build one key for one name: with different
    // settings they cannot share it (the second's limit would go unchecked).
    let second = Duration::from_secs(1);
    let per_second = RedisFixedWindow::new(connection.clone(), 10, second, fail_open()).unwrap();
    let per_day = RedisFixedWindow::new(connection.clone(), 1_000, 24 * HOUR, fail_open()).unwrap();
    let clash = RedisAll::new([per_second.member("{u}"), per_day.member("{u}")]);
    for permits in [0, 1] {
        let error = clash.try_acquire(permits).await.unwrap_err();
        assert!(
            matches!(&error, RedisLimitError::ConflictingMembers { key } if key.ends_with("{u}")),
            "{error:?}"
        );
    }
    let error = clash.acquire(1).await.unwrap_err();
    assert!(
        error.to_string().contains("give them different prefixes"),
        "{error}"
    );
    // The same settings may share the key: it counts twice.
    let twin = RedisFixedWindow::new(connection, 10, second, fail_open()).unwrap();
    RedisAll::new([per_second.member("{u}"), twin.member("{u}")])
        .try_acquire(0)
        .await
        .unwrap();
    assert_eq!(five.fail_open_count() + three.fail_open_count(), 0);
    assert_eq!(per_second.fail_open_count() + per_day.fail_open_count(), 0);
}

#[tokio::test]
async fn all_fails_closed_if_any_member_does_and_times_out_at_the_shortest() {
    let url = gone_url();
    let config = ConnectionManagerConfig::new().set_number_of_retries(0);
    let gone = lazy_manager(&url, config);
    let open = RedisTokenBucket::new(gone.clone(), Rate::per_hour(1), 5, fail_open()).unwrap();
    let also_open = RedisSlidingLog::new(gone.clone(), 5, HOUR, fail_open()).unwrap();
    let closed = RedisFixedWindow::new(gone, 5, HOUR, fail_closed()).unwrap();

    // All fail open: allowed, and counted once by each limiter, even one named twice.
    let open_only = RedisAll::new([open.member("a"), also_open.member("a"), open.member("b")]);
    open_only.try_acquire(1).await.unwrap();
    open_only.acquire(1).await.unwrap();
    assert_eq!(
        (open.fail_open_count(), also_open.fail_open_count()),
        (2, 2)
    );

    // One fails closed: the decision does.
    for limits in [
        RedisAll::new([open.member("a"), closed.member("a")]),
        RedisAll::new([closed.member("a"), open.member("a")]),
    ] {
        let error = limits.try_acquire(1).await.unwrap_err();
        assert!(
            matches!(error, RedisLimitError::Unavailable { .. }),
            "{error:?}"
        );
        assert!(limits.acquire(1).await.is_err());
    }
    assert_eq!(
        (open.fail_open_count(), also_open.fail_open_count()),
        (2, 2)
    );

    // The shortest timeout bounds the call (the manager's default retries outlast both).
    let retrying = lazy_manager(&url, ConnectionManagerConfig::new());
    let slow = RedisTokenBucket::new(
        retrying.clone(),
        Rate::per_hour(1),
        5,
        fail_closed().with_timeout(Duration::from_secs(5)),
    )
    .unwrap();
    let quick = RedisFixedWindow::new(
        retrying,
        5,
        HOUR,
        fail_open().with_timeout(Duration::from_millis(30)),
    )
    .unwrap();
    let start = Instant::now();
    let error = RedisAll::new([slow.member("a"), quick.member("a")])
        .try_acquire(1)
        .await
        .unwrap_err();
    assert!(
        matches!(error, RedisLimitError::Timeout { timeout } if timeout == Duration::from_millis(30)),
        "{error:?}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn all_runs_on_the_first_members_connection() {
    let server = RedisServer::start();
    let live = connect(&server).await;
    let mut admin = connect(&server).await;
    let gone = lazy_manager(
        "redis://127.0.0.1:1/",
        ConnectionManagerConfig::new().set_number_of_retries(0),
    );
    let here = hourly_bucket(live, 5);
    let elsewhere = RedisFixedWindow::new(gone, 5, HOUR, fail_closed()).unwrap();
    // First the unreachable one: nothing is decided.
    assert!(matches!(
        RedisAll::new([elsewhere.member("k"), here.member("k")])
            .try_acquire(1)
            .await,
        Err(RedisLimitError::Unavailable { .. })
    ));
    // First the reachable one: both keys are decided in its Redis.
    RedisAll::new([here.member("k"), elsewhere.member("k")])
        .try_acquire(1)
        .await
        .unwrap();
    assert!(exists(&mut admin, &elsewhere.redis_key("k")).await);
}

#[tokio::test]
async fn all_loads_its_script_once_and_again_after_a_flush() {
    let server = RedisServer::start();
    let mut admin = connect(&server).await;
    let connection = connect(&server).await;
    let bucket = hourly_bucket(connection.clone(), 100);
    let log = hourly_log(connection, 100);
    let limits = RedisAll::new([bucket.member("user"), log.member("user")]);
    // A decision on one key runs its algorithm's script, one on several keys the script
    // with every algorithm: three scripts here, each loaded once.
    for _ in 0..2 {
        bucket.try_acquire("user", 1).await.unwrap();
        log.try_acquire("user", 1).await.unwrap();
        limits.try_acquire(1).await.unwrap();
    }
    assert_eq!(
        scripts_held_and_loads(&mut admin).await,
        ("3".into(), "3".into())
    );

    flush_scripts(&mut admin).await;
    limits.try_acquire(1).await.unwrap();
    assert_eq!(
        scripts_held_and_loads(&mut admin).await,
        ("1".into(), "4".into())
    );
    // The flush lost no state: 5 of the bucket's 100 and of the log's 100 are gone.
    limits.try_acquire(95).await.unwrap();
    assert!(is_limited(bucket.try_acquire("user", 1).await));
    assert!(is_limited(log.try_acquire("user", 1).await));
}

/// A token bucket and a fixed window of 5 an hour, with `options`.
fn bucket_and_window<C: RedisConnection>(
    connection: C,
    options: RedisOptions,
) -> (RedisTokenBucket<C>, RedisFixedWindow<C>) {
    let bucket = RedisTokenBucket::new(connection.clone(), Rate::per_hour(1), 5, options.clone());
    let window = RedisFixedWindow::new(connection, 5, HOUR, options);
    (bucket.unwrap(), window.unwrap())
}

/// Asks `limits` for a permit, which Redis must refuse for keys of several slots.
async fn refused_cross_slot(limits: &RedisAll) -> RedisLimitError {
    let error = limits.try_acquire(1).await.unwrap_err();
    assert!(
        matches!(error, RedisLimitError::CrossSlot { .. }),
        "{error:?}"
    );
    error
}

/// The hash slot Redis gives `key`.
async fn key_slot(connection: &mut ConnectionManager, key: &str) -> u16 {
    driver::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(connection)
        .await
        .unwrap()
}

#[tokio::test]
async fn on_a_cluster_the_keys_of_all_need_one_hash_tag() {
    let server = RedisServer::start_cluster();
    let mut admin = connect(&server).await;
    driver::cmd("CLUSTER")
        .arg("ADDSLOTSRANGE")
        .arg(0)
        .arg(16383)
        .exec_async(&mut admin)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = driver::cmd("CLUSTER")
            .arg("INFO")
            .query_async(&mut admin)
            .await
            .unwrap();
        if info.contains("cluster_state:ok") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the cluster never came up: {info}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let connection = connect(&server).await;
    // Failing open, so that a refusal of the keys is seen not to be taken for an outage.
    let bucket =
        RedisTokenBucket::new(connection.clone(), Rate::per_hour(1), 5, fail_open()).unwrap();
    let window = RedisFixedWindow::new(connection.clone(), 5, HOUR, fail_open()).unwrap();

    // One key at a time needs nothing.
    bucket.try_acquire("user-42", 1).await.unwrap();
    // Without a tag, the two kinds' keys are in different slots: refused, not counted.
    assert_ne!(
        key_slot(&mut admin, &bucket.redis_key("user-42")).await,
        key_slot(&mut admin, &window.redis_key("user-42")).await
    );
    let error = refused_cross_slot(&RedisAll::new([
        bucket.member("user-42"),
        window.member("user-42"),
    ]))
    .await;
    let text = error.to_string();
    assert!(
        text.contains("hash tag") && text.contains("same slot"),
        "{text}"
    );
    assert!(std::error::Error::source(&error).is_some());
    // With one tag, one slot: decided.
    let tagged = RedisAll::new([
        bucket.member("{user-42}"),
        window.member("{user-42}:search"),
    ]);
    tagged.try_acquire(5).await.unwrap();
    assert!(is_limited(tagged.try_acquire(1).await));
    assert_eq!(bucket.fail_open_count() + window.fail_open_count(), 0);

    // A brace in the prefix is taken for the start of the tag, and the key's tag is lost.
    let braced =
        |prefix: &str| bucket_and_window(connection.clone(), fail_open().with_prefix(prefix));
    let (bucket, window) = braced("limits{");
    assert!(matches!(
        RedisAll::new([bucket.member("{user-42}"), window.member("{user-42}")])
            .try_acquire(1)
            .await,
        Err(RedisLimitError::CrossSlot { .. })
    ));
    // A whole tag in the prefix puts every key of its limiters in one slot.
    let (bucket, window) = braced("{limits}:");
    RedisAll::new([bucket.member("user-42"), window.member("user-7")])
        .try_acquire(1)
        .await
        .unwrap();
}

/// Set for the process that [`start_a_server_and_wait_to_be_killed`] runs in.
const ORPHAN_HELPER: &str = "TOKEN_BUCKET_TEST_ORPHAN_HELPER";

/// Run only by [`a_server_left_by_a_killed_test_process_is_stopped_at_the_next_start`],
/// in a process of its own: starts a server, says which, and waits to be killed.
#[test]
#[ignore = "a helper that another test runs in a process of its own"]
fn start_a_server_and_wait_to_be_killed() {
    if std::env::var_os(ORPHAN_HELPER).is_none() {
        return;
    }
    let server = RedisServer::start();
    println!("server {} {}", server.pid().unwrap(), server.port());
    std::thread::sleep(Duration::from_secs(60));
}

/// Whether process `pid` runs (and is not a zombie waiting to be reaped).
fn runs(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z'))
    })
}

#[test]
fn a_server_left_by_a_killed_test_process_is_stopped_at_the_next_start() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let mut helper = Command::new(std::env::current_exe().unwrap())
        .args([
            "start_a_server_and_wait_to_be_killed",
            "--exact",
            "--ignored",
        ])
        .arg("--nocapture")
        .env(ORPHAN_HELPER, "1")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let said = BufReader::new(helper.stdout.take().unwrap())
        .lines()
        .map(Result::unwrap)
        .find_map(|line| {
            let (pid, port) = line.strip_prefix("server ")?.split_once(' ')?;
            Some((pid.parse::<u32>().ok()?, port.parse::<u16>().ok()?))
        });
    let (pid, port) = said.expect("the helper started a server");
    // Killed at once: no destructor runs, so the server outlives its test process.
    helper.kill().unwrap();
    helper.wait().unwrap();
    assert!(runs(pid), "the server went with its test process");
    assert!(redis_server::registry().join(pid.to_string()).exists());

    // What every test process does once, before it starts its first server.
    redis_server::stop_orphans();
    let deadline = Instant::now() + Duration::from_secs(10);
    while runs(pid) {
        assert!(
            Instant::now() < deadline,
            "the orphan on port {port} still runs"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!redis_server::registry().join(pid.to_string()).exists());
    // The servers of processes that still run, this one's among them, are left alone.
    let mine = RedisServer::start();
    redis_server::stop_orphans();
    assert!(runs(mine.pid().unwrap()));
}

#[test]
fn a_server_is_stopped_when_its_test_panics() {
    let pid = std::sync::Mutex::new(None);
    let failed = std::panic::catch_unwind(|| {
        let server = RedisServer::start();
        *pid.lock().unwrap() = server.pid();
        panic!("a test that fails while its server runs");
    });
    assert!(failed.is_err());
    let pid = pid.into_inner().unwrap().unwrap();
    assert!(!runs(pid));
    assert!(!redis_server::registry().join(pid.to_string()).exists());
}
