//! Grants a waiter has not seen yet, and what one gives back when its future is dropped
//! before it looks.
//!
//! A grant dropped unseen must leave the bucket as if it had never been made (issue 13):
//! never a refund at the drop instant, which could let an interval take more than
//! `capacity + rate × t`. Had the grant of `r` tokens at `g` never been made, the bucket
//! would have held `r` more from `g` on, except that it never holds more than its
//! capacity: the tokens that come back at the drop instant `d` are
//! `min(r, least headroom over (g, d])`, the headroom being the capacity less what the
//! bucket held. What it holds only grows between two takes (or a raise of the capacity,
//! or a rate change), so the least headroom is found just before one of those, or at `d`:
//! the lock's holder records the headroom there while any grant is unseen.
//!
//! # Several unseen grants
//!
//! When several are unseen and more than one is dropped, each must come back as if none
//! of those dropped had been made, not only itself: measured on what the bucket really
//! held, a second drop would count room that the first one's tokens have filled since.
//! So the record is kept relative to what the bucket holds now: `after` of a grant is the
//! least headroom recorded between it and the next grant, and dropping grant `i` with
//! `x` parts coming back moves every entry before it up by `r - x` (in the history
//! without it the bucket held `r` more there, and holds `x` more now) and every entry
//! after it down by `x`. Entries that no grant separates merge by their least value. A
//! rate change rounds every entry down to the new rate's parts: what may come back never
//! gains a part by it.
//!
//! # Knowing when nobody is unseen
//!
//! Every take must come to the lock while a grant is unseen, so the fast path's word
//! stays seized (`State::idle_limit` says so). [`Unseen`] counts the grants delivered
//! and not yet read: the lock's holder adds what it decided when it releases the lock,
//! a waiter takes one off when it reads its grant, with one atomic operation. When the
//! count reaches zero the record is dropped and the word handed back; the waiter that
//! brings it to zero takes the lock for that, unless someone is queued (whoever serves
//! the queue then does it).

use std::collections::VecDeque;
use std::sync::atomic::Ordering::{AcqRel, Acquire};

use crate::bucket::queue::WaiterId;
use crate::sync::AtomicU64;

/// How many later grants a recorded one outlives. A grant unseen while more than this many
/// are made after it is forgotten: dropped later, it gives nothing back (never too much).
/// The record holds one more at most (about 32 KiB) while a waiter sits on its grant.
const LATER_KEPT: usize = 1024;

/// Grants whose room the record keeps allocated once none is unseen.
const KEPT_ALLOCATION: usize = 64;

/// No headroom recorded yet.
const UNBOUNDED: u128 = u128::MAX;

/// The count of grants delivered to waiters and not yet read, shared by the bucket's
/// handles. The word is the count (modulo 2^63) shifted left once, with the low bit set
/// while someone is queued: a waiter can read its grant before the lock's holder that
/// decided it has added it, so the count may stand below zero for a moment, and
/// subtracting two never touches the low bit.
#[derive(Debug)]
pub(crate) struct Unseen(AtomicU64);

const QUEUED: u64 = 1;

impl Unseen {
    pub(crate) fn new() -> Unseen {
        Unseen(AtomicU64::new(0))
    }

    /// A waiter read its grant. `true` when it was the last one unseen and nobody is
    /// queued: the caller must take the lock and release it, so that the word is handed
    /// back to the fast path.
    pub(crate) fn acknowledge(&self) -> bool {
        self.0.fetch_sub(2, AcqRel) == 2
    }

    /// Whether every grant delivered has been read, as the lock's holder finds it: only
    /// the lock's holder adds to the count, so none is delivered meanwhile.
    #[inline]
    pub(crate) fn all_seen(&self) -> bool {
        self.0.load(Acquire) >> 1 == 0
    }

