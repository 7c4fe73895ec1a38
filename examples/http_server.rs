//! An HTTP server that limits each client and, behind that, the whole server, and
//! keeps its memory bounded under a flood of clients.
//!
//! Each client gets a [`SlidingLog`] (10 requests in any 10 s, exactly), kept per key
//! by [`Keyed`], which forgets a client once its window is empty again. A client is an
//! IPv4 address, or the /64 prefix of an IPv6 address ([`ClientKey`]), so that one IPv6
//! host cannot multiply its budget across the addresses it is handed. Beside it one
//! [`TokenBucket`] caps the whole server at 100 requests per second, and a request takes
//! from both in one decision ([`all`]), or from neither. A refused
//! request gets `429 Too Many Requests` with `Retry-After` in whole seconds, rounded up
//! (a client that obeys it is never refused for coming back early), and the
//! `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset` headers of the IETF
//! draft; an admitted one gets `RateLimit-Limit` and `RateLimit-Remaining`.
//!
//! At most [`MAX_CLIENTS`] clients are held at once, so a flood from ever new addresses
//! takes a bounded amount of memory: a new client that finds that many others busy gets
//! `503 Service Unavailable` with a `Retry-After` of one client window (see
//! [`Refusal::TooManyClients`]), and the clients already held are served as usual.
//! Once every client window the server forgets the clients whose windows are empty, so
//! the memory a flood took comes back once it stops.
//!
//! ```text
//! cargo run --example http_server              # serves http://127.0.0.1:3000/
//! curl -i http://127.0.0.1:3000/               # the 11th within 10 s gets a 429
//! cargo run --example http_server -- --demo    # a free port; sends itself 12 requests
//! ```

use std::convert::Infallible;
use std::future::IntoFuture;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use token_bucket::{
    all, ConfigError, Keyed, Limiter, Rate, SlidingLog, TokenBucket, TryAcquireAllError,
    TryAcquireError,
};
use tokio::time::MissedTickBehavior;

/// Requests one client may make in any `CLIENT_WINDOW`.
pub const CLIENT_LIMIT: u64 = 10;
/// The window of `CLIENT_LIMIT`.
pub const CLIENT_WINDOW: Duration = Duration::from_secs(10);
/// The whole server's rate, with a burst of one second's worth.
pub const SERVER_RATE: Rate = Rate::per_second(100);
/// The most clients held in memory at once. A client with requests in its window takes
/// about 450 bytes (measured as resident memory on Linux, with all 10 permits logged), so
/// this bounds the key table near 45 MB however many addresses a flood comes from. A new
/// client arriving while this many others are busy is refused with a `503` (see
/// [`Refusal::TooManyClients`]); clients already held are served as usual.
pub const MAX_CLIENTS: usize = 100_000;

/// Who a request counts against: an IPv4 client by its address, an IPv6 client by the
/// /64 prefix of its address.
///
/// An IPv6 host is commonly handed a whole /64 (and privacy addresses rotate within it),
/// so one client may send from 2^64 addresses: keyed apart, each would get a budget of
/// its own and a key of its own in memory. An IPv4-mapped IPv6 address
/// (`::ffff:a.b.c.d`, which a dual-stack socket reports for an IPv4 peer) is the IPv4
/// client it names, so that one client is one key whichever socket it came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientKey {
    /// An IPv4 client's address.
    V4(Ipv4Addr),
    /// An IPv6 client's /64 prefix: its address with the low 64 bits zero.
    V6(Ipv6Addr),
}

impl From<IpAddr> for ClientKey {
    fn from(address: IpAddr) -> ClientKey {
        match address {
            IpAddr::V4(v4) => ClientKey::V4(v4),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => ClientKey::V4(v4),
                None => ClientKey::V6(Ipv6Addr::from(u128::from(v6) & !u128::from(u64::MAX))),
            },
        }
    }
}

/// The limits every request passes: its client's and the server's, in one decision.
#[derive(Debug)]
pub struct Limits {
    per_client: Keyed<ClientKey, SlidingLog>,
    client_limit: u64,
    client_window: Duration,
    server: TokenBucket,
}

impl Limits {
    /// Each client ([`ClientKey`]) gets a limiter like `per_client`, at most
    /// `max_clients` of them held at once; all share `server`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroMaxKeys`] for a `max_clients` of zero.
    pub fn new(
        per_client: SlidingLog,
        max_clients: usize,
        server: TokenBucket,
    ) -> Result<Limits, ConfigError> {
        Ok(Limits {
            client_limit: per_client.limit(),
            client_window: per_client.window(),
            per_client: Keyed::builder(per_client).max_keys(max_clients).build()?,
            server,
        })
    }

