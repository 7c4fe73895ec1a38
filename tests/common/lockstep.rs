//! Runs a real `TokenBucket` and the reference [`Model`] side by side on tokio's paused
//! clock, one operation at a time, and compares them after every step.
//!
//! Requests run as spawned tasks that record their result and the instant they saw it.
//! Between operations the runner lets every task that is due run (without letting time
//! pass), then checks each task's outcome and instant, `available()`, `queued()`, every
//! field of `stats()` and every limit's `limit_stats()` against the model. Instants are compared exactly where a call
//! decided the outcome, and within tokio's 1 ms timer granularity where the schedule did.
//!
//! Operations happen on whole milliseconds since the bucket was made (time only passes
//! by sleeping whole milliseconds), so every timer due by then has fired: the waiters
//! whose deadline passed are gone, as the model says.
//!
//! Beside the step-by-step comparison, [`check_history`] checks the promises that do not
//! need the model, from what the tasks saw alone: never more tokens granted in an interval
//! than any one limit's capacity plus what accrued to it and was refunded in it; grants in
//! queue order; nobody finishing past their deadline.
//!
//! Shared by `tests/model.rs` and the `ops` fuzz target (through `#[path]`), so it uses
//! nothing but tokio, `futures` and the crate.
#![allow(dead_code)]

use std::cell::RefCell;
use std::future::Future;
use std::io::Write;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once};
use std::time::Duration;

use futures::FutureExt;
use token_bucket::{Stats, TakeError, TokenBucket, TryTakeError};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::model::{Decider, Kind, Model, ModelRate, Setup, Status, TryTakeRefusal, NO_DEADLINE};

const MILLI: u64 = 1_000_000;
/// tokio's timers fire on whole milliseconds: something due at T is seen by T + 1 ms.
const TIMER_GRANULARITY: u64 = MILLI;
/// Yields allowed for the tasks to catch up with the model before a step is judged.
const SETTLE_YIELDS: usize = 10_000;
/// Yields after they caught up, so that a task finishing when it should not gets to.
const EXTRA_YIELDS: usize = 3;
/// Waits on the schedule allowed after the operations, until nobody is queued.
const DRAIN_STEPS: usize = 100_000;

/// One step of a run.
#[derive(Debug, Clone)]
pub enum Op {
    /// `try_take(tokens)`.
    TryTake(u64),
    /// Spawns a task awaiting `take` or `wait`, or their timeout forms with `timeout`.
    /// With `cancel_unpolled`, the task is aborted before its first poll.
    Request {
        kind: Kind,
        tokens: u64,
        timeout: Option<Duration>,
        cancel_unpolled: bool,
    },
    /// Drops the future of the `pick`-th request (modulo their count) among those whose
    /// task has not finished, or among all when every one has. With `racing`,
    /// right after the previous op without letting the tasks run first: after a sleep or a
    /// call, its outcome may have been decided and not seen yet (a grant it never saw).
    /// (After a request or another drop the tasks are let run first: their order would
    /// decide the outcome.)
    Drop {
        pick: usize,
        racing: bool,
    },
    SetRate(ModelRate),
    SetCapacity(u64),
    /// `set_limit_rate(limit, rate)`; the limit may be one the bucket does not have.
    SetLimitRate(usize, ModelRate),
    /// `set_limit_capacity(limit, capacity)`; the limit may be one the bucket does not
    /// have.
    SetLimitCapacity(usize, u64),
    Refund(u64),
    Close,
    /// Lets `millis` milliseconds of paused time pass.
    Sleep(u64),
    /// Lets time pass until the timer tick at which the next thing due (the head's
    /// tokens, or a deadline) is delivered: where a drop races a grant. Nothing happens
    /// while nobody waits.
    SleepUntilDue,
    /// `SleepUntilDue`, then the op inside (a call or a drop) at that tick before any task
    /// has run: a grant dropped unseen at the tick that delivers it, as
    /// `tokio::time::timeout(limit, bucket.take(n))` does when both fire at once; a close
    /// or a refund racing the refill task. When a waiter behind the head passed its
    /// deadline by then, its own timer must run first (see [`Model::own_timer_due`]), so
    /// the tasks are let run before the op.
    AtDue(Box<Op>),
}

