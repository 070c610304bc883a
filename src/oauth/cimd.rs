//! Client ID Metadata Documents (MCP authorization, revision 2026-07-28): a `client_id` that
//! is an https URL names a JSON document describing the client. It is fetched with care, since
//! the URL comes from whoever sends an authorization request:
//! - https only, a path, no fragment, no user info, no dot segments;
//! - the host is resolved first and every address checked (never loopback, private,
//!   link-local, shared, multicast or unspecified); the connection is pinned to a checked
//!   address, so a second DNS answer (rebinding) cannot point it inside;
//! - no redirects, at most 5 s, at most 5 KB;
//! - the document's `client_id` must be the URL itself, and the usual registration rules apply
//!   to it (redirect allow-list, grant and response types, `none` authentication).
//!
//! A document that passes is stored as a client (keyed by its URL) with the time it stays
//! fresh, taken from `Cache-Control: max-age` / `Expires` and kept between 5 minutes and
//! 24 hours; the next authorization after that fetches it again. Tokens issued to it keep
//! working with the stored copy.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use super::Client;
use super::clients::{ClientMetadata, MAX_CLIENT_ID_LEN, check_metadata};
use crate::app::App;
use crate::store::{OAUTH_CLIENTS, StoreError};

/// Largest document read.
pub const MAX_DOCUMENT: usize = 5 * 1024;
/// The whole fetch, from resolving the name to the last byte.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// A fetched document stays fresh at least this long, whatever its headers say.
pub const MIN_FRESH: SignedDuration = SignedDuration::from_mins(5);
/// … and at most this long.
pub const MAX_FRESH: SignedDuration = SignedDuration::from_hours(24);

