//! A key of a `Keyed` as a composite member (issue 23): `per_host.member(&host)` beside a
//! global limiter, decided on the key's word while nobody waits on it, made whole only to
//! wait, and folded back once the wait ends.
//!
//! Every test runs on tokio's paused clock, with instants on whole milliseconds.

use std::pin::pin;
use std::time::Duration;

mod common;

use common::{ms, secs};
use token_bucket::{
    all, all_in_turn, AcquireAllError, AcquireError, ConfigError, FixedWindow, Keyed, Rate,
    TokenBucket, TryAcquireAllError, TryAcquireError,
};
use tokio::time::Instant;

fn per_key(rate: Rate, capacity: u64) -> Keyed<u64, TokenBucket> {
    Keyed::new(TokenBucket::new(rate, capacity).unwrap())
}

/// All or nothing on the word: the key admits, the global bucket refuses, and the key's
/// word keeps its token; the key refuses, and the global bucket is not touched.
#[tokio::test(start_paused = true)]
async fn the_key_s_word_is_written_only_if_every_member_admits() {
    let keys = per_key(Rate::per_second(1), 1);
    let global = TokenBucket::new(Rate::per_second(1), 1).unwrap();
    global.try_take(1).unwrap();
    let try_both = || {
        all_in_turn((keys.member(&1), &global))
            .unwrap()
            .try_acquire(1)
    };
    let limited = |retry_after| Err(TryAcquireAllError::Limited { retry_after });
    assert_eq!(try_both(), limited(secs(1)));
    assert_eq!(keys.quota(&1).map(|quota| quota.remaining), Some(1));
    tokio::time::advance(secs(1)).await;
    try_both().unwrap();
    assert_eq!(keys.quota(&1).map(|quota| quota.remaining), Some(0));
    assert_eq!(global.available(), 0);
    // The key is out: refused on its word, the global bucket never asked.
    tokio::time::advance(ms(500)).await;
    assert_eq!(try_both(), limited(ms(500)));
    assert_eq!((keys.len(), keys.keys_held_whole()), (1, 0));
}

/// A request that must wait makes the key whole and holds its place in the key's line;
/// once it is served and its member dropped, the key folds back into its word.
#[tokio::test(start_paused = true)]
async fn waiting_makes_the_key_whole_and_it_folds_back_after() {
    let keys = per_key(Rate::per_second(2), 1);
    let global = TokenBucket::new(Rate::per_second(100), 100).unwrap();
    let start = Instant::now();
    all_in_turn((keys.member(&5), &global))
        .unwrap()
        .acquire(1)
        .await
        .unwrap();
    assert_eq!((keys.len(), keys.keys_held_whole()), (1, 0));
    {
        let both = all_in_turn((keys.member(&5), &global)).unwrap();
        let mut waiting = pin!(both.acquire(1));
        assert!(futures::poll!(waiting.as_mut()).is_pending());
        assert_eq!((keys.len(), keys.keys_held_whole()), (1, 1));
        // A plain request for the key waits behind it, in the key's line.
        assert!(keys.try_acquire(&5, 1).is_err());
        waiting.await.unwrap();
        assert_eq!(start.elapsed(), ms(500));
    }
    // Served and dropped: the key is a word again.
    assert_eq!((keys.len(), keys.keys_held_whole()), (1, 0));
    assert_eq!(global.stats().taken, 2);
}

