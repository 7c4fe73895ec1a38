//! The bucket's state behind its lock, and [`State::serve`], the one routine that moves it
//! forward in time.
//!
//! Every operation first calls `serve(now)`, which replays what happened since the last
//! observation *on the schedule*: each waiter at the head is granted at the exact
//! nanosecond its tokens accrued (or dropped at the exact nanosecond its deadline passed),
//! in order, however late the observation comes. The refill task is only the observer of
//! last resort, waking when nobody else touches the bucket.
//!
//! A bucket may have several limits (`limits.rs`): a waiter is granted at the first
//! nanosecond every limit holds its tokens, and takes them from all at once. Each limit
//! is capped at its capacity as time passes, waiters or not, but for what the nanosecond
//! of a grant adds beyond it, capped once that nanosecond's grants are made: with one
//! limit that is where the cap has always bitten (only once the queue empties, since a
//! waiter waits only while the bucket holds less than it asks); with several, it keeps
//! a limit that fills while the head waits for another within its own capacity.

use std::collections::BTreeMap;
use std::task::Waker;
use std::time::Duration;

use crate::bucket::counters::{Count, Counters, Tally};
use crate::bucket::gcra::Units;
use crate::bucket::limits::{Limit, Limits};
use crate::bucket::queue::{Kind, Outcome, Request, WaiterId, WaiterQueue};
use crate::bucket::stats::{LimitStats, Stats};
use crate::clock::{duration_from_nanos, NEVER};
use crate::error::{ConfigError, TakeError, TryTakeError};
use crate::permits::{screen, Screened, TooLarge};
use crate::quota::{Policy, Quota};
use crate::rate::Rate;

/// What the bucket's settings are when it is made.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Limit 0's.
    pub(crate) rate: Rate,
    pub(crate) capacity: u64,
    /// The other limits' rates and capacities, in order; empty for one limit.
    pub(crate) more: Vec<(Rate, u64)>,
    /// Every limit's; `None` for each full.
    pub(crate) initial: Option<u64>,
    /// In tokens; `None` for no limit.
    pub(crate) queue_limit: Option<u64>,
}

impl Settings {
    /// One limit of `rate` and `capacity`, starting full.
    pub(crate) fn one_limit(rate: Rate, capacity: u64, queue_limit: Option<u64>) -> Settings {
        Settings {
            rate,
            capacity,
            more: Vec::new(),
            initial: None,
            queue_limit,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let limits =
            || std::iter::once((self.rate, self.capacity)).chain(self.more.iter().copied());
        check_rate(self.rate)?;
        check_capacity(self.capacity)?;
        // An added limit's errors name it, since the caller gave several.
        for (limit, &(rate, capacity)) in (1..).zip(&self.more) {
            check_rate(rate).map_err(|_| ConfigError::ZeroRateInLimit { limit, rate })?;
            check_capacity(capacity).map_err(|_| ConfigError::ZeroCapacityInLimit { limit })?;
        }
        for (limit, (rate, capacity)) in limits().enumerate() {
            check_count(limit, rate, capacity)?;
        }
        let smallest = limits().map(|(_, capacity)| capacity).min();
        if let (Some(initial), Some(capacity)) = (self.initial, smallest) {
            if initial > capacity {
                return Err(ConfigError::InitialExceedsCapacity { initial, capacity });
            }
        }
        Ok(())
    }
}

fn check_rate(rate: Rate) -> Result<(), ConfigError> {
    if rate.is_zero() {
        return Err(ConfigError::ZeroRate);
    }
    Ok(())
}

fn check_count(limit: usize, rate: Rate, capacity: u64) -> Result<(), ConfigError> {
    if !Units::count_exactly(rate, capacity) {
        return Err(ConfigError::TooSlowToFill {
            limit,
            rate,
            capacity,
        });
    }
    Ok(())
}

fn check_capacity(capacity: u64) -> Result<(), ConfigError> {
    if capacity == 0 {
        return Err(ConfigError::ZeroCapacity);
    }
    Ok(())
}

/// Where a composite's hold stands in a bucket's line (see [`State::hold_standing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// At the head, and the bucket holds its tokens now, as it has since this instant
    /// (back to when the hold reached the head: see `commit_hold`).
    Ready { since: u64 },
    /// At the head; the bucket holds its tokens from this instant on.
    ReadyAt(u64),
    /// Others are ahead of it: it is woken once it reaches the head.
    Behind,
    /// It is no longer queued: the bucket closed, or its capacity fell below the request.
    Left(Outcome),
}

