//! The HTTP layer in process: a service behind it that answers 200, requests from a
//! given peer, and sending one through.
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};

use http::{HeaderMap, Request, Response, StatusCode};
use tower::{Service, ServiceExt};

/// The service behind the layer: answers 200 with an empty body.
pub type OkService = tower::util::ServiceFn<
    fn(Request<()>) -> std::future::Ready<Result<Response<String>, Infallible>>,
>;

pub fn ok_service() -> OkService {
    tower::service_fn(|_request| std::future::ready(Ok(Response::new(String::new()))))
}

/// A request from `peer`, with `headers`.
pub fn request_from(peer: &str, headers: &[(&str, &str)]) -> Request<()> {
    let mut request = Request::get("/");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut request = request.body(()).unwrap();
    let peer: IpAddr = peer.parse().unwrap();
    request
        .extensions_mut()
        .insert(SocketAddr::new(peer, 40_000));
    request
}

/// Sends `request` through `service` and returns its status and headers.
pub async fn send<S>(service: &mut S, request: Request<()>) -> (StatusCode, HeaderMap)
where
    S: Service<Request<()>, Response = Response<String>, Error = Infallible>,
{
    let response = service.ready().await.unwrap().call(request).await.unwrap();
    (response.status(), response.headers().clone())
}
