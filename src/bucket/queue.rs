//! The FIFO queue of waiters.
//!
//! Each waiter is its request plus the [`Waker`] of the task that polls it: the lock's
//! holder that decides its outcome takes the waker out and wakes it once the lock is
//! released, and the waiter reads the outcome the state keeps for it (`state.rs`). A
//! waiter that gives up is not removed from the middle of the queue; its entry becomes a
//! tombstone, found by id (ids only grow, so a binary search finds it), and is dropped
//! when it reaches the front. The live counts are updated at once, so a tombstone is invisible to
//! everything that counts the queue: `queued()`, `retry_after`, the queue limit. Once
//! tombstones outnumber live waiters the queue is compacted, so waiters cancelled behind
//! a slow head cannot grow memory without bound.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::task::Waker;

use crate::clock::NEVER;
use crate::error::TakeError;
use crate::permits::TooLarge;

/// What a waiter is told when it leaves the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Its tokens were taken for it (or, for a wait, were there).
    Granted,
    /// Its deadline passed before its tokens could be.
    TimedOut,
    /// The bucket was closed.
    Closed,
    /// The refill task panicked, and the bucket closed.
    RefillFailed,
    /// The capacity was lowered below its request.
    TooLarge(TooLarge),
}

/// The result an outcome means to the waiter told it.
impl From<Outcome> for Result<(), TakeError> {
    fn from(outcome: Outcome) -> Result<(), TakeError> {
        match outcome {
            Outcome::Granted => Ok(()),
            Outcome::TimedOut => Err(TakeError::Timeout),
            Outcome::Closed => Err(TakeError::Closed),
            Outcome::RefillFailed => Err(TakeError::RefillFailed),
            Outcome::TooLarge(too_large) => Err(too_large.into()),
        }
    }
}

/// Whether a request consumes its tokens or only waits for them to be there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Take,
    Wait,
    /// A composite's place (see `composite/`): it takes its tokens when the composite is
    /// granted by every member at once, which the composite decides, never the bucket.
    /// At the head it holds the line until then.
    Hold,
}

/// What a waiter asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Request {
    pub(crate) kind: Kind,
    pub(crate) tokens: u64,
    /// Nanoseconds since the clock's origin; [`NEVER`] for none.
    pub(crate) deadline: u64,
}

impl Request {
    /// The tokens this request removes from the bucket when granted.
    pub(crate) fn consumes(&self) -> u64 {
        match self.kind {
            Kind::Take | Kind::Hold => self.tokens,
            Kind::Wait => 0,
        }
    }
}

/// A waiter's place in the queue, to find it again.
pub(crate) type WaiterId = u64;

#[derive(Debug)]
struct Entry {
    id: WaiterId,
    /// Wakes the waiter's task; `None` once the waiter left the queue: a tombstone.
    waker: Option<Waker>,
    request: Request,
}

/// Tombstones tolerated beyond the live waiters before compacting: compaction costs
/// O(queue) and so is paid for by at least this many cancellations.
const COMPACTION_SLACK: usize = 64;

#[derive(Debug, Default)]
pub(crate) struct WaiterQueue {
    entries: VecDeque<Entry>,
    next_id: WaiterId,
    /// Waiters that have not given up.
    live: usize,
    /// Tokens requested by live waiters (takes and waits); 128 bits so that no number of
    /// `u64` requests overflows it.
    live_tokens: u128,
    /// Tokens live takes will consume.
    live_consumption: u128,
    /// The largest wait request since the queue was last empty (an upper bound on the
    /// live ones, kept in O(1)).
    wait_peak: u64,
    /// Waiters with a deadline, soonest first, so that one behind the head stops counting
    /// at its deadline, not when its own timer runs (a tick later). Entries of waiters
    /// that have left stay until they surface or the heap is rebuilt.
    deadlines: BinaryHeap<Reverse<(u64, WaiterId)>>,
}

impl WaiterQueue {
    /// Live waiters.
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Tokens requested by live waiters.
    pub(crate) fn tokens(&self) -> u64 {
        u64::try_from(self.live_tokens).unwrap_or(u64::MAX)
    }

    /// How many tokens must accrue before every live waiter is served and then `tokens`
    /// more are there: what a newcomer asking for `tokens` has to wait for. An upper
    /// bound when waits are queued, exact otherwise.
    pub(crate) fn tokens_ahead_of(&self, tokens: u64) -> u128 {
        self.live_consumption + u128::from(tokens.max(self.wait_peak))
    }

