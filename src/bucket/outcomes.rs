//! How a queued waiter learns its outcome: by reading what the lock's holder decided,
//! not through a channel of its own.
//!
//! Outcomes are decided under the bucket's lock, which then wakes the waiters' tasks once
//! it is released (their [`Waker`](std::task::Waker)s sit in their queue entries). A
//! woken waiter reads its outcome from [`Outcomes`], behind the lock, or in the common
//! case from [`Published`], two atomics beside it, without the lock:
//!
//! - Grants are made in queue order, and ids only grow, so one number says which waiters
//!   were granted: every waiter granted has an id below `granted_below`, and every waiter
//!   below it has left the queue. A waiter below it that is still listening (one that
//!   left by itself no longer listens) was granted, unless it was told something else.
//! - Everything else (a deadline passed, the bucket closed, the capacity fell below the
//!   request) is rare, and kept by waiter id until the waiter reads it or leaves; a close
//!   is kept once, for every waiter still queued then. `rare` counts those records:
//!   while it is zero, a waiter below `granted_below` knows it was granted, and one above
//!   it knows it is still queued, without the lock.
//!
//! The lock's holder publishes both numbers as it releases the lock, `rare` first: a
//! waiter that reads a `granted_below` past its id (with `Acquire`) then reads a `rare`
//! that counts any record made for it, since that record was made no later than the lock
//! section that moved `granted_below` past it, and only the waiter itself removes it.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::{Acquire, Release};

use crate::bucket::queue::{Outcome, WaiterId};
use crate::sync::AtomicU64;

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
    /// Whether this lock section changed what [`Published`] should say.
    changed: bool,
}

impl Outcomes {
    /// Waiter `id`, the head, was granted.
    #[inline]
    pub(crate) fn granted(&mut self, id: WaiterId) {
        debug_assert!(id >= self.granted_below, "grants follow the queue's order");
        self.granted_below = id + 1;
        self.changed = true;
    }

    /// Waiter `id` left the queue with `outcome`, not a grant.
    pub(crate) fn decided(&mut self, id: WaiterId, outcome: Outcome) {
        debug_assert!(!matches!(outcome, Outcome::Granted));
        self.others.insert(id, outcome);
        self.changed = true;
    }

    /// Every waiter still queued is told `outcome` (the bucket closed for good). A second
    /// close finds nobody queued and changes nothing.
    pub(crate) fn closed(&mut self, outcome: Outcome) {
        if self.closed.is_none() {
            self.closed = Some(outcome);
            self.changed = true;
        }
    }

    /// The outcome of waiter `id`, which has left the queue without leaving by itself,
    /// forgetting it.
    pub(crate) fn take(&mut self, id: WaiterId) -> Outcome {
        if let Some(outcome) = self.others.remove(&id) {
            self.changed = true;
            return outcome;
        }
        if id < self.granted_below {
            return Outcome::Granted;
        }
        debug_assert!(self.closed.is_some(), "waiter {id} has no outcome");
        self.closed.unwrap_or(Outcome::Closed)
    }

    /// Called as the lock is released: tells [`Published`] what changed.
    #[inline]
    pub(crate) fn publish(&mut self, published: &Published) {
        if !self.changed {
            return;
        }
        self.changed = false;
        let rare = self.others.len() as u64 + u64::from(self.closed.is_some());
        published.rare.store(rare, Release);
        published.granted_below.store(self.granted_below, Release);
    }
}

/// What [`Published::read`] can tell without the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Read {
    Granted,
    /// Still queued (or decided by a lock section still running, whose release will wake
    /// the waiter).
    Queued,
    /// Ask under the lock.
    Unknown,
}

/// [`Outcomes`] as waiters read them without the lock; see the module's docs.
#[derive(Debug)]
pub(crate) struct Published {
    granted_below: AtomicU64,
    rare: AtomicU64,
}

impl Published {
    pub(crate) fn new() -> Published {
        Published {
            granted_below: AtomicU64::new(0),
            rare: AtomicU64::new(0),
        }
    }

    /// What waiter `id`, still listening, can tell of its outcome without the lock.
    #[inline]
    pub(crate) fn read(&self, id: WaiterId) -> Read {
        let granted = id < self.granted_below.load(Acquire);
        match (granted, self.rare.load(Acquire) == 0) {
            (true, true) => Read::Granted,
            (false, true) => Read::Queued,
            (_, false) => Read::Unknown,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_waiter_below_the_mark_was_granted_unless_told_otherwise() {
        let (mut outcomes, published) = (Outcomes::default(), Published::new());
        outcomes.granted(0);
        outcomes.decided(1, Outcome::TimedOut);
        outcomes.granted(2);
        outcomes.publish(&published);
        assert_eq!(published.read(3), Read::Unknown, "a record is kept");
        assert!(matches!(outcomes.take(1), Outcome::TimedOut));
        outcomes.publish(&published);
        assert_eq!(published.read(0), Read::Granted);
        assert_eq!(published.read(2), Read::Granted);
        assert_eq!(published.read(3), Read::Queued);
        assert!(matches!(outcomes.take(2), Outcome::Granted));
    }

    #[test]
    fn a_close_tells_those_still_queued_once() {
        let (mut outcomes, published) = (Outcomes::default(), Published::new());
        outcomes.granted(0);
        outcomes.closed(Outcome::RefillFailed);
        outcomes.closed(Outcome::Closed);
        outcomes.publish(&published);
        assert_eq!(published.read(0), Read::Unknown);
        assert!(matches!(outcomes.take(0), Outcome::Granted));
        assert!(matches!(outcomes.take(1), Outcome::RefillFailed));
    }
}
