//! Which client a request comes from: its peer address, or behind trusted proxies the
//! address they report, so that a client cannot forge its way to a fresh budget.
//!
//! [`ClientIp`] is the configuration: whom to trust ([`TrustedProxies`]) and which header
//! they set ([`ForwardedHeader`]). [`ClientIp::client`] turns a request's peer address and
//! headers into the [`ClientKey`] the client is counted under. [`Cidr`] names the trusted
//! networks. The rules are documented on [`ClientIp`], where users of the module read
//! them.
//!
//! This file holds the configuration, the walk through the entries and the key; beside
//! it, in `client_ip/`:
//! - `cidr.rs`: [`Cidr`] and its error, and the address arithmetic the key shares;
//! - `entries.rs`: reading addresses out of a forwarding header's lines;
//! - `tests.rs`: the unit tests.
//!
//! `cidr.rs` and `entries.rs` use nothing of this file or of each other.

use std::error::Error;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ::http::header::{HeaderMap, HeaderName, FORWARDED};

use cidr::{canonical, mask_v6};
pub use cidr::{Cidr, CidrError};
use entries::{forwarded_for, parse_node, ElementsFromRight};

mod cidr;
mod entries;

/// The most entries read from a header, and the most trusted hops.
const MAX_ENTRIES: usize = 64;

/// The IPv6 prefix clients are grouped by unless [`ClientIp::ipv6_prefix`] says otherwise.
const DEFAULT_IPV6_PREFIX: u8 = 64;

/// Which header the trusted proxies set to report the client's address. Only that one
/// is read: reading several would let a client forge the one its proxy does not set.
///
/// ```
/// use token_bucket::http::{ClientIp, ForwardedHeader, TrustedProxies};
///
/// assert_eq!(ForwardedHeader::default(), ForwardedHeader::XForwardedFor);
/// let proxies = TrustedProxies::cidrs(["10.0.0.0/8".parse()?]);
/// let client_ip = ClientIp::behind(proxies).header(ForwardedHeader::Forwarded);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum ForwardedHeader {
    /// RFC 7239's `Forwarded`, its `for=` parameters: `for=192.0.2.7;proto=https`.
    Forwarded,
    /// `X-Forwarded-For`, a list of addresses: `203.0.113.5, 10.0.0.2`.
    #[default]
    XForwardedFor,
    /// `X-Real-IP`, one address, set by the nearest proxy: `203.0.113.5`.
    XRealIp,
}

impl ForwardedHeader {
    /// The header's name, as `http` spells it (lower case).
    ///
    /// ```
    /// use token_bucket::http::ForwardedHeader;
    ///
    /// assert_eq!(ForwardedHeader::XForwardedFor.name(), "x-forwarded-for");
    /// assert_eq!(ForwardedHeader::Forwarded.name(), "forwarded");
    /// assert_eq!(ForwardedHeader::XRealIp.name(), "x-real-ip");
    /// ```
    pub fn name(&self) -> HeaderName {
        match self {
            ForwardedHeader::Forwarded => FORWARDED,
            ForwardedHeader::XForwardedFor => HeaderName::from_static("x-forwarded-for"),
            ForwardedHeader::XRealIp => HeaderName::from_static("x-real-ip"),
        }
    }
}

/// Which peers are proxies whose forwarding header is believed: the networks they are
/// in, or how many of them stand in front of the service.
///
/// ```
/// use token_bucket::http::{ClientIp, TrustedProxies};
///
/// // Proxies anywhere in these networks.
/// let by_network = TrustedProxies::cidrs(["10.0.0.0/8".parse()?, "fd00::/8".parse()?]);
/// // Exactly two proxies (a CDN, then a load balancer) in front of every request.
/// let by_count = TrustedProxies::hops(2)?;
/// let client_ip = ClientIp::behind(by_network);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TrustedProxies {
    trust: Trust,
}

#[derive(Clone, PartialEq, Eq, Debug)]
enum Trust {
    /// Peers and hops inside these blocks are proxies.
    Cidrs(Box<[Cidr]>),
    /// The peer and the right-most `hops - 1` entries are proxies; from 1 to `MAX_HOPS`.
    Hops(usize),
}