impl Op {
    /// Whether a racing drop may follow it.
    fn may_race(&self) -> bool {
        !matches!(self, Op::Request { .. } | Op::Drop { .. } | Op::AtDue(_))
    }
}

/// What a run checked, to report.
#[derive(Debug, Clone, Copy, Default)]
pub struct Summary {
    pub steps: u64,
    pub requests: u64,
    /// Requests that had to queue.
    pub queued: u64,
    pub granted: u64,
    pub timed_out: u64,
    pub closed: u64,
    /// Refused otherwise: over the capacity, or the queue full.
    pub refused: u64,
    /// Dropped before they saw an outcome.
    pub cancelled: u64,
    /// Of those, granted (on the schedule or by a call) before they were dropped.
    pub unseen_grants_dropped: u64,
}

impl Summary {
    pub fn add(&mut self, other: Summary) {
        self.steps += other.steps;
        self.requests += other.requests;
        self.queued += other.queued;
        self.granted += other.granted;
        self.timed_out += other.timed_out;
        self.closed += other.closed;
        self.refused += other.refused;
        self.cancelled += other.cancelled;
        self.unseen_grants_dropped += other.unseen_grants_dropped;
    }
}

/// Runs `ops` on a bucket made with `setup` and on the model, on a fresh current-thread
/// runtime with paused time. `Err` says where they first disagreed, or which promise broke.
pub fn run(setup: &Setup, ops: &[Op]) -> Result<Summary, String> {
    run_against(setup, Model::new(setup.clone()), ops)
}

/// As [`run`], against a model made separately: to show that a disagreement is caught.
pub fn run_against(setup: &Setup, model: Model, ops: &[Op]) -> Result<Summary, String> {
    paused_runtime()?.block_on(async {
        let mut lockstep = Lockstep::new(setup, model)?;
        lockstep.run(ops).await?;
        Ok(lockstep.summary())
    })
}

/// A current-thread runtime on paused time, its clock at the start, watching this
/// thread's panics afresh (see [`panic_seen`]).
pub fn paused_runtime() -> Result<tokio::runtime::Runtime, String> {
    watch_panics();
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|error| format!("no runtime: {error}"))
}

thread_local! {
    /// The first panic on this thread since the runtime was made, and how many followed.
    static PANICS: RefCell<(Option<String>, u32)> = const { RefCell::new((None, 0)) };
}

/// A panic inside the runtime (in the refill task, say) is a bug, but tokio catches it and
/// waiters start the task again, which may panic again and again without time moving on:
/// a case would spin instead of failing. Past this many, the process is aborted.
const PANICS_BEFORE_ABORT: u32 = 1_000;

fn watch_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let (first, count) = PANICS.with(|panics| {
                let mut panics = panics.borrow_mut();
                panics.0.get_or_insert_with(|| info.to_string());
                panics.1 += 1;
                panics.clone()
            });
            if count == 1 {
                previous(info);
            }
            if count >= PANICS_BEFORE_ABORT {
                // Straight to the process's standard error: the test harness's capture of
                // `eprintln!` would be lost with the process.
                let _ = writeln!(
                    std::io::stderr(),
                    "{count} panics in one case, aborting; the first: {}",
                    first.unwrap_or_default()
                );
                std::process::abort();
            }
        }));
    });
    PANICS.with(|panics| *panics.borrow_mut() = (None, 0));
}

/// `Err` with the first panic on this thread since the runtime was made, if any.
pub fn panic_seen() -> Result<(), String> {
    PANICS.with(|panics| match &panics.borrow().0 {
        Some(message) => Err(format!("a panic inside the runtime: {message}")),
        None => Ok(()),
    })
}

/// What a task saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    Finished {
        result: Result<(), TakeError>,
        at: u64,
    },
    Cancelled,
}

/// A request run as a task.
pub struct Task {
    /// `None` when it was cancelled before its first poll: the bucket never saw it.
    model_id: Option<usize>,
    pub kind: Kind,
    pub tokens: u64,
    pub deadline: u64,
    pub spawned_at: u64,
    /// The task was still pending once it had been polled: it queued.
    pub queued: bool,
    pub dropped_at: Option<u64>,
    pub seen: Option<Seen>,
    started: Arc<AtomicBool>,
    handle: JoinHandle<(Result<(), TakeError>, Instant)>,
}

