//! The compact form of `Keyed`'s keys, seen from inside: which form a key is in, and that
//! the word answers exactly as the whole limiter would.

use std::hash::Hash;
use std::time::Duration;

use tokio::time::advance;

use super::*;
use crate::bucket::TokenBucket;
use crate::error::{AcquireError, TryAcquireError};
use crate::limiter::{KeyTemplate, Limiter};
use crate::rate::Rate;
use crate::window::FixedWindow;

fn bucket(rate: Rate, capacity: u64) -> TokenBucket {
    TokenBucket::new(rate, capacity).unwrap()
}

/// Keys held whole now.
fn wholes<K: Hash + Eq, L: KeyTemplate>(keyed: &Keyed<K, L>) -> usize {
    keyed.forms().iter().map(|forms| forms.wholes).sum()
}

/// Whether `key` is held as its whole limiter (`Some(true)`) or as its state word alone
/// (`Some(false)`); `None` when it is not held.
fn is_held_whole<K: Hash + Eq, L: KeyTemplate>(keyed: &Keyed<K, L>, key: &K) -> Option<bool> {
    let hash = keyed.hash(key);
    keyed.shard(hash).is_whole(hash, key)
}

/// Whole limiters made so far.
fn made<K: Hash + Eq, L: KeyTemplate>(keyed: &Keyed<K, L>) -> usize {
    keyed.forms().iter().map(|forms| forms.made).sum()
}

/// Spawns `acquire(key, permits)`, which reports the instant it ended, since `start`.
fn spawn_acquire<L: KeyTemplate>(
    keyed: &Keyed<u8, L>,
    key: u8,
    permits: u64,
) -> tokio::task::JoinHandle<(Result<(), AcquireError>, Duration)> {
    let start = tokio::time::Instant::now();
    let acquire = keyed.acquire(&key, permits);
    tokio::spawn(async move { (acquire.await, start.elapsed()) })
}

fn limited(retry_after: Duration) -> Result<(), TryAcquireError> {
    Err(TryAcquireError::Limited { retry_after })
}

/// Asks key 0 of `keyed` and `alone` the same `try_acquire`s at the same instants
/// (`plan` gives each round's wait and permits), unfolding the key with `get` every
/// `unfold_every` rounds (the next call folds it back): they must answer alike.
async fn answer_alike<L: KeyTemplate>(
    keyed: &Keyed<u8, L>,
    alone: &L,
    rounds: u64,
    unfold_every: u64,
    mut plan: impl FnMut(u64) -> (Duration, u64),
) {
    for round in 0..rounds {
        let (wait, permits) = plan(round);
        advance(wait).await;
        if round % unfold_every == unfold_every - 1 {
            drop(keyed.get(&0));
        }
        assert_eq!(
            keyed.try_acquire(&0, permits),
            alone.try_acquire(permits),
            "round {round}"
        );
        assert_eq!(wholes(keyed), 0, "round {round}: folded back");
    }
}

#[tokio::test(start_paused = true)]
async fn a_key_is_a_word_until_it_must_wait_and_folds_back_as_its_last_waiter_is_served() {
    let keyed: Keyed<u8, TokenBucket> = Keyed::new(bucket(Rate::per_second(1), 1));
    keyed.try_acquire(&1, 1).unwrap();
    assert_eq!((wholes(&keyed), made(&keyed)), (0, 0), "served on its word");
    let first = spawn_acquire(&keyed, 1, 1);
    let second = spawn_acquire(&keyed, 1, 1);
    tokio::task::yield_now().await;
    assert_eq!(
        (wholes(&keyed), made(&keyed)),
        (1, 1),
        "one whole bucket for both"
    );
    // Nobody passes the waiters, whichever form answers.
    assert_eq!(keyed.try_acquire(&1, 1), limited(Duration::from_secs(3)));
    assert_eq!(first.await.unwrap(), (Ok(()), Duration::from_secs(1)));
    assert_eq!(
        is_held_whole(&keyed, &1),
        Some(true),
        "the second still waits"
    );
    assert_eq!(second.await.unwrap(), (Ok(()), Duration::from_secs(2)));
    // Folded as the last waiter was served, with nothing else done to the key.
    assert_eq!(is_held_whole(&keyed, &1), Some(false));
    assert_eq!(wholes(&keyed), 0);
    // The bucket is empty as of the grant at 2 s: the word holds exactly that.
    assert_eq!(keyed.try_acquire(&1, 1), limited(Duration::from_secs(1)));
    assert_eq!(made(&keyed), 1);
    advance(Duration::from_secs(1)).await;
    assert_eq!(keyed.retain_recent(), 1, "full again: forgotten");
}

