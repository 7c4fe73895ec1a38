//! Throttling a [`Stream`]: each item costs tokens, paid before it is yielded.
//!
//! [`TokenBucket::throttle`] charges one token an item; [`TokenBucket::throttle_by`] asks
//! a function what each item costs (its length in bytes, say).
//!
//! ```
//! use futures::{stream, StreamExt};
//! use std::time::Duration;
//! use token_bucket::{Rate, TokenBucket};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // 1 KiB a second, in bursts of up to 1 KiB; the bucket starts full.
//! let bucket = TokenBucket::new(Rate::per_second(1024), 1024)?;
//! let chunks = stream::iter(vec![vec![0u8; 1024]; 4]);
//! let start = tokio::time::Instant::now();
//! let sent: Vec<Vec<u8>> = bucket.throttle_by(chunks, |chunk| chunk.len() as u64).collect().await;
//! assert_eq!(sent.len(), 4);
//! // The first chunk from the full bucket, then one a second.
//! assert_eq!(start.elapsed(), Duration::from_secs(3));
//! # Ok(())
//! # }
//! ```
//!
//! # Design
//!
//! [`ThrottleBy`] is a small state machine around one stored [`Take`] future, which is
//! `Unpin` and so sits inline in an `Option`: nothing is boxed per item.
//!
//! 1. With no item in hand it pulls the next item from the inner stream and asks the cost
//!    function what it costs. Pulling first is what lets the cost depend on the item, and
//!    it means a stream with nothing to say holds no tokens and no place in the queue.
//! 2. It pays with [`TokenBucket::take`] in installments of at most the bucket's capacity
//!    and [queue limit](crate::Builder::queue_limit), so an item costing more than a
//!    bucketful is delayed in proportion rather than refused, and the adapter alone never
//!    trips the limit. Being an ordinary `take`, each installment waits in the same FIFO
//!    queue as every other user of the bucket. With a queue limit of 0 nothing may wait,
//!    so an installment is served at once, in full, or refused before it takes anything;
//!    byte I/O pays by the same rule.
//! 3. Once paid, it yields the item. Items come out in the order they went in.
//!
//! While the inner stream has nothing to say, the adapter also listens for the bucket's
//! [close](TokenBucket::closed), so a close ends it at once rather than at the inner
//! stream's next item.
//!
//! When the bucket is closed, the adapter ends: an item already pulled is still yielded
//! (the close limits nothing any more), and nothing more is pulled, so
//! [`ThrottleBy::into_inner`] gives back the stream with every item not yet seen. When the
//! bucket refuses it for another reason (a full queue, no runtime; see
//! [`ThrottleBy::end_reason`]) the item it holds is *not* yielded unpaid: the adapter ends
//! and keeps it, for [`ThrottleBy::into_parts`] to give back.
//!
//! Dropping the adapter mid-wait loses no tokens: the pending `Take` is cancel safe, and
//! installments already paid for the item in hand are [refunded](TokenBucket::refund).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures::stream::{FusedStream, Stream};
use pin_project::pin_project;

use crate::bucket::{Closed, Take, TokenBucket};
use crate::error::TakeError;
use crate::throttle::installment::installment;

impl TokenBucket {
    /// Throttles `stream`: each item costs one token, taken before the item is yielded.
    ///
    /// The adapter holds a handle to this bucket and waits in its FIFO queue like any
    /// other `take`. See [`Throttle`] for how it ends and what dropping it does.
    ///
    /// # Panics
    ///
    /// Polled where it must wait, inside a tokio runtime built without time (no
    /// `enable_time`), it panics as [`TokenBucket::take`] does: nothing could ever wake it.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures::{stream, StreamExt};
    /// use std::time::Duration;
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // 5 items a second, one at a time.
    /// let bucket = TokenBucket::new(Rate::per_second(5), 1)?;
    /// let start = tokio::time::Instant::now();
    /// let items: Vec<u32> = bucket.throttle(stream::iter(1..=10)).collect().await;
    /// assert_eq!(items, (1..=10).collect::<Vec<_>>());
    /// // The first from the full bucket, then one every 200 ms.
    /// assert_eq!(start.elapsed(), Duration::from_millis(1800));
    /// # Ok(())
    /// # }
    /// ```
    pub fn throttle<S: Stream>(&self, stream: S) -> Throttle<S> {
        Throttle {
            inner: self.throttle_by(stream, one::<S::Item>),
        }
    }

