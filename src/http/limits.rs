//! What decides: the [`Limits`] a layer asks for each request, and [`Local`], the
//! in-process limits (a limiter per key through [`Keyed`], and an optional global one,
//! decided together, all or nothing).

use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::response::RefusalKind;
use crate::composite::{all, Member};
use crate::error::{AcquireAllError, AcquireError, TryAcquireError};
use crate::keyed::{Joint, JointRefusal, Keyed};
use crate::limiter::Limiter;
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

/// One decision: its outcome, and each limit's quota as the decision left it (the
/// per-key limit's, then the global one's; `None` for a limit that is not there or
/// does not report one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// How the request fared.
    pub outcome: Outcome,
    /// The per-key and global quotas, in that order.
    pub quotas: [Option<Quota>; 2],
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
        fn decide(&self, key: &K, cost: u64, wait: Option<Duration>) -> Decided;

        /// Settles a request charged `charged` permits that turned out to cost `actual`:
        /// gives back what it did not use, or takes the excess as far as the limits have
        /// it now.
        fn settle(&self, key: &K, charged: u64, actual: u64);

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
    L: Limiter + Member,
    G: Limiter + Member,
{
    /// The decision of a request that does not wait.
    fn try_decide(&self, key: &K, cost: u64) -> Verdict {
        let Some(global) = &self.global else {
            let decision = self.keyed.try_acquire_decision(key, cost);
            return Verdict {
                outcome: self.outcome(decision.result),
                quotas: [decision.quota, None],
            };
        };
        let Joint {
            result,
            key: key_quota,
            global: global_quota,
        } = self.keyed.try_acquire_with(key, cost, &**global);
        let outcome = match result {
            Ok(()) => Ok(()),
            Err(JointRefusal::Key(error) | JointRefusal::Global(error)) => self.outcome(Err(error)),
        };
        Verdict {
            outcome,
            quotas: [key_quota, global_quota],
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
    L: Limiter + Member,
    G: Limiter + Member,
{
    fn decide(&self, key: &K, cost: u64, wait: Option<Duration>) -> Decided {
        let verdict = self.try_decide(key, cost);
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

    fn settle(&self, key: &K, charged: u64, actual: u64) {
        if actual < charged {
            let unused = charged - actual;
            self.keyed.refund(key, unused);
            if let Some(global) = &self.global {
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
    L: Limiter + Member,
    G: Limiter + Member,
{
    /// Waits first in, first out for `cost` permits of `key` (and of the global limit)
    /// up to `wait`.
    async fn wait(self, key: K, cost: u64, wait: Duration) -> Verdict {
        // A turn that comes at `wait` exactly is within it; the timer's deadline is the
        // next tick after it, so that a grant due at `wait` lands first.
        let deadline = wait.saturating_add(Duration::from_nanos(1));
        let waited = tokio::time::timeout(deadline, self.acquire(&key, cost)).await;
        let outcome = match waited {
            Ok(Ok(())) => Ok(()),
            Ok(Err(outcome)) => outcome,
            // Waited as long as allowed behind others: the line is at least that long.
            Err(_elapsed) => Err(RefusalKind::Limited { retry_after: wait }),
        };
        Verdict {
            outcome,
            quotas: self.quotas(&key),
        }
    }

    async fn acquire(&self, key: &K, cost: u64) -> Result<(), Outcome> {
        let Some(global) = &self.global else {
            return (self.keyed.acquire(key, cost).await).map_err(|error| self.refusal(error));
        };
        let whole = (self.keyed.limiter(key)).map_err(|error| self.outcome(Err(error)))?;
        let both = all((whole, Arc::clone(global))).map_err(|error| {
            Err(RefusalKind::Unavailable {
                reason: error.to_string(),
            })
        })?;
        both.acquire(cost).await.map_err(|error| match error {
            AcquireAllError::Member {
                error: AcquireError::ExceedsLimit { requested, limit },
                ..
            } => Err(RefusalKind::NeverFits { requested, limit }),
            other => Err(RefusalKind::Unavailable {
                reason: other.to_string(),
            }),
        })
    }

    fn refusal(&self, error: AcquireError) -> Outcome {
        match error {
            AcquireError::ExceedsLimit { requested, limit } => {
                Err(RefusalKind::NeverFits { requested, limit })
            }
            AcquireError::TooManyKeys { .. } => Err(RefusalKind::TooManyKeys {
                retry_after: self.key_window(),
            }),
            other => Err(RefusalKind::Unavailable {
                reason: other.to_string(),
            }),
        }
    }
}
