//! Requests to addresses that other people name (a client's metadata document, a trigger's
//! callback URL), guarded against server-side request forgery:
//! - the host is resolved first and every address checked (never loopback, private,
//!   link-local, shared, multicast or unspecified): one inside address is enough to refuse;
//! - the connection is pinned to a checked address, so a second DNS answer (rebinding) cannot
//!   point it inside;
//! - redirects are never followed, and no proxy from the environment is used.
//!
//! The only exception is for tests: with a switch (`cimd_allow_http_loopback`,
//! `callback_allow_http_loopback`) an `http://127.0.0.1:<port>/…` URL may be used.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Why an address is not used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Guard {
    /// The address is inside a private network (or otherwise not public): never contacted.
    Refused(String),
    /// The name could not be resolved.
    Unresolved(String),
}

impl std::fmt::Display for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Guard::Refused(s) | Guard::Unresolved(s) => f.write_str(s),
        }
    }
}

/// A checked address to connect to, and the host name the request is made for.
#[derive(Debug, Clone)]
pub struct Pinned {
    pub host: String,
    pub addr: SocketAddr,
}

/// Whether an address may be contacted: public unicast only.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || o[0] == 0
                || (o[0] == 100 && (o[1] & 0xc0) == 64) // 100.64.0.0/10, shared address space
                || (o[0] == 192 && o[1] == 0 && o[2] == 0) // 192.0.0.0/24, protocol assignments
                || (o[0] == 198 && (o[1] & 0xfe) == 18) // 198.18.0.0/15, benchmarking
                || o[0] >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let s = v6.segments();
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local
                || (s[0] & 0xffc0) == 0xfe80 // link-local
                || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
                || (s[0] == 0x64 && s[1] == 0xff9b) // NAT64 reaches IPv4 inside too
                || (s[0] == 0 && s[1] == 0 && s[2] == 0 && s[3] == 0 && s[4] == 0 && s[5] == 0)) // IPv4-compatible
        }
    }
}

/// Whether the test switch lets this URL through: `http://127.0.0.1:<port>` only.
pub fn loopback_allowed(url: &url::Url, allow_http_loopback: bool) -> bool {
    allow_http_loopback && url.scheme() == "http" && url.host_str() == Some("127.0.0.1")
}

/// The addresses a URL's host names without asking DNS (an IP literal), else `None`.
fn literal(url: &url::Url, port: u16) -> Option<Vec<SocketAddr>> {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => Some(vec![SocketAddr::new(ip.into(), port)]),
        Some(url::Host::Ipv6(ip)) => Some(vec![SocketAddr::new(ip.into(), port)]),
        _ => None,
    }
}

/// Every answer must be public: one inside address is enough to refuse, or a second lookup (by
/// anything but the pinned connection) could be steered to it. Returns the address to pin.
fn check(
    url: &url::Url,
    host: &str,
    addrs: &[SocketAddr],
    allow_http_loopback: bool,
) -> Result<Pinned, Guard> {
    let loopback = loopback_allowed(url, allow_http_loopback);
    let Some(&pinned) = addrs.first() else {
        return Err(Guard::Unresolved(format!("{host} has no address")));
    };
    if let Some(bad) = addrs
        .iter()
        .find(|a| !(is_public(a.ip()) || (loopback && a.ip().is_loopback())))
    {
        return Err(Guard::Refused(format!(
            "{host} resolves to {}, an address inside a private network",
            bad.ip()
        )));
    }
    Ok(Pinned {
        host: host.to_owned(),
        addr: pinned,
    })
}

/// Resolves the URL's host once and checks every address (see the module's rules).
pub async fn resolve(url: &url::Url, allow_http_loopback: bool) -> Result<Pinned, Guard> {
    let host = url.host_str().unwrap_or_default().to_owned();
    let port = url.port_or_known_default().unwrap_or(443);
    let addrs = match literal(url, port) {
        Some(a) => a,
        None => tokio::net::lookup_host((host.as_str(), port))
            .await
            .map_err(|e| Guard::Unresolved(format!("cannot resolve {host}: {e}")))?
            .collect(),
    };
    check(url, &host, &addrs, allow_http_loopback)
}

/// [`resolve`] for callers outside the async runtime (saving a setting).
pub fn resolve_blocking(url: &url::Url, allow_http_loopback: bool) -> Result<Pinned, Guard> {
    use std::net::ToSocketAddrs;
    let host = url.host_str().unwrap_or_default().to_owned();
    let port = url.port_or_known_default().unwrap_or(443);
    let addrs = match literal(url, port) {
        Some(a) => a,
        None => (host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| Guard::Unresolved(format!("cannot resolve {host}: {e}")))?
            .collect(),
    };
    check(url, &host, &addrs, allow_http_loopback)
}

/// An HTTP client that connects only to the pinned address, follows no redirect, uses no
/// proxy and gives up after `timeout`.
pub fn client(pinned: &Pinned, timeout: Duration) -> Result<reqwest::Client, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(timeout)
        .connect_timeout(timeout)
        .resolve(&pinned.host, pinned.addr)
        .user_agent(concat!("kennis/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses() {
        for inside in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
        ] {
            assert!(!is_public(inside.parse().unwrap()), "{inside}");
        }
        for outside in ["93.184.215.14", "2606:4700::1111"] {
            assert!(is_public(outside.parse().unwrap()), "{outside}");
        }
    }

    #[test]
    fn literals_are_checked_without_dns_and_loopback_only_with_the_switch() {
        let u = |s: &str| url::Url::parse(s).unwrap();
        assert!(matches!(
            resolve_blocking(&u("https://10.0.0.1/hook"), true),
            Err(Guard::Refused(_))
        ));
        assert!(matches!(
            resolve_blocking(&u("https://[::1]/hook"), true),
            Err(Guard::Refused(_))
        ));
        assert!(matches!(
            resolve_blocking(&u("http://127.0.0.1:9/hook"), false),
            Err(Guard::Refused(_))
        ));
        let ok = resolve_blocking(&u("http://127.0.0.1:9/hook"), true).unwrap();
        assert_eq!(ok.addr, "127.0.0.1:9".parse().unwrap());
        let public = resolve_blocking(&u("https://93.184.215.14/hook"), false).unwrap();
        assert_eq!(public.addr.port(), 443);
    }
}
