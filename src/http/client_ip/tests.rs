use std::time::{Duration, Instant};

use ::http::{HeaderMap, HeaderValue};
use proptest::prelude::*;

use super::*;

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

/// The key of a client at `text`, IPv6 by /64.
fn key(text: &str) -> ClientKey {
    ClientKey::from(ip(text))
}

/// Headers with one line of `name` for each of `lines`, in order.
fn header_map(name: &str, lines: &[&str]) -> HeaderMap {
    raw_header_map(name, lines.iter().map(|line| line.as_bytes().to_vec()))
}

fn raw_header_map(name: &str, lines: impl IntoIterator<Item = Vec<u8>>) -> HeaderMap {
    let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
    let mut headers = HeaderMap::new();
    for line in lines {
        headers.append(&name, HeaderValue::from_bytes(&line).unwrap());
    }
    headers
}

fn behind_cidrs(blocks: &[&str]) -> ClientIp {
    ClientIp::behind(TrustedProxies::cidrs(
        blocks.iter().map(|block| block.parse::<Cidr>().unwrap()),
    ))
}

fn behind_hops(hops: usize) -> ClientIp {
    ClientIp::behind(TrustedProxies::hops(hops).unwrap())
}

/// Proxies in 10.0.0.0/8, as a private network's load balancers are.
fn private() -> ClientIp {
    behind_cidrs(&["10.0.0.0/8"])
}

const PROXY: &str = "10.0.0.2";

#[test]
fn forged_headers_from_an_untrusted_peer_are_ignored() {
    let peer = ip("198.51.100.1");
    let forged = [
        (
            ForwardedHeader::XForwardedFor,
            "x-forwarded-for",
            "10.0.0.5, 1.2.3.4",
        ),
        (ForwardedHeader::Forwarded, "forwarded", "for=1.2.3.4"),
        (ForwardedHeader::XRealIp, "x-real-ip", "1.2.3.4"),
    ];
    for (header, name, value) in forged {
        let headers = header_map(name, &[value]);
        assert_eq!(
            private().header(header).client(peer, &headers),
            key("198.51.100.1")
        );
        assert_eq!(
            ClientIp::peer().header(header).client(peer, &headers),
            key("198.51.100.1")
        );
    }
}

#[test]
fn no_trusted_block_trusts_no_peer() {
    let client_ip = ClientIp::behind(TrustedProxies::cidrs([]));
    let headers = header_map("x-forwarded-for", &["203.0.113.9"]);
    assert_eq!(client_ip.client(ip(PROXY), &headers), key(PROXY));
}

#[test]
fn one_trusted_proxy() {
    let headers = header_map("x-forwarded-for", &["203.0.113.9"]);
    assert_eq!(private().client(ip(PROXY), &headers), key("203.0.113.9"));
    assert_eq!(
        behind_hops(1).client(ip(PROXY), &headers),
        key("203.0.113.9")
    );
    // What the client wrote itself stays on the left, past the client.
    let headers = header_map("x-forwarded-for", &["10.0.0.7, 1.1.1.1, 203.0.113.9"]);
    assert_eq!(private().client(ip(PROXY), &headers), key("203.0.113.9"));
    assert_eq!(
        behind_hops(1).client(ip(PROXY), &headers),
        key("203.0.113.9")
    );
}

#[test]
fn two_proxies_by_cidr() {
    let client_ip = behind_cidrs(&["10.0.0.0/8", "192.0.2.0/24"]);
    let headers = header_map("x-forwarded-for", &["1.1.1.1, 203.0.113.9, 192.0.2.50"]);
    assert_eq!(client_ip.client(ip(PROXY), &headers), key("203.0.113.9"));
}

#[test]
fn two_proxies_by_hops() {
    // A CDN at 192.0.2.50 in front of a load balancer, the peer, at 192.0.2.1.
    let headers = header_map("x-forwarded-for", &["1.1.1.1, 203.0.113.9, 192.0.2.50"]);
    assert_eq!(
        behind_hops(2).client(ip("192.0.2.1"), &headers),
        key("203.0.113.9")
    );
    assert_eq!(
        behind_hops(3).client(ip("192.0.2.1"), &headers),
        key("1.1.1.1")
    );
}

#[test]
fn an_all_trusted_chain_is_keyed_by_its_left_most_address() {
    let headers = header_map("x-forwarded-for", &["10.0.0.9, 10.0.0.3"]);
    assert_eq!(private().client(ip(PROXY), &headers), key("10.0.0.9"));
}

#[test]
fn fewer_entries_than_hops_key_by_the_left_most() {
    let headers = header_map("x-forwarded-for", &["203.0.113.9, 192.0.2.50"]);
    assert_eq!(
        behind_hops(3).client(ip("192.0.2.1"), &headers),
        key("203.0.113.9")
    );
    assert_eq!(
        behind_hops(64).client(ip("192.0.2.1"), &headers),
        key("203.0.113.9")
    );
}

