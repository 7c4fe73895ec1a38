//! The HTTP example (`examples/http_server.rs`), driven by a real HTTP client over
//! loopback: per-client limits, the server-wide bucket behind them, and the `429`
//! answers with `Retry-After` and `RateLimit-*` headers.
//!
//! Real sockets need real time, so these tests use windows long enough (minutes, hours)
//! that no permit comes back while they run, and check `Retry-After` against ranges wide
//! enough for a slow machine; the arithmetic of the header is checked exactly on its own.

#[path = "../examples/http_server.rs"]
#[allow(dead_code)]
mod http_server;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use http_server::{retry_after_seconds, send_requests, serve, ClientKey, Limits, Refusal};
use token_bucket::{Rate, SlidingLog, TokenBucket};

fn ip(address: &str) -> IpAddr {
    address.parse().unwrap()
}

fn key(address: &str) -> ClientKey {
    ClientKey::from(ip(address))
}

fn client(last_octet: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last_octet))
}

async fn start(limits: Limits) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, Arc::new(limits)));
    address
}

fn header(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.parse().ok()
}

#[tokio::test]
async fn each_client_gets_its_own_limit_then_429_with_retry_after() {
    let address = start(Limits::example().unwrap()).await;
    let answers = send_requests(address, client(1), 12).await.unwrap();
    for (number, (status, headers)) in answers.iter().take(10).enumerate() {
        assert_eq!(*status, StatusCode::OK, "request {}", number + 1);
        assert_eq!(header(headers, "ratelimit-limit"), Some(10));
        assert_eq!(
            header(headers, "ratelimit-remaining"),
            Some(9 - number as u64)
        );
        assert_eq!(header(headers, "retry-after"), None);
    }
    for (status, headers) in &answers[10..] {
        assert_eq!(*status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header(headers, "ratelimit-remaining"), Some(0));
        // The first permit leaves 10 s after it was granted, and this is rounded up.
        let retry_after = header(headers, "retry-after").expect("a Retry-After header");
        assert!(
            (1..=10).contains(&retry_after),
            "Retry-After: {retry_after}"
        );
        assert_eq!(header(headers, "ratelimit-reset"), Some(retry_after));
    }
    // Another client IP has a budget of its own.
    let other = send_requests(address, client(2), 1).await.unwrap();
    assert_eq!(other[0].0, StatusCode::OK);
    assert_eq!(header(&other[0].1, "ratelimit-remaining"), Some(9));
}

#[tokio::test]
async fn the_server_wide_bucket_refuses_behind_the_clients_and_refunds_their_permit() {
    let per_client = SlidingLog::new(10, Duration::from_secs(600)).unwrap();
    // Five requests an hour for the whole server, all there at the start.
    let server = TokenBucket::new(Rate::per_hour(5), 5).unwrap();
    let address = start(Limits::new(per_client, server)).await;
    let first = send_requests(address, client(3), 3).await.unwrap();
    assert!(first.iter().all(|(status, _)| *status == StatusCode::OK));
    let second = send_requests(address, client(4), 3).await.unwrap();
    assert_eq!(second[0].0, StatusCode::OK);
    assert_eq!(second[1].0, StatusCode::OK);
    let (status, headers) = &second[2];
    assert_eq!(*status, StatusCode::TOO_MANY_REQUESTS);
    // The next server token is 12 minutes (720 s) after the start, rounded up.
    let retry_after = header(headers, "retry-after").expect("a Retry-After header");
    assert!(
        (600..=720).contains(&retry_after),
        "Retry-After: {retry_after}"
    );
    // The client was not at fault: its permit came back, so 2 of its 10 are used.
    assert_eq!(header(headers, "ratelimit-remaining"), Some(8));
}

#[test]
fn retry_after_is_whole_seconds_rounded_up() {
    assert_eq!(retry_after_seconds(Duration::ZERO), 0);
    assert_eq!(retry_after_seconds(Duration::from_nanos(1)), 1);
    assert_eq!(retry_after_seconds(Duration::from_secs(1)), 1);
    assert_eq!(retry_after_seconds(Duration::new(1, 1)), 2);
    assert_eq!(retry_after_seconds(Duration::from_millis(9_999)), 10);
}

#[test]
fn an_ipv4_client_is_keyed_by_its_address() {
    assert_eq!(key("192.0.2.1"), ClientKey::V4(Ipv4Addr::new(192, 0, 2, 1)));
    assert_ne!(key("192.0.2.1"), key("192.0.2.2"));
}

#[test]
fn an_ipv6_client_is_keyed_by_its_64_prefix() {
    assert_eq!(
        key("2001:db8:1:2:aaaa:bbbb:cccc:dddd"),
        ClientKey::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 0, 0, 0, 0))
    );
    // Two addresses in one /64 are one client, however far apart.
    assert_eq!(
        key("2001:db8:1:2::1"),
        key("2001:db8:1:2:ffff:ffff:ffff:ffff")
    );
    // Neighbouring /64s are two; so is a difference in any bit of the prefix.
    assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
    assert_ne!(key("2001:db8:1:2::1"), key("2001:db9:1:2::1"));
    assert_ne!(key("8000::"), key("::"));
}

#[test]
fn an_ipv4_mapped_ipv6_address_is_the_ipv4_client_it_names() {
    assert_eq!(key("::ffff:192.0.2.1"), key("192.0.2.1"));
    assert_eq!(
        key("::ffff:192.0.2.1"),
        ClientKey::V4(Ipv4Addr::new(192, 0, 2, 1))
    );
    // Not the whole ::ffff:0:0/96 as one client: each mapped address is its own.
    assert_ne!(key("::ffff:192.0.2.1"), key("::ffff:192.0.2.2"));
    // The deprecated IPv4-compatible form (::a.b.c.d) is plain IPv6, in the /64 of ::,
    // as ::1 is: reading it as IPv4 would make ::1 the client 0.0.0.1.
    assert_eq!(key("::192.0.2.1"), key("::1"));
    assert!(matches!(key("::192.0.2.1"), ClientKey::V6(_)));
}

#[tokio::test]
async fn the_addresses_of_one_ipv6_64_share_one_clients_limit() {
    let limits = Limits::example().unwrap();
    // Ten requests, each from an address of its own within 2001:db8:0:1::/64.
    for host in 1..=10_u16 {
        let from = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 1, host, 0, 0, host));
        assert_eq!(limits.admit(from), Ok(()), "request from {from}");
    }
    // An eleventh, from yet another address of that /64, finds the client's 10 spent.
    let another = ip("2001:db8:0:1:ffff::1");
    assert!(matches!(
        limits.admit(another),
        Err(Refusal::Limited { .. })
    ));
    assert_eq!(limits.remaining(another), 0);
    assert_eq!(limits.clients_held(), 1);
    // The next /64 is another client, with a budget of its own.
    assert_eq!(limits.admit(ip("2001:db8:0:2::1")), Ok(()));
    assert_eq!(limits.clients_held(), 2);
}
