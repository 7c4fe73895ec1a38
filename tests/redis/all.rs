//! Several limits, one decision: `RedisAll` (issue 14, part 3), on one server and on a
//! Redis Cluster, whose keys must share one hash slot.

use std::time::Duration;

use super::*;

/// How long `limits` tells `permits` to wait.
async fn all_wait_for(limits: &RedisAll, permits: u64) -> Duration {
    match limits.try_acquire(permits).await {
        Err(RedisLimitError::Limited { retry_after }) => retry_after,
        other => panic!("expected Limited, got {other:?}"),
    }
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
pub(super) fn bucket_and_window<C: RedisConnection>(
    connection: C,
    options: RedisOptions,
) -> (RedisTokenBucket<C>, RedisFixedWindow<C>) {
    let bucket = RedisTokenBucket::new(connection.clone(), Rate::per_hour(1), 5, options.clone());
    let window = RedisFixedWindow::new(connection, 5, HOUR, options);
    (bucket.unwrap(), window.unwrap())
}

/// Asks `limits` for a permit, which Redis must refuse for keys of several slots.
pub(super) async fn refused_cross_slot(limits: &RedisAll) -> RedisLimitError {
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
