//! Named window limiters report (issue 24): `FixedWindow`, `SlidingLog` and
//! `SlidingWindow`, each through a scripted workload on paused time counted exactly with
//! `metrics-util`'s debugging recorder, and their `tracing` events at their levels.
#![cfg(all(feature = "metrics", feature = "tracing"))]

mod common;

use std::time::Duration;

use common::observe::{assert_decision_events, Metrics, ONE_AT_A_TIME};
use metrics_util::debugging::DebuggingRecorder;
use token_bucket::observe::{
    self, ADMITTED_PERMITS, AVAILABLE_PERMITS, QUEUED_REQUESTS, REFUSED_REQUESTS,
    TIMED_OUT_REQUESTS, WAITED_REQUESTS, WAIT_SECONDS,
};
use token_bucket::{
    all, FixedWindow, KeyTemplate, Limiter, Member, SlidingLog, SlidingWindow, TryAcquireError,
};

/// The same workload on a named limiter admitting 2 permits a second, made by `make`
/// (inside the recorder), whose head waits `wait` behind 2 permits admitted at the
/// start.
async fn counts_every_decision_exactly<L: Limiter + Member + Clone>(
    kind: &'static str,
    make: impl FnOnce() -> L,
    wait: Duration,
) {
    let labels = [("limiter", "limited"), ("kind", kind)];
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let limiter = metrics::with_local_recorder(&recorder, make);
    limiter.try_acquire(2).unwrap();
    assert!(matches!(
        limiter.try_acquire(1),
        Err(TryAcquireError::Limited { .. })
    ));
    let decision = limiter.try_acquire_decision(3);
    assert!(matches!(
        decision.result,
        Err(TryAcquireError::ExceedsLimit { .. })
    ));
    assert!(limiter.acquire(3).await.is_err());
    // Waits for the 2 admitted at the start to stop counting, then 1 more fits at once.
    let start = tokio::time::Instant::now();
    limiter.acquire(1).await.unwrap();
    assert_eq!(start.elapsed(), wait);
    limiter.acquire(1).await.unwrap();
    assert_eq!(start.elapsed(), wait);
    // A composite admitting over it, once those have stopped counting too.
    tokio::time::advance(Duration::from_secs(2)).await;
    let other = FixedWindow::new(10, Duration::from_secs(1)).unwrap();
    all((&limiter, &other)).unwrap().try_acquire(1).unwrap();
    all((&limiter, &other)).unwrap().acquire(1).await.unwrap();
    let metrics = Metrics::of(&snapshotter);
    assert_eq!(
        metrics.counter(ADMITTED_PERMITS, &labels),
        2 + 1 + 1 + 1 + 1
    );
    assert_eq!(metrics.counter(REFUSED_REQUESTS, &labels), 3);
    assert_eq!(metrics.counter(WAITED_REQUESTS, &labels), 1);
    assert_eq!(metrics.counter(TIMED_OUT_REQUESTS, &labels), 0);
    assert_eq!(
        metrics.histogram(WAIT_SECONDS, &labels),
        [wait.as_secs_f64()]
    );

    // Full, with a waiter in line: the gauges as of `record_gauges`.
    let waiter = tokio::spawn({
        let limiter = limiter.clone();
        async move { limiter.acquire(2).await }
    });
    tokio::task::yield_now().await;
    observe::record_gauges();
    let metrics = Metrics::of(&snapshotter);
    assert_eq!(metrics.gauge(QUEUED_REQUESTS, &labels), 1.0);
    assert_eq!(metrics.gauge(AVAILABLE_PERMITS, &labels), 0.0);
    waiter.await.unwrap().unwrap();
    tokio::time::advance(Duration::from_secs(3)).await;
    observe::record_gauges();
    let metrics = Metrics::of(&snapshotter);
    assert_eq!(metrics.gauge(QUEUED_REQUESTS, &labels), 0.0);
    assert_eq!(metrics.gauge(AVAILABLE_PERMITS, &labels), 2.0);
    assert_eq!(metrics.counter(ADMITTED_PERMITS, &labels), 2);
    assert_eq!(metrics.counter(WAITED_REQUESTS, &labels), 1);
}

#[tokio::test(start_paused = true)]
async fn a_named_fixed_window_counts_every_decision_exactly() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let make = || {
        FixedWindow::new(2, Duration::from_secs(1))
            .unwrap()
            .named("limited")
    };
    counts_every_decision_exactly("fixed_window", make, Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_named_sliding_log_counts_every_decision_exactly() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let make = || {
        SlidingLog::new(2, Duration::from_secs(1))
            .unwrap()
            .named("limited")
    };
    counts_every_decision_exactly("sliding_log", make, Duration::from_secs(1)).await;
}