    /// Throttles `stream`, each item costing what `cost` says, taken before the item is
    /// yielded.
    ///
    /// `cost` is called once per item, after the item is pulled from `stream`. A cost of 0
    /// passes at once without touching the bucket; a cost above the capacity (or the
    /// [queue limit](crate::Builder::queue_limit)) is taken in installments of at most
    /// that. See [`ThrottleBy`] for how it ends and what dropping it does.
    ///
    /// # Panics
    ///
    /// Polled where it must wait, inside a tokio runtime built without time (no
    /// `enable_time`), it panics as [`TokenBucket::take`] does: nothing could ever wake it.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures::{stream, StreamExt};
    /// use std::time::Duration;
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // 100 bytes a second; the bucket starts empty.
    /// let bucket = TokenBucket::builder().rate(Rate::per_second(100)).capacity(100).initial(0).build()?;
    /// let lines = stream::iter(["twenty bytes of text", "ten bytes!"]);
    /// let mut throttled = bucket.throttle_by(lines, |line| line.len() as u64);
    /// let start = tokio::time::Instant::now();
    /// assert_eq!(throttled.next().await, Some("twenty bytes of text"));
    /// assert_eq!(start.elapsed(), Duration::from_millis(200));
    /// assert_eq!(throttled.next().await, Some("ten bytes!"));
    /// assert_eq!(start.elapsed(), Duration::from_millis(300));
    /// # Ok(())
    /// # }
    /// ```
    pub fn throttle_by<S, F>(&self, stream: S, cost: F) -> ThrottleBy<S, F>
    where
        S: Stream,
        F: FnMut(&S::Item) -> u64,
    {
        ThrottleBy {
            stream,
            cost,
            toll: Toll::new(self.clone()),
            item: None,
            run: Run::Running,
        }
    }
}

/// The cost function of [`Throttle`]: every item costs one token.
fn one<T>(_: &T) -> u64 {
    1
}

/// Whether a [`ThrottleBy`] still runs, and if not, why not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    Running,
    /// The inner stream ended.
    Exhausted,
    /// The bucket could not serve it.
    Ended(TakeError),
}

/// Paying for the item in hand: what is still owed, what is paid, and the installment in
/// flight.
///
/// A separate type with its own `Drop`, rather than a `PinnedDrop` on the adapter, so the
/// adapter implements no `Drop` itself and `into_inner` can move the stream out of it.
#[derive(Debug)]
struct Toll {
    bucket: TokenBucket,
    /// Resolves when the bucket closes: polled while the inner stream is pending.
    closed: Closed,
    /// The installment being taken, and how many tokens it is for.
    installment: Option<(Take, u64)>,
    /// Tokens still to take for the item in hand.
    owed: u64,
    /// Tokens already taken for the item in hand: refunded if it is never yielded.
    paid: u64,
}

impl Toll {
    fn new(bucket: TokenBucket) -> Toll {
        Toll {
            closed: bucket.closed(),
            bucket,
            installment: None,
            owed: 0,
            paid: 0,
        }
    }

    /// Starts paying for a new item.
    fn charge(&mut self, cost: u64) {
        debug_assert!(self.installment.is_none() && self.owed == 0 && self.paid == 0);
        self.owed = cost;
    }

    /// Takes what is owed, an installment at a time. `Ready(Ok)` once all of it is taken,
    /// at once for a cost of 0; `Ready(Err)` when the bucket cannot serve it.
    fn poll_pay(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TakeError>> {
        loop {
            if let Some((take, tokens)) = &mut self.installment {
                let tokens = *tokens;
                let result = ready!(Pin::new(take).poll(cx));
                self.installment = None;
                match result {
                    Ok(()) => {
                        self.owed -= tokens;
                        self.paid += tokens;
                    }
                    // The capacity was lowered below this installment after it was sized
                    // (or while it waited): size the next one by the new capacity.
                    Err(TakeError::ExceedsCapacity { .. }) => {}
                    Err(error) => return Poll::Ready(Err(error)),
                }
            }
            if self.owed == 0 {
                // Paid in full: the tokens now belong to the item about to be yielded.
                self.paid = 0;
                return Poll::Ready(Ok(()));
            }
            let tokens = installment(&self.bucket, self.owed);
            self.installment = Some((self.bucket.take(tokens), tokens));
        }
    }

    /// Whether the bucket has closed, registering to be woken when it does.
    fn poll_closed(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.closed).poll(cx)
    }