/// Why a queued waiter leaves the queue early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leaving {
    /// Its future was dropped: a grant it never read gives back what the rule of
    /// `unseen.rs` allows.
    Dropped,
    /// Its deadline passed.
    DeadlinePassed,
}

#[derive(Debug)]
pub(crate) struct State {
    /// Every limit's rate, capacity and instant, and each one's least room while a grant
    /// is unseen.
    limits: Limits,
    queue_limit: Option<u64>,
    queue: WaiterQueue,
    closed: bool,
    tally: Tally,
    /// The instant the refill task (if one runs) will next wake at.
    refill_wake: u64,
    /// Waiters whose outcomes were decided, to wake once the lock is released (see
    /// `Locked` in `shared.rs`): waking may wake a sleeping worker
    /// thread, and that system call should not hold up everyone else waiting for the lock.
    wakers: Vec<Waker>,
    /// The outcomes of waiters that have left the queue other than by themselves, until
    /// they read them under the lock (a grant read is seen: see `unseen.rs`).
    outcomes: BTreeMap<WaiterId, Outcome>,
    /// The composite hold last woken for reaching the head, so that it is woken once
    /// there, not at every look (it then decides when to look again).
    hold_woken: Option<WaiterId>,
    /// The composite hold that headed the queue at the last look, while the limits store
    /// nothing of time passing (see `limits.rs`).
    hold_at_head: Option<WaiterId>,
}

impl State {
    pub(crate) fn new(settings: &Settings, now: u64) -> State {
        State {
            limits: Limits::new(
                (settings.rate, settings.capacity),
                &settings.more,
                settings.initial,
                now,
            ),
            queue_limit: settings.queue_limit,
            queue: WaiterQueue::default(),
            closed: false,
            tally: Tally::default(),
            refill_wake: NEVER,
            wakers: Vec::new(),
            outcomes: BTreeMap::new(),
            hold_woken: None,
            hold_at_head: None,
        }
    }

    /// Limit 0's rate.
    pub(crate) fn rate(&self) -> Rate {
        self.limits.first().rate
    }

    /// The smallest capacity: the largest request that can ever be served.
    pub(crate) fn capacity(&self) -> u64 {
        self.limits.capacity()
    }

    /// The settings of a new, full bucket with these limits and `queue_limit`.
    pub(crate) fn settings_when_full(&self, queue_limit: Option<u64>) -> Settings {
        let first = self.limits.first();
        Settings {
            rate: first.rate,
            capacity: first.capacity(),
            more: (self.limits.iter().skip(1))
                .map(|limit| (limit.rate, limit.capacity()))
                .collect(),
            initial: None,
            queue_limit,
        }
    }

    pub(crate) fn queued(&self) -> usize {
        self.queue.len()
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed
    }

