//! [`RateLimitLayer`] and its builder: the settings every request of one layer shares.

use std::collections::HashSet;
use std::fmt;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tower::Layer;

use super::client_ip::Cidr;
use super::headers::{is_valid_policy_name, FieldSettings, Fields, QuotaUnit};
use super::key::{KeyExtractor, RequestHead};
use super::limits::{private::Decide, Limits, Local};
use super::response::{DefaultRefusal, ProblemJson, Refusal, RefusalFn};
use super::service::RateLimit;
use super::shared::{Handling, MissingKey, Mode, Settle, Shared};
use crate::bucket::TokenBucket;
use crate::composite::Member;
use crate::error::ConfigError;
use crate::keyed::Keyed;
use crate::limiter::{KeyTemplate, Limiter};
use crate::observe::http::HttpObserver;

/// The most keys a layer holds by default: about 64 MB for compact keys at the flood
/// bound of 64 bytes each.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// The default names of the two limits in the `RateLimit` header fields.
const DEFAULT_NAMES: [&str; 2] = ["client", "global"];

/// Why a layer could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// A limit's setting was refused ([`ConfigError::ZeroMaxKeys`] for a
    /// [`max_keys`](RateLimitBuilder::max_keys) of zero).
    Config(ConfigError),
    /// A policy name the `RateLimit` fields could not carry: names are non-empty visible
    /// ASCII and spaces.
    InvalidPolicyName {
        /// The name given.
        name: String,
    },
    /// A [quota unit](RateLimitBuilder::quota_unit) of characters other than a
    /// Structured Field token's: a letter or `*`, then letters, digits and
    /// ``!#$%&'*+-.^_`|~:/`` (it is sent as an sf-string, as the draft's units are).
    InvalidQuotaUnit {
        /// The unit given.
        unit: String,
    },
    /// A [quota unit](RateLimitBuilder::quota_unit) other than
    /// [`QuotaUnit::Requests`] without a [cost](RateLimitBuilder::cost) function: each
    /// request then counts one, so its quotas are in requests whatever the unit says.
    QuotaUnitWithoutCost {
        /// The unit given.
        unit: String,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Config(error) => error.fmt(f),
            BuildError::InvalidPolicyName { name } => write!(
                f,
                "the policy name {name:?} cannot stand in a header field: use non-empty \
                 visible ASCII and spaces"
            ),
            BuildError::InvalidQuotaUnit { unit } => write!(
                f,
                "the quota unit {unit:?} has characters a Structured Field token has not: \
                 start with a letter or `*`, then use letters, digits and !#$%&'*+-.^_`|~:/"
            ),
            BuildError::QuotaUnitWithoutCost { unit } => write!(
                f,
                "the quota unit {unit:?} needs a cost function: without one each request \
                 counts one, so the quotas are in requests"
            ),
        }
    }
}

impl std::error::Error for BuildError {}

impl From<ConfigError> for BuildError {
    fn from(error: ConfigError) -> BuildError {
        BuildError::Config(error)
    }
}

/// A tower [`Layer`] that limits HTTP requests per key (a client IP, an API key) and,
/// optionally, for the whole service, answering `429 Too Many Requests` with
/// `Retry-After` and the IETF `RateLimit` header fields.
///
/// Works with any server that speaks `http::Request` and `http::Response`: axum, hyper,
/// tonic. A refusal never reaches the inner service and is not an error of the service:
/// it is a response, so axum needs no `HandleErrorLayer`.
///
/// # Examples
///
/// ```
/// use std::net::SocketAddr;
/// use axum::{routing::get, Router};
/// use token_bucket::http::{ClientIp, RateLimitLayer};
/// use token_bucket::{Rate, TokenBucket};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // Each client 5 requests a second in bursts of 10; the whole server 1,000 a second.
/// let limit = RateLimitLayer::builder(ClientIp::peer(), TokenBucket::new(Rate::per_second(5), 10)?)
///     .global(TokenBucket::new(Rate::per_second(1_000), 1_000)?)
///     .build()?;
/// let app = Router::new().route("/", get(|| async { "hello" })).layer(limit);
/// // Serve it with each connection's address known:
/// let _service = app.into_make_service_with_connect_info::<SocketAddr>();
/// # Ok(())
/// # }
/// ```
pub struct RateLimitLayer<X: KeyExtractor, B, H = DefaultRefusal> {
    shared: Arc<Shared<X, B, H>>,
}

