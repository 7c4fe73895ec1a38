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
//! - A bucket has one limit or several (`Builder::limit`), numbered from 0, each a rate
//!   and a capacity. A request takes from every limit at one instant, or from none; what
//!   the bucket holds is the least any limit holds, and the largest request it can ever
//!   serve is the smallest capacity.
//! - What a limit holds is kept as *credit*, in parts of a token: a token is `period`
//!   parts (the limit's rate's period in nanoseconds) and every nanosecond adds `amount`
//!   parts. Credit is an exact integer; nothing is ever rounded except where a rate change
//!   re-expresses it in the new rate's parts, rounded down to a whole *unit* of the new
//!   rate: `gcd(amount, period)` parts, the bucket's own unit (see `src/bucket/gcra.rs`).
//! - A limit holds at most its capacity at every nanosecond, whether or not anyone
//!   waits; reaching it drops the fraction of the next token. The one exception: at the
//!   nanosecond a waiter is granted, a limit that reached its capacity at that very
//!   nanosecond keeps what the nanosecond added beyond it until the grants due then are
//!   made, and is capped right after. With one limit this is the cap as it always was:
//!   the head waits only while less than it asks is held, and it asks no more than the
//!   capacity, so the cap bites once the queue is empty, or at that nanosecond, where
//!   capping first would throw away part of a token the grant leaves behind. With
//!   several, a limit that fills while the head waits for another is held at its
//!   capacity, so that no limit grants more than its own `capacity + rate × t`.
//! - Waiters are served strictly first in, first out: the head is granted at the first
//!   nanosecond every limit holds its tokens (a take consumes them, a wait does not), and
//!   nobody behind it is served before it leaves. `try_take` never jumps the queue.
//! - A waiter with a deadline that comes before its tokens leaves at the deadline
//!   exactly, taking nothing; a head leaving at its deadline lets those behind be served
//!   from that instant on. A waiter behind the head whose deadline passes leaves then too
//!   (its own timer removes it); since nobody behind it could have been served before it
//!   reached the head, the model removes it when it is next observed.
//! - A dropped waiter takes nothing; a grant it never saw gives back what the bucket's
//!   rule allows (`src/bucket/unseen.rs`): each limit keeps its least room (capacity less
//!   credit) since the count of unseen grants was last zero and since the newest grant,
//!   noted before every take, rate change and capacity change and after every refund
//!   and lowered capacity; a dropped grant gives back the least of its own parts and the
//!   room since the newest grant when it is the newest and nothing came back since it,
//!   else the room since the oldest, and what comes back is spent from both. The model
//!   keeps the same numbers at the same steps, plainly: a rate change re-expresses them
//!   in the new rate's units, rounding down, as it does the limit's own credit.
//! - `refund` gives tokens back to every limit, each capped even while others wait;
//!   `set_rate` and `set_limit_rate` change a limit's rate from now on; `set_capacity` and
//!   `set_limit_capacity` refuse queued requests above the new smallest capacity and drop
//!   tokens above the limit's new capacity (a limit the bucket does not have is refused
//!   with `NoSuchLimit`, before anything else); `close` refuses everyone queued and
//!   everything after.
//! - `try_take`'s `retry_after` is the true wait: the grants of those queued replayed in
//!   order, then the newcomer's. With one limit the bucket may report more once a `wait`
//!   has queued since the queue was last empty; with several it is exact behind up to
//!   [`REPLAYED_AHEAD`] waiters, and never less behind more.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::time::Duration;

use token_bucket::{ConfigError, TakeError, TryTakeError};

/// The deadline of a request without one.
pub const NO_DEADLINE: u64 = u64::MAX;

/// Waiters ahead behind whom a bucket with several limits reports `retry_after` exactly.
pub const REPLAYED_AHEAD: usize = 64;

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

    /// Parts of a token in one unit of this rate: what a rate change rounds down to.
    fn unit(self) -> u128 {
        let (mut a, mut b) = (u128::from(self.amount), u128::from(self.period));
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    }
}

/// Whether a request consumes its tokens (`take`) or only waits for them (`wait`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Take,
    Wait,
}

/// A bucket's settings when it is made.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Limit 0's.
    pub rate: ModelRate,
    pub capacity: u64,
    /// The limits beside the first, in order: their rates and capacities.
    pub more: Vec<(ModelRate, u64)>,
    /// Every limit's initial tokens; `None` for each full.
    pub initial: Option<u64>,
    pub queue_limit: Option<u64>,
}

