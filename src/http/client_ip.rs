//! Which client a request comes from: its peer address, or behind trusted proxies the
//! address they report, so that a client cannot forge its way to a fresh budget.
//!
//! [`ClientIp`] is the configuration: whom to trust ([`TrustedProxies`]) and which header
//! they set ([`ForwardedHeader`]). [`ClientIp::client`] turns a request's peer address and
//! headers into the [`ClientKey`] the client is counted under. [`Cidr`] names the trusted
//! networks. The rules are documented on [`ClientIp`], where users of the module read
//! them.

use std::error::Error;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use ::http::header::{HeaderMap, HeaderName, FORWARDED};

/// The most entries read from a header, and the most trusted hops.
const MAX_ENTRIES: usize = 64;

/// The longest list element read: a longer one is not an address, and the walk reads
/// nothing left of it, so a huge header costs no more than this per entry.
const MAX_ELEMENT_BYTES: usize = 1024;

/// The longest node (`[address%zone]:port`) parsed. An IPv6 address with an embedded IPv4
/// one, brackets and a port take 54 bytes; the rest is room for a zone id.
const MAX_NODE_BYTES: usize = 128;

/// The IPv6 prefix clients are grouped by unless [`ClientIp::ipv6_prefix`] says otherwise.
const DEFAULT_IPV6_PREFIX: u8 = 64;

