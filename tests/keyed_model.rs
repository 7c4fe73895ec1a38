//! Model-based tests of `Keyed` (issue 16): random sequences of `try_acquire`, `acquire`,
//! dropped waiters, `get`, sweeps and time passing on a few keys of one
//! `Keyed<u8, TokenBucket>`, on paused time, each key checked in lockstep against its own
//! sequential reference model (`common/model.rs`, the one the bucket is checked against).
//!
//! A key nobody waits on is held as one word; an `acquire` makes it a whole bucket, which
//! folds back into the word once its line is empty and nobody holds it (at the key's next
//! `try_acquire`, or a sweep). The sequences go through every one of those changes, so
//! the check covers keys that go compact and come back with waiters: whichever form
//! answers, every result, every `retry_after` and every grant's instant must be the
//! model's.
//!
//! `PROPTEST_CASES` sets the number of cases (512 by default).

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::lockstep::paused_runtime;
use common::model::{Kind, Model, ModelRate, Setup, Status, TryTakeRefusal, NO_DEADLINE};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use token_bucket::{AcquireError, Keyed, TakeError, TokenBucket, TryAcquireError, TryTakeError};
use tokio::task::JoinHandle;
use tokio::time::Instant;

const MILLI: u64 = 1_000_000;
const KEYS: u8 = 3;
const DEFAULT_CASES: u32 = 512;
/// Yields after each step for the tasks to catch up with the model, time standing still.
const SETTLE_YIELDS: usize = 64;

fn config() -> Config {
    common::model_config(DEFAULT_CASES, file!())
}

#[derive(Debug, Clone)]
enum Op {
    TryAcquire {
        key: u8,
        permits: u64,
    },
    /// Spawns a task awaiting `acquire(key, permits)`.
    Acquire {
        key: u8,
        permits: u64,
    },
    /// Drops the future of the `pick`-th request still waiting (modulo their count).
    Drop {
        pick: usize,
    },
    /// Takes the key's whole limiter with `get` and lets it go at once.
    Get {
        key: u8,
    },
    /// `retain_recent()`: forgets idle keys, folds lone whole limiters back into words.
    Sweep,
    /// Lets `millis` milliseconds of paused time pass.
    Sleep {
        millis: u64,
    },
}

fn setup() -> impl Strategy<Value = Setup> {
    let period = prop_oneof![
        Just(MILLI),
        Just(3 * MILLI),
        Just(250 * MILLI),
        Just(333_333_333),
        Just(1_000 * MILLI),
    ];
    (1..=3u64, period, 1..=4u64).prop_map(|(amount, period, capacity)| Setup {
        rate: ModelRate { amount, period },
        capacity,
        more: Vec::new(),
        initial: None,
        queue_limit: None,
    })
}

fn op(capacity: u64) -> impl Strategy<Value = Op> {
    let key = 0..KEYS;
    // Now and then more than the capacity: refused at once.
    let permits = prop_oneof![5 => 0..=capacity, 1 => Just(capacity + 1)];
    prop_oneof![
        4 => (key.clone(), permits.clone())
            .prop_map(|(key, permits)| Op::TryAcquire { key, permits }),
        3 => (key.clone(), permits).prop_map(|(key, permits)| Op::Acquire { key, permits }),
        1 => any::<usize>().prop_map(|pick| Op::Drop { pick }),
        1 => key.prop_map(|key| Op::Get { key }),
        1 => Just(Op::Sweep),
        3 => prop_oneof![Just(1u64), 1..=400u64].prop_map(|millis| Op::Sleep { millis }),
    ]
}

fn case() -> impl Strategy<Value = (Setup, Vec<Op>)> {
    setup().prop_flat_map(|setup| {
        let ops = prop::collection::vec(op(setup.capacity), 1..60);
        (Just(setup), ops)
    })
}

/// A spawned `acquire` and what the model calls it.
struct Request {
    key: u8,
    model_id: usize,
    handle: JoinHandle<()>,
    dropped: bool,
}

/// What the tasks report when their `acquire` ends: the request's index, its result, and
/// when.
type Finished = Arc<Mutex<HashMap<usize, (Result<(), AcquireError>, Instant)>>>;

