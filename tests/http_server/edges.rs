//! The layer at its edges: a request dropped as it waits in the global line gives its
//! client's permits back, and durations the crate's limiters saturate at `Duration::MAX`
//! ("never") are waited for and said without a panic, rounded up, within what the
//! draft's fields hold. In process on tokio's paused clock, and through a real server
//! on loopback with a real client where a hang-up is the point.

use std::convert::Infallible;
use std::future::Future;
use std::net::IpAddr;
use std::pin::pin;
use std::task::Context;
use std::time::Duration;

use super::common_http::{client_from, hello, local, serve};
use super::layer::{ok_service, request_from as request_with, send};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::Empty;
use hyper::body::Bytes;
use token_bucket::http::{ActualCost, ClientIp, ClientKey, RateLimitLayer, Settle};
use token_bucket::{FixedWindow, Rate, TokenBucket};
use tower::{Layer, Service, ServiceExt};

/// The largest Integer a Structured Field may carry (RFC 9651, 3.3.1): 15 digits. The
/// draft's `q`, `w`, `r` and `t` are SF Integers, and a field with a longer one fails to
/// parse as a whole, so a client must ignore it (every policy in it, not only that one).
const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

/// A request from `peer`.
fn request_from_peer(peer: &str) -> Request<()> {
    request_with(peer, &[])
}

fn text(headers: &HeaderMap, name: &str) -> String {
    headers[name].to_str().unwrap().to_owned()
}

/// Every integer parameter (`q=`, `w=`, `r=`, `t=`) of a RateLimit field.
fn integers(field: &str) -> Vec<u64> {
    field
        .split([';', ','])
        .filter_map(|part| part.trim().split_once('='))
        .filter(|(name, _)| ["q", "w", "r", "t"].contains(name))
        .map(|(_, value)| value.parse().unwrap())
        .collect()
}

fn key(peer: &str) -> ClientKey {
    peer.parse::<IpAddr>().unwrap().into()
}

// ---------------------------------------------------------------------------------------
// A request dropped while it waits in the global limit's line.
// ---------------------------------------------------------------------------------------

/// A request takes its key's permits, then waits in the global line. Dropped there (the
/// client hung up, a server's timeout), it gives them back, as it does when the wait
/// times out: `ResponseFuture` "gives up its place in line and takes nothing". (Once,
/// nothing gave them back: a client of 1 an hour lost its hour.)
#[tokio::test(start_paused = true)]
async fn a_request_dropped_in_the_global_line_gives_its_key_permits_back() {
    let layer = RateLimitLayer::builder(
        ClientIp::peer(),
        TokenBucket::new(Rate::per_hour(1), 1).unwrap(),
    )
    .global(FixedWindow::new(1, Duration::from_secs(10)).unwrap())
    .wait_up_to(Duration::from_secs(20))
    .build()
    .unwrap();
    let mut service = layer.clone().layer(ok_service());
    // The first client spends the global window until 10 s.
    let (status, _) = send(&mut service, request_from_peer("192.0.2.1")).await;
    assert_eq!(status, StatusCode::OK);
    let second = key("192.0.2.2");
    assert_eq!(layer.per_key().quota(&second).unwrap().remaining, 1);
    {
        // The second client's key admits it at once; it waits in the global line.
        let future = service
            .ready()
            .await
            .unwrap()
            .call(request_from_peer("192.0.2.2"));
        let mut future = pin!(future);
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        for _ in 0..3 {
            assert!(future.as_mut().poll(&mut cx).is_pending());
            tokio::task::yield_now().await;
        }
        assert_eq!(layer.per_key().quota(&second).unwrap().remaining, 0);
        // Dropped at 0 s, 10 s before the global window would have let it through.
    }
    tokio::task::yield_now().await;
    assert_eq!(
        layer.per_key().quota(&second).unwrap().remaining,
        1,
        "the dropped request took its client's only permit for an hour"
    );
}

/// The same through a real server: the client gives up on a request that waits for the
/// global limit (its HTTP client times out and closes the connection, so hyper drops the
/// layer's future). The client's own budget is as it was, 1 left.
#[tokio::test]
async fn a_client_that_hangs_up_while_waiting_for_the_global_limit_keeps_its_budget() {
    let global = FixedWindow::new(1, Duration::from_secs(3600)).unwrap();
    let layer = RateLimitLayer::builder(
        ClientIp::peer(),
        TokenBucket::new(Rate::per_hour(1), 1).unwrap(),
    )
    .global(global.clone())
    .wait_up_to(Duration::from_secs(7200))
    .build()
    .unwrap();
    let address = serve(hello().layer(layer.clone())).await;
    let first = client_from(local(1));
    let request = || {
        Request::get(format!("http://{address}/"))
            .body(Empty::<Bytes>::new())
            .unwrap()
    };
    let admitted = first.request(request()).await.unwrap();
    assert_eq!(admitted.status(), StatusCode::OK);
    let second = client_from(local(2));
    let waited = tokio::time::timeout(Duration::from_millis(300), second.request(request())).await;
    assert!(waited.is_err(), "the request waits for the global window");
    assert_eq!(global.queued_permits(), 1, "it waits in the global line");
    drop(second); // closes its connection
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The server saw the hang-up and dropped the layer's future: the line is empty.
    assert_eq!(global.queued_permits(), 0, "the server dropped the request");
    let quota = layer.per_key().quota(&key("127.0.0.2")).unwrap();
    assert_eq!(
        quota.remaining, 1,
        "the client that hung up lost its budget for the hour: {quota:?}"
    );
}

// ---------------------------------------------------------------------------------------
// Durations the crate's own limiters saturate at Duration::MAX.
// ---------------------------------------------------------------------------------------

