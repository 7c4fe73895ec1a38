//! The bucket's limits ("10 a second and 1,000 an hour"): each a rate, a capacity and
//! the instant it would be empty at (see `gcra.rs`), and the operations that act on all
//! of them at one instant.
//!
//! A request takes from every limit at one instant, or from none: it is served at the
//! first nanosecond at which every limit holds its tokens (the latest of their
//! `ready_at`), and what the bucket holds is the least any limit holds.
//!
//! # The cap
//!
//! A limit never holds more than its capacity as time goes by, whether or not anyone
//! waits: one that reaches its capacity holds exactly that, the fraction of the next token
//! dropped, until something is taken from it. One thing only stands above it, for no time
//! at all: at the nanosecond a waiter is granted, a limit that reached its capacity at
//! that very nanosecond keeps what the nanosecond added beyond it until the grants due
//! then are made, and is capped right after.
//!
//! With one limit a waiter waits only while the bucket holds less than it asks, which
//! is at most the capacity, so the cap can bite only at the nanosecond of a grant; there,
//! capping first would throw away part of a token that the grant leaves behind on the
//! schedule. With several limits the head waits for the slowest one while the others
//! fill: capped only once the queue emptied, they would hold and then grant far more
//! than their own `capacity + rate × t` (the cap bounds every limit's grants in any
//! interval `t` by that, plus what one nanosecond adds).
//!
//! The replay applies the rule in two places: bringing a limit to a grant's instant caps
//! it if it was full a nanosecond before ([`Units::capped_by_time`]), and every
//! observation ends by capping every limit ([`Limits::observe`]). Capping at an
//! observation changes nothing that the first would not do a nanosecond later, so what
//! the bucket does never depends on when anyone looks. While a composite's hold heads
//! the queue the observation stores nothing: the limits stay as they were when only time
//! changed them, and the hold's grant is made, straight on their instants, as of the
//! instant every member admitted it.
//!
//! # Grants not seen yet
//!
//! Each limit keeps its own least room while a grant is unseen (`unseen.rs`), noted
//! before every take: a grant dropped unseen gives back to each limit what that limit's
//! room allows. What grants are unseen, and which was made last, all limits share.

use std::time::Duration;

use crate::bucket::gcra::Units;
use crate::bucket::queue::{WaiterId, WaiterQueue};
use crate::bucket::stats::LimitStats;
use crate::bucket::unseen::{Grants, Least};
use crate::clock::{duration_from_nanos, NEVER};
use crate::quota::Policy;
use crate::rate::Rate;

/// Waiters ahead whose grants [`Limits::wait_behind`] replays one by one when there are
/// several limits: exact behind up to this many, an upper bound behind more, so that a
/// refused `try_take` costs a bounded time under the lock however long the queue.
const REPLAYED_AHEAD: usize = 64;

/// One limit: its rate, its units (the capacity among them), the instant it would be
/// empty at (see `gcra.rs`), and its least room while a grant is unseen.
#[derive(Debug)]
pub(crate) struct Limit {
    pub(crate) rate: Rate,
    pub(crate) units: Units,
    pub(crate) empty_at: u128,
    least: Least,
}

impl Limit {
    fn new(rate: Rate, capacity: u64, tokens: u64, now: u64) -> Limit {
        let units = Units::new(rate, capacity, now);
        Limit {
            rate,
            units,
            empty_at: units.at(now) - units.worth(tokens.into()),
            least: Least::default(),
        }
    }

    pub(crate) fn capacity(&self) -> u64 {
        self.units.capacity
    }

    fn tokens(&self, now: u64) -> u64 {
        self.units.tokens(self.empty_at, self.units.at(now))
    }

    /// What the limit has room for before it is full at `at`, in units.
    fn room(&self, at: u64) -> u128 {
        self.units.room(self.empty_at, self.units.at(at))
    }

    /// `empty_at` capped at `now`.
    fn capped(&self, now: u64) -> u128 {
        self.units.capped(self.empty_at, self.units.at(now))
    }

    /// New settings from `now` on: what the limit holds then is re-counted in the new
    /// rate's units (see `gcra.rs`) and capped at the new capacity.
    fn reset(&mut self, rate: Rate, capacity: u64, now: u64) {
        let units = Units::new(rate, capacity, now);
        let converted = self.units.convert(self.capped(now), now, &units);
        self.least.rescale(&self.units, &units);
        self.empty_at = units.capped(converted, units.at(now));
        (self.rate, self.units) = (rate, units);
    }

    /// The limit's budget: its capacity per the time its rate takes to fill it from
    /// empty, rounded up to the nanosecond.
    pub(crate) fn policy(&self) -> Policy {
        policy(self.rate, self.capacity())
    }
}

