//! A tower [`Layer`] and [`Service`] that rate-limit requests through a shared
//! [`TokenBucket`] (feature `tower`).
//!
//! Each request costs one token. [`TokenBucketLayer`] wraps a service in a
//! [`TokenBucketService`]; every service it makes, and every clone of those, draws on
//! the one bucket, so they share one budget.
//!
//! ```
//! use std::convert::Infallible;
//! use std::time::Duration;
//! use token_bucket::{Rate, TokenBucket};
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), tower::BoxError> {
//! // 5 requests per second, in bursts of at most 1.
//! let bucket = TokenBucket::new(Rate::per_second(5), 1)?;
//! let mut service = ServiceBuilder::new()
//!     .layer(bucket.layer())
//!     .service_fn(|name: &str| {
//!         let greeting = format!("hello {name}");
//!         async move { Ok::<_, Infallible>(greeting) }
//!     });
//!
//! let start = tokio::time::Instant::now();
//! assert_eq!(service.ready().await?.call("a").await?, "hello a");
//! assert_eq!(service.ready().await?.call("b").await?, "hello b");
//! assert_eq!(start.elapsed(), Duration::from_millis(200));
//! # Ok(())
//! # }
//! ```
//!
//! # Design
//!
//! tower splits a request in two: `poll_ready` says whether the service can take one,
//! and `call` sends it. The token is reserved in `poll_ready`, because that is where a
//! tower service may make its caller wait, and spent in `call`:
//!
//! 1. `poll_ready` asks the bucket for one token with [`TokenBucket::take`] and keeps the
//!    [`Take`] future inside the service. It takes its place in the bucket's
//!    first-in, first-out queue on the first poll, so callers are served in the order
//!    they first polled, whichever clone they hold and whatever else (plain
//!    [`take`](TokenBucket::take) calls, other layers) shares the bucket.
//! 2. Once the token is there, `poll_ready` polls the inner service's `poll_ready`,
//!    holding the token meanwhile so that the place won in the queue is not lost to a
//!    slow inner service. It returns `Ready(Ok(()))` only when both are ready.
//! 3. `call` spends the token and forwards the request.
//!
//! Tokens are reserved before the inner service is asked, as tower's own
//! `ConcurrencyLimit` does with its permits: the bucket is the outer gate, and an inner
//! service is never made to hold its own resources while the bucket makes it wait.
//!
//! # Readiness
//!
//! - Readiness belongs to one service value. A clone starts without a token, even when
//!   the service it was cloned from holds one: tower's convention, since a clone is
//!   usually moved to another task that must poll it for itself.
//! - Polling again after `Ready(Ok(()))` keeps the same token; it never reserves a second.
//! - `call` without a successful `poll_ready` first breaks tower's contract. Many tower
//!   services panic then; this one never panics on input, so it sends nothing, spends
//!   no token, and returns a [`ResponseFuture`] that fails with [`NotReady`]. A place in
//!   the queue or a token it already held is kept for the next `poll_ready`.
//!
//! # Cancel safety
//!
//! A `poll_ready` still waiting is cancel safe at every point: the [`Take`] stays in the
//! service, so dropping a `ready()` future keeps the service's place in the queue for its
//! next poll, and dropping the service gives the place up without blocking anybody
//! behind it (and without taking any token). A service dropped, or turned back into its
//! inner service with [`into_inner`](TokenBucketService::into_inner), while holding a
//! token it never spent [refunds](TokenBucket::refund) it. So does an inner service
//! whose `poll_ready` fails.
//!
//! The token a `call` spent is not refunded, even if its [`ResponseFuture`] is dropped
//! before it is polled. tower's `Service` documentation asks for resources reserved in
//! `poll_ready` to be released then too; this layer does not on purpose, because an
//! inner service may start the work in `call` itself (tower's `Buffer` hands the request
//! to its worker there), and a refund would then let requests past the limit.
//!
//! # Errors
//!
//! The error type is [`tower::BoxError`], as with tower's own fallible middleware, and
//! the inner service's errors must convert into it (`S::Error: Into<BoxError>`). The
//! errors are boxed unchanged, so they can be told apart by downcasting:
//!
//! - A [`TakeError`] from `poll_ready` when the bucket could not give the token:
//!   [`TakeError::Closed`] once the bucket is [closed](TokenBucket::close),
//!   [`TakeError::QueueFull`] when the bucket has a
//!   [queue limit](crate::Builder::queue_limit) and it is reached (which makes the
//!   service shed load rather than queue), and [`TakeError::NoRuntime`] when it must
//!   wait outside a tokio runtime.
//! - The inner service's own errors, from `poll_ready` or from its response future.
//! - [`NotReady`] from `call` without a successful `poll_ready`.
//!
//! A service that already holds its token when the bucket is closed can still spend it,
//! as a waiter whose tokens accrued before the close is still served.
//!
//! After an error from `poll_ready` the service holds no token and no place in the
//! queue. tower's convention is to discard a service whose `poll_ready` failed; this one
//! can also be polled again, and asks for a new token then.
//!
//! ```
//! use std::convert::Infallible;
//! use token_bucket::{Rate, TakeError, TokenBucket};
//! use tower::{service_fn, Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), tower::BoxError> {
//! let bucket = TokenBucket::new(Rate::per_second(5), 1)?;
//! let service = bucket.layer().layer(service_fn(|n: u32| async move { Ok::<_, Infallible>(n) }));
//! bucket.close();
//! let error = service.oneshot(1).await.unwrap_err();
//! assert_eq!(error.downcast_ref::<TakeError>(), Some(&TakeError::Closed));
//! # Ok(())
//! # }
//! ```
//!
//! # Compared with tower's `RateLimit`
//!
//! tower's `RateLimit` (`tower::limit::RateLimit`, tower 0.5) counts requests in fixed
//! windows kept in the service value itself: up to `num` calls per window of length
//! `per`. Once they are used up it is not ready until the window ends; then a fresh
//! window of `num` starts, at the next `poll_ready` or call. Nothing is smoothed or
//! carried over, so up to twice `num` requests can pass within a moment around a
//! window's end. `RateLimit` is not `Clone`: each service that `RateLimitLayer` makes has
//! its own window, and sharing one limit between tasks takes a `Buffer` in front of it,
//! whose queue then orders the callers. It adds no errors of its own and panics when
//! called while not ready.
//!
//! This layer instead shares one continuously refilled bucket among all its services
//! and their clones, with no `Buffer` needed: tokens accrue smoothly at the rate, bursts
//! never exceed the bucket's capacity, waiting callers are served first in, first out,
//! and the same budget can be shared with code calling the bucket directly.

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use pin_project::pin_project;
use tower::{BoxError, Layer, Service};

use crate::bucket::{Take, TokenBucket};
use crate::error::TakeError;

/// A tower [`Layer`] that rate-limits the services it wraps through one shared
/// [`TokenBucket`], one token per request.
///
/// Every [`TokenBucketService`] this layer makes, and every clone of those, draws on the
/// same bucket. Cloning the layer is cheap and shares the bucket too. See the
/// [module documentation](self) for how readiness, cancellation and errors work.
///
/// # Examples
///
/// ```
/// use std::convert::Infallible;
/// use token_bucket::service::TokenBucketLayer;
/// use token_bucket::{Rate, TokenBucket};
/// use tower::{service_fn, Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let layer = TokenBucketLayer::new(TokenBucket::new(Rate::per_second(10), 10)?);
/// let double = layer.layer(service_fn(|n: u64| async move { Ok::<_, Infallible>(n * 2) }));
/// assert_eq!(double.oneshot(21).await?, 42);
/// assert_eq!(layer.bucket().available(), 9);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct TokenBucketLayer {
    bucket: TokenBucket,
}

