//! A key never grants more than one limiter of its template would, whatever a caller
//! keeps: a handle from `get` or `get_or_insert`, a clone of the limiter inside one, or a
//! future made from either, kept or dropped, in any order. The key folds back into its
//! word, or is forgotten, only once nothing but its table refers to its limiter.

use super::*;
use std::future::Future;

use token_bucket::all;

/// A key of 10 an hour, used once, so that it is held (as its word).
fn hourly() -> Keyed<u8, TokenBucket> {
    let keyed = Keyed::new(bucket(Rate::per_hour(1), 10));
    keyed.try_acquire(&0, 0).unwrap();
    keyed
}

/// The wait for one token at one an hour.
const ONE_HOURS_TOKEN: Duration = Duration::from_secs(3_600);

/// Polls `future` once, in the test's runtime.
fn poll_once<F: Future + Unpin>(future: &mut F) -> std::task::Poll<F::Output> {
    let waker = futures::task::noop_waker();
    std::pin::Pin::new(future).poll(&mut std::task::Context::from_waker(&waker))
}

/// The reproduction from the issue: a `take(10)` future made from a `get` handle, the
/// handle dropped, then the key asked for 10. The key used to fold back into its word
/// while the future held the whole bucket, and both were granted: 20 tokens at one
/// instant from a key of 10.
#[tokio::test(start_paused = true)]
async fn a_future_made_from_a_dropped_handle_keeps_its_key_whole() {
    let keyed = hourly();
    let handle = keyed.get(&0).expect("held");
    let take = handle.take(10);
    drop(handle);
    assert_eq!(keyed.try_acquire(&0, 10), Ok(()));
    assert_eq!(
        keyed.keys_held_whole(),
        1,
        "the future still holds the bucket"
    );
    // The future asks the same bucket, now empty: 10 hours for its 10.
    let start = Instant::now();
    assert_eq!(take.await, Ok(()));
    assert_now(start, 10 * ONE_HOURS_TOKEN);
    // Nothing refers to the bucket any more: the next call folds the key back.
    assert_eq!(keyed.try_acquire(&0, 1), limited(ONE_HOURS_TOKEN));
    assert_eq!(keyed.keys_held_whole(), 0);
}

/// The same with the future first: it takes the 10, and the key has none left.
#[tokio::test(start_paused = true)]
async fn a_future_granted_first_leaves_its_key_empty() {
    let keyed = hourly();
    let mut take = keyed.get(&0).expect("held").take(10);
    assert!(poll_once(&mut take).is_ready());
    assert_eq!(keyed.try_acquire(&0, 10), limited(10 * ONE_HOURS_TOKEN));
    drop(take);
    assert_eq!(keyed.try_acquire(&0, 1), limited(ONE_HOURS_TOKEN));
}

/// A `TokenBucket` cloned out of a handle from `get` or `get_or_insert`, the handle
/// dropped: the clone and the key are one bucket, taken from in either order.
#[tokio::test(start_paused = true)]
async fn a_clone_of_the_limiter_inside_a_handle_is_the_keys_bucket() {
    for from_get in [true, false] {
        for clone_first in [true, false] {
            let keyed = hourly();
            let handle = match from_get {
                true => keyed.get(&0).expect("held"),
                false => keyed.get_or_insert(&0).expect("room"),
            };
            let clone = TokenBucket::clone(&handle);
            drop(handle);
            let case = format!("from get: {from_get}, clone first: {clone_first}");
            if clone_first {
                assert_eq!(clone.try_take(10), Ok(()), "{case}");
                assert_eq!(keyed.try_acquire(&0, 1), limited(ONE_HOURS_TOKEN), "{case}");
            } else {
                assert_eq!(keyed.try_acquire(&0, 10), Ok(()), "{case}");
                assert!(clone.try_take(1).is_err(), "{case}");
            }
            // Through the composite member and `acquire` too.
            let global = bucket(Rate::per_second(1_000), 1_000);
            let both = all((keyed.member(&0), &global)).unwrap();
            assert!(both.try_acquire(1).is_err(), "{case}");
            let start = Instant::now();
            assert_eq!(keyed.acquire(&0, 1).await, Ok(()), "{case}");
            assert_now(start, ONE_HOURS_TOKEN);
            assert_eq!(clone.available(), 0, "{case}: the clone's bucket gave it");
            drop((clone, both));
            keyed.try_acquire(&0, 0).unwrap();
            assert_eq!(
                keyed.keys_held_whole(),
                0,
                "{case}: folded once the clone went"
            );
        }
    }
}

