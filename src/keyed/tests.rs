//! The compact form of `Keyed`'s keys, seen from inside: which form a key is in, and that
//! the word answers exactly as the whole limiter would.

use std::time::Duration;

use tokio::time::advance;

use super::*;
use crate::{FixedWindow, Rate, TokenBucket};

fn bucket(rate: Rate, capacity: u64) -> TokenBucket {
    TokenBucket::new(rate, capacity).unwrap()
}

fn wholes<K: Hash + Eq, L: Limiter>(keyed: &Keyed<K, L>) -> usize {
    keyed.wholes_and_bases().0
}

fn limited(retry_after: Duration) -> Result<(), TryAcquireError> {
    Err(TryAcquireError::Limited { retry_after })
}

/// Asks key 0 of `keyed` and `alone` the same `try_acquire`s at the same instants
/// (`plan` gives each round's wait and permits), unfolding the key with `get` every
/// `unfold_every` rounds (the next call folds it back): they must answer alike.
async fn answer_alike<L: Limiter>(
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
async fn a_key_is_a_word_until_it_must_wait_and_folds_back_once_its_line_is_empty() {
    let keyed: Keyed<u8, TokenBucket> = Keyed::new(bucket(Rate::per_second(1), 1));
    keyed.try_acquire(&1, 1).unwrap();
    assert_eq!(wholes(&keyed), 0, "served on its word");
    let start = tokio::time::Instant::now();
    let waiter = tokio::spawn(keyed.acquire(&1, 1));
    tokio::task::yield_now().await;
    assert_eq!(wholes(&keyed), 1, "a whole bucket for the waiter");
    // Nobody passes the waiter, whichever form answers.
    assert_eq!(keyed.try_acquire(&1, 1), limited(Duration::from_secs(2)));
    waiter.await.unwrap().unwrap();
    assert!(start.elapsed() >= Duration::from_secs(1));
    assert_eq!(wholes(&keyed), 1, "folded only when next used");
    // The bucket is empty as of the grant at 1 s: the word holds exactly that.
    assert_eq!(keyed.try_acquire(&1, 1), limited(Duration::from_secs(1)));
    assert_eq!(wholes(&keyed), 0);
    // A sweep folds too.
    let waiter = tokio::spawn(keyed.acquire(&1, 1));
    waiter.await.unwrap().unwrap();
    assert_eq!(wholes(&keyed), 1);
    assert_eq!(keyed.retain_recent(), 0, "the bucket is empty: not idle");
    assert_eq!(wholes(&keyed), 0);
    advance(Duration::from_secs(1)).await;
    assert_eq!(keyed.retain_recent(), 1, "full again: forgotten");
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
        let (_, bases) = keyed.wholes_and_bases();
        if rate.amount() == 1_000_000_000 {
            assert!(bases[0] > 0, "the base moved");
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
    let waiter = tokio::spawn(keyed.acquire(&0, 3));
    tokio::task::yield_now().await;
    assert_eq!(wholes(&keyed), 1);
    waiter.await.unwrap().unwrap();
    alone.acquire(3).await.unwrap();
    assert_eq!(keyed.try_acquire(&0, 3), alone.try_acquire(3));
    assert_eq!(wholes(&keyed), 0);
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
    advance(Duration::from_secs(1)).await;
    keyed.try_acquire(&0, 1).unwrap();
    assert_eq!(wholes(&keyed), 0);
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
