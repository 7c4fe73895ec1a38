//! A tour of the token bucket in real time (about 1.5 s): each line shows the
//! milliseconds since start and what happened.
//!
//! Run it with `cargo run --example quickstart`.

use std::time::Duration;

use token_bucket::{Rate, TakeError, TokenBucket, TryTakeError};
use tokio::time::Instant;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let start = Instant::now();
    let log = move |what: String| println!("{:>5} ms  {what}", start.elapsed().as_millis());

    // 5 tokens a second (one every 200 ms), bursts of up to 5. It starts full.
    let rate: Rate = "5/s".parse()?;
    let bucket = TokenBucket::new(rate, 5)?;
    log(format!("bucket {rate}, capacity {}", bucket.capacity()));

    // try_take never waits: the full bucket serves a burst of five at once...
    for _ in 0..5 {
        bucket.try_take(1)?;
    }
    log(format!("try_take(1) x5: ok, {} left", bucket.available()));

    // ...then it refuses, and says when the same request could succeed.
    match bucket.try_take(1) {
        Err(TryTakeError::Insufficient { retry_after }) => {
            log(format!("try_take(1): refused, retry after {retry_after:?}"));
        }
        other => log(format!("try_take(1): unexpected {other:?}")),
    }

    // take waits its turn in a FIFO queue. Each task queues on its first poll, so we wait
    // for it to be queued before spawning the next: the queue order is the spawn order.
    let mut takers = Vec::new();
    for id in 1..=4 {
        let handle = bucket.clone(); // clones share one bucket
        takers.push(tokio::spawn(async move {
            handle.take(1).await?;
            log(format!("take(1) #{id}: served"));
            Ok::<(), TakeError>(())
        }));
        while bucket.queued() < id {
            tokio::task::yield_now().await;
        }
    }
    log(format!("{} takers queued", bucket.queued()));

    // Five tokens need a full second at 5/s, so a 500 ms timeout cannot be met even if
    // everybody ahead gave up: it is refused at once instead of waiting in vain.
    let timeout = Duration::from_millis(500);
    let result = bucket.take_timeout(5, timeout).await;
    assert_eq!(result, Err(TakeError::Timeout));
    log(format!("take_timeout(5, {timeout:?}): {result:?}, at once"));

    // wait queues behind the takers (FIFO) and completes once 3 tokens are there, taking
    // none: for work that should start only when it could be paid for.
    bucket.wait(3).await?;
    log(format!("wait(3): done, {} available", bucket.available()));

    for taker in takers {
        taker.await??;
    }

    // try_take can now take what wait saw; stats() counts everything since creation.
    bucket.try_take(3)?;
    let stats = bucket.stats();
    log(format!(
        "stats: taken {}, denied {}, timed out {}, available {}, queued {}",
        stats.taken, stats.denied, stats.timed_out, stats.available, stats.queued
    ));
    Ok(())
}