    /// The item in hand is yielded although not fully paid for (the bucket closed, so it
    /// limits nothing any more): what was paid went to it, and nothing more is owed.
    fn forgive(&mut self) {
        self.installment = None;
        self.owed = 0;
        self.paid = 0;
    }

    /// The item in hand will never be yielded through the bucket: give up the installment
    /// in flight and give back what was paid.
    fn cancel(&mut self) {
        // Drop the pending `Take` first (cancel safe: it takes nothing, and a grant it had
        // not seen goes back), so the refund below cannot be spent on our own request.
        self.installment = None;
        self.owed = 0;
        let paid = std::mem::take(&mut self.paid);
        if paid > 0 {
            self.bucket.refund(paid);
        }
    }
}

impl Drop for Toll {
    fn drop(&mut self) {
        self.cancel();
    }
}

/// A stream throttled by a [`TokenBucket`], each item costing what a function says: made
/// by [`TokenBucket::throttle_by`].
///
/// Items come out in order, each once its tokens are taken. The cost is asked for after
/// the item is pulled from the inner stream; a cost of 0 passes at once, and a larger cost
/// is taken in installments of at most the bucket's capacity and its
/// [queue limit](crate::Builder::queue_limit) (both read afresh for each installment, and
/// an installment refused because the capacity was lowered meanwhile is retried at the new
/// capacity). So a cost above either is delayed in proportion, never refused, and the
/// adapter on its own never fills the queue past its limit. A queue limit of 0 does not
/// shrink installments: nothing may wait, so each is served at once, in full, or refused
/// ([`TakeError::QueueFull`]) having taken nothing. Installments wait in the
/// bucket's FIFO queue like any other [`take`](TokenBucket::take), so other users of the
/// bucket can be served between them.
///
/// # Ending
///
/// Once it ends, `poll_next` returns `None` for good and
/// [`end_reason`](ThrottleBy::end_reason) says why. It ends in one of three ways:
///
/// - **The inner stream ends.** `end_reason` is `None`.
/// - **The bucket is closed** ([`TakeError::Closed`]). An item already pulled and waiting
///   for its tokens is still yielded first: a closed bucket limits nothing any more, and
///   the item is not lost. Nothing more is pulled: the close is seen before the next item
///   is pulled, and also while the inner stream has nothing to say (the adapter listens
///   for [`TokenBucket::closed`] then), so it ends at the instant of the close even if the
///   inner stream would stay pending for ever, and [`into_inner`](ThrottleBy::into_inner)
///   gives back every item not yet yielded.
/// - **The bucket refuses an installment for another reason**: queueing it would pass the
///   queue limit ([`TakeError::QueueFull`]; only possible while others are queued too, or
///   with a limit of 0, and possibly only for a moment), or it had to wait outside a
///   tokio runtime ([`TakeError::NoRuntime`]). This is load shedding, and the adapter does
///   not decide what to do about it: the item it holds is **not** yielded, since it was
///   not paid for, the installments already paid for it are
///   [refunded](TokenBucket::refund), and the adapter ends keeping the item.
///   [`into_parts`](ThrottleBy::into_parts) gives it back, with the inner stream and every
///   item after it, for the caller to retry later, send elsewhere or drop.
///
/// It is `Unpin` when the inner stream is, `Send` when the stream, its items and the cost
/// function are, and a [`FusedStream`].
///
/// Its `size_hint` is advisory but never wrong: the upper bound is the inner stream's plus
/// the item held, if any, and the lower bound is 0, since the bucket can end the adapter
/// at any time (a close, a refusal) and a refused item is not yielded.
///
/// # Cancel safety
///
/// Dropping it at any point loses no tokens: a pending installment is a cancel-safe
/// [`Take`], which takes nothing when dropped, and installments already paid for an item
/// that was never yielded are [refunded](TokenBucket::refund) (as far as the capacity
/// allows; a refund never fills the bucket past it). The item in hand is dropped with the
/// adapter; [`into_parts`](ThrottleBy::into_parts) gives it back instead.
///
/// # Examples
///
/// ```
/// use futures::{stream, StreamExt};
/// use std::time::Duration;
/// use token_bucket::{Rate, stream::ThrottleBy, TokenBucket};
///
/// // A named type can be stored in a struct.
/// struct Uploader<S: futures::Stream> {
///     chunks: ThrottleBy<S, fn(&Vec<u8>) -> u64>,
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let bucket = TokenBucket::builder().rate(Rate::per_second(10)).capacity(10).initial(0).build()?;
/// let cost: fn(&Vec<u8>) -> u64 = |chunk| chunk.len() as u64;
/// let mut uploader = Uploader {
///     chunks: bucket.throttle_by(stream::iter(vec![vec![1; 25], vec![2; 5]]), cost),
/// };
/// let start = tokio::time::Instant::now();
/// // 25 bytes in installments of 10: 2.5 s at 10 a second.
/// assert_eq!(uploader.chunks.next().await, Some(vec![1; 25]));
/// assert_eq!(start.elapsed(), Duration::from_millis(2500));
/// assert_eq!(uploader.chunks.next().await, Some(vec![2; 5]));
/// assert_eq!(start.elapsed(), Duration::from_secs(3));
/// assert_eq!(uploader.chunks.next().await, None);
/// # Ok(())
/// # }
/// ```
#[pin_project]
#[must_use = "streams do nothing unless polled"]
pub struct ThrottleBy<S: Stream, F> {
    #[pin]
    stream: S,
    cost: F,
    toll: Toll,
    /// The item pulled from `stream` and not yet yielded; yielded once paid for.
    item: Option<S::Item>,
    run: Run,
}