    pub(crate) fn push(&mut self, request: Request, waker: Waker) -> WaiterId {
        let id = self.next_id;
        self.next_id += 1;
        self.entries.push_back(Entry {
            id,
            waker: Some(waker),
            request,
        });
        self.live += 1;
        self.live_tokens += u128::from(request.tokens);
        self.live_consumption += u128::from(request.consumes());
        if request.kind == Kind::Wait {
            self.wait_peak = self.wait_peak.max(request.tokens);
        }
        if request.deadline != NEVER {
            self.deadlines.push(Reverse((request.deadline, id)));
        }
        id
    }

    /// Whether [`expire`](WaiterQueue::expire) has anything to look at: a deadline at or
    /// before `now` (of a waiter live or gone).
    #[inline]
    pub(crate) fn expiring(&self, now: u64) -> bool {
        self.deadlines
            .peek()
            .is_some_and(|&Reverse((deadline, _))| deadline <= now)
    }

    /// Takes out every live waiter whose deadline is at or before `now`, handing each one's
    /// id and waker to `expired`. The caller has served the head up to `now`, so these are
    /// behind a head still waiting: none of them could have been served before its
    /// deadline.
    pub(crate) fn expire(&mut self, now: u64, mut expired: impl FnMut(WaiterId, Waker)) {
        while let Some(&Reverse((deadline, id))) = self.deadlines.peek() {
            if deadline > now {
                break;
            }
            self.deadlines.pop();
            if let Some(waker) = self.abandon(id) {
                expired(id, waker);
            }
        }
    }

    /// The first live request, dropping tombstones in front of it.
    #[inline]
    pub(crate) fn head(&mut self) -> Option<Request> {
        while let Some(entry) = self.entries.front() {
            if entry.waker.is_some() {
                return Some(entry.request);
            }
            self.entries.pop_front();
        }
        None
    }

    /// The first live waiter's id and waker, dropping tombstones in front of it.
    pub(crate) fn head_waiter(&mut self) -> Option<(WaiterId, &Waker)> {
        self.head()?;
        let entry = self.entries.front()?;
        Some((entry.id, entry.waker.as_ref()?))
    }

    /// Removes the head (which [`head`](WaiterQueue::head) returned) and returns its id and
    /// waker, for the caller to decide its outcome and wake it; `None` when it was a
    /// tombstone.
    #[inline]
    pub(crate) fn pop_head(&mut self) -> Option<(WaiterId, Waker)> {
        let entry = self.entries.pop_front()?;
        let waker = entry.waker?;
        self.forget(entry.request);
        Some((entry.id, waker))
    }

    /// Whether waiter `id` is still queued; if so, `waker` is the one to wake it from now
    /// on. O(log n).
    pub(crate) fn register(&mut self, id: WaiterId, waker: &Waker) -> bool {
        let Some(entry) = self.live_entry(id) else {
            return false;
        };
        if let Some(registered) = &mut entry.waker {
            if !registered.will_wake(waker) {
                registered.clone_from(waker);
            }
        }
        true
    }

    fn live_entry(&mut self, id: WaiterId) -> Option<&mut Entry> {
        let index = self
            .entries
            .binary_search_by_key(&id, |entry| entry.id)
            .ok()?;
        let entry = &mut self.entries[index];
        entry.waker.is_some().then_some(entry)
    }

    /// Makes the live waiter `id` a tombstone and returns its waker, in O(log n); `None`
    /// when it is not in the queue (its outcome was decided).
    pub(crate) fn abandon(&mut self, id: WaiterId) -> Option<Waker> {
        let entry = self.live_entry(id)?;
        let waker = entry.waker.take()?;
        let request = entry.request;
        self.forget(request);
        // The entries not live are tombstones.
        if self.entries.len() - self.live > self.live + COMPACTION_SLACK {
            self.entries.retain(|entry| entry.waker.is_some());
        }
        Some(waker)
    }