impl<X: KeyExtractor, B, H> Clone for RateLimitLayer<X, B, H> {
    fn clone(&self) -> RateLimitLayer<X, B, H> {
        RateLimitLayer {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<X: KeyExtractor, B, H> fmt::Debug for RateLimitLayer<X, B, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("name", &self.shared.observer.name())
            .field("mode", &self.shared.handling.mode)
            .finish_non_exhaustive()
    }
}

impl<S, X: KeyExtractor, B, H> Layer<S> for RateLimitLayer<X, B, H> {
    type Service = RateLimit<S, X, B, H>;

    fn layer(&self, inner: S) -> RateLimit<S, X, B, H> {
        RateLimit::new(inner, Arc::clone(&self.shared))
    }
}

impl RateLimitLayer<super::key::GlobalKey, Local<(), TokenBucket, TokenBucket>> {
    /// A builder of a layer that keys requests with `key` and gives each key a limiter
    /// like `per_key` (a fresh copy, through [`Keyed`]), in this process.
    pub fn builder<X, L>(key: X, per_key: L) -> RateLimitBuilder<X, InProcess<L, TokenBucket>>
    where
        X: KeyExtractor,
        L: KeyTemplate + Member,
    {
        RateLimitBuilder::with_limits(
            key,
            InProcess {
                per_key,
                global: None,
                max_keys: DEFAULT_MAX_KEYS,
            },
        )
    }
}

impl<X: KeyExtractor, B: Limits<X::Key>, H> RateLimitLayer<X, B, H> {
    /// Forgets every key whose limiter is idle again, and returns how many. Keys are
    /// forgotten as new ones come too; call this from a periodic task to free the memory
    /// of a flood in quiet periods.
    pub fn forget_idle_keys(&self) -> usize {
        self.shared.limits.forget_idle_keys()
    }

    /// Requests a [shadow](RateLimitBuilder::shadow) layer let through that its limits
    /// refused. Zero for a layer that is not a shadow.
    pub fn shadow_refusals(&self) -> u64 {
        self.shared.shadow_refusals.load(Ordering::Relaxed)
    }

    /// The name it reports under, if [`RateLimitBuilder::name`] gave it one.
    ///
    /// ```
    /// use token_bucket::http::{ClientIp, RateLimitLayer};
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let per_client = TokenBucket::new(Rate::per_second(5), 10)?;
    /// let layer = RateLimitLayer::builder(ClientIp::peer(), per_client).name("api").build()?;
    /// assert_eq!(layer.name(), Some("api"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn name(&self) -> Option<&str> {
        self.shared.observer.name()
    }
}

impl<X, L, G, H> RateLimitLayer<X, Local<X::Key, L, G>, H>
where
    X: KeyExtractor,
    L: KeyTemplate + Member,
    G: Limiter + Member,
{
    /// The per-key limiters, to look a key up or forget idle keys from a task of your own.
    pub fn per_key(&self) -> &Keyed<X::Key, L> {
        self.shared.limits.keyed()
    }
}

/// A layer whose limits are in-process ([`Local`]): what
/// [`RateLimitBuilder::build`] makes, named for a struct field that holds one.
pub type LocalLayer<X, L, G, H = DefaultRefusal> =
    RateLimitLayer<X, Local<<X as KeyExtractor>::Key, L, G>, H>;

/// Builds a [`RateLimitLayer`]; made by [`RateLimitLayer::builder`] (limits in this
/// process, [`InProcess`]) or `RateLimitLayer::redis_builder` (limits in Redis, feature
/// `redis`).
pub struct RateLimitBuilder<X: KeyExtractor, P, H = DefaultRefusal> {
    key: X,
    limits: P,
    settings: Settings<X::Key, H>,
}

/// Where a [`RateLimitBuilder`]'s limits live: in this process, a limiter per key like
/// `L` and an optional global `G`.
#[derive(Debug)]
pub struct InProcess<L, G> {
    per_key: L,
    global: Option<G>,
    max_keys: usize,
}

/// The settings of a layer that do not depend on where its limits live.
pub(crate) struct Settings<K, H> {
    /// The name the layer reports under, if any.
    name: Option<String>,
    names: [String; 2],
    fields: FieldSettings,
    handling: Handling<K>,
    respond: H,
}