impl TokenBucketLayer {
    /// A layer whose services take their tokens from `bucket`.
    ///
    /// The bucket is shared, not copied: requests through the layer and any other use of
    /// `bucket` or its clones draw on one budget. [`TokenBucket::layer`] does the same.
    ///
    /// ```
    /// use token_bucket::service::TokenBucketLayer;
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// let bucket = TokenBucket::new(Rate::per_second(100), 10)?;
    /// let layer = TokenBucketLayer::new(bucket.clone());
    /// bucket.try_take(4)?;
    /// assert_eq!(layer.bucket().available(), 6);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Panics
    ///
    /// Polled where it must wait, inside a tokio runtime built without time (no
    /// `enable_time`), it panics as [`TokenBucket::take`] does: nothing could ever wake it.
    pub fn new(bucket: TokenBucket) -> TokenBucketLayer {
        TokenBucketLayer { bucket }
    }

    /// The bucket the layer's services take their tokens from.
    ///
    /// ```
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// let layer = TokenBucket::new(Rate::per_second(100), 10)?.layer();
    /// assert_eq!(layer.bucket().capacity(), 10);
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn bucket(&self) -> &TokenBucket {
        &self.bucket
    }
}

impl<S> Layer<S> for TokenBucketLayer {
    type Service = TokenBucketService<S>;