type Request = Pin<Box<dyn Future<Output = Result<(), TakeError>> + Send>>;

impl Task {
    pub fn spawn(request: Request, kind: Kind, tokens: u64, deadline: u64, now: u64) -> Task {
        let started = Arc::new(AtomicBool::new(false));
        let handle = tokio::spawn({
            let started = Arc::clone(&started);
            async move {
                started.store(true, Ordering::Release);
                let result = request.await;
                (result, Instant::now())
            }
        });
        Task {
            model_id: None,
            kind,
            tokens,
            deadline,
            spawned_at: now,
            queued: false,
            dropped_at: None,
            seen: None,
            started,
            handle,
        }
    }

    pub fn started(&self) -> bool {
        self.started.load(Ordering::Acquire)
    }

    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    pub fn abort(&mut self, now: u64) {
        if !self.handle.is_finished() {
            self.dropped_at.get_or_insert(now);
        }
        self.handle.abort();
    }

    /// Reads the task's outcome once it has finished.
    pub fn collect(&mut self, origin: Instant) -> Result<(), String> {
        if self.seen.is_some() {
            return Ok(());
        }
        if !self.handle.is_finished() {
            if self.started() {
                self.queued = true;
            }
            return Ok(());
        }
        // Unconstrained: a join handle spends tokio's cooperative budget (128 polls a
        // turn) even when its task is done, and past it says "not yet"; a caller reading
        // more finished tasks than that in one turn would be told the rest had no output.
        let output = tokio::task::unconstrained(&mut self.handle).now_or_never();
        self.seen = Some(match output {
            Some(Ok((result, instant))) => Seen::Finished {
                result,
                at: nanos_between(origin, instant),
            },
            Some(Err(error)) if error.is_cancelled() => Seen::Cancelled,
            Some(Err(error)) => return Err(format!("a request's task failed: {error}")),
            None => return Err("a finished task had no output".to_owned()),
        });
        Ok(())
    }

    /// Its grant, if it took tokens: how many, and the earliest and latest instant it can
    /// have happened, from what the task saw.
    pub fn grant(&self) -> Option<Grant> {
        match self.seen {
            Some(Seen::Finished { result: Ok(()), at }) if self.kind == Kind::Take => Some(Grant {
                tokens: self.tokens,
                earliest: at.saturating_sub(TIMER_GRANULARITY),
                latest: at,
            }),
            _ => None,
        }
    }

    /// The instant it left the queue for good: when it finished, or when it was dropped.
    fn left_at(&self) -> Option<u64> {
        match self.seen {
            Some(Seen::Finished { at, .. }) => Some(at),
            Some(Seen::Cancelled) => self.dropped_at,
            None => None,
        }
    }
}

/// Tokens granted at some instant in `[earliest, latest]`.
#[derive(Debug, Clone, Copy)]
pub struct Grant {
    pub tokens: u64,
    pub earliest: u64,
    pub latest: u64,
}

/// Where tokens can come from over a run, for each limit: its rate (changing at
/// instants) and the most it ever held at once; and the refunds, which every limit gets.
#[derive(Debug, Clone)]
pub struct Supply {
    /// Limit 0 first.
    pub limits: Vec<LimitSupply>,
    pub refunds: Vec<(u64, u64)>,
}

/// One limit's part of a [`Supply`].
#[derive(Debug, Clone)]
pub struct LimitSupply {
    /// From each instant on, the rate; the first starts at 0.
    pub rates: Vec<(u64, ModelRate)>,
    pub largest_capacity: u64,
}

impl Supply {
    /// Limit `limit`'s capacity was set to `capacity`.
    fn capacity_set(&mut self, limit: usize, capacity: u64) {
        let largest = &mut self.limits[limit].largest_capacity;
        *largest = (*largest).max(capacity);
    }

