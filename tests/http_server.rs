//! The HTTP example (`examples/http_server.rs`), driven by a real HTTP client over
//! loopback: per-client limits, the server-wide bucket behind them, and the `429`
//! answers with `Retry-After` and `RateLimit-*` headers.
//!
//! The flood tests drive [`Limits`] directly as well, from addresses loopback cannot
//! send from (IPv6 beyond `::1`), under paused time.
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
use http_server::{
    retry_after_seconds, send_requests, serve, ClientKey, Limits, Refusal, MAX_CLIENTS,
};
use token_bucket::{ConfigError, Rate, SlidingLog, TokenBucket};

fn ip(address: &str) -> IpAddr {
    address.parse().unwrap()
}

fn key(address: &str) -> ClientKey {
    ClientKey::from(ip(address))
}

fn client(last_octet: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last_octet))
}

async fn start(limits: Arc<Limits>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, limits));
    address
}

fn header(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.parse().ok()
}

#[tokio::test]
async fn each_client_gets_its_own_limit_then_429_with_retry_after() {
    let address = start(Arc::new(Limits::example().unwrap())).await;
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
async fn the_server_wide_bucket_refuses_and_the_client_is_not_counted() {
    let per_client = SlidingLog::new(10, Duration::from_secs(600)).unwrap();
    // Five requests an hour for the whole server, all there at the start.
    let server = TokenBucket::new(Rate::per_hour(5), 5).unwrap();
    let limits = Limits::new(per_client, 100, server).unwrap();
    let address = start(Arc::new(limits)).await;
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
    // The client was not at fault, and nothing was counted against it: 2 of its 10 are used.
    assert_eq!(header(headers, "ratelimit-remaining"), Some(8));
}

/// Eight clients at once, each on its own connection from its own address: seven within
/// their limit, and one asking for twice its own. The server's budget is what their own
/// limits allow, and one more: its own limit alone refuses the eighth client (the
/// server would still have admitted), each request admitted is counted once by its
/// client and once by the server, a refused one by neither, and the server then admits
/// exactly the one it has left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_concurrent_clients_are_counted_once_and_the_server_limit_holds_exactly() {
    const CLIENT_LIMIT: u64 = 10;
    const WITHIN: u64 = 7;
    const SPARE: u64 = 1;
    const SERVER_BUDGET: u64 = 7 * WITHIN + CLIENT_LIMIT + SPARE;
    let client_window = Duration::from_secs(3600);
    let per_client = SlidingLog::new(CLIENT_LIMIT, client_window).unwrap();
    // All there at the start, and the next one a year away divided by 60, about 6 days:
    // none comes back while the test runs, and a `Retry-After` of the server's is days.
    let year = Duration::from_secs(365 * 24 * 3600);
    let server_rate = Rate::new(SERVER_BUDGET, year);
    let server = TokenBucket::new(server_rate, SERVER_BUDGET).unwrap();
    let limits = Arc::new(Limits::new(per_client, 100, server).unwrap());
    let address = start(Arc::clone(&limits)).await;
    let over = client(18);
    let asks: Vec<(IpAddr, u64)> = (11..=17)
        .map(|octet| (client(octet), WITHIN))
        .chain([(over, 2 * CLIENT_LIMIT)])
        .collect();
    let sent = asks
        .iter()
        .map(|&(from, requests)| send_requests(address, from, requests));
    let answers = futures::future::join_all(sent).await;

    let mut admitted_in_all = 0;
    for (&(from, asked), answers) in asks.iter().zip(answers) {
        let answers = answers.unwrap();
        let admitted = asked.min(CLIENT_LIMIT);
        // In order: each client's requests go one after another on its connection.
        for (number, (status, headers)) in answers.iter().enumerate() {
            let number = number as u64;
            if number < admitted {
                assert_eq!(*status, StatusCode::OK, "{from}, request {number}");
                let remaining = header(headers, "ratelimit-remaining");
                assert_eq!(remaining, Some(CLIENT_LIMIT - 1 - number), "{from}");
                continue;
            }
            // Only the client over its limit gets here, refused by its own limit: its
            // window's first request leaves in an hour, while the server's next token is
            // days away, so a refusal by the server would say days.
            assert_eq!(from, over);
            assert_eq!(
                *status,
                StatusCode::TOO_MANY_REQUESTS,
                "{from}, request {number}"
            );
            assert_eq!(header(headers, "ratelimit-remaining"), Some(0));
            let retry_after = header(headers, "retry-after").expect("a Retry-After header");
            assert!(
                (3000..=client_window.as_secs()).contains(&retry_after),
                "Retry-After: {retry_after}"
            );
        }
        assert_eq!(answers.len() as u64, asked, "{from}");
        // Counted once: its window holds what it was admitted and nothing else.
        assert_eq!(limits.remaining(from), CLIENT_LIMIT - admitted, "{from}");
        admitted_in_all += admitted;
    }
    assert_eq!(admitted_in_all, 7 * WITHIN + CLIENT_LIMIT);
    // The server counted each admitted request once and none of the ten its client's own
    // limit refused: exactly the spare is left.
    assert_eq!(limits.server_remaining(), SERVER_BUDGET - admitted_in_all);
    assert_eq!(limits.server_remaining(), SPARE);

    // The server's limit holds exactly: a new client gets the spare, then the server
    // refuses it (a wait of days), and its own window counts only the one admitted.
    let late = send_requests(address, client(19), 2).await.unwrap();
    assert_eq!(late[0].0, StatusCode::OK);
    assert_eq!(late[1].0, StatusCode::TOO_MANY_REQUESTS);
    let retry_after = header(&late[1].1, "retry-after").expect("a Retry-After header");
    let server_period = (year / SERVER_BUDGET as u32).as_secs();
    assert!(
        (server_period - 600..=server_period).contains(&retry_after),
        "Retry-After: {retry_after}"
    );
    assert_eq!(limits.remaining(client(19)), CLIENT_LIMIT - 1);
    assert_eq!(limits.server_remaining(), 0);
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

/// The `n`th of many clients, each in a /64 of its own.
fn ipv6_client(n: u32) -> IpAddr {
    IpAddr::V6(Ipv6Addr::from(
        (0x2001_0db8_u128 << 96) | (u128::from(n) << 64) | 1,
    ))
}

#[tokio::test(start_paused = true)]
async fn a_flood_of_new_clients_is_held_at_max_clients_and_refused_with_503s() {
    const MAX: usize = 100;
    const FLOOD: u32 = 10_000;
    let window = Duration::from_secs(60);
    let per_client = SlidingLog::new(10, window).unwrap();
    // Enough for every admission below, and no more: were refused clients to take from
    // the server's budget, the held client's request below would find it spent.
    let server = TokenBucket::new(Rate::per_hour(250), 250).unwrap();
    let limits = Limits::new(per_client, MAX, server).unwrap();
    assert_eq!(limits.max_clients(), MAX);

    let mut admitted = 0;
    for n in 0..FLOOD {
        match limits.admit(ipv6_client(n)) {
            Ok(()) => admitted += 1,
            Err(refusal) => assert_eq!(
                refusal,
                Refusal::TooManyClients {
                    retry_after: window
                },
                "client {n}"
            ),
        }
        assert!(limits.clients_held() <= MAX, "after client {n}");
    }
    assert_eq!(admitted, MAX);
    assert_eq!(limits.clients_held(), MAX);
    // The clients already held are served as usual.
    assert_eq!(limits.admit(ipv6_client(0)), Ok(()));
    assert_eq!(limits.remaining(ipv6_client(0)), 8);

    // A client that goes on sending keeps its place...
    tokio::time::advance(window / 2).await;
    assert_eq!(limits.admit(ipv6_client(0)), Ok(()));

    // ...while one window after its last request a client that sent nothing more is
    // forgotten to make room: Retry-After was long enough for the flood's first wave
    // to give way to a second.
    tokio::time::advance(window / 2).await;
    let mut admitted = 0;
    for n in FLOOD..2 * FLOOD {
        if limits.admit(ipv6_client(n)).is_ok() {
            admitted += 1;
        }
        assert!(limits.clients_held() <= MAX, "after client {n}");
    }
    assert_eq!(admitted, MAX - 1);
    assert_eq!(limits.clients_held(), MAX);
    // Client 0 is still held: its request half a window ago counts (a forgotten
    // client would have all 10).
    assert_eq!(limits.remaining(ipv6_client(0)), 9);
}

#[tokio::test]
async fn over_http_a_client_past_max_clients_gets_503_with_retry_after() {
    const MAX: usize = 8;
    let per_client = SlidingLog::new(10, Duration::from_secs(600)).unwrap();
    let server = TokenBucket::new(Rate::per_hour(100), 100).unwrap();
    let limits = Arc::new(Limits::new(per_client, MAX, server).unwrap());
    let address = start(Arc::clone(&limits)).await;
    // 40 clients, 127.0.1.1 to 127.0.1.40, one request each.
    for last_octet in 1..=40 {
        let from = IpAddr::V4(Ipv4Addr::new(127, 0, 1, last_octet));
        let answers = send_requests(address, from, 1).await.unwrap();
        let (status, headers) = &answers[0];
        if usize::from(last_octet) <= MAX {
            assert_eq!(*status, StatusCode::OK, "client {from}");
        } else {
            assert_eq!(*status, StatusCode::SERVICE_UNAVAILABLE, "client {from}");
            // The per-client window, in seconds: when the clients held could all be gone.
            assert_eq!(header(headers, "retry-after"), Some(600));
            // Not a verdict on the client's quota, so none of its headers.
            assert_eq!(header(headers, "ratelimit-remaining"), None);
            assert_eq!(header(headers, "ratelimit-reset"), None);
        }
        assert!(limits.clients_held() <= MAX);
    }
    assert_eq!(limits.clients_held(), MAX);
    // A client held before the flood is still served.
    let held = send_requests(address, IpAddr::V4(Ipv4Addr::new(127, 0, 1, 1)), 1)
        .await
        .unwrap();
    assert_eq!(held[0].0, StatusCode::OK);
    assert_eq!(header(&held[0].1, "ratelimit-remaining"), Some(8));
}

#[test]
fn max_clients_of_zero_is_refused_when_the_limits_are_made() {
    let per_client = SlidingLog::new(10, Duration::from_secs(10)).unwrap();
    let server = TokenBucket::new(Rate::per_second(100), 100).unwrap();
    let error = Limits::new(per_client, 0, server).unwrap_err();
    assert_eq!(error, ConfigError::ZeroMaxKeys);
    assert_eq!(error.to_string(), "max_keys is zero: it must be at least 1");
}

#[test]
fn the_example_bounds_its_clients() {
    assert_eq!(Limits::example().unwrap().max_clients(), MAX_CLIENTS);
}

#[tokio::test]
async fn the_server_forgets_idle_clients_though_no_new_client_comes() {
    // A short window, so that real time can pass it.
    let window = Duration::from_millis(200);
    let per_client = SlidingLog::new(10, window).unwrap();
    let server = TokenBucket::new(Rate::per_second(100), 100).unwrap();
    let limits = Arc::new(Limits::new(per_client, 100, server).unwrap());
    let address = start(Arc::clone(&limits)).await;
    for last_octet in 1..=3 {
        let from = IpAddr::V4(Ipv4Addr::new(127, 0, 2, last_octet));
        assert_eq!(
            send_requests(address, from, 1).await.unwrap()[0].0,
            StatusCode::OK
        );
    }
    assert_eq!(limits.clients_held(), 3);
    // `Keyed` alone would hold them until new clients came; the server's periodic sweep
    // forgets them within two windows. Generous, for a slow machine.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while limits.clients_held() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} clients still held",
            limits.clients_held()
        );
        tokio::time::sleep(window / 4).await;
    }
}