    /// Brings the bucket up to `now`: grants every waiter whose tokens accrued by then and
    /// expires every waiter whose deadline passed first, each at its own instant, in
    /// order. Returns `now`, or the latest instant observed if a racing caller already went
    /// past it.
    pub(crate) fn serve(&mut self, now: u64) -> u64 {
        let now = now.max(self.limits.now());
        if let Some(hold) = self.hold_at_head.take() {
            if self.queue.head_waiter().map(|(head, _)| head) != Some(hold) {
                // The hold that headed the line left since: whoever heads it now reached
                // the head at that instant, the last observed, and nothing before it.
                let left_at = self.limits.now();
                self.limits.advance(left_at);
            }
        }
        if self.queue.is_empty() {
            // The common case, kept short: nothing to replay, only cap.
            self.limits.observe(now);
            return now;
        }
        let mut held = false;
        while let Some(head) = self.queue.head() {
            if head.kind == Kind::Hold {
                // A composite's place: it holds the line until the composite decides,
                // and is told once that it reached the head.
                self.hold_at_head();
                held = true;
                break;
            }
            let ready_at = self.limits.ready_at(head.tokens);
            if head.deadline < ready_at {
                if head.deadline > now {
                    break;
                }
                // Those behind it could not be served while it stood in front of them.
                self.limits.advance(head.deadline);
                self.tally.add(Count::TimedOut, 1);
                if let Some((id, waker)) = self.queue.pop_head() {
                    self.outcomes.insert(id, Outcome::TimedOut);
                    self.wakers.push(waker);
                }
                continue;
            }
            if ready_at > now {
                break;
            }
            // A limit that filled before this instant holds its capacity; one that fills
            // at it keeps what the instant added until the grants due now are made.
            self.limits.advance(ready_at);
            let consumed = head.consumes();
            self.limits.take(consumed);
            // `head` returned a live waiter.
            if let Some((id, waker)) = self.queue.pop_head() {
                self.tally.add(Count::Taken, consumed);
                if consumed > 0 {
                    self.limits.granted(id);
                }
                self.outcomes.insert(id, Outcome::Granted);
                self.wakers.push(waker);
            }
        }
        // Those behind the head whose deadline passed leave now, at the instant anyone
        // looks, rather than when their own timer runs a tick later.
        if self.queue.expiring(now) {
            let (tally, outcomes, wakers) = (&mut self.tally, &mut self.outcomes, &mut self.wakers);
            self.queue.expire(now, |id, waker| {
                tally.add(Count::TimedOut, 1);
                outcomes.insert(id, Outcome::TimedOut);
                wakers.push(waker);
            });
        }
        // Every observation ends capped (see `limits.rs`), but for one a composite's hold
        // heads: its grant may be made as of an earlier instant. With one limit and
        // waiters queued the cap never bites, as the head needs more than is held, and no
        // more than the capacity; with several, the others may have filled since.
        match held {
            true => self.limits.pass_time(now),
            false => self.limits.observe(now),
        }
        now
    }

    /// Whole tokens held at `now`.
    pub(crate) fn available(&mut self, now: u64) -> u64 {
        self.serve(now);
        self.limits.tokens()
    }

    pub(crate) fn try_take(&mut self, tokens: u64, now: u64) -> Result<(), TryTakeError> {
        let result = self.check_take(tokens, now);
        match result {
            Ok(()) => self.take_checked(tokens),
            Err(_) => self.note_denied(),
        }
        result
    }

    /// Whether [`try_take`](State::try_take) would take `tokens` at `now`, taking and
    /// counting nothing. A composite asks each member this before it takes
    /// from any (see `composite/`).
    pub(crate) fn check_take(&mut self, tokens: u64, now: u64) -> Result<(), TryTakeError> {
        // Taking nothing cannot jump the queue.
        if self.screen(tokens, now, TryTakeError::Closed)? == Screened::Nothing
            || self.queue.is_empty() && self.limits.tokens() >= tokens
        {
            return Ok(());
        }
        let retry_after = match self.limits.wait_behind(&self.queue, |_| tokens) {
            // Past what a u64 of nanoseconds holds (584 years): never shorter than true.
            NEVER => Duration::MAX,
            nanos => Duration::from_nanos(nanos),
        };
        Err(TryTakeError::Insufficient { retry_after })
    }