impl<S: Stream, F> ThrottleBy<S, F> {
    /// Why the adapter ended, if the bucket ended it: [`TakeError::Closed`] (after
    /// yielding the item it held), or [`TakeError::QueueFull`] or [`TakeError::NoRuntime`]
    /// (keeping the item it held, for [`into_parts`](ThrottleBy::into_parts)). `None`
    /// while it runs and when the inner stream ended on its own. See
    /// [Ending](ThrottleBy#ending).
    ///
    /// ```
    /// use futures::{stream, StreamExt};
    /// use token_bucket::{Rate, TakeError, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
    /// let mut throttled = bucket.throttle_by(stream::iter([1, 2, 3]), |_| 1);
    /// assert_eq!(throttled.next().await, Some(1));
    /// assert_eq!(throttled.end_reason(), None);
    /// bucket.close();
    /// assert_eq!(throttled.next().await, None);
    /// assert_eq!(throttled.end_reason(), Some(TakeError::Closed));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// A full queue sheds the item held rather than letting it through unpaid:
    ///
    /// ```
    /// use futures::{stream, StreamExt};
    /// use token_bucket::{Rate, TakeError, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::builder()
    ///     .rate(Rate::per_second(10))
    ///     .capacity(10)
    ///     .initial(0)
    ///     .queue_limit(10)
    ///     .build()?;
    /// // Someone else fills the queue.
    /// let mut other = bucket.take(10);
    /// assert!(futures::poll!(&mut other).is_pending());
    /// let mut throttled = bucket.throttle_by(stream::iter(["a", "b"]), |_| 1);
    /// assert_eq!(throttled.next().await, None);
    /// assert_eq!(throttled.end_reason(), Some(TakeError::QueueFull { queued: 10, limit: 10 }));
    /// // The caller decides: here, retry once the queue has room.
    /// let (rest, held) = throttled.into_parts();
    /// assert_eq!(held, Some("a"));
    /// other.await?;
    /// let retried = bucket.throttle_by(stream::iter(held).chain(rest), |_| 1);
    /// assert_eq!(retried.collect::<Vec<_>>().await, ["a", "b"]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn end_reason(&self) -> Option<TakeError> {
        match self.run {
            Run::Ended(error) => Some(error),
            Run::Running | Run::Exhausted => None,
        }
    }

    /// The inner stream.
    ///
    /// ```
    /// use futures::stream;
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
    /// let throttled = bucket.throttle_by(stream::iter([1, 2, 3]), |_| 1);
    /// assert_eq!(futures::Stream::size_hint(throttled.get_ref()), (3, Some(3)));
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn get_ref(&self) -> &S {
        &self.stream
    }

    /// The inner stream, mutably. Taking items from it directly bypasses the throttle.
    ///
    /// ```
    /// use futures::{stream, StreamExt};
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
    /// let mut throttled = bucket.throttle_by(stream::iter([1, 2, 3]), |_| 1);
    /// assert_eq!(throttled.get_mut().next().await, Some(1)); // not throttled
    /// assert_eq!(throttled.next().await, Some(2));
    /// # Ok(())
    /// # }
    /// ```
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.stream
    }

    /// The inner stream, pinned, for streams that are not `Unpin`. Taking items from it
    /// directly bypasses the throttle.
    ///
    /// ```
    /// use futures::{stream, Stream};
    /// use std::pin::pin;
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
    /// let mut throttled = pin!(bucket.throttle_by(stream::iter([1, 2, 3]), |_| 1));
    /// assert_eq!(throttled.as_mut().get_pin_mut().size_hint(), (3, Some(3)));
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn get_pin_mut(self: Pin<&mut Self>) -> Pin<&mut S> {
        self.project().stream
    }

    /// The inner stream, with every item not yet pulled from it.
    ///
    /// An item already pulled and still waiting for its tokens is dropped, and the
    /// installments paid for it are refunded; [`into_parts`](ThrottleBy::into_parts)
    /// keeps it.
    ///
    /// ```
    /// use futures::{stream, StreamExt};
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
    /// let mut throttled = bucket.throttle_by(stream::iter([1, 2, 3]), |_| 1);
    /// assert_eq!(throttled.next().await, Some(1));
    /// let rest: Vec<i32> = throttled.into_inner().collect().await;
    /// assert_eq!(rest, [2, 3]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn into_inner(self) -> S {
        self.into_parts().0
    }

    /// The inner stream, and the item already pulled from it but not yet yielded, if any:
    /// one still waiting for its tokens, or one the bucket refused (see
    /// [Ending](ThrottleBy#ending)).
    ///
    /// The installments paid for that item are refunded: it leaves without passing the
    /// throttle.
    ///
    /// ```
    /// use futures::{stream, StreamExt};
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::builder().rate(Rate::per_second(1)).capacity(1).initial(0).build()?;
    /// let mut throttled = bucket.throttle_by(stream::iter([1, 2, 3]), |_| 1);
    /// // Poll once: item 1 is pulled and waits for its token.
    /// assert_eq!(futures::poll!(throttled.next()), std::task::Poll::Pending);
    /// let (rest, held) = throttled.into_parts();
    /// assert_eq!(held, Some(1));
    /// assert_eq!(rest.collect::<Vec<_>>().await, [2, 3]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn into_parts(self) -> (S, Option<S::Item>) {
        // `toll` is dropped here, which cancels the installment in flight and refunds.
        let ThrottleBy { stream, item, .. } = self;
        (stream, item)
    }
}

