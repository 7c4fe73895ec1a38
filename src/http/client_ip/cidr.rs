//! [`Cidr`], a block of IP addresses, and [`CidrError`]; and the address arithmetic
//! the client's key shares with it: an IPv4-mapped address as the IPv4 one it names. The
//! block itself is an [`ipnet::IpNet`], the ecosystem's type for one; this file adds the
//! errors that name what was written and the IPv4-mapped rule. It uses nothing else of
//! the crate.

use std::error::Error;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

use ipnet::{IpNet, Ipv6Net};

/// A block of IP addresses, written `10.0.0.0/8` or `2001:db8::/32`: the network address
/// and how many of its leading bits (the prefix) every address in the block shares.
///
/// A block whose address has bits set below the prefix (`10.0.0.1/8`) is refused, with
/// an error naming the block it would have been (`10.0.0.0/8`): in a list of trusted
/// proxies a typo must not widen the trust without a word. A block of IPv4-mapped IPv6
/// addresses (`::ffff:10.0.0.0/104`, a prefix of 96 bits or more) is the IPv4 block it
/// names (`10.0.0.0/8`). An IPv6 block holds no IPv4 address, and an IPv4 block no IPv6
/// address except the IPv4-mapped ones, which [`contains`](Cidr::contains) compares as
/// the IPv4 addresses they name.
///
/// ```
/// use token_bucket::http::Cidr;
///
/// let private: Cidr = "10.0.0.0/8".parse()?;
/// assert!(private.contains("10.1.2.3".parse()?));
/// assert!(private.contains("::ffff:10.1.2.3".parse()?));
/// assert!(!private.contains("11.0.0.1".parse()?));
/// assert_eq!("2001:db8::1".parse::<Cidr>()?.to_string(), "2001:db8::1/128");
/// assert_eq!(
///     "192.168.1.1/24".parse::<Cidr>().unwrap_err().to_string(),
///     "`192.168.1.1/24` has bits set below its prefix: the block is `192.168.1.0/24`"
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Cidr {
    /// The block; IPv4 for a mapped one.
    net: IpNet,
}

impl Cidr {
    /// The block of addresses sharing `address`'s first `prefix` bits; a prefix of 96 or
    /// more on an IPv4-mapped address makes the IPv4 block it names.
    ///
    /// # Errors
    ///
    /// [`CidrError::PrefixTooLong`] if `prefix` is longer than the address: above 32 for
    /// IPv4, above 128 for IPv6. [`CidrError::HostBitsSet`] if `address` has bits set
    /// below the prefix.
    ///
    /// ```
    /// use std::net::{IpAddr, Ipv4Addr};
    /// use token_bucket::http::{Cidr, CidrError};
    ///
    /// let network = IpAddr::V4(Ipv4Addr::new(172, 16, 0, 0));
    /// assert_eq!(Cidr::new(network, 12)?.to_string(), "172.16.0.0/12");
    /// assert_eq!(
    ///     Cidr::new(network, 33),
    ///     Err(CidrError::PrefixTooLong { prefix: 33, address_bits: 32 })
    /// );
    /// let host = IpAddr::V4(Ipv4Addr::new(172, 16, 5, 4));
    /// assert_eq!(
    ///     Cidr::new(host, 12),
    ///     Err(CidrError::HostBitsSet { text: "172.16.5.4/12".into(), network: Cidr::new(network, 12)? })
    /// );
    /// # Ok::<(), CidrError>(())
    /// ```
    pub fn new(address: IpAddr, prefix: u8) -> Result<Cidr, CidrError> {
        Cidr::written(address, u32::from(prefix), || format!("{address}/{prefix}"))
    }

    /// [`new`](Cidr::new), with the prefix as parsed from text, which may not fit a `u8`,
    /// and the text the block was written as, for an error.
    fn written(
        address: IpAddr,
        prefix: u32,
        text: impl FnOnce() -> String,
    ) -> Result<Cidr, CidrError> {
        let too_long = CidrError::PrefixTooLong {
            prefix,
            address_bits: address_bits(address),
        };
        let prefix = u8::try_from(prefix).map_err(|_| too_long.clone())?;
        let net = IpNet::new(address, prefix).map_err(|_| too_long)?;
        let net = match net {
            IpNet::V6(v6) => mapped(v6).unwrap_or(net),
            IpNet::V4(_) => net,
        };
        let network = Cidr { net: net.trunc() };
        if network.net == net {
            Ok(network)
        } else {
            Err(CidrError::HostBitsSet {
                text: text(),
                network,
            })
        }
    }

