//! What the Redis limiters and their leased fronts report when named: a limiter named by
//! `RedisOptions::with_name` reports through a [`RedisObserver`], a front named by
//! `LeaseOptions::with_name` through a [`LeaseObserver`]. The metric names and their
//! public documentation are in `observe/redis.rs`, beside the others'; the reporting is
//! here, so that `observe/` names no Redis type.

use std::sync::Arc;
use std::time::Duration;

use super::error::RedisLimitError;
use super::policy::FailurePolicy;
use crate::observe::{Kind, Observer};
#[cfg(feature = "metrics")]
use crate::observe::{
    REDIS_DECISIONS, REDIS_ERRORS, REDIS_FAIL_CLOSED, REDIS_FAIL_OPEN, REDIS_LEASED_TOKENS,
    REDIS_LEASE_CALLS, REDIS_RETURNED_TOKENS,
};

/// Why a call to Redis failed: the `error` label.
#[cfg(feature = "metrics")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    Timeout,
    Connection,
    Cluster,
    CrossSlot,
    Script,
    Server,
    Reply,
    LeaseExpired,
    Other,
}

#[cfg(feature = "metrics")]
impl Failure {
    /// Every kind, in the order of their counters.
    const ALL: [Failure; 9] = [
        Failure::Timeout,
        Failure::Connection,
        Failure::Cluster,
        Failure::CrossSlot,
        Failure::Script,
        Failure::Server,
        Failure::Reply,
        Failure::LeaseExpired,
        Failure::Other,
    ];

    fn label(self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::Connection => "connection",
            Failure::Cluster => "cluster",
            Failure::CrossSlot => "cross_slot",
            Failure::Script => "script",
            Failure::Server => "server",
            Failure::Reply => "reply",
            Failure::LeaseExpired => "lease_expired",
            Failure::Other => "other",
        }
    }

    /// Why `error` failed, if it is a failed call to Redis.
    fn of(error: &RedisLimitError) -> Option<Failure> {
        match error {
            RedisLimitError::Timeout { .. } => Some(Failure::Timeout),
            RedisLimitError::CrossSlot { .. } => Some(Failure::CrossSlot),
            RedisLimitError::LeaseExpiredOnArrival { .. } => Some(Failure::LeaseExpired),
            RedisLimitError::Unavailable { error } => Some(Failure::of_driver(error)),
            _ => None,
        }
    }

    /// Why the Redis client reported `error`.
    fn of_driver(error: &::redis::RedisError) -> Failure {
        use ::redis::{ErrorKind, ServerErrorKind};
        if error.is_timeout() {
            return Failure::Timeout;
        }
        if error.is_io_error() || error.is_connection_refusal() || error.is_connection_dropped() {
            return Failure::Connection;
        }
        match error.kind() {
            ErrorKind::ClusterConnectionNotFound | ErrorKind::AuthenticationFailed => {
                Failure::Connection
            }
            ErrorKind::Server(ServerErrorKind::CrossSlot) => Failure::CrossSlot,
            ErrorKind::Server(
                ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown,
            ) => Failure::Cluster,
            // Every call is a script: a plain error from the server is the script's.
            ErrorKind::Server(
                ServerErrorKind::ResponseError
                | ServerErrorKind::ExecAbort
                | ServerErrorKind::NoScript,
            )
            | ErrorKind::Extension => Failure::Script,
            ErrorKind::Server(_) => Failure::Server,
            ErrorKind::Parse | ErrorKind::UnexpectedReturnType => Failure::Reply,
            _ => Failure::Other,
        }
    }
}

/// What a named Redis limiter or front has whatever it is: its name and kind, and the
/// counters of its failed calls.
struct RedisNamed {
    name: Arc<str>,
    #[cfg_attr(not(feature = "tracing"), allow(dead_code))]
    kind: &'static str,
    #[cfg(feature = "metrics")]
    outages: Outages,
}

