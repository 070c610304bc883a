//! HTTP endpoints of the authorization server: discovery, `/register`, `/token`, `/revoke`,
//! and the parameter checks of `/authorize` (whose pages live in the portal). Handlers parse,
//! call the domain functions of this module's parent, and map errors in `http::error`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use tower_http::cors::{Any, CorsLayer};

use super::{
    Client, ClientMetadata, CodeExchange, OAuthError, SCOPES, TokenPair, authenticate_client,
    check_resource, exchange_code, get_client, known_scopes, redirect::matches_registered, refresh,
    register_client, revoke_token,
};
use crate::app::App;
use crate::http::PeerAddr;
use crate::http::error::{oauth_error, too_many_requests};
use crate::ratelimit::Limiter;

/// Largest form or JSON body these endpoints read.
const MAX_BODY: usize = 64 * 1024;

/// The routes of the authorization server (without `/authorize`, which the portal serves),
/// with CORS so browser-based clients can use them.
pub fn router() -> Router<Arc<App>> {
    let cors = CorsLayer::new()
        .allow_origin(Any)
        .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
        .allow_headers([
            header::CONTENT_TYPE,
            header::AUTHORIZATION,
            header::HeaderName::from_static("mcp-protocol-version"),
        ])
        .expose_headers([header::WWW_AUTHENTICATE]);
    Router::new()
        .route(
            "/.well-known/oauth-authorization-server",
            get(authorization_server_metadata),
        )
        .route(
            &format!(
                "/.well-known/oauth-protected-resource{}",
                crate::config::CONNECTOR_PATH
            ),
            get(protected_resource_metadata),
        )
        .route(
            "/.well-known/oauth-protected-resource",
            get(protected_resource_metadata),
        )
        .route("/register", post(register))
        .route("/token", post(token))
        .route("/revoke", post(revoke))
        .layer(cors)
        .layer(tower_http::limit::RequestBodyLimitLayer::new(MAX_BODY))
}

/// The caller's address for rate limits, honouring trusted proxies.
pub fn caller_ip(app: &App, peer: &PeerAddr, headers: &HeaderMap) -> IpAddr {
    crate::http::client_ip(peer.0.ip(), headers, &app.config.trusted_proxies)
}

/// Counts a request against `limiter`; the 429 response when over.
pub fn rate_limited(limiter: &Limiter<IpAddr>, ip: IpAddr) -> Option<Response> {
    limiter.check(&ip).err().map(too_many_requests)
}

async fn authorization_server_metadata(State(app): State<Arc<App>>) -> Response {
    let base = &app.public_url;
    Json(json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/authorize"),
        "token_endpoint": format!("{base}/token"),
        "registration_endpoint": format!("{base}/register"),
        "revocation_endpoint": format!("{base}/revoke"),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none", "client_secret_post"],
        "revocation_endpoint_auth_methods_supported": ["none", "client_secret_post"],
        "scopes_supported": SCOPES,
        "authorization_response_iss_parameter_supported": true,
    }))
    .into_response()
}

async fn protected_resource_metadata(State(app): State<Arc<App>>) -> Response {
    Json(json!({
        "resource": app.connector_url(),
        "authorization_servers": [app.public_url],
        "scopes_supported": SCOPES,
        "bearer_methods_supported": ["header"],
        "resource_name": "kennis knowledge base",
    }))
    .into_response()
}

async fn register(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<PeerAddr>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if let Some(r) = rate_limited(&app.oauth.register_limit, caller_ip(&app, &peer, &headers)) {
        return r;
    }
    let meta: ClientMetadata = match serde_json::from_slice(&body) {
        Ok(m) => m,
        Err(e) => {
            return oauth_error(&OAuthError::InvalidClientMetadata(format!(
                "the body is not client metadata JSON: {e}"
            )));
        }
    };
    match app.blocking(move |app| register_client(app, meta)).await {
        Ok(reg) => {
            let c = &reg.client;
            let mut body = json!({
                "client_id": c.client_id,
                "client_id_issued_at": c.created_at.as_second(),
                "client_name": c.client_name,
                "redirect_uris": c.redirect_uris,
                "token_endpoint_auth_method": c.token_endpoint_auth_method,
                "grant_types": c.grant_types,
                "response_types": ["code"],
                "scope": SCOPES.join(" "),
            });
            if let Some(secret) = reg.client_secret {
                body["client_secret"] = json!(secret);
                body["client_secret_expires_at"] = json!(0);
            }
            (
                StatusCode::CREATED,
                [(header::CACHE_CONTROL, "no-store")],
                Json(body),
            )
                .into_response()
        }
        Err(e) => oauth_error(&e),
    }
}

