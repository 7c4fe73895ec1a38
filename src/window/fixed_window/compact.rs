//! A key's [`FixedWindow`] as [`Keyed`](crate::Keyed) holds it while nobody waits on it:
//! its state word alone.

use std::sync::atomic::Ordering;

use crate::error::TryAcquireError;
use crate::limiter::{KeyTemplate, OneWord};
use crate::permits::{screen, Screened};
use crate::quota::Quota;

use super::word::SEIZED;
use super::FixedWindow;

/// A key's window as [`Keyed`](crate::Keyed) holds it while nobody waits on it: the word
/// (never [`SEIZED`]: no composite decides over a word), and `self` is the template,
/// whose settings and clock every key shares. A word is read at now.
impl OneWord for FixedWindow {
    type Limiter = FixedWindow;

    fn of(template: &FixedWindow) -> Option<FixedWindow> {
        Some(KeyTemplate::fresh(template))
    }

    #[inline]
    fn now(&self) -> u64 {
        self.shared.clock.now()
    }

    fn idle_word(&self, now: u64) -> u64 {
        let shared = &self.shared;
        shared.layout.pack(now / shared.window_nanos, 0)
    }

    #[inline]
    fn try_acquire_word(
        &self,
        word: &mut u64,
        permits: u64,
        now: u64,
    ) -> Result<(), TryAcquireError> {
        let shared = &self.shared;
        // Taking nothing cannot jump the line.
        if screen(permits, shared.limit)? == Screened::Nothing {
            return Ok(());
        }
        let (next, _) = shared
            .count_into(*word, now, permits)
            .map_err(|retry_after| TryAcquireError::Limited { retry_after })?;
        *word = next;
        Ok(())
    }

    #[inline]
    fn quota_of_word(&self, word: u64, now: u64) -> Quota {
        let shared = &self.shared;
        let current = shared.layout.read(word, now / shared.window_nanos);
        shared.quota_at(now, current, None)
    }

    fn refund_word(&self, word: &mut u64, permits: u64, now: u64) {
        let shared = &self.shared;
        if let Some(next) = shared.refunded(*word, now / shared.window_nanos, permits) {
            *word = next;
        }
    }

    /// Whether `word` counts nothing in the window of `now`.
    #[inline]
    fn is_idle_word(&self, word: u64, now: u64) -> bool {
        let shared = &self.shared;
        shared.layout.read(word, now / shared.window_nanos).count == 0
    }

    /// A limiter like [`fresh`](crate::KeyTemplate::fresh) ones, whose state is `word`.
    fn unfold(&self, word: u64, _now: u64, _base: u64) -> FixedWindow {
        let limiter = KeyTemplate::fresh(self);
        limiter.shared.state.store(word, Ordering::Release);
        limiter
    }

    /// Also: no composite decides over it.
    fn fold(&self, limiter: &FixedWindow, _now: u64, _base: u64) -> Option<u64> {
        let (template, shared) = (&self.shared, &limiter.shared);
        let same = shared.clock == template.clock
            && (shared.limit, shared.window) == (template.limit, template.window);
        if !same || shared.turnstile.is_waiting() {
            return None;
        }
        let word = shared.state.load(Ordering::Acquire);
        (word & SEIZED == 0).then_some(word)
    }
}
