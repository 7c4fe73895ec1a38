//! The layer's limits in Redis (features `http` and `redis`): every instance of a service
//! that uses the same Redis shares one budget per client, and one global budget.

use std::fmt;
use std::time::Duration;

use tokio::time::{timeout_at, Instant};

use super::key::KeyExtractor;
use super::layer::{BuildError, RateLimitBuilder, RateLimitLayer};
use super::limits::{
    later, private::Decide, refusal, refused_by, Decided, Limit, Outcome, Verdict,
};
use super::response::RefusalKind;
use crate::error::{ConfigError, TryAcquireError};
use crate::quota::{Decision, Policy};
use crate::redis::{
    AllDecision, LeaseOptions, LeasedBucket, RedisAlgorithm, RedisAll, RedisConnection,
    RedisLimitError, RedisLimiter, RedisMember, TokenBucketScript,
};

/// The limits of a layer built by [`RateLimitLayer::redis_builder`], in Redis: a key of
/// `per_key` for each client, and optionally one global member decided in the same script
/// call. Each request is one call.
pub struct RedisLimits<A, C: RedisConnection> {
    per_key: RedisLimiter<A, C>,
    global: Option<Global<C>>,
}

/// The global limit of a Redis layer.
enum Global<C: RedisConnection> {
    /// A key decided with the client's in one script call, all or nothing.
    Member(RedisMember, Policy),
    /// A hot key's local front, which takes tokens in leases.
    Leased(LeasedBucket<C>, Policy),
}

impl<C: RedisConnection> Clone for Global<C> {
    fn clone(&self) -> Global<C> {
        match self {
            Global::Member(member, policy) => Global::Member(member.clone(), *policy),
            Global::Leased(front, policy) => Global::Leased(front.clone(), *policy),
        }
    }
}

impl<C: RedisConnection> Global<C> {
    fn policy(&self) -> Policy {
        match self {
            Global::Member(_, policy) | Global::Leased(_, policy) => *policy,
        }
    }

    fn redis_key(&self) -> &str {
        match self {
            Global::Member(member, _) => member.redis_key(),
            Global::Leased(front, _) => front.redis_key(),
        }
    }
}

impl<A, C: RedisConnection> fmt::Debug for RedisLimits<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let global = self.global.as_ref().map(Global::redis_key);
        f.debug_struct("RedisLimits")
            .field("global", &global)
            .finish_non_exhaustive()
    }
}

impl
    RateLimitLayer<
        super::key::GlobalKey,
        RedisLimits<(), crate::redis::driver::aio::ConnectionManager>,
    >
{
    /// A builder of a layer that keys requests with `key` and limits each key in Redis
    /// with `per_key`, under the key's text (its `Display`): every server that uses the
    /// same Redis and settings shares each client's budget.
    ///
    /// Each request is one script call, over the limiter's connection and with its
    /// [failure policy](crate::redis::FailurePolicy): failing open, a request Redis could
    /// not decide is admitted (without `RateLimit` values, since nothing is known);
    /// failing closed, it is answered `503 Service Unavailable`.
    ///
    /// ```no_run
    /// use token_bucket::http::{ClientIp, RateLimitLayer};
    /// use token_bucket::redis::{driver, FailurePolicy, RedisOptions, RedisTokenBucket};
    /// use token_bucket::Rate;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = driver::Client::open("redis://127.0.0.1/")?;
    /// let connection = driver::aio::ConnectionManager::new(client).await?;
    /// let options = RedisOptions::new(FailurePolicy::FailOpen);
    /// let per_client =
    ///     RedisTokenBucket::new(connection.clone(), Rate::per_second(5), 10, options.clone())?;
    /// let everyone = RedisTokenBucket::new(
    ///     connection,
    ///     Rate::per_second(1_000),
    ///     1_000,
    ///     options.with_prefix("global:"),
    /// )?;
    /// let limit = RateLimitLayer::redis_builder(ClientIp::peer(), per_client)
    ///     .global(&everyone, "all")
    ///     .build()?;
    /// # let _ = limit;
    /// # Ok(())
    /// # }
    /// ```
    pub fn redis_builder<X, A, C>(
        key: X,
        per_key: RedisLimiter<A, C>,
    ) -> RateLimitBuilder<X, RedisLimits<A, C>>
    where
        X: KeyExtractor,
        X::Key: fmt::Display,
        A: RedisAlgorithm,
        C: RedisConnection,
    {
        RateLimitBuilder::with_limits(
            key,
            RedisLimits {
                per_key,
                global: None,
            },
        )
    }
}

