//! A named `Keyed` reports (issue 24): its keys' decisions under its own name (its keys'
//! limiters are never named, and keys are never labels), keys refused for want of room,
//! keys forgotten, and keys held; counted exactly with `metrics-util`'s debugging
//! recorder on paused time, and its `tracing` events at their levels.
#![cfg(all(feature = "metrics", feature = "tracing"))]

mod common;

use std::time::Duration;

use common::observe::{assert_decision_events, Metrics, ONE_AT_A_TIME};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::MetricKind;
use token_bucket::observe::{
    self, ADMITTED_PERMITS, FORGOTTEN_KEYS, KEYS, REFUSED_REQUESTS, TOO_MANY_KEYS, WAITED_REQUESTS,
    WAIT_SECONDS,
};
use token_bucket::{
    AcquireError, ConfigError, FixedWindow, Keyed, Rate, SlidingLog, TokenBucket, TryAcquireError,
};

/// The labels of the `Keyed` named "per-user".
const PER_USER: &[(&str, &str)] = &[("limiter", "per-user"), ("kind", "keyed")];

/// A scripted workload on compact `FixedWindow` keys, counted exactly: admissions on
/// a key's word and on its whole limiter, refusals, new keys refused for want of room,
/// a wait, keys held and keys forgotten. Only the `Keyed`'s own series exist: no
/// timeouts, permits available or requests queued, and nothing of its keys.
#[tokio::test(start_paused = true)]
async fn a_named_keyed_counts_every_decision_exactly() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let keyed: Keyed<u64, FixedWindow> = metrics::with_local_recorder(&recorder, || {
        let template = FixedWindow::new(2, Duration::from_secs(1)).unwrap();
        let builder = Keyed::builder(template).max_keys(2).shards(1);
        builder.name("per-user").build().unwrap()
    });
    keyed.try_acquire(&1, 2).unwrap();
    assert!(matches!(
        keyed.try_acquire(&1, 1),
        Err(TryAcquireError::Limited { .. })
    ));
    assert_eq!(keyed.try_acquire_decision(&2, 1).result, Ok(()));
    let too_many = TryAcquireError::TooManyKeys { max_keys: 2 };
    assert_eq!(keyed.try_acquire(&3, 1), Err(too_many));
    assert_eq!(keyed.try_acquire_decision(&3, 1).result, Err(too_many));
    assert_eq!(
        keyed.acquire(&3, 1).await,
        Err(AcquireError::TooManyKeys { max_keys: 2 })
    );
    assert!(matches!(
        keyed.acquire(&1, 3).await,
        Err(AcquireError::ExceedsLimit { .. })
    ));
    // Key 1 waits for the next window on its whole limiter.
    let start = tokio::time::Instant::now();
    keyed.acquire(&1, 1).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    // On key 2's word, then on its whole limiter, kept whole by a handle: both at once.
    keyed.acquire(&2, 1).await.unwrap();
    let handle = keyed.get(&2).unwrap();
    keyed.acquire(&2, 1).await.unwrap();
    drop(handle);
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    observe::record_gauges();
    let metrics = Metrics::of(&snapshotter);
    assert_eq!(
        metrics.counter(ADMITTED_PERMITS, PER_USER),
        2 + 1 + 1 + 1 + 1
    );
    assert_eq!(metrics.counter(REFUSED_REQUESTS, PER_USER), 1 + 3 + 1);
    assert_eq!(metrics.counter(TOO_MANY_KEYS, PER_USER), 3);
    assert_eq!(metrics.counter(WAITED_REQUESTS, PER_USER), 1);
    assert_eq!(metrics.counter(FORGOTTEN_KEYS, PER_USER), 0);
    assert_eq!(metrics.histogram(WAIT_SECONDS, PER_USER), [1.0]);
    assert_eq!(metrics.gauge(KEYS, PER_USER), 2.0);
    let labels = vec!["per-user".to_owned(), "keyed".to_owned()];
    let names: Vec<_> = [
        ADMITTED_PERMITS,
        FORGOTTEN_KEYS,
        KEYS,
        REFUSED_REQUESTS,
        TOO_MANY_KEYS,
        WAIT_SECONDS,
        WAITED_REQUESTS,
    ]
    .iter()
    .map(|name| (name.to_string(), labels.clone()))
    .collect();
    assert_eq!(metrics.names(), names);

    // Idle a window later: forgotten by a sweep, and no longer held.
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(keyed.retain_recent(), 2);
    observe::record_gauges();
    let metrics = Metrics::of(&snapshotter);
    assert_eq!(metrics.counter(FORGOTTEN_KEYS, PER_USER), 2);
    assert_eq!(metrics.gauge(KEYS, PER_USER), 0.0);
    assert_eq!(metrics.counter(ADMITTED_PERMITS, PER_USER), 0);
}

