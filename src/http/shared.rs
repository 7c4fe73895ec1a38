//! What a [`RateLimitLayer`](super::RateLimitLayer) and the services it makes share: the
//! settings that say how each request is handled, read by both the builder and the
//! service.

use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use http::header::HeaderName;

use super::client_ip::Cidr;
use super::headers::Fields;
use super::key::{KeyExtractor, RequestHead};
use crate::observe::http::HttpObserver;

/// A cost function: the permits a request is charged up front.
type CostFn = Arc<dyn Fn(&RequestHead<'_>) -> u64 + Send + Sync>;

/// A predicate picking the requests a layer lets through untouched.
pub(crate) type SkipFn = Arc<dyn Fn(&RequestHead<'_>) -> bool + Send + Sync>;

/// What a layer does with a request its limits refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Answer it at once (the default).
    Refuse,
    /// Wait up to this long (see [`RateLimitBuilder::wait_up_to`](super::RateLimitBuilder::wait_up_to)); refuse if it cannot
    /// pass by then.
    Wait(Duration),
    /// Let it through all the same, with the headers a refusal would have: decide and
    /// count, never refuse.
    Shadow,
}

/// What to do with a request whose key cannot be found (see [`KeyError`](super::KeyError)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MissingKey<K> {
    /// Refuse it with the error's status, `400` or `500` (the default).
    Refuse,
    /// Let it through, unlimited and without headers.
    Allow,
    /// Count it under this key: every request without a key shares its budget.
    Key(K),
}

/// Where the true cost of a request is read after its response, to settle what it was
/// charged up front (see [`RateLimitBuilder::settle`](super::RateLimitBuilder::settle)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settle {
    /// An [`ActualCost`] the handler put in the response's extensions.
    Extension,
    /// A response header holding a whole number, such as `x-tokens-used`.
    Header(HeaderName),
}

/// The true cost of a request, put in its response's extensions by the handler, when the
/// layer [settles](super::RateLimitBuilder::settle) from [`Settle::Extension`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActualCost(pub u64);

/// What every service of one layer shares.
pub(crate) struct Shared<X: KeyExtractor, B, H> {
    pub(crate) key: X,
    pub(crate) limits: B,
    pub(crate) fields: Fields,
    pub(crate) handling: Handling<X::Key>,
    /// Whether a decision's quotas are used: for the fields, or to settle.
    pub(crate) quotas: bool,
    pub(crate) respond: H,
    /// Requests a shadow layer let through that it would have refused.
    pub(crate) shadow_refusals: AtomicU64,
    /// What the layer reports through, if it is named.
    pub(crate) observer: HttpObserver,
}

/// How each request is handled around its decision; kept as it is by the layer.
pub(crate) struct Handling<K> {
    pub(crate) mode: Mode,
    /// Requests left out: passed on untouched, before their key is looked for.
    pub(crate) skip: Option<SkipFn>,
    pub(crate) missing: MissingKey<K>,
    pub(crate) allow_keys: HashSet<K>,
    pub(crate) allow_cidrs: Vec<Cidr>,
    pub(crate) cost: Option<CostFn>,
    pub(crate) settle: Option<Settle>,
}
