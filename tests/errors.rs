//! The public `From`s between the bucket's errors and the `Limiter` trait's: each maps
//! every variant, and loses nothing (no two variants map to one, and each value is kept).

use std::collections::HashSet;
use std::time::Duration;

use token_bucket::{
    AcquireError, Rate, TakeError, TokenBucket, TooManyKeys, TryAcquireError, TryTakeError,
};

#[test]
fn every_try_take_error_is_the_try_acquire_error_of_the_same_meaning() {
    let retry_after = Duration::from_millis(250);
    let (requested, capacity) = (7, 5);
    let pairs = [
        (
            TryTakeError::Insufficient { retry_after },
            TryAcquireError::Limited { retry_after },
        ),
        (
            TryTakeError::ExceedsCapacity {
                requested,
                capacity,
            },
            TryAcquireError::ExceedsLimit {
                requested,
                limit: capacity,
            },
        ),
        (TryTakeError::Closed, TryAcquireError::Closed),
    ];
    assert_maps_one_to_one(&pairs);
}

#[test]
fn every_take_error_is_the_acquire_error_of_the_same_meaning() {
    let (requested, capacity) = (7, 5);
    let (queued, limit) = (10, 12);
    let pairs = [
        (
            TakeError::ExceedsCapacity {
                requested,
                capacity,
            },
            AcquireError::ExceedsLimit {
                requested,
                limit: capacity,
            },
        ),
        (
            TakeError::QueueFull { queued, limit },
            AcquireError::QueueFull { queued, limit },
        ),
        (TakeError::Timeout, AcquireError::Timeout),
        (TakeError::Closed, AcquireError::Closed),
        (TakeError::NoRuntime, AcquireError::NoRuntime),
        (TakeError::RefillFailed, AcquireError::RefillFailed),
    ];
    assert_maps_one_to_one(&pairs);
}

#[test]
fn too_many_keys_is_the_too_many_keys_of_either_trait_error() {
    let refusal = TooManyKeys { max_keys: 3 };
    assert_eq!(
        TryAcquireError::from(refusal),
        TryAcquireError::TooManyKeys { max_keys: 3 }
    );
    assert_eq!(
        AcquireError::from(refusal),
        AcquireError::TooManyKeys { max_keys: 3 }
    );
}

/// A bucket's `Limiter` answers are its own, through the `From`s: `?` carries them.
#[tokio::test(start_paused = true)]
async fn a_bucket_s_limiter_says_its_own_errors_through_the_froms() {
    use token_bucket::Limiter;

    let bucket = TokenBucket::builder()
        .rate(Rate::per_second(2))
        .capacity(2)
        .queue_limit(2)
        .build()
        .unwrap();
    for permits in [3, 2, 1] {
        let own = bucket.try_take(permits);
        bucket.refund(2);
        assert_eq!(
            Limiter::try_acquire(&bucket, permits),
            own.map_err(TryAcquireError::from)
        );
        bucket.refund(2);
    }
    assert_eq!(
        Limiter::acquire(&bucket, 3).await,
        Err(AcquireError::ExceedsLimit {
            requested: 3,
            limit: 2
        })
    );
    bucket.try_take(2).unwrap();
    let waiting = bucket.take(2);
    let mut waiting = std::pin::pin!(waiting);
    assert!(futures::poll!(waiting.as_mut()).is_pending());
    assert_eq!(
        Limiter::acquire(&bucket, 1).await,
        Err(AcquireError::QueueFull {
            queued: 2,
            limit: 2
        })
    );
    bucket.close();
    assert_eq!(
        Limiter::acquire(&bucket, 1).await,
        Err(AcquireError::Closed)
    );
    assert_eq!(
        Limiter::try_acquire(&bucket, 1),
        Err(TryAcquireError::Closed)
    );
}

/// Each `from` converts to its `to`, and no two of them to the same error.
#[track_caller]
fn assert_maps_one_to_one<F, T>(pairs: &[(F, T)])
where
    F: Copy + std::fmt::Debug,
    T: From<F> + PartialEq + std::fmt::Debug,
{
    for (from, to) in pairs {
        assert_eq!(&T::from(*from), to, "from {from:?}");
    }
    let distinct: HashSet<String> = pairs
        .iter()
        .map(|(from, _)| format!("{:?}", T::from(*from)))
        .collect();
    assert_eq!(distinct.len(), pairs.len(), "no two variants map to one");
}
