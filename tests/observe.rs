//! Named limiters report (issue 24): exact counts through the `metrics` facade after a
//! scripted workload on paused time, read with `metrics-util`'s debugging recorder, and
//! `tracing` events at their levels, read from a subscriber that writes to a buffer.
#![cfg(all(feature = "metrics", feature = "tracing"))]

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::{CompositeKey, MetricKind};
use token_bucket::observe::{
    self, ADMITTED_PERMITS, AVAILABLE_PERMITS, QUEUED_REQUESTS, REFUSED_REQUESTS,
    TIMED_OUT_REQUESTS, WAITED_REQUESTS, WAIT_SECONDS,
};
use token_bucket::{Rate, TakeError, TokenBucket};

/// Every metric the recorder holds, by key. A snapshot takes the counters' counts (they
/// start again from 0), so each test takes one and reads every metric from it.
struct Metrics(HashMap<CompositeKey, DebugValue>);

impl Metrics {
    fn of(snapshotter: &Snapshotter) -> Metrics {
        let snapshot = snapshotter.snapshot().into_hashmap();
        Metrics(
            snapshot
                .into_iter()
                .map(|(key, (_, _, value))| (key, value))
                .collect(),
        )
    }

    /// The metric `name` of the bucket named "api".
    fn value(&self, kind: MetricKind, name: &str) -> Option<&DebugValue> {
        let labels = [
            metrics::Label::new("limiter", "api"),
            metrics::Label::new("kind", "token_bucket"),
        ];
        let key = metrics::Key::from_parts(name.to_owned(), labels.to_vec());
        self.0.get(&CompositeKey::new(kind, key))
    }

    fn counter(&self, name: &str) -> u64 {
        match self.value(MetricKind::Counter, name) {
            Some(DebugValue::Counter(count)) => *count,
            other => panic!("{name}: {other:?}"),
        }
    }

    fn gauge(&self, name: &str) -> f64 {
        match self.value(MetricKind::Gauge, name) {
            Some(DebugValue::Gauge(gauge)) => gauge.into_inner(),
            other => panic!("{name}: {other:?}"),
        }
    }
}

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
    assert_eq!(metrics.counter(ADMITTED_PERMITS), 3);
    assert_eq!(metrics.counter(REFUSED_REQUESTS), 1);
    assert_eq!(metrics.counter(WAITED_REQUESTS), 1);
    assert_eq!(metrics.counter(TIMED_OUT_REQUESTS), 1);
    match metrics.value(MetricKind::Histogram, WAIT_SECONDS) {
        Some(DebugValue::Histogram(waits)) => {
            let waits: Vec<f64> = waits.iter().map(|wait| wait.into_inner()).collect();
            assert_eq!(waits, [1.0]);
        }
        other => panic!("{other:?}"),
    }
    // Gauges are set only when asked: a waiter queued, the bucket empty.
    let waiter = tokio::spawn({
        let bucket = bucket.clone();
        async move { bucket.take(2).await }
    });
    tokio::task::yield_now().await;
    observe::record_gauges();
    let metrics = Metrics::of(&snapshotter);
    assert_eq!(metrics.gauge(QUEUED_REQUESTS), 1.0);
    assert_eq!(metrics.gauge(AVAILABLE_PERMITS), 0.0);
    waiter.await.unwrap().unwrap();
    tokio::time::advance(Duration::from_secs(1)).await;
    observe::record_gauges();
    let metrics = Metrics::of(&snapshotter);
    assert_eq!(metrics.gauge(QUEUED_REQUESTS), 0.0);
    assert_eq!(metrics.gauge(AVAILABLE_PERMITS), 1.0);
    // The waiter's 2 permits, after 2 s: counted as admitted after waiting.
    assert_eq!(metrics.counter(ADMITTED_PERMITS), 2);
    assert_eq!(metrics.counter(WAITED_REQUESTS), 1);
}

/// A composite over a named bucket reports what it decides for it: the permits it admits
/// at once or after waiting, and the refusals its `try_acquire` gets from it.
#[tokio::test(start_paused = true)]
async fn a_composite_reports_its_decisions_on_a_named_bucket() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let bucket = named_bucket(&recorder, "api");
    let other = TokenBucket::new(Rate::per_second(10), 10).unwrap();
    let both = token_bucket::all((&bucket, &other)).unwrap();
    both.try_acquire(2).unwrap();
    assert!(both.try_acquire(1).is_err());
    both.acquire(1).await.unwrap();
    let metrics = Metrics::of(&snapshotter);
    assert_eq!(metrics.counter(ADMITTED_PERMITS), 3);
    assert_eq!(metrics.counter(REFUSED_REQUESTS), 1);
}

/// A bucket without a name registers and records nothing.
#[tokio::test(start_paused = true)]
async fn an_unnamed_bucket_reports_nothing() {
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

/// A buffer a `tracing` subscriber writes to.
#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Buffer {
    fn lines(&self) -> Vec<String> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_owned).collect()
    }
}

/// Events at their levels: a refusal and a timeout at `debug`, a grant after waiting at
/// `trace` inside the wait's `debug` span, a close at `info`; with the subscriber at
/// `info`, only the close is seen.
#[tokio::test(start_paused = true)]
async fn a_named_bucket_emits_its_events_at_their_levels() {
    for (level, expected) in [
        (tracing::Level::TRACE, 5),
        (tracing::Level::DEBUG, 3),
        (tracing::Level::INFO, 1),
    ] {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(level)
            .with_ansi(false)
            .without_time()
            .with_writer(move || writer.clone())
            .finish();
        let _default = tracing::subscriber::set_default(subscriber);
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
        let lines = buffer.lines();
        assert_eq!(lines.len(), expected, "{level}: {lines:#?}");
        let has = |level: &str, text: &str| {
            lines.iter().any(|line| {
                line.contains(level) && line.contains(text) && line.contains("limiter=\"api\"")
            })
        };
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