    fn layer(&self, inner: S) -> TokenBucketService<S> {
        TokenBucketService::new(inner, self.bucket.clone())
    }
}

/// Available with the `tower` feature.
impl TokenBucket {
    /// A tower [`TokenBucketLayer`] that rate-limits requests through this bucket, one
    /// token each. Needs the `tower` feature.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use token_bucket::{Rate, TokenBucket};
    /// use tower::{ServiceBuilder, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower::BoxError> {
    /// let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
    /// let service = ServiceBuilder::new()
    ///     .layer(bucket.layer())
    ///     .service_fn(|n: u64| async move { Ok::<_, Infallible>(n + 1) });
    /// assert_eq!(service.oneshot(1).await?, 2);
    /// assert_eq!(bucket.available(), 9);
    /// # Ok(())
    /// # }
    /// ```
    pub fn layer(&self) -> TokenBucketLayer {
        TokenBucketLayer::new(self.clone())
    }
}

/// A tower [`Service`] that spends one token of a shared [`TokenBucket`] per request.
///
/// Made by a [`TokenBucketLayer`] (see [`TokenBucket::layer`]) or by
/// [`new`](TokenBucketService::new). Its clones share the bucket, so they share one
/// budget.
///
/// `poll_ready` reserves a token, waiting its turn in the bucket's first-in, first-out
/// queue, and then polls the inner service's `poll_ready`; `call` spends the token and
/// forwards the request. Its error type is [`tower::BoxError`]. It is `Send`, `Sync`
/// and `'static` whenever the inner service is, and `Clone` when it is `Clone`.
///
/// # Readiness
///
/// A clone starts without a token and must be polled ready for itself. `call` without a
/// successful `poll_ready` sends nothing, spends nothing, and returns a future that fails
/// with [`NotReady`]; it never panics.
///
/// # Cancel safety
///
/// Cancel safe. Dropping a `ready()` future keeps the service's place in the queue;
/// dropping the service gives the place up without blocking anybody, and
/// [refunds](TokenBucket::refund) a token it reserved but never spent. A token spent by
/// `call` stays spent. See the [module documentation](self) for the details.
///
/// # Errors
///
/// From `poll_ready`: a boxed [`TakeError`] when the bucket cannot give the token (for
/// example [`TakeError::Closed`]), or the inner service's error, whose token is then
/// refunded. From the response future: the inner service's error, or [`NotReady`].
///
/// # Examples
///
/// Three clones share one budget and are served in the order they asked:
///
/// ```
/// use std::convert::Infallible;
/// use std::time::Duration;
/// use token_bucket::service::TokenBucketService;
/// use token_bucket::{Rate, TokenBucket};
/// use tower::{service_fn, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let bucket = TokenBucket::builder().rate(Rate::per_second(2)).capacity(1).initial(0).build()?;
/// let service = TokenBucketService::new(
///     service_fn(|()| async { Ok::<_, Infallible>(tokio::time::Instant::now()) }),
///     bucket,
/// );
/// let start = tokio::time::Instant::now();
/// let handles: Vec<_> = (0..3).map(|_| tokio::spawn(service.clone().oneshot(()))).collect();
/// for (i, handle) in (1..).zip(handles) {
///     let served = handle.await??;
///     assert_eq!(served - start, Duration::from_millis(500) * i);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct TokenBucketService<S> {
    inner: S,
    reservation: Reservation,
}

