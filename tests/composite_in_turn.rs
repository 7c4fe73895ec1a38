//! Composites that wait member by member (issue 23): `all_in_turn((&per_host, &global))`
//! waits in the host's line until the host would admit it, and only then in the global
//! line, so a host that is not ready never holds back the others.
//!
//! Every test runs on tokio's paused clock, with instants on whole milliseconds (tokio's
//! timer ticks every millisecond), so each is asserted exactly.

use std::pin::pin;
use std::time::Duration;

mod common;

use common::{ms, secs, yield_until};
use token_bucket::{
    all, all_in_turn, AcquireAllError, AcquireError, ConfigError, FixedWindow, Rate, TokenBucket,
    TryAcquireAllError,
};
use tokio::time::Instant;

fn bucket(rate: Rate, capacity: u64, initial: u64) -> TokenBucket {
    common::bucket_with(rate, capacity, initial)
}

/// How a composite waits, for the tests that run both.
#[derive(Clone, Copy, Debug)]
enum Composite {
    All,
    InTurn,
}

/// Waits for `permits` from `first` and `second` in a composite of kind `kind`.
async fn acquire(
    kind: Composite,
    first: &TokenBucket,
    second: &TokenBucket,
    permits: u64,
) -> Result<(), AcquireAllError> {
    match kind {
        Composite::All => all((first, second))?.acquire(permits).await,
        Composite::InTurn => all_in_turn((first, second))?.acquire(permits).await,
    }
}

/// The crawler of issue 23: 20 URLs, 4 on each of 5 hosts, at most 2 a second per host
/// and 20 a second overall (buckets of capacity 1, so one grant every 500 ms per host and
/// every 50 ms overall), one task per URL, spawned in `order`. Returns each URL's grant
/// instant, by host and URL.
async fn crawl(kind: Composite, order: &[(usize, usize)]) -> Vec<Vec<Duration>> {
    let hosts: Vec<TokenBucket> = (0..5).map(|_| bucket(Rate::per_second(2), 1, 1)).collect();
    let global = bucket(Rate::per_second(20), 1, 1);
    let start = Instant::now();
    let tasks: Vec<_> = order
        .iter()
        .map(|&(host, url)| {
            let (host_bucket, global) = (hosts[host].clone(), global.clone());
            let task = tokio::spawn(async move {
                acquire(kind, &host_bucket, &global, 1).await.unwrap();
                start.elapsed()
            });
            ((host, url), task)
        })
        .collect();
    let mut granted = vec![vec![Duration::ZERO; 4]; 5];
    for ((host, url), task) in tasks {
        granted[host][url] = task.await.unwrap();
    }
    granted
}

fn grouped() -> Vec<(usize, usize)> {
    (0..5)
        .flat_map(|host| (0..4).map(move |url| (host, url)))
        .collect()
}

fn interleaved() -> Vec<(usize, usize)> {
    (0..4)
        .flat_map(|url| (0..5).map(move |host| (host, url)))
        .collect()
}

