//! The HTTP example's limits, watched: each client may make 10 requests in any 10 s and
//! the server 100 a second; the layer is named `api` and the global bucket `global`, so
//! both report through the `metrics` facade to `metrics-exporter-prometheus`, rendered at
//! `GET /metrics` (after `observe::record_gauges`, so the gauges are read at scrape time).
//!
//! ```text
//! cargo run --features axum,metrics --example metrics              # http://127.0.0.1:3000/metrics
//! cargo run --features axum,metrics --example metrics -- --demo    # 60 clients for 4 s, then the series
//! cargo run --features axum,metrics --example metrics -- --chart docs/charts/metrics.svg
//! ```
//!
//! `--demo` drives traffic from 60 clients (told apart by `X-Forwarded-For`, the server
//! trusting its loopback peer as a proxy) and prints the crate's series from `/metrics`.
//! `--chart PATH` drives 12 s of traffic, scrapes `/metrics` every 250 ms, and draws what
//! a dashboard of those series shows: requests admitted and refused a second, and the
//! global bucket's permits available.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use axum::{routing::get, Router};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use plotters::prelude::*;
use token_bucket::http::{ClientIp, RateLimitLayer, TrustedProxies};
use token_bucket::{observe, Rate, SlidingLog, TokenBucket};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The clients of `--demo` and `--chart`.
const CLIENTS: u64 = 60;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    // The recorder first: a named limiter registers its metrics when it is named.
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    let loopback = "127.0.0.0/8".parse()?;
    let limit = RateLimitLayer::builder(
        ClientIp::behind(TrustedProxies::cidrs([loopback])),
        SlidingLog::new(10, Duration::from_secs(10))?,
    )
    .global(
        TokenBucket::builder()
            .rate(Rate::per_second(100))
            .capacity(100)
            .name("global")
            .build()?,
    )
    .max_keys(100_000)
    .name("api")
    .build()?;
    let metrics = Router::new().route("/metrics", get(move || scrape(prometheus.clone())));
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(limit)
        .merge(metrics);

    let args: Vec<String> = std::env::args().collect();
    let demo = args.iter().any(|arg| arg == "--demo");
    let chart = args
        .iter()
        .position(|arg| arg == "--chart")
        .map(|at| {
            args.get(at + 1)
                .map(PathBuf::from)
                .ok_or("--chart needs a path")
        })
        .transpose()?;
    let port = if demo || chart.is_some() { 0 } else { 3000 };
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port)).await?;
    let address = listener.local_addr()?;
    println!("serving http://{address}/ and http://{address}/metrics");
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    let server = tokio::spawn(async move { axum::serve(listener, service).await });
    if !demo && chart.is_none() {
        server.await??;
        return Ok(());
    }
    let seconds = if demo { 4 } else { 12 };
    let traffic = tokio::spawn(drive(address, Duration::from_secs(seconds)));
    let samples = watch(address, Duration::from_secs(seconds)).await?;
    traffic.await??;
    let last = fetch(address, "/metrics").await?;
    for line in last
        .lines()
        .filter(|line| line.starts_with("token_bucket_"))
    {
        println!("{line}");
    }
    if let Some(path) = chart {
        draw(&path, &samples)?;
        println!("drew {}", path.display());
    }
    server.abort();
    Ok(())
}

/// `GET /metrics`: the gauges read now, then everything rendered.
async fn scrape(prometheus: PrometheusHandle) -> String {
    observe::record_gauges();
    prometheus.render()
}

/// Requests from [`CLIENTS`] clients for `how_long`: client `n` starts `n × 50 ms` in and
/// asks every 100 ms, so each runs into its own limit (10 in any 10 s) after a second,
/// and while they come 20 a second, their first requests together run into the
/// server's (100 a second).
async fn drive(address: SocketAddr, how_long: Duration) -> Result<(), BoxError> {
    let start = tokio::time::Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            tokio::spawn(async move {
                let http = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
                tokio::time::sleep(Duration::from_millis(50 * client)).await;
                let mut ticks = tokio::time::interval(Duration::from_millis(100));
                while start.elapsed() < how_long {
                    ticks.tick().await;
                    let request = hyper::Request::get(format!("http://{address}/"))
                        .header("x-forwarded-for", format!("203.0.113.{}", client + 1))
                        .body(Empty::new())?;
                    http.request(request).await?.into_body().collect().await?;
                }
                Ok::<(), BoxError>(())
            })
        })
        .collect();
    for client in clients {
        client.await??;
    }
    Ok(())
}

