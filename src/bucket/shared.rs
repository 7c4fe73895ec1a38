//! [`Shared`], what every clone of a bucket's handle points to, and the mechanism behind
//! the handle: the lock over the state (see `state.rs`), the fast path's word it seizes
//! and hands back (see `fast.rs`), and a queued request's way through the bucket (it
//! begins, polls for its outcome, or leaves). The handle (`handle.rs`) and the futures
//! (`future.rs`) stand on it; the refill task (`refill.rs`) knows it only as [`Served`].

use std::ops::{Deref, DerefMut};
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::task::{Context, Poll, Waker};

use futures::channel::oneshot as signal;
use futures::future::{FutureExt, Shared as SharedFuture};
use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::bucket::fast::FastPath;
use crate::bucket::gcra::Units;
use crate::bucket::queue::{Kind, Outcome, Request, WaiterId};
use crate::bucket::refill::{self, Refill, Served};
use crate::bucket::state::{Leaving, Settings, State};
use crate::clock::{self, Clock, Moment, NEVER};
use crate::error::TakeError;
use crate::observe::Observer;
use crate::sync::{AtomicBool, AtomicU64, Identity, Mutex, MutexGuard};

/// What every clone of a [`TokenBucket`](crate::TokenBucket), its futures and (weakly)
/// its refill task point to.
pub(crate) struct Shared {
    /// The state while nobody waits, taken without the lock; see `fast.rs`.
    pub(crate) fast: FastPath,
    /// What it reports through, if it was named (see `observe/`): beside the word, which
    /// every `try_take` reads too.
    pub(crate) observer: Observer,
    /// Its place in the crate's lock order: see `sync/mod.rs`.
    state: Mutex<State>,
    pub(crate) clock: Clock,
    refill: Refill,
    /// Copies of settings that adapters read on every item, kept outside the lock so that
    /// reading them costs no lock. The state behind the lock stays the authority: these
    /// are written under it, after it.
    pub(crate) closed: AtomicBool,
    /// The smallest capacity, over every limit.
    pub(crate) capacity: AtomicU64,
    pub(crate) queue_limit: Option<u64>,
    /// How many limits the bucket has; fixed when it is made.
    pub(crate) limits: usize,
    /// What every `Closed` waits on, made by the first that is asked for: most buckets
    /// (a per-key one, say) are never watched and so never pay its allocations.
    close_watch: Mutex<Option<(signal::Sender<()>, CloseSignal)>>,
    /// Orders the bucket among a composite's members.
    pub(crate) identity: Identity,
    /// Makes the refill task panic, to test what a panic there does.
    #[cfg(all(test, not(loom)))]
    pub(crate) panic_in_refill: std::sync::atomic::AtomicBool,
}

/// What a `Closed` waits on: a shared oneshot rather than a `Notify`, since its clones are
/// `'static` and `Unpin` without boxing, and once fired it stays fired, so no wake-up can
/// be lost. Dropping the bucket drops the sender, which fires it too.
pub(crate) type CloseSignal = SharedFuture<signal::Receiver<()>>;

/// The state, held: the fast path's word is seized while it is held. Released, it hands
/// the word the state back if nobody waits, nudges the refill task if something became
/// due sooner than it planned for (or the bucket closed), and wakes the waiters whose
/// outcomes were decided under it once the lock is released.
pub(crate) struct Locked<'a> {
    shared: &'a Shared,
    state: MutexGuard<'a, State>,
    /// Last, so that it is dropped after the guard: waking may wake a sleeping worker
    /// thread, and that system call should not hold up everyone waiting for the lock.
    woken: Wake,
}

/// Wakers to wake as it is dropped.
struct Wake(Vec<Waker>);

impl Drop for Wake {
    fn drop(&mut self) {
        self.0.drain(..).for_each(Waker::wake);
    }
}

impl Deref for Locked<'_> {
    type Target = State;

    fn deref(&self) -> &State {
        &self.state
    }
}

impl DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.state
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let fast = &self.shared.fast;
        self.state.flush_tally(&fast.counters);
        let (record, now) = (self.state.unseen_active(), self.state.now());
        if let Some(limit) = self.state.idle_limit() {
            fast.publish(limit, now, record);
        }
        if self.state.refill_needs_nudge() {
            self.shared.refill.nudge();
        }
        self.state.swap_wakers(&mut self.woken.0);
    }
}

/// A decision of [`Shared::begin`], made under the bucket's lock.
enum Begun {
    Granted,
    Queued(WaiterId),
    /// It must wait in a runtime whose timer is not checked yet: check, then decide again.
    MustCheckTimer,
}