/// A block of IP addresses, written `10.0.0.0/8` or `2001:db8::/32`: the network address
/// and how many of its leading bits (the prefix) every address in the block shares.
///
/// Bits of the address below the prefix are cleared, so `192.168.1.1/24` is the block
/// `192.168.1.0/24`, as operators often write it. A block of IPv4-mapped IPv6 addresses
/// (`::ffff:10.0.0.0/104`, a prefix of 96 bits or more) is the IPv4 block it names
/// (`10.0.0.0/8`). An IPv6 block holds no IPv4 address, and an IPv4 block no IPv6 address
/// except the IPv4-mapped ones, which [`contains`](Cidr::contains) compares as the IPv4
/// addresses they name.
///
/// ```
/// use token_bucket::http::Cidr;
///
/// let private: Cidr = "10.0.0.0/8".parse()?;
/// assert!(private.contains("10.1.2.3".parse()?));
/// assert!(private.contains("::ffff:10.1.2.3".parse()?));
/// assert!(!private.contains("11.0.0.1".parse()?));
/// assert_eq!("192.168.1.1/24".parse::<Cidr>()?.to_string(), "192.168.1.0/24");
/// assert_eq!("2001:db8::1".parse::<Cidr>()?.to_string(), "2001:db8::1/128");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Cidr {
    /// The address with every bit below the prefix cleared; IPv4 for a mapped block.
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// The block of addresses sharing `address`'s first `prefix` bits. Bits of `address`
    /// below the prefix are cleared; a prefix of 96 or more on an IPv4-mapped address
    /// makes the IPv4 block it names.
    ///
    /// # Errors
    ///
    /// [`CidrError::PrefixTooLong`] if `prefix` is longer than the address: above 32 for
    /// IPv4, above 128 for IPv6.
    ///
    /// ```
    /// use std::net::{IpAddr, Ipv4Addr};
    /// use token_bucket::http::{Cidr, CidrError};
    ///
    /// let address = IpAddr::V4(Ipv4Addr::new(172, 16, 5, 4));
    /// assert_eq!(Cidr::new(address, 12)?.to_string(), "172.16.0.0/12");
    /// assert_eq!(
    ///     Cidr::new(address, 33),
    ///     Err(CidrError::PrefixTooLong { prefix: 33, address_bits: 32 })
    /// );
    /// # Ok::<(), CidrError>(())
    /// ```
    pub fn new(address: IpAddr, prefix: u8) -> Result<Cidr, CidrError> {
        Cidr::with_prefix(address, u32::from(prefix))
    }

    /// [`new`](Cidr::new), with the prefix as parsed from text, which may not fit a `u8`.
    fn with_prefix(address: IpAddr, prefix: u32) -> Result<Cidr, CidrError> {
        let address_bits = address_bits(address);
        let prefix = match u8::try_from(prefix) {
            Ok(prefix) if prefix <= address_bits => prefix,
            _ => {
                return Err(CidrError::PrefixTooLong {
                    prefix,
                    address_bits,
                })
            }
        };
        Ok(match address {
            IpAddr::V4(v4) => Cidr {
                network: IpAddr::V4(mask_v4(v4, prefix)),
                prefix,
            },
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) if prefix >= 96 => Cidr {
                    network: IpAddr::V4(mask_v4(v4, prefix - 96)),
                    prefix: prefix - 96,
                },
                _ => Cidr {
                    network: IpAddr::V6(mask_v6(v6, prefix)),
                    prefix,
                },
            },
        })
    }

    /// The block's first address, every bit below the prefix cleared.
    ///
    /// ```
    /// use token_bucket::http::Cidr;
    ///
    /// let block: Cidr = "192.168.1.77/24".parse()?;
    /// assert_eq!(block.network().to_string(), "192.168.1.0");
    /// # Ok::<(), token_bucket::http::CidrError>(())
    /// ```
    pub fn network(&self) -> IpAddr {
        self.network
    }

    /// How many leading bits every address in the block shares with
    /// [`network`](Cidr::network).
    ///
    /// ```
    /// use token_bucket::http::Cidr;
    ///
    /// assert_eq!("2001:db8::/32".parse::<Cidr>()?.prefix(), 32);
    /// assert_eq!("10.0.0.1".parse::<Cidr>()?.prefix(), 32);
    /// # Ok::<(), token_bucket::http::CidrError>(())
    /// ```
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `address` is in the block. An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`)
    /// is compared as the IPv4 address it names; otherwise an IPv4 address is never in
    /// an IPv6 block, nor the reverse.
    ///
    /// ```
    /// use token_bucket::http::Cidr;
    ///
    /// let block: Cidr = "2001:db8::/32".parse()?;
    /// assert!(block.contains("2001:db8:ffff::1".parse()?));
    /// assert!(!block.contains("2001:db9::1".parse()?));
    /// assert!(!block.contains("192.0.2.1".parse()?));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn contains(&self, address: IpAddr) -> bool {
        match (self.network, canonical(address)) {
            (IpAddr::V4(network), IpAddr::V4(address)) => mask_v4(address, self.prefix) == network,
            (IpAddr::V6(network), IpAddr::V6(address)) => mask_v6(address, self.prefix) == network,
            _ => false,
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    /// Parses `address/prefix` (`10.0.0.0/8`, `2001:db8::/32`), or a bare address, which
    /// is the block of that one address (`/32` or `/128`). No spaces are allowed.
    ///
    /// # Errors
    ///
    /// [`CidrError::NotAnAddress`] if the part before `/` is not an IP address,
    /// [`CidrError::NotAPrefix`] if the part after it is not a decimal number, and
    /// [`CidrError::PrefixTooLong`] if the number is longer than the address.
    fn from_str(text: &str) -> Result<Cidr, CidrError> {
        let (address_text, prefix_text) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let address: IpAddr = address_text.parse().map_err(|_| CidrError::NotAnAddress {
            text: text.to_owned(),
        })?;
        let prefix = match prefix_text {
            None => u32::from(address_bits(address)),
            // `u32::from_str` also takes a leading `+`: only digits are a prefix.
            Some(digits) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
                digits.parse().map_err(|_| CidrError::NotAPrefix {
                    text: text.to_owned(),
                })?
            }
            Some(_) => {
                return Err(CidrError::NotAPrefix {
                    text: text.to_owned(),
                })
            }
        };
        Cidr::with_prefix(address, prefix)
    }
}

