//! Two application servers, one limit: two limiter instances, each with its own
//! connection (as two machines would have), share one key in Redis and together admit no
//! more than the limit.
//!
//! ```text
//! cargo run --features redis --example redis_two_servers
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --features redis --example redis_two_servers
//! ```
//!
//! Without `REDIS_URL` it starts its own `redis-server` on a free loopback port (and stops
//! it at the end); with it, it uses that Redis, under keys no earlier run used.

// The tests' throwaway server; the example only starts and stops it.
#[path = "../tests/common/redis_server.rs"]
#[allow(dead_code)]
mod redis_server;

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::join_all;
use token_bucket::redis::driver::aio::ConnectionManager;
use token_bucket::redis::driver::Client;
use token_bucket::redis::{
    FailurePolicy, RedisAlgorithm, RedisFixedWindow, RedisLimitError, RedisLimiter, RedisOptions,
    RedisSlidingLog, RedisTokenBucket,
};
use token_bucket::Rate;

/// Each user may make this many requests per minute, across all servers.
const LIMIT: u64 = 20;

/// Requests each server receives for the user, all at once.
const REQUESTS_PER_SERVER: u64 = 25;

#[tokio::main]
async fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let (url, _server) = match std::env::var("REDIS_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let server = redis_server::RedisServer::start();
            (server.url(), Some(server))
        }
    };
    println!("Redis at {url}; each user: {LIMIT} requests a minute, across both servers");
    println!("each server receives {REQUESTS_PER_SERVER} requests for the user at once\n");

    // A prefix no earlier run used, so that a shared Redis starts this demo afresh.
    let run = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
    let options = RedisOptions::new(FailurePolicy::FailClosed).with_prefix(format!("demo-{run}:"));
    let minute = Duration::from_secs(60);
    let (a, b) = (connect(&url).await?, connect(&url).await?);

    let mut all_respected = true;
    all_respected &= two_servers(
        "token bucket",
        RedisTokenBucket::new(a.clone(), Rate::per_minute(LIMIT), LIMIT, options.clone())?,
        RedisTokenBucket::new(b.clone(), Rate::per_minute(LIMIT), LIMIT, options.clone())?,
    )
    .await?;
    all_respected &= two_servers(
        "fixed window",
        RedisFixedWindow::new(a.clone(), LIMIT, minute, options.clone())?,
        RedisFixedWindow::new(b.clone(), LIMIT, minute, options.clone())?,
    )
    .await?;
    all_respected &= two_servers(
        "sliding log",
        RedisSlidingLog::new(a, LIMIT, minute, options.clone())?,
        RedisSlidingLog::new(b, LIMIT, minute, options)?,
    )
    .await?;

    if all_respected {
        println!("\nTogether the two servers respected the limit with every limiter.");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("\nThe limit was exceeded.");
        Ok(ExitCode::FAILURE)
    }
}

async fn connect(url: &str) -> Result<ConnectionManager, Box<dyn std::error::Error>> {
    Ok(ConnectionManager::new(Client::open(url)?).await?)
}

/// Sends both servers' requests at once, interleaved as they would arrive; prints what
/// each admitted. True when together they admitted exactly the limit (more requests came
/// than it allows).
async fn two_servers<A: RedisAlgorithm>(
    kind: &str,
    server_a: RedisLimiter<A>,
    server_b: RedisLimiter<A>,
) -> Result<bool, RedisLimitError> {
    let requests = (0..REQUESTS_PER_SERVER).flat_map(|_| {
        [
            answer(&server_a, 0), // server A's request
            answer(&server_b, 1), // server B's
        ]
    });
    let mut admitted = [0u64; 2];
    let mut longest_retry = [Duration::ZERO; 2];
    for (server, answer) in join_all(requests).await {
        match answer {
            Ok(()) => admitted[server] += 1,
            Err(RedisLimitError::Limited { retry_after }) => {
                longest_retry[server] = longest_retry[server].max(retry_after);
            }
            Err(other) => return Err(other),
        }
    }
    let together = admitted[0] + admitted[1];
    let respected = together == LIMIT;
    println!(
        "{kind:>12}: server A admitted {:>2}, server B {:>2}: together {together} of {} \
         requests, limit {LIMIT}: {} (the refused were told to retry after at most {:?})",
        admitted[0],
        admitted[1],
        2 * REQUESTS_PER_SERVER,
        if respected {
            "respected"
        } else {
            "NOT respected"
        },
        longest_retry[0].max(longest_retry[1]),
    );
    Ok(respected)
}

/// One request for the user on `limiter`, tagged with the server that received it.
async fn answer<A: RedisAlgorithm>(
    limiter: &RedisLimiter<A>,
    server: usize,
) -> (usize, Result<(), RedisLimitError>) {
    (server, limiter.try_acquire("user-42", 1).await)
}
