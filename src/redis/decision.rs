//! One decision over one key or several, shared by [`RedisLimiter`](super::RedisLimiter)
//! (one key) and [`RedisAll`](super::RedisAll) (several): the checks made without asking
//! Redis, the call bounded by the timeout, the failure policy, and `acquire`'s waiting.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ::redis::{ErrorKind, RedisResult, ServerErrorKind};
use futures::future::BoxFuture;

use super::algorithm::sealed::Algorithm;
use super::connection::RedisConnection;
use super::error::RedisLimitError;
use super::jitter::Jitter;
use super::observe::RedisObserver;
use super::policy::{FailurePolicy, RedisOptions};
use super::scripts::{KeyCall, KeyState, Reply, ScriptCall};
use crate::error::TryAcquireError;
use crate::quota::{Decision, Policy, Quota};

/// What every limiter has whatever its algorithm and connection: its options, its count
/// of decisions not made, its jitter, and what it reports through.
pub(crate) struct Common {
    pub(crate) options: RedisOptions,
    pub(crate) fail_open_decisions: AtomicU64,
    pub(crate) jitter: Jitter,
    /// Nothing unless the options name the limiter (see `observe/redis.rs`).
    pub(crate) observer: RedisObserver,
}

impl Common {
    /// The common part of a limiter of `kind` (its label) with `options`, checked: a
    /// named one registers its metrics now.
    pub(crate) fn new(options: RedisOptions, kind: &'static str) -> Common {
        let observer = match options.name() {
            Some(name) => RedisObserver::named(kind, name),
            None => RedisObserver::default(),
        };
        Common {
            options,
            fail_open_decisions: AtomicU64::new(0),
            jitter: Jitter::new(),
            observer,
        }
    }
}

/// A limiter's shared state: what every limiter has, its algorithm's settings, and its
/// connection.
pub(crate) struct Shared<A, C> {
    pub(crate) common: Common,
    pub(crate) algorithm: A,
    pub(crate) connection: C,
}

/// A limiter seen without the types of its algorithm and connection, so that one
/// decision can span limiters of different algorithms.
pub(crate) trait Member: Send + Sync {
    fn common(&self) -> &Common;

    /// Makes `call` over this limiter's connection.
    fn run(&self, call: ScriptCall) -> BoxFuture<'static, RedisResult<Reply>>;

    /// As [`Algorithm::TAG`].
    fn tag(&self) -> &'static str;

    /// As [`Algorithm::limit`].
    fn limit(&self) -> u64;

    /// As [`Algorithm::arguments`].
    fn arguments(&self, permits: u64) -> [u64; 3];

    /// As [`Algorithm::policy`].
    fn policy(&self) -> Policy;

    /// A key's state, as the script reported it, in permits.
    fn quota(&self, state: &KeyState) -> Quota;

    /// The algorithm's settings, for `Debug`.
    fn algorithm(&self) -> &dyn fmt::Debug;
}

impl<A: Algorithm, C: RedisConnection> Member for Shared<A, C> {
    fn common(&self) -> &Common {
        &self.common
    }

    fn run(&self, call: ScriptCall) -> BoxFuture<'static, RedisResult<Reply>> {
        Box::pin(call.run(self.connection.clone()))
    }

    fn tag(&self) -> &'static str {
        A::TAG
    }

    fn limit(&self) -> u64 {
        self.algorithm.limit()
    }

    fn arguments(&self, permits: u64) -> [u64; 3] {
        self.algorithm.arguments(permits)
    }

    fn policy(&self) -> Policy {
        self.algorithm.policy()
    }

    fn quota(&self, state: &KeyState) -> Quota {
        Quota {
            remaining: self.algorithm.whole_permits(state.left),
            full_after: state.whole_after,
        }
    }

    fn algorithm(&self) -> &dyn fmt::Debug {
        &self.algorithm
    }
}

/// One key of a decision: the limiter whose algorithm and settings decide it, the whole
/// Redis key, and how many members ask on it (each asks for the same permits).
#[derive(Clone)]
pub(crate) struct Part {
    pub(crate) limiter: Arc<dyn Member>,
    pub(crate) key: String,
    pub(crate) count: u64,
}

