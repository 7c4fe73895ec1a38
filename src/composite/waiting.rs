//! A composite's [`acquire`](crate::All::acquire): its places in every member's line,
//! joined at once, and the decision it makes, under every member's lock, once it is at
//! the head of each.
//!
//! A bucket holds the composite's place as a *hold* in its queue: nothing is taken, and
//! at the head it stops the bucket's line (the bucket keeps accruing, capped at its
//! capacity) and wakes the composite once. A window limiter holds it as a waiter in its
//! line, which owns the line's lock once at the head. At the head of every line, the
//! composite locks every member in the global order, reads the clock once, and either
//! every member counts the request at that instant, or none does and the composite
//! sleeps until the latest instant any member named.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::runtime::Handle;
use tokio::time::{Instant, Sleep};

use crate::bucket::queue::{Kind, Outcome, Request, WaiterId};
use crate::bucket::state::{Leaving, Standing};
use crate::bucket::TokenBucket;
use crate::clock::{self, Moment, NEVER};
use crate::composite::held::{instant_of, lock_all, try_all, Held};
use crate::composite::member::{check_seen, Hooks, Indexed, Part};
use crate::error::{
    for_good, AcquireAllError, AcquireError, TakeError, TryAcquireAllError, TryAcquireError,
};
use crate::permits::screen;
use crate::sync::MutexGuard;
use crate::window::turnstile::{Line, Queued};
use crate::window::Window;

/// How a composite waits for its members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    /// In every member's line at once ([`all`](crate::all)).
    AtOnce,
    /// In its first member's line until that member would admit it, then in the others'
    /// at once ([`all_in_turn`](crate::all_in_turn)).
    InTurn,
}

/// A composite's `acquire`, over `parts` in lock order, waiting in their lines in `order`.
pub(crate) async fn acquire_all(
    hooks: Hooks<'_>,
    permits: u64,
    order: Order,
) -> Result<(), AcquireAllError> {
    match try_all(&hooks, permits, false) {
        Ok(()) => return Ok(()),
        Err(TryAcquireAllError::Member { member, error }) => return Err(refused(member, error)),
        Err(TryAcquireAllError::Config(error)) => return Err(AcquireAllError::Config(error)),
        Err(TryAcquireAllError::Limited { .. }) => {}
    }
    // Under loom there is no runtime: the model's threads poll it and move the clock.
    if !cfg!(loom) && Handle::try_current().is_err() {
        return Err(AcquireAllError::NoRuntime);
    }
    // It must wait: without a timer nothing could wake it, so say so on this first poll.
    clock::require_timer();
    let mut sleep = None;
    // In turn, it first waits in the first member's line alone, until that member would
    // admit it; its place there is kept while it joins the others, so that nobody who
    // came later to that line passes it. A key that follows is made whole only then.
    let mut led = None;
    if order == Order::InTurn {
        let leader = waiting_on(&hooks, order, |member| member == 0)?;
        let mut places = poll_fn(|context| Poll::Ready(join(&leader, permits, context))).await?;
        poll_fn(|context| places.poll_decide(&leader, context, &mut sleep, false)).await?;
        led = Some(places);
    }
    let parts = waiting_on(&hooks, order, |_| true)?;
    let joining: Vec<Indexed<'_>> = (parts.iter().copied())
        .filter(|indexed| led.is_none() || indexed.member != 0)
        .collect();
    let mut places = poll_fn(|context| Poll::Ready(join(&joining, permits, context))).await?;
    // The first member's place goes where it stands in the lock order; until then the
    // places it was in leave its line if anything fails.
    if let Some(place) = led.as_mut().and_then(|led| led.places.pop()) {
        let at = parts.iter().position(|indexed| indexed.member == 0);
        places.places.insert(at.unwrap_or(0), place);
    }
    poll_fn(|context| places.poll_decide(&parts, context, &mut sleep, true)).await
}

/// The limiters of the members at the positions `wanted` picks, which a composite of
/// `hooks` waits on, in lock order: each key's made whole (and kept whole by its member
/// from then on), which must then be a limiter no other member is, and play the part its
/// `Keyed`'s keys play.
fn waiting_on<'a>(
    hooks: &Hooks<'a>,
    order: Order,
    wanted: impl Fn(usize) -> bool,
) -> Result<Vec<Indexed<'a>>, AcquireAllError> {
    let parts = hooks
        .whole(wanted)
        .map_err(|(member, error)| refused(member, error))?;
    if !hooks.keys.is_empty() {
        let leader = (order == Order::InTurn).then_some(0);
        check_seen(parts.iter().map(Indexed::seen).collect(), leader)?;
    }
    Ok(parts)
}

