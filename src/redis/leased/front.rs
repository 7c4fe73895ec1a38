//! A leased front's shared state and its requests: served from the tokens it holds, first
//! in, first out, or queued for the lease task (`task.rs`) when they are short. The front
//! starts that task, and answers what it asks (`task::Leases`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{oneshot, watch, Notify};
use tokio::time::Instant;

use super::budget::{Budget, Lease, Piece};
use super::sizing::{lease_bounds, millis_for, tokens_in, Demand};
use super::source::{LeaseSource, Taken};
use super::task::{self, Leases, Next};
use crate::redis::observe::LeaseObserver;
use crate::redis::{FailurePolicy, RedisLimitError};

/// A front's settings, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settings {
    /// How long after its call began a lease's tokens may be granted.
    pub(crate) lifetime: Duration,
    /// How long without a grant before the leases held go back.
    pub(crate) idle: Duration,
    /// The most tokens one call asks for (unless a request needs more).
    pub(crate) max_lease: u64,
}

/// Running totals, for the handle's `LeaseStats`.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) granted: AtomicU64,
    pub(crate) leased: AtomicU64,
    pub(crate) given_back: AtomicU64,
    pub(crate) calls: AtomicU64,
}

impl Counters {
    pub(crate) fn add(counter: &AtomicU64, amount: u64) {
        counter.fetch_add(amount, Ordering::Relaxed);
    }
}

/// Whether the lease task runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TaskState {
    NotStarted,
    Running,
    Stopped,
}

/// A request's kind: `take` waits for its tokens; `try_take` waits only for the lease
/// call it started or found under way, and is refused if that brings too few.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Take,
    Try,
}

/// What a queued request learns.
#[derive(Debug)]
pub(crate) enum Reply {
    /// Granted, drawn from these leases (handed back there if the request is gone).
    Granted(Vec<Piece>),
    /// Allowed without a decision: the source could not decide and the policy fails open.
    FailedOpen,
    Failed(RedisLimitError),
}

/// How a queued request was allowed.
enum Allowed {
    /// With tokens from the leases.
    Granted,
    /// Without a decision (see [`Reply::FailedOpen`]).
    FailedOpen,
}

#[derive(Debug)]
struct Waiter {
    tokens: u64,
    kind: Kind,
    reply: oneshot::Sender<Reply>,
}

#[derive(Debug)]
struct State {
    budget: Budget,
    queue: VecDeque<Waiter>,
    /// Tokens asked for by every waiter queued.
    queued_tokens: u64,
    /// `take` requests queued: `try_take` never passes them.
    takes_queued: usize,
    demand: Demand,
    /// Until when the source said it has too few, after jitter.
    refused_until: Option<Instant>,
    last_grant: Instant,
    closed: bool,
    task: TaskState,
}

/// The state a front's handles and its lease task share.
pub(crate) struct Front<S> {
    pub(crate) source: S,
    pub(crate) settings: Settings,
    state: Mutex<State>,
    /// Wakes the lease task.
    wake: Notify,
    /// Whether the lease task has ended, for [`close`](Front::close).
    stopped: watch::Sender<bool>,
    pub(crate) counters: Counters,
    /// Nothing unless the front is named (see `observe/redis.rs`).
    pub(crate) observer: LeaseObserver,
}

/// Whether a request was granted at once or queued.
enum Begun {
    Granted,
    Queued(oneshot::Receiver<Reply>),
}

impl<S: LeaseSource> Front<S> {
    pub(crate) fn new(source: S, settings: Settings, observer: LeaseObserver) -> Front<S> {
        let now = Instant::now();
        Front {
            source,
            settings,
            state: Mutex::new(State {
                budget: Budget::default(),
                queue: VecDeque::new(),
                queued_tokens: 0,
                takes_queued: 0,
                demand: Demand::new(settings.lifetime, now),
                refused_until: None,
                last_grant: now,
                closed: false,
                task: TaskState::NotStarted,
            }),
            wake: Notify::new(),
            stopped: watch::Sender::new(false),
            counters: Counters::default(),
            observer,
        }
    }

