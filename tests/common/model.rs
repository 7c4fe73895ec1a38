//! A sequential reference model of `TokenBucket`: what the bucket must do, written as
//! plainly as possible, with no queue of channels, no refill task and no lock.
//!
//! It is driven by the same calls as the bucket, each at an instant (nanoseconds since the
//! bucket was made), and it says what each call returns, when each waiter finishes and
//! how, and what `available()`, `queued()` and `stats()` read. The model-based tests and
//! the `ops` fuzz target run it beside a real bucket on paused time and compare the two
//! after every step.
//!
//! The bucket's contract, as the model states it:
//!
//! - What the bucket holds is kept as *credit*, in parts of a token: a token is
//!   `period` parts (the rate's period in nanoseconds) and every nanosecond adds `amount`
//!   parts. Credit is an exact integer; nothing is ever rounded except where a rate change
//!   re-expresses a fraction of a token in the new rate's parts (rounded down).
//! - A bucket that nobody waits on holds at most `capacity` tokens; reaching it drops the
//!   fraction of the next token. While anyone waits, nothing is capped: the head always
//!   needs more than is held, so the cap could only throw away tokens promised to it.
//! - Waiters are served strictly first in, first out: the head is granted at the first
//!   nanosecond its tokens are there (a take consumes them, a wait does not), and nobody
//!   behind it is served before it leaves. `try_take` never jumps the queue.
//! - A waiter with a deadline that comes before its tokens leaves at the deadline
//!   exactly, taking nothing; a head leaving at its deadline lets those behind be served
//!   from that instant on. A waiter behind the head whose deadline passes leaves then too
//!   (its own timer removes it); since nobody behind it could have been served before it
//!   reached the head, the model removes it when it is next observed.
//! - A dropped waiter takes nothing; a grant it never saw is undone: from the drop on, the
//!   bucket holds what it would hold had that grant, and every other grant dropped
//!   unseen, never been made, everything else (takes, refunds, changes, other grants)
//!   happening at the same instants, and the bucket never holding more than its capacity.
//!   The model finds it by replaying the whole history without them (see
//!   [`Model::credit_without`]). A rate change re-expresses what those grants left in the
//!   bucket in the new rate's parts rounding down, as it does the bucket's own fraction.
//! - `refund` gives tokens back, capped even while others wait, `set_rate` changes the rate from now on,
//!   `set_capacity` refuses queued requests above the new capacity and drops tokens above
//!   it, and `close` refuses everyone queued and everything after.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::time::Duration;

use token_bucket::{ConfigError, TakeError, TryTakeError};

/// The deadline of a request without one.
pub const NO_DEADLINE: u64 = u64::MAX;

/// A rate as the model counts it: `amount` tokens every `period` nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelRate {
    pub amount: u64,
    pub period: u64,
}

impl ModelRate {
    pub fn to_rate(self) -> token_bucket::Rate {
        token_bucket::Rate::new(self.amount, Duration::from_nanos(self.period))
    }

    fn is_zero(self) -> bool {
        self.amount == 0 || self.period == 0
    }
}

/// Whether a request consumes its tokens (`take`) or only waits for them (`wait`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Take,
    Wait,
}

/// A bucket's settings when it is made.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    pub rate: ModelRate,
    pub capacity: u64,
    pub initial: u64,
    pub queue_limit: Option<u64>,
}

/// Where a request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// In the queue.
    Queued,
    /// Finished with `result` at the instant `at`.
    Finished {
        result: Result<(), TakeError>,
        at: u64,
        by: Decider,
        /// Whether the waiter has seen its outcome (its task ran after it was decided).
        seen: bool,
    },
    /// Its future was dropped before it saw an outcome.
    Dropped,
}

/// What decided a request's outcome, which says when its waiter sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decider {
    /// A call, at the instant it was made (admission, close, a refund...): seen at once.
    Call,
    /// The schedule, while nobody was looking: seen when a timer next fires, within tokio's
    /// 1 ms granularity.
    Schedule,
    /// The waiter's own deadline timer, behind the head: seen when that timer fires.
    OwnTimer,
}

#[derive(Debug, Clone)]
struct Request {
    kind: Kind,
    tokens: u64,
    deadline: u64,
    status: Status,
}

impl Request {
    fn consumes(&self) -> u64 {
        match self.kind {
            Kind::Take => self.tokens,
            Kind::Wait => 0,
        }
    }
}

