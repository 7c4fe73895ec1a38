//! The HTTP layer beside tower_governor 0.8 (issues 22 and 33): nanoseconds per request
//! through each layer, called in process around a trivial service, one request per
//! iteration.
//!
//! # Running
//!
//! ```text
//! cargo bench --features axum --bench http
//! ```
//!
//! Criterion prints one `time: [low estimate high]` line per benchmark: nanoseconds per
//! request. Measurement is kept short (1 s warm-up, 3 s measurement, 30 samples). At the
//! end a table gives this run's figures side by side, with their ratios.
//!
//! # The setup
//!
//! Every variant wraps the same service, a `tower::service_fn` answering
//! `Response::new(Body::empty())` at once, and every request is an axum
//! `Request<Body>` for `GET /` carrying the client's address as axum's
//! `ConnectInfo<SocketAddr>`, as `into_make_service_with_connect_info::<SocketAddr>()`
//! leaves it: the one place both layers read a peer from (tower_governor's
//! `PeerIpKeyExtractor` reads only `ConnectInfo`; ours reads a bare `SocketAddr`
//! first, then `ConnectInfo`). Requests are built outside the timing
//! (`iter_batched`); the call, the poll of its future and the drop of the response are
//! timed. Each call is `poll_ready`, `call`, one poll of the future with a no-op waker,
//! then a check of the status (200, or 429 for `refused`): the harness is one generic
//! function, the same for every variant. Everything runs inside a tokio current-thread
//! runtime's context, where a server calls its layers.
//!
//! The variants:
//!
//! - `ours`: `RateLimitLayer::builder(ClientIp::peer(), TokenBucket)` with
//!   `.global(TokenBucket)`: a bucket per client and one for the whole service, decided
//!   together. It sends the `RateLimit-Policy` and `RateLimit` fields on every response,
//!   as it ships.
//! - `ours-per-key`: the same without the global bucket.
//! - `ours-off`, `ours-per-key-off`: the same two with `rate_limit_fields(false)`: no
//!   `RateLimit` fields, `Retry-After` on refusals alone.
//!
//! Like is compared with like: `ours` (fields on) beside `governor-headers`, and
//! `ours-off` and `ours-per-key-off` beside `governor` as it ships.
//! - `governor`: tower_governor's `GovernorLayer` with its default
//!   `PeerIpKeyExtractor` and no headers on admitted responses, as it ships.
//! - `governor-headers`: the same with `use_headers()` (`x-ratelimit-limit` and
//!   `x-ratelimit-remaining` on admitted responses).
//! - `service`: the service alone, without a layer: the harness's own cost.
//!
//! The quotas: for `admitted` and `1M_keys` each client gets 100,000 requests, one more
//! an hour (so no key used is ever idle within a run; nothing is forgotten); for
//! `hot_key` 10^9 at once and 10^9 a second, so the one client never runs dry however
//! long criterion runs it; for `refused` one request an hour, spent before the timing.
//! Ours' global bucket holds 10^9 and gains 10^9 a second: it never refuses here. Every
//! status is checked, and a benchmark panics on a wrong one.
//!
//! # The cases
//!
//! - `admitted`: 1,000 clients in turn, each admitted: a server's live clients, whose
//!   keys stay in the CPU's caches.
//! - `refused`: the same 1,000 clients, each with its quota spent: every request is
//!   answered 429 by the layer itself.
//! - `hot_key`: one client, admitted: the layer's cost when everything is in cache.
//! - `1M_keys`: each layer first holds 1,000,000 clients (10.0.0.0 onwards); the timed
//!   requests visit them in a scrambled order (client `i × 7,919 mod 1,000,000`), so
//!   most miss the CPU's caches. Ours holds at most 1,000,000 keys by default
//!   (`DEFAULT_MAX_KEYS`): exactly these.
//!
//! # Reading the figures
//!
//! The machine these were written on has two cores shared with other work, so absolute
//! figures are noisy; compare the layers within one run. Benchmarks build tokio with its
//! `test-util` feature (a dev-dependency of the crate), under which reading tokio's clock
//! first looks for a paused clock: a few nanoseconds a read that a release build of a
//! server does not pay. Ours reads that clock; tower_governor reads the CPU's counter.

use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use criterion::{BatchSize, Criterion};
use http::{Request, Response, StatusCode};
use tower::{Layer, Service};

#[path = "support/figures.rs"]
mod figures;
#[path = "support/http_layers.rs"]
mod http_layers;

use figures::{criterion_home, ns, ratio, row};
use http_layers::{Fields, Quota, HOURLY_100K, ONE_AN_HOUR, UNLIMITED};

const GROUP: &str = "http_layer";

/// Clients in `admitted` and `refused`.
const CLIENTS: u32 = 1_000;