impl<K> Settings<K, DefaultRefusal> {
    /// The defaults: refuse at once, standard names, no legacy fields, cost 1.
    pub(crate) fn new() -> Settings<K, DefaultRefusal> {
        Settings {
            name: None,
            names: DEFAULT_NAMES.map(String::from),
            fields: FieldSettings {
                standard: true,
                legacy: false,
                unit: None,
            },
            handling: Handling {
                mode: Mode::Refuse,
                skip: None,
                missing: MissingKey::Refuse,
                allow_keys: HashSet::new(),
                allow_cidrs: Vec::new(),
                cost: None,
                settle: None,
            },
            respond: DefaultRefusal,
        }
    }
}

impl<K: Hash + Eq, H> Settings<K, H> {
    /// The same settings, answering refusals with `respond`.
    fn responding<H2>(self, respond: H2) -> Settings<K, H2> {
        Settings {
            name: self.name,
            names: self.names,
            fields: self.fields,
            handling: self.handling,
            respond,
        }
    }

    /// The layer keying requests with `key` and asking `limits`.
    ///
    /// # Errors
    ///
    /// [`BuildError::InvalidPolicyName`] for a name a header field cannot carry;
    /// [`BuildError::InvalidQuotaUnit`] and [`BuildError::QuotaUnitWithoutCost`] for a
    /// quota unit that cannot stand or has no cost to name.
    pub(crate) fn into_layer<X, B>(
        self,
        key: X,
        limits: B,
    ) -> Result<RateLimitLayer<X, B, H>, BuildError>
    where
        X: KeyExtractor<Key = K>,
        B: Decide<K>,
    {
        if let Some(name) = self.names.iter().find(|name| !is_valid_policy_name(name)) {
            return Err(BuildError::InvalidPolicyName { name: name.clone() });
        }
        if let Some(unit) = &self.fields.unit {
            let unit_text = || unit.as_str().to_owned();
            if !unit.is_valid() {
                return Err(BuildError::InvalidQuotaUnit { unit: unit_text() });
            }
            // Without a cost each request counts one: only `requests` is then true.
            if self.handling.cost.is_none() && *unit != QuotaUnit::Requests {
                return Err(BuildError::QuotaUnitWithoutCost { unit: unit_text() });
            }
        }
        let named: Vec<_> = self.names.into_iter().zip(limits.policies()).collect();
        // Registered now, once: a request then only increments what is registered.
        let observer = match &self.name {
            Some(name) => HttpObserver::named(name),
            None => HttpObserver::default(),
        };
        Ok(RateLimitLayer {
            shared: Arc::new(Shared {
                key,
                fields: Fields::new(&named, &self.fields),
                limits,
                quotas: self.fields.standard
                    || self.fields.legacy
                    || self.handling.settle.is_some(),
                handling: self.handling,
                respond: self.respond,
                shadow_refusals: AtomicU64::new(0),
                observer,
            }),
        })
    }
}

impl<X: KeyExtractor, P: fmt::Debug, H> fmt::Debug for RateLimitBuilder<X, P, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitBuilder")
            .field("name", &self.settings.name)
            .field("limits", &self.limits)
            .field("names", &self.settings.names)
            .field("mode", &self.settings.handling.mode)
            .finish_non_exhaustive()
    }
}

impl<X: KeyExtractor, P> RateLimitBuilder<X, P, DefaultRefusal> {
    /// A builder keying requests with `key`, its limits `limits`, the default settings.
    pub(crate) fn with_limits(key: X, limits: P) -> RateLimitBuilder<X, P, DefaultRefusal> {
        RateLimitBuilder {
            key,
            limits,
            settings: Settings::new(),
        }
    }
}

impl<X: KeyExtractor, P, H> RateLimitBuilder<X, P, H> {
    /// The same builder with its limits changed by `change`.
    pub(crate) fn map_limits<P2>(self, change: impl FnOnce(P) -> P2) -> RateLimitBuilder<X, P2, H> {
        RateLimitBuilder {
            key: self.key,
            limits: change(self.limits),
            settings: self.settings,
        }
    }

