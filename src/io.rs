//! Throttling tokio byte I/O: one token per byte (feature `io`).
//!
//! [`TokenBucket::limit_read`] wraps an [`AsyncRead`] in a [`LimitRead`], and
//! [`TokenBucket::limit_write`] wraps an [`AsyncWrite`] in a [`LimitWrite`]. Every byte
//! read or written costs one token, so a bucket at 64 KiB per second lets 64 KiB per second
//! through, however the caller sizes its buffers.
//!
//! ```
//! use std::time::Duration;
//! use token_bucket::{Rate, TokenBucket};
//! use tokio::io::AsyncWriteExt;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // 1 KiB a second in bursts of 1 KiB, starting empty.
//! let bucket = TokenBucket::builder()
//!     .rate(Rate::per_second(1024))
//!     .capacity(1024)
//!     .initial(0)
//!     .build()?;
//! let start = tokio::time::Instant::now();
//! let mut writer = bucket.limit_write(Vec::new());
//! writer.write_all(&[7; 4096]).await?;
//! assert_eq!(start.elapsed(), Duration::from_secs(4));
//! assert_eq!(writer.into_inner().len(), 4096);
//! # Ok(())
//! # }
//! ```
//!
//! # Pay before, refund the rest
//!
//! A read or write cannot know in advance how many bytes the inner stream will take or
//! give, and a byte must not move before it is paid for (or the rate would only hold on
//! average, after the fact). So each operation first reserves tokens with
//! [`take`](TokenBucket::take), for as many bytes as the caller's buffer holds but never
//! more than the bucket's capacity (a larger request could never be granted). Only then
//! is the inner stream called, with the buffer cut down to the bytes reserved. Whatever
//! it did not use (a short read or write, end of file, an error) is
//! [refunded](TokenBucket::refund) at once, so the budget is never lost.
//!
//! It follows that:
//!
//! - Reads and writes are split into pieces no larger than the capacity. A `read` with a
//!   1 MiB buffer on a bucket of capacity 64 KiB returns at most 64 KiB; `write_all` and
//!   `read_exact` simply loop. No byte is lost, duplicated or reordered.
//! - The reservation waits its turn in the bucket's FIFO queue like any `take`, so the
//!   wrappers and every other user of the bucket (other wrappers included) share its
//!   budget fairly.
//! - If the inner stream is not ready (`Poll::Pending`), the reservation is kept for the
//!   next call, which spends it rather than paying again; it is never charged twice.
//! - A read waits until a whole piece (`min(buffer, capacity)` tokens) is paid for, even
//!   if fewer bytes then come. The surplus is refunded, so the rate is unaffected, but the
//!   wait is spent. Finding the end of a stream costs one wait for a piece (with an empty
//!   bucket, `read_to_end` of 1 MiB at 64 KiB/s takes 17 s, not 16), and a source that
//!   gives less than a piece per read runs behind the ideal schedule by the difference.
//!   Smaller buffers (or a smaller capacity) mean smaller pieces and less latency.
//! - A surplus refunded into a bucket that filled up meanwhile is capped at the capacity,
//!   as every refund is.
//! - Zero-length reads and writes, `flush` and `shutdown` cost nothing and go straight to
//!   the inner stream.
//!
//! # Errors
//!
//! When the reservation fails, because the bucket was [closed](TokenBucket::close), its
//! [queue limit](crate::Builder::queue_limit) was reached, or a request had to wait
//! outside a tokio runtime, the operation fails with an
//! [`io::Error`] of kind [`Other`](io::ErrorKind::Other) whose message is the
//! [`TakeError`]'s, and which wraps it: `error.get_ref()` downcasts to `TakeError`. The
//! inner stream is not called, so it gives up no byte that is not returned. Tokens
//! reserved before the bucket was closed are still spent. If
//! [`set_capacity`](TokenBucket::set_capacity) lowers the capacity below a pending
//! reservation, the reservation is made again at the new capacity instead of failing.

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use pin_project::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::bucket::TokenBucket;
use crate::error::TakeError;
use crate::future::Take;

