//! Who a request counts against: the [`KeyExtractor`] trait and the keys the crate ships
//! (the client's IP, a header's value, one global key, or a closure of your own).

use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::net::{IpAddr, SocketAddr};

use http::header::{HeaderMap, HeaderName};
use http::{Extensions, Method, StatusCode, Uri, Version};

use super::client_ip::{ClientIp, ClientKey};

/// The parts of a request a key is found in, borrowed: everything but the body.
#[derive(Debug, Clone, Copy)]
pub struct RequestHead<'a> {
    /// The request's method.
    pub method: &'a Method,
    /// The request's URI.
    pub uri: &'a Uri,
    /// The request's HTTP version.
    pub version: Version,
    /// The request's header fields.
    pub headers: &'a HeaderMap,
    /// The request's extensions: where servers put the connection's peer address.
    pub extensions: &'a Extensions,
}

impl<'a> RequestHead<'a> {
    /// The head of `request`.
    pub fn of<B>(request: &'a http::Request<B>) -> RequestHead<'a> {
        RequestHead {
            method: request.method(),
            uri: request.uri(),
            version: request.version(),
            headers: request.headers(),
            extensions: request.extensions(),
        }
    }

    /// The connection's peer address, as the server recorded it in the extensions: a
    /// [`SocketAddr`] (which a hyper server can insert), or axum's
    /// `ConnectInfo<SocketAddr>` (with the feature `axum`, from
    /// `into_make_service_with_connect_info::<SocketAddr>()`).
    pub fn peer(&self) -> Option<IpAddr> {
        // axum's first where it can be there: each look costs a search of the extensions.
        #[cfg(feature = "axum")]
        if let Some(info) = (self.extensions).get::<axum::extract::ConnectInfo<SocketAddr>>() {
            return Some(info.0.ip());
        }
        let address = self.extensions.get::<SocketAddr>()?;
        Some(address.ip())
    }
}

/// Why a request has no key. The layer answers it as its
/// [`MissingKey`](super::MissingKey) setting says; by default with
/// [`status`](KeyError::status).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyError {
    /// The request carries no peer address: the server was not set up to record it
    /// (for axum, serve with `into_make_service_with_connect_info::<SocketAddr>()`). A
    /// fault of the server, so `500 Internal Server Error`.
    NoPeerAddress,
    /// The header the key is read from is missing: `400 Bad Request`.
    MissingHeader {
        /// The header's name.
        name: HeaderName,
    },
    /// The header the key is read from is not a key: not visible ASCII, or longer than
    /// [`HeaderKey::MAX_LEN`]. `400 Bad Request`.
    InvalidHeader {
        /// The header's name.
        name: HeaderName,
    },
    /// A key of your own could not be found; `status` is what the client is answered.
    Other {
        /// What the client is answered.
        status: StatusCode,
        /// Why, for the response's body and your logs.
        reason: String,
    },
}

impl KeyError {
    /// The status a request is refused with when it has no key.
    pub fn status(&self) -> StatusCode {
        match self {
            KeyError::NoPeerAddress => StatusCode::INTERNAL_SERVER_ERROR,
            KeyError::MissingHeader { .. } | KeyError::InvalidHeader { .. } => {
                StatusCode::BAD_REQUEST
            }
            KeyError::Other { status, .. } => *status,
        }
    }
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::NoPeerAddress => f.write_str(
                "the request carries no peer address: serve it with its connection's \
                 address in the request's extensions",
            ),
            KeyError::MissingHeader { name } => write!(f, "the header `{name}` is missing"),
            KeyError::InvalidHeader { name } => write!(
                f,
                "the header `{name}` is not a key: visible ASCII of at most {} bytes",
                HeaderKey::MAX_LEN
            ),
            KeyError::Other { reason, .. } => f.write_str(reason),
        }
    }
}

impl std::error::Error for KeyError {}

