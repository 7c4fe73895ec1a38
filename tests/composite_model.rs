//! Model-based test of composites (issue 14, part 5): random interleavings of plain and
//! composite `try`s, waiting `acquire`s, cancellations and time, over three buckets and
//! composites of two or three of them with overlapping sets, run on real buckets on
//! paused time and on a sequential reference model, compared after every step.
//!
//! The reference model is the contract, written plainly: each bucket is a line of
//! waiters, first in, first out, and a ledger of whole milliseconds; a plain waiter is
//! granted once it heads its line and its bucket holds its tokens; a composite once it
//! heads every one of its lines and every one of its buckets holds them, at one instant,
//! taking from all. Nothing is taken before that, and a cancelled waiter leaves every
//! line it stood in. Rates are whole milliseconds per token, and time moves a millisecond
//! at a time, so every grant falls on a tick of tokio's timer and is compared exactly.
//!
//! `PROPTEST_CASES` cases (256 by default); a failure prints the smallest sequence of
//! operations that still fails.

mod common;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use token_bucket::{all, AcquireAllError, Rate, TakeError, TokenBucket, TryAcquireAllError};
use tokio::task::JoinHandle;

const BUCKETS: usize = 3;
const DEFAULT_CASES: u32 = 256;

/// Composites granted after waiting, and cancelled while waiting, over every case: the
/// test asserts both happened, so that it cannot pass by never reaching them.
static WAITED_THEN_GRANTED: AtomicUsize = AtomicUsize::new(0);
static CANCELLED_WAITING: AtomicUsize = AtomicUsize::new(0);

/// The member sets composites are made of: every pair, in both orders, and all three.
const SETS: [&[usize]; 7] = [
    &[0, 1],
    &[1, 0],
    &[1, 2],
    &[2, 1],
    &[2, 0],
    &[0, 2],
    &[0, 1, 2],
];

#[derive(Debug, Clone)]
enum Op {
    /// A plain `try_take(n)` on one bucket.
    TryPlain { bucket: usize, n: u64 },
    /// A composite's `try_acquire(n)`.
    TryAll { set: usize, n: u64 },
    /// A plain `take(n)`, left waiting.
    TakePlain { bucket: usize, n: u64 },
    /// A composite's `acquire(n)`, left waiting.
    AcquireAll { set: usize, n: u64 },
    /// Drops the `index`-th waiter started (modulo their number), if it still waits.
    Cancel { index: usize },
    /// Time passes, a millisecond at a time.
    Advance { millis: u64 },
}

/// A bucket's settings: one token every `period` ms, holding at most `capacity`.
#[derive(Debug, Clone, Copy)]
struct Setup {
    period: u64,
    capacity: u64,
    initial: u64,
}

fn setup() -> impl Strategy<Value = Setup> {
    (1u64..=5, 1u64..=4).prop_flat_map(|(period, capacity)| {
        (0..=capacity).prop_map(move |initial| Setup {
            period,
            capacity,
            initial,
        })
    })
}

fn op() -> impl Strategy<Value = Op> {
    let bucket = 0..BUCKETS;
    let set = 0..SETS.len();
    prop_oneof![
        2 => (bucket.clone(), 1u64..=3).prop_map(|(bucket, n)| Op::TryPlain { bucket, n }),
        2 => (set.clone(), 1u64..=3).prop_map(|(set, n)| Op::TryAll { set, n }),
        3 => (bucket, 1u64..=3).prop_map(|(bucket, n)| Op::TakePlain { bucket, n }),
        4 => (set, 1u64..=3).prop_map(|(set, n)| Op::AcquireAll { set, n }),
        1 => (0usize..16).prop_map(|index| Op::Cancel { index }),
        4 => (1u64..=8).prop_map(|millis| Op::Advance { millis }),
    ]
}

// ----- The reference model ----------------------------------------------------------------

/// One bucket: its ledger in parts (one part a millisecond, `period` parts a token) and
/// its line of waiter ids.
#[derive(Debug, Clone)]
struct ModelBucket {
    setup: Setup,
    parts: u64,
    taken: u64,
    line: VecDeque<usize>,
}

impl ModelBucket {
    fn tokens(&self) -> u64 {
        self.parts / self.setup.period
    }

    fn tick(&mut self) {
        self.parts = (self.parts + 1).min(self.setup.capacity * self.setup.period);
    }

    fn take(&mut self, n: u64) {
        self.parts -= n * self.setup.period;
        self.taken += n;
    }