impl Shared {
    /// A bucket of checked `settings` on `clock`, reporting through `observer`, whose one
    /// limit is empty at the instant given in the units given (as a compact key of
    /// `Keyed` hands its state over), else starts as `settings` say.
    pub(crate) fn new(
        settings: &Settings,
        clock: Clock,
        resumed: Option<(Units, u128)>,
        observer: Observer,
    ) -> Shared {
        let mut state = State::new(settings, clock.now());
        if let Some((units, empty_at)) = resumed {
            state.resume(units, empty_at);
        }
        let now = state.now();
        let fast = FastPath::seized();
        if let Some(limit) = state.idle_limit() {
            fast.publish(limit, now, false);
        }
        Shared {
            fast,
            observer,
            capacity: AtomicU64::new(state.capacity()),
            state: Mutex::new(state),
            clock,
            refill: Refill::default(),
            closed: AtomicBool::new(false),
            queue_limit: settings.queue_limit,
            limits: 1 + settings.more.len(),
            close_watch: Mutex::new(None),
            identity: Identity::new(),
            #[cfg(all(test, not(loom)))]
            panic_in_refill: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The state, as of `now` at the earliest. Nothing panics while holding the lock
    /// but a waiter's timer check, before anything was decided (see `begin_locked`),
    /// so the state is consistent even when poisoned, and poisoning is ignored.
    #[inline]
    pub(crate) fn lock(&self) -> Locked<'_> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        // A bucket of several limits never hands the word its state: nothing to seize.
        if self.limits == 1 {
            if let Some(empty_at) = self.fast.seize() {
                let least_room = self.fast.least_room_taken();
                state.adopt(empty_at, least_room);
            }
        }
        Locked {
            shared: self,
            state,
            woken: Wake(Vec::new()),
        }
    }

    /// Runs `change` on the state at `now`, then releases it (see [`Locked`]).
    pub(crate) fn update<R>(&self, now: u64, change: impl FnOnce(&mut State, u64) -> R) -> R {
        change(&mut self.lock(), now)
    }

    /// Closes the bucket: the flag first, so that a waiter woken on another thread finds
    /// `is_closed()` true, then the state (with `close`, which tells the waiters), then
    /// whoever watches for the close.
    pub(crate) fn close(&self, close: impl FnOnce(&mut State, u64)) {
        self.update(self.clock.now(), |state, now| {
            self.closed.store(true, Ordering::Release);
            close(state, now);
        });
        // Dropping the sender fires the signal every `Closed` holds a clone of.
        drop(self.close_watch().take());
    }

    /// What a `Closed` waits on; `None` once the bucket closed. The flag is set before
    /// [`close`](Shared::close) takes the watch, so read under the watch's lock it tells
    /// whether a signal made now would ever fire.
    pub(crate) fn close_signal(&self) -> Option<CloseSignal> {
        let mut watch = self.close_watch();
        if self.closed.load(Ordering::Acquire) {
            return None;
        }
        let (_, signal) = watch.get_or_insert_with(|| {
            let (sender, receiver) = signal::channel();
            (sender, receiver.shared())
        });
        Some(signal.clone())
    }

    fn close_watch(&self) -> MutexGuard<'_, Option<(signal::Sender<()>, CloseSignal)>> {
        // Nothing panics while holding it either.
        self.close_watch
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The state, held for a composite until the guard is dropped.
    pub(crate) fn hold(self: &Arc<Self>) -> HeldBucket<'_> {
        HeldBucket {
            shared: self,
            state: self.lock(),
        }
    }

    /// Makes sure a refill task serves those queued on `state` (see `refill.rs`).
    fn ensure_refill(self: &Arc<Self>, state: &mut State) -> Result<(), TakeError> {
        refill::ensure_running(self, || state.refill_started())
    }

    /// A request's first poll: `Ok(None)` when served at once, `Ok(Some(id))` when queued,
    /// to be woken through `waker` once its outcome is decided.
    ///
    /// # Panics
    ///
    /// When the request must wait inside a tokio runtime without a timer (see
    /// [`clock::require_timer`]).
    #[inline]
    pub(crate) fn begin(
        self: &Arc<Self>,
        request: Request,
        waker: &Waker,
    ) -> Result<Option<WaiterId>, TakeError> {
        let now = self.clock.now();
        let served_now = match request.kind {
            Kind::Take => self.fast.take_now(request.tokens, now),
            Kind::Wait => {
                (self.fast.read(now, Units::tokens)).is_some_and(|held| held >= request.tokens)
            }
            // A composite's hold is joined under the lock (see `composite/`), never here.
            Kind::Hold => false,
        };
        if served_now {
            return Ok(None);
        }
        self.begin_locked(request, waker, now)
    }