impl<S, F> Stream for ThrottleBy<S, F>
where
    S: Stream,
    F: FnMut(&S::Item) -> u64,
{
    type Item = S::Item;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let this = self.project();
        if *this.run != Run::Running {
            // An item still held here was refused by the bucket: `into_parts` gives it back.
            return Poll::Ready(None);
        }
        if this.item.is_none() {
            // Pull nothing the bucket can no longer pay for: the item stays in the inner
            // stream, where `into_inner` gives it back.
            if this.toll.bucket.is_closed() {
                *this.run = Run::Ended(TakeError::Closed);
                return Poll::Ready(None);
            }
            match this.stream.poll_next(cx) {
                Poll::Ready(Some(item)) => {
                    this.toll.charge((this.cost)(&item));
                    *this.item = Some(item);
                }
                Poll::Ready(None) => {
                    *this.run = Run::Exhausted;
                    return Poll::Ready(None);
                }
                Poll::Pending => {
                    // The inner stream may stay pending for ever (a channel whose sender
                    // lives on): listen for the close too, so that it ends us at once.
                    if this.toll.poll_closed(cx).is_ready() {
                        *this.run = Run::Ended(TakeError::Closed);
                        return Poll::Ready(None);
                    }
                    return Poll::Pending;
                }
            }
        }
        match ready!(this.toll.poll_pay(cx)) {
            Ok(()) => {}
            Err(TakeError::Closed) => {
                // A closed bucket limits nothing any more. The item is out of the inner
                // stream, so it is yielded rather than lost, and the adapter ends after it.
                this.toll.forgive();
                *this.run = Run::Ended(TakeError::Closed);
            }
            Err(error) => {
                // Load shedding: the bucket refuses to pay for the item, so it does not go
                // out unpaid. Give back what was paid for it and end, keeping the item for
                // `into_parts`: the caller decides what becomes of it.
                this.toll.cancel();
                *this.run = Run::Ended(error);
                return Poll::Ready(None);
            }
        }
        Poll::Ready(this.item.take())
    }

    /// The lower bound is 0: the bucket can end the adapter at any time (see
    /// [Ending](ThrottleBy#ending)). The upper bound counts the item held.
    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.run != Run::Running {
            return (0, Some(0));
        }
        let held = usize::from(self.item.is_some());
        let (_, upper) = self.stream.size_hint();
        (0, upper.and_then(|upper| upper.checked_add(held)))
    }
}

