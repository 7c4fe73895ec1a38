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
use crate::error::{AcquireError, ConfigError, TryAcquireError};

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

/// The most classes a `Keyed`'s keys may be sorted into (see
/// [`KeyedBuilder::class`](crate::KeyedBuilder::class)): each is a series of every
/// decision metric, so they must stay few.
pub const MAX_KEY_CLASSES: usize = 64;

/// Sorts a key into one of a few declared classes, for the `class` label.
pub(crate) type Classify<K> = Box<dyn Fn(&K) -> &'static str + Send + Sync>;

/// Which of a named `Keyed`'s classes a key is in: an index into its declared classes,
/// or `0` when it has none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Class(usize);

/// The classes a `Keyed`'s keys are sorted into, as its builder was given them.
pub(crate) struct KeyClasses<K> {
    names: Box<[&'static str]>,
    classify: Classify<K>,
}

impl<K> KeyClasses<K> {
    /// The classes `names`, a key's found by `classify`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::BadKeyClasses`] for no class or more than [`MAX_KEY_CLASSES`];
    /// [`ConfigError::RepeatedKeyClass`] for a class declared twice.
    pub(crate) fn new(
        names: Vec<&'static str>,
        classify: Classify<K>,
    ) -> Result<KeyClasses<K>, ConfigError> {
        if names.is_empty() || names.len() > MAX_KEY_CLASSES {
            return Err(ConfigError::BadKeyClasses {
                classes: names.len(),
                max: MAX_KEY_CLASSES,
            });
        }
        for (at, class) in names.iter().enumerate() {
            if names[..at].contains(class) {
                return Err(ConfigError::RepeatedKeyClass { class });
            }
        }
        Ok(KeyClasses {
            names: names.into(),
            classify,
        })
    }

    /// The class of `key`: the one its function names, or, when it names a class that was
    /// not declared, [`OTHER_CLASS`] (declared or not), so that the label stays bounded.
    fn of(&self, key: &K) -> Class {
        let named = (self.classify)(key);
        let found = self.names.iter().position(|class| *class == named);
        let other = || self.names.iter().position(|class| *class == OTHER_CLASS);
        Class(found.or_else(other).unwrap_or(self.names.len()))
    }

    /// The label of each class, by index: the declared ones, then [`OTHER_CLASS`] unless
    /// it was declared.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    fn labels(&self) -> impl Iterator<Item = &'static str> + '_ {
        let other = (!self.names.contains(&OTHER_CLASS)).then_some(OTHER_CLASS);
        self.names.iter().copied().chain(other)
    }
}

/// The `class` label of the keys whose class function named a class that was not
/// declared (see [`KeyedBuilder::class`](crate::KeyedBuilder::class)).
pub const OTHER_CLASS: &str = "other";

/// What a [`Keyed`](crate::Keyed) reports through: nothing for an unnamed one.
pub(crate) struct KeyedObserver<K> {
    /// Its decisions, as any limiter's: admitted, refused, waited; or, when its keys are
    /// sorted into classes, none (each class reports its own). Its gauges are the keys
    /// held (see [`KeyedObserver::gauge`]).
    decisions: Observer,
    /// When its keys are sorted into classes: how, and each class's decisions, in the
    /// order of [`KeyClasses::labels`].
    classes: Option<(KeyClasses<K>, Box<[Observer]>)>,
    #[cfg(feature = "metrics")]
    keys: Option<KeyHandles>,
}

impl<K> Default for KeyedObserver<K> {
    fn default() -> Self {
        KeyedObserver {
            decisions: Observer::default(),
            classes: None,
            #[cfg(feature = "metrics")]
            keys: None,
        }
    }
}

/// A named `Keyed`'s key counters, registered when it is named.
#[cfg(feature = "metrics")]
struct KeyHandles {
    too_many_keys: ::metrics::Counter,
    forgotten: ::metrics::Counter,
}

