//! The HTTP layer in front of a real tonic gRPC server on loopback, called by a real
//! tonic client: tonic-health's service, whose generated client needs no protoc.
//!
//! Real sockets need real time, so the limit is per hour: nothing comes back while the
//! test runs.
#![cfg(feature = "http")]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use token_bucket::http::{ClientIp, ClientKey, RateLimitLayer};
use token_bucket::FixedWindow;
use tokio::net::{TcpListener, TcpSocket};
use tonic::transport::server::{TcpConnectInfo, TcpIncoming};
use tonic::transport::{Channel, Endpoint, Server, Uri};
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// The peer as tonic records it: the `TcpConnectInfo` its server puts in each request.
fn tonic_peer(extensions: &http::Extensions) -> Option<IpAddr> {
    let info = extensions.get::<TcpConnectInfo>()?;
    info.remote_addr().map(|address| address.ip())
}

/// A channel to `server` whose connections come from `from` (any of 127.0.0.0/8).
async fn channel_from(from: Ipv4Addr, server: SocketAddr) -> Channel {
    let connector = tower::service_fn(move |_: Uri| async move {
        let socket = TcpSocket::new_v4()?;
        socket.bind(SocketAddr::from((from, 0)))?;
        let stream = socket.connect(server).await?;
        Ok::<_, std::io::Error>(TokioIo::new(stream))
    });
    Endpoint::from_shared(format!("http://{server}"))
        .unwrap()
        .connect_with_connector(connector)
        .await
        .unwrap()
}

async fn check(client: &mut HealthClient<Channel>) -> Result<i32, tonic::Status> {
    let request = HealthCheckRequest {
        service: String::new(),
    };
    let response = client.check(request).await?;
    Ok(response.into_inner().status)
}

#[tokio::test]
async fn a_tonic_server_admits_then_refuses_with_resource_exhausted_per_tcp_peer() {
    let layer = RateLimitLayer::builder(
        ClientIp::peer().peer_from(tonic_peer),
        FixedWindow::new(2, Duration::from_secs(3600)).unwrap(),
    )
    .build()
    .unwrap();
    let per_key = layer.clone();
    let (_reporter, health) = tonic_health::server::health_reporter();
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let address = listener.local_addr().unwrap();
    let incoming = TcpIncoming::from(listener);
    tokio::spawn(
        Server::builder()
            .layer(layer)
            .add_service(health)
            .serve_with_incoming(incoming),
    );

    let first = Ipv4Addr::new(127, 0, 0, 31);
    let mut client = HealthClient::new(channel_from(first, address).await);
    for _ in 0..2 {
        let status = check(&mut client).await.expect("an admitted call succeeds");
        assert_eq!(status, ServingStatus::Serving as i32);
    }
    let refused = check(&mut client)
        .await
        .expect_err("the third call is refused");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    let retry_after: u64 = (refused.metadata().get("retry-after"))
        .expect("the retry information is in the metadata")
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((3_500..=3_600).contains(&retry_after), "{retry_after}");
    assert_eq!(
        refused.message(),
        format!("the limit \"client\" is spent; retry after {retry_after} seconds")
    );
    let fields = refused
        .metadata()
        .get("ratelimit")
        .unwrap()
        .to_str()
        .unwrap();
    assert!(fields.starts_with(r#""client";r=0;t="#), "{fields}");

    // The key is the TCP peer tonic recorded: the client's own address, and another
    // address has a budget of its own.
    let quota_of = |address: Ipv4Addr| {
        let key = ClientKey::from(IpAddr::V4(address));
        per_key.per_key().quota(&key).map(|quota| quota.remaining)
    };
    assert_eq!(quota_of(first), Some(0));
    let second = Ipv4Addr::new(127, 0, 0, 32);
    assert_eq!(quota_of(second), Some(2), "a key not yet seen is whole");
    let mut other = HealthClient::new(channel_from(second, address).await);
    assert_eq!(
        check(&mut other).await.unwrap(),
        ServingStatus::Serving as i32
    );
    assert_eq!(quota_of(second), Some(1));
}
