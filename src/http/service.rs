//! [`RateLimit`], the service a [`RateLimitLayer`](super::RateLimitLayer) wraps around
//! yours, and its [`ResponseFuture`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, Request, Response};
use pin_project::pin_project;
use tokio::time::Instant;
use tower::Service;

use super::key::{KeyExtractor, RequestHead};
use super::limits::{counts_until, private::Decide, Decided, Limit, Verdict};
use super::response::{Refusal, RefusalKind, RespondRefusal};
use super::shared::{ActualCost, MissingKey, Mode, Settle, Shared};
use crate::observe::http::{Answer, RefusedBy, WaitSpan};
use crate::quota::Quota;

/// The service a [`RateLimitLayer`](super::RateLimitLayer) makes: it decides each
/// request before passing it on to `inner`, and answers refused ones itself.
pub struct RateLimit<S, X: KeyExtractor, B, H> {
    inner: S,
    shared: Arc<Shared<X, B, H>>,
}

impl<S, X: KeyExtractor, B, H> RateLimit<S, X, B, H> {
    pub(crate) fn new(inner: S, shared: Arc<Shared<X, B, H>>) -> RateLimit<S, X, B, H> {
        RateLimit { inner, shared }
    }
}

impl<S: Clone, X: KeyExtractor, B, H> Clone for RateLimit<S, X, B, H> {
    fn clone(&self) -> RateLimit<S, X, B, H> {
        RateLimit {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: fmt::Debug, X: KeyExtractor, B, H> fmt::Debug for RateLimit<S, X, B, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

/// The request's content type when it is a gRPC call (`application/grpc`, with any
/// suffix, gRPC-Web's included): a refusal answers in kind.
fn grpc_content_type(headers: &HeaderMap) -> Option<HeaderValue> {
    let content_type = headers.get(CONTENT_TYPE)?;
    (content_type.as_bytes().starts_with(b"application/grpc")).then(|| content_type.clone())
}

/// What an admitted request carries to its response: the quotas for its headers, and
/// what to settle.
struct Admitted<K> {
    quotas: Option<[Option<Quota>; 2]>,
    settle: Option<Settlement<K>>,
}

/// What an admitted request was charged, to settle once its response tells its true cost.
struct Settlement<K> {
    key: K,
    charged: u64,
    /// Until when the charge counts in each limit (the per-key one, then the global one):
    /// only then may it be given back.
    counted_until: [Option<Instant>; 2],
}

impl<S, X, B, H, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, X, B, H>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    X: KeyExtractor,
    B: Decide<X::Key>,
    H: RespondRefusal<ResBody>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S, X, B, H, ReqBody, ResBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let shared = &*self.shared;
        let head = RequestHead::of(&request);
        if (shared.handling.skip.as_ref()).is_some_and(|skip| skip(&head)) {
            return self.pass(request);
        }
        let allowed_network = !shared.handling.allow_cidrs.is_empty()
            && (shared.key.client_ip(&head)).is_some_and(|ip| {
                shared
                    .handling
                    .allow_cidrs
                    .iter()
                    .any(|cidr| cidr.contains(ip))
            });
        let key = match shared.key.extract(&head) {
            _ if allowed_network => {
                shared.observer.allow_listed();
                return self.pass(request);
            }
            Ok(key) => key,
            Err(error) => match &shared.handling.missing {
                // A shadow refuses nothing: it counts what it would have refused.
                MissingKey::Refuse if shared.handling.mode == Mode::Shadow => {
                    shared.shadow_refusals.fetch_add(1, Ordering::Relaxed);
                    let client_ip = || shared.key.client_ip(&head);
                    let missing = RefusedBy::MissingKey;
                    (shared.observer).refused(Answer::LetThrough, missing, None, client_ip);
                    return self.pass(request);
                }
                MissingKey::Refuse => {
                    let client_ip = || shared.key.client_ip(&head);
                    let missing = RefusedBy::MissingKey;
                    (shared.observer).refused(Answer::Refused, missing, None, client_ip);
                    let kind = RefusalKind::NoKey(error);
                    let grpc = grpc_content_type(head.headers);
                    let state = refused(shared, kind, missing, HeaderMap::new(), grpc);
                    return ResponseFuture {
                        state,
                        shared: Arc::clone(&self.shared),
                    };
                }
                MissingKey::Allow => return self.pass(request),
                MissingKey::Key(key) => key.clone(),
            },
        };
        if shared.handling.allow_keys.contains(&key) {
            shared.observer.allow_listed();
            return self.pass(request);
        }
        let cost = shared.handling.cost.as_ref().map_or(1, |cost| cost(&head));
        let wait = match shared.handling.mode {
            Mode::Wait(max_wait) => Some(max_wait),
            Mode::Refuse | Mode::Shadow => None,
        };
        match shared.limits.decide(&key, cost, wait, shared.quotas) {
            Decided::Now(verdict) => {
                let shared = Arc::clone(&self.shared);
                let state = answer(&shared, verdict, &mut self.inner, request, key, cost);
                ResponseFuture { state, shared }
            }
            Decided::Later(decision) => {
                // The inner service was made ready for this request: take it along, and
                // leave a clone for the next one, as tower's own middleware does.
                let ready = self.inner.clone();
                let inner = std::mem::replace(&mut self.inner, ready);
                // Only a layer that waits gets a span: without `wait_up_to`, a later
                // decision is a Redis round trip.
                let span = match wait {
                    Some(max_wait) => shared.observer.wait_span(cost, max_wait),
                    None => WaitSpan::default(),
                };
                ResponseFuture {
                    state: State::Deciding {
                        decision,
                        span,
                        waiting: Some(Box::new(Waiting {
                            inner,
                            request,
                            key,
                            cost,
                        })),
                    },
                    shared: Arc::clone(&self.shared),
                }
            }
        }
    }
}

impl<S, X: KeyExtractor, B, H> RateLimit<S, X, B, H> {
    /// Passes `request` on untouched: not counted, no headers.
    fn pass<ReqBody, ResBody>(
        &mut self,
        request: Request<ReqBody>,
    ) -> ResponseFuture<S, X, B, H, ReqBody, ResBody>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    {
        ResponseFuture {
            state: State::Calling {
                future: self.inner.call(request),
                admitted: Admitted {
                    quotas: None,
                    settle: None,
                },
            },
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The state of a refused request: its response, built by the layer's hook.
fn refused<S, X, B, H, ReqBody, ResBody>(
    shared: &Shared<X, B, H>,
    kind: RefusalKind,
    by: RefusedBy,
    headers: HeaderMap,
    grpc: Option<HeaderValue>,
) -> State<S, X::Key, ReqBody, ResBody>
where
    S: Service<Request<ReqBody>>,
    X: KeyExtractor,
    H: RespondRefusal<ResBody>,
{
    let policy = shared.fields.policy_name(by);
    let response = (shared.respond).respond(Refusal::new(kind, by, policy, headers, grpc));
    State::Refused {
        response: Some(response),
    }
}

/// Turns a decision into the next state: the inner service called, or the refusal.
fn answer<S, X, B, H, ReqBody, ResBody>(
    shared: &Shared<X, B, H>,
    verdict: Verdict,
    inner: &mut S,
    request: Request<ReqBody>,
    key: X::Key,
    cost: u64,
) -> State<S, X::Key, ReqBody, ResBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    X: KeyExtractor,
    H: RespondRefusal<ResBody>,
{
    let admitted = match verdict.outcome {
        Ok(()) => {
            shared.observer.admitted(verdict.waited);
            true
        }
        Err(kind) if shared.handling.mode == Mode::Shadow => {
            shared.shadow_refusals.fetch_add(1, Ordering::Relaxed);
            let client_ip = || shared.key.client_ip(&RequestHead::of(&request));
            let (by, retry_after) = refused_by(&kind, verdict.refused_by);
            (shared.observer).refused(Answer::LetThrough, by, retry_after, client_ip);
            false
        }
        Err(kind) => {
            let client_ip = || shared.key.client_ip(&RequestHead::of(&request));
            let (by, retry_after) = refused_by(&kind, verdict.refused_by);
            (shared.observer).refused(Answer::Refused, by, retry_after, client_ip);
            let mut headers = HeaderMap::new();
            // A table too full to hold the key says nothing of the client's quota.
            if !matches!(kind, RefusalKind::TooManyKeys { .. }) {
                shared.fields.insert(&mut headers, &verdict.quotas);
            }
            // Only a refusal asks whether it answers a gRPC call.
            let grpc = grpc_content_type(request.headers());
            return refused(shared, kind, by, headers, grpc);
        }
    };
    // Only a request that took its permits has anything to settle.
    let settle = (admitted && shared.handling.settle.is_some()).then(|| {
        let now = Instant::now();
        Settlement {
            key,
            charged: cost,
            counted_until: verdict.quotas.map(|quota| counts_until(quota, now)),
        }
    });
    State::Calling {
        future: inner.call(request),
        admitted: Admitted {
            // A layer that sends no fields has no use for them.
            quotas: shared.fields.any().then_some(verdict.quotas),
            settle,
        },
    }
}

/// What refused a request of `kind`, refused by `limit` when a limit did, and when it may
/// pass.
fn refused_by(kind: &RefusalKind, limit: Option<Limit>) -> (RefusedBy, Option<Duration>) {
    match kind {
        RefusalKind::TooManyKeys { retry_after } => (RefusedBy::TooManyKeys, Some(*retry_after)),
        RefusalKind::NoKey(_) => (RefusedBy::MissingKey, None),
        RefusalKind::Unavailable { .. } => (RefusedBy::Unavailable, None),
        RefusalKind::Limited { .. } | RefusalKind::NeverFits { .. } => {
            let by = match limit {
                Some(Limit::Global) => RefusedBy::Global,
                Some(Limit::Key) | None => RefusedBy::Key,
            };
            let retry_after = match kind {
                RefusalKind::Limited { retry_after } => Some(*retry_after),
                _ => None,
            };
            (by, retry_after)
        }
    }
}

/// A request waiting for its decision, with what it needs once it has it.
struct Waiting<S, K, ReqBody> {
    inner: S,
    request: Request<ReqBody>,
    key: K,
    cost: u64,
}

#[pin_project(project = StateProjection)]
enum State<S: Service<Request<ReqBody>>, K, ReqBody, ResBody> {
    /// Waiting its turn, or for Redis.
    Deciding {
        decision: Pin<Box<dyn Future<Output = Verdict> + Send>>,
        /// The span it waits in, when it waits and the layer is named.
        span: WaitSpan,
        /// Boxed: a request that waits is rare, and the state is moved on every request's
        /// way out, so its size is paid by all.
        waiting: Option<Box<Waiting<S, K, ReqBody>>>,
    },
    /// Admitted (or passed untouched): the inner service answers.
    Calling {
        #[pin]
        future: S::Future,
        admitted: Admitted<K>,
    },
    /// Refused: the answer is ready.
    Refused { response: Option<Response<ResBody>> },
}

/// The future of a [`RateLimit`] service's response.
///
/// # Cancel safety
///
/// Dropping it while it waits its turn (with
/// [`wait_up_to`](super::RateLimitBuilder::wait_up_to)) gives up its place in line and
/// takes nothing. Dropped once admitted, the permits stay taken, as the request was let
/// through; dropped while a Redis decision is under way, the permits may or may not
/// have been taken. Dropped before its response, an admitted request is not settled.
#[pin_project]
pub struct ResponseFuture<S, X, B, H, ReqBody, ResBody>
where
    S: Service<Request<ReqBody>>,
    X: KeyExtractor,
{
    #[pin]
    state: State<S, X::Key, ReqBody, ResBody>,
    shared: Arc<Shared<X, B, H>>,
}

impl<S, X, B, H, ReqBody, ResBody> fmt::Debug for ResponseFuture<S, X, B, H, ReqBody, ResBody>
where
    S: Service<Request<ReqBody>>,
    X: KeyExtractor,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<S, X, B, H, ReqBody, ResBody> Future for ResponseFuture<S, X, B, H, ReqBody, ResBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    X: KeyExtractor,
    B: Decide<X::Key>,
    H: RespondRefusal<ResBody>,
{
    type Output = Result<Response<ResBody>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProjection::Deciding {
                    decision,
                    span,
                    waiting,
                } => {
                    let verdict = ready!(span.in_scope(|| decision.as_mut().poll(cx)));
                    let Some(waiting) = waiting.take() else {
                        unreachable!("a decision is polled to its end once")
                    };
                    let Waiting {
                        mut inner,
                        request,
                        key,
                        cost,
                    } = *waiting;
                    // What the wait ended in is reported inside its span.
                    let span = std::mem::take(span);
                    let next = span
                        .in_scope(|| answer(this.shared, verdict, &mut inner, request, key, cost));
                    this.state.set(next);
                }
                StateProjection::Calling { future, admitted } => {
                    let mut response = ready!(future.poll(cx))?;
                    if let Some(quotas) = &admitted.quotas {
                        this.shared.fields.insert(response.headers_mut(), quotas);
                    }
                    if let Some(settlement) = admitted.settle.take() {
                        settle(this.shared, &response, settlement);
                    }
                    return Poll::Ready(Ok(response));
                }
                StateProjection::Refused { response } => {
                    let response = response.take().expect("a refusal is answered once");
                    return Poll::Ready(Ok(response));
                }
            }
        }
    }
}

/// Settles an admitted request from the true cost its response carries.
fn settle<X: KeyExtractor, B: Decide<X::Key>, H, ResBody>(
    shared: &Shared<X, B, H>,
    response: &Response<ResBody>,
    settlement: Settlement<X::Key>,
) {
    let actual = match &shared.handling.settle {
        Some(Settle::Extension) => (response.extensions().get::<ActualCost>()).map(|cost| cost.0),
        Some(Settle::Header(name)) => (response.headers().get(name))
            .and_then(|value| value.to_str().ok())
            .and_then(|text| u64::from_str(text.trim()).ok()),
        None => None,
    };
    if let Some(actual) = actual {
        let now = Instant::now();
        let refundable =
            (settlement.counted_until).map(|until| until.is_some_and(|until| now < until));
        (shared.limits).settle(&settlement.key, settlement.charged, actual, refundable);
    }
}
