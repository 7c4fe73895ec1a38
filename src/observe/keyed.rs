//! What a named [`Keyed`](crate::Keyed) reports, beyond a limiter's decisions: keys
//! refused for want of room, keys forgotten, and keys held. Its keys' own limiters are
//! never named (keys are never labels), so the `Keyed` reports their decisions itself,
//! under its own name, with the `kind` label `keyed`.
//!
//! Also how the limiters that answer with a [`TryAcquireError`] (the window limiters and
//! `Keyed`) report a `try_acquire`.

use std::sync::Arc;
use std::time::Duration;

use super::{Kind, Named, Observer};
use crate::error::{AcquireError, TryAcquireError};

/// New keys refused with `TooManyKeys` by a named `Keyed`, because it held
/// `max_keys` keys and none was idle: a counter. Each is counted as refused too.
pub const TOO_MANY_KEYS: &str = "token_bucket_too_many_keys_total";
/// Idle keys a named `Keyed` forgot, at its sweeps: a counter.
pub const FORGOTTEN_KEYS: &str = "token_bucket_forgotten_keys_total";
/// Keys a named `Keyed` holds, as of the last [`record_gauges`](super::record_gauges): a
/// gauge.
pub const KEYS: &str = "token_bucket_keys";

impl Observer {
    /// Reports a `try_acquire` of `permits` that decided `result`: admitted, or refused
    /// (with its `retry_after` when limited). On the hot path: for an unnamed limiter,
    /// one test of its empty observer.
    #[inline]
    pub(crate) fn decided(&self, permits: u64, result: &Result<(), TryAcquireError>) {
        match result {
            Ok(()) => self.admitted(permits),
            Err(TryAcquireError::Limited { retry_after }) => {
                self.refused(permits, Some(*retry_after));
            }
            Err(_) => self.refused(permits, None),
        }
    }
}

/// What a [`Keyed`](crate::Keyed) reports through: nothing for an unnamed one.
#[derive(Default)]
pub(crate) struct KeyedObserver {
    /// Its decisions, as any limiter's: admitted, refused, waited. Its gauges are the
    /// keys held (see [`KeyedObserver::gauge`]).
    decisions: Observer,
    #[cfg(feature = "metrics")]
    keys: Option<KeyHandles>,
}

/// A named `Keyed`'s key counters, registered when it is named.
#[cfg(feature = "metrics")]
struct KeyHandles {
    too_many_keys: ::metrics::Counter,
    forgotten: ::metrics::Counter,
}

impl KeyedObserver {
    /// An observer for a `Keyed` named `name`: its metrics are registered now, only
    /// those a `Keyed` sets. It has no timeouts, and no permits available or requests
    /// queued of its own (each key has its own), so those are not registered: an exporter
    /// shows no series that would stay at zero.
    pub(crate) fn named(name: &str) -> KeyedObserver {
        let name: Arc<str> = Arc::from(name);
        #[cfg(feature = "metrics")]
        let (metrics, keys) = register(&name);
        KeyedObserver {
            decisions: Observer(Some(Arc::new(Named {
                name,
                kind: Kind::Keyed,
                #[cfg(feature = "metrics")]
                metrics,
            }))),
            #[cfg(feature = "metrics")]
            keys: Some(keys),
        }
    }

    /// The `Keyed`'s name, if it has one.
    pub(crate) fn name(&self) -> Option<&str> {
        self.decisions.name()
    }

    /// What its decisions report through.
    #[inline]
    pub(crate) fn decisions(&self) -> &Observer {
        &self.decisions
    }

    /// A new key wanting `permits` was refused: `max_keys` keys were held, none idle.
    #[cold]
    pub(crate) fn too_many_keys(&self, permits: u64) {
        #[cfg(feature = "metrics")]
        if let Some(keys) = &self.keys {
            keys.too_many_keys.increment(1);
        }
        self.decisions.refused(permits, None);
    }

    /// A sweep forgot `forgotten` idle keys.
    pub(crate) fn forgot(&self, forgotten: usize) {
        #[cfg(feature = "metrics")]
        if let Some(keys) = &self.keys {
            keys.forgotten.increment(forgotten as u64);
        }
        let _ = forgotten;
    }

    /// Reads the keys held with `keys` at every [`record_gauges`](super::record_gauges),
    /// as long as `keys` says the `Keyed` is alive. `record_gauges` sets a limiter's two
    /// gauges from what its `read` says: for a `Keyed`, no permits available (a handle
    /// that records nothing) and, in the place of requests queued, the keys held.
    #[cfg(feature = "metrics")]
    pub(crate) fn gauge(&self, keys: impl Fn() -> Option<usize> + Send + Sync + 'static) {
        self.decisions.gauge(move || Some((0, keys()?)));
    }

    /// Reports an `acquire` of `permits` that ended with `result`, after waiting
    /// `waited` (`None`: decided on its first poll).
    pub(crate) fn acquired(
        &self,
        permits: u64,
        result: &Result<(), AcquireError>,
        waited: Option<Duration>,
    ) {
        match (result, waited) {
            (Ok(()), None) => self.decisions.admitted(permits),
            (Ok(()), Some(waited)) => self.decisions.waited(permits, waited),
            (Err(AcquireError::TooManyKeys { .. }), _) => self.too_many_keys(permits),
            // Refused for good. Without a runtime it was never decided: nothing to count.
            (Err(AcquireError::NoRuntime), _) => {}
            (Err(_), _) => self.decisions.refused(permits, None),
        }
    }
}

/// Registers the metrics of a `Keyed` named `name`: its decisions' (its two gauges being
/// none and the keys held; see [`KeyedObserver::gauge`]), and its keys'.
#[cfg(feature = "metrics")]
fn register(name: &Arc<str>) -> (super::Handles, KeyHandles) {
    let labels = [
        ::metrics::Label::new("limiter", name.to_string()),
        ::metrics::Label::new("kind", Kind::Keyed.label()),
    ];
    let decisions = super::Handles {
        admitted: ::metrics::counter!(super::ADMITTED_PERMITS, labels.iter()),
        refused: ::metrics::counter!(super::REFUSED_REQUESTS, labels.iter()),
        waited: ::metrics::counter!(super::WAITED_REQUESTS, labels.iter()),
        timed_out: ::metrics::Counter::noop(),
        wait_seconds: ::metrics::histogram!(super::WAIT_SECONDS, labels.iter()),
        available: ::metrics::Gauge::noop(),
        queued: ::metrics::gauge!(KEYS, labels.iter()),
    };
    let keys = KeyHandles {
        too_many_keys: ::metrics::counter!(TOO_MANY_KEYS, labels.iter()),
        forgotten: ::metrics::counter!(FORGOTTEN_KEYS, labels.iter()),
    };
    (decisions, keys)
}
