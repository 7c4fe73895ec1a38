//! Grants a waiter has not seen yet, and what one gives back when its future is dropped
//! before it looks: a rule of a few numbers, with no record of each grant.
//!
//! # The promise
//!
//! No interval ever takes more than `capacity + rate × t`, counting only the grants that
//! reached their waiters. Giving a dropped grant back at the drop instant as if it were a
//! refund could break that: had the grant never been made, the bucket may have filled
//! meanwhile and dropped what it could not hold. What may come back without breaking it
//! is what the *room* allows: the capacity less what the bucket held (in the limit's
//! units), whose least value over a stretch of time bounds how far a history without
//! the dropped grants runs ahead of the real one. Room only falls as time passes, and rises
//! at a take, so its least is found just before a take, or now.
//!
//! # The rule
//!
//! While any grant is unseen, each limit keeps two numbers: the least room it has had
//! since the count of unseen grants was last zero (so since the oldest grant unseen, or
//! before), and the least room since the newest grant was made. A grant dropped unseen
//! gives back, to each limit, the least of its own tokens and
//! - the least room since the newest grant, when it *is* the newest grant and no grant
//!   dropped since gave anything back: exact, as an undo of that grant alone would be;
//! - otherwise the least room since the oldest: never more than an exact undo.
//!
//! What comes back is then spent from both numbers, so that several grants dropped give
//! back no more between them than the room allowed. Hence the whole grant comes back when
//! nothing was taken from the bucket since it was made (the least room since is the room
//! now), and when it was the last grant made and the room never fell below it since;
//! less otherwise, and nothing once the bucket has been full since.
//!
//! # Why it keeps the bound
//!
//! Compare the bucket with the history in which every grant dropped unseen was never
//! made, everything else happening at the same instants: the gap between what the two
//! hold grows by a grant as it is made (both see the later takes), never exceeds the
//! room (the other history holds at most the capacity), and shrinks by what comes back.
//! So at any instant it is at least the least room since the oldest grant dropped, less
//! what came back since; and at least the least room since the newest grant, for that
//! grant, while nothing came back since. Each rule gives back no more than the gap, so the
//! bucket never holds more than that history, whose grants keep the bound.
//!
//! The room is noted at every take, refund and change of settings under the lock, and
//! at every take on the fast path's word too: while a grant is unseen the word carries a
//! record bit, and each taker there notes the room it found for the lock's holder to read
//! at its next seize (see `fast.rs`). So a grant left unread keeps no take off the word,
//! and the rule sees the same takes whichever path served them. A waiter reads its grant
//! under the lock, which counts it seen.

use crate::bucket::gcra::Units;
use crate::bucket::queue::WaiterId;

/// A limit's least room, in its units, over the two stretches the rule uses.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Least {
    /// Since the count of unseen grants was last zero.
    since_oldest: u128,
    /// Since the newest grant was made.
    since_newest: u128,
}

impl Least {
    /// The room just before a take, a raise of the capacity or a rate change, or just
    /// after a refund, a lowered capacity or a give-back.
    #[inline]
    pub(crate) fn note(&mut self, room: u128) {
        self.since_oldest = self.since_oldest.min(room);
        self.since_newest = self.since_newest.min(room);
    }

    /// A grant was made, leaving `room`: the stretch since the newest starts here, and
    /// the one since the oldest too when it is the `first` grant unseen.
    pub(crate) fn granted(&mut self, room: u128, first: bool) {
        if first {
            self.since_oldest = room;
        }
        self.since_newest = room;
    }

    /// What a grant of `own` units dropped unseen gives back with `room` now, by the rule
    /// for `newest` or for an older grant, spent from both stretches.
    pub(crate) fn give_back(&mut self, own: u128, room: u128, newest: bool) -> u128 {
        self.note(room);
        let allowed = match newest {
            true => self.since_newest,
            false => self.since_oldest,
        };
        let back = own.min(allowed);
        self.since_oldest -= back.min(self.since_oldest);
        self.since_newest -= back.min(self.since_newest);
        back
    }

