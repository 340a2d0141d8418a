//! The client's address behind trusted proxies (`--trusted-proxy`, issue 33).
//!
//! Behind a load balancer every TCP peer is the balancer, so the per-address sign-in limit,
//! audit rows and sessions would all name it. A trusted proxy appends the address it received
//! the request from to `X-Forwarded-For`; only those right-hand entries are believed. The
//! left-hand part is whatever the client sent, so it is never trusted: walking from the right,
//! the first address that is not itself a trusted proxy is the client.

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

/// The proxies whose `X-Forwarded-For` is believed. Empty (the default): the header is ignored.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    pub fn new(nets: Vec<IpNet>) -> Self {
        TrustedProxies(nets)
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|n| n.contains(&ip))
    }

    /// The client's address: `peer` itself unless `peer` is trusted, else the right-most
    /// `X-Forwarded-For` entry that is not trusted. `forwarded` are the header's values in the
    /// order received (several headers are one comma-separated list). A malformed entry stops
    /// the walk and the peer is used: what lies to its left cannot be told apart from forgery.
    /// When every entry is trusted, the left-most one is the farthest hop known.
    pub fn client<'a>(&self, peer: IpAddr, forwarded: impl IntoIterator<Item = &'a str>) -> IpAddr {
        let peer = peer.to_canonical();
        if !self.trusts(peer) {
            return peer;
        }
        let entries: Vec<&str> = forwarded
            .into_iter()
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .collect();
        let mut client = peer;
        for entry in entries.iter().rev() {
            let Some(ip) = parse_entry(entry) else {
                return peer;
            };
            client = ip;
            if !self.trusts(ip) {
                break;
            }
        }
        client
    }
}

