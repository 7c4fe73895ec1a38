//! Throttling a [`Sink`]: each item sent costs one token.
//!
//! [`TokenBucket::throttle_sink`] wraps a sink so that it accepts an item only once a
//! token is taken for it.
//!
//! ```
//! use futures::{channel::mpsc, SinkExt, StreamExt};
//! use std::time::Duration;
//! use token_bucket::{Rate, TokenBucket};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let bucket = TokenBucket::new(Rate::per_second(10), 1)?;
//! let (sender, receiver) = mpsc::unbounded();
//! let mut sink = bucket.throttle_sink(sender);
//! let start = tokio::time::Instant::now();
//! for message in ["a", "b", "c"] {
//!     sink.send(message).await?;
//! }
//! // One from the full bucket, then one every 100 ms.
//! assert_eq!(start.elapsed(), Duration::from_millis(200));
//! drop(sink);
//! assert_eq!(receiver.collect::<Vec<_>>().await, ["a", "b", "c"]);
//! # Ok(())
//! # }
//! ```
//!
//! # Design
//!
//! A sink learns about an item only in `start_send`, which cannot wait. So the token is
//! reserved in `poll_ready`, which can: it waits on a stored [`Take`] (`Unpin`, kept
//! inline, nothing boxed), and only once the token is taken does it ask the inner sink
//! whether it is ready. `start_send` then spends the reserved token. Because the wait is
//! an ordinary [`take`](TokenBucket::take), the sink shares the bucket's FIFO queue with
//! everyone else.
//!
//! A token reserved but never spent (the sink dropped or closed before `start_send`, or
//! the inner sink's `start_send` refusing the item) is [refunded](TokenBucket::refund),
//! and a pending `Take` is cancel safe, so abandoning the sink at any point loses no
//! tokens.

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures::sink::Sink;
use pin_project::pin_project;

use crate::bucket::{Take, TokenBucket};
use crate::error::TakeError;

impl TokenBucket {
    /// Throttles `sink`: each item sent costs one token, reserved in `poll_ready` before
    /// the inner sink is asked whether it is ready.
    ///
    /// The adapter holds a handle to this bucket and waits in its FIFO queue like any
    /// other `take`. See [`ThrottleSink`] for its errors and what dropping it does.
    ///
    /// # Panics
    ///
    /// Polled where it must wait, inside a tokio runtime built without time (no
    /// `enable_time`), it panics as [`TokenBucket::take`] does: nothing could ever wake it.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures::{sink, SinkExt};
    /// use std::time::Duration;
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::builder().rate(Rate::per_second(4)).capacity(4).initial(0).build()?;
    /// let mut sink = bucket.throttle_sink(sink::drain());
    /// let start = tokio::time::Instant::now();
    /// sink.send(1).await?;
    /// sink.send(2).await?;
    /// assert_eq!(start.elapsed(), Duration::from_millis(500));
    /// # Ok(())
    /// # }
    /// ```
    pub fn throttle_sink<Si>(&self, sink: Si) -> ThrottleSink<Si> {
        ThrottleSink {
            sink,
            permit: Permit {
                bucket: self.clone(),
                take: None,
                reserved: false,
            },
        }
    }
}

/// The token for the next item: being taken, reserved, or neither.
///
/// A separate type with its own `Drop`, rather than a `PinnedDrop` on the adapter, so the
/// adapter implements no `Drop` itself and `into_inner` can move the sink out of it.
#[derive(Debug)]
struct Permit {
    bucket: TokenBucket,
    /// The `take(1)` under way in `poll_ready`.
    take: Option<Take>,
    /// Whether a token is taken and not yet spent by `start_send`.
    reserved: bool,
}

