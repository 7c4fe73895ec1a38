//! The FIFO queue of waiters.
//!
//! Each waiter is the sending half of a oneshot channel plus its request. A waiter that
//! gives up is not removed from the middle of the queue; its entry becomes a tombstone,
//! found by id (ids only grow, so a binary search finds it), and is dropped when it
//! reaches the front. The live counts are updated at once, so a tombstone is invisible to
//! everything that counts the queue: `queued()`, `retry_after`, the queue limit. Once
//! tombstones outnumber live waiters the queue is compacted, so waiters cancelled behind
//! a slow head cannot grow memory without bound.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::clock::NEVER;
use crate::sync::oneshot;

/// What a waiter is told when it leaves the queue, or when it must listen elsewhere.
#[derive(Debug)]
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
    ExceedsCapacity { requested: u64, capacity: u64 },
    /// The refill task died with its runtime. The waiter keeps its place; its outcome
    /// will come on this new receiver, and it should start a refill task on its own
    /// runtime.
    Requeued(oneshot::Receiver<Outcome>),
}

/// An outcome decided under the bucket's lock, to be sent once the lock is released:
/// sending wakes the waiter's task, which may wake a sleeping worker thread, and that
/// system call should not hold up everyone else waiting for the lock.
#[derive(Debug)]
pub(crate) struct Delivery {
    sender: oneshot::Sender<Outcome>,
    outcome: Outcome,
    /// Tokens the outcome took from the bucket, owed back if nobody hears it.
    consumed: u64,
}

impl Delivery {
    pub(crate) fn new(sender: oneshot::Sender<Outcome>, outcome: Outcome, consumed: u64) -> Self {
        Delivery {
            sender,
            outcome,
            consumed,
        }
    }

    /// Tells the waiter. Returns the tokens to give back when its receiver is gone.
    pub(crate) fn send(self) -> u64 {
        match self.sender.send(self.outcome) {
            Ok(()) => 0,
            Err(_) => self.consumed,
        }
    }
}

/// Whether a request consumes its tokens or only waits for them to be there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Take,
    Wait,
}

/// What a waiter asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Request {
    pub(crate) kind: Kind,
    pub(crate) tokens: u64,
    /// Nanoseconds since the clock's origin; [`NEVER`](crate::clock::NEVER) for none.
    pub(crate) deadline: u64,
}

impl Request {
    /// The tokens this request removes from the bucket when granted.
    pub(crate) fn consumes(&self) -> u64 {
        match self.kind {
            Kind::Take => self.tokens,
            Kind::Wait => 0,
        }
    }
}

/// A waiter's place in the queue, to find it again.
pub(crate) type WaiterId = u64;

#[derive(Debug)]
struct Entry {
    id: WaiterId,
    /// `None` once the waiter gave up: a tombstone.
    sender: Option<oneshot::Sender<Outcome>>,
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
    tombstones: usize,
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