#[tokio::test(start_paused = true)]
async fn an_acquire_whose_permits_are_there_is_served_on_the_word_at_its_first_poll() {
    let keyed: Keyed<u8, TokenBucket> = Keyed::new(bucket(Rate::per_second(1), 2));
    let mut acquire = tokio_test::task::spawn(keyed.acquire(&0, 1));
    assert_eq!(keyed.len(), 0, "nothing looked at before the first poll");
    tokio_test::assert_ready_eq!(acquire.poll(), Ok(()));
    assert_eq!(keyed.acquire(&0, 1).await, Ok(()));
    // Refused at once on the word too, as the bucket's `acquire` would be.
    assert_eq!(
        keyed.acquire(&0, 3).await,
        Err(AcquireError::ExceedsLimit {
            requested: 3,
            limit: 2
        })
    );
    assert_eq!((wholes(&keyed), made(&keyed)), (0, 0), "no bucket was made");
    // Each took exactly one token from the word.
    assert_eq!(keyed.try_acquire(&0, 1), limited(Duration::from_secs(1)));
    // A window key likewise.
    let template = FixedWindow::new(2, Duration::from_secs(1)).unwrap();
    let windows: Keyed<u8, FixedWindow> = Keyed::new(template);
    windows.acquire(&0, 2).await.unwrap();
    assert_eq!((wholes(&windows), made(&windows)), (0, 0));
    assert_eq!(windows.try_acquire(&0, 1), limited(Duration::from_secs(1)));
}

#[tokio::test(start_paused = true)]
async fn a_key_folds_back_as_its_last_waiter_is_dropped_and_a_get_handle_keeps_it_whole() {
    let keyed: Keyed<u8, TokenBucket> = Keyed::new(bucket(Rate::per_second(1), 1));
    keyed.try_acquire(&0, 1).unwrap();
    let mut waiter = tokio_test::task::spawn(keyed.acquire(&0, 1));
    tokio_test::assert_pending!(waiter.poll());
    assert_eq!(is_held_whole(&keyed, &0), Some(true));
    drop(waiter);
    assert_eq!(
        is_held_whole(&keyed, &0),
        Some(false),
        "folded as it was dropped"
    );
    // It took nothing: the token comes at 1 s.
    assert_eq!(keyed.try_acquire(&0, 1), limited(Duration::from_secs(1)));
    // A waiter served while a `get` handle lives leaves the key whole: the handle acts on
    // that bucket.
    let waiter = spawn_acquire(&keyed, 0, 1);
    tokio::task::yield_now().await;
    let handle = keyed.get(&0).unwrap();
    assert_eq!(waiter.await.unwrap(), (Ok(()), Duration::from_secs(1)));
    assert_eq!(is_held_whole(&keyed, &0), Some(true));
    assert_eq!(handle.available(), 0);
    drop(handle);
    // Let go outside the shard's lock, the handle folds nothing; the next call does.
    assert_eq!(is_held_whole(&keyed, &0), Some(true));
    assert_eq!(keyed.try_acquire(&0, 1), limited(Duration::from_secs(1)));
    assert_eq!(is_held_whole(&keyed, &0), Some(false));
    // A sweep folds too.
    drop(keyed.get(&0));
    assert_eq!(keyed.retain_recent(), 0, "the bucket is empty: not idle");
    assert_eq!(is_held_whole(&keyed, &0), Some(false));
}

