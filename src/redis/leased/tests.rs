//! The leased front on tokio's paused clock, over a bucket in memory that answers after a
//! fixed latency, so that every grant, call and give-back happens at an exact instant.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::{join_all, BoxFuture};
use tokio::time::{sleep, sleep_until, Instant};

use super::front::{Front, Settings};
use super::source::{LeaseSource, LeaseTicket, Taken};
use crate::rate::Rate;
use crate::redis::observe::LeaseObserver;
use crate::redis::{FailurePolicy, RedisLimitError};

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// A call the fake source answered, at the instant it acted (its latency after the call
/// began), in milliseconds since the test began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Take {
        at: u64,
        fewest: u64,
        most: u64,
        got: u64,
    },
    Give {
        at: u64,
        tokens: u64,
        /// What went back, in thousandths of a token.
        back_milli: i128,
    },
}

/// The bucket: in units such that a token is `period_nanos` of them and a nanosecond
/// adds `amount`, so it is exact.
struct Bucket {
    units: u128,
    at: Instant,
    calls: Vec<Call>,
    /// The leases taken so far: the next one's number, as lease.lua counts them.
    leases: u64,
    /// The numbers of the leases given back, each applied once, as lease.lua does.
    given: HashSet<u64>,
}

#[derive(Clone)]
struct Fake {
    rate: Rate,
    capacity: u64,
    latency: Duration,
    policy: FailurePolicy,
    start: Instant,
    bucket: Arc<Mutex<Bucket>>,
    failing: Arc<AtomicBool>,
    failed_open: Arc<AtomicU64>,
}

impl Fake {
    fn new(rate: Rate, capacity: u64, policy: FailurePolicy) -> Fake {
        let start = Instant::now();
        Fake {
            rate,
            capacity,
            latency: ms(1),
            policy,
            start,
            bucket: Arc::new(Mutex::new(Bucket {
                units: u128::from(capacity) * rate.period_nanos(),
                at: start,
                calls: Vec::new(),
                leases: 0,
                given: HashSet::new(),
            })),
            failing: Arc::new(AtomicBool::new(false)),
            failed_open: Arc::new(AtomicU64::new(0)),
        }
    }

    fn calls(&self) -> Vec<Call> {
        self.bucket.lock().unwrap().calls.clone()
    }

    fn cap(&self) -> u128 {
        u128::from(self.capacity) * self.rate.period_nanos()
    }

    /// The bucket at `now`, its units refilled (unless counted at a later time).
    fn refill(&self, bucket: &mut Bucket, now: Instant) {
        if now > bucket.at {
            let gained = (now - bucket.at).as_nanos() * u128::from(self.rate.amount());
            bucket.units = (bucket.units + gained).min(self.cap());
            bucket.at = now;
        }
    }

    fn since_start(&self, now: Instant) -> u64 {
        (now - self.start).as_millis() as u64
    }
}