/// The counters of failed calls, registered once, when named.
#[cfg(feature = "metrics")]
struct Outages {
    /// In the order of [`Failure::ALL`].
    errors: [::metrics::Counter; Failure::ALL.len()],
    fail_open: ::metrics::Counter,
    fail_closed: ::metrics::Counter,
}

impl RedisNamed {
    fn new(kind: &'static str, name: &str) -> RedisNamed {
        let name: Arc<str> = Arc::from(name);
        RedisNamed {
            #[cfg(feature = "metrics")]
            outages: Outages {
                errors: Failure::ALL.map(|failure| {
                    let labels = labels_with(&name, kind, ("error", failure.label()));
                    ::metrics::counter!(REDIS_ERRORS, labels.iter())
                }),
                fail_open: ::metrics::counter!(REDIS_FAIL_OPEN, labels(&name, kind).iter()),
                fail_closed: ::metrics::counter!(REDIS_FAIL_CLOSED, labels(&name, kind).iter()),
            },
            name,
            kind,
        }
    }

    /// Counts a call that failed with `error`.
    fn call_failed(&self, error: &RedisLimitError) {
        #[cfg(feature = "metrics")]
        if let Some(failure) = Failure::of(error) {
            self.outages.errors[failure as usize].increment(1);
        }
        let _ = error;
    }

    /// A request for `permits` allowed because Redis could not decide: `error`.
    #[cold]
    fn failed_open(&self, permits: u64, error: &RedisLimitError) {
        #[cfg(feature = "metrics")]
        self.outages.fail_open.increment(1);
        #[cfg(feature = "tracing")]
        tracing::warn!(target: "token_bucket", limiter = &*self.name, kind = self.kind, permits, error = %Cause(error), "Redis could not decide; allowed (fail-open)");
        let _ = (permits, error);
    }

    /// A request for `permits` refused because Redis could not decide: `error`.
    #[cold]
    fn failed_closed(&self, permits: u64, error: &RedisLimitError) {
        #[cfg(feature = "metrics")]
        self.outages.fail_closed.increment(1);
        #[cfg(feature = "tracing")]
        tracing::debug!(target: "token_bucket", limiter = &*self.name, kind = self.kind, permits, error = %Cause(error), "Redis could not decide; refused (fail-closed)");
        let _ = (permits, error);
    }
}

/// Why a call failed, for an event: what the client reported, or the time that passed,
/// without what the limiter answers (`RedisLimitError`'s text names the fail-closed
/// policy, which a fail-open event must not).
#[cfg(feature = "tracing")]
struct Cause<'a>(&'a RedisLimitError);

#[cfg(feature = "tracing")]
impl std::fmt::Display for Cause<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            RedisLimitError::Unavailable { error } | RedisLimitError::CrossSlot { error } => {
                error.fmt(f)
            }
            RedisLimitError::Timeout { timeout } => write!(f, "no answer within {timeout:?}"),
            RedisLimitError::LeaseExpiredOnArrival {
                round_trip,
                lifetime,
            } => write!(
                f,
                "a lease came back after {round_trip:?}, past its lifetime of {lifetime:?}"
            ),
            other => other.fmt(f),
        }
    }
}

/// The labels `limiter` and `kind`, and `extra`.
#[cfg(feature = "metrics")]
fn labels_with(
    name: &Arc<str>,
    kind: &'static str,
    extra: (&'static str, &'static str),
) -> [::metrics::Label; 3] {
    let [limiter, kind] = labels(name, kind);
    [limiter, kind, ::metrics::Label::new(extra.0, extra.1)]
}

/// The labels `limiter` and `kind`.
#[cfg(feature = "metrics")]
fn labels(name: &Arc<str>, kind: &'static str) -> [::metrics::Label; 2] {
    [
        ::metrics::Label::new("limiter", name.to_string()),
        ::metrics::Label::new("kind", kind),
    ]
}

/// What a Redis limiter reports through: nothing unless named. Every handle on the
/// limiter shares one.
#[derive(Default)]
pub(crate) struct RedisObserver(Option<Box<LimiterNamed>>);

