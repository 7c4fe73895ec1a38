//! What a composite holds of a [`FixedWindow`] while it decides (see `window/hooks.rs`):
//! the state word seized and the line's record held.

use std::sync::atomic::Ordering;

use crate::clock::{Clock, Moment, NEVER};
use crate::error::TryAcquireError;
use crate::observe::Observer;
use crate::permits::{screen, Screened};
use crate::sync::{Identity, MutexGuard};
use crate::window::turnstile::{Line, Turnstile};
use crate::window::{Window, WindowHeld};

use super::word::{Current, SEIZED};
use super::{FixedWindow, Shared};

/// The word seized for a composite, with the line's record held so that no other
/// composite seizes it and nobody joins the line meanwhile; released when dropped.
struct HeldFixed<'a> {
    shared: &'a Shared,
    /// The handle's: a composite's admission counts as admitted here.
    observer: &'a Observer,
    line: MutexGuard<'a, Line>,
    /// The decision's instant on this limiter's clock.
    now: u64,
}

impl HeldFixed<'_> {
    fn current(&self) -> Current {
        let word = self.shared.state.load(Ordering::Acquire);
        self.shared
            .layout
            .read(word, self.now / self.shared.window_nanos)
    }
}

impl Drop for HeldFixed<'_> {
    fn drop(&mut self) {
        self.shared.state.fetch_and(!SEIZED, Ordering::AcqRel);
    }
}

impl WindowHeld for HeldFixed<'_> {
    fn check(&mut self, permits: u64) -> Result<(), TryAcquireError> {
        let shared = self.shared;
        if screen(permits, shared.limit)? == Screened::Nothing {
            return Ok(());
        }
        let current = self.current();
        let waiting = shared.turnstile.is_waiting();
        if !waiting && current.count + permits <= shared.limit {
            return Ok(());
        }
        // Walked through the guard held: locking the line again would deadlock.
        let line = waiting.then_some(&*self.line);
        let retry_after = shared.retry_after(self.now, current, permits, line);
        Err(TryAcquireError::Limited { retry_after })
    }

    fn ready_at(&mut self, permits: u64) -> Option<u64> {
        let current = self.current();
        if current.count + permits <= self.shared.limit {
            return None;
        }
        let next = u128::from(current.clock_window) + u128::from(current.ahead) + 1;
        let start = next.saturating_mul(self.shared.window.as_nanos());
        Some(u64::try_from(start).unwrap_or(NEVER))
    }

    fn record(&mut self, permits: u64) -> u64 {
        let shared = self.shared;
        let mut word = shared.state.load(Ordering::Acquire);
        loop {
            // Only a refund can have changed the word since the check, making room.
            let current = shared.layout.read(word, self.now / shared.window_nanos);
            let next = shared
                .layout
                .pack(current.window(), current.count + permits)
                | SEIZED;
            match shared.state.compare_exchange_weak(
                word,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.observer.admitted(permits);
                    return self.now;
                }
                Err(actual) => word = actual,
            }
        }
    }
}

impl FixedWindow {
    /// The limiter as a composite sees it (see `hooks.rs`).
    pub(crate) fn as_window(&self) -> &dyn Window {
        self
    }
}

impl Window for FixedWindow {
    fn identity(&self) -> usize {
        self.shared.identity.of(&self.shared)
    }

    fn identity_ref(&self) -> &Identity {
        &self.shared.identity
    }

    fn limit(&self) -> u64 {
        self.shared.limit
    }

    fn turnstile(&self) -> &Turnstile {
        &self.shared.turnstile
    }

    fn clock(&self) -> &Clock {
        &self.shared.clock
    }

    fn hold(&self, moment: Moment) -> Box<dyn WindowHeld + '_> {
        let shared = &*self.shared;
        let line = shared.turnstile.line();
        // Under the line's record no other composite seizes: only lock-free callers
        // race this, and they never set the bit.
        shared.state.fetch_or(SEIZED, Ordering::AcqRel);
        Box::new(HeldFixed {
            shared,
            observer: &self.observer,
            line,
            now: shared.clock.at(moment),
        })
    }
}