    /// The example's limits, from the constants above.
    ///
    /// # Errors
    ///
    /// None for these constants; the constructors refuse bad settings with a
    /// [`ConfigError`].
    pub fn example() -> Result<Limits, ConfigError> {
        Limits::new(
            SlidingLog::new(CLIENT_LIMIT, CLIENT_WINDOW)?,
            MAX_CLIENTS,
            TokenBucket::new(SERVER_RATE, SERVER_RATE.amount())?,
        )
    }

    /// Admits one request from `client`, or says why not and how long it should wait.
    ///
    /// The client's limit and the server's are one decision ([`all`]): the request is
    /// counted by both at one instant, or by neither. So a request the server refuses
    /// never uses up its client's permits, not even for a moment, and no other request
    /// can see a permit that is about to be given back.
    ///
    /// The whole admission is here, so that the handler only turns its answer into HTTP.
    pub fn admit(&self, client: IpAddr) -> Result<(), Refusal> {
        let client = ClientKey::from(client);
        let client_limit = match self.per_client.limiter(&client) {
            Ok(limiter) => limiter,
            Err(TryAcquireError::TooManyKeys { .. }) => {
                // The error says no more than the bound. Every held client that sends
                // nothing more is forgettable one window after its last request, so
                // that is how long to come back after (see `Refusal::TooManyClients`).
                return Err(Refusal::TooManyClients {
                    retry_after: self.client_window,
                });
            }
            Err(other) => return Err(Refusal::Broken(other.to_string())),
        };
        let both = all((client_limit, &self.server))
            .map_err(|error| Refusal::Broken(error.to_string()))?;
        match both.try_acquire(1) {
            Ok(()) => Ok(()),
            // The later of the two limits' hints: when both would admit it.
            Err(TryAcquireAllError::Limited { retry_after }) => {
                Err(Refusal::Limited { retry_after })
            }
            Err(other) => Err(Refusal::Broken(other.to_string())),
        }
    }

    /// Permits `client` has left in its window now.
    pub fn remaining(&self, client: IpAddr) -> u64 {
        self.per_client
            .get(&ClientKey::from(client))
            .map_or(self.client_limit, |limiter| limiter.available())
    }

    /// Requests the whole server may still admit now: what its bucket holds.
    pub fn server_remaining(&self) -> u64 {
        self.server.available()
    }

    /// Clients held in memory now: those with permits counted in their window. Never
    /// more than [`max_clients`](Limits::max_clients).
    pub fn clients_held(&self) -> usize {
        self.per_client.len()
    }

    /// Forgets every client whose window is empty, and returns how many it forgot.
    pub fn forget_idle_clients(&self) -> usize {
        self.per_client.retain_recent()
    }

    /// The most clients held at once.
    pub fn max_clients(&self) -> usize {
        // Always set: `new` builds the table with a bound.
        self.per_client.max_keys().unwrap_or(usize::MAX)
    }
}

/// Why [`Limits::admit`] refused a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The client's budget, or the server's, is spent for now: a `429`.
    Limited {
        /// How long until the same request could be admitted.
        retry_after: Duration,
    },
    /// The client is new and [`max_clients`](Limits::max_clients) others are busy, so
    /// it cannot be given a limiter now: a `503 Service Unavailable`.
    ///
    /// `retry_after` is the per-client window, a conservative guess: the table's
    /// `TooManyKeys` error carries no hint of when room comes. A held client is
    /// forgotten once its window is empty, so within one window every client that sent
    /// nothing more makes room; clients that keep sending keep theirs, and then no
    /// wait is sure to be enough.
    TooManyClients {
        /// How long to wait before coming back.
        retry_after: Duration,
    },
    /// Cannot happen with this example's settings; answered with a 500 all the same.
    Broken(String),
}

/// The application: one route, `/`, behind both limits.
pub fn app(limits: Arc<Limits>) -> Router {
    Router::new().route("/", get(hello)).with_state(limits)
}

