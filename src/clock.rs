//! Time as the bucket counts it: whole nanoseconds since the bucket was made, read from
//! tokio's clock so that paused time (`tokio::time::pause`) drives the bucket.

use std::sync::OnceLock;
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::time::Instant;

/// A nanosecond count that is never reached: "no deadline", "no token ever".
/// `u64` nanoseconds last 584 years, so saturating at this value loses nothing real.
pub(crate) const NEVER: u64 = u64::MAX;

/// The bucket's time origin. Cloned, it keeps the origin: a window limiter's `fresh`
/// copy keeps its window boundaries. Equal clocks share their origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Clock {
    origin: Instant,
}

impl Clock {
    pub(crate) fn start() -> Clock {
        Clock {
            origin: Instant::now(),
        }
    }

    /// Nanoseconds since the origin, now. Works without a runtime (it then reads the
    /// system's monotonic clock), so `try_take` can be called from any thread.
    #[cfg(not(loom))]
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        nanos(Instant::now().saturating_duration_since(self.origin))
    }

    /// Under loom, time stands still at what the test set: loom explores interleavings,
    /// and every run of one must see the same instants.
    #[cfg(loom)]
    pub(crate) fn now(&self) -> u64 {
        model_time::now()
    }

    /// `moment` in nanoseconds since the origin: each limiter of a composite has its own
    /// origin, and one moment read once stands for the same instant on every one.
    #[cfg(not(loom))]
    pub(crate) fn at(&self, moment: Moment) -> u64 {
        nanos(moment.0.saturating_duration_since(self.origin))
    }

    /// Under loom every clock reads the model's time.
    #[cfg(loom)]
    pub(crate) fn at(&self, moment: Moment) -> u64 {
        moment.0
    }

    /// The instant `at` nanoseconds after the origin, or `None` for [`NEVER`] and
    /// instants past what tokio can represent.
    pub(crate) fn instant(&self, at: u64) -> Option<Instant> {
        if at == NEVER {
            return None;
        }
        self.origin.checked_add(Duration::from_nanos(at))
    }

    /// A tokio sleep until `at` nanoseconds after the origin; for ever (until dropped)
    /// for [`NEVER`] and instants past what tokio can represent. Panics in a runtime
    /// without a timer, as [`require_timer`] does.
    #[track_caller]
    pub(crate) fn sleep_until(&self, at: u64) -> tokio::time::Sleep {
        match self.instant(at) {
            Some(instant) => tokio::time::sleep_until(instant),
            // tokio takes a sleep this long to mean "never wake".
            None => tokio::time::sleep(Duration::MAX),
        }
    }

    /// The deadline `timeout` from now; `NEVER` for `Duration::MAX` or anything that
    /// would pass it.
    pub(crate) fn deadline(&self, timeout: Duration) -> u64 {
        self.now().saturating_add(nanos(timeout))
    }
}

/// One reading of tokio's clock, for decisions that span limiters with different
/// origins (see [`Clock::at`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Moment(#[cfg(not(loom))] Instant, #[cfg(loom)] u64);

impl Moment {
    #[cfg(not(loom))]
    pub(crate) fn now() -> Moment {
        Moment(Instant::now())
    }

    #[cfg(loom)]
    pub(crate) fn now() -> Moment {
        Moment(model_time::now())
    }

    /// The moment `instant` stands for.
    #[cfg(not(loom))]
    pub(crate) fn of(instant: Instant) -> Moment {
        Moment(instant)
    }

    /// Under loom, whose time stands still, every instant is now.
    #[cfg(loom)]
    pub(crate) fn of(_instant: Instant) -> Moment {
        Moment::now()
    }
}

/// A duration in whole nanoseconds, saturating at [`NEVER`]. In `u64` arithmetic rather
/// than through `Duration::as_nanos`'s `u128`: every fast-path call reads the clock.
#[inline]
pub(crate) fn nanos(duration: Duration) -> u64 {
    const NANOS_PER_SECOND: u64 = 1_000_000_000;
    duration
        .as_secs()
        .checked_mul(NANOS_PER_SECOND)
        .and_then(|nanos| nanos.checked_add(u64::from(duration.subsec_nanos())))
        .unwrap_or(NEVER)
}

/// `nanos` as a `Duration`, or `Duration::MAX` past what one holds: never shorter than
/// true, so a `retry_after` made from it is never too short.
pub(crate) fn duration_from_nanos(nanos: u128) -> Duration {
    const NANOS_PER_SECOND: u128 = 1_000_000_000;
    match u64::try_from(nanos / NANOS_PER_SECOND) {
        // The remainder is below 10^9, so it fits in a u32.
        Ok(seconds) => Duration::new(seconds, (nanos % NANOS_PER_SECOND) as u32),
        Err(_) => Duration::MAX,
    }
}