/// Many requests waiting on one key share its one whole limiter: the key's line holds
/// them in order, 500 ms apart, and other keys are not held up.
#[tokio::test(start_paused = true)]
async fn waiters_of_one_key_share_its_line_and_other_keys_pass() {
    let keys = per_key(Rate::per_second(2), 1);
    let global = TokenBucket::new(Rate::per_second(1_000), 1).unwrap();
    let start = Instant::now();
    let spawn = |key: u64| {
        let (keys, global) = (keys.clone(), global.clone());
        tokio::spawn(async move {
            all_in_turn((keys.member(&key), &global))?
                .acquire(1)
                .await?;
            Ok::<_, AcquireAllError>(start.elapsed())
        })
    };
    let slow: Vec<_> = (0..4).map(|_| spawn(1)).collect();
    let other = spawn(2);
    assert_eq!(other.await.unwrap(), Ok(ms(1)));
    for (index, task) in (0..).zip(slow) {
        assert_eq!(task.await.unwrap(), Ok(ms(500 * index)), "{index}");
    }
    assert_eq!(keys.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_new_key_without_room_is_refused_naming_the_member() {
    let keys: Keyed<u64, TokenBucket> =
        Keyed::builder(TokenBucket::new(Rate::per_hour(1), 1).unwrap())
            .max_keys(1)
            .build()
            .unwrap();
    let global = TokenBucket::new(Rate::per_second(10), 10).unwrap();
    keys.try_acquire(&1, 1).unwrap();
    let too_many = TryAcquireError::TooManyKeys { max_keys: 1 };
    assert_eq!(
        all_in_turn((keys.member(&2), &global))
            .unwrap()
            .try_acquire(1),
        Err(TryAcquireAllError::Member {
            member: 0,
            error: too_many
        })
    );
    // Key 1 is out for an hour, so waiting on it makes it whole; key 2 has no room.
    assert_eq!(
        all_in_turn((keys.member(&2), &global))
            .unwrap()
            .acquire(1)
            .await,
        Err(AcquireAllError::Member {
            member: 0,
            error: AcquireError::TooManyKeys { max_keys: 1 }
        })
    );
    assert_eq!(global.available(), 10);
}

/// Two keys of one `Keyed` in one composite are refused; a `Keyed` whose keys lead
/// `all_in_turn` composites cannot follow in `all`.
#[test]
fn two_keys_of_one_keyed_or_a_leading_keyed_that_follows_are_refused() {
    let keys = per_key(Rate::per_second(1), 1);
    let global = TokenBucket::new(Rate::per_second(10), 10).unwrap();
    assert_eq!(
        all_in_turn((keys.member(&1), keys.member(&2), &global)).err(),
        Some(ConfigError::RepeatedMember {
            first: 0,
            second: 1
        })
    );
    all_in_turn((keys.member(&1), &global)).unwrap();
    assert_eq!(
        all((&global, keys.member(&1))).err(),
        Some(ConfigError::LeaderAsFollower { member: 1 })
    );
}

/// A key of a `Keyed` of fixed windows, as a member: decided on its word, then waiting
/// for its next window in its line.
#[tokio::test(start_paused = true)]
async fn a_fixed_window_key_waits_for_its_next_window() {
    let keys: Keyed<&str, FixedWindow> = Keyed::new(FixedWindow::new(1, secs(1)).unwrap());
    let global = TokenBucket::new(Rate::per_second(100), 100).unwrap();
    let start = Instant::now();
    for _ in 0..3 {
        all_in_turn((keys.member(&"a"), &global))
            .unwrap()
            .acquire(1)
            .await
            .unwrap();
    }
    assert_eq!(start.elapsed(), secs(2));
    assert_eq!(global.stats().taken, 3);
    tokio::time::advance(secs(1)).await;
    assert_eq!(keys.retain_recent(), 1);
}

/// A key's member beside the key's own whole limiter (from `get_or_insert` or `get`) is the
/// same limiter twice: found when the key turns out whole, and refused, rather than its
/// lock taken twice.
#[tokio::test(start_paused = true)]
async fn a_key_beside_its_own_whole_limiter_is_refused_as_a_repeated_member() {
    let keys = per_key(Rate::per_second(1), 1);
    let whole = keys.get_or_insert(&1).unwrap();
    let repeated = ConfigError::RepeatedMember {
        first: 0,
        second: 1,
    };
    let both = all((keys.member(&1), &whole)).unwrap();
    assert_eq!(
        both.try_acquire(1),
        Err(TryAcquireAllError::Config(repeated))
    );
    assert_eq!(
        both.acquire(1).await,
        Err(AcquireAllError::Config(repeated))
    );
    assert_eq!(whole.available(), 1);
}

/// A key that refuses on its word does not hide the other members' refusals: the answer
/// is the latest `retry_after` of all, and a member that refuses for good is named.
#[tokio::test(start_paused = true)]
async fn a_key_refusing_on_its_word_still_names_the_others_refusals() {
    let keys = per_key(Rate::per_second(2), 1);
    let global = TokenBucket::new(Rate::per_second(1), 1).unwrap();
    all_in_turn((keys.member(&1), &global))
        .unwrap()
        .try_acquire(1)
        .unwrap();
    // The key is out for 500 ms, the global bucket for 1 s.
    let both = all_in_turn((keys.member(&1), &global)).unwrap();
    assert_eq!(
        both.try_acquire(1),
        Err(TryAcquireAllError::Limited {
            retry_after: secs(1)
        })
    );
    // Two permits: the key could give them later, the global bucket never.
    let exceeds = Err(AcquireAllError::Member {
        member: 1,
        error: AcquireError::ExceedsLimit {
            requested: 2,
            limit: 1,
        },
    });
    let keys_of_two = per_key(Rate::per_second(1), 2);
    keys_of_two.try_acquire(&1, 2).unwrap();
    let start = Instant::now();
    let both = all_in_turn((keys_of_two.member(&1), &global)).unwrap();
    assert_eq!(both.acquire(2).await, exceeds);
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!((keys.len(), keys.keys_held_whole()), (1, 0));
}

/// A key's whole limiter handed out by `get_or_insert` or `get` plays the part its `Keyed`'s
/// keys play, so a composite that would have it play the other is refused when made.
#[test]
fn a_key_s_whole_limiter_plays_its_keyed_s_part() {
    let keys = per_key(Rate::per_second(1), 1);
    let global = TokenBucket::new(Rate::per_second(10), 10).unwrap();
    let other = TokenBucket::new(Rate::per_second(10), 10).unwrap();
    all_in_turn((keys.member(&1), &global)).unwrap();
    let whole = keys.get_or_insert(&1).unwrap();
    assert_eq!(
        all((&*whole, &other)).err(),
        Some(ConfigError::LeaderAsFollower { member: 0 })
    );
    let handle = keys.get(&1).unwrap();
    assert_eq!(
        all_in_turn((&other, &*handle)).err(),
        Some(ConfigError::LeaderAsFollower { member: 1 })
    );
}

/// A key that follows is made whole only when the composite joins its line, once the
/// leader would admit it: while the leader waits, the key stays a word.
#[tokio::test(start_paused = true)]
async fn a_key_that_follows_is_made_whole_only_once_the_leader_would_admit() {
    let leader = TokenBucket::new(Rate::per_second(1), 1).unwrap();
    let keys = per_key(Rate::per_second(1), 1);
    leader.try_take(1).unwrap();
    keys.try_acquire(&1, 1).unwrap();
    let both = all_in_turn((&leader, keys.member(&1))).unwrap();
    let mut waiting = pin!(both.acquire(1));
    assert!(futures::poll!(waiting.as_mut()).is_pending());
    assert_eq!((keys.len(), keys.keys_held_whole()), (1, 0));
    tokio::time::advance(ms(999)).await;
    assert!(futures::poll!(waiting.as_mut()).is_pending());
    assert_eq!((keys.len(), keys.keys_held_whole()), (1, 0));
    waiting.await.unwrap();
    assert_eq!(leader.stats().taken, 2);
}