    /// Serves up to `now`, then what every request meets before the tokens: the bucket is
    /// open (else `closed`), and the request fits its smallest capacity (see `permits`).
    fn screen<E: From<TooLarge>>(
        &mut self,
        tokens: u64,
        now: u64,
        closed: E,
    ) -> Result<Screened, E> {
        self.serve(now);
        if self.closed {
            return Err(closed);
        }
        Ok(screen(tokens, self.capacity())?)
    }

    /// Whether `tokens` more may queue under the queue limit.
    fn check_queue_limit(&self, tokens: u64) -> Result<(), TakeError> {
        let (queued, Some(limit)) = (self.queue.tokens(), self.queue_limit) else {
            return Ok(());
        };
        if queued
            .checked_add(tokens)
            .map_or(true, |total| total > limit)
        {
            return Err(TakeError::QueueFull { queued, limit });
        }
        Ok(())
    }

    /// Counts a request refused.
    pub(crate) fn note_denied(&mut self) {
        self.tally.add(Count::Denied, 1);
    }

    /// Takes `tokens`, which [`check_take`](State::check_take) allowed in this same lock
    /// section.
    pub(crate) fn take_checked(&mut self, tokens: u64) {
        self.limits.take(tokens);
        self.tally.add(Count::Taken, tokens);
    }

    // ----- A composite's hold (see `composite/`) --------------------------------------

    /// Whether a composite may hold a place for `tokens`: the bucket is open, the tokens
    /// fit its smallest capacity and its queue limit. Nothing is granted here, even with
    /// the tokens there: the composite decides over all its members at once.
    pub(crate) fn admit_hold(&mut self, tokens: u64, now: u64) -> Result<(), TakeError> {
        self.screen(tokens, now, TakeError::Closed)?;
        self.check_queue_limit(tokens)
    }

    /// Where hold `id` for `tokens` stands at `now`; while it is queued, `waker` is the
    /// one to wake when it reaches the head.
    pub(crate) fn hold_standing(
        &mut self,
        id: WaiterId,
        tokens: u64,
        waker: &Waker,
        now: u64,
    ) -> Standing {
        self.serve(now);
        if !self.queue.register(id, waker) {
            return Standing::Left(self.outcome(id));
        }
        if self.queue.head_waiter().map(|(head, _)| head) != Some(id) {
            return Standing::Behind;
        }
        // At the head, it has been told so.
        self.hold_woken = Some(id);
        // From the last change on: only time changed the limits since.
        let ready_at = self.limits.ready_at(tokens);
        if ready_at <= now {
            Standing::Ready { since: ready_at }
        } else {
            Standing::ReadyAt(ready_at)
        }
    }

    /// Takes hold `id`'s `tokens` and removes it from the head: every member of the
    /// composite admits it at `now`, as [`hold_standing`](State::hold_standing) said
    /// `Ready` in this same lock section, and all did from `as_of` on (at most `now`),
    /// the instant the composite planned to decide at, which its timer may have woken it
    /// after. The grant is made as of `as_of` (or as of the instant the bucket held the
    /// tokens, if later), as a plain waiter's is made on the schedule however late it is
    /// seen: a late wake-up does not cost the bucket what it would have gained since had
    /// it not been full. Those still behind are served from then on, up to `now` (one
    /// whose deadline passed while the hold stood at the head has left, timed out).
    pub(crate) fn commit_hold(&mut self, id: WaiterId, tokens: u64, as_of: u64, now: u64) {
        debug_assert_eq!(self.queue.head_waiter().map(|(head, _)| head), Some(id));
        debug_assert!(self.limits.ready_at(tokens) <= now, "committed when ready");
        // Only time changed the limits since the hold reached the head, or since it was
        // last ready: their instants say what they held at `as_of`.
        self.limits
            .advance(as_of.min(now).max(self.limits.ready_at(tokens)));
        // Those behind are served from that instant on.
        self.hold_at_head = None;
        self.limits.take(tokens);
        if self.queue.pop_head().is_some() {
            self.tally.add(Count::Taken, tokens);
            self.outcomes.insert(id, Outcome::Granted);
        }
        self.serve(now);
    }