impl<S, F> FusedStream for ThrottleBy<S, F>
where
    S: Stream,
    F: FnMut(&S::Item) -> u64,
{
    /// True once the adapter has ended (`poll_next` returns `None` from then on): it never
    /// polls the inner stream again after that, so it is fused whether or not the inner
    /// stream is.
    fn is_terminated(&self) -> bool {
        self.run != Run::Running
    }
}

impl<S, F> fmt::Debug for ThrottleBy<S, F>
where
    S: Stream + fmt::Debug,
    S::Item: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThrottleBy")
            .field("stream", &self.stream)
            .field("item", &self.item)
            .field("owed", &self.toll.owed)
            .field("paid", &self.toll.paid)
            .field("end_reason", &self.end_reason())
            .finish_non_exhaustive()
    }
}

/// A stream throttled by a [`TokenBucket`], each item costing one token: made by
/// [`TokenBucket::throttle`].
///
/// It is [`ThrottleBy`] with a fixed cost, as its own type so that it can be named
/// without a function type. Items come out in order, each once its token is taken, in the
/// bucket's FIFO queue like any other [`take`](TokenBucket::take).
///
/// It ends as [`ThrottleBy`] does (see [Ending](ThrottleBy#ending)): when the inner stream
/// ends; when the bucket is closed, at once even while the inner stream is pending, after
/// yielding any item already pulled; or when the bucket refuses the token for another
/// reason ([`end_reason`](Throttle::end_reason) says which), keeping the item it held
/// unyielded for [`into_parts`](Throttle::into_parts). Its `size_hint` has a lower bound
/// of 0 for the same reason. It is `Unpin` when the inner stream is, `Send` when the
/// stream and its items are, and a [`FusedStream`].
///
/// # Cancel safety
///
/// Dropping it at any point loses no tokens: the pending [`Take`] takes nothing when
/// dropped. The item already pulled and waiting for its token (or refused) is dropped with
/// it; [`into_parts`](Throttle::into_parts) gives it back instead.
///
/// # Examples
///
/// ```
/// use futures::{channel::mpsc, StreamExt};
/// use std::time::Duration;
/// use token_bucket::{stream::Throttle, Rate, TokenBucket};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let bucket = TokenBucket::new(Rate::per_second(2), 1)?;
/// let (sender, receiver) = mpsc::unbounded::<&str>();
/// let mut events: Throttle<mpsc::UnboundedReceiver<&str>> = bucket.throttle(receiver);
/// sender.unbounded_send("a")?;
/// sender.unbounded_send("b")?;
/// drop(sender);
/// let start = tokio::time::Instant::now();
/// assert_eq!(events.next().await, Some("a"));
/// assert_eq!(events.next().await, Some("b"));
/// assert_eq!(start.elapsed(), Duration::from_millis(500));
/// assert_eq!(events.next().await, None);
/// # Ok(())
/// # }
/// ```
#[pin_project]
#[must_use = "streams do nothing unless polled"]
pub struct Throttle<S: Stream> {
    #[pin]
    inner: ThrottleBy<S, fn(&S::Item) -> u64>,
}

