//! The futures returned by [`take`](crate::TokenBucket::take),
//! [`wait`](crate::TokenBucket::wait) and their timeout forms, and [`Closed`], by
//! [`closed`](crate::TokenBucket::closed).
//!
//! All four share one state machine, [`Acquire`]: on the first poll the request is served
//! at once, refused at once, or queued with its task's waker; later polls read the
//! outcome the bucket decided, under its lock (see `state.rs`). The timeout forms add a tokio timer for
//! the deadline.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use futures::future::FusedFuture;
use pin_project::pin_project;
use tokio::time::{sleep_until, Sleep};

use crate::bucket::queue::{Outcome, Request, WaiterId};
use crate::bucket::shared::{CloseSignal, Shared};
use crate::bucket::state::Leaving;
use crate::error::TakeError;

/// Where a request stands.
enum Phase {
    /// Not polled yet: not in the queue.
    Idle,
    /// In the queue, waiting for its outcome.
    Queued {
        id: WaiterId,
        /// Since when, and in which span, a named bucket's request waits (see
        /// `observe/`); `None` for an unnamed bucket.
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        watched: Option<Box<Watched>>,
    },
    /// Completed; further polls return `Pending`, as a fused future does.
    Done,
}

/// A named bucket's waiting request: since when it waits, and the span it waits in.
/// Boxed, so that it costs an unnamed bucket's requests one word.
#[cfg(any(feature = "metrics", feature = "tracing"))]
struct Watched {
    since: tokio::time::Instant,
    #[cfg(feature = "tracing")]
    span: Option<tracing::Span>,
}

/// The state machine behind the four public futures.
struct Acquire {
    bucket: Arc<Shared>,
    request: Request,
    phase: Phase,
}

impl Acquire {
    #[inline]
    fn new((bucket, request): (Arc<Shared>, Request)) -> Acquire {
        Acquire {
            bucket,
            request,
            phase: Phase::Idle,
        }
    }

    #[inline]
    fn poll_acquire(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TakeError>> {
        if let Phase::Idle = self.phase {
            return match self.bucket.begin(self.request, cx.waker()) {
                Ok(None) => {
                    let observer = &self.bucket.observer;
                    if observer.is_named() {
                        observer.admitted(self.request.consumes());
                    }
                    self.finish(Ok(()))
                }
                Ok(Some(id)) => {
                    // Queued with this poll's waker; a refill task runs (`begin` made sure).
                    self.phase = Phase::Queued {
                        id,
                        #[cfg(any(feature = "metrics", feature = "tracing"))]
                        watched: self.watch(),
                    };
                    Poll::Pending
                }
                Err(error) => {
                    let observer = &self.bucket.observer;
                    match error {
                        TakeError::ExceedsCapacity { .. } | TakeError::QueueFull { .. } => {
                            observer.refused(self.request.tokens, None);
                        }
                        // Its tokens could not come by its deadline: it times out at once.
                        TakeError::Timeout => observer.timed_out(self.request.tokens),
                        _ => {}
                    }
                    self.finish(Err(error))
                }
            };
        }
        self.poll_queued(cx)
    }

    /// Polls for the outcome once queued. Out of line: a request served on its first poll
    /// (the common case) never comes here.
    #[inline(never)]
    fn poll_queued(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TakeError>> {
        let Phase::Queued { id, .. } = &self.phase else {
            return Poll::Pending;
        };
        // A grant read here is seen: dropping this future can no longer undo it.
        let outcome = ready!(self.bucket.poll_outcome(*id, self.request.consumes(), cx));
        self.finish_reporting(outcome)
    }

    /// Done with `outcome`, told by the bucket, then reported (see `observe/`): done
    /// first, so that a report that panics leaves nothing for the drop to give back or
    /// leave twice.
    fn finish_reporting(&mut self, outcome: Outcome) -> Poll<Result<(), TakeError>> {
        let phase = std::mem::replace(&mut self.phase, Phase::Done);
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if let Phase::Queued {
            watched: Some(watched),
            ..
        } = &phase
        {
            #[cfg(feature = "tracing")]
            let _entered = watched.span.as_ref().map(tracing::Span::enter);
            let observer = &self.bucket.observer;
            match outcome {
                Outcome::Granted => {
                    observer.waited(self.request.consumes(), watched.since.elapsed());
                }
                Outcome::TimedOut => observer.timed_out(self.request.tokens),
                _ => {}
            }
        }
        let _ = phase;
        Poll::Ready(outcome.into())
    }

    /// What a named bucket keeps of a request that queues: the instant, and its span.
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    fn watch(&self) -> Option<Box<Watched>> {
        let observer = &self.bucket.observer;
        observer.name()?;
        Some(Box::new(Watched {
            since: tokio::time::Instant::now(),
            #[cfg(feature = "tracing")]
            span: observer.wait_span(self.request.tokens),
        }))
    }

    #[inline]
    fn finish(&mut self, result: Result<(), TakeError>) -> Poll<Result<(), TakeError>> {
        self.phase = Phase::Done;
        Poll::Ready(result)
    }

    fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done)
    }

