//! Composites across independent limiters (issue 14, part 2): `all((&per_user, &global))`
//! takes from every member at one instant, or from none.
//!
//! Every test runs on tokio's paused clock, with instants on whole milliseconds (tokio's
//! timer ticks every millisecond), so each is asserted exactly.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

mod common;

use common::{ms, secs, yield_until};
use token_bucket::{
    all, AcquireAllError, AcquireError, ConfigError, FixedWindow, Keyed, Limiter, Member, Rate,
    SlidingLog, SlidingWindow, TokenBucket, TryAcquireAllError, TryAcquireError,
};
use tokio::time::Instant;

fn bucket(rate: Rate, capacity: u64, initial: u64) -> TokenBucket {
    common::bucket_with(rate, capacity, initial)
}

fn limited(result: Result<(), TryAcquireAllError>) -> Duration {
    match result {
        Err(TryAcquireAllError::Limited { retry_after }) => retry_after,
        other => panic!("expected Limited, got {other:?}"),
    }
}

/// Spawns `all((a, b)).acquire(permits)` on clones of `a` and `b`; the task returns its
/// result and how long after the spawn it ended.
fn spawn_both<A, B>(
    a: &A,
    b: &B,
    permits: u64,
) -> tokio::task::JoinHandle<(Result<(), AcquireAllError>, Duration)>
where
    A: Member + Clone + Send + Sync + 'static,
    B: Member + Clone + Send + Sync + 'static,
{
    let (a, b) = (a.clone(), b.clone());
    let start = Instant::now();
    tokio::spawn(async move {
        let result = all((a, b)).unwrap().acquire(permits).await;
        (result, start.elapsed())
    })
}

