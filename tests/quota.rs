//! What every limiter reports for the `RateLimit` header fields (issue 22, item 4): its
//! [`Policy`], and with each decision its [`Quota`], exact to the nanosecond on paused
//! time. For each kind: fresh, after partial use, spent and refused (with its
//! `retry_after`), several limits, a fractional refill, a simulated year, window edges and
//! waiters in line; and `Keyed`'s.

mod common;

use std::time::Duration;

use common::{ms, ns, secs, spawn_acquire, yield_until};
use token_bucket::{
    Decision, FixedWindow, Keyed, Limiter, Policy, Quota, Rate, SlidingLog, SlidingWindow,
    TokenBucket, TryAcquireError,
};
use tokio::time::advance;

fn quota(remaining: u64, full_after: Duration) -> Option<Quota> {
    Some(Quota {
        remaining,
        full_after,
    })
}

fn admitted(remaining: u64, full_after: Duration) -> Decision {
    Decision {
        result: Ok(()),
        quota: quota(remaining, full_after),
    }
}

fn refused(error: TryAcquireError, remaining: u64, full_after: Duration) -> Decision {
    Decision {
        result: Err(error),
        quota: quota(remaining, full_after),
    }
}

fn limited(retry_after: Duration) -> TryAcquireError {
    TryAcquireError::Limited { retry_after }
}

fn exceeds(requested: u64, limit: u64) -> TryAcquireError {
    TryAcquireError::ExceedsLimit { requested, limit }
}

fn policy(limit: u64, window: Duration) -> Option<Policy> {
    Some(Policy { limit, window })
}

/// Asserts that `limiter` shows `expected` both ways that count nothing: `quota()` and
/// a decision of zero permits.
#[track_caller]
fn assert_quota(limiter: &impl Limiter, expected: Option<Quota>) {
    assert_eq!(limiter.quota(), expected, "quota()");
    let decision = limiter.try_acquire_decision(0);
    assert_eq!(
        (decision.result, decision.quota),
        (Ok(()), expected),
        "a decision of 0"
    );
}

// ----- TokenBucket ---------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_bucket_reports_what_is_left_and_when_it_is_full_exactly() {
    let bucket = TokenBucket::new(Rate::per_second(10), 10).unwrap();
    assert_eq!(bucket.policy(), policy(10, secs(1)));
    assert_quota(&bucket, quota(10, Duration::ZERO));
    assert_eq!(bucket.try_acquire_decision(4), admitted(6, ms(400)));
    assert_quota(&bucket, quota(6, ms(400)));
    // 7.5 tokens: the half dropped from `remaining`, counted in `full_after`.
    advance(ms(150)).await;
    assert_quota(&bucket, quota(7, ms(250)));
    assert_eq!(bucket.try_acquire_decision(7), admitted(0, ms(950)));
    // Spent: refused, with the quota it leaves untouched.
    assert_eq!(
        bucket.try_acquire_decision(1),
        refused(limited(ms(50)), 0, ms(950))
    );
    assert_eq!(
        bucket.try_acquire_decision(11),
        refused(exceeds(11, 10), 0, ms(950))
    );
    assert_eq!(
        bucket.stats().denied,
        2,
        "refusals count as try_acquire's do"
    );
    advance(ms(950) - ns(1)).await;
    assert_quota(&bucket, quota(9, ns(1)));
    advance(ns(1)).await;
    assert_quota(&bucket, quota(10, Duration::ZERO));
    advance(secs(5)).await;
    assert_quota(&bucket, quota(10, Duration::ZERO));
}

#[tokio::test(start_paused = true)]
async fn a_fractional_refill_is_rounded_up_to_the_nanosecond_never_short() {
    // A token every 333,333,333⅓ ns.
    let bucket = TokenBucket::new(Rate::per_second(3), 3).unwrap();
    assert_eq!(bucket.policy(), policy(3, secs(1)));
    assert_eq!(bucket.try_acquire_decision(1), admitted(2, ns(333_333_334)));
    advance(ns(333_333_333)).await;
    // A third of a nanosecond's worth missing: still one nanosecond, never zero.
    assert_quota(&bucket, quota(2, ns(1)));
    advance(ns(1)).await;
    assert_quota(&bucket, quota(3, Duration::ZERO));
    assert_eq!(bucket.try_acquire_decision(3), admitted(0, secs(1)));
    advance(ns(1)).await;
    assert_quota(&bucket, quota(0, ns(999_999_999)));

    // A policy's window is the time to fill from empty, rounded up too.
    let two = TokenBucket::new(Rate::per_second(3), 2).unwrap();
    assert_eq!(two.policy(), policy(2, ns(666_666_667)));
    let odd = TokenBucket::new(Rate::new(7, ns(999_999_937)), 1).unwrap();
    assert_eq!(odd.policy(), policy(1, ns(142_857_134)));
    let slow = TokenBucket::new(Rate::per_second(1), 60).unwrap();
    assert_eq!(slow.policy(), policy(60, secs(60)));
}

