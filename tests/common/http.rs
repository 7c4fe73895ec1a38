//! A real axum server on loopback and a real HTTP client, for the HTTP layer's tests.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use axum::routing::get;
use axum::Router;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// Serves `app` on a free loopback port, with each connection's address known.
pub async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let address = listener.local_addr().unwrap();
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, service).await });
    address
}

pub fn hello() -> Router {
    Router::new().route("/", get(|| async { "hello" }))
}

/// An HTTP/1.1 client sending from `from` (any address of 127.0.0.0/8 works on loopback).
pub fn client_from(from: IpAddr) -> Client<HttpConnector, Empty<Bytes>> {
    let mut connector = HttpConnector::new();
    connector.set_local_address(Some(from));
    Client::builder(TokioExecutor::new()).build(connector)
}

/// Sends a GET to `address` with `headers` and returns the answer's status and headers.
pub async fn get_from(
    client: &Client<HttpConnector, Empty<Bytes>>,
    address: SocketAddr,
    headers: &[(&str, &str)],
) -> (StatusCode, HeaderMap) {
    let mut request = Request::get(format!("http://{address}/"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = client
        .request(request.body(Empty::new()).unwrap())
        .await
        .unwrap();
    (response.status(), response.headers().clone())
}

/// Sends a GET for `path` to `address` and returns the answer's status, headers and
/// body.
pub async fn get_path(
    client: &Client<HttpConnector, Empty<Bytes>>,
    address: SocketAddr,
    path: &str,
) -> (StatusCode, HeaderMap, String) {
    use http_body_util::BodyExt;
    let request = Request::get(format!("http://{address}{path}"));
    let response = client
        .request(request.body(Empty::new()).unwrap())
        .await
        .unwrap();
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    let body = String::from_utf8(bytes.to_vec()).unwrap();
    (parts.status, parts.headers, body)
}

pub fn local(last_octet: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last_octet))
}

pub fn text(headers: &HeaderMap, name: &str) -> String {
    headers[name].to_str().unwrap().to_owned()
}
