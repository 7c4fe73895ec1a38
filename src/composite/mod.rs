//! Composites: one decision over several independent limiters ([`all()`]).
//!
//! - `all.rs`: [`all()`] and [`All`], the public face.
//! - `in_turn.rs`: [`all_in_turn`] and [`AllInTurn`], the composite that waits member by
//!   member.
//! - `member.rs`: [`Member`] and [`Members`], what a composite can be made of, and the
//!   global order the members' locks are taken in.
//! - `held.rs`: every member's lock held at once, one reading of the clock, and
//!   `try_acquire`'s decision under them.
//! - `waiting.rs`: `acquire`'s places in every member's line, joined at once (or the
//!   first member's line first), and the decision it makes once at the head of each;
//!   giving them back when dropped.
//!
//! It uses the bucket (a hold in its queue, see `bucket/state.rs`) and the window
//! limiters (a place in their line, see `window/hooks.rs`) through crate-private
//! hooks, which a user's [`Limiter`](crate::Limiter) does not have; neither uses it.
//! Beside them, only the foundations: `clock`, `error`, `permits`, `sync` and `limiter`.

mod all;
mod held;
mod in_turn;
mod member;
mod waiting;

pub use all::{all, All};
pub(crate) use held::try_each;
pub use in_turn::{all_in_turn, AllInTurn};
pub(crate) use member::{Hook, KeyHook, KeyTry, Part, Piece, Refusals, Refused, Sealed};
pub use member::{Member, Members};

#[cfg(all(test, not(loom)))]
mod tests;
