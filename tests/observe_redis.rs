//! Named Redis limiters and leased fronts report (issue 24), against a real
//! `redis-server` started by each test on a free loopback port (see
//! `common/redis_server.rs`): exact counts through the `metrics` facade after a scripted
//! workload, read with `metrics-util`'s debugging recorder, and `tracing` events at their
//! levels, read from a subscriber that writes to a buffer.
//!
//! Redis decides on its own clock, so these tests run on real time, as `redis.rs` does;
//! the counts are exact all the same, since every step's outcome is.
#![cfg(all(feature = "redis", feature = "metrics", feature = "tracing"))]

#[path = "common/redis_server.rs"]
#[allow(dead_code)]
mod redis_server;

use std::collections::BTreeMap;
use std::fs::File;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;
use redis_server::RedisServer;
use token_bucket::observe::{self, REDIS_DECISIONS, REDIS_LEASE_CALLS};
use token_bucket::redis::driver::aio::{ConnectionManager, ConnectionManagerConfig};
use token_bucket::redis::driver::{self, Client};
use token_bucket::redis::{
    FailurePolicy, LeaseOptions, RedisAll, RedisFixedWindow, RedisLimitError, RedisOptions,
    RedisSlidingLog, RedisTokenBucket,
};
use token_bucket::{Rate, TryAcquireError};

const HOUR: Duration = Duration::from_secs(3600);

async fn connect(server: &RedisServer) -> ConnectionManager {
    let client = Client::open(server.url()).expect("a valid URL");
    ConnectionManager::new(client)
        .await
        .expect("connect to the test's redis-server")
}

/// A manager for a port where a server ran and is gone, that connects on first use and
/// does not retry: each call is refused at once.
fn unreachable() -> ConnectionManager {
    let url = RedisServer::start().url();
    let config = ConnectionManagerConfig::new().set_number_of_retries(0);
    let client = Client::open(url).expect("a valid URL");
    ConnectionManager::new_lazy_with_config(client, config).expect("a lazy manager")
}

fn fail_open(name: &str) -> RedisOptions {
    RedisOptions::new(FailurePolicy::FailOpen).with_name(name)
}

fn fail_closed(name: &str) -> RedisOptions {
    RedisOptions::new(FailurePolicy::FailClosed).with_name(name)
}

/// A subscriber for this thread that keeps every event and writes none, for the tests
/// that count metrics. `tracing` caches whether anyone wants a callsite's events when it
/// first fires, from the subscribers alive then: a callsite first fired by a thread with
/// no subscriber, while the events test's subscriber is being set on its own thread, can
/// be cached as wanted by nobody, and that test would miss its events. With a subscriber
/// alive on every thread that fires them, no callsite is cached so.
fn keep_events_quiet() -> tracing::subscriber::DefaultGuard {
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(std::io::sink)
        .finish();
    tracing::subscriber::set_default(subscriber)
}

/// What one snapshot of the recorder holds (a snapshot takes the counters' counts: one
/// per check), each series written `name{label=value,...}`, its labels sorted.
struct Recorded {
    counters: BTreeMap<String, u64>,
    gauges: BTreeMap<String, f64>,
    histograms: BTreeMap<String, Vec<f64>>,
}

impl Recorded {
    fn of(snapshotter: &Snapshotter) -> Recorded {
        let mut recorded = Recorded {
            counters: BTreeMap::new(),
            gauges: BTreeMap::new(),
            histograms: BTreeMap::new(),
        };
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let mut labels: Vec<String> = key
                .key()
                .labels()
                .map(|label| format!("{}={}", label.key(), label.value()))
                .collect();
            labels.sort();
            let series = format!("{}{{{}}}", key.key().name(), labels.join(","));
            match (key.kind(), value) {
                (MetricKind::Counter, DebugValue::Counter(count)) => {
                    recorded.counters.insert(series, count);
                }
                (MetricKind::Gauge, DebugValue::Gauge(gauge)) => {
                    recorded.gauges.insert(series, gauge.into_inner());
                }
                (MetricKind::Histogram, DebugValue::Histogram(values)) => {
                    let values = values.iter().map(|value| value.into_inner()).collect();
                    recorded.histograms.insert(series, values);
                }
                (kind, value) => panic!("{series}: {kind:?} holding {value:?}"),
            }
        }
        recorded
    }

    /// The counters of the limiter `name` that counted something, as `series count`.
    fn counted(&self, name: &str) -> Vec<String> {
        self.counters
            .iter()
            .filter(|(series, count)| **count > 0 && of_limiter(series, name))
            .map(|(series, count)| format!("{series} {count}"))
            .collect()
    }

    /// How many counters the limiter `name` has registered.
    fn registered(&self, name: &str) -> usize {
        let of_name = |series: &&String| of_limiter(series, name);
        self.counters.keys().filter(of_name).count()
    }
}