/// Member `member`'s refusal for good of a `try_acquire`, as the composite's `acquire`
/// says it.
fn refused(member: usize, error: TryAcquireError) -> AcquireAllError {
    let error = for_good(error);
    AcquireAllError::Member { member, error }
}

/// What a bucket's line holds for a composite asking for `permits`.
fn hold(permits: u64) -> Request {
    Request {
        kind: Kind::Hold,
        tokens: permits,
        deadline: NEVER,
    }
}

/// The error of a member whose hold left its bucket's queue: only the composite grants
/// a hold, so it left refused (closed, or asking more than the capacity now).
fn hold_left(member: usize, outcome: Outcome) -> AcquireAllError {
    let error = Result::<(), TakeError>::from(outcome)
        .err()
        .unwrap_or(TakeError::Closed);
    AcquireAllError::Member {
        member,
        error: error.into(),
    }
}

/// A composite's place in one member's line.
enum Place<'a> {
    Bucket {
        bucket: &'a TokenBucket,
        id: WaiterId,
        /// No longer in the bucket's queue: admitted, or told it cannot be.
        left: bool,
    },
    Window(Queued<'a>),
}

/// Its places in every member's line, in lock order; dropped, it leaves every line it
/// is still in (cancel safety), and counts nothing.
struct Places<'a> {
    places: Vec<Place<'a>>,
    permits: u64,
    /// The instant the composite last planned to decide at, every member at the head of
    /// its line and each admitting it from then on: what a window limiter admitted it
    /// since, however late the timer woke it (see `poll_decide`).
    ready_since: Option<Instant>,
}

/// Joins every member's line at once, holding every member's lock in the global order
/// (for a window limiter, its line's record), so that no request joins any of them
/// between: two composites sharing members stand in the same order in every line they
/// share, and so cannot each wait for the other. Refused for good by any member, it
/// joins none.
fn join<'a>(
    parts: &[Indexed<'a>],
    permits: u64,
    context: &mut Context<'_>,
) -> Result<Places<'a>, AcquireAllError> {
    enum Joining<'a> {
        Bucket(&'a TokenBucket, crate::bucket::HeldBucket<'a>),
        Window(&'a dyn Window, MutexGuard<'a, Line>),
    }
    let moment = Moment::now();
    let mut locked: Vec<Joining<'a>> = Vec::new();
    for indexed in parts.iter() {
        locked.push(match indexed.part {
            Part::Bucket(bucket) => Joining::Bucket(bucket, bucket.hold_lock()),
            Part::Window(window) => Joining::Window(window, window.turnstile().line()),
        });
    }
    let mut refused: Option<(usize, AcquireError)> = None;
    for (indexed, joining) in parts.iter().zip(locked.iter_mut()) {
        let verdict = match joining {
            Joining::Bucket(_, state) => {
                let now = state.clock_at(moment);
                state
                    .admit_hold(permits, now)
                    .and_then(|()| state.ensure_refill())
                    .map_err(AcquireError::from)
            }
            Joining::Window(window, _) => screen(permits, window.limit())
                .map(drop)
                .map_err(AcquireError::from),
        };
        if let Err(error) = verdict {
            if refused.map_or(true, |(first, _)| indexed.member < first) {
                refused = Some((indexed.member, error));
            }
        }
    }
    if let Some((member, error)) = refused {
        return Err(match error {
            AcquireError::NoRuntime => AcquireAllError::NoRuntime,
            error => AcquireAllError::Member { member, error },
        });
    }
    let places = locked.iter_mut().map(|joining| match joining {
        Joining::Bucket(bucket, state) => Place::Bucket {
            bucket,
            id: state.enqueue(hold(permits), context.waker().clone()),
            left: false,
        },
        Joining::Window(window, line) => Place::Window(Queued::join(
            window.turnstile(),
            line,
            window.clock(),
            permits,
            context,
        )),
    });
    Ok(Places {
        places: places.collect(),
        permits,
        ready_since: None,
    })
}