    /// The live requests, first in line first.
    pub(crate) fn requests(&self) -> impl Iterator<Item = Request> + '_ {
        self.entries
            .iter()
            .filter(|entry| entry.waker.is_some())
            .map(|entry| entry.request)
    }

    /// Takes out every live waiter whose request `matches`, handing each one's id and
    /// waker to `finished`. O(n): for rare events (closing, lowering the capacity).
    pub(crate) fn finish_where(
        &mut self,
        mut matches: impl FnMut(&Request) -> bool,
        mut finished: impl FnMut(WaiterId, &Request, Waker),
    ) {
        let mut gone = Vec::new();
        for entry in &mut self.entries {
            if entry.waker.is_none() || !matches(&entry.request) {
                continue;
            }
            if let Some(waker) = entry.waker.take() {
                finished(entry.id, &entry.request, waker);
                gone.push(entry.request);
            }
        }
        for request in gone {
            self.forget(request);
        }
    }

    /// Hands a copy of every live waiter's waker to `woken`, keeping their places: their
    /// refill task died, and each must start another from its own runtime when polled.
    pub(crate) fn wake_all(&self, woken: &mut Vec<Waker>) {
        woken.extend(self.entries.iter().filter_map(|entry| entry.waker.clone()));
    }

    /// Removes a live request from the counts; empties the queue of tombstones once no
    /// live waiter is left, so abandoned entries never outlive a busy period.
    #[inline]
    fn forget(&mut self, request: Request) {
        self.live -= 1;
        self.live_tokens -= u128::from(request.tokens);
        self.live_consumption -= u128::from(request.consumes());
        // The counts inline, every grant takes them; the tidying out of line.
        if self.live == 0 || self.deadlines.len() > 2 * self.live + COMPACTION_SLACK {
            self.tidy();
        }
    }

    /// Drops the tombstones once nobody is queued, or the deadlines of waiters gone once
    /// they outnumber the live ones.
    fn tidy(&mut self) {
        if self.live == 0 {
            self.entries.clear();
            self.wait_peak = 0;
            self.deadlines.clear();
        } else if self.deadlines.len() > 2 * self.live + COMPACTION_SLACK {
            // Most deadlines belong to waiters gone (granted, or left): keep the live
            // ones. Paid for by the live + 64 departures since the last rebuild.
            let live: Vec<_> = self
                .entries
                .iter()
                .filter(|entry| entry.waker.is_some() && entry.request.deadline != NEVER)
                .map(|entry| Reverse((entry.request.deadline, entry.id)))
                .collect();
            self.deadlines = BinaryHeap::from(live);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use futures::task::noop_waker;

    use super::*;

    fn take(tokens: u64) -> Request {
        Request {
            kind: Kind::Take,
            tokens,
            deadline: NEVER,
        }
    }

    #[test]
    fn waiters_cancelled_behind_a_slow_head_do_not_grow_the_queue() {
        let mut queue = WaiterQueue::default();
        queue.push(take(10), noop_waker());
        for _ in 0..100_000 {
            let id = queue.push(take(1), noop_waker());
            assert!(queue.abandon(id).is_some());
            assert!(queue.entries.len() <= 1 + 1 + COMPACTION_SLACK);
        }
        assert_eq!((queue.len(), queue.tokens()), (1, 10));
        assert_eq!(queue.head(), Some(take(10)));
    }

    #[test]
    fn deadlines_of_waiters_served_while_others_wait_do_not_grow_the_heap() {
        let mut queue = WaiterQueue::default();
        let with_deadline = Request {
            deadline: 1_000_000,
            ..take(1)
        };
        queue.push(take(1), noop_waker());
        for _ in 0..100_000 {
            queue.push(with_deadline, noop_waker());
            // The one in front is served; the queue is never empty.
            assert!(queue.head().is_some());
            drop(queue.pop_head());
            assert!(queue.deadlines.len() <= 2 * queue.len() + COMPACTION_SLACK + 1);
        }
        // The deadline of the one still queued is still kept.
        let mut expired = 0;
        queue.expire(1_000_000, |_, _| expired += 1);
        assert_eq!(expired, 1);
        assert!(queue.is_empty());
    }

    #[test]
    fn abandon_finds_a_waiter_after_compaction() {
        let mut queue = WaiterQueue::default();
        let ids: Vec<WaiterId> = (0..1_000)
            .map(|tokens| queue.push(take(tokens), noop_waker()))
            .collect();
        for id in ids.iter().filter(|id| *id % 3 != 0) {
            assert!(queue.abandon(*id).is_some());
        }
        for id in ids.iter().filter(|id| *id % 3 == 0) {
            assert!(queue.register(*id, &noop_waker()), "{id}");
            assert!(queue.abandon(*id).is_some(), "{id}");
            assert!(queue.abandon(*id).is_none(), "{id} twice");
            assert!(!queue.register(*id, &noop_waker()), "{id} gone");
        }
        assert!(queue.is_empty());
    }

    #[test]
    fn waking_all_keeps_places() {
        let mut queue = WaiterQueue::default();
        let first = queue.push(take(1), noop_waker());
        let second = queue.push(take(2), noop_waker());
        let mut woken = Vec::new();
        queue.wake_all(&mut woken);
        assert_eq!(woken.len(), 2);
        assert_eq!(queue.head(), Some(take(1)));
        assert_eq!(queue.pop_head().map(|(id, _)| id), Some(first));
        assert_eq!(queue.head(), Some(take(2)));
        assert_eq!(queue.pop_head().map(|(id, _)| id), Some(second));
    }
}