/// Why a metadata document was not used. The text (with resolver answers and addresses) is for
/// the log; the page shown before login says only [`CimdError::page_message`].
#[derive(Debug, thiserror::Error)]
pub enum CimdError {
    #[error("the client_id `{0}` is not a usable metadata document URL: {1}")]
    BadUrl(String, &'static str),
    #[error("the client's metadata document at {url} is not fetched: {reason}")]
    Refused { url: String, reason: String },
    #[error("the client's metadata document at {url} could not be fetched: {reason}")]
    Fetch { url: String, reason: String },
    #[error("the client's metadata document at {url} is not valid: {reason}")]
    Document { url: String, reason: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The one sentence the error page (shown before anyone logs in) gives for a document that
/// could not be fetched: no host, address or resolver answer.
pub const NOT_FETCHED: &str = "the client's metadata document could not be fetched";

impl CimdError {
    /// What the error page says: the rule a badly written URL breaks or what is wrong with a
    /// fetched document (both only repeat what the client itself published), and for
    /// anything about the fetch one generic sentence, [`NOT_FETCHED`]: which addresses a name
    /// resolves to, whether they are inside and how a connection failed is the log's business.
    pub fn page_message(&self) -> String {
        match self {
            CimdError::BadUrl(_, why) => {
                format!("the client_id is not a usable metadata document URL: {why}")
            }
            CimdError::Refused { .. } | CimdError::Fetch { .. } => NOT_FETCHED.to_owned(),
            CimdError::Document { reason, .. } => {
                format!("the client's metadata document is not valid: {reason}")
            }
            CimdError::Store(_) => "internal error".to_owned(),
        }
    }
}

/// Whether a `client_id` names a metadata document (rather than a registered client).
pub fn is_metadata_url(client_id: &str) -> bool {
    client_id.starts_with("https://") || client_id.starts_with("http://")
}

/// Makes sure the client a metadata-document URL names is stored and fresh: unknown or stale
/// clients are fetched (and stored); a fresh stored copy is used as it is.
pub async fn ensure_fresh(app: &Arc<App>, client_id: &str) -> Result<Client, CimdError> {
    let url = check_url(client_id, app.config.cimd_allow_http_loopback)?;
    let id = client_id.to_owned();
    let stored: Option<Client> = app
        .blocking(move |app| app.store.read(|tx| tx.get(OAUTH_CLIENTS, id.as_bytes())))
        .await?;
    let now = app.clock.now();
    if let Some(c) = &stored
        && c.metadata_fresh_until.is_some_and(|t| t > now)
    {
        return Ok(c.clone());
    }
    let fetched = fetch(&url, app.config.cimd_allow_http_loopback).await?;
    let client = client_from_document(app, client_id, &fetched.body, now, fetched.fresh_for)?;
    let stored_client = client.clone();
    app.blocking(move |app| {
        app.store.write(|tx| {
            tx.put(
                OAUTH_CLIENTS,
                stored_client.client_id.as_bytes(),
                &stored_client,
            )
        })
    })
    .await?;
    Ok(client)
}

/// Checks the URL's form: https (or, when allowed for tests, `http://127.0.0.1:<port>`), a
/// path, no fragment, no user info, no dot segments, written the canonical way.
fn check_url(client_id: &str, allow_http_loopback: bool) -> Result<url::Url, CimdError> {
    let bad = |why| CimdError::BadUrl(client_id.chars().take(200).collect(), why);
    if client_id.len() > MAX_CLIENT_ID_LEN {
        return Err(bad("it is too long"));
    }
    let url = url::Url::parse(client_id).map_err(|_| bad("it is not a URL"))?;
    match url.scheme() {
        "https" => {}
        "http" if allow_http_loopback && url.host_str() == Some("127.0.0.1") => {}
        _ => return Err(bad("it must be an https:// URL")),
    }
    if url.path() == "/" || url.path().is_empty() {
        return Err(bad("it must have a path"));
    }
    if url.fragment().is_some() || client_id.contains('#') {
        return Err(bad("it must not have a fragment"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad("it must not carry user information"));
    }
    let raw_path = client_id
        .split_once("://")
        .map(|(_, rest)| rest)
        .and_then(|rest| rest.find('/').map(|i| &rest[i..]))
        .unwrap_or("");
    let raw_path = raw_path.split('?').next().unwrap_or("");
    if raw_path.split('/').any(|seg| seg == "." || seg == "..") {
        return Err(bad("it must not contain . or .. segments"));
    }
    if url.as_str() != client_id {
        return Err(bad("it must be written in canonical form"));
    }
    Ok(url)
}

/// Whether an address may be fetched from: public unicast only.
///
/// IPv4: everything but loopback, private, link-local, shared, benchmarking, documentation,
/// protocol-assignment, 6to4-relay, multicast, broadcast and reserved ranges. IPv6: only
/// global unicast (`2000::/3`), less the ranges in it that are not one host on the internet
/// or that lead elsewhere: `2001::/23` (IETF protocol assignments, Teredo `2001::/32` among
/// them), `2001:db8::/32` and `3fff::/20` (documentation), `2002::/16` (6to4, whose embedded
/// IPv4 address may be inside). Outside `2000::/3` lie loopback, unspecified, the
/// IPv4-compatible `::/96`, NAT64 `64:ff9b::/96` and `64:ff9b:1::/48`, discard `100::/64`,
/// unique local `fc00::/7`, link-local `fe80::/10`, the old site-local `fec0::/10` and
/// multicast: all refused. An IPv4-mapped address (`::ffff:a.b.c.d`) is judged as its IPv4
/// address.
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
                || (o[0] == 192 && o[1] == 88 && o[2] == 99) // 192.88.99.0/24, 6to4 relays
                || (o[0] == 198 && (o[1] & 0xfe) == 18) // 198.18.0.0/15, benchmarking
                || o[0] >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let s = v6.segments();
            let global_unicast = (s[0] & 0xe000) == 0x2000;
            let special = match s[0] {
                // 2001::/23 (Teredo 2001::/32 in it) and 2001:db8::/32, documentation.
                0x2001 => s[1] < 0x0200 || s[1] == 0x0db8,
                // 6to4.
                0x2002 => true,
                // 3fff::/20, documentation.
                first => (first & 0xfff0) == 0x3ff0,
            };
            global_unicast && !special
        }
    }
}

/// At most this many name lookups run at once. The system resolver cannot be interrupted: a
/// lookup whose fetch timed out is abandoned by the fetch, but its thread runs until the
/// resolver gives up; the slot stays taken until then, so slow or hostile name servers cannot
/// pile up blocked threads.
pub const MAX_LOOKUPS: usize = 8;
static LOOKUPS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_LOOKUPS);