/// Why a [`Cidr`] could not be made.
///
/// ```
/// use token_bucket::http::{Cidr, CidrError};
///
/// assert_eq!(
///     "10.0.0.300/8".parse::<Cidr>().unwrap_err().to_string(),
///     "`10.0.0.300/8` is not an IP address or CIDR block"
/// );
/// assert_eq!(
///     "10.0.0.0/33".parse::<Cidr>().unwrap_err().to_string(),
///     "prefix 33 is longer than an IPv4 address's 32 bits"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CidrError {
    /// The text, or its part before `/`, is not an IP address.
    NotAnAddress {
        /// The whole text given.
        text: String,
    },
    /// The part after `/` is not a decimal number of bits (empty, signed, not digits, or
    /// too large for a `u32`).
    NotAPrefix {
        /// The whole text given.
        text: String,
    },
    /// The prefix is longer than the address has bits.
    PrefixTooLong {
        /// The prefix given.
        prefix: u32,
        /// How many bits the address has: 32 for IPv4, 128 for IPv6.
        address_bits: u8,
    },
}

impl fmt::Display for CidrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CidrError::NotAnAddress { text } => {
                write!(f, "`{text}` is not an IP address or CIDR block")
            }
            CidrError::NotAPrefix { text } => write!(
                f,
                "`{text}` is not a CIDR block: its prefix is not a number of bits"
            ),
            CidrError::PrefixTooLong {
                prefix,
                address_bits,
            } => {
                let family = if *address_bits == 32 { "IPv4" } else { "IPv6" };
                write!(
                    f,
                    "prefix {prefix} is longer than an {family} address's {address_bits} bits"
                )
            }
        }
    }
}

impl Error for CidrError {}

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

/// The elements of one header line, separated by `,`, from the right; with `quotes`,
/// commas inside quoted strings (RFC 9110's, with backslash escapes) do not separate.
///
/// An element longer than [`MAX_ELEMENT_BYTES`] is not searched to its start: the rest of
/// the line is yielded as the last element, too long to be an address, so a line costs
/// at most that many bytes per element read.
struct ElementsFromRight<'a> {
    rest: Option<&'a [u8]>,
    quotes: bool,
}

impl<'a> ElementsFromRight<'a> {
    fn new(line: &'a [u8], quotes: bool) -> ElementsFromRight<'a> {
        ElementsFromRight {
            rest: Some(line),
            quotes,
        }
    }
}

impl<'a> Iterator for ElementsFromRight<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let bytes = self.rest?;
        let lowest = bytes.len().saturating_sub(MAX_ELEMENT_BYTES + 1);
        let mut in_quotes = false;
        for index in (lowest..bytes.len()).rev() {
            match bytes[index] {
                b',' if !in_quotes => {
                    self.rest = Some(&bytes[..index]);
                    return Some(&bytes[index + 1..]);
                }
                // Read from the right, a quote opens a string; inside one, a quote closes
                // it unless an odd run of backslashes escapes it. Parsed from the left,
                // the same quotes pair up, so the proxies' well-formed elements on the
                // right split alike whatever a client wrote on the left.
                b'"' if self.quotes => {
                    let backslashes = bytes[lowest..index]
                        .iter()
                        .rev()
                        .take_while(|&&byte| byte == b'\\')
                        .count();
                    if !in_quotes || backslashes % 2 == 0 {
                        in_quotes = !in_quotes;
                    }
                }
                _ => {}
            }
        }
        self.rest = None;
        Some(bytes)
    }
}

/// The address in a `Forwarded` element's `for=` pair, if it has exactly one and it is
/// an address.
fn forwarded_for(element: &[u8]) -> Option<IpAddr> {
    if element.len() > MAX_ELEMENT_BYTES {
        return None;
    }
    let mut node = None;
    let mut rest = Some(element);
    while let Some(bytes) = rest {
        let (pair, after) = split_pair(bytes)?;
        rest = after;
        let pair = trim_whitespace(pair);
        if pair.is_empty() {
            continue;
        }
        let equals = pair.iter().position(|&byte| byte == b'=')?;
        if pair[..equals].eq_ignore_ascii_case(b"for") {
            if node.is_some() {
                return None;
            }
            node = Some(&pair[equals + 1..]);
        }
    }
    let node = node?;
    if node.first() == Some(&b'"') {
        let mut buffer = [0; MAX_NODE_BYTES];
        parse_node(unquote(node, &mut buffer)?)
    } else {
        parse_node(node)
    }
}