    #[inline]
    fn poll_request(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), TakeError>> {
        self.get_mut().poll_acquire(cx)
    }
}

impl Drop for Acquire {
    #[inline]
    fn drop(&mut self) {
        if let Phase::Queued { id, .. } = &self.phase {
            self.bucket.leave(*id, self.request, Leaving::Dropped);
        }
    }
}

impl fmt::Debug for Acquire {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let phase = match self.phase {
            Phase::Idle => "idle",
            Phase::Queued { .. } => "queued",
            Phase::Done => "done",
        };
        f.debug_struct("Acquire")
            .field("tokens", &self.request.tokens)
            .field("phase", &phase)
            .finish()
    }
}

/// [`Acquire`] with a timer for the request's deadline, started only once it queues.
#[pin_project]
#[derive(Debug)]
struct Timed {
    acquire: Acquire,
    #[pin]
    timer: Option<Sleep>,
}

impl Timed {
    fn new(request: (Arc<Shared>, Request)) -> Timed {
        Timed {
            acquire: Acquire::new(request),
            timer: None,
        }
    }

    fn is_done(&self) -> bool {
        self.acquire.is_done()
    }

    fn poll_request(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), TakeError>> {
        let mut this = self.project();
        if let Poll::Ready(result) = this.acquire.poll_acquire(cx) {
            return Poll::Ready(result);
        }
        // Pending, so queued, or done and fused.
        let Phase::Queued { id, .. } = &this.acquire.phase else {
            return Poll::Pending;
        };
        let id = *id;
        if this.timer.is_none() {
            let bucket = &this.acquire.bucket;
            let Some(deadline) = bucket.clock.instant(this.acquire.request.deadline) else {
                return Poll::Pending;
            };
            this.timer.set(Some(sleep_until(deadline)));
        }
        ready!((this.timer.as_pin_mut()).map_or(Poll::Pending, |timer| timer.poll(cx)));
        // The deadline passed: leave the queue, unless the tokens came in time.
        let acquire = this.acquire;
        let outcome = acquire
            .bucket
            .leave(id, acquire.request, Leaving::DeadlinePassed);
        acquire.finish_reporting(outcome.unwrap_or(Outcome::TimedOut))
    }
}

/// Implements `Future` and `FusedFuture` for a public future wrapping `Acquire` or `Timed`.
macro_rules! request_future {
    ($name:ident, $inner:ident) => {
        impl Future for $name {
            type Output = Result<(), TakeError>;

            #[inline]
            fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
                self.project().inner.poll_request(cx)
            }
        }

        impl FusedFuture for $name {
            fn is_terminated(&self) -> bool {
                self.inner.is_done()
            }
        }

        impl $name {
            #[inline]
            pub(crate) fn new(request: (Arc<Shared>, Request)) -> $name {
                $name {
                    inner: $inner::new(request),
                }
            }
        }
    };
}

/// The future of [`TokenBucket::take`](crate::TokenBucket::take): resolves once its tokens are taken.
///
/// It owns a handle to the bucket, so it is `Send + 'static` and can be stored or spawned.
/// It takes its place in the queue on the first poll. After completing it implements
/// [`FusedFuture`]: further polls return `Pending`.
///
/// # Panics
///
/// On its first poll, when it must wait inside a tokio runtime built without time, as
/// [`TokenBucket::take`](crate::TokenBucket::take) says.
///
/// # Cancel safety
///
/// Cancel safe: dropping it at any point takes no tokens and never blocks the queue. A
/// grant it had not seen yet is given back, exactly when it was the last grant made and
/// nothing came back since, else as far as the room since the oldest grant unseen
/// allows: see [`TokenBucket::take`](crate::TokenBucket::take) for the rule.
///
/// ```
/// use token_bucket::{Rate, Take, TokenBucket};
///
/// // A named future can be stored in a struct without boxing.
/// struct Pending {
///     permit: Take,
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let bucket = TokenBucket::new(Rate::per_second(10), 1)?;
/// let pending = Pending { permit: bucket.take(1) };
/// pending.permit.await?;
/// # Ok(())
/// # }
/// ```
#[pin_project]
#[must_use = "futures do nothing unless you `.await` or poll them"]
#[derive(Debug)]
pub struct Take {
    #[pin]
    inner: Acquire,
}
request_future!(Take, Acquire);

