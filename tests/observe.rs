//! Named limiters report (issue 24): exact counts through the `metrics` facade after a
//! scripted workload on paused time, read with `metrics-util`'s debugging recorder, and
//! `tracing` events at their levels, read from a subscriber that writes to a buffer.
#![cfg(all(feature = "metrics", feature = "tracing"))]

mod common;

use std::time::Duration;

use common::observe::{has_line, lines_at, Metrics, ONE_AT_A_TIME};
use metrics_util::debugging::DebuggingRecorder;
use token_bucket::observe::{
    self, ADMITTED_PERMITS, AVAILABLE_PERMITS, QUEUED_REQUESTS, REFUSED_REQUESTS,
    TIMED_OUT_REQUESTS, WAITED_REQUESTS, WAIT_SECONDS,
};
use token_bucket::{ConfigError, Rate, TakeError, TokenBucket};

/// The labels of the bucket named "api".
const API: &[(&str, &str)] = &[("limiter", "api"), ("kind", "token_bucket")];

fn named_bucket(recorder: &DebuggingRecorder, name: &str) -> TokenBucket {
    metrics::with_local_recorder(recorder, || {
        TokenBucket::builder()
            .rate(Rate::per_second(1))
            .capacity(2)
            .name(name)
            .build()
            .unwrap()
    })
}

/// A scripted workload counted exactly: 2 permits taken at once, 1 refused, a take that
/// waits 1 s, one that times out, and the gauges as of `record_gauges`.
#[tokio::test(start_paused = true)]
async fn a_named_bucket_counts_every_decision_exactly() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let bucket = named_bucket(&recorder, "api");
    bucket.try_take(2).unwrap();
    assert!(bucket.try_take(1).is_err());
    bucket.take(1).await.unwrap();
    assert_eq!(
        bucket.take_timeout(2, Duration::from_millis(500)).await,
        Err(TakeError::Timeout)
    );
    let metrics = Metrics::of(&snapshotter);
    assert_eq!(metrics.counter(ADMITTED_PERMITS, API), 3);
    assert_eq!(metrics.counter(REFUSED_REQUESTS, API), 1);
    assert_eq!(metrics.counter(WAITED_REQUESTS, API), 1);
    assert_eq!(metrics.counter(TIMED_OUT_REQUESTS, API), 1);
    assert_eq!(metrics.histogram(WAIT_SECONDS, API), [1.0]);
    // Gauges are set only when asked: a waiter queued, the bucket empty.
    let waiter = tokio::spawn({
        let bucket = bucket.clone();
        async move { bucket.take(2).await }
    });
    tokio::task::yield_now().await;
    observe::record_gauges();
    let metrics = Metrics::of(&snapshotter);
    assert_eq!(metrics.gauge(QUEUED_REQUESTS, API), 1.0);
    assert_eq!(metrics.gauge(AVAILABLE_PERMITS, API), 0.0);
    waiter.await.unwrap().unwrap();
    tokio::time::advance(Duration::from_secs(1)).await;
    observe::record_gauges();
    let metrics = Metrics::of(&snapshotter);
    assert_eq!(metrics.gauge(QUEUED_REQUESTS, API), 0.0);
    assert_eq!(metrics.gauge(AVAILABLE_PERMITS, API), 1.0);
    // The waiter's 2 permits, after 2 s: counted as admitted after waiting.
    assert_eq!(metrics.counter(ADMITTED_PERMITS, API), 2);
    assert_eq!(metrics.counter(WAITED_REQUESTS, API), 1);
}

/// A composite over a named bucket reports what it decides for it: the permits it admits
/// at once or after waiting, and the refusals its `try_acquire` gets from it.
#[tokio::test(start_paused = true)]
async fn a_composite_reports_its_decisions_on_a_named_bucket() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let bucket = named_bucket(&recorder, "api");
    let other = TokenBucket::new(Rate::per_second(10), 10).unwrap();
    let both = token_bucket::all((&bucket, &other)).unwrap();
    both.try_acquire(2).unwrap();
    assert!(both.try_acquire(1).is_err());
    both.acquire(1).await.unwrap();
    let metrics = Metrics::of(&snapshotter);
    assert_eq!(metrics.counter(ADMITTED_PERMITS, API), 3);
    assert_eq!(metrics.counter(REFUSED_REQUESTS, API), 1);
}

/// A bucket without a name registers and records nothing.
#[tokio::test(start_paused = true)]
async fn an_unnamed_bucket_reports_nothing() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let bucket = metrics::with_local_recorder(&recorder, || {
        TokenBucket::new(Rate::per_second(1), 1).unwrap()
    });
    bucket.try_take(1).unwrap();
    assert!(bucket.try_take(1).is_err());
    bucket.take(1).await.unwrap();
    observe::record_gauges();
    assert!(snapshotter.snapshot().into_vec().is_empty());
}

/// A named bucket whose settings are refused registers nothing: the settings are checked
/// before the name is.
#[tokio::test(start_paused = true)]
async fn a_named_bucket_refused_at_build_registers_nothing() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let refused = metrics::with_local_recorder(&recorder, || {
        let builder = TokenBucket::builder().rate(Rate::per_second(1)).name("api");
        builder.capacity(0).build()
    });
    assert_eq!(refused.unwrap_err(), ConfigError::ZeroCapacity);
    observe::record_gauges();
    assert!(snapshotter.snapshot().into_vec().is_empty());
}

/// Events at their levels: a refusal and a timeout at `debug`, a grant after waiting at
/// `trace` inside the wait's `debug` span, a close at `info`; with the subscriber at
/// `info`, only the close is seen.
#[tokio::test(start_paused = true)]
async fn a_named_bucket_emits_its_events_at_their_levels() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    for (level, expected) in [
        (tracing::Level::TRACE, 5),
        (tracing::Level::DEBUG, 3),
        (tracing::Level::INFO, 1),
    ] {
        let lines = lines_at(level, || async {
            let bucket = TokenBucket::builder()
                .rate(Rate::per_second(1))
                .capacity(1)
                .name("api")
                .build()
                .unwrap();
            bucket.try_take(1).unwrap();
            assert!(bucket.try_take(1).is_err());
            bucket.take(1).await.unwrap();
            // Queued behind a waiter, then timed out at its deadline.
            let ahead = tokio::spawn({
                let bucket = bucket.clone();
                async move { bucket.take(1).await }
            });
            tokio::task::yield_now().await;
            let timed_out = bucket.take_timeout(1, Duration::from_millis(1500)).await;
            ahead.await.unwrap().unwrap();
            assert_eq!(timed_out, Err(TakeError::Timeout));
            bucket.close();
            // An unnamed bucket emits nothing.
            let unnamed = TokenBucket::new(Rate::per_second(1), 1).unwrap();
            unnamed.try_take(1).unwrap();
            assert!(unnamed.try_take(1).is_err());
            unnamed.close();
        })
        .await;
        assert_eq!(lines.len(), expected, "{level}: {lines:#?}");
        let has = |level: &str, text: &str| has_line(&lines, level, text, &["limiter=\"api\""]);
        assert!(has("INFO", "closed"), "{lines:#?}");
        if level >= tracing::Level::DEBUG {
            assert!(has("DEBUG", "refused"), "{lines:#?}");
            assert!(has("DEBUG", "timed out"), "{lines:#?}");
        }
        if level >= tracing::Level::TRACE {
            assert!(has("TRACE", "granted after waiting"), "{lines:#?}");
            assert!(
                lines.iter().any(|line| line.contains("wait{")),
                "{lines:#?}"
            );
        }
    }
}