    /// `begin` when the word sends the request to the lock: to be served, refused or
    /// queued there. Out of line, as `try_take_locked` is.
    #[inline(never)]
    fn begin_locked(
        self: &Arc<Self>,
        request: Request,
        waker: &Waker,
        now: u64,
    ) -> Result<Option<WaiterId>, TakeError> {
        // The instant the fast path was asked at, also after the timer check: reading the
        // clock again (it costs a quarter of what queueing a waiter does) would change
        // nothing but the cost.
        let mut timer_checked = false;
        loop {
            let begun = self.update(now, |state, now| {
                if state.admit(request, now)? {
                    return Ok(Begun::Granted);
                }
                let in_runtime = Handle::try_current().is_ok();
                // A deadline needs the runtime's timer, even when a refill task already
                // runs (started from another runtime).
                if request.deadline != NEVER && !in_runtime {
                    return Err(TakeError::NoRuntime);
                }
                if in_runtime && !timer_checked {
                    if state.has_wakers() {
                        // Serving decided others' outcomes: panicking under the lock
                        // would lose them.
                        return Ok(Begun::MustCheckTimer);
                    }
                    // Nothing was decided yet, so a panic here leaves the state as it
                    // was; checking outside the lock would cost a second round.
                    clock::require_timer_in_runtime();
                }
                self.ensure_refill(state)?;
                Ok(Begun::Queued(state.enqueue(request, waker.clone())))
            })?;
            match begun {
                Begun::Granted => return Ok(None),
                Begun::Queued(id) => return Ok(Some(id)),
                Begun::MustCheckTimer => {
                    // Outside the lock: a panic under it would drop the outcomes due to
                    // other waiters. Then decide again, as the bucket may have moved on.
                    clock::require_timer();
                    timer_checked = true;
                }
            }
        }
    }

    /// Polls queued waiter `id`, which takes `consumes` tokens when granted, for its
    /// outcome, under the lock: a grant read there is seen (see `unseen.rs`).
    ///
    /// # Panics
    ///
    /// When the refill task died with its runtime and must be started again here, in a
    /// runtime without a timer: it would panic on its first sleep, be started again by
    /// this waiter, and so on for ever.
    pub(crate) fn poll_outcome(
        self: &Arc<Self>,
        id: WaiterId,
        consumes: u64,
        cx: &mut Context<'_>,
    ) -> Poll<Outcome> {
        let decided = self.lock().poll_outcome(id, consumes, cx.waker());
        if let Some(outcome) = decided {
            return Poll::Ready(outcome);
        }
        // The refill task may have died with its runtime (which woke us): start another
        // here, so that a waiter carried into another runtime is served. Outside any
        // runtime there is nobody to start it; the next poll inside one will.
        if !self.refill.is_running() {
            clock::require_timer();
            let _ = self.ensure_refill(&mut self.lock());
        }
        Poll::Pending
    }

    /// A queued request leaves early; see [`State::leave`].
    pub(crate) fn leave(&self, id: WaiterId, request: Request, why: Leaving) -> Option<Outcome> {
        self.update(self.clock.now(), |state, now| {
            state.leave(id, request, why, now)
        })
    }
}

impl Served for Shared {
    fn refill(&self) -> &Refill {
        &self.refill
    }

    fn serve_due(&self, wakers: &mut Vec<Waker>) -> Option<Option<Instant>> {
        let now = self.clock.now();
        let mut state = self.lock();
        #[cfg(all(test, not(loom)))]
        if self.panic_in_refill.load(Ordering::Relaxed) {
            panic!("a panic in the refill task, made by a test");
        }
        if state.is_closed() {
            return None;
        }
        let due = state.serve_and_plan_refill(now);
        // Woken here, from the task's own vector, so that serving reuses one allocation.
        state.swap_wakers(wakers);
        drop(state);
        wakers.drain(..).for_each(Waker::wake);
        Some(self.clock.instant(due))
    }

    fn refill_lost(&self) {
        self.lock().refill_lost();
    }

    fn refill_failed(&self) {
        self.observer.refill_failed();
        self.close(|state, _| state.fail());
    }
}

/// A bucket's state held by a composite (see `composite/`) while it decides over all its
/// members. Released, it nudges the refill task if something became due sooner, then
/// wakes the waiters decided under it, as every other change does.
pub(crate) struct HeldBucket<'a> {
    shared: &'a Arc<Shared>,
    state: Locked<'a>,
}

impl HeldBucket<'_> {
    /// What the bucket reports through (see `observe/`): a composite reports what it
    /// decides for a named member.
    pub(crate) fn observer(&self) -> &Observer {
        &self.shared.observer
    }

    /// `moment` on this bucket's clock.
    pub(crate) fn clock_at(&self, moment: Moment) -> u64 {
        self.shared.clock.at(moment)
    }

    /// Makes sure a refill task serves those behind a hold once it leaves.
    pub(crate) fn ensure_refill(&mut self) -> Result<(), TakeError> {
        self.shared.ensure_refill(&mut self.state)
    }
}

impl Deref for HeldBucket<'_> {
    type Target = State;

    fn deref(&self) -> &State {
        &self.state
    }
}

impl DerefMut for HeldBucket<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.state
    }
}