impl LeaseSource for Fake {
    fn take(
        &self,
        fewest: u64,
        most: u64,
        ahead: Duration,
    ) -> BoxFuture<'static, Result<Taken, RedisLimitError>> {
        let fake = self.clone();
        Box::pin(async move {
            sleep(fake.latency).await;
            if fake.failing.load(Ordering::Relaxed) {
                return Err(RedisLimitError::Timeout { timeout: ms(1) });
            }
            let now = Instant::now();
            let per_token = fake.rate.period_nanos();
            let amount = u128::from(fake.rate.amount());
            let taken = {
                let mut bucket = fake.bucket.lock().unwrap();
                fake.refill(&mut bucket, now);
                // Reserved ahead as lease.lua does, in nanoseconds.
                let horizon = now + ahead;
                let reachable = match horizon.checked_duration_since(bucket.at) {
                    Some(gaining) => (bucket.units + gaining.as_nanos() * amount).min(fake.cap()),
                    None => 0,
                };
                let got = most.min((reachable / per_token) as u64);
                let got = if got < fewest { 0 } else { got };
                let when_held = |bucket: &Bucket, tokens: u64| {
                    let lacking = (u128::from(tokens) * per_token).saturating_sub(bucket.units);
                    bucket.at + Duration::from_nanos(lacking.div_ceil(amount) as u64)
                };
                let at = fake.since_start(now);
                bucket.calls.push(Call::Take {
                    at,
                    fewest,
                    most,
                    got,
                });
                if got == 0 {
                    let wait = when_held(&bucket, fewest) - horizon;
                    Taken::Refused {
                        retry_after: ms(wait.as_nanos().div_ceil(1_000_000) as u64),
                    }
                } else {
                    let began = when_held(&bucket, got);
                    // Never fuller than its capacity, as lease.lua.
                    bucket.units = (bucket.units + (began - bucket.at).as_nanos() * amount)
                        .min(fake.cap())
                        - u128::from(got) * per_token;
                    bucket.at = began;
                    bucket.leases += 1;
                    Taken::Granted {
                        tokens: got,
                        ticket: LeaseTicket {
                            number: bucket.leases,
                            // The fake's own unit: nanoseconds since it was made.
                            began: (began - fake.start).as_nanos() as u64,
                        },
                        wait: began - now,
                    }
                }
            };
            sleep(fake.latency).await;
            Ok(taken)
        })
    }

    fn give_back(
        &self,
        tokens: u64,
        ticket: LeaseTicket,
    ) -> BoxFuture<'static, Result<(), RedisLimitError>> {
        let fake = self.clone();
        Box::pin(async move {
            sleep(fake.latency).await;
            let now = Instant::now();
            let per_token = fake.rate.period_nanos() as i128;
            {
                let mut bucket = fake.bucket.lock().unwrap();
                fake.refill(&mut bucket, now);
                let out_nanos =
                    ((bucket.at - fake.start).as_nanos() as i128 - i128::from(ticket.began)).max(0);
                let owed =
                    i128::from(tokens) * per_token - out_nanos * i128::from(fake.rate.amount());
                let first = bucket.given.insert(ticket.number);
                let back = if first {
                    owed.min(fake.cap() as i128 - bucket.units as i128).max(0)
                } else {
                    0
                };
                bucket.units += back as u128;
                let at = fake.since_start(now);
                bucket.calls.push(Call::Give {
                    at,
                    tokens,
                    back_milli: back * 1_000 / per_token,
                });
            }
            sleep(fake.latency).await;
            Ok(())
        })
    }

    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn rate(&self) -> Rate {
        self.rate
    }

    fn policy(&self) -> FailurePolicy {
        self.policy
    }

    fn wait_after_refusal(&self, retry_after: Duration) -> Duration {
        retry_after
    }

    fn count_fail_open(&self) {
        self.failed_open.fetch_add(1, Ordering::Relaxed);
    }
}

/// A front over `fake`: a lifetime of 100 ms, idle after `idle`, leases of at most
/// `max_lease`.
fn front(fake: &Fake, idle: Duration, max_lease: u64) -> Arc<Front<Fake>> {
    let settings = Settings {
        lifetime: ms(100),
        idle,
        max_lease,
    };
    Arc::new(Front::new(fake.clone(), settings, LeaseObserver::default()))
}

fn take_call(at: u64, fewest: u64, most: u64, got: u64) -> Call {
    Call::Take {
        at,
        fewest,
        most,
        got,
    }
}

/// The wait of a refusal, if it is one.
fn limited(result: Result<(), RedisLimitError>) -> Option<Duration> {
    match result {
        Err(RedisLimitError::Limited { retry_after }) => Some(retry_after),
        _ => None,
    }
}

/// Takes `tokens`, returning the instant granted, in milliseconds since `start`.
async fn granted_at(front: &Arc<Front<Fake>>, start: Instant, tokens: u64) -> u64 {
    front.take(tokens).await.expect("granted");
    (Instant::now() - start).as_millis() as u64
}

#[tokio::test(start_paused = true)]
async fn one_call_serves_every_request_queued() {
    let fake = Fake::new(Rate::per_second(100), 100, FailurePolicy::FailClosed);
    let front = front(&fake, ms(25), 50);
    let start = Instant::now();
    let grants = join_all((0..10).map(|_| granted_at(&front, start, 1))).await;
    // Queued together: one call, for between half and all of what is queued.
    assert_eq!(grants, vec![2; 10]);
    assert_eq!(fake.calls(), vec![take_call(1, 5, 10, 10)]);
}