impl<S> TokenBucketService<S> {
    /// Wraps `inner` so that each request takes one token from `bucket`.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use token_bucket::service::TokenBucketService;
    /// use token_bucket::{Rate, TokenBucket};
    /// use tower::{service_fn, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower::BoxError> {
    /// let bucket = TokenBucket::new(Rate::per_second(1), 3)?;
    /// let service = TokenBucketService::new(
    ///     service_fn(|n: u8| async move { Ok::<_, Infallible>(n) }),
    ///     bucket.clone(),
    /// );
    /// service.oneshot(1).await?;
    /// assert_eq!(bucket.available(), 2);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// Polled where it must wait, inside a tokio runtime built without time (no
    /// `enable_time`), it panics as [`TokenBucket::take`] does: nothing could ever wake it.
    pub fn new(inner: S, bucket: TokenBucket) -> TokenBucketService<S> {
        TokenBucketService {
            inner,
            reservation: Reservation {
                bucket,
                state: State::Idle,
            },
        }
    }

    /// The bucket the service takes its tokens from.
    ///
    /// ```
    /// use token_bucket::service::TokenBucketService;
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// let service = TokenBucketService::new((), TokenBucket::new(Rate::per_second(1), 3)?);
    /// assert_eq!(service.bucket().capacity(), 3);
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn bucket(&self) -> &TokenBucket {
        &self.reservation.bucket
    }

    /// Whether the service holds a token that its next `call` will spend: `poll_ready`
    /// reserved it and `call` has not spent it yet.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use token_bucket::service::TokenBucketService;
    /// use token_bucket::{Rate, TokenBucket};
    /// use tower::{service_fn, Service, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower::BoxError> {
    /// let bucket = TokenBucket::new(Rate::per_second(1), 3)?;
    /// let mut service = TokenBucketService::new(
    ///     service_fn(|n: u8| async move { Ok::<_, Infallible>(n) }),
    ///     bucket,
    /// );
    /// assert!(!service.holds_token());
    /// service.ready().await?;
    /// assert!(service.holds_token());
    /// service.call(1).await?;
    /// assert!(!service.holds_token());
    /// # Ok(())
    /// # }
    /// ```
    pub fn holds_token(&self) -> bool {
        self.reservation.holds_token()
    }

    /// The inner service.
    ///
    /// ```
    /// use token_bucket::service::TokenBucketService;
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// let service = TokenBucketService::new("inner", TokenBucket::new(Rate::per_second(1), 3)?);
    /// assert_eq!(*service.get_ref(), "inner");
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably. Polling it ready or calling it through this reference
    /// bypasses the bucket.
    ///
    /// ```
    /// use token_bucket::service::TokenBucketService;
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// let mut service = TokenBucketService::new(1, TokenBucket::new(Rate::per_second(1), 3)?);
    /// *service.get_mut() += 1;
    /// assert_eq!(*service.get_ref(), 2);
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, unwrapped. A token the service reserved but never spent goes
    /// back to the bucket, as when it is dropped.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use token_bucket::service::TokenBucketService;
    /// use token_bucket::{Rate, TokenBucket};
    /// use tower::{service_fn, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tower::BoxError> {
    /// let bucket = TokenBucket::new(Rate::per_second(1), 3)?;
    /// let mut service = TokenBucketService::new(
    ///     service_fn(|n: u8| async move { Ok::<_, Infallible>(n) }),
    ///     bucket.clone(),
    /// );
    /// service.ready().await?;
    /// assert_eq!(bucket.available(), 2);
    /// let _inner = service.into_inner();
    /// assert_eq!(bucket.available(), 3);
    /// # Ok(())
    /// # }
    /// ```
    pub fn into_inner(self) -> S {
        // `Reservation`'s own `Drop` refunds an unspent token; this type has no `Drop`,
        // so it can be taken apart here.
        let TokenBucketService { inner, reservation } = self;
        drop(reservation);
        inner
    }
}

