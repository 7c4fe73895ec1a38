//! The window limiters: they count requests per window of time rather than hold tokens.
//!
//! - `fixed_window.rs`: [`FixedWindow`], lock-free, the window and its count in one atomic
//!   word updated by compare-and-swap.
//! - `sliding.rs`: what the two sliding limiters share: the handle, the `Limiter`
//!   plumbing and the arithmetic of `retry_after`.
//! - `sliding_log.rs`: [`SlidingLog`], exact, a ring of grant instants.
//! - `sliding_window.rs`: [`SlidingWindow`], a time wheel of per-slot totals.
//! - `turnstile.rs`: first in, first out waiting, since these limiters have no refill
//!   task; and the order every path takes the limiters' locks in.
//! - `ring.rs`: reading a circular buffer oldest first.
//!
//! It uses the crate's foundations (`clock`, `error`, `sync`) and the plain types of
//! `quota`, and implements [`Limiter`](crate::Limiter); it does not use the token bucket.

mod fixed_window;
mod ring;
mod sliding;
mod sliding_log;
mod sliding_window;
pub(crate) mod turnstile;

pub use fixed_window::FixedWindow;
pub use sliding_log::SlidingLog;
pub use sliding_window::SlidingWindow;
