//! The lease task: one per leased front, started by its first request that must wait. It
//! asks the source for leases while requests are queued, gives back leases whose lifetime
//! ended, and all of them once the front is idle or closed, then ends with the front.

use std::sync::Arc;

use tokio::time::Instant;

use super::budget::Lease;
use super::front::{Counters, Front, Next};
use super::source::LeaseSource;

pub(crate) async fn run<S: LeaseSource>(front: Arc<Front<S>>) {
    // Dropped without ending (a panic, or its runtime shutting down), the task still
    // answers every queued request, so none waits for ever.
    let running = Running(&front);
    loop {
        let now = Instant::now();
        let (ended, next) = front.next_step(now);
        give_back(&front, ended, now).await;
        match next {
            Next::Fetch { fewest, most } => {
                let started = Instant::now();
                Counters::add(&front.counters.calls, 1);
                front.observer.lease_call();
                let ahead = front.settings.lifetime;
                let outcome = front.source.take(fewest, most, ahead).await;
                front.fetched(outcome, started, Instant::now());
            }
            Next::Sleep(Some(until)) => {
                let _ = tokio::time::timeout_at(until, front.wake.notified()).await;
            }
            Next::Sleep(None) => front.wake.notified().await,
            Next::Stop => break,
        }
    }
    drop(running);
}

/// Gives back each of `leases` that could return anything (see
/// [`Front::worth_giving_back`]). A give-back that fails leaves the bucket stricter,
/// never looser, so it is not made again.
async fn give_back<S: LeaseSource>(front: &Front<S>, leases: Vec<Lease>, now: Instant) {
    for lease in leases {
        if !front.worth_giving_back(&lease, now) {
            continue;
        }
        Counters::add(&front.counters.calls, 1);
        Counters::add(&front.counters.given_back, lease.tokens);
        front.observer.giving_back(lease.tokens);
        if let Err(error) = front.source.give_back(lease.tokens, lease.ticket).await {
            front.observer.give_back_failed(&error);
        }
    }
}

/// Marks the front's task ended when dropped.
struct Running<'a, S: LeaseSource>(&'a Front<S>);

impl<S: LeaseSource> Drop for Running<'_, S> {
    fn drop(&mut self) {
        self.0.stopped();
    }
}