fn parse_form(body: &[u8]) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for (k, v) in form_urlencoded::parse(body) {
        // A repeated parameter is ambiguous; RFC 6749 §3.1 says such requests are invalid.
        if out.insert(k.clone().into_owned(), v.into_owned()).is_some() {
            out.insert(format!("\u{0}dup:{k}"), String::new());
        }
    }
    out
}

fn token_response(pair: TokenPair) -> Response {
    (
        [
            (header::CACHE_CONTROL, "no-store"),
            (header::PRAGMA, "no-cache"),
        ],
        Json(json!({
            "access_token": pair.access_token,
            "token_type": "Bearer",
            "expires_in": pair.expires_in,
            "refresh_token": pair.refresh_token,
            "scope": pair.scopes.join(" "),
        })),
    )
        .into_response()
}

async fn token(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<PeerAddr>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if let Some(r) = rate_limited(&app.oauth.token_limit, caller_ip(&app, &peer, &headers)) {
        return r;
    }
    let form = parse_form(&body);
    match app.blocking(move |app| token_request(app, &form)).await {
        Ok(pair) => token_response(pair),
        Err(e) => oauth_error(&e),
    }
}

fn token_request(app: &App, form: &HashMap<String, String>) -> Result<TokenPair, OAuthError> {
    if let Some(k) = form.keys().find(|k| k.starts_with('\u{0}')) {
        return Err(OAuthError::InvalidRequest(format!(
            "parameter `{}` was sent more than once",
            &k[5..]
        )));
    }
    let get = |k: &str| form.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let need =
        |k: &str| get(k).ok_or_else(|| OAuthError::InvalidRequest(format!("`{k}` is required")));
    let client_id = need("client_id")?;
    let client = authenticate_client(app, client_id, get("client_secret"))?;
    match need("grant_type")? {
        "authorization_code" => exchange_code(
            app,
            CodeExchange {
                code: need("code")?,
                client_id: &client.client_id,
                redirect_uri: need("redirect_uri")?,
                code_verifier: need("code_verifier")?,
                resource: get("resource"),
            },
        ),
        "refresh_token" => refresh(
            app,
            &client.client_id,
            need("refresh_token")?,
            get("scope"),
            get("resource"),
        ),
        other => Err(OAuthError::UnsupportedGrantType(format!(
            "grant type `{other}` is not supported"
        ))),
    }
}

async fn revoke(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<PeerAddr>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if let Some(r) = rate_limited(&app.oauth.revoke_limit, caller_ip(&app, &peer, &headers)) {
        return r;
    }
    let form = parse_form(&body);
    let Some(token) = form.get("token").cloned().filter(|t| !t.is_empty()) else {
        return oauth_error(&OAuthError::InvalidRequest("`token` is required".into()));
    };
    // Revocation needs no client authentication here: presenting the token proves enough
    // to give it up, and refusing would leave a leaked token alive.
    match app.blocking(move |app| revoke_token(app, &token)).await {
        Ok(()) => (StatusCode::OK, [(header::CACHE_CONTROL, "no-store")]).into_response(),
        Err(e) => oauth_error(&e),
    }
}

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
        .map_err(|_| AuthorizeProblem::Page("internal error".into()))?
        .ok_or_else(|| AuthorizeProblem::Page("unknown client; register it again".into()))?;
    let redirect_uri = match get("redirect_uri") {
        Some(u) if matches_registered(&client.redirect_uris, u) => u.to_owned(),
        Some(_) => {
            return Err(AuthorizeProblem::Page(
                "the redirect URI is not one this client registered".into(),
            ));
        }
        None if client.redirect_uris.len() == 1 => client.redirect_uris[0].clone(),
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
    app: &App,
    redirect_uri: &str,
    state: Option<&str>,
    e: &OAuthError,
) -> String {
    let description = e.to_string();
    let mut params = vec![("error", e.code()), ("error_description", &description)];
    if let Some(s) = state {
        params.push(("state", s));
    }
    params.push(("iss", &app.public_url));
    redirect_with(redirect_uri, &params)
}

/// A `Location` header value; redirect URIs were checked, so they are valid header text.
pub fn location(uri: &str) -> HeaderValue {
    HeaderValue::from_str(uri).unwrap_or_else(|_| HeaderValue::from_static("/"))
}
