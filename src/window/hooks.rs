//! What a window limiter offers a composite (see `composite/`), which decides through
//! these hooks while a user's [`Limiter`](crate::Limiter) has none: its place among the
//! members' locks, its line to wait in, and its state held at the composite's instant.

use crate::clock::{Clock, Moment};
use crate::error::TryAcquireError;
use crate::sync::Identity;
use crate::window::turnstile::Turnstile;

/// A window limiter, as a composite sees it.
pub(crate) trait Window: Sync {
    fn identity(&self) -> usize;
    /// What orders it among a composite's members, with its part in composites.
    fn identity_ref(&self) -> &Identity;
    /// The most permits admitted at once.
    fn limit(&self) -> u64;
    fn turnstile(&self) -> &Turnstile;
    fn clock(&self) -> &Clock;
    /// The limiter's state, held until the result is dropped, as of `moment` (or its
    /// floor, if later).
    fn hold(&self, moment: Moment) -> Box<dyn WindowHeld + '_>;
}

/// A window limiter's state, held by a composite, at the composite's instant.
pub(crate) trait WindowHeld {
    /// What `try_acquire(permits)` would say, counting nothing.
    fn check(&mut self, permits: u64) -> Result<(), TryAcquireError>;
    /// `None` when `permits` fit now, ignoring the line (the composite is at its head);
    /// else the instant from which they do, on the limiter's clock ([`NEVER`] for never).
    ///
    /// [`NEVER`]: crate::clock::NEVER
    fn ready_at(&mut self, permits: u64) -> Option<u64>;
    /// Counts `permits`, which fit now; returns the instant counted at.
    fn record(&mut self, permits: u64) -> u64;
}
