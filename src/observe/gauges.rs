//! The gauges of named limiters, read only when [`record_gauges`] is called: a list of
//! the named limiters that have gauges, each with how to read them, dropped from the list
//! once its limiter is gone.

#[cfg(feature = "metrics")]
use std::sync::{Arc, Mutex, PoisonError};

#[cfg(feature = "metrics")]
use super::Named;

/// Reads a limiter's gauges: permits available and requests queued, or `None` once the
/// limiter is gone. It holds the limiter weakly, so the list keeps no limiter alive.
#[cfg(feature = "metrics")]
type Read = Box<dyn Fn() -> Option<(u64, usize)> + Send + Sync>;

/// Every named limiter with gauges, since the last [`record_gauges`] that found it alive.
#[cfg(feature = "metrics")]
static WATCHED: Mutex<Vec<(Arc<Named>, Read)>> = Mutex::new(Vec::new());

/// Adds `named`'s gauges, read with `read`, to those [`record_gauges`] sets.
#[cfg(feature = "metrics")]
pub(super) fn watch(
    named: Arc<Named>,
    read: impl Fn() -> Option<(u64, usize)> + Send + Sync + 'static,
) {
    watched().push((named, Box::new(read)));
}

#[cfg(feature = "metrics")]
fn watched() -> std::sync::MutexGuard<'static, Vec<(Arc<Named>, Read)>> {
    // Nothing panics while holding it: a poisoned list is still whole.
    WATCHED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Sets the gauges of every named limiter alive (permits available, requests queued)
/// to what they are now, and forgets the limiters dropped since the last call. Call it
/// where the metrics are scraped (in the handler that renders them, say), so that the
/// gauges cost nothing per decision. It takes each limiter's lock briefly, one at a time.
/// Without the feature `metrics` it does nothing.
///
/// A limiter named and dropped between two calls is kept in the list until the next
/// call: call it now and then, even if nothing scrapes.
///
/// ```
/// token_bucket::observe::record_gauges();
/// ```
pub fn record_gauges() {
    #[cfg(feature = "metrics")]
    watched().retain(|(named, read)| match read() {
        Some((available, queued)) => {
            // Gauges are `f64`s: exact up to 2^53 permits.
            named.metrics.available.set(available as f64);
            named.metrics.queued.set(queued as f64);
            true
        }
        None => false,
    });
}
