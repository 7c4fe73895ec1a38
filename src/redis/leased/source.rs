//! Where a leased front's tokens come from: the Redis token bucket, through `lease.lua`
//! (or, in the unit tests, a bucket in memory on tokio's clock).

use std::time::Duration;

use futures::future::BoxFuture;

use crate::rate::Rate;
use crate::redis::connection::RedisConnection;
use crate::redis::decision::bounded;
use crate::redis::scripts::ScriptCall;
use crate::redis::{FailurePolicy, RedisLimitError, RedisTokenBucket};

/// What a call to take a lease came back with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taken {
    /// `tokens` (at least the fewest asked for) were taken, there from the source's
    /// instant `began` (which giving them back names), `wait` after the source decided.
    Granted {
        tokens: u64,
        began: u64,
        wait: Duration,
    },
    /// Fewer than the fewest asked for would be there within the time allowed; nothing
    /// was taken.
    Refused { retry_after: Duration },
}

/// A token bucket that lends its tokens in batches.
pub(crate) trait LeaseSource: Send + Sync + 'static {
    /// Takes between `fewest` (at least 1) and `most` tokens, as many as the bucket holds
    /// within `ahead`: a lease may be reserved ahead, its tokens there from when the
    /// bucket gains them.
    fn take(
        &self,
        fewest: u64,
        most: u64,
        ahead: Duration,
    ) -> BoxFuture<'static, Result<Taken, RedisLimitError>>;

    /// Gives back `tokens` of a lease that began at `began`, less what the bucket gained
    /// since (see `lease.lua`).
    fn give_back(&self, tokens: u64, began: u64)
        -> BoxFuture<'static, Result<(), RedisLimitError>>;

    /// The bucket's capacity.
    fn capacity(&self) -> u64;

    /// The bucket's rate.
    fn rate(&self) -> Rate;

    /// What to do when the source cannot answer.
    fn policy(&self) -> FailurePolicy;

    /// How long to wait after a refusal before asking again: `retry_after`, plus jitter
    /// where several processes could come back together.
    fn wait_after_refusal(&self, retry_after: Duration) -> Duration;

    /// Counts a request allowed without a decision, under
    /// [`FailurePolicy::FailOpen`].
    fn count_fail_open(&self);
}

/// The Redis token bucket at one key.
pub(crate) struct RedisSource<C> {
    pub(crate) bucket: RedisTokenBucket<C>,
    /// The whole Redis key.
    pub(crate) key: String,
}

impl<C: RedisConnection> RedisSource<C> {
    /// `lease.lua`'s call for `action` with its numbers.
    fn call(&self, action: &str, numbers: &[u64]) -> ScriptCall {
        let [capacity, gain, per_token] = self.bucket.algorithm().lease_arguments();
        let mut arguments = vec![capacity, gain, per_token];
        arguments.extend_from_slice(numbers);
        ScriptCall::lease(&self.key, action, &arguments)
    }
}