impl Setup {
    /// Every limit's rate and capacity, limit 0 first.
    pub fn limits(&self) -> Vec<(ModelRate, u64)> {
        let mut limits = vec![(self.rate, self.capacity)];
        limits.extend(self.more.iter().copied());
        limits
    }
}

/// What the model says of one limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitView {
    pub rate: ModelRate,
    pub capacity: u64,
    pub available: u64,
}

/// One limit: its rate, its capacity, and what it holds.
#[derive(Debug, Clone)]
struct Limit {
    rate: ModelRate,
    capacity: u64,
    /// What it holds, in parts (see the module's documentation).
    credit: u128,
    /// The least room since the count of unseen grants was last zero, and since the
    /// newest grant, in parts.
    least_since_oldest: u128,
    least_since_newest: u128,
}

impl Limit {
    /// Capacity less credit: what the rule of dropped grants counts.
    fn room(&self) -> u128 {
        self.full().saturating_sub(self.credit)
    }

    fn note_room(&mut self) {
        let room = self.room();
        self.least_since_oldest = self.least_since_oldest.min(room);
        self.least_since_newest = self.least_since_newest.min(room);
    }

    fn full(&self) -> u128 {
        u128::from(self.capacity) * u128::from(self.rate.period)
    }

    fn tokens(&self) -> u64 {
        u64::try_from(self.credit / u128::from(self.rate.period)).expect("tokens fit in u64")
    }

    /// Nanoseconds until it holds `tokens`, if nothing is taken; [`NO_DEADLINE`] past
    /// what a `u64` holds.
    fn nanos_until(&self, tokens: u128) -> u64 {
        let needed = tokens * u128::from(self.rate.period);
        let Some(missing) = needed.checked_sub(self.credit).filter(|&parts| parts > 0) else {
            return 0;
        };
        let nanos = missing.div_ceil(u128::from(self.rate.amount));
        u64::try_from(nanos).unwrap_or(NO_DEADLINE)
    }

    /// `elapsed` nanoseconds pass: it gains `amount` parts each, and holds at most its
    /// capacity at each. If it was full a nanosecond before the end, it ends exactly
    /// full; if it reaches its capacity only at the last nanosecond, what that nanosecond
    /// added stays (see the module's documentation: the caller caps after the grants due
    /// then).
    fn accrue(&mut self, elapsed: u64) {
        if elapsed == 0 {
            return;
        }
        let amount = u128::from(self.rate.amount);
        let before_last = self.credit + u128::from(elapsed - 1) * amount;
        self.credit = if before_last >= self.full() {
            self.full()
        } else {
            before_last + amount
        };
    }

