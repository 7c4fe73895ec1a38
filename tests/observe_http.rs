//! A named HTTP layer reports (issue 24): exact counts of requests admitted, refused (by
//! which limit), refused in shadow, allow-listed and waited, read with `metrics-util`'s
//! debugging recorder after scripted requests through the real layer on paused time, and
//! its `tracing` events at their levels. An unnamed layer registers nothing.
#![cfg(all(feature = "http", feature = "metrics", feature = "tracing"))]

mod common;

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use common::observe::{has_line, lines_with_spans_at, Metrics, ONE_AT_A_TIME};
use http::{Request, Response, StatusCode};
use metrics_util::debugging::{DebuggingRecorder, Snapshotter};
use token_bucket::http::{ClientIp, ClientKey, LocalLayer, RateLimitLayer};
use token_bucket::observe::{
    HTTP_ADMITTED_REQUESTS, HTTP_ALLOW_LISTED_REQUESTS, HTTP_REFUSED_REQUESTS,
    HTTP_SHADOW_REFUSED_REQUESTS, HTTP_WAITED_REQUESTS, HTTP_WAIT_SECONDS,
};
use token_bucket::{FixedWindow, Rate, SlidingLog, TokenBucket};
use tower::{Layer, Service, ServiceExt};
use tracing_subscriber::fmt::format::FmtSpan;

/// Runs `test` on a current-thread runtime whose clock is paused, alone.
fn paused<F: Future>(test: F) -> F::Output {
    let _alone = ONE_AT_A_TIME.blocking_lock();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(test)
}

/// The service behind the layer: answers 200 with an empty body.
type OkService = tower::util::ServiceFn<
    fn(Request<()>) -> std::future::Ready<Result<Response<String>, Infallible>>,
>;

fn ok_service() -> OkService {
    tower::service_fn(|_request| std::future::ready(Ok(Response::new(String::new()))))
}

/// A request from `peer`, or without a peer (so without a key) for `None`.
fn request_from(peer: Option<&str>) -> Request<()> {
    let mut request = Request::get("/").body(()).unwrap();
    if let Some(peer) = peer {
        let peer: IpAddr = peer.parse().unwrap();
        request
            .extensions_mut()
            .insert(SocketAddr::new(peer, 40_000));
    }
    request
}

/// Sends a request from `peer` through `service` and returns its status.
async fn send<S>(service: &mut S, peer: Option<&str>) -> StatusCode
where
    S: Service<Request<()>, Response = Response<String>, Error = Infallible>,
{
    let request = request_from(peer);
    let response = service.ready().await.unwrap().call(request).await.unwrap();
    response.status()
}

/// What `build` returns, run with a recorder of its own installed (a layer registers its
/// metrics when it is built), and what reads that recorder.
fn recorded<T>(build: impl FnOnce() -> T) -> (T, Snapshotter) {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    (metrics::with_local_recorder(&recorder, build), snapshotter)
}

/// Every refusal of the layer `limiter`, by `limit` label, in the label's order.
fn refusals(metrics: &Metrics, limiter: &str) -> [u64; 5] {
    [
        "key",
        "global",
        "too_many_keys",
        "missing_key",
        "unavailable",
    ]
    .map(|limit| {
        let labels = [("limiter", limiter), ("limit", limit)];
        metrics.counter(HTTP_REFUSED_REQUESTS, &labels)
    })
}

/// Each client: 3 at once, one more a second. The whole service: 5 in each 10 s. One
/// allow-listed key and one allow-listed network.
fn edge_layer() -> LocalLayer<ClientIp, TokenBucket, FixedWindow> {
    {
        RateLimitLayer::builder(
            ClientIp::peer(),
            TokenBucket::new(Rate::per_second(1), 3).unwrap(),
        )
        .global(FixedWindow::new(5, Duration::from_secs(10)).unwrap())
        .allow_keys([ClientKey::from("192.0.2.7".parse::<IpAddr>().unwrap())])
        .allow_cidrs(["198.51.100.0/24".parse().unwrap()])
        .name("edge")
        .build()
        .unwrap()
    }
}

