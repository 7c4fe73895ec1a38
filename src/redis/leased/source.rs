//! Where a leased front's tokens come from: the Redis token bucket, through `lease.lua`
//! (or, in the unit tests, a bucket in memory on tokio's clock).

use std::time::Duration;

use ::redis::cluster_routing::Slot;
use futures::future::BoxFuture;

use crate::rate::Rate;
use crate::redis::connection::RedisConnection;
use crate::redis::decision::bounded;
use crate::redis::scripts::ScriptCall;
use crate::redis::{FailurePolicy, RedisLimitError, RedisTokenBucket};

/// What the source knows a lease by, which giving it back names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaseTicket {
    /// Unique among the key's leases, whichever process took them (in Redis, the
    /// server's microsecond at which the take ran): the source applies one give-back per
    /// number, however often it is sent.
    pub(crate) number: u64,
    /// When the lease's tokens are there, on the source's clock (microseconds).
    pub(crate) began: u64,
}

/// What a call to take a lease came back with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taken {
    /// `tokens` (at least the fewest asked for) were taken, there from the source's
    /// instant `ticket.began`, `wait` after the source decided.
    Granted {
        tokens: u64,
        ticket: LeaseTicket,
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

    /// Gives back `tokens` of the lease `ticket`, less what the bucket gained since it
    /// began (see `lease.lua`); once, however often it is sent.
    fn give_back(
        &self,
        tokens: u64,
        ticket: LeaseTicket,
    ) -> BoxFuture<'static, Result<(), RedisLimitError>>;

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
    /// What the keys remembering give-backs are named, before a lease's number.
    given_prefix: String,
}

impl<C: RedisConnection> RedisSource<C> {
    /// The bucket at the Redis key `key` of `bucket`.
    pub(crate) fn new(bucket: RedisTokenBucket<C>, key: String) -> RedisSource<C> {
        let given_prefix = given_prefix(&key);
        RedisSource {
            bucket,
            key,
            given_prefix,
        }
    }

    /// `lease.lua`'s call for `action` on `keys` with its numbers.
    fn call(&self, keys: &[&str], action: &str, numbers: &[u64]) -> ScriptCall {
        let [capacity, gain, per_token] = self.bucket.algorithm().lease_arguments();
        let mut arguments = vec![capacity, gain, per_token];
        arguments.extend_from_slice(numbers);
        ScriptCall::lease(keys, action, &arguments)
    }

    /// The key that remembers the give-back of lease `number`.
    fn given_key(&self, number: u64) -> String {
        format!("{}{number}", self.given_prefix)
    }
}

/// How many names `{0}`, `{1}`, ... [`given_prefix`] tries at most: they cover every hash
/// slot (a unit test counts them).
const SLOT_TAGS: u32 = 1 << 17;

/// The start of a name that, whatever follows it, is in the hash slot of `key` (on Redis
/// Cluster a script's keys must share one): `key` itself when it has a hash tag,
/// `{key}` when it holds no `}`, else a tag of numbers in its slot before it.
fn given_prefix(key: &str) -> String {
    let slot = Slot::for_key(key);
    let in_slot = |name: &String| has_hash_tag(name) && Slot::for_key(name) == slot;
    let plain = [format!("{key}:given:"), format!("{{{key}}}:given:")];
    plain.into_iter().find(in_slot).unwrap_or_else(|| {
        (0..SLOT_TAGS)
            .map(|tag| format!("{{{tag}}}:{key}:given:"))
            .find(in_slot)
            .expect("the tags cover every hash slot")
    })
}

