//! The server `benches/http_wrk.sh` loads with `wrk` (issue 22, item 6): axum on
//! loopback with no limiter, tower_governor, or ours, admitting or refusing everything.
//! Not a criterion benchmark: a `[[bench]]` so that it builds with the benchmarks'
//! release profile and dev-dependencies.
//!
//! ```text
//! cargo bench --features axum --bench http_server -- ours-admit
//! # serving ours-admit on http://127.0.0.1:40123/
//! ```
//!
//! It serves `GET /` answering `hello`, on `127.0.0.1` (a free port unless `--port N`),
//! on tokio's multi-thread runtime with its default workers (one per core), with each
//! connection's address known (`into_make_service_with_connect_info::<SocketAddr>()`),
//! and prints the address as its first line. It serves until killed.
//!
//! The variants (the first argument):
//!
//! - `none`: no limiter.
//! - `governor-admit`, `governor-refuse`: tower_governor's `GovernorLayer` per peer IP,
//!   as it ships (no headers on admitted responses). Admitting: 10^9 at once, one more a
//!   nanosecond, never refusing. Refusing: one request an hour, so all but the first
//!   are answered 429.
//! - `governor-headers-admit`, `governor-headers-refuse`: the same with `use_headers()`
//!   (`x-ratelimit-*` on every response).
//! - `ours-admit`, `ours-refuse`: `RateLimitLayer` per client IP with a global limit,
//!   both token buckets, with the `RateLimit` header fields as it ships. The per-client
//!   quotas are the same as tower_governor's; the global one holds 10^9 and gains 10^9 a
//!   second, so it never refuses. Compared with `governor-headers-*`.
//! - `ours-off-admit`, `ours-off-refuse`: the same with `rate_limit_fields(false)`,
//!   compared with `governor-*` as it ships.
//!
//! `cargo bench` passes `--bench` to the program; it is ignored.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;

use axum::routing::get;
use axum::Router;

#[path = "support/http_layers.rs"]
mod http_layers;

use http_layers::{Fields, ONE_AN_HOUR, UNLIMITED};

const VARIANTS: [&str; 9] = [
    "none",
    "governor-admit",
    "governor-refuse",
    "governor-headers-admit",
    "governor-headers-refuse",
    "ours-admit",
    "ours-refuse",
    "ours-off-admit",
    "ours-off-refuse",
];

/// What the command line asked for.
struct Arguments {
    variant: String,
    port: u16,
}

fn usage() -> String {
    format!(
        "usage: http_server VARIANT [--port N]\n  VARIANT is one of: {}",
        VARIANTS.join(", ")
    )
}

fn parse(arguments: impl Iterator<Item = String>) -> Result<Arguments, String> {
    let mut variant = None;
    let mut port = 0;
    let mut arguments = arguments.filter(|argument| argument != "--bench");
    while let Some(argument) = arguments.next() {
        if argument == "--port" {
            let value = arguments
                .next()
                .ok_or_else(|| format!("--port needs a value\n{}", usage()))?;
            port = value
                .parse()
                .map_err(|_| format!("--port {value:?} is not a port (0 to 65535)\n{}", usage()))?;
        } else if VARIANTS.contains(&argument.as_str()) && variant.is_none() {
            variant = Some(argument);
        } else {
            return Err(format!("unexpected argument {argument:?}\n{}", usage()));
        }
    }
    let variant = variant.ok_or_else(usage)?;
    Ok(Arguments { variant, port })
}

fn router(variant: &str) -> Result<Router, String> {
    let app = Router::new().route("/", get(|| async { "hello" }));
    match variant {
        "none" => Ok(app),
        "governor-admit" => Ok(app.layer(http_layers::tower_governor(UNLIMITED))),
        "governor-refuse" => Ok(app.layer(http_layers::tower_governor(ONE_AN_HOUR))),
        "governor-headers-admit" => {
            Ok(app.layer(http_layers::tower_governor_with_headers(UNLIMITED)))
        }
        "governor-headers-refuse" => {
            Ok(app.layer(http_layers::tower_governor_with_headers(ONE_AN_HOUR)))
        }
        "ours-admit" => Ok(app.layer(http_layers::ours(UNLIMITED, true, Fields::On))),
        "ours-refuse" => Ok(app.layer(http_layers::ours(ONE_AN_HOUR, true, Fields::On))),
        "ours-off-admit" => Ok(app.layer(http_layers::ours(UNLIMITED, true, Fields::Off))),
        "ours-off-refuse" => Ok(app.layer(http_layers::ours(ONE_AN_HOUR, true, Fields::Off))),
        other => Err(format!("no variant {other:?}\n{}", usage())),
    }
}

fn main() -> ExitCode {
    let arguments = match parse(std::env::args().skip(1)) {
        Ok(arguments) => arguments,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let app = match router(&arguments.variant) {
        Ok(app) => app,
        Err(error) => {
            eprintln!("cannot build the {} server: {error}", arguments.variant);
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cannot start tokio: {error}");
            return ExitCode::FAILURE;
        }
    };
    let served = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, arguments.port)).await?;
        // The first line says where: the script waits for it.
        println!(
            "serving {} on http://{}/",
            arguments.variant,
            listener.local_addr()?
        );
        let service = app.into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, service).await
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("serving {} failed: {error}", arguments.variant);
            ExitCode::FAILURE
        }
    }
}