/// The panic message of a waiter polled in a tokio runtime without a timer: tokio's own,
/// which names the fix. Documented under `# Panics` on every method whose future waits.
#[cfg(test)]
pub(crate) const NO_TIMER_PANIC: &str =
    "A Tokio 1.x context was found, but timers are disabled. Call `enable_time` on the runtime builder to enable timers.";

/// Panics if called inside a tokio runtime built without its timer (no `enable_time`);
/// does nothing in a runtime with one, or outside any runtime (where waiting is refused
/// with a `NoRuntime` error instead).
///
/// Every waiter calls it on its first poll, once it knows it must wait and before it
/// queues, so a missing timer is reported there, in the waiter's own task. Otherwise a
/// bucket's refill task would panic on its first sleep, be restarted by its waiter and
/// panic again, for ever, and a window limiter's waiter would panic only once it reached
/// the head of its line.
#[track_caller]
pub(crate) fn require_timer() {
    if Handle::try_current().is_ok() {
        require_timer_in_runtime();
    }
}

/// [`require_timer`] for a caller that knows it runs inside a tokio runtime.
#[track_caller]
pub(crate) fn require_timer_in_runtime() {
    // tokio offers no way to ask whether a runtime has a timer: making one asks, and
    // tokio answers "no" with a panic that says to call `enable_time`. The sleep is never
    // polled, so any instant will do: one made once, as reading the clock for it cost
    // half of what asking does.
    static ANY: OnceLock<Instant> = OnceLock::new();
    drop(tokio::time::sleep_until(*ANY.get_or_init(Instant::now)));
}

/// The time loom tests run at: a loom atomic, so that loom explores where a change of
/// time falls among the other threads' steps. Each model run installs its own; it is
/// kept per OS thread, so that tests running side by side keep theirs (loom runs all of a
/// model's threads on the test's thread).
#[cfg(loom)]
pub(crate) mod model_time {
    use std::cell::RefCell;

    use loom::sync::atomic::{AtomicU64, Ordering};
    use loom::sync::Arc;

    std::thread_local! {
        static NOW: RefCell<Option<Arc<AtomicU64>>> = const { RefCell::new(None) };
    }

    #[cfg(test)]
    /// Starts a model run's clock at 0.
    pub(crate) fn install() {
        NOW.with(|now| *now.borrow_mut() = Some(Arc::new(AtomicU64::new(0))));
    }

    #[cfg(test)]
    /// Ends a model run's clock: loom checks that nothing of a run outlives it.
    pub(crate) fn uninstall() {
        NOW.with(|now| now.borrow_mut().take());
    }

    #[cfg(test)]
    pub(crate) fn set(nanos: u64) {
        NOW.with(|now| clock(&now.borrow()).store(nanos, Ordering::SeqCst));
    }

    pub(crate) fn now() -> u64 {
        NOW.with(|now| clock(&now.borrow()).load(Ordering::SeqCst))
    }

    fn clock(installed: &Option<Arc<AtomicU64>>) -> &AtomicU64 {
        installed
            .as_ref()
            .expect("loom tests run their model through loom_tests::model")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_past_what_a_duration_holds_saturate_upwards() {
        assert_eq!(
            duration_from_nanos(1_500_000_001),
            Duration::new(1, 500_000_001)
        );
        assert_eq!(
            duration_from_nanos(u128::from(u64::MAX) * 1_000_000_000 + 999_999_999),
            Duration::MAX
        );
        assert_eq!(
            duration_from_nanos(u128::from(u64::MAX) * 1_000_000_000 + 1_000_000_000),
            Duration::MAX
        );
        assert_eq!(duration_from_nanos(u128::MAX), Duration::MAX);
        assert_eq!(duration_from_nanos(0), Duration::ZERO);
    }

    #[test]
    fn nanos_are_exact_up_to_u64_and_saturate_past_it() {
        assert_eq!(nanos(Duration::new(3, 7)), 3_000_000_007);
        // u64::MAX nanoseconds is 18,446,744,073.709551615 s.
        let most = Duration::new(18_446_744_073, 709_551_615);
        assert_eq!(nanos(most), u64::MAX);
        assert_eq!(u128::from(nanos(most)), most.as_nanos());
        assert_eq!(nanos(most + Duration::from_nanos(1)), NEVER);
        assert_eq!(nanos(Duration::new(18_446_744_074, 0)), NEVER);
        assert_eq!(nanos(Duration::MAX), NEVER);
    }

    /// The text a panic was raised with.
    pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
        panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("(not text)")
    }

    #[test]
    fn require_timer_panics_only_in_a_runtime_without_a_timer() {
        require_timer(); // no runtime: nothing to check
        let timed = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        timed.block_on(async { require_timer() });
        let untimed = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let panic = std::panic::catch_unwind(|| untimed.block_on(async { require_timer() }))
            .expect_err("a runtime without a timer");
        assert_eq!(panic_message(&*panic), NO_TIMER_PANIC);
    }
}