    /// The state; a panic elsewhere while it was held leaves nothing half done that
    /// matters here, so a poisoned lock is taken as it is.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) async fn try_take(self: &Arc<Self>, tokens: u64) -> Result<(), RedisLimitError> {
        self.request(tokens, Kind::Try).await
    }

    pub(crate) async fn take(self: &Arc<Self>, tokens: u64) -> Result<(), RedisLimitError> {
        self.request(tokens, Kind::Take).await
    }

    async fn request(self: &Arc<Self>, tokens: u64, kind: Kind) -> Result<(), RedisLimitError> {
        match self.begin(tokens, kind) {
            Ok(Begun::Granted) => {
                self.observer.bucket().admitted(tokens);
                Ok(())
            }
            Ok(Begun::Queued(receiver)) => self.wait(tokens, receiver).await,
            Err(error) => {
                self.report_refusal(tokens, &error);
                Err(error)
            }
        }
    }

    /// Waits for the reply of a request for `tokens` queued with `receiver`; for a named
    /// front, in its wait span, reporting how it ended.
    async fn wait(
        self: &Arc<Self>,
        tokens: u64,
        receiver: oneshot::Receiver<Reply>,
    ) -> Result<(), RedisLimitError> {
        let queued = Queued::new(self, receiver);
        if self.observer.name().is_none() {
            return queued.outcome().await.map(drop);
        }
        let since = Instant::now();
        let watched = async {
            let outcome = queued.outcome().await;
            match &outcome {
                Ok(Allowed::Granted) => self.observer.bucket().waited(tokens, since.elapsed()),
                // Reported when the call failed.
                Ok(Allowed::FailedOpen) => {}
                Err(error) => self.report_refusal(tokens, error),
            }
            outcome.map(drop)
        };
        #[cfg(feature = "tracing")]
        if let Some(span) = self.observer.bucket().wait_span(tokens) {
            return tracing::Instrument::instrument(watched, span).await;
        }
        watched.await
    }

    /// Reports a request for `tokens` that ended with `error`, if it is a refusal: by
    /// the bucket (`Limited`) or for more than its capacity. Those failed or refused
    /// because Redis could not decide are reported with the call.
    fn report_refusal(&self, tokens: u64, error: &RedisLimitError) {
        match error {
            RedisLimitError::Limited { retry_after } => {
                self.observer.bucket().refused(tokens, Some(*retry_after));
            }
            RedisLimitError::ExceedsLimit { .. } => self.observer.bucket().refused(tokens, None),
            _ => {}
        }
    }

    /// Grants at once from the tokens held if nobody is queued, else queues the request
    /// (a `try_take` only when no `take` is queued and the source has not just refused).
    fn begin(self: &Arc<Self>, tokens: u64, kind: Kind) -> Result<Begun, RedisLimitError> {
        let capacity = self.source.capacity();
        if tokens > capacity {
            return Err(RedisLimitError::ExceedsLimit {
                requested: tokens,
                limit: capacity,
            });
        }
        let mut state = self.lock();
        if state.closed {
            return Err(RedisLimitError::Closed);
        }
        if tokens == 0 {
            return Ok(Begun::Granted);
        }
        let now = Instant::now();
        if state.queue.is_empty() && state.budget.draw(now, tokens, None) {
            self.granted(&mut state, now, tokens);
            return Ok(Begun::Granted);
        }
        if kind == Kind::Try {
            let refused = state.refused_until.is_some_and(|until| until > now);
            if state.takes_queued > 0 || refused {
                return Err(RedisLimitError::Limited {
                    retry_after: self.estimate(&state, now, tokens),
                });
            }
        }
        if state.task == TaskState::NotStarted {
            let runtime =
                tokio::runtime::Handle::try_current().map_err(|_| RedisLimitError::NoRuntime)?;
            runtime.spawn(task::run(Arc::clone(self)));
            state.task = TaskState::Running;
        }
        let (reply, receiver) = oneshot::channel();
        Self::enqueue(
            &mut state,
            Waiter {
                tokens,
                kind,
                reply,
            },
        );
        drop(state);
        self.wake.notify_one();
        Ok(Begun::Queued(receiver))
    }

    /// A guess at how long until `tokens` could be granted here: the time the bucket's
    /// rate takes to gain what is queued ahead and the request, less what is held, and
    /// no sooner than the source said. Other processes may take first.
    fn estimate(&self, state: &State, now: Instant, tokens: u64) -> Duration {
        let lacking = (state.queued_tokens + tokens).saturating_sub(state.budget.reserved(now));
        millis_for(self.source.rate(), lacking.max(1)).max(Self::known_wait(state, now))
    }

    /// The longest wait the state knows of at `now`: for the source's refusal to pass,
    /// or for the next lease to begin.
    fn known_wait(state: &State, now: Instant) -> Duration {
        [state.refused_until, state.budget.next_start(now)]
            .into_iter()
            .flatten()
            .map(|until| ceil_millis(until.saturating_duration_since(now)))
            .max()
            .unwrap_or(Duration::ZERO)
    }

    /// Counts a grant of `tokens` at `now`.
    fn granted(&self, state: &mut State, now: Instant, tokens: u64) {
        state.demand.record(now, tokens);
        state.last_grant = now;
        Counters::add(&self.counters.granted, tokens);
    }

    /// A request dropped before it saw its reply (`receiver`, closed) leaves: its grant,
    /// if it had one, goes back to the leases, else it leaves the queue at once, so that
    /// nobody behind it waits for it and `try_take` does not count it.
    fn leave(&self, receiver: &mut oneshot::Receiver<Reply>) {
        let mut state = self.lock();
        // Replies are sent with the state locked: either it came, or the request is
        // still queued.
        if let Ok(Reply::Granted(pieces)) = receiver.try_recv() {
            state.budget.put_back(&pieces);
            let tokens = pieces.iter().map(|(_, tokens)| tokens).sum();
            self.counters.granted.fetch_sub(tokens, Ordering::Relaxed);
        } else {
            let queued = std::mem::take(&mut state.queue);
            state.queued_tokens = 0;
            state.takes_queued = 0;
            for waiter in queued
                .into_iter()
                .filter(|waiter| !waiter.reply.is_closed())
            {
                Self::enqueue(&mut state, waiter);
            }
        }
        self.serve(&mut state, Instant::now());
        drop(state);
        self.wake.notify_one();
    }

    /// Puts `waiter` at the end of the queue.
    fn enqueue(state: &mut State, waiter: Waiter) {
        state.queued_tokens += waiter.tokens;
        state.takes_queued += usize::from(waiter.kind == Kind::Take);
        state.queue.push_back(waiter);
    }

    /// Grants the queue, in order, what the leases held at `now` cover.
    fn serve(&self, state: &mut State, now: Instant) {
        while let Some(head) = state.queue.front() {
            let tokens = head.tokens;
            let mut pieces = Vec::new();
            let gone = head.reply.is_closed();
            if !gone && !state.budget.draw(now, tokens, Some(&mut pieces)) {
                return;
            }
            let waiter = self.pop(state);
            if gone {
                continue;
            }
            match waiter.reply.send(Reply::Granted(pieces)) {
                Ok(()) => self.granted(state, now, tokens),
                Err(Reply::Granted(pieces)) => state.budget.put_back(&pieces),
                Err(_) => {}
            }
        }
    }

    /// Removes the head of the queue.
    fn pop(&self, state: &mut State) -> Waiter {
        let waiter = state.queue.pop_front().expect("a waiter at the head");
        state.queued_tokens -= waiter.tokens;
        state.takes_queued -= usize::from(waiter.kind == Kind::Take);
        waiter
    }

    /// Answers every queued request with what `reply` makes for it, for those `which`
    /// picks, keeping the others in order. `failure`, when the answers are the failure
    /// policy's for a call that failed so.
    fn answer(
        &self,
        state: &mut State,
        which: Option<Kind>,
        mut reply: impl FnMut() -> Reply,
        failure: Option<&RedisLimitError>,
    ) {
        let mut kept = VecDeque::new();
        while !state.queue.is_empty() {
            let waiter = self.pop(state);
            if which.is_some_and(|kind| kind != waiter.kind) {
                kept.push_back(waiter);
                continue;
            }
            let answer = reply();
            if !waiter.reply.is_closed() {
                match (&answer, failure) {
                    (Reply::FailedOpen, _) => {
                        self.source.count_fail_open();
                        Counters::add(&self.counters.granted, waiter.tokens);
                        if let Some(error) = failure {
                            self.observer.failed_open(waiter.tokens, error);
                        }
                    }
                    (Reply::Failed(_), Some(error)) => {
                        self.observer.failed_closed(waiter.tokens, error);
                    }
                    _ => {}
                }
            }
            let _ = waiter.reply.send(answer);
        }
        for waiter in kept {
            Self::enqueue(state, waiter);
        }
    }

    /// What the lease task does at `now`: the leases to give back (their lifetime ended,
    /// or the front is idle or closed), and what next.
    fn next_step(&self, now: Instant) -> (Vec<Lease>, Next) {
        let mut state = self.lock();
        let mut ended = state.budget.ended(now);
        self.serve(&mut state, now);
        if state.closed {
            ended.extend(state.budget.drain());
            self.answer(
                &mut state,
                None,
                || Reply::Failed(RedisLimitError::Closed),
                None,
            );
            return (ended, Next::Stop);
        }
        let reserved = state.budget.reserved(now);
        if let Some(head) = state.queue.front() {
            if let (true, Some(start)) = (reserved >= head.tokens, state.budget.next_start(now)) {
                // A lease not yet begun covers the head: wait for it.
                return (ended, Next::Sleep(Some(start)));
            }
            if let Some(until) = state.refused_until.filter(|until| *until > now) {
                return (ended, Next::Sleep(Some(until)));
            }
            let shortfall = head.tokens.saturating_sub(reserved).max(1);
            let queued = state.queued_tokens.saturating_sub(reserved);
            let recent = state.demand.recent(now);
            let (fewest, most) = lease_bounds(shortfall, queued, recent, self.settings.max_lease);
            return (ended, Next::Fetch { fewest, most });
        }
        let idle_at = state.last_grant + self.settings.idle;
        if reserved > 0 && now >= idle_at {
            ended.extend(state.budget.drain());
        }
        let idle_at = (state.budget.reserved(now) > 0).then_some(idle_at);
        let wake_at = match (state.budget.next_end(), idle_at) {
            (Some(end), Some(idle)) => Some(end.min(idle)),
            (end, idle) => end.or(idle),
        };
        (ended, Next::Sleep(wake_at))
    }

    /// Answers every queued request as the failure policy says for a call that failed
    /// with `error`.
    fn fail(&self, state: &mut State, error: &RedisLimitError) {
        self.observer.call_failed(error);
        let policy = self.source.policy();
        let reply = || match policy {
            FailurePolicy::FailOpen => Reply::FailedOpen,
            FailurePolicy::FailClosed => Reply::Failed(error.clone()),
        };
        self.answer(state, None, reply, Some(error));
    }

    /// Closes the front: requests are refused, and the lease task gives back what it
    /// holds and ends.
    pub(crate) fn shut(&self) {
        let mut state = self.lock();
        state.closed = true;
        if state.task != TaskState::Running {
            state.task = TaskState::Stopped;
            self.stopped.send_replace(true);
        }
        drop(state);
        self.wake.notify_one();
    }

    /// Closes the front and waits until the lease task has given back what it held.
    pub(crate) async fn close(&self) {
        let mut stopped = self.stopped.subscribe();
        self.shut();
        // The sender lives in `self`, so it cannot be dropped while this waits.
        let _ = stopped.wait_for(|stopped| *stopped).await;
    }

    /// Tokens held that can be granted now, and requests queued.
    pub(crate) fn held_and_queued(&self) -> (u64, usize) {
        let state = self.lock();
        (state.budget.held(Instant::now()), state.queue.len())
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed
    }
}