impl Permit {
    /// Reserves a token for the next item, waiting for it if it must.
    fn poll_reserve(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TakeError>> {
        if self.reserved {
            return Poll::Ready(Ok(()));
        }
        let bucket = &self.bucket;
        let take = self.take.get_or_insert_with(|| bucket.take(1));
        let result = ready!(Pin::new(take).poll(cx));
        self.take = None;
        self.reserved = result.is_ok();
        Poll::Ready(result)
    }

    /// Spends the reserved token on an item; false if there was none.
    fn spend(&mut self) -> bool {
        std::mem::replace(&mut self.reserved, false)
    }

    /// No item will come for the token: stop waiting for it, and give it back if taken.
    fn release(&mut self) {
        // Cancel safe: a pending `Take` takes nothing when dropped.
        self.take = None;
        if self.spend() {
            self.bucket.refund(1);
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.release();
    }
}

/// A sink throttled by a [`TokenBucket`], each item costing one token: made by
/// [`TokenBucket::throttle_sink`].
///
/// `poll_ready` first waits for a token (taking it, in the bucket's FIFO queue), then
/// polls the inner sink's `poll_ready`; `start_send` spends that token, or
/// [refunds](TokenBucket::refund) it when the inner sink's `start_send` fails (the item
/// was not accepted). A token once taken stays reserved until an item is sent, so calling
/// `poll_ready` again, or an inner sink that is not ready yet, takes no second token.
/// `poll_flush` and `poll_close` pass through; `poll_close` first refunds a reserved
/// token, since no item will come for it.
///
/// # Errors
///
/// [`ThrottleSinkError::Bucket`] when the bucket refuses the token: it is
/// [closed](TokenBucket::close), or the wait had to happen outside a tokio runtime, or
/// queueing would pass the bucket's [queue limit](crate::Builder::queue_limit).
/// [`ThrottleSinkError::Sink`] for the inner sink's own errors (when its `start_send`
/// fails, the item's token is refunded). [`ThrottleSinkError::NotReady`] when
/// `start_send` is called without a token reserved by `poll_ready` (a breach of the `Sink`
/// contract); the item is then not sent.
///
/// It is `Unpin` when the inner sink is, and `Send` when it is.
///
/// # Cancel safety
///
/// Dropping it at any point loses no tokens: a `poll_ready` still waiting drops its
/// cancel-safe [`Take`], which takes nothing, and a token reserved by `poll_ready` but
/// never spent on an accepted item is [refunded](TokenBucket::refund).
///
/// # Examples
///
/// ```
/// use futures::{sink, SinkExt};
/// use token_bucket::{sink::{ThrottleSink, ThrottleSinkError}, Rate, TakeError, TokenBucket};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
/// let mut sink: ThrottleSink<sink::Drain<u32>> = bucket.throttle_sink(sink::drain());
/// sink.send(1).await?;
/// bucket.close();
/// assert_eq!(sink.send(2).await, Err(ThrottleSinkError::Bucket(TakeError::Closed)));
/// # Ok(())
/// # }
/// ```
#[pin_project]
#[must_use = "sinks do nothing unless polled"]
#[derive(Debug)]
pub struct ThrottleSink<Si> {
    #[pin]
    sink: Si,
    permit: Permit,
}

impl<Si> ThrottleSink<Si> {
    /// The inner sink.
    ///
    /// ```
    /// use futures::channel::mpsc;
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
    /// let (sender, _receiver) = mpsc::unbounded::<u32>();
    /// let sink = bucket.throttle_sink(sender);
    /// assert!(!sink.get_ref().is_closed());
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn get_ref(&self) -> &Si {
        &self.sink
    }

    /// The inner sink, mutably. Sending through it directly bypasses the throttle.
    ///
    /// ```
    /// use futures::channel::mpsc;
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
    /// let (sender, receiver) = mpsc::unbounded::<u32>();
    /// let mut sink = bucket.throttle_sink(sender);
    /// sink.get_mut().close_channel();
    /// assert!(sink.get_ref().is_closed());
    /// # drop(receiver);
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn get_mut(&mut self) -> &mut Si {
        &mut self.sink
    }

    /// The inner sink, pinned, for sinks that are not `Unpin`. Sending through it directly
    /// bypasses the throttle.
    ///
    /// ```
    /// use futures::sink;
    /// use std::pin::pin;
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
    /// let mut sink = pin!(bucket.throttle_sink(sink::drain::<u32>()));
    /// let _inner = sink.as_mut().get_pin_mut();
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn get_pin_mut(self: Pin<&mut Self>) -> Pin<&mut Si> {
        self.project().sink
    }

    /// The inner sink. A token reserved by `poll_ready` and not yet spent is refunded.
    ///
    /// ```
    /// use futures::{channel::mpsc, SinkExt, StreamExt};
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
    /// let (sender, receiver) = mpsc::unbounded();
    /// let mut sink = bucket.throttle_sink(sender);
    /// sink.send("throttled").await?;
    /// let mut sender = sink.into_inner();
    /// sender.send("not throttled").await?;
    /// drop(sender);
    /// assert_eq!(receiver.collect::<Vec<_>>().await, ["throttled", "not throttled"]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn into_inner(self) -> Si {
        // `permit` is dropped here, which refunds a reserved token.
        let ThrottleSink { sink, .. } = self;
        sink
    }
}

impl<Si, Item> Sink<Item> for ThrottleSink<Si>
where
    Si: Sink<Item>,
{
    type Error = ThrottleSinkError<Si::Error>;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        let this = self.project();
        // The token first: asking the inner sink first could leave it reserved for us (a
        // bounded channel's slot, say) all the while we wait for the token.
        ready!(this.permit.poll_reserve(cx)).map_err(ThrottleSinkError::Bucket)?;
        this.sink.poll_ready(cx).map_err(ThrottleSinkError::Sink)
    }

