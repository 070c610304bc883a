//! Requests to addresses that other people name (a client's metadata document, a trigger's
//! callback URL), guarded
//! against server-side request forgery, and bounded ([`fetch`]: a time limit and a size
//! limit for the whole answer):
//! - the host is resolved first and every address checked (never loopback, private,
//!   link-local, shared, multicast or unspecified): one inside address is enough to refuse;
//! - the connection is pinned to a checked address, so a second DNS answer (rebinding) cannot
//!   point it inside;
//! - redirects are never followed, and no proxy from the environment is used.
//!
//! [`fetch_configured`] is for addresses the operator wrote into the configuration (OpenID
//! providers, which may be inside the operator's network): the same bounds without the address
//! check. The only other exception is for tests: with a switch (`cimd_allow_http_loopback`,
//! `callback_allow_http_loopback`, `oidc_allow_http_loopback`) an `http://127.0.0.1:<port>/…`
//! URL may be used.

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

/// Of the [`MAX_LOOKUPS`] slots, at most this many are one organisation's at once: a name
/// server that never answers, named in one organisation's callback URLs, delays only that
/// organisation's callbacks, and the other organisations keep the rest.
pub const MAX_ORG_LOOKUPS: usize = MAX_LOOKUPS / 2;

/// The share of the lookup slots used for no organisation: client metadata documents, fetched
/// for whoever starts a sign-in (organisation ids start at 1).
pub const NO_ORG: u64 = 0;

/// The slots of the organisations with a lookup running (or waiting); an organisation is
/// forgotten once none is (nothing else holds its semaphore then).
static ORG_LOOKUPS: std::sync::Mutex<
    std::collections::BTreeMap<u64, std::sync::Arc<tokio::sync::Semaphore>>,
> = std::sync::Mutex::new(std::collections::BTreeMap::new());

fn org_slots(org_id: u64) -> std::sync::Arc<tokio::sync::Semaphore> {
    let mut orgs = ORG_LOOKUPS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    orgs.retain(|_, slots| std::sync::Arc::strong_count(slots) > 1);
    orgs.entry(org_id)
        .or_insert_with(|| std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_ORG_LOOKUPS)))
        .clone()
}

/// The addresses of `host`, through the system resolver, in one of organisation `org_id`'s
/// [`MAX_ORG_LOOKUPS`] slots and one of the [`MAX_LOOKUPS`] (waiting for them while the
/// caller's timeout allows).
async fn lookup(org_id: u64, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
    use std::net::ToSocketAddrs;
    let host = host.to_owned();
    org_bounded_blocking(org_id, &LOOKUPS, move || {
        (host.as_str(), port)
            .to_socket_addrs()
            .map(Iterator::collect)
    })
    .await
}

/// [`bounded_blocking`] holding one of the organisation's slots as well, as long as `work`
/// runs.
async fn org_bounded_blocking<T: Send + 'static>(
    org_id: u64,
    slots: &'static tokio::sync::Semaphore,
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    let mine = org_slots(org_id)
        .acquire_owned()
        .await
        .map_err(|_| std::io::Error::other("the resolver is shut down"))?;
    bounded_blocking(slots, move || {
        let result = work();
        drop(mine);
        result
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

/// How long a lookup made while saving a setting ([`resolve_blocking`]) may take, waiting for a
/// slot included, before it counts as not resolved.
pub const SAVE_LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);
/// Lookups of [`resolve_blocking`] at once (slots of their own, beside [`MAX_LOOKUPS`]).
pub const MAX_SAVE_LOOKUPS: usize = 4;
static SAVE_LOOKUPS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_SAVE_LOOKUPS);

/// Runs blocking `work` on a thread of its own holding one of `slots` for as long as the work
/// runs, for callers outside the async runtime: waits for a slot and for the answer up to
/// `timeout` in all, then gives up; an abandoned `work` keeps its slot until it returns, so a
/// slow resolver never has more than `slots` threads waiting on it.
fn bounded_thread<T: Send + 'static>(
    slots: &'static tokio::sync::Semaphore,
    timeout: Duration,
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    let deadline = std::time::Instant::now() + timeout;
    let permit = loop {
        match slots.try_acquire() {
            Ok(p) => break p,
            Err(tokio::sync::TryAcquireError::Closed) => {
                return Err(std::io::Error::other("the resolver is shut down"));
            }
            Err(tokio::sync::TryAcquireError::NoPermits) => {
                if std::time::Instant::now() >= deadline {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "too many lookups at once",
                    ));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    };
    let (send, answer) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("kennis-lookup".into())
        .spawn(move || {
            let result = work();
            drop(permit);
            let _ = send.send(result);
        })?;
    let left = deadline.saturating_duration_since(std::time::Instant::now());
    answer.recv_timeout(left).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {} seconds", timeout.as_secs()),
        )
    })?
}

