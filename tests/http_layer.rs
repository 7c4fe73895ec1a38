//! The HTTP layer in process, on tokio's paused clock: every header value and every
//! `Retry-After` asserted exactly, for each key, limit, mode and refusal.
#![cfg(feature = "http")]

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use http::{HeaderMap, Request, Response, StatusCode};
use token_bucket::http::{
    key_fn, ActualCost, BuildError, ClientIp, ForwardedHeader, GlobalKey, HeaderKey, KeyError,
    LocalLayer, MissingKey, RateLimitLayer, RefusalKind, Settle, TrustedProxies,
};
use token_bucket::{ConfigError, FixedWindow, Rate, SlidingLog, TokenBucket};
use tower::{Layer, Service, ServiceExt};

#[path = "common/layer.rs"]
mod layer;

use layer::{ok_service, request_from, send};

fn text(headers: &HeaderMap, name: &str) -> Option<String> {
    Some(headers.get(name)?.to_str().unwrap().to_owned())
}

/// Each client: 3 at once, one more a second. The whole service: 5 in each 10 s.
fn per_client_and_global() -> LocalLayer<ClientIp, TokenBucket, FixedWindow> {
    RateLimitLayer::builder(
        ClientIp::peer(),
        TokenBucket::new(Rate::per_second(1), 3).unwrap(),
    )
    .global(FixedWindow::new(5, Duration::from_secs(10)).unwrap())
    .build()
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn every_header_value_is_exact_per_client_and_global() {
    let mut service = per_client_and_global().layer(ok_service());
    let policy = r#""client";q=3;w=3, "global";q=5;w=10"#;
    for remaining in [2, 1, 0] {
        let (status, headers) = send(&mut service, request_from("192.0.2.1", &[])).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(text(&headers, "ratelimit-policy").as_deref(), Some(policy));
        let reset = 3 - remaining;
        let global = 4 - (2 - remaining);
        assert_eq!(
            text(&headers, "ratelimit"),
            Some(format!(
                r#""client";r={remaining};t={reset}, "global";r={global};t=10"#
            ))
        );
        assert_eq!(headers.get("retry-after"), None);
    }
    // The client's own limit refuses; the global one is not touched.
    let (status, headers) = send(&mut service, request_from("192.0.2.1", &[])).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(text(&headers, "retry-after").as_deref(), Some("1"));
    assert_eq!(
        text(&headers, "ratelimit").as_deref(),
        Some(r#""client";r=0;t=3, "global";r=2;t=10"#)
    );
    // Another client has its own budget, until the global limit is spent...
    for global in [1, 0] {
        let (status, headers) = send(&mut service, request_from("192.0.2.2", &[])).await;
        assert_eq!(status, StatusCode::OK);
        let remaining = global + 1;
        let reset = 3 - remaining;
        assert_eq!(
            text(&headers, "ratelimit"),
            Some(format!(
                r#""client";r={remaining};t={reset}, "global";r={global};t=10"#
            ))
        );
    }
    // ...which then refuses it, and its own budget is not used up by the refusal.
    let (status, headers) = send(&mut service, request_from("192.0.2.2", &[])).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(text(&headers, "retry-after").as_deref(), Some("10"));
    assert_eq!(
        text(&headers, "ratelimit").as_deref(),
        Some(r#""client";r=1;t=2, "global";r=0;t=10"#)
    );
    // Half a second on, the first client's token is half there, but the global window,
    // spent, ends only at 10 s: Retry-After is the later of the two (9.5 s, rounded up),
    // so that the client is not refused again for coming back after its own 0.5 s.
    tokio::time::advance(Duration::from_millis(500)).await;
    let (status, headers) = send(&mut service, request_from("192.0.2.1", &[])).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(text(&headers, "retry-after").as_deref(), Some("10"));
    assert_eq!(
        text(&headers, "ratelimit").as_deref(),
        Some(r#""client";r=0;t=3, "global";r=0;t=10"#)
    );
}

#[tokio::test(start_paused = true)]
async fn a_client_that_obeys_retry_after_is_admitted() {
    let mut service = per_client_and_global().layer(ok_service());
    for _ in 0..3 {
        send(&mut service, request_from("192.0.2.1", &[])).await;
    }
    tokio::time::advance(Duration::from_millis(300)).await;
    let (status, headers) = send(&mut service, request_from("192.0.2.1", &[])).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = text(&headers, "retry-after").unwrap().parse().unwrap();
    tokio::time::advance(Duration::from_secs(retry_after)).await;
    let (status, _) = send(&mut service, request_from("192.0.2.1", &[])).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn forged_forwarded_for_from_an_untrusted_peer_is_ignored() {
    let layer = RateLimitLayer::builder(
        ClientIp::behind(TrustedProxies::cidrs(["10.0.0.0/8".parse().unwrap()])),
        TokenBucket::new(Rate::per_hour(1), 1).unwrap(),
    )
    .build()
    .unwrap();
    let mut service = layer.layer(ok_service());
    // Through the proxy, two clients are two keys.
    let (first, _) = send(
        &mut service,
        request_from("10.0.0.1", &[("x-forwarded-for", "198.51.100.1")]),
    )
    .await;
    let (second, _) = send(
        &mut service,
        request_from("10.0.0.1", &[("x-forwarded-for", "198.51.100.2")]),
    )
    .await;
    assert_eq!((first, second), (StatusCode::OK, StatusCode::OK));
    // A direct client forging a fresh address each time is still itself.
    let (direct, _) = send(
        &mut service,
        request_from("203.0.113.9", &[("x-forwarded-for", "198.51.100.3")]),
    )
    .await;
    let (forged, _) = send(
        &mut service,
        request_from("203.0.113.9", &[("x-forwarded-for", "198.51.100.4")]),
    )
    .await;
    assert_eq!(
        (direct, forged),
        (StatusCode::OK, StatusCode::TOO_MANY_REQUESTS)
    );
    // A client forging an entry left of the proxy's is found right of it.
    let (spoofed, _) = send(
        &mut service,
        request_from(
            "10.0.0.1",
            &[("x-forwarded-for", "198.51.100.77, 198.51.100.1")],
        ),
    )
    .await;
    assert_eq!(spoofed, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test(start_paused = true)]
async fn a_request_without_a_key_gets_the_configured_fallback() {
    let bucket = || TokenBucket::new(Rate::per_hour(1), 1).unwrap();
    let mut no_peer = Request::get("/").body(()).unwrap();
    // By default: a clear 500 for a server that records no peer, never a panic.
    let mut service = RateLimitLayer::builder(ClientIp::peer(), bucket())
        .build()
        .unwrap()
        .layer(ok_service());
    let response = service.ready().await.unwrap().call(no_peer).await.unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    // Allowed through, unlimited and without headers.
    let mut service = RateLimitLayer::builder(ClientIp::peer(), bucket())
        .on_missing_key(MissingKey::Allow)
        .build()
        .unwrap()
        .layer(ok_service());
    for _ in 0..3 {
        no_peer = Request::get("/").body(()).unwrap();
        let response = service.ready().await.unwrap().call(no_peer).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers().get("ratelimit"), None);
    }
    // Counted under one shared key.
    let shared: IpAddr = "0.0.0.0".parse().unwrap();
    let mut service = RateLimitLayer::builder(ClientIp::peer(), bucket())
        .on_missing_key(MissingKey::Key(token_bucket::http::ClientKey::from(shared)))
        .build()
        .unwrap()
        .layer(ok_service());
    let mut statuses = Vec::new();
    for _ in 0..2 {
        no_peer = Request::get("/").body(()).unwrap();
        let response = service.ready().await.unwrap().call(no_peer).await.unwrap();
        statuses.push(response.status());
    }
    assert_eq!(statuses, [StatusCode::OK, StatusCode::TOO_MANY_REQUESTS]);
    // A header key that is missing is the client's fault: 400.
    let mut service = RateLimitLayer::builder(
        HeaderKey::new(http::HeaderName::from_static("x-api-key")),
        bucket(),
    )
    .build()
    .unwrap()
    .layer(ok_service());
    let (status, _) = send(&mut service, request_from("192.0.2.1", &[])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = send(
        &mut service,
        request_from("192.0.2.1", &[("x-api-key", "")]),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let long = "k".repeat(HeaderKey::MAX_LEN + 1);
    let (status, _) = send(
        &mut service,
        request_from("192.0.2.1", &[("x-api-key", &long)]),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, headers) = send(
        &mut service,
        request_from("192.0.2.1", &[("x-api-key", "k-1")]),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        text(&headers, "ratelimit").as_deref(),
        Some(r#""client";r=0;t=3600"#)
    );
}

#[tokio::test(start_paused = true)]
async fn allow_listed_keys_and_networks_pass_untouched() {
    let layer = RateLimitLayer::builder(
        ClientIp::peer(),
        TokenBucket::new(Rate::per_hour(1), 1).unwrap(),
    )
    .allow_keys([token_bucket::http::ClientKey::from(
        "192.0.2.7".parse::<IpAddr>().unwrap(),
    )])
    .allow_cidrs(["198.51.100.0/24".parse().unwrap()])
    .build()
    .unwrap();
    let mut service = layer.layer(ok_service());
    for peer in ["192.0.2.7", "198.51.100.200"] {
        for _ in 0..3 {
            let (status, headers) = send(&mut service, request_from(peer, &[])).await;
            assert_eq!(status, StatusCode::OK, "{peer}");
            assert_eq!(headers.get("ratelimit"), None, "{peer}");
        }
    }
    assert_eq!(layer.per_key().len(), 0);
}

#[tokio::test(start_paused = true)]
async fn shadow_mode_counts_but_never_refuses() {
    let layer = RateLimitLayer::builder(
        ClientIp::peer(),
        FixedWindow::new(2, Duration::from_secs(60)).unwrap(),
    )
    .shadow()
    .build()
    .unwrap();
    let mut service = layer.layer(ok_service());
    let mut seen = Vec::new();
    for _ in 0..4 {
        let (status, headers) = send(&mut service, request_from("192.0.2.1", &[])).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers.get("retry-after"), None);
        seen.push(text(&headers, "ratelimit").unwrap());
    }
    assert_eq!(
        seen,
        [
            r#""client";r=1;t=60"#,
            r#""client";r=0;t=60"#,
            r#""client";r=0;t=60"#,
            r#""client";r=0;t=60"#,
        ]
    );
    assert_eq!(layer.shadow_refusals(), 2);
}

#[tokio::test(start_paused = true)]
async fn waiting_requests_pass_in_order_within_the_bound() {
    let layer = RateLimitLayer::builder(
        ClientIp::peer(),
        TokenBucket::new(Rate::per_second(2), 1).unwrap(),
    )
    .wait_up_to(Duration::from_secs(1))
    .build()
    .unwrap();
    let service = layer.layer(ok_service());
    let start = tokio::time::Instant::now();
    let mut calls = Vec::new();
    for _ in 0..4 {
        let mut service = service.clone();
        calls.push(tokio::spawn(async move {
            let (status, _) = send(&mut service, request_from("192.0.2.1", &[])).await;
            (status, start.elapsed())
        }));
        // Each joins the line in turn.
        tokio::task::yield_now().await;
    }
    let mut answers = Vec::new();
    for call in calls {
        answers.push(call.await.unwrap());
    }
    // At once, then every 500 ms; the fourth would pass at 1.5 s, past the bound.
    assert_eq!(
        answers,
        [
            (StatusCode::OK, Duration::ZERO),
            (StatusCode::OK, Duration::from_millis(500)),
            (StatusCode::OK, Duration::from_millis(1_000)),
            (StatusCode::TOO_MANY_REQUESTS, Duration::ZERO),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn an_estimate_is_settled_from_the_true_cost() {
    let layer =
        RateLimitLayer::builder(GlobalKey, TokenBucket::new(Rate::per_hour(1), 100).unwrap())
            .global(TokenBucket::new(Rate::per_hour(1), 1_000).unwrap())
            .cost(|head| {
                (head.headers.get("x-estimate"))
                    .and_then(|value| value.to_str().ok()?.parse().ok())
                    .unwrap_or(1)
            })
            .settle(Settle::Extension)
            .build()
            .unwrap();
    // The handler reports the true cost: 7 tokens.
    let mut service = layer.layer(tower::service_fn(|_request: Request<()>| async {
        let mut response = Response::new(String::new());
        response.extensions_mut().insert(ActualCost(7));
        Ok::<_, Infallible>(response)
    }));
    let (status, headers) = send(
        &mut service,
        request_from("192.0.2.1", &[("x-estimate", "40")]),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // The headers say what the decision saw: 40 charged...
    assert_eq!(
        text(&headers, "ratelimit").as_deref(),
        Some(r#""client";r=60;t=144000, "global";r=960;t=144000"#)
    );
    // ...and 33 came back to both once the response said 7.
    assert_eq!(layer.per_key().quota(&()).unwrap().remaining, 93);
    // An under-estimate takes the excess as far as there is: 93, less 1 charged, less 6.
    let (status, _) = send(
        &mut service,
        request_from("192.0.2.1", &[("x-estimate", "1")]),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(layer.per_key().quota(&()).unwrap().remaining, 86);
    // A cost no limit ever admits: 429 with no Retry-After, since waiting cannot help.
    let (status, headers) = send(
        &mut service,
        request_from("192.0.2.1", &[("x-estimate", "101")]),
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers.get("retry-after"), None);
}

#[tokio::test(start_paused = true)]
async fn a_full_key_table_answers_503_with_retry_after() {
    let layer = RateLimitLayer::builder(
        ClientIp::peer(),
        SlidingLog::new(2, Duration::from_secs(30)).unwrap(),
    )
    .max_keys(1)
    .build()
    .unwrap();
    let mut service = layer.layer(ok_service());
    let (status, _) = send(&mut service, request_from("192.0.2.1", &[])).await;
    assert_eq!(status, StatusCode::OK);
    let (status, headers) = send(&mut service, request_from("192.0.2.2", &[])).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(text(&headers, "retry-after").as_deref(), Some("30"));
    assert_eq!(headers.get("ratelimit"), None);
    // Once the first client's window is empty it is forgotten to make room.
    tokio::time::advance(Duration::from_secs(30)).await;
    let (status, _) = send(&mut service, request_from("192.0.2.2", &[])).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn a_grpc_call_is_refused_with_resource_exhausted() {
    let mut service = RateLimitLayer::builder(
        ClientIp::peer(),
        TokenBucket::new(Rate::per_hour(1), 1).unwrap(),
    )
    .build()
    .unwrap()
    .layer(ok_service());
    let grpc = [("content-type", "application/grpc+proto")];
    let (status, _) = send(&mut service, request_from("192.0.2.1", &grpc)).await;
    assert_eq!(status, StatusCode::OK);
    let (status, headers) = send(&mut service, request_from("192.0.2.1", &grpc)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(text(&headers, "grpc-status").as_deref(), Some("8"));
    // Answered in the request's own content type.
    assert_eq!(
        text(&headers, "content-type").as_deref(),
        Some("application/grpc+proto")
    );
    assert_eq!(text(&headers, "retry-after").as_deref(), Some("3600"));
}

#[tokio::test(start_paused = true)]
async fn the_refusal_hook_builds_the_response_and_legacy_fields_are_opt_in() {
    let layer = RateLimitLayer::builder(
        key_fn(|head| match head.uri.path() {
            "/" => Ok("root"),
            _ => Err(KeyError::Other {
                status: StatusCode::NOT_FOUND,
                reason: "no such tenant".into(),
            }),
        }),
        FixedWindow::new(1, Duration::from_secs(60)).unwrap(),
    )
    .legacy_headers()
    .policy_names("tenant", "all")
    .on_refusal(|refusal| {
        let mut response = Response::new(format!("refused: {refusal}"));
        *response.status_mut() = refusal.status();
        response.headers_mut().extend(refusal.headers().clone());
        if let RefusalKind::Limited { retry_after } = refusal.kind() {
            assert_eq!(*retry_after, Duration::from_secs(60));
        }
        response
    })
    .build()
    .unwrap();
    let mut service = layer.layer(ok_service());
    let (_, headers) = send(&mut service, request_from("192.0.2.1", &[])).await;
    assert_eq!(text(&headers, "x-ratelimit-limit").as_deref(), Some("1"));
    assert_eq!(
        text(&headers, "x-ratelimit-remaining").as_deref(),
        Some("0")
    );
    assert_eq!(text(&headers, "x-ratelimit-reset").as_deref(), Some("60"));
    assert_eq!(
        text(&headers, "ratelimit-policy").as_deref(),
        Some(r#""tenant";q=1;w=60"#)
    );
    let response = service
        .ready()
        .await
        .unwrap()
        .call(request_from("192.0.2.1", &[]))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    // The text names the limit by its policy name and says the wait as Retry-After.
    assert_eq!(
        response.body(),
        r#"refused: the limit "tenant" is spent; retry after 60 seconds"#
    );
    assert_eq!(response.headers()["retry-after"], "60");
    let mut elsewhere = Request::get("/other").body(()).unwrap();
    elsewhere
        .extensions_mut()
        .insert(SocketAddr::from(([192, 0, 2, 1], 1)));
    let response = service
        .ready()
        .await
        .unwrap()
        .call(elsewhere)
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}

#[test]
fn bad_settings_are_refused_with_what_was_wrong() {
    let bucket = || TokenBucket::new(Rate::per_second(1), 1).unwrap();
    let zero_keys = RateLimitLayer::builder(GlobalKey, bucket())
        .max_keys(0)
        .build();
    assert_eq!(
        zero_keys.unwrap_err(),
        BuildError::Config(ConfigError::ZeroMaxKeys)
    );
    let bad_name = RateLimitLayer::builder(GlobalKey, bucket())
        .policy_names("per\nclient", "global")
        .build();
    let error = bad_name.unwrap_err();
    assert_eq!(
        error,
        BuildError::InvalidPolicyName {
            name: "per\nclient".into()
        }
    );
    assert_eq!(
        error.to_string(),
        "the policy name \"per\\nclient\" cannot stand in a header field: use non-empty \
         visible ASCII and spaces"
    );
}

#[tokio::test(start_paused = true)]
async fn malformed_forwarding_headers_get_the_documented_fallback() {
    // Behind one trusted proxy, each client 1 request an hour: a second request under the
    // same key is refused, which shows which key each header produced.
    let layer = |header| {
        RateLimitLayer::builder(
            ClientIp::behind(TrustedProxies::cidrs(["10.0.0.0/8".parse().unwrap()])).header(header),
            TokenBucket::new(Rate::per_hour(1), 1).unwrap(),
        )
        .build()
        .unwrap()
    };
    let huge = format!("{}198.51.100.1", "x, ".repeat(400_000));
    let cases: [(ForwardedHeader, &str, &str, &str); 7] = [
        // Garbage right of the proxy's entry: the walk ends, the proxy is the client.
        (
            ForwardedHeader::XForwardedFor,
            "x-forwarded-for",
            "198.51.100.1, ???",
            "10.0.0.1",
        ),
        // A zone id is stripped: fe80::1%eth0 is fe80::/64.
        (
            ForwardedHeader::XForwardedFor,
            "x-forwarded-for",
            "fe80::1%eth0",
            "fe80::2",
        ),
        // A port and brackets are stripped.
        (
            ForwardedHeader::XForwardedFor,
            "x-forwarded-for",
            "[2001:db8::1]:443",
            "2001:db8::7",
        ),
        // RFC 7239: quoted, bracketed, with a port; mixed case.
        (
            ForwardedHeader::Forwarded,
            "forwarded",
            r#"For="[2001:db8::1]:4711""#,
            "2001:db8::9",
        ),
        // An obfuscated node ends the walk at the proxy.
        (
            ForwardedHeader::Forwarded,
            "forwarded",
            "for=_hidden",
            "10.0.0.1",
        ),
        // Unbalanced quotes and junk: never a panic, the proxy is the client.
        (
            ForwardedHeader::Forwarded,
            "forwarded",
            "for=\"198.51.100.1;by=;;,",
            "10.0.0.1",
        ),
        // A megabyte of entries: only the right-most are read.
        (
            ForwardedHeader::XForwardedFor,
            "x-forwarded-for",
            &huge,
            "198.51.100.1",
        ),
    ];
    for (header, name, value, same_key_as) in cases {
        let mut service = layer(header).layer(ok_service());
        let (first, _) = send(&mut service, request_from("10.0.0.1", &[(name, value)])).await;
        assert_eq!(first, StatusCode::OK, "{name}: {value:.40}");
        // The key the malformed header produced is spent: a request keyed the same way,
        // well formed, is refused.
        let as_header = match header {
            ForwardedHeader::Forwarded => format!("for=\"{same_key_as}\""),
            _ => same_key_as.to_owned(),
        };
        let (second, _) = send(
            &mut service,
            request_from("10.0.0.1", &[(name, as_header.as_str())]),
        )
        .await;
        assert_eq!(
            second,
            StatusCode::TOO_MANY_REQUESTS,
            "{name}: {value:.40} should key as {same_key_as}"
        );
    }
}

/// Wait mode with a global limit: one client over its own limit, waiting its turn,
/// must not hold up another client whose own budget and the global one are there.
#[tokio::test(start_paused = true)]
async fn a_waiting_client_does_not_hold_up_the_others() {
    let layer = RateLimitLayer::builder(
        ClientIp::peer(),
        TokenBucket::new(Rate::per_second(1), 1).unwrap(),
    )
    .global(TokenBucket::new(Rate::per_second(1_000), 1_000).unwrap())
    .wait_up_to(Duration::from_secs(5))
    .build()
    .unwrap();
    let service = layer.layer(ok_service());
    let start = tokio::time::Instant::now();
    // Client A spends its one token, then a second request of A waits ~1 s.
    let (status, _) = send(&mut service.clone(), request_from("192.0.2.1", &[])).await;
    assert_eq!(status, StatusCode::OK);
    let mut waiting = service.clone();
    let a = tokio::spawn(async move {
        let (status, _) = send(&mut waiting, request_from("192.0.2.1", &[])).await;
        (status, start.elapsed())
    });
    tokio::task::yield_now().await;
    // Client B, fresh, with 999 global tokens there: admitted at once.
    let mut other = service.clone();
    let b = tokio::spawn(async move {
        let (status, _) = send(&mut other, request_from("192.0.2.2", &[])).await;
        (status, start.elapsed())
    });
    let b = b.await.unwrap();
    let a = a.await.unwrap();
    assert_eq!(a, (StatusCode::OK, Duration::from_secs(1)));
    assert_eq!(
        b,
        (StatusCode::OK, Duration::ZERO),
        "B was held up behind A"
    );
}

/// Shadow mode "refuses none": a request whose key is missing must still pass.
#[tokio::test(start_paused = true)]
async fn shadow_mode_never_refuses_a_request_without_a_key() {
    let layer = RateLimitLayer::builder(
        HeaderKey::new(http::HeaderName::from_static("x-api-key")),
        TokenBucket::new(Rate::per_second(1), 1).unwrap(),
    )
    .shadow()
    .build()
    .unwrap();
    let mut service = layer.layer(ok_service());
    let (status, _) = send(&mut service, request_from("192.0.2.1", &[])).await;
    assert_eq!(status, StatusCode::OK, "shadow mode refused a request");
    assert_eq!(layer.shadow_refusals(), 1);
}

/// A settlement that comes after the window it was charged in gives back permits that
/// other requests counted in the new window: the key admits more than its limit there.
#[tokio::test(start_paused = true)]
async fn a_late_settlement_never_lets_a_fixed_window_admit_more_than_its_limit() {
    let layer = RateLimitLayer::builder(
        GlobalKey,
        FixedWindow::new(10, Duration::from_secs(60)).unwrap(),
    )
    .cost(|_| 10)
    .settle(Settle::Extension)
    .build()
    .unwrap();
    // The handler answers after `x-delay` seconds and used nothing.
    let service = layer.layer(tower::service_fn(|request: Request<()>| async move {
        let delay: u64 = request
            .headers()
            .get("x-delay")
            .map_or(0, |value| value.to_str().unwrap().parse().unwrap());
        tokio::time::sleep(Duration::from_secs(delay)).await;
        let mut response = Response::new(String::new());
        response
            .extensions_mut()
            .insert(ActualCost(if delay > 0 { 0 } else { 10 }));
        Ok::<_, Infallible>(response)
    }));
    let with_delay = |delay: u64| request_from("192.0.2.1", &[("x-delay", &delay.to_string())]);
    // t = 0, window 0: a slow request charged 10, answered at t = 61 s having used none.
    let mut slow = service.clone();
    let slow = tokio::spawn(async move { send(&mut slow, with_delay(61)).await.0 });
    tokio::task::yield_now().await;
    // t = 60 s, window 1: a request that uses its 10 in full.
    tokio::time::advance(Duration::from_secs(60)).await;
    let (status, _) = send(&mut service.clone(), with_delay(0)).await;
    assert_eq!(status, StatusCode::OK);
    // t = 61 s: the slow one settles.
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(slow.await.unwrap(), StatusCode::OK);
    // Still window 1, which already counted 10 used in full: another 10 must be refused.
    let (status, _) = send(&mut service.clone(), with_delay(0)).await;
    assert_eq!(
        status,
        StatusCode::TOO_MANY_REQUESTS,
        "window 1 admitted 20 of a limit of 10"
    );
}

/// With a global limit, a refusal by the client's key gives Retry-After for the key
/// alone, even when the global limit cannot pass the request that soon.
#[tokio::test(start_paused = true)]
async fn retry_after_covers_the_global_limit_too() {
    let layer = RateLimitLayer::builder(
        ClientIp::peer(),
        TokenBucket::new(Rate::per_second(1), 1).unwrap(),
    )
    .global(FixedWindow::new(2, Duration::from_secs(60)).unwrap())
    .build()
    .unwrap();
    let mut service = layer.layer(ok_service());
    send(&mut service, request_from("192.0.2.1", &[])).await;
    send(&mut service, request_from("192.0.2.2", &[])).await;
    // Global spent until 60 s; client 1's own token back in 1 s.
    let (status, headers) = send(&mut service, request_from("192.0.2.1", &[])).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    tokio::time::advance(Duration::from_secs(retry_after)).await;
    let (status, _) = send(&mut service, request_from("192.0.2.1", &[])).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "obeyed Retry-After: {retry_after} s, refused again"
    );
}

#[test]
fn a_cidr_with_host_bits_set_is_refused_naming_the_block_it_would_have_been() {
    use token_bucket::http::{Cidr, CidrError};
    // A trusted proxy written as a network with a typo must not widen the trust.
    let typo = "10.0.0.1/8".parse::<Cidr>();
    assert_eq!(
        typo,
        Err(CidrError::HostBitsSet {
            text: "10.0.0.1/8".into(),
            network: "10.0.0.0/8".parse().unwrap(),
        })
    );
    assert_eq!(
        typo.unwrap_err().to_string(),
        "`10.0.0.1/8` has bits set below its prefix: the block is `10.0.0.0/8`"
    );
    // The proxy's own address, and the network written as one, are both accepted.
    let proxy: Cidr = "10.0.0.1/32".parse().unwrap();
    assert!(proxy.contains("10.0.0.1".parse().unwrap()));
    assert!(!proxy.contains("10.0.0.2".parse().unwrap()));
    let network: Cidr = "10.0.0.0/8".parse().unwrap();
    assert!(network.contains("10.200.0.1".parse().unwrap()));
}

/// The unit `.cost(..)` charges in goes in each policy as `qu`, so that a client reads
/// `q` and `r` as bytes, not requests.
#[tokio::test(start_paused = true)]
async fn the_quota_unit_is_sent_as_qu_in_each_policy() {
    use token_bucket::http::QuotaUnit;
    let cost = |head: &token_bucket::http::RequestHead<'_>| {
        let length = head.headers.get("content-length");
        length.map_or(0, |value| value.to_str().unwrap().parse().unwrap())
    };
    let cases = [
        (
            QuotaUnit::ContentBytes,
            r#""client";q=1000;qu="content-bytes";w=10, "global";q=5000;qu="content-bytes";w=10"#,
        ),
        (
            QuotaUnit::ConcurrentRequests,
            r#""client";q=1000;qu="concurrent-requests";w=10, "global";q=5000;qu="concurrent-requests";w=10"#,
        ),
        (
            QuotaUnit::Custom("llm-tokens".into()),
            r#""client";q=1000;qu="llm-tokens";w=10, "global";q=5000;qu="llm-tokens";w=10"#,
        ),
        // The draft's default goes unsaid.
        (
            QuotaUnit::Requests,
            r#""client";q=1000;w=10, "global";q=5000;w=10"#,
        ),
    ];
    for (unit, policy) in cases {
        let layer = RateLimitLayer::builder(
            ClientIp::peer(),
            FixedWindow::new(1_000, Duration::from_secs(10)).unwrap(),
        )
        .global(FixedWindow::new(5_000, Duration::from_secs(10)).unwrap())
        .cost(cost)
        .quota_unit(unit.clone())
        .build()
        .unwrap();
        let mut service = layer.layer(ok_service());
        let request = request_from("192.0.2.1", &[("content-length", "300")]);
        let (status, headers) = send(&mut service, request).await;
        assert_eq!(status, StatusCode::OK, "{unit:?}");
        assert_eq!(text(&headers, "ratelimit-policy").as_deref(), Some(policy));
        assert_eq!(
            text(&headers, "ratelimit").as_deref(),
            Some(r#""client";r=700;t=10, "global";r=4700;t=10"#)
        );
    }
    // Without a cost function and a unit, nothing changes.
    let mut plain = per_client_and_global().layer(ok_service());
    let (_, headers) = send(&mut plain, request_from("192.0.2.1", &[])).await;
    assert_eq!(
        text(&headers, "ratelimit-policy").as_deref(),
        Some(r#""client";q=3;w=3, "global";q=5;w=10"#)
    );
}

#[test]
fn a_quota_unit_that_is_no_token_or_names_no_cost_is_refused() {
    use token_bucket::http::QuotaUnit;
    let bucket = || TokenBucket::new(Rate::per_second(1), 3).unwrap();
    for unit in ["", "9lives", "llm tokens", "bytes\"", "é"] {
        let error = RateLimitLayer::builder(ClientIp::peer(), bucket())
            .cost(|_| 1)
            .quota_unit(QuotaUnit::Custom(unit.into()))
            .build()
            .unwrap_err();
        assert_eq!(error, BuildError::InvalidQuotaUnit { unit: unit.into() });
        assert!(error.to_string().contains(&format!("{unit:?}")), "{error}");
    }
    let error = RateLimitLayer::builder(ClientIp::peer(), bucket())
        .quota_unit(QuotaUnit::ContentBytes)
        .build()
        .unwrap_err();
    assert_eq!(
        error,
        BuildError::QuotaUnitWithoutCost {
            unit: "content-bytes".into()
        }
    );
    assert_eq!(
        error.to_string(),
        "the quota unit \"content-bytes\" needs a cost function: without one each request \
         counts one, so the quotas are in requests"
    );
    // Requests, the draft's default, is true without a cost, and goes unsaid.
    let plain = RateLimitLayer::builder(ClientIp::peer(), bucket())
        .quota_unit(QuotaUnit::Requests)
        .build();
    assert!(plain.is_ok());
    // Tokens of the user's own pass: `*`, digits after the first, `:` and `/`.
    for unit in ["*", "tokens/v2", "a:b", "x-1"] {
        let built = RateLimitLayer::builder(ClientIp::peer(), bucket())
            .cost(|_| 1)
            .quota_unit(QuotaUnit::Custom(unit.into()))
            .build();
        assert!(built.is_ok(), "{unit}");
    }
}

/// With the fields off, a decided response carries none of them, and a refusal still
/// carries Retry-After; the legacy fields come only when asked for.
#[tokio::test(start_paused = true)]
async fn the_fields_switched_off_leave_only_retry_after() {
    let layer = |legacy: bool| {
        let builder = RateLimitLayer::builder(
            ClientIp::peer(),
            TokenBucket::new(Rate::per_second(1), 1).unwrap(),
        )
        .rate_limit_fields(false);
        let builder = if legacy {
            builder.legacy_headers()
        } else {
            builder
        };
        builder.build().unwrap()
    };
    let mut service = layer(false).layer(ok_service());
    let (status, headers) = send(&mut service, request_from("192.0.2.1", &[])).await;
    assert_eq!((status, headers.len()), (StatusCode::OK, 0));
    let (status, headers) = send(&mut service, request_from("192.0.2.1", &[])).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(text(&headers, "retry-after").as_deref(), Some("1"));
    assert_eq!(headers.len(), 1, "{headers:?}");

    let mut legacy = layer(true).layer(ok_service());
    let (_, headers) = send(&mut legacy, request_from("192.0.2.1", &[])).await;
    assert_eq!(headers.get("ratelimit"), None);
    assert_eq!(
        text(&headers, "x-ratelimit-remaining").as_deref(),
        Some("0")
    );
    assert_eq!(text(&headers, "x-ratelimit-limit").as_deref(), Some("1"));
}

/// With the fields off, an estimate is still settled (the decision's quotas are read for
/// it), and a request that waits its turn gets no field either.
#[tokio::test(start_paused = true)]
async fn with_the_fields_off_settling_and_waiting_work_as_with_them_on() {
    let settled =
        RateLimitLayer::builder(GlobalKey, TokenBucket::new(Rate::per_hour(1), 100).unwrap())
            .cost(|_| 40)
            .settle(Settle::Extension)
            .rate_limit_fields(false)
            .build()
            .unwrap();
    let mut service = settled.layer(tower::service_fn(|_request: Request<()>| async {
        let mut response = Response::new(String::new());
        response.extensions_mut().insert(ActualCost(7));
        Ok::<_, Infallible>(response)
    }));
    let (status, headers) = send(&mut service, request_from("192.0.2.1", &[])).await;
    assert_eq!((status, headers.len()), (StatusCode::OK, 0));
    assert_eq!(settled.per_key().quota(&()).unwrap().remaining, 93);

    let waiting = RateLimitLayer::builder(
        ClientIp::peer(),
        TokenBucket::new(Rate::per_second(1), 1).unwrap(),
    )
    .wait_up_to(Duration::from_secs(1))
    .rate_limit_fields(false)
    .build()
    .unwrap();
    let mut service = waiting.layer(ok_service());
    let (status, headers) = send(&mut service, request_from("192.0.2.1", &[])).await;
    assert_eq!((status, headers.len()), (StatusCode::OK, 0));
    let start = tokio::time::Instant::now();
    let (status, headers) = send(&mut service, request_from("192.0.2.1", &[])).await;
    assert_eq!((status, headers.len()), (StatusCode::OK, 0), "{headers:?}");
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}