#[tokio::test(start_paused = true)]
async fn try_acquire_takes_from_every_member_or_from_none() {
    let user = bucket(Rate::per_second(1), 2, 2);
    let global = bucket(Rate::per_second(10), 10, 3);
    let both = all((&user, &global)).unwrap();
    both.try_acquire(2).unwrap();
    assert_eq!((user.available(), global.available()), (0, 1));
    // The user is out: the global bucket's 1 is not touched, and nothing is counted.
    assert_eq!(limited(both.try_acquire(1)), secs(1));
    assert_eq!((user.available(), global.available()), (0, 1));
    assert_eq!((user.stats().taken, global.stats().taken), (2, 2));
    assert_eq!((user.stats().denied, global.stats().denied), (1, 0));
    // Retry after is the latest: the user has 2 in 2 s, the global 2 in 100 ms.
    assert_eq!(limited(both.try_acquire(2)), secs(2));
    tokio::time::advance(secs(2)).await;
    both.try_acquire(2).unwrap();
    // The global bucket gained 20 in 2 s, held at its capacity of 10.
    assert_eq!((user.available(), global.available()), (0, 8));
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_the_instant_every_member_allows_it() {
    let fast = bucket(Rate::per_second(1_000), 1_000, 0);
    let slow = bucket(Rate::new(3, secs(1)), 3, 0);
    let log = SlidingLog::new(2, secs(5)).unwrap();
    log.try_acquire(2).unwrap();
    tokio::time::advance(ms(1_500)).await;
    let members = (&fast, &slow, &log);
    let three = all(members).unwrap();
    // fast: 1 at 1 ms; slow: 1 at 333,333,334 ns (already held at 1.5 s); the log: at 5 s.
    assert_eq!(limited(three.try_acquire(1)), ms(3_500));
    tokio::time::advance(ms(3_500)).await;
    // At exactly that instant, every member allows it.
    three.try_acquire(1).unwrap();
}

#[tokio::test(start_paused = true)]
async fn acquire_is_granted_at_the_latest_member_s_instant_and_counted_at_once() {
    let user = bucket(Rate::per_second(2), 1, 0);
    let global = bucket(Rate::per_second(1), 1, 0);
    let start = Instant::now();
    let both = all((&user, &global)).unwrap();
    both.acquire(1).await.unwrap();
    // The user had its token at 500 ms, the global at 1 s: granted at 1 s.
    assert_eq!(start.elapsed(), secs(1));
    assert_eq!((user.stats().taken, global.stats().taken), (1, 1));
    assert_eq!((user.available(), global.available()), (0, 0));
}

/// Nothing is taken for a composite before it is granted: while it waits for the global
/// bucket, the user's bucket keeps its token, counted by nobody, capped at its capacity.
#[tokio::test(start_paused = true)]
async fn nothing_is_held_for_a_composite_before_it_is_granted() {
    let user = bucket(Rate::per_second(10), 2, 2);
    let global = bucket(Rate::per_second(1), 1, 0);
    let waiter = spawn_both(&user, &global, 1);
    yield_until(|| user.stats().queued == 1 && global.stats().queued == 1).await;
    tokio::time::advance(ms(900)).await;
    let stats = user.stats();
    assert_eq!((stats.available, stats.taken, stats.queued), (2, 0, 1));
    assert_eq!(global.stats().taken, 0);
    let (result, at) = waiter.await.unwrap();
    result.unwrap();
    assert_eq!(at, secs(1));
    assert_eq!((user.stats().taken, global.stats().taken), (1, 1));
    assert_eq!((user.available(), global.available()), (1, 0));
}

/// A composite keeps its place in every member's line: no later request, plain or
/// composite, passes it in any of them, even one the member could serve at once.
#[tokio::test(start_paused = true)]
async fn a_composite_keeps_its_place_in_every_line() {
    let user = bucket(Rate::per_second(10), 5, 5);
    let global = bucket(Rate::per_second(1), 1, 0);
    let start = Instant::now();
    let composite = spawn_both(&user, &global, 1);
    yield_until(|| user.stats().queued == 1).await;
    // The user's bucket holds 5, but the composite is ahead: a try is refused...
    assert!(matches!(
        user.try_acquire(1),
        Err(TryAcquireError::Limited { .. })
    ));
    // ...a plain take waits behind it, and so does a later composite on the global.
    let plain = common::spawn_acquire(&user, 1);
    let other = TokenBucket::new(Rate::per_second(100), 100).unwrap();
    let later = spawn_both(&global, &other, 1);
    yield_until(|| user.stats().queued == 2 && global.stats().queued == 2).await;
    let (result, at) = composite.await.unwrap();
    result.unwrap();
    assert_eq!(at, secs(1));
    let (result, plain_at) = plain.await.unwrap();
    result.unwrap();
    // Served once the composite left the head, at the same instant.
    assert_eq!(plain_at - start, secs(1));
    let (result, later_at) = later.await.unwrap();
    result.unwrap();
    assert_eq!(later_at, secs(2));
    assert_eq!(user.stats().taken, 2);
    assert_eq!(global.stats().taken, 2);
}

/// Composites over the same members in opposite orders (A+B beside B+A) never deadlock:
/// each joins both lines at once, so they stand in the same order in both, and the
/// `k`-th is granted when both buckets (10/s from empty, room to spare) hold `k` tokens.
#[tokio::test(start_paused = true)]
async fn composites_in_opposite_orders_never_deadlock() {
    let a = bucket(Rate::per_second(10), 100, 0);
    let b = bucket(Rate::per_second(10), 100, 0);
    let tasks: Vec<_> = (0..20)
        .map(|index| match index % 2 {
            0 => spawn_both(&a, &b, 1),
            _ => spawn_both(&b, &a, 1),
        })
        .collect();
    for (index, task) in (1..).zip(tasks) {
        assert_eq!(task.await.unwrap(), (Ok(()), ms(100 * index)), "{index}");
    }
    assert_eq!((a.stats().taken, b.stats().taken), (20, 20));
}

/// A cycle of composites (A+B, B+C, C+A, again and again) never deadlocks either. Each
/// bucket gains one token per 100 ms and stands in two of each round's three: in round
/// `r`, A+B is granted at `(2r + 1) × 100 ms`, when A and B hold their `2r + 1`-th;
/// B+C needs B's next, at `(2r + 2) × 100 ms`, and C+A, behind it in C's line, goes at
/// the same instant, C and A holding theirs by then.
#[tokio::test(start_paused = true)]
async fn a_cycle_of_overlapping_composites_never_deadlocks() {
    let a = bucket(Rate::per_second(10), 100, 0);
    let b = bucket(Rate::per_second(10), 100, 0);
    let c = bucket(Rate::per_second(10), 100, 0);
    let tasks: Vec<_> = (0..30)
        .map(|index| match index % 3 {
            0 => spawn_both(&a, &b, 1),
            1 => spawn_both(&b, &c, 1),
            _ => spawn_both(&c, &a, 1),
        })
        .collect();
    for (index, task) in (0u64..).zip(tasks) {
        let round = index / 3;
        let due = match index % 3 {
            0 => ms((2 * round + 1) * 100),
            _ => ms((2 * round + 2) * 100),
        };
        assert_eq!(task.await.unwrap(), (Ok(()), due), "composite {index}");
    }
    let taken = [a.stats().taken, b.stats().taken, c.stats().taken];
    assert_eq!(taken, [20, 20, 20]);
}

/// Dropping a waiting composite gives back its place in every line and counts nothing;
/// whoever was behind it moves up at once.
#[tokio::test(start_paused = true)]
async fn a_dropped_composite_gives_back_its_places_and_counts_nothing() {
    let user = bucket(Rate::per_second(10), 1, 1);
    let global = bucket(Rate::per_second(1), 1, 0);
    let both = all((&user, &global)).unwrap();
    let start = Instant::now();
    {
        let mut waiting = Box::pin(both.acquire(1));
        assert!(futures::poll!(waiting.as_mut()).is_pending());
        assert_eq!((user.stats().queued, global.stats().queued), (1, 1));
        // A plain take on the user waits behind the composite.
        let mut plain = pin!(user.take(1));
        assert!(futures::poll!(plain.as_mut()).is_pending());
        tokio::time::advance(ms(500)).await;
        assert!(futures::poll!(plain.as_mut()).is_pending());
        // The composite is dropped: the plain take is served at once.
        drop(waiting);
        plain.await.unwrap();
        assert_eq!(start.elapsed(), ms(500));
    }
    assert_eq!((user.stats().queued, global.stats().queued), (0, 0));
    assert_eq!((user.stats().taken, global.stats().taken), (1, 0));
    // The global bucket kept what it accrued: nothing was taken from it.
    tokio::time::advance(ms(500)).await;
    assert_eq!(global.available(), 1);
}

/// A composite waiting on a window member, dropped, gives back its place in the window's
/// line and in the bucket's and counts nothing in either: the plain waiter behind it in
/// the window's line takes the next window it would have filled, at its first instant,
/// and the bucket, whose line it held, serves a plain try at once.
#[tokio::test(start_paused = true)]
async fn a_composite_dropped_while_it_waits_on_a_window_gives_back_its_places() {
    let bucket = bucket(Rate::per_second(10), 5, 5);
    let window = FixedWindow::new(2, secs(1)).unwrap();
    window.try_acquire(2).unwrap();
    let both = all((&bucket, &window)).unwrap();
    let start = Instant::now();
    let mut waiting = Box::pin(both.acquire(2));
    assert!(futures::poll!(waiting.as_mut()).is_pending());
    let plain = common::spawn_acquire(&window, 2);
    yield_until(|| window.queued_permits() == 4).await;
    tokio::time::advance(ms(600)).await;
    assert!(futures::poll!(waiting.as_mut()).is_pending());
    // At the head of the bucket's line, the composite holds it though the bucket has 5.
    assert!(bucket.try_take(1).is_err());
    drop(waiting);
    assert_eq!(bucket.stats().queued, 0);
    bucket.try_take(1).unwrap();
    let stats = bucket.stats();
    assert_eq!((stats.taken, stats.available), (1, 4));
    let plain = tokio::time::timeout(secs(2), plain).await;
    let (result, at) = plain
        .expect("the waiter behind it never got the line")
        .unwrap();
    result.unwrap();
    assert_eq!(at - start, secs(1));
    // The window counted the plain waiter's 2 in its second window, and nothing else.
    assert_eq!((window.available(), window.queued_permits()), (0, 0));
    assert_eq!(bucket.stats().taken, 1);
}

/// The cost of holding lines: a composite at the head of the user's line holds it while
/// it waits for the global bucket, so the user's other requests wait with it.
#[tokio::test(start_paused = true)]
async fn a_composite_at_the_head_holds_the_line_while_it_waits_for_another_member() {
    let user = bucket(Rate::per_second(100), 100, 100);
    let global = bucket(Rate::per_second(1), 1, 0);
    let start = Instant::now();
    let composite = spawn_both(&user, &global, 1);
    yield_until(|| user.stats().queued == 1).await;
    // Ten plain takes from the same user, each of which the bucket could serve at once.
    let plain: Vec<_> = (0..10).map(|_| common::spawn_acquire(&user, 1)).collect();
    for task in plain {
        let (result, at) = task.await.unwrap();
        result.unwrap();
        // Each waited the global bucket's full second: the price of the composite's place.
        assert_eq!(at - start, secs(1));
    }
    composite.await.unwrap().0.unwrap();
    // Meanwhile the user's bucket stayed at its capacity: nothing accrued past it.
    assert_eq!(user.stats().taken, 11);
    assert_eq!(user.available(), 89);
}

#[tokio::test(start_paused = true)]
async fn bad_requests_are_refused_naming_the_member() {
    let small = TokenBucket::new(Rate::per_second(1), 2).unwrap();
    let large = TokenBucket::new(Rate::per_second(1), 10).unwrap();
    let both = all((&large, &small)).unwrap();
    let exceeds = TryAcquireError::ExceedsLimit {
        requested: 3,
        limit: 2,
    };
    assert_eq!(
        both.try_acquire(3),
        Err(TryAcquireAllError::Member {
            member: 1,
            error: exceeds
        })
    );
    assert_eq!(
        both.acquire(3).await,
        Err(AcquireAllError::Member {
            member: 1,
            error: AcquireError::ExceedsLimit {
                requested: 3,
                limit: 2
            }
        })
    );
    assert_eq!(
        both.try_acquire(3).unwrap_err().to_string(),
        "member 1 of the composite: requested 3 permits but the limiter admits at most 2 at once"
    );
    small.close();
    assert_eq!(
        both.try_acquire(1),
        Err(TryAcquireAllError::Member {
            member: 1,
            error: TryAcquireError::Closed
        })
    );
    assert_eq!(
        both.acquire(1).await,
        Err(AcquireAllError::Member {
            member: 1,
            error: AcquireError::Closed
        })
    );
    // Nothing was taken from the open member.
    assert_eq!(large.stats().taken, 0);
    // Window limiters name their limit too, whichever way they are asked.
    let log = SlidingLog::new(3, secs(1)).unwrap();
    let window = FixedWindow::new(2, secs(1)).unwrap();
    let windows = all((&large, &log, &window)).unwrap();
    let above = |limit| TryAcquireError::ExceedsLimit {
        requested: 4,
        limit,
    };
    assert_eq!(
        windows.try_acquire(4),
        Err(TryAcquireAllError::Member {
            member: 1,
            error: above(3)
        })
    );
    assert_eq!(
        all((&window, &large)).unwrap().try_acquire(4),
        Err(TryAcquireAllError::Member {
            member: 0,
            error: above(2)
        })
    );
    assert_eq!(
        windows.acquire(4).await,
        Err(AcquireAllError::Member {
            member: 1,
            error: AcquireError::ExceedsLimit {
                requested: 4,
                limit: 3
            }
        })
    );
    assert_eq!((log.available(), window.available()), (3, 2));
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_is_refused_at_once_and_joins_no_line() {
    let bounded = TokenBucket::builder()
        .rate(Rate::per_second(1))
        .capacity(1)
        .initial(0)
        .queue_limit(1)
        .build()
        .unwrap();
    let other = TokenBucket::new(Rate::per_second(1), 1).unwrap();
    let _queued = common::spawn_acquire(&bounded, 1);
    yield_until(|| bounded.stats().queued == 1).await;
    assert_eq!(
        all((&other, &bounded)).unwrap().acquire(1).await,
        Err(AcquireAllError::Member {
            member: 1,
            error: AcquireError::QueueFull {
                queued: 1,
                limit: 1
            }
        })
    );
    assert_eq!(other.stats().queued, 0);
    assert_eq!(other.available(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_member_closed_while_the_composite_waits_ends_it_with_nothing_counted() {
    let user = bucket(Rate::per_second(10), 1, 1);
    let global = bucket(Rate::per_second(1), 1, 0);
    let waiter = spawn_both(&user, &global, 1);
    yield_until(|| global.stats().queued == 1).await;
    tokio::time::advance(ms(300)).await;
    global.close();
    let (result, at) = waiter.await.unwrap();
    assert_eq!(
        result,
        Err(AcquireAllError::Member {
            member: 1,
            error: AcquireError::Closed
        })
    );
    assert_eq!(at, ms(300));
    assert_eq!((user.stats().queued, user.stats().taken), (0, 0));
    user.try_acquire(1).unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_capacity_lowered_below_the_request_ends_the_composite() {
    let user = bucket(Rate::per_second(10), 5, 0);
    let global = bucket(Rate::per_second(10), 5, 5);
    let waiter = spawn_both(&user, &global, 4);
    yield_until(|| user.stats().queued == 1).await;
    user.set_capacity(3).unwrap();
    let (result, _) = waiter.await.unwrap();
    assert_eq!(
        result,
        Err(AcquireAllError::Member {
            member: 0,
            error: AcquireError::ExceedsLimit {
                requested: 4,
                limit: 3
            }
        })
    );
    assert_eq!(global.stats().taken, 0);
}

/// A rate raised on a bucket member wakes the composite waiting on it: it is admitted
/// at the timer's tick after the new rate fills the bucket, not at the old rate's instant.
#[tokio::test(start_paused = true)]
async fn a_rate_raised_on_a_member_wakes_the_waiting_composite() {
    let slow = bucket(Rate::per_second(1), 1, 0);
    let other = bucket(Rate::per_second(10), 10, 10);
    let waiter = spawn_both(&slow, &other, 1);
    yield_until(|| slow.stats().queued == 1).await;
    tokio::time::advance(ms(100)).await;
    slow.set_rate(Rate::per_second(1_000)).unwrap();
    // 0.1 token accrued at 1 a second; the missing 0.9 comes at 1,000 a second in
    // 0.9 ms, at 100.9 ms, seen at the timer's tick of 101 ms (at 1 s before the fix).
    let (result, at) = waiter.await.unwrap();
    result.unwrap();
    assert_eq!(at, ms(101));
    assert_eq!((slow.stats().taken, other.stats().taken), (1, 1));
}

/// A grant dropped unseen on a bucket member gives its tokens back, and so wakes the
/// composite waiting behind it, as a refund does.
#[tokio::test(start_paused = true)]
async fn a_grant_dropped_unseen_on_a_member_wakes_the_waiting_composite() {
    let slow = bucket(Rate::per_second(1), 5, 0);
    let other = bucket(Rate::per_second(10), 10, 10);
    let mut unseen = tokio_test::task::spawn(slow.take(1));
    tokio_test::assert_pending!(unseen.poll());
    let waiter = spawn_both(&slow, &other, 1);
    yield_until(|| slow.stats().queued == 2).await;
    // The take is granted at 1 s, unseen; the composite, now at the head, needs 1 s more.
    tokio::time::advance(secs(1)).await;
    yield_until(|| slow.stats().queued == 1).await;
    tokio::time::advance(ms(500)).await;
    // Never made, the grant leaves 1.5 tokens: the composite is admitted now, not at 2 s.
    drop(unseen);
    let (result, at) = waiter.await.unwrap();
    result.unwrap();
    assert_eq!(at, ms(1_500));
    assert_eq!((slow.stats().taken, other.stats().taken), (1, 1));
}

#[test]
fn the_same_limiter_twice_or_none_at_all_is_refused() {
    let bucket = TokenBucket::new(Rate::per_second(1), 1).unwrap();
    let other = TokenBucket::new(Rate::per_second(1), 1).unwrap();
    assert_eq!(
        all((&other, &bucket, bucket.clone())).err(),
        Some(ConfigError::RepeatedMember {
            first: 1,
            second: 2
        })
    );
    let none: Vec<TokenBucket> = Vec::new();
    assert_eq!(all(none).err(), Some(ConfigError::NoMembers));
    assert_eq!(
        ConfigError::RepeatedMember {
            first: 1,
            second: 2
        }
        .to_string(),
        "members 1 and 2 of a composite are the same limiter"
    );
}

#[test]
fn waiting_outside_a_runtime_is_refused() {
    let user = TokenBucket::new(Rate::per_second(1), 1).unwrap();
    let global = bucket(Rate::per_second(1), 1, 0);
    let both = all((&user, &global)).unwrap();
    assert_eq!(
        futures::executor::block_on(both.acquire(1)),
        Err(AcquireAllError::NoRuntime)
    );
    assert_eq!((user.stats().queued, global.stats().queued), (0, 0));
}

/// One key of a `Keyed` is a member: the key is not forgotten while a composite waits in
/// its line, even when its bucket is full again.
#[tokio::test(start_paused = true)]
async fn a_key_held_by_a_waiting_composite_is_not_forgotten() {
    let per_ip: Keyed<u32, TokenBucket> =
        Keyed::new(TokenBucket::new(Rate::per_second(10), 1).unwrap());
    let global = bucket(Rate::per_second(1), 1, 0);
    let key: Arc<TokenBucket> = per_ip.get_or_insert(&7).unwrap();
    let waiter = {
        let global = global.clone();
        tokio::spawn(async move { all((key, &global)).unwrap().acquire(1).await })
    };
    yield_until(|| global.stats().queued == 1).await;
    tokio::time::advance(ms(500)).await;
    // Full, yet held in line: not idle, and not forgotten.
    assert_eq!(per_ip.retain_recent(), 0);
    assert_eq!(per_ip.len(), 1);
    waiter.await.unwrap().unwrap();
    assert_eq!(per_ip.get(&7).map(|bucket| bucket.available()), Some(0));
}

#[tokio::test(start_paused = true)]
async fn a_sliding_log_member_admits_at_the_instant_its_oldest_grant_leaves() {
    let bucket = bucket(Rate::per_second(10), 10, 10);
    let log = SlidingLog::new(2, secs(1)).unwrap();
    let both = all((&bucket, &log)).unwrap();
    let start = Instant::now();
    for _ in 0..6 {
        both.acquire(1).await.unwrap();
    }
    // Two at 0, two at 1 s, two at 2 s.
    assert_eq!(start.elapsed(), secs(2));
    assert_eq!(bucket.stats().taken, 6);
    // A plain acquire on the log behind a waiting composite waits its turn.
    let waiting = {
        let (bucket, log) = (bucket.clone(), log.clone());
        tokio::spawn(async move { all((&bucket, &log)).unwrap().acquire(1).await })
    };
    yield_until(|| log.queued_permits() == 1).await;
    assert!(matches!(
        log.try_acquire(1),
        Err(TryAcquireError::Limited { .. })
    ));
    waiting.await.unwrap().unwrap();
    assert_eq!(start.elapsed(), secs(3));
}

#[tokio::test(start_paused = true)]
async fn zero_permits_are_admitted_at_once() {
    let user = bucket(Rate::per_second(1), 1, 0);
    let log = SlidingLog::new(1, secs(1)).unwrap();
    log.try_acquire(1).unwrap();
    let both = all((&user, &log)).unwrap();
    both.try_acquire(0).unwrap();
    let mut zero = pin!(both.acquire(0));
    assert_eq!(futures::poll!(zero.as_mut()), Poll::Ready(Ok(())));
}

/// A composite's future is `Send`, so it can be spawned on a multi-threaded runtime.
#[test]
fn the_future_is_send() {
    fn send<F: Future + Send>(_: F) {}
    let a = TokenBucket::new(Rate::per_second(1), 1).unwrap();
    let b = SlidingLog::new(1, secs(1)).unwrap();
    let both = all((&a, &b)).unwrap();
    send(both.acquire(1));
}

#[tokio::test(start_paused = true)]
async fn a_fixed_window_member_admits_in_the_next_window_and_keeps_its_line() {
    let bucket = bucket(Rate::per_second(100), 100, 100);
    let window = FixedWindow::new(2, secs(1)).unwrap();
    window.try_acquire(2).unwrap();
    let start = Instant::now();
    let composite = spawn_both(&bucket, &window, 2);
    yield_until(|| window.queued_permits() == 2).await;
    // Behind the composite: a plain acquire on the window waits for the window after.
    let plain = common::spawn_acquire(&window, 1);
    yield_until(|| window.queued_permits() == 3).await;
    assert_eq!(composite.await.unwrap(), (Ok(()), secs(1)));
    let (result, at) = plain.await.unwrap();
    result.unwrap();
    assert_eq!(at - start, secs(2));
    assert_eq!(bucket.stats().taken, 2);
}

/// Runs `decide` on a thread of its own inside this runtime (its clock, paused or not),
/// so that a deadlock fails the test after `patience` rather than hanging it. It ends
/// the whole test process then: unwinding would drop limiters whose locks the
/// deadlocked thread holds, and hang there.
fn on_a_thread<T: Send + 'static>(
    patience: Duration,
    decide: impl FnOnce() -> T + Send + 'static,
) -> T {
    let runtime = tokio::runtime::Handle::current();
    let (answer, answered) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _inside = runtime.enter();
        let _ = answer.send(decide());
    });
    match answered.recv_timeout(patience) {
        Ok(answer) => answer,
        Err(_) => {
            eprintln!("no answer in {patience:?}: deadlocked");
            std::process::exit(101);
        }
    }
}

/// A composite's try over a fixed window with a waiter in its line is refused at once,
/// with the wait behind that waiter. It once deadlocked: the window's line is locked
/// while the composite decides, and the refusal's `retry_after` locked it again to walk
/// the line. `acquire` tries first, so it hung the same way.
#[tokio::test(start_paused = true)]
async fn a_composite_over_a_fixed_window_with_a_waiter_in_line_is_refused_at_once() {
    let bucket = bucket(Rate::per_second(10), 10, 10);
    let window = FixedWindow::new(2, secs(1)).unwrap();
    window.try_acquire(2).unwrap();
    let start = Instant::now();
    let waiter = common::spawn_acquire(&window, 2);
    yield_until(|| window.queued_permits() == 2).await;
    tokio::time::advance(ms(250)).await;
    let (members, patience) = ((bucket.clone(), window.clone()), secs(10));
    let refused = on_a_thread(patience, move || all(members).unwrap().try_acquire(1));
    // The waiter fills the next window (from 1 s); one more fits in the one after, at 2 s.
    assert_eq!(limited(refused), ms(1_750));
    let composite = spawn_both(&bucket, &window, 1);
    let (result, at) = waiter.await.unwrap();
    result.unwrap();
    common::assert_at(start, at, secs(1));
    assert_eq!(composite.await.unwrap(), (Ok(()), ms(1_750)));
    assert_eq!(bucket.stats().taken, 1);
}

/// Real threads: composites over two fixed windows race plain `try_acquire`s on each.
/// Windows of an hour never turn over, so every permit stays counted: each window's
/// count is exactly its plain admissions plus the composite's, and neither passes its
/// limit. A composite counted in one window and not the other, or a plain try slipping
/// in between a composite's check and its record, would break the sums or the limit.
#[test]
fn composites_and_lock_free_tries_race_without_breaking_all_or_nothing() {
    const LIMIT: u64 = 3_000;
    let first = FixedWindow::new(LIMIT, secs(3_600)).unwrap();
    let second = FixedWindow::new(LIMIT, secs(3_600)).unwrap();
    let composite = AtomicU64::new(0);
    let plain = [AtomicU64::new(0), AtomicU64::new(0)];
    std::thread::scope(|scope| {
        for thread in 0..4 {
            let (first, second) = (&first, &second);
            let (composite, plain) = (&composite, &plain);
            scope.spawn(move || {
                let both = all((first, second)).unwrap();
                for call in 0..2_000u64 {
                    match (thread + call) % 3 {
                        0 => {
                            if both.try_acquire(1).is_ok() {
                                composite.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        side => {
                            let window = if side == 1 { first } else { second };
                            if window.try_acquire(1).is_ok() {
                                plain[side as usize - 1].fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
            });
        }
    });
    let composite = composite.into_inner();
    let [plain_first, plain_second] = plain.map(AtomicU64::into_inner);
    assert!(composite > 0, "no composite was admitted");
    assert_eq!(first.available(), LIMIT - composite - plain_first);
    assert_eq!(second.available(), LIMIT - composite - plain_second);
}

/// Real threads: a composite's tries over a fixed window race a plain `acquire` on it,
/// which queues whenever a try holds the window and is then admitted as the head of its
/// line while the next try holds it. Both keep the books: the window's count is exactly
/// the plain admissions plus the composite's, and nothing panics (a head admitted while
/// a composite's try held the word once tripped a debug assertion).
#[test]
fn a_plain_acquire_admitted_as_head_while_a_composite_tries_keeps_the_books() {
    const LIMIT: u64 = 1_000_000_000;
    const ACQUIRES: u64 = 200_000;
    let window = FixedWindow::new(LIMIT, secs(3_600)).unwrap();
    let bucket = TokenBucket::new(Rate::per_second(LIMIT), LIMIT).unwrap();
    let (stop, composite) = (AtomicBool::new(false), AtomicU64::new(0));
    std::thread::scope(|scope| {
        let (window, bucket, stop, composite) = (&window, &bucket, &stop, &composite);
        scope.spawn(move || {
            let both = all((window, bucket)).unwrap();
            while !stop.load(Ordering::Relaxed) {
                if both.try_acquire(1).is_ok() {
                    composite.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        // Stops the tries however this thread ends, a panic included.
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop = StopOnDrop(stop);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            for _ in 0..ACQUIRES {
                window.acquire(1).await.unwrap();
            }
        });
    });
    let composite = composite.into_inner();
    assert_eq!(window.available(), LIMIT - ACQUIRES - composite);
    assert_eq!(bucket.stats().taken, composite);
}

/// A composite waits behind a plain waiter in a full window's line (full for the hour).
/// A bucket member closed, or lowered below the request, ends the wait at that instant
/// with the member's error, not once the window's line lets the composite through; its
/// place in the window's line goes back, and the plain waiter is served as before.
#[tokio::test(start_paused = true)]
async fn a_bucket_refusing_while_the_composite_waits_in_a_windows_line_ends_it_at_once() {
    for close in [true, false] {
        let bucket = bucket(Rate::per_second(10), 10, 10);
        let window = FixedWindow::new(2, secs(3_600)).unwrap();
        window.try_acquire(2).unwrap();
        let start = Instant::now();
        let plain = common::spawn_acquire(&window, 1);
        yield_until(|| window.queued_permits() == 1).await;
        let composite = spawn_both(&bucket, &window, 2);
        yield_until(|| window.queued_permits() == 3).await;
        tokio::time::advance(ms(10)).await;
        let error = if close {
            bucket.close();
            AcquireError::Closed
        } else {
            bucket.set_capacity(1).unwrap();
            AcquireError::ExceedsLimit {
                requested: 2,
                limit: 1,
            }
        };
        let ended = Err(AcquireAllError::Member { member: 0, error });
        assert_eq!(composite.await.unwrap(), (ended, ms(10)), "close: {close}");
        assert_eq!(window.queued_permits(), 1, "close: {close}");
        let (result, at) = plain.await.unwrap();
        result.unwrap();
        common::assert_at(start, at, secs(3_600));
    }
}

/// A bucket of 10,000 a second holding at most 1 gains a token every 100 µs, ten in each
/// of the timer's 1 ms ticks. 100 composites over it and a roomy bucket, queued at once,
/// get its rate, as 100 plain takes do: each is granted as of the instant the bucket held
/// its token (the n-th at n × 100 µs), not the later tick its task woke at, so a late
/// wake-up costs the bucket nothing it would have gained meanwhile. Each is seen at the
/// tick of its token, ten a millisecond. (Granted at their wake-ups, the bucket lay full
/// through each tick: one composite a millisecond, 100 ms for 100.)
#[tokio::test(start_paused = true)]
async fn composites_over_a_bucket_faster_than_the_timer_keep_its_rate() {
    let fast = || bucket(Rate::per_second(10_000), 1, 0);
    let (plain, composed) = (fast(), fast());
    let roomy = bucket(Rate::per_second(1_000_000), 1_000_000, 1_000_000);
    let start = Instant::now();
    let plains: Vec<_> = (0..100).map(|_| common::spawn_acquire(&plain, 1)).collect();
    let composites: Vec<_> = (0..100).map(|_| spawn_both(&composed, &roomy, 1)).collect();
    for (nth, (plain, composite)) in (1u64..).zip(plains.into_iter().zip(composites)) {
        // The n-th token's tick: n × 100 µs, rounded up to the millisecond.
        let tick = ms(nth.div_ceil(10));
        let (result, at) = plain.await.unwrap();
        assert_eq!((result, at - start), (Ok(()), tick), "plain take {nth}");
        assert_eq!(composite.await.unwrap(), (Ok(()), tick), "composite {nth}");
    }
    assert_eq!(roomy.stats().taken, 100);
    assert_eq!(composed.stats().taken, 100);
}

/// A composite's hold that reaches a bucket's head because the hold ahead left unserved
/// (its composite dropped) is granted as of that instant at the earliest, not back to
/// when the one ahead reached the head. `b` holds 1 of capacity 1 at 1/s. Composite A
/// over `b` and an empty hourly bucket heads `b`'s line from 0; composite B over `b` and
/// a roomy bucket queues behind it at 5 s. A is dropped at 10 s, and B is granted then,
/// as a plain take behind a dropped plain waiter would be: `b` holds 0 at 10 s, and a
/// `try_take(1)` is refused. (The ledgers kept for A once served B as of 5 s: `b` had
/// refilled by 10 s, and granted twice at one instant from a capacity of 1.)
#[tokio::test(start_paused = true)]
async fn a_hold_that_reaches_the_head_after_a_dropped_hold_is_not_granted_before_it() {
    let start = Instant::now();
    let b = bucket(Rate::per_second(1), 1, 1);
    let slow = bucket(Rate::per_hour(1), 1, 0);
    let roomy = bucket(Rate::per_second(1_000), 1_000, 1_000);

    let first = {
        let (b, slow) = (b.clone(), slow.clone());
        tokio::spawn(async move {
            tokio::time::timeout(secs(10), all((b, slow)).unwrap().acquire(1)).await
        })
    };
    yield_until(|| b.stats().queued == 1).await;
    tokio::time::sleep(secs(5)).await;
    let second = {
        let (b, roomy) = (b.clone(), roomy.clone());
        tokio::spawn(async move {
            let result = all((b, roomy)).unwrap().acquire(1).await;
            (result, Instant::now())
        })
    };
    yield_until(|| b.stats().queued == 2).await;

    assert!(first.await.unwrap().is_err(), "the first times out at 10 s");
    let (result, at) = second.await.unwrap();
    assert_eq!((result.is_ok(), at - start), (true, secs(10)));
    // b's token went to the second composite at 10 s: none is left at 10 s.
    assert_eq!(Instant::now() - start, secs(10));
    assert_eq!(b.available(), 0, "b refilled as if granted before 10 s");
    assert!(
        b.try_take(1).is_err(),
        "a second grant at 10 s from capacity 1"
    );
}

/// A time wheel is a member like the others: 2 permits per 4 slots of 250 ms. A permit
/// holds requests back until the end of the slot a window after its own. Two are
/// admitted at 0 (slot 0); the third waits until slot 4 ends, at 1.25 s, and a plain
/// acquire on the wheel behind it waits its turn after.
#[tokio::test(start_paused = true)]
async fn a_sliding_window_member_waits_for_its_slot_to_turn() {
    let bucket = bucket(Rate::per_second(10), 10, 10);
    let wheel = SlidingWindow::new(2, 4, ms(250)).unwrap();
    let both = all((&wheel, &bucket)).unwrap();
    let start = Instant::now();
    both.try_acquire(2).unwrap();
    let composite = spawn_both(&wheel, &bucket, 1);
    yield_until(|| wheel.queued_permits() == 1).await;
    let plain = common::spawn_acquire(&wheel, 2);
    yield_until(|| wheel.queued_permits() == 3).await;
    assert_eq!(composite.await.unwrap(), (Ok(()), ms(1_250)));
    let (result, at) = plain.await.unwrap();
    result.unwrap();
    // The composite's permit, admitted in slot 5, holds back until slot 9 ends: the
    // plain request's 2 fit only then, at 2.5 s.
    assert_eq!(at - start, ms(2_500));
    assert_eq!(bucket.stats().taken, 3);
}

/// 30 composites over a bucket of 10,000 a second holding at most 1 (and a roomy one),
/// queued at 0; the clock is moved 500 µs, where `try_take(0)` is called on the bucket if
/// `zero`; returns when each composite was seen. The n-th is due at n × 100 µs, and after
/// the 500 µs step the timer's ticks fall at 1.5, 2.5 and 3.5 ms.
async fn composites_seen_around_a_try_of_nothing(zero: bool) -> Vec<Duration> {
    let fast = bucket(Rate::per_second(10_000), 1, 0);
    let roomy = bucket(Rate::per_second(1_000_000), 1_000_000, 1_000_000);
    let composites: Vec<_> = (0..30).map(|_| spawn_both(&fast, &roomy, 1)).collect();
    yield_until(|| fast.stats().queued == 30).await;
    tokio::time::advance(Duration::from_micros(500)).await;
    if zero {
        fast.try_take(0).unwrap();
    }
    let mut seen = Vec::new();
    for composite in composites {
        let (result, at) = composite.await.unwrap();
        result.unwrap();
        seen.push(at);
    }
    assert_eq!(fast.stats().taken, 30);
    seen
}

/// The n-th composite's tick: the first of 1.5, 2.5, 3.5 ms at or after n × 100 µs.
fn ticks_of_composites_due_every_100_us() -> Vec<Duration> {
    (1u64..=30)
        .map(|nth| {
            let after_step = (nth * 100).saturating_sub(500);
            Duration::from_micros((after_step.div_ceil(1_000) * 1_000 + 500).max(1_500))
        })
        .collect()
}

/// Each composite is granted as of the instant the bucket held its token (n × 100 µs),
/// so 15 are seen at the 1.5 ms tick, 10 at 2.5 ms, 5 at 3.5 ms.
#[tokio::test(start_paused = true)]
async fn composites_faster_than_the_timer_are_seen_at_the_tick_after_their_token() {
    let seen = composites_seen_around_a_try_of_nothing(false).await;
    assert_eq!(seen, ticks_of_composites_due_every_100_us());
}

/// The same with a `try_take(0)` on the bucket at 500 µs, while the first composite's hold
/// heads its line. It takes nothing, so it moves no grant: the same ticks. (Once, taking
/// zero tokens forgot the ledgers kept as the hold reached the head: they were kept again
/// at 500 µs, and 11 composites were seen by the 1.5 ms tick instead of 15.)
#[tokio::test(start_paused = true)]
async fn a_try_take_of_nothing_does_not_push_back_composites_granted_as_of_earlier() {
    let seen = composites_seen_around_a_try_of_nothing(true).await;
    assert_eq!(seen, ticks_of_composites_due_every_100_us());
}
