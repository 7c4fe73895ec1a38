//! The layer's limits in Redis (features `http` and `redis`): every instance of a service
//! that uses the same Redis shares one budget per client, and one global budget.

use std::fmt;
use std::time::Duration;

use super::key::KeyExtractor;
use super::layer::{BuildError, RateLimitBuilder, RateLimitLayer};
use super::limits::{private::Decide, Decided, Outcome, Verdict};
use crate::error::TryAcquireError;
use crate::quota::{Decision, Policy};
use crate::redis::{
    all, AllDecision, RedisAlgorithm, RedisConnection, RedisLimitError, RedisLimiter, RedisMember,
};

/// The limits of a layer built by [`RateLimitLayer::redis_builder`], in Redis: a key of
/// `per_key` for each client, and optionally one global member decided in the same script
/// call. Each request is one call.
pub struct RedisLimits<A, C> {
    per_key: RedisLimiter<A, C>,
    global: Option<(RedisMember, Policy)>,
}

impl<A, C> fmt::Debug for RedisLimits<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let global = self.global.as_ref().map(|(member, _)| member.redis_key());
        f.debug_struct("RedisLimits")
            .field("global", &global)
            .finish_non_exhaustive()
    }
}

impl RateLimitLayer<super::key::GlobalKey, RedisLimits<(), ()>> {
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
        let policy = limiter.policy();
        let member = limiter.member(key);
        self.map_limits(|limits| RedisLimits {
            global: Some((member, policy)),
            ..limits
        })
    }

    /// The layer.
    ///
    /// # Errors
    ///
    /// [`BuildError::InvalidPolicyName`] for a name a header field cannot carry.
    pub fn build(self) -> Result<RateLimitLayer<X, RedisLimits<A, C>, H>, BuildError> {
        self.into_layer(Ok)
    }
}

/// A Redis answer as the layer's outcome.
fn outcome(result: Result<(), TryAcquireError>) -> Outcome {
    match result {
        Ok(()) => Outcome::Admitted,
        Err(TryAcquireError::Limited { retry_after }) => Outcome::Limited { retry_after },
        Err(TryAcquireError::ExceedsLimit { requested, limit }) => {
            Outcome::NeverFits { requested, limit }
        }
        Err(other) => Outcome::Unavailable {
            reason: other.to_string(),
        },
    }
}

fn unavailable(error: RedisLimitError) -> Verdict {
    let outcome = match error {
        RedisLimitError::Limited { retry_after } => Outcome::Limited { retry_after },
        RedisLimitError::ExceedsLimit { requested, limit } => {
            Outcome::NeverFits { requested, limit }
        }
        other => Outcome::Unavailable {
            reason: other.to_string(),
        },
    };
    Verdict {
        outcome,
        quotas: [None, None],
    }
}

impl<A: RedisAlgorithm, C: RedisConnection> RedisLimits<A, C> {
    /// One script call: the client's key, and the global member with it.
    async fn try_decide(
        per_key: &RedisLimiter<A, C>,
        global: Option<&RedisMember>,
        key: &str,
        cost: u64,
    ) -> Verdict {
        let Some(global) = global else {
            return match per_key.try_acquire_decision(key, cost).await {
                Ok(Decision { result, quota }) => Verdict {
                    outcome: outcome(result),
                    quotas: [quota, None],
                },
                Err(error) => unavailable(error),
            };
        };
        let both = all([per_key.member(key), global.clone()]);
        match both.try_acquire_decision(cost).await {
            Ok(AllDecision { result, members }) => {
                let quota = |index: usize| members.get(index).and_then(|member| member.quota);
                Verdict {
                    outcome: outcome(result),
                    quotas: [quota(0), quota(1)],
                }
            }
            Err(error) => unavailable(error),
        }
    }
}

impl<K, A, C> Decide<K> for RedisLimits<A, C>
where
    K: fmt::Display,
    A: RedisAlgorithm,
    C: RedisConnection,
{
    fn decide(&self, key: &K, cost: u64, wait: Option<Duration>) -> Decided {
        let per_key = self.per_key.clone();
        let global = self.global.as_ref().map(|(member, _)| member.clone());
        let key = key.to_string();
        Decided::Later(Box::pin(async move {
            let start = tokio::time::Instant::now();
            loop {
                let verdict = Self::try_decide(&per_key, global.as_ref(), &key, cost).await;
                // Waiting across processes is not first in, first out: ask again once
                // Redis says the request could pass, while that is within the bound.
                match (&verdict.outcome, wait) {
                    (Outcome::Limited { retry_after }, Some(wait))
                        if start.elapsed() + *retry_after <= wait =>
                    {
                        tokio::time::sleep(*retry_after).await;
                    }
                    _ => return verdict,
                }
            }
        }))
    }

    /// Redis limiters take no refunds, so a Redis layer has no settlement (its builder
    /// offers none).
    fn settle(&self, _key: &K, _charged: u64, _actual: u64) {}

    fn policies(&self) -> [Option<Policy>; 2] {
        [
            Some(self.per_key.policy()),
            self.global.as_ref().map(|(_, policy)| *policy),
        ]
    }

    /// Keys in Redis expire by themselves once idle.
    fn forget_idle_keys(&self) -> usize {
        0
    }
}