/// Finds the key a request counts against.
///
/// The crate ships [`ClientIp`] (the client's address, behind trusted proxies if any),
/// [`HeaderKey`] (an API key, say), [`GlobalKey`] (one key for every request) and
/// [`key_fn`] (a closure).
///
/// # Examples
///
/// ```
/// use token_bucket::http::{key_fn, KeyError, KeyExtractor, RequestHead};
///
/// // The tenant is the first segment of the path.
/// let tenant = key_fn(|head: &RequestHead<'_>| {
///     let path = head.uri.path().trim_start_matches('/');
///     match path.split('/').next() {
///         Some(tenant) if !tenant.is_empty() => Ok(tenant.to_owned()),
///         _ => Err(KeyError::Other {
///             status: http::StatusCode::NOT_FOUND,
///             reason: "no tenant in the path".into(),
///         }),
///     }
/// });
/// let request = http::Request::get("/acme/orders").body(())?;
/// assert_eq!(tenant.extract(&RequestHead::of(&request)), Ok("acme".to_owned()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait KeyExtractor: Send + Sync + 'static {
    /// The key: what the layer keeps a limiter for.
    type Key: Hash + Eq + Clone + Send + Sync + fmt::Debug + 'static;

    /// The key `request` counts against.
    ///
    /// # Errors
    ///
    /// A [`KeyError`] when the request has none.
    fn extract(&self, request: &RequestHead<'_>) -> Result<Self::Key, KeyError>;

    /// The client's address, for [`allow_cidrs`](super::RateLimitBuilder::allow_cidrs):
    /// the peer's by default; [`ClientIp`] finds it behind trusted proxies.
    fn client_ip(&self, request: &RequestHead<'_>) -> Option<IpAddr> {
        request.peer()
    }
}

impl KeyExtractor for ClientIp {
    type Key = ClientKey;

    /// The client's address: the peer's, or behind trusted proxies the one they report
    /// (see [`ClientIp`]). IPv6 clients are grouped by their prefix.
    ///
    /// # Errors
    ///
    /// [`KeyError::NoPeerAddress`] when the server did not record the peer.
    fn extract(&self, request: &RequestHead<'_>) -> Result<ClientKey, KeyError> {
        let peer = request.peer().ok_or(KeyError::NoPeerAddress)?;
        Ok(self.client(peer, request.headers))
    }

    fn client_ip(&self, request: &RequestHead<'_>) -> Option<IpAddr> {
        Some(self.client_address(request.peer()?, request.headers))
    }
}

impl ClientIp {
    /// The same, reading the peer's address with `find` instead of from a `SocketAddr`
    /// or axum's `ConnectInfo` in the request's extensions: for a server that records it
    /// otherwise, such as tonic, whose `TcpConnectInfo` this crate does not depend on.
    ///
    /// ```
    /// use std::net::{IpAddr, SocketAddr};
    /// use token_bucket::http::{ClientIp, KeyExtractor, RequestHead};
    ///
    /// /// What a server of your own records for each connection.
    /// #[derive(Clone)]
    /// struct Connection { remote: Option<SocketAddr> }
    ///
    /// let key = ClientIp::peer().peer_from(|extensions: &http::Extensions| {
    ///     extensions.get::<Connection>()?.remote.map(|address| address.ip())
    /// });
    /// let mut request = http::Request::get("/").body(())?;
    /// request.extensions_mut().insert(Connection { remote: Some("192.0.2.7:443".parse()?) });
    /// let ip: IpAddr = "192.0.2.7".parse()?;
    /// assert_eq!(key.extract(&RequestHead::of(&request))?, ip.into());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// Under tonic (`Server::builder().layer(..)`), with tonic's own type (see
    /// `docs/http.md`, "gRPC with tonic"):
    ///
    /// ```
    /// use tonic::transport::server::TcpConnectInfo;
    /// use token_bucket::http::ClientIp;
    ///
    /// let key = ClientIp::peer().peer_from(|extensions: &http::Extensions| {
    ///     Some(extensions.get::<TcpConnectInfo>()?.remote_addr()?.ip())
    /// });
    /// # let _ = key;
    /// ```
    pub fn peer_from<F>(self, find: F) -> ClientIpFrom<F>
    where
        F: Fn(&Extensions) -> Option<IpAddr> + Send + Sync + 'static,
    {
        ClientIpFrom {
            client_ip: self,
            find,
        }
    }
}

/// A [`ClientIp`] that reads the peer's address with a function of your own; made by
/// [`ClientIp::peer_from`].
#[derive(Clone)]
pub struct ClientIpFrom<F> {
    client_ip: ClientIp,
    find: F,
}

impl<F> fmt::Debug for ClientIpFrom<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientIpFrom")
            .field("client_ip", &self.client_ip)
            .finish_non_exhaustive()
    }
}