impl TrustedProxies {
    /// The most hops [`hops`](TrustedProxies::hops) accepts, and the most entries read
    /// from a header.
    ///
    /// ```
    /// use token_bucket::http::TrustedProxies;
    ///
    /// assert!(TrustedProxies::hops(TrustedProxies::MAX_HOPS).is_ok());
    /// assert!(TrustedProxies::hops(TrustedProxies::MAX_HOPS + 1).is_err());
    /// ```
    pub const MAX_HOPS: usize = MAX_ENTRIES;

    /// Trusts peers and hops whose address is inside one of `blocks`. A request from a
    /// peer outside them is keyed by its peer. With no blocks, no peer is trusted: the
    /// same as [`ClientIp::peer`].
    ///
    /// ```
    /// use token_bucket::http::{Cidr, TrustedProxies};
    ///
    /// let blocks: Vec<Cidr> = ["10.0.0.0/8", "192.168.0.0/16"]
    ///     .iter()
    ///     .map(|text| text.parse())
    ///     .collect::<Result<_, _>>()?;
    /// let proxies = TrustedProxies::cidrs(blocks);
    /// # Ok::<(), token_bucket::http::CidrError>(())
    /// ```
    pub fn cidrs(blocks: impl IntoIterator<Item = Cidr>) -> TrustedProxies {
        TrustedProxies {
            trust: Trust::Cidrs(blocks.into_iter().collect()),
        }
    }

    /// Trusts that exactly `hops` proxies stand in front of the service: the peer is the
    /// nearest, and the right-most `hops - 1` header entries are the others. The client
    /// is the `hops`-th entry from the right. Every peer is taken for a proxy, so the
    /// service must not be reachable except through them.
    ///
    /// # Errors
    ///
    /// [`ClientIpError::ZeroHops`] for 0 (use [`ClientIp::peer`] to trust no proxy), and
    /// [`ClientIpError::TooManyHops`] above [`MAX_HOPS`](TrustedProxies::MAX_HOPS).
    ///
    /// ```
    /// use token_bucket::http::{ClientIpError, TrustedProxies};
    ///
    /// assert!(TrustedProxies::hops(1).is_ok());
    /// assert_eq!(TrustedProxies::hops(0), Err(ClientIpError::ZeroHops));
    /// assert_eq!(
    ///     TrustedProxies::hops(65),
    ///     Err(ClientIpError::TooManyHops { hops: 65, max: 64 })
    /// );
    /// ```
    pub fn hops(hops: usize) -> Result<TrustedProxies, ClientIpError> {
        match hops {
            0 => Err(ClientIpError::ZeroHops),
            1..=MAX_ENTRIES => Ok(TrustedProxies {
                trust: Trust::Hops(hops),
            }),
            _ => Err(ClientIpError::TooManyHops {
                hops,
                max: MAX_ENTRIES,
            }),
        }
    }
}

