//! The client's address for rate limits: the peer, unless the peer is a trusted proxy, in
//! which case `X-Forwarded-For` is read from the right, skipping trusted proxies.
//!
//! [`PeerAddr`] is the connection's peer (from plain and TLS listeners alike); [`CallerIp`]
//! is the extractor handlers use to get the client's address.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use ipnet::IpNet;

use crate::app::App;

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
    let peer = parts
        .extensions
        .get::<ConnectInfo<PeerAddr>>()
        .map(|ConnectInfo(p)| p.0.ip())
        .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
    client_ip(peer, &parts.headers, &app.config.trusted_proxies)
}

pub fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    if !is_trusted(&peer) {
        return peer;
    }
    let hops: Vec<IpAddr> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    hops.into_iter()
        .rev()
        .find(|ip| !is_trusted(ip))
        .unwrap_or(peer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_proxies() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", "203.0.113.9, 10.0.0.2".parse().unwrap());
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let proxy: IpAddr = "10.0.0.1".parse().unwrap();
        assert_eq!(
            client_ip(proxy, &h, &trusted),
            "203.0.113.9".parse::<IpAddr>().unwrap()
        );
        let stranger: IpAddr = "198.51.100.1".parse().unwrap();
        assert_eq!(client_ip(stranger, &h, &trusted), stranger);
        assert_eq!(client_ip(proxy, &HeaderMap::new(), &trusted), proxy);
    }
}
