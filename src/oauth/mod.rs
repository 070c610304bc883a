//! The OAuth 2.1 authorization server that protects the connector: client registration with
//! the redirect allow-list, authorization codes with PKCE, grants, access and refresh tokens,
//! revocation, and the one bearer check the connector runs on every call.
//!
//! Library interface other areas use:
//! - [`check_bearer`]: bearer token → [`AccessContext`] (person, organisation, grant, scopes),
//!   re-checking membership, right to connect, second factor and terms on every call.
//! - [`www_authenticate`]: the header value of the connector's 401.
//!   Personal access tokens (`kb_pat_`, [`pats`]) take their own branch of the same check.
//! - [`issue_grant`] / [`revoke_grant`]: the same functions the `/token` path and the portal
//!   use; tests of other areas mint grants with them instead of going through HTTP.
//!
//! Every code, token and client secret is random 256-bit base64url with a readable prefix and
//! is stored only as its SHA-256.

pub mod authorize;
pub mod bearer_cache;
pub mod cimd;
mod clients;
mod credentials;
mod grants;
pub mod pats;
pub mod redirect;
mod retention;
pub mod routes;

use crate::config::CONNECTOR_PATH;
use crate::identity::AccessDenied;
use crate::store::StoreError;

pub use clients::{
    Client, ClientMetadata, RegisteredClient, authenticate_client, get_client, register_client,
};
pub use credentials::{
    Revoked, change_password, issue_reset, revoke_all, revoke_person_credentials_in, set_password,
    use_reset,
};
pub use grants::{
    AccessContext, CodeExchange, Connection, Grant, NewCode, NewGrant, TokenPair, check_bearer,
    connections_visible_to, create_code, exchange_code, grant_last_used, grants_of_org,
    issue_grant, refresh, remove_member, revoke_connection, revoke_grant, revoke_token,
};
pub use retention::{CLIENT_IDLE, PurgedClients, purge_clients};

/// Every scope the connector knows, in the order shown on the consent page.
pub const SCOPES: [&str; 2] = ["kennisbank", "feature_requests"];

/// Authorization codes live 10 minutes (specification).
pub const CODE_LIFETIME_SECS: i64 = 10 * 60;
/// Access tokens live 1 hour (specification).
pub const ACCESS_LIFETIME_SECS: i64 = 60 * 60;
/// Refresh tokens live 30 days (specification).
pub const REFRESH_LIFETIME_SECS: i64 = 30 * 24 * 60 * 60;

/// Why a bearer token does not authorise a connector call. [`BearerError::reason`] is the
/// text of the 401.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BearerError {
    #[error("invalid token")]
    Invalid,
    #[error("token expired")]
    Expired,
    #[error("token revoked")]
    Revoked,
    #[error("{0}")]
    Denied(AccessDenied),
}

impl BearerError {
    /// The reason named in the 401's `error_description`.
    pub fn reason(&self) -> String {
        self.to_string()
    }
}

/// Errors of the authorization server, named after the RFC 6749 / 7591 / 8707 error codes
/// they become on the wire (see `http::error`).
#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    #[error("{0}")]
    InvalidRequest(String),
    #[error("{0}")]
    InvalidClient(String),
    #[error("{0}")]
    InvalidGrant(String),
    #[error("{0}")]
    UnsupportedGrantType(String),
    #[error("{0}")]
    UnsupportedResponseType(String),
    #[error("{0}")]
    InvalidScope(String),
    #[error("{0}")]
    InvalidTarget(String),
    #[error("{0}")]
    InvalidRedirectUri(String),
    #[error("{0}")]
    InvalidClientMetadata(String),
    #[error("the person denied access")]
    AccessDenied,
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl OAuthError {
    /// The RFC error code.
    pub fn code(&self) -> &'static str {
        match self {
            OAuthError::InvalidRequest(_) => "invalid_request",
            OAuthError::InvalidClient(_) => "invalid_client",
            OAuthError::InvalidGrant(_) => "invalid_grant",
            OAuthError::UnsupportedGrantType(_) => "unsupported_grant_type",
            OAuthError::UnsupportedResponseType(_) => "unsupported_response_type",
            OAuthError::InvalidScope(_) => "invalid_scope",
            OAuthError::InvalidTarget(_) => "invalid_target",
            OAuthError::InvalidRedirectUri(_) => "invalid_redirect_uri",
            OAuthError::InvalidClientMetadata(_) => "invalid_client_metadata",
            OAuthError::AccessDenied => "access_denied",
            OAuthError::Store(_) => "server_error",
        }
    }
}

pub use crate::identity::{hash_secret, new_secret};

