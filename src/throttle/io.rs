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
//! # Design
//!
//! No byte reaches the caller (when reading) or the inner writer (when writing) before its
//! token is taken with [`take`](TokenBucket::take), so the rate holds at every instant, not
//! only on average. Each `take` waits its turn in the bucket's FIFO queue like any other,
//! so the wrappers and every other user of the bucket (other wrappers included) share its
//! budget fairly. Bytes move in *pieces*, one `take` each, never larger than
//! `min(buffer, capacity, queue limit)`: a larger request could never be granted, or could
//! never queue. `read_exact` and `write_all` simply loop; no byte is lost, duplicated or
//! reordered.
//!
//! **Reads: read, then pay, then deliver.** A read cannot know how many bytes will come, so
//! [`LimitRead`] first reads a piece from the inner reader into a buffer of its own (at
//! most [`MAX_READ_PIECE`] bytes), then takes exactly one token per byte that came, and
//! only then copies the bytes into the caller's buffer. It follows that:
//!
//! - A reader with no data holds no tokens and no place in the queue, however long its
//!   connection stays idle; idle connections never delay active ones.
//! - A short read pays for what it read, nothing more, and the end of a stream costs
//!   nothing: with an empty 64 KiB/s bucket of capacity 64 KiB, 1 MiB takes exactly 16 s
//!   with `read_exact`, `read_to_end` or `tokio::io::copy`.
//! - At most one piece is pulled from the inner reader ahead of the caller, so memory per
//!   wrapper is bounded (the buffer is allocated on the first read, as large as the
//!   largest piece so far) and back-pressure still reaches the peer.
//! - If the caller's next buffer is smaller than the paid bytes, it gets what fits; the
//!   rest stays paid for and is delivered next, without paying again.
//! - Dropping the wrapper, or [`into_inner`](LimitRead::into_inner), discards bytes read
//!   but not yet delivered, as tokio's `BufReader` does, and refunds the tokens paid for
//!   them; [`buffered`](LimitRead::buffered) shows them and
//!   [`into_parts`](LimitRead::into_parts) hands them over. Either way the bucket is
//!   charged only for bytes delivered.
//!
//! **Writes: pay, then write, then refund the rest.** A byte written cannot be taken back,
//! so [`LimitWrite`] takes tokens for a piece first, hands the inner writer exactly that
//! piece, and [refunds](TokenBucket::refund) whatever it did not accept (a short write, an
//! error). If the inner writer is not ready (`Poll::Pending`: a slow peer, a full pipe),
//! the whole piece is refunded at once and taken again, from the back of the queue, when
//! the writer is woken. Losing the place in the queue is the price of never sitting on
//! tokens others could use while the peer is slow. Nothing is charged twice: the bucket's
//! `taken - refunded` is exactly the bytes written (each such round trip counts in both
//! [`Stats::taken`](crate::Stats::taken) and [`Stats::refunded`](crate::Stats::refunded)).
//!
//! Also:
//!
//! - Pieces never exceed the [queue limit](crate::Builder::queue_limit), so a wrapper alone
//!   never trips it. With a queue limit of zero nothing may queue: a piece (of
//!   `min(buffer, capacity)` bytes) is served only if its tokens are there at once, and
//!   otherwise fails with [`TakeError::QueueFull`].
//! - A refund into a bucket that filled up meanwhile is capped at the capacity, as every
//!   refund is.
//! - Zero-length reads and writes, `flush` and `shutdown` cost nothing and go straight to
//!   the inner stream.
//!
//! # Progress
//!
//! Each wrapper counts the bytes through it, exactly:
//! [`LimitRead::bytes_read`] the bytes delivered into callers' buffers, and
//! [`LimitWrite::bytes_written`] the bytes the inner writer accepted, as the wrapper's
//! reads and writes returned them. Bytes a reader holds but has not delivered, whether
//! paid for or not, are not counted until delivered (and never, if dropped or handed over
//! by [`into_parts`](LimitRead::into_parts)); a write that fails or is pending counts
//! nothing. So the count can lag the bucket's charge by the bytes a reader holds paid
//! for, and never runs ahead of what the caller has seen. A copy owns its wrapper, so for
//! a display in another task `progress()` gives a [`Progress`] handle on the same count.
//!
//! # Errors
//!
//! When a `take` fails, because the bucket was [closed](TokenBucket::close), its
//! [queue limit](crate::Builder::queue_limit) was reached, or a request had to wait
//! outside a tokio runtime, the operation fails with an [`io::Error`] of kind
//! [`Other`](io::ErrorKind::Other) whose message is the [`TakeError`]'s, and which wraps
//! it: `error.get_ref()` downcasts to `TakeError`. A write then has not called the inner
//! writer. A read may already hold the bytes of its piece: they stay in the wrapper's
//! buffer ([`LimitRead::buffered`]) and the next read tries to pay for them again; once the
//! bucket is closed the inner reader is not read any more. Tokens taken before the bucket
//! was closed are still spent. If [`set_capacity`](TokenBucket::set_capacity) lowers the
//! capacity below a pending `take`, it is made again at the new capacity instead of
//! failing.
//!
//! An inner writer that claims to have written more bytes than it was given fails the
//! write with an [`io::Error`] of kind [`InvalidData`](io::ErrorKind::InvalidData) rather
//! than passing on an impossible count; it is charged for the whole piece, which it may
//! have sent.

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use pin_project::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::bucket::{Take, TokenBucket};
use crate::error::TakeError;
use crate::throttle::installment::installment;

