//! An HTTP server that limits each client and the whole server, with the crate's tower
//! layer: each client may make 10 requests in any 10 s (a `SlidingLog` per client, at
//! most 100,000 clients held), and the server 100 a second. A refused request gets `429`
//! with `Retry-After`; every answer carries the IETF `RateLimit-Policy` and `RateLimit`
//! header fields.
//!
//! ```text
//! cargo run --features axum --example http_server             # http://127.0.0.1:3000/
//! curl -i http://127.0.0.1:3000/                              # the 11th within 10 s: 429
//! cargo run --features axum --example http_server -- --demo   # sends itself 12 requests
//! ```

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use axum::{routing::get, Router};
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use token_bucket::http::{ClientIp, RateLimitLayer};
use token_bucket::{Rate, SlidingLog, TokenBucket};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let client_window = Duration::from_secs(10);
    let limit = RateLimitLayer::builder(ClientIp::peer(), SlidingLog::new(10, client_window)?)
        .global(TokenBucket::new(Rate::per_second(100), 100)?)
        .max_keys(100_000)
        .build()?;
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(limit.clone());

    let demo = std::env::args().any(|arg| arg == "--demo");
    let listener =
        tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, if demo { 0 } else { 3000 })).await?;
    let address = listener.local_addr()?;
    println!("serving http://{address}/ : 10 requests per client in any 10 s, 100/s in all");
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    let server = tokio::spawn(async move { axum::serve(listener, service).await });
    // Idle clients are forgotten as new ones come; this frees a flood's memory in quiet
    // times too.
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(client_window);
        loop {
            ticks.tick().await;
            limit.forget_idle_keys();
        }
    });
    if !demo {
        server.await??;
        return Ok(());
    }

    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let uri: hyper::Uri = format!("http://{address}/").parse()?;
    for number in 1..=12 {
        let response = client.get(uri.clone()).await?;
        let header = |name| {
            (response.headers().get(name))
                .and_then(|value| value.to_str().ok())
                .unwrap_or("-")
                .to_owned()
        };
        println!(
            "request {number:>2}: {}  RateLimit: {}  Retry-After: {}",
            response.status(),
            header("ratelimit"),
            header("retry-after"),
        );
    }
    server.abort();
    Ok(())
}
