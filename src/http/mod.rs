//! The HTTP front door (feature `http`): rate limits for `http::Request`s, per client and
//! for the whole service, as a tower layer.
//!
//! - `client_ip.rs`: which client a request comes from, behind trusted proxies, and the
//!   [`ClientKey`] it is counted under.

mod client_ip;

pub use client_ip::{
    Cidr, CidrError, ClientIp, ClientIpError, ClientKey, ForwardedHeader, TrustedProxies,
};