/// The most bytes a [`LimitRead`] reads from its inner reader at once, and so the most it
/// buffers: 64 KiB. Pieces are smaller when the caller's buffer, the bucket's capacity or
/// its queue limit is.
pub const MAX_READ_PIECE: usize = 64 * 1024;

impl TokenBucket {
    /// Wraps `reader` so that every byte read from it costs one token of this bucket.
    ///
    /// Each read reads a piece from `reader` into the wrapper's buffer, takes one token
    /// for each byte that came, and only then hands the bytes over. A reader with nothing
    /// to read holds no tokens; see [the module docs](crate::io).
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
    /// let mut bytes = Vec::new();
    /// reader.read_to_end(&mut bytes).await?;
    /// // 300 bytes at 100 a second; finding the end costs nothing.
    /// assert_eq!(start.elapsed(), Duration::from_secs(3));
    /// assert_eq!(bytes.len(), 300);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// Polled where it must wait, inside a tokio runtime built without time (no
    /// `enable_time`), it panics as [`TokenBucket::take`] does: nothing could ever wake it.
    pub fn limit_read<R: AsyncRead>(&self, reader: R) -> LimitRead<R> {
        LimitRead {
            inner: reader,
            held: Held::new(self.clone()),
            progress: Progress::new(),
        }
    }

    /// Wraps `writer` so that every byte written to it costs one token of this bucket.
    ///
    /// Each write waits for `min(buffer, capacity, queue limit)` tokens, writes at most
    /// that many bytes, and refunds what was not written; see [the module docs](crate::io).
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
    ///
    /// # Panics
    ///
    /// Polled where it must wait, inside a tokio runtime built without time (no
    /// `enable_time`), it panics as [`TokenBucket::take`] does: nothing could ever wake it.
    pub fn limit_write<W: AsyncWrite>(&self, writer: W) -> LimitWrite<W> {
        LimitWrite {
            inner: writer,
            budget: Budget::new(self.clone()),
            progress: Progress::new(),
        }
    }
}

/// An [`AsyncRead`] that pays one token of a [`TokenBucket`] per byte read, from
/// [`TokenBucket::limit_read`].
///
/// Each read first reads a piece of at most `min(buffer, capacity, queue limit,`
/// [`MAX_READ_PIECE`]`)` bytes from the inner reader into a buffer of the wrapper's own,
/// then takes one token per byte that came, waiting its turn in the bucket's queue, and
/// only then copies the bytes into the caller's buffer. So a reader waiting for data holds
/// no tokens and no place in the queue, and the end of the stream costs nothing. If the
/// inner reader also implements [`AsyncWrite`], writes pass through unthrottled, so a
/// socket can be limited in one direction only.
///
/// # Cancel safety
///
/// Dropping a pending read (say, `reader.read(&mut buf)` losing a `select!`) loses no
/// bytes and no tokens: bytes already pulled from the inner reader stay in the wrapper's
/// buffer, and their `take`, queued or granted, stays with the wrapper. The next read,
/// whatever its buffer, delivers them first and pays for them once.
///
/// Dropping the wrapper, or calling [`into_inner`](LimitRead::into_inner), discards bytes
/// read from the inner reader but not yet delivered, as tokio's `BufReader` does. Tokens
/// already paid for them are refunded; a `take` still pending leaves the queue taking
/// nothing. [`buffered`](LimitRead::buffered) shows those bytes, and
/// [`into_parts`](LimitRead::into_parts) hands them over with the inner reader.
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
    held: Held,
    progress: Progress,
}

