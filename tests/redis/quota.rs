//! What a decision reports beside its verdict (issue 22, item 4): each key's quota, the
//! whole permits left and how long until it is whole again, from the same script call.
//!
//! Redis decides on its own clock, which a test cannot stop. So the exact instants come
//! from Redis itself: a grant stores its instant in the key (a bucket's `time`, a
//! window's `start`, a log's scores), and a refusal, which writes nothing, is bracketed
//! by the server's `TIME` read just before and just after it. Every `full_after` is
//! asserted exactly, or between the values it takes at those two instants.

use std::future::Future;
use std::time::Duration;

use token_bucket::redis::driver;
use token_bucket::redis::driver::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig,
};
use token_bucket::redis::{
    AllDecision, RedisAlgorithm, RedisAll, RedisLimitError, RedisLimiter, RedisTokenBucket,
};
use token_bucket::{Decision, Policy, Quota, Rate, TryAcquireError};

use super::redis_server::RedisServer;
use super::{
    connect, exists, fail_closed, fail_open, gone_url, hourly_bucket, hourly_log, hourly_window,
    lazy_manager, scripts_held_and_loads, HOUR,
};

/// Microseconds since 1970 on the server's clock, the one its scripts read.
async fn server_micros(connection: &mut impl ConnectionLike) -> u64 {
    let (seconds, micros): (u64, u64) = driver::cmd("TIME").query_async(connection).await.unwrap();
    seconds * 1_000_000 + micros
}

/// An integer field of the hash at `key`.
async fn field(connection: &mut impl ConnectionLike, key: &str, name: &str) -> u64 {
    driver::cmd("HGET")
        .arg(key)
        .arg(name)
        .query_async(connection)
        .await
        .unwrap()
}

fn micros(micros: u64) -> Duration {
    Duration::from_micros(micros)
}

fn granted(remaining: u64, full_after: Duration) -> Decision {
    Decision {
        result: Ok(()),
        quota: Some(Quota {
            remaining,
            full_after,
        }),
    }
}

/// A refusal's wait and quota.
fn refused(decision: &Decision) -> (Duration, Quota) {
    match decision {
        Decision {
            result: Err(TryAcquireError::Limited { retry_after }),
            quota: Some(quota),
        } => (*retry_after, *quota),
        other => panic!("expected a refusal with a quota, got {other:?}"),
    }
}

/// Asserts `full_after` is what it is at some instant between `before` and `after`
/// (server microseconds), falling from `at_before` by a microsecond a microsecond.
fn between(full_after: Duration, at_before: Duration, before: u64, after: u64) {
    let at_after = at_before.saturating_sub(micros(after - before));
    assert!(
        full_after <= at_before && full_after >= at_after,
        "{full_after:?} not within [{at_after:?}, {at_before:?}]"
    );
}

/// `retry_after` is `wait` in whole milliseconds rounded up.
fn rounded_up(retry_after: Duration, wait: Duration) {
    assert!(
        retry_after >= wait && retry_after < wait + Duration::from_millis(1),
        "{retry_after:?} for a wait of {wait:?}"
    );
}

/// Checks `limiter`'s policy, and that `key`, untouched, is whole: all of the policy's
/// limit left, and nothing to wait for, read without writing anything. Its Redis key.
async fn starts_whole<A: RedisAlgorithm>(
    limiter: &RedisLimiter<A>,
    admin: &mut ConnectionManager,
    key: &str,
    policy: Policy,
) -> String {
    assert_eq!(limiter.policy(), policy);
    assert_eq!(
        limiter.try_acquire_decision(key, 0).await.unwrap(),
        granted(policy.limit, Duration::ZERO)
    );
    let redis_key = limiter.redis_key(key);
    assert!(!exists(admin, &redis_key).await);
    redis_key
}

/// `decision`, and the server's clock just before and just after it was made.
async fn bracketed<T>(
    admin: &mut ConnectionManager,
    decision: impl Future<Output = T>,
) -> (T, u64, u64) {
    let before = server_micros(admin).await;
    let decided = decision.await;
    let after = server_micros(admin).await;
    (decided, before, after)
}