#[tokio::test(start_paused = true)]
async fn a_handle_from_get_keeps_its_key_whole_and_a_changed_rate_keeps_it_whole() {
    let keyed: Keyed<&str, TokenBucket> = Keyed::new(bucket(Rate::per_second(1), 2));
    keyed.try_acquire(&"a", 2).unwrap();
    let handle = keyed.get(&"a").expect("held");
    assert_eq!(wholes(&keyed), 1);
    // While the handle lives, the key is not folded: both act on one bucket.
    assert_eq!(keyed.try_acquire(&"a", 1), limited(Duration::from_secs(1)));
    assert_eq!(wholes(&keyed), 1);
    handle.set_rate(Rate::per_second(4)).unwrap();
    drop(handle);
    // Its settings are no longer the template's: it stays a bucket, at its own rate.
    assert_eq!(
        keyed.try_acquire(&"a", 1),
        limited(Duration::from_millis(250))
    );
    assert_eq!(keyed.retain_recent(), 0);
    assert_eq!(wholes(&keyed), 1);
    advance(Duration::from_millis(250)).await;
    keyed.try_acquire(&"a", 1).unwrap();
    // Changed back, it folds again.
    keyed
        .get(&"a")
        .unwrap()
        .set_rate(Rate::per_second(1))
        .unwrap();
    assert_eq!(keyed.try_acquire(&"a", 1), limited(Duration::from_secs(1)));
    assert_eq!(wholes(&keyed), 0);
}

/// A `Weak` of a handle from `get` keeps its key whole as the `Arc` does: it may be
/// upgraded at any time, without the shard's lock, into a handle on the key's bucket, so
/// the key must not be folded (or forgotten) from under it. Once it is dropped, the key
/// folds at its next call.
#[tokio::test(start_paused = true)]
async fn a_weak_of_a_handle_keeps_its_key_whole_until_it_is_dropped() {
    let keyed: Keyed<&str, TokenBucket> = Keyed::new(bucket(Rate::per_second(1), 3));
    keyed.try_acquire(&"a", 1).unwrap();
    let weak = std::sync::Arc::downgrade(&keyed.get(&"a").expect("held"));
    keyed.try_acquire(&"a", 1).unwrap();
    assert_eq!(keyed.retain_recent(), 0);
    assert_eq!(
        is_held_whole(&keyed, &"a"),
        Some(true),
        "not folded under a Weak"
    );
    let handle = weak.upgrade().expect("the key's bucket is still the key's");
    handle.try_take(1).unwrap();
    assert_eq!(keyed.try_acquire(&"a", 1), limited(Duration::from_secs(1)));
    drop((handle, weak));
    assert_eq!(keyed.try_acquire(&"a", 1), limited(Duration::from_secs(1)));
    assert_eq!(
        is_held_whole(&keyed, &"a"),
        Some(false),
        "folded once it is gone"
    );
}