impl<S: Stream> Throttle<S> {
    /// Why the adapter ended, if the bucket ended it; see [`ThrottleBy::end_reason`].
    ///
    /// ```
    /// use futures::{stream, StreamExt};
    /// use token_bucket::{Rate, TakeError, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
    /// bucket.close();
    /// let mut throttled = bucket.throttle(stream::iter([1, 2, 3]));
    /// assert_eq!(throttled.next().await, None);
    /// assert_eq!(throttled.end_reason(), Some(TakeError::Closed));
    /// // Nothing was pulled: every item is still in the inner stream.
    /// assert_eq!(throttled.into_inner().collect::<Vec<_>>().await, [1, 2, 3]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn end_reason(&self) -> Option<TakeError> {
        self.inner.end_reason()
    }

    /// The inner stream.
    ///
    /// ```
    /// use futures::stream;
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
    /// let throttled = bucket.throttle(stream::iter([1, 2, 3]));
    /// assert_eq!(futures::Stream::size_hint(throttled.get_ref()), (3, Some(3)));
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn get_ref(&self) -> &S {
        self.inner.get_ref()
    }

    /// The inner stream, mutably. Taking items from it directly bypasses the throttle.
    ///
    /// ```
    /// use futures::{stream, StreamExt};
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
    /// let mut throttled = bucket.throttle(stream::iter([1, 2, 3]));
    /// assert_eq!(throttled.get_mut().next().await, Some(1)); // not throttled
    /// assert_eq!(throttled.next().await, Some(2));
    /// # Ok(())
    /// # }
    /// ```
    pub fn get_mut(&mut self) -> &mut S {
        self.inner.get_mut()
    }

    /// The inner stream, pinned, for streams that are not `Unpin`. Taking items from it
    /// directly bypasses the throttle.
    ///
    /// ```
    /// use futures::{stream, Stream};
    /// use std::pin::pin;
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
    /// let mut throttled = pin!(bucket.throttle(stream::iter([1, 2, 3])));
    /// assert_eq!(throttled.as_mut().get_pin_mut().size_hint(), (3, Some(3)));
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn get_pin_mut(self: Pin<&mut Self>) -> Pin<&mut S> {
        self.project().inner.get_pin_mut()
    }

    /// The inner stream, with every item not yet pulled from it. An item already pulled
    /// and still waiting for its token is dropped; [`into_parts`](Throttle::into_parts)
    /// keeps it.
    ///
    /// ```
    /// use futures::{stream, StreamExt};
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
    /// let mut throttled = bucket.throttle(stream::iter([1, 2, 3]));
    /// assert_eq!(throttled.next().await, Some(1));
    /// assert_eq!(throttled.into_inner().collect::<Vec<_>>().await, [2, 3]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn into_inner(self) -> S {
        self.inner.into_inner()
    }

    /// The inner stream, and the item already pulled from it but not yet yielded, if any:
    /// one still waiting for its token, or one the bucket refused.
    ///
    /// ```
    /// use futures::{stream, StreamExt};
    /// use token_bucket::{Rate, TokenBucket};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::builder().rate(Rate::per_second(1)).capacity(1).initial(0).build()?;
    /// let mut throttled = bucket.throttle(stream::iter([1, 2, 3]));
    /// assert_eq!(futures::poll!(throttled.next()), std::task::Poll::Pending);
    /// let (rest, held) = throttled.into_parts();
    /// assert_eq!(held, Some(1));
    /// assert_eq!(rest.collect::<Vec<_>>().await, [2, 3]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn into_parts(self) -> (S, Option<S::Item>) {
        self.inner.into_parts()
    }
}

impl<S: Stream> Stream for Throttle<S> {
    type Item = S::Item;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        self.project().inner.poll_next(cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl<S: Stream> FusedStream for Throttle<S> {
    /// True once `poll_next` has returned `None`; see [`ThrottleBy`]'s.
    fn is_terminated(&self) -> bool {
        self.inner.is_terminated()
    }
}

impl<S> fmt::Debug for Throttle<S>
where
    S: Stream + fmt::Debug,
    S::Item: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Throttle")
            .field("stream", &self.inner.stream)
            .field("item", &self.inner.item)
            .field("end_reason", &self.inner.end_reason())
            .finish_non_exhaustive()
    }
}