/// Keys sorted into classes (issue 24's key-to-class label): each decision is counted
/// under its key's class, found from the key held (a borrowed `&str` finds the `String`
/// key), from an owned copy for a new key refused for want of room, and from the
/// `acquire` future's own key; a class the function names but nobody declared is counted
/// as `other`. The keys' own metrics are not by class, and no series is left without a
/// class that would stay at zero.
#[tokio::test(start_paused = true)]
async fn a_keyed_with_classes_counts_each_decision_under_its_keys_class() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let keyed: Keyed<String, TokenBucket> = metrics::with_local_recorder(&recorder, || {
        let template = TokenBucket::new(Rate::per_second(1), 2).unwrap();
        let tier = |tenant: &String| match tenant.split(':').next() {
            Some("free") => "free",
            Some("paying") => "paying",
            _ => "trial",
        };
        let builder = Keyed::builder(template).max_keys(3).shards(1);
        builder
            .name("per-tenant")
            .class(["free", "paying"], tier)
            .build()
            .unwrap()
    });
    keyed.try_acquire("free:1", 2).unwrap();
    assert!(keyed.try_acquire("free:1", 1).is_err());
    assert_eq!(keyed.try_acquire_decision("paying:1", 1).result, Ok(()));
    keyed.try_acquire("trial:1", 1).unwrap();
    let too_many = TryAcquireError::TooManyKeys { max_keys: 3 };
    assert_eq!(keyed.try_acquire("paying:2", 1), Err(too_many));
    let start = tokio::time::Instant::now();
    keyed.acquire("free:1", 1).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    observe::record_gauges();

    let metrics = Metrics::of(&snapshotter);
    let class = |class| {
        [
            ("limiter", "per-tenant"),
            ("kind", "keyed"),
            ("class", class),
        ]
    };
    let keys = &[("limiter", "per-tenant"), ("kind", "keyed")];
    assert_eq!(metrics.counter(ADMITTED_PERMITS, &class("free")), 2 + 1);
    assert_eq!(metrics.counter(REFUSED_REQUESTS, &class("free")), 1);
    assert_eq!(metrics.counter(WAITED_REQUESTS, &class("free")), 1);
    assert_eq!(metrics.histogram(WAIT_SECONDS, &class("free")), [1.0]);
    assert_eq!(metrics.counter(ADMITTED_PERMITS, &class("paying")), 1);
    assert_eq!(metrics.counter(REFUSED_REQUESTS, &class("paying")), 1);
    assert_eq!(metrics.counter(ADMITTED_PERMITS, &class("other")), 1);
    assert_eq!(metrics.counter(REFUSED_REQUESTS, &class("other")), 0);
    assert_eq!(metrics.counter(TOO_MANY_KEYS, keys), 1);
    assert_eq!(metrics.gauge(KEYS, keys), 3.0);
    let mut names: Vec<_> = [FORGOTTEN_KEYS, KEYS, TOO_MANY_KEYS]
        .iter()
        .map(|name| (name.to_string(), vec!["per-tenant".into(), "keyed".into()]))
        .collect();
    for class in ["free", "other", "paying"] {
        let labels = vec!["per-tenant".into(), "keyed".into(), class.into()];
        let decisions = [
            ADMITTED_PERMITS,
            REFUSED_REQUESTS,
            WAIT_SECONDS,
            WAITED_REQUESTS,
        ];
        names.extend(
            decisions
                .iter()
                .map(|name| (name.to_string(), labels.clone())),
        );
    }
    names.sort();
    assert_eq!(metrics.names(), names);
}

/// Classes are checked when the `Keyed` is built, named or not: none, too many, or one
/// named twice is refused with an error naming it, and registers nothing. A declared
/// `other` is the class undeclared ones join.
#[test]
fn bad_key_classes_are_refused_when_built() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let template = TokenBucket::new(Rate::per_second(1), 1).unwrap();
    let build = |classes: Vec<&'static str>| {
        metrics::with_local_recorder(&recorder, || {
            let builder = Keyed::<u64, _>::builder(template.clone()).name("bad");
            builder.class(classes, |_| "a").build().map(drop)
        })
    };
    let max = observe::MAX_KEY_CLASSES;
    assert_eq!(
        build(vec![]),
        Err(ConfigError::BadKeyClasses { classes: 0, max })
    );
    let many: Vec<&'static str> = (0..=max).map(|class| &*format!("{class}").leak()).collect();
    assert_eq!(
        build(many),
        Err(ConfigError::BadKeyClasses {
            classes: max + 1,
            max
        })
    );
    assert_eq!(
        build(vec!["a", "b", "a"]),
        Err(ConfigError::RepeatedKeyClass { class: "a" })
    );
    let unnamed = Keyed::<u64, _>::builder(template.clone()).class(["a", "a"], |_| "a");
    assert_eq!(
        unnamed.build().map(drop),
        Err(ConfigError::RepeatedKeyClass { class: "a" })
    );
    assert!(Metrics::of(&snapshotter).names().is_empty());
    assert_eq!(
        ConfigError::RepeatedKeyClass { class: "a" }.to_string(),
        "the key class \"a\" is declared twice"
    );
    assert_eq!(
        ConfigError::BadKeyClasses {
            classes: 0,
            max: 64
        }
        .to_string(),
        "0 key classes: a keyed limiter's keys need between 1 and 64"
    );

    // `other` declared: undeclared classes join it, and there is one `other` series.
    let keyed = metrics::with_local_recorder(&recorder, || {
        let builder = Keyed::<u64, _>::builder(template).name("good");
        builder.class(["a", "other"], |_| "b").build().unwrap()
    });
    keyed.try_acquire(&1, 1).unwrap();
    let metrics = Metrics::of(&snapshotter);
    let other = [("limiter", "good"), ("kind", "keyed"), ("class", "other")];
    assert_eq!(metrics.counter(ADMITTED_PERMITS, &other), 1);
    let classes = metrics
        .names()
        .into_iter()
        .filter(|(name, _)| name == ADMITTED_PERMITS);
    assert_eq!(classes.count(), 2);
}

