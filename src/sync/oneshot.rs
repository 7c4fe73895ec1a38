//! A oneshot channel built on loom's primitives, standing in for tokio's under
//! `--cfg loom` (tokio's own is not visible to loom). It keeps exactly the behaviour the
//! bucket relies on:
//!
//! - `send` fails, handing the value back, once the receiver is closed or dropped;
//! - a value sent before `close` can still be read by `try_recv` after it;
//! - the receiver resolves with an error once the sender is dropped unsent.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use loom::sync::{Arc, Mutex};

/// The receiver gave up, or the sender was dropped unsent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecvError;

/// Why `try_recv` had nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TryRecvError {
    Empty,
    Closed,
}

struct Slot<T> {
    value: Option<T>,
    sender_gone: bool,
    receiver_closed: bool,
    waker: Option<Waker>,
}

type Channel<T> = Arc<Mutex<Slot<T>>>;

pub(crate) struct Sender<T>(Channel<T>);

pub(crate) struct Receiver<T>(Channel<T>);

pub(crate) fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let slot = Arc::new(Mutex::new(Slot {
        value: None,
        sender_gone: false,
        receiver_closed: false,
        waker: None,
    }));
    (Sender(Arc::clone(&slot)), Receiver(slot))
}

impl<T> Sender<T> {
    pub(crate) fn send(self, value: T) -> Result<(), T> {
        let mut slot = self.0.lock().unwrap();
        if slot.receiver_closed {
            return Err(value);
        }
        slot.value = Some(value);
        // The wake-up itself happens when `self` drops, right after.
        Ok(())
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.0.lock().unwrap().receiver_closed
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let waker = {
            let mut slot = self.0.lock().unwrap();
            slot.sender_gone = true;
            slot.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<T> Receiver<T> {
    pub(crate) fn close(&mut self) {
        self.0.lock().unwrap().receiver_closed = true;
    }

    pub(crate) fn try_recv(&mut self) -> Result<T, TryRecvError> {
        let mut slot = self.0.lock().unwrap();
        match slot.value.take() {
            Some(value) => Ok(value),
            None if slot.sender_gone || slot.receiver_closed => Err(TryRecvError::Closed),
            None => Err(TryRecvError::Empty),
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let value = {
            let mut slot = self.0.lock().unwrap();
            slot.receiver_closed = true;
            slot.value.take()
        };
        // Dropped outside the lock, as a receiver's unread value would be.
        drop(value);
    }
}

impl<T> Future for Receiver<T> {
    type Output = Result<T, RecvError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut slot = self.0.lock().unwrap();
        if let Some(value) = slot.value.take() {
            return Poll::Ready(Ok(value));
        }
        if slot.sender_gone {
            return Poll::Ready(Err(RecvError));
        }
        slot.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Sender")
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Receiver")
    }
}
