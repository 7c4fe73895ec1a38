//! How a queued waiter learns its outcome: by reading, under the bucket's lock, what the
//! lock's holder decided, not through a channel of its own.
//!
//! Outcomes are decided under the bucket's lock, which then wakes the waiters' tasks once
//! it is released (their [`Waker`](std::task::Waker)s sit in their queue entries). A
//! woken waiter takes the lock and reads its outcome from [`Outcomes`]:
//!
//! - Grants are made in queue order, and ids only grow, so one number says which waiters
//!   were granted: every waiter granted has an id below `granted_below`, and every waiter
//!   below it has left the queue. A waiter below it that is still listening (one that
//!   left by itself no longer listens) was granted, unless it was told something else.
//! - Everything else (a deadline passed, the bucket closed, the capacity fell below the
//!   request) is rare, and kept by waiter id until the waiter reads it or leaves; a close
//!   is kept once, for every waiter still queued then.
//!
//! Reading under the lock is also what tells the bucket that a grant was seen (see
//! `unseen.rs`): no count kept beside the lock could say it as exactly.

use std::collections::BTreeMap;

use crate::bucket::queue::{Outcome, WaiterId};

/// The outcomes decided for waiters no longer queued, until they read them; behind the
/// lock.
#[derive(Debug, Default)]
pub(crate) struct Outcomes {
    /// Every waiter granted has an id below this (see the module's docs).
    granted_below: WaiterId,
    /// Outcomes other than grants, by waiter.
    others: BTreeMap<WaiterId, Outcome>,
    /// What every waiter still queued when the bucket closed (or its refill task failed)
    /// is told.
    closed: Option<Outcome>,
}

impl Outcomes {
    /// Waiter `id`, the head, was granted.
    #[inline]
    pub(crate) fn granted(&mut self, id: WaiterId) {
        debug_assert!(id >= self.granted_below, "grants follow the queue's order");
        self.granted_below = id + 1;
    }

    /// Waiter `id` left the queue with `outcome`, not a grant.
    pub(crate) fn decided(&mut self, id: WaiterId, outcome: Outcome) {
        debug_assert!(!matches!(outcome, Outcome::Granted));
        self.others.insert(id, outcome);
    }

    /// Every waiter still queued is told `outcome` (the bucket closed for good). A second
    /// close finds nobody queued and changes nothing.
    pub(crate) fn closed(&mut self, outcome: Outcome) {
        if self.closed.is_none() {
            self.closed = Some(outcome);
        }
    }

    /// The outcome of waiter `id`, which has left the queue without leaving by itself,
    /// forgetting it.
    pub(crate) fn take(&mut self, id: WaiterId) -> Outcome {
        if let Some(outcome) = self.others.remove(&id) {
            return outcome;
        }
        if id < self.granted_below {
            return Outcome::Granted;
        }
        debug_assert!(self.closed.is_some(), "waiter {id} has no outcome");
        self.closed.unwrap_or(Outcome::Closed)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_waiter_below_the_mark_was_granted_unless_told_otherwise() {
        let mut outcomes = Outcomes::default();
        outcomes.granted(0);
        outcomes.decided(1, Outcome::TimedOut);
        outcomes.granted(2);
        assert!(matches!(outcomes.take(1), Outcome::TimedOut));
        assert!(matches!(outcomes.take(0), Outcome::Granted));
        assert!(matches!(outcomes.take(2), Outcome::Granted));
    }

    #[test]
    fn a_close_tells_those_still_queued_once() {
        let mut outcomes = Outcomes::default();
        outcomes.granted(0);
        outcomes.closed(Outcome::RefillFailed);
        outcomes.closed(Outcome::Closed);
        assert!(matches!(outcomes.take(0), Outcome::Granted));
        assert!(matches!(outcomes.take(1), Outcome::RefillFailed));
    }
}
