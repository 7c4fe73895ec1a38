//! The synchronisation primitives under the bucket's core (its lock and the atomics beside
//! it), under the fixed window (its one atomic word), under the window limiters' lines
//! and the sliding limiters' tallies (which a composite locks beside the buckets') and
//! under `Keyed`'s shards.
//!
//! They are named here, once, so that a model checker can stand in for them: built with
//! `RUSTFLAGS="--cfg loom"`, these are [loom](https://docs.rs/loom)'s versions, and the
//! tests in `loom_tests/` explore every interleaving of the core's operations.
//! Otherwise they are the standard library's, at no cost.
//!
//! It uses nothing of the crate, and everything that locks uses it.
//!
//! # Lock order
//!
//! The one statement of it: every other place points here. Every path takes the
//! limiters' locks in one global order, holding only locks earlier in it while it waits
//! for one, so no two threads ever wait for each other:
//!
//! 1. a [`Keyed`](crate::Keyed) shard's lock, for a key's word: a key decided on its word
//!    together with a global limiter asks the global limiter under it
//!    (`keyed/joint.rs`); nothing takes a shard's lock while it holds a limiter's;
//! 2. buckets' locks (`bucket/shared.rs`), by [`Identity`] (see `composite/member.rs`);
//! 3. window limiters by [`Identity`], and within each its line (`Turnstile::line`,
//!    `window/turnstile.rs`) before, for a sliding limiter, its tally
//!    (`window/sliding.rs`).
//!
//! - A plain `try_acquire` takes one limiter's locks: a bucket's lock alone; a fixed
//!   window's line alone, behind waiters; a sliding limiter's tally alone, or behind
//!   waiters, having let it go, its line and then its tally. A refund, the readers
//!   (`available`, `is_idle`, ...) and the head of a window's line trying take the tally
//!   alone (a fixed window, nothing).
//! - Joining or leaving a window's line takes that line alone: the head's lock is only
//!   polled under it, never waited for.
//! - A composite's decision (`composite/held.rs`) holds every member's locks at once, in
//!   this order, and walks the lines it holds rather than locking them again; joining
//!   (`composite/waiting.rs`) holds the buckets' locks and the lines. Its places leave
//!   their lines only once it has let go of all of them.

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
///
/// Beside it, the part the limiter plays in composites (see [`Role`]), claimed for good
/// by the first composite made over it.
#[derive(Debug, Default)]
pub(crate) struct Identity {
    /// Under loom, and in unit tests, a number given in the order limiters are made:
    /// loom's addresses are not stable, and unit tests that need one limiter before
    /// another in the lock order cannot choose where the allocator puts them.
    #[cfg(any(loom, test))]
    number: usize,
    /// 0 until a composite claims a [`Role`]. The standard library's atomic even under
    /// loom: it is claimed as a composite is made, not in the interleavings loom explores.
    role: std::sync::atomic::AtomicU8,
}

/// The part a limiter plays in the composites that wait on it. One that leads
/// [`all_in_turn`](crate::all_in_turn) composites (it is their first member) holds its
/// line for a composite that then waits in others' lines; one that follows (a later member
/// of such a composite, or any member of [`all`](crate::all)) is waited on by composites
/// holding a leader's line. A limiter playing both parts could close a circle of
/// composites each waiting for the next, so it keeps the first it is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Leads = 1,
    Follows = 2,
}

impl Role {
    fn of(word: u8) -> Option<Role> {
        match word {
            1 => Some(Role::Leads),
            2 => Some(Role::Follows),
            _ => None,
        }
    }
}

impl Identity {
    #[cfg(not(any(loom, test)))]
    pub(crate) fn new() -> Identity {
        Identity::default()
    }

    #[cfg(any(loom, test))]
    pub(crate) fn new() -> Identity {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        Identity {
            number: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            role: Default::default(),
        }
    }

    /// The identity of the limiter whose shared state, holding `self`, is `shared`.
    #[cfg(not(any(loom, test)))]
    pub(crate) fn of<T>(&self, shared: &std::sync::Arc<T>) -> usize {
        std::sync::Arc::as_ptr(shared) as *const u8 as usize
    }

    #[cfg(any(loom, test))]
    pub(crate) fn of<T>(&self, _shared: &std::sync::Arc<T>) -> usize {
        self.number
    }

    /// The part the limiter plays in composites, if it was given one.
    pub(crate) fn role(&self) -> Option<Role> {
        Role::of(self.role.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Gives the limiter `role` for good, unless it already plays the other part, which
    /// is returned.
    pub(crate) fn claim(&self, role: Role) -> Result<(), Role> {
        use std::sync::atomic::Ordering::Relaxed;
        let wanted = role as u8;
        // Read first: a global bucket in every request's composite is claimed again on
        // each, and a read keeps its cache line shared.
        let held = match self.role.load(Relaxed) {
            0 => match self.role.compare_exchange(0, wanted, Relaxed, Relaxed) {
                Ok(_) => return Ok(()),
                Err(held) => held,
            },
            held => held,
        };
        match Role::of(held) {
            Some(held) if held != role => Err(held),
            _ => Ok(()),
        }
    }
}
