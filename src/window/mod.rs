//! The window limiters: they count requests per window of time rather than hold tokens.
//!
//! - `fixed_window.rs`: [`FixedWindow`], lock-free, the window and its count in one atomic
//!   word updated by compare-and-swap; beside it in `fixed_window/`, the word's layout
//!   (`word.rs`), what a composite holds of it (`held.rs`), a key's word (`compact.rs`)
//!   and its unit tests.
//! - `sliding.rs`: what the two sliding limiters share: the handle, the `Limiter`
//!   plumbing and the arithmetic of `retry_after`.
//! - `sliding_api.rs`: the public methods both sliding limiters share, written once.
//! - `sliding_log.rs`: [`SlidingLog`], exact, a ring of grant instants.
//! - `sliding_window.rs`: [`SlidingWindow`], a time wheel of per-slot totals.
//! - `turnstile.rs`: first in, first out waiting, since these limiters have no refill
//!   task.
//! - `hooks.rs`: what these limiters offer a composite, which `composite/` decides
//!   through: their line, and their state held at the composite's instant.
//! - `ring.rs`: reading a circular buffer oldest first.
//!
//! It uses the crate's foundations (`clock`, `error`, `permits`, `sync`, whose docs give
//! the order every path takes the limiters' locks in), the plain types of `quota`,
//! `observe` to report under a name, and implements [`Limiter`](crate::Limiter); it uses
//! neither the token bucket nor `composite/`, which uses it.

mod fixed_window;
mod hooks;
mod ring;
mod sliding;
mod sliding_api;
mod sliding_log;
mod sliding_window;
pub(crate) mod turnstile;

pub use fixed_window::FixedWindow;
pub(crate) use hooks::{Window, WindowHeld};
pub use sliding_log::SlidingLog;
pub use sliding_window::SlidingWindow;
