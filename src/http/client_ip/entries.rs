//! Reading addresses out of a forwarding header: a line's elements from the right, a
//! `Forwarded` element's `for=`, a node's address. It uses nothing else of the crate, and
//! bounds what it reads, whatever a client sends.

use std::net::{IpAddr, Ipv6Addr};

/// The longest list element read: a longer one is not an address, and the walk reads
/// nothing left of it, so a huge header costs no more than this per entry.
const MAX_ELEMENT_BYTES: usize = 1024;

/// The longest node (`[address%zone]:port`) parsed. An IPv6 address with an embedded IPv4
/// one, brackets and a port take 54 bytes; the rest is room for a zone id.
const MAX_NODE_BYTES: usize = 128;

/// The elements of one header line, separated by `,`, from the right; with `quotes`,
/// commas inside quoted strings (RFC 9110's, with backslash escapes) do not separate.
///
/// An element longer than [`MAX_ELEMENT_BYTES`] is not searched to its start: the rest of
/// the line is yielded as the last element, too long to be an address, so a line costs
/// at most that many bytes per element read.
pub(super) struct ElementsFromRight<'a> {
    rest: Option<&'a [u8]>,
    quotes: bool,
}

impl<'a> ElementsFromRight<'a> {
    pub(super) fn new(line: &'a [u8], quotes: bool) -> ElementsFromRight<'a> {
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
pub(super) fn forwarded_for(element: &[u8]) -> Option<IpAddr> {
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
pub(super) fn parse_node(node: &[u8]) -> Option<IpAddr> {
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