/// The ideal schedule: host `h`'s `u`-th URL at `h × 50 ms + u × 500 ms`, so one grant
/// every 50 ms overall at most and 500 ms between a host's grants.
fn ideal() -> Vec<Vec<Duration>> {
    (0..5u64)
        .map(|host| (0..4u64).map(|url| ms(host * 50 + url * 500)).collect())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn the_crawler_gets_the_ideal_schedule_with_its_urls_grouped_by_host() {
    assert_eq!(crawl(Composite::InTurn, &grouped()).await, ideal());
}

#[tokio::test(start_paused = true)]
async fn the_crawler_gets_the_ideal_schedule_with_its_urls_interleaved() {
    assert_eq!(crawl(Composite::InTurn, &interleaved()).await, ideal());
}

/// What `all` costs the same crawl, as its docs say: grouped, each host's second URL
/// stands at the head of the global line until its host allows it, and every other host
/// waits behind it (the 7.7 s of issue 23). Interleaved, it matches the ideal.
#[tokio::test(start_paused = true)]
async fn all_holds_the_global_line_for_a_host_that_is_not_ready() {
    assert_eq!(crawl(Composite::All, &interleaved()).await, ideal());
    // Host `h`'s URLs at `h × 1550 ms + u × 500 ms`: one host after another, 7.7 s in
    // all where the ideal takes 1.7 s.
    let one_host_after_another: Vec<Vec<Duration>> = (0..5u64)
        .map(|host| (0..4u64).map(|url| ms(host * 1550 + url * 500)).collect())
        .collect();
    assert_eq!(
        crawl(Composite::All, &grouped()).await,
        one_host_after_another
    );
}

/// First in, first out within the first member's line: a host's requests are granted in
/// the order they came, whatever the global line does.
#[tokio::test(start_paused = true)]
async fn requests_of_one_host_are_granted_in_the_order_they_came() {
    let host = bucket(Rate::per_second(10), 1, 0);
    let global = bucket(Rate::per_second(100), 100, 100);
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..5)
        .map(|index| {
            let (host, global, order) = (host.clone(), global.clone(), order.clone());
            tokio::spawn(async move {
                all_in_turn((&host, &global))?.acquire(1).await?;
                order.lock().unwrap().push((index, Instant::now()));
                Ok::<(), AcquireAllError>(())
            })
        })
        .collect();
    let start = Instant::now();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let order = order.lock().unwrap();
    let indices: Vec<_> = order.iter().map(|(index, _)| *index).collect();
    assert_eq!(indices, [0, 1, 2, 3, 4]);
    let instants: Vec<_> = order.iter().map(|(_, at)| *at - start).collect();
    assert_eq!(instants, [ms(100), ms(200), ms(300), ms(400), ms(500)]);
}

/// Once the first member would admit it, the composite keeps its place there while it
/// waits in the global line: a plain take on that member waits behind it, though the
/// bucket holds its token, and nothing is counted until both admit it at one instant.
#[tokio::test(start_paused = true)]
async fn its_place_in_the_first_line_is_kept_while_it_waits_in_the_next() {
    let host = bucket(Rate::per_second(1), 1, 1);
    let global = bucket(Rate::per_second(1), 1, 0);
    let start = Instant::now();
    let both = all_in_turn((&host, &global)).unwrap();
    let mut waiting = pin!(both.acquire(1));
    assert!(futures::poll!(waiting.as_mut()).is_pending());
    assert_eq!((host.stats().queued, global.stats().queued), (1, 1));
    assert!(host.try_take(1).is_err());
    let mut plain = pin!(host.take(1));
    assert!(futures::poll!(plain.as_mut()).is_pending());
    tokio::time::advance(ms(999)).await;
    assert!(futures::poll!(waiting.as_mut()).is_pending());
    assert_eq!((host.stats().taken, global.stats().taken), (0, 0));
    tokio::time::advance(ms(1)).await;
    waiting.await.unwrap();
    assert_eq!(start.elapsed(), secs(1));
    assert_eq!((host.stats().taken, global.stats().taken), (1, 1));
    // The plain take, behind it, is served when the host's next token comes.
    plain.await.unwrap();
    assert_eq!(start.elapsed(), secs(2));
}

/// A composite whose first member is not ready stands in no other line.
#[tokio::test(start_paused = true)]
async fn it_joins_no_other_line_before_its_first_member_would_admit_it() {
    let host = bucket(Rate::per_second(1), 1, 0);
    let global = bucket(Rate::per_second(1), 1, 1);
    let both = all_in_turn((&host, &global)).unwrap();
    let mut waiting = pin!(both.acquire(1));
    assert!(futures::poll!(waiting.as_mut()).is_pending());
    assert_eq!((host.stats().queued, global.stats().queued), (1, 0));
    // The global bucket serves others meanwhile.
    global.try_take(1).unwrap();
    tokio::time::advance(ms(999)).await;
    assert!(futures::poll!(waiting.as_mut()).is_pending());
    assert_eq!((host.stats().queued, global.stats().queued), (1, 0));
    tokio::time::advance(ms(1)).await;
    waiting.await.unwrap();
    assert_eq!((host.stats().taken, global.stats().taken), (1, 2));
}