/// The first pair of a `Forwarded` element and what follows its `;`, or `None` if a
/// quoted string is not terminated.
fn split_pair(bytes: &[u8]) -> Option<(&[u8], Option<&[u8]>)> {
    let mut in_quotes = false;
    let mut escaped = false;
    for (index, &byte) in bytes.iter().enumerate() {
        if in_quotes {
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_quotes = false;
            }
        } else if byte == b'"' {
            in_quotes = true;
        } else if byte == b';' {
            return Some((&bytes[..index], Some(&bytes[index + 1..])));
        }
    }
    (!in_quotes).then_some((bytes, None))
}

/// A quoted string's content, its escapes undone, in `buffer`; `None` if it is not one
/// quoted string or does not fit.
fn unquote<'b>(quoted: &[u8], buffer: &'b mut [u8; MAX_NODE_BYTES]) -> Option<&'b [u8]> {
    let inner = quoted.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    let mut length = 0;
    let mut bytes = inner.iter();
    while let Some(&byte) = bytes.next() {
        let byte = match byte {
            b'\\' => *bytes.next()?,
            b'"' => return None,
            other => other,
        };
        *buffer.get_mut(length)? = byte;
        length += 1;
    }
    Some(&buffer[..length])
}

/// The address in a node: `192.0.2.7`, `192.0.2.7:80`, `2001:db8::7`, `[2001:db8::7]`,
/// `[2001:db8::7]:80`, with an IPv6 zone id dropped and spaces around trimmed.
fn parse_node(node: &[u8]) -> Option<IpAddr> {
    // Checked before trimming too, so that a megabyte of spaces is not walked.
    if node.len() > MAX_ELEMENT_BYTES {
        return None;
    }
    let node = trim_whitespace(node);
    if node.len() > MAX_NODE_BYTES {
        return None;
    }
    let text = std::str::from_utf8(node).ok()?;
    if let Some(bracketed) = text.strip_prefix('[') {
        let (inside, after) = bracketed.split_once(']')?;
        let port_ok = after.is_empty() || after.strip_prefix(':').is_some_and(is_port);
        return port_ok
            .then(|| parse_ipv6(inside))
            .flatten()
            .map(IpAddr::V6);
    }
    match text.split_once(':') {
        None => text.parse().ok().map(IpAddr::V4),
        Some((host, port)) if !port.contains(':') => is_port(port)
            .then(|| host.parse().ok())
            .flatten()
            .map(IpAddr::V4),
        Some(_) => parse_ipv6(text).map(IpAddr::V6),
    }
}

/// An IPv6 address, with its zone id (`%eth0`, `%25eth0`) dropped.
fn parse_ipv6(text: &str) -> Option<Ipv6Addr> {
    let address = match text.split_once('%') {
        Some((_, "")) => return None,
        Some((address, _zone)) => address,
        None => text,
    };
    address.parse().ok()
}

/// A port: up to five digits, or RFC 7239's obfuscated `_` and letters, digits, `.`, `_`
/// or `-`.
fn is_port(text: &str) -> bool {
    match text.strip_prefix('_') {
        Some(obfuscated) => {
            !obfuscated.is_empty()
                && obfuscated
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'))
        }
        None => (1..=5).contains(&text.len()) && text.bytes().all(|byte| byte.is_ascii_digit()),
    }
}

fn trim_whitespace(mut bytes: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = bytes {
        bytes = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = bytes {
        bytes = rest;
    }
    bytes
}

/// The address, an IPv4-mapped IPv6 one as the IPv4 address it names.
fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
        IpAddr::V4(_) => address,
    }
}

fn address_bits(address: IpAddr) -> u8 {
    match address {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

fn mask_v4(address: Ipv4Addr, prefix: u8) -> Ipv4Addr {
    let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
    Ipv4Addr::from(u32::from(address) & mask)
}

fn mask_v6(address: Ipv6Addr, prefix: u8) -> Ipv6Addr {
    let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
    Ipv6Addr::from(u128::from(address) & mask)
}

#[cfg(test)]
mod tests;