    pub fn new(setup: &Setup) -> Supply {
        Supply {
            limits: setup
                .limits()
                .into_iter()
                .map(|(rate, capacity)| LimitSupply {
                    rates: vec![(0, rate)],
                    largest_capacity: capacity,
                })
                .collect(),
            refunds: Vec::new(),
        }
    }

    /// The most whole tokens that can become available in `[from, to]` under limit
    /// `limit`: what it held (at most its capacity, its fraction included), what accrued
    /// to it over the stretches of constant rate (exactly, the fractions of all stretches
    /// summed before rounding down), and what was refunded. A grant dropped unseen adds
    /// nothing: it is undone as if never made. One allowance: at the nanosecond a waiter
    /// takes a full limit that filled at that nanosecond, what it added is capped only
    /// after the grants, so the limit may hold up to one nanosecond's accrual above its
    /// capacity there.
    fn most_available(&self, limit: usize, from: u64, to: u64) -> u128 {
        let LimitSupply {
            rates,
            largest_capacity,
        } = &self.limits[limit];
        let mut tokens = u128::from(*largest_capacity);
        // Fractions of a token, summed in floating point: at most 50 stretches, each
        // below 1, so the error is far below the allowance added to it.
        let mut fractions = 0.0;
        let mut allowance: f64 = 0.0;
        for (index, &(start, rate)) in rates.iter().enumerate() {
            let period = u128::from(rate.period);
            allowance = allowance.max(rate.amount as f64 / period as f64);
            let end = rates.get(index + 1).map_or(u64::MAX, |&(next, _)| next);
            let (start, end) = (start.max(from), end.min(to));
            if start < end {
                let parts = u128::from(end - start) * u128::from(rate.amount);
                tokens += parts / period;
                fractions += (parts % period) as f64 / period as f64;
            }
        }
        let refunded = self
            .refunds
            .iter()
            .filter(|&&(at, _)| from <= at && at <= to);
        tokens
            + (fractions + allowance + 1e-9).floor() as u128
            + refunded
                .map(|&(_, tokens)| u128::from(tokens))
                .sum::<u128>()
    }
}

/// Fails when some interval holds more granted tokens than could have been available in
/// it under any one limit. Only intervals from some grant's earliest instant to some
/// grant's latest need checking: any set of grants lies inside one of those.
pub fn check_never_over(grants: &[Grant], supply: &Supply) -> Result<(), String> {
    (0..supply.limits.len()).try_for_each(|limit| check_limit_never_over(grants, supply, limit))
}

fn check_limit_never_over(grants: &[Grant], supply: &Supply, limit: usize) -> Result<(), String> {
    for start in grants {
        for end in grants {
            let (from, to) = (start.earliest, end.latest);
            if from > to {
                continue;
            }
            let inside: u128 = grants
                .iter()
                .filter(|grant| from <= grant.earliest && grant.latest <= to)
                .map(|grant| u128::from(grant.tokens))
                .sum();
            let most = supply.most_available(limit, from, to);
            if inside > most {
                let LimitSupply {
                    rates,
                    largest_capacity,
                } = &supply.limits[limit];
                return Err(format!(
                    "{inside} tokens granted within [{from} ns, {to} ns], but at most {most} \
                     could be there under limit {limit} (capacity {largest_capacity}, rates \
                     {rates:?}, refunds {:?})",
                    supply.refunds
                ));
            }
        }
    }
    Ok(())
}

/// Checks, from what the tasks saw alone: grants follow queue order (nobody queued is
/// granted while someone queued before it is still waiting), and nobody with a deadline
/// finished more than the timer's granularity past it, or timed out before it unless
/// refused at once.
pub fn check_order_and_deadlines(tasks: &[Task]) -> Result<(), String> {
    let queued: Vec<&Task> = tasks.iter().filter(|task| task.queued).collect();
    for (position, later) in queued.iter().enumerate() {
        let Some(Seen::Finished {
            result: Ok(()),
            at: granted_at,
        }) = later.seen
        else {
            continue;
        };
        for earlier in &queued[..position] {
            match earlier.left_at() {
                Some(left_at) if left_at <= granted_at => {}
                left_at => {
                    return Err(format!(
                        "a request queued at {} ns was granted at {granted_at} ns while one \
                         queued before it at {} ns was still waiting (it left at {left_at:?})",
                        later.spawned_at, earlier.spawned_at
                    ))
                }
            }
        }
    }
    for task in tasks {
        let Some(Seen::Finished { result, at }) = task.seen else {
            continue;
        };
        if task.deadline != NO_DEADLINE && at > task.deadline.saturating_add(TIMER_GRANULARITY) {
            return Err(format!(
                "a request with its deadline at {} ns finished at {at} ns with {result:?}",
                task.deadline
            ));
        }
        let refused_at_once = !task.queued && at == task.spawned_at;
        if result == Err(TakeError::Timeout) && at < task.deadline && !refused_at_once {
            return Err(format!(
                "a request queued with its deadline at {} ns timed out early, at {at} ns",
                task.deadline
            ));
        }
    }
    Ok(())
}