    /// Called by the lock's holder as it releases the lock: adds `change` (grants decided
    /// less grants settled under the lock, modulo 2^64) and says whether anyone is queued.
    /// Returns `true` when no grant is left unseen.
    pub(crate) fn settle(&self, change: u64, queued: bool) -> bool {
        let mut word = self.0.load(Acquire);
        loop {
            let count = (word >> 1).wrapping_add(change) & (u64::MAX >> 1);
            let next = (count << 1) | if queued { QUEUED } else { 0 };
            match self.0.compare_exchange(word, next, AcqRel, Acquire) {
                Ok(_) => return count == 0,
                Err(current) => word = current,
            }
        }
    }
}

/// A grant recorded while unseen.
#[derive(Debug, Clone, Copy)]
struct Recorded {
    id: WaiterId,
    tokens: u64,
    /// The least headroom recorded after this grant and before the next one, in parts of
    /// a token (see the module's docs for how a drop moves it).
    after: u128,
}

/// The record behind the lock; see the module's docs.
#[derive(Debug, Default)]
pub(crate) struct Grants {
    /// From the first grant made while none was unseen until the lock's holder finds the
    /// count at zero.
    active: bool,
    /// The least headroom recorded before the first grant recorded.
    before: u128,
    recorded: VecDeque<Recorded>,
    /// Grants decided in this lock section.
    decided: u64,
    /// Grants settled in this lock section without the waiter reading them through its
    /// future: it left.
    settled: u64,
}

impl Grants {
    /// Whether a grant may be unseen: takes must record the headroom before them.
    #[inline]
    pub(crate) fn is_active(&self) -> bool {
        self.active
    }

    /// The headroom just before a take, a raise of the capacity or a rate change.
    pub(crate) fn record(&mut self, headroom: u128) {
        let least = match self.recorded.back_mut() {
            Some(last) => &mut last.after,
            None => &mut self.before,
        };
        *least = (*least).min(headroom);
    }

    /// Waiter `id` was granted `tokens` and will be told; the headroom before the take
    /// was recorded first, if the record was active.
    pub(crate) fn granted(&mut self, id: WaiterId, tokens: u64) {
        if !self.active {
            self.active = true;
            self.before = 0;
        }
        if self.recorded.len() > LATER_KEPT {
            // The oldest, with `LATER_KEPT` grants after it, is forgotten: what is recorded
            // after it now counts for those before it. Before the push, so that the buffer
            // never grows past the bound.
            if let Some(oldest) = self.recorded.pop_front() {
                self.before = self.before.min(oldest.after);
            }
        } else if self.recorded.len() == LATER_KEPT {
            // Room for the one more the bound allows, where growing would double it.
            self.recorded.reserve_exact(1);
        }
        self.recorded.push_back(Recorded {
            id,
            tokens,
            after: UNBOUNDED,
        });
        self.decided += 1;
    }

    /// A waiter left after its grant reached it, without reading it through its future.
    pub(crate) fn seen_on_leaving(&mut self) {
        self.settled += 1;
    }

    /// Waiter `id`'s grant is dropped unseen, with `headroom` left now: the parts of a
    /// token (`period` parts each) that come back, or `None` when the grant is not
    /// recorded (it was not a grant, or was forgotten).
    pub(crate) fn give_back(&mut self, id: WaiterId, headroom: u128, period: u128) -> Option<u128> {
        let index = self
            .recorded
            .binary_search_by_key(&id, |grant| grant.id)
            .ok()?;
        let own = u128::from(self.recorded[index].tokens).saturating_mul(period);
        let back = self
            .recorded
            .range(index..)
            .fold(headroom.min(own), |least, grant| least.min(grant.after));
        let raise = own - back;
        self.before = self.before.saturating_add(raise);
        for (position, grant) in self.recorded.iter_mut().enumerate() {
            if grant.after == UNBOUNDED {
                continue;
            }
            grant.after = if position < index {
                grant.after.saturating_add(raise)
            } else {
                grant.after - back
            };
        }
        let gone = self.recorded.remove(index)?;
        let previous = match index.checked_sub(1) {
            Some(previous) => &mut self.recorded[previous].after,
            None => &mut self.before,
        };
        *previous = (*previous).min(gone.after);
        Some(back)
    }