    /// The layer over the limits `make` makes of the builder's.
    ///
    /// # Errors
    ///
    /// [`BuildError::InvalidPolicyName`] for a name a header field cannot carry; what
    /// `make` returns.
    pub(crate) fn into_layer<B: Decide<X::Key>>(
        self,
        make: impl FnOnce(P) -> Result<B, BuildError>,
    ) -> Result<RateLimitLayer<X, B, H>, BuildError> {
        let limits = make(self.limits)?;
        self.settings.into_layer(self.key, limits)
    }

    /// The name the layer reports under (see [`observe`](crate::observe)): the `limiter`
    /// label of its metrics (feature `metrics`) and the `limiter` field of its events
    /// (feature `tracing`). A layer without a name reports nothing, and pays one test of
    /// an empty field per request; a named one, one increment of a counter registered
    /// when the layer is built (so build it once the exporter's recorder is installed).
    /// Keep names few, one per layer: a client's key or address is never a label. The
    /// limiters the layer makes for each key are never named; a global limiter named
    /// with its own builder reports as well, under its own name.
    ///
    /// # Metrics
    ///
    /// | Metric | Type | Labels | Counts |
    /// |---|---|---|---|
    /// | `token_bucket_http_admitted_requests_total` | counter | `limiter` | requests the limits admitted, at once or after waiting |
    /// | `token_bucket_http_refused_requests_total` | counter | `limiter`, `limit` | requests refused, by what refused them |
    /// | `token_bucket_http_shadow_refused_requests_total` | counter | `limiter` | requests a [shadow](RateLimitBuilder::shadow) layer let through that it would have refused |
    /// | `token_bucket_http_allow_listed_requests_total` | counter | `limiter` | requests passed untouched for an [allow-listed key](RateLimitBuilder::allow_keys) or [network](RateLimitBuilder::allow_cidrs) |
    /// | `token_bucket_http_waited_requests_total` | counter | `limiter` | requests admitted after [waiting](RateLimitBuilder::wait_up_to) their turn |
    /// | `token_bucket_http_wait_seconds` | histogram | `limiter` | seconds each of those waited |
    ///
    /// The `limit` label of a refusal says what refused it: `key` (the client's own
    /// limit), `global` (the [global](RateLimitBuilder::global) one; `key` when both
    /// did), `too_many_keys` (the [table of keys](RateLimitBuilder::max_keys) was full),
    /// `missing_key` (no key could be found), `unavailable` (the limits could not decide:
    /// a closed limiter, Redis failing closed). Their names are constants in
    /// [`observe`](crate::observe) ([`HTTP_ADMITTED_REQUESTS`](crate::observe::HTTP_ADMITTED_REQUESTS)
    /// and the others). A request without a key let through by [`MissingKey::Allow`] is
    /// counted nowhere: no limit decided it. Over Redis, a request counts as waited when
    /// it asked Redis again after a refusal, as it does with `wait_up_to`.
    ///
    /// # Events
    ///
    /// With the target `token_bucket`: a `debug` event `request refused` for each
    /// refusal (fields `limiter`, `limit`, `retry_after`), and `request refused in
    /// shadow, let through` for each request a shadow layer would have refused, each
    /// followed by a `trace` event `refused client` with the client's address
    /// (`client_ip`), read only when that level is on. Each `wait_up_to` wait runs in a
    /// `debug` span `http_wait` (fields `limiter`, `cost`, `max_wait`), with a `trace`
    /// event `request admitted after waiting` (field `waited`) when it is admitted.
    /// Nothing at `info` or above.
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::http::{ClientIp, RateLimitLayer};
    /// use token_bucket::{FixedWindow, Rate, TokenBucket};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // Install the exporter's recorder first: the layer registers its metrics here.
    /// let layer = RateLimitLayer::builder(ClientIp::peer(), TokenBucket::new(Rate::per_second(5), 10)?)
    ///     .global(FixedWindow::new(1_000, Duration::from_secs(1))?)
    ///     .name("public-api")
    ///     .build()?;
    /// assert_eq!(layer.name(), Some("public-api"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn name(mut self, name: impl Into<String>) -> RateLimitBuilder<X, P, H> {
        self.settings.name = Some(name.into());
        self
    }

    /// The names of the per-key and global limits in the `RateLimit-Policy` and
    /// `RateLimit` fields (`"client"` and `"global"` by default).
    pub fn policy_names(
        mut self,
        per_key: impl Into<String>,
        global: impl Into<String>,
    ) -> RateLimitBuilder<X, P, H> {
        self.settings.names = [per_key.into(), global.into()];
        self
    }

    /// Sends the legacy `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
    /// `X-RateLimit-Reset` fields too, for the limit with the least remaining.
    pub fn legacy_headers(mut self) -> RateLimitBuilder<X, P, H> {
        self.settings.fields.legacy = true;
        self
    }

    /// Whether decided responses carry the IETF `RateLimit-Policy` and `RateLimit`
    /// fields: `true` by default, as the draft intends, so that clients can pace
    /// themselves. With `false` they carry none (the legacy fields only if
    /// [`legacy_headers`](RateLimitBuilder::legacy_headers) asks for them), and a
    /// refusal still carries `Retry-After`. Turn them off when nobody reads them, or
    /// when a gateway in front sends its own (Envoy's local rate limit ships them off).
    ///
    /// ```
    /// use token_bucket::http::{ClientIp, RateLimitLayer};
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let quiet = RateLimitLayer::builder(ClientIp::peer(), TokenBucket::new(Rate::per_second(5), 10)?)
    ///     .rate_limit_fields(false)
    ///     .build()?;
    /// # let _ = quiet;
    /// # Ok(())
    /// # }
    /// ```
    pub fn rate_limit_fields(mut self, on: bool) -> RateLimitBuilder<X, P, H> {
        self.settings.fields.standard = on;
        self
    }

    /// The unit the [`cost`](RateLimitBuilder::cost) function charges in, sent as the
    /// `qu` parameter of each `RateLimit-Policy` item (draft-11, section 3.1.2), so that
    /// a client reads `q` and `r` as bytes or tokens and not as requests.
    /// [`QuotaUnit::Requests`], the draft's default, is not sent.
    ///
    /// # Errors
    ///
    /// At [`build`](RateLimitBuilder::build): [`BuildError::InvalidQuotaUnit`] for a
    /// [`QuotaUnit::Custom`] of other characters than a Structured Field token's, and
    /// [`BuildError::QuotaUnitWithoutCost`] for a unit other than
    /// [`QuotaUnit::Requests`] when no cost function is set.
    ///
    /// ```
    /// use token_bucket::http::{ClientIp, QuotaUnit, RateLimitLayer};
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // Each client 1 MB a second of uploads, in bursts of 4 MB.
    /// let uploads = RateLimitLayer::builder(ClientIp::peer(), TokenBucket::new(Rate::per_second(1 << 20), 4 << 20)?)
    ///     .cost(|head| {
    ///         let length = head.headers.get(http::header::CONTENT_LENGTH);
    ///         length.and_then(|value| value.to_str().ok()?.parse().ok()).unwrap_or(1)
    ///     })
    ///     .quota_unit(QuotaUnit::ContentBytes)
    ///     .build()?;
    /// # let _ = uploads;
    /// # Ok(())
    /// # }
    /// ```
    pub fn quota_unit(mut self, unit: QuotaUnit) -> RateLimitBuilder<X, P, H> {
        self.settings.fields.unit = Some(unit);
        self
    }

    /// Makes a refused request wait its turn up to `max_wait` instead of being refused
    /// at once; one that could not pass by then is refused, and one whose wait would
    /// surely be longer is refused at once. In this process it waits first in, first out
    /// behind the others of its key, then in the global limit's line: it never holds the
    /// global line while it waits for its own key, so a client over its limit does not
    /// hold up the others (its key's permits count meanwhile, and are given back if the
    /// global limit cannot admit it in time). Over Redis it asks again once Redis says
    /// it could pass: not first in, first out.
    pub fn wait_up_to(mut self, max_wait: Duration) -> RateLimitBuilder<X, P, H> {
        self.settings.handling.mode = Mode::Wait(max_wait);
        self
    }

    /// Shadow mode: decides and counts every request, sends the headers, but refuses
    /// none. A request its limits would have refused goes through all the same (its
    /// permits are not taken) and is counted in
    /// [`shadow_refusals`](RateLimitLayer::shadow_refusals): for trying limits out on
    /// live traffic.
    pub fn shadow(mut self) -> RateLimitBuilder<X, P, H> {
        self.settings.handling.mode = Mode::Shadow;
        self
    }

    /// What to do with a request whose key cannot be found: by default refuse it with
    /// the [`KeyError`](super::KeyError)'s status.
    pub fn on_missing_key(mut self, missing: MissingKey<X::Key>) -> RateLimitBuilder<X, P, H> {
        self.settings.handling.missing = missing;
        self
    }

    /// Lets the requests `skip` picks through untouched, by anything in their head
    /// (path, method, headers): not counted, no header fields, no key looked for. For
    /// routes no client should be limited on, such as `/health` or `/metrics`; called
    /// again, a request is left out when any of the predicates picks it.
    ///
    /// With axum, the order of layers is the other way to leave routes out: a layer
    /// added with `.layer(..)` covers only the routes added before it, and
    /// `.route_layer(..)` only the routes of its router (see `docs/http.md`).
    ///
    /// ```
    /// use axum::{routing::get, Router};
    /// use token_bucket::http::{ClientIp, RateLimitLayer};
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limit = RateLimitLayer::builder(ClientIp::peer(), TokenBucket::new(Rate::per_second(5), 10)?)
    ///     .skip_if(|head| matches!(head.uri.path(), "/health" | "/metrics"))
    ///     .build()?;
    /// let _app: Router = Router::new()
    ///     .route("/", get(|| async { "hello" }))
    ///     .route("/health", get(|| async { "ok" }))
    ///     .layer(limit);
    /// # Ok(())
    /// # }
    /// ```
    pub fn skip_if(
        mut self,
        skip: impl Fn(&RequestHead<'_>) -> bool + Send + Sync + 'static,
    ) -> RateLimitBuilder<X, P, H> {
        self.settings.handling.skip = Some(match self.settings.handling.skip.take() {
            None => Arc::new(skip),
            Some(earlier) => Arc::new(move |head: &RequestHead<'_>| earlier(head) || skip(head)),
        });
        self
    }

    /// Lets requests of these keys through untouched: not counted, no headers.
    pub fn allow_keys(
        mut self,
        keys: impl IntoIterator<Item = X::Key>,
    ) -> RateLimitBuilder<X, P, H> {
        self.settings.handling.allow_keys.extend(keys);
        self
    }

    /// Lets requests from these networks through untouched: not counted, no headers.
    /// The address checked is the client's as the key extractor finds it (see
    /// [`KeyExtractor::client_ip`]), the peer's by default.
    pub fn allow_cidrs(
        mut self,
        cidrs: impl IntoIterator<Item = Cidr>,
    ) -> RateLimitBuilder<X, P, H> {
        self.settings.handling.allow_cidrs.extend(cidrs);
        self
    }

    /// Charges each request what `cost` says, in permits, instead of 1: bytes, or an
    /// estimate of the tokens a model call will use. A cost of zero is admitted without
    /// counting; a cost more than a limit ever admits at once is refused with
    /// [`RefusalKind::NeverFits`](super::RefusalKind::NeverFits).
    pub fn cost(
        mut self,
        cost: impl Fn(&RequestHead<'_>) -> u64 + Send + Sync + 'static,
    ) -> RateLimitBuilder<X, P, H> {
        self.settings.handling.cost = Some(Arc::new(cost));
        self
    }

    /// Answers refused requests as problem details in JSON (RFC 9457), with
    /// `content-type: application/problem+json`: the RateLimit draft's problem type, the
    /// status, a `detail` whose wait agrees with `Retry-After`, and which limit refused
    /// (see [`Refusal::problem_json`]). gRPC calls are still answered with a gRPC status.
    ///
    /// ```
    /// use axum::{routing::get, Router};
    /// use token_bucket::http::{ClientIp, RateLimitLayer};
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limit = RateLimitLayer::builder(ClientIp::peer(), TokenBucket::new(Rate::per_second(5), 10)?)
    ///     .problem_json()
    ///     .build()?;
    /// let _app: Router = Router::new().route("/", get(|| async { "{}" })).layer(limit);
    /// # Ok(())
    /// # }
    /// ```
    pub fn problem_json(self) -> RateLimitBuilder<X, P, ProblemJson> {
        RateLimitBuilder {
            key: self.key,
            limits: self.limits,
            settings: self.settings.responding(ProblemJson),
        }
    }

    /// Answers refused requests with `respond`'s response instead of
    /// [`Refusal::into_response`]. For JSON, [`problem_json`](RateLimitBuilder::problem_json)
    /// is built in; a body of your own keeps the refusal's status and header fields and
    /// says its own content type. The refusal's text says the wait as `Retry-After` does.
    ///
    /// ```
    /// use axum::{body::Body, response::Response, routing::get, Router};
    /// use http::header::{HeaderValue, CONTENT_TYPE};
    /// use token_bucket::http::{ClientIp, RateLimitLayer, Refusal};
    /// use token_bucket::FixedWindow;
    /// use std::time::Duration;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limit = RateLimitLayer::builder(ClientIp::peer(), FixedWindow::new(100, Duration::from_secs(60))?)
    ///     .on_refusal(|refusal: Refusal| {
    ///         // "Slow down: the limit "client" is spent; retry after 37 seconds"
    ///         let mut response = Response::new(Body::from(format!("Slow down: {refusal}\n")));
    ///         *response.status_mut() = refusal.status();
    ///         *response.headers_mut() = refusal.headers().clone();
    ///         let text = HeaderValue::from_static("text/plain; charset=utf-8");
    ///         response.headers_mut().insert(CONTENT_TYPE, text);
    ///         response
    ///     })
    ///     .build()?;
    /// let _app: Router = Router::new().route("/", get(|| async { "hi" })).layer(limit);
    /// # Ok(())
    /// # }
    /// ```
    pub fn on_refusal<B, F>(self, respond: F) -> RateLimitBuilder<X, P, RefusalFn<F>>
    where
        F: Fn(Refusal) -> http::Response<B> + Send + Sync + 'static,
    {
        RateLimitBuilder {
            key: self.key,
            limits: self.limits,
            settings: self.settings.responding(RefusalFn(Arc::new(respond))),
        }
    }
}

impl<X, L, G, H> RateLimitBuilder<X, InProcess<L, G>, H>
where
    X: KeyExtractor,
    L: KeyTemplate + Member,
    G: Limiter + Member,
{
    /// Adds a limit on every request together, decided with the per-key one, all or
    /// nothing: a request either counts against both, at one instant, or neither. A
    /// client refused by the global limit has not used up its own.
    pub fn global<G2: Limiter + Member>(
        self,
        global: G2,
    ) -> RateLimitBuilder<X, InProcess<L, G2>, H> {
        self.map_limits(|limits| InProcess {
            per_key: limits.per_key,
            global: Some(global),
            max_keys: limits.max_keys,
        })
    }

    /// The most keys held at once ([`DEFAULT_MAX_KEYS`] by default): a new key that finds
    /// this many busy ones is answered `503 Service Unavailable` with `Retry-After`,
    /// while the keys held are served as usual. Idle keys are forgotten to make room.
    pub fn max_keys(mut self, max_keys: usize) -> RateLimitBuilder<X, InProcess<L, G>, H> {
        self.limits.max_keys = max_keys;
        self
    }

    /// Settles each admitted request after its response, from its true cost read where
    /// `settle` says: what it was charged up front but did not use goes back to its key
    /// and to the global limit.
    ///
    /// When the true cost exceeds what was charged, the excess is taken from each limit
    /// as far as it has permits now, without waiting, and the rest is forgiven: a
    /// limiter cannot go below empty. So an under-estimate lets a client exceed its
    /// budget by what the estimate missed; estimate high and let the settlement give
    /// back. A response without a readable cost is not settled.
    pub fn settle(mut self, settle: Settle) -> RateLimitBuilder<X, InProcess<L, G>, H> {
        self.settings.handling.settle = Some(settle);
        self
    }

    /// The layer.
    ///
    /// # Errors
    ///
    /// [`BuildError::Config`] with [`ConfigError::ZeroMaxKeys`] for a `max_keys` of zero;
    /// [`BuildError::InvalidPolicyName`] for a name a header field cannot carry;
    /// [`BuildError::InvalidQuotaUnit`] and [`BuildError::QuotaUnitWithoutCost`] for a
    /// quota unit that cannot stand or has no cost to name.
    pub fn build(self) -> Result<LocalLayer<X, L, G, H>, BuildError> {
        self.into_layer(|limits| {
            let keyed = Keyed::builder(limits.per_key)
                .max_keys(limits.max_keys)
                .build()?;
            Ok(Local::new(keyed, limits.global))
        })
    }
}