struct LimiterNamed {
    common: RedisNamed,
    #[cfg(feature = "metrics")]
    admitted: ::metrics::Counter,
    #[cfg(feature = "metrics")]
    refused: ::metrics::Counter,
}

impl RedisObserver {
    /// An observer for a limiter of `kind` (its label) named `name`: its metrics are
    /// registered now.
    pub(crate) fn named(kind: &'static str, name: &str) -> RedisObserver {
        let common = RedisNamed::new(kind, name);
        #[cfg(feature = "metrics")]
        let decisions = |outcome| {
            let labels = labels_with(&common.name, kind, ("outcome", outcome));
            ::metrics::counter!(REDIS_DECISIONS, labels.iter())
        };
        RedisObserver(Some(Box::new(LimiterNamed {
            #[cfg(feature = "metrics")]
            admitted: decisions("admitted"),
            #[cfg(feature = "metrics")]
            refused: decisions("refused"),
            common,
        })))
    }

    /// The limiter's name, if it has one.
    pub(crate) fn name(&self) -> Option<&str> {
        self.0.as_deref().map(|named| &*named.common.name)
    }

    /// A request for `permits` was admitted by Redis, at once.
    #[cfg_attr(not(any(feature = "metrics", feature = "tracing")), allow(dead_code))]
    #[inline]
    pub(crate) fn admitted(&self, permits: u64) {
        #[cfg(feature = "metrics")]
        if let Some(named) = &self.0 {
            named.admitted.increment(1);
        }
        let _ = permits;
    }

    /// A request for `permits` was admitted by Redis after waiting `waited`.
    #[cfg_attr(not(any(feature = "metrics", feature = "tracing")), allow(dead_code))]
    pub(crate) fn waited(&self, permits: u64, waited: Duration) {
        if let Some(named) = &self.0 {
            #[cfg(feature = "metrics")]
            named.admitted.increment(1);
            #[cfg(feature = "tracing")]
            tracing::trace!(target: "token_bucket", limiter = &*named.common.name, kind = named.common.kind, permits, waited = ?waited, "granted after waiting");
            let _ = named;
        }
        let _ = (permits, waited);
    }

    /// A request for `permits` was refused: by the limit, with `retry_after`, or for
    /// asking more than the limit (`None`).
    #[cfg_attr(not(any(feature = "metrics", feature = "tracing")), allow(dead_code))]
    pub(crate) fn refused(&self, permits: u64, retry_after: Option<Duration>) {
        if let Some(named) = &self.0 {
            #[cfg(feature = "metrics")]
            named.refused.increment(1);
            #[cfg(feature = "tracing")]
            tracing::debug!(target: "token_bucket", limiter = &*named.common.name, kind = named.common.kind, permits, retry_after = ?retry_after, "refused");
            let _ = named;
        }
        let _ = (permits, retry_after);
    }

    /// An `acquire` of `permits`, refused, sleeps `wait` before asking again.
    pub(crate) fn retrying(&self, permits: u64, wait: Duration) {
        #[cfg(feature = "tracing")]
        if let Some(named) = &self.0 {
            tracing::trace!(target: "token_bucket", limiter = &*named.common.name, kind = named.common.kind, permits, wait = ?wait, "waiting to ask again");
        }
        let _ = (permits, wait);
    }

    /// A call for a request of `permits` failed with `error`, and `policy` answered it;
    /// `None` when no policy applies (the keys were at fault, and it is refused).
    #[cold]
    pub(crate) fn undecided(
        &self,
        permits: u64,
        error: &RedisLimitError,
        policy: Option<FailurePolicy>,
    ) {
        let Some(named) = &self.0 else {
            return;
        };
        let common = &named.common;
        common.call_failed(error);
        match policy {
            Some(FailurePolicy::FailOpen) => common.failed_open(permits, error),
            Some(FailurePolicy::FailClosed) => common.failed_closed(permits, error),
            None => {
                #[cfg(feature = "tracing")]
                tracing::debug!(target: "token_bucket", limiter = &*common.name, kind = common.kind, permits, error = %Cause(error), "refused by Redis");
            }
        }
    }