/// Whether `series` is of the limiter `name`: its label `limiter` is `name`, whole.
fn of_limiter(series: &str, name: &str) -> bool {
    let label = format!("limiter={name}");
    series
        .split(['{', ',', '}'])
        .any(|written| written == label)
}

/// Two decisions, three refusals (by the limit, for more than the limit, and with a
/// quota), a request Redis could not decide under each policy (a hung Redis: timeouts;
/// an unreachable one: connections), a decision over two named limiters, and an
/// `acquire` that waits: each counted once, in its limiter's series only.
#[tokio::test]
async fn named_redis_limiters_count_their_decisions_and_outages_exactly() {
    let _quiet = keep_events_quiet();
    let server = RedisServer::start();
    let connection = connect(&server).await;
    let offline = unreachable();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let timeout = Duration::from_millis(100);
    let (search, billing, down, down_closed, per_user, per_tenant, uploads) =
        metrics::with_local_recorder(&recorder, || {
            let window = |limit, options: RedisOptions| {
                RedisFixedWindow::new(connection.clone(), limit, HOUR, options).unwrap()
            };
            (
                window(2, fail_open("search").with_timeout(timeout)),
                window(
                    5,
                    fail_closed("billing")
                        .with_prefix("billing:")
                        .with_timeout(timeout),
                ),
                RedisSlidingLog::new(offline.clone(), 5, HOUR, fail_open("down")).unwrap(),
                RedisSlidingLog::new(offline, 5, HOUR, fail_closed("down-closed")).unwrap(),
                window(1, fail_open("per-user").with_prefix("user:")),
                window(5, fail_open("per-tenant").with_prefix("tenant:")),
                RedisTokenBucket::new(
                    connection.clone(),
                    Rate::per_second(20),
                    1,
                    fail_open("uploads"),
                )
                .unwrap(),
            )
        });
    // Made with no name, with the recorder: reports nothing.
    let unnamed = metrics::with_local_recorder(&recorder, || {
        let options = RedisOptions::new(FailurePolicy::FailOpen).with_prefix("unnamed:");
        RedisFixedWindow::new(connection.clone(), 1, HOUR, options).unwrap()
    });
    assert_eq!(search.name(), Some("search"));
    assert_eq!(unnamed.name(), None);

    search.try_acquire("user-1", 1).await.unwrap();
    search.try_acquire("user-1", 1).await.unwrap();
    assert!(matches!(
        search.try_acquire("user-1", 1).await,
        Err(RedisLimitError::Limited { .. })
    ));
    assert!(matches!(
        search.try_acquire("user-1", 3).await,
        Err(RedisLimitError::ExceedsLimit { .. })
    ));
    let decision = search.try_acquire_decision("user-1", 1).await.unwrap();
    assert!(matches!(
        decision.result,
        Err(TryAcquireError::Limited { .. })
    ));
    // Zero permits decide nothing: not counted, whether Redis is asked or not.
    search.try_acquire("user-1", 0).await.unwrap();
    search.try_acquire_decision("user-1", 0).await.unwrap();
    billing.try_acquire("user-1", 1).await.unwrap();

    // Redis unreachable: allowed and counted, twice (an `acquire` does not wait for it);
    // refused under fail-closed.
    down.try_acquire("user-1", 1).await.unwrap();
    down.acquire("user-1", 1).await.unwrap();
    assert_eq!(down.fail_open_count(), 2);
    assert!(matches!(
        down_closed.try_acquire("user-1", 1).await,
        Err(RedisLimitError::Unavailable { .. })
    ));

    // One decision over two named limiters and an unnamed one: all admit, then the
    // per-user limit refuses, and only it counts the refusal.
    let both = RedisAll::new([
        per_user.member("{tenant-7}:user-1"),
        per_tenant.member("{tenant-7}"),
        unnamed.member("{tenant-7}"),
    ]);
    both.try_acquire(1).await.unwrap();
    assert!(matches!(
        both.try_acquire(1).await,
        Err(RedisLimitError::Limited { .. })
    ));
    // The unnamed limiter's own refusal is not counted either.
    assert!(unnamed.try_acquire("{tenant-7}", 1).await.is_err());

    // Refused at first, then granted within a few tens of milliseconds: one decision.
    uploads.try_acquire("user-1", 1).await.unwrap();
    uploads.acquire("user-1", 1).await.unwrap();

    // Redis hung (every client paused): each call times out, and its policy answers.
    let mut admin = connect(&server).await;
    driver::cmd("CLIENT")
        .arg("PAUSE")
        .arg(2000)
        .arg("ALL")
        .exec_async(&mut admin)
        .await
        .unwrap();
    search.try_acquire("user-2", 1).await.unwrap();
    assert!(matches!(
        billing.try_acquire("user-2", 1).await,
        Err(RedisLimitError::Timeout { .. })
    ));

    let recorded = Recorded::of(&snapshotter);
    let decisions = |kind: &str, name: &str, outcome: &str, count: u64| {
        format!("{REDIS_DECISIONS}{{kind={kind},limiter={name},outcome={outcome}}} {count}")
    };
    assert_eq!(
        recorded.counted("search"),
        [
            decisions("fixed_window", "search", "admitted", 2),
            decisions("fixed_window", "search", "refused", 3),
            "token_bucket_redis_errors_total{error=timeout,kind=fixed_window,limiter=search} 1"
                .to_owned(),
            "token_bucket_redis_fail_open_total{kind=fixed_window,limiter=search} 1".to_owned(),
        ]
    );
    assert_eq!(
        recorded.counted("billing"),
        [
            decisions("fixed_window", "billing", "admitted", 1),
            "token_bucket_redis_errors_total{error=timeout,kind=fixed_window,limiter=billing} 1"
                .to_owned(),
            "token_bucket_redis_fail_closed_total{kind=fixed_window,limiter=billing} 1".to_owned(),
        ]
    );
    assert_eq!(
        recorded.counted("down"),
        [
            "token_bucket_redis_errors_total{error=connection,kind=sliding_log,limiter=down} 2",
            "token_bucket_redis_fail_open_total{kind=sliding_log,limiter=down} 2",
        ]
    );
    assert_eq!(
        recorded.counted("down-closed"),
        [
            "token_bucket_redis_errors_total{error=connection,kind=sliding_log,limiter=down-closed} 1",
            "token_bucket_redis_fail_closed_total{kind=sliding_log,limiter=down-closed} 1",
        ]
    );
    assert_eq!(
        recorded.counted("per-user"),
        [
            decisions("fixed_window", "per-user", "admitted", 1),
            decisions("fixed_window", "per-user", "refused", 1),
        ]
    );
    assert_eq!(
        recorded.counted("per-tenant"),
        [decisions("fixed_window", "per-tenant", "admitted", 1)]
    );
    assert_eq!(
        recorded.counted("uploads"),
        [decisions("token_bucket", "uploads", "admitted", 2)]
    );
    // Every series is registered when named, at 0: two outcomes, nine kinds of error,
    // fail-open and fail-closed. The unnamed limiter has none.
    for name in [
        "search",
        "billing",
        "down",
        "down-closed",
        "per-user",
        "per-tenant",
        "uploads",
    ] {
        assert_eq!(recorded.registered(name), 13, "{name}");
    }
    assert_eq!(recorded.counters.len(), 7 * 13, "{:#?}", recorded.counters);
}