impl<S: LeaseSource> Leases for Front<S> {
    /// Gives back each lease ended at `now` that could return anything: the source takes
    /// off what the bucket gained since the lease began, which was no later than it was
    /// usable here. A give-back that fails leaves the bucket stricter, never looser, so it
    /// is not made again.
    async fn step(&self, now: Instant) -> Next {
        let (ended, next) = self.next_step(now);
        let rate = self.source.rate();
        for lease in ended {
            let gained = tokens_in(rate, now.saturating_duration_since(lease.usable_from));
            if lease.tokens <= gained {
                continue;
            }
            Counters::add(&self.counters.calls, 1);
            Counters::add(&self.counters.given_back, lease.tokens);
            self.observer.giving_back(lease.tokens);
            if let Err(error) = self.source.give_back(lease.tokens, lease.ticket).await {
                self.observer.give_back_failed(&error);
            }
        }
        next
    }

    /// Takes in what the lease call brought back, and serves the queue with it. A
    /// `try_take` still queued then is refused: it waited for one call.
    async fn fetch(&self, fewest: u64, most: u64) {
        let started = Instant::now();
        Counters::add(&self.counters.calls, 1);
        self.observer.lease_call();
        let outcome = self.source.take(fewest, most, self.settings.lifetime).await;
        let arrived = Instant::now();
        let mut state = self.lock();
        match outcome {
            Ok(Taken::Granted {
                tokens,
                ticket,
                wait,
            }) => {
                Counters::add(&self.counters.leased, tokens);
                self.observer.leased(tokens);
                // The source began the lease `wait` after it decided, which was after the
                // call began and before its reply came back.
                let usable_from = arrived + wait;
                let usable_until = started + wait + self.settings.lifetime;
                // Held even if already ended, so that the lease task gives it back.
                state.budget.add(tokens, usable_from, usable_until, ticket);
                state.refused_until = None;
                if usable_from >= usable_until {
                    // Expired on arrival: a failed call, or a round trip always longer
                    // than the lifetime would ask again for ever.
                    let error = RedisLimitError::LeaseExpiredOnArrival {
                        round_trip: arrived - started,
                        lifetime: self.settings.lifetime,
                    };
                    self.fail(&mut state, &error);
                }
            }
            Ok(Taken::Refused { retry_after }) => {
                state.refused_until = Some(arrived + self.source.wait_after_refusal(retry_after));
            }
            Err(error) => self.fail(&mut state, &error),
        }
        self.serve(&mut state, arrived);
        if state.queue.iter().any(|waiter| waiter.kind == Kind::Try) {
            // Each refused try is told the wait for what is queued ahead of it.
            let mut ahead = 0;
            let mut waits = VecDeque::new();
            for waiter in &state.queue {
                ahead += waiter.tokens;
                if waiter.kind == Kind::Try {
                    waits.push_back(ahead);
                }
            }
            let (held, rate) = (state.budget.reserved(arrived), self.source.rate());
            let refused = Self::known_wait(&state, arrived);
            self.answer(
                &mut state,
                Some(Kind::Try),
                || {
                    let ahead = waits.pop_front().unwrap_or(1);
                    let retry_after =
                        millis_for(rate, ahead.saturating_sub(held).max(1)).max(refused);
                    Reply::Failed(RedisLimitError::Limited { retry_after })
                },
                None,
            );
        }
    }

