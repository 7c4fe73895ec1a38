//! The HTTP layer in a real axum server on loopback, driven by a real HTTP client:
//! per-client and global limits, forged `X-Forwarded-For` ignored, an IPv6 /64 as one
//! client, a flood of 100,000 fresh clients held within the memory bound, a gRPC call
//! refused with `grpc-status: 8`, and the builder's options (`http_server/options.rs`).
//!
//! Real sockets need real time, so the limits here are per hour: nothing comes back while
//! a test runs, and `Retry-After` is checked against a range a slow machine stays in.
//! The exact values of every header are checked on paused time in `tests/http_layer.rs`.
#![cfg(feature = "axum")]

#[path = "common/http.rs"]
mod common_http;

#[path = "common/layer.rs"]
mod layer;

// Drops while waiting, and durations of "never".
#[path = "http_server/edges.rs"]
mod edges;

// JSON refusals, routes left out, and the fields switched off.
#[path = "http_server/options.rs"]
mod options;

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use axum::Router;
use common_http::{client_from, get_from, hello, local, serve, text};
use http::{HeaderMap, Request, StatusCode};
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use token_bucket::http::{ClientIp, ClientKey, RateLimitLayer, TrustedProxies};
use token_bucket::{FixedWindow, Rate, TokenBucket};

/// Counts the bytes in use on the heap, over all threads.
struct CountingAllocator;