/// A front's requests as a bucket's (granted at once, after queuing, refused), its calls
/// to Redis (two leases taken, one given back at close) and the tokens they moved; its
/// limiter, named too, counts none of it.
#[tokio::test]
async fn a_named_front_counts_its_requests_leases_and_tokens_given_back_exactly() {
    let _quiet = keep_events_quiet();
    let server = RedisServer::start();
    let connection = connect(&server).await;
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let (limiter, front) = metrics::with_local_recorder(&recorder, || {
        let options = fail_closed("hot-limiter");
        let limiter = RedisTokenBucket::new(connection, Rate::per_hour(1), 100, options).unwrap();
        let lifetime = Duration::from_secs(60);
        let options = LeaseOptions::new().with_lifetime(lifetime).with_name("hot");
        let front = limiter.leased("hot-key", options).unwrap();
        (limiter, front)
    });
    assert_eq!(front.name(), Some("hot"));
    // Ten at once: they queue, and a lease of 10 serves them. Then one: it queues for a
    // lease of the ten granted over the lifetime. Then one from the nine held, at once.
    for result in join_all((0..10).map(|_| front.take(1))).await {
        result.unwrap();
    }
    front.take(1).await.unwrap();
    front.try_take(1).await.unwrap();
    assert!(matches!(
        front.try_take(101).await,
        Err(RedisLimitError::ExceedsLimit { .. })
    ));
    observe::record_gauges();
    front.close().await;
    let stats = front.stats();
    assert_eq!(
        (
            stats.granted,
            stats.leased,
            stats.given_back,
            stats.redis_calls
        ),
        (12, 20, 8, 3)
    );

    let recorded = Recorded::of(&snapshotter);
    let series = |metric: &str, extra: &str, count: u64| {
        format!("{metric}{{{extra}kind=token_bucket,limiter=hot}} {count}")
    };
    assert_eq!(
        recorded.counted("hot"),
        [
            series("token_bucket_admitted_permits_total", "", 12),
            series(REDIS_LEASE_CALLS, "call=give_back,", 1),
            series(REDIS_LEASE_CALLS, "call=take,", 2),
            series("token_bucket_redis_leased_tokens_total", "", 20),
            series("token_bucket_redis_returned_tokens_total", "", 8),
            series("token_bucket_refused_requests_total", "", 1),
            series("token_bucket_waited_requests_total", "", 11),
        ]
    );
    let waits = &recorded.histograms["token_bucket_wait_seconds{kind=token_bucket,limiter=hot}"];
    assert_eq!(waits.len(), 11, "{waits:?}");
    // Read at `record_gauges`: the 8 tokens held, nobody queued.
    assert_eq!(
        recorded.gauges["token_bucket_available_permits{kind=token_bucket,limiter=hot}"],
        8.0
    );
    assert_eq!(
        recorded.gauges["token_bucket_queued_requests{kind=token_bucket,limiter=hot}"],
        0.0
    );
    // The limiter's series are registered, and count nothing of its front's.
    assert_eq!(recorded.registered("hot-limiter"), 13);
    assert!(recorded.counted("hot-limiter").is_empty());
    assert_eq!(limiter.fail_open_count(), 0);
}

