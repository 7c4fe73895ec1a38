//! The HTTP layer over Redis: two real axum servers on loopback share one `redis-server`
//! (started by the test), so a client's budget and the global one hold across both, and a
//! Redis that is down is answered as the failure policy says.
//!
//! Redis decides on its own clock, so the limits here are per hour: nothing comes back
//! while the test runs.
#![cfg(all(feature = "axum", feature = "redis"))]

#[path = "common/http.rs"]
mod common_http;
#[path = "common/redis_server.rs"]
#[allow(dead_code)] // The cluster half of the harness is not used here.
mod redis_server;

use std::net::SocketAddr;
use std::time::Duration;

use common_http::{client_from, hello, local, serve, text};
use http::{HeaderMap, StatusCode};
use redis_server::RedisServer;
use token_bucket::http::{ClientIp, RateLimitLayer};
use token_bucket::redis::{
    driver, FailurePolicy, LeaseOptions, RedisFixedWindow, RedisOptions, RedisTokenBucket,
};
use token_bucket::Rate;

async fn connection(server: &RedisServer) -> driver::aio::ConnectionManager {
    let client = driver::Client::open(server.url()).unwrap();
    driver::aio::ConnectionManager::new(client).await.unwrap()
}

/// One server of the fleet: per client 3 in an hour, for everyone 5 in an hour, both
/// in Redis under `prefix`.
async fn server(
    connection: driver::aio::ConnectionManager,
    policy: FailurePolicy,
    prefix: &str,
) -> SocketAddr {
    let options = RedisOptions::new(policy)
        .with_prefix(prefix)
        .with_timeout(Duration::from_secs(2));
    let per_client = RedisFixedWindow::new(
        connection.clone(),
        3,
        Duration::from_secs(3600),
        options.clone(),
    )
    .unwrap();
    let everyone = RedisTokenBucket::new(
        connection,
        Rate::per_hour(5),
        5,
        options.with_prefix(format!("{prefix}global:")),
    )
    .unwrap();
    let layer = RateLimitLayer::redis_builder(ClientIp::peer(), per_client)
        .global(&everyone, "all")
        .build()
        .unwrap();
    serve(hello().layer(layer)).await
}

