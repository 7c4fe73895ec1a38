//! What decides: the [`Limits`] a layer asks for each request, and [`Local`], the
//! in-process limits (a limiter per key through [`Keyed`], and an optional global one,
//! decided together, all or nothing).

use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{timeout_at, Instant};

use super::response::RefusalKind;
use crate::composite::Member;
use crate::error::{AcquireError, TryAcquireError};
use crate::keyed::{Joint, JointRefusal, Keyed};
use crate::limiter::{KeyTemplate, Limiter};
use crate::quota::{Policy, Quota};

/// How one request fared: admitted, or why not.
pub type Outcome = Result<(), RefusalKind>;

/// A limiter's refusal as the layer answers it; `key_window` is when to come back from a
/// table too full to hold a new key.
pub(crate) fn refusal(error: TryAcquireError, key_window: Duration) -> RefusalKind {
    match error {
        TryAcquireError::Limited { retry_after } => RefusalKind::Limited { retry_after },
        TryAcquireError::ExceedsLimit { requested, limit } => {
            RefusalKind::NeverFits { requested, limit }
        }
        TryAcquireError::TooManyKeys { .. } => RefusalKind::TooManyKeys {
            retry_after: key_window,
        },
        error @ TryAcquireError::Closed => RefusalKind::Unavailable {
            reason: error.to_string(),
        },
    }
}

/// One of a layer's two limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// The client's own limit.
    Key,
    /// The limit on every request together.
    Global,
}

/// One decision: its outcome, and each limit's quota as the decision left it (the
/// per-key limit's, then the global one's; `None` for a limit that is not there or
/// does not report one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// How the request fared.
    pub outcome: Outcome,
    /// The per-key and global quotas, in that order.
    pub quotas: [Option<Quota>; 2],
    /// The limit that refused, when one did (the per-key one when both did); `None` when
    /// admitted, or refused for want of room for the key or of an answer.
    pub refused_by: Option<Limit>,
    /// How long the request waited its turn before this decision, when it did.
    pub waited: Option<Duration>,
}

impl Verdict {
    /// The verdict of a decision made at once, by the per-key limit alone.
    pub(crate) fn of_key(outcome: Outcome, quota: Option<Quota>) -> Verdict {
        Verdict {
            refused_by: refused_by(&outcome, Limit::Key),
            outcome,
            quotas: [quota, None],
            waited: None,
        }
    }
}

/// Which limit refused, for an outcome that `limit` decided: none for an admission, a
/// table too full to hold the key, or limits that could not decide.
pub(crate) fn refused_by(outcome: &Outcome, limit: Limit) -> Option<Limit> {
    match outcome {
        Err(RefusalKind::Limited { .. } | RefusalKind::NeverFits { .. }) => Some(limit),
        _ => None,
    }
}

/// A decision made now, or one to wait for.
#[allow(missing_debug_implementations)]
pub enum Decided {
    /// Decided at once.
    Now(Verdict),
    /// Decided once the future ends: a request waiting its turn, or a round trip to
    /// Redis.
    Later(Pin<Box<dyn Future<Output = Verdict> + Send>>),
}

/// The limits an HTTP layer asks: in-process ([`Local`]) or in Redis. Made by the
/// layer's builder; not for implementing elsewhere.
pub trait Limits<K>: private::Decide<K> {}

impl<K, T: private::Decide<K>> Limits<K> for T {}

pub(crate) mod private {
    use super::*;

    /// The decisions behind [`Limits`]: sealed, so the layer can grow them freely.
    pub trait Decide<K>: Send + Sync + 'static {
        /// Decides a request of `cost` permits for `key`; when `wait` is set and the
        /// request could pass within it, waits first in, first out up to that long.
        /// Without `quotas`, the verdict may leave them out: the layer sends no field
        /// and settles nothing, and reading them costs.
        fn decide(&self, key: &K, cost: u64, wait: Option<Duration>, quotas: bool) -> Decided;

        /// Settles a request charged `charged` permits that turned out to cost `actual`:
        /// gives back what it did not use to each limit whose `refundable` is set (the
        /// per-key one, then the global one), or takes the excess as far as the limits
        /// have it now.
        fn settle(&self, key: &K, charged: u64, actual: u64, refundable: [bool; 2]);

        /// Each limit's policy: the per-key limit's, then the global one's.
        fn policies(&self) -> [Option<Policy>; 2];

        /// Forgets the idle keys, and returns how many.
        fn forget_idle_keys(&self) -> usize;
    }
}

