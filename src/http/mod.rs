// What lives here (the documentation below is its users'):
// - `client_ip.rs`: the client's address behind trusted proxies, and its key; beside it
//   in `client_ip/`, CIDR blocks (`cidr.rs`), reading forwarding headers (`entries.rs`)
//   and its unit tests.
// - `key.rs`: the `KeyExtractor` trait and the keys the crate ships.
// - `limits.rs`: what decides: per key and global, in-process; `redis.rs`: in Redis.
// - `headers.rs`: the header fields of a decision.
// - `response.rs`: what a refusal is answered.
// - `layer.rs`: the layer and its builder; `shared.rs`: the settings they share with
//   `service.rs`, the service and its future.
//
// It uses the limiters through `keyed/`, `composite/`'s `Member` and `bucket/` (the
// type of a global limit not given), `redis/` (feature `redis`), `observe/http.rs` and
// the foundations (`error`, `quota`, `limiter`). Nothing in the crate uses it.

//! The HTTP front door (feature `http`): a tower layer that limits requests per client
//! and for the whole service, and answers `429 Too Many Requests` with `Retry-After` and
//! the IETF `RateLimit` header fields.
//!
//! ```
//! use std::net::SocketAddr;
//! use axum::{routing::get, Router};
//! use token_bucket::http::{ClientIp, RateLimitLayer};
//! use token_bucket::{Rate, TokenBucket};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limit = RateLimitLayer::builder(ClientIp::peer(), TokenBucket::new(Rate::per_second(5), 10)?)
//!     .global(TokenBucket::new(Rate::per_second(1_000), 1_000)?)
//!     .build()?;
//! let app = Router::new().route("/", get(|| async { "hello" })).layer(limit);
//! let _service = app.into_make_service_with_connect_info::<SocketAddr>();
//! # Ok(())
//! # }
//! ```
//!
//! The layer works over `http::Request` and `http::Response`, so with axum, hyper and
//! tonic alike, and depends on none of them (the feature `axum` lets it read axum's
//! `ConnectInfo<SocketAddr>`; without it, a `SocketAddr` in the request's extensions).
//!
//! - **Keys** ([`KeyExtractor`]): the client's IP ([`ClientIp`]: the peer's, or the one
//!   trusted proxies report, IPv6 grouped by /64), a header ([`HeaderKey`]), one
//!   [`GlobalKey`], or a closure ([`key_fn`]). A request without a key is refused with
//!   `400` or `500`, or handled as [`MissingKey`] says.
//! - **Limits**: each key gets a limiter of the crate through [`Keyed`](crate::Keyed), so
//!   memory stays bounded ([`max_keys`](RateLimitBuilder::max_keys), idle keys
//!   forgotten); an optional [`global`](RateLimitBuilder::global) limit is decided
//!   together with it, all or nothing. A [`cost`](RateLimitBuilder::cost) function
//!   charges requests more than one permit, and [`settle`](RateLimitBuilder::settle)
//!   gives back what they did not use.
//! - **Decisions**: refuse at once (the default); [`wait_up_to`](RateLimitBuilder::wait_up_to)
//!   a bound, first in, first out; or [`shadow`](RateLimitBuilder::shadow): decide and
//!   count, refuse nothing. Allow-listed keys and networks pass untouched, and so do
//!   the requests a [`skip_if`](RateLimitBuilder::skip_if) predicate leaves out
//!   (`/health`, `/metrics`).
//! - **Responses**: see [`Refusal`]; an empty body by default, problem details in JSON
//!   with [`problem_json`](RateLimitBuilder::problem_json). `RateLimit-Policy` and
//!   `RateLimit` on every decided response unless
//!   [`rate_limit_fields(false)`](RateLimitBuilder::rate_limit_fields), with the
//!   [`quota_unit`](RateLimitBuilder::quota_unit) of a cost as `qu`; `X-RateLimit-*` on
//!   request; gRPC calls get `grpc-status: 8`.
//!
//! `docs/http.md` explains keys, trusted proxies, the header fields and the modes.

mod client_ip;
mod headers;
mod key;
mod layer;
mod limits;
#[cfg(feature = "redis")]
mod redis;
mod response;
mod service;
mod shared;

pub use client_ip::{
    Cidr, CidrError, ClientIp, ClientIpError, ClientKey, ForwardedHeader, TrustedProxies,
};
pub use headers::QuotaUnit;
pub use key::{
    key_fn, ClientIpFrom, GlobalKey, HeaderKey, KeyError, KeyExtractor, KeyFn, RequestHead,
};
pub use layer::{
    BuildError, InProcess, LocalLayer, RateLimitBuilder, RateLimitLayer, DEFAULT_MAX_KEYS,
};
pub use limits::{Limits, Local};
#[cfg(feature = "redis")]
pub use redis::RedisLimits;
pub use response::{DefaultRefusal, ProblemJson, Refusal, RefusalFn, RefusalKind, RespondRefusal};
pub use service::{RateLimit, ResponseFuture};
pub use shared::{ActualCost, MissingKey, Settle};