/// The budget of a limit of `rate` and `capacity`: its capacity per the time the rate
/// takes to fill it from empty, rounded up to the nanosecond (`Duration::MAX` past what a
/// `Duration` holds).
pub(crate) fn policy(rate: Rate, capacity: u64) -> Policy {
    let window = u128::from(capacity)
        .checked_mul(rate.period_nanos())
        .map_or(Duration::MAX, |parts| {
            duration_from_nanos(parts.div_ceil(u128::from(rate.amount())))
        });
    Policy {
        limit: capacity,
        window,
    }
}

/// Every limit of a bucket; never none.
#[derive(Debug)]
pub(crate) struct Limits {
    limits: Vec<Limit>,
    /// The latest instant observed.
    now: u64,
    /// Since this instant only time has changed the limits: the last grant's, change's
    /// or cap's. No request is served before it, and a composite's hold at the head may
    /// be granted as of any instant from it on (see `State::commit_hold`).
    since: u64,
    /// The grants not yet seen by their waiters (see `unseen.rs`).
    grants: Grants,
}

impl Limits {
    /// Limits of these rates and capacities (`first`, then `others` in order), each
    /// starting with `initial` tokens, or full.
    pub(crate) fn new(
        first: (Rate, u64),
        others: &[(Rate, u64)],
        initial: Option<u64>,
        now: u64,
    ) -> Limits {
        let limit = |&(rate, capacity): &(Rate, u64)| {
            Limit::new(rate, capacity, initial.unwrap_or(capacity), now)
        };
        Limits {
            limits: std::iter::once(&first).chain(others).map(limit).collect(),
            now,
            since: now,
            grants: Grants::default(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.limits.len()
    }

    pub(crate) fn first(&self) -> &Limit {
        &self.limits[0]
    }

    pub(crate) fn first_mut(&mut self) -> &mut Limit {
        &mut self.limits[0]
    }

    pub(crate) fn get(&self, index: usize) -> Option<&Limit> {
        self.limits.get(index)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Limit> {
        self.limits.iter()
    }

    /// The latest instant observed.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        self.now
    }

    /// Brings every limit to `at`, a grant's or a deadline's instant, capped as time
    /// passes (see the module's docs): what `at`'s own nanosecond added beyond a
    /// capacity stays until [`observe`](Limits::observe). An instant before the last
    /// change changes nothing.
    #[inline]
    pub(crate) fn advance(&mut self, at: u64) {
        if at < self.since {
            return;
        }
        for limit in self.limits.iter_mut() {
            let units = limit.units;
            limit.empty_at = units.capped_by_time(limit.empty_at, units.at(at));
        }
        self.since = at;
        self.now = self.now.max(at);
    }

    /// An observation at `now` ends: every limit is capped at its capacity.
    #[inline]
    pub(crate) fn observe(&mut self, now: u64) {
        self.advance(now);
        for limit in self.limits.iter_mut() {
            limit.empty_at = limit.capped(now);
        }
    }

    /// An observation at `now` while a composite's hold heads the queue: nothing is
    /// stored, so that its grant can be made as of an earlier instant.
    pub(crate) fn pass_time(&mut self, now: u64) {
        self.now = self.now.max(now);
    }

    /// Something other than time changed the limits at the latest instant observed.
    fn changed(&mut self) {
        self.since = self.now;
    }

    /// Whole tokens held: the least any limit holds.
    #[inline]
    pub(crate) fn tokens(&self) -> u64 {
        let now = self.now;
        self.iter()
            .map(|limit| limit.tokens(now))
            .min()
            .unwrap_or(0)
    }

    /// The smallest capacity: the largest request that can ever be served.
    #[inline]
    pub(crate) fn capacity(&self) -> u64 {
        self.iter().map(Limit::capacity).min().unwrap_or(0)
    }

    /// The smallest capacity were limit `index`'s `capacity` instead.
    pub(crate) fn capacity_with(&self, index: usize, capacity: u64) -> u64 {
        let with = |(at, limit): (usize, &Limit)| match at == index {
            true => capacity,
            false => limit.capacity(),
        };
        self.iter().enumerate().map(with).min().unwrap_or(capacity)
    }

    /// The first nanosecond, from the last change on, at which every limit holds `need`
    /// whole tokens, if nothing is taken before (the latest of their instants), or
    /// [`NEVER`]. Exact while `need` is at most every capacity: a limit capped at its
    /// capacity still holds `need`.
    #[inline]
    pub(crate) fn ready_at(&self, need: u64) -> u64 {
        let ready = |limit: &Limit| limit.units.ready_at(limit.empty_at, need.into());
        self.iter().map(ready).fold(self.since, u64::max)
    }

    /// Removes `tokens` from every limit, at the instant they were brought to, noting the
    /// room before (see [`note_headroom`](Limits::note_headroom)); the caller has checked
    /// they are held.
    #[inline]
    pub(crate) fn take(&mut self, tokens: u64) {
        if tokens > 0 {
            self.note_headroom();
        }
        for limit in self.limits.iter_mut() {
            limit.empty_at = (limit.empty_at).saturating_add(limit.units.worth(tokens.into()));
        }
    }

    /// Adds refunded `tokens` to every limit, each capped at its capacity.
    pub(crate) fn refund(&mut self, tokens: u64) {
        self.changed();
        let now = self.now;
        for limit in self.limits.iter_mut() {
            let units = limit.units;
            limit.empty_at = units.refund(limit.empty_at, tokens, units.at(now));
        }
        // Less room now: a grant dropped later may not count on what there was.
        self.note_headroom();
    }

    /// Limit `index` takes `rate` and `capacity` from now on, dropping what it holds above
    /// the capacity. The caller has checked both and served up to now.
    pub(crate) fn set(&mut self, index: usize, rate: Rate, capacity: u64) {
        self.changed();
        self.note_headroom();
        let now = self.now;
        let Some(limit) = self.limits.get_mut(index) else {
            return;
        };
        let resized = limit.capacity() != capacity;
        limit.reset(rate, capacity, now);
        // A lowered capacity may leave less room than before; a new rate alone re-counts
        // the room already noted (see `Least::rescale`).
        if resized {
            self.note_headroom();
        }
    }

    /// A snapshot of each limit, in order.
    pub(crate) fn stats(&self) -> Vec<LimitStats> {
        let stats = |limit: &Limit| LimitStats {
            rate: limit.rate,
            capacity: limit.capacity(),
            available: limit.tokens(self.now),
        };
        self.iter().map(stats).collect()
    }

    /// Makes `empty_at`, read from the fast path's word, the first limit's: only a
    /// bucket with one limit hands its state to the word, in the word's very units.
    pub(crate) fn adopt(&mut self, empty_at: u128, least_room: Option<u128>) {
        debug_assert_eq!(self.len(), 1);
        self.changed();
        let first = self.first_mut();
        first.empty_at = empty_at;
        if let Some(room) = least_room {
            first.least.note(room);
        }
    }

    // ----- Grants not seen yet (see `unseen.rs`) ------------------------------------

    /// Whether a grant may be unseen: takes must note the room before them.
    #[inline]
    pub(crate) fn unseen_active(&self) -> bool {
        self.grants.is_active()
    }

    /// Notes each limit's room at the last change, just before it may jump up (a take,
    /// a raise of a capacity, a rate change) or just after it fell (a refund, a lowered
    /// capacity), while a grant may be unseen.
    #[inline]
    pub(crate) fn note_headroom(&mut self) {
        if self.unseen_active() {
            let at = self.since;
            for limit in self.limits.iter_mut() {
                let room = limit.room(at);
                limit.least.note(room);
            }
        }
    }

    /// Waiter `id` was granted its tokens, just taken, and will be told.
    #[inline]
    pub(crate) fn granted(&mut self, id: WaiterId) {
        let first = self.grants.granted(id);
        let at = self.since;
        for limit in self.limits.iter_mut() {
            let room = limit.room(at);
            limit.least.granted(room, first);
        }
    }

    /// A waiter read its grant of tokens, or left with it: it can no longer come back.
    pub(crate) fn seen(&mut self) {
        self.grants.seen();
    }

    /// Waiter `id`'s grant of `tokens`, which nobody saw, is dropped: each limit gets back
    /// what the rule of `unseen.rs` allows. Returns whether any came back.
    pub(crate) fn give_back_unseen(&mut self, id: WaiterId, tokens: u64) -> bool {
        let newest = self.grants.dropped(id);
        let now = self.now;
        let mut returned = false;
        for limit in self.limits.iter_mut() {
            let own = limit.units.worth(tokens.into());
            let room = limit.room(now);
            let back = limit.least.give_back(own, room, newest);
            if back > 0 {
                limit.empty_at = limit.capped(now) - back;
                returned = true;
            }
        }
        // Only a change to what the limits hold moves the instant of the last change.
        if returned {
            self.changed();
        }
        returned
    }

    // ----- How long a newcomer waits ------------------------------------------------

    /// Nanoseconds from now until a newcomer asking each limit for `newcomer(limit)`
    /// would be served, were everyone in `queue` served first, in order, and nobody else;
    /// never shorter than that true wait, or [`NEVER`]. Asking each for its capacity, it
    /// is how long until every limit is full again.
    ///
    /// With one limit it is when the tokens ahead and the newcomer's have accrued: exact
    /// unless waits are queued (see `WaiterQueue::tokens_ahead_of`). With several, that
    /// latest accrual over the limits can fall short: a limit that fills while the head
    /// waits for another drops what it gains meanwhile, and may have to make it up later
    /// (at 1/s holding 1 and full, beside 2/s holding 10 and empty, three `take(1)`s ahead
    /// and a newcomer's 1 are served at 3.5 s, not at the 3 s the accrual says). So the
    /// grants ahead are replayed one by one, exactly, behind up to [`REPLAYED_AHEAD`]
    /// waiters; past those, each later one is counted as if every limit were empty after
    /// the grant before it, which can only be later.
    ///
    /// With one limit and waiters queued, the bucket holds less than the head asks, so
    /// it never reaches its capacity before they are served. A composite's place at the
    /// head is the exception: the bucket keeps filling, capped, while the composite waits
    /// for its other members, and it is counted here as taking its tokens as they are
    /// there.
    pub(crate) fn wait_behind(&self, queue: &WaiterQueue, newcomer: impl Fn(&Limit) -> u64) -> u64 {
        if self.len() > 1 {
            return self.replay_wait(queue, newcomer, REPLAYED_AHEAD);
        }
        let first = self.first();
        let needed = queue.tokens_ahead_of(newcomer(first));
        match first.units.ready_at(first.capped(self.now), needed) {
            NEVER => NEVER,
            ready => ready.saturating_sub(self.now),
        }
    }

    /// [`wait_behind`](Limits::wait_behind) for several limits, replaying at most
    /// `replayed` waiters ahead, for a newcomer asking each limit for `newcomer(limit)`.
    fn replay_wait(
        &self,
        queue: &WaiterQueue,
        newcomer: impl Fn(&Limit) -> u64,
        replayed: usize,
    ) -> u64 {
        let start = self.now;
        let mut empty_at: Vec<u128> = self.iter().map(|limit| limit.capped(start)).collect();
        let mut at = start;
        let mut replayed_tokens: u64 = 0;
        // `None` for the newcomer, last.
        let ahead = queue
            .requests()
            .map(|request| Some((request.tokens, request.consumes())));
        for (position, request) in ahead.chain([None]).enumerate() {
            if position == replayed {
                // Behind: everyone left in the queue, and the newcomer (as large as its
                // largest need, which bounds it for every limit).
                let count = queue.len() - replayed + 1;
                let newcomer_tokens = self.iter().map(&newcomer).max().unwrap_or(0);
                let rest = queue
                    .tokens()
                    .saturating_sub(replayed_tokens)
                    .saturating_add(newcomer_tokens);
                return self.bound_from_empty(at, count, rest).saturating_sub(start);
            }
            let need = |limit: &Limit| request.map_or_else(|| newcomer(limit), |(need, _)| need);
            let ready = (self.iter().zip(&empty_at))
                .map(|(limit, &empty_at)| limit.units.ready_at(empty_at, need(limit).into()))
                .fold(at, u64::max);
            if ready == NEVER {
                return NEVER;
            }
            at = ready;
            let Some((need, consumes)) = request else {
                break;
            };
            for (limit, empty_at) in self.iter().zip(&mut empty_at) {
                let units = limit.units;
                *empty_at = units
                    .capped_by_time(*empty_at, units.at(ready))
                    .saturating_add(units.worth(consumes.into()));
            }
            replayed_tokens = replayed_tokens.saturating_add(need);
        }
        at - start
    }

    /// An instant by which `count` requests asking `tokens` in all are served, in order,
    /// the first no earlier than `from`. After any grant every limit holds at least
    /// nothing, so request `k` waits at most `max_i ⌈n_k / r_i⌉` after the one before
    /// (a capped limit still holds `n_k`, which is at most its capacity); summed, that is
    /// at most `max_i ⌈tokens / r_i⌉ + count` nanoseconds.
    fn bound_from_empty(&self, from: u64, count: usize, tokens: u64) -> u64 {
        let ready = |limit: &Limit| limit.units.ready_at(limit.units.at(from), tokens.into());
        (self.iter().map(ready).max().unwrap_or(NEVER))
            .saturating_add(u64::try_from(count).unwrap_or(u64::MAX))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::bucket::queue::{Kind, Request};
    use std::time::Duration;

    const SECOND: u64 = 1_000_000_000;

    /// Makes `limit` hold `tokens` at `now`.
    fn empty(limit: &mut Limit, tokens: u64, now: u64) {
        limit.empty_at = limit.units.at(now) - u128::from(tokens) * limit.units.per_token;
    }

    fn take(tokens: u64) -> Request {
        Request {
            kind: Kind::Take,
            tokens,
            deadline: NEVER,
        }
    }

    fn queue_of(requests: &[Request]) -> WaiterQueue {
        let mut queue = WaiterQueue::default();
        for &request in requests {
            queue.push(request, futures::task::noop_waker());
        }
        queue
    }

    /// The module's example: the latest accrual over the limits says 3 s, the replay 3.5.
    #[test]
    fn a_limit_that_fills_while_another_holds_the_head_back_delays_those_behind() {
        let mut limits = Limits::new(
            (Rate::per_second(1), 1),
            &[(Rate::per_second(2), 10)],
            None,
            0,
        );
        empty(&mut limits.limits[1], 0, 0);
        let queue = queue_of(&[take(1), take(1), take(1)]);
        let needed = queue.tokens_ahead_of(1);
        let accrual = limits
            .iter()
            .map(|limit| limit.units.ready_at(limit.empty_at, needed))
            .max();
        assert_eq!(accrual, Some(3 * SECOND));
        assert_eq!(limits.wait_behind(&queue, |_| 1), 7 * SECOND / 2);
    }

    /// Past the waiters replayed, the bound is never shorter than the full replay.
    #[test]
    fn the_bound_behind_the_replayed_waiters_is_never_shorter_than_the_replay() {
        let rates = [
            Rate::per_second(1),
            Rate::per_second(3),
            Rate::new(7, Duration::from_millis(1_300)),
            Rate::per_hour(1_000),
        ];
        let mut cases = 0;
        for (first, second) in [(0, 1), (1, 2), (2, 3), (3, 0), (1, 3)] {
            for capacities in [(1, 5), (4, 4), (6, 2), (3, 9)] {
                for held in [(0, 0), (1, 4), (3, 1)] {
                    let mut limits = Limits::new(
                        (rates[first], capacities.0),
                        &[(rates[second], capacities.1)],
                        Some(0),
                        0,
                    );
                    empty(&mut limits.limits[0], held.0.min(capacities.0), 0);
                    empty(&mut limits.limits[1], held.1.min(capacities.1), 0);
                    let smallest = limits.capacity();
                    let requests: Vec<Request> = (0..7u64)
                        .map(|n| Request {
                            kind: if n % 3 == 2 { Kind::Wait } else { Kind::Take },
                            tokens: 1 + n % smallest,
                            deadline: NEVER,
                        })
                        .collect();
                    let queue = queue_of(&requests);
                    let exact = limits.replay_wait(&queue, |_| 1, usize::MAX);
                    for replayed in 0..=requests.len() {
                        let bound = limits.replay_wait(&queue, |_| 1, replayed);
                        assert!(
                            bound >= exact,
                            "{bound} < {exact} replaying {replayed}: {limits:?}"
                        );
                        cases += 1;
                    }
                    assert_eq!(limits.replay_wait(&queue, |_| 1, requests.len() + 1), exact);
                }
            }
        }
        assert_eq!(cases, 5 * 4 * 3 * 8);
    }

    #[test]
    fn one_limit_answers_as_its_instant() {
        let limits = Limits::new((Rate::per_second(4), 8), &[], Some(3), 0);
        assert_eq!(limits.len(), 1);
        assert_eq!(
            (limits.tokens(), limits.capacity(), limits.len()),
            (3, 8, 1)
        );
        assert_eq!(limits.ready_at(4), SECOND / 4);
    }

    #[test]
    fn several_limits_hold_the_least_and_are_ready_at_the_latest() {
        let mut limits = Limits::new(
            (Rate::per_second(10), 10),
            &[(Rate::new(15, Duration::from_secs(2)), 15)],
            Some(0),
            0,
        );
        assert_eq!(limits.capacity(), 10);
        assert_eq!(limits.capacity_with(0, 20), 15);
        assert_eq!(limits.capacity_with(1, 4), 4);
        // 10/s reaches 3 at 300 ms; 15 per 2 s at 400 ms.
        assert_eq!(limits.ready_at(3), 400_000_000);
        limits.observe(400_000_000);
        assert_eq!(limits.tokens(), 3);
        // By 2 s the first is long full, capped as it filled; the second holds 15.
        limits.observe(2 * SECOND);
        let first = limits.first();
        assert_eq!(
            first.empty_at,
            first.units.at(2 * SECOND) - first.units.full()
        );
        assert_eq!(limits.tokens(), 10);
    }
}