impl Part {
    /// The permits a request of `permits` per member takes from this key, saturating.
    fn requested(&self, permits: u64) -> u64 {
        permits.saturating_mul(self.count)
    }
}

/// A decision to make: its keys, each once, in order (the first's connection makes the
/// call, the first's jitter spreads the waits), and how Redis's failures are answered.
pub(crate) struct Plan<'a> {
    pub(crate) parts: &'a [Part],
    /// Every limiter that takes part, each once: each counts a decision not made.
    pub(crate) limiters: &'a [Arc<dyn Member>],
    pub(crate) policy: FailurePolicy,
    pub(crate) timeout: Duration,
}

/// What [`Plan::decide`] came to.
pub(crate) enum Decided {
    /// Refused without asking Redis: `requested` is above a part's `limit` (the first
    /// such part's).
    ExceedsLimit { requested: u64, limit: u64 },
    /// Redis decided (for zero permits, only read the parts' states).
    ByRedis(Reply),
    /// Redis could not decide, and the failure policy allowed the request (counted).
    FailedOpen,
}

impl Decided {
    /// The decision over every part, as `try_acquire` answers it.
    fn outcome(&self) -> Result<(), RedisLimitError> {
        if let Decided::ExceedsLimit { requested, limit } = *self {
            return Err(RedisLimitError::ExceedsLimit { requested, limit });
        }
        self.retry_after().map_or(Ok(()), |retry_after| {
            Err(RedisLimitError::Limited { retry_after })
        })
    }

    /// How long until the request could be granted, when Redis refused it.
    fn retry_after(&self) -> Option<Duration> {
        match self {
            Decided::ByRedis(reply) => reply.retry_after(),
            Decided::ExceedsLimit { .. } | Decided::FailedOpen => None,
        }
    }

    /// The decision over every part, as `try_acquire` would answer it, in the in-process
    /// limiters' error type.
    pub(crate) fn result(&self) -> Result<(), TryAcquireError> {
        match self {
            Decided::ExceedsLimit { requested, limit } => Err(TryAcquireError::ExceedsLimit {
                requested: *requested,
                limit: *limit,
            }),
            Decided::ByRedis(reply) => match reply.retry_after() {
                None => Ok(()),
                Some(retry_after) => Err(TryAcquireError::Limited { retry_after }),
            },
            Decided::FailedOpen => Ok(()),
        }
    }

    /// The decision of `part`, the plan's part at `index`, on its own, for `permits` per
    /// member: refused only if it refused (with its own wait) or can never admit them;
    /// its quota when Redis reported it.
    pub(crate) fn for_part(&self, part: &Part, index: usize, permits: u64) -> Decision {
        let result = match self {
            Decided::ExceedsLimit { .. } => {
                let (requested, limit) = (part.requested(permits), part.limiter.limit());
                if requested > limit {
                    Err(TryAcquireError::ExceedsLimit { requested, limit })
                } else {
                    Ok(())
                }
            }
            // The reply holds a state for each of the call's parts.
            Decided::ByRedis(reply) => match reply.keys[index].wait {
                wait if wait.is_zero() => Ok(()),
                retry_after => Err(TryAcquireError::Limited { retry_after }),
            },
            Decided::FailedOpen => Ok(()),
        };
        Decision {
            result,
            quota: self.quota(part, index),
        }
    }

    /// The quota of `part`, the plan's part at `index`, when Redis reported it.
    pub(crate) fn quota(&self, part: &Part, index: usize) -> Option<Quota> {
        match self {
            Decided::ByRedis(reply) => Some(part.limiter.quota(&reply.keys[index])),
            Decided::ExceedsLimit { .. } | Decided::FailedOpen => None,
        }
    }
}

