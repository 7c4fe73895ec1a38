//! [`Keyed`]: one limiter per key, made on first use from a template and forgotten again
//! once it is idle. Its documentation explains why forgetting costs nothing, how a key is
//! held (its state word alone while nobody waits on it), and the memory bound.
//!
//! - `handle.rs`: [`Keyed`], and what its clones share.
//! - `builder.rs`: [`Keyed::new`], [`KeyedBuilder`] and the settings it checks.
//! - `decide.rs`: deciding for a key (`try_acquire`, `try_acquire_decision`, `refund`,
//!   `acquire`), on its word or its whole limiter.
//! - `keys.rs`: what a `Keyed` tells of itself and its keys, and the whole limiters it
//!   hands out (`get`, `get_or_insert`).
//! - `slots.rs`: a key's slot, found (or added, within `max_keys`) under its shard's
//!   lock, and the sweeps that forget idle keys.
//! - `shard.rs`: a shard's table of keys and their entries, and its sweep.
//! - `compact.rs`: which templates have a one-word form (a `OneWord`, see `limiter.rs`).
//! - `member.rs`: [`KeyMember`], one key as a member of a composite.
//! - `joint.rs`: a key's limit and a global one decided together, all or nothing.
//!
//! It may use the limiter traits (`limiter.rs`), the bucket and the window limiters (for
//! their one-word forms and as composite members), `composite/` (for [`KeyMember`] and
//! the joint decision), `observe/`, `clock.rs` and `sync/`; only `http/` uses it. In the
//! folder, `compact.rs` uses no file of it, `shard.rs` only `compact.rs`, `handle.rs`
//! only those two, `slots.rs` only those three; the others only those four, and
//! `joint.rs` `member.rs` besides. No file uses `mod.rs`, which only names the files and
//! what they give the crate, and no file uses one that uses it back.

mod builder;
mod compact;
mod decide;
mod handle;
// The joint decision serves the HTTP layer; without its feature only the tests call it.
#[cfg_attr(not(any(all(test, not(loom)), feature = "http")), allow(dead_code))]
mod joint;
mod keys;
mod member;
mod shard;
mod slots;

pub use builder::KeyedBuilder;
pub use handle::Keyed;
#[cfg(feature = "http")]
pub(crate) use joint::{Joint, JointRefusal};
pub use member::KeyMember;

#[cfg(all(test, not(loom)))]
mod tests;