/// An [`AsyncWrite`] that pays one token of a [`TokenBucket`] per byte written, from
/// [`TokenBucket::limit_write`].
///
/// Each write takes `min(buffer, capacity, queue limit)` tokens, waiting its turn in the
/// bucket's queue, writes at most that many bytes to the inner writer, and refunds what
/// was not written. If the inner writer is not ready, the tokens are refunded at once, so
/// a writer blocked by a slow peer holds none. Flushing and shutting down cost nothing. If
/// the inner writer also implements [`AsyncRead`], reads pass through unthrottled.
///
/// # Cancel safety
///
/// Dropping a pending write (say, `writer.write(buf)` losing a `select!`) means nothing
/// was written, as with any `AsyncWrite`. If it was waiting for tokens, its `take`, queued
/// or granted, stays with the wrapper and pays for the next write, even one with a
/// different buffer (a surplus is refunded), so nothing is charged twice. If it was
/// waiting for the inner writer, it holds no tokens: they were refunded when the writer
/// said it was not ready. `write_all` is not cancel safe, for the usual reason: it may have
/// written part of its buffer. Dropping the wrapper (or calling
/// [`into_inner`](LimitWrite::into_inner)) undoes a granted but unseen `take` (as
/// [`TokenBucket::take`](crate::TokenBucket::take) says) and leaves the queue without
/// taking anything; so does shutting it down.
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
    progress: Progress,
}

/// Implements the accessors shared by both wrappers.
macro_rules! accessors {
    ($wrapper:ident, $inner:ident, $setup:literal, $bypass:literal) => {
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

            /// The wrapped stream, mutably.
            #[doc = $bypass]
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

            /// The pinned wrapped stream.
            #[doc = $bypass]
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

            /// A handle on this wrapper's byte count, for another task to read while this
            /// one moves the bytes. Every handle shows the same count, made at construction,
            /// and it stays readable after the wrapper is gone.
            ///
            /// ```
            /// # use token_bucket::{Rate, TokenBucket};
            /// # let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
            #[doc = $setup]
            /// let progress = wrapper.progress();
            /// drop(wrapper);
            /// assert_eq!(progress.bytes(), 0);
            /// # Ok::<(), token_bucket::ConfigError>(())
            /// ```
            pub fn progress(&self) -> Progress {
                self.progress.clone()
            }
        }
    };
}

accessors!(
    LimitRead,
    R,
    "let mut wrapper = bucket.limit_read(&b\"\"[..]);",
    "Reading through it directly bypasses the bucket, and skips the bytes the wrapper
    has read but not yet delivered ([`buffered`](LimitRead::buffered))."
);
accessors!(
    LimitWrite,
    W,
    "let mut wrapper = bucket.limit_write(Vec::<u8>::new());",
    "Writing through it directly bypasses the bucket."
);

