//! [`Cidr`], a block of IP addresses, and [`CidrError`]; and the address arithmetic
//! the client's key shares with it: an IPv4-mapped address as the IPv4 one it names, and
//! masks. It uses nothing else of the crate.

use std::error::Error;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

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

pub(super) fn mask_v4(address: Ipv4Addr, prefix: u8) -> Ipv4Addr {
    let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
    Ipv4Addr::from(u32::from(address) & mask)
}

pub(super) fn mask_v6(address: Ipv6Addr, prefix: u8) -> Ipv6Addr {
    let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
    Ipv6Addr::from(u128::from(address) & mask)
}
