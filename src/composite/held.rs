//! Every member's lock held at once, in the global lock order, and what a composite
//! decides under them: at one instant, from one reading of tokio's clock.
//!
//! Locks are always taken in the order of the members' identities, whichever order the
//! members were given in, so two composites that share members (A+B beside B+A, or
//! A+B, B+C and C+A) never each hold a lock the other waits for.

use std::time::Duration;

use crate::bucket::HeldBucket;
use crate::clock::{Clock, Moment, NEVER};
use crate::composite::member::{
    Hooks, Indexed, IndexedKey, KeyTry, Members, Part, Refusals, Refused,
};
use crate::error::{ConfigError, TryAcquireAllError, TryAcquireError};
use crate::window::WindowHeld;

/// One member's state, held.
pub(crate) enum Held<'a> {
    Bucket(HeldBucket<'a>),
    Window {
        held: Box<dyn WindowHeld + 'a>,
        clock: &'a Clock,
    },
}

/// A member held, with its position among those given to `all`.
pub(crate) struct HeldMember<'a> {
    pub(crate) member: usize,
    pub(crate) held: Held<'a>,
}

/// Reads the clock once, then locks every member of `parts` in lock order: every member
/// decides at that one instant (or, if a member's state is already past it, because a
/// thread outside the runtime read a later clock, at its own latest instant).
pub(crate) fn lock_all<'a>(parts: &[Indexed<'a>]) -> (Vec<HeldMember<'a>>, Moment) {
    let moment = Moment::now();
    let held = parts
        .iter()
        .map(|indexed| HeldMember {
            member: indexed.member,
            held: match indexed.part {
                Part::Bucket(bucket) => Held::Bucket(bucket.hold_lock()),
                Part::Window(window) => Held::Window {
                    held: window.hold(moment),
                    clock: window.clock(),
                },
            },
        })
        .collect();
    (held, moment)
}

/// A composite's `try_acquire`: every member admits `permits` at one instant with nobody
/// in its line, and each counts them, or none counts anything.
///
/// A refusal is counted as denied by each bucket that refused when `count_denials`.
/// Zero permits are admitted by every open member at once, as each member admits them.
pub(crate) fn try_all(
    hooks: &Hooks<'_>,
    permits: u64,
    count_denials: bool,
) -> Result<(), TryAcquireAllError> {
    let (keys, parts) = (hooks.keys.iter(), &hooks.parts);
    try_keys(keys, parts, permits, count_denials, true).map_err(|refusals| summary(&refusals))
}

/// The keys' words first, each under its shard's lock (the shards' locks come before any
/// limiter's), then `parts`: each key asks the rest once its word is decided, and is
/// written only if its word and all the rest admit, and `commit`. A key that refuses
/// still asks the rest, counting nothing, so that the refusal names every member that
/// refuses and the latest `retry_after`.
fn try_keys<'k, 'a: 'k>(
    mut keys: impl Iterator<Item = &'k IndexedKey<'a>> + Clone,
    parts: &[Indexed<'a>],
    permits: u64,
    count_denials: bool,
    commit: bool,
) -> Refusals {
    let Some(indexed) = keys.next() else {
        return try_parts(parts, permits, count_denials, commit).map_err(Refused::Members);
    };
    let mut rest = |commit| try_keys(keys.clone(), parts, permits, count_denials, commit);
    let refused = |error, others: Refusals| {
        let others = match others {
            Ok(()) => Vec::new(),
            Err(Refused::Members(others)) => others,
            Err(repeated) => return Err(repeated),
        };
        let refusals = std::iter::once((indexed.member, error)).chain(others);
        Err(Refused::Members(refusals.collect()))
    };
    match indexed.key.try_with(permits, commit, &mut rest) {
        KeyTry::Refused(error, others) => refused(error, others),
        KeyTry::Asked(refusals) => refusals,
        // Held whole, the key is decided as a limiter, under its lock, in lock order;
        // unless that limiter is a member already, whose lock would be taken twice.
        KeyTry::Whole => match indexed.key.whole() {
            Ok(part) => {
                let same = parts
                    .iter()
                    .find(|other| other.part.identity() == part.identity());
                if let Some(other) = same {
                    let first = other.member.min(indexed.member);
                    let second = other.member.max(indexed.member);
                    return Err(Refused::Repeated { first, second });
                }
                let mut parts: Vec<Indexed<'a>> = parts.to_vec();
                parts.push(Indexed {
                    member: indexed.member,
                    part,
                });
                parts.sort_by_key(Indexed::lock_order);
                try_keys(keys, &parts, permits, count_denials, commit)
            }
            Err(error) => refused(error, Ok(())),
        },
    }
}