impl<R> LimitRead<R> {
    /// The bytes this wrapper has delivered into callers' buffers so far: exactly what
    /// its reads returned, summed. Bytes read ahead from the inner reader count only once
    /// delivered, so those [`buffered`](LimitRead::buffered) do not count, nor those that
    /// [`into_parts`](LimitRead::into_parts) hands over. Writes through a reader that is
    /// also a writer are not throttled and not counted. [`progress`](LimitRead::progress)
    /// gives the same count to another task.
    ///
    /// ```
    /// use std::time::Duration;
    /// use token_bucket::{Rate, TokenBucket};
    /// use tokio::io::AsyncReadExt;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::builder().rate(Rate::per_second(10)).capacity(10).initial(0).build()?;
    /// let start = tokio::time::Instant::now();
    /// let mut reader = bucket.limit_read(&b"0123456789abc"[..]);
    /// // The read pulls a piece of 4 bytes, then waits for their tokens, and gives up:
    /// // the bytes it holds are not counted.
    /// let read = tokio::time::timeout(Duration::from_millis(100), reader.read(&mut [0; 4])).await;
    /// assert!(read.is_err());
    /// assert_eq!((reader.bytes_read(), reader.buffered()), (0, &b"0123"[..]));
    /// // The next read delivers them once paid for, at 400 ms.
    /// let mut buf = [0; 4];
    /// reader.read_exact(&mut buf).await?;
    /// assert_eq!((&buf, reader.bytes_read()), (b"0123", 4));
    /// assert_eq!(start.elapsed(), Duration::from_millis(400));
    /// tokio::io::copy(&mut reader, &mut tokio::io::sink()).await?;
    /// assert_eq!(reader.bytes_read(), 13);
    /// # Ok(())
    /// # }
    /// ```
    pub fn bytes_read(&self) -> u64 {
        self.progress.bytes()
    }

    /// The bytes read from the inner reader but not yet delivered, paid for or not: the
    /// next reads deliver them (paying for those not yet paid for) before reading the inner
    /// reader again. Empty unless a read was cancelled, failed, or delivered only part of a
    /// piece.
    ///
    /// ```
    /// use token_bucket::{Rate, TokenBucket};
    /// use tokio::io::AsyncReadExt;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
    /// bucket.close();
    /// let mut reader = bucket.limit_read(&b"abc"[..]);
    /// // A closed bucket fails the read before the inner reader is read.
    /// assert!(reader.read(&mut [0; 3]).await.is_err());
    /// assert!(reader.buffered().is_empty());
    /// assert_eq!(reader.into_inner(), b"abc");
    /// # Ok(())
    /// # }
    /// ```
    pub fn buffered(&self) -> &[u8] {
        self.held.undelivered()
    }

    /// Unwraps the reader. Bytes read from it but not yet delivered are discarded, as
    /// tokio's `BufReader` does, and the tokens paid for them go back to the bucket; a
    /// `take` still queued leaves the queue. Use [`into_parts`](LimitRead::into_parts) to
    /// keep those bytes.
    ///
    /// ```
    /// # use token_bucket::{Rate, TokenBucket};
    /// # let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
    /// let wrapper = bucket.limit_read(&b""[..]);
    /// let inner = wrapper.into_inner();
    /// assert!(inner.is_empty());
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn into_inner(self) -> R {
        // `held` is dropped here: it refunds what was paid and leaves the queue.
        self.inner
    }

    /// Unwraps the reader, and hands over the bytes read from it but not yet delivered
    /// (those [`buffered`](LimitRead::buffered) shows), which come before anything the
    /// reader still holds. None of them counts as paid for: tokens already paid for them
    /// go back to the bucket, and a `take` still queued leaves the queue. Wrapping
    /// `bytes.chain(reader)` again charges each byte once.
    ///
    /// ```
    /// use std::io::Cursor;
    /// use token_bucket::{Rate, TokenBucket};
    /// use tokio::io::AsyncReadExt;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::builder().rate(Rate::per_second(10)).capacity(10).initial(0).build()?;
    /// let mut reader = bucket.limit_read(&b"0123456789abc"[..]);
    /// // The read pulls a piece of 4 bytes, then waits for their tokens, and gives up.
    /// let read = tokio::time::timeout(std::time::Duration::from_millis(100), reader.read(&mut [0; 4])).await;
    /// assert!(read.is_err());
    /// let (rest, bytes) = reader.into_parts();
    /// assert_eq!((bytes.as_slice(), rest), (&b"0123"[..], &b"456789abc"[..]));
    /// let mut all = String::new();
    /// Cursor::new(bytes).chain(rest).read_to_string(&mut all).await?;
    /// assert_eq!(all, "0123456789abc");
    /// # Ok(())
    /// # }
    /// ```
    pub fn into_parts(mut self) -> (R, Vec<u8>) {
        let bytes = self.held.hand_over();
        (self.inner, bytes)
    }
}