    /// The block's first address.
    ///
    /// ```
    /// use token_bucket::http::Cidr;
    ///
    /// let block: Cidr = "192.168.1.0/24".parse()?;
    /// assert_eq!(block.network().to_string(), "192.168.1.0");
    /// # Ok::<(), token_bucket::http::CidrError>(())
    /// ```
    pub fn network(&self) -> IpAddr {
        self.net.network()
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
        self.net.prefix_len()
    }

    /// The block as an [`ipnet::IpNet`] (IPv4 for a block of IPv4-mapped addresses).
    ///
    /// ```
    /// use token_bucket::http::Cidr;
    ///
    /// let block: Cidr = "::ffff:10.0.0.0/104".parse()?;
    /// assert_eq!(block.ip_net(), "10.0.0.0/8".parse::<ipnet::IpNet>()?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ip_net(&self) -> IpNet {
        self.net
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
    #[inline]
    pub fn contains(&self, address: IpAddr) -> bool {
        self.net.contains(&canonical(address))
    }
}

impl TryFrom<IpNet> for Cidr {
    type Error = CidrError;

    /// The block `net` (IPv4 for a block of IPv4-mapped addresses).
    ///
    /// # Errors
    ///
    /// [`CidrError::HostBitsSet`] if `net`'s address has bits set below its prefix, as
    /// an `IpNet` may.
    ///
    /// ```
    /// use ipnet::IpNet;
    /// use token_bucket::http::Cidr;
    ///
    /// let block = Cidr::try_from("10.0.0.0/8".parse::<IpNet>()?)?;
    /// assert_eq!(block.to_string(), "10.0.0.0/8");
    /// assert!(Cidr::try_from("10.0.0.1/8".parse::<IpNet>()?).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn try_from(net: IpNet) -> Result<Cidr, CidrError> {
        Cidr::written(net.addr(), u32::from(net.prefix_len()), || net.to_string())
    }
}

/// A block of IPv4-mapped addresses as the IPv4 block it names: a prefix of 96 bits or
/// more on `::ffff:0:0/96`.
fn mapped(v6: Ipv6Net) -> Option<IpNet> {
    let v4 = v6.addr().to_ipv4_mapped()?;
    let prefix = v6.prefix_len().checked_sub(96)?;
    IpNet::new(IpAddr::V4(v4), prefix).ok()
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.net.fmt(f)
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
    /// [`CidrError::NotAPrefix`] if the part after it is not a decimal number,
    /// [`CidrError::PrefixTooLong`] if the number is longer than the address, and
    /// [`CidrError::HostBitsSet`] if the address has bits set below the prefix.
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
        Cidr::written(address, prefix, || text.to_owned())
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
/// assert_eq!(
///     "10.0.0.1/8".parse::<Cidr>().unwrap_err().to_string(),
///     "`10.0.0.1/8` has bits set below its prefix: the block is `10.0.0.0/8`"
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
    /// The address has bits set below the prefix, so it is a host inside the block
    /// rather than the block's network: `10.0.0.1/8` for `10.0.0.0/8`. Refused rather
    /// than cleared, since a list of trusted networks must say what it means.
    HostBitsSet {
        /// The block as it was written.
        text: String,
        /// The block it would have been with those bits cleared.
        network: Cidr,
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
            CidrError::HostBitsSet { text, network } => write!(
                f,
                "`{text}` has bits set below its prefix: the block is `{network}`"
            ),
        }
    }
}

impl Error for CidrError {}

/// The address, an IPv4-mapped IPv6 one as the IPv4 address it names.
pub(super) fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
        IpAddr::V4(_) => address,
    }
}

pub(super) fn address_bits(address: IpAddr) -> u8 {
    match address {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

/// `address` with every bit below its first `prefix` cleared (`prefix` at most 128).
pub(super) fn mask_v6(address: Ipv6Addr, prefix: u8) -> Ipv6Addr {
    Ipv6Net::new(address, prefix).map_or(address, |net| net.network())
}