/// How to find a request's client: the configuration a key extractor holds.
///
/// [`peer`](ClientIp::peer) keys by the connection's peer address;
/// [`behind`](ClientIp::behind) believes trusted proxies' forwarding header, by the rules
/// below. [`client`](ClientIp::client) applies it.
///
/// ```
/// use http::HeaderMap;
/// use token_bucket::http::{ClientIp, TrustedProxies};
///
/// let client_ip = ClientIp::behind(TrustedProxies::cidrs(["10.0.0.0/8".parse()?]));
/// let mut headers = HeaderMap::new();
/// // The client forged the first entry; the proxy at 10.0.0.2 appended what it saw.
/// headers.insert("x-forwarded-for", "1.2.3.4, 203.0.113.9".parse()?);
///
/// // From the trusted proxy: the right-most untrusted address.
/// let key = client_ip.client("10.0.0.2".parse()?, &headers);
/// assert_eq!(key.to_string(), "203.0.113.9");
/// // Straight from the client: its own address, whatever it wrote.
/// let key = client_ip.client("198.51.100.1".parse()?, &headers);
/// assert_eq!(key.to_string(), "198.51.100.1");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # The rules
///
/// - **An untrusted peer is the client.** A request whose peer is not a trusted proxy is
///   keyed by its peer address, whatever headers it sends: anyone can write
///   `X-Forwarded-For`, only a proxy's word counts. With [`TrustedProxies::hops`] the
///   peer is always taken as the nearest proxy, so the service must be reachable only
///   through those proxies.
/// - **One header.** Only the header the proxies set is read. Reading several would let a
///   client forge the one its proxy does not overwrite.
/// - **From the right.** Each proxy appends the address it saw to the right of what it
///   was given, so the header is walked from the right, newest hop first, and what a
///   client wrote itself stays on the left, where the walk stops before reaching it. Several
///   header lines of the same name are one list, in order (HTTP list semantics).
///   - With CIDRs, addresses inside a trusted block are skipped; the first one that is
///     not trusted is the client. If every address is trusted, the left-most is.
///   - With a hop count `n`, the peer is proxy 1, the right-most `n - 1` entries are
///     proxies 2 to `n`, and the client is the `n`-th entry from the right; with fewer
///     entries, the left-most one.
/// - **Something not an address ends the walk.** An entry that is not an address
///   (`unknown`, an obfuscated `_hidden`, an empty entry, garbage, bytes that are not
///   ASCII) stops the walk, and the client is the last address walked over: the trusted
///   hop that reported it, or the peer if there is none. That hop's clients then share
///   its budget; none gets a fresh one.
/// - **Bounded work.** At most 64 entries ([`TrustedProxies::MAX_HOPS`]) are read from the
///   right; with CIDRs, if all 64 are trusted, the 64th is the client. An entry or a
///   `Forwarded` element longer than 1 KiB is not an address, and nothing left of it is
///   read. So a header of a megabyte costs what one of a kilobyte does, without
///   allocating.
/// - **The key.** The address found becomes a [`ClientKey`]: an IPv4 address, or an IPv6
///   address masked to its prefix (/64 by default, see
///   [`ipv6_prefix`](ClientIp::ipv6_prefix)), since one host usually holds a whole /64. An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, as
///   dual-stack sockets report IPv4 peers) is the IPv4 client it names, everywhere.
///
/// # Entries
///
/// `X-Forwarded-For` entries, `X-Real-IP`'s value and `Forwarded`'s `for=` values may be
/// `192.0.2.7`, `192.0.2.7:8080`, `2001:db8::7`, `[2001:db8::7]` or `[2001:db8::7]:8080`,
/// with spaces and tabs around them. A port may also be an obfuscated one (`_a1`). An
/// IPv6 zone id (`fe80::1%eth0`, or `Forwarded`'s percent-encoded `[fe80::1%25eth0]`) is
/// dropped. A bare IPv6 address cannot carry a port (`2001:db8::7:80` is one address):
/// ports go with brackets.
///
/// `Forwarded` (RFC 7239) is a list of elements separated by `,`, each of `name=value`
/// pairs separated by `;`. Only the pair named `for` (in any case) is read; a value may
/// be a quoted string with backslash escapes, and commas and semicolons inside quotes do
/// not separate. An element with no `for` pair, two of them, an unterminated quote or a
/// pair without `=` is not an address.
///
/// `X-Real-IP` holds one address, set by the nearest proxy: only its last line is read,
/// as the one entry of the walk. A comma in it makes it not an address.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ClientIp {
    /// `None`: the peer is the client.
    trusted: Option<TrustedProxies>,
    header: ForwardedHeader,
    ipv6_prefix: u8,
}

impl Default for ClientIp {
    /// [`ClientIp::peer`].
    fn default() -> ClientIp {
        ClientIp::peer()
    }
}