/// The counters of `Stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub taken: u64,
    pub refunded: u64,
    pub denied: u64,
    pub timed_out: u64,
}

/// An expected `try_take` refusal for want of tokens: `true_wait` is how long until the
/// same request could succeed if every waiter queued now were served first;
/// `retry_after_exact` says whether the bucket must report exactly that (it may report
/// more once a `wait` has queued since the queue was last empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insufficient {
    pub true_wait: Duration,
    pub retry_after_exact: bool,
}

/// A change to what the bucket holds, other than time passing, kept so that the history
/// can be replayed without the grants dropped unseen.
#[derive(Debug, Clone, Copy)]
struct Event {
    at: u64,
    /// What the bucket held just before, in parts.
    held: u128,
    change: Change,
}

#[derive(Debug, Clone, Copy)]
enum Change {
    /// `tokens` taken; `grant` is the request when a queued waiter was granted.
    Take {
        tokens: u64,
        grant: Option<usize>,
    },
    Refund {
        tokens: u64,
    },
    Capacity {
        capacity: u64,
    },
    Rate {
        rate: ModelRate,
    },
}

#[derive(Debug, Clone)]
pub struct Model {
    setup: Setup,
    /// Every change to what the bucket holds, in order.
    history: Vec<Event>,
    /// Requests whose grant was dropped unseen, undone in the history.
    undone: Vec<usize>,
    rate: ModelRate,
    capacity: u64,
    queue_limit: Option<u64>,
    /// What the bucket holds, in parts (see the module's documentation).
    credit: u128,
    /// The instant `credit` is accurate at.
    at: u64,
    /// Every request made, by id, in the order made.
    requests: Vec<Request>,
    /// Ids of the requests waiting, first in line first.
    queue: VecDeque<usize>,
    closed: bool,
    /// Whether a `wait` has queued since the queue was last empty.
    wait_queued_since_empty: bool,
    counters: Counters,
}

impl Model {
    pub fn new(setup: Setup) -> Model {
        Model {
            setup,
            history: Vec::new(),
            undone: Vec::new(),
            rate: setup.rate,
            capacity: setup.capacity,
            queue_limit: setup.queue_limit,
            credit: u128::from(setup.initial) * u128::from(setup.rate.period),
            at: 0,
            requests: Vec::new(),
            queue: VecDeque::new(),
            closed: false,
            wait_queued_since_empty: false,
            counters: Counters::default(),
        }
    }

    // ----- What the bucket reads -------------------------------------------------------

    pub fn available(&mut self, now: u64) -> u64 {
        self.observe(now);
        self.tokens()
    }

    pub fn queued(&mut self, now: u64) -> usize {
        self.observe(now);
        self.queue.len()
    }

    pub fn queued_tokens(&mut self, now: u64) -> u64 {
        self.observe(now);
        self.queue.iter().map(|&id| self.requests[id].tokens).sum()
    }

    pub fn counters(&mut self, now: u64) -> Counters {
        self.observe(now);
        self.counters
    }