impl Plan<'_> {
    /// Takes `permits` from every part (times its count) if all allow now, else nothing.
    pub(crate) async fn try_acquire(&self, permits: u64) -> Result<(), RedisLimitError> {
        if permits == 0 {
            self.check(permits)?;
            return Ok(());
        }
        let decided = self.decide_unreported(permits).await?;
        self.report(&decided, permits, None);
        decided.outcome()
    }

    /// As [`try_acquire`](Self::try_acquire), with every part's state in the reply. Zero
    /// permits asks Redis for the parts' states, taking nothing.
    pub(crate) async fn decide(&self, permits: u64) -> Result<Decided, RedisLimitError> {
        let decided = self.decide_unreported(permits).await?;
        self.report(&decided, permits, None);
        Ok(decided)
    }

    /// As [`decide`](Self::decide), reporting only the calls that failed: the caller
    /// reports the decision, once a request.
    async fn decide_unreported(&self, permits: u64) -> Result<Decided, RedisLimitError> {
        let first = match self.check(permits) {
            Ok(first) => first,
            Err(RedisLimitError::ExceedsLimit { requested, limit }) => {
                return Ok(Decided::ExceedsLimit { requested, limit })
            }
            Err(other) => return Err(other),
        };
        Ok(match self.ask(first, permits).await? {
            Some(reply) => Decided::ByRedis(reply),
            None => Decided::FailedOpen,
        })
    }

    /// What is refused without asking Redis: no parts, and more permits than a part's
    /// limit (the first such part, in order). Else the first part.
    fn check(&self, permits: u64) -> Result<&Part, RedisLimitError> {
        let Some(first) = self.parts.first() else {
            return Err(RedisLimitError::NoMembers);
        };
        for part in self.parts {
            let (requested, limit) = (part.requested(permits), part.limiter.limit());
            if requested > limit {
                return Err(RedisLimitError::ExceedsLimit { requested, limit });
            }
        }
        Ok(first)
    }

    /// Asks Redis, over `first`'s connection, to decide on `permits` from every part
    /// (each at most its limit). `None` when Redis could not decide and the failure
    /// policy allowed the request.
    async fn ask(&self, first: &Part, permits: u64) -> Result<Option<Reply>, RedisLimitError> {
        // The connection and the timeout need tokio; without it they would panic.
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(RedisLimitError::NoRuntime);
        }
        let keys = self.parts.iter().map(|part| KeyCall {
            key: &part.key,
            tag: part.limiter.tag(),
            // At most the limit, checked.
            arguments: part.limiter.arguments(part.requested(permits)),
        });
        let call = first.limiter.run(ScriptCall::new(keys));
        match bounded(self.timeout, call).await {
            Ok(reply) => Ok(Some(reply)),
            Err(failure) if failure.is_policy_proof() => {
                for limiter in self.limiters {
                    limiter.common().observer.undecided(permits, &failure, None);
                }
                Err(failure)
            }
            Err(failure) => self.undecided(failure, permits).map(|()| None),
        }
    }

    /// Tries, and after each refusal sleeps its `retry_after` plus jitter and tries again.
    pub(crate) async fn acquire(&self, permits: u64) -> Result<(), RedisLimitError> {
        if permits == 0 {
            self.check(permits)?;
            return Ok(());
        }
        let decided = self.decide_unreported(permits).await?;
        let Some(retry_after) = decided.retry_after() else {
            self.report(&decided, permits, None);
            return decided.outcome();
        };
        let waiting = self.wait(permits, retry_after);
        #[cfg(feature = "tracing")]
        if let Some(span) = self.wait_span(permits) {
            return tracing::Instrument::instrument(waiting, span).await;
        }
        waiting.await
    }

    /// Waits for `permits` refused with `retry_after`: sleeps it plus jitter, and asks
    /// again until granted.
    async fn wait(&self, permits: u64, mut retry_after: Duration) -> Result<(), RedisLimitError> {
        let since = tokio::time::Instant::now();
        // A refusal came from Redis, so there is a first part.
        let jitter = &self.parts[0].limiter.common().jitter;
        loop {
            let wait = retry_after + jitter.extra_wait(retry_after);
            for limiter in self.limiters {
                limiter.common().observer.retrying(permits, wait);
            }
            tokio::time::sleep(wait).await;
            let decided = self.decide_unreported(permits).await?;
            match decided.retry_after() {
                Some(again) => retry_after = again,
                None => {
                    self.report(&decided, permits, Some(since.elapsed()));
                    return decided.outcome();
                }
            }
        }
    }

    /// The span a wait for `permits` runs in: its first named limiter's.
    #[cfg(feature = "tracing")]
    fn wait_span(&self, permits: u64) -> Option<tracing::Span> {
        self.limiters
            .iter()
            .find_map(|limiter| limiter.common().observer.wait_span(permits))
    }

    /// Reports what Redis decided on a request of `permits` (admitted after waiting
    /// `waited`, if it waited) to every named limiter: admitted by all when granted, else
    /// refused by those whose keys refused. Nothing for zero permits, nor for a request
    /// Redis could not decide (reported when its call failed).
    fn report(&self, decided: &Decided, permits: u64, waited: Option<Duration>) {
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if permits > 0 {
            for limiter in self.limiters {
                let observer = &limiter.common().observer;
                if observer.name().is_some() {
                    self.report_to(observer, limiter, decided, permits, waited);
                }
            }
        }
        #[cfg(not(any(feature = "metrics", feature = "tracing")))]
        let _ = (decided, permits, waited);
    }

    /// Reports to `observer`, of `limiter`, what [`report`](Self::report) does.
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    fn report_to(
        &self,
        observer: &RedisObserver,
        limiter: &Arc<dyn Member>,
        decided: &Decided,
        permits: u64,
        waited: Option<Duration>,
    ) {
        // Its keys, with their indexes in the reply.
        let own = || {
            self.parts.iter().enumerate().filter(|(_, part)| {
                std::ptr::addr_eq(Arc::as_ptr(&part.limiter), Arc::as_ptr(limiter))
            })
        };
        match decided {
            Decided::FailedOpen => {}
            Decided::ExceedsLimit { .. } => {
                if own().any(|(_, part)| part.requested(permits) > part.limiter.limit()) {
                    observer.refused(permits, None);
                }
            }
            Decided::ByRedis(reply) if reply.granted => match waited {
                Some(waited) => observer.waited(permits, waited),
                None => observer.admitted(permits),
            },
            Decided::ByRedis(reply) => {
                let refusal = own().map(|(index, _)| reply.keys[index].wait).max();
                if let Some(retry_after) = refusal.filter(|wait| !wait.is_zero()) {
                    observer.refused(permits, Some(retry_after));
                }
            }
        }
    }

    /// Applies the failure policy to a call for `permits` Redis did not decide.
    fn undecided(&self, failure: RedisLimitError, permits: u64) -> Result<(), RedisLimitError> {
        for limiter in self.limiters {
            let common = limiter.common();
            if self.policy == FailurePolicy::FailOpen {
                common.fail_open_decisions.fetch_add(1, Ordering::Relaxed);
            }
            common
                .observer
                .undecided(permits, &failure, Some(self.policy));
        }
        match self.policy {
            FailurePolicy::FailOpen => Ok(()),
            FailurePolicy::FailClosed => Err(failure),
        }
    }
}

/// `call`, bounded by `timeout`, its failures as the limiters report them: `CrossSlot`
/// when Redis refused the keys' slots, `Unavailable` for any other error, `Timeout` when
/// it did not answer in time.
pub(crate) async fn bounded<T>(
    timeout: Duration,
    call: impl Future<Output = RedisResult<T>>,
) -> Result<T, RedisLimitError> {
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(reply)) => Ok(reply),
        Ok(Err(error)) if error.kind() == ErrorKind::Server(ServerErrorKind::CrossSlot) => {
            Err(RedisLimitError::CrossSlot { error })
        }
        Ok(Err(error)) => Err(RedisLimitError::Unavailable { error }),
        Err(_elapsed) => Err(RedisLimitError::Timeout { timeout }),
    }
}