#[tokio::test]
async fn a_token_bucket_reports_its_whole_tokens_and_when_it_is_full_exactly() {
    let server = RedisServer::start();
    let mut admin = connect(&server).await;
    // One token an hour, ten at most: a decision's tokens are exact for an hour.
    let bucket = hourly_bucket(connect(&server).await, 10);
    let policy = Policy {
        limit: 10,
        window: HOUR * 10,
    };
    let key = starts_whole(&bucket, &mut admin, "user", policy).await;

    // 4 taken from a full bucket: 4 hours to full, to the microsecond.
    assert_eq!(
        bucket.try_acquire_decision("user", 4).await.unwrap(),
        granted(6, HOUR * 4)
    );
    let first = field(&mut admin, &key, "time").await;
    // 3 more, a little later: what came back since counts, in parts of a token.
    let second_decision = bucket.try_acquire_decision("user", 3).await.unwrap();
    let second = field(&mut admin, &key, "time").await;
    assert_eq!(
        second_decision,
        granted(3, HOUR * 7 - micros(second - first))
    );

    // 5 are not there: refused, nothing written, the state as it stands reported.
    let parts = field(&mut admin, &key, "parts").await;
    let (decision, before, after) =
        bracketed(&mut admin, bucket.try_acquire_decision("user", 5)).await;
    let (retry_after, quota) = refused(&decision.unwrap());
    assert_eq!(quota.remaining, 3);
    between(
        quota.full_after,
        HOUR * 7 - micros(before - first),
        before,
        after,
    );
    // The wait is for 5 of the 7 missing tokens: 2 hours less than full, at one instant.
    rounded_up(retry_after, quota.full_after - HOUR * 5);
    assert_eq!(
        (
            field(&mut admin, &key, "parts").await,
            field(&mut admin, &key, "time").await
        ),
        (parts, second)
    );

    // A read takes nothing: the 3 are still there.
    let read = bucket.try_acquire_decision("user", 0).await.unwrap();
    assert_eq!((read.result, read.quota.unwrap().remaining), (Ok(()), 3));
    let last = bucket.try_acquire_decision("user", 3).await.unwrap();
    let third = field(&mut admin, &key, "time").await;
    assert_eq!(last, granted(0, HOUR * 10 - micros(third - first)));
}

#[tokio::test]
async fn a_token_bucket_counts_only_whole_tokens_at_a_rate_of_fractions() {
    let server = RedisServer::start();
    let mut admin = connect(&server).await;
    // 3 tokens per 7 ms: a token is 7,000 parts, and 3 accrue each microsecond.
    let rate = Rate::new(3, Duration::from_millis(7));
    let bucket = RedisTokenBucket::new(connect(&server).await, rate, 1_000, fail_closed()).unwrap();
    // 1,000 tokens fill in 2,333,333.33... µs: the policy rounds the nanoseconds up.
    assert_eq!(
        bucket.policy(),
        Policy {
            limit: 1_000,
            window: Duration::from_nanos(2_333_333_334)
        }
    );
    let key = bucket.redis_key("fractions");
    // Taking 1,000 leaves none; the full bucket comes back in 7,000,000 / 3 µs, rounded up.
    assert_eq!(
        bucket
            .try_acquire_decision("fractions", 1_000)
            .await
            .unwrap(),
        granted(0, micros(2_333_334))
    );
    let first = field(&mut admin, &key, "time").await;
    // Long enough for a few tokens to come back.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let read = bucket.try_acquire_decision("fractions", 0).await.unwrap();
    let after = server_micros(&mut admin).await;
    let quota = read.quota.unwrap();
    // The read is `elapsed` µs after the take (at most until `after`): 3 parts came back
    // each, so the bucket lacks 7,000,000 - 3 × elapsed parts, 2,333,334 - elapsed µs of
    // refill, and holds the whole tokens of 3 × elapsed parts: both read at one instant.
    if quota.full_after.is_zero() {
        // A loaded machine took 2.3 s between the two: full.
        assert_eq!(quota.remaining, 1_000);
        assert!(after - first >= 2_333_334, "{quota:?}");
    } else {
        let elapsed = 2_333_334 - quota.full_after.as_micros() as u64;
        assert!(elapsed >= 20_000 && elapsed <= after - first, "{quota:?}");
        assert_eq!(quota.remaining, elapsed * 3 / 7_000, "{quota:?}");
    }
}

#[tokio::test]
async fn a_fixed_window_reports_its_permits_left_and_when_it_ends() {
    let server = RedisServer::start();
    let mut admin = connect(&server).await;
    let window = hourly_window(connect(&server).await, 5);
    let policy = Policy {
        limit: 5,
        window: HOUR,
    };
    let key = starts_whole(&window, &mut admin, "user", policy).await;

    // The first request starts the window: it ends in exactly an hour.
    assert_eq!(
        window.try_acquire_decision("user", 2).await.unwrap(),
        granted(3, HOUR)
    );
    let start = field(&mut admin, &key, "start").await;

    let (decision, before, after) =
        bracketed(&mut admin, window.try_acquire_decision("user", 1)).await;
    let decision = decision.unwrap();
    assert_eq!(decision.result, Ok(()));
    let quota = decision.quota.unwrap();
    assert_eq!(quota.remaining, 2);
    let ends_in = |at: u64| HOUR - micros(at - start);
    between(quota.full_after, ends_in(before), before, after);

    // Refused: the count unchanged, and the wait is the window's end, in milliseconds.
    let (decision, before, after) =
        bracketed(&mut admin, window.try_acquire_decision("user", 3)).await;
    let (retry_after, quota) = refused(&decision.unwrap());
    assert_eq!(quota.remaining, 2);
    between(quota.full_after, ends_in(before), before, after);
    rounded_up(retry_after, quota.full_after);
    assert_eq!(field(&mut admin, &key, "count").await, 3);
    assert_eq!(
        window
            .try_acquire_decision("user", 0)
            .await
            .unwrap()
            .quota
            .unwrap()
            .remaining,
        2
    );
    assert_eq!(field(&mut admin, &key, "count").await, 3);
}