impl<K> KeyedObserver<K> {
    /// An observer for a `Keyed` named `name`, its keys sorted into `classes` if given:
    /// its metrics are registered now, only those a `Keyed` sets. It has no timeouts, and
    /// no permits available or requests queued of its own (each key has its own), so
    /// those are not registered: an exporter shows no series that would stay at zero.
    pub(crate) fn named(name: &str, classes: Option<KeyClasses<K>>) -> KeyedObserver<K> {
        let name: Arc<str> = Arc::from(name);
        let observer = |class: Option<&'static str>, decisions: bool| {
            let _ = (class, decisions);
            Observer(Some(Arc::new(Named {
                #[cfg(feature = "metrics")]
                metrics: register(&name, class, decisions),
                name: Arc::clone(&name),
                kind: Kind::Keyed,
            })))
        };
        let classes = classes.map(|classes| {
            let observers = classes.labels().map(|class| observer(Some(class), true));
            let observers = observers.collect();
            (classes, observers)
        });
        KeyedObserver {
            decisions: observer(None, classes.is_none()),
            classes,
            #[cfg(feature = "metrics")]
            keys: Some(register_keys(&name)),
        }
    }

    /// The `Keyed`'s name, if it has one.
    pub(crate) fn name(&self) -> Option<&str> {
        self.decisions.name()
    }

    /// The class of `key`, when its decisions are reported by class: only then is the
    /// class function called.
    #[inline]
    pub(crate) fn class_of(&self, key: &K) -> Class {
        match &self.classes {
            Some((classes, _)) if self.decisions.is_named() => classes.of(key),
            _ => Class::default(),
        }
    }

    /// Whether its decisions are reported by class: a caller holding only a borrowed
    /// form of a key needs an owned one to tell its class.
    #[inline]
    pub(crate) fn has_classes(&self) -> bool {
        self.classes.is_some() && self.decisions.is_named()
    }

    /// What the decisions on keys of `class` report through.
    #[inline]
    pub(crate) fn decisions(&self, class: Class) -> &Observer {
        match &self.classes {
            Some((_, observers)) => &observers[class.0],
            None => &self.decisions,
        }
    }

    /// A new key of `class` wanting `permits` was refused: `max_keys` keys were held,
    /// none idle.
    #[cold]
    pub(crate) fn too_many_keys(&self, permits: u64, class: Class) {
        #[cfg(feature = "metrics")]
        if let Some(keys) = &self.keys {
            keys.too_many_keys.increment(1);
        }
        self.decisions(class).refused(permits, None);
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

    /// Reports an `acquire` of `permits` for a key of `class` that ended with `result`,
    /// after waiting `waited` (`None`: decided on its first poll).
    pub(crate) fn acquired(
        &self,
        permits: u64,
        class: Class,
        result: &Result<(), AcquireError>,
        waited: Option<Duration>,
    ) {
        let decisions = self.decisions(class);
        match (result, waited) {
            (Ok(()), None) => decisions.admitted(permits),
            (Ok(()), Some(waited)) => decisions.waited(permits, waited),
            (Err(AcquireError::TooManyKeys { .. }), _) => self.too_many_keys(permits, class),
            // Refused for good. Without a runtime it was never decided: nothing to count.
            (Err(AcquireError::NoRuntime), _) => {}
            (Err(_), _) => decisions.refused(permits, None),
        }
    }
}

/// Registers the decision metrics of a `Keyed` named `name`, of its keys of `class` (or
/// of all its keys): those of its `decisions` if asked, and its keys held as its second
/// gauge when `class` is `None` (see [`KeyedObserver::gauge`]).
#[cfg(feature = "metrics")]
fn register(name: &Arc<str>, class: Option<&'static str>, decisions: bool) -> super::Handles {
    let mut labels = vec![
        ::metrics::Label::new("limiter", name.to_string()),
        ::metrics::Label::new("kind", Kind::Keyed.label()),
    ];
    labels.extend(class.map(|class| ::metrics::Label::new("class", class)));
    let counter = |metric: &'static str| match decisions {
        true => ::metrics::counter!(metric, labels.iter()),
        false => ::metrics::Counter::noop(),
    };
    super::Handles {
        admitted: counter(super::ADMITTED_PERMITS),
        refused: counter(super::REFUSED_REQUESTS),
        waited: counter(super::WAITED_REQUESTS),
        timed_out: ::metrics::Counter::noop(),
        wait_seconds: match decisions {
            true => ::metrics::histogram!(super::WAIT_SECONDS, labels.iter()),
            false => ::metrics::Histogram::noop(),
        },
        available: ::metrics::Gauge::noop(),
        queued: match class {
            None => ::metrics::gauge!(KEYS, labels.iter()),
            Some(_) => ::metrics::Gauge::noop(),
        },
    }
}

/// Registers the key counters of a `Keyed` named `name`.
#[cfg(feature = "metrics")]
fn register_keys(name: &Arc<str>) -> KeyHandles {
    let labels = [
        ::metrics::Label::new("limiter", name.to_string()),
        ::metrics::Label::new("kind", Kind::Keyed.label()),
    ];
    KeyHandles {
        too_many_keys: ::metrics::counter!(TOO_MANY_KEYS, labels.iter()),
        forgotten: ::metrics::counter!(FORGOTTEN_KEYS, labels.iter()),
    }
}
