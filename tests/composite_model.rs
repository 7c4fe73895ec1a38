//! Model-based test of composites (issue 14, part 5): random interleavings of plain and
//! composite `try`s, waiting `acquire`s, cancellations and time, over a few limiters and
//! composites of two or three of them with overlapping sets, run on real limiters on
//! paused time and on a sequential reference model, compared after every step. One
//! property runs three buckets; a second, two buckets, a `FixedWindow` and a
//! `SlidingLog`.
//!
//! The reference model is the contract, written plainly: each limiter is a line of
//! waiters, first in, first out, and a ledger in whole milliseconds (a bucket's tokens,
//! a fixed window's count in its current window, a sliding log's grants); a plain waiter
//! is admitted once it heads its line and its limiter admits it; a composite once it
//! heads every one of its lines and every one of its limiters admits it, at one instant,
//! counted in all. Nothing is counted before that, and a cancelled waiter leaves every
//! line it stood in. Rates and windows are whole milliseconds, and time moves a
//! millisecond at a time, so every admission falls on a tick of tokio's timer and is
//! compared exactly.
//!
//! `PROPTEST_CASES` cases of each (256 by default); a failure prints the smallest
//! sequence of operations that still fails.

mod common;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use token_bucket::{
    all, AcquireAllError, AcquireError, FixedWindow, Member, Rate, SlidingLog, TakeError,
    TokenBucket, TryAcquireAllError,
};
use tokio::task::JoinHandle;

const DEFAULT_CASES: u32 = 256;

/// The member sets composites are made of over three buckets: every pair, in both
/// orders, and all three.
const BUCKET_SETS: &[&[usize]] = &[
    &[0, 1],
    &[1, 0],
    &[1, 2],
    &[2, 1],
    &[2, 0],
    &[0, 2],
    &[0, 1, 2],
];

/// Over two buckets (0, 1), a fixed window (2) and a sliding log (3): each window with
/// a bucket and with the other window, in both orders, and three of a mix.
const MIXED_SETS: &[&[usize]] = &[
    &[0, 2],
    &[2, 0],
    &[1, 3],
    &[3, 1],
    &[2, 3],
    &[3, 2],
    &[0, 2, 3],
    &[3, 1, 2],
];

#[derive(Debug, Clone)]
enum Op {
    /// A plain `try_take(n)` (or `try_acquire(n)`) on one member.
    TryPlain { member: usize, n: u64 },
    /// A composite's `try_acquire(n)`.
    TryAll { set: usize, n: u64 },
    /// A plain `take(n)` (or `acquire(n)`), left waiting.
    TakePlain { member: usize, n: u64 },
    /// A composite's `acquire(n)`, left waiting.
    AcquireAll { set: usize, n: u64 },
    /// Drops the `index`-th waiter started (modulo their number), if it still waits.
    Cancel { index: usize },
    /// Time passes, a millisecond at a time.
    Advance { millis: u64 },
}

/// A member's settings, in whole milliseconds.
#[derive(Debug, Clone, Copy)]
enum Setup {
    /// One token every `period` ms, holding at most `capacity`, starting with `initial`.
    Bucket {
        period: u64,
        capacity: u64,
        initial: u64,
    },
    /// At most `limit` permits in each window of `window` ms, the first from 0.
    FixedWindow { limit: u64, window: u64 },
    /// At most `limit` permits in any `window` ms.
    SlidingLog { limit: u64, window: u64 },
}

/// A member's kind, to count what the cases reached by kind.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Bucket = 0,
    FixedWindow = 1,
    SlidingLog = 2,
}

impl Setup {
    fn kind(&self) -> Kind {
        match self {
            Setup::Bucket { .. } => Kind::Bucket,
            Setup::FixedWindow { .. } => Kind::FixedWindow,
            Setup::SlidingLog { .. } => Kind::SlidingLog,
        }
    }
}

fn bucket_setup() -> impl Strategy<Value = Setup> {
    (1u64..=5, 1u64..=4).prop_flat_map(|(period, capacity)| {
        (0..=capacity).prop_map(move |initial| Setup::Bucket {
            period,
            capacity,
            initial,
        })
    })
}

fn fixed_window_setup() -> impl Strategy<Value = Setup> {
    (1u64..=4, 2u64..=8).prop_map(|(limit, window)| Setup::FixedWindow { limit, window })
}

fn sliding_log_setup() -> impl Strategy<Value = Setup> {
    (1u64..=4, 2u64..=8).prop_map(|(limit, window)| Setup::SlidingLog { limit, window })
}

