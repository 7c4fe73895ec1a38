//! The FIFO queue of waiters.
//!
//! Each waiter is the sending half of a oneshot channel plus its request. A waiter that
//! gives up is not removed from the middle of the queue (that would be O(n)); its entry
//! becomes a tombstone in O(1), found by id, and is dropped when it reaches the front.
//! The live counts are updated at once, so a tombstone is invisible to everything that
//! counts the queue: `queued()`, `retry_after`, the queue limit.

use std::collections::VecDeque;

use tokio::sync::oneshot;

/// What a waiter is told when it leaves the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Its tokens were taken for it (or, for a wait, were there).
    Granted,
    /// Its deadline passed before its tokens could be.
    TimedOut,
    /// The bucket was closed.
    Closed,
    /// The capacity was lowered below its request.
    ExceedsCapacity { requested: u64, capacity: u64 },
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

/// A waiter's place in the queue, to find it again in O(1).
pub(crate) type WaiterId = u64;

#[derive(Debug)]
struct Entry {
    /// `None` once the waiter gave up: a tombstone.
    sender: Option<oneshot::Sender<Outcome>>,
    request: Request,
}

#[derive(Debug, Default)]
pub(crate) struct WaiterQueue {
    entries: VecDeque<Entry>,
    /// The id of `entries[0]`; ids grow by one per entry pushed.
    front_id: WaiterId,
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
        saturate(self.live_tokens)
    }

    /// How many tokens must accrue before every live waiter is served and then `tokens`
    /// more are there: what a newcomer asking for `tokens` has to wait for. An upper
    /// bound when waits are queued, exact otherwise.
    pub(crate) fn tokens_ahead_of(&self, tokens: u64) -> u64 {
        saturate(self.live_consumption + u128::from(tokens.max(self.wait_peak)))
    }

    pub(crate) fn push(&mut self, request: Request) -> (WaiterId, oneshot::Receiver<Outcome>) {
        let (sender, receiver) = oneshot::channel();
        let id = self.front_id + self.entries.len() as u64;
        self.entries.push_back(Entry {
            sender: Some(sender),
            request,
        });
        self.live += 1;
        self.live_tokens += u128::from(request.tokens);
        self.live_consumption += u128::from(request.consumes());
        if request.kind == Kind::Wait {
            self.wait_peak = self.wait_peak.max(request.tokens);
        }
        (id, receiver)
    }

    /// The first live request, dropping tombstones in front of it.
    pub(crate) fn head(&mut self) -> Option<Request> {
        while let Some(entry) = self.entries.front() {
            if entry.sender.is_some() {
                return Some(entry.request);
            }
            self.entries.pop_front();
            self.front_id += 1;
        }
        None
    }

    /// Removes the head (which [`head`](WaiterQueue::head) returned) and tells it
    /// `outcome`. Returns false when its receiver was already gone.
    pub(crate) fn finish_head(&mut self, outcome: Outcome) -> bool {
        let Some(entry) = self.entries.pop_front() else {
            return false;
        };
        self.front_id += 1;
        self.settle(entry, outcome)
    }

    /// Makes the live waiter `id` a tombstone. Returns false when it is not in the queue
    /// (it was already told its outcome).
    pub(crate) fn abandon(&mut self, id: WaiterId) -> bool {
        let Some(index) = id.checked_sub(self.front_id) else {
            return false;
        };
        let Some(entry) = usize::try_from(index)
            .ok()
            .and_then(|index| self.entries.get_mut(index))
        else {
            return false;
        };
        let Some(sender) = entry.sender.take() else {
            return false;
        };
        drop(sender);
        let request = entry.request;
        self.forget(request);
        true
    }

    /// Tells every live waiter whose request `matches` its outcome, and removes it.
    /// O(n): for rare events (closing, lowering the capacity).
    pub(crate) fn finish_where(&mut self, mut matches: impl FnMut(&Request) -> Option<Outcome>) {
        let mut finished = Vec::new();
        for entry in &mut self.entries {
            let Some(outcome) = entry.sender.as_ref().and(matches(&entry.request)) else {
                continue;
            };
            if let Some(sender) = entry.sender.take() {
                finished.push((sender, entry.request, outcome));
            }
        }
        for (sender, request, outcome) in finished {
            self.forget(request);
            // A receiver that is gone has nothing to be told.
            let _ = sender.send(outcome);
        }
    }

    fn settle(&mut self, entry: Entry, outcome: Outcome) -> bool {
        let Some(sender) = entry.sender else {
            return false;
        };
        self.forget(entry.request);
        sender.send(outcome).is_ok()
    }

    /// Removes a live request from the counts; empties the queue of tombstones once no
    /// live waiter is left, so abandoned entries never outlive a busy period.
    fn forget(&mut self, request: Request) {
        self.live -= 1;
        self.live_tokens -= u128::from(request.tokens);
        self.live_consumption -= u128::from(request.consumes());
        if self.live == 0 {
            self.front_id += self.entries.len() as u64;
            self.entries.clear();
            self.wait_peak = 0;
        }
    }
}

fn saturate(tokens: u128) -> u64 {
    u64::try_from(tokens).unwrap_or(u64::MAX)
}