struct Lockstep {
    keyed: Keyed<u8, TokenBucket>,
    models: Vec<Model>,
    origin: Instant,
    requests: Vec<Request>,
    finished: Finished,
    /// Keys that queued a waiter and were later served by `try_acquire` with their line
    /// empty: they went whole and came back.
    came_back: usize,
    queued_keys: Vec<bool>,
}

impl Lockstep {
    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).expect("a short test")
    }

    async fn apply(&mut self, op: &Op) -> Result<(), String> {
        let now = self.now();
        match *op {
            Op::TryAcquire { key, permits } => {
                let model = &mut self.models[usize::from(key)];
                let line_empty = model.queued(now) == 0;
                let expected = model.try_take(permits, now);
                let got = self.keyed.try_acquire(&key, permits);
                compare_try(got, expected)
                    .map_err(|error| format!("try_acquire({key}, {permits}): {error}"))?;
                if line_empty && std::mem::take(&mut self.queued_keys[usize::from(key)]) {
                    self.came_back += 1;
                }
            }
            Op::Acquire { key, permits } => {
                let future = self.keyed.acquire(&key, permits);
                let model_id =
                    self.models[usize::from(key)].request(Kind::Take, permits, NO_DEADLINE, now);
                if self.models[usize::from(key)].status(model_id) == Status::Queued {
                    self.queued_keys[usize::from(key)] = true;
                }
                let index = self.requests.len();
                let finished = Arc::clone(&self.finished);
                let handle = tokio::spawn(async move {
                    let result = future.await;
                    let at = Instant::now();
                    finished.lock().unwrap().insert(index, (result, at));
                });
                self.requests.push(Request {
                    key,
                    model_id,
                    handle,
                    dropped: false,
                });
            }
            Op::Drop { pick } => {
                let waiting: Vec<usize> = (0..self.requests.len())
                    .filter(|&index| {
                        let request = &self.requests[index];
                        !request.dropped
                            && self.models[usize::from(request.key)].status(request.model_id)
                                == Status::Queued
                    })
                    .collect();
                if let Some(&index) = waiting.get(pick % waiting.len().max(1)) {
                    let request = &mut self.requests[index];
                    request.handle.abort();
                    request.dropped = true;
                    self.models[usize::from(request.key)].drop_request(request.model_id, now);
                }
            }
            Op::Get { key } => {
                let held = self.keyed.get(&key);
                let model = &mut self.models[usize::from(key)];
                // `get` makes no key, and hands out a bucket holding what the key holds.
                match held {
                    Some(limiter) => {
                        let available = token_bucket::Limiter::available(&*limiter);
                        if model.queued(now) == 0 && available != model.available(now) {
                            return Err(format!(
                                "get({key}) holds {available}, the model {}",
                                model.available(now)
                            ));
                        }
                    }
                    None => {
                        if model.available(now) != model.capacity() {
                            return Err(format!("get({key}) found no key that is not full"));
                        }
                    }
                }
            }
            Op::Sweep => {
                self.keyed.retain_recent();
            }
            Op::Sleep { millis } => tokio::time::sleep(Duration::from_millis(millis)).await,
        }
        self.settle_and_compare().await
    }

    /// Lets the tasks catch up without time passing, then compares every request with
    /// its key's model.
    async fn settle_and_compare(&mut self) -> Result<(), String> {
        let now = self.now();
        for model in &mut self.models {
            model.available(now);
        }
        for _ in 0..SETTLE_YIELDS {
            tokio::task::yield_now().await;
        }
        let finished = self.finished.lock().unwrap().clone();
        for (index, request) in self.requests.iter().enumerate() {
            let model = &self.models[usize::from(request.key)];
            let expected = model.status(request.model_id);
            let got = finished.get(&index);
            match (expected, got) {
                (Status::Queued, None) | (Status::Dropped, None) => {}
                (Status::Finished { result, at, .. }, Some((got, when))) => {
                    let expected = result.map_err(acquire_error);
                    // tokio's timer fires on whole milliseconds: a grant due at `at` is
                    // seen within the millisecond after.
                    let when = u64::try_from(when.duration_since(self.origin).as_nanos())
                        .expect("a short test");
                    let on_time = when >= at && when <= at + MILLI;
                    if *got != expected || !on_time {
                        return Err(format!(
                            "request {index} on key {}: ended {got:?} at {when} ns, the \
                             model says {expected:?} at {at} ns",
                            request.key
                        ));
                    }
                }
                (expected, got) => {
                    return Err(format!(
                        "request {index} on key {} at {now} ns: the model says \
                         {expected:?}, the task {got:?}",
                        request.key
                    ))
                }
            }
        }
        if self.keyed.len() > usize::from(KEYS) {
            return Err(format!("{} keys held, of {KEYS}", self.keyed.len()));
        }
        for model in &mut self.models {
            model.all_seen();
        }
        Ok(())
    }
}

