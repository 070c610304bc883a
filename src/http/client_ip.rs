//! What a request says about where it came from, believing proxies only when the peer is in
//! `trusted_proxies`, and then only the one header family `[proxy] header` names
//! ([`ProxyHeader`]): `X-Forwarded-For`/`-Host`/`-Proto` (the default) or RFC 7239
//! `Forwarded` (`for=`, `host=`, `proto=`). The other family is ignored entirely: proxies such
//! as nginx and Caddy append to or overwrite their own family and pass the other one through
//! from the client untouched, so believing it would let a client pick its own address or host.
//! - the client's address for rate limits: the peer, or the named header read from the right,
//!   skipping trusted proxies;
//! - the host and scheme the client asked for: `Host`, or from a trusted proxy the value the
//!   nearest proxy wrote (rightmost) in the named family, for the connector's Host/Origin check.
//!
//! [`PeerAddr`] is the connection's peer (from plain and TLS listeners alike); [`CallerIp`]
//! is the extractor handlers use to get the client's address.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use ipnet::IpNet;

use crate::app::App;
use crate::config::ProxyHeader;

/// The address of the peer that opened the connection (a proxy, when behind one). A type of
/// our own so it can be taken from both plain and TLS connections.
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub SocketAddr);

impl
    axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, tokio::net::TcpListener>>
    for PeerAddr
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, tokio::net::TcpListener>) -> Self {
        PeerAddr(*stream.remote_addr())
    }
}

/// The client's address as rate limits count it: the peer, or what trusted proxies say.
#[derive(Debug, Clone, Copy)]
pub struct CallerIp(pub IpAddr);

impl FromRequestParts<Arc<App>> for CallerIp {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        app: &Arc<App>,
    ) -> Result<Self, Self::Rejection> {
        Ok(CallerIp(caller_ip(app, parts)))
    }
}

/// The client's address of a request (see [`CallerIp`]); a request that did not come through
/// a listener (none in this service) counts as the unspecified address.
pub fn caller_ip(app: &App, parts: &Parts) -> IpAddr {
    client_ip(
        peer_of(&parts.extensions),
        &parts.headers,
        &app.config.trusted_proxies,
        app.config.proxy_header,
    )
}

fn is_trusted(trusted: &[IpNet], ip: &IpAddr) -> bool {
    trusted.iter().any(|net| net.contains(ip))
}

/// The client's address: the peer, or — when the peer is a trusted proxy — the named header
/// walked from the right while each hop is itself a trusted proxy.
pub fn client_ip(
    peer: IpAddr,
    headers: &HeaderMap,
    trusted: &[IpNet],
    family: ProxyHeader,
) -> IpAddr {
    if !is_trusted(trusted, &peer) {
        return peer;
    }
    // A hop that is not an address (`unknown`, an obfuscated name, garbage) ends the walk: we
    // cannot tell who is behind it, so the hop before it counts.
    let hops: Vec<Option<IpAddr>> = match family {
        ProxyHeader::Forwarded => forwarded_elements(headers)
            .into_iter()
            .map(|e| e.for_.as_deref().and_then(parse_node))
            .collect(),
        ProxyHeader::XForwardedFor => header_list(headers, "x-forwarded-for")
            .map(parse_node)
            .collect(),
    };
    let mut client = peer;
    for hop in hops.into_iter().rev() {
        match hop {
            Some(ip) if is_trusted(trusted, &client) => client = ip,
            _ => break,
        }
    }
    client
}

/// The host (with port, lowercase) and scheme the client asked for, as [`origin_of`] tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestOrigin {
    pub host: String,
    /// `http` or `https` when a trusted proxy said so; `None` when nobody did.
    pub proto: Option<String>,
}

/// The host and scheme of a request: `Host`, unless the peer is a trusted proxy that says
/// otherwise in the named header family (`Forwarded` `host=`/`proto=` of the last element,
/// or `X-Forwarded-Host`/`X-Forwarded-Proto`); the nearest proxy's word (rightmost) counts.
pub fn origin_of(
    peer: IpAddr,
    headers: &HeaderMap,
    trusted: &[IpNet],
    family: ProxyHeader,
) -> RequestOrigin {
    let own_host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let mut origin = RequestOrigin {
        host: own_host,
        proto: None,
    };
    if !is_trusted(trusted, &peer) {
        return origin;
    }
    let (host, proto) = match family {
        // Only the nearest proxy's element: one that says no host leaves `Host`, rather than
        // letting an element further left (which the client may have written) speak.
        ProxyHeader::Forwarded => match forwarded_elements(headers).pop() {
            Some(nearest) => (nearest.host, nearest.proto),
            None => (None, None),
        },
        ProxyHeader::XForwardedFor => {
            let last = |name| header_list(headers, name).last().map(str::to_owned);
            (last("x-forwarded-host"), last("x-forwarded-proto"))
        }
    };
    if let Some(host) = host.filter(|h| !h.is_empty()) {
        origin.host = host.to_ascii_lowercase();
    }
    origin.proto = proto
        .map(|p| p.to_ascii_lowercase())
        .filter(|p| p == "http" || p == "https");
    origin
}

