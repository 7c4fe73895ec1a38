//! The rule every limiter applies to a request before it looks at its state, written once
//! for the bucket, the window limiters and the composites: zero permits ask for nothing,
//! and more than the most a limiter ever admits at once (a bucket's smallest capacity, a
//! window's limit) are refused for good, with an error naming both numbers.
//!
//! It stands on `error` alone, so that `bucket/` and `window/` may both use it without
//! using each other.

use crate::error::{AcquireError, TakeError, TryAcquireError, TryTakeError};

/// What is left to decide about a request once it passed [`screen`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Screened {
    /// Zero permits: admitted at once, even with others waiting, as it takes nothing.
    Nothing,
    /// Up to the limiter's state and whoever waits.
    Decide,
}

/// A request for more permits than a limiter ever admits at once: refused for good.
/// Each error type says it in its own words, through `From`, so `?` turns it into the
/// caller's error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooLarge {
    pub(crate) requested: u64,
    /// The most the limiter admits at once.
    pub(crate) most: u64,
}

/// Screens a request for `requested` permits against `most`, the most a limiter ever
/// admits at once.
#[inline(always)]
pub(crate) fn screen(requested: u64, most: u64) -> Result<Screened, TooLarge> {
    if requested > most {
        Err(TooLarge { requested, most })
    } else if requested == 0 {
        Ok(Screened::Nothing)
    } else {
        Ok(Screened::Decide)
    }
}

/// `From<TooLarge>` for each error that names such a request, in its own words: the
/// error's variant and what it calls the most.
macro_rules! too_large_is {
    ($($error:ident::$variant:ident { $most:ident }),*) => {$(
        impl From<TooLarge> for $error {
            fn from(TooLarge { requested, most }: TooLarge) -> $error {
                $error::$variant { requested, $most: most }
            }
        }
    )*};
}

too_large_is!(
    TryTakeError::ExceedsCapacity { capacity },
    TakeError::ExceedsCapacity { capacity },
    TryAcquireError::ExceedsLimit { limit },
    AcquireError::ExceedsLimit { limit }
);

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn zero_asks_nothing_and_more_than_the_most_is_refused_naming_both() {
        assert_eq!(screen(0, 5), Ok(Screened::Nothing));
        assert_eq!(screen(1, 5), Ok(Screened::Decide));
        assert_eq!(screen(5, 5), Ok(Screened::Decide));
        let too_large = screen(6, 5).unwrap_err();
        // A bucket says capacity; every limiter, limit.
        let (requested, capacity, limit) = (6, 5, 5);
        assert_eq!(
            (TryTakeError::from(too_large), TakeError::from(too_large)),
            (
                TryTakeError::ExceedsCapacity {
                    requested,
                    capacity
                },
                TakeError::ExceedsCapacity {
                    requested,
                    capacity
                }
            )
        );
        assert_eq!(
            (
                TryAcquireError::from(too_large),
                AcquireError::from(too_large)
            ),
            (
                TryAcquireError::ExceedsLimit { requested, limit },
                AcquireError::ExceedsLimit { requested, limit }
            )
        );
    }
}