/// The in-process limits: a limiter per key, made from a template, and optionally one
/// global limiter, decided together.
///
/// A request is admitted only when its key's limiter and the global one both allow it,
/// and is then counted by both at one instant; when either refuses, neither counts it.
/// A key of a [`TokenBucket`](crate::TokenBucket) or [`FixedWindow`](crate::FixedWindow)
/// template is decided on its compact word (see [`Keyed`]): no allocation, no limiter
/// made per key.
#[derive(Debug)]
pub struct Local<K, L, G> {
    keyed: Keyed<K, L>,
    global: Option<Arc<G>>,
}

impl<K, L, G> Local<K, L, G> {
    pub(crate) fn new(keyed: Keyed<K, L>, global: Option<G>) -> Local<K, L, G> {
        Local {
            keyed,
            global: global.map(Arc::new),
        }
    }

    /// The per-key limiters.
    pub(crate) fn keyed(&self) -> &Keyed<K, L> {
        &self.keyed
    }
}

impl<K, L, G> Local<K, L, G>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    L: KeyTemplate + Member,
    G: Limiter + Member,
{
    /// The decision of a request that does not wait, with its quotas when `quotas` asks.
    fn try_decide(&self, key: &K, cost: u64, quotas: bool) -> Verdict {
        let Some(global) = &self.global else {
            if !quotas {
                let result = self.keyed.try_acquire(key, cost);
                return Verdict::of_key(self.outcome(result), None);
            }
            let decision = self.keyed.try_acquire_decision(key, cost);
            return Verdict::of_key(self.outcome(decision.result), decision.quota);
        };
        let Joint {
            result,
            key: key_quota,
            global: global_quota,
        } = self.keyed.try_acquire_with(key, cost, &**global);
        let (outcome, decided_by) = match result {
            Ok(()) => (Ok(()), Limit::Key),
            Err(JointRefusal::Key(TryAcquireError::Limited { retry_after })) => {
                // The global limit was not asked. If it could not admit the request now
                // either, a client that came back after the key's wait alone could be
                // refused again: wait until it is whole at the latest (never early).
                let global_wait = (global_quota)
                    .filter(|quota| quota.remaining < cost)
                    .map_or(Duration::ZERO, |quota| quota.full_after);
                let outcome = Err(RefusalKind::Limited {
                    retry_after: retry_after.max(global_wait),
                });
                (outcome, Limit::Key)
            }
            Err(JointRefusal::Key(error)) => (self.outcome(Err(error)), Limit::Key),
            Err(JointRefusal::Global(error)) => (self.outcome(Err(error)), Limit::Global),
        };
        Verdict {
            refused_by: refused_by(&outcome, decided_by),
            outcome,
            quotas: [key_quota, global_quota],
            waited: None,
        }
    }

    fn outcome(&self, result: Result<(), TryAcquireError>) -> Outcome {
        result.map_err(|error| refusal(error, self.key_window()))
    }

    /// How long a key takes to become idle once it is left alone: its limiter's window.
    fn key_window(&self) -> Duration {
        (self.keyed.policy()).map_or(Duration::from_secs(1), |policy| policy.window)
    }

    /// The request's quotas as they stand now, counting nothing.
    fn quotas(&self, key: &K) -> [Option<Quota>; 2] {
        [
            self.keyed.quota(key),
            self.global.as_ref().and_then(|global| global.quota()),
        ]
    }
}

impl<K, L, G> private::Decide<K> for Local<K, L, G>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    L: KeyTemplate + Member,
    G: Limiter + Member,
{
    fn decide(&self, key: &K, cost: u64, wait: Option<Duration>, quotas: bool) -> Decided {
        let verdict = self.try_decide(key, cost, quotas);
        match (&verdict.outcome, wait) {
            // Worth waiting only when it could pass in time: `retry_after` is never
            // shorter than the true wait.
            (Err(RefusalKind::Limited { retry_after }), Some(wait)) if *retry_after <= wait => {
                let waiting = Local {
                    keyed: self.keyed.clone(),
                    global: self.global.clone(),
                };
                let key = key.clone();
                Decided::Later(Box::pin(async move { waiting.wait(key, cost, wait).await }))
            }
            _ => Decided::Now(verdict),
        }
    }

    fn settle(&self, key: &K, charged: u64, actual: u64, refundable: [bool; 2]) {
        if actual < charged {
            let unused = charged - actual;
            if refundable[0] {
                self.keyed.refund(key, unused);
            }
            if let (Some(global), true) = (&self.global, refundable[1]) {
                global.refund(unused);
            }
        } else if actual > charged {
            // A limiter cannot go below empty: take what is there, up to the excess.
            let excess = actual - charged;
            let from_key = (self.keyed.quota(key)).map_or(0, |quota| quota.remaining.min(excess));
            if from_key > 0 {
                let _ = self.keyed.try_acquire(key, from_key);
            }
            if let Some(global) = &self.global {
                let from_global = global.available().min(excess);
                if from_global > 0 {
                    let _ = global.try_acquire(from_global);
                }
            }
        }
    }

    fn policies(&self) -> [Option<Policy>; 2] {
        [
            self.keyed.policy(),
            self.global.as_ref().and_then(|global| global.policy()),
        ]
    }

    fn forget_idle_keys(&self) -> usize {
        self.keyed.retain_recent()
    }
}