/// Dropped in either stage, it gives back every place it holds and counts nothing.
#[tokio::test(start_paused = true)]
async fn dropped_in_either_line_it_gives_back_its_places_and_counts_nothing() {
    let host = bucket(Rate::per_second(1), 1, 0);
    let global = bucket(Rate::per_second(1), 1, 0);
    let both = all_in_turn((&host, &global)).unwrap();
    // In the host's line.
    let mut waiting = Box::pin(both.acquire(1));
    assert!(futures::poll!(waiting.as_mut()).is_pending());
    assert_eq!((host.stats().queued, global.stats().queued), (1, 0));
    drop(waiting);
    assert_eq!((host.stats().queued, global.stats().queued), (0, 0));
    // In the global line, holding the host's.
    tokio::time::advance(secs(1)).await;
    let global_late = bucket(Rate::per_second(1), 1, 0);
    let slow = all_in_turn((&host, &global_late)).unwrap();
    let mut waiting = Box::pin(slow.acquire(1));
    assert!(futures::poll!(waiting.as_mut()).is_pending());
    assert_eq!((host.stats().queued, global_late.stats().queued), (1, 1));
    drop(waiting);
    assert_eq!((host.stats().queued, global_late.stats().queued), (0, 0));
    assert_eq!((host.stats().taken, global_late.stats().taken), (0, 0));
    // The host's token, held for it, is there for the next.
    host.try_take(1).unwrap();
}

/// Leaders and followers: composites with distinct first members and shared later ones,
/// given in either order, all end, each at its exact instant. Every later member is
/// joined at once, in one order for every composite.
#[tokio::test(start_paused = true)]
async fn composites_sharing_later_members_in_either_order_never_deadlock() {
    let hosts: Vec<TokenBucket> = (0..6).map(|_| bucket(Rate::per_second(1), 1, 1)).collect();
    let first = bucket(Rate::per_second(10), 1, 0);
    let second = bucket(Rate::per_second(10), 1, 0);
    let start = Instant::now();
    let tasks: Vec<_> = hosts
        .iter()
        .enumerate()
        .map(|(index, host)| {
            let (host, first, second) = (host.clone(), first.clone(), second.clone());
            tokio::spawn(async move {
                match index % 2 {
                    0 => all_in_turn((&host, &first, &second))?.acquire(1).await?,
                    _ => all_in_turn((&host, &second, &first))?.acquire(1).await?,
                }
                Ok::<Duration, AcquireAllError>(start.elapsed())
            })
        })
        .collect();
    for (index, task) in (1..).zip(tasks) {
        assert_eq!(task.await.unwrap(), Ok(ms(100 * index)), "{index}");
    }
}

