//! `Keyed`: one limiter per key, each with a budget of its own; idle keys forgotten (by
//! `retain_recent`, by automatic sweeps, and to make room under `max_keys`) so that memory
//! returns, never while anybody holds the key's limiter, and invisibly.
//!
//! Tests that involve time run on tokio's paused clock and assert exact instants,
//! allowing tokio's 1 ms timer granularity where a sleep is involved.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

mod common;
// A key held by a handle, a clone or a future: tests/keyed/held.rs.
#[path = "keyed/held.rs"]
mod held;

use common::{assert_now, ms, secs, yield_until};
use token_bucket::{
    AcquireError, ConfigError, KeyTemplate, Keyed, Limiter, Rate, TokenBucket, TryAcquireError,
};
use tokio::time::{advance, Instant};

fn bucket(rate: Rate, capacity: u64) -> TokenBucket {
    TokenBucket::new(rate, capacity).unwrap()
}

fn limited(retry_after: Duration) -> Result<(), TryAcquireError> {
    Err(TryAcquireError::Limited { retry_after })
}

fn nanos(nanos: u64) -> Duration {
    Duration::from_nanos(nanos)
}

// ---------------------------------------------------------------------------------------
// Budgets
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn separate_keys_have_separate_budgets() {
    let keyed: Keyed<String, TokenBucket> = Keyed::new(bucket(Rate::per_second(2), 2));
    assert_eq!(keyed.try_acquire("alice", 2), Ok(()));
    assert_eq!(keyed.try_acquire("alice", 1), limited(ms(500)));
    // Bob's budget is untouched by Alice's, and his use leaves hers as it was.
    assert_eq!(keyed.try_acquire("bob", 2), Ok(()));
    assert_eq!(keyed.try_acquire("bob", 1), limited(ms(500)));
    assert_eq!(keyed.try_acquire("carol", 1), Ok(()));
    assert_eq!(keyed.len(), 3);
    // A `&String` finds the key a `&str` made.
    assert_eq!(keyed.get(&"alice".to_string()).unwrap().available(), 0);
    assert_eq!(keyed.get("carol").unwrap().available(), 1);
    assert!(keyed.get("dave").is_none(), "get makes no limiter");
    assert_eq!(keyed.len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_keys_limit_holds_to_the_nanosecond() {
    let keyed: Keyed<u64, TokenBucket> = Keyed::new(bucket(Rate::per_second(4), 4));
    let start = Instant::now();
    assert_eq!(keyed.try_acquire(&1, 4), Ok(()));
    assert_eq!(keyed.try_acquire(&1, 1), limited(ms(250)));
    assert_eq!(keyed.try_acquire(&1, 3), limited(ms(750)));
    advance(ms(250) - nanos(1)).await;
    assert_eq!(keyed.try_acquire(&1, 1), limited(nanos(1)));
    advance(nanos(1)).await;
    assert_eq!(keyed.try_acquire(&1, 1), Ok(()));
    assert_eq!(keyed.try_acquire(&1, 1), limited(ms(250)));
    // Waiting: the next permit comes exactly 250 ms later, the one after 250 ms after that.
    keyed.acquire(&1, 1).await.unwrap();
    assert_now(start, ms(500));
    keyed.acquire(&1, 2).await.unwrap();
    assert_now(start, secs(1));
    // Requests the key's limiter could never admit are refused at once, as it refuses them.
    assert_eq!(
        keyed.try_acquire(&1, 5),
        Err(TryAcquireError::ExceedsLimit {
            requested: 5,
            limit: 4
        })
    );
    assert_eq!(
        keyed.acquire(&2, 5).await,
        Err(AcquireError::ExceedsLimit {
            requested: 5,
            limit: 4
        })
    );
    assert_now(start, secs(1));
}

#[tokio::test(start_paused = true)]
async fn a_waiting_key_holds_up_no_other_key() {
    let keyed: Keyed<&str, TokenBucket> = Keyed::new(bucket(Rate::per_second(1), 1));
    let start = Instant::now();
    keyed.try_acquire(&"slow", 1).unwrap();
    // The future borrows neither the Keyed nor the key: it can be spawned.
    let waiter = tokio::spawn(keyed.acquire(&"slow", 1));
    yield_until(|| keyed.get(&"slow").unwrap().queued() == 1).await;
    keyed.acquire(&"fast", 1).await.unwrap();
    assert_now(start, Duration::ZERO);
    waiter.await.unwrap().unwrap();
    assert_now(start, secs(1));
}

#[tokio::test(start_paused = true)]
async fn clones_share_their_keys() {
    let keyed: Keyed<u8, TokenBucket> = Keyed::new(bucket(Rate::per_second(1), 1));
    let handle = keyed.clone();
    handle.try_acquire(&9, 1).unwrap();
    assert_eq!(keyed.try_acquire(&9, 1), limited(secs(1)));
    assert_eq!(keyed.len(), 1);
    let debug = format!("{keyed:?}");
    assert!(debug.contains("keys: 1"), "{debug}");
    assert!(debug.contains("max_keys: None"), "{debug}");
}

// ---------------------------------------------------------------------------------------
// Eviction: memory returns
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn retain_recent_forgets_only_idle_keys_and_frees_their_limiters() {
    // Two permits a second, two at most: one permit refills in 500 ms, two in 1 s.
    let keyed: Keyed<u32, TokenBucket> = Keyed::new(bucket(Rate::per_second(2), 2));
    for key in 0..10 {
        keyed
            .try_acquire(&key, if key < 5 { 1 } else { 2 })
            .unwrap();
    }
    // Held whole for a moment; the table's handle is then the only one.
    drop(keyed.get(&0).unwrap());
    assert_eq!(keyed.keys_held_whole(), 1);
    assert_eq!(keyed.retain_recent(), 0, "every bucket is refilling");
    assert_eq!(
        keyed.keys_held_whole(),
        0,
        "folded back into its word, its limiter freed"
    );
    advance(ms(500) - nanos(1)).await;
    assert_eq!(keyed.retain_recent(), 0, "one nanosecond short of full");
    advance(nanos(1)).await;
    assert_eq!(keyed.retain_recent(), 5, "keys 0..5 are full again");
    assert_eq!(keyed.len(), 5);
    assert!(keyed.get(&0).is_none());
    assert!(keyed.get(&5).is_some());
    advance(ms(500)).await;
    assert_eq!(keyed.retain_recent(), 5);
    assert!(keyed.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_shard_is_swept_when_it_would_pass_twice_what_it_kept() {
    // One shard, so every key lands in it. It is first swept when a new key finds 64 there.
    let keyed: Keyed<u32, TokenBucket> = Keyed::builder(bucket(Rate::per_second(1), 1))
        .shards(1)
        .build()
        .unwrap();
    for key in 0..64 {
        keyed.try_acquire(&key, 1).unwrap();
    }
    // The 65th key sweeps: nothing is idle, so all 64 stay and the next sweep is at 128.
    keyed.try_acquire(&64, 1).unwrap();
    assert_eq!(keyed.len(), 65);
    advance(secs(1)).await; // keys 0..=64 are idle from now on
    for key in 65..128 {
        keyed.try_acquire(&key, 1).unwrap();
    }
    assert_eq!(keyed.len(), 128, "no sweep below the threshold");
    drop(keyed.get(&0).unwrap());
    assert_eq!(keyed.keys_held_whole(), 1);
    // The 129th key sweeps: the 65 idle keys go, the 63 busy ones stay.
    keyed.try_acquire(&128, 1).unwrap();
    assert_eq!(keyed.len(), 64);
    assert_eq!(
        keyed.keys_held_whole(),
        0,
        "the forgotten key's limiter is freed"
    );
    assert!(keyed.get(&0).is_none());
    assert!(keyed.get(&65).is_some());
}

#[tokio::test(start_paused = true)]
async fn a_flood_of_unique_keys_is_refused_cleanly_and_admitted_again_once_keys_idle() {
    const MAX_KEYS: usize = 1_000;
    let keyed: Keyed<u64, TokenBucket> = Keyed::builder(bucket(Rate::per_second(1), 1))
        .max_keys(MAX_KEYS)
        .build()
        .unwrap();
    let too_many = Err(TryAcquireError::TooManyKeys { max_keys: MAX_KEYS });
    let mut admitted = 0;
    for key in 0..100_000 {
        match keyed.try_acquire(&key, 1) {
            Ok(()) => admitted += 1,
            refused => assert_eq!(refused, too_many, "key {key}"),
        }
    }
    assert_eq!(admitted, MAX_KEYS);
    assert_eq!(keyed.len(), MAX_KEYS);
    // The keys held are still served as usual.
    assert_eq!(keyed.try_acquire(&0, 1), limited(secs(1)));
    assert_eq!(
        keyed.acquire(&100_000, 1).await,
        Err(AcquireError::TooManyKeys { max_keys: MAX_KEYS })
    );

    // One nanosecond before the held keys are idle, there is still no room.
    advance(secs(1) - nanos(1)).await;
    assert_eq!(keyed.try_acquire(&100_001, 1), too_many);
    // Once they are, a new key makes room by forgetting them all, and is admitted.
    advance(nanos(1)).await;
    assert_eq!(keyed.try_acquire(&100_002, 1), Ok(()));
    assert_eq!(keyed.len(), 1, "the idle keys' memory is returned");
    for key in 200_000..200_000 + MAX_KEYS as u64 - 1 {
        keyed.try_acquire(&key, 1).unwrap();
    }
    assert_eq!(keyed.try_acquire(&300_000, 1), too_many);
    assert_eq!(keyed.len(), MAX_KEYS);
}

/// A bucket that counts the calls to `is_idle`, to show what sweeping costs. It is also
/// a limiter of the caller's own making: `Keyed` takes any `Limiter`.
struct CountingIdleChecks {
    bucket: TokenBucket,
    idle_checks: Arc<AtomicU64>,
}

impl CountingIdleChecks {
    fn new(bucket: TokenBucket) -> (CountingIdleChecks, Arc<AtomicU64>) {
        let idle_checks = Arc::new(AtomicU64::new(0));
        let limiter = CountingIdleChecks {
            bucket,
            idle_checks: Arc::clone(&idle_checks),
        };
        (limiter, idle_checks)
    }
}

impl Limiter for CountingIdleChecks {
    fn try_acquire(&self, permits: u64) -> Result<(), TryAcquireError> {
        self.bucket.try_acquire(permits)
    }

    fn acquire(
        &self,
        permits: u64,
    ) -> impl std::future::Future<Output = Result<(), AcquireError>> + Send + '_ {
        self.bucket.acquire(permits)
    }

    fn is_limited(&self) -> bool {
        self.bucket.is_limited()
    }

    fn refund(&self, permits: u64) {
        Limiter::refund(&self.bucket, permits);
    }

    fn available(&self) -> u64 {
        Limiter::available(&self.bucket)
    }
}

impl KeyTemplate for CountingIdleChecks {
    fn is_idle(&self) -> bool {
        self.idle_checks.fetch_add(1, Ordering::Relaxed);
        self.bucket.is_idle()
    }

    fn fresh(&self) -> CountingIdleChecks {
        CountingIdleChecks {
            bucket: self.bucket.fresh(),
            idle_checks: Arc::clone(&self.idle_checks),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn automatic_sweeps_cost_a_constant_per_key_added() {
    const KEYS: u64 = 10_000;
    let (template, idle_checks) = CountingIdleChecks::new(bucket(Rate::per_second(1), 1));
    let keyed: Keyed<u64, _> = Keyed::builder(template).shards(1).build().unwrap();
    // Every key stays busy, so no sweep forgets anything: the worst case for sweeping.
    for key in 0..KEYS {
        keyed.try_acquire(&key, 1).unwrap();
    }
    assert_eq!(keyed.len(), KEYS as usize);
    // Sweeps at 64, 128, 256, ... keys: fewer than two looks per key added.
    let checks = idle_checks.load(Ordering::Relaxed);
    assert!(checks > 0 && checks < 2 * KEYS, "{checks} idle checks");
}

#[tokio::test(start_paused = true)]
async fn refusing_a_flood_costs_no_sweeps_until_the_clock_moves() {
    const MAX_KEYS: usize = 1_000;
    let (template, idle_checks) = CountingIdleChecks::new(bucket(Rate::per_second(1), 1));
    // One shard, which its own sweeps leave at 1,000 keys with the next at 1,024.
    let keyed: Keyed<u64, _> = Keyed::builder(template)
        .max_keys(MAX_KEYS)
        .shards(1)
        .build()
        .unwrap();
    for key in 0..MAX_KEYS as u64 {
        keyed.try_acquire(&key, 1).unwrap();
    }
    let too_many = Err(TryAcquireError::TooManyKeys { max_keys: MAX_KEYS });
    // The first refusal sweeps every key for room, and finds none.
    let before = idle_checks.load(Ordering::Relaxed);
    assert_eq!(keyed.try_acquire(&u64::MAX, 1), too_many);
    let after_first = idle_checks.load(Ordering::Relaxed);
    assert_eq!(after_first - before, MAX_KEYS as u64);
    // The clock has not moved, so no key can have gone idle: the next refusals sweep
    // nothing, whatever their number.
    for key in MAX_KEYS as u64..100_000 {
        assert_eq!(keyed.try_acquire(&key, 1), too_many);
    }
    assert_eq!(idle_checks.load(Ordering::Relaxed), after_first);
    // Once it moves, the next new key sweeps again.
    advance(nanos(1)).await;
    assert_eq!(keyed.try_acquire(&u64::MAX, 1), too_many);
    assert_eq!(
        idle_checks.load(Ordering::Relaxed) - after_first,
        MAX_KEYS as u64
    );
}

// ---------------------------------------------------------------------------------------
// A key in use is never forgotten, so never admitted twice
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_key_with_a_pending_acquire_is_never_forgotten_nor_admitted_twice() {
    let keyed: Keyed<&str, TokenBucket> = Keyed::builder(bucket(Rate::per_second(1), 1))
        .shards(1)
        .build()
        .unwrap();
    let start = Instant::now();
    keyed.try_acquire(&"k", 1).unwrap();
    let waiter = tokio::spawn(keyed.acquire(&"k", 1));
    yield_until(|| keyed.get(&"k").unwrap().queued() == 1).await;
    // At 1 s the bucket refills; the waiter takes that permit.
    advance(secs(1)).await;
    assert_eq!(keyed.retain_recent(), 0);
    waiter.await.unwrap().unwrap();
    assert_now(start, secs(1));
    // Had the key been forgotten, a fresh bucket would admit this at once.
    assert_eq!(keyed.try_acquire(&"k", 1), limited(secs(1)));
}

#[tokio::test(start_paused = true)]
async fn an_acquire_not_yet_polled_holds_nothing_and_is_decided_when_polled() {
    let keyed: Keyed<&str, TokenBucket> = Keyed::new(bucket(Rate::per_second(1), 1));
    let start = Instant::now();
    // Made, not polled: it has asked for nothing yet, so it adds and holds no key.
    let acquire = keyed.acquire(&"k", 1);
    assert!(keyed.get(&"k").is_none());
    assert!(keyed.is_empty());
    keyed.try_acquire(&"k", 1).unwrap();
    // Decided against the bucket as its first poll finds it: it waits for the next
    // permit instead of taking the one already taken.
    acquire.await.unwrap();
    assert_now(start, secs(1));
    assert_eq!(keyed.try_acquire(&"k", 1), limited(secs(1)));
    // Once the future is gone and the bucket full, the key may go.
    advance(secs(1)).await;
    assert_eq!(keyed.retain_recent(), 1);
}

#[tokio::test(start_paused = true)]
async fn held_keys_are_not_forgotten_to_make_room() {
    let keyed: Keyed<&str, TokenBucket> = Keyed::builder(bucket(Rate::per_second(1), 1))
        .max_keys(1)
        .build()
        .unwrap();
    let too_many = Err(TryAcquireError::TooManyKeys { max_keys: 1 });
    // An acquire not yet polled holds no key: "b" finds room, and "a", polled once "b"
    // is busy, finds none.
    let acquire = keyed.acquire(&"a", 1);
    assert_eq!(keyed.try_acquire(&"b", 1), Ok(()));
    assert_eq!(
        acquire.await,
        Err(AcquireError::TooManyKeys { max_keys: 1 })
    );
    // Held through `get`: idle, but not forgotten to make room.
    advance(secs(1)).await;
    let held = keyed.get(&"b").unwrap();
    assert!(held.is_idle());
    assert_eq!(keyed.try_acquire(&"a", 1), too_many);
    drop(held);
    advance(nanos(1)).await;
    assert_eq!(keyed.try_acquire(&"a", 1), Ok(()));
    assert!(keyed.get(&"b").is_none());
}

#[tokio::test(start_paused = true)]
async fn a_dropped_acquire_lets_its_key_go() {
    let keyed: Keyed<&str, TokenBucket> = Keyed::new(bucket(Rate::per_second(1), 1));
    keyed.try_acquire(&"k", 1).unwrap();
    let mut waiter = tokio_test::task::spawn(keyed.acquire(&"k", 1));
    tokio_test::assert_pending!(waiter.poll());
    drop(waiter);
    advance(secs(1)).await;
    // The dropped waiter took nothing: the bucket is full, and the key is forgotten.
    assert_eq!(keyed.get(&"k").unwrap().available(), 1);
    assert_eq!(keyed.retain_recent(), 1);
}

// ---------------------------------------------------------------------------------------
// Forgetting is invisible
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_key_forgotten_when_idle_behaves_as_if_it_never_was() {
    let template = bucket(Rate::new(3, ms(1000)), 3);
    let forgetting: Keyed<&str, TokenBucket> = Keyed::new(template.clone());
    let keeping: Keyed<&str, TokenBucket> = Keyed::new(template);
    // Requests at odd instants, with thirds of a permit carried between them.
    let script: [(Duration, u64); 12] = [
        (Duration::ZERO, 3),
        (Duration::ZERO, 1),
        (ms(200), 1),
        (nanos(133_333_334), 1),
        (ms(900), 2),
        (secs(1), 1),
        (nanos(1), 3),
        (ms(999), 3),
        (nanos(1), 3),
        (secs(5), 2),
        (ms(333), 2),
        (nanos(333_333_334), 2),
    ];
    let mut forgotten = 0;
    for (step, (wait, permits)) in script.into_iter().enumerate() {
        advance(wait).await;
        forgotten += forgetting.retain_recent();
        let kept_len = keeping.len();
        assert_eq!(
            forgetting.try_acquire(&"k", permits),
            keeping.try_acquire(&"k", permits),
            "step {step}"
        );
        assert_eq!(keeping.len(), kept_len.max(1), "the other never forgets");
    }
    assert_eq!(keeping.retain_recent(), 0, "the script ends on a busy key");
    assert!(forgotten >= 3, "the key was forgotten {forgotten} times");
}

// ---------------------------------------------------------------------------------------
// Bad configuration
// ---------------------------------------------------------------------------------------

#[test]
fn bad_settings_are_refused_with_errors_naming_them() {
    let template = bucket(Rate::per_second(1), 1);
    let builder = || Keyed::<u64, TokenBucket>::builder(template.clone());
    let error = builder().max_keys(0).build().unwrap_err();
    assert_eq!(error, ConfigError::ZeroMaxKeys);
    assert_eq!(error.to_string(), "max_keys is zero: it must be at least 1");
    for shards in [0, 3, 6, 12, 1000, (1 << 16) + 1, 1 << 17, usize::MAX] {
        let error = builder().shards(shards).build().unwrap_err();
        assert_eq!(
            error,
            ConfigError::BadShards {
                shards,
                max: 65_536
            }
        );
        assert_eq!(
            error.to_string(),
            format!("{shards} shards: a keyed limiter needs a power of two between 1 and 65536")
        );
    }
    for shards in [1, 2, 64, 1 << 16] {
        assert_eq!(builder().shards(shards).build().unwrap().shards(), shards);
    }
    let keyed = builder().max_keys(1).shards(2).build().unwrap();
    assert_eq!((keyed.max_keys(), keyed.shards()), (Some(1), 2));
    assert!(Keyed::<u64, TokenBucket>::new(template)
        .shards()
        .is_power_of_two());
}

// ---------------------------------------------------------------------------------------
// Threads
// ---------------------------------------------------------------------------------------

const THREADS: usize = 4;

/// Starts `THREADS` threads together, each running `work(thread)`, and a sweeper calling
/// `retain_recent` until they are done; returns the keys the sweeper forgot.
fn race<K, L>(keyed: &Keyed<K, L>, work: impl Fn(usize) + Sync) -> usize
where
    K: std::hash::Hash + Eq + Send + 'static,
    L: KeyTemplate,
{
    let barrier = Barrier::new(THREADS + 1);
    let done = AtomicBool::new(false);
    thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS)
            .map(|thread| {
                let (barrier, work) = (&barrier, &work);
                scope.spawn(move || {
                    barrier.wait();
                    work(thread);
                })
            })
            .collect();
        let sweeper = scope.spawn(|| {
            barrier.wait();
            let mut forgotten = 0;
            while !done.load(Ordering::Acquire) {
                forgotten += keyed.retain_recent();
                thread::yield_now();
            }
            forgotten
        });
        // Every worker is joined before the sweeper is stopped, even one that panicked:
        // the sweeper would otherwise run forever.
        let outcomes: Vec<_> = workers.into_iter().map(|worker| worker.join()).collect();
        done.store(true, Ordering::Release);
        for outcome in outcomes {
            if let Err(panic) = outcome {
                std::panic::resume_unwind(panic);
            }
        }
        sweeper.join().unwrap()
    })
}

/// Keys whose buckets gain no permit within a test (one an hour).
fn never_refilling(capacity: u64, shards: usize) -> Keyed<u64, TokenBucket> {
    Keyed::builder(bucket(Rate::per_hour(1), capacity))
        .shards(shards)
        .build()
        .unwrap()
}

fn counters(keys: u64) -> Vec<AtomicU64> {
    (0..keys).map(|_| AtomicU64::new(0)).collect()
}

#[test]
fn threads_never_get_more_than_a_keys_budget() {
    const KEYS: u64 = 64;
    const CAPACITY: u64 = 10;
    // Each key admits exactly its capacity, however the threads interleave and whatever
    // the sweeper does.
    let keyed = never_refilling(CAPACITY, 2);
    let admitted = counters(KEYS);
    race(&keyed, |thread| {
        for round in 0..5_000 {
            let key = (round * 7 + thread as u64 * 13) % KEYS;
            match keyed.try_acquire(&key, 1) {
                Ok(()) => {
                    admitted[key as usize].fetch_add(1, Ordering::Relaxed);
                }
                Err(TryAcquireError::Limited { .. }) => {}
                Err(other) => panic!("{other}"),
            }
        }
    });
    let counts: HashMap<u64, u64> = (0..KEYS)
        .map(|key| (key, admitted[key as usize].load(Ordering::Relaxed)))
        .collect();
    assert!(
        counts.values().all(|&count| count == CAPACITY),
        "admitted per key: {counts:?}"
    );
}

#[test]
fn threads_racing_the_sweeper_never_hold_more_than_a_keys_budget() {
    const KEYS: u64 = 8;
    const CAPACITY: u64 = 2;
    // Permits are held briefly and refunded, so keys keep going idle and being forgotten
    // while other threads acquire them. A key forgotten while in use would hand out a
    // fresh budget on top of the one in use.
    let keyed = never_refilling(CAPACITY, 1);
    let held = counters(KEYS);
    let most_held = AtomicU64::new(0);
    let forgotten = race(&keyed, |thread| {
        for round in 0..20_000 {
            let key = (round + thread as u64) % KEYS;
            if keyed.try_acquire(&key, 1).is_err() {
                continue;
            }
            let now_held = held[key as usize].fetch_add(1, Ordering::AcqRel) + 1;
            most_held.fetch_max(now_held, Ordering::Relaxed);
            held[key as usize].fetch_sub(1, Ordering::AcqRel);
            // Still ours: a key with a permit out is busy, so it was not forgotten.
            keyed.get(&key).expect("a busy key is held").refund(1);
        }
    });
    assert!(most_held.load(Ordering::Relaxed) <= CAPACITY);
    assert!(forgotten > 0, "the sweeper never raced the workers");
}

/// Waiters, takers and the sweeper on real threads at once: keys go whole for their
/// waiters, fold back into words, and are forgotten when idle, all while others use them.
/// However that interleaves, a key never admits more than its bucket allows in the time
/// that passed (its capacity, plus what its rate adds): a key forgotten while busy and
/// made afresh would admit a second capacity on top.
#[test]
fn waiters_takers_and_the_sweeper_together_never_pass_a_keys_budget() {
    const KEYS: u64 = 4;
    const CAPACITY: u64 = 3;
    const PER_SECOND: u64 = 2_000;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let start = std::time::Instant::now();
    let keyed: Keyed<u64, TokenBucket> =
        Keyed::builder(bucket(Rate::per_second(PER_SECOND), CAPACITY))
            .shards(1)
            .build()
            .unwrap();
    let admitted = Arc::new(counters(KEYS));
    let waited = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    runtime.block_on(async {
        let mut tasks = Vec::new();
        for task in 0..8u64 {
            let (keyed, admitted, waited) = (keyed.clone(), admitted.clone(), waited.clone());
            tasks.push(tokio::spawn(async move {
                for round in 0..150u64 {
                    let key = (round + task) % KEYS;
                    if (round + task) % 3 == 0 {
                        keyed.acquire(&key, 1).await.unwrap();
                        waited.fetch_add(1, Ordering::Relaxed);
                    } else if keyed.try_acquire(&key, 1).is_err() {
                        tokio::task::yield_now().await;
                        continue;
                    }
                    admitted[key as usize].fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        let sweeper = {
            let (keyed, done) = (keyed.clone(), done.clone());
            std::thread::spawn(move || {
                let mut forgotten = 0;
                while !done.load(Ordering::Acquire) {
                    forgotten += keyed.retain_recent();
                    std::thread::yield_now();
                }
                forgotten
            })
        };
        for task in tasks {
            task.await.unwrap();
        }
        done.store(true, Ordering::Release);
        sweeper.join().unwrap();
    });
    // Measured after every admission: the most any key could have earned.
    let elapsed = start.elapsed();
    let earned = CAPACITY + (elapsed.as_nanos() * u128::from(PER_SECOND) / 1_000_000_000) as u64;
    for key in 0..KEYS {
        let admitted = admitted[key as usize].load(Ordering::Relaxed);
        assert!(
            admitted <= earned,
            "key {key} admitted {admitted} in {elapsed:?}, more than the {earned} it earned"
        );
    }
    // Not vacuous: requests waited, so keys went whole and came back.
    assert_eq!(waited.load(Ordering::Relaxed), 8 * 50);
}

/// Real threads: a `Weak` of a key's handle is upgraded and dropped on one thread while
/// the key is asked on another. The key folds back into its word only while no handle
/// (strong or weak) can reach its bucket, so every token is granted once: the grants
/// and what is left never pass the capacity plus what accrued. (Checked as a strong
/// count of 1 alone, a `Weak` upgraded between the check and the fold kept a handle on
/// a bucket the key no longer read: thousands of tokens granted twice a second.)
#[test]
fn a_weak_handle_upgraded_while_its_key_is_asked_grants_no_token_twice() {
    race_against_the_key(|keyed, stop| {
        let (mut weak, mut granted) = (std::sync::Weak::new(), 0);
        while !stop.load(Ordering::Relaxed) {
            match weak.upgrade() {
                Some(handle) => granted += u64::from(TokenBucket::try_take(&handle, 1).is_ok()),
                None => weak = Arc::downgrade(&keyed.get(&0).expect("held")),
            }
        }
        granted
    });
}

/// For a second of real time, `side` takes from key 0 of a `Keyed` on one thread (until
/// told to stop, returning what it was granted) while `try_acquire` asks the key on
/// another: the grants and what is left never pass the capacity plus what accrued.
pub fn race_against_the_key(side: impl Fn(&Keyed<u8, TokenBucket>, &AtomicBool) -> u64 + Sync) {
    // One token a second, so at most a couple accrue during the race.
    let capacity = 100_000_000;
    let keyed: Keyed<u8, TokenBucket> =
        Keyed::new(TokenBucket::new(Rate::per_second(1), capacity).unwrap());
    keyed.try_acquire(&0, 0).unwrap();
    let stop = AtomicBool::new(false);
    let start = std::time::Instant::now();
    let granted = thread::scope(|scope| {
        let (keyed, stop, side) = (&keyed, &stop, &side);
        let other = scope.spawn(move || side(keyed, stop));
        let mut granted = 0;
        while start.elapsed() < Duration::from_secs(1) {
            granted += u64::from(keyed.try_acquire(&0, 1).is_ok());
        }
        stop.store(true, Ordering::Relaxed);
        granted + other.join().expect("the other side ran")
    });
    let accrued = start.elapsed().as_secs() + 1;
    let left = keyed.quota(&0).unwrap().remaining;
    assert!(
        granted + left <= capacity + accrued,
        "{granted} granted + {left} left > {capacity} + {accrued} accrued: granted twice"
    );
}