    pub fn rate(&self) -> ModelRate {
        self.rate
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// How many requests were made.
    pub fn requests(&self) -> usize {
        self.requests.len()
    }

    pub fn status(&self, id: usize) -> Status {
        self.requests[id].status
    }

    pub fn kind(&self, id: usize) -> Kind {
        self.requests[id].kind
    }

    pub fn tokens_requested(&self, id: usize) -> u64 {
        self.requests[id].tokens
    }

    pub fn deadline(&self, id: usize) -> u64 {
        self.requests[id].deadline
    }

    /// The next instant something is due after `now`: the head's tokens, or a deadline.
    /// `None` while nobody waits.
    pub fn next_due(&mut self, now: u64) -> Option<u64> {
        self.observe(now);
        let head = *self.queue.front()?;
        let head_ready = self.ready_at(self.requests[head].tokens);
        let first_deadline = self
            .queue
            .iter()
            .map(|&id| self.requests[id].deadline)
            .min();
        Some(head_ready.min(first_deadline.unwrap_or(NO_DEADLINE)))
    }

    /// The waiter of request `id` has seen its outcome, if it has one.
    pub fn seen(&mut self, id: usize) {
        if let Status::Finished { seen, .. } = &mut self.requests[id].status {
            *seen = true;
        }
    }

    /// Whether some waiter behind the head has passed its deadline by `now` and not yet
    /// been told: its own timer fires at that tick, and until it runs the bucket still
    /// counts it as queued, so what a call or a drop at that tick sees depends on whether
    /// it ran first.
    pub fn own_timer_due(&mut self, now: u64) -> bool {
        self.observe(now);
        self.requests.iter().any(|request| {
            matches!(
                request.status,
                Status::Finished {
                    by: Decider::OwnTimer,
                    seen: false,
                    ..
                }
            )
        })
    }

    /// Every outcome decided so far has been seen by its waiter.
    pub fn all_seen(&mut self) {
        for request in &mut self.requests {
            if let Status::Finished { seen, .. } = &mut request.status {
                *seen = true;
            }
        }
    }

    // ----- The calls -------------------------------------------------------------------

    pub fn try_take(&mut self, tokens: u64, now: u64) -> Result<(), TryTakeRefusal> {
        self.observe(now);
        let result = if self.closed {
            Err(TryTakeRefusal::Error(TryTakeError::Closed))
        } else if tokens == 0 {
            Ok(())
        } else if tokens > self.capacity {
            Err(TryTakeRefusal::Error(TryTakeError::ExceedsCapacity {
                requested: tokens,
                capacity: self.capacity,
            }))
        } else if self.queue.is_empty() && self.tokens() >= tokens {
            self.consume(tokens, None);
            Ok(())
        } else {
            Err(TryTakeRefusal::Insufficient(Insufficient {
                true_wait: Duration::from_nanos(self.true_wait(tokens)),
                retry_after_exact: !self.wait_queued_since_empty,
            }))
        };
        if result.is_err() {
            self.counters.denied += 1;
        }
        result
    }

    /// A `take`, `wait` or timeout form polled for the first time at `now`; `deadline` is
    /// [`NO_DEADLINE`] for none. Returns the request's id.
    pub fn request(&mut self, kind: Kind, tokens: u64, deadline: u64, now: u64) -> usize {
        self.observe(now);
        let id = self.requests.len();
        self.requests.push(Request {
            kind,
            tokens,
            deadline,
            status: Status::Queued,
        });
        match self.admit(kind, tokens, deadline) {
            Some(result) => self.finish(id, result, now, Decider::Call),
            None => {
                self.queue.push_back(id);
                if kind == Kind::Wait {
                    self.wait_queued_since_empty = true;
                }
            }
        }
        id
    }

    /// The request's future is dropped at `now`.
    pub fn drop_request(&mut self, id: usize, now: u64) {
        self.observe(now);
        match self.requests[id].status {
            Status::Queued => {
                self.requests[id].status = Status::Dropped;
                self.queue.retain(|&queued| queued != id);
                self.on_queue_shrunk();
                self.observe(now);
            }
            Status::Finished {
                result,
                seen: false,
                ..
            } => {
                self.requests[id].status = Status::Dropped;
                let consumed = self.requests[id].consumes();
                if result.is_ok() && consumed > 0 {
                    // Granted but never seen: undone. The bucket holds what it would had
                    // the grant never been made, and serves whoever that completes.
                    let replayed = self.credit_without(&self.undone);
                    assert_eq!(
                        replayed, self.credit,
                        "the replay must be the bucket so far"
                    );
                    self.counters.taken -= consumed;
                    self.undone.push(id);
                    self.credit = self.credit_without(&self.undone);
                    self.observe(now);
                }
            }
            Status::Finished { seen: true, .. } | Status::Dropped => {}
        }
    }

    pub fn refund(&mut self, tokens: u64, now: u64) {
        self.observe(now);
        if self.closed {
            return;
        }
        self.counters.refunded += tokens;
        self.refill_by_refund(tokens, now);
    }

    pub fn set_rate(&mut self, rate: ModelRate, now: u64) -> Result<(), ConfigError> {
        if rate.is_zero() {
            return Err(ConfigError::ZeroRate);
        }
        // Everything up to now accrued at the old rate.
        self.observe(now);
        self.log(Change::Rate { rate });
        let old = u128::from(self.rate.period);
        let new = u128::from(rate.period);
        let whole = self.credit / old;
        let fraction = self.credit % old;
        self.credit = whole * new + fraction * new / old;
        self.rate = rate;
        Ok(())
    }

    pub fn set_capacity(&mut self, capacity: u64, now: u64) -> Result<(), ConfigError> {
        if capacity == 0 {
            return Err(ConfigError::ZeroCapacity);
        }
        self.observe(now);
        self.capacity = capacity;
        let too_large: Vec<usize> = self
            .queue
            .iter()
            .copied()
            .filter(|&id| self.requests[id].tokens > capacity)
            .collect();
        for id in too_large {
            let requested = self.requests[id].tokens;
            self.queue.retain(|&queued| queued != id);
            let refusal = TakeError::ExceedsCapacity {
                requested,
                capacity,
            };
            self.finish(id, Err(refusal), now, Decider::Call);
        }
        self.on_queue_shrunk();
        self.log(Change::Capacity { capacity });
        self.cap();
        self.observe(now);
        Ok(())
    }

    pub fn close(&mut self, now: u64) {
        self.observe(now);
        self.closed = true;
        while let Some(id) = self.queue.pop_front() {
            self.finish(id, Err(TakeError::Closed), now, Decider::Call);
        }
        self.on_queue_shrunk();
    }

    /// What the bucket holds now (the model has observed it at `self.at`) had the grants
    /// of `undone` never been made: the history replayed from the start without them.
    /// The bucket never holds more than its capacity, or than it really held where that
    /// was more: a waiter taking a full bucket at the nanosecond it fills leaves the part
    /// of a token that nanosecond added beyond it, since nothing is capped while anyone
    /// waits. At a rate change the difference from what it really held is re-expressed in
    /// the new rate's parts, rounded down.
    fn credit_without(&self, undone: &[usize]) -> u128 {
        let mut rate = self.setup.rate;
        let mut capacity = self.setup.capacity;
        let mut credit = u128::from(self.setup.initial) * u128::from(rate.period);
        let mut at = 0;
        let full = |capacity: u64, rate: ModelRate| u128::from(capacity) * u128::from(rate.period);
        let end = Event {
            at: self.at,
            held: self.credit,
            change: Change::Take {
                tokens: 0,
                grant: None,
            },
        };
        for &Event {
            at: when,
            held,
            change,
        } in self.history.iter().chain([&end])
        {
            credit += u128::from(when - at) * u128::from(rate.amount);
            credit = credit.min(full(capacity, rate).max(held));
            at = when;
            match change {
                Change::Take { tokens, grant } => {
                    if !grant.is_some_and(|id| undone.contains(&id)) {
                        credit -= u128::from(tokens) * u128::from(rate.period);
                    }
                }
                Change::Refund { tokens } => {
                    credit += u128::from(tokens) * u128::from(rate.period);
                    credit = credit.min(full(capacity, rate));
                }
                Change::Capacity { capacity: changed } => {
                    capacity = changed;
                    credit = credit.min(full(capacity, rate));
                }
                Change::Rate { rate: changed } => {
                    let (old, new) = (u128::from(rate.period), u128::from(changed.period));
                    let extra = credit - held;
                    credit = held / old * new + held % old * new / old + extra * new / old;
                    rate = changed;
                }
            }
        }
        credit
    }

    fn log(&mut self, change: Change) {
        self.history.push(Event {
            at: self.at,
            held: self.credit,
            change,
        });
    }

    // ----- Time ------------------------------------------------------------------------

    /// Replays everything due up to `now`, in order: the head is granted at the instant
    /// its tokens are there, or leaves at its deadline if that comes first; then the next.
    /// Waiters behind the head whose deadline has passed leave too. Then the bucket accrues
    /// to `now`, and is capped if nobody waits.
    fn observe(&mut self, now: u64) {
        let now = now.max(self.at);
        while let Some(&head) = self.queue.front() {
            let request = &self.requests[head];
            let (tokens, deadline, consumes) =
                (request.tokens, request.deadline, request.consumes());
            let ready = self.ready_at(tokens);
            if deadline < ready {
                if deadline > now {
                    break;
                }
                self.accrue(deadline);
                self.queue.pop_front();
                self.counters.timed_out += 1;
                self.finish(head, Err(TakeError::Timeout), deadline, Decider::Schedule);
                continue;
            }
            if ready > now {
                break;
            }
            self.accrue(ready);
            self.queue.pop_front();
            self.consume(consumes, Some(head));
            self.finish(head, Ok(()), ready, Decider::Schedule);
        }
        let expired: Vec<usize> = self
            .queue
            .iter()
            .copied()
            .filter(|&id| self.requests[id].deadline <= now)
            .collect();
        for id in expired {
            self.queue.retain(|&queued| queued != id);
            self.counters.timed_out += 1;
            let deadline = self.requests[id].deadline;
            self.finish(id, Err(TakeError::Timeout), deadline, Decider::OwnTimer);
        }
        self.on_queue_shrunk();
        self.accrue(now);
        if self.queue.is_empty() {
            self.cap();
        }
    }

    fn accrue(&mut self, to: u64) {
        if to > self.at {
            self.credit += u128::from(to - self.at) * u128::from(self.rate.amount);
            self.at = to;
        }
    }

    /// The first instant (not before `at`) at which the bucket holds `tokens`, if nobody
    /// takes any before; [`NO_DEADLINE`] past what a `u64` holds.
    fn ready_at(&self, tokens: u64) -> u64 {
        self.at.saturating_add(self.nanos_until(u128::from(tokens)))
    }

    fn nanos_until(&self, tokens: u128) -> u64 {
        let needed = tokens * u128::from(self.rate.period);
        let Some(missing) = needed.checked_sub(self.credit).filter(|&parts| parts > 0) else {
            return 0;
        };
        let nanos = missing.div_ceil(u128::from(self.rate.amount));
        u64::try_from(nanos).unwrap_or(NO_DEADLINE)
    }

    // ----- Helpers ---------------------------------------------------------------------

    fn tokens(&self) -> u64 {
        u64::try_from(self.credit / u128::from(self.rate.period)).expect("tokens fit in u64")
    }

    fn consume(&mut self, tokens: u64, grant: Option<usize>) {
        if tokens > 0 {
            self.log(Change::Take { tokens, grant });
        }
        self.credit -= u128::from(tokens) * u128::from(self.rate.period);
        self.counters.taken += tokens;
    }

    fn cap(&mut self) {
        let full = u128::from(self.capacity) * u128::from(self.rate.period);
        self.credit = self.credit.min(full);
    }

    /// Tokens refunded at `now`: capped even with waiters queued (a refund never makes a
    /// burst larger than the capacity), then served.
    fn refill_by_refund(&mut self, tokens: u64, now: u64) {
        self.log(Change::Refund { tokens });
        self.credit += u128::from(tokens) * u128::from(self.rate.period);
        self.cap();
        self.observe(now);
    }

    fn on_queue_shrunk(&mut self) {
        if self.queue.is_empty() {
            self.wait_queued_since_empty = false;
        }
    }

    /// What a request decided on its first poll gets, or `None` when it must queue.
    fn admit(&mut self, kind: Kind, tokens: u64, deadline: u64) -> Option<Result<(), TakeError>> {
        if self.closed {
            return Some(Err(TakeError::Closed));
        }
        if tokens == 0 {
            return Some(Ok(()));
        }
        if tokens > self.capacity {
            return Some(Err(TakeError::ExceedsCapacity {
                requested: tokens,
                capacity: self.capacity,
            }));
        }
        if self.queue.is_empty() && self.tokens() >= tokens {
            if kind == Kind::Take {
                self.consume(tokens, None);
            }
            return Some(Ok(()));
        }
        // The tokens could not be there in time even if everyone ahead gave up.
        if self.ready_at(tokens) > deadline {
            self.counters.timed_out += 1;
            return Some(Err(TakeError::Timeout));
        }
        if let Some(limit) = self.queue_limit {
            let queued: u64 = self.queue.iter().map(|&id| self.requests[id].tokens).sum();
            if queued + tokens > limit {
                return Some(Err(TakeError::QueueFull { queued, limit }));
            }
        }
        None
    }

    fn finish(&mut self, id: usize, result: Result<(), TakeError>, at: u64, by: Decider) {
        self.requests[id].status = Status::Finished {
            result,
            at,
            by,
            seen: false,
        };
    }

    /// Nanoseconds until a newcomer asking for `tokens` would be served if every waiter
    /// queued now were served first, in order, ignoring their deadlines.
    fn true_wait(&self, tokens: u64) -> u64 {
        let mut consumed: u128 = 0;
        let mut wait: u64 = 0;
        let requests = self.queue.iter().map(|&id| &self.requests[id]);
        for (needs, consumes) in requests
            .map(|request| (request.tokens, request.consumes()))
            .chain([(tokens, 0)])
        {
            wait = wait.max(self.nanos_until(consumed + u128::from(needs)));
            consumed += u128::from(consumes);
        }
        wait
    }
}

/// How the model expects a `try_take` to be refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TryTakeRefusal {
    /// Exactly this error.
    Error(TryTakeError),
    /// `Insufficient`, with a `retry_after` as described.
    Insufficient(Insufficient),
}