    /// The tokens, the rate or a capacity changed other than by time: serves whoever
    /// that completes as of `now`, and wakes a hold at the head again, as it may be ready
    /// sooner than its composite planned.
    fn changed_at(&mut self, now: u64) {
        self.hold_woken = None;
        self.serve(now);
    }

    /// The hold at the head: wakes it, once.
    fn hold_at_head(&mut self) {
        if let Some((id, waker)) = self.queue.head_waiter() {
            self.hold_at_head = Some(id);
            if self.hold_woken != Some(id) {
                self.wakers.push(waker.clone());
                self.hold_woken = Some(id);
            }
        }
    }

    /// Decides a request on its first poll: served now (`true`), refused now, or it must
    /// queue (`false`).
    pub(crate) fn admit(&mut self, request: Request, now: u64) -> Result<bool, TakeError> {
        if self.screen(request.tokens, now, TakeError::Closed)? == Screened::Nothing {
            return Ok(true);
        }
        if self.queue.is_empty() && self.limits.tokens() >= request.tokens {
            self.take_checked(request.consumes());
            return Ok(true);
        }
        // Even if every waiter ahead gave up, the tokens would come too late.
        if self.limits.ready_at(request.tokens) > request.deadline {
            self.tally.add(Count::TimedOut, 1);
            return Err(TakeError::Timeout);
        }
        self.check_queue_limit(request.tokens)?;
        Ok(false)
    }

    /// Queues a request [`admit`](State::admit) said must wait; `waker` wakes its task
    /// once its outcome is decided.
    pub(crate) fn enqueue(&mut self, request: Request, waker: Waker) -> WaiterId {
        self.queue.push(request, waker)
    }

    /// Queued waiter `id`'s outcome, if it was decided; otherwise `waker` is the one to
    /// wake it from now on. A grant of the `consumes` tokens it takes, read here, is seen.
    pub(crate) fn poll_outcome(
        &mut self,
        id: WaiterId,
        consumes: u64,
        waker: &Waker,
    ) -> Option<Outcome> {
        if self.queue.register(id, waker) {
            return None;
        }
        let outcome = self.outcome(id);
        if outcome == Outcome::Granted && consumes > 0 {
            self.limits.seen();
        }
        Some(outcome)
    }

    /// Takes a queued waiter out of the queue early. Returns the outcome it had already
    /// been told, if any; a grant it is `Dropped` without reading gives back what
    /// `unseen.rs` allows.
    pub(crate) fn leave(
        &mut self,
        id: WaiterId,
        request: Request,
        why: Leaving,
        now: u64,
    ) -> Option<Outcome> {
        let now = self.serve(now);
        if self.queue.abandon(id).is_some() {
            if why == Leaving::DeadlinePassed {
                self.tally.add(Count::TimedOut, 1);
            }
            // It may have been the head that held the others back.
            self.serve(now);
            return None;
        }
        let outcome = self.outcome(id);
        if outcome == Outcome::Granted && request.consumes() > 0 {
            // Read here, not through its future: it is seen, or never will be.
            match why {
                Leaving::Dropped => self.return_unseen(id, request, now),
                Leaving::DeadlinePassed => self.limits.seen(),
            }
        }
        Some(outcome)
    }

    /// The outcome of waiter `id`, which has left the queue other than by itself,
    /// forgetting it.
    fn outcome(&mut self, id: WaiterId) -> Outcome {
        let outcome = self.outcomes.remove(&id);
        debug_assert!(outcome.is_some(), "waiter {id} has no outcome");
        outcome.unwrap_or(Outcome::Closed)
    }

    /// Exchanges the wakers of waiters to wake for `empty` (an empty vector whose capacity
    /// the caller reuses), to wake them once the lock is released.
    pub(crate) fn swap_wakers(&mut self, empty: &mut Vec<Waker>) {
        debug_assert!(empty.is_empty());
        std::mem::swap(&mut self.wakers, empty);
    }

