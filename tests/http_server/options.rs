//! The builder's options as a client meets them through a real server: refusals as
//! problem details in JSON, routes left out by a predicate or by axum's layer order, and
//! the `RateLimit` fields switched off.

use std::time::Duration;

use axum::routing::get;
use axum::Router;
use http::StatusCode;
use token_bucket::http::{ClientIp, RateLimitLayer};
use token_bucket::FixedWindow;

use crate::common_http::{client_from, get_path, local, serve, text};

/// Each client 2 requests an hour: nothing comes back while a test runs.
fn two_an_hour() -> FixedWindow {
    FixedWindow::new(2, Duration::from_secs(3600)).unwrap()
}

fn routes() -> Router {
    Router::new()
        .route("/", get(|| async { "hello" }))
        .route("/health", get(|| async { "ok" }))
}

#[tokio::test]
async fn a_json_api_gets_its_refusals_as_problem_details() {
    let layer = RateLimitLayer::builder(ClientIp::peer(), two_an_hour())
        .problem_json()
        .build()
        .unwrap();
    let address = serve(routes().layer(layer)).await;
    let client = client_from(local(21));
    for _ in 0..2 {
        let (status, headers, body) = get_path(&client, address, "/").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "hello"));
        assert!(text(&headers, "content-type").starts_with("text/plain"));
    }
    let (status, headers, body) = get_path(&client, address, "/").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(text(&headers, "content-type"), "application/problem+json");
    let problem: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        problem["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(problem["title"], "Too Many Requests");
    assert_eq!(problem["status"], 429);
    assert_eq!(problem["refused-by"], "key");
    assert_eq!(problem["violated-policies"], serde_json::json!(["client"]));
    // The detail and the member say the wait that Retry-After says, to the second.
    let retry_after: u64 = text(&headers, "retry-after").parse().unwrap();
    assert!((3_500..=3_600).contains(&retry_after), "{retry_after}");
    assert_eq!(problem["retry-after"], retry_after);
    assert_eq!(
        problem["detail"],
        format!("the limit \"client\" is spent; retry after {retry_after} seconds")
    );
    // The RateLimit fields are there too, as on any decided response.
    assert!(text(&headers, "ratelimit").starts_with(r#""client";r=0;t="#));
}

#[tokio::test]
async fn a_route_left_out_by_the_predicate_is_never_limited_nor_counted() {
    let layer = RateLimitLayer::builder(ClientIp::peer(), two_an_hour())
        .skip_if(|head| head.uri.path() == "/health")
        .build()
        .unwrap();
    let address = serve(routes().layer(layer)).await;
    let client = client_from(local(22));
    let (status, headers, _) = get_path(&client, address, "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(text(&headers, "ratelimit").starts_with(r#""client";r=1;"#));
    // A hundred health checks: none limited, none counted, none told a quota.
    for _ in 0..100 {
        let (status, headers, body) = get_path(&client, address, "/health").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
        assert!(!headers.contains_key("ratelimit"));
        assert!(!headers.contains_key("ratelimit-policy"));
    }
    let (status, headers, _) = get_path(&client, address, "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(text(&headers, "ratelimit").starts_with(r#""client";r=0;"#));
    let (status, _, _) = get_path(&client, address, "/").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let (status, _, _) = get_path(&client, address, "/health").await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn a_route_left_out_by_axum_s_layer_order_is_never_limited() {
    let layer = || {
        RateLimitLayer::builder(ClientIp::peer(), two_an_hour())
            .build()
            .unwrap()
    };
    // `.layer` covers the routes added before it; `.route_layer` those of its router.
    let after = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(layer())
        .route("/health", get(|| async { "ok" }));
    let merged = Router::new()
        .route("/", get(|| async { "hello" }))
        .route_layer(layer())
        .merge(Router::new().route("/health", get(|| async { "ok" })));
    for (index, app) in [after, merged].into_iter().enumerate() {
        let address = serve(app).await;
        let client = client_from(local(23 + index as u8));
        let mut statuses = Vec::new();
        for _ in 0..3 {
            statuses.push(get_path(&client, address, "/").await.0);
        }
        assert_eq!(
            statuses,
            [
                StatusCode::OK,
                StatusCode::OK,
                StatusCode::TOO_MANY_REQUESTS
            ],
            "app {index}"
        );
        for _ in 0..20 {
            let (status, headers, _) = get_path(&client, address, "/health").await;
            assert_eq!(status, StatusCode::OK, "app {index}");
            assert!(!headers.contains_key("ratelimit"), "app {index}");
        }
    }
}

#[tokio::test]
async fn with_the_fields_off_only_a_refusal_s_retry_after_is_sent() {
    let layer = RateLimitLayer::builder(ClientIp::peer(), two_an_hour())
        .global(FixedWindow::new(100, Duration::from_secs(3600)).unwrap())
        .rate_limit_fields(false)
        .build()
        .unwrap();
    let address = serve(routes().layer(layer)).await;
    let client = client_from(local(25));
    for _ in 0..2 {
        let (status, headers, _) = get_path(&client, address, "/").await;
        assert_eq!(status, StatusCode::OK);
        for name in [
            "ratelimit",
            "ratelimit-policy",
            "retry-after",
            "x-ratelimit-limit",
        ] {
            assert!(!headers.contains_key(name), "{name}");
        }
    }
    let (status, headers, _) = get_path(&client, address, "/").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = text(&headers, "retry-after").parse().unwrap();
    assert!((3_500..=3_600).contains(&retry_after), "{retry_after}");
    assert!(!headers.contains_key("ratelimit"));
    assert!(!headers.contains_key("ratelimit-policy"));
}