#[tokio::test(start_paused = true)]
async fn several_limits_report_the_least_left_and_the_latest_full() {
    let bucket = TokenBucket::builder()
        .rate(Rate::per_second(10))
        .capacity(10)
        .limit(Rate::per_hour(1_000), 1_000)
        .build()
        .unwrap();
    // The first limit's policy is the bucket's; each is in `policies`.
    assert_eq!(bucket.policy(), policy(10, secs(1)));
    assert_eq!(
        bucket.policies(),
        [
            Policy {
                limit: 10,
                window: secs(1)
            },
            Policy {
                limit: 1_000,
                window: secs(3_600)
            }
        ]
    );
    assert_quota(&bucket, quota(10, Duration::ZERO));
    // 4 of 1,000 an hour come back in 14.4 s; 4 of 10 a second in 400 ms.
    assert_eq!(bucket.try_acquire_decision(4), admitted(6, ms(14_400)));
    advance(ms(400)).await;
    assert_quota(&bucket, quota(10, secs(14)));
    // The second limit holds the first back once it is the smaller.
    bucket.set_limit_capacity(1, 5).unwrap();
    assert_eq!(bucket.try_acquire_decision(5), admitted(0, secs(18)));
    assert_eq!(
        bucket.try_acquire_decision(1),
        refused(limited(ms(3_600)), 0, secs(18))
    );
}

#[tokio::test(start_paused = true)]
async fn a_closed_bucket_refuses_and_still_reports_its_quota() {
    let bucket = TokenBucket::new(Rate::per_second(10), 10).unwrap();
    bucket.try_acquire(3).unwrap();
    bucket.close();
    assert_eq!(
        bucket.try_acquire_decision(1),
        refused(TryAcquireError::Closed, 7, ms(300))
    );
    assert_eq!(bucket.quota(), quota(7, ms(300)));
    assert_eq!(
        bucket.try_acquire_decision(0),
        refused(TryAcquireError::Closed, 7, ms(300))
    );
}

/// While others wait, `remaining` is what the bucket holds (the head's), and `full_after`
/// counts the queue as served: the waiters' tokens and a full bucket more must accrue.
#[tokio::test(start_paused = true)]
async fn a_bucket_with_waiters_counts_its_queue_as_served() {
    let bucket = TokenBucket::builder()
        .rate(Rate::per_second(1))
        .capacity(2)
        .initial(0)
        .build()
        .unwrap();
    let waiter = tokio::spawn({
        let bucket = bucket.clone();
        async move { bucket.take(2).await }
    });
    yield_until(|| bucket.queued() == 1).await;
    assert_quota(&bucket, quota(0, secs(4)));
    // Behind the waiter's 2: 3 tokens must accrue.
    assert_eq!(
        bucket.try_acquire_decision(1),
        refused(limited(secs(3)), 0, secs(4))
    );
    advance(ms(1_500)).await;
    assert_quota(&bucket, quota(1, ms(2_500)));
    advance(ms(500)).await;
    waiter.await.unwrap().unwrap();
    assert_quota(&bucket, quota(0, secs(2)));
}