/// A limiter keeps the part it is first given: one that leads cannot follow, in either
/// kind of composite, and one that follows cannot lead. Refused when made, with one error
/// type for making and waiting.
#[tokio::test(start_paused = true)]
async fn a_limiter_that_leads_cannot_follow_and_the_refusal_names_it() {
    let host = bucket(Rate::per_second(1), 1, 1);
    let global = bucket(Rate::per_second(1), 1, 1);
    let window = FixedWindow::new(1, secs(1)).unwrap();
    all_in_turn((&host, &global)).unwrap();
    assert_eq!(
        all_in_turn((&global, &host)).err(),
        Some(ConfigError::FollowerAsLeader { member: 0 })
    );
    assert_eq!(
        all((&window, &host)).err(),
        Some(ConfigError::LeaderAsFollower { member: 1 })
    );
    assert_eq!(
        all_in_turn((&window, &global, &host)).err(),
        Some(ConfigError::LeaderAsFollower { member: 2 })
    );
    // A clone is the same limiter, with the same part.
    let global_clone = global.clone();
    assert_eq!(
        all_in_turn((&global_clone, &window)).err(),
        Some(ConfigError::FollowerAsLeader { member: 0 })
    );
    async fn wait(host: &TokenBucket, global: &TokenBucket) -> Result<(), AcquireAllError> {
        all_in_turn((global, host))?.acquire(1).await
    }
    let error = wait(&host, &global).await.unwrap_err();
    assert_eq!(
        error,
        AcquireAllError::Config(ConfigError::FollowerAsLeader { member: 0 })
    );
    assert_eq!(
        error.to_string(),
        "the composite could not be made: member 0 of an all_in_turn composite leads it, \
         but the limiter already follows in other composites (a later member of \
         all_in_turn, or a member of all); a limiter that did both could leave composites \
         waiting for each other forever"
    );
    fn try_both(host: &TokenBucket, global: &TokenBucket) -> Result<(), TryAcquireAllError> {
        all_in_turn((global, host))?.try_acquire(1)
    }
    assert_eq!(
        try_both(&host, &global),
        Err(TryAcquireAllError::Config(ConfigError::FollowerAsLeader {
            member: 0
        }))
    );
    // Nothing was counted by the refused composites.
    assert_eq!((host.available(), global.available()), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn bad_requests_are_refused_at_once_naming_the_member() {
    let host = bucket(Rate::per_second(1), 2, 2);
    let global = bucket(Rate::per_second(1), 10, 10);
    let both = all_in_turn((&host, &global)).unwrap();
    assert_eq!(
        both.acquire(3).await,
        Err(AcquireAllError::Member {
            member: 0,
            error: AcquireError::ExceedsLimit {
                requested: 3,
                limit: 2
            },
        })
    );
    let none: &[TokenBucket] = &[];
    assert_eq!(all_in_turn(none).err(), Some(ConfigError::NoMembers));
    assert_eq!(
        all_in_turn((&host, &host)).err(),
        Some(ConfigError::RepeatedMember {
            first: 0,
            second: 1
        })
    );
    assert_eq!((host.stats().queued, global.stats().queued), (0, 0));
}

/// A later member closed while the composite waits in its line ends the composite with
/// nothing counted anywhere, and the first member's line moves on.
#[tokio::test(start_paused = true)]
async fn a_later_member_closed_while_it_waits_ends_it_with_nothing_counted() {
    let host = bucket(Rate::per_second(1), 1, 1);
    let global = bucket(Rate::per_second(1), 1, 0);
    let start = Instant::now();
    let task = {
        let (host, global) = (host.clone(), global.clone());
        tokio::spawn(async move { all_in_turn((&host, &global))?.acquire(1).await })
    };
    yield_until(|| global.stats().queued == 1).await;
    global.close();
    assert_eq!(
        task.await.unwrap(),
        Err(AcquireAllError::Member {
            member: 1,
            error: AcquireError::Closed
        })
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(host.stats().queued, 0);
    host.try_take(1).unwrap();
}

/// A window limiter leads as a bucket does: the composite waits for its next window
/// before it joins the global line.
#[tokio::test(start_paused = true)]
async fn a_fixed_window_leads_as_a_bucket_does() {
    let window = FixedWindow::new(1, secs(1)).unwrap();
    let global = bucket(Rate::per_second(10), 1, 1);
    window.try_acquire(1).unwrap();
    let start = Instant::now();
    let both = all_in_turn((&window, &global)).unwrap();
    let mut waiting = pin!(both.acquire(1));
    assert!(futures::poll!(waiting.as_mut()).is_pending());
    assert_eq!(global.stats().queued, 0);
    waiting.await.unwrap();
    assert_eq!(start.elapsed(), secs(1));
    assert_eq!((window.available(), global.available()), (0, 0));
}
