#![cfg(feature = "tower")]
//! The tower layer: requests are spaced by the shared bucket, served first in, first out
//! across clones, and tokens reserved but not spent go back.

mod common;

use std::convert::Infallible;
use std::future::poll_fn;
use std::io;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use common::{assert_at, assert_now, bucket_with, empty_bucket, ms, secs, yield_until};
use token_bucket::service::{NotReady, ResponseFuture, TokenBucketLayer, TokenBucketService};
use token_bucket::{Rate, TakeError, TokenBucket};
use tokio::time::Instant;
use tokio_test::{assert_pending, assert_ready};
use tower::{service_fn, BoxError, Layer, Service, ServiceBuilder, ServiceExt};

/// An inner service whose readiness the test controls, counting the calls it gets.
#[derive(Clone, Debug, Default)]
struct Gate {
    shared: Arc<Mutex<GateState>>,
}

#[derive(Debug, Default)]
struct GateState {
    mode: Mode,
    waker: Option<Waker>,
    calls: usize,
}

#[derive(Clone, Copy, Debug, Default)]
enum Mode {
    #[default]
    Ready,
    Pending,
    Broken,
}

impl Gate {
    fn set(&self, mode: Mode) {
        let mut state = self.shared.lock().unwrap();
        state.mode = mode;
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
    }

    fn calls(&self) -> usize {
        self.shared.lock().unwrap().calls
    }
}

impl Service<u32> for Gate {
    type Response = u32;
    type Error = io::Error;
    type Future = std::future::Ready<Result<u32, io::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        let mut state = self.shared.lock().unwrap();
        match state.mode {
            Mode::Ready => Poll::Ready(Ok(())),
            Mode::Pending => {
                state.waker = Some(cx.waker().clone());
                Poll::Pending
            }
            Mode::Broken => Poll::Ready(Err(io::Error::other("inner broken"))),
        }
    }

    fn call(&mut self, request: u32) -> Self::Future {
        self.shared.lock().unwrap().calls += 1;
        std::future::ready(Ok(request))
    }
}

/// An inner service answering with the instant it was called and the request.
#[derive(Clone, Copy, Debug)]
struct Clock;

impl<R> Service<R> for Clock {
    type Response = (Instant, R);
    type Error = Infallible;
    type Future = std::future::Ready<Result<(Instant, R), Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: R) -> Self::Future {
        std::future::ready(Ok((Instant::now(), request)))
    }
}

fn take_error(error: &BoxError) -> Option<TakeError> {
    error.downcast_ref::<TakeError>().copied()
}

#[tokio::test(start_paused = true)]
async fn requests_through_the_layer_are_spaced_by_the_rate() {
    let bucket = TokenBucket::new(Rate::per_second(5), 1).unwrap();
    let mut service = TokenBucketLayer::new(bucket.clone()).layer(Clock);
    let start = Instant::now();
    for (i, due) in [ms(0), ms(200), ms(400)].into_iter().enumerate() {
        let (called, request) = ServiceExt::<usize>::ready(&mut service)
            .await
            .unwrap()
            .call(i)
            .await
            .unwrap();
        assert_eq!(request, i);
        assert_at(start, called, due);
    }
    assert_eq!(bucket.available(), 0);
}

#[tokio::test(start_paused = true)]
async fn bursts_reach_the_capacity_then_follow_the_rate() {
    let bucket = TokenBucket::new(Rate::per_second(10), 3).unwrap();
    let mut service = bucket.layer().layer(Clock);
    let start = Instant::now();
    for due in [ms(0), ms(0), ms(0), ms(100), ms(200)] {
        let (called, ()) = ServiceExt::<()>::ready(&mut service)
            .await
            .unwrap()
            .call(())
            .await
            .unwrap();
        assert_at(start, called, due);
    }
}

#[tokio::test(start_paused = true)]
async fn clones_share_one_budget_and_are_served_in_the_order_they_polled_ready() {
    let bucket = empty_bucket(Rate::per_second(1), 1);
    let service = bucket.layer().layer(Clock);
    let start = Instant::now();
    // Queue in an order unrelated to the names, waiting for each to take its place.
    let mut tasks = Vec::new();
    for (place, name) in ["c", "a", "b"].into_iter().enumerate() {
        let mut clone = service.clone();
        tasks.push(tokio::spawn(async move {
            ServiceExt::<&str>::ready(&mut clone)
                .await?
                .call(name)
                .await
        }));
        yield_until(|| bucket.queued() == place + 1).await;
    }
    for (task, (name, due)) in
        tasks
            .into_iter()
            .zip([("c", secs(1)), ("a", secs(2)), ("b", secs(3))])
    {
        let (called, served) = task.await.unwrap().unwrap();
        assert_eq!(served, name);
        assert_at(start, called, due);
    }
    assert_eq!(bucket.queued(), 0);
}

