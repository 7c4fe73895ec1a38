//! What the tests of named limiters (issue 24) read reports with: the metrics a
//! `metrics-util` debugging recorder holds, the lines a `tracing` subscriber writes, and
//! a lock that runs such tests one at a time.

use std::collections::HashMap;
use std::future::Future;
use std::io::Write;
use std::sync::{Arc, Mutex};

use metrics_util::debugging::{DebugValue, Snapshotter};
use metrics_util::{CompositeKey, MetricKind};
use tracing_subscriber::fmt::format::FmtSpan;

/// Taken by every test of a file that reads `tracing` events, so that they run one at a
/// time: `.lock().await` in async tests, `.blocking_lock()` outside a runtime. `tracing`
/// caches whether a callsite is wanted once for the whole process, from the dispatcher of
/// the thread that reaches it first: a test reaching a callsite on a thread without a
/// subscriber while another test holds its own could cache it as unwanted, and that test
/// would miss its events (about one run in twenty did). A tokio lock is never poisoned,
/// so one failing test does not fail the others.
pub static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Whether one of `lines` is at `level` (`"DEBUG"`, ...), says `text`, and carries every
/// field of `fields` as written, as `limiter="api"`.
pub fn has_line(lines: &[String], level: &str, text: &str, fields: &[&str]) -> bool {
    lines.iter().any(|line| {
        line.contains(level)
            && line.contains(text)
            && fields.iter().all(|field| line.contains(field))
    })
}

/// Runs `workload` under a subscriber at each of `trace`, `debug` and `info`, and
/// asserts that it wrote exactly a named limiter's three decision events, each carrying
/// every field of `fields` (as `limiter="api"`): at `debug`, a refusal with
/// `retry_after=Some(retry_after)` (a `Duration` as `tracing` writes it: `1s`) and one
/// refused for good (`retry_after=None`); at `trace`, a grant after waiting, inside the
/// wait's span; nothing at `info`.
pub async fn assert_decision_events<F: Future<Output = ()>>(
    fields: &[&str],
    retry_after: &str,
    workload: impl Fn() -> F,
) {
    let limited = format!("retry_after=Some({retry_after})");
    for (level, expected) in [
        (tracing::Level::TRACE, 3),
        (tracing::Level::DEBUG, 2),
        (tracing::Level::INFO, 0),
    ] {
        let lines = lines_at(level, &workload).await;
        assert_eq!(lines.len(), expected, "{fields:?} at {level}: {lines:#?}");
        let has = |level: &str, text: &str| has_line(&lines, level, text, fields);
        if level >= tracing::Level::DEBUG {
            assert!(has("DEBUG", &limited), "{fields:?}: {lines:#?}");
            assert!(has("DEBUG", "retry_after=None"), "{fields:?}: {lines:#?}");
        }
        if level >= tracing::Level::TRACE {
            assert!(
                has("TRACE", "granted after waiting"),
                "{fields:?}: {lines:#?}"
            );
            assert!(
                lines.iter().any(|line| line.contains("wait{")),
                "{fields:?}: {lines:#?}"
            );
        }
    }
}

/// The lines a `fmt` subscriber at `level` writes while `run` runs.
pub async fn lines_at<F: Future<Output = ()>>(
    level: tracing::Level,
    run: impl FnOnce() -> F,
) -> Vec<String> {
    lines_with_spans_at(level, FmtSpan::NONE, run).await
}

/// The lines a `fmt` subscriber at `level`, which also writes the span events `spans`,
/// writes while `run` runs.
pub async fn lines_with_spans_at<F: Future<Output = ()>>(
    level: tracing::Level,
    spans: FmtSpan,
    run: impl FnOnce() -> F,
) -> Vec<String> {
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_ansi(false)
        .without_time()
        .with_span_events(spans)
        .with_writer(move || writer.clone())
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    run().await;
    buffer.lines()
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

/// Every metric a recorder holds, by key, from one snapshot. A snapshot takes the
/// counters' counts (they start again from 0), so each check takes one and reads every
/// metric from it. A series is looked up by its name and its labels, `(label, value)` in
/// the order they were registered in: `&[("limiter", "api"), ("kind", "token_bucket")]`.
pub struct Metrics(HashMap<CompositeKey, DebugValue>);

impl Metrics {
    pub fn of(snapshotter: &Snapshotter) -> Metrics {
        let snapshot = snapshotter.snapshot().into_hashmap();
        Metrics(
            snapshot
                .into_iter()
                .map(|(key, (_, _, value))| (key, value))
                .collect(),
        )
    }

    /// The counter `name` with `labels`; fails if there is none.
    #[track_caller]
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        match self.value(MetricKind::Counter, name, labels) {
            DebugValue::Counter(count) => *count,
            other => panic!("{name}: {other:?}"),
        }
    }

    /// The gauge `name` with `labels`; fails if there is none.
    #[track_caller]
    pub fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        match self.value(MetricKind::Gauge, name, labels) {
            DebugValue::Gauge(gauge) => gauge.into_inner(),
            other => panic!("{name}: {other:?}"),
        }
    }

    /// The values recorded in the histogram `name` with `labels`, in the order recorded;
    /// fails if there is none.
    #[track_caller]
    pub fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        match self.value(MetricKind::Histogram, name, labels) {
            DebugValue::Histogram(values) => {
                values.iter().map(|value| value.into_inner()).collect()
            }
            other => panic!("{name}: {other:?}"),
        }
    }

    /// The key of every series held.
    pub fn series(&self) -> Vec<&CompositeKey> {
        self.0.keys().collect()
    }

    /// The names of the series held, each with its labels' values, sorted.
    pub fn names(&self) -> Vec<(String, Vec<String>)> {
        let mut names: Vec<_> = self
            .0
            .keys()
            .map(|key| {
                let key = key.key();
                let labels = key.labels().map(|label| label.value().to_owned());
                (key.name().to_owned(), labels.collect())
            })
            .collect();
        names.sort();
        names
    }

    #[track_caller]
    fn value(&self, kind: MetricKind, name: &str, labels: &[(&str, &str)]) -> &DebugValue {
        let labels: Vec<_> = labels
            .iter()
            .map(|&(label, value)| metrics::Label::new(label.to_owned(), value.to_owned()))
            .collect();
        let key = metrics::Key::from_parts(name.to_owned(), labels);
        match self.0.get(&CompositeKey::new(kind, key.clone())) {
            Some(value) => value,
            None => panic!("{kind:?} {key:?} not registered: {:#?}", self.0.keys()),
        }
    }
}