impl TokenBucket {
    /// Wraps `reader` so that every byte read from it costs one token of this bucket.
    ///
    /// Each read waits for `min(buffer, capacity)` tokens, reads at most that many bytes,
    /// and refunds what it did not read; see [the module docs](crate::io).
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{Rate, TokenBucket};
    /// use tokio::io::AsyncReadExt;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::builder().rate(Rate::per_second(100)).capacity(100).initial(0).build()?;
    /// let start = tokio::time::Instant::now();
    /// let mut reader = bucket.limit_read(&[1u8; 300][..]);
    /// let mut bytes = [0; 300];
    /// reader.read_exact(&mut bytes).await?;
    /// assert_eq!(start.elapsed(), Duration::from_secs(3));
    /// # Ok(())
    /// # }
    /// ```
    pub fn limit_read<R: AsyncRead>(&self, reader: R) -> LimitRead<R> {
        LimitRead {
            inner: reader,
            budget: Budget::new(self.clone()),
        }
    }

    /// Wraps `writer` so that every byte written to it costs one token of this bucket.
    ///
    /// Each write waits for `min(buffer, capacity)` tokens, writes at most that many
    /// bytes, and refunds what was not written; see [the module docs](crate::io).
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{Rate, TokenBucket};
    /// use tokio::io::AsyncWriteExt;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::builder().rate(Rate::per_second(100)).capacity(100).initial(0).build()?;
    /// let start = tokio::time::Instant::now();
    /// let mut writer = bucket.limit_write(Vec::new());
    /// writer.write_all(&[1; 250]).await?;
    /// assert_eq!(start.elapsed(), Duration::from_millis(2500));
    /// # Ok(())
    /// # }
    /// ```
    pub fn limit_write<W: AsyncWrite>(&self, writer: W) -> LimitWrite<W> {
        LimitWrite {
            inner: writer,
            budget: Budget::new(self.clone()),
        }
    }
}

/// An [`AsyncRead`] that pays one token of a [`TokenBucket`] per byte read, from
/// [`TokenBucket::limit_read`].
///
/// Each read reserves `min(buffer, capacity)` tokens, waiting its turn in the bucket's
/// queue, reads at most that many bytes from the inner reader, and refunds the rest. If
/// the inner reader also implements [`AsyncWrite`], writes pass through unthrottled, so a
/// socket can be limited in one direction only.
///
/// # Cancel safety
///
/// Dropping a pending read (say, `reader.read(&mut buf)` losing a `select!`) loses no
/// bytes: a pending read has put nothing in the buffer. Its reservation, queued or
/// granted, stays with the wrapper and pays for the next read, which is not charged again.
/// Dropping the wrapper (or calling [`into_inner`](LimitRead::into_inner)) gives a
/// granted but unspent reservation back to the bucket and leaves the queue without
/// taking anything.
///
/// ```
/// use token_bucket::{Rate, TokenBucket};
/// use tokio::io::AsyncReadExt;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let bucket = TokenBucket::new(Rate::per_second(1000), 10)?;
/// let mut reader = bucket.limit_read(&b"hello, world"[..]);
/// let mut buf = [0; 64];
/// // Pieces are never larger than the capacity.
/// assert_eq!(reader.read(&mut buf).await?, 10);
/// assert_eq!(&buf[..10], b"hello, wor");
/// let mut rest = String::new();
/// reader.read_to_string(&mut rest).await?;
/// assert_eq!(rest, "ld");
/// # Ok(())
/// # }
/// ```
#[pin_project]
#[derive(Debug)]
pub struct LimitRead<R> {
    #[pin]
    inner: R,
    budget: Budget,
}

/// An [`AsyncWrite`] that pays one token of a [`TokenBucket`] per byte written, from
/// [`TokenBucket::limit_write`].
///
/// Each write reserves `min(buffer, capacity)` tokens, waiting its turn in the bucket's
/// queue, writes at most that many bytes to the inner writer, and refunds what was not
/// written. Flushing and shutting down cost nothing. If the inner writer also implements
/// [`AsyncRead`], reads pass through unthrottled.
///
/// # Cancel safety
///
/// Dropping a pending write (say, `writer.write(buf)` losing a `select!`) means nothing
/// was written, as with any `AsyncWrite`. Its reservation, queued or granted, stays with
/// the wrapper and pays for the next write, even one with a different buffer (a surplus is
/// refunded), so nothing is charged twice. `write_all` is not cancel safe, for the usual
/// reason: it may have written part of its buffer. Dropping the wrapper (or calling
/// [`into_inner`](LimitWrite::into_inner)) gives a granted but unspent reservation back to
/// the bucket and leaves the queue without taking anything; so does shutting it down.
///
/// ```
/// use token_bucket::{Rate, TokenBucket};
/// use tokio::io::AsyncWriteExt;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let bucket = TokenBucket::new(Rate::per_second(1000), 10)?;
/// let mut writer = bucket.limit_write(Vec::new());
/// // Pieces are never larger than the capacity.
/// assert_eq!(writer.write(b"hello, world").await?, 10);
/// writer.write_all(b"ld").await?;
/// assert_eq!(writer.get_ref().as_slice(), b"hello, world");
/// # Ok(())
/// # }
/// ```
#[pin_project]
#[derive(Debug)]
pub struct LimitWrite<W> {
    #[pin]
    inner: W,
    budget: Budget,
}