impl<F> KeyExtractor for ClientIpFrom<F>
where
    F: Fn(&Extensions) -> Option<IpAddr> + Send + Sync + 'static,
{
    type Key = ClientKey;

    /// # Errors
    ///
    /// [`KeyError::NoPeerAddress`] when the function finds no peer.
    fn extract(&self, request: &RequestHead<'_>) -> Result<ClientKey, KeyError> {
        let peer = (self.find)(request.extensions).ok_or(KeyError::NoPeerAddress)?;
        Ok(self.client_ip.client(peer, request.headers))
    }

    fn client_ip(&self, request: &RequestHead<'_>) -> Option<IpAddr> {
        let peer = (self.find)(request.extensions)?;
        Some(self.client_ip.client_address(peer, request.headers))
    }
}

/// The value of one header as the key: an API key, a tenant id.
///
/// ```
/// use token_bucket::http::{HeaderKey, KeyError, KeyExtractor, RequestHead};
///
/// let api_key = HeaderKey::new(http::HeaderName::from_static("x-api-key"));
/// let request = http::Request::get("/").header("x-api-key", "k-42").body(())?;
/// assert_eq!(api_key.extract(&RequestHead::of(&request)), Ok("k-42".to_owned()));
/// let anonymous = http::Request::get("/").body(())?;
/// assert!(matches!(
///     api_key.extract(&RequestHead::of(&anonymous)),
///     Err(KeyError::MissingHeader { .. })
/// ));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct HeaderKey {
    name: HeaderName,
}

impl HeaderKey {
    /// The longest value taken as a key, so that a key held per client stays small.
    pub const MAX_LEN: usize = 256;

    /// Keys requests by the value of the header `name` (the last one, if repeated).
    pub fn new(name: HeaderName) -> HeaderKey {
        HeaderKey { name }
    }
}

impl KeyExtractor for HeaderKey {
    type Key = String;

    /// # Errors
    ///
    /// [`KeyError::MissingHeader`] without the header; [`KeyError::InvalidHeader`] when
    /// its value is empty, not visible ASCII, or longer than [`HeaderKey::MAX_LEN`].
    fn extract(&self, request: &RequestHead<'_>) -> Result<String, KeyError> {
        let value = (request.headers.get_all(&self.name).iter().next_back()).ok_or_else(|| {
            KeyError::MissingHeader {
                name: self.name.clone(),
            }
        })?;
        match value.to_str() {
            Ok(text) if !text.is_empty() && text.len() <= HeaderKey::MAX_LEN => Ok(text.to_owned()),
            _ => Err(KeyError::InvalidHeader {
                name: self.name.clone(),
            }),
        }
    }
}

/// One key for every request: a limit on the whole service.
#[derive(Debug, Clone, Copy, Default)]
pub struct GlobalKey;

impl KeyExtractor for GlobalKey {
    type Key = ();

    fn extract(&self, _request: &RequestHead<'_>) -> Result<(), KeyError> {
        Ok(())
    }
}

/// A key found by `find`, a closure over the request's head.
///
/// See [`KeyExtractor`]'s example.
pub fn key_fn<K, F>(find: F) -> KeyFn<F, K>
where
    F: Fn(&RequestHead<'_>) -> Result<K, KeyError> + Send + Sync + 'static,
    K: Hash + Eq + Clone + Send + Sync + fmt::Debug + 'static,
{
    KeyFn {
        find,
        key: PhantomData,
    }
}

/// A [`KeyExtractor`] made by [`key_fn`].
pub struct KeyFn<F, K> {
    find: F,
    key: PhantomData<fn() -> K>,
}

impl<F: Clone, K> Clone for KeyFn<F, K> {
    fn clone(&self) -> KeyFn<F, K> {
        KeyFn {
            find: self.find.clone(),
            key: PhantomData,
        }
    }
}

impl<F, K> fmt::Debug for KeyFn<F, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyFn")
    }
}

impl<F, K> KeyExtractor for KeyFn<F, K>
where
    F: Fn(&RequestHead<'_>) -> Result<K, KeyError> + Send + Sync + 'static,
    K: Hash + Eq + Clone + Send + Sync + fmt::Debug + 'static,
{
    type Key = K;

    fn extract(&self, request: &RequestHead<'_>) -> Result<K, KeyError> {
        (self.find)(request)
    }
}