/// Whether the test switch lets this URL through: `http://127.0.0.1:<port>` only.
pub fn loopback_allowed(url: &url::Url, allow_http_loopback: bool) -> bool {
    allow_http_loopback && url.scheme() == "http" && url.host_str() == Some("127.0.0.1")
}

/// The addresses a URL's host names without asking DNS (an IP literal, or `localhost` and the
/// names below it, which are loopback by definition, RFC 6761), else `None`.
fn literal(url: &url::Url, port: u16) -> Option<Vec<SocketAddr>> {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => Some(vec![SocketAddr::new(ip.into(), port)]),
        Some(url::Host::Ipv6(ip)) => Some(vec![SocketAddr::new(ip.into(), port)]),
        Some(url::Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            (name == "localhost" || name.ends_with(".localhost")).then(|| {
                vec![
                    SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), port),
                    SocketAddr::new(std::net::Ipv6Addr::LOCALHOST.into(), port),
                ]
            })
        }
        None => None,
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

/// Resolves the URL's host once, for organisation `org_id` (in its share of the lookup
/// slots), and checks every address (see the module's rules).
pub async fn resolve(
    org_id: u64,
    url: &url::Url,
    allow_http_loopback: bool,
) -> Result<Pinned, Guard> {
    let host = url.host_str().unwrap_or_default().to_owned();
    let port = url.port_or_known_default().unwrap_or(443);
    let addrs = match literal(url, port) {
        Some(a) => a,
        None => lookup(org_id, &host, port)
            .await
            .map_err(|e| Guard::Unresolved(format!("cannot resolve {host}: {e}")))?,
    };
    check(url, &host, &addrs, allow_http_loopback)
}