impl ClientIp {
    /// The client is the connection's peer address; no header is read. IPv6 peers are
    /// grouped by /64.
    ///
    /// ```
    /// use http::HeaderMap;
    /// use token_bucket::http::ClientIp;
    ///
    /// let key = ClientIp::peer().client("2001:db8:1:2:3:4:5:6".parse()?, &HeaderMap::new());
    /// assert_eq!(key.to_string(), "2001:db8:1:2::/64");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn peer() -> ClientIp {
        ClientIp {
            trusted: None,
            header: ForwardedHeader::XForwardedFor,
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
        }
    }

    /// The client is found behind `trusted` proxies, in `X-Forwarded-For` unless
    /// [`header`](ClientIp::header) names another. IPv6 clients are grouped by /64.
    ///
    /// ```
    /// use http::HeaderMap;
    /// use token_bucket::http::{ClientIp, TrustedProxies};
    ///
    /// let client_ip = ClientIp::behind(TrustedProxies::hops(1)?);
    /// let mut headers = HeaderMap::new();
    /// headers.insert("x-forwarded-for", "203.0.113.9".parse()?);
    /// assert_eq!(client_ip.client("10.0.0.2".parse()?, &headers).to_string(), "203.0.113.9");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn behind(trusted: TrustedProxies) -> ClientIp {
        ClientIp {
            trusted: Some(trusted),
            ..ClientIp::peer()
        }
    }

    /// Reads `header` instead of `X-Forwarded-For`. Without trusted proxies
    /// ([`peer`](ClientIp::peer)) no header is read, whichever is named.
    ///
    /// ```
    /// use http::HeaderMap;
    /// use token_bucket::http::{ClientIp, ForwardedHeader, TrustedProxies};
    ///
    /// let client_ip = ClientIp::behind(TrustedProxies::hops(1)?).header(ForwardedHeader::Forwarded);
    /// let mut headers = HeaderMap::new();
    /// headers.insert("forwarded", r#"for="[2001:db8::7]:4711";proto=https"#.parse()?);
    /// assert_eq!(client_ip.client("10.0.0.2".parse()?, &headers).to_string(), "2001:db8::/64");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn header(self, header: ForwardedHeader) -> ClientIp {
        ClientIp { header, ..self }
    }

    /// Groups IPv6 clients by their first `bits` bits instead of 64: 128 counts each
    /// address apart, 56 or 48 counts a whole site's allocation as one client.
    ///
    /// # Errors
    ///
    /// [`ClientIpError::Ipv6Prefix`] unless `bits` is from 1 to 128.
    ///
    /// ```
    /// use http::HeaderMap;
    /// use token_bucket::http::{ClientIp, ClientIpError};
    ///
    /// let client_ip = ClientIp::peer().ipv6_prefix(48)?;
    /// let key = client_ip.client("2001:db8:1:2::9".parse()?, &HeaderMap::new());
    /// assert_eq!(key.to_string(), "2001:db8:1::/48");
    /// assert_eq!(ClientIp::peer().ipv6_prefix(0), Err(ClientIpError::Ipv6Prefix { bits: 0 }));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ipv6_prefix(self, bits: u8) -> Result<ClientIp, ClientIpError> {
        Ok(ClientIp {
            ipv6_prefix: checked_ipv6_prefix(bits)?,
            ..self
        })
    }

    /// The key the request's client is counted under, from the connection's `peer`
    /// address and the request's `headers`, by the rules in [`ClientIp`]'s documentation.
    /// It never fails and never panics: whatever the headers hold, the answer is an
    /// address walked over, the peer's at worst.
    ///
    /// ```
    /// use http::HeaderMap;
    /// use token_bucket::http::{ClientIp, TrustedProxies};
    ///
    /// let client_ip = ClientIp::behind(TrustedProxies::cidrs(["10.0.0.0/8".parse()?]));
    /// let mut headers = HeaderMap::new();
    /// headers.append("x-forwarded-for", "203.0.113.9".parse()?);
    /// headers.append("x-forwarded-for", "10.0.0.3".parse()?);
    /// // Two proxies, 10.0.0.3 then the peer 10.0.0.2, both trusted and skipped.
    /// assert_eq!(client_ip.client("10.0.0.2".parse()?, &headers).to_string(), "203.0.113.9");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> ClientKey {
        ClientKey::masked(self.client_address(peer, headers), self.ipv6_prefix)
    }

    /// The client's whole address, before IPv6 addresses are grouped by prefix: what
    /// [`client`](ClientIp::client) keys by, for logs. An IPv4-mapped address is given as
    /// the IPv4 address it names.
    ///
    /// ```
    /// use http::HeaderMap;
    /// use token_bucket::http::{ClientIp, TrustedProxies};
    ///
    /// let client_ip = ClientIp::behind(TrustedProxies::hops(1)?);
    /// let mut headers = HeaderMap::new();
    /// headers.insert("x-forwarded-for", "[2001:db8::7]:4711".parse()?);
    /// let address = client_ip.client_address("10.0.0.2".parse()?, &headers);
    /// assert_eq!(address.to_string(), "2001:db8::7");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn client_address(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = canonical(peer);
        let Some(trusted) = &self.trusted else {
            return peer;
        };
        if let Trust::Cidrs(blocks) = &trusted.trust {
            if !is_inside(blocks, peer) {
                return peer;
            }
        }
        let name = self.header.name();
        let lines = headers.get_all(&name).iter().rev();
        let trust = &trusted.trust;
        match self.header {
            ForwardedHeader::XRealIp => walk(
                trust,
                peer,
                lines.take(1).map(|line| parse_node(line.as_bytes())),
            ),
            list => {
                let forwarded = list == ForwardedHeader::Forwarded;
                let parse: fn(&[u8]) -> Option<IpAddr> =
                    if forwarded { forwarded_for } else { parse_node };
                let elements =
                    lines.flat_map(|line| ElementsFromRight::new(line.as_bytes(), forwarded));
                walk(trust, peer, elements.map(parse))
            }
        }
    }
}

