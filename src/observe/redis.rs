//! The names of the metrics the Redis limiters and their leased fronts report when named
//! (feature `redis`): a limiter named by `RedisOptions::with_name`, a front named by
//! `LeaseOptions::with_name`. What reports them lives with the limiters, in `redis/`;
//! only the names live here, where users find them beside the others.

/// Requests a named Redis limiter decided, by `outcome`: `admitted` (Redis took the
/// permits) or `refused` (Redis refused them, or more than the limit was asked for, which
/// is refused without a call). A counter, with the labels `limiter` (the name), `kind`
/// (`token_bucket`, `fixed_window` or `sliding_log`) and `outcome`.
///
/// A request is counted in exactly one of this, [`REDIS_FAIL_OPEN`] and
/// [`REDIS_FAIL_CLOSED`] (or, when Redis refused a `redis::RedisAll`'s
/// keys for their hash slots, only in [`REDIS_ERRORS`]). An `acquire` is one request
/// however often it asks: counted once, when it ends. A request for zero permits decides
/// nothing and is not counted. A decision over several limiters counts in each named
/// member's limiter: admitted in every one when all took, refused in those whose keys
/// refused (the others count nothing).
///
/// ```
/// assert_eq!(token_bucket::observe::REDIS_DECISIONS, "token_bucket_redis_decisions_total");
/// ```
pub const REDIS_DECISIONS: &str = "token_bucket_redis_decisions_total";

/// Calls to Redis that failed, of a named Redis limiter or leased front, by `error`: a
/// counter, with the labels `limiter`, `kind` and `error`, one of a bounded set:
///
/// - `timeout`: no answer within the limiter's timeout (or the client's own I/O timeout);
/// - `connection`: Redis unreachable, the connection refused or dropped, authentication
///   failed, no node of the cluster reachable;
/// - `cluster`: `MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN` or `MASTERDOWN` past the
///   retries;
/// - `cross_slot`: `CROSSSLOT`, the keys of a `redis::RedisAll` in
///   different hash slots;
/// - `script`: the script failed on the server;
/// - `server`: another error from the server (`LOADING`, `READONLY`, `NOPERM`...);
/// - `reply`: a reply that could not be read;
/// - `lease_expired`: a front's lease came back after its lifetime;
/// - `other`.
///
/// Every label is registered, at 0, when the limiter is named. A call made outside a
/// tokio runtime is a bug in the caller, not a failed call, and is not counted.
///
/// ```
/// assert_eq!(token_bucket::observe::REDIS_ERRORS, "token_bucket_redis_errors_total");
/// ```
pub const REDIS_ERRORS: &str = "token_bucket_redis_errors_total";

/// Requests a named Redis limiter or leased front allowed without a decision from Redis,
/// under `redis::FailurePolicy::FailOpen`: a counter, with the labels `limiter` and `kind`.
/// Each is also a `warn` event.
///
/// ```
/// assert_eq!(token_bucket::observe::REDIS_FAIL_OPEN, "token_bucket_redis_fail_open_total");
/// ```
pub const REDIS_FAIL_OPEN: &str = "token_bucket_redis_fail_open_total";

/// Requests a named Redis limiter or leased front refused because Redis could not decide,
/// under `redis::FailurePolicy::FailClosed`: a counter, with the labels `limiter` and `kind`.
///
/// ```
/// assert_eq!(token_bucket::observe::REDIS_FAIL_CLOSED, "token_bucket_redis_fail_closed_total");
/// ```
pub const REDIS_FAIL_CLOSED: &str = "token_bucket_redis_fail_closed_total";

/// A named leased front's calls to Redis, by `call`: `take` (asking for a lease, granted
/// or not) or `give_back` (giving one back). A counter, with the labels `limiter`,
/// `kind` (`token_bucket`) and `call`; the two add up to
/// `redis::LeaseStats::redis_calls`.
///
/// ```
/// assert_eq!(token_bucket::observe::REDIS_LEASE_CALLS, "token_bucket_redis_lease_calls_total");
/// ```
pub const REDIS_LEASE_CALLS: &str = "token_bucket_redis_lease_calls_total";

/// Tokens a named leased front took from Redis in leases: a counter, with the labels
/// `limiter` and `kind`, as `redis::LeaseStats::leased`.
///
/// ```
/// assert_eq!(token_bucket::observe::REDIS_LEASED_TOKENS, "token_bucket_redis_leased_tokens_total");
/// ```
pub const REDIS_LEASED_TOKENS: &str = "token_bucket_redis_leased_tokens_total";

/// Tokens a named leased front offered back to Redis: a counter, with the labels
/// `limiter` and `kind`, as `redis::LeaseStats::given_back`.
/// Redis takes back less: what the bucket gained since the lease began is taken off.
///
/// ```
/// assert_eq!(
///     token_bucket::observe::REDIS_RETURNED_TOKENS,
///     "token_bucket_redis_returned_tokens_total"
/// );
/// ```
pub const REDIS_RETURNED_TOKENS: &str = "token_bucket_redis_returned_tokens_total";
