//! The synchronisation primitives under the bucket's core (its lock and the atomics beside
//! it), under the fixed window (its one atomic word) and under `Keyed`'s shards.
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