/// A bucket that refills one token every 2^40 s (about 35,000 years): its policy window
/// fits, but once its token is taken its `Quota::full_after` (and a refusal's
/// `retry_after`) saturate at `Duration::MAX` (past 584 years, see `bucket/state.rs`).
/// The first request is answered 200, with `t` rounded up, never down, and within an SF
/// Integer. (Rounded up as `as_secs() + 1`, it overflowed: a debug build panicked in the
/// response future, the client's connection closed, and a release build said `t=0`.)
#[tokio::test]
async fn a_bucket_whole_again_only_in_centuries_is_answered_with_headers_rounded_up() {
    let layer = RateLimitLayer::builder(
        ClientIp::peer(),
        TokenBucket::new(Rate::new(1, Duration::from_secs(1 << 40)), 1).unwrap(),
    )
    .build()
    .unwrap();
    let address = serve(hello().layer(layer)).await;
    let client = client_from(local(3));
    let response = client
        .request(
            Request::get(format!("http://{address}/"))
                .body(Empty::<Bytes>::new())
                .unwrap(),
        )
        .await;
    let response = response.expect("the server answers (its connection task did not panic)");
    assert_eq!(response.status(), StatusCode::OK);
    let field = text(response.headers(), "ratelimit");
    let t = integers(&field)[1];
    assert!(t > 1 << 40, "t rounded down: {field}");
    assert!(t <= SF_INTEGER_MAX, "t is not an SF Integer: {field}");
}

/// A fixed window of `Duration::MAX` ("1 request, ever"): the layer builds; `w`, `t` and
/// `Retry-After` are rounded up (never down), and `w` and `t` clamped to what an SF
/// Integer holds. (Its window rounded up with `as_secs() + 1` overflowed: a panic in
/// debug builds, and `w=1` in release.)
#[tokio::test(start_paused = true)]
async fn a_window_that_never_ends_is_said_never_to_end() {
    let layer = RateLimitLayer::builder(
        ClientIp::peer(),
        FixedWindow::new(1, Duration::MAX).unwrap(),
    )
    .build()
    .unwrap();
    let mut service = layer.layer(ok_service());
    let (status, _) = send(&mut service, request_from_peer("192.0.2.1")).await;
    assert_eq!(status, StatusCode::OK);
    let (status, headers) = send(&mut service, request_from_peer("192.0.2.1")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let policy = text(&headers, "ratelimit-policy");
    let field = text(&headers, "ratelimit");
    let retry_after: u64 = text(&headers, "retry-after").parse().unwrap();
    let w = integers(&policy)[1];
    let t = integers(&field)[1];
    for (name, value) in [("w", w), ("t", t), ("retry-after", retry_after)] {
        assert!(value > 1 << 40, "{name} rounded down to {value}");
    }
    // `Retry-After` is HTTP's delay-seconds, any number of digits; `w` and `t` are SF
    // Integers.
    for (name, value) in [("w", w), ("t", t)] {
        assert!(
            value <= SF_INTEGER_MAX,
            "{name} is not an SF Integer: {value}"
        );
    }
}

/// `wait_up_to(Duration::MAX)`, "wait as long as it takes" (the crate's own timeouts
/// take `Duration::MAX` as no timeout): the second request waits its turn and is admitted
/// at exactly 1 s. (Its deadline as `Instant + Duration` panicked on overflow.)
#[tokio::test(start_paused = true)]
async fn waiting_up_to_duration_max_waits_its_turn() {
    let layer = RateLimitLayer::builder(
        ClientIp::peer(),
        TokenBucket::new(Rate::per_second(1), 1).unwrap(),
    )
    .wait_up_to(Duration::MAX)
    .build()
    .unwrap();
    let mut service = layer.layer(ok_service());
    let start = tokio::time::Instant::now();
    let (status, _) = send(&mut service, request_from_peer("192.0.2.1")).await;
    assert_eq!(status, StatusCode::OK);
    let mut waiting = service.clone();
    let second = tokio::spawn(async move {
        let (status, _) = send(&mut waiting, request_from_peer("192.0.2.1")).await;
        (status, start.elapsed())
    });
    assert_eq!(
        second.await.expect("the waiting request does not panic"),
        (StatusCode::OK, Duration::from_secs(1))
    );
}

/// With `settle`, over a limit whose `full_after` saturates at `Duration::MAX`: the request
/// is admitted, and its settlement gives back what it did not use. (Until when its
/// permits count, as `Instant + Duration`, panicked the service's `call`.)
#[tokio::test(start_paused = true)]
async fn settling_on_a_limit_whole_again_only_in_centuries_does_not_panic() {
    let layer = RateLimitLayer::builder(
        ClientIp::peer(),
        TokenBucket::new(Rate::new(1, Duration::from_secs(1 << 40)), 2).unwrap(),
    )
    .cost(|_| 2)
    .settle(Settle::Extension)
    .build()
    .unwrap();
    let handler = tower::service_fn(|_request: Request<()>| async {
        let mut response = Response::new(String::new());
        response.extensions_mut().insert(ActualCost(1));
        Ok::<_, Infallible>(response)
    });
    let mut service = layer.clone().layer(handler);
    let call = tokio::spawn(async move {
        let response = service
            .ready()
            .await
            .unwrap()
            .call(request_from_peer("192.0.2.1"))
            .await
            .unwrap();
        response.status()
    });
    assert_eq!(call.await.expect("call does not panic"), StatusCode::OK);
    assert_eq!(
        layer.per_key().quota(&key("192.0.2.1")).unwrap().remaining,
        1
    );
}