/// A permit counts until the end of the tenth 100 ms slot after its own: 1.1 s.
#[tokio::test(start_paused = true)]
async fn a_named_sliding_window_counts_every_decision_exactly() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let make = || {
        SlidingWindow::new(2, 10, Duration::from_millis(100))
            .unwrap()
            .named("limited")
    };
    counts_every_decision_exactly("sliding_window", make, Duration::from_millis(1_100)).await;
}

/// Unnamed window limiters register and record nothing, whatever they decide.
#[tokio::test(start_paused = true)]
async fn unnamed_window_limiters_report_nothing() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let (fixed, log, wheel) = metrics::with_local_recorder(&recorder, || {
        let second = Duration::from_secs(1);
        (
            FixedWindow::new(1, second).unwrap(),
            SlidingLog::new(1, second).unwrap(),
            SlidingWindow::new(1, 10, Duration::from_millis(100)).unwrap(),
        )
    });
    for admitted in [
        fixed.try_acquire(1),
        log.try_acquire(1),
        wheel.try_acquire(1),
    ] {
        admitted.unwrap();
    }
    for refused in [
        fixed.try_acquire(1),
        log.try_acquire(1),
        wheel.try_acquire(1),
    ] {
        assert!(refused.is_err());
    }
    fixed.acquire(1).await.unwrap();
    log.acquire(1).await.unwrap();
    wheel.acquire(1).await.unwrap();
    observe::record_gauges();
    assert!(snapshotter.snapshot().into_vec().is_empty());
}

/// The name lives on the handle it was given to and the clones made from it afterwards:
/// a clone made before, and a fresh limiter, are unnamed. An empty name is a name.
#[tokio::test(start_paused = true)]
async fn a_name_holds_for_the_clones_made_after_it() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let (before, named, empty) = metrics::with_local_recorder(&recorder, || {
        let before = FixedWindow::new(10, Duration::from_secs(1)).unwrap();
        let named = before.clone().named("limited");
        let empty = SlidingLog::new(10, Duration::from_secs(1))
            .unwrap()
            .named("");
        (before, named, empty)
    });
    let after = named.clone();
    let fresh = named.fresh();
    assert_eq!(
        (before.name(), after.name(), fresh.name(), empty.name()),
        (None, Some("limited"), None, Some(""))
    );
    before.try_acquire(1).unwrap();
    named.try_acquire(2).unwrap();
    after.try_acquire(3).unwrap();
    fresh.try_acquire(4).unwrap();
    empty.try_acquire(5).unwrap();
    let metrics = Metrics::of(&snapshotter);
    let named_labels = [("limiter", "limited"), ("kind", "fixed_window")];
    assert_eq!(metrics.counter(ADMITTED_PERMITS, &named_labels), 2 + 3);
    let metrics = Metrics::of(&snapshotter);
    let empty_labels = [("limiter", ""), ("kind", "sliding_log")];
    assert_eq!(
        metrics.counter(ADMITTED_PERMITS, &empty_labels),
        0,
        "taken by the last snapshot"
    );
    // Every series belongs to one of the two named limiters.
    for (key, _, _, _) in snapshotter.snapshot().into_vec() {
        let labels: Vec<_> = key
            .key()
            .labels()
            .map(|label| label.value().to_owned())
            .collect();
        assert!(
            labels == ["limited", "fixed_window"] || labels == ["", "sliding_log"],
            "{key:?}"
        );
    }
}

/// Each kind's events at their levels: a refusal with its `retry_after` and one above the
/// limit at `debug`, a grant after waiting at `trace` inside the wait's `debug` span;
/// nothing at `info` (a window has no close); nothing from an unnamed one.
#[tokio::test(start_paused = true)]
async fn named_window_limiters_emit_their_events_at_their_levels() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    async fn workload<L: Limiter>(named: L, unnamed: L) {
        for limiter in [named, unnamed] {
            limiter.try_acquire(1).unwrap();
            assert!(limiter.try_acquire(1).is_err());
            assert!(limiter.try_acquire(2).is_err());
            limiter.acquire(1).await.unwrap();
        }
    }
    let second = Duration::from_secs(1);
    let slot = Duration::from_millis(100);
    for (kind, retry_after) in [
        ("fixed_window", "1s"),
        ("sliding_log", "1s"),
        ("sliding_window", "1.1s"),
    ] {
        let kind_field = format!("kind=\"{kind}\"");
        let fields = ["limiter=\"limited\"", kind_field.as_str()];
        assert_decision_events(&fields, retry_after, || async {
            match kind {
                "fixed_window" => {
                    let make = || FixedWindow::new(1, second).unwrap();
                    workload(make().named("limited"), make()).await;
                }
                "sliding_log" => {
                    let make = || SlidingLog::new(1, second).unwrap();
                    workload(make().named("limited"), make()).await;
                }
                _ => {
                    let make = || SlidingWindow::new(1, 10, slot).unwrap();
                    workload(make().named("limited"), make()).await;
                }
            }
        })
        .await;
    }
}