/// The model's outcome of a `take` as `Keyed::acquire` reports it.
fn acquire_error(error: TakeError) -> AcquireError {
    match error {
        TakeError::ExceedsCapacity {
            requested,
            capacity,
        } => AcquireError::ExceedsLimit {
            requested,
            limit: capacity,
        },
        TakeError::QueueFull { queued, limit } => AcquireError::QueueFull { queued, limit },
        TakeError::NoRuntime => AcquireError::NoRuntime,
        // No deadline and no close here: nothing else can end a `take`.
        _ => AcquireError::Closed,
    }
}

/// Whether `got` is what the model `expected` of a `try_acquire`.
fn compare_try(
    got: Result<(), TryAcquireError>,
    expected: Result<(), TryTakeRefusal>,
) -> Result<(), String> {
    let agrees = match (&got, &expected) {
        (Ok(()), Ok(())) => true,
        (
            Err(TryAcquireError::ExceedsLimit { requested, limit }),
            Err(TryTakeRefusal::Error(TryTakeError::ExceedsCapacity {
                requested: expected_requested,
                capacity,
            })),
        ) => (requested, limit) == (expected_requested, capacity),
        (
            Err(TryAcquireError::Limited { retry_after }),
            Err(TryTakeRefusal::Insufficient(insufficient)),
        ) => {
            if insufficient.retry_after_exact {
                *retry_after == insufficient.true_wait
            } else {
                *retry_after >= insufficient.true_wait
            }
        }
        _ => false,
    };
    if agrees {
        Ok(())
    } else {
        Err(format!("got {got:?}, the model says {expected:?}"))
    }
}

fn run(setup: &Setup, ops: &[Op]) -> Result<(usize, usize), String> {
    paused_runtime()?.block_on(async {
        let template = TokenBucket::new(setup.rate.to_rate(), setup.capacity)
            .map_err(|error| error.to_string())?;
        let mut lockstep = Lockstep {
            keyed: Keyed::new(template),
            models: (0..KEYS).map(|_| Model::new(setup.clone())).collect(),
            origin: Instant::now(),
            requests: Vec::new(),
            finished: Arc::default(),
            came_back: 0,
            queued_keys: vec![false; usize::from(KEYS)],
        };
        for (step, op) in ops.iter().enumerate() {
            lockstep
                .apply(op)
                .await
                .map_err(|error| format!("step {step} ({op:?}): {error}"))?;
        }
        for request in &lockstep.requests {
            request.handle.abort();
        }
        Ok((lockstep.requests.len(), lockstep.came_back))
    })
}

#[test]
fn every_key_agrees_with_its_model_through_compact_and_whole_forms() {
    let mut runner = TestRunner::new(config());
    let totals = Mutex::new((0usize, 0usize));
    let result = runner.run(&case(), |(setup, ops)| {
        let (requests, came_back) = run(&setup, &ops).map_err(TestCaseError::fail)?;
        let mut totals = totals.lock().unwrap();
        totals.0 += requests;
        totals.1 += came_back;
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
    let (requests, came_back) = totals.into_inner().unwrap();
    println!(
        "{} cases, {requests} acquires; {came_back} times a key that had queued a waiter \
         was served by try_acquire again once its line was empty",
        runner.config().cases
    );
    // Not vacuous: keys went whole for their waiters and came back.
    assert!(came_back > 0, "no key came back from waiting");
}