#[test]
fn no_header_behind_a_trusted_peer_keys_by_the_peer() {
    let empty = HeaderMap::new();
    assert_eq!(private().client(ip(PROXY), &empty), key(PROXY));
    assert_eq!(behind_hops(2).client(ip(PROXY), &empty), key(PROXY));
    // Only the configured header is read.
    let other = header_map("x-real-ip", &["203.0.113.9"]);
    assert_eq!(private().client(ip(PROXY), &other), key(PROXY));
}

#[test]
fn several_lines_are_one_list_in_order() {
    let headers = header_map("x-forwarded-for", &["1.1.1.1, 203.0.113.9", "10.0.0.3"]);
    assert_eq!(private().client(ip(PROXY), &headers), key("203.0.113.9"));
    assert_eq!(
        behind_hops(2).client(ip(PROXY), &headers),
        key("203.0.113.9")
    );
    assert_eq!(behind_hops(3).client(ip(PROXY), &headers), key("1.1.1.1"));
}

#[test]
fn an_entry_that_is_not_an_address_ends_the_walk_at_the_last_address() {
    let cases = [
        ("203.0.113.9, garbage, 10.0.0.3", "10.0.0.3"),
        ("203.0.113.9, unknown, 10.0.0.3", "10.0.0.3"),
        ("203.0.113.9, _hidden, 10.0.0.3", "10.0.0.3"),
        ("203.0.113.9, , 10.0.0.3", "10.0.0.3"),
        ("203.0.113.9, unknown", PROXY),
        ("203.0.113.9,", PROXY),
        ("", PROXY),
        ("203.0.113.9 10.0.0.3", PROXY),
    ];
    for (value, expected) in cases {
        let headers = header_map("x-forwarded-for", &[value]);
        assert_eq!(
            private().client(ip(PROXY), &headers),
            key(expected),
            "{value:?}"
        );
    }
    let headers = header_map("x-forwarded-for", &["1.1.1.1, junk, 192.0.2.50"]);
    assert_eq!(
        behind_hops(3).client(ip("192.0.2.1"), &headers),
        key("192.0.2.50")
    );
    assert_eq!(
        behind_hops(2).client(ip("192.0.2.1"), &headers),
        key("192.0.2.50")
    );
}

#[test]
fn entry_forms() {
    let good = [
        ("203.0.113.9", "203.0.113.9"),
        ("203.0.113.9:8080", "203.0.113.9"),
        ("203.0.113.9:_a1.b-c", "203.0.113.9"),
        (" \t203.0.113.9 \t", "203.0.113.9"),
        ("2001:db8::7", "2001:db8::7"),
        ("[2001:db8::7]", "2001:db8::7"),
        ("[2001:db8::7]:443", "2001:db8::7"),
        ("::ffff:203.0.113.9", "203.0.113.9"),
        ("[::ffff:203.0.113.9]:80", "203.0.113.9"),
    ];
    for (entry, expected) in good {
        let headers = header_map("x-forwarded-for", &[entry]);
        let address = behind_hops(1).client_address(ip(PROXY), &headers);
        assert_eq!(address, ip(expected), "{entry:?}");
    }
    let bad = [
        "203.0.113.9:",
        "203.0.113.9:123456",
        "203.0.113.9:_",
        "203.0.113.9:8x",
        "203.0.113.9%eth0",
        "[203.0.113.9]",
        "[2001:db8::7",
        "[2001:db8::7]x",
        "[2001:db8::7]:",
        "2001:db8::7%",
        "203.0.113",
        "203.0.113.256",
    ];
    for entry in bad {
        let headers = header_map("x-forwarded-for", &[entry]);
        assert_eq!(
            behind_hops(1).client_address(ip(PROXY), &headers),
            ip(PROXY),
            "{entry:?}"
        );
    }
}

#[test]
fn zone_ids_are_dropped() {
    let cases = [
        (
            "x-forwarded-for",
            ForwardedHeader::XForwardedFor,
            "fe80::1%eth0",
        ),
        (
            "x-forwarded-for",
            ForwardedHeader::XForwardedFor,
            "[fe80::1%eth0]:80",
        ),
        (
            "forwarded",
            ForwardedHeader::Forwarded,
            r#"for="[fe80::1%25eth0]""#,
        ),
        (
            "forwarded",
            ForwardedHeader::Forwarded,
            r#"for="[fe80::1%25eth0]:80""#,
        ),
        ("x-real-ip", ForwardedHeader::XRealIp, "fe80::1%eth0"),
    ];
    for (name, header, value) in cases {
        let headers = header_map(name, &[value]);
        let client_ip = behind_hops(1).header(header);
        assert_eq!(
            client_ip.client_address(ip(PROXY), &headers),
            ip("fe80::1"),
            "{value:?}"
        );
    }
}

/// The client `Forwarded` lines name behind one trusted proxy in 10.0.0.0/8.
fn forwarded_client(lines: &[&str]) -> IpAddr {
    let headers = header_map("forwarded", lines);
    private()
        .header(ForwardedHeader::Forwarded)
        .client_address(ip(PROXY), &headers)
}