pub fn nanos_between(origin: Instant, instant: Instant) -> u64 {
    u64::try_from(instant.duration_since(origin).as_nanos()).expect("runs last under 584 years")
}

/// The request future `kind` and `timeout` name.
pub fn request_future(
    bucket: &TokenBucket,
    kind: Kind,
    tokens: u64,
    timeout: Option<Duration>,
) -> Request {
    match (kind, timeout) {
        (Kind::Take, None) => Box::pin(bucket.take(tokens)),
        (Kind::Take, Some(timeout)) => Box::pin(bucket.take_timeout(tokens, timeout)),
        (Kind::Wait, None) => Box::pin(bucket.wait(tokens)),
        (Kind::Wait, Some(timeout)) => Box::pin(bucket.wait_timeout(tokens, timeout)),
    }
}

/// The deadline the bucket gives a request made at `now` with `timeout`.
pub fn deadline_of(now: u64, timeout: Option<Duration>) -> u64 {
    match timeout {
        None => NO_DEADLINE,
        Some(timeout) => {
            let timeout = u64::try_from(timeout.as_nanos()).unwrap_or(NO_DEADLINE);
            now.saturating_add(timeout)
        }
    }
}

struct Lockstep {
    bucket: TokenBucket,
    model: Model,
    origin: Instant,
    tasks: Vec<Task>,
    try_take_grants: Vec<Grant>,
    supply: Supply,
    summary: Summary,
}

impl Lockstep {
    fn new(setup: &Setup, model: Model) -> Result<Lockstep, String> {
        let origin = Instant::now();
        let mut builder = TokenBucket::builder()
            .rate(setup.rate.to_rate())
            .capacity(setup.capacity);
        for &(rate, capacity) in &setup.more {
            builder = builder.limit(rate.to_rate(), capacity);
        }
        if let Some(initial) = setup.initial {
            builder = builder.initial(initial);
        }
        if let Some(limit) = setup.queue_limit {
            builder = builder.queue_limit(limit);
        }
        let bucket = builder
            .build()
            .map_err(|error| format!("the setup {setup:?} was refused: {error}"))?;
        Ok(Lockstep {
            bucket,
            model,
            origin,
            tasks: Vec::new(),
            try_take_grants: Vec::new(),
            supply: Supply::new(setup),
            summary: Summary::default(),
        })
    }

    fn now(&self) -> u64 {
        nanos_between(self.origin, Instant::now())
    }

    fn summary(&self) -> Summary {
        self.summary
    }

    async fn run(&mut self, ops: &[Op]) -> Result<(), String> {
        let mut may_race = false;
        for (index, op) in ops.iter().enumerate() {
            let racing = may_race
                && matches!(op, Op::Drop { racing: true, .. })
                && !self.model.own_timer_due(self.now());
            if !racing {
                self.settle_and_compare()
                    .await
                    .map_err(|error| format!("before op {index} ({op:?}): {error}"))?;
            }
            self.apply(op)
                .await
                .map_err(|error| format!("op {index} ({op:?}): {error}"))?;
            self.summary.steps += 1;
            may_race = op.may_race();
        }
        self.settle_and_compare()
            .await
            .map_err(|error| format!("after the last op: {error}"))?;
        self.drain().await?;
        let mut grants = self.try_take_grants.clone();
        grants.extend(self.tasks.iter().filter_map(Task::grant));
        check_never_over(&grants, &self.supply)?;
        check_order_and_deadlines(&self.tasks)
    }