impl<S: Clone> Clone for TokenBucketService<S> {
    /// A service sharing the bucket, and so the budget, that holds no token and no place
    /// in the queue: tower's convention that readiness is not shared between clones.
    fn clone(&self) -> Self {
        TokenBucketService::new(self.inner.clone(), self.reservation.bucket.clone())
    }
}

impl<S, Request> Service<Request> for TokenBucketService<S>
where
    S: Service<Request>,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        if let Err(error) = ready!(self.reservation.poll_token(cx)) {
            // Boxed as it is, so that callers can downcast it to `TakeError`.
            return Poll::Ready(Err(Box::new(error)));
        }
        match self.inner.poll_ready(cx) {
            Poll::Ready(Ok(())) => {
                self.reservation.state = State::Ready;
                Poll::Ready(Ok(()))
            }
            Poll::Pending => {
                // Keep the token (and with it our turn) while the inner service gets
                // ready; it was ready before, perhaps, but is not now.
                self.reservation.state = State::Reserved;
                Poll::Pending
            }
            Poll::Ready(Err(error)) => {
                // No request will follow a failed `poll_ready`: the token was not used.
                self.reservation.release();
                Poll::Ready(Err(error.into()))
            }
        }
    }

    fn call(&mut self, request: Request) -> ResponseFuture<S::Future> {
        if !matches!(self.reservation.state, State::Ready) {
            // The caller broke tower's contract. Sending the request would bypass the
            // limit (or call an inner service that is not ready), and panicking is not
            // this crate's way: refuse it through the response future, and keep whatever
            // place or token the service already has.
            return ResponseFuture {
                kind: Kind::NotReady,
            };
        }
        // Spend the token before calling, so that it stays spent even if the inner
        // service panics: it may have started the work.
        self.reservation.state = State::Idle;
        ResponseFuture {
            kind: Kind::Called {
                future: self.inner.call(request),
            },
        }
    }
}

/// A service's claim on one token: none, a place in the queue, or the token itself.
///
/// Kept apart from [`TokenBucketService`] so that its `Drop` can refund an unspent token
/// while [`TokenBucketService::into_inner`] can still move the inner service out.
#[derive(Debug)]
struct Reservation {
    bucket: TokenBucket,
    state: State,
}

#[derive(Debug)]
enum State {
    /// No token and no place in the queue.
    Idle,
    /// In the bucket's queue for one token. The `Take` leaves the queue when dropped.
    Queued(Take),
    /// Holds a token; the inner service has not (or not since) reported ready.
    Reserved,
    /// Holds a token and the inner service reported ready: `call` may go.
    Ready,
}