    fn start_send(self: Pin<&mut Self>, item: Item) -> Result<(), Self::Error> {
        let this = self.project();
        if !this.permit.spend() {
            return Err(ThrottleSinkError::NotReady);
        }
        this.sink.start_send(item).map_err(|error| {
            // The item was not accepted: the token it would have spent goes back.
            this.permit.bucket.refund(1);
            ThrottleSinkError::Sink(error)
        })
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.project()
            .sink
            .poll_flush(cx)
            .map_err(ThrottleSinkError::Sink)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        let this = self.project();
        // Nothing will be sent after a close: a reserved token would be wasted.
        this.permit.release();
        this.sink.poll_close(cx).map_err(ThrottleSinkError::Sink)
    }
}

/// Why a [`ThrottleSink`] did not accept or deliver an item.
///
/// ```
/// use futures::{channel::mpsc, SinkExt};
/// use token_bucket::{sink::ThrottleSinkError, Rate, TokenBucket};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
/// let (sender, receiver) = mpsc::unbounded::<u32>();
/// drop(receiver);
/// let mut sink = bucket.throttle_sink(sender);
/// match sink.send(1).await {
///     Err(ThrottleSinkError::Sink(error)) => assert!(error.is_disconnected()),
///     other => panic!("unexpected {other:?}"),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ThrottleSinkError<E> {
    /// The inner sink failed.
    Sink(E),
    /// The bucket refused the token: it is [closed](TokenBucket::close)
    /// ([`TakeError::Closed`]), or the wait had to happen outside a tokio runtime
    /// ([`TakeError::NoRuntime`]), or queueing would pass its
    /// [queue limit](crate::Builder::queue_limit) ([`TakeError::QueueFull`]).
    Bucket(TakeError),
    /// `start_send` was called without a token reserved by a `poll_ready` that returned
    /// `Ready(Ok(()))`; the item was not sent.
    NotReady,
}

impl<E: fmt::Display> fmt::Display for ThrottleSinkError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ThrottleSinkError::Sink(error) => write!(f, "the throttled sink failed: {error}"),
            ThrottleSinkError::Bucket(error) => {
                write!(f, "the token bucket refused to throttle the sink: {error}")
            }
            ThrottleSinkError::NotReady => f.write_str(
                "start_send was called on a throttled sink without a token reserved by poll_ready",
            ),
        }
    }
}

/// The inner error's message is part of this one's, so it is not repeated as a
/// [`source`](Error::source).
impl<E: fmt::Debug + fmt::Display> Error for ThrottleSinkError<E> {}
