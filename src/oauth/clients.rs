//! Dynamic client registration (RFC 7591), the registration rules Client ID Metadata
//! Documents share (see `cimd`), and client authentication at `/token`.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use super::redirect::allowed_at_registration;
use super::{OAuthError, hash_secret, new_secret};
use crate::app::App;
use crate::store::OAUTH_CLIENTS;

/// Longest client id looked up: registered ids are short; metadata-document ids are URLs.
pub const MAX_CLIENT_ID_LEN: usize = 2048;

/// Most redirect URIs one client may send (specification).
pub const MAX_REDIRECT_URIS: usize = 10;

const GRANT_TYPES: [&str; 2] = ["authorization_code", "refresh_token"];

/// A registered client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Client {
    pub client_id: String,
    pub client_name: String,
    pub redirect_uris: Vec<String>,
    /// `none` or `client_secret_post`.
    pub token_endpoint_auth_method: String,
    pub grant_types: Vec<String>,
    /// SHA-256 of the client secret (hex), for `client_secret_post` clients.
    pub secret_sha256: Option<String>,
    pub created_at: Timestamp,
    /// For a client whose id is the URL of its metadata document: until when the stored copy
    /// of the document counts as fresh (after that, the next authorization fetches it again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_fresh_until: Option<Timestamp>,
}

impl Client {
    /// The host of a metadata-document client's URL (shown on the consent page); `None` for
    /// registered clients.
    pub fn metadata_host(&self) -> Option<String> {
        self.metadata_fresh_until?;
        url::Url::parse(&self.client_id)
            .ok()?
            .host_str()
            .map(str::to_owned)
    }
}

/// The registration request; fields we do not use are ignored, as RFC 7591 allows.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ClientMetadata {
    pub redirect_uris: Option<Vec<String>>,
    pub token_endpoint_auth_method: Option<String>,
    pub grant_types: Option<Vec<String>>,
    pub response_types: Option<Vec<String>>,
    pub client_name: Option<String>,
}

/// A new registration and, for confidential clients, the secret (shown only this once).
#[derive(Debug, Clone)]
pub struct RegisteredClient {
    pub client: Client,
    pub client_secret: Option<String>,
}

fn meta_err(m: impl Into<String>) -> OAuthError {
    OAuthError::InvalidClientMetadata(m.into())
}

/// Client metadata that passed the registration rules.
pub(super) struct CheckedMetadata {
    pub client_name: String,
    pub redirect_uris: Vec<String>,
    pub token_endpoint_auth_method: String,
    pub grant_types: Vec<String>,
}

/// Registers a client. URIs off the allow-list are left out; the registration fails only
/// when none is left (or more than ten were sent).
pub fn register_client(app: &App, meta: ClientMetadata) -> Result<RegisteredClient, OAuthError> {
    let checked = check_metadata(&app.config.redirect, meta, "client_secret_post")?;
    let method = checked.token_endpoint_auth_method;
    let client_secret = (method == "client_secret_post").then(|| new_secret("kb_cs_"));
    let client = Client {
        client_id: format!("kb_client_{}", uuid::Uuid::new_v4().simple()),
        client_name: checked.client_name,
        redirect_uris: checked.redirect_uris,
        token_endpoint_auth_method: method,
        grant_types: checked.grant_types,
        secret_sha256: client_secret
            .as_deref()
            .map(|s| hex::encode(hash_secret(s))),
        created_at: app.clock.now(),
        metadata_fresh_until: None,
    };
    app.store
        .write(|tx| tx.put(OAUTH_CLIENTS, client.client_id.as_bytes(), &client))?;
    Ok(RegisteredClient {
        client,
        client_secret,
    })
}

/// The registration rules: redirect URIs on the allow-list (others left out; none left is an
/// error), a supported authentication method, grant and response types, a sane name.
pub(super) fn check_metadata(
    allow: &crate::config::RedirectAllowList,
    meta: ClientMetadata,
    default_method: &str,
) -> Result<CheckedMetadata, OAuthError> {
    let uris = meta.redirect_uris.unwrap_or_default();
    if uris.is_empty() {
        return Err(OAuthError::InvalidRedirectUri(
            "redirect_uris is required".into(),
        ));
    }
    if uris.len() > MAX_REDIRECT_URIS {
        return Err(OAuthError::InvalidRedirectUri(format!(
            "at most {MAX_REDIRECT_URIS} redirect URIs per client"
        )));
    }
    let mut kept: Vec<String> = Vec::new();
    for u in uris {
        if allowed_at_registration(allow, &u) && !kept.contains(&u) {
            kept.push(u);
        }
    }
    if kept.is_empty() {
        return Err(OAuthError::InvalidRedirectUri(
            "none of the redirect URIs is on this server's allow-list".into(),
        ));
    }
    let method = meta
        .token_endpoint_auth_method
        .unwrap_or_else(|| default_method.to_owned());
    if method != "none" && method != "client_secret_post" {
        return Err(meta_err(format!(
            "token_endpoint_auth_method `{method}` is not supported; use `none` or `client_secret_post`"
        )));
    }
    let grant_types = meta
        .grant_types
        .unwrap_or_else(|| GRANT_TYPES.iter().map(|s| (*s).to_owned()).collect());
    if let Some(g) = grant_types
        .iter()
        .find(|g| !GRANT_TYPES.contains(&g.as_str()))
    {
        return Err(meta_err(format!("grant type `{g}` is not supported")));
    }
    if !grant_types.iter().any(|g| g == "authorization_code") {
        return Err(meta_err("grant_types must include authorization_code"));
    }
    if let Some(r) = meta
        .response_types
        .as_ref()
        .and_then(|rs| rs.iter().find(|r| *r != "code"))
    {
        return Err(meta_err(format!("response type `{r}` is not supported")));
    }
    let client_name = match meta.client_name {
        Some(n) if n.chars().count() > 200 || n.chars().any(char::is_control) => {
            return Err(meta_err(
                "client_name must be at most 200 characters without control characters",
            ));
        }
        Some(n) if !n.trim().is_empty() => n.trim().to_owned(),
        _ => "Unnamed client".to_owned(),
    };
    Ok(CheckedMetadata {
        client_name,
        redirect_uris: kept,
        token_endpoint_auth_method: method,
        grant_types,
    })
}

pub fn get_client(app: &App, client_id: &str) -> Result<Option<Client>, OAuthError> {
    if client_id.is_empty() || client_id.len() > MAX_CLIENT_ID_LEN {
        return Ok(None);
    }
    Ok(app
        .store
        .read(|tx| tx.get(OAUTH_CLIENTS, client_id.as_bytes()))?)
}

/// Authenticates a client at `/token` and `/revoke`: public clients by id, confidential ones
/// by id and `client_secret` (constant-time on the hashes).
pub fn authenticate_client(
    app: &App,
    client_id: &str,
    client_secret: Option<&str>,
) -> Result<Client, OAuthError> {
    let invalid = || OAuthError::InvalidClient("client authentication failed".into());
    let client = get_client(app, client_id)?.ok_or_else(invalid)?;
    if let Some(expected) = &client.secret_sha256 {
        let given = client_secret.ok_or_else(invalid)?;
        let given = hex::encode(hash_secret(given));
        if !bool::from(given.as_bytes().ct_eq(expected.as_bytes())) {
            return Err(invalid());
        }
    }
    Ok(client)
}