/// The host and scheme of a request as the handler sees it (see [`origin_of`]).
pub fn request_origin(
    app: &App,
    extensions: &axum::http::Extensions,
    headers: &HeaderMap,
) -> RequestOrigin {
    origin_of(
        peer_of(extensions),
        headers,
        &app.config.trusted_proxies,
        app.config.proxy_header,
    )
}

fn peer_of(extensions: &axum::http::Extensions) -> IpAddr {
    extensions
        .get::<ConnectInfo<PeerAddr>>()
        .map(|ConnectInfo(p)| p.0.ip())
        .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
}

/// The comma-separated values of every instance of a header, trimmed, empty ones dropped.
fn header_list<'a>(headers: &'a HeaderMap, name: &str) -> impl Iterator<Item = &'a str> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// One element of an RFC 7239 `Forwarded` header (one hop).
#[derive(Debug, Default)]
struct ForwardedElement {
    for_: Option<String>,
    host: Option<String>,
    proto: Option<String>,
}

/// The elements of every `Forwarded` header, in order (leftmost is the first proxy). Values
/// may be quoted strings (RFC 7230 `quoted-string`); commas and semicolons inside quotes do
/// not split.
fn forwarded_elements(headers: &HeaderMap) -> Vec<ForwardedElement> {
    let mut out = Vec::new();
    for value in headers
        .get_all("forwarded")
        .iter()
        .filter_map(|v| v.to_str().ok())
    {
        for element in split_unquoted(value, ',') {
            let mut e = ForwardedElement::default();
            for pair in split_unquoted(element, ';') {
                let Some((name, value)) = pair.split_once('=') else {
                    continue;
                };
                let value = unquote(value.trim());
                match name.trim().to_ascii_lowercase().as_str() {
                    "for" => e.for_ = Some(value),
                    "host" => e.host = Some(value),
                    "proto" => e.proto = Some(value),
                    _ => {}
                }
            }
            out.push(e);
        }
    }
    out
}

