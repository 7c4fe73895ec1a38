//! What a named HTTP layer reports (feature `http`): requests admitted, refused (by
//! which limit), refused in shadow, allow-listed and waited, through the `metrics`
//! facade, and its refusals and waits through `tracing`. An unnamed layer reports
//! nothing. The metrics, their labels and the events are listed where users look for
//! them, on `http::RateLimitBuilder::name`.
//!
//! The handles are registered when the layer is built, one per series (the refusals, one
//! per value of the bounded `limit` label), so that a request costs one increment of a
//! registered counter; a request admitted after waiting adds a second one and a
//! histogram sample.

use std::net::IpAddr;
use std::time::Duration;

/// Requests the limits admitted, at once or after waiting: a counter.
///
/// ```
/// use token_bucket::observe::HTTP_ADMITTED_REQUESTS;
///
/// assert_eq!(HTTP_ADMITTED_REQUESTS, "token_bucket_http_admitted_requests_total");
/// ```
pub const HTTP_ADMITTED_REQUESTS: &str = "token_bucket_http_admitted_requests_total";

/// Requests refused, labelled `limit` with what refused them (`key`, `global`,
/// `too_many_keys`, `missing_key`, `unavailable`): a counter.
///
/// ```
/// use token_bucket::observe::HTTP_REFUSED_REQUESTS;
///
/// assert_eq!(HTTP_REFUSED_REQUESTS, "token_bucket_http_refused_requests_total");
/// ```
pub const HTTP_REFUSED_REQUESTS: &str = "token_bucket_http_refused_requests_total";

/// Requests a shadow (`http::RateLimitBuilder::shadow`) layer let through that its
/// limits refused: a counter.
///
/// ```
/// use token_bucket::observe::HTTP_SHADOW_REFUSED_REQUESTS;
///
/// assert_eq!(
///     HTTP_SHADOW_REFUSED_REQUESTS,
///     "token_bucket_http_shadow_refused_requests_total"
/// );
/// ```
pub const HTTP_SHADOW_REFUSED_REQUESTS: &str = "token_bucket_http_shadow_refused_requests_total";

/// Requests passed untouched because their key or network is allow-listed: a counter.
///
/// ```
/// use token_bucket::observe::HTTP_ALLOW_LISTED_REQUESTS;
///
/// assert_eq!(
///     HTTP_ALLOW_LISTED_REQUESTS,
///     "token_bucket_http_allow_listed_requests_total"
/// );
/// ```
pub const HTTP_ALLOW_LISTED_REQUESTS: &str = "token_bucket_http_allow_listed_requests_total";

/// Requests admitted after waiting their turn
/// (`http::RateLimitBuilder::wait_up_to`): a counter.
///
/// ```
/// use token_bucket::observe::HTTP_WAITED_REQUESTS;
///
/// assert_eq!(HTTP_WAITED_REQUESTS, "token_bucket_http_waited_requests_total");
/// ```
pub const HTTP_WAITED_REQUESTS: &str = "token_bucket_http_waited_requests_total";

/// Seconds a request admitted after waiting waited: a histogram.
///
/// ```
/// use token_bucket::observe::HTTP_WAIT_SECONDS;
///
/// assert_eq!(HTTP_WAIT_SECONDS, "token_bucket_http_wait_seconds");
/// ```
pub const HTTP_WAIT_SECONDS: &str = "token_bucket_http_wait_seconds";

/// What refused a request: the `limit` label of [`HTTP_REFUSED_REQUESTS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RefusedBy {
    /// The client's own limit.
    Key,
    /// The limit on every request together.
    Global,
    /// The table of keys, full.
    TooManyKeys,
    /// No key could be found.
    MissingKey,
    /// The limits could not decide.
    Unavailable,
}

impl RefusedBy {
    #[cfg(feature = "metrics")]
    const ALL: [RefusedBy; 5] = [
        RefusedBy::Key,
        RefusedBy::Global,
        RefusedBy::TooManyKeys,
        RefusedBy::MissingKey,
        RefusedBy::Unavailable,
    ];

    /// The label's value, which a refusal's problem details say too.
    pub(crate) fn label(self) -> &'static str {
        match self {
            RefusedBy::Key => "key",
            RefusedBy::Global => "global",
            RefusedBy::TooManyKeys => "too_many_keys",
            RefusedBy::MissingKey => "missing_key",
            RefusedBy::Unavailable => "unavailable",
        }
    }
}

/// What an HTTP layer reports through: nothing for an unnamed one.
#[derive(Default)]
pub(crate) struct HttpObserver(Option<NamedLayer>);

/// A named layer's name and its registered metrics.
struct NamedLayer {
    name: Box<str>,
    #[cfg(feature = "metrics")]
    metrics: Handles,
}

/// A named layer's metrics, registered once, when it is built.
#[cfg(feature = "metrics")]
struct Handles {
    admitted: ::metrics::Counter,
    /// One for each value of the `limit` label, in the order of [`RefusedBy::ALL`].
    refused: [::metrics::Counter; 5],
    shadow_refused: ::metrics::Counter,
    allow_listed: ::metrics::Counter,
    waited: ::metrics::Counter,
    wait_seconds: ::metrics::Histogram,
}