fn op(members: usize, sets: usize) -> impl Strategy<Value = Op> {
    let member = 0..members;
    let set = 0..sets;
    prop_oneof![
        2 => (member.clone(), 1u64..=3).prop_map(|(member, n)| Op::TryPlain { member, n }),
        2 => (set.clone(), 1u64..=3).prop_map(|(set, n)| Op::TryAll { set, n }),
        3 => (member, 1u64..=3).prop_map(|(member, n)| Op::TakePlain { member, n }),
        4 => (set, 1u64..=3).prop_map(|(set, n)| Op::AcquireAll { set, n }),
        1 => (0usize..16).prop_map(|index| Op::Cancel { index }),
        4 => (1u64..=8).prop_map(|millis| Op::Advance { millis }),
    ]
}

/// Composites granted after waiting, and cancelled while waiting, over every case of a
/// property, by the kinds of their members: each property asserts that the kinds it is
/// about were reached, so that it cannot pass by never reaching them.
#[derive(Default)]
struct Reached {
    waited_then_granted: [AtomicUsize; 3],
    cancelled_waiting: [AtomicUsize; 3],
}

impl Reached {
    fn count(counters: &[AtomicUsize; 3], kinds: impl Iterator<Item = Kind>) {
        for kind in kinds {
            counters[kind as usize].fetch_add(1, Ordering::Relaxed);
        }
    }

    fn assert_reached(&self, kind: Kind) {
        let granted = self.waited_then_granted[kind as usize].load(Ordering::Relaxed);
        let cancelled = self.cancelled_waiting[kind as usize].load(Ordering::Relaxed);
        assert!(
            granted > 0,
            "no composite over a {kind:?} waited and was granted"
        );
        assert!(
            cancelled > 0,
            "no composite over a {kind:?} was cancelled waiting"
        );
    }
}

// ----- The reference model ----------------------------------------------------------------

/// What a member has counted, in whole milliseconds.
#[derive(Debug, Clone)]
enum Ledger {
    /// A bucket's tokens in parts, a part a millisecond, `period` parts a token.
    Bucket {
        period: u64,
        capacity: u64,
        parts: u64,
    },
    /// The permits counted in window number `number` (`now / window`).
    FixedWindow {
        limit: u64,
        window: u64,
        number: u64,
        count: u64,
    },
    /// The instant of every permit granted, oldest first.
    SlidingLog {
        limit: u64,
        window: u64,
        grants: Vec<u64>,
    },
}

impl Ledger {
    fn new(setup: Setup) -> Ledger {
        match setup {
            Setup::Bucket {
                period,
                capacity,
                initial,
            } => Ledger::Bucket {
                period,
                capacity,
                parts: initial * period,
            },
            Setup::FixedWindow { limit, window } => Ledger::FixedWindow {
                limit,
                window,
                number: 0,
                count: 0,
            },
            Setup::SlidingLog { limit, window } => Ledger::SlidingLog {
                limit,
                window,
                grants: Vec::new(),
            },
        }
    }

    /// The largest request it ever admits.
    fn most(&self) -> u64 {
        match *self {
            Ledger::Bucket { capacity, .. } => capacity,
            Ledger::FixedWindow { limit, .. } | Ledger::SlidingLog { limit, .. } => limit,
        }
    }

    /// The grants of a sliding log still counting at `now`, oldest first.
    fn counting(grants: &[u64], window: u64, now: u64) -> &[u64] {
        let gone = grants.partition_point(|&granted| granted + window <= now);
        &grants[gone..]
    }

    /// What it admits at `now`: `available()`.
    fn available(&self, now: u64) -> u64 {
        match self {
            Ledger::Bucket { period, parts, .. } => parts / period,
            Ledger::FixedWindow {
                limit,
                window,
                number,
                count,
            } => limit - if now / window == *number { *count } else { 0 },
            Ledger::SlidingLog {
                limit,
                window,
                grants,
            } => limit - Ledger::counting(grants, *window, now).len() as u64,
        }
    }

    fn take(&mut self, n: u64, now: u64) {
        match self {
            Ledger::Bucket { period, parts, .. } => *parts -= n * *period,
            Ledger::FixedWindow {
                window,
                number,
                count,
                ..
            } => {
                if now / *window != *number {
                    (*number, *count) = (now / *window, 0);
                }
                *count += n;
            }
            Ledger::SlidingLog { grants, .. } => grants.extend((0..n).map(|_| now)),
        }
    }

