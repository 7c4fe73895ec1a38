//! The synchronisation primitives under the bucket's core (its lock and the atomics beside
//! it), under the fixed window (its one atomic word), under the window limiters' lines
//! and the sliding limiters' tallies (which a composite locks beside the buckets') and
//! under `Keyed`'s shards.
//!
//! They are named here, once, so that a model checker can stand in for them: built with
//! `RUSTFLAGS="--cfg loom"`, these are [loom](https://docs.rs/loom)'s versions, and the
//! tests in `loom_tests.rs` explore every interleaving of the core's operations.
//! Otherwise they are the standard library's, at no cost.

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};

/// What orders a limiter among a composite's members (see `composite/`): its shared
/// state's address, which is unique among limiters alive at once and costs no field.
/// Under loom, addresses change from one explored run to the next, and loom needs every
/// run to take the same steps: there it is a number given in order of creation.
#[derive(Debug, Default)]
pub(crate) struct Identity(#[cfg(loom)] usize);

impl Identity {
    #[cfg(not(loom))]
    pub(crate) fn new() -> Identity {
        Identity()
    }

    #[cfg(loom)]
    pub(crate) fn new() -> Identity {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        Identity(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }

    /// The identity of the limiter whose shared state, holding `self`, is `shared`.
    #[cfg(not(loom))]
    pub(crate) fn of<T>(&self, shared: &std::sync::Arc<T>) -> usize {
        std::sync::Arc::as_ptr(shared) as *const u8 as usize
    }

    #[cfg(loom)]
    pub(crate) fn of<T>(&self, _shared: &std::sync::Arc<T>) -> usize {
        self.0
    }
}