#[tokio::test(start_paused = true)]
async fn oneshot_requests_are_served_in_the_order_first_polled() {
    let bucket = empty_bucket(Rate::per_second(1), 1);
    let service = bucket.layer().layer(Clock);
    let start = Instant::now();
    let mut a = tokio_test::task::spawn(service.clone().oneshot("a"));
    let mut b = tokio_test::task::spawn(service.clone().oneshot("b"));
    let mut c = tokio_test::task::spawn(service.clone().oneshot("c"));
    // Made a, b, c; first polled b, c, a.
    assert_pending!(b.poll());
    assert_pending!(c.poll());
    assert_pending!(a.poll());
    assert_eq!(bucket.queued(), 3);

    // Each waits for the refill task, which may run after this task at the same instant.
    tokio::time::sleep(secs(1)).await;
    yield_until(|| b.is_woken()).await;
    assert!(!a.is_woken() && !c.is_woken());
    let (called, _) = assert_ready!(b.poll()).unwrap();
    assert_at(start, called, secs(1));

    tokio::time::sleep(secs(1)).await;
    yield_until(|| c.is_woken()).await;
    assert!(!a.is_woken());
    let (called, _) = assert_ready!(c.poll()).unwrap();
    assert_at(start, called, secs(2));

    tokio::time::sleep(secs(1)).await;
    yield_until(|| a.is_woken()).await;
    let (called, _) = assert_ready!(a.poll()).unwrap();
    assert_at(start, called, secs(3));
}

#[tokio::test(start_paused = true)]
async fn the_budget_is_shared_with_direct_users_of_the_bucket() {
    let bucket = empty_bucket(Rate::per_second(2), 2);
    let service = bucket.layer().layer(Clock);
    let start = Instant::now();
    let direct = tokio::spawn(bucket.take(2));
    yield_until(|| bucket.queued() == 1).await;
    let (called, ()) = service.oneshot(()).await.unwrap();
    // The direct take queued first: it gets 2 tokens at 1 s, the service 1 at 1.5 s.
    assert_eq!(direct.await.unwrap(), Ok(()));
    assert_at(start, called, ms(1500));
}

#[tokio::test(start_paused = true)]
async fn a_clone_starts_without_the_token_of_its_original() {
    let bucket = TokenBucket::new(Rate::per_second(1), 1).unwrap();
    let gate = Gate::default();
    let mut service = bucket.layer().layer(gate.clone());
    let start = Instant::now();
    service.ready().await.unwrap();
    assert!(service.holds_token());
    assert_eq!(bucket.available(), 0);

    let mut clone = service.clone();
    assert!(!clone.holds_token());
    let error = clone.call(1).await.unwrap_err();
    assert!(error.is::<NotReady>());
    assert_eq!(gate.calls(), 0);

    // The clone waits for its own token; the original keeps its own meanwhile.
    clone.ready().await.unwrap();
    assert_now(start, secs(1));
    assert_eq!(clone.call(2).await.unwrap(), 2);
    assert_eq!(service.call(3).await.unwrap(), 3);
    assert_eq!(gate.calls(), 2);
    assert_eq!(bucket.available(), 0);
}

#[tokio::test(start_paused = true)]
async fn polling_ready_again_keeps_the_one_token() {
    let bucket = TokenBucket::new(Rate::per_second(1), 3).unwrap();
    let mut service = bucket.layer().layer(Gate::default());
    service.ready().await.unwrap();
    service.ready().await.unwrap();
    service.ready().await.unwrap();
    assert_eq!(bucket.available(), 2);
    service.call(1).await.unwrap();
    assert_eq!(bucket.available(), 2);
}