    /// Milliseconds until it holds `n`, at most its capacity.
    fn wait_for(&self, n: u64) -> u64 {
        (n * self.setup.period).saturating_sub(self.parts)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    Waiting,
    Granted {
        at: u64,
    },
    Cancelled,
    /// Refused at once (a request above a capacity).
    Refused,
}

#[derive(Debug, Clone)]
struct ModelWaiter {
    members: Vec<usize>,
    n: u64,
    state: Standing,
}

#[derive(Debug, Clone)]
struct Model {
    buckets: Vec<ModelBucket>,
    waiters: Vec<ModelWaiter>,
    now: u64,
}

impl Model {
    fn new(setups: &[Setup]) -> Model {
        Model {
            buckets: setups
                .iter()
                .map(|&setup| ModelBucket {
                    setup,
                    parts: setup.initial * setup.period,
                    taken: 0,
                    line: VecDeque::new(),
                })
                .collect(),
            waiters: Vec::new(),
            now: 0,
        }
    }

    /// A try over `members`: `Ok`, or the milliseconds until every member would admit it
    /// when all lines are empty (`None` while someone waits: the line decides), or
    /// `Err(Some(limit))`-like refusal for good, as `u64::MAX`.
    fn try_take(&mut self, members: &[usize], n: u64) -> Result<(), Option<u64>> {
        if members
            .iter()
            .any(|&bucket| n > self.buckets[bucket].setup.capacity)
        {
            return Err(Some(u64::MAX));
        }
        if members
            .iter()
            .any(|&bucket| !self.buckets[bucket].line.is_empty())
        {
            return Err(None);
        }
        let wait = members
            .iter()
            .map(|&bucket| self.buckets[bucket].wait_for(n))
            .max()
            .unwrap_or(0);
        if wait > 0 {
            return Err(Some(wait));
        }
        for &bucket in members {
            self.buckets[bucket].take(n);
        }
        Ok(())
    }

    /// Starts a waiter; granted at once when the lines are empty and the tokens there.
    fn start(&mut self, members: &[usize], n: u64) {
        let id = self.waiters.len();
        let state = match self.try_take(members, n) {
            Ok(()) => Standing::Granted { at: self.now },
            Err(Some(u64::MAX)) => Standing::Refused,
            Err(_) => {
                for &bucket in members {
                    self.buckets[bucket].line.push_back(id);
                }
                Standing::Waiting
            }
        };
        self.waiters.push(ModelWaiter {
            members: members.to_vec(),
            n,
            state,
        });
        self.serve();
    }

    fn cancel(&mut self, id: usize) {
        if self.waiters[id].state != Standing::Waiting {
            return;
        }
        if self.waiters[id].members.len() > 1 {
            CANCELLED_WAITING.fetch_add(1, Ordering::Relaxed);
        }
        self.waiters[id].state = Standing::Cancelled;
        for bucket in &mut self.buckets {
            bucket.line.retain(|&waiter| waiter != id);
        }
        self.serve();
    }

    /// Grants every waiter that heads all its lines with its tokens there, until none.
    fn serve(&mut self) {
        loop {
            let ready = self.waiters.iter().enumerate().position(|(id, waiter)| {
                waiter.state == Standing::Waiting
                    && waiter.members.iter().all(|&bucket| {
                        let bucket = &self.buckets[bucket];
                        bucket.line.front() == Some(&id) && bucket.tokens() >= waiter.n
                    })
            });
            let Some(id) = ready else {
                return;
            };
            let (members, n) = (self.waiters[id].members.clone(), self.waiters[id].n);
            if members.len() > 1 {
                WAITED_THEN_GRANTED.fetch_add(1, Ordering::Relaxed);
            }
            for bucket in members {
                self.buckets[bucket].take(n);
                self.buckets[bucket].line.pop_front();
            }
            self.waiters[id].state = Standing::Granted { at: self.now };
        }
    }

    fn tick(&mut self) {
        self.now += 1;
        for bucket in &mut self.buckets {
            bucket.tick();
        }
        self.serve();
    }
}

// ----- The real buckets, in lockstep ------------------------------------------------------

struct Real {
    buckets: Vec<TokenBucket>,
    /// Each waiter's task, returning whether it was granted and when (in ms).
    waiters: Vec<Option<JoinHandle<Result<u64, ()>>>>,
    outcomes: Vec<Option<Result<u64, ()>>>,
    start: tokio::time::Instant,
}

impl Real {
    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap()
    }

    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }

    async fn collect(&mut self) {
        Real::settle().await;
        for (index, waiter) in self.waiters.iter_mut().enumerate() {
            if waiter.as_ref().is_some_and(JoinHandle::is_finished) {
                let outcome = waiter.take().unwrap().await.unwrap();
                self.outcomes[index] = Some(outcome);
            }
        }
    }
}