    /// The rate changed from `old_period` parts a token to `new_period`: every headroom
    /// is re-expressed in the new parts, rounded down.
    pub(crate) fn change_period(&mut self, old_period: u128, new_period: u128) {
        let convert = |parts: u128| {
            if parts == UNBOUNDED {
                return parts;
            }
            let whole = (parts / old_period).saturating_mul(new_period);
            let fraction = (parts % old_period)
                .checked_mul(new_period)
                .map_or(0, |scaled| scaled / old_period);
            whole.saturating_add(fraction)
        };
        self.before = convert(self.before);
        for grant in &mut self.recorded {
            grant.after = convert(grant.after);
        }
    }

    /// What this lock section changed in the count, for [`Unseen::settle`]; `None` when
    /// there is nothing to tell it.
    #[inline]
    pub(crate) fn take_change(&mut self) -> Option<u64> {
        if !self.active && self.decided == 0 && self.settled == 0 {
            return None;
        }
        let change = self.decided.wrapping_sub(self.settled);
        (self.decided, self.settled) = (0, 0);
        Some(change)
    }

    /// Every grant has been seen: nothing more to record. A small allocation is kept for
    /// the next busy spell; a large one (a grant sat unseen a long time) is freed.
    pub(crate) fn forget(&mut self) {
        self.active = false;
        self.before = 0;
        if self.recorded.capacity() > KEPT_ALLOCATION {
            self.recorded = VecDeque::new();
        } else {
            self.recorded.clear();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// One part a token, so that headrooms read as tokens.
    const PERIOD: u128 = 1;

    #[test]
    fn a_grant_gives_back_no_more_than_the_least_headroom_since() {
        let mut grants = Grants::default();
        grants.granted(1, 5);
        grants.record(3);
        grants.record(7);
        assert_eq!(grants.give_back(1, 10, PERIOD), Some(3));
        assert_eq!(grants.give_back(1, 10, PERIOD), None, "given back twice");
    }

    /// Capacity 10, full: grants of 5 and 5, then 3 accrue and a `try_take(3)` takes
    /// them. Had neither grant been made the bucket would hold 7; dropped in either order
    /// they must give back 7 between them, not 10.
    #[test]
    fn two_dropped_grants_give_back_what_the_history_without_both_holds() {
        for first in [1, 2] {
            let mut grants = Grants::default();
            grants.granted(1, 5);
            grants.record(5);
            grants.granted(2, 5);
            grants.record(7);
            let one = grants.give_back(first, 10, PERIOD).unwrap();
            let other = grants.give_back(3 - first, 10 - one, PERIOD).unwrap();
            assert_eq!(one + other, 7, "dropping {first} first");
        }
    }

    #[test]
    fn forgotten_grants_give_back_nothing_and_memory_stays_bounded() {
        let mut grants = Grants::default();
        let made = 3 * LATER_KEPT as u64;
        for id in 0..made {
            grants.record(4);
            grants.granted(id, 1);
        }
        assert_eq!(grants.recorded.len(), LATER_KEPT + 1);
        // The buffer never doubled past the bound (it did when it pushed before popping).
        assert!(grants.recorded.capacity() < 2 * LATER_KEPT);
        let oldest_kept = made - 1 - LATER_KEPT as u64;
        assert_eq!(grants.give_back(oldest_kept - 1, 10, PERIOD), None);
        assert_eq!(grants.give_back(oldest_kept, 10, PERIOD), Some(1));
    }

    #[test]
    fn the_count_may_dip_below_zero_and_keeps_the_queued_bit() {
        let unseen = Unseen::new();
        // A waiter reads its grant before the lock's holder has added it.
        assert!(!unseen.acknowledge());
        assert!(unseen.settle(1, true));
        assert!(!unseen.settle(1, true));
        assert!(
            !unseen.acknowledge(),
            "someone is queued: whoever serves them hands back"
        );
        assert!(!unseen.settle(1, false));
        assert!(unseen.acknowledge(), "the last one, nobody queued");
    }
}