    fn wake(&self) -> &Notify {
        &self.wake
    }

    fn stopped(&self) {
        let mut state = self.lock();
        state.closed = true;
        state.task = TaskState::Stopped;
        self.answer(
            &mut state,
            None,
            || Reply::Failed(RedisLimitError::Closed),
            None,
        );
        drop(state);
        self.stopped.send_replace(true);
    }
}

/// `duration` rounded up to whole milliseconds.
fn ceil_millis(duration: Duration) -> Duration {
    let millis = duration.as_nanos().div_ceil(1_000_000);
    Duration::from_millis(u64::try_from(millis).unwrap_or(u64::MAX))
}

/// A queued request, waiting for its reply. Dropped before it saw its reply, it leaves
/// the queue, or hands back the tokens granted.
struct Queued<'a, S: LeaseSource> {
    front: &'a Front<S>,
    receiver: Option<oneshot::Receiver<Reply>>,
}

impl<'a, S: LeaseSource> Queued<'a, S> {
    fn new(front: &'a Front<S>, receiver: oneshot::Receiver<Reply>) -> Self {
        Queued {
            front,
            receiver: Some(receiver),
        }
    }

    async fn outcome(mut self) -> Result<Allowed, RedisLimitError> {
        let receiver = self.receiver.as_mut().expect("not yet answered");
        let reply = receiver.await;
        self.receiver = None;
        match reply {
            Ok(Reply::Granted(_)) => Ok(Allowed::Granted),
            Ok(Reply::FailedOpen) => Ok(Allowed::FailedOpen),
            Ok(Reply::Failed(error)) => Err(error),
            // Every queued request is answered before the lease task ends.
            Err(_) => Err(RedisLimitError::Closed),
        }
    }
}

impl<S: LeaseSource> Drop for Queued<'_, S> {
    fn drop(&mut self) {
        if let Some(mut receiver) = self.receiver.take() {
            receiver.close();
            self.front.leave(&mut receiver);
        }
    }
}