/// One scrape of the series the chart draws.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    seconds: f64,
    admitted: f64,
    refused_by_client: f64,
    refused_by_global: f64,
    global_available: f64,
}

/// Scrapes `/metrics` every 250 ms for `how_long`.
async fn watch(address: SocketAddr, how_long: Duration) -> Result<Vec<Sample>, BoxError> {
    let start = tokio::time::Instant::now();
    let mut ticks = tokio::time::interval(Duration::from_millis(250));
    let mut samples = Vec::new();
    while start.elapsed() <= how_long {
        ticks.tick().await;
        let text = fetch(address, "/metrics").await?;
        samples.push(Sample {
            seconds: start.elapsed().as_secs_f64(),
            admitted: sum(
                &text,
                "token_bucket_http_admitted_requests_total",
                "api",
                "",
            ),
            refused_by_client: sum(&text, REFUSED, "api", "limit=\"key\""),
            refused_by_global: sum(&text, REFUSED, "api", "limit=\"global\""),
            global_available: sum(&text, "token_bucket_available_permits", "global", ""),
        });
    }
    Ok(samples)
}

/// The HTTP layer's refusals, by the limit that refused (`limit="key"` or `"global"`).
const REFUSED: &str = "token_bucket_http_refused_requests_total";

/// The sum of the series `name` of the limiter `limiter` that carry `label` too, in
/// Prometheus's text format.
fn sum(text: &str, name: &str, limiter: &str, label: &str) -> f64 {
    let named = format!("limiter=\"{limiter}\"");
    text.lines()
        .filter(|line| line.starts_with(name) && line[name.len()..].starts_with('{'))
        .filter(|line| line.contains(&named) && line.contains(label))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn fetch(address: SocketAddr, path: &str) -> Result<String, BoxError> {
    let http = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let response = http.get(format!("http://{address}{path}").parse()?).await?;
    let body = response.into_body().collect().await?.to_bytes();
    Ok(String::from_utf8(body.to_vec())?)
}

/// Requests admitted, refused by a client's limit and refused by the global one, a
/// second (from the counters' increase between scrapes), and the global bucket's permits
/// available, against time.
fn draw(path: &PathBuf, samples: &[Sample]) -> Result<(), BoxError> {
    let rates: Vec<[f64; 5]> = samples
        .windows(2)
        .map(|pair| {
            let per_second = |value: fn(&Sample) -> f64| {
                (value(&pair[1]) - value(&pair[0])) / (pair[1].seconds - pair[0].seconds)
            };
            [
                pair[1].seconds,
                per_second(|sample| sample.admitted),
                per_second(|sample| sample.refused_by_client),
                per_second(|sample| sample.refused_by_global),
                pair[1].global_available,
            ]
        })
        .collect();
    let end = samples.last().map_or(1.0, |sample| sample.seconds);
    let top = rates
        .iter()
        .flat_map(|rate| rate[1..].iter().copied())
        .fold(100.0, f64::max);
    let root = SVGBackend::new(path, (960, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "examples/metrics.rs: 60 clients, 10 requests per client in any 10 s, 100/s in all",
            ("sans-serif", 18),
        )
        .margin(20)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..end, 0f64..top * 1.1)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("requests a second / permits")
        .label_style(("sans-serif", 14))
        .light_line_style(WHITE)
        .bold_line_style(BLACK.mix(0.12))
        .draw()?;
    let series = [
        ("admitted a second (api)", RGBColor(0, 114, 178)),
        (
            "refused a second by a client's limit (api)",
            RGBColor(213, 94, 0),
        ),
        (
            "refused a second by the global limit (api)",
            RGBColor(204, 121, 167),
        ),
        ("permits available (global)", RGBColor(0, 158, 115)),
    ];
    for (column, (label, color)) in (1..).zip(series) {
        chart
            .draw_series(LineSeries::new(
                rates.iter().map(|rate| (rate[0], rate[column])),
                color.stroke_width(2),
            ))?
            .label(label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.3))
        .label_font(("sans-serif", 14))
        .draw()?;
    root.present()?;
    Ok(())
}