    /// Milliseconds from `now` until it admits `n` (at most `most()`), if nobody takes.
    fn wait_for(&self, n: u64, now: u64) -> u64 {
        if self.available(now) >= n {
            return 0;
        }
        match self {
            Ledger::Bucket { period, parts, .. } => n * period - parts,
            Ledger::FixedWindow { window, .. } => window - now % window,
            Ledger::SlidingLog {
                limit,
                window,
                grants,
            } => {
                // Enough of the oldest still counting must stop counting first.
                let counting = Ledger::counting(grants, *window, now);
                let must_go = counting.len() as u64 + n - limit;
                counting[must_go as usize - 1] + window - now
            }
        }
    }

    /// A millisecond passed: a bucket gains a part, capped; the windows count lazily.
    fn tick(&mut self) {
        if let Ledger::Bucket {
            period,
            capacity,
            parts,
        } = self
        {
            *parts = (*parts + 1).min(*capacity * *period);
        }
    }
}

/// One member: its ledger, what it counted, and its line of waiter ids.
#[derive(Debug, Clone)]
struct ModelMember {
    kind: Kind,
    ledger: Ledger,
    taken: u64,
    line: VecDeque<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    Waiting,
    Granted {
        at: u64,
    },
    Cancelled,
    /// Refused at once (a request above a capacity or limit).
    Refused,
}

#[derive(Debug, Clone)]
struct ModelWaiter {
    members: Vec<usize>,
    n: u64,
    state: Standing,
}

struct Model<'a> {
    members: Vec<ModelMember>,
    waiters: Vec<ModelWaiter>,
    now: u64,
    reached: &'a Reached,
}

