//! Model-based tests of `Keyed` (issue 16): random sequences of `try_acquire`, `acquire`,
//! dropped waiters, `get`, sweeps and time passing on a few keys, on paused time.
//!
//! - Keys of a `Keyed<u8, TokenBucket>` are each checked in lockstep against their own
//!   sequential reference model (`common/model.rs`, the one the bucket is checked
//!   against).
//! - Keys of a `Keyed<u8, FixedWindow>` are each checked against a `FixedWindow` of their
//!   own (the limiter a key's word stands for, itself checked by `fixed_window.rs`),
//!   asked the same things at the same instants.
//!
//! A key nobody waits on is held as one word; an `acquire` that must wait makes it a
//! whole limiter, which folds back into the word once its line is empty and nobody holds
//! it (as its last waiter ends, at the key's next call, or at a sweep). The sequences go
//! through every one of those changes: whichever form answers, every result, every
//! `retry_after` and every grant's instant must be the reference's. After every step the
//! test also counts the keys held whole (`Keyed::keys_held_whole`): every key waited on,
//! and no other, unless a `get` handle let go since may still hold it whole; and keys must
//! be seen to go whole and come back.
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
use token_bucket::{
    AcquireError, FixedWindow, KeyTemplate, Keyed, TokenBucket, TryAcquireError, TryTakeError,
};
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

/// A rate's period or a window, in nanoseconds.
fn period() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(MILLI),
        Just(3 * MILLI),
        Just(250 * MILLI),
        Just(333_333_333),
        Just(1_000 * MILLI),
    ]
}

