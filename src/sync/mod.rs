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
///
/// Beside it, the part the limiter plays in composites (see [`Role`]), claimed for good
/// by the first composite made over it.
#[derive(Debug, Default)]
pub(crate) struct Identity {
    #[cfg(loom)]
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
    #[cfg(not(loom))]
    pub(crate) fn new() -> Identity {
        Identity::default()
    }

    #[cfg(loom)]
    pub(crate) fn new() -> Identity {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        Identity {
            number: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            role: Default::default(),
        }
    }

    /// The identity of the limiter whose shared state, holding `self`, is `shared`.
    #[cfg(not(loom))]
    pub(crate) fn of<T>(&self, shared: &std::sync::Arc<T>) -> usize {
        std::sync::Arc::as_ptr(shared) as *const u8 as usize
    }

    #[cfg(loom)]
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