/// The scores of the log at `key`, oldest first.
async fn scores(connection: &mut impl ConnectionLike, key: &str) -> Vec<u64> {
    let pairs: Vec<(String, u64)> = driver::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(connection)
        .await
        .unwrap();
    pairs.into_iter().map(|(_, score)| score).collect()
}

#[tokio::test]
async fn a_sliding_log_reports_its_permits_left_and_when_its_newest_stops_counting() {
    let server = RedisServer::start();
    let mut admin = connect(&server).await;
    let log = hourly_log(connect(&server).await, 5);
    let policy = Policy {
        limit: 5,
        window: HOUR,
    };
    let key = starts_whole(&log, &mut admin, "user", policy).await;

    // Each grant logs its permits now: the log is whole an hour later, exactly.
    for (permits, remaining) in [(2, 3), (1, 2), (2, 0)] {
        assert_eq!(
            log.try_acquire_decision("user", permits).await.unwrap(),
            granted(remaining, HOUR)
        );
    }
    let logged = scores(&mut admin, &key).await;
    let (oldest, newest) = (logged[0], logged[4]);

    // Refused: whole when the newest stops counting; one permit back when the oldest does.
    let (decision, before, after) =
        bracketed(&mut admin, log.try_acquire_decision("user", 1)).await;
    let (retry_after, quota) = refused(&decision.unwrap());
    assert_eq!(quota.remaining, 0);
    between(
        quota.full_after,
        HOUR - micros(before - newest),
        before,
        after,
    );
    rounded_up(retry_after, quota.full_after - micros(newest - oldest));
    assert_eq!(scores(&mut admin, &key).await, logged);
}

#[tokio::test]
async fn try_acquire_and_its_decision_run_one_script() {
    let server = RedisServer::start();
    let mut admin = connect(&server).await;
    let bucket = hourly_bucket(connect(&server).await, 10);
    bucket.try_acquire("user", 1).await.unwrap();
    bucket.try_acquire_decision("user", 1).await.unwrap();
    bucket.try_acquire_decision("user", 0).await.unwrap();
    // One script, sent whole once.
    assert_eq!(
        scripts_held_and_loads(&mut admin).await,
        ("1".into(), "1".into())
    );
    // And they count on one bucket: 2 of 10 taken.
    assert_eq!(
        bucket
            .try_acquire_decision("user", 0)
            .await
            .unwrap()
            .quota
            .unwrap()
            .remaining,
        8
    );
}

#[tokio::test]
async fn a_decision_without_redis_reports_no_quota() {
    let config = ConnectionManagerConfig::new().set_number_of_retries(0);
    let gone: ConnectionManager = lazy_manager(&gone_url(), config);
    let open = RedisTokenBucket::new(gone.clone(), Rate::per_hour(1), 5, fail_open()).unwrap();
    let closed = RedisTokenBucket::new(gone, Rate::per_hour(1), 5, fail_closed()).unwrap();

    // More than the capacity: refused without asking Redis, so nothing is known, and
    // nothing counted.
    for limiter in [&open, &closed] {
        assert_eq!(
            limiter.try_acquire_decision("k", 6).await.unwrap(),
            Decision {
                result: Err(TryAcquireError::ExceedsLimit {
                    requested: 6,
                    limit: 5
                }),
                quota: None
            }
        );
    }
    assert_eq!(open.fail_open_count(), 0);

    // Failing open: allowed and counted, a read too; nothing is known of the key.
    for permits in [1, 0] {
        assert_eq!(
            open.try_acquire_decision("k", permits).await.unwrap(),
            Decision {
                result: Ok(()),
                quota: None
            }
        );
    }
    assert_eq!(open.fail_open_count(), 2);

    // Failing closed: the error, as try_acquire gives it.
    for permits in [1, 0] {
        let error = closed.try_acquire_decision("k", permits).await.unwrap_err();
        assert!(
            matches!(error, RedisLimitError::Unavailable { .. }),
            "{error:?}"
        );
    }

    // RedisAll the same: every member allowed, nothing known, each limiter counting once.
    let decision = RedisAll::new([open.member("a"), open.member("b")])
        .try_acquire_decision(1)
        .await
        .unwrap();
    let unknown = Decision {
        result: Ok(()),
        quota: None,
    };
    assert_eq!(
        decision,
        AllDecision {
            result: Ok(()),
            members: vec![unknown.clone(), unknown]
        }
    );
    assert_eq!(open.fail_open_count(), 3);
    let error = RedisAll::new([open.member("a"), closed.member("b")])
        .try_acquire_decision(1)
        .await
        .unwrap_err();
    assert!(
        matches!(error, RedisLimitError::Unavailable { .. }),
        "{error:?}"
    );
    assert!(matches!(
        RedisAll::new([]).try_acquire_decision(1).await,
        Err(RedisLimitError::NoMembers)
    ));
}