#[tokio::test(start_paused = true)]
async fn dropping_a_ready_service_refunds_its_token() {
    let bucket = TokenBucket::new(Rate::per_second(1), 2).unwrap();
    let layer = bucket.layer();

    let mut dropped = layer.layer(Gate::default());
    dropped.ready().await.unwrap();
    assert_eq!(bucket.available(), 1);
    drop(dropped);
    assert_eq!(bucket.available(), 2);

    let mut unwrapped = layer.layer(Gate::default());
    unwrapped.ready().await.unwrap();
    assert_eq!(bucket.available(), 1);
    let _gate: Gate = unwrapped.into_inner();
    assert_eq!(bucket.available(), 2);
    assert_eq!(bucket.stats().refunded, 2);
}

#[tokio::test(start_paused = true)]
async fn a_refunded_token_serves_the_next_in_line_at_once() {
    let bucket = empty_bucket(Rate::per_second(1), 1);
    let service = bucket.layer().layer(Clock);
    let start = Instant::now();
    let mut first = tokio_test::task::spawn(ServiceExt::<()>::ready_oneshot(service.clone()));
    assert_pending!(first.poll());
    let mut behind = tokio_test::task::spawn(service.clone().oneshot(()));
    assert_pending!(behind.poll());
    assert_eq!(bucket.queued(), 2);

    // `first` gets the token at 1 s, is found ready at 1.5 s, and is dropped unused.
    tokio::time::sleep(ms(1500)).await;
    let ready = assert_ready!(first.poll()).unwrap();
    assert!(ready.holds_token());
    assert!(!behind.is_woken());
    drop(ready);
    assert!(behind.is_woken());
    let (called, ()) = assert_ready!(behind.poll()).unwrap();
    assert_at(start, called, ms(1500));
}

#[tokio::test(start_paused = true)]
async fn dropping_a_queued_service_gives_up_its_place() {
    let bucket = empty_bucket(Rate::per_second(1), 5);
    let service = bucket.layer().layer(Clock);
    let start = Instant::now();
    let mut ahead = tokio_test::task::spawn(ServiceExt::<()>::ready_oneshot(service.clone()));
    assert_pending!(ahead.poll());
    let behind = tokio::spawn(service.clone().oneshot(()));
    yield_until(|| bucket.queued() == 2).await;
    drop(ahead);
    assert_eq!(bucket.queued(), 1);
    let (called, ()) = behind.await.unwrap().unwrap();
    assert_at(start, called, secs(1));
    assert_eq!(bucket.available(), 0);
}

#[tokio::test(start_paused = true)]
async fn dropping_a_ready_future_keeps_the_place_in_the_queue() {
    let bucket = empty_bucket(Rate::per_second(1), 1);
    let mut service = bucket.layer().layer(Clock);
    let start = Instant::now();
    tokio::select! {
        _ = ServiceExt::<()>::ready(&mut service) => panic!("the first token accrues at 1 s"),
        _ = tokio::time::sleep(ms(300)) => {}
    }
    assert_eq!(bucket.queued(), 1);
    let late = tokio::spawn(bucket.layer().layer(Clock).oneshot(()));
    yield_until(|| bucket.queued() == 2).await;
    // The service kept its place ahead of `late`.
    ServiceExt::<()>::ready(&mut service).await.unwrap();
    assert_now(start, secs(1));
    let (called, ()) = late.await.unwrap().unwrap();
    assert_at(start, called, secs(2));
}