    pub(crate) fn has_wakers(&self) -> bool {
        !self.wakers.is_empty()
    }

    /// Adds refunded tokens to every limit, never above its capacity, and serves whoever
    /// they complete. Capping here is right even with waiters queued: the limits are
    /// already at `now`, and a refund never makes a burst larger than a capacity.
    pub(crate) fn refund(&mut self, tokens: u64, now: u64) {
        let now = self.serve(now);
        if self.closed {
            return;
        }
        self.tally.add(Count::Refunded, tokens);
        self.limits.refund(tokens);
        self.changed_at(now);
    }

    /// Undoes waiter `id`'s grant, which nobody saw: each limit gets back what the rule
    /// of `unseen.rs` allows, and whoever that completes is served. It no longer counts as
    /// taken, whatever came back.
    fn return_unseen(&mut self, id: WaiterId, request: Request, now: u64) {
        self.tally.add(Count::Untaken, request.consumes());
        if self.limits.give_back_unseen(id, request.consumes()) {
            self.changed_at(now);
        }
    }

    /// The refill task died with its runtime: every waiter keeps its place and is woken,
    /// to start a refill task on its own runtime when it finds itself still queued.
    pub(crate) fn refill_lost(&mut self) {
        self.queue.wake_all(&mut self.wakers);
    }

    /// Limit `index`, or the error naming it.
    fn check_limit(&self, index: usize) -> Result<&Limit, ConfigError> {
        self.limits.get(index).ok_or(ConfigError::NoSuchLimit {
            limit: index,
            limits: self.limits.len(),
        })
    }

    /// Limit `index` takes `rate` and `capacity` (each `None` for as it is) from `now` on:
    /// everything up to now accrued at the old settings. Waiters asking for more than the
    /// smallest capacity then are refused. Returns that smallest capacity; a refused
    /// change changes nothing.
    pub(crate) fn set_limit(
        &mut self,
        index: usize,
        rate: Option<Rate>,
        capacity: Option<u64>,
        now: u64,
    ) -> Result<u64, ConfigError> {
        let limit = self.check_limit(index)?;
        let (rate, capacity) = (
            rate.unwrap_or(limit.rate),
            capacity.unwrap_or(limit.capacity()),
        );
        check_rate(rate)?;
        check_capacity(capacity)?;
        check_count(index, rate, capacity)?;
        let smallest = self.limits.capacity_with(index, capacity);
        let now = self.serve(now);
        let (outcomes, wakers) = (&mut self.outcomes, &mut self.wakers);
        self.queue.finish_where(
            |request| request.tokens > smallest,
            |id, request, waker| {
                let too_large = TooLarge {
                    requested: request.tokens,
                    most: smallest,
                };
                outcomes.insert(id, Outcome::TooLarge(too_large));
                wakers.push(waker);
            },
        );
        self.limits.set(index, rate, capacity);
        // A waiter that left may have held smaller ones back.
        self.changed_at(now);
        Ok(smallest)
    }

    /// Closes for good. Waiters whose tokens accrued before now are granted first: they
    /// were served on the schedule, whether or not anyone had looked yet.
    pub(crate) fn close(&mut self, now: u64) {
        self.serve(now);
        self.closed = true;
        self.finish_all(Outcome::Closed);
    }

    /// The refill task panicked: closes for good, telling every waiter so. It does not
    /// serve first, since serving may be what panicked.
    pub(crate) fn fail(&mut self) {
        self.closed = true;
        self.finish_all(Outcome::RefillFailed);
    }

    /// Tells every waiter still queued `outcome`: the bucket closed for good.
    fn finish_all(&mut self, outcome: Outcome) {
        let (outcomes, wakers) = (&mut self.outcomes, &mut self.wakers);
        self.queue.finish_where(
            |_| true,
            |id, _, waker| {
                outcomes.insert(id, outcome);
                wakers.push(waker);
            },
        );
    }