/// Admitted, refused by the client's limit, by the global one, for want of a key, and
/// allow-listed: each counted exactly, under the limit that refused.
#[test]
fn a_named_layer_counts_each_request_under_what_decided_it() {
    paused(async {
        let (layer, snapshotter) = recorded(edge_layer);
        assert_eq!(layer.name(), Some("edge"));
        let mut service = layer.layer(ok_service());
        let mut statuses = Vec::new();
        // The first client spends its 3 and is refused by its own limit.
        for _ in 0..4 {
            statuses.push(send(&mut service, Some("192.0.2.1")).await);
        }
        // The second spends the global limit's last 2, and is refused by it.
        for _ in 0..3 {
            statuses.push(send(&mut service, Some("192.0.2.2")).await);
        }
        // Allow-listed: a key and a network, twice each, never counted against a limit.
        for peer in ["192.0.2.7", "198.51.100.9", "192.0.2.7", "198.51.100.9"] {
            statuses.push(send(&mut service, Some(peer)).await);
        }
        // No peer, so no key: refused.
        statuses.push(send(&mut service, None).await);
        use StatusCode as S;
        assert_eq!(
            statuses,
            [
                S::OK,
                S::OK,
                S::OK,
                S::TOO_MANY_REQUESTS,
                S::OK,
                S::OK,
                S::TOO_MANY_REQUESTS,
                S::OK,
                S::OK,
                S::OK,
                S::OK,
                S::INTERNAL_SERVER_ERROR,
            ]
        );
        let metrics = Metrics::of(&snapshotter);
        let labels = [("limiter", "edge")];
        assert_eq!(metrics.counter(HTTP_ADMITTED_REQUESTS, &labels), 5);
        assert_eq!(refusals(&metrics, "edge"), [1, 1, 0, 1, 0]);
        assert_eq!(metrics.counter(HTTP_ALLOW_LISTED_REQUESTS, &labels), 4);
        assert_eq!(metrics.counter(HTTP_SHADOW_REFUSED_REQUESTS, &labels), 0);
        assert_eq!(metrics.counter(HTTP_WAITED_REQUESTS, &labels), 0);
        assert_eq!(
            metrics.histogram(HTTP_WAIT_SECONDS, &labels),
            Vec::<f64>::new()
        );
        // Only the layer's own series, labelled with its name, never with a client's key:
        // 5 counters, the refusals under 5 labels, and the histogram.
        assert_eq!(metrics.series().len(), 10, "{:#?}", metrics.series());
        for key in metrics.series() {
            let label_names: Vec<_> = key.key().labels().map(|label| label.key()).collect();
            assert!(
                label_names == ["limiter"] || label_names == ["limiter", "limit"],
                "{key:?}"
            );
        }
    });
}

/// A table too full for a new key refuses it under `too_many_keys`.
#[test]
fn a_full_key_table_is_counted_as_too_many_keys() {
    paused(async {
        let (layer, snapshotter) = recorded(|| {
            RateLimitLayer::builder(
                ClientIp::peer(),
                SlidingLog::new(2, Duration::from_secs(30)).unwrap(),
            )
            .max_keys(1)
            .name("small")
            .build()
            .unwrap()
        });
        let mut service = layer.layer(ok_service());
        assert_eq!(send(&mut service, Some("192.0.2.1")).await, StatusCode::OK);
        for _ in 0..2 {
            let status = send(&mut service, Some("192.0.2.2")).await;
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        }
        let metrics = Metrics::of(&snapshotter);
        let labels = [("limiter", "small")];
        assert_eq!(metrics.counter(HTTP_ADMITTED_REQUESTS, &labels), 1);
        assert_eq!(refusals(&metrics, "small"), [0, 0, 2, 0, 0]);
    });
}

/// A shadow layer counts what it would have refused (a spent limit, a missing key) as
/// shadow-refused, not refused, and as many as `shadow_refusals` says.
#[test]
fn a_shadow_layer_counts_what_it_would_have_refused() {
    paused(async {
        let (layer, snapshotter) = recorded(|| {
            RateLimitLayer::builder(
                ClientIp::peer(),
                FixedWindow::new(2, Duration::from_secs(60)).unwrap(),
            )
            .shadow()
            .name("trial")
            .build()
            .unwrap()
        });
        let mut service = layer.layer(ok_service());
        for _ in 0..4 {
            assert_eq!(send(&mut service, Some("192.0.2.1")).await, StatusCode::OK);
        }
        assert_eq!(send(&mut service, None).await, StatusCode::OK);
        let metrics = Metrics::of(&snapshotter);
        let labels = [("limiter", "trial")];
        assert_eq!(metrics.counter(HTTP_ADMITTED_REQUESTS, &labels), 2);
        assert_eq!(metrics.counter(HTTP_SHADOW_REFUSED_REQUESTS, &labels), 3);
        assert_eq!(layer.shadow_refusals(), 3);
        assert_eq!(refusals(&metrics, "trial"), [0; 5]);
    });
}