/// Implements the accessors shared by both wrappers.
macro_rules! accessors {
    ($wrapper:ident, $inner:ident, $setup:literal) => {
        impl<$inner> $wrapper<$inner> {
            /// The wrapped stream.
            ///
            /// ```
            /// # use token_bucket::{Rate, TokenBucket};
            /// # let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
            #[doc = $setup]
            /// assert!(wrapper.get_ref().is_empty());
            /// # Ok::<(), token_bucket::ConfigError>(())
            /// ```
            pub fn get_ref(&self) -> &$inner {
                &self.inner
            }

            /// The wrapped stream, mutably. Reading or writing through it directly
            /// bypasses the bucket.
            ///
            /// ```
            /// # use token_bucket::{Rate, TokenBucket};
            /// # let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
            #[doc = $setup]
            /// let _inner = wrapper.get_mut();
            /// # Ok::<(), token_bucket::ConfigError>(())
            /// ```
            pub fn get_mut(&mut self) -> &mut $inner {
                &mut self.inner
            }

            /// The pinned wrapped stream. Reading or writing through it directly bypasses
            /// the bucket.
            ///
            /// ```
            /// # use token_bucket::{Rate, TokenBucket};
            /// # let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
            #[doc = $setup]
            /// let mut wrapper = std::pin::pin!(wrapper);
            /// let _inner = wrapper.as_mut().get_pin_mut();
            /// # Ok::<(), token_bucket::ConfigError>(())
            /// ```
            pub fn get_pin_mut(self: Pin<&mut Self>) -> Pin<&mut $inner> {
                self.project().inner
            }

            /// Unwraps the stream. A reservation granted but not yet spent goes back to the
            /// bucket; one still queued leaves the queue.
            ///
            /// ```
            /// # use token_bucket::{Rate, TokenBucket};
            /// # let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
            #[doc = $setup]
            /// let inner = wrapper.into_inner();
            /// assert!(inner.is_empty());
            /// # Ok::<(), token_bucket::ConfigError>(())
            /// ```
            pub fn into_inner(self) -> $inner {
                // `budget` is dropped here, which settles the reservation.
                self.inner
            }
        }
    };
}

accessors!(
    LimitRead,
    R,
    "let mut wrapper = bucket.limit_read(&b\"\"[..]);"
);
accessors!(
    LimitWrite,
    W,
    "let mut wrapper = bucket.limit_write(Vec::<u8>::new());"
);

impl<R: AsyncRead> AsyncRead for LimitRead<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        let remaining = buf.remaining();
        if remaining == 0 {
            // Nothing can be read, so nothing is paid.
            return this.inner.poll_read(cx, buf);
        }
        let piece = ready!(this.budget.poll_reserve(cx, remaining))?;
        let read = if piece == remaining {
            // The whole buffer is paid for: read straight into it.
            let before = buf.filled().len();
            ready!(this.inner.poll_read(cx, buf)).map(|()| {
                // `saturating_sub`: a reader may legally shrink the filled part.
                buf.filled().len().saturating_sub(before)
            })
        } else {
            // Only the first `piece` bytes are paid for. `ReadBuf::take` would lose track
            // of which bytes the inner reader initialised, and telling the outer buffer
            // takes `unsafe`; so initialise the piece (a no-op for an initialised buffer)
            // and read into a buffer over exactly that slice.
            let mut limited = ReadBuf::new(buf.initialize_unfilled_to(piece));
            match ready!(this.inner.poll_read(cx, &mut limited)) {
                Ok(()) => {
                    let read = limited.filled().len();
                    buf.advance(read);
                    Ok(read)
                }
                Err(error) => Err(error),
            }
        };
        // Reached only when the inner reader is done with this call; on `Pending` (above)
        // the reservation is kept for the next call.
        match read {
            Ok(read) => {
                this.budget.spend(read);
                Poll::Ready(Ok(()))
            }
            Err(error) => {
                this.budget.spend(0);
                Poll::Ready(Err(error))
            }
        }
    }
}