impl<'a> Places<'a> {
    /// While some window's line is not yet reached: `Ready` with the member's error if
    /// a bucket's hold left its queue, else `Pending`, this poll's waker registered with
    /// every hold still queued. Each bucket is locked alone, as nothing else is held.
    fn poll_left(
        &mut self,
        parts: &[Indexed<'_>],
        context: &mut Context<'_>,
    ) -> Poll<Result<(), AcquireAllError>> {
        for (place, indexed) in self.places.iter_mut().zip(parts.iter()) {
            let Place::Bucket { bucket, id, left } = place else {
                continue;
            };
            let outcome = bucket.hold_lock().poll_outcome(*id, 0, context.waker());
            if let Some(outcome) = outcome {
                *left = true;
                return Poll::Ready(Err(hold_left(indexed.member, outcome)));
            }
        }
        Poll::Pending
    }

    /// Decides, once at the head of every line: every member would admit it at one
    /// instant, and then it counts it in every member if it may `commit` (the composite
    /// is admitted) or else keeps its places, counting nothing (it has more lines to
    /// join); or it sleeps until the latest instant a member named.
    fn poll_decide(
        &mut self,
        parts: &[Indexed<'_>],
        context: &mut Context<'_>,
        sleep: &mut Option<Pin<Box<Sleep>>>,
        commit: bool,
    ) -> Poll<Result<(), AcquireAllError>> {
        loop {
            // At the head of every window limiter's line? Each wakes the task when it is.
            // Until then a bucket is asked only whether its hold left (it closed, or its
            // capacity fell below the request), which ends the wait at once.
            let mut at_heads = true;
            for place in self.places.iter_mut() {
                if let Place::Window(queued) = place {
                    at_heads &= queued.poll_head(context);
                }
            }
            if !at_heads {
                return self.poll_left(parts, context);
            }
            let (mut held, moment) = lock_all(parts);
            let (mut ready, mut behind, mut windows) = (true, false, false);
            // `None` below every instant: the latest a member named, if any, and the
            // latest a bucket holding the tokens now has held them since.
            let (mut latest, mut since): (Option<Instant>, Option<Instant>) = (None, None);
            for (place, member) in self.places.iter_mut().zip(held.iter_mut()) {
                match (place, &mut member.held) {
                    (Place::Bucket { id, left, bucket }, Held::Bucket(state)) => {
                        let now = state.clock_at(moment);
                        match state.hold_standing(*id, self.permits, context.waker(), now) {
                            Standing::Ready { since: at } => {
                                since = since.max(instant_of(bucket.clock(), at));
                            }
                            Standing::ReadyAt(at) => {
                                ready = false;
                                latest = latest.max(instant_of(bucket.clock(), at));
                            }
                            // It wakes this task once the hold reaches its head.
                            Standing::Behind => (ready, behind) = (false, true),
                            Standing::Left(outcome) => {
                                *left = true;
                                return Poll::Ready(Err(hold_left(member.member, outcome)));
                            }
                        }
                    }
                    (Place::Window(_), Held::Window { held, clock }) => {
                        windows = true;
                        if let Some(at) = held.ready_at(self.permits) {
                            ready = false;
                            latest = latest.max(instant_of(clock, at));
                        }
                    }
                    _ => unreachable!("places and locks are in the same order"),
                }
            }
            if ready && !commit {
                return Poll::Ready(Ok(()));
            }
            if ready {
                // Granted as of the instant every member admitted it from, however late
                // the timer woke this task: each bucket since it held the tokens (its
                // hold at the head), a window since the instant planned last, if any.
                let from = match (windows, self.ready_since) {
                    (false, _) => since,
                    (true, Some(planned)) => since.max(Some(planned)),
                    (true, None) => None,
                };
                for (place, member) in self.places.iter_mut().zip(held.iter_mut()) {
                    match (place, &mut member.held) {
                        (Place::Bucket { id, left, .. }, Held::Bucket(state)) => {
                            let now = state.clock_at(moment);
                            let as_of = from.map_or(now, |from| state.clock_at(Moment::of(from)));
                            state.commit_hold(*id, self.permits, as_of, now);
                            // Left before reporting: a report that panics must not have
                            // the drop give back a grant this composite holds.
                            *left = true;
                            state.observer().admitted(self.permits);
                        }
                        (Place::Window(queued), Held::Window { held, .. }) => {
                            queued.admitted(held.record(self.permits));
                        }
                        _ => unreachable!("places and locks are in the same order"),
                    }
                }
                // The locks first, then the window lines' heads, as the places drop.
                drop(held);
                self.places = Vec::new();
                return Poll::Ready(Ok(()));
            }
            drop(held);
            self.ready_since = latest.filter(|_| !behind);
            // No timer under loom: the model moves the clock and polls again.
            let Some(deadline) = latest.filter(|_| !cfg!(loom)) else {
                return Poll::Pending;
            };
            let sleep = sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
            sleep.as_mut().reset(deadline);
            if sleep.as_mut().poll(context).is_pending() {
                return Poll::Pending;
            }
        }
    }
}

impl Drop for Places<'_> {
    fn drop(&mut self) {
        let permits = self.permits;
        for place in self.places.iter_mut() {
            if let Place::Bucket {
                bucket,
                id,
                left: false,
            } = place
            {
                bucket.leave(*id, hold(permits), Leaving::Dropped);
            }
        }
    }
}