#[test]
fn forwarded_pairs_quotes_ports_and_case() {
    let cases = [
        ("for=192.0.2.60;proto=http;by=203.0.113.43", "192.0.2.60"),
        ("proto=http;for=192.0.2.60", "192.0.2.60"),
        (r#"for="[2001:db8:cafe::17]:4711""#, "2001:db8:cafe::17"),
        (r#"for="[2001:db8:cafe::17]""#, "2001:db8:cafe::17"),
        ("for=[2001:db8:cafe::17]", "2001:db8:cafe::17"),
        (r#"for="192.0.2.60:8080""#, "192.0.2.60"),
        (r#"for="192.0.2.60:_port""#, "192.0.2.60"),
        ("For=192.0.2.60", "192.0.2.60"),
        (r#"FOR="192.0.2.60""#, "192.0.2.60"),
        (" for=192.0.2.60 ; proto=https ", "192.0.2.60"),
        ("for=192.0.2.60;", "192.0.2.60"),
        (r#"for="\[2001:db8::1\]:80""#, "2001:db8::1"),
        (r#"for="\1\9\2.0.2.60""#, "192.0.2.60"),
        // Separators inside quotes do not separate.
        (r#"for=192.0.2.60;host="a,b;c", for=10.0.0.3"#, "192.0.2.60"),
        (r#"for=192.0.2.60;ext="x\",y", for=10.0.0.3"#, "192.0.2.60"),
        (r#"for=192.0.2.60;ext="a,\"b", for=10.0.0.3"#, "192.0.2.60"),
        (
            r#"for=192.0.2.60;ext="a,\\\"b", for=10.0.0.3"#,
            "192.0.2.60",
        ),
        (r#"for=192.0.2.60;ext="x\\", for=10.0.0.3"#, "192.0.2.60"),
        (
            r#"for=192.0.2.60;ext="x\\\",\\", for=10.0.0.3"#,
            "192.0.2.60",
        ),
    ];
    for (value, expected) in cases {
        assert_eq!(forwarded_client(&[value]), ip(expected), "{value:?}");
    }
}

#[test]
fn forwarded_several_elements_and_lines() {
    let value = "for=6.6.6.6, for=203.0.113.9;proto=https, for=10.0.0.3";
    assert_eq!(forwarded_client(&[value]), ip("203.0.113.9"));
    let lines = ["for=6.6.6.6, for=203.0.113.9", "for=10.0.0.3;by=10.0.0.2"];
    assert_eq!(forwarded_client(&lines), ip("203.0.113.9"));
    let headers = header_map("forwarded", &lines);
    let client_ip = behind_hops(3).header(ForwardedHeader::Forwarded);
    assert_eq!(client_ip.client_address(ip(PROXY), &headers), ip("6.6.6.6"));
}

#[test]
fn forwarded_elements_that_are_not_addresses_end_the_walk() {
    let cases = [
        ("for=203.0.113.9, for=_hidden", PROXY),
        ("for=203.0.113.9, for=unknown", PROXY),
        ("for=203.0.113.9, for=\"unknown\"", PROXY),
        ("for=_hidden, for=10.0.0.3", "10.0.0.3"),
        ("for=203.0.113.9, proto=https, for=10.0.0.3", "10.0.0.3"),
        (
            "for=203.0.113.9, for=1.2.3.4;for=10.0.0.9, for=10.0.0.3",
            "10.0.0.3",
        ),
        (
            "for=203.0.113.9, for=1.2.3.4;junk, for=10.0.0.3",
            "10.0.0.3",
        ),
        (
            "for=203.0.113.9, for=1.2.3.4;ext=\"x, for=10.0.0.3",
            "10.0.0.3",
        ),
        ("for=203.0.113.9, for=\"1.2.3.4, for=10.0.0.3", "10.0.0.3"),
        (
            "for=203.0.113.9, for=\"1.2.3.4\"x, for=10.0.0.3",
            "10.0.0.3",
        ),
        ("for=203.0.113.9, for=, for=10.0.0.3", "10.0.0.3"),
        ("for=203.0.113.9, for=\"\", for=10.0.0.3", "10.0.0.3"),
        ("for=203.0.113.9, for = 1.2.3.4, for=10.0.0.3", "10.0.0.3"),
        (
            "for=203.0.113.9, for=\"[2001:db8::1]:80\\\", for=10.0.0.3",
            "10.0.0.3",
        ),
    ];
    for (value, expected) in cases {
        assert_eq!(forwarded_client(&[value]), ip(expected), "{value:?}");
    }
    // A node too long for the unquoting buffer is not an address.
    let long = format!("for=203.0.113.9, for=\"{}\", for=10.0.0.3", " ".repeat(200));
    assert_eq!(forwarded_client(&[&long]), ip("10.0.0.3"));
}

#[test]
fn a_client_s_unbalanced_quotes_do_not_hide_what_the_proxy_appended() {
    for forged in [r#"for="1.1.1.1"#, r#"for=1.1.1.1;ext="a\"#, r#"""#, r#"\""#] {
        let value = format!("{forged}, for=203.0.113.9");
        assert_eq!(forwarded_client(&[&value]), ip("203.0.113.9"), "{value:?}");
        assert_eq!(
            forwarded_client(&[forged, "for=203.0.113.9"]),
            ip("203.0.113.9")
        );
    }
}

#[test]
fn x_real_ip_reads_its_last_line_as_one_address() {
    let client_ip = private().header(ForwardedHeader::XRealIp);
    let cases: [(&[&str], &str); 6] = [
        (&["203.0.113.9"], "203.0.113.9"),
        (&["1.1.1.1", "203.0.113.9"], "203.0.113.9"),
        (&["203.0.113.9:4711"], "203.0.113.9"),
        (&["[2001:db8::7]"], "2001:db8::7"),
        (&["1.1.1.1, 203.0.113.9"], PROXY),
        (&["203.0.113.9", "unknown"], PROXY),
    ];
    for (lines, expected) in cases {
        let headers = header_map("x-real-ip", lines);
        assert_eq!(
            client_ip.client_address(ip(PROXY), &headers),
            ip(expected),
            "{lines:?}"
        );
    }
    // The nearest proxy overwrote it, so with more hops it is still the client.
    let headers = header_map("x-real-ip", &["203.0.113.9"]);
    let client_ip = behind_hops(2).header(ForwardedHeader::XRealIp);
    assert_eq!(
        client_ip.client_address(ip(PROXY), &headers),
        ip("203.0.113.9")
    );
    // A trusted address in it is the client all the same: it is the left-most.
    let headers = header_map("x-real-ip", &["10.0.0.9"]);
    let client_ip = private().header(ForwardedHeader::XRealIp);
    assert_eq!(
        client_ip.client_address(ip(PROXY), &headers),
        ip("10.0.0.9")
    );
}

#[test]
fn ipv6_clients_are_grouped_by_prefix() {
    let no_headers = HeaderMap::new();
    let by_64 = ClientIp::peer();
    let one = by_64.client(ip("2001:db8:1:2::1"), &no_headers);
    assert_eq!(
        one,
        by_64.client(ip("2001:db8:1:2:ffff:ffff:ffff:ffff"), &no_headers)
    );
    assert_ne!(one, by_64.client(ip("2001:db8:1:3::1"), &no_headers));
    assert_eq!(one.to_string(), "2001:db8:1:2::/64");
    assert_eq!(one.ip(), ip("2001:db8:1:2::"));

    let by_56 = ClientIp::peer().ipv6_prefix(56).unwrap();
    let one = by_56.client(ip("2001:db8:0:1::1"), &no_headers);
    assert_eq!(one, by_56.client(ip("2001:db8:0:ff::1"), &no_headers));
    assert_ne!(one, by_56.client(ip("2001:db8:0:100::1"), &no_headers));
    assert_eq!(one.to_string(), "2001:db8::/56");

    let by_128 = ClientIp::peer().ipv6_prefix(128).unwrap();
    let one = by_128.client(ip("2001:db8::1"), &no_headers);
    assert_ne!(one, by_128.client(ip("2001:db8::2"), &no_headers));
    assert_eq!(one.to_string(), "2001:db8::1");

    let by_1 = ClientIp::peer().ipv6_prefix(1).unwrap();
    assert_eq!(by_1.client(ip("::1"), &no_headers).to_string(), "::/1");
    assert_eq!(
        by_1.client(ip("ffff::1"), &no_headers).to_string(),
        "8000::/1"
    );

    // Behind proxies too; IPv4 clients are never grouped.
    let client_ip = private().ipv6_prefix(48).unwrap();
    let headers = header_map("x-forwarded-for", &["2001:db8:7:8::9"]);
    assert_eq!(
        client_ip.client(ip(PROXY), &headers).to_string(),
        "2001:db8:7::/48"
    );
    let headers = header_map("x-forwarded-for", &["203.0.113.9"]);
    assert_eq!(
        client_ip.client(ip(PROXY), &headers).to_string(),
        "203.0.113.9"
    );
}

#[test]
fn ipv4_mapped_peers_and_entries_are_ipv4_clients() {
    let no_headers = HeaderMap::new();
    let mapped = ClientIp::peer().client(ip("::ffff:203.0.113.9"), &no_headers);
    assert_eq!(mapped, key("203.0.113.9"));
    assert_eq!(mapped.to_string(), "203.0.113.9");
    // A mapped peer inside an IPv4 block is trusted.
    let headers = header_map("x-forwarded-for", &["::ffff:203.0.113.9"]);
    assert_eq!(
        private().client(ip("::ffff:10.0.0.2"), &headers),
        key("203.0.113.9")
    );
    // A mapped hop inside an IPv4 block is skipped, and counts as its IPv4 address.
    let headers = header_map("x-forwarded-for", &["203.0.113.9, ::ffff:10.0.0.3"]);
    assert_eq!(private().client(ip(PROXY), &headers), key("203.0.113.9"));
    let headers = header_map("x-forwarded-for", &["unknown, ::ffff:10.0.0.3"]);
    assert_eq!(
        private().client_address(ip(PROXY), &headers),
        ip("10.0.0.3")
    );
    // An IPv6 block trusts no IPv4 client, mapped or not.
    let everything_v6 = behind_cidrs(&["::/0"]);
    let headers = header_map("x-forwarded-for", &["203.0.113.9"]);
    assert_eq!(
        everything_v6.client(ip("::ffff:10.0.0.2"), &headers),
        key(PROXY)
    );
    assert_eq!(
        everything_v6.client(ip("2001:db8::1"), &headers),
        key("203.0.113.9")
    );
}

#[test]
fn the_walk_reads_at_most_64_entries() {
    let entries: Vec<String> = (1..=70).map(|hop| format!("10.0.0.{hop}")).collect();
    let value = format!("203.0.113.9, {}", entries.join(", "));
    let headers = header_map("x-forwarded-for", &[&value]);
    // From the right, 10.0.0.70 is the 1st entry and 10.0.0.7 the 64th.
    assert_eq!(
        private().client_address(ip(PROXY), &headers),
        ip("10.0.0.7")
    );
    assert_eq!(
        behind_hops(64).client_address(ip(PROXY), &headers),
        ip("10.0.0.7")
    );
    assert_eq!(
        behind_hops(63).client_address(ip(PROXY), &headers),
        ip("10.0.0.8")
    );
}

#[test]
fn megabyte_headers_key_correctly() {
    const MEGABYTE: usize = 1 << 20;
    // A client's forged megabyte, then what the proxy appended.
    let forged = "1.1.1.1, ".repeat(MEGABYTE / 9);
    let value = format!("{forged}203.0.113.9");
    let headers = header_map("x-forwarded-for", &[&value]);
    assert_eq!(private().client(ip(PROXY), &headers), key("203.0.113.9"));
    assert_eq!(behind_hops(64).client(ip(PROXY), &headers), key("1.1.1.1"));

    // A megabyte of trusted hops: the 64th from the right.
    let hops: Vec<String> = (0..MEGABYTE / 12)
        .map(|hop| format!("10.0.{}.{}", hop / 256 % 256, hop % 256))
        .collect();
    let value = hops.join(",");
    let headers = header_map("x-forwarded-for", &[&value]);
    let expected = &hops[hops.len() - 64];
    assert_eq!(private().client_address(ip(PROXY), &headers), ip(expected));

    let forged = "for=1.1.1.1, ".repeat(MEGABYTE / 13);
    let value = format!("{forged}for=\"[2001:db8::9]:1\"");
    let headers = header_map("forwarded", &[&value]);
    let client_ip = private().header(ForwardedHeader::Forwarded);
    assert_eq!(client_ip.client(ip(PROXY), &headers), key("2001:db8::9"));

    for junk in [",", "\"", "\\", "\\\"", "a", ";", "=", "[", " "] {
        let value = junk.repeat(MEGABYTE / junk.len());
        for (name, header) in [
            ("x-forwarded-for", ForwardedHeader::XForwardedFor),
            ("forwarded", ForwardedHeader::Forwarded),
            ("x-real-ip", ForwardedHeader::XRealIp),
        ] {
            let headers = header_map(name, &[&value]);
            let client_ip = private().header(header);
            assert_eq!(
                client_ip.client(ip(PROXY), &headers),
                key(PROXY),
                "{junk:?} in {name}"
            );
            // After a proxy appended its client, the junk is left of it.
            let headers = header_map(name, &[&value, "for=203.0.113.9"]);
            let appended = if header == ForwardedHeader::Forwarded {
                "203.0.113.9"
            } else {
                PROXY
            };
            assert_eq!(client_ip.client_address(ip(PROXY), &headers), ip(appended));
        }
    }
}

#[test]
fn a_megabyte_header_costs_no_more_than_a_kilobyte() {
    // One entry without a separator: only its last kilobyte is searched. Reading it all,
    // 2,000 calls would scan 2 GB; bounded, they scan 2 MB, well within the deadline
    // even in a debug build on a busy machine.
    let value = "9".repeat(1 << 20);
    let xff = header_map("x-forwarded-for", &[&value]);
    let forwarded = header_map("forwarded", &[&format!("for=\"{value}")]);
    let by_xff = private();
    let by_forwarded = private().header(ForwardedHeader::Forwarded);
    let started = Instant::now();
    for _ in 0..1000 {
        assert_eq!(by_xff.client(ip(PROXY), &xff), key(PROXY));
        assert_eq!(by_forwarded.client(ip(PROXY), &forwarded), key(PROXY));
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_secs(2),
        "2,000 calls took {elapsed:?}"
    );
}

#[test]
fn bytes_that_are_not_ascii_are_not_an_address() {
    let lines = [b"\xff\xfe, 203.0.113.9".to_vec()];
    let headers = raw_header_map("x-forwarded-for", lines.clone());
    assert_eq!(
        behind_hops(1).client(ip(PROXY), &headers),
        key("203.0.113.9")
    );
    assert_eq!(
        behind_hops(2).client(ip(PROXY), &headers),
        key("203.0.113.9")
    );
    let lines = [b"203.0.113.\xc3\xa9".to_vec()];
    for name in ["x-forwarded-for", "x-real-ip"] {
        let headers = raw_header_map(name, lines.clone());
        let client_ip = behind_hops(1).header(if name == "x-real-ip" {
            ForwardedHeader::XRealIp
        } else {
            ForwardedHeader::XForwardedFor
        });
        assert_eq!(client_ip.client(ip(PROXY), &headers), key(PROXY), "{name}");
    }
    let headers = raw_header_map(
        "forwarded",
        [b"for=\"\xff\", for=203.0.113.9;ext=\"\xfe\"".to_vec()],
    );
    let client_ip = behind_hops(2).header(ForwardedHeader::Forwarded);
    assert_eq!(client_ip.client(ip(PROXY), &headers), key("203.0.113.9"));
}

#[test]
fn cidr_parsing() {
    let good = [
        ("10.0.0.0/8", "10.0.0.0/8"),
        ("192.168.1.0/24", "192.168.1.0/24"),
        ("0.0.0.0/0", "0.0.0.0/0"),
        ("128.0.0.0/1", "128.0.0.0/1"),
        ("203.0.113.9", "203.0.113.9/32"),
        ("203.0.113.9/032", "203.0.113.9/32"),
        ("2001:db8::/32", "2001:db8::/32"),
        ("2001:db8:8000::/33", "2001:db8:8000::/33"),
        ("2001:db8::1", "2001:db8::1/128"),
        ("::/0", "::/0"),
        ("::ffff:10.0.0.0/104", "10.0.0.0/8"),
        ("::ffff:10.1.2.3", "10.1.2.3/32"),
        ("::ffff:0.0.0.0/96", "0.0.0.0/0"),
        ("::fffe:0:0/95", "::fffe:0:0/95"),
    ];
    for (text, expected) in good {
        assert_eq!(
            text.parse::<Cidr>().unwrap().to_string(),
            expected,
            "{text:?}"
        );
    }
    let bad = [
        (
            "10.0.0.300/8",
            "`10.0.0.300/8` is not an IP address or CIDR block",
        ),
        ("", "`` is not an IP address or CIDR block"),
        (
            " 10.0.0.0/8",
            "` 10.0.0.0/8` is not an IP address or CIDR block",
        ),
        ("/8", "`/8` is not an IP address or CIDR block"),
        (
            "[2001:db8::]/32",
            "`[2001:db8::]/32` is not an IP address or CIDR block",
        ),
        (
            "fe80::1%eth0/64",
            "`fe80::1%eth0/64` is not an IP address or CIDR block",
        ),
        (
            "10.0.0.0/x",
            "`10.0.0.0/x` is not a CIDR block: its prefix is not a number of bits",
        ),
        (
            "10.0.0.0/",
            "`10.0.0.0/` is not a CIDR block: its prefix is not a number of bits",
        ),
        (
            "10.0.0.0/+8",
            "`10.0.0.0/+8` is not a CIDR block: its prefix is not a number of bits",
        ),
        (
            "10.0.0.0/8 ",
            "`10.0.0.0/8 ` is not a CIDR block: its prefix is not a number of bits",
        ),
        (
            "10.0.0.0/8/8",
            "`10.0.0.0/8/8` is not a CIDR block: its prefix is not a number of bits",
        ),
        (
            "10.0.0.0/99999999999",
            "`10.0.0.0/99999999999` is not a CIDR block: its prefix is not a number of bits",
        ),
        (
            "10.0.0.0/33",
            "prefix 33 is longer than an IPv4 address's 32 bits",
        ),
        (
            "10.0.0.0/300",
            "prefix 300 is longer than an IPv4 address's 32 bits",
        ),
        (
            "2001:db8::/129",
            "prefix 129 is longer than an IPv6 address's 128 bits",
        ),
        // A host inside the block is a typo for the block or for a narrower one: say
        // which block it would have widened to.
        (
            "192.168.1.1/24",
            "`192.168.1.1/24` has bits set below its prefix: the block is `192.168.1.0/24`",
        ),
        (
            "255.255.255.255/1",
            "`255.255.255.255/1` has bits set below its prefix: the block is `128.0.0.0/1`",
        ),
        (
            "2001:db8:ffff::1/33",
            "`2001:db8:ffff::1/33` has bits set below its prefix: the block is `2001:db8:8000::/33`",
        ),
        (
            "::ffff:10.1.2.3/104",
            "`::ffff:10.1.2.3/104` has bits set below its prefix: the block is `10.0.0.0/8`",
        ),
        (
            "::ffff:10.1.2.3/96",
            "`::ffff:10.1.2.3/96` has bits set below its prefix: the block is `0.0.0.0/0`",
        ),
        (
            "::ffff:10.1.2.3/95",
            "`::ffff:10.1.2.3/95` has bits set below its prefix: the block is `::fffe:0:0/95`",
        ),
    ];
    for (text, message) in bad {
        assert_eq!(
            text.parse::<Cidr>().unwrap_err().to_string(),
            message,
            "{text:?}"
        );
    }
    assert_eq!(
        "10.0.0.0/300".parse::<Cidr>(),
        Err(CidrError::PrefixTooLong {
            prefix: 300,
            address_bits: 32
        })
    );
    assert_eq!(
        Cidr::new(ip("::ffff:10.0.0.0"), 129),
        Err(CidrError::PrefixTooLong {
            prefix: 129,
            address_bits: 128
        })
    );
    assert_eq!(
        Cidr::new(ip("10.9.0.0"), 16).unwrap(),
        "10.9.0.0/16".parse().unwrap()
    );
    assert_eq!(
        Cidr::new(ip("10.9.8.7"), 16),
        Err(CidrError::HostBitsSet {
            text: "10.9.8.7/16".into(),
            network: "10.9.0.0/16".parse().unwrap(),
        })
    );
    let loose: ipnet::IpNet = "10.9.8.7/16".parse().unwrap();
    assert_eq!(
        Cidr::try_from(loose).unwrap_err().to_string(),
        "`10.9.8.7/16` has bits set below its prefix: the block is `10.9.0.0/16`"
    );
    let mapped: ipnet::IpNet = "::ffff:192.0.2.0/120".parse().unwrap();
    assert_eq!(Cidr::try_from(mapped).unwrap().to_string(), "192.0.2.0/24");
}

#[test]
fn cidr_contains() {
    let block: Cidr = "10.0.0.0/8".parse().unwrap();
    assert!(block.contains(ip("10.0.0.0")));
    assert!(block.contains(ip("10.255.255.255")));
    assert!(block.contains(ip("::ffff:10.255.255.255")));
    assert!(!block.contains(ip("11.0.0.0")));
    assert!(!block.contains(ip("9.255.255.255")));
    assert!(!block.contains(ip("::ffff:11.0.0.0")));
    assert!(
        !block.contains(ip("::a00:1")),
        "IPv4-compatible is not IPv4-mapped"
    );

    let block: Cidr = "2001:db8::/32".parse().unwrap();
    assert!(block.contains(ip("2001:db8::")));
    assert!(block.contains(ip("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff")));
    assert!(!block.contains(ip("2001:db9::")));
    assert!(!block.contains(ip("2001:db7:ffff::")));
    assert!(!block.contains(ip("10.0.0.1")));

    let all_v4: Cidr = "0.0.0.0/0".parse().unwrap();
    assert!(all_v4.contains(ip("255.255.255.255")));
    assert!(all_v4.contains(ip("::ffff:1.2.3.4")));
    assert!(!all_v4.contains(ip("::1")));
    let all_v6: Cidr = "::/0".parse().unwrap();
    assert!(all_v6.contains(ip("ffff::1")));
    assert!(!all_v6.contains(ip("1.2.3.4")));
    assert!(!all_v6.contains(ip("::ffff:1.2.3.4")));
    let one: Cidr = "203.0.113.9".parse().unwrap();
    assert!(one.contains(ip("203.0.113.9")));
    assert!(!one.contains(ip("203.0.113.8")));
    let mapped: Cidr = "::ffff:192.0.2.0/120".parse().unwrap();
    assert!(mapped.contains(ip("192.0.2.200")));
    assert!(mapped.contains(ip("::ffff:192.0.2.200")));
}

#[test]
fn setting_errors_name_their_values() {
    assert_eq!(TrustedProxies::hops(0), Err(ClientIpError::ZeroHops));
    assert_eq!(
        ClientIpError::ZeroHops.to_string(),
        "0 trusted hops trusts no proxy: use `ClientIp::peer()` to key by the peer address"
    );
    assert_eq!(
        TrustedProxies::hops(65),
        Err(ClientIpError::TooManyHops { hops: 65, max: 64 })
    );
    assert_eq!(
        TrustedProxies::hops(usize::MAX).unwrap_err().to_string(),
        format!(
            "{} trusted hops are more than the 64 entries read from a forwarding header",
            usize::MAX
        )
    );
    for bits in [0, 129, 255] {
        assert_eq!(
            ClientIp::peer().ipv6_prefix(bits),
            Err(ClientIpError::Ipv6Prefix { bits })
        );
        assert_eq!(
            ClientKey::from_ip(ip("::1"), bits),
            Err(ClientIpError::Ipv6Prefix { bits })
        );
        assert_eq!(
            ClientKey::from_ip(ip("1.2.3.4"), bits),
            Err(ClientIpError::Ipv6Prefix { bits })
        );
    }
    assert_eq!(
        ClientIpError::Ipv6Prefix { bits: 0 }.to_string(),
        "an IPv6 prefix of 0 bits is out of range: it must be from 1 to 128"
    );
}

#[test]
fn client_keys_are_small_ordered_and_printable() {
    assert_eq!(std::mem::size_of::<ClientKey>(), 18);
    let v4 = key("203.0.113.9");
    let v6 = key("2001:db8::1");
    assert!(v4 < v6);
    assert!(key("1.2.3.4") < v4);
    assert_eq!(format!("{v4:?}"), "ClientKey(203.0.113.9)");
    assert_eq!(format!("{v6:?}"), "ClientKey(2001:db8::/64)");
    assert_eq!(v4.ip(), ip("203.0.113.9"));
    assert_eq!(v4.prefix(), 32);
    assert_eq!(ClientKey::from_ip(ip("2001:db8::1"), 64), Ok(v6));
    assert_eq!(ClientKey::from_ip(ip("::ffff:203.0.113.9"), 128), Ok(v4));
    assert_ne!(
        ClientKey::from_ip(ip("2001:db8::"), 64),
        ClientKey::from_ip(ip("2001:db8::"), 65)
    );
}

#[test]
fn the_configured_header_is_the_only_one_read() {
    let mut headers = header_map("x-forwarded-for", &["1.1.1.1"]);
    headers.append("forwarded", HeaderValue::from_static("for=2.2.2.2"));
    headers.append("x-real-ip", HeaderValue::from_static("3.3.3.3"));
    let by = |header| {
        behind_hops(1)
            .header(header)
            .client_address(ip(PROXY), &headers)
    };
    assert_eq!(by(ForwardedHeader::XForwardedFor), ip("1.1.1.1"));
    assert_eq!(by(ForwardedHeader::Forwarded), ip("2.2.2.2"));
    assert_eq!(by(ForwardedHeader::XRealIp), ip("3.3.3.3"));
    assert_eq!(ClientIp::default(), ClientIp::peer());
    assert_eq!(
        ClientIp::default().client_address(ip(PROXY), &headers),
        ip(PROXY)
    );
}

/// Header lines of bytes a header value may hold, biased towards those the parsers look at.
fn header_lines() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let byte = prop_oneof![
        4 => prop::sample::select(b"0123456789abcdefABCDEF.:[]%_,;=\"\\ \tforunkw".to_vec()),
        1 => 0x20u8..0x7f,
        1 => 0x80u8..=0xff,
    ];
    prop::collection::vec(prop::collection::vec(byte, 0..48), 0..4)
}

fn any_ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(IpAddr::from),
        any::<[u8; 16]>().prop_map(IpAddr::from),
        any::<[u8; 4]>().prop_map(|octets| IpAddr::V6(Ipv4Addr::from(octets).to_ipv6_mapped())),
    ]
}

const HEADERS: [(&str, ForwardedHeader); 3] = [
    ("x-forwarded-for", ForwardedHeader::XForwardedFor),
    ("forwarded", ForwardedHeader::Forwarded),
    ("x-real-ip", ForwardedHeader::XRealIp),
];

proptest! {
    #[test]
    fn any_header_bytes_give_a_key_and_an_untrusted_peer_keys_as_itself(
        lines in header_lines(),
        peer in any_ip(),
    ) {
        let blocks = ["10.0.0.0/8", "fd00::/8"];
        let trusted = behind_cidrs(&blocks);
        for (name, header) in HEADERS {
            let headers = raw_header_map(name, lines.clone());
            for client_ip in [&trusted, &behind_hops(1), &behind_hops(3), &behind_hops(64), &ClientIp::peer()] {
                let client_ip = client_ip.clone().header(header);
                let key = client_ip.client(peer, &headers);
                prop_assert_eq!(key, ClientKey::from(client_ip.client_address(peer, &headers)));
            }
            let key = trusted.clone().header(header).client(peer, &headers);
            let peer_is_trusted = blocks
                .iter()
                .any(|block| block.parse::<Cidr>().unwrap().contains(peer));
            if !peer_is_trusted {
                prop_assert_eq!(key, ClientKey::from(peer));
            }
            prop_assert_eq!(ClientIp::peer().header(header).client(peer, &headers), ClientKey::from(peer));
        }
    }

    #[test]
    fn what_a_client_writes_cannot_hide_the_address_its_proxy_appended(
        lines in header_lines(),
    ) {
        let appended = ip("203.0.113.9");
        let xff = private();
        let forwarded = private().header(ForwardedHeader::Forwarded);
        // The proxy appends to the client's last line, or adds a line of its own.
        let mut on_last_line = lines.clone();
        match on_last_line.last_mut() {
            Some(last) => last.extend_from_slice(b", 203.0.113.9"),
            None => on_last_line.push(b"203.0.113.9".to_vec()),
        }
        let mut own_line = lines.clone();
        own_line.push(b"203.0.113.9".to_vec());
        for lines in [on_last_line, own_line] {
            let headers = raw_header_map("x-forwarded-for", lines.clone());
            prop_assert_eq!(xff.client_address(ip(PROXY), &headers), appended);
            let forwarded_lines = lines.into_iter().map(|mut line| {
                if line.ends_with(b"203.0.113.9") {
                    let at = line.len() - b"203.0.113.9".len();
                    line.splice(at..at, b"for=".iter().copied());
                }
                line
            });
            let headers = raw_header_map("forwarded", forwarded_lines);
            prop_assert_eq!(forwarded.client_address(ip(PROXY), &headers), appended);
        }
    }
}
