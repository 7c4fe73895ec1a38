// What lives here (the documentation below is its users'):
// - `mod.rs`: the metric names and `Observer`, what a named limiter reports through.
// - `gauges.rs`: the list of named limiters' gauges that `record_gauges` reads.
// - `keyed.rs`: what a named `Keyed` reports beyond its decisions.
// - `http.rs`: what a named HTTP layer reports (feature `http`).
// - `redis.rs`: the names of the Redis limiters' metrics (feature `redis`); what reports
//   them lives in `redis/observe.rs`.
//
// It uses `error` alone, and knows no limiter: each limiter holds its `Observer` and
// tells it what it decided.

//! Seeing a limiter work: a limiter given a name reports its decisions under that name,
//! through the [`metrics`](https://docs.rs/metrics) facade (feature `metrics`) and
//! [`tracing`](https://docs.rs/tracing) (feature `tracing`). A limiter without a name
//! reports nothing, and pays one test of an empty field on each decision; with both
//! features off, not even that.
//!
//! `docs/metrics.md` lists every metric, its labels and units, and every event.
//!
//! # Metrics
//!
//! Each series carries the labels `limiter` (the name) and `kind` (`token_bucket`,
//! `fixed_window`, `sliding_log`, `sliding_window`, `keyed`: a [`Keyed`](crate::Keyed)
//! reports its keys' decisions and its keys under its own name, see
//! [`KeyedBuilder::name`](crate::KeyedBuilder::name); one whose keys are sorted into a
//! few declared classes adds the label `class`, see
//! [`KeyedBuilder::class`](crate::KeyedBuilder::class)). A metric's handles are registered
//! when the limiter is named, with the recorder installed then: install the exporter's
//! recorder first, as the `metrics` crate asks of every library. On the hot path a
//! named limiter's decision costs one increment of a registered counter (one relaxed
//! atomic add, with the usual exporters).
//!
//! The gauges (permits available, requests queued) are read only when
//! [`record_gauges`] is called: call it where the exporter is scraped, so they cost
//! nothing per decision.
//!
//! ```
//! use token_bucket::observe::ADMITTED_PERMITS;
//!
//! assert_eq!(ADMITTED_PERMITS, "token_bucket_admitted_permits_total");
//! ```
//!
//! # Tracing
//!
//! A named limiter emits, with the target `token_bucket`: a `debug` event for each
//! refusal and each wait that timed out, an `info` event when a bucket is closed, an
//! `error` event when a bucket's refill task failed, and a `debug` span around each wait,
//! with a `trace` event when it is granted. Nothing at `info` or above is emitted on the
//! path of a decision.

use std::sync::Arc;
use std::time::Duration;

mod gauges;
#[cfg(feature = "http")]
pub(crate) mod http;
mod keyed;
#[cfg(feature = "redis")]
mod redis;

#[cfg(feature = "http")]
pub use self::http::{
    HTTP_ADMITTED_REQUESTS, HTTP_ALLOW_LISTED_REQUESTS, HTTP_REFUSED_REQUESTS,
    HTTP_SHADOW_REFUSED_REQUESTS, HTTP_WAITED_REQUESTS, HTTP_WAIT_SECONDS,
};
#[cfg(feature = "redis")]
pub use self::redis::{
    REDIS_DECISIONS, REDIS_ERRORS, REDIS_FAIL_CLOSED, REDIS_FAIL_OPEN, REDIS_LEASED_TOKENS,
    REDIS_LEASE_CALLS, REDIS_RETURNED_TOKENS,
};
pub use gauges::record_gauges;
pub(crate) use keyed::{Class, Classify, KeyClasses, KeyedObserver};
pub use keyed::{FORGOTTEN_KEYS, KEYS, MAX_KEY_CLASSES, OTHER_CLASS, TOO_MANY_KEYS};

