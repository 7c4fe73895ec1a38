//! How the limiters that answer with a [`TryAcquireError`] (the window limiters) report
//! a `try_acquire`.

use super::Observer;
use crate::error::TryAcquireError;

impl Observer {
    /// Reports a `try_acquire` of `permits` that decided `result`: admitted, or refused
    /// (with its `retry_after` when limited). On the hot path: for an unnamed limiter,
    /// one test of its empty observer.
    #[inline]
    pub(crate) fn decided(&self, permits: u64, result: &Result<(), TryAcquireError>) {
        match result {
            Ok(()) => self.admitted(permits),
            Err(TryAcquireError::Limited { retry_after }) => {
                self.refused(permits, Some(*retry_after));
            }
            Err(_) => self.refused(permits, None),
        }
    }
}