#[tokio::test(start_paused = true)]
async fn an_inner_service_not_ready_keeps_the_reserved_token() {
    let bucket = TokenBucket::new(Rate::per_second(1), 1).unwrap();
    let gate = Gate::default();
    gate.set(Mode::Pending);
    let service = bucket.layer().layer(gate.clone());
    let mut call = tokio_test::task::spawn(service.oneshot(7));
    assert_pending!(call.poll());
    assert_eq!(bucket.available(), 0);
    gate.set(Mode::Ready);
    assert!(call.is_woken());
    assert_eq!(assert_ready!(call.poll()).unwrap(), 7);
    assert_eq!(bucket.available(), 0);
    assert_eq!(gate.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_inner_poll_ready_error_refunds_the_token_and_propagates() {
    let bucket = TokenBucket::new(Rate::per_second(1), 1).unwrap();
    let gate = Gate::default();
    gate.set(Mode::Broken);
    let mut service = bucket.layer().layer(gate.clone());
    let error = service.ready().await.unwrap_err();
    let inner = error
        .downcast_ref::<io::Error>()
        .expect("the inner error, boxed");
    assert_eq!(inner.to_string(), "inner broken");
    assert!(!service.holds_token());
    assert_eq!(bucket.available(), 1);
    assert_eq!(bucket.stats().refunded, 1);

    // Failed while waiting for the inner service, after the token came: refunded too.
    gate.set(Mode::Pending);
    let mut ready =
        tokio_test::task::spawn(poll_fn(|cx| Service::<u32>::poll_ready(&mut service, cx)));
    assert_pending!(ready.poll());
    assert_eq!(bucket.available(), 0);
    gate.set(Mode::Broken);
    assert!(assert_ready!(ready.poll()).unwrap_err().is::<io::Error>());
    drop(ready);
    assert_eq!(bucket.available(), 1);
    assert_eq!(gate.calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_closed_bucket_fails_poll_ready_with_take_error_closed() {
    let bucket = TokenBucket::new(Rate::per_second(1), 1).unwrap();
    let mut service = bucket.layer().layer(Gate::default());
    bucket.close();
    let error = service.ready().await.unwrap_err();
    assert_eq!(take_error(&error), Some(TakeError::Closed));
    assert_eq!(error.to_string(), TakeError::Closed.to_string());
    // Still closed on the next poll, and no token or place is held.
    assert_eq!(
        take_error(&service.ready().await.unwrap_err()),
        Some(TakeError::Closed)
    );
    assert!(!service.holds_token());
}

#[tokio::test(start_paused = true)]
async fn closing_the_bucket_fails_a_waiting_poll_ready() {
    let bucket = empty_bucket(Rate::per_second(1), 1);
    let service = bucket.layer().layer(Gate::default());
    let start = Instant::now();
    let waiting = tokio::spawn(service.oneshot(1));
    yield_until(|| bucket.queued() == 1).await;
    tokio::time::sleep(ms(500)).await;
    bucket.close();
    let error = waiting.await.unwrap().unwrap_err();
    assert_eq!(take_error(&error), Some(TakeError::Closed));
    assert_now(start, ms(500));
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_fails_poll_ready_at_once() {
    let bucket = TokenBucket::builder()
        .rate(Rate::per_second(1))
        .capacity(1)
        .initial(0)
        .queue_limit(1)
        .build()
        .unwrap();
    let service = bucket.layer().layer(Gate::default());
    let first = tokio::spawn(service.clone().oneshot(1));
    yield_until(|| bucket.queued() == 1).await;
    let error = service.clone().oneshot(2).await.unwrap_err();
    assert!(matches!(
        take_error(&error),
        Some(TakeError::QueueFull { .. })
    ));
    assert_eq!(first.await.unwrap().unwrap(), 1);
}

#[tokio::test(start_paused = true)]
async fn call_without_poll_ready_sends_nothing_and_fails_with_not_ready() {
    let bucket = TokenBucket::new(Rate::per_second(1), 1).unwrap();
    let gate = Gate::default();
    let mut service = bucket.layer().layer(gate.clone());
    let response: ResponseFuture<_> = service.call(1);
    let error = response.await.unwrap_err();
    assert!(error.is::<NotReady>());
    assert!(error.to_string().contains("poll_ready"), "{error}");
    assert_eq!(gate.calls(), 0);
    assert_eq!(bucket.available(), 1);
    assert_eq!(bucket.stats().taken, 0);

    // The service is not spoiled: it can still be polled ready and called.
    assert_eq!(service.ready().await.unwrap().call(2).await.unwrap(), 2);
    // A call spends the readiness: a second call without poll_ready fails again.
    assert!(service.call(3).await.unwrap_err().is::<NotReady>());
    assert_eq!(gate.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn call_while_queued_fails_and_keeps_the_place() {
    let bucket = empty_bucket(Rate::per_second(1), 1);
    let gate = Gate::default();
    let mut service = bucket.layer().layer(gate.clone());
    let start = Instant::now();
    let polled = futures::poll!(poll_fn(|cx| Service::<u32>::poll_ready(&mut service, cx)));
    assert!(polled.is_pending());
    assert_eq!(bucket.queued(), 1);
    assert!(service.call(1).await.unwrap_err().is::<NotReady>());
    assert_eq!(bucket.queued(), 1);
    service.ready().await.unwrap();
    assert_now(start, secs(1));
    assert_eq!(service.call(2).await.unwrap(), 2);
    assert_eq!(gate.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn call_while_the_inner_service_is_not_ready_fails_and_keeps_the_token() {
    let bucket = TokenBucket::new(Rate::per_second(1), 1).unwrap();
    let gate = Gate::default();
    gate.set(Mode::Pending);
    let mut service = bucket.layer().layer(gate.clone());
    let polled = futures::poll!(poll_fn(|cx| Service::<u32>::poll_ready(&mut service, cx)));
    assert!(polled.is_pending());
    assert!(service.holds_token());
    assert!(service.call(1).await.unwrap_err().is::<NotReady>());
    assert_eq!(gate.calls(), 0);
    assert!(service.holds_token());
    gate.set(Mode::Ready);
    assert_eq!(service.ready().await.unwrap().call(2).await.unwrap(), 2);
    assert_eq!(bucket.available(), 0);
}

#[tokio::test(start_paused = true)]
async fn inner_call_errors_are_boxed_and_the_token_stays_spent() {
    let bucket = TokenBucket::new(Rate::per_second(1), 2).unwrap();
    let failing = service_fn(|()| async { Err::<(), _>(io::Error::other("call failed")) });
    let error = bucket.layer().layer(failing).oneshot(()).await.unwrap_err();
    assert_eq!(
        error.downcast_ref::<io::Error>().unwrap().to_string(),
        "call failed"
    );
    assert_eq!(bucket.available(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_response_future_dropped_unpolled_keeps_its_token_spent() {
    let bucket = TokenBucket::new(Rate::per_second(1), 2).unwrap();
    let mut service = bucket.layer().layer(Gate::default());
    let response = service.ready().await.unwrap().call(1);
    drop(response);
    assert_eq!(bucket.available(), 1);
    assert_eq!(bucket.stats().refunded, 0);
}

#[tokio::test(start_paused = true)]
async fn works_inside_service_builder() {
    let bucket = TokenBucket::new(Rate::per_second(4), 1).unwrap();
    let mut service = ServiceBuilder::new()
        .map_response(|(called, n): (Instant, u32)| (called, n * 10))
        .layer(TokenBucketLayer::new(bucket.clone()))
        .service(Clock);
    let start = Instant::now();
    for (n, due) in [(1, ms(0)), (2, ms(250)), (3, ms(500))] {
        let (called, response) = service.ready().await.unwrap().call(n).await.unwrap();
        assert_eq!(response, n * 10);
        assert_at(start, called, due);
    }

    // `bucket.layer()` in a builder too, and the layered service cloned per request as
    // servers do.
    let shared = ServiceBuilder::new().layer(bucket.layer()).service(Clock);
    let calls: Vec<_> = (0..2)
        .map(|n| tokio::spawn(shared.clone().oneshot(n)))
        .collect();
    for (call, due) in calls.into_iter().zip([ms(750), ms(1000)]) {
        let (called, _) = call.await.unwrap().unwrap();
        assert_at(start, called, due);
    }
}

#[tokio::test(start_paused = true)]
async fn a_layer_built_from_a_bucket_with_tokens_bursts_them() {
    let bucket = bucket_with(Rate::per_second(1), 5, 2);
    let service = bucket.layer().layer(Clock);
    let start = Instant::now();
    let calls: Vec<_> = (0..3)
        .map(|n| tokio::spawn(service.clone().oneshot(n)))
        .collect();
    for (call, due) in calls.into_iter().zip([ms(0), ms(0), secs(1)]) {
        let (called, _) = call.await.unwrap().unwrap();
        assert_at(start, called, due);
    }
}

#[test]
fn the_types_are_send_sync_static_and_clone() {
    // Send + Sync: servers such as axum require both of a layered service.
    fn send_static<T: Send + Sync + 'static>() {}
    fn clone<T: Clone>() {}
    send_static::<TokenBucketLayer>();
    send_static::<TokenBucketService<Gate>>();
    send_static::<ResponseFuture<std::future::Ready<Result<u32, io::Error>>>>();
    send_static::<NotReady>();
    clone::<TokenBucketLayer>();
    clone::<TokenBucketService<Gate>>();
    fn error<E: std::error::Error + Send + Sync + 'static>() {}
    error::<NotReady>();
}