impl<W> LimitWrite<W> {
    /// The bytes the inner writer has accepted through this wrapper so far: exactly what
    /// its writes returned `Ok` for, summed. A short write counts what was written, and a
    /// write that failed or is pending counts nothing, whatever it paid (the tokens of
    /// the bytes that did not move are refunded). Reads through a writer that is also a
    /// reader are not throttled and not counted. [`progress`](LimitWrite::progress) gives
    /// the same count to another task.
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
    /// assert_eq!(writer.bytes_written(), 10);
    /// writer.write_all(b"ld").await?;
    /// assert_eq!(writer.bytes_written(), 12);
    /// # Ok(())
    /// # }
    /// ```
    pub fn bytes_written(&self) -> u64 {
        self.progress.bytes()
    }

    /// Unwraps the writer. A `take` granted but not yet seen is undone, as
    /// [`TokenBucket::take`](crate::TokenBucket::take) says; one still queued leaves the
    /// queue.
    ///
    /// ```
    /// # use token_bucket::{Rate, TokenBucket};
    /// # let bucket = TokenBucket::new(Rate::per_second(10), 10)?;
    /// let wrapper = bucket.limit_write(Vec::<u8>::new());
    /// let inner = wrapper.into_inner();
    /// assert!(inner.is_empty());
    /// # Ok::<(), token_bucket::ConfigError>(())
    /// ```
    pub fn into_inner(self) -> W {
        // `budget` is dropped here, and with it the `take` in flight, which is cancel safe.
        self.inner
    }
}

impl<R: AsyncRead> AsyncRead for LimitRead<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut this = self.project();
        if buf.remaining() == 0 {
            // Nothing can be delivered, so nothing is paid.
            return this.inner.poll_read(cx, buf);
        }
        let held = this.held;
        loop {
            // 1. Deliver bytes already paid for.
            if held.paid > held.start {
                this.progress.add(held.deliver(buf));
                return Poll::Ready(Ok(()));
            }
            // 2. Pay for bytes already read, then deliver them.
            if held.end > held.paid {
                let unpaid = held.end - held.paid;
                let tokens = ready!(held.budget.poll_take(cx, unpaid.min(buf.remaining())))?;
                // The `take` was sized for at most `unpaid` bytes, which cannot change while
                // it is in flight.
                held.paid += usize::try_from(tokens).map_or(unpaid, |tokens| tokens.min(unpaid));
                continue;
            }
            // 3. Nothing is held: read a piece. A closed bucket could not pay for it, so
            // leave the bytes with the inner reader.
            if held.budget.bucket.is_closed() {
                return Poll::Ready(Err(io::Error::other(TakeError::Closed)));
            }
            let piece = held.budget.piece(buf.remaining()).min(MAX_READ_PIECE);
            if held.bytes.len() < piece {
                // Allocated on the first read and grown to the largest piece so far;
                // zero-filled so that a safe `ReadBuf` can be built over it.
                held.bytes.resize(piece, 0);
            }
            let mut into = ReadBuf::new(&mut held.bytes[..piece]);
            ready!(this.inner.as_mut().poll_read(cx, &mut into))?;
            let read = into.filled().len();
            if read == 0 {
                // The end of the stream (or an empty read): it costs nothing.
                return Poll::Ready(Ok(()));
            }
            held.start = 0;
            held.paid = 0;
            held.end = read;
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
        // The `take` may come from an earlier call with another buffer: use what fits and
        // refund the rest below.
        let tokens = ready!(this.budget.poll_take(cx, buf.len()))?;
        let piece = usize::try_from(tokens).map_or(buf.len(), |tokens| tokens.min(buf.len()));
        let result = this.inner.poll_write(cx, &buf[..piece]);
        // The bytes the inner writer took. On `Pending` none: the tokens go back at once
        // rather than idling while the peer is slow, and are taken again when it is ready.
        // A writer claiming more than it was given may have sent the whole piece.
        let used = match &result {
            Poll::Ready(Ok(written)) => (*written).min(piece),
            Poll::Ready(Err(_)) | Poll::Pending => 0,
        };
        this.budget.refund(tokens - to_u64(used));
        match result {
            Poll::Ready(Ok(written)) if written <= piece => {
                this.progress.add(written);
                Poll::Ready(Ok(written))
            }
            // More than it was given: an error, so the caller is told of no bytes written.
            Poll::Ready(Ok(written)) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the inner writer claimed to write {written} bytes of a {piece}-byte buffer"
                ),
            ))),
            result => result,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.project();
        // No byte is written after a shutdown: a `take` in flight would only hold a place.
        this.budget.cancel();
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

