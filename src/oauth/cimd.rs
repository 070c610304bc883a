//! Client ID Metadata Documents (MCP authorization, revision 2026-07-28): a `client_id` that
//! is an https URL names a JSON document describing the client. It is fetched with care, since
//! the URL comes from whoever sends an authorization request:
//! - https only, a path, no fragment, no user info, no dot segments;
//! - the host is resolved first and every address checked, and the connection pinned to a
//!   checked address (`crate::outbound`, shared with trigger callbacks);
//! - no redirects, at most 5 s, at most 5 KB;
//! - the document's `client_id` must be the URL itself, and the usual registration rules apply
//!   to it (redirect allow-list, grant and response types, `none` authentication).
//!
//! A document that passes is stored as a client (keyed by its URL) with the time it stays
//! fresh, taken from `Cache-Control: max-age` / `Expires` and kept between 5 minutes and
//! 24 hours; the next authorization after that fetches it again. Tokens issued to it keep
//! working with the stored copy.

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use super::Client;
use super::clients::{ClientMetadata, MAX_CLIENT_ID_LEN, check_metadata};
use crate::app::App;
use crate::outbound::{self, FetchError};
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
    let reply = outbound::fetch(
        outbound::NO_ORG,
        url,
        allow_http_loopback,
        FETCH_TIMEOUT,
        MAX_DOCUMENT as u64,
        |client| {
            client
                .get(url.clone())
                .header(reqwest::header::ACCEPT, "application/json")
        },
    )
    .await
    .map_err(|e| match e {
        FetchError::Refused(reason) => refused(reason),
        FetchError::Failed(reason) => failed(reason),
    })?;
    let status = reply.status;
    if status.is_redirection() {
        return Err(refused(format!(
            "it answers with a redirect ({status}), and redirects are not followed"
        )));
    }
    if !status.is_success() {
        return Err(failed(format!("it answers {status}")));
    }
    Ok(Fetched {
        fresh_for: freshness(&reply.headers),
        body: reply.body,
    })
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