#[tokio::test(start_paused = true)]
async fn a_capacity_set_through_get_holds_until_the_key_is_forgotten() {
    let keyed: Keyed<&str, TokenBucket> = Keyed::new(bucket(Rate::per_second(1), 2));
    keyed.try_acquire(&"a", 2).unwrap();
    let handle = keyed.get(&"a").expect("held");
    handle.set_capacity(4).unwrap();
    drop(handle);
    // A raised capacity fills at the rate: 4 tokens at 4 s, where the template holds 2.
    let exceeds = |limit| {
        Err(TryAcquireError::ExceedsLimit {
            requested: 4,
            limit,
        })
    };
    assert_eq!(keyed.try_acquire(&"a", 4), limited(Duration::from_secs(4)));
    assert_eq!(is_held_whole(&keyed, &"a"), Some(true), "its own capacity");
    advance(Duration::from_secs(3)).await;
    assert_eq!(keyed.retain_recent(), 0, "3 of 4 tokens: not idle");
    assert_eq!(is_held_whole(&keyed, &"a"), Some(true));
    advance(Duration::from_secs(1)).await;
    keyed.try_acquire(&"a", 4).unwrap();
    // Full again at 8 s, it is forgotten, and comes back as the template.
    advance(Duration::from_secs(4)).await;
    assert_eq!(keyed.retain_recent(), 1);
    assert_eq!(keyed.try_acquire(&"a", 4), exceeds(2));
    assert_eq!(is_held_whole(&keyed, &"a"), Some(false));
    // Set back to the template's, the key folds again, holding what the bucket held.
    let handle = keyed.get(&"a").unwrap();
    handle.set_capacity(3).unwrap();
    handle.set_capacity(2).unwrap();
    drop(handle);
    keyed.try_acquire(&"a", 2).unwrap();
    assert_eq!(is_held_whole(&keyed, &"a"), Some(false));
    assert_eq!(keyed.try_acquire(&"a", 1), limited(Duration::from_secs(1)));
}