async fn hello(
    State(limits): State<Arc<Limits>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
) -> Response {
    let client = peer.ip();
    let verdict = limits.admit(client);
    match verdict {
        Ok(()) => (quota_headers(&limits, client), "hello\n").into_response(),
        Err(Refusal::Limited { retry_after }) => {
            let mut headers = quota_headers(&limits, client);
            let seconds = HeaderValue::from(retry_after_seconds(retry_after));
            headers.insert("retry-after", seconds.clone());
            headers.insert("ratelimit-reset", seconds);
            (
                StatusCode::TOO_MANY_REQUESTS,
                headers,
                "too many requests\n",
            )
                .into_response()
        }
        // Not the client's quota at fault, so no `RateLimit-*`: only when to come back.
        Err(Refusal::TooManyClients { retry_after }) => (
            StatusCode::SERVICE_UNAVAILABLE,
            [("retry-after", retry_after_seconds(retry_after).to_string())],
            "too many clients at once; retry later\n",
        )
            .into_response(),
        Err(Refusal::Broken(why)) => {
            (StatusCode::INTERNAL_SERVER_ERROR, format!("{why}\n")).into_response()
        }
    }
}

/// `RateLimit-Limit` and `RateLimit-Remaining` of `client`'s quota, as it is now.
fn quota_headers(limits: &Limits, client: IpAddr) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("ratelimit-limit", HeaderValue::from(limits.client_limit));
    headers.insert(
        "ratelimit-remaining",
        HeaderValue::from(limits.remaining(client)),
    );
    headers
}

/// `Retry-After` in whole seconds, rounded up, so that a client waiting that long is not
/// refused again for coming back early.
pub fn retry_after_seconds(retry_after: Duration) -> u64 {
    retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0)
}

/// Serves the application on `listener`, with each connection's peer address known, and
/// meanwhile forgets idle clients once every client window.
pub async fn serve(listener: tokio::net::TcpListener, limits: Arc<Limits>) -> std::io::Result<()> {
    let service = app(Arc::clone(&limits)).into_make_service_with_connect_info::<SocketAddr>();
    tokio::select! {
        served = axum::serve(listener, service).into_future() => served,
        never = forget_idle_clients_periodically(limits) => match never {},
    }
}

/// Forgets the clients whose windows are empty, once every client window, for ever.
///
/// `Keyed` forgets idle clients by itself only as new ones come, so after a flood its
/// table would stay full until the next one; this frees that memory in quiet periods
/// too. A client is then held at most two windows after its last request. A sweep looks
/// at every client held (about 30 ms for 100,000 on a release build), so it runs on the
/// blocking pool, not on a thread that serves requests.
async fn forget_idle_clients_periodically(limits: Arc<Limits>) -> Infallible {
    let mut ticks = tokio::time::interval(limits.client_window);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let limits = Arc::clone(&limits);
        if let Err(error) = tokio::task::spawn_blocking(move || limits.forget_idle_clients()).await
        {
            // Only a bug panics there; the table stays consistent, so serve on.
            eprintln!("forgetting idle clients failed: {error}");
        }
    }
}

/// Sends `requests` GET requests to `address` from the client IP `from` (any address
/// in 127.0.0.0/8 works on loopback) and returns each answer's status and headers, in
/// order.
pub async fn send_requests(
    address: SocketAddr,
    from: IpAddr,
    requests: u64,
) -> Result<Vec<(StatusCode, HeaderMap)>, Box<dyn std::error::Error + Send + Sync>> {
    let mut connector = HttpConnector::new();
    connector.set_local_address(Some(from));
    let client = Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(connector);
    let uri: hyper::Uri = format!("http://{address}/").parse()?;
    let mut answers = Vec::new();
    for _ in 0..requests {
        let response = client.get(uri.clone()).await?;
        answers.push((response.status(), response.headers().clone()));
    }
    Ok(answers)
}

#[allow(dead_code)] // The test includes this file for its functions, not its `main`.
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let demo = std::env::args().any(|arg| arg == "--demo");
    let port = if demo { 0 } else { 3000 };
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port)).await?;
    let address = listener.local_addr()?;
    let limits = Arc::new(Limits::example()?);
    println!(
        "serving http://{address}/ : {CLIENT_LIMIT} requests per client in any {CLIENT_WINDOW:?} \
         (at most {MAX_CLIENTS} clients held), {SERVER_RATE} for the whole server"
    );
    let server = tokio::spawn(serve(listener, limits));
    if !demo {
        server.await??;
        return Ok(());
    }
    let from = IpAddr::V4(Ipv4Addr::LOCALHOST);
    for (number, (status, headers)) in send_requests(address, from, CLIENT_LIMIT + 2)
        .await?
        .into_iter()
        .enumerate()
    {
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .unwrap_or("-")
                .to_owned()
        };
        println!(
            "request {:>2}: {status}  RateLimit-Remaining: {}  Retry-After: {}",
            number + 1,
            header("ratelimit-remaining"),
            header("retry-after"),
        );
    }
    server.abort();
    Ok(())
}