fn check(model: &Model, real: &Real) -> Result<(), TestCaseError> {
    prop_assert_eq!(model.now, real.now());
    for (index, (bucket, real_bucket)) in model.buckets.iter().zip(&real.buckets).enumerate() {
        let stats = real_bucket.stats();
        prop_assert_eq!(
            (stats.available, stats.taken, stats.queued),
            (bucket.tokens(), bucket.taken, bucket.line.len()),
            "bucket {} at {} ms",
            index,
            model.now
        );
    }
    for (index, waiter) in model.waiters.iter().enumerate() {
        let real_state = match (&real.waiters[index], real.outcomes[index]) {
            (Some(_), _) => Standing::Waiting,
            (None, Some(Ok(at))) => Standing::Granted { at },
            (None, Some(Err(()))) => Standing::Refused,
            (None, None) => Standing::Cancelled,
        };
        prop_assert_eq!(waiter.state, real_state, "waiter {}", index);
    }
    Ok(())
}

async fn run(setups: Vec<Setup>, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut model = Model::new(&setups);
    let mut real = Real {
        buckets: setups
            .iter()
            .map(|setup| {
                TokenBucket::builder()
                    .rate(Rate::new(1, Duration::from_millis(setup.period)))
                    .capacity(setup.capacity)
                    .initial(setup.initial)
                    .build()
                    .unwrap()
            })
            .collect(),
        waiters: Vec::new(),
        outcomes: Vec::new(),
        start: tokio::time::Instant::now(),
    };
    for op in ops {
        match op {
            Op::TryPlain { bucket, n } => {
                let expected = model.try_take(&[bucket], n);
                let got = real.buckets[bucket].try_take(n);
                prop_assert_eq!(expected.is_ok(), got.is_ok(), "{:?}: {:?}", op, got);
            }
            Op::TryAll { set, n } => {
                let members: Vec<TokenBucket> =
                    SETS[set].iter().map(|&i| real.buckets[i].clone()).collect();
                let expected = model.try_take(SETS[set], n);
                let got = all(members).unwrap().try_acquire(n);
                match (expected, got) {
                    (Ok(()), Ok(())) => {}
                    (Err(Some(u64::MAX)), Err(TryAcquireAllError::Member { .. })) => {}
                    // Behind a line the bucket's own replay decides the wait.
                    (Err(None), Err(TryAcquireAllError::Limited { .. })) => {}
                    (Err(Some(millis)), Err(TryAcquireAllError::Limited { retry_after })) => {
                        prop_assert_eq!(retry_after, Duration::from_millis(millis), "{:?}", op);
                    }
                    (expected, got) => {
                        prop_assert!(false, "{:?}: expected {:?}, got {:?}", op, expected, got)
                    }
                }
            }
            Op::TakePlain { bucket, n } => {
                model.start(&[bucket], n);
                let (member, start) = (real.buckets[bucket].clone(), real.start);
                real.waiters.push(Some(tokio::spawn(async move {
                    match member.take(n).await {
                        Ok(()) => Ok(u64::try_from(start.elapsed().as_millis()).unwrap()),
                        Err(TakeError::ExceedsCapacity { .. }) => Err(()),
                        Err(other) => panic!("{other:?}"),
                    }
                })));
                real.outcomes.push(None);
            }
            Op::AcquireAll { set, n } => {
                model.start(SETS[set], n);
                let members: Vec<TokenBucket> =
                    SETS[set].iter().map(|&i| real.buckets[i].clone()).collect();
                let start = real.start;
                real.waiters.push(Some(tokio::spawn(async move {
                    match all(members).unwrap().acquire(n).await {
                        Ok(()) => Ok(u64::try_from(start.elapsed().as_millis()).unwrap()),
                        Err(AcquireAllError::Member { .. }) => Err(()),
                        Err(other) => panic!("{other:?}"),
                    }
                })));
                real.outcomes.push(None);
            }
            Op::Cancel { index } => {
                if !real.waiters.is_empty() {
                    let id = index % real.waiters.len();
                    if let Some(task) = real.waiters[id].take() {
                        task.abort();
                        match task.await {
                            // It finished before the abort landed: the model must agree.
                            Ok(outcome) => real.outcomes[id] = Some(outcome),
                            Err(error) => prop_assert!(error.is_cancelled()),
                        }
                    }
                    if real.outcomes[id].is_none() {
                        model.cancel(id);
                    }
                }
            }
            Op::Advance { millis } => {
                for _ in 0..millis {
                    tokio::time::advance(Duration::from_millis(1)).await;
                    model.tick();
                    real.collect().await;
                }
            }
        }
        real.collect().await;
        check(&model, &real)?;
    }
    Ok(())
}

#[test]
fn composites_and_plain_requests_follow_the_reference_model() {
    let mut runner = TestRunner::new(common::model_config(DEFAULT_CASES, file!()));
    let strategy = (
        proptest::collection::vec(setup(), BUCKETS),
        proptest::collection::vec(op(), 1..40),
    );
    runner
        .run(&strategy, |(setups, ops)| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build()
                .unwrap();
            runtime.block_on(run(setups, ops))
        })
        .unwrap();
    assert!(WAITED_THEN_GRANTED.load(Ordering::Relaxed) > 0);
    assert!(CANCELLED_WAITING.load(Ordering::Relaxed) > 0);
}
