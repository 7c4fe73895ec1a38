//! The bucket's limits ("10 a second and 1,000 an hour"): each a rate, a capacity and a
//! ledger of its own, and the operations that act on all of them at one instant.
//!
//! A request takes from every limit at one instant, or from none: it is served at the
//! first nanosecond at which every limit holds its tokens (the latest of their
//! `ready_at`), and what the bucket holds is the least any limit holds. The first limit
//! is kept inline and the others in a vector, so a bucket with one limit allocates
//! nothing for them, and its replay does what it did before there were several.
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
//! This is the one-limit bucket's rule as it always was. With one limit a waiter waits
//! only while the bucket holds less than it asks, which is at most the capacity, so the
//! cap can bite only at the nanosecond of a grant; there, capping first would throw away
//! part of a token that the grant leaves behind on the schedule. With several limits the
//! head waits for the slowest one while the others fill: capped only once the queue
//! emptied, as one limit was, they would hold and then grant far more than their own
//! `capacity + rate × t` (the cap bounds every limit's grants in any interval `t` by
//! that, plus what one nanosecond adds).
//!
//! The replay applies the rule in two places: advancing a limit to an instant caps it
//! if it was full a nanosecond before ([`Ledger::advance_capped`]), and every observation
//! ends by capping every limit ([`Limits::cap`]). Capping at an observation changes
//! nothing that the first would not do a nanosecond later, so what the bucket does never
//! depends on when anyone looks.
//!
//! # Grants not seen yet
//!
//! Each limit keeps its own least room while a grant is unseen (`unseen.rs`), noted
//! before every take: a grant dropped unseen gives back to each limit what that limit's
//! room allows. What grants are unseen, and which was made last, all limits share.

use std::time::Duration;

use crate::bucket::ledger::Ledger;
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

/// One limit: its rate, its capacity, what it holds, and its least room while a grant
/// is unseen.
#[derive(Debug)]
pub(crate) struct Limit {
    pub(crate) rate: Rate,
    pub(crate) capacity: u64,
    pub(crate) ledger: Ledger,
    least: Least,
}

impl Limit {
    fn new(rate: Rate, capacity: u64, tokens: u64, now: u64) -> Limit {
        Limit {
            rate,
            capacity,
            ledger: Ledger::new(tokens, now),
            least: Least::default(),
        }
    }

    fn advance(&mut self, now: u64) {
        self.ledger.advance_capped(now, self.rate, self.capacity);
    }

    /// What the limit has room for before it is full, in parts of a token.
    fn headroom(&self) -> u128 {
        let period = self.rate.period_nanos();
        u128::from(self.capacity)
            .saturating_mul(period)
            .saturating_sub(self.ledger.parts(period))
    }

    /// The limit's budget: its capacity per the time its rate takes to fill it from
    /// empty, rounded up to the nanosecond.
    pub(crate) fn policy(&self) -> Policy {
        policy(self.rate, self.capacity)
    }