/// A shareable count of the bytes through one [`LimitRead`] or [`LimitWrite`], from their
/// `progress` method: for a progress display in another task while the copy, which owns
/// the wrapper, runs. Clones share the count.
///
/// It counts exactly what [`LimitRead::bytes_read`] or [`LimitWrite::bytes_written`]
/// does: bytes delivered to the caller, or accepted by the inner writer. The wrapper adds
/// to it once per read or write that moved bytes (a relaxed atomic add, with no lock and
/// no wake-up), so a reader sees each call's bytes at once, and the count never goes back.
///
/// ```
/// use std::time::Duration;
/// use token_bucket::{Rate, TokenBucket};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // 64 KiB a second, starting full: `tokio::io::copy` reads 8 KiB at a time.
/// let bucket = TokenBucket::new(Rate::per_second(64 * 1024), 64 * 1024)?;
/// let data = vec![7u8; 80 * 1024];
/// let mut reader = bucket.limit_read(std::io::Cursor::new(data));
/// let progress = reader.progress();
/// let copy = tokio::spawn(async move {
///     tokio::io::copy(&mut reader, &mut tokio::io::sink()).await
/// });
/// // The first 64 KiB pass at once; the next 8 KiB after 125 ms.
/// tokio::time::sleep(Duration::from_millis(100)).await;
/// assert_eq!(progress.bytes(), 64 * 1024);
/// tokio::time::sleep(Duration::from_millis(50)).await;
/// assert_eq!(progress.bytes(), 72 * 1024);
/// assert_eq!(copy.await??, 80 * 1024);
/// assert_eq!(progress.bytes(), 80 * 1024);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Progress {
    bytes: Arc<AtomicU64>,
}