/// Clients in `1M_keys`.
const KEYS: u32 = 1_000_000;

/// A prime not dividing `KEYS`: `i × STRIDE mod KEYS` visits every client once per
/// `KEYS` requests, in a scrambled order.
const STRIDE: u64 = 7_919;

const OURS: &str = "ours";
const OURS_PER_KEY: &str = "ours-per-key";
const OURS_OFF: &str = "ours-off";
const OURS_PER_KEY_OFF: &str = "ours-per-key-off";
const GOVERNOR: &str = "governor";
const GOVERNOR_HEADERS: &str = "governor-headers";
const SERVICE: &str = "service";

const ROWS: [&str; 4] = ["admitted", "refused", "hot_key", "1M_keys"];
const COLUMNS: [&str; 7] = [
    OURS,
    GOVERNOR_HEADERS,
    OURS_OFF,
    OURS_PER_KEY_OFF,
    GOVERNOR,
    OURS_PER_KEY,
    SERVICE,
];

/// The service behind every layer: an empty 200 at once.
type Trivial = tower::util::ServiceFn<
    fn(Request<Body>) -> std::future::Ready<Result<Response<Body>, Infallible>>,
>;

fn trivial() -> Trivial {
    tower::service_fn(|_request| std::future::ready(Ok(Response::new(Body::empty()))))
}

/// Ours, per key and global.
fn ours(
    quota: Quota,
) -> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible> {
    http_layers::ours(quota, true, Fields::On).layer(trivial())
}

/// Ours, per key only.
fn ours_per_key(
    quota: Quota,
) -> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible> {
    http_layers::ours(quota, false, Fields::On).layer(trivial())
}

/// Ours, per key and global, with the `RateLimit` fields off.
fn ours_off(
    quota: Quota,
) -> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible> {
    http_layers::ours(quota, true, Fields::Off).layer(trivial())
}

/// Ours, per key only, with the `RateLimit` fields off.
fn ours_per_key_off(
    quota: Quota,
) -> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible> {
    http_layers::ours(quota, false, Fields::Off).layer(trivial())
}

/// tower_governor per peer IP, as it ships: no headers on admitted responses.
fn governor(
    quota: Quota,
) -> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible> {
    http_layers::tower_governor(quota).layer(trivial())
}

/// tower_governor per peer IP with `use_headers()`.
fn governor_headers(
    quota: Quota,
) -> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible> {
    http_layers::tower_governor_with_headers(quota).layer(trivial())
}

/// The service alone.
fn service(_quota: Quota) -> Trivial {
    trivial()
}

/// The `index`-th client address: 10.0.0.0 onwards (16,777,216 of them).
fn client(index: u32) -> SocketAddr {
    let address = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 0, 0, 0)) + index);
    SocketAddr::new(IpAddr::V4(address), 40_000)
}

/// A `GET /` from `peer`, as axum hands it to its layers.
fn request_from(peer: SocketAddr) -> Request<Body> {
    let mut request = Request::new(Body::empty());
    request.extensions_mut().insert(ConnectInfo(peer));
    request
}

/// One request through `service`, the same way for every variant: ready, call, one poll
/// with a no-op waker; the response is dropped here, and its status returned.
#[inline(always)]
fn respond<S>(service: &mut S, request: Request<Body>) -> StatusCode
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
{
    let mut context = Context::from_waker(futures::task::noop_waker_ref());
    match service.poll_ready(&mut context) {
        Poll::Ready(Ok(())) => {}
        Poll::Ready(Err(never)) => match never {},
        Poll::Pending => never_pending("poll_ready"),
    }
    let future = std::pin::pin!(service.call(request));
    match future.poll(&mut context) {
        Poll::Ready(Ok(response)) => response.status(),
        Poll::Ready(Err(never)) => match never {},
        Poll::Pending => never_pending("the response future"),
    }
}

/// [`respond`] for a timed request: never inlined, so that a profiler can count the
/// timed requests alone, apart from the preloading and criterion's own work
/// (`valgrind --tool=callgrind --toggle-collect='*timed_request*'`).
#[inline(never)]
fn timed_request<S>(service: &mut S, request: Request<Body>) -> StatusCode
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
{
    respond(service, request)
}

#[cold]
#[inline(never)]
fn never_pending(what: &str) -> ! {
    panic!("{what} was pending: every layer here decides at once and the service is ready")
}

/// Panics unless `status` is `expected`: another status would mean the benchmark
/// measures the wrong path.
#[inline(always)]
fn expect(status: StatusCode, expected: StatusCode, who: &str) {
    if status != expected {
        wrong_status(status, expected, who);
    }
}

#[cold]
#[inline(never)]
fn wrong_status(status: StatusCode, expected: StatusCode, who: &str) -> ! {
    panic!("{who} answered {status} where {expected} was expected, so the figure would be wrong")
}