impl<X, A, C, H> RateLimitBuilder<X, RedisLimits<A, C>, H>
where
    X: KeyExtractor,
    X::Key: fmt::Display,
    A: RedisAlgorithm,
    C: RedisConnection,
{
    /// Adds a limit on every request together: `limiter`'s key `key`, decided with the
    /// client's in the same script call, all or nothing. On a Redis Cluster every key of
    /// one call must be in one hash slot, so a global limit needs every client's key
    /// and the global one to share a hash tag (which puts them on one node); answered
    /// `503` otherwise, as [`RedisLimitError::CrossSlot`] says.
    pub fn global<A2, C2>(
        self,
        limiter: &RedisLimiter<A2, C2>,
        key: &str,
    ) -> RateLimitBuilder<X, RedisLimits<A, C>, H>
    where
        A2: RedisAlgorithm,
        C2: RedisConnection,
    {
        let global = Global::Member(limiter.member(key), limiter.policy());
        self.map_limits(|limits| RedisLimits {
            global: Some(global),
            ..limits
        })
    }

    /// Adds a limit on every request together as a hot key's leased front
    /// ([`LeasedBucket`]): `limiter`'s key `key`, taken in leases, so that most requests
    /// decide it without a call to Redis, on any Redis Cluster node.
    ///
    /// Not all or nothing: the client's key is decided first, in Redis, and only a
    /// request it admits takes a global token, from the front. A request the global
    /// limit then refuses has spent its client's permit (the client pays for its own
    /// request; a client over its own limit never spends the global budget). With
    /// [`wait_up_to`](RateLimitBuilder::wait_up_to) the global token is waited for, first
    /// in, first out in this process, within what is left of the bound. The `RateLimit`
    /// field reports no global quota: a front knows none it could vouch for (see
    /// [`LeasedBucket`]).
    ///
    /// # Errors
    ///
    /// Those of [`RedisLimiter::leased`] for `options`.
    pub fn global_leased(
        self,
        limiter: &RedisLimiter<TokenBucketScript, C>,
        key: &str,
        options: LeaseOptions,
    ) -> Result<RateLimitBuilder<X, RedisLimits<A, C>, H>, ConfigError> {
        let global = Global::Leased(limiter.leased(key, options)?, limiter.policy());
        Ok(self.map_limits(|limits| RedisLimits {
            global: Some(global),
            ..limits
        }))
    }

    /// The layer.
    ///
    /// # Errors
    ///
    /// [`BuildError::InvalidPolicyName`] for a name a header field cannot carry;
    /// [`BuildError::InvalidQuotaUnit`] and [`BuildError::QuotaUnitWithoutCost`] for a
    /// quota unit that cannot stand or has no cost to name.
    pub fn build(self) -> Result<RateLimitLayer<X, RedisLimits<A, C>, H>, BuildError> {
        self.into_layer(Ok)
    }
}

/// A Redis answer as the layer's outcome. Redis keeps no table of keys, so a key is
/// never refused for want of room: the window passed for that is never used.
fn outcome(result: Result<(), TryAcquireError>) -> Outcome {
    result.map_err(|error| refusal(error, Duration::ZERO))
}

/// A Redis failure (or a leased front's refusal, made by `limit`) as the layer's outcome.
fn unavailable(error: RedisLimitError, limit: Limit) -> Verdict {
    let outcome = match error {
        RedisLimitError::Limited { retry_after } => Err(RefusalKind::Limited { retry_after }),
        RedisLimitError::ExceedsLimit { requested, limit } => {
            Err(RefusalKind::NeverFits { requested, limit })
        }
        other => Err(RefusalKind::Unavailable {
            reason: other.to_string(),
        }),
    };
    Verdict {
        refused_by: refused_by(&outcome, limit),
        outcome,
        quotas: [None, None],
        waited: None,
    }
}