    /// A snapshot at `now`, counting what `counters` hold and this lock section counted.
    pub(crate) fn stats(&mut self, now: u64, counters: &Counters) -> Stats {
        self.serve(now);
        let counted = counters.read(&self.tally);
        Stats {
            available: self.limits.tokens(),
            capacity: self.capacity(),
            rate: self.rate(),
            queued: self.queue.len(),
            queued_tokens: self.queue.tokens(),
            taken: counted.taken,
            refunded: counted.refunded,
            denied: counted.denied,
            timed_out: counted.timed_out,
            closed: self.closed,
        }
    }

    /// The [`Quota`] at `now`: the whole tokens held (the least over the limits), and how
    /// long until every limit is full again were the waiters queued served and nothing
    /// else taken (see [`Limits::wait_behind`]), rounded up to the nanosecond. Measured
    /// from `now`, though the limits may stand a little later (a racing caller read a
    /// later clock): never short.
    pub(crate) fn quota(&mut self, now: u64) -> Quota {
        let served = self.serve(now);
        let full_after = match self.limits.wait_behind(&self.queue, Limit::capacity) {
            // Past what a u64 of nanoseconds holds (584 years).
            NEVER => Duration::MAX,
            nanos => duration_from_nanos(u128::from(nanos) + u128::from(served - now)),
        };
        Quota {
            remaining: self.limits.tokens(),
            full_after,
        }
    }