    /// The span an `acquire` of `permits` waits in: `None` for an unnamed limiter.
    #[cfg(feature = "tracing")]
    pub(crate) fn wait_span(&self, permits: u64) -> Option<tracing::Span> {
        let named = self.0.as_ref()?;
        Some(
            tracing::debug_span!(target: "token_bucket", "wait", limiter = &*named.common.name, kind = named.common.kind, permits),
        )
    }
}

/// What a leased front reports through: its requests as a bucket's ([`Observer`]), its
/// calls to Redis here. Nothing unless named.
#[derive(Default)]
pub(crate) struct LeaseObserver {
    bucket: Observer,
    named: Option<Box<FrontNamed>>,
}

struct FrontNamed {
    common: RedisNamed,
    #[cfg(feature = "metrics")]
    takes: ::metrics::Counter,
    #[cfg(feature = "metrics")]
    gives: ::metrics::Counter,
    #[cfg(feature = "metrics")]
    leased: ::metrics::Counter,
    #[cfg(feature = "metrics")]
    returned: ::metrics::Counter,
}

impl LeaseObserver {
    /// An observer for a front named `name`: its metrics are registered now.
    pub(crate) fn named(name: &str) -> LeaseObserver {
        let kind = Kind::TokenBucket.label();
        let common = RedisNamed::new(kind, name);
        #[cfg(feature = "metrics")]
        let calls = |call| {
            let labels = labels_with(&common.name, kind, ("call", call));
            ::metrics::counter!(REDIS_LEASE_CALLS, labels.iter())
        };
        #[cfg(feature = "metrics")]
        let tokens =
            |metric: &'static str| ::metrics::counter!(metric, labels(&common.name, kind).iter());
        LeaseObserver {
            bucket: Observer::named(Kind::TokenBucket, name),
            named: Some(Box::new(FrontNamed {
                #[cfg(feature = "metrics")]
                takes: calls("take"),
                #[cfg(feature = "metrics")]
                gives: calls("give_back"),
                #[cfg(feature = "metrics")]
                leased: tokens(REDIS_LEASED_TOKENS),
                #[cfg(feature = "metrics")]
                returned: tokens(REDIS_RETURNED_TOKENS),
                common,
            })),
        }
    }

    /// The front's name, if it has one.
    pub(crate) fn name(&self) -> Option<&str> {
        self.bucket.name()
    }

    /// What the front's requests report through, as a bucket's.
    pub(crate) fn bucket(&self) -> &Observer {
        &self.bucket
    }

    /// A call to take a lease is made.
    pub(crate) fn lease_call(&self) {
        #[cfg(feature = "metrics")]
        if let Some(named) = &self.named {
            named.takes.increment(1);
        }
    }

    /// A lease of `tokens` was taken.
    pub(crate) fn leased(&self, tokens: u64) {
        if let Some(named) = &self.named {
            #[cfg(feature = "metrics")]
            named.leased.increment(tokens);
            #[cfg(feature = "tracing")]
            tracing::trace!(target: "token_bucket", limiter = &*named.common.name, kind = named.common.kind, tokens, "lease taken");
            let _ = named;
        }
        let _ = tokens;
    }

    /// `tokens` of a lease are given back, in one call.
    pub(crate) fn giving_back(&self, tokens: u64) {
        if let Some(named) = &self.named {
            #[cfg(feature = "metrics")]
            {
                named.gives.increment(1);
                named.returned.increment(tokens);
            }
            #[cfg(feature = "tracing")]
            tracing::trace!(target: "token_bucket", limiter = &*named.common.name, kind = named.common.kind, tokens, "lease given back");
            let _ = named;
        }
        let _ = tokens;
    }

    /// A give-back failed with `error`: the bucket stays stricter, and nobody waits for
    /// it.
    #[cold]
    pub(crate) fn give_back_failed(&self, error: &RedisLimitError) {
        if let Some(named) = &self.named {
            named.common.call_failed(error);
            #[cfg(feature = "tracing")]
            tracing::debug!(target: "token_bucket", limiter = &*named.common.name, kind = named.common.kind, error = %Cause(error), "a give-back failed");
        }
        let _ = error;
    }