fn setup() -> impl Strategy<Value = Setup> {
    (1..=3u64, period(), 1..=4u64).prop_map(|(amount, period, capacity)| Setup {
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

/// A fixed window's limit and length in nanoseconds, and the steps.
fn window_case() -> impl Strategy<Value = ((u64, u64), Vec<Op>)> {
    (1..=4u64, period()).prop_flat_map(|(limit, window)| {
        let ops = prop::collection::vec(op(limit), 1..60);
        (Just((limit, window)), ops)
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

/// Spawns a task awaiting `acquire`, which reports to `finished` as request `index`.
fn spawn_reporting(
    acquire: impl std::future::Future<Output = Result<(), AcquireError>> + Send + 'static,
    index: usize,
    finished: &Finished,
) -> JoinHandle<()> {
    let finished = Arc::clone(finished);
    tokio::spawn(async move {
        let result = acquire.await;
        let at = Instant::now();
        finished.lock().unwrap().insert(index, (result, at));
    })
}

/// Of the requests `waiting` says are still waiting, the `pick`-th (modulo their count).
fn pick_waiting(requests: usize, pick: usize, waiting: impl Fn(usize) -> bool) -> Option<usize> {
    let waiting: Vec<usize> = (0..requests).filter(|&index| waiting(index)).collect();
    waiting.get(pick % waiting.len().max(1)).copied()
}

/// What the test sees of the keys' forms, through `Keyed::keys_held_whole`.
struct Forms {
    /// Keys handed out by `get` since the keys were last seen all as words but those
    /// waited on: the handle is let go outside the shard's lock, so it folds nothing, and
    /// the key may stay whole until its next call or a sweep.
    handed_out: Vec<bool>,
    /// Keys held, and held whole, when last looked at.
    last: (usize, usize),
    /// Keys seen to fold back: fewer held whole while none was forgotten.
    came_back: usize,
}

impl Forms {
    fn new() -> Forms {
        Forms {
            handed_out: vec![false; usize::from(KEYS)],
            last: (0, 0),
            came_back: 0,
        }
    }

    /// Looks at the keys once the tasks have caught up: every key with requests in its
    /// line (`line_empty` false) is whole, and every other key a word again unless a `get`
    /// handle may hold it whole.
    fn look<L: KeyTemplate>(
        &mut self,
        keyed: &Keyed<u8, L>,
        mut line_empty: impl FnMut(u8) -> bool,
    ) -> Result<(), String> {
        let waited_on: Vec<bool> = (0..KEYS).map(|key| !line_empty(key)).collect();
        let must = waited_on.iter().filter(|&&waited| waited).count();
        let may = (waited_on.iter().zip(&self.handed_out))
            .filter(|(&waited, &handed_out)| waited || handed_out)
            .count();
        let (held, whole) = (keyed.len(), keyed.keys_held_whole());
        if whole < must || whole > may {
            return Err(format!(
                "{whole} keys held whole: {must} waited on, {may} with a line or a handle"
            ));
        }
        if whole == must {
            // Those waited on are the whole ones: every other key is a word, or forgotten.
            for (handed_out, waited) in self.handed_out.iter_mut().zip(waited_on) {
                *handed_out &= waited;
            }
        }
        let (last_held, last_whole) = self.last;
        if held >= last_held {
            self.came_back += last_whole.saturating_sub(whole);
        }
        self.last = (held, whole);
        Ok(())
    }
}

/// A `Keyed` run in lockstep beside what it is checked against.
trait Lockstepped {
    /// Applies `op` to both, lets the tasks catch up, and compares them.
    async fn apply(&mut self, op: &Op) -> Result<(), String>;

    /// Every task spawned, to be aborted once the run ends.
    fn tasks(&self) -> Vec<&JoinHandle<()>>;

    /// The acquires made, and the times a key was seen to fold back.
    fn summary(&self) -> (usize, usize);
}

/// Applies `ops` in turn, and returns the run's summary.
async fn drive(lockstep: &mut impl Lockstepped, ops: &[Op]) -> Result<(usize, usize), String> {
    for (step, op) in ops.iter().enumerate() {
        lockstep
            .apply(op)
            .await
            .map_err(|error| format!("step {step} ({op:?}): {error}"))?;
    }
    for task in lockstep.tasks() {
        task.abort();
    }
    Ok(lockstep.summary())
}

struct Lockstep {
    keyed: Keyed<u8, TokenBucket>,
    models: Vec<Model>,
    origin: Instant,
    requests: Vec<Request>,
    finished: Finished,
    forms: Forms,
}

impl Lockstepped for Lockstep {
    async fn apply(&mut self, op: &Op) -> Result<(), String> {
        let now = self.now();
        match *op {
            Op::TryAcquire { key, permits } => {
                let expected = self.models[usize::from(key)].try_take(permits, now);
                let got = self.keyed.try_acquire(&key, permits);
                compare_try(got, expected)
                    .map_err(|error| format!("try_acquire({key}, {permits}): {error}"))?;
            }
            Op::Acquire { key, permits } => {
                let future = self.keyed.acquire(&key, permits);
                let model_id =
                    self.models[usize::from(key)].request(Kind::Take, permits, NO_DEADLINE, now);
                let index = self.requests.len();
                let handle = spawn_reporting(future, index, &self.finished);
                self.requests.push(Request {
                    key,
                    model_id,
                    handle,
                    dropped: false,
                });
            }
            Op::Drop { pick } => {
                let waiting = pick_waiting(self.requests.len(), pick, |index| {
                    let request = &self.requests[index];
                    !request.dropped
                        && self.models[usize::from(request.key)].status(request.model_id)
                            == Status::Queued
                });
                if let Some(index) = waiting {
                    let request = &mut self.requests[index];
                    request.handle.abort();
                    request.dropped = true;
                    self.models[usize::from(request.key)].drop_request(request.model_id, now);
                }
            }
            Op::Get { key } => {
                let held = self.keyed.get(&key);
                self.forms.handed_out[usize::from(key)] |= held.is_some();
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

    fn tasks(&self) -> Vec<&JoinHandle<()>> {
        self.requests
            .iter()
            .map(|request| &request.handle)
            .collect()
    }

    fn summary(&self) -> (usize, usize) {
        (self.requests.len(), self.forms.came_back)
    }
}

impl Lockstep {
    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).expect("a short test")
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
                    let expected = result.map_err(AcquireError::from);
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
        let models = &mut self.models;
        (self.forms).look(&self.keyed, |key| models[usize::from(key)].queued(now) == 0)?;
        for model in &mut self.models {
            model.all_seen();
        }
        Ok(())
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
            forms: Forms::new(),
        };
        drive(&mut lockstep, ops).await
    })
}

/// A window key's `acquire` beside the same request to its own `FixedWindow`.
struct WindowRequest {
    key: u8,
    keyed: JoinHandle<()>,
    alone: JoinHandle<()>,
    dropped: bool,
}

struct WindowLockstep {
    keyed: Keyed<u8, FixedWindow>,
    /// Each key's own window, made from the same template.
    alone: Vec<FixedWindow>,
    origin: Instant,
    requests: Vec<WindowRequest>,
    finished_keyed: Finished,
    finished_alone: Finished,
    forms: Forms,
}

impl Lockstepped for WindowLockstep {
    async fn apply(&mut self, op: &Op) -> Result<(), String> {
        match *op {
            Op::TryAcquire { key, permits } => {
                let got = self.keyed.try_acquire(&key, permits);
                let expected = self.alone[usize::from(key)].try_acquire(permits);
                if got != expected {
                    return Err(format!(
                        "try_acquire({key}, {permits}): got {got:?}, its window says \
                         {expected:?}"
                    ));
                }
            }
            Op::Acquire { key, permits } => {
                let index = self.requests.len();
                let keyed = spawn_reporting(
                    self.keyed.acquire(&key, permits),
                    index,
                    &self.finished_keyed,
                );
                let window = self.alone[usize::from(key)].clone();
                let alone = spawn_reporting(
                    async move { window.acquire(permits).await },
                    index,
                    &self.finished_alone,
                );
                self.requests.push(WindowRequest {
                    key,
                    keyed,
                    alone,
                    dropped: false,
                });
            }
            Op::Drop { pick } => {
                let finished = self.finished_alone.lock().unwrap().clone();
                let waiting = pick_waiting(self.requests.len(), pick, |index| {
                    !self.requests[index].dropped && !finished.contains_key(&index)
                });
                if let Some(index) = waiting {
                    let request = &mut self.requests[index];
                    request.keyed.abort();
                    request.alone.abort();
                    request.dropped = true;
                }
            }
            Op::Get { key } => {
                let window = &self.alone[usize::from(key)];
                match self.keyed.get(&key) {
                    Some(held) => {
                        self.forms.handed_out[usize::from(key)] = true;
                        if held.available() != window.available() {
                            return Err(format!(
                                "get({key}) holds {}, its window {}",
                                held.available(),
                                window.available()
                            ));
                        }
                    }
                    None if !window.is_idle() => {
                        return Err(format!("get({key}) found no key that is not idle"));
                    }
                    None => {}
                }
            }
            Op::Sweep => {
                self.keyed.retain_recent();
            }
            Op::Sleep { millis } => tokio::time::sleep(Duration::from_millis(millis)).await,
        }
        self.settle_and_compare().await
    }

    fn tasks(&self) -> Vec<&JoinHandle<()>> {
        let requests = self.requests.iter();
        requests
            .flat_map(|request| [&request.keyed, &request.alone])
            .collect()
    }

    fn summary(&self) -> (usize, usize) {
        (self.requests.len(), self.forms.came_back)
    }
}

impl WindowLockstep {
    /// Lets the tasks catch up without time passing, then compares every request with
    /// the same request to its key's window: the same result at the same instant.
    async fn settle_and_compare(&mut self) -> Result<(), String> {
        for _ in 0..SETTLE_YIELDS {
            tokio::task::yield_now().await;
        }
        let keyed = self.finished_keyed.lock().unwrap().clone();
        let alone = self.finished_alone.lock().unwrap().clone();
        for (index, request) in self.requests.iter().enumerate() {
            let (got, expected) = (keyed.get(&index), alone.get(&index));
            if got != expected {
                let at = |ended: Option<&(_, Instant)>| {
                    ended.map(|(_, when)| when.duration_since(self.origin))
                };
                return Err(format!(
                    "request {index} on key {}: ended {:?} after {:?}, its window's {:?} \
                     after {:?}",
                    request.key,
                    got.map(|(result, _)| result),
                    at(got),
                    expected.map(|(result, _)| result),
                    at(expected),
                ));
            }
        }
        if self.keyed.len() > usize::from(KEYS) {
            return Err(format!("{} keys held, of {KEYS}", self.keyed.len()));
        }
        let requests = &self.requests;
        (self.forms).look(&self.keyed, |key| {
            let pending = requests.iter().enumerate().filter(|(index, request)| {
                request.key == key && !request.dropped && !alone.contains_key(index)
            });
            pending.count() == 0
        })
    }
}

fn run_windows((limit, window): (u64, u64), ops: &[Op]) -> Result<(usize, usize), String> {
    paused_runtime()?.block_on(async {
        let template = FixedWindow::new(limit, Duration::from_nanos(window))
            .map_err(|error| error.to_string())?;
        let mut lockstep = WindowLockstep {
            keyed: Keyed::new(template.clone()),
            alone: (0..KEYS).map(|_| template.fresh()).collect(),
            origin: Instant::now(),
            requests: Vec::new(),
            finished_keyed: Arc::default(),
            finished_alone: Arc::default(),
            forms: Forms::new(),
        };
        drive(&mut lockstep, ops).await
    })
}

/// Runs every case of `cases` through `run`, which returns a case's acquires and how many
/// times a key was seen to fold back; prints the totals, and fails unless keys folded.
fn check_all<T: std::fmt::Debug>(
    what: &str,
    cases: impl Strategy<Value = T>,
    run: impl Fn(&T) -> Result<(usize, usize), String>,
) {
    let mut runner = TestRunner::new(config());
    let totals = Mutex::new((0usize, 0usize));
    let result = runner.run(&cases, |case| {
        let (requests, came_back) = run(&case).map_err(TestCaseError::fail)?;
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
        "{what}: {} cases, {requests} acquires; {came_back} times a key seen whole was seen \
         folded back into its word",
        runner.config().cases
    );
    // Not vacuous: keys were seen to go whole for their waiters and fold back.
    assert!(came_back > 0, "{what}: no key was seen to fold back");
}

#[test]
fn every_key_agrees_with_its_model_through_compact_and_whole_forms() {
    check_all("buckets", case(), |(setup, ops)| run(setup, ops));
}

#[test]
fn every_window_key_agrees_with_a_window_of_its_own_through_compact_and_whole_forms() {
    check_all("fixed windows", window_case(), |(window, ops)| {
        run_windows(*window, ops)
    });
}
