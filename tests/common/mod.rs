//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod admissions;
pub mod limiters;
pub mod lockstep;
pub mod model;
pub mod observe;

use std::time::Duration;
use tokio::time::Instant;

/// tokio's timer fires on whole milliseconds: an event due at T is seen in [T, T + 1 ms].
pub const TIMER_GRANULARITY: Duration = Duration::from_millis(1);

/// Asserts that `event` happened at `due` after `start`, never before and at most the
/// timer's granularity after.
#[track_caller]
pub fn assert_at(start: Instant, event: Instant, due: Duration) {
    let elapsed = event.duration_since(start);
    assert!(
        elapsed >= due && elapsed <= due + TIMER_GRANULARITY,
        "expected at {due:?} (+1 ms at most), happened at {elapsed:?}"
    );
}

/// Asserts that now is `due` after `start` (see [`assert_at`]).
#[track_caller]
pub fn assert_now(start: Instant, due: Duration) {
    assert_at(start, Instant::now(), due);
}

pub fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

pub fn secs(seconds: u64) -> Duration {
    Duration::from_secs(seconds)
}

pub fn ns(nanos: u64) -> Duration {
    Duration::from_nanos(nanos)
}

/// Yields until `done` holds, so that spawned tasks get to run (and queue); fails rather
/// than hanging if it never does.
pub async fn yield_until(mut done: impl FnMut() -> bool) {
    for _ in 0..100_000 {
        if done() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("condition never held");
}

/// A bucket holding `initial` tokens.
pub fn bucket_with(
    rate: token_bucket::Rate,
    capacity: u64,
    initial: u64,
) -> token_bucket::TokenBucket {
    token_bucket::TokenBucket::builder()
        .rate(rate)
        .capacity(capacity)
        .initial(initial)
        .build()
        .unwrap()
}

/// A bucket that starts empty.
pub fn empty_bucket(rate: token_bucket::Rate, capacity: u64) -> token_bucket::TokenBucket {
    bucket_with(rate, capacity, 0)
}

/// The `retry_after` of a `try_acquire` refused as `Limited`; fails on anything else.
#[track_caller]
pub fn retry_after(result: Result<(), token_bucket::TryAcquireError>) -> Duration {
    match result {
        Err(token_bucket::TryAcquireError::Limited { retry_after }) => retry_after,
        other => panic!("expected Limited, got {other:?}"),
    }
}

/// Spawns `limiter.acquire(permits)`; the task returns its result and when it finished.
pub fn spawn_acquire<L: token_bucket::Limiter + Clone>(
    limiter: &L,
    permits: u64,
) -> tokio::task::JoinHandle<(Result<(), token_bucket::AcquireError>, Instant)> {
    let limiter = limiter.clone();
    tokio::spawn(async move {
        let result = limiter.acquire(permits).await;
        (result, Instant::now())
    })
}

/// Where a waiter polled in a runtime without a timer panics: tokio's message, which the
/// crate documents under `# Panics`.
pub const NO_TIMER_PANIC: &str = "timers are disabled. Call `enable_time`";

/// A current-thread runtime built without `enable_time`.
pub fn runtime_without_a_timer() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

/// Runs `poll` (one poll of a future, in a runtime) and returns its panic's message;
/// fails if it did not panic.
#[track_caller]
pub fn panic_message_of<T: std::fmt::Debug>(poll: impl FnOnce() -> T) -> String {
    let panic = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(poll)) {
        Ok(value) => panic!("expected a panic, got {value:?}"),
        Err(panic) => panic,
    };
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|text| text.to_string()))
        .unwrap_or_default()
}

/// Polls `future` once inside `runtime`.
pub fn poll_once_in<F: std::future::Future>(
    runtime: &tokio::runtime::Runtime,
    future: F,
) -> std::task::Poll<F::Output> {
    runtime.block_on(async { futures::poll!(std::pin::pin!(future)) })
}

/// The proptest settings of the model-based tests: `PROPTEST_CASES` cases if set, else
/// `default_cases`; a failing case is kept in `<source_file's stem>.proptest-regressions`
/// beside the test and tried first on every later run.
pub fn model_config(
    default_cases: u32,
    source_file: &'static str,
) -> proptest::test_runner::Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(default_cases);
    proptest::test_runner::Config {
        cases,
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        source_file: Some(source_file),
        ..proptest::test_runner::Config::default()
    }
}