impl<K, L, G> Local<K, L, G>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    L: KeyTemplate + Member,
    G: Limiter + Member,
{
    /// Waits first in, first out for `cost` permits of `key`, then of the global limit,
    /// up to `wait` in all.
    async fn wait(self, key: K, cost: u64, wait: Duration) -> Verdict {
        // A turn that comes at `wait` exactly is within it; the timer's deadline is the
        // next tick after it, so that a grant due at `wait` lands first.
        let start = Instant::now();
        let deadline = later(start, wait.saturating_add(Duration::from_nanos(1)));
        let (outcome, decided_by) = match self.acquire_by(&key, cost, deadline).await {
            Ok(()) => (Ok(()), Limit::Key),
            Err((limit, Some(refusal))) => (Err(refusal), limit),
            // Waited as long as allowed behind others: the line is at least that long.
            Err((limit, None)) => (Err(RefusalKind::Limited { retry_after: wait }), limit),
        };
        Verdict {
            refused_by: refused_by(&outcome, decided_by),
            outcome,
            quotas: self.quotas(&key),
            waited: Some(Instant::now() - start),
        }
    }

    /// Waits in the key's line alone, and only then in the global one, so that a
    /// request waiting for its own key never holds the global line and the other keys
    /// behind it. A refusal says which limit's line refused, and why: `None` when
    /// `deadline` passed first; the key's permits are then given back, while they still
    /// count (see [`counts_until`]).
    async fn acquire_by(
        &self,
        key: &K,
        cost: u64,
        deadline: Instant,
    ) -> Result<(), (Limit, Option<RefusalKind>)> {
        match timeout_at(deadline, self.keyed.acquire(key, cost)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err((Limit::Key, Some(self.refusal(error)))),
            Err(_elapsed) => return Err((Limit::Key, None)),
        }
        let Some(global) = &self.global else {
            return Ok(());
        };
        // Refused, out of time, or dropped as it waits (the client hung up), the request
        // gives the key its permits back.
        let mut give_back = GiveBack {
            keyed: &self.keyed,
            key,
            cost,
            counted_until: counts_until(self.keyed.quota(key), Instant::now()),
        };
        let waited = timeout_at(deadline, global.acquire(cost)).await;
        if matches!(waited, Ok(Ok(()))) {
            give_back.counted_until = None;
        }
        drop(give_back);
        match waited {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err((Limit::Global, Some(self.refusal(error)))),
            Err(_elapsed) => Err((Limit::Global, None)),
        }
    }

    fn refusal(&self, error: AcquireError) -> RefusalKind {
        match error {
            AcquireError::ExceedsLimit { requested, limit } => {
                RefusalKind::NeverFits { requested, limit }
            }
            AcquireError::TooManyKeys { .. } => RefusalKind::TooManyKeys {
                retry_after: self.key_window(),
            },
            other => RefusalKind::Unavailable {
                reason: other.to_string(),
            },
        }
    }
}

/// Until when permits taken at `at`, which left the limiter at `quota`, still count: until
/// it is whole again. A refund after that would give back permits that others' requests
/// use since (a window that has moved on, a log whose entry has left), so the limiter
/// could admit more than its limit; `None` for a limiter that reports no quota, which is
/// never refunded.
pub(crate) fn counts_until(quota: Option<Quota>, at: Instant) -> Option<Instant> {
    quota.map(|quota| later(at, quota.full_after))
}

/// `at + duration`; past what an `Instant` holds (`Duration::MAX` stands for "never"),
/// an instant no timer reaches: 30 years on, as tokio's own "far future".
pub(crate) fn later(at: Instant, duration: Duration) -> Instant {
    const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);
    at.checked_add(duration)
        .unwrap_or_else(|| at + FAR_FUTURE.min(duration))
}

/// A key's permits taken for a request that then waits in the global line: given back
/// when it is dropped, unless the wait was granted (`counted_until` then `None`), while
/// they still count (see [`counts_until`]).
struct GiveBack<'a, K: Hash + Eq, L: KeyTemplate> {
    keyed: &'a Keyed<K, L>,
    key: &'a K,
    cost: u64,
    counted_until: Option<Instant>,
}

impl<K: Hash + Eq, L: KeyTemplate> Drop for GiveBack<'_, K, L> {
    fn drop(&mut self) {
        if self
            .counted_until
            .is_some_and(|until| Instant::now() < until)
        {
            self.keyed.refund(self.key, self.cost);
        }
    }
}