impl Reservation {
    /// Ready once the service holds a token: at once if it already does, otherwise
    /// after queueing for one.
    fn poll_token(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TakeError>> {
        loop {
            match &mut self.state {
                State::Idle => self.state = State::Queued(self.bucket.take(1)),
                State::Queued(take) => {
                    // `Take` is `Unpin`, so it is stored inline and pinned in place.
                    let result = ready!(Pin::new(take).poll(cx));
                    // The `Take` has completed (a completed `Take` only ever returns
                    // `Pending`), so it is replaced whatever the result.
                    self.state = match result {
                        Ok(()) => State::Reserved,
                        Err(_) => State::Idle,
                    };
                    return Poll::Ready(result);
                }
                State::Reserved | State::Ready => return Poll::Ready(Ok(())),
            }
        }
    }

    fn holds_token(&self) -> bool {
        matches!(self.state, State::Reserved | State::Ready)
    }

    /// Gives up the token or the place in the queue, whichever the service has.
    fn release(&mut self) {
        if self.holds_token() {
            self.bucket.refund(1);
        }
        // Dropping a queued `Take` leaves the queue without blocking those behind.
        self.state = State::Idle;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.release();
    }
}

/// The future a [`TokenBucketService`] returns from `call`: the inner service's response,
/// with its error boxed into a [`tower::BoxError`].
///
/// When `call` came without a successful `poll_ready`, it fails at once with
/// [`NotReady`] instead.
///
/// # Cancel safety
///
/// Dropping it drops the inner service's future. The token the `call` spent is not
/// refunded: the inner service may already have started the work.
///
/// ```
/// use std::convert::Infallible;
/// use token_bucket::service::{NotReady, ResponseFuture, TokenBucketService};
/// use token_bucket::{Rate, TokenBucket};
/// use tower::{service_fn, Service};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let bucket = TokenBucket::new(Rate::per_second(1), 1)?;
/// let inner = service_fn(|n: u8| async move { Ok::<_, Infallible>(n) });
/// let mut service = TokenBucketService::new(inner, bucket.clone());
/// // Called without `poll_ready`: nothing is sent.
/// let response: ResponseFuture<_> = service.call(1);
/// assert!(response.await.unwrap_err().is::<NotReady>());
/// # Ok(())
/// # }
/// ```
#[pin_project]
#[must_use = "futures do nothing unless you `.await` or poll them"]
#[derive(Debug)]
pub struct ResponseFuture<F> {
    #[pin]
    kind: Kind<F>,
}

#[pin_project(project = KindProjection)]
#[derive(Debug)]
enum Kind<F> {
    /// The request was sent; this is the inner service's future.
    Called {
        #[pin]
        future: F,
    },
    /// `call` came without a successful `poll_ready`; nothing was sent.
    NotReady,
}

impl<F, Response, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response, E>>,
    E: Into<BoxError>,
{
    type Output = Result<Response, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProjection::Called { future } => future.poll(cx).map_err(Into::into),
            KindProjection::NotReady => Poll::Ready(Err(Box::new(NotReady { _private: () }))),
        }
    }
}

/// The error of a [`TokenBucketService`] called without `poll_ready` first returning
/// `Ready(Ok(()))`: the request was not sent and no token was spent.
///
/// tower's contract requires a successful `poll_ready` before each `call`; services may
/// panic otherwise. This one returns this error instead, boxed in a
/// [`tower::BoxError`]; find it with `error.is::<NotReady>()` or
/// `error.downcast_ref::<NotReady>()`.
///
/// ```
/// use std::convert::Infallible;
/// use token_bucket::service::{NotReady, TokenBucketService};
/// use token_bucket::{Rate, TokenBucket};
/// use tower::{service_fn, Service};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), tower::BoxError> {
/// let bucket = TokenBucket::new(Rate::per_second(1), 1)?;
/// let inner = service_fn(|n: u8| async move { Ok::<_, Infallible>(n) });
/// let mut service = TokenBucketService::new(inner, bucket.clone());
/// let error = service.call(1).await.unwrap_err();
/// assert!(error.downcast_ref::<NotReady>().is_some());
/// assert_eq!(bucket.available(), 1);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotReady {
    // Made only by this module, so that it can gain fields without a breaking change.
    _private: (),
}

impl fmt::Display for NotReady {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "TokenBucketService::call before poll_ready returned Ready(Ok(())): \
             the request was not sent and no token was spent",
        )
    }
}

impl Error for NotReady {}