    fn cap(&mut self) {
        self.credit = self.credit.min(self.full());
    }
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

#[derive(Debug, Clone)]
pub struct Model {
    setup: Setup,
    /// Grants that took tokens and were neither seen nor dropped yet.
    unseen: u64,
    /// The request last granted tokens from the queue.
    newest: Option<usize>,
    /// Whether a grant dropped since the newest gave anything back.
    given_back_since_newest: bool,
    /// Limit 0 first.
    limits: Vec<Limit>,
    queue_limit: Option<u64>,
    /// The instant every limit's credit is accurate at.
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
        let limits = setup
            .limits()
            .into_iter()
            .map(|(rate, capacity)| Limit {
                rate,
                capacity,
                credit: u128::from(setup.initial.unwrap_or(capacity)) * u128::from(rate.period),
                least_since_oldest: 0,
                least_since_newest: 0,
            })
            .collect();
        Model {
            queue_limit: setup.queue_limit,
            setup,
            unseen: 0,
            newest: None,
            given_back_since_newest: false,
            limits,
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

    /// Limit 0's rate.
    pub fn rate(&self) -> ModelRate {
        self.limits[0].rate
    }

    /// The smallest capacity.
    pub fn capacity(&self) -> u64 {
        self.limits
            .iter()
            .map(|limit| limit.capacity)
            .min()
            .unwrap()
    }

    /// Each limit, limit 0 first.
    pub fn limit_views(&mut self, now: u64) -> Vec<LimitView> {
        self.observe(now);
        self.limits
            .iter()
            .map(|limit| LimitView {
                rate: limit.rate,
                capacity: limit.capacity,
                available: limit.tokens(),
            })
            .collect()
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
        let unseen_grant = self.is_unseen_grant(id);
        if let Status::Finished { seen, .. } = &mut self.requests[id].status {
            *seen = true;
            self.unseen -= u64::from(unseen_grant);
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
        for id in 0..self.requests.len() {
            self.seen(id);
        }
    }

    // ----- The calls -------------------------------------------------------------------

    pub fn try_take(&mut self, tokens: u64, now: u64) -> Result<(), TryTakeRefusal> {
        self.observe(now);
        let result = if self.closed {
            Err(TryTakeRefusal::Error(TryTakeError::Closed))
        } else if tokens == 0 {
            Ok(())
        } else if tokens > self.capacity() {
            Err(TryTakeRefusal::Error(TryTakeError::ExceedsCapacity {
                requested: tokens,
                capacity: self.capacity(),
            }))
        } else if self.queue.is_empty() && self.tokens() >= tokens {
            self.consume(tokens, None);
            Ok(())
        } else {
            let retry_after_exact = if self.limits.len() == 1 {
                !self.wait_queued_since_empty
            } else {
                self.queue.len() <= REPLAYED_AHEAD
            };
            Err(TryTakeRefusal::Insufficient(Insufficient {
                true_wait: Duration::from_nanos(self.true_wait(tokens)),
                retry_after_exact,
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
            Status::Finished { seen: false, .. } => {
                let unseen_grant = self.is_unseen_grant(id);
                self.requests[id].status = Status::Dropped;
                let consumed = self.requests[id].consumes();
                if unseen_grant {
                    // Granted but never seen: each limit gets back what the rule allows.
                    let newest = self.newest == Some(id) && !self.given_back_since_newest;
                    for limit in &mut self.limits {
                        limit.note_room();
                        let allowed = match newest {
                            true => limit.least_since_newest,
                            false => limit.least_since_oldest,
                        };
                        let back =
                            (u128::from(consumed) * u128::from(limit.rate.period)).min(allowed);
                        limit.credit += back;
                        limit.least_since_oldest -= back.min(limit.least_since_oldest);
                        limit.least_since_newest -= back.min(limit.least_since_newest);
                    }
                    self.counters.taken -= consumed;
                    self.unseen -= 1;
                    self.given_back_since_newest = true;
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
        self.set_limit_rate(0, rate, now)
    }

    pub fn set_limit_rate(
        &mut self,
        limit: usize,
        rate: ModelRate,
        now: u64,
    ) -> Result<(), ConfigError> {
        self.check_limit(limit)?;
        if rate.is_zero() {
            return Err(ConfigError::ZeroRate);
        }
        // Everything up to now accrued at the old rate.
        self.observe(now);
        self.note_rooms();
        let changed = &mut self.limits[limit];
        let old = u128::from(changed.rate.period);
        let new = u128::from(rate.period);
        let unit = rate.unit();
        let convert = |parts: u128| {
            let parts = parts / old * new + parts % old * new / old;
            parts - parts % unit
        };
        changed.credit = convert(changed.credit);
        changed.least_since_oldest = convert(changed.least_since_oldest);
        changed.least_since_newest = convert(changed.least_since_newest);
        changed.rate = rate;
        Ok(())
    }

    pub fn set_capacity(&mut self, capacity: u64, now: u64) -> Result<(), ConfigError> {
        self.set_limit_capacity(0, capacity, now)
    }

    pub fn set_limit_capacity(
        &mut self,
        limit: usize,
        capacity: u64,
        now: u64,
    ) -> Result<(), ConfigError> {
        self.check_limit(limit)?;
        if capacity == 0 {
            return Err(ConfigError::ZeroCapacity);
        }
        self.observe(now);
        // Room just before a raise, and just after a cut.
        self.note_rooms();
        self.limits[limit].capacity = capacity;
        let smallest = self.capacity();
        let too_large: Vec<usize> = self
            .queue
            .iter()
            .copied()
            .filter(|&id| self.requests[id].tokens > smallest)
            .collect();
        for id in too_large {
            let requested = self.requests[id].tokens;
            self.queue.retain(|&queued| queued != id);
            let refusal = TakeError::ExceedsCapacity {
                requested,
                capacity: smallest,
            };
            self.finish(id, Err(refusal), now, Decider::Call);
        }
        self.on_queue_shrunk();
        self.cap();
        self.note_rooms();
        self.observe(now);
        Ok(())
    }

    fn check_limit(&self, limit: usize) -> Result<(), ConfigError> {
        if limit < self.limits.len() {
            Ok(())
        } else {
            Err(ConfigError::NoSuchLimit {
                limit,
                limits: self.limits.len(),
            })
        }
    }

    pub fn close(&mut self, now: u64) {
        self.observe(now);
        self.closed = true;
        while let Some(id) = self.queue.pop_front() {
            self.finish(id, Err(TakeError::Closed), now, Decider::Call);
        }
        self.on_queue_shrunk();
    }

    /// Notes every limit's room (see the module's documentation).
    fn note_rooms(&mut self) {
        for limit in &mut self.limits {
            limit.note_room();
        }
    }

    /// Whether request `id` was granted tokens from the queue (not on its first poll) and
    /// its waiter has neither read nor dropped the grant: the grants the rule counts.
    fn is_unseen_grant(&self, id: usize) -> bool {
        let request = &self.requests[id];
        let granted_from_queue = matches!(
            request.status,
            Status::Finished {
                result: Ok(()),
                by: Decider::Schedule,
                seen: false,
                ..
            }
        );
        granted_from_queue && request.consumes() > 0
    }

    // ----- Time ------------------------------------------------------------------------

    /// Replays everything due up to `now`, in order: the head is granted at the instant
    /// its tokens are there, or leaves at its deadline if that comes first; then the next.
    /// Waiters behind the head whose deadline has passed leave too. Then every limit
    /// accrues to `now`, and is capped (with one limit, this bites only if nobody waits).
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
        self.cap();
    }

    fn accrue(&mut self, to: u64) {
        if to > self.at {
            for limit in &mut self.limits {
                limit.accrue(to - self.at);
            }
            self.at = to;
        }
    }

    /// The first instant (not before `at`) at which every limit holds `tokens`, if nobody
    /// takes any before; [`NO_DEADLINE`] past what a `u64` holds.
    fn ready_at(&self, tokens: u64) -> u64 {
        ready_at(&self.limits, self.at, tokens)
    }

    // ----- Helpers ---------------------------------------------------------------------

    /// The least any limit holds.
    fn tokens(&self) -> u64 {
        self.limits.iter().map(Limit::tokens).min().unwrap()
    }

    /// Takes `tokens` from every limit; `grant` is the request when a queued waiter was
    /// granted, whose grant is then unseen until its waiter reads it.
    fn consume(&mut self, tokens: u64, grant: Option<usize>) {
        if tokens > 0 {
            self.note_rooms();
        }
        for limit in &mut self.limits {
            limit.credit -= u128::from(tokens) * u128::from(limit.rate.period);
        }
        self.counters.taken += tokens;
        if let (Some(id), true) = (grant, tokens > 0) {
            let first = self.unseen == 0;
            for limit in &mut self.limits {
                let room = limit.room();
                if first {
                    limit.least_since_oldest = room;
                }
                limit.least_since_newest = room;
            }
            self.unseen += 1;
            self.newest = Some(id);
            self.given_back_since_newest = false;
        }
    }

    fn cap(&mut self) {
        for limit in &mut self.limits {
            limit.cap();
        }
    }

    /// Tokens refunded at `now` to every limit: capped even with waiters queued (a refund
    /// never makes a burst larger than a capacity), then served.
    fn refill_by_refund(&mut self, tokens: u64, now: u64) {
        for limit in &mut self.limits {
            limit.credit += u128::from(tokens) * u128::from(limit.rate.period);
        }
        self.cap();
        self.note_rooms();
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
        if tokens > self.capacity() {
            return Some(Err(TakeError::ExceedsCapacity {
                requested: tokens,
                capacity: self.capacity(),
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
    /// queued now were served first, in order, ignoring their deadlines: their grants
    /// replayed one by one on a copy of the limits, time passing as it does.
    fn true_wait(&self, tokens: u64) -> u64 {
        let mut limits = self.limits.clone();
        let mut at = self.at;
        let requests = self.queue.iter().map(|&id| &self.requests[id]);
        for (needs, consumes) in requests
            .map(|request| (request.tokens, request.consumes()))
            .chain([(tokens, tokens)])
        {
            let ready = ready_at(&limits, at, needs);
            if ready == NO_DEADLINE {
                return NO_DEADLINE;
            }
            for limit in &mut limits {
                limit.accrue(ready - at);
                limit.credit -= u128::from(consumes) * u128::from(limit.rate.period);
            }
            at = ready;
        }
        at - self.at
    }
}

/// The first instant (not before `at`) at which every one of `limits` holds `tokens`;
/// [`NO_DEADLINE`] past what a `u64` holds.
fn ready_at(limits: &[Limit], at: u64, tokens: u64) -> u64 {
    limits
        .iter()
        .map(|limit| at.saturating_add(limit.nanos_until(u128::from(tokens))))
        .max()
        .unwrap()
}

/// How the model expects a `try_take` to be refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TryTakeRefusal {
    /// Exactly this error.
    Error(TryTakeError),
    /// `Insufficient`, with a `retry_after` as described.
    Insufficient(Insufficient),
}