    pub(crate) fn push(&mut self, request: Request) -> (WaiterId, oneshot::Receiver<Outcome>) {
        let (sender, receiver) = oneshot::channel();
        let id = self.next_id;
        self.next_id += 1;
        self.entries.push_back(Entry {
            id,
            sender: Some(sender),
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
        (id, receiver)
    }

    /// Whether [`expire`](WaiterQueue::expire) has anything to look at: a deadline at or
    /// before `now` (of a waiter live or gone).
    #[inline]
    pub(crate) fn expiring(&self, now: u64) -> bool {
        self.deadlines
            .peek()
            .is_some_and(|&Reverse((deadline, _))| deadline <= now)
    }

    /// Takes out every live waiter whose deadline is at or before `now`, returning their
    /// senders to be told. The caller has served the head up to `now`, so these are
    /// behind a head still waiting: none of them could have been served before its
    /// deadline.
    pub(crate) fn expire(&mut self, now: u64) -> Vec<oneshot::Sender<Outcome>> {
        let mut expired = Vec::new();
        while let Some(&Reverse((deadline, id))) = self.deadlines.peek() {
            if deadline > now {
                break;
            }
            self.deadlines.pop();
            if let Some(sender) = self.take_live(id) {
                expired.push(sender);
            }
        }
        expired
    }

    /// The first live request, dropping tombstones in front of it.
    #[inline]
    pub(crate) fn head(&mut self) -> Option<Request> {
        while let Some(entry) = self.entries.front() {
            if entry.sender.is_some() {
                return Some(entry.request);
            }
            self.entries.pop_front();
            self.tombstones -= 1;
        }
        None
    }

    /// The id of the head [`head`](WaiterQueue::head) returned.
    pub(crate) fn head_id(&self) -> Option<WaiterId> {
        self.entries.front().map(|entry| entry.id)
    }

    /// Removes the head (which [`head`](WaiterQueue::head) returned) and returns its
    /// sender, for the caller to tell it its outcome; `None` when it was a tombstone.
    pub(crate) fn pop_head(&mut self) -> Option<oneshot::Sender<Outcome>> {
        let entry = self.entries.pop_front()?;
        let Some(sender) = entry.sender else {
            self.tombstones -= 1;
            return None;
        };
        self.forget(entry.request);
        Some(sender)
    }

    /// Makes the live waiter `id` a tombstone, in O(log n). Returns false when it is not
    /// in the queue (it was already told its outcome).
    pub(crate) fn abandon(&mut self, id: WaiterId) -> bool {
        self.take_live(id).is_some()
    }

    /// Makes the live waiter `id` a tombstone and returns its sender, in O(log n); `None`
    /// when it is not in the queue.
    fn take_live(&mut self, id: WaiterId) -> Option<oneshot::Sender<Outcome>> {
        let index = self
            .entries
            .binary_search_by_key(&id, |entry| entry.id)
            .ok()?;
        let entry = &mut self.entries[index];
        let sender = entry.sender.take()?;
        let request = entry.request;
        self.tombstones += 1;
        self.forget(request);
        if self.tombstones > self.live + COMPACTION_SLACK {
            self.entries.retain(|entry| entry.sender.is_some());
            self.tombstones = 0;
        }
        Some(sender)
    }

    /// The live requests, first in line first.
    pub(crate) fn requests(&self) -> impl Iterator<Item = Request> + '_ {
        self.entries
            .iter()
            .filter(|entry| entry.sender.is_some())
            .map(|entry| entry.request)
    }

    /// Tells every live waiter whose request `matches` its outcome, and removes it.
    /// O(n): for rare events (closing, lowering the capacity).
    pub(crate) fn finish_where(&mut self, mut matches: impl FnMut(&Request) -> Option<Outcome>) {
        let mut finished = Vec::new();
        for entry in &mut self.entries {
            if entry.sender.is_none() {
                continue;
            }
            if let Some(outcome) = matches(&entry.request) {
                finished.push((entry.sender.take(), entry.request, outcome));
            }
        }
        self.tombstones += finished.len();
        for (sender, request, outcome) in finished {
            self.forget(request);
            if let Some(sender) = sender {
                // A receiver that is gone has nothing to be told.
                let _ = sender.send(outcome);
            }
        }
    }

    /// Gives every live waiter a new channel in place, sending it the new receiver over
    /// the old one: their refill task died, and each must start another from its own
    /// runtime. Places in the queue are kept.
    pub(crate) fn requeue_all(&mut self) {
        let mut gone = Vec::new();
        for entry in &mut self.entries {
            let Some(old) = entry.sender.take() else {
                continue;
            };
            let (sender, receiver) = oneshot::channel();
            if old.send(Outcome::Requeued(receiver)).is_ok() {
                entry.sender = Some(sender);
            } else {
                // Its future is gone: a tombstone like any abandoned waiter.
                gone.push(entry.request);
            }
        }
        self.tombstones += gone.len();
        for request in gone {
            self.forget(request);
        }
    }

    /// Removes a live request from the counts; empties the queue of tombstones once no
    /// live waiter is left, so abandoned entries never outlive a busy period.
    fn forget(&mut self, request: Request) {
        self.live -= 1;
        self.live_tokens -= u128::from(request.tokens);
        self.live_consumption -= u128::from(request.consumes());
        if self.live == 0 {
            self.entries.clear();
            self.tombstones = 0;
            self.wait_peak = 0;
            self.deadlines.clear();
        } else if self.deadlines.len() > 2 * self.live + COMPACTION_SLACK {
            // Most deadlines belong to waiters gone (granted, or left): keep the live
            // ones. Paid for by the live + 64 departures since the last rebuild.
            let live: Vec<_> = self
                .entries
                .iter()
                .filter(|entry| entry.sender.is_some() && entry.request.deadline != NEVER)
                .map(|entry| Reverse((entry.request.deadline, entry.id)))
                .collect();
            self.deadlines = BinaryHeap::from(live);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
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
        let (_head, _head_receiver) = queue.push(take(10));
        for _ in 0..100_000 {
            let (id, _receiver) = queue.push(take(1));
            assert!(queue.abandon(id));
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
        let _head = queue.push(take(1));
        for _ in 0..100_000 {
            let _waiter = queue.push(with_deadline);
            // The one in front is served; the queue is never empty.
            assert!(queue.head().is_some());
            drop(queue.pop_head());
            assert!(queue.deadlines.len() <= 2 * queue.len() + COMPACTION_SLACK + 1);
        }
        // The deadline of the one still queued is still kept.
        assert_eq!(queue.expire(1_000_000).len(), 1);
        assert!(queue.is_empty());
    }

    #[test]
    fn abandon_finds_a_waiter_after_compaction() {
        let mut queue = WaiterQueue::default();
        let ids: Vec<(WaiterId, oneshot::Receiver<Outcome>)> =
            (0..1_000).map(|tokens| queue.push(take(tokens))).collect();
        for (id, _) in ids.iter().filter(|(id, _)| id % 3 != 0) {
            assert!(queue.abandon(*id));
        }
        for (id, _) in ids.iter().filter(|(id, _)| id % 3 == 0) {
            assert!(queue.abandon(*id), "{id}");
            assert!(!queue.abandon(*id), "{id} twice");
        }
        assert!(queue.is_empty());
    }

    #[test]
    fn requeue_keeps_places_and_hands_over_new_receivers() {
        let mut queue = WaiterQueue::default();
        let (_, mut first) = queue.push(take(1));
        let (_, mut second) = queue.push(take(2));
        queue.requeue_all();
        let Ok(Outcome::Requeued(mut first_next)) = first.try_recv() else {
            panic!("first was not requeued");
        };
        let Ok(Outcome::Requeued(_second_next)) = second.try_recv() else {
            panic!("second was not requeued");
        };
        assert_eq!(queue.head(), Some(take(1)));
        let sender = queue.pop_head().expect("the head is live");
        assert!(sender.send(Outcome::Granted).is_ok());
        assert!(matches!(first_next.try_recv(), Ok(Outcome::Granted)));
        assert_eq!(queue.head(), Some(take(2)));
    }
}