/// A front that cannot reach Redis: each request that queues makes one call for a lease,
/// which fails; under fail-open it is allowed, counted there and nowhere else, and in its
/// limiter's `fail_open_count`; under fail-closed it is refused.
#[tokio::test]
async fn a_named_front_counts_the_requests_redis_could_not_decide() {
    let _quiet = keep_events_quiet();
    let offline = unreachable();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let (open_limiter, open, closed) = metrics::with_local_recorder(&recorder, || {
        let rate = Rate::per_second(10);
        let open_options = RedisOptions::new(FailurePolicy::FailOpen);
        let open_limiter = RedisTokenBucket::new(offline.clone(), rate, 10, open_options).unwrap();
        let closed_options = RedisOptions::new(FailurePolicy::FailClosed);
        let closed_limiter = RedisTokenBucket::new(offline, rate, 10, closed_options).unwrap();
        let name = |name: &str| LeaseOptions::new().with_name(name);
        let open = open_limiter.leased("k", name("open-front")).unwrap();
        let closed = closed_limiter.leased("k", name("closed-front")).unwrap();
        (open_limiter, open, closed)
    });
    open.take(1).await.unwrap();
    open.try_take(2).await.unwrap();
    assert_eq!(open_limiter.fail_open_count(), 2);
    assert!(matches!(
        closed.take(1).await,
        Err(RedisLimitError::Unavailable { .. })
    ));

    let recorded = Recorded::of(&snapshotter);
    assert_eq!(
        recorded.counted("open-front"),
        [
            "token_bucket_redis_errors_total{error=connection,kind=token_bucket,limiter=open-front} 2",
            "token_bucket_redis_fail_open_total{kind=token_bucket,limiter=open-front} 2",
            "token_bucket_redis_lease_calls_total{call=take,kind=token_bucket,limiter=open-front} 2",
        ]
    );
    assert_eq!(
        recorded.counted("closed-front"),
        [
            "token_bucket_redis_errors_total{error=connection,kind=token_bucket,limiter=closed-front} 1",
            "token_bucket_redis_fail_closed_total{kind=token_bucket,limiter=closed-front} 1",
            "token_bucket_redis_lease_calls_total{call=take,kind=token_bucket,limiter=closed-front} 1",
        ]
    );
}