/// Sends a request from `peer` for each of `peers` through clones of `service`, each
/// joining the line in turn, and returns each one's status and when it was answered.
async fn send_in_turn<S>(service: &S, peers: &[&'static str]) -> Vec<(StatusCode, Duration)>
where
    S: Service<Request<()>, Response = Response<String>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    let start = tokio::time::Instant::now();
    let mut calls = Vec::new();
    for &peer in peers {
        let mut service = service.clone();
        calls.push(tokio::spawn(async move {
            let status = send(&mut service, Some(peer)).await;
            (status, start.elapsed())
        }));
        tokio::task::yield_now().await;
    }
    let mut answers = Vec::new();
    for call in calls {
        answers.push(call.await.unwrap());
    }
    answers
}

/// With `wait_up_to`, a request admitted after waiting counts as admitted and as waited,
/// with the seconds it waited; one that could not pass in time is refused by the limit
/// it would have waited for: its client's, or the global one.
#[test]
fn waits_are_counted_with_the_seconds_waited() {
    paused(async {
        // Each client 2 a second, one at once; up to 1 s of waiting.
        let (per_key, snapshotter) = recorded(|| {
            RateLimitLayer::builder(
                ClientIp::peer(),
                TokenBucket::new(Rate::per_second(2), 1).unwrap(),
            )
            .wait_up_to(Duration::from_secs(1))
            .name("queue")
            .build()
            .unwrap()
        });
        let answers = send_in_turn(&per_key.layer(ok_service()), &["192.0.2.1"; 4]).await;
        use StatusCode as S;
        let ms = Duration::from_millis;
        // At once, then every 500 ms; the fourth would pass at 1.5 s, past the bound.
        assert_eq!(
            answers,
            [
                (S::OK, ms(0)),
                (S::OK, ms(500)),
                (S::OK, ms(1_000)),
                (S::TOO_MANY_REQUESTS, ms(0)),
            ]
        );
        let metrics = Metrics::of(&snapshotter);
        let labels = [("limiter", "queue")];
        assert_eq!(metrics.counter(HTTP_ADMITTED_REQUESTS, &labels), 3);
        assert_eq!(metrics.counter(HTTP_WAITED_REQUESTS, &labels), 2);
        assert_eq!(metrics.histogram(HTTP_WAIT_SECONDS, &labels), [0.5, 1.0]);
        assert_eq!(refusals(&metrics, "queue"), [1, 0, 0, 0, 0]);

        // Now a global limit of 1 a second, one at once, that each new client waits for.
        let (global, snapshotter) = recorded(|| {
            RateLimitLayer::builder(
                ClientIp::peer(),
                TokenBucket::new(Rate::per_second(1), 1).unwrap(),
            )
            .global(TokenBucket::new(Rate::per_second(1), 1).unwrap())
            .wait_up_to(Duration::from_secs(1))
            .name("shared")
            .build()
            .unwrap()
        });
        let peers = ["192.0.2.1", "192.0.2.2", "192.0.2.3"];
        let answers = send_in_turn(&global.layer(ok_service()), &peers).await;
        assert_eq!(
            answers,
            [
                (S::OK, ms(0)),
                (S::OK, ms(1_000)),
                (S::TOO_MANY_REQUESTS, ms(0)),
            ]
        );
        let metrics = Metrics::of(&snapshotter);
        let labels = [("limiter", "shared")];
        assert_eq!(metrics.counter(HTTP_ADMITTED_REQUESTS, &labels), 2);
        assert_eq!(metrics.counter(HTTP_WAITED_REQUESTS, &labels), 1);
        assert_eq!(metrics.histogram(HTTP_WAIT_SECONDS, &labels), [1.0]);
        assert_eq!(refusals(&metrics, "shared"), [0, 1, 0, 0, 0]);

        // A request that waits its client's 500 ms, then finds the global window spent by
        // two other clients meanwhile: refused by the global limit at the bound, and not
        // counted as waited, since it was not admitted.
        let (late, snapshotter) = recorded(|| {
            RateLimitLayer::builder(
                ClientIp::peer(),
                TokenBucket::new(Rate::per_second(2), 1).unwrap(),
            )
            .global(FixedWindow::new(3, Duration::from_secs(10)).unwrap())
            .wait_up_to(Duration::from_secs(1))
            .name("late")
            .build()
            .unwrap()
        });
        let peers = ["192.0.2.1", "192.0.2.1", "192.0.2.2", "192.0.2.3"];
        let answers = send_in_turn(&late.layer(ok_service()), &peers).await;
        // Refused at the timer's first tick past the bound: tokio's timers tick each ms.
        let bound = ms(1_001);
        assert_eq!(
            answers,
            [
                (S::OK, ms(0)),
                (S::TOO_MANY_REQUESTS, bound),
                (S::OK, ms(0)),
                (S::OK, ms(0)),
            ]
        );
        let metrics = Metrics::of(&snapshotter);
        let labels = [("limiter", "late")];
        assert_eq!(metrics.counter(HTTP_ADMITTED_REQUESTS, &labels), 3);
        assert_eq!(metrics.counter(HTTP_WAITED_REQUESTS, &labels), 0);
        assert_eq!(
            metrics.histogram(HTTP_WAIT_SECONDS, &labels),
            Vec::<f64>::new()
        );
        assert_eq!(refusals(&metrics, "late"), [0, 1, 0, 0, 0]);
    });
}

/// A layer without a name registers and records nothing, whatever its requests.
#[test]
fn an_unnamed_layer_reports_nothing() {
    paused(async {
        let (layer, snapshotter) = recorded(|| {
            RateLimitLayer::builder(
                ClientIp::peer(),
                TokenBucket::new(Rate::per_second(2), 1).unwrap(),
            )
            .global(FixedWindow::new(3, Duration::from_secs(10)).unwrap())
            .allow_cidrs(["198.51.100.0/24".parse().unwrap()])
            .wait_up_to(Duration::from_secs(1))
            .build()
            .unwrap()
        });
        assert_eq!(layer.name(), None);
        let service = layer.layer(ok_service());
        let peers = ["192.0.2.1", "192.0.2.1", "192.0.2.2", "192.0.2.3"];
        let answers = send_in_turn(&service, &peers).await;
        let statuses: Vec<_> = answers.iter().map(|(status, _)| *status).collect();
        use StatusCode as S;
        // The second waits for its client's limit, then for a global window the others spent.
        assert_eq!(statuses, [S::OK, S::TOO_MANY_REQUESTS, S::OK, S::OK]);
        let mut service = service;
        assert_eq!(send(&mut service, Some("198.51.100.1")).await, S::OK);
        assert_eq!(send(&mut service, None).await, S::INTERNAL_SERVER_ERROR);
        assert!(snapshotter.snapshot().into_vec().is_empty());
    });
}

/// Events at their levels: each refusal (by the client's limit, for want of a key, in a
/// wait that could not pass) at `debug` with the limit and `Retry-After`, the client's
/// address only at `trace`; the wait's `debug` span, and the admission after waiting at
/// `trace` inside it. Nothing at `info`, and nothing from an unnamed layer.
#[test]
fn a_named_layer_emits_its_events_at_their_levels() {
    paused(async {
        for (level, expected) in [
            (tracing::Level::TRACE, 6),
            (tracing::Level::DEBUG, 3),
            (tracing::Level::INFO, 0),
        ] {
            let lines = lines_with_spans_at(level, FmtSpan::NEW, || async {
                let named = |name: Option<&str>| {
                    let builder = RateLimitLayer::builder(
                        ClientIp::peer(),
                        TokenBucket::new(Rate::per_second(1), 1).unwrap(),
                    )
                    .wait_up_to(Duration::from_secs(1));
                    match name {
                        Some(name) => builder.name(name).build().unwrap(),
                        None => builder.build().unwrap(),
                    }
                };
                for layer in [named(Some("edge")), named(None)] {
                    let service = layer.layer(ok_service());
                    // At once; after 1 s of waiting; refused at once, as it would wait 2 s.
                    let answers = send_in_turn(&service, &["192.0.2.1"; 3]).await;
                    let statuses: Vec<_> = answers.iter().map(|(status, _)| *status).collect();
                    use StatusCode as S;
                    assert_eq!(statuses, [S::OK, S::OK, S::TOO_MANY_REQUESTS]);
                    let mut service = service;
                    assert_eq!(send(&mut service, None).await, S::INTERNAL_SERVER_ERROR);
                }
            })
            .await;
            assert_eq!(lines.len(), expected, "{level}: {lines:#?}");
            let has =
                |level: &str, text: &str| has_line(&lines, level, text, &["limiter=\"edge\""]);
            if level >= tracing::Level::DEBUG {
                assert!(has("DEBUG", "http_wait{"), "{lines:#?}");
                assert!(
                    has(
                        "DEBUG",
                        "request refused limiter=\"edge\" limit=\"key\" retry_after=Some(2s)"
                    ),
                    "{lines:#?}"
                );
                assert!(
                    has(
                        "DEBUG",
                        "request refused limiter=\"edge\" limit=\"missing_key\" retry_after=None"
                    ),
                    "{lines:#?}"
                );
            }
            if level >= tracing::Level::TRACE {
                assert!(
                    has(
                        "TRACE",
                        "request admitted after waiting limiter=\"edge\" waited=1s"
                    ),
                    "{lines:#?}"
                );
                assert!(
                    has(
                        "TRACE",
                        "refused client limiter=\"edge\" client_ip=Some(192.0.2.1)"
                    ),
                    "{lines:#?}"
                );
                assert!(
                    has("TRACE", "refused client limiter=\"edge\" client_ip=None"),
                    "{lines:#?}"
                );
            } else {
                // The client's address is never written below `trace`.
                assert!(
                    lines.iter().all(|line| !line.contains("192.0.2.1")),
                    "{lines:#?}"
                );
            }
        }
    });
}

#[cfg(feature = "redis")]
#[path = "common/redis_server.rs"]
#[allow(dead_code)] // The cluster half of the harness is not used here.
mod redis_server;

/// Over Redis (a real `redis-server`, on its own clock, so limits per hour): the client's
/// key and the global one are decided in one script call, and the label says which
/// refused; a Redis that is down, failing closed, refuses as `unavailable`.
#[cfg(feature = "redis")]
#[test]
fn a_named_redis_layer_counts_which_limit_refused() {
    use token_bucket::redis::{FailurePolicy, RedisFixedWindow, RedisOptions, RedisTokenBucket};

    let _alone = ONE_AT_A_TIME.blocking_lock();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut redis = redis_server::RedisServer::start();
        let client = token_bucket::redis::driver::Client::open(redis.url()).unwrap();
        let connection = token_bucket::redis::driver::aio::ConnectionManager::new(client)
            .await
            .unwrap();
        let options =
            RedisOptions::new(FailurePolicy::FailClosed).with_timeout(Duration::from_secs(2));
        let hour = Duration::from_secs(3600);
        let per_client =
            RedisFixedWindow::new(connection.clone(), 2, hour, options.clone()).unwrap();
        let everyone = RedisTokenBucket::new(
            connection,
            Rate::per_hour(3),
            3,
            options.with_prefix("global:"),
        )
        .unwrap();
        let (layer, snapshotter) = recorded(|| {
            RateLimitLayer::redis_builder(ClientIp::peer(), per_client)
                .global(&everyone, "all")
                .name("fleet")
                .build()
                .unwrap()
        });
        let mut service = layer.layer(ok_service());
        let mut statuses = Vec::new();
        // The first client spends its 2, then is refused by its own limit; the second
        // spends the global limit's last, then is refused by it.
        for peer in [
            "192.0.2.1",
            "192.0.2.1",
            "192.0.2.1",
            "192.0.2.2",
            "192.0.2.2",
        ] {
            statuses.push(send(&mut service, Some(peer)).await);
        }
        redis.stop();
        statuses.push(send(&mut service, Some("192.0.2.3")).await);
        use StatusCode as S;
        assert_eq!(
            statuses,
            [
                S::OK,
                S::OK,
                S::TOO_MANY_REQUESTS,
                S::OK,
                S::TOO_MANY_REQUESTS,
                S::SERVICE_UNAVAILABLE,
            ]
        );
        let metrics = Metrics::of(&snapshotter);
        let labels = [("limiter", "fleet")];
        assert_eq!(metrics.counter(HTTP_ADMITTED_REQUESTS, &labels), 3);
        assert_eq!(refusals(&metrics, "fleet"), [1, 1, 0, 0, 1]);
        assert_eq!(metrics.counter(HTTP_WAITED_REQUESTS, &labels), 0);
    });
}