// ----- FixedWindow ---------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_fixed_window_is_full_again_when_the_window_that_counts_ends() {
    let window = FixedWindow::new(10, secs(1)).unwrap();
    assert_eq!(window.policy(), policy(10, secs(1)));
    assert_quota(&window, quota(10, Duration::ZERO));
    advance(ms(250)).await;
    assert_quota(&window, quota(10, Duration::ZERO));
    assert_eq!(window.try_acquire_decision(3), admitted(7, ms(750)));
    assert_eq!(
        window.try_acquire_decision(8),
        refused(limited(ms(750)), 7, ms(750))
    );
    assert_eq!(
        window.try_acquire_decision(11),
        refused(exceeds(11, 10), 7, ms(750))
    );
    // The window's last nanosecond, then the next window's first.
    advance(ms(750) - ns(1)).await;
    assert_quota(&window, quota(7, ns(1)));
    advance(ns(1)).await;
    assert_quota(&window, quota(10, Duration::ZERO));
    assert_eq!(window.try_acquire_decision(10), admitted(0, secs(1)));
    window.refund(4);
    assert_quota(&window, quota(4, secs(1)));
    window.refund(10);
    assert_quota(&window, quota(10, Duration::ZERO));
}

/// Behind waiters, the window is full again once the last window they will be counted in
/// ends: here 2 in window 0, the waiters' 2 in window 1 and their 1 in window 2.
#[tokio::test(start_paused = true)]
async fn a_fixed_window_with_waiters_counts_its_line_as_served() {
    let window = FixedWindow::new(2, secs(1)).unwrap();
    window.try_acquire(2).unwrap();
    let waiters = [spawn_acquire(&window, 2), spawn_acquire(&window, 1)];
    yield_until(|| window.queued_permits() == 3).await;
    assert_quota(&window, quota(0, secs(3)));
    assert_eq!(
        window.try_acquire_decision(1),
        refused(limited(secs(2)), 0, secs(3))
    );
    for waiter in waiters {
        waiter.await.unwrap().0.unwrap();
    }
    // At 2 s, the last waiter's 1 counts in window 2.
    assert_quota(&window, quota(1, secs(1)));
}

// ----- SlidingLog and SlidingWindow ----------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_sliding_log_is_full_again_when_its_newest_permit_stops_counting() {
    let log = SlidingLog::new(3, secs(1)).unwrap();
    assert_eq!(log.policy(), policy(3, secs(1)));
    assert_quota(&log, quota(3, Duration::ZERO));
    assert_eq!(log.try_acquire_decision(1), admitted(2, secs(1)));
    advance(ms(300)).await;
    assert_eq!(log.try_acquire_decision(1), admitted(1, secs(1)));
    // The first stops counting at 1 s, the second at 1.3 s.
    advance(ms(700)).await;
    assert_quota(&log, quota(2, ms(300)));
    advance(ms(300) - ns(1)).await;
    assert_quota(&log, quota(2, ns(1)));
    advance(ns(1)).await;
    assert_quota(&log, quota(3, Duration::ZERO));
    assert_eq!(log.try_acquire_decision(3), admitted(0, secs(1)));
    advance(ms(100)).await;
    assert_eq!(
        log.try_acquire_decision(1),
        refused(limited(ms(900)), 0, ms(900))
    );
    assert_eq!(
        log.try_acquire_decision(4),
        refused(exceeds(4, 3), 0, ms(900))
    );
    log.refund(1);
    assert_quota(&log, quota(1, ms(900)));
}

/// Behind waiters: 2 at 0 s; the line's 1 is admitted at 1 s and its 2 at 2 s, which
/// count until 3 s.
#[tokio::test(start_paused = true)]
async fn a_sliding_log_with_waiters_counts_its_line_as_served() {
    let log = SlidingLog::new(2, secs(1)).unwrap();
    log.try_acquire(2).unwrap();
    let waiters = [spawn_acquire(&log, 1), spawn_acquire(&log, 2)];
    yield_until(|| log.queued_permits() == 3).await;
    assert_quota(&log, quota(0, secs(3)));
    for waiter in waiters {
        waiter.await.unwrap().0.unwrap();
    }
    assert_quota(&log, quota(0, secs(1)));
}