impl<C: RedisConnection> LeaseSource for RedisSource<C> {
    fn take(
        &self,
        fewest: u64,
        most: u64,
        ahead: Duration,
    ) -> BoxFuture<'static, Result<Taken, RedisLimitError>> {
        // Whole microseconds, rounded down: never further ahead than allowed.
        let ahead = u64::try_from(ahead.as_micros()).unwrap_or(u64::MAX);
        let call = self.call("take", &[fewest, most, ahead]);
        let connection = self.bucket.connection().clone();
        let timeout = self.bucket.options().timeout();
        Box::pin(async move {
            // {tokens, now, began} when it took, {0, now, retry_after_ms} when it did not.
            let (tokens, now, last): (u64, u64, u64) =
                bounded(timeout, call.reply(connection)).await?;
            Ok(if tokens > 0 {
                Taken::Granted {
                    tokens,
                    began: last,
                    wait: Duration::from_micros(last.saturating_sub(now)),
                }
            } else {
                Taken::Refused {
                    retry_after: Duration::from_millis(last),
                }
            })
        })
    }

    fn give_back(
        &self,
        tokens: u64,
        began: u64,
    ) -> BoxFuture<'static, Result<(), RedisLimitError>> {
        let call = self.call("give", &[tokens, began]);
        let connection = self.bucket.connection().clone();
        let timeout = self.bucket.options().timeout();
        Box::pin(async move {
            let _parts: (u64,) = bounded(timeout, call.reply(connection)).await?;
            Ok(())
        })
    }

    fn capacity(&self) -> u64 {
        self.bucket.capacity()
    }

    fn rate(&self) -> Rate {
        self.bucket.rate()
    }

    fn policy(&self) -> FailurePolicy {
        self.bucket.options().policy()
    }

    fn wait_after_refusal(&self, retry_after: Duration) -> Duration {
        retry_after + self.bucket.common().jitter.extra_wait(retry_after)
    }

    fn count_fail_open(&self) {
        self.bucket
            .common()
            .fail_open_decisions
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::scripts::test_server::RedisServer;
    use crate::redis::RedisOptions;
    use ::redis::aio::ConnectionManager;

    /// A bucket of 10 tokens gaining 10 a second, slow enough that the few milliseconds
    /// between two calls of a test, even on a loaded machine, gain no token.
    async fn source(server: &RedisServer) -> RedisSource<ConnectionManager> {
        let client = ::redis::Client::open(server.url()).unwrap();
        let connection = ConnectionManager::new(client).await.unwrap();
        let options = RedisOptions::new(FailurePolicy::FailClosed);
        let bucket = RedisTokenBucket::new(connection, Rate::per_second(10), 10, options).unwrap();
        let key = bucket.redis_key("lease");
        RedisSource { bucket, key }
    }

    fn granted(taken: Taken) -> (u64, u64, Duration) {
        match taken {
            Taken::Granted {
                tokens,
                began,
                wait,
            } => (tokens, began, wait),
            refused => panic!("{refused:?}"),
        }
    }

    #[tokio::test]
    async fn a_lease_takes_what_is_there_or_reserves_ahead_and_plain_requests_wait_for_it() {
        let server = RedisServer::start();
        let source = source(&server).await;
        let (tokens, began, wait) = granted(source.take(1, 25, Duration::ZERO).await.unwrap());
        // A full bucket: its 10, at once; empty from `began`, a token each 100 ms after.
        assert_eq!((tokens, wait), (10, Duration::ZERO));
        // The 5th token is past an `ahead` of 1 ms: refused, told to wait until it comes.
        // Asked between `began` and `after` on the server's clock, so told between these.
        let refused = source.take(5, 5, Duration::from_millis(1)).await.unwrap();
        let after = server_micros(&source).await;
        let Taken::Refused { retry_after } = refused else {
            panic!("{refused:?}")
        };
        let soonest = Duration::from_micros((began + 499_000).saturating_sub(after));
        assert!(
            soonest <= retry_after && retry_after <= Duration::from_millis(499),
            "{retry_after:?}, {soonest:?}"
        );
        // Within a second: reserved, beginning when the 5th token comes.
        let (tokens, reserved, _) =
            granted(source.take(5, 5, Duration::from_secs(1)).await.unwrap());
        assert_eq!((tokens, reserved), (5, began + 500_000));
        // A plain request waits for the reservation to begin, then for its own token.
        let refused = source.bucket.try_acquire("lease", 1).await.unwrap_err();
        let after = server_micros(&source).await;
        let RedisLimitError::Limited { retry_after } = refused else {
            panic!("{refused:?}")
        };
        let soonest = Duration::from_micros((reserved + 100_000).saturating_sub(after));
        assert!(
            soonest <= retry_after && retry_after <= Duration::from_millis(600),
            "{retry_after:?}, {soonest:?}"
        );
    }

    /// The server's clock, in microseconds.
    async fn server_micros(source: &RedisSource<ConnectionManager>) -> u64 {
        let mut connection = source.bucket.connection().clone();
        let (seconds, micros): (u64, u64) = ::redis::cmd("TIME")
            .query_async(&mut connection)
            .await
            .unwrap();
        seconds * 1_000_000 + micros
    }

    #[tokio::test]
    async fn a_lease_begun_in_a_rounded_up_microsecond_leaves_no_more_than_the_capacity() {
        let server = RedisServer::start();
        let client = ::redis::Client::open(server.url()).unwrap();
        let mut connection = ConnectionManager::new(client).await.unwrap();
        let options = RedisOptions::new(FailurePolicy::FailClosed);
        // A token a part, two parts a microsecond, 4 at most.
        let bucket =
            RedisTokenBucket::new(connection.clone(), Rate::per_second(2_000_000), 4, options)
                .unwrap();
        assert_eq!(bucket.algorithm().lease_arguments(), [4, 2, 1]);
        let key = bucket.redis_key("lease");
        // Counted 10 s ahead of the server's clock (as leases reserved ahead leave it),
        // holding 3 of 4: the 4th comes in half a microsecond, rounded up to one, in which
        // the bucket would gain 2, one past its capacity.
        let source = RedisSource { bucket, key };
        let ahead_of_now = server_micros(&source).await + 10_000_000;
        let _: () = ::redis::cmd("HSET")
            .arg(&source.key)
            .arg("parts")
            .arg(3)
            .arg("time")
            .arg(ahead_of_now)
            .query_async(&mut connection)
            .await
            .unwrap();
        let (tokens, began, _) = granted(source.take(4, 4, Duration::from_secs(20)).await.unwrap());
        assert_eq!((tokens, began), (4, ahead_of_now + 1));
        // The bucket is empty at that microsecond: the next token is there one later.
        let (tokens, next, _) = granted(source.take(1, 1, Duration::from_secs(20)).await.unwrap());
        assert_eq!((tokens, next), (1, began + 1));
    }

    #[tokio::test]
    async fn giving_back_takes_off_the_gain_since_the_lease_began_and_never_passes_capacity() {
        let server = RedisServer::start();
        let source = source(&server).await;
        let [_, _, per_token] = source.bucket.algorithm().lease_arguments();
        let parts = |source: &RedisSource<ConnectionManager>| {
            let mut connection = source.bucket.connection().clone();
            let key = source.key.clone();
            async move {
                let parts: Option<u64> = ::redis::cmd("HGET")
                    .arg(key)
                    .arg("parts")
                    .query_async(&mut connection)
                    .await
                    .unwrap();
                parts
            }
        };
        let (_, began, _) = granted(source.take(10, 10, Duration::ZERO).await.unwrap());
        // Given back as if the lease began two seconds earlier: the bucket gained 20
        // tokens since, more than the 10, so nothing goes back.
        source.give_back(10, began - 2_000_000).await.unwrap();
        let held = parts(&source).await.unwrap();
        assert!(held < per_token * 10, "{held}");
        // Given back at once: the 10 less the few gained since, never past the capacity.
        source.give_back(10, began).await.unwrap();
        // Full again: the key is gone (a missing key is a full bucket).
        assert_eq!(parts(&source).await, None);
        // A lease reserved ahead and given back before it begins goes back whole.
        source.take(10, 10, Duration::ZERO).await.unwrap();
        let (tokens, began, wait) =
            granted(source.take(5, 5, Duration::from_secs(1)).await.unwrap());
        assert!(wait > Duration::ZERO);
        source.give_back(tokens, began).await.unwrap();
        let held = parts(&source).await.unwrap();
        assert_eq!(
            held,
            5 * per_token,
            "5 tokens, counted at the instant the lease began"
        );
    }
}