/// One case for one variant.
struct Case {
    name: &'static str,
    quota: Quota,
    /// The client of the `i`-th timed request.
    client: fn(u64) -> SocketAddr,
    /// Clients sent one request each before the timing (the first `preload`): every
    /// such request is admitted.
    preload: u32,
    /// What every timed request is answered.
    status: StatusCode,
}

const CASES: [Case; 4] = [
    Case {
        name: "admitted",
        quota: HOURLY_100K,
        client: |i| client((i % u64::from(CLIENTS)) as u32),
        preload: 0,
        status: StatusCode::OK,
    },
    Case {
        name: "refused",
        quota: ONE_AN_HOUR,
        client: |i| client((i % u64::from(CLIENTS)) as u32),
        preload: CLIENTS,
        status: StatusCode::TOO_MANY_REQUESTS,
    },
    Case {
        name: "hot_key",
        quota: UNLIMITED,
        client: |_| client(7),
        preload: 0,
        status: StatusCode::OK,
    },
    Case {
        name: "1M_keys",
        quota: HOURLY_100K,
        client: |i| client((i.wrapping_mul(STRIDE) % u64::from(KEYS)) as u32),
        preload: KEYS,
        status: StatusCode::OK,
    },
];

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30)
}

/// The service `make` builds for `case`, named `who`, with its clients preloaded.
fn prepared<S>(case: &Case, who: &str, make: fn(Quota) -> S) -> S
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
{
    let mut service = make(case.quota);
    if who != SERVICE {
        for index in 0..case.preload {
            let status = respond(&mut service, request_from(client(index)));
            expect(status, StatusCode::OK, who);
        }
    }
    service
}

/// Benchmarks `case` through the service `make` builds, named `who`. The service is made
/// and preloaded when criterion first runs the benchmark (not at all when a filter
/// leaves it out), and dropped before the next benchmark's.
fn bench<S>(c: &mut Criterion, case: &Case, who: &str, make: fn(Quota) -> S)
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
{
    let expected = if who == SERVICE {
        StatusCode::OK
    } else {
        case.status
    };
    let mut service = None;
    let mut group = c.benchmark_group(GROUP);
    let mut i = 0u64;
    group.bench_function(format!("{}/{who}", case.name), |b| {
        let service = service.get_or_insert_with(|| prepared(case, who, make));
        b.iter_batched(
            || {
                i += 1;
                request_from((case.client)(i))
            },
            |request| {
                expect(
                    timed_request(black_box(&mut *service), request),
                    expected,
                    who,
                )
            },
            BatchSize::SmallInput,
        );
    });
    group.finish();
}

fn layers(c: &mut Criterion) {
    for case in &CASES {
        bench(c, case, OURS, ours);
        bench(c, case, GOVERNOR_HEADERS, governor_headers);
        bench(c, case, OURS_OFF, ours_off);
        bench(c, case, OURS_PER_KEY_OFF, ours_per_key_off);
        bench(c, case, GOVERNOR, governor);
        bench(c, case, OURS_PER_KEY, ours_per_key);
        bench(c, case, SERVICE, service);
    }
}

/// This run's figures side by side, with the ratios of ours to tower_governor's.
fn print_summary(since: std::time::SystemTime) {
    let Some(home) = criterion_home() else {
        eprintln!("summary: cannot tell where criterion keeps its figures");
        return;
    };
    println!();
    println!("Nanoseconds per request, this run, like for like: the fields on beside");
    println!("tower_governor's use_headers(), the fields off beside tower_governor as it ships:");
    println!();
    println!(
        "| per request | ours, fields on (per key + global) | tower_governor, use_headers \
         | ÷ | ours, fields off (per key + global) | ours, fields off (per key) \
         | tower_governor | ÷ (+ global) | ÷ (per key) | ours, fields on (per key) \
         | service alone |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for name in ROWS {
        let [ours, governor_headers, ours_off, ours_per_key_off, governor, ours_per_key, service] =
            <[Option<f64>; 7]>::try_from(row(&home, GROUP, name, &COLUMNS, since))
                .expect("a figure or none for each column");
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            ns(ours),
            ns(governor_headers),
            ratio(ours, governor_headers),
            ns(ours_off),
            ns(ours_per_key_off),
            ns(governor),
            ratio(ours_off, governor),
            ratio(ours_per_key_off, governor),
            ns(ours_per_key),
            ns(service),
        );
    }
}

fn main() {
    let since = std::time::SystemTime::now();
    // Layers run inside a runtime in a server: so they do here.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let _context = runtime.enter();
    let mut criterion = config().configure_from_args();
    layers(&mut criterion);
    criterion.final_summary();
    print_summary(since);
}