/// Why a [`ClientIp`] or [`TrustedProxies`] setting was refused.
///
/// ```
/// use token_bucket::http::{ClientIp, TrustedProxies};
///
/// assert_eq!(
///     ClientIp::peer().ipv6_prefix(129).unwrap_err().to_string(),
///     "an IPv6 prefix of 129 bits is out of range: it must be from 1 to 128"
/// );
/// assert_eq!(
///     TrustedProxies::hops(100).unwrap_err().to_string(),
///     "100 trusted hops are more than the 64 entries read from a forwarding header"
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientIpError {
    /// [`TrustedProxies::hops`] was given 0, which trusts no proxy.
    ZeroHops,
    /// [`TrustedProxies::hops`] was given more hops than are read from a header.
    TooManyHops {
        /// The hops asked for.
        hops: usize,
        /// The most accepted, [`TrustedProxies::MAX_HOPS`].
        max: usize,
    },
    /// An IPv6 prefix of 0 bits or above 128 was asked for.
    Ipv6Prefix {
        /// The bits asked for.
        bits: u8,
    },
}

impl fmt::Display for ClientIpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientIpError::ZeroHops => f.write_str(
                "0 trusted hops trusts no proxy: use `ClientIp::peer()` to key by the peer address",
            ),
            ClientIpError::TooManyHops { hops, max } => write!(
                f,
                "{hops} trusted hops are more than the {max} entries read from a forwarding header"
            ),
            ClientIpError::Ipv6Prefix { bits } => write!(
                f,
                "an IPv6 prefix of {bits} bits is out of range: it must be from 1 to 128"
            ),
        }
    }
}

impl Error for ClientIpError {}

/// The key a client is counted under: its IPv4 address, or its IPv6 address masked to a
/// prefix (/64 unless [`ClientIp::ipv6_prefix`] says otherwise), so that one host's many
/// addresses count as one client. An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) is the
/// IPv4 client it names.
///
/// It is 18 bytes, copied by value. Keys order IPv4 before IPv6, then by address.
/// `Display` writes an IPv4 address as it is and an IPv6 key as its network and prefix
/// (`2001:db8::/64`, or the bare address for /128).
///
/// ```
/// use std::net::IpAddr;
/// use token_bucket::http::ClientKey;
///
/// let one: IpAddr = "2001:db8::1".parse()?;
/// let other: IpAddr = "2001:db8::ffff:2".parse()?;
/// assert_eq!(ClientKey::from_ip(one, 64)?, ClientKey::from_ip(other, 64)?);
/// assert_ne!(ClientKey::from_ip(one, 128)?, ClientKey::from_ip(other, 128)?);
/// assert_eq!(ClientKey::from(one).to_string(), "2001:db8::/64");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientKey {
    repr: KeyRepr,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum KeyRepr {
    V4(Ipv4Addr),
    /// Bits below `prefix` are cleared.
    V6 {
        network: Ipv6Addr,
        prefix: u8,
    },
}