    fn stats(&self) -> LimitStats {
        LimitStats {
            rate: self.rate,
            capacity: self.capacity,
            available: self.ledger.tokens(),
        }
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
    first: Limit,
    /// A boxed slice, not a vector: one word smaller, and empty it allocates nothing. The
    /// bucket's shared state stays within the allocation size it had with one limit.
    others: Box<[Limit]>,
    /// The ledgers as they stood once a composite's hold reached the head, kept until
    /// anything but time changes them: its grant is made as of the instant every member
    /// of the composite allowed it, which its task, woken by a timer of 1 ms ticks, may
    /// see only later (see [`rewind`](Limits::rewind)). Boxed: one word while none is
    /// kept, and only a composite's wait makes one.
    held_from: Option<Box<Ledgers>>,
    /// The grants not yet seen by their waiters (see `unseen.rs`).
    grants: Grants,
}

/// Every limit's ledger, in order, as hold `hold` reached the head: what
/// [`Limits::held_from`] keeps.
#[derive(Debug)]
struct Ledgers {
    hold: WaiterId,
    first: Ledger,
    others: Box<[Ledger]>,
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
        let limit = |(rate, capacity): (Rate, u64)| {
            Limit::new(rate, capacity, initial.unwrap_or(capacity), now)
        };
        Limits {
            first: limit(first),
            others: others.iter().copied().map(limit).collect(),
            held_from: None,
            grants: Grants::default(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        1 + self.others.len()
    }

    #[inline]
    pub(crate) fn is_single(&self) -> bool {
        self.others.is_empty()
    }

    pub(crate) fn first(&self) -> &Limit {
        &self.first
    }

    pub(crate) fn get(&self, index: usize) -> Option<&Limit> {
        match index {
            0 => Some(&self.first),
            _ => self.others.get(index - 1),
        }
    }

    fn get_mut(&mut self, index: usize) -> Option<&mut Limit> {
        match index {
            0 => Some(&mut self.first),
            _ => self.others.get_mut(index - 1),
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Limit> {
        std::iter::once(&self.first).chain(self.others.iter())
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = &mut Limit> {
        std::iter::once(&mut self.first).chain(self.others.iter_mut())
    }

    /// The instant every ledger is accurate at (they move together).
    #[inline]
    pub(crate) fn last(&self) -> u64 {
        self.first.ledger.last()
    }

    /// Adds what accrued up to `now` to every limit, capped as time passes (see the
    /// module's docs): what `now`'s own nanosecond added beyond a capacity stays until
    /// [`cap`](Limits::cap). An earlier `now` changes nothing.
    #[inline]
    pub(crate) fn advance(&mut self, now: u64) {
        self.first.advance(now);
        for limit in self.others.iter_mut() {
            limit.advance(now);
        }
    }

    /// Drops whatever any limit holds above its capacity.
    #[inline]
    pub(crate) fn cap(&mut self) {
        self.first.ledger.cap(self.first.capacity);
        for limit in self.others.iter_mut() {
            limit.ledger.cap(limit.capacity);
        }
    }

    /// Whole tokens held: the least any limit holds.
    #[inline]
    pub(crate) fn tokens(&self) -> u64 {
        self.others
            .iter()
            .fold(self.first.ledger.tokens(), |least, limit| {
                least.min(limit.ledger.tokens())
            })
    }

    /// The smallest capacity: the largest request that can ever be served.
    #[inline]
    pub(crate) fn capacity(&self) -> u64 {
        self.others
            .iter()
            .fold(self.first.capacity, |least, limit| {
                least.min(limit.capacity)
            })
    }

    /// The smallest capacity were limit `index`'s `capacity` instead.
    pub(crate) fn capacity_with(&self, index: usize, capacity: u64) -> u64 {
        self.iter()
            .enumerate()
            .map(|(at, limit)| {
                if at == index {
                    capacity
                } else {
                    limit.capacity
                }
            })
            .min()
            .unwrap_or(capacity)
    }

    /// The first nanosecond at which every limit holds `need` whole tokens, if nothing is
    /// taken before (the latest of their instants), or [`NEVER`]. Exact while `need` is at
    /// most every capacity: a limit capped at its capacity still holds `need`.
    #[inline]
    pub(crate) fn ready_at(&self, need: u64) -> u64 {
        self.others.iter().fold(
            self.first.ledger.ready_at(need, self.first.rate),
            |latest, limit| latest.max(limit.ledger.ready_at(need, limit.rate)),
        )
    }

    /// What the ledgers hold changed other than by time: those kept for a composite's
    /// hold no longer lead to them by time alone.
    #[inline]
    fn changed(&mut self) {
        self.held_from = None;
    }

    /// Hold `hold` heads the queue: keeps the ledgers as they stand, unless kept for it
    /// already (since when only time changed them). Those kept for another hold, which
    /// left the head without taking, go: this one reached the head only now.
    #[inline]
    pub(crate) fn hold_at_head(&mut self, hold: WaiterId) {
        if self.held_from.as_ref().map(|kept| kept.hold) != Some(hold) {
            self.held_from = Some(Box::new(Ledgers {
                hold,
                first: self.first.ledger.clone(),
                others: self
                    .others
                    .iter()
                    .map(|limit| limit.ledger.clone())
                    .collect(),
            }));
        }
    }

    /// The first instant the ledgers kept as the hold reached the head held `tokens`, or
    /// `None` if none are kept: time alone changed them since, so from then on they hold
    /// `tokens` still.
    pub(crate) fn held_ready_at(&self, hold: WaiterId, tokens: u64) -> Option<u64> {
        let kept = self.held_from.as_ref().filter(|kept| kept.hold == hold)?;
        let first = kept.first.ready_at(tokens, self.first.rate);
        let others = self.others.iter().zip(kept.others.iter());
        Some(others.fold(first, |latest, (limit, ledger)| {
            latest.max(ledger.ready_at(tokens, limit.rate))
        }))
    }

    /// Brings the ledgers back to where a grant of `tokens` made at `as_of` finds them:
    /// from those kept as the hold reached the head, to `as_of`, or to the instant they
    /// first held `tokens` if that is later. Time alone changed them since, so this is
    /// the very state the ledgers passed through; the caller takes, then serves up to
    /// now. Without ledgers kept (anything else changed them meanwhile, and they were
    /// kept again at the current instant), nothing changes.
    pub(crate) fn rewind(&mut self, hold: WaiterId, tokens: u64, as_of: u64) {
        let Some(kept) = self.held_from.take().filter(|kept| kept.hold == hold) else {
            return;
        };
        let Ledgers { first, others, .. } = *kept;
        self.first.ledger = first;
        for (limit, ledger) in self.others.iter_mut().zip(others.into_vec()) {
            limit.ledger = ledger;
        }
        let at = self.ready_at(tokens).max(as_of);
        self.advance(at);
    }

    /// Removes `tokens` from every limit; the caller has checked they are held. Taking none
    /// changes nothing, not even what is remembered (a waiting composite's ledgers).
    #[inline]
    pub(crate) fn take(&mut self, tokens: u64) {
        if tokens == 0 {
            return;
        }
        self.changed();
        self.first.ledger.take(tokens);
        for limit in self.others.iter_mut() {
            limit.ledger.take(tokens);
        }
    }

    /// Puts back `tokens` taken at this same instant, which nobody received.
    pub(crate) fn give_back(&mut self, tokens: u64) {
        self.changed();
        for limit in self.iter_mut() {
            limit.ledger.give_back(tokens);
        }
    }

    /// Adds refunded `tokens` to every limit, each capped at its capacity.
    pub(crate) fn refund(&mut self, tokens: u64) {
        self.give_back(tokens);
        self.cap();
        // Less room now: a grant dropped later may not count on what there was.
        self.note_headroom();
    }

    /// Limit `index`'s rate becomes `rate` from the ledgers' instant on. The caller has
    /// checked both, served up to now and recorded the headroom.
    pub(crate) fn set_rate(&mut self, index: usize, rate: Rate) {
        self.changed();
        let Some(limit) = self.get_mut(index) else {
            return;
        };
        limit.ledger.change_rate(limit.rate, rate);
        (limit.least).change_period(limit.rate.period_nanos(), rate.period_nanos());
        limit.rate = rate;
    }

    /// Limit `index`'s capacity becomes `capacity`, dropping what it holds above. The
    /// caller has checked both and recorded the headroom.
    pub(crate) fn set_capacity(&mut self, index: usize, capacity: u64) {
        self.changed();
        if let Some(limit) = self.get_mut(index) {
            limit.capacity = capacity;
            limit.ledger.cap(capacity);
        }
        // A lowered capacity may leave less room than before.
        self.note_headroom();
    }

    /// A snapshot of each limit, in order.
    pub(crate) fn stats(&self) -> Vec<LimitStats> {
        self.iter().map(Limit::stats).collect()
    }

    /// Makes `ledger`, read from the fast path's word, the first limit's: only a bucket
    /// with one limit hands its state to the word.
    pub(crate) fn adopt(&mut self, ledger: Ledger, least_room: Option<u128>) {
        debug_assert!(self.is_single());
        self.changed();
        self.first.ledger = ledger;
        if let Some(room) = least_room {
            self.first.least.note(room);
        }
    }

    // ----- Grants not seen yet (see `unseen.rs`) ------------------------------------

    /// Whether a grant may be unseen: takes must note the room before them.
    #[inline]
    pub(crate) fn unseen_active(&self) -> bool {
        self.grants.is_active()
    }

    /// Notes each limit's room just before it may jump up (a take, a raise of a capacity,
    /// a rate change) or just after it fell (a refund, a lowered capacity), while a grant
    /// may be unseen.
    #[inline]
    pub(crate) fn note_headroom(&mut self) {
        if self.unseen_active() {
            for limit in self.iter_mut() {
                let headroom = limit.headroom();
                limit.least.note(headroom);
            }
        }
    }

    /// Waiter `id` was granted its tokens, just taken, and will be told.
    #[inline]
    pub(crate) fn granted(&mut self, id: WaiterId) {
        let first = self.grants.granted(id);
        for limit in self.iter_mut() {
            let headroom = limit.headroom();
            limit.least.granted(headroom, first);
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
        let mut returned = false;
        for limit in self.iter_mut() {
            let period = limit.rate.period_nanos();
            let headroom = limit.headroom();
            let own = u128::from(tokens).saturating_mul(period);
            let parts = limit.least.give_back(own, headroom, newest);
            limit.ledger.give_back_parts(parts, period);
            returned |= parts > 0;
        }
        // Only a change to what the ledgers hold forgets what was remembered of them.
        if returned {
            self.changed();
        }
        returned
    }

    // ----- How long a newcomer waits ------------------------------------------------

    /// Nanoseconds from the ledgers' instant until a newcomer asking for `tokens` would be
    /// served, were everyone in `queue` served first, in order, and nobody else; never
    /// shorter than that true wait, or [`NEVER`].
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
    pub(crate) fn wait_behind(&self, queue: &WaiterQueue, tokens: u64) -> u64 {
        if self.is_single() {
            let needed = queue.tokens_ahead_of(tokens);
            return self.first.ledger.time_until(needed, self.first.rate);
        }
        self.replay_wait(queue, |_| tokens, REPLAYED_AHEAD)
    }

    /// Nanoseconds from the ledgers' instant until every limit is full again, were
    /// everyone in `queue` served first, in order, and nothing else taken; never shorter
    /// than that, or [`NEVER`]. Full is each limit's own capacity: [`wait_behind`] for a
    /// newcomer asking each limit for its capacity, and as exact.
    ///
    /// With one limit and waiters queued, the bucket holds less than the head asks, so
    /// it never reaches its capacity before they are served: full once the tokens they
    /// take and a capacity more have accrued. A composite's place at the head is the
    /// exception: the bucket keeps filling, capped, while the composite waits for its
    /// other members, and it is counted here as taking its tokens as they are there.
    ///
    /// [`wait_behind`]: Limits::wait_behind
    pub(crate) fn full_behind(&self, queue: &WaiterQueue) -> u64 {
        if self.is_single() {
            let needed = queue.tokens_ahead_of(self.first.capacity);
            return self.first.ledger.time_until(needed, self.first.rate);
        }
        if queue.is_empty() {
            // The common case, without the replay's copy of the ledgers.
            let until_full = self
                .iter()
                .map(|limit| (limit.ledger).time_until(u128::from(limit.capacity), limit.rate));
            return until_full.max().unwrap_or(0);
        }
        self.replay_wait(queue, |limit| limit.capacity, REPLAYED_AHEAD)
    }

    /// [`wait_behind`](Limits::wait_behind) for several limits, replaying at most
    /// `replayed` waiters ahead, for a newcomer asking each limit for `newcomer(limit)`.
    fn replay_wait(
        &self,
        queue: &WaiterQueue,
        newcomer: impl Fn(&Limit) -> u64,
        replayed: usize,
    ) -> u64 {
        let start = self.last();
        let mut ledgers: Vec<Ledger> = self.iter().map(|limit| limit.ledger.clone()).collect();
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
            let ready = self
                .iter()
                .zip(&ledgers)
                .map(|(limit, ledger)| ledger.ready_at(need(limit), limit.rate))
                .max()
                .unwrap_or(NEVER);
            if ready == NEVER {
                return NEVER;
            }
            at = ready;
            let Some((need, consumes)) = request else {
                break;
            };
            for (limit, ledger) in self.iter().zip(&mut ledgers) {
                ledger.advance_capped(ready, limit.rate, limit.capacity);
                ledger.take(consumes);
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
        let empty = Ledger::new(0, 0);
        let slowest = self
            .iter()
            .map(|limit| empty.time_until(u128::from(tokens), limit.rate))
            .max()
            .unwrap_or(NEVER);
        from.saturating_add(slowest)
            .saturating_add(u64::try_from(count).unwrap_or(u64::MAX))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::bucket::queue::{Kind, Request};
    use std::time::Duration;

    const SECOND: u64 = 1_000_000_000;

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
        limits.others[0].ledger = Ledger::new(0, 0);
        let queue = queue_of(&[take(1), take(1), take(1)]);
        let needed = queue.tokens_ahead_of(1);
        let accrual = limits
            .iter()
            .map(|limit| limit.ledger.time_until(needed, limit.rate))
            .max();
        assert_eq!(accrual, Some(3 * SECOND));
        assert_eq!(limits.wait_behind(&queue, 1), 7 * SECOND / 2);
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
                    limits.first.ledger = Ledger::new(held.0.min(capacities.0), 0);
                    limits.others[0].ledger = Ledger::new(held.1.min(capacities.1), 0);
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
    fn one_limit_allocates_nothing_and_answers_as_its_ledger() {
        let limits = Limits::new((Rate::per_second(4), 8), &[], Some(3), 0);
        assert!(limits.is_single());
        assert!(limits.others.is_empty());
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
        limits.advance(400_000_000);
        assert_eq!(limits.tokens(), 3);
        // By 2 s the first is long full, capped as it filled; the second holds 15.
        limits.advance(2 * SECOND);
        assert_eq!(limits.first.ledger.tokens(), 10);
        assert_eq!(limits.first.ledger.fraction(), 0);
        assert_eq!(limits.tokens(), 10);
    }
}