/// [`resolve`] for callers outside the async runtime (saving a setting): the lookup runs in
/// one of [`MAX_SAVE_LOOKUPS`] slots and is given up after [`SAVE_LOOKUP_TIMEOUT`]
/// ([`Guard::Unresolved`]).
pub fn resolve_blocking(url: &url::Url, allow_http_loopback: bool) -> Result<Pinned, Guard> {
    use std::net::ToSocketAddrs;
    let host = url.host_str().unwrap_or_default().to_owned();
    let port = url.port_or_known_default().unwrap_or(443);
    let addrs = match literal(url, port) {
        Some(a) => a,
        None => {
            let name = host.clone();
            bounded_thread(&SAVE_LOOKUPS, SAVE_LOOKUP_TIMEOUT, move || {
                (name.as_str(), port)
                    .to_socket_addrs()
                    .map(Iterator::collect)
            })
            .map_err(|e| Guard::Unresolved(format!("cannot resolve {host}: {e}")))?
        }
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

/// Why a bounded response body was not read.
#[derive(Debug)]
pub enum BodyError {
    /// The body is (or announced itself) larger than the limit; reading stopped there.
    TooLarge,
    /// The connection failed while reading.
    Read(String),
}

/// Reads a response body of at most `limit` bytes, chunk by chunk: a larger one is refused as
/// soon as it passes the limit (or at once when its `Content-Length` says so), never buffered
/// whole.
pub async fn bounded_body(
    mut response: reqwest::Response,
    limit: u64,
) -> Result<Vec<u8>, BodyError> {
    if response.content_length().is_some_and(|n| n > limit) {
        return Err(BodyError::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| BodyError::Read(describe(e)))?
    {
        let len = u64::try_from(body.len().saturating_add(chunk.len())).unwrap_or(u64::MAX);
        if len > limit {
            return Err(BodyError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A request's failure in words: the error and its causes, without the request's address
/// (the caller knows it, and decides who may read it).
pub fn describe(e: reqwest::Error) -> String {
    let e = e.without_url();
    if e.is_timeout() {
        return "no complete answer in time".to_owned();
    }
    if e.is_connect() {
        return "cannot connect".to_owned();
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// A complete answer of [`fetch`] (a redirect is an answer too: never followed).
#[derive(Debug)]
pub struct Reply {
    pub status: reqwest::StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: Vec<u8>,
}

/// Why [`fetch`] has no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchError {
    /// Not asked, or not read: the address is inside a private network, or the answer is
    /// larger than allowed.
    Refused(String),
    /// No complete answer: the name did not resolve, no connection, too slow, broken off.
    Failed(String),
}

/// Resolves and checks `url`'s address for organisation `org_id` ([`resolve`]), sends the request `build` makes on a
/// client pinned to it ([`client`]), and reads the answer: at most `max` bytes, everything
/// within `timeout`.
pub async fn fetch(
    org_id: u64,
    url: &url::Url,
    allow_http_loopback: bool,
    timeout: Duration,
    max: u64,
    build: impl FnOnce(&reqwest::Client) -> reqwest::RequestBuilder,
) -> Result<Reply, FetchError> {
    let work = async {
        let pinned = resolve(org_id, url, allow_http_loopback)
            .await
            .map_err(|e| match e {
                Guard::Refused(reason) => FetchError::Refused(reason),
                Guard::Unresolved(reason) => FetchError::Failed(reason),
            })?;
        let client = client(&pinned, timeout).map_err(FetchError::Failed)?;
        send(build(&client), max).await
    };
    within(timeout, work).await
}

/// [`fetch`] for an address the operator configured (an `[[oidc]]` provider and the endpoints
/// its discovery document names), which may lie inside the operator's own network: the same
/// bounds (time, size, no redirect, no proxy), without the public-address check. Never for an
/// address an organisation or a client names.
pub async fn fetch_configured(
    timeout: Duration,
    max: u64,
    build: impl FnOnce(&reqwest::Client) -> reqwest::RequestBuilder,
) -> Result<Reply, FetchError> {
    let work = async {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(timeout)
            .connect_timeout(timeout)
            .user_agent(concat!("kennis/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| FetchError::Failed(e.to_string()))?;
        send(build(&client), max).await
    };
    within(timeout, work).await
}

/// Sends a request and reads its answer, at most `max` bytes.
async fn send(request: reqwest::RequestBuilder, max: u64) -> Result<Reply, FetchError> {
    let response = request
        .send()
        .await
        .map_err(|e| FetchError::Failed(describe(e)))?;
    let (status, headers) = (response.status(), response.headers().clone());
    let body = bounded_body(response, max).await.map_err(|e| match e {
        BodyError::TooLarge => FetchError::Refused(format!("it is larger than {max} bytes")),
        BodyError::Read(reason) => FetchError::Failed(reason),
    })?;
    Ok(Reply {
        status,
        headers,
        body,
    })
}

/// The whole of `work` within `timeout`: lookup, connection, answer and body.
async fn within(
    timeout: Duration,
    work: impl Future<Output = Result<Reply, FetchError>>,
) -> Result<Reply, FetchError> {
    match tokio::time::timeout(timeout, work).await {
        Ok(r) => r,
        Err(_) => Err(FetchError::Failed(format!(
            "no complete answer within {} seconds",
            timeout.as_secs()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

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

    /// A resolver that answers only when released: each lookup counts itself as started, then
    /// waits for one message on `release`.
    struct NeverAnswers {
        release: std::sync::mpsc::Sender<()>,
        hold: std::sync::Arc<std::sync::Mutex<std::sync::mpsc::Receiver<()>>>,
        started: std::sync::Arc<AtomicUsize>,
    }

    impl NeverAnswers {
        fn new() -> NeverAnswers {
            let (release, hold) = std::sync::mpsc::channel::<()>();
            NeverAnswers {
                release,
                hold: std::sync::Arc::new(std::sync::Mutex::new(hold)),
                started: std::sync::Arc::new(AtomicUsize::new(0)),
            }
        }

        fn lookup(&self) -> impl FnOnce() -> std::io::Result<()> + Send + 'static {
            let (hold, started) = (self.hold.clone(), self.started.clone());
            move || {
                started.fetch_add(1, Ordering::SeqCst);
                let _ = hold.lock().map(|h| h.recv());
                Ok(())
            }
        }
    }

    /// A lookup abandoned at its timeout keeps its slot until the resolver returns, and when
    /// every slot is taken a new lookup waits (and so meets its caller's timeout) instead of
    /// starting another thread.
    #[tokio::test]
    async fn abandoned_lookups_keep_their_slot_until_they_end() {
        static SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);
        let resolver = NeverAnswers::new();
        let slow = || resolver.lookup();
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
            resolver.started.load(Ordering::SeqCst) <= 2,
            "no third thread was started"
        );
        // When the resolver answers, the slots come back.
        resolver.release.send(()).unwrap();
        resolver.release.send(()).unwrap();
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while SLOTS.available_permits() < 2 {
            assert!(std::time::Instant::now() < until, "slots not given back");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(bounded_blocking(&SLOTS, || Ok(7)).await.unwrap(), 7);
    }

    /// One organisation whose name server never answers takes at most its share of the
    /// slots: its further lookups wait (and meet their timeout) without starting a thread,
    /// while another organisation's lookup runs at once.
    #[tokio::test]
    async fn one_organisation_takes_at_most_its_share_of_the_slots() {
        static SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_LOOKUPS);
        // Ids no other test uses: the organisations' slots are shared by the whole process.
        const HOG: u64 = 9_000_001;
        const OTHER: u64 = 9_000_002;
        let resolver = NeverAnswers::new();
        let slow = || resolver.lookup();
        for _ in 0..MAX_LOOKUPS {
            let r = tokio::time::timeout(
                Duration::from_millis(50),
                org_bounded_blocking(HOG, &SLOTS, slow()),
            )
            .await;
            assert!(r.is_err(), "the lookup is abandoned at the timeout");
        }
        // Its share started (on a busy machine a thread may start late), and no more.
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while resolver.started.load(Ordering::SeqCst) < MAX_ORG_LOOKUPS {
            assert!(std::time::Instant::now() < until, "its share did not start");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(resolver.started.load(Ordering::SeqCst), MAX_ORG_LOOKUPS);
        assert_eq!(SLOTS.available_permits(), MAX_LOOKUPS - MAX_ORG_LOOKUPS);
        let other = tokio::time::timeout(
            Duration::from_secs(5),
            org_bounded_blocking(OTHER, &SLOTS, || Ok(7)),
        )
        .await;
        assert_eq!(other.unwrap().unwrap(), 7, "another organisation resolves");
        // When the resolver answers, the slots come back and the organisation is forgotten.
        for _ in 0..MAX_ORG_LOOKUPS {
            resolver.release.send(()).unwrap();
        }
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while SLOTS.available_permits() < MAX_LOOKUPS {
            assert!(std::time::Instant::now() < until, "slots not given back");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        drop(org_slots(OTHER));
        let known = ORG_LOOKUPS.lock().unwrap().contains_key(&HOG);
        assert!(!known, "an organisation with no lookup is forgotten");
    }

    /// The same for lookups outside the runtime: one abandoned at its timeout keeps its slot
    /// (and its thread) until the resolver returns; with every slot taken a new one waits for
    /// one only until its timeout and starts no thread.
    #[test]
    fn abandoned_blocking_lookups_keep_their_slot_until_they_end() {
        static SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);
        let resolver = NeverAnswers::new();
        let slow = || resolver.lookup();
        for _ in 0..2 {
            let e = bounded_thread(&SLOTS, Duration::from_millis(50), slow()).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        }
        assert_eq!(SLOTS.available_permits(), 0);
        let e = bounded_thread(&SLOTS, Duration::from_millis(100), slow()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("too many lookups"), "{e}");
        assert_eq!(
            resolver.started.load(Ordering::SeqCst),
            2,
            "no third thread was started"
        );
        resolver.release.send(()).unwrap();
        resolver.release.send(()).unwrap();
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while SLOTS.available_permits() < 2 {
            assert!(std::time::Instant::now() < until, "slots not given back");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            bounded_thread(&SLOTS, Duration::from_secs(1), || Ok(7)).unwrap(),
            7
        );
    }

    #[tokio::test]
    async fn resolve_answers_for_an_address_literal() {
        let addrs = lookup(1, "127.0.0.1", 443).await.unwrap();
        assert_eq!(addrs, vec![SocketAddr::from(([127, 0, 0, 1], 443))]);
        assert_eq!(LOOKUPS.available_permits(), MAX_LOOKUPS);
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
        // `localhost` and the names below it are loopback without asking DNS (RFC 6761), in
        // any letter case and with the root's dot: refused at once, even with every lookup
        // slot taken.
        for name in ["localhost", "LocalHost.", "api.localhost", "x.y.LOCALHOST"] {
            let url = u(&format!("https://{name}/hook"));
            assert_eq!(
                literal(&url, 443).map(|a| a.len()),
                Some(2),
                "{name} is loopback by definition"
            );
            assert!(
                matches!(resolve_blocking(&url, true), Err(Guard::Refused(_))),
                "{name}"
            );
        }
        assert_eq!(literal(&u("https://localhost.example/hook"), 443), None);
    }
}