static HEAP: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        HEAP.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwards the caller's layout unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        HEAP.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the pointer came from `System.alloc` with this layout.
        unsafe { System.dealloc(pointer, layout) }
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        HEAP.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: as `GlobalAlloc::realloc` requires of its caller.
        unsafe { System.realloc(pointer, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

#[tokio::test]
async fn each_client_has_its_limit_and_the_global_one_refuses_across_clients() {
    let layer = RateLimitLayer::builder(
        ClientIp::peer(),
        FixedWindow::new(3, Duration::from_secs(3600)).unwrap(),
    )
    .global(FixedWindow::new(5, Duration::from_secs(3600)).unwrap())
    .build()
    .unwrap();
    let address = serve(hello().layer(layer)).await;
    let first = client_from(local(1));
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(get_from(&first, address, &[]).await);
    }
    let codes: Vec<_> = statuses.iter().map(|(status, _)| *status).collect();
    assert_eq!(codes[..3], [StatusCode::OK; 3]);
    assert_eq!(codes[3], StatusCode::TOO_MANY_REQUESTS);
    let refused = &statuses[3].1;
    let retry_after: u64 = text(refused, "retry-after").parse().unwrap();
    assert!((3_500..=3_600).contains(&retry_after), "{retry_after}");
    assert!(text(refused, "ratelimit").starts_with(r#""client";r=0;t="#));
    assert!(text(refused, "ratelimit").contains(r#""global";r=2;t="#));

    // The second client is refused by the global limit after 2, its own budget left.
    let second = client_from(local(2));
    let mut codes = Vec::new();
    let mut last = HeaderMap::new();
    for _ in 0..3 {
        let (status, headers) = get_from(&second, address, &[]).await;
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
    assert_eq!(
        text(&last, "ratelimit-policy"),
        r#""client";q=3;w=3600, "global";q=5;w=3600"#
    );
}

#[tokio::test]
async fn forged_forwarded_for_from_an_untrusted_peer_is_ignored() {
    // 127.0.0.2 is the trusted proxy; everyone else is a client.
    let layer = RateLimitLayer::builder(
        ClientIp::behind(TrustedProxies::cidrs(["127.0.0.2/32".parse().unwrap()])),
        TokenBucket::new(Rate::per_hour(1), 1).unwrap(),
    )
    .build()
    .unwrap();
    let address = serve(hello().layer(layer)).await;
    let direct = client_from(local(3));
    let (first, _) = get_from(&direct, address, &[("x-forwarded-for", "198.51.100.1")]).await;
    let (forged, _) = get_from(&direct, address, &[("x-forwarded-for", "198.51.100.2")]).await;
    assert_eq!(first, StatusCode::OK);
    assert_eq!(forged, StatusCode::TOO_MANY_REQUESTS);
    // Through the proxy, each reported client has its own budget.
    let proxy = client_from(local(2));
    for client in ["198.51.100.1", "198.51.100.2"] {
        let (status, _) = get_from(&proxy, address, &[("x-forwarded-for", client)]).await;
        assert_eq!(status, StatusCode::OK, "{client}");
    }
}

#[tokio::test]
async fn an_ipv6_slash_64_counts_as_one_client() {
    let layer = RateLimitLayer::builder(
        ClientIp::behind(TrustedProxies::cidrs(["127.0.0.0/8".parse().unwrap()])),
        FixedWindow::new(2, Duration::from_secs(3600)).unwrap(),
    )
    .build()
    .unwrap();
    let address = serve(hello().layer(layer)).await;
    let proxy = client_from(local(1));
    let mut codes = Vec::new();
    for client in ["2001:db8::1", "2001:db8::ffff:1", "2001:db8::abcd"] {
        codes.push(
            get_from(&proxy, address, &[("x-forwarded-for", client)])
                .await
                .0,
        );
    }
    assert_eq!(
        codes,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    // The next /64 is another client.
    let (status, _) = get_from(&proxy, address, &[("x-forwarded-for", "2001:db8:0:1::1")]).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_fresh_clients_is_held_within_the_memory_bound() {
    const FLOOD: u32 = 100_000;
    const MAX_KEYS: usize = 60_000;
    // Clients come through the trusted proxy at 127.0.0.1, each with a fresh address.
    let layer = RateLimitLayer::builder(
        ClientIp::behind(TrustedProxies::cidrs(["127.0.0.0/8".parse().unwrap()])),
        TokenBucket::new(Rate::per_hour(1), 10).unwrap(),
    )
    .global(TokenBucket::new(Rate::per_second(1), 1_000_000).unwrap())
    .max_keys(MAX_KEYS)
    .build()
    .unwrap();
    let address = serve(hello().layer(layer.clone())).await;
    let heap_before = HEAP.load(Ordering::Relaxed);
    let connections = 8;
    let mut senders = Vec::new();
    for connection in 0..connections {
        senders.push(tokio::spawn(async move {
            let proxy = client_from(local(1));
            let (mut admitted, mut unavailable) = (0u32, 0u32);
            for number in (connection..FLOOD).step_by(connections as usize) {
                let client = Ipv4Addr::from(0x0a00_0000 + number).to_string();
                let (status, headers) =
                    get_from(&proxy, address, &[("x-forwarded-for", &client)]).await;
                match status {
                    StatusCode::OK => admitted += 1,
                    StatusCode::SERVICE_UNAVAILABLE => {
                        assert_eq!(text(&headers, "retry-after"), "36000");
                        unavailable += 1;
                    }
                    other => panic!("{other} for {client}"),
                }
            }
            (admitted, unavailable)
        }));
    }
    let (mut admitted, mut unavailable) = (0, 0);
    for sender in senders {
        let (ok, refused) = sender.await.unwrap();
        admitted += ok;
        unavailable += refused;
    }
    // Let the server's connection tasks end and free their buffers.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let held = layer.per_key().len();
    assert_eq!(held, MAX_KEYS);
    assert_eq!(
        (admitted, unavailable),
        (MAX_KEYS as u32, FLOOD - MAX_KEYS as u32)
    );
    let per_client = (HEAP.load(Ordering::Relaxed) - heap_before) as f64 / held as f64;
    let beside_the_key = per_client - std::mem::size_of::<ClientKey>() as f64;
    println!("{per_client:.1} bytes per client held, {beside_the_key:.1} beside the key");
    assert!(
        beside_the_key <= 64.0,
        "{beside_the_key} bytes beside each key"
    );
}

#[tokio::test]
async fn a_grpc_call_is_refused_with_resource_exhausted() {
    let layer = RateLimitLayer::builder(
        ClientIp::peer(),
        TokenBucket::new(Rate::per_hour(1), 1).unwrap(),
    )
    .build()
    .unwrap();
    let address = serve(
        Router::new()
            .route("/echo.Echo/Say", axum::routing::post(|| async { "" }))
            .layer(layer),
    )
    .await;
    // gRPC speaks HTTP/2: prior knowledge, as gRPC clients connect without TLS.
    let client = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http::<Empty<Bytes>>();
    let call = || {
        Request::post(format!("http://{address}/echo.Echo/Say"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Empty::new())
            .unwrap()
    };
    let admitted = client.request(call()).await.unwrap();
    assert_eq!(admitted.status(), StatusCode::OK);
    assert_eq!(admitted.headers().get("grpc-status"), None);
    let refused = client.request(call()).await.unwrap();
    assert_eq!(refused.version(), http::Version::HTTP_2);
    assert_eq!(refused.status(), StatusCode::OK);
    assert_eq!(text(refused.headers(), "grpc-status"), "8");
    assert_eq!(text(refused.headers(), "content-type"), "application/grpc");
    let retry_after: u64 = text(refused.headers(), "retry-after").parse().unwrap();
    assert!((3_500..=3_600).contains(&retry_after), "{retry_after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_are_each_counted_once_in_both_limits() {
    // Seven clients within their limit and one over it, all at once; the server's budget
    // holds them all, so each admitted request is counted once in each limit.
    let global = TokenBucket::new(Rate::per_hour(1), 1_000).unwrap();
    let layer = RateLimitLayer::builder(
        ClientIp::peer(),
        FixedWindow::new(7, Duration::from_secs(3600)).unwrap(),
    )
    .global(global.clone())
    .build()
    .unwrap();
    let address = serve(hello().layer(layer)).await;
    let mut clients = Vec::new();
    for last_octet in 1..=8u8 {
        let requests = if last_octet == 8 { 17 } else { 7 };
        clients.push(tokio::spawn(async move {
            let client = client_from(local(last_octet));
            let mut codes = Vec::new();
            for _ in 0..requests {
                codes.push(get_from(&client, address, &[]).await.0);
            }
            codes
        }));
    }
    let mut admitted = 0;
    for (number, client) in clients.into_iter().enumerate() {
        let codes = client.await.unwrap();
        let ok = codes.iter().filter(|code| **code == StatusCode::OK).count();
        assert_eq!(ok, 7, "client {}", number + 1);
        let refused = codes.len() - ok;
        assert!(codes[7..]
            .iter()
            .all(|code| *code == StatusCode::TOO_MANY_REQUESTS));
        assert_eq!(refused, if number == 7 { 10 } else { 0 });
        admitted += ok as u64;
    }
    assert_eq!(admitted, 56);
    assert_eq!(global.available(), 1_000 - admitted);
}