#[tokio::test(start_paused = true)]
async fn a_sliding_window_is_full_again_when_its_newest_slot_leaves_the_wheel() {
    // 3 permits per 10 slots of 100 ms: a permit counts until the end of the slot ten
    // after its own.
    let wheel = SlidingWindow::new(3, 10, ms(100)).unwrap();
    assert_eq!(wheel.policy(), policy(3, secs(1)));
    assert_quota(&wheel, quota(3, Duration::ZERO));
    advance(ms(250)).await;
    // Slot 2: it counts until 1.3 s.
    assert_eq!(wheel.try_acquire_decision(1), admitted(2, ms(1_050)));
    advance(ms(170)).await;
    // Slot 4: until 1.5 s.
    assert_eq!(wheel.try_acquire_decision(1), admitted(1, ms(1_080)));
    assert_eq!(
        wheel.try_acquire_decision(2),
        refused(limited(ms(880)), 1, ms(1_080))
    );
    advance(ms(880)).await;
    assert_quota(&wheel, quota(2, ms(200)));
    advance(ms(200) - ns(1)).await;
    assert_quota(&wheel, quota(2, ns(1)));
    advance(ns(1)).await;
    assert_quota(&wheel, quota(3, Duration::ZERO));
    assert_eq!(wheel.try_acquire_decision(3), admitted(0, ms(1_100)));
    wheel.refund(2);
    assert_quota(&wheel, quota(2, ms(1_100)));
}

// ----- Keyed ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_key_reports_its_quota_from_its_word_or_its_limiter_and_is_refunded() {
    let keyed: Keyed<u8, TokenBucket> =
        Keyed::new(TokenBucket::new(Rate::per_second(10), 10).unwrap());
    assert_eq!(keyed.policy(), policy(10, secs(1)));
    // A key not held is a fresh bucket's, and asking adds no key.
    assert_eq!(keyed.quota(&0), quota(10, Duration::ZERO));
    keyed.refund(&0, 3);
    assert!(keyed.is_empty());
    assert_eq!(keyed.try_acquire_decision(&0, 4), admitted(6, ms(400)));
    assert_eq!(keyed.quota(&0), quota(6, ms(400)));
    assert_eq!(
        keyed.try_acquire_decision(&0, 7),
        refused(limited(ms(100)), 6, ms(400))
    );
    keyed.refund(&0, 2);
    assert_eq!(keyed.quota(&0), quota(8, ms(200)));
    assert_eq!(
        (keyed.len(), keyed.keys_held_whole()),
        (1, 0),
        "all on its word"
    );
    // A refund never fills past the capacity.
    keyed.refund(&0, 100);
    assert_eq!(keyed.quota(&0), quota(10, Duration::ZERO));

    // Held whole by a handle: asked of its bucket.
    let handle = keyed.get(&0).unwrap();
    assert_eq!(keyed.try_acquire_decision(&0, 3), admitted(7, ms(300)));
    keyed.refund(&0, 1);
    assert_eq!(handle.available(), 8);
    assert_eq!(keyed.quota(&0), quota(8, ms(200)));
}

#[tokio::test(start_paused = true)]
async fn window_keys_report_their_quota_on_words_and_whole() {
    let windows: Keyed<u8, FixedWindow> = Keyed::new(FixedWindow::new(5, secs(1)).unwrap());
    let logs: Keyed<u8, SlidingLog> = Keyed::new(SlidingLog::new(5, secs(1)).unwrap());
    advance(ms(600)).await;
    assert_eq!(windows.try_acquire_decision(&0, 4), admitted(1, ms(400)));
    windows.refund(&0, 3);
    assert_eq!(windows.quota(&0), quota(4, ms(400)));
    assert_eq!((windows.len(), windows.keys_held_whole()), (1, 0));
    assert_eq!(logs.policy(), policy(5, secs(1)));
    assert_eq!(logs.quota(&0), quota(5, Duration::ZERO));
    assert_eq!(logs.try_acquire_decision(&0, 4), admitted(1, secs(1)));
    logs.refund(&0, 3);
    assert_eq!(logs.quota(&0), quota(4, secs(1)));
    advance(secs(1)).await;
    assert_eq!(windows.quota(&0), quota(5, Duration::ZERO));
    assert_eq!(logs.quota(&0), quota(5, Duration::ZERO));
}

#[tokio::test(start_paused = true)]
async fn a_new_key_past_max_keys_has_no_quota() {
    let keyed: Keyed<u8, TokenBucket> =
        Keyed::builder(TokenBucket::new(Rate::per_hour(1), 1).unwrap())
            .max_keys(1)
            .build()
            .unwrap();
    keyed.try_acquire(&0, 1).unwrap();
    assert_eq!(
        keyed.try_acquire_decision(&1, 1),
        Decision {
            result: Err(TryAcquireError::TooManyKeys { max_keys: 1 }),
            quota: None,
        }
    );
}