    async fn apply(&mut self, op: &Op) -> Result<(), String> {
        let now = self.now();
        match *op {
            Op::TryTake(tokens) => {
                let got = self.bucket.try_take(tokens);
                let expected = self.model.try_take(tokens, now);
                compare_try_take(got, expected)?;
                if got.is_ok() && tokens > 0 {
                    self.try_take_grants.push(Grant {
                        tokens,
                        earliest: now,
                        latest: now,
                    });
                }
            }
            Op::Request {
                kind,
                tokens,
                timeout,
                cancel_unpolled,
            } => {
                let future = request_future(&self.bucket, kind, tokens, timeout);
                let deadline = deadline_of(now, timeout);
                let mut task = Task::spawn(future, kind, tokens, deadline, now);
                if cancel_unpolled {
                    task.abort(now);
                } else {
                    task.model_id = Some(self.model.request(kind, tokens, deadline, now));
                }
                self.tasks.push(task);
                self.summary.requests += 1;
            }
            Op::Drop { pick, .. } => self.drop_request(pick, now),
            Op::SetRate(rate) => {
                let got = self.bucket.set_rate(rate.to_rate());
                let expected = self.model.set_rate(rate, now);
                if got != expected {
                    return Err(format!("set_rate returned {got:?}, expected {expected:?}"));
                }
                if got.is_ok() {
                    self.supply.limits[0].rates.push((now, rate));
                }
            }
            Op::SetCapacity(capacity) => {
                let got = self.bucket.set_capacity(capacity);
                let expected = self.model.set_capacity(capacity, now);
                if got != expected {
                    return Err(format!(
                        "set_capacity returned {got:?}, expected {expected:?}"
                    ));
                }
                if got.is_ok() {
                    self.supply.capacity_set(0, capacity);
                }
            }
            Op::SetLimitRate(limit, rate) => {
                let got = self.bucket.set_limit_rate(limit, rate.to_rate());
                let expected = self.model.set_limit_rate(limit, rate, now);
                if got != expected {
                    return Err(format!(
                        "set_limit_rate returned {got:?}, expected {expected:?}"
                    ));
                }
                if got.is_ok() {
                    self.supply.limits[limit].rates.push((now, rate));
                }
            }
            Op::SetLimitCapacity(limit, capacity) => {
                let got = self.bucket.set_limit_capacity(limit, capacity);
                let expected = self.model.set_limit_capacity(limit, capacity, now);
                if got != expected {
                    return Err(format!(
                        "set_limit_capacity returned {got:?}, expected {expected:?}"
                    ));
                }
                if got.is_ok() {
                    self.supply.capacity_set(limit, capacity);
                }
            }
            Op::Refund(tokens) => {
                self.bucket.refund(tokens);
                self.model.refund(tokens, now);
                self.supply.refunds.push((now, tokens));
            }
            Op::Close => {
                self.bucket.close();
                self.model.close(now);
            }
            Op::Sleep(millis) => {
                if millis > 0 {
                    tokio::time::sleep(Duration::from_millis(millis)).await;
                }
            }
            Op::SleepUntilDue => {
                if let Some(due) = self.model.next_due(now) {
                    self.sleep_until_tick_of(due).await;
                }
            }
            Op::AtDue(ref inside) => {
                if let Some(due) = self.model.next_due(now) {
                    self.sleep_until_tick_of(due).await;
                }
                if self.model.own_timer_due(self.now()) {
                    self.settle_and_compare().await?;
                }
                Box::pin(self.apply(inside)).await?;
            }
        }
        Ok(())
    }

    /// Lets the tasks catch up with the model without time passing, then compares.
    async fn settle_and_compare(&mut self) -> Result<(), String> {
        let now = self.now();
        if now % MILLI != 0 {
            return Err(format!(
                "time stands at {now} ns, not on a whole millisecond: the runner's premise broke"
            ));
        }
        self.model.available(now);
        for _ in 0..SETTLE_YIELDS {
            panic_seen()?;
            if self.caught_up() {
                break;
            }
            tokio::task::yield_now().await;
        }
        for _ in 0..EXTRA_YIELDS {
            tokio::task::yield_now().await;
        }
        panic_seen()?;
        for task in &mut self.tasks {
            task.collect(self.origin)?;
        }
        self.compare(now)
            .map_err(|error| format!("at {now} ns: {error}"))?;
        self.model.all_seen();
        Ok(())
    }

