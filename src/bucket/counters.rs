//! The bucket's counters, as [`Stats`](crate::Stats) reports them: atomics, so that the
//! fast path counts without the lock, and striped, so that threads taking at once do not
//! also fight over the counters' cache line (the fast path's word is contended enough).

use std::cell::Cell;
use std::sync::atomic::Ordering::Relaxed;

use crate::sync::AtomicU64;

/// Stripes of the counters the fast path adds to. Each thread adds to one, picked when it
/// first counts; a reader sums them.
const STRIPES: usize = 2;

/// What one stripe counts: on a cache line of its own.
#[derive(Debug)]
#[repr(align(64))]
struct Stripe {
    taken: AtomicU64,
    denied: AtomicU64,
}

/// Counters of what a bucket did.
#[derive(Debug)]
pub(crate) struct Counters {
    stripes: [Stripe; STRIPES],
    // The rest change only under the lock: one of each is enough.
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
            stripes: std::array::from_fn(|_| Stripe {
                taken: AtomicU64::new(0),
                denied: AtomicU64::new(0),
            }),
            untaken: AtomicU64::new(0),
            refunded: AtomicU64::new(0),
            timed_out: AtomicU64::new(0),
        }
    }

    /// This thread's stripe.
    #[inline]
    fn stripe(&self) -> &Stripe {
        thread_local! {
            static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
        }
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let index = STRIPE.with(|stripe| {
            if stripe.get() == usize::MAX {
                stripe.set(NEXT.fetch_add(1, Relaxed) % STRIPES);
            }
            stripe.get()
        });
        &self.stripes[index]
    }

    #[inline]
    pub(crate) fn add_taken(&self, tokens: u64) {
        saturating_add(&self.stripe().taken, tokens);
    }

    /// A grant nobody saw: it no longer counts.
    pub(crate) fn remove_taken(&self, tokens: u64) {
        saturating_add(&self.untaken, tokens);
    }

    pub(crate) fn add_denied(&self, requests: u64) {
        saturating_add(&self.stripe().denied, requests);
    }

    pub(crate) fn add_refunded(&self, tokens: u64) {
        saturating_add(&self.refunded, tokens);
    }

    pub(crate) fn add_timed_out(&self, requests: u64) {
        saturating_add(&self.timed_out, requests);
    }

    pub(crate) fn read(&self) -> Counted {
        let sum = |count: fn(&Stripe) -> &AtomicU64| {
            self.stripes.iter().fold(0u64, |sum, stripe| {
                sum.saturating_add(count(stripe).load(Relaxed))
            })
        };
        Counted {
            taken: sum(|stripe| &stripe.taken).saturating_sub(self.untaken.load(Relaxed)),
            denied: sum(|stripe| &stripe.denied),
            refunded: self.refunded.load(Relaxed),
            timed_out: self.timed_out.load(Relaxed),
        }
    }
}

/// Adds with one `fetch_add` (the fast path's cost), then pins a counter that wrapped at
/// its maximum: the counters saturate, as `Stats` documents.
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
    fn threads_count_on_their_own_stripes_and_a_read_sums_them() {
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
        let used = counters
            .stripes
            .iter()
            .filter(|stripe| stripe.taken.load(Relaxed) > 0)
            .count();
        assert!(used > 1, "8 threads counted on {used} stripe");
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