/// One `X-Forwarded-For` entry: an address, optionally with a port (`1.2.3.4:80`,
/// `[2001:db8::1]:80`) as some proxies write it.
fn parse_entry(entry: &str) -> Option<IpAddr> {
    let ip = entry
        .parse::<IpAddr>()
        .ok()
        .or_else(|| entry.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .or_else(|| {
            entry
                .strip_prefix('[')
                .and_then(|e| e.strip_suffix(']'))
                .and_then(|e| e.parse::<IpAddr>().ok())
        })?;
    Some(ip.to_canonical())
}

/// Parses one `--trusted-proxy` value: a CIDR (`10.0.0.0/8`, `fd00::/8`) or a bare address
/// (one host, `/32` or `/128`). An empty value is none, so that `CLUECDC_TRUSTED_PROXIES=`
/// (as templating often writes an unset setting) means the default, not an error.
pub fn parse_trusted_proxy(s: &str) -> Result<Option<IpNet>, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
        .map(Some)
        .map_err(|_| {
            format!(
                "{s:?} is not an address range (--trusted-proxy / CLUECDC_TRUSTED_PROXIES); write a CIDR such as 10.0.0.0/8, 192.0.2.10/32 or fd00::/8"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trusted(cidrs: &[&str]) -> TrustedProxies {
        TrustedProxies::new(
            cidrs
                .iter()
                .map(|c| parse_trusted_proxy(c).unwrap().unwrap())
                .collect(),
        )
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn without_trusted_proxies_the_header_is_ignored() {
        let t = TrustedProxies::default();
        assert_eq!(t.client(ip("10.0.0.2"), ["203.0.113.7"]), ip("10.0.0.2"));
    }

    #[test]
    fn an_untrusted_peer_cannot_name_another_address() {
        let t = trusted(&["10.0.0.0/8"]);
        assert_eq!(
            t.client(ip("198.51.100.9"), ["203.0.113.7"]),
            ip("198.51.100.9")
        );
    }

    #[test]
    fn a_trusted_peer_names_the_client_it_received() {
        let t = trusted(&["10.0.0.0/8"]);
        assert_eq!(t.client(ip("10.0.0.2"), ["203.0.113.7"]), ip("203.0.113.7"));
    }

    #[test]
    fn a_spoofed_prefix_is_never_believed() {
        // The client sent "1.1.1.1"; the balancer appended the address it saw.
        let t = trusted(&["10.0.0.0/8"]);
        assert_eq!(
            t.client(ip("10.0.0.2"), ["1.1.1.1, 203.0.113.7"]),
            ip("203.0.113.7")
        );
        // Even when the forged entry looks like a trusted proxy.
        assert_eq!(
            t.client(ip("10.0.0.2"), ["10.9.9.9, 203.0.113.7"]),
            ip("203.0.113.7")
        );
    }

    #[test]
    fn a_chain_of_trusted_proxies_is_walked_from_the_right() {
        let t = trusted(&["10.0.0.0/8", "192.168.1.1/32"]);
        assert_eq!(
            t.client(
                ip("10.0.0.2"),
                ["1.1.1.1, 203.0.113.7, 192.168.1.1, 10.1.2.3"]
            ),
            ip("203.0.113.7")
        );
        // Several headers are one list, in order.
        assert_eq!(
            t.client(ip("10.0.0.2"), ["1.1.1.1, 203.0.113.7", "192.168.1.1"]),
            ip("203.0.113.7")
        );
        // Every hop trusted: the farthest one known.
        assert_eq!(
            t.client(ip("10.0.0.2"), ["192.168.1.1, 10.1.2.3"]),
            ip("192.168.1.1")
        );
    }

    #[test]
    fn ipv6_peers_entries_and_ranges() {
        let t = trusted(&["fd00::/8", "127.0.0.1"]);
        assert_eq!(
            t.client(ip("fd00::5"), ["2001:db8::1, fd00::9"]),
            ip("2001:db8::1")
        );
        assert_eq!(
            t.client(ip("fd00::5"), ["[2001:db8::1]:4711"]),
            ip("2001:db8::1")
        );
        // An IPv4 peer seen on a dual-stack socket is the IPv4 address.
        assert_eq!(
            t.client(ip("::ffff:127.0.0.1"), ["203.0.113.7:5000"]),
            ip("203.0.113.7")
        );
        assert_eq!(t.client(ip("fe80::1"), ["2001:db8::1"]), ip("fe80::1"));
    }

    #[test]
    fn a_malformed_entry_stops_the_walk_at_the_peer() {
        let t = trusted(&["10.0.0.0/8"]);
        for header in [
            "203.0.113.7, unknown",
            "203.0.113.7, ",
            "not an address",
            "",
        ] {
            assert_eq!(
                t.client(ip("10.0.0.2"), [header]),
                ip("10.0.0.2"),
                "{header:?}"
            );
        }
        // Garbage to the left of the client is the client's own business.
        assert_eq!(
            t.client(ip("10.0.0.2"), ["<script>, 203.0.113.7"]),
            ip("203.0.113.7")
        );
        // No header at all: the peer.
        assert_eq!(t.client(ip("10.0.0.2"), []), ip("10.0.0.2"));
    }

    #[test]
    fn trusted_proxy_values_are_checked() {
        let net = |s: &str| Some(s.parse::<IpNet>().unwrap());
        assert_eq!(
            parse_trusted_proxy("10.0.0.0/8").unwrap(),
            net("10.0.0.0/8")
        );
        assert_eq!(
            parse_trusted_proxy("192.0.2.10").unwrap(),
            net("192.0.2.10/32")
        );
        assert_eq!(parse_trusted_proxy(" fd00::/8 ").unwrap(), net("fd00::/8"));
        assert_eq!(parse_trusted_proxy(" ").unwrap(), None, "empty is none");
        for bad in [
            "10.0.0.0/33",
            "10.0.0/8",
            "lb.example.com",
            "*",
            "fd00::/129",
        ] {
            let e = parse_trusted_proxy(bad).unwrap_err();
            assert!(
                e.contains("--trusted-proxy") && e.contains(&format!("{:?}", bad.trim())),
                "{e}"
            );
        }
    }
}