    /// Every task the model says has finished has, and every other one has been polled.
    fn caught_up(&self) -> bool {
        self.tasks.iter().all(|task| match task.model_id {
            None => task.is_finished(),
            Some(id) => match self.model.status(id) {
                Status::Queued => task.started(),
                Status::Finished { .. } | Status::Dropped => task.is_finished(),
            },
        })
    }

    fn compare(&mut self, now: u64) -> Result<(), String> {
        for (index, task) in self.tasks.iter().enumerate() {
            let expected = task.model_id.map(|id| self.model.status(id));
            compare_task(task, expected).map_err(|error| {
                format!("request {index} ({:?} {}): {error}", task.kind, task.tokens)
            })?;
        }
        let stats = self.bucket.stats();
        let expected = ExpectedStats {
            available: self.model.available(now),
            capacity: self.model.capacity(),
            rate: self.model.rate().to_rate(),
            queued: self.model.queued(now),
            queued_tokens: self.model.queued_tokens(now),
            counters: self.model.counters(now),
            closed: self.model.is_closed(),
        };
        expected.compare(&stats)?;
        let limits: Vec<_> = (self.bucket.limit_stats().iter())
            .map(|limit| (limit.rate, limit.capacity, limit.available))
            .collect();
        let expected_limits: Vec<_> = (self.model.limit_views(now).iter())
            .map(|limit| (limit.rate.to_rate(), limit.capacity, limit.available))
            .collect();
        if limits != expected_limits {
            return Err(format!(
                "limit_stats() (rate, capacity, available) are {limits:?}, expected \
                 {expected_limits:?}"
            ));
        }
        let (available, queued) = (self.bucket.available(), self.bucket.queued());
        if (available, queued) != (expected.available, expected.queued) {
            return Err(format!(
                "available() = {available}, queued() = {queued}; expected {} and {}",
                expected.available, expected.queued
            ));
        }
        Ok(())
    }

    /// Drops the future of the `pick`-th unfinished request (see [`Op::Drop`]).
    fn drop_request(&mut self, pick: usize, now: u64) {
        if self.tasks.is_empty() {
            return;
        }
        // Outcomes whose task already ran were seen, whether or not the tasks were let run
        // since the last op.
        self.model.available(now);
        for task in &self.tasks {
            if let (Some(id), true) = (task.model_id, task.is_finished()) {
                self.model.seen(id);
            }
        }
        let unfinished: Vec<usize> = (0..self.tasks.len())
            .filter(|&index| !self.tasks[index].is_finished())
            .collect();
        let index = if unfinished.is_empty() {
            pick % self.tasks.len()
        } else {
            unfinished[pick % unfinished.len()]
        };
        let task = &mut self.tasks[index];
        task.abort(now);
        if let Some(id) = task.model_id {
            if let Status::Finished {
                result: Ok(()),
                seen: false,
                ..
            } = self.model.status(id)
            {
                self.summary.unseen_grants_dropped += 1;
            }
            self.model.drop_request(id, now);
        }
    }

    /// Sleeps until the first whole millisecond at or after `due` (at least the next one).
    async fn sleep_until_tick_of(&self, due: u64) {
        let now = self.now();
        let tick = due.div_ceil(MILLI).saturating_mul(MILLI).max(now + MILLI);
        tokio::time::sleep_until(self.origin + Duration::from_nanos(tick)).await;
    }

