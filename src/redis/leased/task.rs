//! The lease task: one per leased front, started by its first request that must wait. It
//! asks for leases while requests are queued, has leases whose lifetime ended given back,
//! and all of them once the front is idle or closed, then ends with the front.
//!
//! It sees its front only through [`Leases`], what it asks of it; the front (`front.rs`)
//! keeps its state to itself, and starts the task.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::Notify;
use tokio::time::Instant;

/// What the lease task does next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Ask the source for a lease of between `fewest` and `most` tokens.
    Fetch { fewest: u64, most: u64 },
    /// Nothing to do until this instant (or for ever), unless woken.
    Sleep(Option<Instant>),
    /// The front is closed and its leases given back: end.
    Stop,
}

/// What the lease task asks of its front.
pub(crate) trait Leases: Send + Sync + 'static {
    /// Gives back the leases that ended by `now` (their lifetime over, or the front idle
    /// or closed), and says what next.
    fn step(&self, now: Instant) -> impl Future<Output = Next> + Send;

    /// Asks the source for a lease of between `fewest` and `most` tokens, and serves the
    /// queue with what it brings.
    fn fetch(&self, fewest: u64, most: u64) -> impl Future<Output = ()> + Send;

    /// Notified when the task has something to do.
    fn wake(&self) -> &Notify;

    /// The task has ended (or was dropped, its runtime shutting down): whatever is still
    /// queued is refused as closed.
    fn stopped(&self);
}

pub(crate) async fn run<F: Leases>(front: Arc<F>) {
    // Dropped without ending (a panic, or its runtime shutting down), the task still
    // answers every queued request, so none waits for ever.
    let running = Running(&*front);
    loop {
        match front.step(Instant::now()).await {
            Next::Fetch { fewest, most } => front.fetch(fewest, most).await,
            Next::Sleep(Some(until)) => {
                let _ = tokio::time::timeout_at(until, front.wake().notified()).await;
            }
            Next::Sleep(None) => front.wake().notified().await,
            Next::Stop => break,
        }
    }
    drop(running);
}

/// Tells the front its task ended when dropped.
struct Running<'a, F: Leases>(&'a F);

impl<F: Leases> Drop for Running<'_, F> {
    fn drop(&mut self) {
        self.0.stopped();
    }
}