/// The word and a bucket of the same settings, asked the same things at the same
/// irregular instants, answer alike to the nanosecond: across moves of the shard's base
/// (a rate of 10^9 tokens a nanosecond moves it every 4.6 s) and across unfolding into a
/// bucket and folding back.
#[tokio::test(start_paused = true)]
async fn a_word_answers_as_its_bucket_would_across_moves_of_its_base() {
    let rates = [
        Rate::new(1_000_000_000, Duration::from_nanos(1)),
        Rate::new(7, Duration::from_nanos(999_999_937)),
        Rate::per_hour(5),
    ];
    for rate in rates {
        let capacity = 3_000;
        let keyed: Keyed<u8, TokenBucket> = Keyed::builder(bucket(rate, capacity))
            .shards(1)
            .build()
            .unwrap();
        let alone = bucket(rate, capacity);
        let mut step = 1u64;
        answer_alike(&keyed, &alone, 400, 50, |round| {
            step = (step * 7_919 + 104_729) % 90_000_000;
            (Duration::from_nanos(step), (round * 37) % (capacity + 2))
        })
        .await;
        if rate.amount() == 1_000_000_000 {
            assert!(keyed.forms()[0].base > 0, "the base moved");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_window_key_is_a_word_that_answers_as_its_window_would() {
    let template = FixedWindow::new(5, Duration::from_millis(100)).unwrap();
    let keyed: Keyed<u8, FixedWindow> = Keyed::new(template.clone());
    let alone = template.fresh();
    answer_alike(&keyed, &alone, 300, 40, |round| {
        (Duration::from_micros(round * 773 % 41_000), round % 7)
    })
    .await;
    // Waiters make it whole; their line empty, it folds back.
    keyed.try_acquire(&0, 5).ok();
    alone.try_acquire(5).ok();
    let waiter = spawn_acquire(&keyed, 0, 3);
    tokio::task::yield_now().await;
    assert_eq!(wholes(&keyed), 1);
    let (result, waited) = waiter.await.unwrap();
    let start = tokio::time::Instant::now() - waited;
    assert_eq!(result, alone.acquire(3).await);
    assert_eq!(start.elapsed(), waited, "served at the same instant");
    assert_eq!(wholes(&keyed), 0, "folded as its waiter was served");
    assert_eq!(keyed.try_acquire(&0, 3), alone.try_acquire(3));
}

#[tokio::test(start_paused = true)]
async fn settings_past_one_word_are_held_whole_and_still_exact() {
    // u32::MAX tokens at one an hour are worth 1.5 × 10^22 units: no word holds them.
    let template = bucket(Rate::per_hour(1), u64::from(u32::MAX));
    let keyed: Keyed<u8, TokenBucket> = Keyed::new(template);
    assert!(keyed.inner.compact.is_none());
    keyed.try_acquire(&0, u64::from(u32::MAX)).unwrap();
    assert_eq!(
        keyed.try_acquire(&0, 1),
        limited(Duration::from_secs(3_600))
    );
    assert_eq!(wholes(&keyed), 1);
}

#[tokio::test(start_paused = true)]
async fn an_acquire_dropped_unpolled_takes_nothing_from_a_word() {
    let keyed: Keyed<u8, TokenBucket> = Keyed::new(bucket(Rate::per_second(1), 1));
    drop(keyed.acquire(&0, 1));
    keyed.try_acquire(&0, 1).unwrap();
    // Dropped while waiting: the key folds back with nothing taken for it.
    let waiter = tokio::spawn(keyed.acquire(&0, 1));
    tokio::task::yield_now().await;
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    assert_eq!(wholes(&keyed), 0);
    advance(Duration::from_secs(1)).await;
    keyed.try_acquire(&0, 1).unwrap();
}

#[tokio::test(start_paused = true)]
async fn settings_changed_through_a_clone_of_the_template_change_no_key() {
    let template = bucket(Rate::per_second(1), 1);
    let keyed: Keyed<u8, TokenBucket> = Keyed::new(template.clone());
    template.set_rate(Rate::per_second(4)).unwrap();
    keyed.try_acquire(&0, 1).unwrap();
    assert_eq!(keyed.try_acquire(&0, 1), limited(Duration::from_secs(1)));
    // A key made whole is made with the same settings as a word.
    assert_eq!(keyed.get(&0).unwrap().rate(), Rate::per_second(1));
}

// ----- A key's limit and a global one, decided together (`joint.rs`) -----------------

use crate::keyed::joint::{Joint, JointRefusal};
use crate::quota::Quota;

fn quota(remaining: u64, full_after: Duration) -> Option<Quota> {
    Some(Quota {
        remaining,
        full_after,
    })
}

fn refused_by_key(retry_after: Duration) -> Result<(), JointRefusal> {
    Err(JointRefusal::Key(TryAcquireError::Limited { retry_after }))
}

fn refused_by_global(retry_after: Duration) -> Result<(), JointRefusal> {
    Err(JointRefusal::Global(TryAcquireError::Limited {
        retry_after,
    }))
}

#[tokio::test(start_paused = true)]
async fn a_joint_decision_on_a_word_counts_in_both_or_in_neither() {
    let keyed: Keyed<u8, TokenBucket> = Keyed::new(bucket(Rate::per_second(1), 2));
    let windows: Keyed<u8, FixedWindow> =
        Keyed::new(FixedWindow::new(3, Duration::from_secs(1)).unwrap());
    let global = bucket(Rate::per_second(10), 3);
    // Both admit: both count, and both quotas are read from what the decision left.
    assert_eq!(
        keyed.try_acquire_with(&0, 2, &global),
        Joint {
            result: Ok(()),
            key: quota(0, Duration::from_secs(2)),
            global: quota(1, Duration::from_millis(200)),
        }
    );
    assert_eq!(keyed.quota(&0), quota(0, Duration::from_secs(2)));
    assert_eq!(global.available(), 1);

    // The key refuses: the global limiter is not asked, and its quota is read as is.
    assert_eq!(
        keyed.try_acquire_with(&0, 1, &global),
        Joint {
            result: refused_by_key(Duration::from_secs(1)),
            key: quota(0, Duration::from_secs(2)),
            global: quota(1, Duration::from_millis(200)),
        }
    );
    assert_eq!(global.available(), 1, "the global bucket is untouched");
    assert_eq!(global.stats().denied, 0, "nor was it asked");

    // The global limiter refuses: the key's word is as it was.
    assert_eq!(
        keyed.try_acquire_with(&1, 2, &global),
        Joint {
            result: refused_by_global(Duration::from_millis(100)),
            key: quota(2, Duration::ZERO),
            global: quota(1, Duration::from_millis(200)),
        }
    );
    assert_eq!(keyed.quota(&1), quota(2, Duration::ZERO));
    keyed.try_acquire(&1, 2).unwrap();
    assert_eq!((wholes(&keyed), made(&keyed)), (0, 0), "all on words");

    // Half a second on, a window key beside the bucket, exact to the nanosecond.
    advance(Duration::from_millis(500)).await;
    assert_eq!(
        windows.try_acquire_with(&0, 2, &global),
        Joint {
            result: Ok(()),
            key: quota(1, Duration::from_millis(500)),
            global: quota(1, Duration::from_millis(200)),
        }
    );
    assert_eq!((wholes(&windows), made(&windows)), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_joint_decision_refuses_a_new_key_past_max_keys_without_asking_the_global_limiter() {
    let keyed: Keyed<u8, TokenBucket> = Keyed::builder(bucket(Rate::per_hour(1), 1))
        .max_keys(1)
        .build()
        .unwrap();
    let global = bucket(Rate::per_second(1), 5);
    keyed.try_acquire(&0, 1).unwrap();
    assert_eq!(
        keyed.try_acquire_with(&1, 1, &global),
        Joint {
            result: Err(JointRefusal::Key(TryAcquireError::TooManyKeys {
                max_keys: 1
            })),
            key: None,
            global: quota(5, Duration::ZERO),
        }
    );
    assert_eq!(global.available(), 5);
    assert_eq!(keyed.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_joint_decision_on_a_whole_key_keeps_its_line_and_is_all_or_nothing() {
    let keyed: Keyed<u8, TokenBucket> = Keyed::new(bucket(Rate::per_second(1), 1));
    let global = bucket(Rate::per_second(10), 2);
    keyed.try_acquire(&0, 1).unwrap();
    let waiter = spawn_acquire(&keyed, 0, 1);
    tokio::task::yield_now().await;
    assert_eq!(is_held_whole(&keyed, &0), Some(true));
    // Behind the waiter: its token comes at 1 s, ours at 2 s. The bucket is full again
    // once the waiter's token and a full bucket have accrued.
    assert_eq!(
        keyed.try_acquire_with(&0, 1, &global),
        Joint {
            result: refused_by_key(Duration::from_secs(2)),
            key: quota(0, Duration::from_secs(2)),
            global: quota(2, Duration::ZERO),
        }
    );
    assert_eq!(global.available(), 2);
    assert_eq!(waiter.await.unwrap(), (Ok(()), Duration::from_secs(1)));

    // Held whole by a handle, with its token there; the global bucket empty: neither
    // counts.
    advance(Duration::from_secs(1)).await;
    let handle = keyed.get(&0).unwrap();
    global.try_acquire(2).unwrap();
    assert_eq!(
        keyed.try_acquire_with(&0, 1, &global),
        Joint {
            result: refused_by_global(Duration::from_millis(100)),
            key: quota(1, Duration::ZERO),
            global: quota(0, Duration::from_millis(200)),
        }
    );
    assert_eq!(handle.available(), 1, "the key's bucket is untouched");
    // Both admit: both count.
    advance(Duration::from_millis(100)).await;
    assert_eq!(
        keyed.try_acquire_with(&0, 1, &global),
        Joint {
            result: Ok(()),
            key: quota(0, Duration::from_secs(1)),
            global: quota(0, Duration::from_millis(200)),
        }
    );
    assert_eq!(handle.available(), 0);
    // The key's own limiter as the global one: decided once, all or nothing.
    assert_eq!(
        keyed.try_acquire_with(&0, 1, &*handle),
        Joint {
            result: refused_by_key(Duration::from_secs(1)),
            key: quota(0, Duration::from_secs(1)),
            global: quota(0, Duration::from_secs(1)),
        }
    );
}

/// The flood: 100,000 fresh keys decided with a global bucket, most refused by
/// it, stay words: no key is made whole, so none costs a limiter of its own.
#[tokio::test(start_paused = true)]
async fn a_flood_of_fresh_keys_with_a_global_limit_keeps_every_key_a_word() {
    let keyed: Keyed<u32, TokenBucket> = Keyed::new(bucket(Rate::per_second(1), 2));
    let windows: Keyed<u32, FixedWindow> =
        Keyed::new(FixedWindow::new(2, Duration::from_secs(1)).unwrap());
    let globals = [
        bucket(Rate::per_second(1_000), 1_000),
        bucket(Rate::per_second(1_000), 1_000),
    ];
    let mut admitted = [0, 0];
    for key in 0..100_000u32 {
        let joints = [
            keyed.try_acquire_with(&key, 1, &globals[0]),
            windows.try_acquire_with(&key, 1, &globals[1]),
        ];
        for (admitted, joint) in admitted.iter_mut().zip(joints) {
            *admitted += u32::from(joint.result.is_ok());
        }
    }
    assert_eq!(admitted, [1_000; 2], "each global's capacity, then nothing");
    assert_eq!((wholes(&keyed), made(&keyed)), (0, 0));
    assert_eq!((wholes(&windows), made(&windows)), (0, 0));
}

/// A global limiter that leads `all_in_turn` composites elsewhere is decided with a whole
/// key as any other is, all or nothing under both locks: the joint decision gives no
/// limiter a part in composites, so none is in the way.
#[tokio::test(start_paused = true)]
async fn a_joint_decision_with_a_global_limiter_that_leads_elsewhere_is_still_all_or_nothing() {
    let keyed: Keyed<u8, TokenBucket> = Keyed::new(bucket(Rate::per_second(1), 1));
    let global = bucket(Rate::per_second(1), 1);
    let other = bucket(Rate::per_second(1), 1);
    crate::composite::all_in_turn((&global, &other)).unwrap();
    let handle = keyed.get(&0).or_else(|| {
        keyed.try_acquire(&0, 0).unwrap();
        keyed.get(&0)
    });
    assert_eq!(is_held_whole(&keyed, &0), Some(true));
    assert!(keyed.try_acquire_with(&0, 1, &global).result.is_ok());
    assert_eq!(
        (
            global.available(),
            handle.as_ref().map(|key| key.available())
        ),
        (0, Some(0))
    );
    advance(Duration::from_secs(1)).await;
    global.try_take(1).unwrap();
    assert_eq!(
        keyed.try_acquire_with(&0, 1, &global).result,
        Err(JointRefusal::Global(TryAcquireError::Limited {
            retry_after: Duration::from_secs(1)
        }))
    );
    // The key's permit was given back.
    assert_eq!(handle.map(|key| key.available()), Some(1));
}

/// A joint decision is a try that never waits: it gives neither the global limiter nor
/// the key's whole limiter a part in composites. Both may lead an `all_in_turn` after it,
/// as before it. (Decided by `all`, both were made followers for good, and the caller's
/// own `all_in_turn` leading with either was refused with `FollowerAsLeader`.)
#[tokio::test(start_paused = true)]
async fn a_joint_decision_on_a_whole_key_gives_no_limiter_a_part_in_composites() {
    use crate::window::SlidingLog;
    // A sliding log has no word: every key is held whole.
    let keyed: Keyed<u8, SlidingLog> =
        Keyed::new(SlidingLog::new(5, Duration::from_secs(1)).unwrap());
    let global = bucket(Rate::per_second(10), 10);
    let other = bucket(Rate::per_second(1), 1);
    assert!(keyed.try_acquire_with(&0, 1, &global).result.is_ok());
    assert_eq!(is_held_whole(&keyed, &0), Some(true));
    let key = keyed.get(&0).expect("held");
    assert!(crate::composite::all_in_turn((&global, &other)).is_ok());
    assert!(crate::composite::all_in_turn((&*key, &other)).is_ok());
    // And a limiter that leads elsewhere still decides jointly, all or nothing.
    assert!(keyed.try_acquire_with(&0, 1, &global).result.is_ok());
    assert_eq!((key.available(), global.available()), (3, 8));
}