    /// Lets time pass on the schedule until nobody waits; then the queue must be empty and
    /// every task done.
    async fn drain(&mut self) -> Result<(), String> {
        for _ in 0..DRAIN_STEPS {
            let now = self.now();
            let Some(due) = self.model.next_due(now) else {
                break;
            };
            self.sleep_until_tick_of(due).await;
            self.settle_and_compare()
                .await
                .map_err(|error| format!("draining: {error}"))?;
        }
        let queued = self.bucket.queued();
        if queued != 0 || !self.tasks.iter().all(Task::is_finished) {
            return Err(format!(
                "after draining, {queued} requests are still queued at {} ns",
                self.now()
            ));
        }
        for task in &self.tasks {
            let summary = &mut self.summary;
            summary.queued += u64::from(task.queued);
            match task.seen {
                Some(Seen::Finished { result: Ok(()), .. }) => summary.granted += 1,
                Some(Seen::Finished {
                    result: Err(TakeError::Timeout),
                    ..
                }) => summary.timed_out += 1,
                Some(Seen::Finished {
                    result: Err(TakeError::Closed),
                    ..
                }) => summary.closed += 1,
                Some(Seen::Finished { result: Err(_), .. }) => summary.refused += 1,
                Some(Seen::Cancelled) | None => summary.cancelled += 1,
            }
        }
        Ok(())
    }
}

struct ExpectedStats {
    available: u64,
    capacity: u64,
    rate: token_bucket::Rate,
    queued: usize,
    queued_tokens: u64,
    counters: super::model::Counters,
    closed: bool,
}

impl ExpectedStats {
    fn compare(&self, stats: &Stats) -> Result<(), String> {
        let got = (
            stats.available,
            stats.capacity,
            stats.rate,
            stats.queued,
            stats.queued_tokens,
            (stats.taken, stats.refunded, stats.denied, stats.timed_out),
            stats.closed,
        );
        let counters = self.counters;
        let expected = (
            self.available,
            self.capacity,
            self.rate,
            self.queued,
            self.queued_tokens,
            (
                counters.taken,
                counters.refunded,
                counters.denied,
                counters.timed_out,
            ),
            self.closed,
        );
        if got != expected {
            return Err(format!(
                "stats (available, capacity, rate, queued, queued_tokens, \
                 (taken, refunded, denied, timed_out), closed) are {got:?}, expected {expected:?}"
            ));
        }
        Ok(())
    }
}

fn compare_try_take(
    got: Result<(), TryTakeError>,
    expected: Result<(), TryTakeRefusal>,
) -> Result<(), String> {
    let agrees = match (got, expected) {
        (Ok(()), Ok(())) => true,
        (Err(error), Err(TryTakeRefusal::Error(expected))) => error == expected,
        (
            Err(TryTakeError::Insufficient { retry_after }),
            Err(TryTakeRefusal::Insufficient(expected)),
        ) => {
            if expected.retry_after_exact {
                retry_after == expected.true_wait
            } else {
                retry_after >= expected.true_wait
            }
        }
        _ => false,
    };
    if agrees {
        Ok(())
    } else {
        Err(format!("try_take returned {got:?}, expected {expected:?}"))
    }
}

fn compare_task(task: &Task, expected: Option<Status>) -> Result<(), String> {
    let Some(expected) = expected else {
        // Cancelled before its first poll: it never reached the bucket.
        return match (task.started(), task.seen) {
            (false, Some(Seen::Cancelled)) => Ok(()),
            (started, seen) => Err(format!(
                "cancelled before its first poll, but started = {started}, saw {seen:?}"
            )),
        };
    };
    match (expected, task.seen) {
        (Status::Queued, None) if task.started() => Ok(()),
        (Status::Dropped, Some(Seen::Cancelled)) => Ok(()),
        (
            Status::Finished { result, at, by, .. },
            Some(Seen::Finished {
                result: seen_result,
                at: seen_at,
            }),
        ) => {
            let in_time = match by {
                Decider::Call => seen_at == at,
                Decider::Schedule | Decider::OwnTimer => {
                    at <= seen_at && seen_at <= at + TIMER_GRANULARITY
                }
            };
            if seen_result == result && in_time {
                Ok(())
            } else {
                Err(format!(
                    "saw {seen_result:?} at {seen_at} ns; expected {result:?} at {at} ns ({by:?})"
                ))
            }
        }
        (expected, seen) => Err(format!(
            "expected {expected:?}, but the task saw {seen:?} (started: {})",
            task.started()
        )),
    }
}
