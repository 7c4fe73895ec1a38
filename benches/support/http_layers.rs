//! The two HTTP layers compared, built the same way for the in-process benchmark
//! (`benches/http.rs`) and the server loaded with wrk (`benches/http_server.rs`): ours per
//! client IP (with or without a global limit), and tower_governor per peer IP (as it
//! ships, or with `use_headers()`), each from one [`Quota`] per client. Included by path
//! (`#[path = "support/http_layers.rs"]`); each program uses a part of it, so what one of
//! them leaves unused is not a warning.

#![allow(dead_code)]

use std::time::Duration;

use axum::body::Body;
use governor::middleware::{NoOpMiddleware, StateInformationMiddleware};
use token_bucket::http::{ClientIp, ClientKey, Local, RateLimitLayer};
use token_bucket::{Rate, TokenBucket};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::PeerIpKeyExtractor;
use tower_governor::GovernorLayer;

/// How much each client may send, in both layers' terms.
#[derive(Debug, Clone, Copy)]
pub struct Quota {
    /// Requests at once: our bucket's capacity, tower_governor's burst.
    pub burst: u32,
    /// The time for one more: tower_governor's period.
    pub period: Duration,
    /// The same as our bucket's rate.
    pub rate: Rate,
}

/// One client never runs dry: 10^9 at once, one more a nanosecond.
pub const UNLIMITED: Quota = Quota {
    burst: 1_000_000_000,
    period: Duration::from_nanos(1),
    rate: Rate::per_second(1_000_000_000),
};

/// 100,000 at once, one more an hour: however many clients take turns, none used within a
/// run goes idle (and so none is forgotten), and none of them is refused.
pub const HOURLY_100K: Quota = Quota {
    burst: 100_000,
    period: Duration::from_secs(3_600),
    rate: Rate::per_hour(1),
};

/// One request an hour: the first is admitted, every later one refused.
pub const ONE_AN_HOUR: Quota = Quota {
    burst: 1,
    period: Duration::from_secs(3_600),
    rate: Rate::per_hour(1),
};

/// Our layer's type, per client IP, token buckets.
pub type Ours = RateLimitLayer<ClientIp, Local<ClientKey, TokenBucket, TokenBucket>>;

/// Whether our layer sends the `RateLimit-Policy` and `RateLimit` fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fields {
    /// As it ships: the fields on every decided response.
    On,
    /// `rate_limit_fields(false)`: `Retry-After` on refusals alone, as tower_governor
    /// ships.
    Off,
}

/// Ours: a token bucket of `quota` per client IP (the peer's), and with `global` one
/// for the whole service decided together with it, holding 10^9 and gaining 10^9 a
/// second, so that it never refuses at any rate a machine serves; the `RateLimit` fields
/// as `fields` says.
pub fn ours(quota: Quota, global: bool, fields: Fields) -> Ours {
    let per_client =
        TokenBucket::new(quota.rate, u64::from(quota.burst)).expect("a valid per-client bucket");
    let builder = RateLimitLayer::builder(ClientIp::peer(), per_client)
        .rate_limit_fields(fields == Fields::On);
    let built = if global {
        let global = TokenBucket::new(Rate::per_second(1_000_000_000), 1_000_000_000)
            .expect("a valid global bucket");
        builder.global(global).build()
    } else {
        builder.build()
    };
    built.expect("a valid layer")
}

/// tower_governor per peer IP as it ships: no headers on admitted responses.
pub fn tower_governor(quota: Quota) -> GovernorLayer<PeerIpKeyExtractor, NoOpMiddleware, Body> {
    let config = GovernorConfigBuilder::default()
        .period(quota.period)
        .burst_size(quota.burst)
        .finish()
        .expect("a non-zero period and burst");
    GovernorLayer::new(config)
}

/// tower_governor per peer IP with `use_headers()`: `x-ratelimit-limit` and
/// `x-ratelimit-remaining` on admitted responses too.
pub fn tower_governor_with_headers(
    quota: Quota,
) -> GovernorLayer<PeerIpKeyExtractor, StateInformationMiddleware, Body> {
    let config = GovernorConfigBuilder::default()
        .period(quota.period)
        .burst_size(quota.burst)
        .use_headers()
        .finish()
        .expect("a non-zero period and burst");
    GovernorLayer::new(config)
}