impl Model<'_> {
    fn new<'a>(setups: &[Setup], reached: &'a Reached) -> Model<'a> {
        Model {
            members: setups
                .iter()
                .map(|&setup| ModelMember {
                    kind: setup.kind(),
                    ledger: Ledger::new(setup),
                    taken: 0,
                    line: VecDeque::new(),
                })
                .collect(),
            waiters: Vec::new(),
            now: 0,
            reached,
        }
    }

    fn kinds<'m>(&'m self, members: &'m [usize]) -> impl Iterator<Item = Kind> + 'm {
        members.iter().map(|&member| self.members[member].kind)
    }

    /// The permits waiting in `member`'s line.
    fn queued_permits(&self, member: usize) -> u64 {
        let line = self.members[member].line.iter();
        line.map(|&waiter| self.waiters[waiter].n).sum()
    }

    /// A try over `members`: `Ok`, or the milliseconds until every member would admit it
    /// when all lines are empty (`None` while someone waits: the line decides), or
    /// `Err(Some(u64::MAX))` for a refusal for good.
    fn try_take(&mut self, members: &[usize], n: u64) -> Result<(), Option<u64>> {
        let now = self.now;
        if members
            .iter()
            .any(|&member| n > self.members[member].ledger.most())
        {
            return Err(Some(u64::MAX));
        }
        if members
            .iter()
            .any(|&member| !self.members[member].line.is_empty())
        {
            return Err(None);
        }
        let wait = members
            .iter()
            .map(|&member| self.members[member].ledger.wait_for(n, now))
            .max()
            .unwrap_or(0);
        if wait > 0 {
            return Err(Some(wait));
        }
        for &member in members {
            self.take(member, n);
        }
        Ok(())
    }

    fn take(&mut self, member: usize, n: u64) {
        let member = &mut self.members[member];
        member.ledger.take(n, self.now);
        member.taken += n;
    }

    /// Starts a waiter; granted at once when the lines are empty and every member admits
    /// it.
    fn start(&mut self, members: &[usize], n: u64) {
        let id = self.waiters.len();
        let state = match self.try_take(members, n) {
            Ok(()) => Standing::Granted { at: self.now },
            Err(Some(u64::MAX)) => Standing::Refused,
            Err(_) => {
                for &member in members {
                    self.members[member].line.push_back(id);
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
        let members = &self.waiters[id].members;
        if members.len() > 1 {
            Reached::count(&self.reached.cancelled_waiting, self.kinds(members));
        }
        self.waiters[id].state = Standing::Cancelled;
        for member in &mut self.members {
            member.line.retain(|&waiter| waiter != id);
        }
        self.serve();
    }

    /// Grants every waiter that heads all its lines and is admitted by every one of its
    /// members, until none.
    fn serve(&mut self) {
        loop {
            let ready = self.waiters.iter().enumerate().position(|(id, waiter)| {
                waiter.state == Standing::Waiting
                    && waiter.members.iter().all(|&member| {
                        let member = &self.members[member];
                        member.line.front() == Some(&id)
                            && member.ledger.available(self.now) >= waiter.n
                    })
            });
            let Some(id) = ready else {
                return;
            };
            let (members, n) = (self.waiters[id].members.clone(), self.waiters[id].n);
            if members.len() > 1 {
                Reached::count(&self.reached.waited_then_granted, self.kinds(&members));
            }
            for member in members {
                self.take(member, n);
                self.members[member].line.pop_front();
            }
            self.waiters[id].state = Standing::Granted { at: self.now };
        }
    }

    fn tick(&mut self) {
        self.now += 1;
        for member in &mut self.members {
            member.ledger.tick();
        }
        self.serve();
    }
}

// ----- The real limiters, in lockstep -----------------------------------------------------

/// A real member.
#[derive(Clone)]
enum RealMember {
    Bucket(TokenBucket),
    FixedWindow(FixedWindow),
    SlidingLog(SlidingLog),
}

/// A waiter's end: granted at an instant (in ms), or refused at once.
type Outcome = Result<u64, ()>;

impl RealMember {
    fn new(setup: Setup) -> RealMember {
        let ms = Duration::from_millis;
        match setup {
            Setup::Bucket {
                period,
                capacity,
                initial,
            } => RealMember::Bucket(common::bucket_with(
                Rate::new(1, ms(period)),
                capacity,
                initial,
            )),
            Setup::FixedWindow { limit, window } => {
                RealMember::FixedWindow(FixedWindow::new(limit, ms(window)).unwrap())
            }
            Setup::SlidingLog { limit, window } => {
                RealMember::SlidingLog(SlidingLog::new(limit, ms(window)).unwrap())
            }
        }
    }

    /// A handle for a composite: members of any kinds, in one `Vec`.
    fn as_member(&self) -> Arc<dyn Member + Send + Sync> {
        match self {
            RealMember::Bucket(bucket) => Arc::new(bucket.clone()),
            RealMember::FixedWindow(window) => Arc::new(window.clone()),
            RealMember::SlidingLog(log) => Arc::new(log.clone()),
        }
    }

    /// A bucket's own `try_take`, a window's `try_acquire`: whether it admitted `n`.
    fn try_plain(&self, n: u64) -> bool {
        match self {
            RealMember::Bucket(bucket) => bucket.try_take(n).is_ok(),
            RealMember::FixedWindow(window) => window.try_acquire(n).is_ok(),
            RealMember::SlidingLog(log) => log.try_acquire(n).is_ok(),
        }
    }

    /// A bucket's own `take`, a window's `acquire`, to its end.
    async fn take_plain(self, n: u64) -> Result<(), ()> {
        let refused = |error: AcquireError| match error {
            AcquireError::ExceedsLimit { .. } => (),
            other => panic!("{other:?}"),
        };
        match self {
            RealMember::Bucket(bucket) => bucket.take(n).await.map_err(|error| match error {
                TakeError::ExceedsCapacity { .. } => (),
                other => panic!("{other:?}"),
            }),
            RealMember::FixedWindow(window) => window.acquire(n).await.map_err(refused),
            RealMember::SlidingLog(log) => log.acquire(n).await.map_err(refused),
        }
    }

    /// What to compare with the model: a bucket's `(available, taken, queued waiters)`,
    /// a window's `(available, queued permits)`.
    fn books(&self) -> Vec<u64> {
        match self {
            RealMember::Bucket(bucket) => {
                let stats = bucket.stats();
                vec![stats.available, stats.taken, stats.queued as u64]
            }
            RealMember::FixedWindow(window) => vec![window.available(), window.queued_permits()],
            RealMember::SlidingLog(log) => vec![log.available(), log.queued_permits()],
        }
    }
}

struct Real {
    members: Vec<RealMember>,
    /// Each waiter's task.
    waiters: Vec<Option<JoinHandle<Outcome>>>,
    outcomes: Vec<Option<Outcome>>,
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

    /// The composite over `set`'s members.
    fn composite(&self, set: &[usize]) -> Vec<Arc<dyn Member + Send + Sync>> {
        set.iter()
            .map(|&member| self.members[member].as_member())
            .collect()
    }

    /// Spawns a waiter that ends as `wait` does, with when it did.
    fn spawn(&mut self, wait: impl std::future::Future<Output = Result<(), ()>> + Send + 'static) {
        let start = self.start;
        self.waiters.push(Some(tokio::spawn(async move {
            wait.await?;
            Ok(u64::try_from(start.elapsed().as_millis()).unwrap())
        })));
        self.outcomes.push(None);
    }
}

/// What the model's member holds, in the terms of [`RealMember::books`].
fn model_books(model: &Model<'_>, member: usize) -> Vec<u64> {
    let modelled = &model.members[member];
    let available = modelled.ledger.available(model.now);
    match modelled.kind {
        Kind::Bucket => vec![available, modelled.taken, modelled.line.len() as u64],
        Kind::FixedWindow | Kind::SlidingLog => vec![available, model.queued_permits(member)],
    }
}

fn check(model: &Model<'_>, real: &Real) -> Result<(), TestCaseError> {
    prop_assert_eq!(model.now, real.now());
    for (index, member) in real.members.iter().enumerate() {
        prop_assert_eq!(
            member.books(),
            model_books(model, index),
            "member {} at {} ms",
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

async fn run(
    setups: Vec<Setup>,
    sets: &[&[usize]],
    ops: Vec<Op>,
    reached: &Reached,
) -> Result<(), TestCaseError> {
    let mut model = Model::new(&setups, reached);
    let mut real = Real {
        members: setups.iter().map(|&setup| RealMember::new(setup)).collect(),
        waiters: Vec::new(),
        outcomes: Vec::new(),
        start: tokio::time::Instant::now(),
    };
    for op in ops {
        match op {
            Op::TryPlain { member, n } => {
                let expected = model.try_take(&[member], n);
                let got = real.members[member].try_plain(n);
                prop_assert_eq!(expected.is_ok(), got, "{:?}", op);
            }
            Op::TryAll { set, n } => {
                let expected = model.try_take(sets[set], n);
                let got = all(real.composite(sets[set])).unwrap().try_acquire(n);
                match (expected, got) {
                    (Ok(()), Ok(())) => {}
                    (Err(Some(u64::MAX)), Err(TryAcquireAllError::Member { .. })) => {}
                    // Behind a line the member's own replay decides the wait.
                    (Err(None), Err(TryAcquireAllError::Limited { .. })) => {}
                    (Err(Some(millis)), Err(TryAcquireAllError::Limited { retry_after })) => {
                        prop_assert_eq!(retry_after, Duration::from_millis(millis), "{:?}", op);
                    }
                    (expected, got) => {
                        prop_assert!(false, "{:?}: expected {:?}, got {:?}", op, expected, got)
                    }
                }
            }
            Op::TakePlain { member, n } => {
                model.start(&[member], n);
                real.spawn(real.members[member].clone().take_plain(n));
            }
            Op::AcquireAll { set, n } => {
                model.start(sets[set], n);
                let composite = all(real.composite(sets[set])).unwrap();
                real.spawn(async move {
                    match composite.acquire(n).await {
                        Ok(()) => Ok(()),
                        Err(AcquireAllError::Member { .. }) => Err(()),
                        Err(other) => panic!("{other:?}"),
                    }
                });
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

/// Runs `PROPTEST_CASES` cases over members made from `setups` and composites over
/// `sets` of them, each on a fresh paused runtime; returns what they reached.
fn run_cases(
    setups: impl Strategy<Value = Vec<Setup>>,
    sets: &'static [&'static [usize]],
) -> Reached {
    let reached = Reached::default();
    let mut runner = TestRunner::new(common::model_config(DEFAULT_CASES, file!()));
    let strategy = setups.prop_flat_map(move |setups| {
        let ops = proptest::collection::vec(op(setups.len(), sets.len()), 1..40);
        (Just(setups), ops)
    });
    runner
        .run(&strategy, |(setups, ops)| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build()
                .unwrap();
            runtime.block_on(run(setups, sets, ops, &reached))
        })
        .unwrap();
    reached
}

#[test]
fn composites_and_plain_requests_follow_the_reference_model() {
    let buckets = proptest::collection::vec(bucket_setup(), 3);
    run_cases(buckets, BUCKET_SETS).assert_reached(Kind::Bucket);
}

#[test]
fn composites_over_windows_and_buckets_follow_the_reference_model() {
    let members = (
        bucket_setup(),
        bucket_setup(),
        fixed_window_setup(),
        sliding_log_setup(),
    )
        .prop_map(|(first, second, fixed, log)| vec![first, second, fixed, log]);
    let reached = run_cases(members, MIXED_SETS);
    reached.assert_reached(Kind::FixedWindow);
    reached.assert_reached(Kind::SlidingLog);
}
