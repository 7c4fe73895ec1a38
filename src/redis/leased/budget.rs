//! The tokens a leased front holds: its leases, each usable until its lifetime ends.

use std::collections::VecDeque;

use tokio::time::Instant;

use super::source::LeaseTicket;

/// Tokens taken from the source in one call, not yet granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lease {
    /// Told to the grants drawn from it, so that a grant handed back finds it.
    pub(crate) id: u64,
    pub(crate) tokens: u64,
    /// When the reply came back, plus the wait until the lease began: so no sooner than
    /// it began. Its tokens are granted from this instant...
    pub(crate) usable_from: Instant,
    /// ...until this one, `lifetime` after the call began, plus that wait: so no later
    /// than `lifetime` after it began.
    pub(crate) usable_until: Instant,
    /// What the source knows it by.
    pub(crate) ticket: LeaseTicket,
}

impl Lease {
    /// Whether its tokens may be granted at `now`.
    fn usable(&self, now: Instant) -> bool {
        self.usable_from <= now && now < self.usable_until
    }
}

/// Part of a grant: `tokens` drawn from the lease `id`.
pub(crate) type Piece = (u64, u64);

/// The leases held, soonest to end first.
#[derive(Debug, Default)]
pub(crate) struct Budget {
    leases: VecDeque<Lease>,
    /// Leases drawn empty whose lifetime has not ended: a grant handed back refills its.
    emptied: VecDeque<Lease>,
    made: u64,
}

impl Budget {
    /// Holds `tokens` more, usable from `usable_from` until `usable_until`.
    pub(crate) fn add(
        &mut self,
        tokens: u64,
        usable_from: Instant,
        usable_until: Instant,
        ticket: LeaseTicket,
    ) {
        self.made += 1;
        self.insert(Lease {
            id: self.made,
            tokens,
            usable_from,
            usable_until,
            ticket,
        });
    }

    /// Holds `lease`, in order of its end.
    fn insert(&mut self, lease: Lease) {
        let usable_until = lease.usable_until;
        let at = self
            .leases
            .iter()
            .rposition(|held| held.usable_until <= usable_until)
            .map_or(0, |index| index + 1);
        self.leases.insert(at, lease);
    }

    /// The tokens that can be granted at `now`.
    pub(crate) fn held(&self, now: Instant) -> u64 {
        self.leases
            .iter()
            .filter(|lease| lease.usable(now))
            .map(|lease| lease.tokens)
            .sum()
    }

    /// The tokens that can be granted at `now` or later: those held, and those of leases
    /// that have not begun.
    pub(crate) fn reserved(&self, now: Instant) -> u64 {
        self.leases
            .iter()
            .filter(|lease| lease.usable_until > now)
            .map(|lease| lease.tokens)
            .sum()
    }

    /// When the next lease not yet begun at `now` begins.
    pub(crate) fn next_start(&self, now: Instant) -> Option<Instant> {
        self.leases
            .iter()
            .map(|lease| lease.usable_from)
            .filter(|from| *from > now)
            .min()
    }

    /// Takes `tokens` at `now` if they are held, from the leases that end soonest, noting
    /// in `pieces` (when given) which leases gave them.
    pub(crate) fn draw(
        &mut self,
        now: Instant,
        tokens: u64,
        mut pieces: Option<&mut Vec<Piece>>,
    ) -> bool {
        if self.held(now) < tokens {
            return false;
        }
        let mut wanted = tokens;
        // Only from the leases `held` counts: one not yet begun may end sooner.
        for lease in self.leases.iter_mut().filter(|lease| lease.usable(now)) {
            let drawn = lease.tokens.min(wanted);
            lease.tokens -= drawn;
            wanted -= drawn;
            if let (Some(pieces), true) = (pieces.as_deref_mut(), drawn > 0) {
                pieces.push((lease.id, drawn));
            }
            if wanted == 0 {
                break;
            }
        }
        while let Some(index) = self.leases.iter().position(|lease| lease.tokens == 0) {
            let emptied = self.leases.remove(index).expect("a lease at its index");
            self.emptied.push_back(emptied);
        }
        true
    }