    /// The rate changed from units `old` to `new`: both stretches are re-counted in the
    /// new units, rounded down, so neither gains a unit.
    pub(crate) fn rescale(&mut self, old: &Units, new: &Units) {
        self.since_oldest = old.rescale(self.since_oldest, new, false);
        self.since_newest = old.rescale(self.since_newest, new, false);
    }
}

/// What every limit shares: how many grants are unseen, which was made last, and whether
/// anything came back since it was.
#[derive(Debug, Default)]
pub(crate) struct Grants {
    unseen: u64,
    newest: WaiterId,
    given_back_since_newest: bool,
}

impl Grants {
    /// Whether a grant is unseen: the rooms must be noted.
    #[inline]
    pub(crate) fn is_active(&self) -> bool {
        self.unseen > 0
    }

    /// Waiter `id` was granted: returns whether it is the first grant unseen, which each
    /// limit's [`Least::granted`] is told.
    pub(crate) fn granted(&mut self, id: WaiterId) -> bool {
        let first = self.unseen == 0;
        self.unseen += 1;
        self.newest = id;
        self.given_back_since_newest = false;
        first
    }

    /// A grant was read by its waiter (or left with it): it can no longer come back.
    pub(crate) fn seen(&mut self) {
        debug_assert!(self.unseen > 0);
        self.unseen -= 1;
    }

    /// Waiter `id`'s grant is dropped unseen: whether it gives back by the rule for the
    /// newest grant. It is no longer unseen, and counts as having given back.
    pub(crate) fn dropped(&mut self, id: WaiterId) -> bool {
        let newest = id == self.newest && !self.given_back_since_newest;
        self.seen();
        self.given_back_since_newest = true;
        newest
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Capacity 10, full: grants of 5 and 5, then 3 accrue and a `try_take(3)` takes
    /// them. Had neither grant been made the bucket would hold 7; dropped in either order
    /// they give back no more between them (5: the room since the first grant was 5 at
    /// least, and what the first drop gives back is spent from both stretches), not 10.
    #[test]
    fn two_dropped_grants_give_back_no_more_than_the_room_allowed() {
        for first in [1, 2] {
            let (mut grants, mut least) = (Grants::default(), Least::default());
            // 10 held; the first grant leaves room 5, the second 10.
            let oldest = grants.granted(1);
            least.granted(5, oldest);
            least.note(5);
            let oldest = grants.granted(2);
            least.granted(10, oldest);
            // 3 accrued (room 7), taken (room 10).
            least.note(7);
            let newest = grants.dropped(first);
            let one = least.give_back(5, 10, newest);
            let newest = grants.dropped(3 - first);
            let other = least.give_back(5, 10 - one, newest);
            assert_eq!((one, other), (5, 0), "dropping {first} first");
            assert!(!grants.is_active());
        }
    }

    /// The newest grant, nothing taken since: it all comes back, whatever the room was
    /// before it.
    #[test]
    fn the_newest_grant_comes_back_whole_when_nothing_was_taken_since() {
        let (mut grants, mut least) = (Grants::default(), Least::default());
        let oldest = grants.granted(1);
        least.granted(1, oldest);
        least.note(0);
        let oldest = grants.granted(2);
        least.granted(4, oldest);
        assert!(grants.dropped(2));
        assert_eq!(least.give_back(4, 4, true), 4);
        // The older one: the bucket was full since it, so nothing.
        assert!(!grants.dropped(1));
        assert_eq!(least.give_back(1, 0, false), 0);
    }

    #[test]
    fn a_rate_change_rounds_the_rooms_down() {
        use crate::rate::Rate;
        use std::time::Duration;
        let mut least = Least::default();
        least.granted(7, Grants::default().granted(1));
        // 7 units of a token of 2 are 10.5 units of a token of 3.
        let halves = Units::new(Rate::new(1, Duration::from_nanos(2)), 10, 0);
        let thirds = Units::new(Rate::new(1, Duration::from_nanos(3)), 10, 0);
        least.rescale(&halves, &thirds);
        assert_eq!(least.give_back(100, 100, true), 10);
    }
}