fn split_unquoted(s: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            c if c == sep && !quoted => {
                parts.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(s[start..].trim());
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

fn unquote(v: &str) -> String {
    match v.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
        Some(inner) => {
            let mut out = String::with_capacity(inner.len());
            let mut escaped = false;
            for c in inner.chars() {
                if escaped || c != '\\' {
                    out.push(c);
                    escaped = false;
                } else {
                    escaped = true;
                }
            }
            out
        }
        None => v.to_owned(),
    }
}

/// An RFC 7239 node (`192.0.2.1`, `192.0.2.1:4711`, `[2001:db8::1]:4711`) as an address;
/// `unknown` and obfuscated identifiers are `None`.
fn parse_node(node: &str) -> Option<IpAddr> {
    if let Ok(ip) = node.parse() {
        return Some(ip);
    }
    if let Some(rest) = node.strip_prefix('[') {
        return rest.split_once(']')?.0.parse().ok();
    }
    node.parse::<std::net::SocketAddr>().ok().map(|a| a.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    const XFF: ProxyHeader = ProxyHeader::XForwardedFor;
    const FWD: ProxyHeader = ProxyHeader::Forwarded;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(*name, value.parse().unwrap());
        }
        h
    }

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_proxies() {
        let h = headers(&[("x-forwarded-for", "203.0.113.9, 10.0.0.2")]);
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let proxy = ip("10.0.0.1");
        assert_eq!(client_ip(proxy, &h, &trusted, XFF), ip("203.0.113.9"));
        let stranger = ip("198.51.100.1");
        assert_eq!(client_ip(stranger, &h, &trusted, XFF), stranger);
        assert_eq!(client_ip(proxy, &HeaderMap::new(), &trusted, XFF), proxy);
    }

    /// The attack of issue 22: nginx's `$proxy_add_x_forwarded_for` and Caddy append the real
    /// client to `X-Forwarded-For` and pass the client's own `Forwarded` through. With the
    /// default family that `Forwarded` is ignored for the address, the host and the scheme.
    #[test]
    fn a_client_forwarded_header_is_ignored_by_default() {
        let trusted: Vec<IpNet> = vec!["127.0.0.1/32".parse().unwrap()];
        let proxy = ip("127.0.0.1");
        let h = headers(&[
            ("host", "127.0.0.1:8080"),
            ("forwarded", "for=192.0.2.77;host=evil.example;proto=http"),
            ("x-forwarded-for", "198.51.100.50, 203.0.113.5"),
            ("x-forwarded-host", "kennis.example.org"),
            ("x-forwarded-proto", "https"),
        ]);
        assert_eq!(client_ip(proxy, &h, &trusted, XFF), ip("203.0.113.5"));
        let o = origin_of(proxy, &h, &trusted, XFF);
        assert_eq!(o.host, "kennis.example.org");
        assert_eq!(o.proto.as_deref(), Some("https"));
        // Forwarded alone (no X-Forwarded-*) still changes nothing: the peer and Host count.
        let h = headers(&[
            ("host", "127.0.0.1:8080"),
            ("forwarded", "for=192.0.2.77;host=evil.example;proto=https"),
        ]);
        assert_eq!(client_ip(proxy, &h, &trusted, XFF), proxy);
        let o = origin_of(proxy, &h, &trusted, XFF);
        assert_eq!(o.host, "127.0.0.1:8080");
        assert_eq!(o.proto, None);
    }

    /// With `header = "forwarded"` the mirror image: a proxy that overwrites `Forwarded`
    /// passes the client's `X-Forwarded-*` through, and those are ignored.
    #[test]
    fn with_forwarded_chosen_x_forwarded_is_ignored() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let proxy = ip("10.0.0.1");
        let h = headers(&[
            ("host", "127.0.0.1:8080"),
            (
                "forwarded",
                "for=198.51.100.7;host=evil.example, for=\"[2001:db8::1]:4711\";host=\"Kennis.Example.org\";proto=https",
            ),
            ("x-forwarded-for", "192.0.2.99"),
            ("x-forwarded-host", "evil.example"),
            ("x-forwarded-proto", "http"),
        ]);
        // The rightmost untrusted hop is the client.
        assert_eq!(client_ip(proxy, &h, &trusted, FWD), ip("2001:db8::1"));
        let o = origin_of(proxy, &h, &trusted, FWD);
        assert_eq!(o.host, "kennis.example.org");
        assert_eq!(o.proto.as_deref(), Some("https"));
        // Only the nearest proxy's element speaks for the host: an element further left
        // naming one (the client's own) is not believed when the nearest names none.
        let h2 = headers(&[
            ("host", "127.0.0.1:8080"),
            ("forwarded", "for=198.51.100.7;host=evil.example;proto=http"),
            ("forwarded", "for=203.0.113.8"),
        ]);
        let o = origin_of(proxy, &h2, &trusted, FWD);
        assert_eq!(o.host, "127.0.0.1:8080");
        assert_eq!(o.proto, None);
        // X-Forwarded-* alone are not believed.
        let h = headers(&[
            ("host", "127.0.0.1:8080"),
            ("x-forwarded-for", "192.0.2.99"),
            ("x-forwarded-host", "evil.example"),
            ("x-forwarded-proto", "https"),
        ]);
        assert_eq!(client_ip(proxy, &h, &trusted, FWD), proxy);
        let o = origin_of(proxy, &h, &trusted, FWD);
        assert_eq!(o.host, "127.0.0.1:8080");
        assert_eq!(o.proto, None);
        // The same headers from a stranger change nothing, in either family.
        let stranger = ip("198.51.100.1");
        for family in [XFF, FWD] {
            assert_eq!(client_ip(stranger, &h, &trusted, family), stranger);
            assert_eq!(
                origin_of(stranger, &h, &trusted, family).host,
                "127.0.0.1:8080"
            );
        }
    }

    #[test]
    fn the_walk_stops_at_what_is_not_an_address() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let proxy = ip("10.0.0.1");
        // `for=unknown` stops the walk at the proxy that could not tell.
        let h = headers(&[("forwarded", "for=203.0.113.1, for=unknown")]);
        assert_eq!(client_ip(proxy, &h, &trusted, FWD), proxy);
        // An element without `for=` is a hop nobody named: the walk stops there too.
        let h = headers(&[("forwarded", "for=203.0.113.1, proto=https")]);
        assert_eq!(client_ip(proxy, &h, &trusted, FWD), proxy);
        // Trusted hops are skipped; IPv6 with brackets and ports is read.
        let h = headers(&[("forwarded", "for=\"[2001:db8::5]:1\", for=10.0.0.9")]);
        assert_eq!(client_ip(proxy, &h, &trusted, FWD), ip("2001:db8::5"));
        let h = headers(&[("x-forwarded-for", "203.0.113.1, garbage")]);
        assert_eq!(client_ip(proxy, &h, &trusted, XFF), proxy);
        let h = headers(&[("x-forwarded-for", "203.0.113.1, 10.0.0.7")]);
        assert_eq!(client_ip(proxy, &h, &trusted, XFF), ip("203.0.113.1"));
        let h = headers(&[("x-forwarded-for", "[2001:db8::6]:443")]);
        assert_eq!(client_ip(proxy, &h, &trusted, XFF), ip("2001:db8::6"));
    }

    #[test]
    fn x_forwarded_host_and_proto_from_the_nearest_proxy() {
        let trusted: Vec<IpNet> = vec!["127.0.0.1/32".parse().unwrap()];
        let proxy = ip("127.0.0.1");
        let mut h = headers(&[
            ("host", "127.0.0.1:8080"),
            ("x-forwarded-host", "evil.example"),
            ("x-forwarded-host", "kennis.example.org"),
            ("x-forwarded-proto", "HTTPS"),
        ]);
        let o = origin_of(proxy, &h, &trusted, XFF);
        assert_eq!(o.host, "kennis.example.org");
        assert_eq!(o.proto.as_deref(), Some("https"));
        h.insert("x-forwarded-proto", "gopher".parse().unwrap());
        assert_eq!(origin_of(proxy, &h, &trusted, XFF).proto, None);
    }
}
