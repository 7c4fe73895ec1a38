//! What the leased fronts' tests share, over any connection: `tests/redis_leased.rs`
//! on one server, `tests/redis/cluster.rs` on a cluster.

use std::time::Duration;

use futures::future::join_all;
use token_bucket::redis::{LeaseOptions, LeasedBucket, RedisConnection, RedisTokenBucket};

/// The largest number of tokens of `limiter`'s bucket at `key` that can be taken at once
/// (the whole tokens it holds), found by taking them.
pub async fn takeable<C: RedisConnection>(limiter: &RedisTokenBucket<C>, key: &str) -> u64 {
    let mut taken = 0;
    for size in [64, 32, 16, 8, 4, 2, 1] {
        while limiter.try_acquire(key, size).await.is_ok() {
            taken += size;
        }
    }
    taken
}

/// A front on `key` holding 9 unused tokens of the 20 it took from `limiter`, a bucket of
/// 100 gaining one an hour.
pub async fn front_holding_nine<C: RedisConnection>(
    limiter: &RedisTokenBucket<C>,
    key: &str,
) -> LeasedBucket<C> {
    let front = limiter
        .leased(
            key,
            LeaseOptions::new().with_lifetime(Duration::from_secs(60)),
        )
        .unwrap();
    // Ten at once: a lease of 10. Then one: a lease of the ten granted over the lifetime.
    for result in join_all((0..10).map(|_| front.take(1))).await {
        result.unwrap();
    }
    front.take(1).await.unwrap();
    let stats = front.stats();
    assert_eq!((stats.leased, stats.granted, stats.held), (20, 11, 9));
    front
}