/// The lines a subscriber at `level` wrote with the target `token_bucket` while `work`
/// ran (on this thread: the test's runtime is current-thread, so its spawned tasks too).
/// It writes to a file of its own, read back once `work` is done.
async fn events_at<F: std::future::Future<Output = ()>>(
    level: tracing::Level,
    work: F,
) -> Vec<String> {
    let path = std::env::temp_dir().join(format!(
        "token-bucket-observe-redis-{}-{level}.log",
        std::process::id()
    ));
    let file = Arc::new(File::create(&path).expect("create the events' file"));
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_ansi(false)
        .without_time()
        .with_writer(file)
        .finish();
    let default = tracing::subscriber::set_default(subscriber);
    work.await;
    drop(default);
    let text = std::fs::read_to_string(&path).expect("read the events back");
    let _ = std::fs::remove_file(&path);
    text.lines()
        .filter(|line| line.contains(" token_bucket: "))
        .map(str::to_owned)
        .collect()
}

/// Events at their levels: a fail-open decision at `warn` (with its error), refusals at
/// `debug` (by the limit, for more than a front's capacity, and under fail-closed), a
/// wait's `debug` span with `trace` events in it, and a front's leases at `trace`.
/// Nothing at `info` or above but the fail-open warning; nothing from unnamed limiters.
#[tokio::test]
async fn named_redis_limiters_emit_their_events_at_their_levels() {
    let server = RedisServer::start();
    let connection = connect(&server).await;
    let offline = unreachable();
    for (round, level) in [
        tracing::Level::WARN,
        tracing::Level::INFO,
        tracing::Level::DEBUG,
        tracing::Level::TRACE,
    ]
    .into_iter()
    .enumerate()
    {
        // Each round on keys of its own.
        let prefix = format!("round-{round}:");
        let options = |options: RedisOptions| options.with_prefix(prefix.clone());
        let search =
            RedisFixedWindow::new(connection.clone(), 1, HOUR, options(fail_open("search")))
                .unwrap();
        let uploads = RedisTokenBucket::new(
            connection.clone(),
            Rate::per_second(20),
            1,
            options(fail_open("uploads")),
        )
        .unwrap();
        let down = RedisFixedWindow::new(offline.clone(), 1, HOUR, fail_open("down")).unwrap();
        let down_closed =
            RedisFixedWindow::new(offline.clone(), 1, HOUR, fail_closed("down-closed")).unwrap();
        // A prefix of its own: `search` is a fixed window too.
        let unnamed_options =
            RedisOptions::new(FailurePolicy::FailOpen).with_prefix(format!("{prefix}unnamed:"));
        let unnamed =
            RedisFixedWindow::new(connection.clone(), 1, HOUR, unnamed_options.clone()).unwrap();
        let unnamed_down =
            RedisFixedWindow::new(offline.clone(), 1, HOUR, unnamed_options).unwrap();
        let hot = RedisTokenBucket::new(
            connection.clone(),
            Rate::per_hour(1),
            100,
            options(fail_closed("hot-limiter")),
        )
        .unwrap();
        let lease_options = LeaseOptions::new().with_lifetime(Duration::from_secs(60));
        let front = hot.leased("hot", lease_options.with_name("hot")).unwrap();
        let lines = events_at(level, async {
            search.try_acquire("user-1", 1).await.unwrap();
            assert!(search.try_acquire("user-1", 1).await.is_err());
            uploads.try_acquire("user-1", 1).await.unwrap();
            uploads.acquire("user-1", 1).await.unwrap();
            down.try_acquire("user-1", 1).await.unwrap();
            assert!(down_closed.try_acquire("user-1", 1).await.is_err());
            unnamed.try_acquire("user-1", 1).await.unwrap();
            assert!(unnamed.try_acquire("user-1", 1).await.is_err());
            unnamed_down.try_acquire("user-1", 1).await.unwrap();
            // Three at once: a lease of 3. Then one: a lease of the 3 granted recently,
            // 2 of them held until the close gives them back.
            for taken in join_all((0..3).map(|_| front.take(1))).await {
                taken.unwrap();
            }
            front.take(1).await.unwrap();
            assert!(front.try_take(101).await.is_err());
            front.close().await;
        })
        .await;

        let count = |level: &str, text: &str, limiter: &str| {
            let limiter = format!("limiter=\"{limiter}\"");
            lines
                .iter()
                .filter(|line| {
                    line.trim_start().starts_with(level)
                        && line.contains(text)
                        && line.contains(&limiter)
                })
                .count()
        };
        // Always: the one fail-open decision, with its error.
        assert_eq!(
            count(
                "WARN",
                "Redis could not decide; allowed (fail-open)",
                "down"
            ),
            1,
            "{level}: {lines:#?}"
        );
        // The error as the client saw it (the connection refused), not as a fail-closed
        // limiter would have returned it.
        assert!(
            lines
                .iter()
                .any(|line| line.contains("WARN") && line.contains("error=Connection refused")),
            "{lines:#?}"
        );
        let mut expected = 1;
        if level >= tracing::Level::DEBUG {
            assert_eq!(count("DEBUG", "refused", "search"), 1, "{lines:#?}");
            assert_eq!(count("DEBUG", "refused", "hot"), 1, "{lines:#?}");
            assert_eq!(
                count(
                    "DEBUG",
                    "Redis could not decide; refused (fail-closed)",
                    "down-closed"
                ),
                1,
                "{lines:#?}"
            );
            expected += 3;
        }
        if level >= tracing::Level::TRACE {
            // Within the wait's span: one sleep or more (Redis's wait is never short, so
            // one, unless the machine stalls), then the grant.
            let retries = count("TRACE", "waiting to ask again", "uploads");
            assert!(retries >= 1, "{lines:#?}");
            let in_span = |line: &&String| line.contains("wait{limiter=\"uploads\"");
            assert_eq!(
                lines.iter().filter(in_span).count(),
                retries + 1,
                "{lines:#?}"
            );
            assert_eq!(
                count("TRACE", "granted after waiting", "uploads"),
                1,
                "{lines:#?}"
            );
            // The front: two leases taken, each request granted in its wait's span, and
            // what is left given back at close.
            assert_eq!(count("TRACE", "lease taken", "hot"), 2, "{lines:#?}");
            let granted_in_span = |line: &&String| {
                line.contains("wait{limiter=\"hot\"") && line.contains("granted after waiting")
            };
            assert_eq!(
                lines.iter().filter(granted_in_span).count(),
                4,
                "{lines:#?}"
            );
            assert_eq!(
                count("TRACE", "granted after waiting", "hot"),
                4,
                "{lines:#?}"
            );
            assert_eq!(count("TRACE", "lease given back", "hot"), 1, "{lines:#?}");
            expected += retries + 8;
        }
        assert_eq!(lines.len(), expected, "{level}: {lines:#?}");
    }
}