/// How often a grant's or token's last-use time is written at most: the bearer check is a hot
/// path, and "last used" is shown to people, for whom a minute's precision is plenty.
const LAST_USE_EVERY: jiff::SignedDuration = jiff::SignedDuration::from_secs(60);

/// Queues the last-use time of grant or token `id` into `table` through the batch writer, at
/// most once a minute per id (`stamped` remembers when it last did).
pub(crate) fn stamp_last_use(
    app: &crate::app::App,
    stamped: &dashmap::DashMap<u64, jiff::Timestamp>,
    table: crate::store::Table,
    org_id: u64,
    id: u64,
    now: jiff::Timestamp,
) {
    // Not for an organisation being removed: the stamp would outlive its grant or token.
    let Some(_pass) = app.org_gate.enter(org_id) else {
        return;
    };
    let due = match stamped.get(&id) {
        Some(t) => now.duration_since(*t) >= LAST_USE_EVERY,
        None => true,
    };
    if due {
        stamped.insert(id, now);
        app.batch
            .put(table, crate::store::key::id(id).to_vec(), &now);
    }
}

/// Splits a space-separated scope string into the known scopes, in [`SCOPES`] order, dropping
/// unknown ones (clients ask for things like `offline_access`).
pub fn known_scopes(requested: &str) -> Vec<String> {
    let asked: Vec<&str> = requested.split_ascii_whitespace().collect();
    SCOPES
        .iter()
        .filter(|s| asked.contains(s))
        .map(|s| (*s).to_owned())
        .collect()
}

/// The connector URL a `resource` parameter names, if it names it: a trailing slash is the
/// same URL; anything else is `invalid_target`. An omitted resource means the connector.
pub fn check_resource(connector_url: &str, resource: Option<&str>) -> Result<String, OAuthError> {
    match resource {
        None | Some("") => Ok(connector_url.to_owned()),
        Some(r) if r.trim_end_matches('/') == connector_url => Ok(connector_url.to_owned()),
        Some(r) => Err(OAuthError::InvalidTarget(format!(
            "this server issues tokens only for {connector_url}, not for `{r}`"
        ))),
    }
}

/// The path of the connector's protected resource metadata (RFC 9728 §3.1: the well-known
/// prefix in front of the resource's path).
pub fn resource_metadata_path() -> String {
    format!("/.well-known/oauth-protected-resource{CONNECTOR_PATH}")
}

/// The `WWW-Authenticate` value of a connector 401/403: names the scopes and the protected
/// resource metadata, and, when a token was presented, the error code and why it was refused
/// (RFC 6750 §3).
pub fn www_authenticate(public_url: &str, error: Option<(&str, &str)>) -> String {
    let metadata = format!("{public_url}{}", resource_metadata_path());
    let scope = SCOPES.join(" ");
    match error {
        Some((code, description)) => format!(
            "Bearer error=\"{code}\", error_description=\"{description}\", scope=\"{scope}\", resource_metadata=\"{metadata}\""
        ),
        None => format!("Bearer scope=\"{scope}\", resource_metadata=\"{metadata}\""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_prefixed_256_bit_and_hash_stably() {
        let a = new_secret("kb_at_");
        let b = new_secret("kb_at_");
        assert!(a.starts_with("kb_at_"));
        assert_eq!(a.len(), "kb_at_".len() + 43);
        assert_ne!(a, b);
        assert_eq!(hash_secret(&a), hash_secret(&a));
        assert_ne!(hash_secret(&a), hash_secret(&b));
    }

    #[test]
    fn unknown_scopes_are_dropped_and_order_is_fixed() {
        assert_eq!(
            known_scopes("offline_access feature_requests kennisbank"),
            vec!["kennisbank", "feature_requests"]
        );
        assert!(known_scopes("offline_access").is_empty());
    }

    #[test]
    fn resource_trailing_slash_is_the_same_url() {
        let c = "https://kb.example/mcp/kennisbank";
        assert_eq!(check_resource(c, None).unwrap(), c);
        assert_eq!(check_resource(c, Some(&format!("{c}/"))).unwrap(), c);
        assert!(matches!(
            check_resource(c, Some("https://kb.example/other")),
            Err(OAuthError::InvalidTarget(_))
        ));
    }

    #[test]
    fn bearer_reasons_are_the_designed_texts() {
        assert_eq!(BearerError::Invalid.reason(), "invalid token");
        assert_eq!(BearerError::Expired.reason(), "token expired");
        assert_eq!(BearerError::Revoked.reason(), "token revoked");
        assert_eq!(
            BearerError::Denied(AccessDenied::TermsNotAccepted).reason(),
            "terms not accepted"
        );
    }
}
