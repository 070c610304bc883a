//! The authorization request of `/authorize` and the redirects that answer it: checked in the
//! order RFC 6749 §4.1.2.1 asks, used by the consent page (portal) on both its GET and POST.
//! Nothing about a pending authorization is stored; the parameters are checked again on submit.

use std::collections::HashMap;

use super::redirect::matches_registered;
use super::{Client, OAuthError, SCOPES, check_resource, cimd, get_client, known_scopes};
use crate::app::App;

/// A checked authorization request.
#[derive(Debug, Clone)]
pub struct AuthRequest {
    pub client: Client,
    pub redirect_uri: String,
    pub state: Option<String>,
    pub code_challenge: String,
    pub scopes: Vec<String>,
    pub resource: String,
}

/// Why an authorization request was refused.
#[derive(Debug)]
pub enum AuthorizeProblem {
    /// Client or redirect URI cannot be trusted: show an error page, never redirect.
    Page(String),
    /// Tell the client, through its (checked) redirect URI.
    Redirect {
        redirect_uri: String,
        state: Option<String>,
        error: OAuthError,
    },
    /// The server failed (its store, say): an error page with a 500, the detail only in the
    /// log ([`AuthorizeProblem::internal`] writes it).
    Internal,
}

impl AuthorizeProblem {
    /// A failure while answering: logged here, with what was being done; never shown.
    pub fn internal(doing: &str, e: &dyn std::fmt::Display) -> Self {
        tracing::error!(error = %e, "{doing}");
        AuthorizeProblem::Internal
    }
}

/// Before [`validate_authorize`]: when the `client_id` is the URL of a Client ID Metadata
/// Document, fetch it (or use the fresh stored copy), so the client is known. A document that
/// cannot be used is a page error: the client cannot be trusted with a redirect.
pub async fn load_client(
    app: &std::sync::Arc<App>,
    params: &HashMap<String, String>,
) -> Result<(), AuthorizeProblem> {
    let Some(client_id) = params.get("client_id").filter(|c| cimd::is_metadata_url(c)) else {
        return Ok(());
    };
    match cimd::ensure_fresh(app, client_id).await {
        Ok(_) => Ok(()),
        Err(cimd::CimdError::Store(e)) => Err(AuthorizeProblem::internal(
            "storing a metadata-document client",
            &e,
        )),
        Err(e) => {
            tracing::info!(error = %e, "metadata document refused");
            Err(AuthorizeProblem::Page(e.page_message()))
        }
    }
}

/// The parameters of `/authorize`, checked in the order RFC 6749 §4.1.2.1 asks: client and
/// redirect URI first (errors shown to the person), then the rest (errors sent to the client).
pub fn validate_authorize(
    app: &App,
    params: &HashMap<String, String>,
) -> Result<AuthRequest, AuthorizeProblem> {
    let get = |k: &str| params.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let client_id = get("client_id")
        .ok_or_else(|| AuthorizeProblem::Page("the request names no client (client_id)".into()))?;
    let client = get_client(app, client_id)
        .map_err(|e| AuthorizeProblem::internal("reading the client of an authorization", &e))?
        .ok_or_else(|| AuthorizeProblem::Page("unknown client; register it again".into()))?;
    let redirect_uri = match get("redirect_uri") {
        Some(u) if matches_registered(&client.redirect_uris, u) => u.to_owned(),
        Some(_) => {
            return Err(AuthorizeProblem::Page(
                "the redirect URI is not one this client registered".into(),
            ));
        }
        None if client.redirect_uris.len() == 1 => client.redirect_uris.concat(),
        None => {
            return Err(AuthorizeProblem::Page(
                "the request names no redirect URI (redirect_uri)".into(),
            ));
        }
    };
    let state = get("state").map(str::to_owned);
    let fail = |error: OAuthError| AuthorizeProblem::Redirect {
        redirect_uri: redirect_uri.clone(),
        state: state.clone(),
        error,
    };
    if state.as_ref().is_some_and(|s| s.len() > 1000) {
        return Err(fail(OAuthError::InvalidRequest("state is too long".into())));
    }
    if get("response_type") != Some("code") {
        return Err(fail(OAuthError::UnsupportedResponseType(
            "response_type must be `code`".into(),
        )));
    }
    let challenge = get("code_challenge").ok_or_else(|| {
        fail(OAuthError::InvalidRequest(
            "PKCE is required: send code_challenge with code_challenge_method=S256".into(),
        ))
    })?;
    if get("code_challenge_method") != Some("S256") {
        return Err(fail(OAuthError::InvalidRequest(
            "code_challenge_method must be S256".into(),
        )));
    }
    if challenge.len() != 43
        || !challenge
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(fail(OAuthError::InvalidRequest(
            "code_challenge is not a base64url SHA-256".into(),
        )));
    }
    let scopes = match get("scope") {
        None => SCOPES.iter().map(|s| (*s).to_owned()).collect(),
        Some(s) => known_scopes(s),
    };
    if scopes.is_empty() {
        return Err(fail(OAuthError::InvalidScope(format!(
            "none of the requested scopes is supported; supported: {}",
            SCOPES.join(" ")
        ))));
    }
    let resource = check_resource(&app.connector_url(), get("resource")).map_err(fail)?;
    Ok(AuthRequest {
        client,
        redirect_uri,
        state,
        code_challenge: challenge.to_owned(),
        scopes,
        resource,
    })
}

/// `redirect_uri` with `params` appended to its query.
pub fn redirect_with(redirect_uri: &str, params: &[(&str, &str)]) -> String {
    let mut ser = form_urlencoded::Serializer::new(String::new());
    for (k, v) in params {
        ser.append_pair(k, v);
    }
    let sep = if redirect_uri.contains('?') { '&' } else { '?' };
    format!("{redirect_uri}{sep}{}", ser.finish())
}

/// The redirect that carries an authorization error back to the client (RFC 6749, RFC 9207).
pub fn error_redirect(
    issuer: &str,
    redirect_uri: &str,
    state: Option<&str>,
    e: &OAuthError,
) -> String {
    let description = e.to_string();
    let mut params = vec![("error", e.code()), ("error_description", &description)];
    if let Some(s) = state {
        params.push(("state", s));
    }
    params.push(("iss", issuer));
    redirect_with(redirect_uri, &params)
}
