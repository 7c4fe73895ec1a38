//! The bucket's counters, as [`Stats`](crate::Stats) reports them: atomics, so that the
//! fast path counts without the lock. They live beside the fast path's word, on its cache
//! line (see `FastPath`): a taker that has just won the word holds that line, so its add
//! costs no second line, and threads taking at once fight over one line, not two.

use std::sync::atomic::Ordering::Relaxed;

use crate::sync::AtomicU64;

/// Counters of what a bucket did.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Counters {
    // The fast path adds to these two.
    taken: AtomicU64,
    denied: AtomicU64,
    // The rest change only under the lock.
    /// Grants counted in `taken` that nobody saw.
    untaken: AtomicU64,
    refunded: AtomicU64,
    timed_out: AtomicU64,
}

/// A snapshot of [`Counters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counted {
    pub(crate) taken: u64,
    pub(crate) denied: u64,
    pub(crate) refunded: u64,
    pub(crate) timed_out: u64,
}

impl Counters {
    pub(crate) fn new() -> Counters {
        Counters {
            taken: AtomicU64::new(0),
            denied: AtomicU64::new(0),
            untaken: AtomicU64::new(0),
            refunded: AtomicU64::new(0),
            timed_out: AtomicU64::new(0),
        }
    }

    #[inline]
    pub(crate) fn add_taken(&self, tokens: u64) {
        saturating_add(&self.taken, tokens);
    }

    /// A grant nobody saw: it no longer counts.
    pub(crate) fn remove_taken(&self, tokens: u64) {
        saturating_add(&self.untaken, tokens);
    }

    #[inline]
    pub(crate) fn add_denied(&self, requests: u64) {
        saturating_add(&self.denied, requests);
    }

    pub(crate) fn add_refunded(&self, tokens: u64) {
        saturating_add(&self.refunded, tokens);
    }

    pub(crate) fn add_timed_out(&self, requests: u64) {
        saturating_add(&self.timed_out, requests);
    }

    pub(crate) fn read(&self) -> Counted {
        Counted {
            taken: self
                .taken
                .load(Relaxed)
                .saturating_sub(self.untaken.load(Relaxed)),
            denied: self.denied.load(Relaxed),
            refunded: self.refunded.load(Relaxed),
            timed_out: self.timed_out.load(Relaxed),
        }
    }
}

/// Adds with one `fetch_add` (the fast path's cost), then pins a counter that wrapped at
/// its maximum: the counters saturate, as `Stats` documents.
#[inline]
fn saturating_add(counter: &AtomicU64, amount: u64) {
    let before = counter.fetch_add(amount, Relaxed);
    if before.checked_add(amount).is_none() {
        counter.store(u64::MAX, Relaxed);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn threads_counting_at_once_lose_nothing() {
        let counters = Counters::new();
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    for _ in 0..1_000 {
                        counters.add_taken(2);
                        counters.add_denied(1);
                    }
                });
            }
        });
        counters.remove_taken(6);
        let counted = counters.read();
        assert_eq!((counted.taken, counted.denied), (15_994, 8_000));
    }

    #[test]
    fn counters_saturate_rather_than_wrap() {
        let counters = Counters::new();
        counters.add_taken(u64::MAX - 1);
        counters.add_taken(5);
        assert_eq!(counters.read().taken, u64::MAX);
        counters.add_refunded(u64::MAX);
        counters.add_refunded(1);
        assert_eq!(counters.read().refunded, u64::MAX);
    }
}