    /// Each limit's [`Policy`], in order.
    pub(crate) fn policies(&self) -> impl Iterator<Item = Policy> + '_ {
        self.limits.iter().map(Limit::policy)
    }

    /// Each limit at `now`, in order.
    pub(crate) fn limit_stats(&mut self, now: u64) -> Vec<LimitStats> {
        self.serve(now);
        self.limits.stats()
    }

    /// Adds what this lock section counted to the bucket's counters, and starts afresh.
    pub(crate) fn flush_tally(&mut self, counters: &Counters) {
        counters.flush(&mut self.tally);
    }

    /// Makes `empty_at`, read from the fast path's word, the authority; `least_room` is
    /// the least room takers found there before taking, if any took while a grant was
    /// unseen.
    pub(crate) fn adopt(&mut self, empty_at: u128, least_room: Option<u128>) {
        debug_assert!(self.queue.is_empty() && !self.closed);
        self.limits.adopt(empty_at, least_room);
    }

    /// Makes the one limit hold `empty_at` in `units`, as a compact key of `Keyed` hands
    /// it over; its settings are already these.
    pub(crate) fn resume(&mut self, units: Units, empty_at: u128) {
        let limit = self.limits.first_mut();
        debug_assert_eq!(limit.capacity(), units.capacity);
        (limit.units, limit.empty_at) = (units, empty_at);
    }

    /// The latest instant observed.
    pub(crate) fn now(&self) -> u64 {
        self.limits.now()
    }

    /// Whether a grant is unseen: takes on the fast path's word must note the room.
    pub(crate) fn unseen_active(&self) -> bool {
        self.limits.unseen_active()
    }

    /// The one limit, when the fast path may hold the state instead: nobody waits and the
    /// bucket is open (a grant unseen does not keep it: the word's takers note the room
    /// as the lock's do). A bucket with several limits keeps the word seized for good:
    /// its one word holds one limit. Publishing may re-count it from a new base (see
    /// `fast.rs`).
    pub(crate) fn idle_limit(&mut self) -> Option<&mut Limit> {
        let idle = self.queue.is_empty() && !self.closed && self.limits.len() == 1;
        idle.then_some(self.limits.first_mut())
    }

    /// The next instant something is due: the head's tokens accrue or its deadline
    /// passes. `NEVER` while nobody waits.
    #[inline]
    pub(crate) fn next_due(&mut self) -> u64 {
        if self.queue.is_empty() {
            // Checked first because every change asks, and nobody waits on the fast path.
            return NEVER;
        }
        match self.queue.head() {
            // The composite holding the head decides when to look again.
            Some(head) if head.kind == Kind::Hold => NEVER,
            Some(head) => self.limits.ready_at(head.tokens).min(head.deadline),
            None => NEVER,
        }
    }

    /// Records that a new refill task runs; it plans its own first wake-up.
    pub(crate) fn refill_started(&mut self) {
        self.refill_wake = 0;
    }

    /// The refill task's round: serves up to `now` and returns the instant it will sleep
    /// until.
    pub(crate) fn serve_and_plan_refill(&mut self, now: u64) -> u64 {
        self.serve(now);
        let due = self.next_due();
        self.refill_wake = due;
        due
    }

    /// After a change, whether the refill task sleeps past what is now due (or must see
    /// that the bucket closed) and so needs a nudge to plan again.
    #[inline]
    pub(crate) fn refill_needs_nudge(&mut self) -> bool {
        let due = if self.closed { 0 } else { self.next_due() };
        if due < self.refill_wake {
            self.refill_wake = due;
            return true;
        }
        false
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;
    fn empty_bucket_at_one_per_second() -> State {
        let settings = Settings {
            rate: Rate::per_second(1),
            capacity: 1,
            more: Vec::new(),
            initial: Some(0),
            queue_limit: None,
        };
        State::new(&settings, 0)
    }

    fn take_one() -> Request {
        Request {
            kind: Kind::Take,
            tokens: 1,
            deadline: 2 * SECOND,
        }
    }

    /// A waker that counts its wake-ups.
    #[derive(Default)]
    struct Counting(std::sync::atomic::AtomicUsize);

    impl futures::task::ArcWake for Counting {
        fn wake_by_ref(counting: &std::sync::Arc<Self>) {
            counting
                .0
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    impl Counting {
        fn woken(&self) -> usize {
            self.0.load(std::sync::atomic::Ordering::Relaxed)
        }
    }

    #[test]
    fn waiters_are_woken_by_whoever_releases_the_lock_not_under_it() {
        let mut state = empty_bucket_at_one_per_second();
        let counting = std::sync::Arc::new(Counting::default());
        let waker = futures::task::waker(std::sync::Arc::clone(&counting));
        let id = state.enqueue(take_one(), waker.clone());
        assert_eq!(state.poll_outcome(id, 1, &waker), None);
        state.serve(SECOND);
        assert_eq!(counting.woken(), 0, "woken under the lock");
        let mut wakers = Vec::new();
        state.swap_wakers(&mut wakers);
        wakers.into_iter().for_each(Waker::wake);
        assert_eq!(counting.woken(), 1);
        assert_eq!(state.poll_outcome(id, 1, &waker), Some(Outcome::Granted));
        assert_eq!(state.stats(SECOND, &Counters::new()).taken, 1);
    }

    #[test]
    fn a_grant_dropped_before_its_waiter_is_woken_goes_back_to_the_bucket() {
        for why in [Leaving::Dropped, Leaving::DeadlinePassed] {
            let mut state = empty_bucket_at_one_per_second();
            let request = take_one();
            let id = state.enqueue(request, futures::task::noop_waker());
            state.serve(SECOND);
            // Decided under the lock; the waiter has not been woken yet.
            let seen = state.leave(id, request, why, SECOND);
            assert_eq!(seen, Some(Outcome::Granted), "{why:?}");
            let stats = state.stats(SECOND, &Counters::new());
            let books = (stats.available, stats.taken, stats.queued);
            match why {
                // Nobody will see it: the last grant, nothing taken since, all back.
                Leaving::Dropped => assert_eq!(books, (1, 0, 0)),
                // The deadline's poll read it: the waiter has its token.
                Leaving::DeadlinePassed => assert_eq!(books, (0, 1, 0)),
            }
        }
    }
}