    /// A call for a lease failed with `error` (or its lease came back expired).
    #[cold]
    pub(crate) fn call_failed(&self, error: &RedisLimitError) {
        if let Some(named) = &self.named {
            named.common.call_failed(error);
        }
    }

    /// A request for `tokens` was allowed because Redis could not decide: `error`.
    #[cold]
    pub(crate) fn failed_open(&self, tokens: u64, error: &RedisLimitError) {
        if let Some(named) = &self.named {
            named.common.failed_open(tokens, error);
        }
    }

    /// A request for `tokens` was refused because Redis could not decide: `error`.
    #[cold]
    pub(crate) fn failed_closed(&self, tokens: u64, error: &RedisLimitError) {
        if let Some(named) = &self.named {
            named.common.failed_closed(tokens, error);
        }
    }
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use super::*;
    use ::redis::{ErrorKind, RedisError, ServerErrorKind};

    fn unavailable(error: RedisError) -> RedisLimitError {
        RedisLimitError::Unavailable { error }
    }

    fn server(kind: ServerErrorKind) -> RedisError {
        RedisError::from((ErrorKind::Server(kind), "from the server"))
    }

    #[test]
    fn each_failed_call_has_one_bounded_label() {
        let io = |kind| unavailable(std::io::Error::from(kind).into());
        let cases = [
            (
                RedisLimitError::Timeout {
                    timeout: Duration::from_millis(1),
                },
                "timeout",
            ),
            (io(std::io::ErrorKind::TimedOut), "timeout"),
            (io(std::io::ErrorKind::ConnectionRefused), "connection"),
            (io(std::io::ErrorKind::BrokenPipe), "connection"),
            (
                unavailable(RedisError::from((ErrorKind::AuthenticationFailed, "auth"))),
                "connection",
            ),
            (unavailable(server(ServerErrorKind::Moved)), "cluster"),
            (unavailable(server(ServerErrorKind::TryAgain)), "cluster"),
            (unavailable(server(ServerErrorKind::ClusterDown)), "cluster"),
            (
                RedisLimitError::CrossSlot {
                    error: server(ServerErrorKind::CrossSlot),
                },
                "cross_slot",
            ),
            (
                unavailable(server(ServerErrorKind::ResponseError)),
                "script",
            ),
            (unavailable(server(ServerErrorKind::NoScript)), "script"),
            (unavailable(server(ServerErrorKind::BusyLoading)), "server"),
            (unavailable(server(ServerErrorKind::ReadOnly)), "server"),
            (
                unavailable(RedisError::from((ErrorKind::UnexpectedReturnType, "reply"))),
                "reply",
            ),
            (
                RedisLimitError::LeaseExpiredOnArrival {
                    round_trip: Duration::from_millis(2),
                    lifetime: Duration::from_millis(1),
                },
                "lease_expired",
            ),
            (
                unavailable(RedisError::from((ErrorKind::InvalidClientConfig, "config"))),
                "other",
            ),
        ];
        for (error, label) in cases {
            assert_eq!(
                Failure::of(&error).map(Failure::label),
                Some(label),
                "{error:?}"
            );
        }
        // Not failed calls: decided without Redis, or a bug in the caller.
        for error in [
            RedisLimitError::Limited {
                retry_after: Duration::from_millis(1),
            },
            RedisLimitError::ExceedsLimit {
                requested: 2,
                limit: 1,
            },
            RedisLimitError::NoRuntime,
            RedisLimitError::NoMembers,
            RedisLimitError::Closed,
        ] {
            assert_eq!(Failure::of(&error), None, "{error:?}");
        }
        // Each label once, in the order of the counters.
        for (index, failure) in Failure::ALL.into_iter().enumerate() {
            assert_eq!(failure as usize, index);
        }
    }
}