/// Permits admitted, counted when admitted: a counter.
pub const ADMITTED_PERMITS: &str = "token_bucket_admitted_permits_total";
/// Requests refused (a `try` answered `Limited`, or refused for good): a counter.
pub const REFUSED_REQUESTS: &str = "token_bucket_refused_requests_total";
/// Requests that waited and were admitted: a counter.
pub const WAITED_REQUESTS: &str = "token_bucket_waited_requests_total";
/// Requests that gave up waiting at their deadline: a counter.
pub const TIMED_OUT_REQUESTS: &str = "token_bucket_timed_out_requests_total";
/// Seconds a request waited before it was admitted: a histogram.
pub const WAIT_SECONDS: &str = "token_bucket_wait_seconds";
/// Permits the limiter would admit now, as of the last [`record_gauges`]: a gauge.
pub const AVAILABLE_PERMITS: &str = "token_bucket_available_permits";
/// Requests waiting in the limiter's line, as of the last [`record_gauges`]: a gauge.
pub const QUEUED_REQUESTS: &str = "token_bucket_queued_requests";

/// Which kind of limiter reports: the `kind` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    TokenBucket,
    FixedWindow,
    SlidingLog,
    SlidingWindow,
    Keyed,
}

impl Kind {
    #[cfg_attr(not(any(feature = "metrics", feature = "tracing")), allow(dead_code))]
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::TokenBucket => "token_bucket",
            Kind::FixedWindow => "fixed_window",
            Kind::SlidingLog => "sliding_log",
            Kind::SlidingWindow => "sliding_window",
            Kind::Keyed => "keyed",
        }
    }
}

/// What a limiter reports through: nothing for an unnamed one. Cheap to clone: every
/// handle on a named limiter shares one.
#[derive(Clone, Default)]
pub(crate) struct Observer(Option<Arc<Named>>);

/// A named limiter's name and its registered metrics.
pub(crate) struct Named {
    name: Arc<str>,
    #[cfg_attr(not(feature = "tracing"), allow(dead_code))]
    kind: Kind,
    #[cfg(feature = "metrics")]
    metrics: Handles,
}

/// A named limiter's metrics, registered once, when it is named.
#[cfg(feature = "metrics")]
struct Handles {
    admitted: ::metrics::Counter,
    refused: ::metrics::Counter,
    waited: ::metrics::Counter,
    timed_out: ::metrics::Counter,
    wait_seconds: ::metrics::Histogram,
    available: ::metrics::Gauge,
    queued: ::metrics::Gauge,
}

#[cfg(feature = "metrics")]
impl Handles {
    fn register(name: &Arc<str>, kind: Kind) -> Handles {
        let labels = [
            ::metrics::Label::new("limiter", name.to_string()),
            ::metrics::Label::new("kind", kind.label()),
        ];
        Handles {
            admitted: ::metrics::counter!(ADMITTED_PERMITS, labels.iter()),
            refused: ::metrics::counter!(REFUSED_REQUESTS, labels.iter()),
            waited: ::metrics::counter!(WAITED_REQUESTS, labels.iter()),
            timed_out: ::metrics::counter!(TIMED_OUT_REQUESTS, labels.iter()),
            wait_seconds: ::metrics::histogram!(WAIT_SECONDS, labels.iter()),
            available: ::metrics::gauge!(AVAILABLE_PERMITS, labels.iter()),
            queued: ::metrics::gauge!(QUEUED_REQUESTS, labels.iter()),
        }
    }
}

impl Observer {
    /// An observer for a limiter of `kind` named `name`: its metrics are registered now.
    pub(crate) fn named(kind: Kind, name: &str) -> Observer {
        let name: Arc<str> = Arc::from(name);
        Observer(Some(Arc::new(Named {
            #[cfg(feature = "metrics")]
            metrics: Handles::register(&name, kind),
            name,
            kind,
        })))
    }

    /// Whether it reports anything: named, with a feature that reports. Constant false
    /// without the features, so that the callers' reporting code compiles away.
    #[inline(always)]
    pub(crate) fn is_named(&self) -> bool {
        cfg!(any(feature = "metrics", feature = "tracing")) && self.0.is_some()
    }

    /// The limiter's name, if it has one.
    pub(crate) fn name(&self) -> Option<&str> {
        self.0.as_deref().map(|named| &*named.name)
    }