/// The future of [`TokenBucket::wait`](crate::TokenBucket::wait): resolves once its tokens are in the bucket, taking
/// none.
///
/// It owns a handle to the bucket, so it is `Send + 'static`. It takes its place in the
/// queue on the first poll, and is a [`FusedFuture`].
///
/// # Panics
///
/// On its first poll, when it must wait inside a tokio runtime built without time, as
/// [`TokenBucket::wait`](crate::TokenBucket::wait) says.
///
/// # Cancel safety
///
/// Cancel safe: dropping it at any point never blocks the queue.
///
/// ```
/// use token_bucket::{Rate, TokenBucket, Wait};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let bucket = TokenBucket::new(Rate::per_second(10), 5)?;
/// let ready: Wait = bucket.wait(5);
/// ready.await?;
/// assert_eq!(bucket.available(), 5);
/// # Ok(())
/// # }
/// ```
#[pin_project]
#[must_use = "futures do nothing unless you `.await` or poll them"]
#[derive(Debug)]
pub struct Wait {
    #[pin]
    inner: Acquire,
}
request_future!(Wait, Acquire);

/// The future of [`TokenBucket::take_timeout`](crate::TokenBucket::take_timeout): as [`Take`], but gives up at its deadline.
///
/// It is `Send + 'static` and a [`FusedFuture`]; it holds a tokio timer, so it is not
/// `Unpin` (pin it with `std::pin::pin!` or `Box::pin` to poll it by hand).
///
/// # Panics
///
/// On its first poll, when it must wait inside a tokio runtime built without time, as
/// [`TokenBucket::take_timeout`](crate::TokenBucket::take_timeout) says.
///
/// # Cancel safety
///
/// Cancel safe, as [`Take`]. Timing out leaves the queue at the deadline's instant without
/// blocking those behind and takes no tokens.
///
/// ```
/// use std::time::Duration;
/// use token_bucket::{Rate, TakeTimeout, TokenBucket};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let bucket = TokenBucket::new(Rate::per_second(10), 5)?;
/// let permit: TakeTimeout = bucket.take_timeout(5, Duration::from_secs(1));
/// permit.await?;
/// # Ok(())
/// # }
/// ```
#[pin_project]
#[must_use = "futures do nothing unless you `.await` or poll them"]
#[derive(Debug)]
pub struct TakeTimeout {
    #[pin]
    inner: Timed,
}
request_future!(TakeTimeout, Timed);

/// The future of [`TokenBucket::wait_timeout`](crate::TokenBucket::wait_timeout): as [`Wait`], but gives up at its
/// deadline.
///
/// It is `Send + 'static` and a [`FusedFuture`]; it holds a tokio timer, so it is not
/// `Unpin`.
///
/// # Panics
///
/// On its first poll, when it must wait inside a tokio runtime built without time, as
/// [`TokenBucket::wait_timeout`](crate::TokenBucket::wait_timeout) says.
///
/// # Cancel safety
///
/// Cancel safe, as [`Wait`].
///
/// ```
/// use std::time::Duration;
/// use token_bucket::{Rate, TokenBucket, WaitTimeout};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let bucket = TokenBucket::new(Rate::per_second(10), 5)?;
/// let ready: WaitTimeout = bucket.wait_timeout(5, Duration::from_secs(1));
/// ready.await?;
/// # Ok(())
/// # }
/// ```
#[pin_project]
#[must_use = "futures do nothing unless you `.await` or poll them"]
#[derive(Debug)]
pub struct WaitTimeout {
    #[pin]
    inner: Timed,
}
request_future!(WaitTimeout, Timed);

/// A future that resolves once a [`TokenBucket`](crate::TokenBucket) is
/// [closed](crate::TokenBucket::close) (or every handle to it is dropped): made by
/// [`TokenBucket::closed`](crate::TokenBucket::closed).
///
/// It is `Send`, `Sync`, `'static` and `Unpin`, and fused: polled again after it resolved,
/// it resolves again at once.
///
/// # Cancel safety
///
/// Cancel safe: dropping it only stops listening.
///
/// # Examples
///
/// ```
/// use futures::future::{select, Either};
/// use std::pin::pin;
/// use token_bucket::{Closed, Rate, TokenBucket};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
/// let (sender, receiver) = tokio::sync::oneshot::channel::<&str>();
/// // Wait for a message, or for the bucket to close, whichever comes first.
/// let closed: Closed = bucket.closed();
/// bucket.close();
/// match select(closed, pin!(receiver)).await {
///     Either::Left(((), _)) => assert!(bucket.is_closed()),
///     Either::Right(_) => unreachable!("nothing was sent"),
/// }
/// # drop(sender);
/// # Ok(())
/// # }
/// ```
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct Closed {
    /// `None` once resolved.
    pub(crate) signal: Option<CloseSignal>,
}

impl Future for Closed {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(signal) = &mut self.signal {
            // `Ok` for a close, `Err(Canceled)` when the bucket was dropped: both end it.
            let _ = ready!(Pin::new(signal).poll(cx));
            self.signal = None;
        }
        Poll::Ready(())
    }
}

impl FusedFuture for Closed {
    fn is_terminated(&self) -> bool {
        self.signal.is_none()
    }
}

impl fmt::Debug for Closed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let resolved = self
            .signal
            .as_ref()
            .map_or(true, |signal| signal.peek().is_some());
        f.debug_struct("Closed").field("closed", &resolved).finish()
    }
}