#[tokio::test]
async fn all_reports_every_members_decision_and_quota_from_one_call() {
    let server = RedisServer::start();
    let connection = connect(&server).await;
    let mut admin = connect(&server).await;
    // Per client, a bucket of 5 gaining one an hour; for everyone, 4 an hour.
    let per_client = hourly_bucket(connection.clone(), 5);
    let global = hourly_window(connection, 4);
    assert_eq!(per_client.member("client").policy(), per_client.policy());
    let limits = RedisAll::new([per_client.member("client"), global.member("everyone")]);
    let bucket_key = per_client.redis_key("client");

    // A read of untouched keys: both whole, nothing written.
    assert_eq!(
        limits.try_acquire_decision(0).await.unwrap(),
        AllDecision {
            result: Ok(()),
            members: vec![granted(5, Duration::ZERO), granted(4, Duration::ZERO)]
        }
    );
    assert!(!exists(&mut admin, &bucket_key).await);

    // Granted: each member's state after the take, exactly.
    assert_eq!(
        limits.try_acquire_decision(2).await.unwrap(),
        AllDecision {
            result: Ok(()),
            members: vec![granted(3, HOUR * 2), granted(2, HOUR)]
        }
    );
    let taken = field(&mut admin, &bucket_key, "time").await;
    let start = field(&mut admin, &global.redis_key("everyone"), "start").await;

    // The window refuses 3 more, the bucket would allow them: nothing taken from either,
    // each reporting its state as it is; only the window's result is a refusal.
    let (decision, before, after) = bracketed(&mut admin, limits.try_acquire_decision(3)).await;
    let decision = decision.unwrap();
    assert_eq!(decision.refused_by().collect::<Vec<_>>(), [1]);
    let (bucket, window) = (&decision.members[0], &decision.members[1]);
    assert_eq!(bucket.result, Ok(()));
    let bucket_quota = bucket.quota.unwrap();
    assert_eq!(bucket_quota.remaining, 3);
    between(
        bucket_quota.full_after,
        HOUR * 2 - micros(before - taken),
        before,
        after,
    );
    let (window_wait, window_quota) = refused(window);
    assert_eq!(window_quota.remaining, 2);
    between(
        window_quota.full_after,
        HOUR - micros(before - start),
        before,
        after,
    );
    rounded_up(window_wait, window_quota.full_after);
    assert_eq!(
        decision.result,
        Err(TryAcquireError::Limited {
            retry_after: window_wait
        })
    );
    assert_eq!(field(&mut admin, &bucket_key, "time").await, taken);

    // Both refuse (the bucket holds 3, the window 2, of 4 asked): each its own wait,
    // the decision's the latest.
    let decision = limits.try_acquire_decision(4).await.unwrap();
    assert_eq!(decision.refused_by().collect::<Vec<_>>(), [0, 1]);
    let (bucket_wait, bucket_quota) = refused(&decision.members[0]);
    let (window_wait, _) = refused(&decision.members[1]);
    // The bucket lacks one token: an hour less than the two to full.
    rounded_up(bucket_wait, bucket_quota.full_after - HOUR);
    assert_eq!(
        decision.result,
        Err(TryAcquireError::Limited {
            retry_after: bucket_wait.max(window_wait)
        })
    );

    // A key named twice: both members report its one state, after twice the permits.
    let twice = RedisAll::new([per_client.member("twice"), per_client.member("twice")]);
    assert_eq!(
        twice.try_acquire_decision(2).await.unwrap(),
        AllDecision {
            result: Ok(()),
            members: vec![granted(1, HOUR * 4), granted(1, HOUR * 4)]
        }
    );

    // More than a member's limit: refused without Redis, that member named.
    let exceeding = limits.try_acquire_decision(5).await.unwrap();
    let limit_of_four = Err(TryAcquireError::ExceedsLimit {
        requested: 5,
        limit: 4,
    });
    assert_eq!(
        exceeding,
        AllDecision {
            result: limit_of_four,
            members: vec![
                Decision {
                    result: Ok(()),
                    quota: None
                },
                Decision {
                    result: limit_of_four,
                    quota: None
                }
            ]
        }
    );
}