impl Progress {
    fn new() -> Progress {
        Progress {
            bytes: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The bytes counted so far.
    ///
    /// ```
    /// use token_bucket::{Rate, TokenBucket};
    /// use tokio::io::AsyncWriteExt;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::new(Rate::per_second(1000), 100)?;
    /// let mut writer = bucket.limit_write(Vec::new());
    /// let progress = writer.progress();
    /// writer.write_all(b"hello").await?;
    /// assert_eq!(progress.bytes(), 5);
    /// # Ok(())
    /// # }
    /// ```
    pub fn bytes(&self) -> u64 {
        // Relaxed: the count orders nothing else; it only has to be exact, which an
        // atomic add is.
        self.bytes.load(Ordering::Relaxed)
    }

    /// Adds the bytes one completed read or write moved.
    fn add(&self, bytes: usize) {
        if bytes > 0 {
            self.bytes.fetch_add(to_u64(bytes), Ordering::Relaxed);
        }
    }
}

/// One wrapper's `take` in flight, if any.
struct Budget {
    bucket: TokenBucket,
    /// A `take` in flight, and the tokens it asks for.
    taking: Option<(Take, u64)>,
}

impl Budget {
    fn new(bucket: TokenBucket) -> Budget {
        Budget {
            bucket,
            taking: None,
        }
    }

    /// The most bytes of `len` (at least one) that one `take` may pay for: the crate's one
    /// [installment rule](installment), in bytes.
    fn piece(&self, len: usize) -> usize {
        let tokens = installment(&self.bucket, to_u64(len));
        usize::try_from(tokens).map_or(len, |tokens| tokens.min(len))
    }

    /// Takes the tokens for the next piece of an operation on `len` bytes (at least one),
    /// and returns how many it took: at least one, and at most a piece.
    ///
    /// A `take` left in flight by an earlier call, which the caller dropped, is finished
    /// as it is, even if it was sized for another `len`; the caller uses what fits.
    fn poll_take(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<io::Result<u64>> {
        debug_assert!(
            len > 0,
            "`take(0)` would be granted without paying for anything"
        );
        loop {
            if self.taking.is_none() {
                // Read the capacity and queue limit for every piece: they may change.
                let tokens = to_u64(self.piece(len));
                self.taking = Some((self.bucket.take(tokens), tokens));
            }
            let Some((take, tokens)) = &mut self.taking else {
                unreachable!("a `take` was just put in flight");
            };
            let tokens = *tokens;
            let result = ready!(Pin::new(take).poll(cx));
            self.taking = None;
            match result {
                Ok(()) => return Poll::Ready(Ok(tokens)),
                // The capacity was lowered below the request: ask again for a piece that
                // fits, rather than failing an operation that can still be served.
                Err(TakeError::ExceedsCapacity { .. }) => {}
                Err(error) => return Poll::Ready(Err(io::Error::other(error))),
            }
        }
    }

    /// Gives back tokens taken for bytes that did not move.
    fn refund(&self, tokens: u64) {
        if tokens > 0 {
            self.bucket.refund(tokens);
        }
    }

    /// Gives up the `take` in flight: a queued one leaves the queue taking nothing, and
    /// one granted but not yet seen is undone (`Take` is cancel safe).
    fn cancel(&mut self) {
        self.taking = None;
    }
}

impl fmt::Debug for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the bucket itself: its `Debug` takes the lock to read its state, which is
        // more than a wrapper's `Debug` should do.
        f.debug_struct("Budget")
            .field("taking", &self.taking.as_ref().map(|(_, tokens)| tokens))
            .finish()
    }
}

/// A reader's bytes read from the inner reader and not yet delivered, and their payment.
///
/// A separate type with its own `Drop`, rather than a `PinnedDrop` on the wrapper, so the
/// wrapper implements no `Drop` itself and `into_inner` can move the reader out of it.
struct Held {
    budget: Budget,
    /// The buffer: empty until the first read, then as long as the largest piece so far
    /// (at most `MAX_READ_PIECE`), and initialised throughout.
    bytes: Vec<u8>,
    /// `bytes[start..paid]` are paid for and not yet delivered; `bytes[paid..end]` are read
    /// and not yet paid for. A `take` is in flight only for unpaid bytes, and bytes are
    /// read only when none are held.
    start: usize,
    paid: usize,
    end: usize,
}

impl Held {
    fn new(bucket: TokenBucket) -> Held {
        Held {
            budget: Budget::new(bucket),
            bytes: Vec::new(),
            start: 0,
            paid: 0,
            end: 0,
        }
    }

    fn undelivered(&self) -> &[u8] {
        &self.bytes[self.start..self.end]
    }

    /// Copies as many paid bytes as fit into `buf`, and returns how many.
    fn deliver(&mut self, buf: &mut ReadBuf<'_>) -> usize {
        let count = (self.paid - self.start).min(buf.remaining());
        buf.put_slice(&self.bytes[self.start..self.start + count]);
        self.start += count;
        if self.start == self.end {
            self.start = 0;
            self.paid = 0;
            self.end = 0;
        }
        count
    }

    /// The bytes held will not be delivered: give up the `take` in flight (before the
    /// refund, so that it cannot be spent on it) and refund what was paid for them.
    fn give_back(&mut self) {
        self.budget.cancel();
        let paid = self.paid - self.start;
        self.paid = self.start;
        self.budget.refund(to_u64(paid));
    }

    /// Gives back what was paid for the bytes held, and hands them over.
    fn hand_over(&mut self) -> Vec<u8> {
        self.give_back();
        let mut bytes = std::mem::take(&mut self.bytes);
        bytes.truncate(self.end);
        bytes.drain(..self.start);
        self.start = 0;
        self.paid = 0;
        self.end = 0;
        bytes
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.give_back();
    }
}

impl fmt::Debug for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Held")
            .field("paid", &(self.paid - self.start))
            .field("unpaid", &(self.end - self.paid))
            .field("budget", &self.budget)
            .finish()
    }
}

fn to_u64(bytes: usize) -> u64 {
    u64::try_from(bytes).unwrap_or(u64::MAX)
}