/// A key whose bucket is full again is idle, but a clone of its bucket still takes from
/// it: neither a sweep nor `retain_recent` forgets it while the clone lives. Forgotten,
/// the key would come back fresh with 10 beside the clone's 10.
#[tokio::test(start_paused = true)]
async fn an_idle_key_is_not_forgotten_while_a_clone_of_its_limiter_lives() {
    let keyed = hourly();
    let clone = TokenBucket::clone(&keyed.get(&0).expect("held"));
    assert_eq!(keyed.retain_recent(), 0, "the clone holds the key");
    assert_eq!(keyed.len(), 1);
    assert_eq!(clone.try_take(10), Ok(()));
    assert_eq!(keyed.try_acquire(&0, 1), limited(ONE_HOURS_TOKEN));
    // Refilled and idle again, the clone dropped: now it may go.
    advance(10 * ONE_HOURS_TOKEN).await;
    drop(clone);
    assert_eq!(keyed.retain_recent(), 1);
    assert!(keyed.is_empty());
}

/// A future made from a clone, the clone dropped: the future alone keeps the key whole.
#[tokio::test(start_paused = true)]
async fn a_future_made_from_a_clone_keeps_its_key_whole() {
    let keyed = hourly();
    let clone = TokenBucket::clone(&keyed.get(&0).expect("held"));
    let take = clone.take(10);
    drop(clone);
    assert_eq!(keyed.retain_recent(), 0, "the future holds the key");
    assert_eq!(keyed.try_acquire(&0, 10), Ok(()));
    let start = Instant::now();
    assert_eq!(take.await, Ok(()));
    assert_now(start, 10 * ONE_HOURS_TOKEN);
}

/// Threads: one keeps taking through a clone of the key's bucket (made afresh from a
/// `get` handle each time the last is dropped), another through the key. Every token is
/// granted once: the grants and what is left never pass the capacity plus what accrued.
#[test]
fn a_clone_taking_while_its_key_is_asked_grants_no_token_twice() {
    race_against_the_key(|keyed, stop| {
        let mut granted = 0;
        while !stop.load(Ordering::Relaxed) {
            let clone = TokenBucket::clone(&keyed.get(&0).expect("held"));
            granted += (0..100).filter(|_| clone.try_take(1).is_ok()).count() as u64;
        }
        granted
    });
}

/// The window limiters too: a clone of a key's `FixedWindow` (which has a word) or
/// `SlidingLog` (which is always whole) keeps the key, so its count is not forgotten.
#[tokio::test(start_paused = true)]
async fn a_clone_of_a_window_keeps_its_key() {
    let window = token_bucket::FixedWindow::new(10, ONE_HOURS_TOKEN).unwrap();
    let keyed: Keyed<u8, _> = Keyed::new(window);
    keyed.try_acquire(&0, 0).unwrap();
    let clone = token_bucket::FixedWindow::clone(&keyed.get(&0).expect("held"));
    assert_eq!(keyed.retain_recent(), 0, "the clone holds the key");
    assert_eq!(clone.try_acquire(10), Ok(()));
    assert!(keyed.try_acquire(&0, 1).is_err(), "one window of 10");

    let log = token_bucket::SlidingLog::new(10, ONE_HOURS_TOKEN).unwrap();
    let keyed: Keyed<u8, _> = Keyed::new(log);
    keyed.try_acquire(&0, 0).unwrap();
    let clone = token_bucket::SlidingLog::clone(&keyed.get(&0).expect("held"));
    assert_eq!(keyed.retain_recent(), 0, "the clone holds the key");
    assert_eq!(clone.try_acquire(10), Ok(()));
    assert!(keyed.try_acquire(&0, 1).is_err(), "one log of 10");
    drop(clone);
    advance(ONE_HOURS_TOKEN).await;
    assert_eq!(
        keyed.retain_recent(),
        1,
        "idle and held by nobody: forgotten"
    );
}