/// A GET from the loopback address `127.0.0.<from>`, on a fresh connection.
async fn get_from(from: u8, address: SocketAddr) -> (StatusCode, HeaderMap) {
    common_http::get_from(&client_from(local(from)), address, &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_share_each_clients_budget_and_the_global_one() {
    let redis = RedisServer::start();
    let first = server(
        connection(&redis).await,
        FailurePolicy::FailClosed,
        "fleet:",
    )
    .await;
    let second = server(
        connection(&redis).await,
        FailurePolicy::FailClosed,
        "fleet:",
    )
    .await;

    // Client 1: two requests to one server, one to the other, then the fourth is refused
    // wherever it goes.
    let mut answers = Vec::new();
    for address in [first, second, first, second] {
        answers.push(get_from(1, address).await);
    }
    let codes: Vec<_> = answers.iter().map(|(status, _)| *status).collect();
    assert_eq!(
        codes,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    let remaining: Vec<_> = answers
        .iter()
        .map(|(_, headers)| text(headers, "ratelimit"))
        .collect();
    for (answer, (client, global)) in remaining.iter().zip([(2, 4), (1, 3), (0, 2), (0, 2)]) {
        assert!(
            answer.starts_with(&format!(r#""client";r={client};t="#)),
            "{answer}"
        );
        assert!(
            answer.contains(&format!(r#""global";r={global};t="#)),
            "{answer}"
        );
    }
    let refused = &answers[3].1;
    let retry_after: u64 = text(refused, "retry-after").parse().unwrap();
    assert!((3_500..=3_600).contains(&retry_after), "{retry_after}");
    assert_eq!(
        text(refused, "ratelimit-policy"),
        r#""client";q=3;w=3600, "global";q=5;w=3600"#
    );

    // Client 2: two admitted across both servers, then the global budget is spent, and
    // the refusal takes nothing from its own.
    let mut codes = Vec::new();
    let mut last = HeaderMap::new();
    for address in [second, first, second] {
        let (status, headers) = get_from(2, address).await;
        codes.push(status);
        last = headers;
    }
    assert_eq!(
        codes,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    assert!(text(&last, "ratelimit").starts_with(r#""client";r=1;t="#));
    assert!(text(&last, "ratelimit").contains(r#""global";r=0;t="#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_is_down_is_answered_as_the_failure_policy_says() {
    let mut redis = RedisServer::start();
    let closed = server(
        connection(&redis).await,
        FailurePolicy::FailClosed,
        "closed:",
    )
    .await;
    let open = server(connection(&redis).await, FailurePolicy::FailOpen, "open:").await;
    redis.stop();
    let (status, headers) = get_from(1, closed).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers.get("ratelimit"), None);
    // Failing open, it is admitted, with nothing to say of a quota Redis did not report.
    let (status, headers) = get_from(1, open).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers.get("ratelimit"), None);
    assert_eq!(
        text(&headers, "ratelimit-policy"),
        r#""client";q=3;w=3600, "global";q=5;w=3600"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_share_a_leased_global_limit() {
    let redis = RedisServer::start();
    let hour = Duration::from_secs(3600);
    let mut servers = Vec::new();
    for _ in 0..2 {
        servers.push(leased_server(&redis, "leased:", 3, hour, 4, None).await);
    }
    let (first, second) = (servers[0], servers[1]);
    let mut codes = Vec::new();
    for (client, address) in [(1, first), (1, second), (1, first), (2, second), (2, first)] {
        let (status, headers) = get_from(client, address).await;
        // A front vouches for no global quota: only the client's is reported.
        if status == StatusCode::OK {
            assert!(!text(&headers, "ratelimit").contains("global"));
            assert_eq!(
                text(&headers, "ratelimit-policy"),
                r#""client";q=3;w=3600, "global";q=4;w=3600"#
            );
        }
        codes.push(status);
    }
    assert_eq!(
        codes,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
}

/// A server of a fleet whose global limit is a leased front of `global` a hour, one token
/// a lease (so that no front holds a token another could use); each client `per_client`
/// in each `window`.
async fn leased_server(
    redis: &RedisServer,
    prefix: &str,
    per_client: u64,
    window: Duration,
    global: u64,
    wait: Option<Duration>,
) -> SocketAddr {
    let connection = connection(redis).await;
    let options = RedisOptions::new(FailurePolicy::FailClosed).with_prefix(prefix);
    let per_client =
        RedisFixedWindow::new(connection.clone(), per_client, window, options.clone()).unwrap();
    let everyone = RedisTokenBucket::new(
        connection,
        Rate::per_hour(global),
        global,
        options.with_prefix(format!("{prefix}global:")),
    )
    .unwrap();
    let mut builder = RateLimitLayer::redis_builder(ClientIp::peer(), per_client)
        .global_leased(&everyone, "all", LeaseOptions::new().with_max_lease(1))
        .unwrap();
    if let Some(wait) = wait {
        builder = builder.wait_up_to(wait);
    }
    serve(hello().layer(builder.build().unwrap())).await
}

async fn get(from: u8, address: SocketAddr) -> StatusCode {
    common_http::get_from(&client_from(local(from)), address, &[])
        .await
        .0
}

/// One client over its own limit must not spend everyone's global budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_of_one_client_do_not_drain_the_global_limit() {
    let redis = RedisServer::start();
    let server = leased_server(&redis, "drain:", 1, Duration::from_secs(3600), 10, None).await;
    // Client 1: one admitted, then nine refused by its own key.
    let mut codes = Vec::new();
    for _ in 0..10 {
        codes.push(get(1, server).await);
    }
    assert_eq!(codes[0], StatusCode::OK);
    assert!(codes[1..]
        .iter()
        .all(|code| *code == StatusCode::TOO_MANY_REQUESTS));
    // Client 2 has its own budget, and 9 of the 10 global tokens were never used.
    assert_eq!(
        get(2, server).await,
        StatusCode::OK,
        "client 2 refused: client 1's refusals spent the global limit"
    );
}

/// A waiting request that is admitted once is counted once against the global limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_request_is_counted_once_by_the_global_limit() {
    let redis = RedisServer::start();
    // Each client 1 a second; wait up to 3 s.
    let server = leased_server(
        &redis,
        "wait:",
        1,
        Duration::from_secs(1),
        10,
        Some(Duration::from_secs(3)),
    )
    .await;
    // Client 1: two requests; the second waits for the next second. 2 global tokens used.
    assert_eq!(get(1, server).await, StatusCode::OK);
    assert_eq!(get(1, server).await, StatusCode::OK);
    // Clients 2..: one request each, until the global limit refuses. 8 should pass.
    let mut admitted = 0;
    for client in 2..20 {
        if get(client, server).await == StatusCode::OK {
            admitted += 1;
        } else {
            break;
        }
    }
    assert_eq!(
        admitted, 8,
        "the global limit counted more than 2 for client 1's two requests"
    );
}