impl<A: RedisAlgorithm, C: RedisConnection> RedisLimits<A, C> {
    /// The client's key alone: one script call.
    async fn try_decide_key(per_key: &RedisLimiter<A, C>, key: &str, cost: u64) -> Verdict {
        match per_key.try_acquire_decision(key, cost).await {
            Ok(Decision { result, quota }) => Verdict::of_key(outcome(result), quota),
            Err(error) => unavailable(error, Limit::Key),
        }
    }

    /// The client's key, and a global member with it: one script call, which writes
    /// nothing when it refuses.
    async fn try_decide(
        per_key: &RedisLimiter<A, C>,
        global: Option<&RedisMember>,
        key: &str,
        cost: u64,
    ) -> Verdict {
        let Some(global) = global else {
            return Self::try_decide_key(per_key, key, cost).await;
        };
        let both = RedisAll::new([per_key.member(key), global.clone()]);
        match both.try_acquire_decision(cost).await {
            Ok(decision) => {
                // The client's key is to blame when both refused, as in process.
                let limit = match decision.refused_by().next() {
                    Some(1) => Limit::Global,
                    _ => Limit::Key,
                };
                let AllDecision { result, members } = decision;
                let quota = |index: usize| members.get(index).and_then(|member| member.quota);
                let outcome = outcome(result);
                Verdict {
                    refused_by: refused_by(&outcome, limit),
                    outcome,
                    quotas: [quota(0), quota(1)],
                    waited: None,
                }
            }
            Err(error) => unavailable(error, Limit::Key),
        }
    }
}

impl<K, A, C> Decide<K> for RedisLimits<A, C>
where
    K: fmt::Display,
    A: RedisAlgorithm,
    C: RedisConnection,
{
    // Redis answers the quotas with the decision, in the same round trip: nothing to
    // save by leaving them out.
    fn decide(&self, key: &K, cost: u64, wait: Option<Duration>, _quotas: bool) -> Decided {
        let per_key = self.per_key.clone();
        let (member, front) = match &self.global {
            Some(Global::Member(member, _)) => (Some(member.clone()), None),
            Some(Global::Leased(front, _)) => (None, Some(front.clone())),
            None => (None, None),
        };
        let key = key.to_string();
        Decided::Later(Box::pin(async move {
            let start = Instant::now();
            let deadline = wait.map(|wait| later(start, wait));
            // The script first: a refusal writes nothing, so it may be asked again. Across
            // processes there is no line: ask again once Redis says the request could
            // pass, while that is within the bound.
            let mut slept = false;
            let mut verdict = loop {
                let verdict = Self::try_decide(&per_key, member.as_ref(), &key, cost).await;
                match (&verdict.outcome, deadline) {
                    (Err(RefusalKind::Limited { retry_after }), Some(deadline))
                        if later(Instant::now(), *retry_after) <= deadline =>
                    {
                        tokio::time::sleep(*retry_after).await;
                        slept = true;
                    }
                    _ => break verdict,
                }
            };
            // A request asked again has waited; one decided on the first call has only
            // made its round trip.
            verdict.waited = slept.then(|| Instant::now() - start);
            // Then a leased global token, once and only for an admitted request: in this
            // process's line, up to the deadline when the layer waits.
            let (Ok(()), Some(front)) = (&verdict.outcome, front) else {
                return verdict;
            };
            let taken = match deadline {
                None => front.try_take(cost).await,
                Some(deadline) => match timeout_at(deadline, front.take(cost)).await {
                    Ok(taken) => taken,
                    Err(_elapsed) => Err(RedisLimitError::Limited {
                        retry_after: deadline.saturating_duration_since(Instant::now()),
                    }),
                },
            };
            match taken {
                Ok(()) => Verdict {
                    waited: slept.then(|| Instant::now() - start),
                    ..verdict
                },
                Err(error) => Verdict {
                    quotas: verdict.quotas,
                    waited: verdict.waited,
                    ..unavailable(error, Limit::Global)
                },
            }
        }))
    }

    /// Redis limiters take no refunds, so a Redis layer has no settlement (its builder
    /// offers none).
    fn settle(&self, _key: &K, _charged: u64, _actual: u64, _refundable: [bool; 2]) {}

    fn policies(&self) -> [Option<Policy>; 2] {
        [
            Some(self.per_key.policy()),
            self.global.as_ref().map(Global::policy),
        ]
    }

    /// Keys in Redis expire by themselves once idle.
    fn forget_idle_keys(&self) -> usize {
        0
    }
}