#[tokio::test(start_paused = true)]
async fn take_is_first_in_first_out_and_try_take_never_passes_it() {
    let fake = Fake::new(Rate::per_second(100), 100, FailurePolicy::FailClosed);
    let front = front(&fake, ms(25), 4);
    let start = Instant::now();
    let takes = join_all([
        granted_at(&front, start, 3),
        granted_at(&front, start, 3),
        granted_at(&front, start, 1),
    ]);
    let trying = async {
        sleep_until(start + ms(3)).await;
        // One token is held, but takes are queued: refused without a call.
        front.try_take(1).await
    };
    let (grants, tried) = futures::join!(takes, trying);
    // The first lease (4, at most the largest) serves the first 3; the single token left
    // waits behind the second 3 until the next lease.
    assert_eq!(grants, vec![2, 4, 4]);
    assert!(
        matches!(tried, Err(RedisLimitError::Limited { .. })),
        "{tried:?}"
    );
    assert_eq!(
        fake.calls(),
        vec![take_call(1, 3, 4, 4), take_call(3, 2, 3, 3)]
    );
}

#[tokio::test(start_paused = true)]
async fn lease_size_follows_demand_up_to_the_largest_lease() {
    let fake = Fake::new(Rate::per_second(1_000), 1_000, FailurePolicy::FailClosed);
    let front = front(&fake, ms(1_000), 16);
    for _ in 0..48 {
        front.take(1).await.unwrap();
    }
    let sizes: Vec<(u64, u64, u64)> = fake
        .calls()
        .into_iter()
        .map(|call| match call {
            Call::Take {
                fewest, most, got, ..
            } => (fewest, most, got),
            other => panic!("{other:?}"),
        })
        .collect();
    // Each lease is what the front granted over the last lifetime, doubling, up to 16.
    assert_eq!(
        sizes,
        vec![
            (1, 1, 1),
            (1, 1, 1),
            (1, 2, 2),
            (2, 4, 4),
            (4, 8, 8),
            (8, 16, 16),
            (8, 16, 16)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_leased_token_is_never_granted_after_its_lifetime_and_the_rest_go_back() {
    // 10 a second: a token takes 100 ms to accrue.
    let fake = Fake::new(Rate::per_second(10), 100, FailurePolicy::FailClosed);
    let front = front(&fake, ms(10_000), 50);
    let start = Instant::now();
    // Demand of 8 in one lifetime, so the next lease is 8.
    assert_eq!(
        join_all((0..8).map(|_| granted_at(&front, start, 1))).await,
        vec![2; 8]
    );
    sleep_until(start + ms(10)).await;
    // A lease taken by the call begun at 10 ms is usable until 110 ms.
    assert_eq!(granted_at(&front, start, 1).await, 12);
    sleep_until(start + ms(109)).await;
    assert_eq!(granted_at(&front, start, 1).await, 109);
    assert_eq!(front.held_and_queued(), (6, 0));
    sleep_until(start + ms(110)).await;
    // At 110 ms the 6 left may no longer be granted: they go back, and this waits for a
    // new lease.
    assert_eq!(granted_at(&front, start, 1).await, 114);
    let calls = fake.calls();
    assert_eq!(calls[..2], [take_call(1, 4, 8, 8), take_call(11, 4, 8, 8)]);
    // Back at 111 ms: 6 tokens less what 10/s gained since the lease began at 11 ms, 1.
    assert_eq!(
        calls[2],
        Call::Give {
            at: 111,
            tokens: 6,
            back_milli: 5_000
        }
    );
    assert!(matches!(calls[3], Call::Take { at: 113, .. }), "{calls:?}");
}

#[tokio::test(start_paused = true)]
async fn an_idle_front_gives_its_leases_back() {
    let fake = Fake::new(Rate::per_second(10), 100, FailurePolicy::FailClosed);
    let front = front(&fake, ms(25), 50);
    let start = Instant::now();
    join_all((0..8).map(|_| granted_at(&front, start, 1))).await;
    sleep_until(start + ms(10)).await;
    assert_eq!(granted_at(&front, start, 1).await, 12);
    assert_eq!(front.held_and_queued(), (7, 0));
    // Idle from the grant at 12 ms: the 7 go back at 37 ms (acted on at 38 ms), less
    // what 10/s gained since the lease began at 11 ms (0.27 tokens).
    sleep_until(start + ms(40)).await;
    assert_eq!(front.held_and_queued(), (0, 0));
    assert_eq!(
        fake.calls()[2],
        Call::Give {
            at: 38,
            tokens: 7,
            back_milli: 6_730
        }
    );
}

#[tokio::test(start_paused = true)]
async fn close_gives_back_what_is_held_and_refuses_every_request_after() {
    let fake = Fake::new(Rate::per_second(10), 100, FailurePolicy::FailClosed);
    let front = front(&fake, ms(1_000), 50);
    let start = Instant::now();
    join_all((0..8).map(|_| granted_at(&front, start, 1))).await;
    sleep_until(start + ms(10)).await;
    front.take(1).await.unwrap();
    front.close().await;
    assert_eq!(Instant::now() - start, ms(14));
    assert_eq!(front.held_and_queued(), (0, 0));
    assert!(matches!(
        fake.calls()[2],
        Call::Give {
            at: 13,
            tokens: 7,
            ..
        }
    ));
    assert!(matches!(front.take(1).await, Err(RedisLimitError::Closed)));
    assert!(matches!(
        front.try_take(1).await,
        Err(RedisLimitError::Closed)
    ));
    assert_eq!(fake.calls().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_queued_at_close_gets_closed() {
    let fake = Fake::new(Rate::per_second(10), 100, FailurePolicy::FailClosed);
    let front = front(&fake, ms(1_000), 100);
    front.take(100).await.unwrap();
    let (waited, ()) = futures::join!(front.take(50), async {
        sleep(ms(50)).await;
        front.close().await;
    });
    assert!(matches!(waited, Err(RedisLimitError::Closed)), "{waited:?}");
}

#[tokio::test(start_paused = true)]
async fn try_take_is_refused_with_the_wait_redis_gave_then_without_asking() {
    let fake = Fake::new(Rate::per_second(10), 10, FailurePolicy::FailClosed);
    let front = front(&fake, ms(1_000), 10);
    front.take(10).await.unwrap();
    // The bucket emptied at 1 ms. At 3 ms it asks for between 5 and 10 within a
    // lifetime (100 ms): 5 are there at 501 ms, 398 ms past that.
    assert_eq!(limited(front.try_take(1).await), Some(ms(398)));
    // Until then, refused here, with what is left of that wait.
    sleep(ms(100)).await;
    assert_eq!(limited(front.try_take(1).await), Some(ms(298)));
    assert_eq!(fake.calls().len(), 2);
    // A take waits it out. Asked for at 402 ms, when the refusal ends, the lease is the
    // one token queued (the demand of 10 at 1 ms is two lifetimes old): it is there, and
    // comes back at 404 ms.
    let start = Instant::now() - ms(104);
    assert_eq!(granted_at(&front, start, 1).await, 404);
    assert_eq!(fake.calls()[2], take_call(403, 1, 1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_failing_source_fails_closed_or_open_as_the_policy_says() {
    for policy in [FailurePolicy::FailClosed, FailurePolicy::FailOpen] {
        let fake = Fake::new(Rate::per_second(10), 10, policy);
        fake.failing.store(true, Ordering::Relaxed);
        let front = front(&fake, ms(1_000), 10);
        let (first, second) = futures::join!(front.take(1), front.take(2));
        // Alone, a try waits for the call it starts, and shares its fate.
        let third = front.try_take(1).await;
        match policy {
            FailurePolicy::FailClosed => {
                for result in [first, second, third] {
                    assert!(
                        matches!(result, Err(RedisLimitError::Timeout { timeout }) if timeout == ms(1)),
                        "{result:?}"
                    );
                }
                assert_eq!(fake.failed_open.load(Ordering::Relaxed), 0);
            }
            FailurePolicy::FailOpen => {
                assert!(first.is_ok() && second.is_ok() && third.is_ok());
                assert_eq!(fake.failed_open.load(Ordering::Relaxed), 3);
                // Counted as granted: 1 + 2 + 1 tokens.
                assert_eq!(front.counters.granted.load(Ordering::Relaxed), 4);
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_dropped_waiter_takes_nothing_and_a_grant_it_never_saw_goes_back() {
    let fake = Fake::new(Rate::per_second(10), 100, FailurePolicy::FailClosed);
    let front = front(&fake, ms(1_000), 50);
    // Queued, then dropped before the lease came: the lease is held, none granted.
    let _ = tokio::time::timeout(ms(1), front.take(5)).await;
    sleep(ms(5)).await;
    assert_eq!(front.held_and_queued(), (5, 0));
    // Granted while nobody polled it, then dropped: its tokens are held again.
    let mut waiting = Box::pin(front.take(9));
    assert!(futures::poll!(waiting.as_mut()).is_pending());
    sleep(ms(5)).await;
    drop(waiting);
    assert_eq!(front.held_and_queued(), (9, 0));
}

#[tokio::test(start_paused = true)]
async fn requests_above_the_capacity_are_refused_and_zero_is_granted_at_once() {
    let fake = Fake::new(Rate::per_second(10), 10, FailurePolicy::FailClosed);
    let front = front(&fake, ms(1_000), 10);
    for result in [front.take(11).await, front.try_take(11).await] {
        assert!(
            matches!(
                result,
                Err(RedisLimitError::ExceedsLimit {
                    requested: 11,
                    limit: 10
                })
            ),
            "{result:?}"
        );
    }
    assert!(front.take(0).await.is_ok());
    assert!(front.try_take(0).await.is_ok());
    assert!(fake.calls().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_lease_reserved_ahead_is_granted_once_it_begins_and_not_before() {
    // 100 a second: a token every 10 ms.
    let fake = Fake::new(Rate::per_second(100), 10, FailurePolicy::FailClosed);
    let front = front(&fake, ms(1_000), 10);
    let start = Instant::now();
    assert_eq!(granted_at(&front, start, 10).await, 2);
    // Empty since 1 ms. Asked for at 2 ms, within a lifetime: 10 tokens, there at 101 ms,
    // 98 ms after the source decided; the reply came at 4 ms, so usable from 102 ms
    // (never before the source's 101 ms) until 2 + 98 + 100 = 200 ms.
    assert_eq!(granted_at(&front, start, 5).await, 102);
    assert_eq!(fake.calls()[1], take_call(3, 5, 10, 10));
    sleep_until(start + ms(199)).await;
    assert_eq!(front.held_and_queued(), (5, 0));
    sleep_until(start + ms(200)).await;
    assert_eq!(front.held_and_queued(), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_take_leaves_the_line_at_once() {
    let mut fake = Fake::new(Rate::per_second(10), 100, FailurePolicy::FailClosed);
    fake.latency = ms(40);
    let front = front(&fake, ms(10_000), 50);
    let start = Instant::now();
    // Granted at 80 ms while nobody polled it, then dropped: its 9 are held.
    let mut waiting = Box::pin(front.take(9));
    assert!(futures::poll!(waiting.as_mut()).is_pending());
    sleep(ms(85)).await;
    drop(waiting);
    assert_eq!(front.held_and_queued(), (9, 0));
    // A take of 10 queues, a call for it begins; dropped 1 ms later, it leaves the line:
    // the 9 held serve those who come next at once.
    let _ = tokio::time::timeout(ms(1), front.take(10)).await;
    assert_eq!(Instant::now() - start, ms(86));
    assert_eq!(front.held_and_queued(), (9, 0));
    front.try_take(1).await.expect("granted at once");
    let asked = Instant::now();
    front.take(1).await.expect("granted");
    assert_eq!(Instant::now(), asked);
}

#[tokio::test(start_paused = true)]
async fn a_lease_expired_on_arrival_is_a_failed_call_and_goes_back() {
    for policy in [FailurePolicy::FailClosed, FailurePolicy::FailOpen] {
        let mut fake = Fake::new(Rate::per_second(100), 100, policy);
        // A round trip of 120 ms, past the lifetime of 100 ms.
        fake.latency = ms(60);
        let front = front(&fake, ms(25), 50);
        let start = Instant::now();
        let result = tokio::time::timeout(ms(1_000), front.take(1))
            .await
            .expect("answered after one call");
        assert_eq!(Instant::now() - start, ms(120));
        match policy {
            FailurePolicy::FailClosed => assert!(
                matches!(
                    result,
                    Err(RedisLimitError::LeaseExpiredOnArrival { round_trip, lifetime })
                        if round_trip == ms(120) && lifetime == ms(100)
                ),
                "{result:?}"
            ),
            FailurePolicy::FailOpen => {
                result.expect("allowed");
                assert_eq!(fake.failed_open.load(Ordering::Relaxed), 1);
            }
        }
        // Given back once ended; the 12 tokens the bucket gained since cover it.
        sleep(ms(200)).await;
        assert_eq!(
            fake.calls(),
            vec![
                take_call(60, 1, 1, 1),
                Call::Give {
                    at: 180,
                    tokens: 1,
                    back_milli: 0
                }
            ]
        );
    }
}

/// Grants logged at exact instants by fronts sharing `fake`, checked against the bound:
/// any interval of length `t` sees at most `capacity + rate × (t + lifetime)`.
#[tokio::test(start_paused = true)]
async fn fronts_sharing_a_bucket_never_pass_the_bound_through_busy_and_idle_phases() {
    // A token each 10 ms, 100 at most; calls answered 5 ms after they are sent.
    let mut fake = Fake::new(Rate::per_second(100), 100, FailurePolicy::FailClosed);
    fake.latency = ms(5);
    let lifetime = ms(100);
    let start = Instant::now();
    let log = Arc::new(Mutex::new(Vec::new()));
    let fronts: Vec<_> = (0..3).map(|_| front(&fake, ms(25), 25)).collect();
    // Front 0 works every other 30 ms, going idle with leases held; front 1 always;
    // front 2 only after 1,300 ms. Nobody works from 300 to 1,300 ms, so the bucket fills.
    let busy = |index: usize, at: Duration| {
        let millis = at.as_millis();
        match index {
            _ if (300..1_300).contains(&millis) => false,
            0 => (millis / 30).is_multiple_of(2),
            1 => true,
            _ => millis >= 1_300,
        }
    };
    let tasks = fronts
        .iter()
        .enumerate()
        .flat_map(|(index, front)| (0..4).map(move |_| (index, Arc::clone(front))));
    let tasks = tasks.map(|(index, front)| {
        let log = Arc::clone(&log);
        tokio::spawn(async move {
            while Instant::now() < start + ms(2_000) {
                if !busy(index, Instant::now() - start) {
                    sleep(ms(1)).await;
                    continue;
                }
                front.take(1).await.expect("granted");
                log.lock()
                    .unwrap()
                    .push((Instant::now() - start).as_nanos());
            }
        })
    });
    for task in join_all(tasks.collect::<Vec<_>>()).await {
        task.unwrap();
    }
    let mut grants = log.lock().unwrap().clone();
    grants.sort_unstable();
    // A token is 10^7 ns of gain.
    for (first, from) in grants.iter().enumerate() {
        for (last, to) in grants.iter().enumerate().skip(first) {
            let count = (last - first + 1) as u128;
            let allowed = 100 + (to - from + lifetime.as_nanos()) / 10_000_000;
            assert!(count <= allowed, "{count} grants from {from} ns to {to} ns");
        }
    }
    // Exact on the paused clock. Giving back without taking off the gain since the lease
    // began would admit 308 here: within this bound, since the front gives back no later
    // than a lifetime after a lease began, but past the 300 the bucket gained and held.
    assert_eq!(grants.len(), 296);
    // Front 0 went idle holding leases, and gave some back.
    let gave_back = fake.calls().into_iter().filter_map(|call| match call {
        Call::Give { back_milli, .. } => Some(back_milli),
        Call::Take { .. } => None,
    });
    assert!(gave_back.sum::<i128>() > 0);
}