impl ClientKey {
    /// The key of a client at `ip`, an IPv6 address grouped by its first `ipv6_prefix`
    /// bits (ignored for IPv4 and IPv4-mapped addresses).
    ///
    /// # Errors
    ///
    /// [`ClientIpError::Ipv6Prefix`] unless `ipv6_prefix` is from 1 to 128, whatever the
    /// address.
    ///
    /// ```
    /// use token_bucket::http::ClientKey;
    ///
    /// let key = ClientKey::from_ip("2001:db8:aa:bb:cc::1".parse()?, 56)?;
    /// assert_eq!(key.to_string(), "2001:db8:aa::/56");
    /// let key = ClientKey::from_ip("::ffff:192.0.2.1".parse()?, 56)?;
    /// assert_eq!(key.to_string(), "192.0.2.1");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_ip(ip: IpAddr, ipv6_prefix: u8) -> Result<ClientKey, ClientIpError> {
        Ok(ClientKey::masked(ip, checked_ipv6_prefix(ipv6_prefix)?))
    }

    /// `from_ip` with a prefix already checked to be from 1 to 128.
    fn masked(ip: IpAddr, ipv6_prefix: u8) -> ClientKey {
        let repr = match canonical(ip) {
            IpAddr::V4(v4) => KeyRepr::V4(v4),
            IpAddr::V6(v6) => KeyRepr::V6 {
                network: mask_v6(v6, ipv6_prefix),
                prefix: ipv6_prefix,
            },
        };
        ClientKey { repr }
    }

    /// The key's address: the IPv4 address, or the IPv6 network (bits below the prefix
    /// cleared).
    ///
    /// ```
    /// use token_bucket::http::ClientKey;
    ///
    /// let key = ClientKey::from_ip("2001:db8::1".parse()?, 64)?;
    /// assert_eq!(key.ip().to_string(), "2001:db8::");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ip(&self) -> IpAddr {
        match self.repr {
            KeyRepr::V4(v4) => IpAddr::V4(v4),
            KeyRepr::V6 { network, .. } => IpAddr::V6(network),
        }
    }

    /// How many leading bits of [`ip`](ClientKey::ip) the key stands for: 32 for IPv4,
    /// the IPv6 prefix for IPv6.
    ///
    /// ```
    /// use token_bucket::http::ClientKey;
    ///
    /// assert_eq!(ClientKey::from_ip("192.0.2.1".parse()?, 64)?.prefix(), 32);
    /// assert_eq!(ClientKey::from_ip("2001:db8::1".parse()?, 64)?.prefix(), 64);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn prefix(&self) -> u8 {
        match self.repr {
            KeyRepr::V4(_) => 32,
            KeyRepr::V6 { prefix, .. } => prefix,
        }
    }
}

impl From<IpAddr> for ClientKey {
    /// The key with the default IPv6 prefix, /64.
    fn from(ip: IpAddr) -> ClientKey {
        ClientKey::masked(ip, DEFAULT_IPV6_PREFIX)
    }
}

impl fmt::Display for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.repr {
            KeyRepr::V4(v4) => write!(f, "{v4}"),
            KeyRepr::V6 {
                network,
                prefix: 128,
            } => write!(f, "{network}"),
            KeyRepr::V6 { network, prefix } => write!(f, "{network}/{prefix}"),
        }
    }
}

impl fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClientKey({self})")
    }
}

fn checked_ipv6_prefix(bits: u8) -> Result<u8, ClientIpError> {
    match bits {
        1..=128 => Ok(bits),
        _ => Err(ClientIpError::Ipv6Prefix { bits }),
    }
}

/// The client among `entries`, read right to left (an entry is `None` when it is not an
/// address), behind a `peer` already found trusted.
fn walk(trust: &Trust, peer: IpAddr, entries: impl Iterator<Item = Option<IpAddr>>) -> IpAddr {
    let mut last_walked = peer;
    match trust {
        Trust::Cidrs(blocks) => {
            for entry in entries.take(MAX_ENTRIES) {
                let Some(address) = entry else {
                    return last_walked;
                };
                let address = canonical(address);
                if !is_inside(blocks, address) {
                    return address;
                }
                last_walked = address;
            }
        }
        // The peer is hop 1; entries 1 to n - 1 are hops 2 to n; entry n is the client.
        Trust::Hops(hops) => {
            for entry in entries.take(*hops) {
                let Some(address) = entry else {
                    return last_walked;
                };
                last_walked = canonical(address);
            }
        }
    }
    last_walked
}

fn is_inside(blocks: &[Cidr], address: IpAddr) -> bool {
    blocks.iter().any(|block| block.contains(address))
}

#[cfg(test)]
mod tests;