/// Whether Redis hashes only part of `name`: what is between its first `{` and the next
/// `}`, when that is not empty. Then what follows `name` does not change its slot.
fn has_hash_tag(name: &str) -> bool {
    name.find('{')
        .and_then(|open| name[open + 1..].find('}'))
        .is_some_and(|length| length > 0)
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
        let call = self.call(&[&self.key], "take", &[fewest, most, ahead]);
        let connection = self.bucket.connection().clone();
        let timeout = self.bucket.options().timeout();
        Box::pin(async move {
            // {tokens, now, began} when it took, {0, now, retry_after_ms} when it did not.
            let (tokens, now, last): (u64, u64, u64) =
                bounded(timeout, call.reply(connection)).await?;
            Ok(if tokens > 0 {
                Taken::Granted {
                    tokens,
                    // No two takes on a key run in one microsecond (see `lease.lua`).
                    ticket: LeaseTicket {
                        number: now,
                        began: last,
                    },
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
        ticket: LeaseTicket,
    ) -> BoxFuture<'static, Result<(), RedisLimitError>> {
        let given = self.given_key(ticket.number);
        let call = self.call(&[&self.key, &given], "give", &[tokens, ticket.began]);
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
    use std::collections::HashSet;

    /// A bucket of 10 tokens gaining 10 a second, slow enough that the few milliseconds
    /// between two calls of a test, even on a loaded machine, gain no token.
    async fn source(server: &RedisServer) -> RedisSource<ConnectionManager> {
        let client = ::redis::Client::open(server.url()).unwrap();
        let connection = ConnectionManager::new(client).await.unwrap();
        let options = RedisOptions::new(FailurePolicy::FailClosed);
        let bucket = RedisTokenBucket::new(connection, Rate::per_second(10), 10, options).unwrap();
        let key = bucket.redis_key("lease");
        RedisSource::new(bucket, key)
    }

    /// The tokens, the instant the lease began and the wait of a lease taken.
    fn granted(taken: Taken) -> (u64, u64, Duration) {
        let (tokens, ticket, wait) = granted_ticket(taken);
        (tokens, ticket.began, wait)
    }

    fn granted_ticket(taken: Taken) -> (u64, LeaseTicket, Duration) {
        match taken {
            Taken::Granted {
                tokens,
                ticket,
                wait,
            } => (tokens, ticket, wait),
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

    /// The parts the bucket holds as of its stored time, or none when it is forgotten.
    async fn parts(source: &RedisSource<ConnectionManager>) -> Option<u64> {
        let mut connection = source.bucket.connection().clone();
        ::redis::cmd("HGET")
            .arg(&source.key)
            .arg("parts")
            .query_async(&mut connection)
            .await
            .unwrap()
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
        let source = RedisSource::new(bucket, key);
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
        let (_, ticket, _) = granted_ticket(source.take(10, 10, Duration::ZERO).await.unwrap());
        // Given back as if the lease began two seconds earlier: the bucket gained 20
        // tokens since, more than the 10, so nothing goes back (nor is remembered).
        let began_earlier = LeaseTicket {
            began: ticket.began - 2_000_000,
            ..ticket
        };
        source.give_back(10, began_earlier).await.unwrap();
        let held = parts(&source).await.unwrap();
        assert!(held < per_token * 10, "{held}");
        // Given back at once: the 10 less the few gained since, never past the capacity.
        source.give_back(10, ticket).await.unwrap();
        // Full again: the key is gone (a missing key is a full bucket).
        assert_eq!(parts(&source).await, None);
        // A lease reserved ahead and given back before it begins goes back whole.
        source.take(10, 10, Duration::ZERO).await.unwrap();
        let (tokens, ticket, wait) =
            granted_ticket(source.take(5, 5, Duration::from_secs(1)).await.unwrap());
        assert!(wait > Duration::ZERO);
        source.give_back(tokens, ticket).await.unwrap();
        let held = parts(&source).await.unwrap();
        assert_eq!(
            held,
            5 * per_token,
            "5 tokens, counted at the instant the lease began"
        );
    }

    /// A bucket of 20 tokens gaining one an hour at `name`: nothing accrues during a test.
    async fn hourly_source(server: &RedisServer, name: &str) -> RedisSource<ConnectionManager> {
        let client = ::redis::Client::open(server.url()).unwrap();
        let connection = ConnectionManager::new(client).await.unwrap();
        let options = RedisOptions::new(FailurePolicy::FailClosed);
        let bucket = RedisTokenBucket::new(connection, Rate::per_hour(1), 20, options).unwrap();
        let key = bucket.redis_key(name);
        RedisSource::new(bucket, key)
    }

    /// Gives back `tokens` of `ticket` as `give_back` does, returning what Redis replied:
    /// the parts it took back.
    async fn give(
        source: &RedisSource<ConnectionManager>,
        tokens: u64,
        ticket: LeaseTicket,
    ) -> u64 {
        let given = source.given_key(ticket.number);
        let call = source.call(&[&source.key, &given], "give", &[tokens, ticket.began]);
        let (parts,): (u64,) = call
            .reply(source.bucket.connection().clone())
            .await
            .unwrap();
        parts
    }

    #[tokio::test]
    async fn a_give_back_sent_twice_is_applied_once_and_answered_the_same() {
        let server = RedisServer::start();
        let source = hourly_source(&server, "twice").await;
        let [_, _, per_token] = source.bucket.algorithm().lease_arguments();
        let (_, first, _) = granted_ticket(source.take(4, 4, Duration::ZERO).await.unwrap());
        let (_, second, _) = granted_ticket(source.take(4, 4, Duration::ZERO).await.unwrap());
        // A third lease, kept, so that the 8 given back never fill the bucket: a full
        // bucket's key expires, here within the millisecond, and `parts` would be None.
        source.take(4, 4, Duration::ZERO).await.unwrap();
        let left = parts(&source).await.unwrap();
        assert!(left < 9 * per_token, "{left}");
        // The first lease's 4 go back once (less the bucket's gain since, a sliver of a
        // token at one an hour), however often the give-back is sent.
        let back = give(&source, 4, first).await;
        assert!(back > 3 * per_token && back <= 4 * per_token, "{back}");
        let held = parts(&source).await.unwrap();
        assert!(held >= left + back, "{held}, {left} + {back}");
        assert_eq!(give(&source, 4, first).await, back);
        source.give_back(4, first).await.unwrap();
        assert_eq!(parts(&source).await, Some(held));
        // Another lease's give-back is its own, and also applied once.
        let back = give(&source, 4, second).await;
        assert!(back > 3 * per_token, "{back}");
        let held = parts(&source).await.unwrap();
        assert_eq!(give(&source, 4, second).await, back);
        assert_eq!(parts(&source).await, Some(held));
        // Remembered until the bucket would have gained the lease's 4 tokens: 4 hours.
        let mut connection = source.bucket.connection().clone();
        let remembered: i64 = ::redis::cmd("PTTL")
            .arg(source.given_key(first.number))
            .query_async(&mut connection)
            .await
            .unwrap();
        let four_hours = 4 * 3_600_000;
        assert!(
            remembered > four_hours - 60_000 && remembered <= four_hours,
            "{remembered}"
        );
    }

    #[tokio::test]
    async fn a_lease_is_named_by_the_servers_microsecond_of_its_take() {
        let server = RedisServer::start();
        let source = hourly_source(&server, "numbers").await;
        let before = server_micros(&source).await;
        let (_, first, _) = granted_ticket(source.take(1, 1, Duration::ZERO).await.unwrap());
        let (_, second, _) = granted_ticket(source.take(1, 1, Duration::ZERO).await.unwrap());
        let after = server_micros(&source).await;
        assert!(
            before <= first.number && first.number < second.number && second.number <= after,
            "{before}, {first:?}, {second:?}, {after}"
        );
    }

    #[test]
    fn give_backs_are_remembered_in_the_hash_slot_of_the_bucket_whatever_its_key() {
        let cases = [
            // No hash tag: the key becomes the tag.
            ("rate-limit:tb:hot", "{rate-limit:tb:hot}:given:"),
            // A hash tag: kept, and with it the slot.
            (
                "rate-limit:tb:{user-1}:search",
                "rate-limit:tb:{user-1}:search:given:",
            ),
            // A `{` with no `}` after it is no tag: the key becomes the tag.
            ("rate-limit:tb:{open", "{rate-limit:tb:{open}:given:"),
        ];
        for (key, prefix) in cases {
            assert_eq!(given_prefix(key), prefix, "{key}");
        }
        // No tag but a `}` (so `{key}` would be cut short) or an empty tag: a tag of
        // numbers in the key's slot goes first.
        for key in ["rate-limit:tb:a}b", "rate-limit:tb:{}x", "}"] {
            let prefix = given_prefix(key);
            assert!(prefix.ends_with(&format!("}}:{key}:given:")), "{prefix}");
            for number in [0, 1_700_000_000_000_000, u64::MAX] {
                let given = format!("{prefix}{number}");
                assert_eq!(Slot::for_key(&given), Slot::for_key(key), "{given}");
            }
        }
    }

    #[test]
    fn the_tags_tried_cover_every_hash_slot() {
        let slots: HashSet<Slot> = (0..SLOT_TAGS)
            .map(|tag| Slot::for_key(format!("{{{tag}}}")))
            .collect();
        assert_eq!(slots.len(), 16_384);
    }
}