/// Keys held whole (a `SlidingLog` has no one-word form) and keys of a bucket report
/// through the `Keyed` alike; a named template's name is not its keys': they report
/// nothing under it.
#[tokio::test(start_paused = true)]
async fn whole_keys_and_bucket_keys_report_under_the_keyeds_name() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let (logs, buckets) = metrics::with_local_recorder(&recorder, || {
        let log = SlidingLog::new(1, Duration::from_secs(1)).unwrap();
        let logs: Keyed<u64, SlidingLog> = Keyed::builder(log.named("template"))
            .name("per-user")
            .build()
            .unwrap();
        let bucket = TokenBucket::builder()
            .rate(Rate::per_second(2))
            .capacity(1)
            .name("template")
            .build()
            .unwrap();
        let buckets: Keyed<u64, TokenBucket> =
            Keyed::builder(bucket).name("per-user").build().unwrap();
        (logs, buckets)
    });
    logs.try_acquire(&1, 1).unwrap();
    assert!(logs.try_acquire(&1, 1).is_err());
    logs.acquire(&1, 1).await.unwrap();
    buckets.try_acquire(&1, 1).unwrap();
    assert!(buckets.try_acquire_decision(&1, 1).result.is_err());
    buckets.acquire(&1, 1).await.unwrap();
    let metrics = Metrics::of(&snapshotter);
    assert_eq!(metrics.counter(ADMITTED_PERMITS, PER_USER), 2 * 2);
    assert_eq!(metrics.counter(REFUSED_REQUESTS, PER_USER), 2);
    assert_eq!(metrics.counter(WAITED_REQUESTS, PER_USER), 2);
    assert_eq!(metrics.histogram(WAIT_SECONDS, PER_USER), [1.0, 0.5]);
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let template = key.key().labels().any(|label| label.value() == "template");
        if template && key.kind() == MetricKind::Counter {
            assert_eq!(value, DebugValue::Counter(0), "{key:?}");
        }
    }
}

/// An unnamed `Keyed` registers and records nothing, its keys refused for room included.
#[tokio::test(start_paused = true)]
async fn an_unnamed_keyed_reports_nothing() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let keyed: Keyed<u64, FixedWindow> = metrics::with_local_recorder(&recorder, || {
        let template = FixedWindow::new(1, Duration::from_secs(1)).unwrap();
        Keyed::builder(template).max_keys(1).build().unwrap()
    });
    assert_eq!(keyed.name(), None);
    keyed.try_acquire(&1, 1).unwrap();
    assert!(keyed.try_acquire(&1, 1).is_err());
    assert!(keyed.try_acquire(&2, 1).is_err());
    keyed.acquire(&1, 1).await.unwrap();
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(keyed.retain_recent(), 1);
    observe::record_gauges();
    assert!(snapshotter.snapshot().into_vec().is_empty());
}

/// Its events at their levels, under its name with the `kind` `keyed`: a refusal and a
/// new key refused for room at `debug`, a grant after waiting at `trace` inside the
/// wait's `debug` span; nothing at `info`; nothing from its keys' limiters, nor from an
/// unnamed `Keyed`.
#[tokio::test(start_paused = true)]
async fn a_named_keyed_emits_its_events_at_their_levels() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let fields = ["limiter=\"per-user\"", "kind=\"keyed\""];
    assert_decision_events(&fields, "1s", || async {
        let template = FixedWindow::new(1, Duration::from_secs(1)).unwrap();
        let named: Keyed<u64, FixedWindow> = Keyed::builder(template.clone())
            .max_keys(1)
            .name("per-user")
            .build()
            .unwrap();
        let unnamed: Keyed<u64, FixedWindow> =
            Keyed::builder(template).max_keys(1).build().unwrap();
        for keyed in [named, unnamed] {
            keyed.try_acquire(&1, 1).unwrap();
            assert!(keyed.try_acquire(&1, 1).is_err());
            assert!(keyed.try_acquire(&2, 1).is_err());
            keyed.acquire(&1, 1).await.unwrap();
        }
    })
    .await;
}
