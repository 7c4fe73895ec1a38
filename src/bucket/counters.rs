//! The bucket's counters, as [`Stats`](crate::Stats) reports them: atomics, so that the
//! fast path counts without the lock. They live beside the fast path's word, on its cache
//! line (see `FastPath`): a taker that has just won the word holds that line, so its add
//! costs no second line, and threads taking at once fight over one line, not two.

use std::sync::atomic::Ordering::Relaxed;

use crate::sync::AtomicU64;

/// What a bucket counts. The fast path adds to the first two, which come first so that
/// they share the word's line; the rest change only under the lock.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Count {
    Taken,
    Denied,
    /// Grants counted in `Taken` that nobody saw: they no longer count.
    Untaken,
    Refunded,
    TimedOut,
}

const COUNTS: usize = 5;

/// Counters of what a bucket did, one per [`Count`].
#[derive(Debug)]
pub(crate) struct Counters([AtomicU64; COUNTS]);

/// What one lock section counted, in plain integers, added to the [`Counters`] when the
/// lock is released (see [`Counters::flush`]), so that the state's own code stays
/// sequential.
#[derive(Debug, Default)]
pub(crate) struct Tally([u64; COUNTS]);

/// A snapshot of [`Counters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counted {
    pub(crate) taken: u64,
    pub(crate) denied: u64,
    pub(crate) refunded: u64,
    pub(crate) timed_out: u64,
}

impl Tally {
    pub(crate) fn add(&mut self, count: Count, amount: u64) {
        let counted = &mut self.0[count as usize];
        *counted = counted.saturating_add(amount);
    }
}

impl Counters {
    pub(crate) fn new() -> Counters {
        Counters(std::array::from_fn(|_| AtomicU64::new(0)))
    }

    #[inline]
    pub(crate) fn add(&self, count: Count, amount: u64) {
        saturating_add(&self.0[count as usize], amount);
    }

    /// Adds what a lock section counted, and starts its tally afresh.
    pub(crate) fn flush(&self, tally: &mut Tally) {
        for (counter, amount) in self.0.iter().zip(std::mem::take(tally).0) {
            if amount > 0 {
                saturating_add(counter, amount);
            }
        }
    }

    /// What the counters hold, with `pending` (a lock section's tally, not flushed yet).
    pub(crate) fn read(&self, pending: &Tally) -> Counted {
        let read = |count: Count| {
            let index = count as usize;
            self.0[index].load(Relaxed).saturating_add(pending.0[index])
        };
        Counted {
            taken: read(Count::Taken).saturating_sub(read(Count::Untaken)),
            denied: read(Count::Denied),
            refunded: read(Count::Refunded),
            timed_out: read(Count::TimedOut),
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
                        counters.add(Count::Taken, 2);
                        counters.add(Count::Denied, 1);
                    }
                });
            }
        });
        counters.add(Count::Untaken, 6);
        let counted = counters.read(&Tally::default());
        assert_eq!((counted.taken, counted.denied), (15_994, 8_000));
    }

    #[test]
    fn counters_saturate_rather_than_wrap() {
        let counters = Counters::new();
        counters.add(Count::Taken, u64::MAX - 1);
        counters.add(Count::Taken, 5);
        assert_eq!(counters.read(&Tally::default()).taken, u64::MAX);
        counters.add(Count::Refunded, u64::MAX);
        counters.add(Count::Refunded, 1);
        assert_eq!(counters.read(&Tally::default()).refunded, u64::MAX);
    }
}