    /// `permits` were admitted without waiting.
    #[inline]
    pub(crate) fn admitted(&self, permits: u64) {
        #[cfg(feature = "metrics")]
        if let Some(named) = &self.0 {
            named.admitted(permits);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = permits;
    }

    /// A request for `permits` was refused; `retry_after`, when it may be admitted later.
    #[inline]
    pub(crate) fn refused(&self, permits: u64, retry_after: Option<Duration>) {
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if let Some(named) = &self.0 {
            named.refused(permits, retry_after);
        }
        #[cfg(not(any(feature = "metrics", feature = "tracing")))]
        let _ = (permits, retry_after);
    }

    /// A request for `permits` was admitted after waiting `waited`.
    #[cfg_attr(not(any(feature = "metrics", feature = "tracing")), allow(dead_code))]
    pub(crate) fn waited(&self, permits: u64, waited: Duration) {
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if let Some(named) = &self.0 {
            named.waited(permits, waited);
        }
        #[cfg(not(any(feature = "metrics", feature = "tracing")))]
        let _ = (permits, waited);
    }

    /// A request for `permits` gave up waiting at its deadline.
    #[cfg_attr(not(any(feature = "metrics", feature = "tracing")), allow(dead_code))]
    pub(crate) fn timed_out(&self, permits: u64) {
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if let Some(named) = &self.0 {
            named.timed_out(permits);
        }
        #[cfg(not(any(feature = "metrics", feature = "tracing")))]
        let _ = permits;
    }

    /// The limiter was closed.
    pub(crate) fn closed(&self) {
        #[cfg(feature = "tracing")]
        if let Some(named) = &self.0 {
            tracing::info!(target: "token_bucket", limiter = &*named.name, kind = named.kind.label(), "closed");
        }
    }

    /// The limiter's refill task failed, and it closed.
    pub(crate) fn refill_failed(&self) {
        #[cfg(feature = "tracing")]
        if let Some(named) = &self.0 {
            tracing::error!(target: "token_bucket", limiter = &*named.name, kind = named.kind.label(), "the refill task failed; the bucket is closed");
        }
    }

    /// The span a wait for `permits` runs in: `None` for an unnamed limiter, or without
    /// the feature `tracing`.
    #[cfg(feature = "tracing")]
    pub(crate) fn wait_span(&self, permits: u64) -> Option<tracing::Span> {
        let named = self.0.as_ref()?;
        Some(
            tracing::debug_span!(target: "token_bucket", "wait", limiter = &*named.name, kind = named.kind.label(), permits),
        )
    }

    /// Reads the gauges of this limiter with `read` (permits available, requests queued)
    /// at every [`record_gauges`], as long as `read` says the limiter is alive.
    #[cfg(feature = "metrics")]
    pub(crate) fn gauge(&self, read: impl Fn() -> Option<(u64, usize)> + Send + Sync + 'static) {
        if let Some(named) = &self.0 {
            gauges::watch(Arc::clone(named), read);
        }
    }
}

#[cfg(any(feature = "metrics", feature = "tracing"))]
impl Named {
    /// Out of line, so that the test of an unnamed limiter's observer is all that the
    /// inlined fast paths carry: the counter's call is not inlined into every caller.
    #[cfg(feature = "metrics")]
    #[inline(never)]
    fn admitted(&self, permits: u64) {
        self.metrics.admitted.increment(permits);
    }

    #[cold]
    fn refused(&self, permits: u64, retry_after: Option<Duration>) {
        #[cfg(feature = "metrics")]
        self.metrics.refused.increment(1);
        #[cfg(feature = "tracing")]
        tracing::debug!(target: "token_bucket", limiter = &*self.name, kind = self.kind.label(), permits, retry_after = ?retry_after, "refused");
        let _ = (permits, retry_after);
    }

    fn waited(&self, permits: u64, waited: Duration) {
        #[cfg(feature = "metrics")]
        {
            self.metrics.admitted.increment(permits);
            self.metrics.waited.increment(1);
            self.metrics.wait_seconds.record(waited.as_secs_f64());
        }
        #[cfg(feature = "tracing")]
        tracing::trace!(target: "token_bucket", limiter = &*self.name, kind = self.kind.label(), permits, waited = ?waited, "granted after waiting");
        let _ = (permits, waited);
    }

    fn timed_out(&self, permits: u64) {
        #[cfg(feature = "metrics")]
        self.metrics.timed_out.increment(1);
        #[cfg(feature = "tracing")]
        tracing::debug!(target: "token_bucket", limiter = &*self.name, kind = self.kind.label(), permits, "timed out");
        let _ = permits;
    }
}