impl<W: AsyncWrite> AsyncWrite for LimitWrite<W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        if buf.is_empty() {
            // Nothing can be written, so nothing is paid.
            return this.inner.poll_write(cx, buf);
        }
        let piece = ready!(this.budget.poll_reserve(cx, buf.len()))?;
        // On `Pending` the reservation is kept, and spent by the next call, whatever its
        // buffer.
        let written = ready!(this.inner.poll_write(cx, &buf[..piece]));
        // A writer claiming more than it was given is charged only for what it got.
        this.budget
            .spend(written.as_ref().map_or(0, |&written| written.min(piece)));
        Poll::Ready(written)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.project();
        // No byte is written after a shutdown: the reservation would only sit idle.
        this.budget.release();
        this.inner.poll_shutdown(cx)
    }
}

/// Writes to a throttled reader are not throttled.
impl<R: AsyncRead + AsyncWrite> AsyncWrite for LimitRead<R> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.project().inner.poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.project().inner.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_shutdown(cx)
    }
}

/// Reads from a throttled writer are not throttled.
impl<W: AsyncWrite + AsyncRead> AsyncRead for LimitWrite<W> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.project().inner.poll_read(cx, buf)
    }
}

/// One wrapper's reservation: the `take` in flight, or the tokens it granted and that no
/// byte has used yet.
struct Budget {
    bucket: TokenBucket,
    /// A `take` in flight, and the tokens it asks for.
    taking: Option<(Take, u64)>,
    /// Tokens granted and not yet spent.
    held: u64,
}

impl Budget {
    fn new(bucket: TokenBucket) -> Budget {
        Budget {
            bucket,
            taking: None,
            held: 0,
        }
    }

    /// Makes sure tokens are held for the next piece of an operation on `len` bytes, and
    /// returns how many bytes that piece may have: at most `len`, at most the capacity, and
    /// at least one unless `len` is zero.
    ///
    /// Tokens already held (from a call the inner stream left pending) are used as they
    /// are, even if `len` is larger: topping them up would mean a second wait in the queue,
    /// and the bytes still fit in a piece later.
    fn poll_reserve(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<io::Result<usize>> {
        if len == 0 {
            // `take(0)` would be granted without holding anything, forever.
            return Poll::Ready(Ok(0));
        }
        while self.held == 0 {
            let bucket = &self.bucket;
            let (take, tokens) = self.taking.get_or_insert_with(|| {
                let tokens = to_u64(len).min(bucket.capacity());
                (bucket.take(tokens), tokens)
            });
            let tokens = *tokens;
            let result = ready!(Pin::new(take).poll(cx));
            self.taking = None;
            match result {
                Ok(()) => self.held = tokens,
                // The capacity was lowered below the request: ask again for a piece that
                // fits, rather than failing an operation that can still be served.
                Err(TakeError::ExceedsCapacity { .. }) => {}
                Err(error) => return Poll::Ready(Err(io::Error::other(error))),
            }
        }
        Poll::Ready(Ok(
            usize::try_from(self.held).map_or(len, |held| held.min(len))
        ))
    }

    /// The inner stream moved `used` bytes: they are paid for, and the rest of the
    /// reservation goes back to the bucket, for others to use.
    fn spend(&mut self, used: usize) {
        let surplus = self.held.saturating_sub(to_u64(used));
        self.held = 0;
        if surplus > 0 {
            self.bucket.refund(surplus);
        }
    }

    /// Gives up the reservation: a queued `take` leaves the queue taking nothing (it is
    /// cancel safe), granted tokens go back.
    fn release(&mut self) {
        self.taking = None;
        self.spend(0);
    }
}

impl Drop for Budget {
    fn drop(&mut self) {
        self.release();
    }
}

impl fmt::Debug for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the bucket itself: its `Debug` takes the lock to read its state, which is
        // more than a wrapper's `Debug` should do.
        f.debug_struct("Budget")
            .field("taking", &self.taking.as_ref().map(|(_, tokens)| tokens))
            .field("held", &self.held)
            .finish()
    }
}

fn to_u64(bytes: usize) -> u64 {
    u64::try_from(bytes).unwrap_or(u64::MAX)
}