/// A try over `members` (limiters, no key of a `Keyed`), all or nothing like a
/// composite's, refused with each refusing member's own answer and its position: for
/// `Keyed`'s joint decision (`keyed/joint.rs`), which must say which member refused. A
/// refusing bucket counts a denial. Unlike a composite it gives no member a part, as a
/// try never waits: a limiter deciding requests jointly may still lead composites.
#[cfg_attr(not(any(all(test, not(loom)), feature = "http")), allow(dead_code))]
pub(crate) fn try_each(members: &impl Members, permits: u64) -> Refusals {
    let hooks = members.parts();
    debug_assert!(hooks.keys.is_empty(), "a key in a joint decision");
    if let Some((first, second)) = hooks.repeated() {
        return Err(Refused::Repeated { first, second });
    }
    try_parts(&hooks.parts, permits, true, true).map_err(Refused::Members)
}

/// [`try_all`]'s decision over limiters alone, refused with each refusing member's
/// answer; with `commit` false, it decides and counts nothing but the denials.
pub(crate) fn try_parts(
    parts: &[Indexed<'_>],
    permits: u64,
    count_denials: bool,
    commit: bool,
) -> Result<(), Vec<(usize, TryAcquireError)>> {
    let (mut held, moment) = lock_all(parts);
    let mut refusals = Vec::new();
    for member in held.iter_mut() {
        let verdict = match &mut member.held {
            Held::Bucket(state) => {
                let now = state.clock_at(moment);
                let verdict = state.check_take(permits, now).map_err(Into::into);
                if let (Err(refusal), true) = (verdict, count_denials) {
                    state.note_denied();
                    state.observer().refused(permits, retry_after(refusal));
                }
                verdict
            }
            Held::Window { held, .. } => held.check(permits),
        };
        if let Err(error) = verdict {
            refusals.push((member.member, error));
        }
    }
    if !refusals.is_empty() {
        return Err(refusals);
    }
    if !commit {
        return Ok(());
    }
    for member in held.iter_mut() {
        match &mut member.held {
            Held::Bucket(state) => {
                state.take_checked(permits);
                state.observer().admitted(permits);
            }
            Held::Window { .. } if permits == 0 => {}
            Held::Window { held, .. } => {
                held.record(permits);
            }
        }
    }
    Ok(())
}

/// The composite's refusal from its members': the first member given, of those refusing
/// for good; else the latest `retry_after` of those refusing for now.
fn summary(refused: &Refused) -> TryAcquireAllError {
    let refusals = match refused {
        Refused::Members(refusals) => refusals,
        &Refused::Repeated { first, second } => {
            return TryAcquireAllError::Config(ConfigError::RepeatedMember { first, second })
        }
    };
    let for_good = refusals
        .iter()
        .filter(|(_, error)| retry_after(*error).is_none());
    match for_good.min_by_key(|(member, _)| *member) {
        Some(&(member, error)) => TryAcquireAllError::Member { member, error },
        None => {
            let waits = refusals.iter().filter_map(|(_, error)| retry_after(*error));
            let retry_after = waits.max().unwrap_or_default();
            TryAcquireAllError::Limited { retry_after }
        }
    }
}

/// How long a refusal for now says to wait; `None` for a refusal for good.
fn retry_after(error: TryAcquireError) -> Option<Duration> {
    match error {
        TryAcquireError::Limited { retry_after } => Some(retry_after),
        _ => None,
    }
}

/// The instant `at` on `clock` as a tokio instant; `None` for never.
pub(crate) fn instant_of(clock: &Clock, at: u64) -> Option<tokio::time::Instant> {
    (at != NEVER).then(|| clock.instant(at)).flatten()
}
