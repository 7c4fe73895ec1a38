//! A key's limit and a global one decided together, all or nothing, for the HTTP layer:
//! [`Keyed::try_acquire_with`], with both limiters' [`Quota`]s for the response's
//! headers.
//!
//! A key held as a word is decided on a copy of its word under its shard's lock, and the
//! copy is written back only once the global limiter took the permits too: no
//! allocation, no unfolded limiter. A key held whole is decided with the global limiter
//! as a composite's try decides (see `composite/`), all or nothing and first in, first
//! out, though it gives neither a part in composites: it never waits.

use std::borrow::Borrow;
use std::hash::Hash;

use crate::composite::{try_each, Member, Refused};
use crate::error::TryAcquireError;
use crate::keyed::handle::Keyed;
use crate::keyed::slots::{step, Step};
use crate::limiter::{KeyTemplate, Limiter};
use crate::quota::Quota;

/// What [`Keyed::try_acquire_with`] decided, and both limiters' quotas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Joint {
    /// Ok when both took the permits; else who refused. All or nothing: nothing is taken
    /// when either refuses.
    pub(crate) result: Result<(), JointRefusal>,
    /// The key's quota after the decision; `None` for a new key refused with
    /// `TooManyKeys`, which has no limiter, or from a limiter that reports none.
    pub(crate) key: Option<Quota>,
    /// The global limiter's quota after the decision; `None` from a limiter that reports
    /// none.
    pub(crate) global: Option<Quota>,
}

/// Who refused a joint decision, and why. When both would refuse, the key is named: it
/// is asked first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JointRefusal {
    Key(TryAcquireError),
    Global(TryAcquireError),
}

impl<K: Hash + Eq, L: KeyTemplate> Keyed<K, L> {
    /// Acquires `permits` for `key` and from `global` at once, or from neither: the key's
    /// limit and a global one, for one request. With both limiters' quotas: the key's
    /// (`None` for a new key refused with `TooManyKeys`) and the global's.
    ///
    /// On a key held as a word (see [how a key is held](Keyed#how-a-key-is-held)), under
    /// its shard's lock: the key decides on a copy of its word; only if it admits is
    /// `global` asked ([`Limiter::try_acquire_decision`]); only if that admits too is the
    /// copy written back. Nothing is allocated and no limiter is unfolded. The key's quota
    /// is read from the word it leaves at the same reading of the clock, the global's
    /// from its own decision; when the key refuses, `global` is not asked and its quota is
    /// [`Limiter::quota`]'s.
    ///
    /// On a key held whole (someone waits in its line, a template without a one-word
    /// form, a handle from `get` alive), the key's limiter and `global` are decided as a
    /// composite's try decides (`composite::try_each`), under both their locks: all or
    /// nothing, behind the waiters of either line, and neither given a part in
    /// composites. Both
    /// quotas are then read right after the decision, so a request for the same key or
    /// the global limiter on another thread may slip in between.
    ///
    /// `global` must not be a limiter of this `Keyed`'s keys.
    pub(crate) fn try_acquire_with<Q, G>(&self, key: &Q, permits: u64, global: &G) -> Joint
    where
        L: Member,
        G: Limiter + Member,
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // On a word, `global` is asked under the shard's lock: a shard's lock is taken
        // before any limiter's, the crate's lock order (see `sync/mod.rs` and [`Keyed`]'s
        // concurrency notes).
        let decided = self.with_slot(self.hash(key), key, |slot, at| {
            step(slot, at, |compact, word, reading| {
                // The key decides on a copy, written back only once the global limiter
                // took the permits too; until then the word is as it was, and so is its
                // quota.
                let mut decided = *word;
                let key = compact.decide_word(&mut decided, permits, reading);
                if let Err(refusal) = key.result {
                    return Joint {
                        result: Err(JointRefusal::Key(refusal)),
                        key: key.quota,
                        global: global.quota(),
                    };
                }
                let decision = global.try_acquire_decision(permits);
                if let Err(refusal) = decision.result {
                    return Joint {
                        result: Err(JointRefusal::Global(refusal)),
                        key: Some(compact.quota_of_word(*word, reading)),
                        global: decision.quota,
                    };
                }
                *word = decided;
                Joint {
                    result: Ok(()),
                    key: key.quota,
                    global: decision.quota,
                }
            })
        });
        match decided {
            Ok((Step::Decided(joint), _)) => joint,
            Ok((Step::Call(limiter), _)) => on_whole(&*limiter, permits, global),
            Err(refused) => Joint {
                result: Err(JointRefusal::Key(refused.into())),
                key: None,
                global: global.quota(),
            },
        }
    }
}

/// The joint decision on a key's whole `limiter`, with no lock of the `Keyed` held.
fn on_whole<L, G>(limiter: &L, permits: u64, global: &G) -> Joint
where
    L: Limiter + Member,
    G: Limiter + Member,
{
    let result = match try_each(&(limiter, global), permits) {
        Ok(()) => Ok(()),
        Err(Refused::Repeated { .. }) => {
            // Only one limiter: `global` is the key's own. Deciding it once is all or
            // nothing.
            let decision = limiter.try_acquire_decision(permits);
            return Joint {
                result: decision.result.map_err(JointRefusal::Key),
                key: decision.quota,
                global: decision.quota,
            };
        }
        // The key's refusal if it refused (member 0), else the global's.
        Err(Refused::Members(refusals)) => {
            match refusals.iter().min_by_key(|&&(member, _)| member) {
                Some(&(0, refusal)) => Err(JointRefusal::Key(refusal)),
                Some(&(_, refusal)) => Err(JointRefusal::Global(refusal)),
                None => unreachable!("a composite refuses with its members' refusals"),
            }
        }
    };
    Joint {
        result,
        key: limiter.quota(),
        global: global.quota(),
    }
}