    /// Takes back a grant nobody saw, into the leases it came from. A lease already
    /// ended or given back keeps nothing: its tokens may no longer be granted, and giving
    /// them back apart from the rest of their lease would take off the bucket's gain once
    /// for each part, not once for the lease.
    pub(crate) fn put_back(&mut self, pieces: &[Piece]) {
        for &(id, tokens) in pieces {
            if let Some(lease) = self.leases.iter_mut().find(|lease| lease.id == id) {
                lease.tokens += tokens;
            } else if let Some(index) = self.emptied.iter().position(|lease| lease.id == id) {
                let mut lease = self.emptied.remove(index).expect("a lease at its index");
                lease.tokens = tokens;
                self.insert(lease);
            }
        }
    }

    /// Removes and returns the leases whose lifetime has ended by `now`.
    pub(crate) fn ended(&mut self, now: Instant) -> Vec<Lease> {
        self.emptied.retain(|lease| lease.usable_until > now);
        let count = self
            .leases
            .iter()
            .take_while(|lease| lease.usable_until <= now)
            .count();
        self.leases.drain(..count).collect()
    }

    /// Removes and returns every lease.
    pub(crate) fn drain(&mut self) -> Vec<Lease> {
        self.emptied.clear();
        self.leases.drain(..).collect()
    }

    /// When the soonest lease ends.
    pub(crate) fn next_end(&self) -> Option<Instant> {
        self.leases.front().map(|lease| lease.usable_until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The source's ticket of its lease `number`, begun at its instant `number`.
    fn ticket(number: u64) -> LeaseTicket {
        LeaseTicket {
            number,
            began: number,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn grants_come_from_the_lease_that_ends_first_and_never_after_it_ends() {
        let start = Instant::now();
        let ms = Duration::from_millis;
        let mut budget = Budget::default();
        budget.add(5, start, start + ms(100), ticket(1));
        budget.add(3, start, start + ms(50), ticket(2));
        // Not yet begun: reserved, not held.
        budget.add(4, start + ms(60), start + ms(160), ticket(3));
        assert_eq!(budget.reserved(start), 12);
        assert_eq!(budget.next_start(start), Some(start + ms(60)));
        assert_eq!(budget.held(start), 8);
        let mut pieces = Vec::new();
        assert!(budget.draw(start, 4, Some(&mut pieces)));
        // The lease ending at 50 ms (made second, id 2) gave its 3 first.
        assert_eq!(pieces, vec![(2, 3), (1, 1)]);
        assert_eq!(budget.held(start), 4);
        // Handed back, into the leases they came from, the emptied one too.
        budget.put_back(&pieces);
        assert_eq!(budget.held(start), 8);
        assert!(budget.draw(start, 3, None));
        // At 100 ms only the lease begun at 60 ms is held.
        assert!(!budget.draw(start + ms(100), 5, None));
        assert_eq!(budget.held(start + ms(99)), 9);
        let ended = budget.ended(start + ms(100));
        assert_eq!(ended.len(), 1);
        assert_eq!((ended[0].tokens, ended[0].ticket), (5, ticket(1)));
        // The lease ending at 50 ms, emptied, is forgotten once ended: nothing to refill.
        budget.put_back(&[(2, 1)]);
        assert_eq!(budget.held(start + ms(100)), 4);
        assert_eq!(budget.next_end(), Some(start + ms(160)));
        assert_eq!(budget.drain().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_not_yet_begun_gives_nothing_though_it_ends_first() {
        let start = Instant::now();
        let ms = Duration::from_millis;
        let mut budget = Budget::default();
        budget.add(5, start, start + ms(100), ticket(1));
        budget.add(3, start + ms(10), start + ms(50), ticket(2));
        let mut pieces = Vec::new();
        assert!(budget.draw(start, 4, Some(&mut pieces)));
        assert_eq!(pieces, vec![(1, 4)]);
        assert_eq!(budget.held(start + ms(10)), 4);
    }
}