#[cfg(feature = "metrics")]
impl Handles {
    fn register(name: &str) -> Handles {
        let limiter = ::metrics::Label::new("limiter", name.to_owned());
        let labels = [limiter.clone()];
        Handles {
            admitted: ::metrics::counter!(HTTP_ADMITTED_REQUESTS, labels.iter()),
            refused: RefusedBy::ALL.map(|by| {
                let labels = [limiter.clone(), ::metrics::Label::new("limit", by.label())];
                ::metrics::counter!(HTTP_REFUSED_REQUESTS, labels.iter())
            }),
            shadow_refused: ::metrics::counter!(HTTP_SHADOW_REFUSED_REQUESTS, labels.iter()),
            allow_listed: ::metrics::counter!(HTTP_ALLOW_LISTED_REQUESTS, labels.iter()),
            waited: ::metrics::counter!(HTTP_WAITED_REQUESTS, labels.iter()),
            wait_seconds: ::metrics::histogram!(HTTP_WAIT_SECONDS, labels.iter()),
        }
    }
}

impl HttpObserver {
    /// An observer for a layer named `name`: its metrics are registered now.
    pub(crate) fn named(name: &str) -> HttpObserver {
        HttpObserver(Some(NamedLayer {
            #[cfg(feature = "metrics")]
            metrics: Handles::register(name),
            name: Box::from(name),
        }))
    }

    /// The layer's name, if it has one.
    pub(crate) fn name(&self) -> Option<&str> {
        self.0.as_ref().map(|named| &*named.name)
    }

    /// A request was admitted; `waited`, how long it waited first, if it did.
    #[inline]
    pub(crate) fn admitted(&self, waited: Option<Duration>) {
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if let Some(named) = &self.0 {
            #[cfg(feature = "metrics")]
            named.metrics.admitted.increment(1);
            if let Some(waited) = waited {
                named.waited(waited);
            }
        }
        #[cfg(not(any(feature = "metrics", feature = "tracing")))]
        let _ = waited;
    }

    /// A request was refused by `by`, and `answer` says what the layer did with it;
    /// `retry_after`, when it may pass; `client_ip` finds the client's address, asked
    /// only when the `trace` event is enabled.
    #[inline]
    pub(crate) fn refused(
        &self,
        answer: Answer,
        by: RefusedBy,
        retry_after: Option<Duration>,
        client_ip: impl FnOnce() -> Option<IpAddr>,
    ) {
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if let Some(named) = &self.0 {
            named.refused(answer, by, retry_after, client_ip);
        }
        #[cfg(not(any(feature = "metrics", feature = "tracing")))]
        let _ = (answer, by, retry_after, client_ip);
    }

    /// A request of an allow-listed key or network passed untouched.
    #[inline]
    pub(crate) fn allow_listed(&self) {
        #[cfg(feature = "metrics")]
        if let Some(named) = &self.0 {
            named.metrics.allow_listed.increment(1);
        }
    }

    /// The span a request of `cost` permits waits in, up to `max_wait`: none for an
    /// unnamed layer.
    pub(crate) fn wait_span(&self, cost: u64, max_wait: Duration) -> WaitSpan {
        #[cfg(feature = "tracing")]
        if let Some(named) = &self.0 {
            return WaitSpan(Some(Box::new(tracing::debug_span!(
                target: "token_bucket",
                "http_wait",
                limiter = &*named.name,
                cost,
                max_wait = ?max_wait,
            ))));
        }
        let _ = (cost, max_wait);
        WaitSpan::default()
    }
}

#[cfg(any(feature = "metrics", feature = "tracing"))]
impl NamedLayer {
    fn waited(&self, waited: Duration) {
        #[cfg(feature = "metrics")]
        {
            self.metrics.waited.increment(1);
            self.metrics.wait_seconds.record(waited.as_secs_f64());
        }
        #[cfg(feature = "tracing")]
        tracing::trace!(target: "token_bucket", limiter = &*self.name, waited = ?waited, "request admitted after waiting");
        let _ = waited;
    }

    #[cold]
    fn refused(
        &self,
        answer: Answer,
        by: RefusedBy,
        retry_after: Option<Duration>,
        client_ip: impl FnOnce() -> Option<IpAddr>,
    ) {
        #[cfg(feature = "metrics")]
        match answer {
            Answer::Refused => self.metrics.refused[by as usize].increment(1),
            Answer::LetThrough => self.metrics.shadow_refused.increment(1),
        }
        #[cfg(feature = "tracing")]
        {
            let message = match answer {
                Answer::Refused => "request refused",
                Answer::LetThrough => "request refused in shadow, let through",
            };
            tracing::debug!(target: "token_bucket", limiter = &*self.name, limit = by.label(), retry_after = ?retry_after, "{message}");
            // The client's address is personal data: only at the most verbose level.
            tracing::trace!(target: "token_bucket", limiter = &*self.name, client_ip = ?client_ip(), "refused client");
        }
        #[cfg(not(feature = "tracing"))]
        let _ = (by, retry_after, client_ip);
    }
}

/// What a layer did with a request its limits refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Refused it.
    Refused,
    /// Let it through: a shadow layer refuses nothing.
    LetThrough,
}

/// The `debug` span a request waits in under
/// `http::RateLimitBuilder::wait_up_to`: none for an unnamed layer,
/// or without the feature `tracing`. Boxed, so that a request that does not wait carries
/// one pointer for it: only a named layer's waits allocate it.
#[derive(Default)]
pub(crate) struct WaitSpan(#[cfg(feature = "tracing")] Option<Box<tracing::Span>>);

impl WaitSpan {
    /// Runs `work` inside the span.
    #[inline]
    pub(crate) fn in_scope<R>(&self, work: impl FnOnce() -> R) -> R {
        #[cfg(feature = "tracing")]
        if let Some(span) = &self.0 {
            return span.in_scope(work);
        }
        work()
    }
}