/// The addresses of `host`, through the system resolver, in one of the [`MAX_LOOKUPS`] slots
/// (waiting for one while the caller's timeout allows).
async fn resolve(host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
    use std::net::ToSocketAddrs;
    let host = host.to_owned();
    bounded_blocking(&LOOKUPS, move || {
        (host.as_str(), port)
            .to_socket_addrs()
            .map(Iterator::collect)
    })
    .await
}

/// Runs blocking `work` on the blocking pool holding one of `slots` for as long as the work
/// runs, not only as long as the caller waits: dropping this future (a timeout) leaves the
/// slot taken until `work` returns.
async fn bounded_blocking<T: Send + 'static>(
    slots: &'static tokio::sync::Semaphore,
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    let permit = slots
        .acquire()
        .await
        .map_err(|_| std::io::Error::other("the resolver is shut down"))?;
    tokio::task::spawn_blocking(move || {
        let result = work();
        drop(permit);
        result
    })
    .await
    .map_err(|_| std::io::Error::other("the lookup did not finish"))?
}

struct Fetched {
    body: Vec<u8>,
    fresh_for: SignedDuration,
}

/// Resolves, checks and pins the address, then fetches with the limits above.
async fn fetch(url: &url::Url, allow_http_loopback: bool) -> Result<Fetched, CimdError> {
    let shown = url.as_str().to_owned();
    let refused = |reason: String| CimdError::Refused {
        url: shown.clone(),
        reason,
    };
    let failed = |reason: String| CimdError::Fetch {
        url: shown.clone(),
        reason,
    };
    let host = url.host_str().unwrap_or_default().to_owned();
    let port = url.port_or_known_default().unwrap_or(443);
    let loopback_allowed = allow_http_loopback && url.scheme() == "http" && host == "127.0.0.1";
    let work = async {
        let addrs: Vec<SocketAddr> = match url.host() {
            Some(url::Host::Ipv4(ip)) => vec![SocketAddr::new(ip.into(), port)],
            Some(url::Host::Ipv6(ip)) => vec![SocketAddr::new(ip.into(), port)],
            _ => resolve(&host, port)
                .await
                .map_err(|e| failed(format!("cannot resolve {host}: {e}")))?,
        };
        let Some(&pinned) = addrs.first() else {
            return Err(failed(format!("{host} has no address")));
        };
        // Every answer must be public: one inside address is enough to refuse, or a second
        // lookup (by anything but this pinned connection) could be steered to it.
        if let Some(bad) = addrs
            .iter()
            .find(|a| !(is_public(a.ip()) || (loopback_allowed && a.ip().is_loopback())))
        {
            return Err(refused(format!(
                "{host} resolves to {}, an address inside a private network",
                bad.ip()
            )));
        }
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(FETCH_TIMEOUT)
            .connect_timeout(FETCH_TIMEOUT)
            .resolve(&host, pinned)
            .user_agent(concat!("kennis/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| failed(e.to_string()))?;
        let mut response = client
            .get(url.clone())
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| failed(describe(&e)))?;
        let status = response.status();
        if status.is_redirection() {
            return Err(refused(format!(
                "it answers with a redirect ({status}), and redirects are not followed"
            )));
        }
        if !status.is_success() {
            return Err(failed(format!("it answers {status}")));
        }
        if response
            .content_length()
            .is_some_and(|n| n > MAX_DOCUMENT as u64)
        {
            return Err(refused(format!("it is larger than {MAX_DOCUMENT} bytes")));
        }
        let fresh_for = freshness(response.headers());
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| failed(describe(&e)))? {
            if body.len() + chunk.len() > MAX_DOCUMENT {
                return Err(refused(format!("it is larger than {MAX_DOCUMENT} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Fetched { body, fresh_for })
    };
    match tokio::time::timeout(FETCH_TIMEOUT, work).await {
        Ok(r) => r,
        Err(_) => Err(failed(format!(
            "no complete answer within {} seconds",
            FETCH_TIMEOUT.as_secs()
        ))),
    }
}

fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        format!(
            "no complete answer within {} seconds",
            FETCH_TIMEOUT.as_secs()
        )
    } else if e.is_connect() {
        "cannot connect".to_owned()
    } else {
        e.to_string()
    }
}

/// How long a response stays fresh per its caching headers, kept within
/// [`MIN_FRESH`]..=[`MAX_FRESH`]; `no-store`/`no-cache` or no header mean the minimum.
fn freshness(headers: &reqwest::header::HeaderMap) -> SignedDuration {
    let cache_control: Vec<String> = headers
        .get_all(reqwest::header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|d| d.trim().to_ascii_lowercase())
        .collect();
    let said = if cache_control
        .iter()
        .any(|d| d == "no-store" || d == "no-cache")
    {
        None
    } else if let Some(age) = cache_control
        .iter()
        .find_map(|d| d.strip_prefix("max-age="))
    {
        age.trim_matches('"')
            .parse::<i64>()
            .ok()
            .map(SignedDuration::from_secs)
    } else {
        let date = |name| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| jiff::fmt::rfc2822::parse(v).ok())
                .map(|z| z.timestamp())
        };
        match (
            date(reqwest::header::EXPIRES),
            date(reqwest::header::DATE).or_else(|| Some(Timestamp::now())),
        ) {
            (Some(expires), Some(now)) => Some(expires.duration_since(now)),
            _ => None,
        }
    };
    said.unwrap_or(MIN_FRESH).clamp(MIN_FRESH, MAX_FRESH)
}

/// The document as a client: `client_id` must be the URL, the registration rules apply, and
/// only `none` authentication is possible (there is no secret to share).
fn client_from_document(
    app: &App,
    client_id: &str,
    body: &[u8],
    now: Timestamp,
    fresh_for: SignedDuration,
) -> Result<Client, CimdError> {
    let invalid = |reason: String| CimdError::Document {
        url: client_id.to_owned(),
        reason,
    };
    let doc: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| invalid(format!("it is not JSON ({e})")))?;
    if !doc.is_object() {
        return Err(invalid("it is not a JSON object".into()));
    }
    match doc.get("client_id").and_then(|v| v.as_str()) {
        Some(id) if id == client_id => {}
        Some(_) => {
            return Err(invalid(
                "its client_id is not the URL it was fetched from".into(),
            ));
        }
        None => return Err(invalid("it has no client_id".into())),
    }
    let meta: ClientMetadata = serde_json::from_value(doc)
        .map_err(|e| invalid(format!("its metadata has the wrong shape ({e})")))?;
    let checked =
        check_metadata(&app.config.redirect, meta, "none").map_err(|e| invalid(e.to_string()))?;
    if checked.token_endpoint_auth_method != "none" {
        return Err(invalid(
            "token_endpoint_auth_method must be `none` (a metadata document cannot share a secret)"
                .into(),
        ));
    }
    Ok(Client {
        client_id: client_id.to_owned(),
        client_name: checked.client_name,
        redirect_uris: checked.redirect_uris,
        token_endpoint_auth_method: checked.token_endpoint_auth_method,
        grant_types: checked.grant_types,
        secret_sha256: None,
        created_at: now,
        metadata_fresh_until: Some(now + fresh_for),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn urls_must_be_https_with_a_plain_path() {
        assert!(check_url("https://app.example.com/oauth/client.json", false).is_ok());
        for bad in [
            "http://app.example.com/client.json",
            "https://app.example.com",
            "https://app.example.com/",
            "https://app.example.com/c.json#x",
            "https://user:pw@app.example.com/c.json",
            "https://app.example.com/a/../c.json",
            "https://APP.example.com/c.json",
            "http://127.0.0.1:8080/c.json",
        ] {
            assert!(check_url(bad, false).is_err(), "{bad}");
        }
        assert!(check_url("http://127.0.0.1:8080/c.json", true).is_ok());
        assert!(check_url("http://localhost:8080/c.json", true).is_err());
    }

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
            "::ffff:127.0.0.1",
            "64:ff9b::a00:1",
            "64:ff9b::808:808",
            "64:ff9b:1::a00:1",
            // Site-local (deprecated, still routed inside some networks).
            "fec0::1",
            "feff::1",
            // 6to4 embedding 10.0.0.1, 127.0.0.1 and even a public address.
            "2002:a00:1::1",
            "2002:7f00:1::1",
            "2002:808:808::1",
            // Teredo, and the rest of the IETF protocol assignments.
            "2001::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "2001:2::1",
            "2001:10::1",
            "2001:db8::1",
            "3fff::1",
            // IPv4-compatible (deprecated) forms of inside and outside addresses.
            "::10.0.0.1",
            "::127.0.0.1",
            "::8.8.8.8",
            "100::1",
            "ff02::1",
            "::",
            "192.88.99.1",
            "198.18.0.1",
            "255.255.255.255",
            "240.0.0.1",
        ] {
            assert!(!is_public(inside.parse().unwrap()), "{inside}");
        }
        for outside in [
            "93.184.215.14",
            "2606:4700::1111",
            "2a00:1450:4001::1",
            "2001:4860:4860::8888",
            "::ffff:8.8.8.8",
        ] {
            assert!(is_public(outside.parse().unwrap()), "{outside}");
        }
    }

    /// A lookup abandoned at its timeout keeps its slot until the resolver returns, and when
    /// every slot is taken a new lookup waits (and so meets its caller's timeout) instead of
    /// starting another thread.
    #[tokio::test]
    async fn abandoned_lookups_keep_their_slot_until_they_end() {
        static SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);
        let (release, hold) = std::sync::mpsc::channel::<()>();
        let hold = std::sync::Arc::new(std::sync::Mutex::new(hold));
        let started = std::sync::Arc::new(AtomicUsize::new(0));
        let slow = || {
            let (hold, started) = (hold.clone(), started.clone());
            move || {
                started.fetch_add(1, Ordering::SeqCst);
                let _ = hold.lock().map(|h| h.recv());
                Ok(())
            }
        };
        for _ in 0..2 {
            let r =
                tokio::time::timeout(Duration::from_millis(50), bounded_blocking(&SLOTS, slow()))
                    .await;
            assert!(r.is_err(), "the lookup is abandoned at the timeout");
        }
        // Both abandoned lookups still hold their slot: a third does not start.
        assert_eq!(SLOTS.available_permits(), 0);
        let third =
            tokio::time::timeout(Duration::from_millis(100), bounded_blocking(&SLOTS, slow()))
                .await;
        assert!(third.is_err());
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            started.load(Ordering::SeqCst) <= 2,
            "no third thread was started"
        );
        // When the resolver answers, the slots come back.
        release.send(()).unwrap();
        release.send(()).unwrap();
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while SLOTS.available_permits() < 2 {
            assert!(std::time::Instant::now() < until, "slots not given back");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(bounded_blocking(&SLOTS, || Ok(7)).await.unwrap(), 7);
    }

    #[tokio::test]
    async fn resolve_answers_for_an_address_literal() {
        let addrs = resolve("127.0.0.1", 443).await.unwrap();
        assert_eq!(addrs, vec![SocketAddr::from(([127, 0, 0, 1], 443))]);
        assert_eq!(LOOKUPS.available_permits(), MAX_LOOKUPS);
    }

    #[test]
    fn freshness_is_bounded() {
        let mut h = reqwest::header::HeaderMap::new();
        assert_eq!(freshness(&h), MIN_FRESH);
        h.insert("cache-control", "public, max-age=3600".parse().unwrap());
        assert_eq!(freshness(&h), SignedDuration::from_hours(1));
        h.insert("cache-control", "max-age=10".parse().unwrap());
        assert_eq!(freshness(&h), MIN_FRESH);
        h.insert("cache-control", "max-age=31536000".parse().unwrap());
        assert_eq!(freshness(&h), MAX_FRESH);
        h.insert("cache-control", "no-store".parse().unwrap());
        assert_eq!(freshness(&h), MIN_FRESH);
    }
}
